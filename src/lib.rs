//! tollgate: a local job runtime whose concurrency protocols are pure, checked functions.
//!
//! Layout (see `spec/` for the normative text):
//! - [`protocol`]: the sans-IO core. Every decision of the slot protocol is a function from state
//!   values to state values; no file, clock, thread or `/proc` read.
//! - the shell around it: [`home`] and [`config`] (state directory), [`queue`] (the store of the
//!   queue: `tollgate.db`, PostgreSQL, or in memory; an old `queue.json` is only imported),
//!   [`tasks`] (task and turn records), [`process`] (identities and liveness from `/proc`,
//!   detached spawn, works), [`driver`] (performs the effects of the core's steps: spawn and
//!   two-publish handoff, kills), [`dispatch`] (its error), [`submit`], [`runner`], [`reconcile`], [`cancel`], [`status`], and
//!   [`cli`].
//! - one module per file or OS primitive the shell uses everywhere: [`fsutil`] (atomic publish,
//!   bounded strict reads), [`jsonl`] (JSON-lines logs), [`flock`] (exclusive locks with a
//!   bounded wait), [`clock`] (the millisecond wall clock), `process::procfs` (`/proc` parsing).
//! - `model/` (feature `model-check`): stateright models that call the same core functions.

/// A command's arguments and environment as bytes (the core's, where the records are).
pub use tollgate_core::argv;
pub mod cancel;
pub mod cli;
pub mod clock;
pub mod config;
pub mod deps;
pub mod dispatch;
pub mod driver;
pub mod exec;
#[cfg(feature = "failpoints")]
pub mod failgate;
pub mod fleet;
pub mod flock;
pub mod fsutil;
pub mod gate;
pub mod group_commit;
pub mod home;
pub mod jsonl;
pub mod process;
pub mod queue;
pub mod reconcile;
pub mod runner;
pub mod runtime;
pub mod schedule;
pub mod section;
pub mod serve;
pub mod status;
pub mod submit;
pub mod sync;
pub mod tasks;
pub mod turn_state;
pub mod watch;

/// The sans-IO core (crate `tollgate-core`, in `core/`), under the name the shell has always used.
pub use tollgate_core as protocol;

/// The stateright models (crate `tollgate-model`, in `model/`): they depend on the core alone.
#[cfg(feature = "model-check")]
pub use tollgate_model as model;
