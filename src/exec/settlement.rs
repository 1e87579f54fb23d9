//! The run's handle on the execution core: the pure [`Execution`] behind [`crate::sync::Mutex`].
//!
//! Every settlement of a run goes through here (the run loop of [`super::run_many`] calls it; the
//! loom tests race it from several threads: a worker's result, the deadline ticker, the ceiling,
//! an interrupt). Workers never hold a `Settlement`: they only own their item and a channel sender,
//! so an abandoned worker has no path to run state.

use crate::protocol::execution::{
    Action, Counts, EndReason, ExecError, Execution, ExitStatus, Row,
};
use crate::sync::{lock, Mutex};

#[derive(Debug)]
pub struct Settlement {
    core: Mutex<Execution>,
}

impl Settlement {
    pub fn new(core: Execution) -> Self {
        Settlement {
            core: Mutex::new(core),
        }
    }

    pub fn take_next(&self, now_millis: u64) -> Option<usize> {
        lock(&self.core).take_next(now_millis)
    }

    pub fn worker_result(
        &self,
        index: usize,
        now_millis: u64,
        exit: ExitStatus,
    ) -> Result<Vec<Action>, ExecError> {
        lock(&self.core).on_worker_result(index, now_millis, exit)
    }

    pub fn tick(&self, now_millis: u64) -> Vec<Action> {
        lock(&self.core).on_tick(now_millis)
    }

    pub fn interrupt(&self, now_millis: u64) -> Vec<Action> {
        lock(&self.core).on_interrupt(now_millis)
    }

    pub fn worktree_removed(&self, index: usize) -> Result<(), ExecError> {
        lock(&self.core).on_worktree_removed(index)
    }

    pub fn worktree_kept(&self, index: usize) -> Result<(), ExecError> {
        lock(&self.core).on_worktree_kept(index)
    }

    pub fn poll_rows(&self) -> Vec<Row> {
        lock(&self.core).poll_rows()
    }

    pub fn next_deadline_millis(&self) -> Option<u64> {
        lock(&self.core).next_deadline_millis()
    }

    pub fn end_reason(&self) -> Option<EndReason> {
        lock(&self.core).end_reason()
    }

    pub fn counts(&self) -> Counts {
        lock(&self.core).counts()
    }

    /// A copy of the core, for assertions and reports.
    pub fn snapshot(&self) -> Execution {
        lock(&self.core).clone()
    }
}
