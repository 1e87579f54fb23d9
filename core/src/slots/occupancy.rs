//! How many worker slots are taken: the number the cap is compared against.
//!
//! occupied = |live runner identities ∪ live acting queue holders, outside reserved rows| + one per
//! outstanding reservation. Identities are counted once however many rows name them; reservations
//! are counted one each even when several share a reserver, because each may already have a child
//! on the way. An identity seen only on reserved rows is represented by those reservations. A
//! recorded work whose runner is gone but which may still be alive counts one slot of its own.

use super::{Liveness, ProcessIdentity, QueueEntry, QueueState, RowState, TurnKey};
use std::collections::BTreeMap;

/// The row being reserved and by whom, for the recovered-controller exception.
#[derive(Clone, Copy, Debug)]
pub struct Reserving<'a> {
    pub key: &'a TurnKey,
    pub reserver: ProcessIdentity,
}

/// The process that acts for a row: a dispatch owner, or an adopting waiter. An enqueue owner
/// waiting on its own row does not act, and a parked row has no one.
pub fn acting_queue_holder(entry: &QueueEntry) -> Option<ProcessIdentity> {
    match entry.state {
        RowState::Dispatching { dispatch_owner } => Some(dispatch_owner),
        RowState::Waiting {
            enqueue_owner,
            owner,
        } if owner != enqueue_owner => Some(owner),
        RowState::Waiting { .. } | RowState::Parked => None,
    }
}

/// The live recorded runner of exactly this turn, found by its key (never by scanning turns).
pub fn live_runner_for_turn(
    state: &QueueState,
    key: &TurnKey,
    liveness: &impl Liveness,
) -> Option<ProcessIdentity> {
    state
        .runner(key)
        .map(|r| r.identity)
        .filter(|id| liveness.is_live(id))
}

/// Slots taken, as the cap sees them.
///
/// `exclude_reserver` drops that identity from the identity set only (a finishing runner replacing
/// its own slot); reservations always count. It is the whole identity, never the pid alone: pids
/// repeat across the hosts of a fleet, and another host's live runner with the same pid still holds
/// its slot. `reserving` applies the recovered-controller exception:
/// the reserved row's own holder is not counted when it is the reserver itself, the row has no
/// reservation, and no live runner holds the turn.
pub fn occupied_runner_slots(
    state: &QueueState,
    liveness: &impl Liveness,
    exclude_reserver: Option<ProcessIdentity>,
    reserving: Option<Reserving<'_>>,
) -> usize {
    let reservations = state
        .entries
        .iter()
        .filter(|e| e.slot_reservation.is_some())
        .count();
    counted_identities(state, liveness, exclude_reserver, reserving) + reservations
}

/// The identity half of [`occupied_runner_slots`]: live runner identities and live acting queue
/// holders, each once, leaving out `exclude_reserver`, the recovered controller of `reserving`, and
/// identities seen only on reserved rows (their reservations stand for them).
pub fn counted_identities(
    state: &QueueState,
    liveness: &impl Liveness,
    exclude_reserver: Option<ProcessIdentity>,
    reserving: Option<Reserving<'_>>,
) -> usize {
    let excluded = |id: &ProcessIdentity| exclude_reserver == Some(*id);
    let reserved = |key: &TurnKey| {
        state
            .row(key)
            .is_some_and(|row| row.slot_reservation.is_some())
    };
    // identity → whether it shows up anywhere other than on a reserved row. A process seen only on
    // rows that carry a reservation (a reserver handing off, a child not yet through the second
    // publish) is already counted by those reservations; counting it again would make every
    // handoff hold two slots.
    let mut identities: BTreeMap<ProcessIdentity, bool> = BTreeMap::new();
    for record in &state.runners {
        if !excluded(&record.identity) && liveness.is_live(&record.identity) {
            *identities.entry(record.identity).or_insert(false) |= !reserved(&record.key);
        }
    }
    for entry in &state.entries {
        let Some(holder) = acting_queue_holder(entry) else {
            continue;
        };
        if excluded(&holder) || !liveness.is_live(&holder) {
            continue;
        }
        if let Some(r) = reserving {
            if &entry.key == r.key
                && holder == r.reserver
                && entry.slot_reservation.is_none()
                && live_runner_for_turn(state, &entry.key, liveness).is_none()
            {
                continue;
            }
        }
        *identities.entry(holder).or_insert(false) |= entry.slot_reservation.is_none();
    }
    // A work whose runner is gone but which may still be alive holds its slot until it is killed
    // and seen gone (S1 over work): nobody else counts it, so it counts itself.
    let orphaned_works = state
        .works
        .iter()
        .filter(|w| !liveness.is_live(&w.runner) && liveness.observe_work(w).is_live())
        .count();
    identities
        .values()
        .filter(|unreserved| **unreserved)
        .count()
        + orphaned_works
}
