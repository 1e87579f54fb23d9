//! The broken variants (teeth). Each replaces exactly one decision of the core; they live here,
//! never in the core, and `tests/model_slots.rs` expects the checker to reject each.

use super::config::Variant;
use std::collections::BTreeSet;
use tollgate_core::slots::{
    Liveness, ProcessIdentity, ProductionRules, QueueState, Reserving, RowState, SlotError,
    SlotRules, SlotToken, TakeOver, TurnKey,
};

/// The rules the model passes to the core's `_with` entry points: production's own
/// ([`ProductionRules`]) for every decision the variant does not break.
pub(super) struct VariantRules(pub(super) Variant);

impl SlotRules for VariantRules {
    fn occupied_runner_slots(
        &self,
        state: &QueueState,
        liveness: &impl Liveness,
        exclude_reserver: Option<u32>,
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

    fn reconcile_exclude_reserver(&self, reconciler: ProcessIdentity) -> Option<u32> {
        match self.0 {
            // BUG: the reconciler's own pid is excluded from the identity count.
            Variant::ReconcileExcludesItself => Some(reconciler.pid),
            _ => ProductionRules.reconcile_exclude_reserver(reconciler),
        }
    }
}

/// A copy of `occupied_runner_slots` with one of two bugs, chosen by `variant`.
pub(super) fn broken_occupied_runner_slots(
    variant: Variant,
    state: &QueueState,
    liveness: &impl Liveness,
    exclude_reserver: Option<u32>,
    reserving: Option<Reserving<'_>>,
) -> usize {
    // The identity half is production's; only the reservation count is broken.
    let identities =
        tollgate_core::slots::counted_identities(state, liveness, exclude_reserver, reserving);
    let excluded = |id: &ProcessIdentity| exclude_reserver == Some(id.pid);
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

/// A copy of `release_runner_slot` without the "no child bound" condition.
pub(super) fn release_even_after_bind(
    state: &mut QueueState,
    key: &TurnKey,
    token: SlotToken,
    reserver: ProcessIdentity,
) -> bool {
    let Ok(row) = state.row_mut(key) else {
        return false;
    };
    // BUG: `r.child.is_none()` is missing.
    let releasable = row
        .slot_reservation
        .as_ref()
        .is_some_and(|r| r.token == token && r.reserver == reserver);
    if releasable {
        row.slot_reservation = None;
        row.state = RowState::Parked;
    }
    releasable
}

/// A copy of `take_over_reserved_slot` that adopts the row whatever it finds.
pub(super) fn take_over_unconditionally(
    state: &mut QueueState,
    key: &TurnKey,
    me: ProcessIdentity,
    liveness: &impl Liveness,
) -> Result<TakeOver, SlotError> {
    // BUG: no token check, no bound-child check, no live-holder check.
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
    Ok(TakeOver::Running {
        adopted_dead_parent: reserver_dead,
    })
}
