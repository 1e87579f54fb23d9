//! The sections of a handoff (spec/slots.md, "Handoff"), each on the row's part of the queue
//! ([`row_reads`]): the first publish binds the spawned child (on a fleet taking its lease in the
//! same transaction, `F4`), the second records it as the runner and clears the token, and a failed
//! spawn gives the unbound reservation back. Each is fenced by the token: a row that moved on is
//! left alone and the child's own take-over decides.

use crate::fleet::{handoff_publish_first_leased, FleetIdentity};
use crate::section::{Commit, Draft, Halt, Section, Step, View};
use crate::slots::steps::{
    handoff_publish_first, handoff_publish_second, row_reads, spawn_failed, BoundHandoff, Fenced,
    Handoff, Reads,
};
use crate::slots::{Liveness, ProcessIdentity, QueueState};

/// The first publish of `handoff` with its spawned `child`.
#[derive(Clone, Debug)]
pub struct PublishFirst {
    pub handoff: Handoff,
    pub child: ProcessIdentity,
}

impl Section for PublishFirst {
    type Effect = Result<BoundHandoff, Fenced>;

    fn commit(&self) -> Commit {
        Commit::Internal
    }

    fn reads(&self) -> Reads {
        Reads::Part(row_reads(self.handoff.key()))
    }

    fn step<L: Liveness>(
        &self,
        part: &mut QueueState,
        view: &View<'_, L>,
    ) -> Result<Step<Self::Effect>, Halt> {
        let mut draft = Draft::new(view.records);
        let handoff = self.handoff.clone();
        let published = match view.fleet {
            None => handoff_publish_first(part, handoff, self.child),
            Some(fleet) => {
                let mut leases = draft.leases(fleet).clone();
                let child = FleetIdentity {
                    host: fleet.host.clone(),
                    process: self.child,
                };
                let published = handoff_publish_first_leased(
                    part,
                    &mut leases,
                    handoff,
                    &child,
                    fleet.now_db_millis,
                    &fleet.timing,
                )?;
                if published.is_ok() {
                    draft.write_leases(leases);
                }
                published
            }
        };
        Ok(draft.finish(published))
    }
}

/// The second publish of a bound handoff.
#[derive(Clone, Debug)]
pub struct PublishSecond {
    pub bound: BoundHandoff,
}

impl Section for PublishSecond {
    type Effect = Result<ProcessIdentity, Fenced>;

    fn commit(&self) -> Commit {
        Commit::Internal
    }

    fn reads(&self) -> Reads {
        Reads::Part(row_reads(self.bound.key()))
    }

    fn step<L: Liveness>(
        &self,
        part: &mut QueueState,
        view: &View<'_, L>,
    ) -> Result<Step<Self::Effect>, Halt> {
        let published = handoff_publish_second(part, self.bound.clone());
        Ok(Draft::new(view.records).finish(published))
    }
}

/// The spawn for `handoff` failed: its unbound reservation is given back and the row parked.
#[derive(Clone, Debug)]
pub struct SpawnFailed {
    pub handoff: Handoff,
}

impl Section for SpawnFailed {
    /// Whether the reservation was still this handoff's to release.
    type Effect = bool;

    fn commit(&self) -> Commit {
        Commit::Internal
    }

    fn reads(&self) -> Reads {
        Reads::Part(row_reads(self.handoff.key()))
    }

    fn step<L: Liveness>(
        &self,
        part: &mut QueueState,
        view: &View<'_, L>,
    ) -> Result<Step<bool>, Halt> {
        let released = spawn_failed(part, self.handoff.clone());
        Ok(Draft::new(view.records).finish(released))
    }
}
