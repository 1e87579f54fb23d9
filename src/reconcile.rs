//! `tollgate reconcile`: repeat the core's reconcile step until nothing is left to repair.

use crate::dispatch::{spawn_and_hand_off, DispatchError, Handoff};
use crate::protocol::scopes::start_filter;
use crate::protocol::slots::{
    enqueue, park, reconcile_step_where, Liveness, ProcessIdentity, QueueEntry, ReconcileStep,
    RowState, SlotToken, TurnKey,
};
use crate::runtime::Runtime;
use crate::tasks::{self, TurnRecord};
use std::collections::HashSet;

/// Everything one reconcile did, in order.
#[derive(Debug, Default)]
pub struct ReconcileReport {
    pub steps: Vec<ReconcileStep>,
    pub handoffs: Vec<(TurnKey, Result<Handoff, String>)>,
}

/// Runs reconcile steps as `me` until the core says idle or saturated. Each step is one critical
/// section; spawns happen outside the lock. The loop is bounded by the queue's size: every step
/// but the last changes a row for good.
pub fn reconcile<L: Liveness>(
    rt: &Runtime<L>,
    me: ProcessIdentity,
) -> Result<ReconcileReport, DispatchError> {
    let mut report = ReconcileReport::default();
    for key in requeue_orphaned_turns(rt, me)? {
        report.steps.push(ReconcileStep::Parked { key });
    }
    let bound = 2 * rt.store.load()?.entries.len() + 2;
    for _ in 0..bound {
        let (step, snapshot) = reconcile_once(rt, me)?;
        let done = matches!(step, ReconcileStep::Idle | ReconcileStep::Saturated);
        if let (ReconcileStep::Spawn { key, token, .. }, Some(row)) = (&step, snapshot) {
            let handoff = spawn_and_hand_off(&rt.store, rt.spawner.as_ref(), me, *token, &row)
                .map_err(|e| e.to_string());
            report.handoffs.push((key.clone(), handoff));
        }
        report.steps.push(step);
        if done {
            break;
        }
    }
    Ok(report)
}

/// One reconcile critical section: the core's step, and the row as published when it says spawn.
pub fn reconcile_once<L: Liveness>(
    rt: &Runtime<L>,
    me: ProcessIdentity,
) -> Result<(ReconcileStep, Option<QueueEntry>), DispatchError> {
    let cap = rt.cap();
    rt.store.transact(|state| {
        // A row whose turn has no record (its task folder was deleted) can never run: settle it.
        tasks::settle_rows_without_records(&rt.home, state)?;
        // Which dispatched turns already have their result on disk: read under the lock.
        let mut settled = HashSet::new();
        for entry in &state.entries {
            if matches!(entry.state, RowState::Dispatching { .. })
                && tasks::load_turn(&rt.home, &entry.key)?.is_some_and(|t| t.is_settled())
            {
                settled.insert(entry.key.clone());
            }
        }
        let strategies = tasks::parked_strategies(&rt.home, state)?;
        let step = reconcile_step_where(
            state,
            me,
            cap,
            SlotToken::generate(),
            &rt.liveness,
            &|key: &TurnKey| settled.contains(key),
            &start_filter(&strategies, tasks::now_millis()),
        )?;
        let snapshot = match &step {
            ReconcileStep::Spawn { key, .. } => state.row(key).cloned(),
            _ => None,
        };
        Ok::<_, DispatchError>((step, snapshot))
    })
}

/// A detached turn that has a record but never reached the queue and never started.
fn never_queued(turn: &TurnRecord) -> bool {
    !turn.is_settled()
        && !turn.attached
        && turn.started_at_millis.is_none()
        && turn.runner.is_none()
}

/// Turns whose submitter died inside its critical section, after writing the turn's record and
/// before publishing its queue row (S9: nothing submitted is lost). Under the lock no live submit
/// can be in that window, so an unsettled, never-started turn without a row is such an orphan: it
/// is enqueued and parked, and the reconcile steps start it like any parked row. Candidates are
/// found without the lock and checked again under it.
fn requeue_orphaned_turns<L: Liveness>(
    rt: &Runtime<L>,
    me: ProcessIdentity,
) -> Result<Vec<TurnKey>, DispatchError> {
    let queue = rt.store.load()?;
    let mut candidates = Vec::new();
    for task in tasks::list_tasks(&rt.home)? {
        for turn in tasks::list_turns(&rt.home, &task)? {
            let key = TurnKey::new(task.clone(), turn);
            if queue.row(&key).is_none()
                && tasks::load_turn(&rt.home, &key)?.is_some_and(|t| never_queued(&t))
            {
                candidates.push(key);
            }
        }
    }
    if candidates.is_empty() {
        return Ok(Vec::new());
    }
    rt.store.transact(|state| {
        let mut requeued = Vec::new();
        for key in candidates {
            if state.row(&key).is_none()
                && tasks::load_turn(&rt.home, &key)?.is_some_and(|t| never_queued(&t))
            {
                enqueue(state, &key, me, tasks::now_millis())?;
                park(state, &key)?;
                requeued.push(key);
            }
        }
        Ok::<_, DispatchError>(requeued)
    })
}
