//! `tollgate reconcile`: repeat the core's reconcile step until nothing is left to repair.
//!
//! Each iteration is one locked section: read what the step needs from the turn records (which
//! dispatched turns are settled, which orphaned turns are still never-started), call
//! [`steps::reconcile`], publish, and let [`crate::driver`] perform the effect (a handoff, or the
//! kill of a dead runner's work).

use crate::dispatch::{DispatchError, Handoff};
use crate::driver;
use crate::process::work::WorkKill;
use crate::protocol::slots::steps::{self, ReconcileEffect, ReconcileInput};
use crate::protocol::slots::{Liveness, ProcessIdentity, QueueState, ReconcileStep, TurnKey};
use crate::queue::Store;
use crate::runtime::Runtime;
use crate::tasks::{self, TurnRecord};
use std::collections::BTreeSet;

/// Everything one reconcile did, in order.
#[derive(Debug, Default)]
pub struct ReconcileReport {
    pub steps: Vec<ReconcileStep>,
    pub handoffs: Vec<(TurnKey, Result<Handoff, String>)>,
    /// The works of dead runners that were killed, and what each kill found.
    pub kills: Vec<(TurnKey, WorkKill)>,
}

/// Runs reconcile steps as `me` until the core says idle or saturated. Spawns and kills happen
/// outside the lock. The loop is bounded by the queue's size: every step but a kill and the last
/// changes a row for good, and a kill that leaves survivors ends the pass (the next one retries).
pub fn reconcile<L: Liveness, S: Store>(
    rt: &Runtime<L, S>,
    me: ProcessIdentity,
) -> Result<ReconcileReport, DispatchError> {
    let mut report = ReconcileReport::default();
    let queue = rt.store.load()?;
    let orphans = orphan_candidates(rt, &queue)?;
    let bound = 3 * (queue.entries.len() + queue.works.len() + orphans.len()) + 2;
    for _ in 0..bound {
        let effect = reconcile_once(rt, me, &orphans)?;
        report.steps.push(effect.step());
        match effect {
            ReconcileEffect::Spawn { handoff, .. } => {
                let key = handoff.key().clone();
                let handoff = driver::hand_off(&rt.store, rt.spawner.as_ref(), handoff)
                    .map_err(|e| e.to_string());
                report.handoffs.push((key, handoff));
            }
            ReconcileEffect::Kill { key, work } => {
                let killed = driver::kill_work(rt.spawner.as_ref(), &work);
                let complete = killed.is_complete();
                report.kills.push((key, killed));
                if !complete {
                    break;
                }
            }
            ReconcileEffect::Saturated | ReconcileEffect::Idle => break,
            ReconcileEffect::Requeued { .. }
            | ReconcileEffect::CompletedHandoff { .. }
            | ReconcileEffect::Parked { .. }
            | ReconcileEffect::Removed { .. } => {}
        }
    }
    Ok(report)
}

/// One reconcile critical section. `orphan_candidates` are the turns found without a row before
/// the pass; their records are read again here, under the lock, so a turn that started or ended
/// meanwhile is not passed on.
pub fn reconcile_once<L: Liveness, S: Store>(
    rt: &Runtime<L, S>,
    me: ProcessIdentity,
    orphan_candidates: &[TurnKey],
) -> Result<ReconcileEffect, DispatchError> {
    let cap = rt.cap();
    rt.store.transact_internal(|state| {
        // A row whose turn has no record (its task folder was deleted) can never run: settle it.
        tasks::settle_rows_without_records(&rt.home, state)?;
        // Which dispatched turns already have their result on disk: read under the lock.
        let mut settled = BTreeSet::new();
        for key in steps::settled_needed(state) {
            if tasks::load_turn(&rt.home, key)?.is_some_and(|t| t.is_settled()) {
                settled.insert(key.clone());
            }
        }
        let mut orphans = Vec::with_capacity(orphan_candidates.len());
        for key in orphan_candidates {
            if tasks::load_turn(&rt.home, key)?.is_some_and(|t| never_queued(&t)) {
                orphans.push(key.clone());
            }
        }
        let strategies = rt.strategies_for(state)?;
        let effect = steps::reconcile(
            state,
            ReconcileInput {
                me,
                fresh_token: rt.spawner.fresh_token(),
                now_millis: rt.spawner.now_millis(),
                cap,
                strategies: &strategies,
                settled: &settled,
                orphans: &orphans,
                liveness: &rt.liveness,
            },
        )?;
        Ok::<_, DispatchError>(effect)
    })
}

/// A detached turn that has a record but never started and has no outcome: if it has no row, its
/// submitter died inside its section after writing the record (S9).
fn never_queued(turn: &TurnRecord) -> bool {
    !turn.is_settled()
        && !turn.attached
        && turn.started_at_millis.is_none()
        && turn.runner.is_none()
}

/// Turns of the home that had no row in `queue` and whose record says never queued: what the
/// reconcile step requeues (S9). Read without the lock; each section reads the records again.
fn orphan_candidates<L: Liveness, S: Store>(
    rt: &Runtime<L, S>,
    queue: &QueueState,
) -> Result<Vec<TurnKey>, DispatchError> {
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
    Ok(candidates)
}
