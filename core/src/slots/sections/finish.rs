//! The finishing runner's section (spec/slots.md, "Finish"): record the turn's result, let its row
//! depart (a retry re-queued, failed dependents settled), release the runner's lease on a fleet,
//! leave the queue and reserve the next parked row this slot may start.

use super::strategies_of;
use super::take_over::release_own_lease;
use crate::records::TurnRecord;
use crate::section::{Commit, Draft, Halt, Section, Step, Unread, View};
use crate::slots::departure::{leave, Leave, Left};
use crate::slots::steps::{
    self, finish_covers, finish_sufficed, FinishInput, Handoff, Loaded, Reads,
};
use crate::slots::{Liveness, ProcessIdentity, QueueState, SlotToken, TurnKey};

/// The finishing runner's input.
#[derive(Clone, Copy, Debug)]
pub struct FinishSection<'a> {
    pub key: &'a TurnKey,
    pub me: ProcessIdentity,
    /// The turn's record with the result of its command (`None`: a take-over found the turn
    /// settled already, its runner having died while leaving; the record is the store's).
    pub result: Option<&'a TurnRecord>,
    pub fresh_token: SlotToken,
    pub now_millis: u64,
    pub cap: usize,
}

/// What the finish leaves for the driver.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FinishEffect {
    /// The next parked row this slot starts: spawn its runner.
    pub next: Option<Handoff>,
    /// The departure's follow-up (a retry's waker).
    pub left: Left,
}

impl Section for FinishSection<'_> {
    type Effect = FinishEffect;

    /// With a result the section records an outcome: synced at its own commit.
    fn commit(&self) -> Commit {
        match self.result {
            Some(_) => Commit::Outcome,
            None => Commit::Internal,
        }
    }

    /// Its task's rows and the first parked rows in start order ([`steps::finish_reads`]), so a
    /// finish costs the same at any depth.
    fn reads(&self) -> Reads {
        Reads::Part(steps::finish_reads(self.key))
    }

    fn step<L: Liveness>(
        &self,
        part: &mut QueueState,
        view: &View<'_, L>,
    ) -> Result<Step<FinishEffect>, Halt> {
        finish(part, view, *self)
    }
}

/// The finish section on `state` (its part: [`steps::finish_reads`]). A part that does not cover
/// the finish, or whose answer could differ from the whole queue's, asks for the whole queue.
pub fn finish<L: Liveness>(
    state: &mut QueueState,
    view: &View<'_, L>,
    input: FinishSection<'_>,
) -> Result<Step<FinishEffect>, Halt> {
    let key = input.key;
    if !finish_covers(view.loaded, key) {
        return Err(Unread::Queue(Reads::Everything).into());
    }
    if let Some(result) = input.result {
        debug_assert_eq!(&result.key, key, "a result of another turn");
        debug_assert!(result.is_settled(), "a result without an outcome");
    }
    let before = matches!(view.loaded, Loaded::Part { .. }).then(|| state.clone());
    let mut draft = Draft::new(view.records);
    if let Some(result) = input.result {
        draft.write_turn(result.clone(), false);
    } else {
        // The settled record found at take-over: read it for the departure.
        draft.turn(key)?;
    }
    let left = match state.row(key) {
        Some(_) => leave(
            state,
            &mut draft,
            Leave {
                key,
                me: input.me,
                now_millis: input.now_millis,
            },
        )?,
        None => Left::default(),
    };
    // On a fleet the runner's own lease goes with its row (spec/fleet.md).
    release_own_lease(&mut draft, view, input.me);
    let strategies = strategies_of(&draft, steps::strategies_needed(state))?;
    let next = steps::runner_finish(
        state,
        FinishInput {
            key,
            me: input.me,
            fresh_token: input.fresh_token,
            now_millis: input.now_millis,
            cap: input.cap,
            strategies: &strategies,
            liveness: &view.liveness(),
        },
    )?;
    if let Some(before) = &before {
        let started = next.as_ref().map(|h| h.key());
        if !finish_sufficed(view.loaded, key, before, state, started) {
            return Err(Unread::Queue(Reads::Everything).into());
        }
    }
    debug_assert!(state.row(key).is_none(), "a finished turn kept its row");
    debug_assert!(state.runner(key).is_none_or(|r| r.identity != input.me));
    Ok(draft.finish(FinishEffect { next, left }))
}
