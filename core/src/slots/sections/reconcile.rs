//! One reconcile section (spec/slots.md, "Reconcile"): the records the core names for the queue
//! under the lock ([`steps::records_needed`]: the rows that are not parked, the parked ones only
//! when a slot may be free for one, the pass's orphan candidates) and the strategies of
//! [`steps::reconcile_strategies_needed`], then one [`steps::reconcile`] step, and the departure of
//! a row it removed. A step that starts a parked row whose record or strategy was not read (a
//! slot came free between the look and the step) asks for every row's record and every parked
//! task's strategy, and decides again on them.

use super::strategies_of;
use crate::records::TurnRecord;
use crate::section::{Commit, Draft, Halt, Need, Section, Step, Unread, View};
use crate::slots::departure::{leave, Leave};
use crate::slots::steps::{self, Reads, ReconcileEffect, ReconcileInput, TurnOnDisk, TurnRecords};
use crate::slots::{Liveness, ProcessIdentity, QueueState, SlotToken, TurnKey};

/// One reconcile section's input.
#[derive(Clone, Copy, Debug)]
pub struct ReconcileSection<'a> {
    pub me: ProcessIdentity,
    pub fresh_token: SlotToken,
    pub now_millis: u64,
    pub cap: usize,
    /// The turns found without a row before the pass ([`steps::orphan_candidates`]): their
    /// records are read again under the lock.
    pub orphan_candidates: &'a [TurnKey],
}

/// What a reconcile section did, and the waker of a retry its departure re-queued.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reconciled {
    pub effect: ReconcileEffect,
    pub wake_at_millis: Option<u64>,
}

impl Section for ReconcileSection<'_> {
    type Effect = Reconciled;

    fn commit(&self) -> Commit {
        Commit::Internal
    }

    fn reads(&self) -> Reads {
        Reads::Everything
    }

    fn step<L: Liveness>(
        &self,
        part: &mut QueueState,
        view: &View<'_, L>,
    ) -> Result<Step<Reconciled>, Halt> {
        reconcile(part, view, *self)
    }
}

/// What a turn's record says, field by field, for [`steps::reconcile`].
pub fn on_disk(record: Option<&TurnRecord>) -> TurnOnDisk {
    match record {
        None => TurnOnDisk::NoRecord,
        Some(turn) => TurnOnDisk::Record {
            settled: turn.is_settled(),
            attached: turn.attached,
            started: turn.started_at_millis.is_some(),
            runner: turn.runner.is_some(),
        },
    }
}

/// The reconcile section on `state` (the whole queue).
pub fn reconcile<L: Liveness>(
    state: &mut QueueState,
    view: &View<'_, L>,
    input: ReconcileSection<'_>,
) -> Result<Step<Reconciled>, Halt> {
    let liveness = view.liveness();
    let mut draft = Draft::new(view.records);
    let named: Vec<TurnKey> =
        steps::records_needed(state, input.orphan_candidates, input.cap, &liveness)
            .cloned()
            .collect();
    draft.require(&Need {
        turns: named.iter().cloned().collect(),
        ..Need::default()
    })?;
    let records = records_read(state, view, input.orphan_candidates);
    let all_rows = Need {
        turns: state.entries.iter().map(|e| e.key.clone()).collect(),
        tasks: steps::strategies_needed(state)
            .into_iter()
            .map(str::to_string)
            .collect(),
        ..Need::default()
    };
    // Once every row's record is read (a second round), every parked task's strategy is too.
    let strategies = if view.records.missing(&all_rows).is_empty() {
        strategies_of(&draft, steps::strategies_needed(state))?
    } else {
        let tasks = steps::reconcile_strategies_needed(state, input.cap, &liveness);
        strategies_of(&draft, tasks)?
    };
    let effect = steps::reconcile(
        state,
        ReconcileInput {
            me: input.me,
            fresh_token: input.fresh_token,
            now_millis: input.now_millis,
            cap: input.cap,
            strategies: &strategies,
            records: &records,
            liveness: &liveness,
        },
    )?;
    if let ReconcileEffect::Spawn {
        handoff,
        replaced: None,
    } = &effect
    {
        let key = handoff.key();
        if !records.contains_key(key) || !strategies.contains_key(&key.task) {
            // Started a row it had not read for: decide again with every row's record.
            return Err(Unread::Records(view.records.missing(&all_rows)).into());
        }
    }
    let wake_at_millis = depart_removed(state, &mut draft, &effect, input)?;
    Ok(draft.finish(Reconciled {
        effect,
        wake_at_millis,
    }))
}

/// Every record read, named this time or by an earlier round that asked for all of them.
fn records_read<L: Liveness>(
    state: &QueueState,
    view: &View<'_, L>,
    orphan_candidates: &[TurnKey],
) -> TurnRecords {
    let mut records = TurnRecords::new();
    for key in state
        .entries
        .iter()
        .map(|e| &e.key)
        .chain(orphan_candidates)
    {
        if let Ok(record) = view.records.turn(key) {
            records.insert(key.clone(), on_disk(record));
        }
    }
    records
}

/// A row that left here (its turn had ended, or has no record) departs in this section (a retry
/// the dead runner's section did not commit is re-queued now); returns when a waker must start
/// that retry.
fn depart_removed(
    state: &mut QueueState,
    draft: &mut Draft<'_>,
    effect: &ReconcileEffect,
    input: ReconcileSection<'_>,
) -> Result<Option<u64>, Halt> {
    let (ReconcileEffect::Removed { key } | ReconcileEffect::Forgotten { key }) = effect else {
        return Ok(None);
    };
    let left = leave(
        state,
        draft,
        Leave {
            key,
            me: input.me,
            now_millis: input.now_millis,
        },
    )?;
    Ok(left.wake_at_millis)
}
