//! Processes as the slot protocol sees them: identities read from `/proc`, liveness answered from
//! `/proc`, the detached spawn of a runner, and a turn's work (found and killed by its marker).
//! Every read of `/proc/<pid>/…` goes through [`procfs`].

pub mod containment;
mod identity;
pub mod procfs;
mod spawn;
pub mod work;

pub(crate) use identity::identity_including_zombie;
pub use identity::{identity_of, self_identity, ProcLiveness};
pub use spawn::{
    spawn_detached_runner, DetachedSpawner, RunnerSpawner, ScrubbedSpawner, SpawnError,
};
