//! `tollgate reconcile`: repeat the core's reconcile step until nothing is left to repair.
//!
//! Each iteration is one locked section: read what the turn records say of the turns the step
//! looks at ([`steps::records_needed`]: the rows that are not parked, the parked ones only when a
//! slot may be free for one, and the pass's orphan candidates), call
//! [`steps::reconcile`], publish, and perform the effect (a handoff or the kill of a dead runner's
//! work through [`crate::driver`], or the line naming a forgotten row). Whether the pass goes on
//! is the core's [`ReconcileEffect::continues`]. No decision about protocol state is taken here.

use crate::dispatch::{DispatchError, Handoff};
use crate::driver;
use crate::process::work::WorkKill;
use crate::protocol::slots::sections::{on_disk, ReconcileSection};
use crate::protocol::slots::steps::{self, ReconcileEffect, ReconcileInput, TurnRecords};
use crate::protocol::slots::{Liveness, ProcessIdentity, ReconcileStep, TurnKey};
use crate::queue::Store;
use crate::runtime::Runtime;
use crate::tasks;
use std::io::Write;

/// Everything one reconcile did, in order.
#[derive(Debug, Default)]
pub struct ReconcileReport {
    pub steps: Vec<ReconcileStep>,
    pub handoffs: Vec<(TurnKey, Result<Handoff, String>)>,
    /// The works of dead runners that were killed, and what each kill found.
    pub kills: Vec<(TurnKey, WorkKill)>,
}

/// Runs reconcile steps as `me` until the core says the pass is over. Spawns and kills happen
/// outside the lock. The loop is bounded by the queue's size: every step but a kill and the last
/// changes a row for good, and a kill that leaves survivors ends the pass (the core's
/// [`ReconcileEffect::continues`]; the next pass retries).
pub fn reconcile<L: Liveness, S: Store>(
    rt: &Runtime<L, S>,
    me: ProcessIdentity,
) -> Result<ReconcileReport, DispatchError> {
    let mut report = ReconcileReport::default();
    let queue = rt.store.load()?;
    let candidates = steps::orphan_candidates(&queue, &home_turns(rt)?);
    let bound = steps::reconcile_pass_bound(&queue, &candidates);
    for _ in 0..bound {
        let effect = reconcile_once(rt, me, &candidates)?;
        report.steps.push(effect.step());
        let mut kill_complete = true;
        match &effect {
            ReconcileEffect::Spawn { handoff, .. } => {
                let key = handoff.key().clone();
                let handoff = driver::hand_off(rt, rt.spawner.as_ref(), handoff.clone())
                    .map_err(|e| e.to_string());
                report.handoffs.push((key, handoff));
            }
            ReconcileEffect::Kill { key, work } => {
                let killed = driver::kill_work(rt.spawner.as_ref(), work);
                kill_complete = killed.is_complete();
                report.kills.push((key.clone(), killed));
            }
            ReconcileEffect::Forgotten { key } => {
                let _ = writeln!(
                    std::io::stderr(),
                    "tollgate: {key}: removed its queue row: the turn has no record ({} is \
                     missing), so it can never run",
                    tasks::turn_record_location(&rt.home, key)
                );
            }
            ReconcileEffect::Saturated
            | ReconcileEffect::Idle
            | ReconcileEffect::Requeued { .. }
            | ReconcileEffect::CompletedHandoff { .. }
            | ReconcileEffect::Parked { .. }
            | ReconcileEffect::Removed { .. } => {}
        }
        if !effect.continues(kill_complete) {
            break;
        }
    }
    Ok(report)
}

/// One reconcile section ([`sections::reconcile`]). `orphan_candidates` are the turns found
/// without a row before the pass; their records are read again under the lock, with those the
/// core names, so a turn that started or ended meanwhile is seen as it is now. A retry its
/// departure re-queued with a backoff gets its waker after the commit.
pub fn reconcile_once<L: Liveness, S: Store>(
    rt: &Runtime<L, S>,
    me: ProcessIdentity,
    orphan_candidates: &[TurnKey],
) -> Result<ReconcileEffect, DispatchError> {
    let done = crate::section::run(
        rt,
        &ReconcileSection {
            me,
            fresh_token: rt.spawner.fresh_token(),
            now_millis: rt.spawner.now_millis(),
            cap: rt.cap(),
            orphan_candidates,
        },
    )?;
    if let Some(at_millis) = done.wake_at_millis {
        driver::start_waker(rt.spawner.as_ref(), at_millis);
    }
    Ok(done.effect)
}

/// Whether the bounded repair after a command's section has anything to do: the core's
/// [`steps::reconcile_would_act`] on the active part of the queue ([`Store::load_active`]: not
/// the parked rows, so its cost stays flat in the queue's depth), with the records the core names
/// for it, read without the lock. A "no" is a look at one instant, like the repair itself: what
/// breaks after it is repaired by the next command's repair or by `tollgate reconcile`.
pub fn repair_due<L: Liveness, S: Store>(
    rt: &Runtime<L, S>,
    me: ProcessIdentity,
) -> Result<bool, DispatchError> {
    let cap = rt.cap();
    let mut active = rt.store.load_active()?;
    let mut records = TurnRecords::new();
    for key in steps::records_needed(&active, &[], cap, &rt.liveness) {
        records.insert(
            key.clone(),
            on_disk(tasks::load_turn(&rt.home, key)?.as_ref()),
        );
    }
    let strategies = rt.strategies_of(steps::reconcile_strategies_needed(
        &active,
        cap,
        &rt.liveness,
    ))?;
    Ok(steps::reconcile_would_act(
        &mut active,
        ReconcileInput {
            me,
            fresh_token: rt.spawner.fresh_token(),
            now_millis: rt.spawner.now_millis(),
            cap,
            strategies: &strategies,
            records: &records,
            liveness: &rt.liveness,
        },
    )?)
}

/// The home's unfinished turns with what their records say, read without the lock (the core
/// picks the pass's orphan candidates from them, and a settled turn is never one; each section
/// reads their records again). From the database's index of unfinished turns.
fn home_turns<L: Liveness, S: Store>(rt: &Runtime<L, S>) -> Result<TurnRecords, DispatchError> {
    let mut turns = TurnRecords::new();
    for record in tasks::unfinished_turns(&rt.home)? {
        turns.insert(record.key.clone(), on_disk(Some(&record)));
    }
    Ok(turns)
}
