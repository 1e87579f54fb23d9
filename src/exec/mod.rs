//! The execution shell: packs, running them (`run_many`), killing item trees, worktrees and the
//! sweep list. Every protocol decision is made by [`crate::protocol::execution`]; this module does
//! the IO around it.

pub mod kill;
pub mod pack;
pub mod run_many;
pub mod settlement;
pub mod sweep;
pub mod worktree;

pub use kill::{choose_containment, Containment, KillTarget, Killer, ProcessKiller};
pub use run_many::{
    run_many, Event, EventSink, JsonLines, RunError, RunOptions, RunReport, SettledRow,
};
