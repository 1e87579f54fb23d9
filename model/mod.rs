//! stateright models over the production core (`src/protocol/`). Compiled only with the
//! `model-check` feature. Each model calls the same functions production runs; a change of a core
//! signature breaks this build, which is the drift guard.

pub mod slots;
