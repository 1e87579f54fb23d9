//! The section right after a runner spawned its command: record the command's leader on the work
//! (the process group to kill if the runner dies), on the row's part of the queue.

use crate::section::{Commit, Draft, Halt, Section, Step, View};
use crate::slots::steps::{row_reads, work_started, Reads};
use crate::slots::{Liveness, ProcessIdentity, QueueState, TurnKey, WorkId};

#[derive(Clone, Copy, Debug)]
pub struct WorkStarted<'a> {
    pub key: &'a TurnKey,
    pub work: WorkId,
    pub leader: ProcessIdentity,
}

impl Section for WorkStarted<'_> {
    type Effect = ();

    fn commit(&self) -> Commit {
        Commit::Internal
    }

    fn reads(&self) -> Reads {
        Reads::Part(row_reads(self.key))
    }

    fn step<L: Liveness>(
        &self,
        part: &mut QueueState,
        view: &View<'_, L>,
    ) -> Result<Step<()>, Halt> {
        work_started(part, self.key, self.work, self.leader)?;
        Ok(Draft::new(view.records).finish(()))
    }
}
