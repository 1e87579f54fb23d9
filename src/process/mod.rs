//! Processes as the slot protocol sees them: identities read from `/proc`, liveness answered from
//! `/proc`, the detached spawn of a runner, and a turn's work (found and killed by its marker).
//! Every read of `/proc/<pid>/…` goes through [`procfs`].

pub mod containment;
pub mod exec_search;
mod identity;
pub mod pidns;
pub mod procfs;
pub mod settle;
pub mod signals;
mod spawn;
pub mod wakers;
pub mod work;

pub(crate) use identity::identity_including_zombie;
pub use identity::{identity_of, self_identity, ProcLiveness};
pub use spawn::{
    runner_for_token_alive, spawn_detached_runner, DetachedSpawner, RunnerSpawner, ScrubbedSpawner,
    SpawnError,
};

/// For a forked child before exec: die with the process that forked it. `PR_SET_PDEATHSIG` only
/// covers a parent death *after* the call, and the parent can die between the fork and it; the
/// child would then run its command as an orphan no record names yet (its environment, and so its
/// work's marker, changes only at exec), and a repair that found the runner dead could start the
/// turn again beside it. So after arming the signal the child checks that its parent is still
/// `parent`, and refuses to exec otherwise. Allocates nothing: safe between fork and exec.
pub fn die_with_parent(parent: nix::unistd::Pid) -> std::io::Result<()> {
    nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
        .map_err(std::io::Error::from)?;
    if nix::unistd::getppid() != parent {
        return Err(std::io::Error::other(
            "the parent died before the command started",
        ));
    }
    Ok(())
}
