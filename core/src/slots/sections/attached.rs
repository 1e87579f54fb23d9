//! The attached (`submit --attach`) start section (spec/slots.md, "Attached runs"): the first
//! section makes the turn (its task named and its number claimed as a detached submit's), and
//! every section decides with [`steps::attached_start`] whether the submitter runs it now in the
//! foreground, is refused by a `drop` strategy, or waits outside the queue. A run records the
//! turn as started by the submitter (on a fleet with its lease taken in the same transaction); a
//! refusal ends the turn dropped.

use super::submit::task_name;
use crate::admission::Strategy;
use crate::fleet::{self, FleetIdentity};
use crate::records::{TurnOutcome, TurnRecord};
use crate::section::{Commit, Draft, Halt, Section, Step, View};
use crate::slots::steps::{self, AttachedEffect, AttachedInput, Busy, Reads};
use crate::slots::{Liveness, ProcessIdentity, QueueState, SlotError, SlotToken, TurnKey, WorkId};
use crate::turns::{claim_turn, create_turn, end_unrun, NewTurn};

/// An attached start's input.
#[derive(Clone, Copy, Debug)]
pub struct AttachedSection<'a> {
    pub task: Option<&'a str>,
    pub fallback_task: &'a str,
    pub strategy: Option<Strategy>,
    pub new: &'a NewTurn,
    /// The turn an earlier section of this submit made, with its strategy (`None`: the first).
    pub created: Option<(&'a TurnKey, Strategy)>,
    pub me: ProcessIdentity,
    pub fresh_token: SlotToken,
    pub now_millis: u64,
}

/// What an attached section decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AttachedStart {
    /// The submitter is the turn's executor: run the command in the foreground as `work`.
    Run { work: WorkId },
    /// Refused by the task's `drop` strategy: its turn `running` is in the queue. The turn ended
    /// dropped.
    Dropped { running: TurnKey, busy: Busy },
    /// The task's strategy has no room while `running` is active: wait and try again.
    WaitFor { running: TurnKey },
    /// This host is drained: wait until it may start turns again.
    WaitDrained,
}

/// The turn as the section left it, its strategy, and the decision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attached {
    pub turn: TurnRecord,
    pub strategy: Strategy,
    pub start: AttachedStart,
}

impl Section for AttachedSection<'_> {
    type Effect = Attached;

    /// The turn's record and, for a run, its start: the submitter says it runs.
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
    ) -> Result<Step<Attached>, Halt> {
        attached(part, view, *self)
    }
}

/// The attached start section on `state` (the whole queue).
pub fn attached<L: Liveness>(
    state: &mut QueueState,
    view: &View<'_, L>,
    input: AttachedSection<'_>,
) -> Result<Step<Attached>, Halt> {
    let now = input.now_millis;
    let mut draft = Draft::new(view.records);
    let (mut turn, strategy) = match input.created {
        Some((key, strategy)) => {
            let turn = draft
                .turn(key)?
                .cloned()
                .ok_or_else(|| SlotError::UnknownRow { key: key.clone() })?;
            (turn, strategy)
        }
        None => {
            let id = state.id_of_next_enqueue();
            let task = task_name(&draft, input.task, input.fallback_task, &input.new.argv, id)?;
            let (key, strategy) = claim_turn(&mut draft, &task, input.strategy, now)?;
            let turn = create_turn(&mut draft, key, input.new.clone(), None, now)?;
            (turn, strategy)
        }
    };
    debug_assert!(turn.attached, "an attached section's turn is attached");
    let effect = steps::attached_start(
        state,
        AttachedInput {
            key: &turn.key,
            me: input.me,
            fresh_token: input.fresh_token,
            now_millis: now,
            strategy,
            liveness: &view.liveness(),
        },
    )?;
    let start = match effect {
        AttachedEffect::Run { work } => {
            acquire_own_lease(&mut draft, view, input.me)?;
            turn.id = state.row(&turn.key).map(|r| r.queue_id);
            turn.started_at_millis = Some(now);
            turn.runner = Some(input.me);
            turn.host = view.fleet.map(|f| f.host.clone());
            draft.write_turn(turn.clone(), false);
            AttachedStart::Run { work }
        }
        AttachedEffect::Dropped { running, busy } => {
            end_unrun(&mut draft, &turn.key, TurnOutcome::Dropped, now)?;
            AttachedStart::Dropped { running, busy }
        }
        AttachedEffect::Wait { running } if running == turn.key => AttachedStart::WaitDrained,
        AttachedEffect::Wait { running } => AttachedStart::WaitFor { running },
    };
    let turn = draft.turn(&turn.key)?.cloned().unwrap_or(turn);
    Ok(draft.finish(Attached {
        turn,
        strategy,
        start,
    }))
}

/// On a fleet the submitter becomes its turn's executor, so it takes its lease in the same
/// transaction (spec/fleet.md, `acquire`); refused (the table is full), nothing is published.
fn acquire_own_lease<L: Liveness>(
    draft: &mut Draft<'_>,
    view: &View<'_, L>,
    me: ProcessIdentity,
) -> Result<(), Halt> {
    let Some(fleet_view) = view.fleet else {
        return Ok(());
    };
    let mut leases = draft.leases(fleet_view).clone();
    let me = FleetIdentity {
        host: fleet_view.host.clone(),
        process: me,
    };
    fleet::acquire(
        &mut leases,
        &me,
        fleet_view.now_db_millis,
        &fleet_view.timing,
    )?;
    draft.write_leases(leases);
    Ok(())
}
