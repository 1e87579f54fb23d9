//! Reserve, bind, complete, release and park: the reserver's side of a spawn.
//!
//! The reserver takes a slot under the queue lock ([`reserve_runner_slot`]), spawns outside it,
//! then hands the row to its child in two publishes: [`complete_runner_spawn_first`] (the child is
//! bound on the still-present reservation, so the slot stays occupied whatever happens next) and
//! [`complete_runner_spawn_second`] (the runner is recorded and the token cleared), the second
//! fenced against the row the reserver expects.

use super::occupancy::{acting_queue_holder, live_runner_for_turn};
use super::{
    Liveness, ProcessIdentity, ProductionRules, QueueEntry, QueueState, Reserving, RowState,
    RunnerSlotReservation, SlotError, SlotRules, SlotToken, TurnKey,
};

/// What [`reserve_runner_slot`] decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReserveOutcome {
    /// The caller holds the slot under `token` and must spawn (outside the lock). `stolen` names
    /// the dead reservation's token this one replaced, which must never act again.
    Acquired {
        token: SlotToken,
        stolen: Option<SlotToken>,
    },
    /// Someone else is already starting or running this turn; spawn nothing. `token` is the live
    /// reservation's, or `None` (the seed's nil token) when a live runner or holder has no token.
    Pending { token: Option<SlotToken> },
    /// Every slot is taken; the caller parks the row.
    Saturated,
}

/// Decides whether `reserver` may start a runner for `key` (spec/slots.md, "Reserve").
///
/// The five cases, in order: a live reservation makes it pending on that token; a dead one is
/// stolen with `fresh_token`; a live same-turn runner or another live holder makes it pending with
/// no token; occupancy at `cap` saturates; otherwise a new reservation is installed.
#[allow(clippy::too_many_arguments)]
pub fn reserve_runner_slot(
    state: &mut QueueState,
    key: &TurnKey,
    reserver: ProcessIdentity,
    exclude_reserver: Option<ProcessIdentity>,
    cap: usize,
    fresh_token: SlotToken,
    liveness: &impl Liveness,
) -> Result<ReserveOutcome, SlotError> {
    reserve_runner_slot_with(
        &ProductionRules,
        state,
        key,
        reserver,
        exclude_reserver,
        cap,
        fresh_token,
        liveness,
    )
}

/// [`reserve_runner_slot`] under explicit [`SlotRules`]: the seam the model's broken variants use.
#[allow(clippy::too_many_arguments)]
pub fn reserve_runner_slot_with(
    rules: &impl SlotRules,
    state: &mut QueueState,
    key: &TurnKey,
    reserver: ProcessIdentity,
    exclude_reserver: Option<ProcessIdentity>,
    cap: usize,
    fresh_token: SlotToken,
    liveness: &impl Liveness,
) -> Result<ReserveOutcome, SlotError> {
    let before = state.row(key).and_then(|r| r.slot_reservation.clone());
    let outcome = reserve(
        rules,
        state,
        key,
        reserver,
        exclude_reserver,
        cap,
        fresh_token,
        liveness,
    )?;
    let after = state.row(key).and_then(|r| r.slot_reservation.as_ref());
    match &outcome {
        ReserveOutcome::Acquired { token, stolen } => {
            debug_assert!(
                *token == fresh_token
                    && after.is_some_and(|r| {
                        r.token == fresh_token && r.reserver == reserver && r.child.is_none()
                    }),
                "an acquired slot is the reserver's unbound reservation under the fresh token"
            );
            debug_assert_eq!(
                *stolen,
                before.map(|r| r.token),
                "a steal names the dead reservation it replaced, and only a steal does"
            );
        }
        ReserveOutcome::Pending { .. } | ReserveOutcome::Saturated => debug_assert_eq!(
            after,
            before.as_ref(),
            "a reserve that acquired nothing leaves the row's reservation as it was"
        ),
    }
    Ok(outcome)
}

/// The decision of [`reserve_runner_slot_with`], whose postconditions that function asserts.
#[allow(clippy::too_many_arguments)]
fn reserve(
    rules: &impl SlotRules,
    state: &mut QueueState,
    key: &TurnKey,
    reserver: ProcessIdentity,
    exclude_reserver: Option<ProcessIdentity>,
    cap: usize,
    fresh_token: SlotToken,
    liveness: &impl Liveness,
) -> Result<ReserveOutcome, SlotError> {
    let index = state
        .row_index(key)
        .ok_or_else(|| SlotError::UnknownRow { key: key.clone() })?;
    let row = &state.entries[index];
    let same_turn_runner = live_runner_for_turn(state, key, liveness);
    let foreign_holder =
        acting_queue_holder(row).filter(|holder| *holder != reserver && liveness.is_live(holder));

    if let Some(existing) = &row.slot_reservation {
        let still_counts = liveness.is_live(&existing.reserver)
            || existing.child.is_some_and(|c| liveness.is_live(&c))
            || same_turn_runner.is_some()
            || foreign_holder.is_some();
        if still_counts {
            return Ok(ReserveOutcome::Pending {
                token: Some(existing.token),
            });
        }
        let held = existing.token;
        return steal_dead_reservation(state, index, held, reserver, fresh_token, liveness);
    }

    // A work of this turn that may still be alive (its runner died) is a copy of the turn running:
    // starting another would run the turn twice (S2 over work). Reconcile kills it first.
    let live_work = state
        .works_of(key)
        .any(|w| liveness.observe_work(w).is_live());
    if same_turn_runner.is_some() || foreign_holder.is_some() || live_work {
        return Ok(ReserveOutcome::Pending { token: None });
    }
    let occupied = rules.occupied_runner_slots(
        state,
        liveness,
        exclude_reserver,
        Some(Reserving { key, reserver }),
    );
    // A drained host (`Liveness::may_start`) starts nothing: as if every slot were taken.
    if occupied >= cap || !liveness.may_start() {
        return Ok(ReserveOutcome::Saturated);
    }
    state.entries[index].slot_reservation = Some(RunnerSlotReservation::new(reserver, fresh_token));
    Ok(ReserveOutcome::Acquired {
        token: fresh_token,
        stolen: None,
    })
}

/// The reservation `held` of row `index` no live process stands behind: taken over with
/// `fresh_token`, unless this host is drained (a drained host steals no dead reservation either:
/// that would start the turn here).
fn steal_dead_reservation(
    state: &mut QueueState,
    index: usize,
    held: SlotToken,
    reserver: ProcessIdentity,
    fresh_token: SlotToken,
    liveness: &impl Liveness,
) -> Result<ReserveOutcome, SlotError> {
    if !liveness.may_start() {
        return Ok(ReserveOutcome::Saturated);
    }
    if held == fresh_token {
        return Err(SlotError::TokenReused {
            key: state.entries[index].key.clone(),
            token: fresh_token,
        });
    }
    state.entries[index].slot_reservation = Some(RunnerSlotReservation::new(reserver, fresh_token));
    Ok(ReserveOutcome::Acquired {
        token: fresh_token,
        stolen: Some(held),
    })
}

/// A controller takes a row over before reserving it for a respawn. Its dispatch ownership is not
/// a runner: the recovered-controller exception keeps it from counting against its own reserve.
pub fn adopt_row(
    state: &mut QueueState,
    key: &TurnKey,
    by: ProcessIdentity,
) -> Result<(), SlotError> {
    let row = state.row_mut(key)?;
    row.state = RowState::Dispatching { dispatch_owner: by };
    Ok(())
}

fn token_mismatch(key: &TurnKey, token: SlotToken) -> SlotError {
    SlotError::TokenMismatch {
        key: key.clone(),
        given: token.to_string(),
    }
}

/// Attaches the spawned child to the reservation. Only the current token may bind, and a
/// reservation already bound to another child stays as it is.
pub fn bind_runner_slot_child(
    state: &mut QueueState,
    key: &TurnKey,
    token: SlotToken,
    child: ProcessIdentity,
) -> Result<(), SlotError> {
    let row = state.row_mut(key)?;
    let reservation = row
        .slot_reservation
        .as_mut()
        .filter(|r| r.token == token)
        .ok_or_else(|| token_mismatch(key, token))?;
    match reservation.child {
        Some(bound) if bound != child => Err(token_mismatch(key, token)),
        _ => {
            reservation.child = Some(child);
            Ok(())
        }
    }
}

/// First publish of the handoff: the child is bound and made the row's dispatch owner while the
/// reservation stays, so a crash before the second publish still occupies the slot.
pub fn complete_runner_spawn_first(
    state: &mut QueueState,
    key: &TurnKey,
    token: SlotToken,
    child: ProcessIdentity,
) -> Result<(), SlotError> {
    bind_runner_slot_child(state, key, token, child)?;
    let row = state.row_mut(key)?;
    row.state = RowState::Dispatching {
        dispatch_owner: child,
    };
    Ok(())
}

/// The row the reserver expects to find after its first publish: its pre-spawn snapshot with this
/// token's child attached. Anything else means someone stole, parked or removed it meanwhile.
pub fn token_fenced_row_after_bind(
    snapshot: &QueueEntry,
    token: SlotToken,
    child: ProcessIdentity,
) -> Result<QueueEntry, SlotError> {
    let mut expected = snapshot.clone();
    match expected.slot_reservation.as_mut() {
        Some(reservation) if reservation.token == token => reservation.child = Some(child),
        _ => return Err(token_mismatch(&snapshot.key, token)),
    }
    expected.state = RowState::Dispatching {
        dispatch_owner: child,
    };
    Ok(expected)
}

/// Second publish of the handoff: record the runner, then clear the token. Refused (and nothing
/// changes) unless the row is exactly `expected`.
pub fn complete_runner_spawn_second(
    state: &mut QueueState,
    expected: &QueueEntry,
    child: ProcessIdentity,
    attached: bool,
) -> Result<(), SlotError> {
    let key = &expected.key;
    match state.row(key) {
        Some(row) if row == expected => {}
        Some(_) => return Err(SlotError::HandoffFenced { key: key.clone() }),
        None => return Err(SlotError::UnknownRow { key: key.clone() }),
    }
    state.set_runner(key, child, attached);
    state.row_mut(key)?.slot_reservation = None;
    Ok(())
}

/// Gives an unbound reservation back (the spawn failed). Clears only when both token and reserver
/// match and no child is bound: after a bind this is a no-op, so a failed completion can never drop
/// a live child from occupancy. Returns whether it cleared.
pub fn release_runner_slot(
    state: &mut QueueState,
    key: &TurnKey,
    token: SlotToken,
    reserver: ProcessIdentity,
) -> bool {
    let Ok(row) = state.row_mut(key) else {
        return false;
    };
    let releasable = row
        .slot_reservation
        .as_ref()
        .is_some_and(|r| r.token == token && r.reserver == reserver && r.child.is_none());
    if releasable {
        row.slot_reservation = None;
        row.state = RowState::Parked;
    }
    releasable
}

/// The row waits for a slot with no owner; any reservation on it is cleared.
pub fn park(state: &mut QueueState, key: &TurnKey) -> Result<(), SlotError> {
    let row = state.row_mut(key)?;
    row.state = RowState::Parked;
    row.slot_reservation = None;
    Ok(())
}

/// Sets the earliest start time of `key`'s row (a debounce deadline; 0 = at once).
pub fn set_ready_at(
    state: &mut QueueState,
    key: &TurnKey,
    ready_at_millis: u64,
) -> Result<(), SlotError> {
    state.row_mut(key)?.ready_at_millis = ready_at_millis;
    Ok(())
}

/// What [`start_next_parked`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StartNext {
    NoneParked,
    /// Parked rows remain but no slot is free; nothing changed.
    Saturated,
    /// `key` is now dispatched by the caller under `token`; spawn its runner.
    Acquired {
        key: TurnKey,
        token: SlotToken,
    },
}

/// Starts the first parked row that can start, in scheduling order (not paused; highest priority,
/// then oldest): adopt it, reserve it, and put it back exactly as
/// it was if no slot is free. A finishing runner passes its own identity as `exclude_reserver`;
/// reconcile passes `None`.
pub fn start_next_parked(
    state: &mut QueueState,
    reserver: ProcessIdentity,
    exclude_reserver: Option<ProcessIdentity>,
    cap: usize,
    fresh_token: SlotToken,
    liveness: &impl Liveness,
) -> Result<StartNext, SlotError> {
    start_next_parked_general(
        &ProductionRules,
        state,
        reserver,
        exclude_reserver,
        cap,
        fresh_token,
        liveness,
        &every_row,
    )
}

/// Every parked row may start (no scope strategy applies).
pub(crate) fn every_row(_: &super::QueueLookup<'_>, _: &QueueEntry) -> bool {
    true
}

/// [`start_next_parked`] under explicit [`SlotRules`]: the seam the model's broken variants use.
pub fn start_next_parked_with(
    rules: &impl SlotRules,
    state: &mut QueueState,
    reserver: ProcessIdentity,
    exclude_reserver: Option<ProcessIdentity>,
    cap: usize,
    fresh_token: SlotToken,
    liveness: &impl Liveness,
) -> Result<StartNext, SlotError> {
    start_next_parked_general(
        rules,
        state,
        reserver,
        exclude_reserver,
        cap,
        fresh_token,
        liveness,
        &every_row,
    )
}

/// The one implementation behind the three entry points above.
#[allow(clippy::too_many_arguments)]
pub(crate) fn start_next_parked_general(
    rules: &impl SlotRules,
    state: &mut QueueState,
    reserver: ProcessIdentity,
    exclude_reserver: Option<ProcessIdentity>,
    cap: usize,
    fresh_token: SlotToken,
    liveness: &impl Liveness,
    eligible: &impl Fn(&super::QueueLookup<'_>, &QueueEntry) -> bool,
) -> Result<StartNext, SlotError> {
    // Scheduling (pause, priority; spec/slots.md, "Scheduling") decides the candidates and order.
    let parked = super::order::start_candidates(state, eligible);
    if parked.is_empty() {
        return Ok(StartNext::NoneParked);
    }
    for key in parked {
        let before = state.row(&key).cloned();
        adopt_row(state, &key, reserver)?;
        let outcome = reserve_runner_slot_with(
            rules,
            state,
            &key,
            reserver,
            exclude_reserver,
            cap,
            fresh_token,
            liveness,
        )?;
        match outcome {
            ReserveOutcome::Acquired { token, .. } => {
                debug_assert!(
                    state.row(&key).is_some_and(|r| r.state
                        == RowState::Dispatching {
                            dispatch_owner: reserver
                        }),
                    "a started parked row is dispatched by its reserver"
                );
                return Ok(StartNext::Acquired { key, token });
            }
            ReserveOutcome::Saturated | ReserveOutcome::Pending { .. } => {
                if let (Some(before), Ok(row)) = (before.clone(), state.row_mut(&key)) {
                    *row = before;
                }
                debug_assert_eq!(
                    state.row(&key),
                    before.as_ref(),
                    "a parked row that could not start is put back exactly as it was"
                );
                if matches!(outcome, ReserveOutcome::Saturated) {
                    return Ok(StartNext::Saturated);
                }
            }
        }
    }
    Ok(StartNext::Saturated)
}
