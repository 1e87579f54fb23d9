//! The cancel section (spec/slots.md, "Cancel"): rows nobody runs leave at once and end
//! cancelled, their departure settling their `--after-success` dependents (a cancel is never
//! retried); a row somebody runs keeps the request and its live executor is signalled; a dead
//! runner's work is killed first and its row leaves in the next section.

use crate::records::TurnOutcome;
use crate::section::{Commit, Draft, Halt, Need, Section, Step, Unread, View};
use crate::slots::departure::{leave, Leave};
use crate::slots::steps::{self, CancelEffect, CancelSelection, Reads};
use crate::slots::{Liveness, ProcessIdentity, QueueState, TurnKey};
use crate::turns::end_unrun;

/// The cancel's input.
#[derive(Clone, Copy, Debug)]
pub struct CancelSection<'a> {
    pub selection: CancelSelection<'a>,
    /// The cancelling process (it enqueues nothing: a cancelled turn is not retried).
    pub me: ProcessIdentity,
    pub now_millis: u64,
}

impl CancelSection<'_> {
    fn task(&self) -> &str {
        match self.selection {
            CancelSelection::Task(task) => task,
            CancelSelection::Turn(key) => key.task.as_str(),
        }
    }
}

impl Section for CancelSection<'_> {
    type Effect = CancelEffect;

    /// A cancel is a promise: `cancel` says the turns ended.
    fn commit(&self) -> Commit {
        Commit::Promise
    }

    /// The cancelled task's rows and their dependents ([`steps::cancel_reads`]).
    fn reads(&self) -> Reads {
        Reads::Part(steps::cancel_reads(self.task()))
    }

    fn step<L: Liveness>(
        &self,
        part: &mut QueueState,
        view: &View<'_, L>,
    ) -> Result<Step<CancelEffect>, Halt> {
        cancel(part, view, *self)
    }
}

/// The cancel section on `state`: the core's [`steps::cancel`], then each removed turn ended
/// cancelled and departed. A departure that reached rows outside the part asks for the whole
/// queue ([`steps::cancel_stayed_inside`]).
pub fn cancel<L: Liveness>(
    state: &mut QueueState,
    view: &View<'_, L>,
    input: CancelSection<'_>,
) -> Result<Step<CancelEffect>, Halt> {
    if !steps::cancel_covers(view.loaded, input.task()) {
        return Err(Unread::Queue(Reads::Everything).into());
    }
    let loaded_rows: Vec<TurnKey> = state.entries.iter().map(|e| e.key.clone()).collect();
    let effect = steps::cancel(state, input.selection, &view.liveness());
    let mut draft = Draft::new(view.records);
    draft.require(&Need {
        turns: effect.removed.iter().cloned().collect(),
        ..Need::default()
    })?;
    for key in &effect.removed {
        debug_assert!(state.row(key).is_none(), "a removed row is still queued");
        end_unrun(&mut draft, key, TurnOutcome::Cancelled, input.now_millis)?;
        let left = leave(
            state,
            &mut draft,
            Leave {
                key,
                me: input.me,
                now_millis: input.now_millis,
            },
        )?;
        debug_assert_eq!(left.retried_as, None, "a cancelled turn is never retried");
    }
    if !steps::cancel_stayed_inside(view.loaded, &loaded_rows, state, &effect.removed) {
        return Err(Unread::Queue(Reads::Everything).into());
    }
    Ok(draft.finish(effect))
}
