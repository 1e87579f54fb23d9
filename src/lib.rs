//! tollgate: a local job runtime whose concurrency protocols are pure, checked functions.
//!
//! Layout (see `spec/` for the normative text):
//! - [`protocol`]: the sans-IO core. Every decision of the slot, admission and execution protocols
//!   is a function from state values to state values; no file, clock, thread or `/proc` read.
//! - the shell around it: [`home`] (state directory and config), [`queue`] (the durable queue
//!   under `queue.lock`), [`process`] (identities and liveness from `/proc`, detached spawn),
//!   [`runner`] (the detached runner of one turn), [`reconcile`], and [`cli`].
//! - `model/` (feature `model-check`): stateright models that call the same core functions.

pub mod cli;
pub mod exec;
pub mod protocol;
pub mod sync;

#[cfg(feature = "model-check")]
#[path = "../model/mod.rs"]
pub mod model;
