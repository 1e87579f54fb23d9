//! `tollgate reconcile`: repeat the core's reconcile step until nothing is left to repair.

use crate::dispatch::{spawn_and_hand_off, DispatchError, Handoff};
use crate::protocol::scopes::start_filter;
use crate::protocol::slots::{
    reconcile_step_where, Liveness, ProcessIdentity, QueueEntry, ReconcileStep, RowState,
    SlotToken, TurnKey,
};
use crate::runtime::Runtime;
use crate::tasks;
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
