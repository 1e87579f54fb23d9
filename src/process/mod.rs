//! Processes as the slot protocol sees them: identities read from `/proc`, liveness answered from
//! `/proc`, and the detached spawn of a runner.

pub mod containment;
mod identity;
mod spawn;

pub use identity::{identity_of, self_identity, ProcLiveness};
pub use spawn::{
    spawn_detached_runner, DetachedSpawner, RunnerSpawner, ScrubbedSpawner, SpawnError,
};
