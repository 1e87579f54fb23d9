//! The sans-IO core: every protocol decision as a function over state values.
//!
//! Nothing in here reads a file, a clock, `/proc`, or spawns anything. Inputs that come from the
//! world (a fresh token, "now", whether a process is alive) arrive as arguments, so the production
//! shell, the stateright models and the property tests all drive exactly this code.

pub mod admission;
pub mod argv;
pub mod execution;
pub mod fleet;
pub mod records;
pub mod scopes;
pub mod section;
pub mod slots;
pub mod turns;
