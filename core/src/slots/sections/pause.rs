//! `pause` and `resume` (spec/slots.md, "Scheduling"): the pause set is part of the queue's
//! state, so each is one section. A pause changes only the set; a resume lifts it and starts what
//! may start now, up to the free slots, like a finishing runner ([`steps::resume`]).

use super::strategies_of;
use crate::section::{Commit, Draft, Halt, Section, Step, View};
use crate::slots::order::{self, PauseScope, PauseSet};
use crate::slots::steps::{self, QueueReads, Reads, ResumeEffect, ResumeInput};
use crate::slots::{Liveness, ProcessIdentity, QueueState, SlotToken};

/// A pause of the home or of one task.
#[derive(Clone, Copy, Debug)]
pub struct PauseSection<'a> {
    pub scope: PauseScope<'a>,
}

/// What a pause did: whether it changed the set, and the set after it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Paused {
    pub changed: bool,
    pub paused: PauseSet,
}

impl Section for PauseSection<'_> {
    type Effect = Paused;

    fn commit(&self) -> Commit {
        Commit::Promise
    }

    /// The pause set is in the part every section reads.
    fn reads(&self) -> Reads {
        Reads::Part(QueueReads::default())
    }

    fn step<L: Liveness>(
        &self,
        part: &mut QueueState,
        view: &View<'_, L>,
    ) -> Result<Step<Paused>, Halt> {
        let changed = order::pause(part, self.scope)?;
        Ok(Draft::new(view.records).finish(Paused {
            changed,
            paused: part.paused.clone(),
        }))
    }
}

/// A resume of the home (and every paused task) or of one task.
#[derive(Clone, Copy, Debug)]
pub struct ResumeSection<'a> {
    pub scope: PauseScope<'a>,
    pub me: ProcessIdentity,
    /// One fresh token per slot: the section never reserves more rows than there are slots.
    pub fresh_tokens: &'a [SlotToken],
    pub now_millis: u64,
    pub cap: usize,
}

impl Section for ResumeSection<'_> {
    /// The core's effect, and the pause set after the section.
    type Effect = (ResumeEffect, PauseSet);

    fn commit(&self) -> Commit {
        Commit::Promise
    }

    fn reads(&self) -> Reads {
        Reads::Everything
    }

    fn step<L: Liveness>(
        &self,
        part: &mut QueueState,
        view: &View<'_, L>,
    ) -> Result<Step<Self::Effect>, Halt> {
        debug_assert!(self.fresh_tokens.len() >= self.cap.min(1));
        let draft = Draft::new(view.records);
        let strategies = strategies_of(&draft, steps::strategies_needed(part))?;
        let effect = steps::resume(
            part,
            ResumeInput {
                scope: self.scope,
                me: self.me,
                fresh_tokens: self.fresh_tokens,
                now_millis: self.now_millis,
                cap: self.cap,
                strategies: &strategies,
                liveness: &view.liveness(),
            },
        )?;
        debug_assert!(
            effect.spawn.len() <= self.cap,
            "a resume starts at most cap rows"
        );
        Ok(draft.finish((effect, part.paused.clone())))
    }
}
