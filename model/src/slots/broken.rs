//! The broken variants (teeth). Each runs the production step and then changes exactly one of its
//! decisions (or one of the driver's), or swaps one decision of the rules seam; they live here,
//! never in the core, and `tests/model_slots.rs` expects the checker to reject each.

use super::config::Variant;
use std::collections::BTreeSet;
use tollgate_core::slots::steps::{CancelEffect, Handoff, SubmitDecision, TakeOverEffect};
use tollgate_core::slots::{
    acting_queue_holder, enqueue, park, Liveness, Observation, ProcessIdentity, ProductionRules,
    QueueState, Reserving, RowState, SlotError, SlotRules, SlotToken, TurnKey, WorkId, WorkRecord,
};

/// The rules the model passes to the core's `_with` entry points: production's own
/// ([`ProductionRules`]) for every decision the variant does not break.
pub(super) struct VariantRules(pub(super) Variant);

impl SlotRules for VariantRules {
    fn occupied_runner_slots(
        &self,
        state: &QueueState,
        liveness: &impl Liveness,
        exclude_reserver: Option<ProcessIdentity>,
        reserving: Option<Reserving<'_>>,
    ) -> usize {
        match self.0 {
            Variant::OccupancyPerReserverPid | Variant::ExcludeDropsReservations => {
                broken_occupied_runner_slots(self.0, state, liveness, exclude_reserver, reserving)
            }
            _ => {
                ProductionRules.occupied_runner_slots(state, liveness, exclude_reserver, reserving)
            }
        }
    }

    fn reconcile_exclude_reserver(&self, reconciler: ProcessIdentity) -> Option<ProcessIdentity> {
        match self.0 {
            // BUG: the reconciler's own pid is excluded from the identity count.
            Variant::ReconcileExcludesItself => Some(reconciler),
            _ => ProductionRules.reconcile_exclude_reserver(reconciler),
        }
    }
}

/// A copy of `occupied_runner_slots` with one of two bugs, chosen by `variant`.
pub(super) fn broken_occupied_runner_slots(
    variant: Variant,
    state: &QueueState,
    liveness: &impl Liveness,
    exclude_reserver: Option<ProcessIdentity>,
    reserving: Option<Reserving<'_>>,
) -> usize {
    // The identity half is production's; only the reservation count is broken.
    let identities =
        tollgate_core::slots::counted_identities(state, liveness, exclude_reserver, reserving);
    let excluded = |id: &ProcessIdentity| exclude_reserver == Some(*id);
    let reservations = state
        .entries
        .iter()
        .filter_map(|e| e.slot_reservation.as_ref());
    let counted = match variant {
        // BUG: one count per reserver pid, not per reservation.
        Variant::OccupancyPerReserverPid => reservations
            .map(|r| r.reserver.pid)
            .collect::<BTreeSet<_>>()
            .len(),
        // BUG: the excluded pid's reservations are dropped too.
        _ => reservations.filter(|r| !excluded(&r.reserver)).count(),
    };
    identities + counted
}

/// ReleaseAfterBind, after the production `spawn_failed` refused: the reservation of this handoff
/// is cleared and the row parked even though a child is bound on it.
pub(super) fn release_even_after_bind(state: &mut QueueState, handoff: &Handoff) -> bool {
    let Ok(row) = state.row_mut(handoff.key()) else {
        return false;
    };
    // BUG: the production condition `r.child.is_none()` is dropped.
    let releasable = row
        .slot_reservation
        .as_ref()
        .is_some_and(|r| r.token == handoff.token() && r.reserver == handoff.reserver());
    if releasable {
        row.slot_reservation = None;
        row.state = RowState::Parked;
    }
    releasable
}

/// UnconditionalTakeOver, after the production take-over refused: the runner adopts the row
/// anyway (no token check, no bound-child check, no live-holder check) and records its work.
pub(super) fn take_over_unconditionally(
    state: &mut QueueState,
    key: &TurnKey,
    token: SlotToken,
    me: ProcessIdentity,
    liveness: &impl Liveness,
) -> Result<TakeOverEffect, SlotError> {
    let reserver_dead = state
        .row(key)
        .ok_or_else(|| SlotError::UnknownRow { key: key.clone() })?
        .slot_reservation
        .as_ref()
        .is_none_or(|r| !liveness.is_live(&r.reserver));
    let row = state.row_mut(key)?;
    row.state = RowState::Dispatching { dispatch_owner: me };
    if reserver_dead {
        row.slot_reservation = None;
    } else if let Some(r) = row.slot_reservation.as_mut() {
        r.child = Some(me);
    }
    state.set_runner(key, me, false);
    let work = WorkId::from_token(token);
    state.works.push(WorkRecord {
        key: key.clone(),
        id: work,
        runner: me,
        leader: None,
        cgroup: None,
    });
    Ok(TakeOverEffect::Run { work })
}

/// QueueKeepsTwoWaiters, after the production submit superseded waiters: their rows are put back
/// (and their turns not ended), so the task keeps two waiters.
pub(super) fn keep_superseded(
    state: &mut QueueState,
    before: &QueueState,
    decision: &mut SubmitDecision,
) {
    for key in std::mem::take(&mut decision.superseded) {
        if let Some(row) = before.row(&key) {
            let at = state
                .entries
                .iter()
                .position(|e| e.queue_id > row.queue_id)
                .unwrap_or(state.entries.len());
            state.entries.insert(at, row.clone());
        }
    }
}

/// DropEnqueues, after the production submit dropped the turn: it is enqueued and parked anyway.
pub(super) fn enqueue_dropped(
    state: &mut QueueState,
    key: &TurnKey,
    me: ProcessIdentity,
    now_millis: u64,
) -> Result<(), SlotError> {
    enqueue(state, key, me, now_millis)?;
    park(state, key)
}

/// CancelLeavesRow, after the production cancel removed rows: they are put back (the turns still
/// end as cancelled, as the shell records them).
pub(super) fn restore_cancelled_rows(
    state: &mut QueueState,
    before: &QueueState,
    removed: &[TurnKey],
) {
    for key in removed {
        if let Some(row) = before.row(key) {
            let at = state
                .entries
                .iter()
                .position(|e| e.queue_id > row.queue_id)
                .unwrap_or(state.entries.len());
            state.entries.insert(at, row.clone());
        }
    }
}

/// CancelSignalsDispatchers, after the production cancel recorded the request on rows being
/// handed off: the live process acting for each such row (its dispatcher, else its bound child)
/// is signalled too, as the step did before S13.
pub(super) fn signal_dispatchers_too(
    before: &QueueState,
    effect: &mut CancelEffect,
    liveness: &impl Liveness,
) {
    for key in &effect.recorded {
        let Some(row) = before.row(key) else {
            continue;
        };
        // BUG: the row's acting holder is taken for its executor.
        let holder = acting_queue_holder(row)
            .filter(|h| liveness.is_live(h))
            .or_else(|| {
                row.slot_reservation
                    .as_ref()
                    .and_then(|r| r.child)
                    .filter(|c| liveness.is_live(c))
            });
        if let Some(holder) = holder {
            effect.signal.push((key.clone(), holder));
        }
    }
}

/// ParksBoundRowOfDeadReserver, before the production reconcile: the first row whose reserver is
/// dead while the child bound on its reservation lives (the reserver died between the two
/// publishes) is parked and its reservation dropped, as if the child were dead too. Returns the
/// row's turn, or `None` when no row is like that (the production step runs).
pub(super) fn park_bound_row_of_dead_reserver(
    state: &mut QueueState,
    liveness: &impl Liveness,
) -> Option<TurnKey> {
    let key = state
        .entries
        .iter()
        .find(|e| {
            e.slot_reservation.as_ref().is_some_and(|r| {
                !liveness.is_live(&r.reserver) && r.child.is_some_and(|c| liveness.is_live(&c))
            }) && state.runner(&e.key).is_none()
        })?
        .key
        .clone();
    let row = state.row_mut(&key).ok()?;
    // BUG: the live bound child is not asked about.
    row.slot_reservation = None;
    row.state = RowState::Parked;
    Some(key)
}

/// ReconcileSeesEveryoneAlive: the liveness reconcile is given answers that every process and
/// every work lives.
pub(super) struct EveryoneAlive;

impl Liveness for EveryoneAlive {
    fn observe(&self, _: &ProcessIdentity) -> Observation {
        Observation::Matching
    }

    fn observe_work(&self, _: &WorkRecord) -> Observation {
        Observation::Matching
    }
}
