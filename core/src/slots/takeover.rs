//! The runner's side: a spawned child takes its slot over, and later leaves the queue.

use super::{Liveness, ProcessIdentity, QueueState, RowState, SlotError, SlotToken, TurnKey};

/// What [`take_over_reserved_slot`] decided for the child.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TakeOver {
    /// The child is the turn's executor now and runs the command. `adopted_dead_parent` is set when
    /// its reserver died before finishing the handoff and the child completed it itself.
    Running { adopted_dead_parent: bool },
    /// Another live process has the row; the child must exit without running anything.
    Refused { holder: ProcessIdentity },
}

/// Takes over the slot reserved under `token` for `me` (the hidden `worker runner` does this first).
///
/// Only the current token acts: a stolen or cleared token is a `QUEUE_SLOT_TOKEN_MISMATCH`. The
/// child refuses if the reservation is bound to another live child, or if a live process other
/// than its own reserver holds the row. It may adopt a dead reserver: it binds itself, records
/// itself as the runner and clears the token. While its reserver lives, the reserver's second
/// publish clears the token instead.
pub fn take_over_reserved_slot(
    state: &mut QueueState,
    key: &TurnKey,
    token: SlotToken,
    me: ProcessIdentity,
    liveness: &impl Liveness,
) -> Result<TakeOver, SlotError> {
    let row = state
        .row(key)
        .ok_or_else(|| SlotError::UnknownRow { key: key.clone() })?;
    let Some(reservation) = row.slot_reservation.clone() else {
        // The handoff may already be complete for this very process; then taking over is a no-op.
        let already_mine = matches!(row.state, RowState::Dispatching { dispatch_owner } if dispatch_owner == me)
            && state.runner(key).is_some_and(|r| r.identity == me);
        return if already_mine {
            Ok(TakeOver::Running {
                adopted_dead_parent: false,
            })
        } else {
            Err(SlotError::TokenMismatch {
                key: key.clone(),
                given: token.to_string(),
            })
        };
    };
    if reservation.token != token {
        return Err(SlotError::TokenMismatch {
            key: key.clone(),
            given: token.to_string(),
        });
    }
    if let Some(child) = reservation.child {
        if child != me && liveness.is_live(&child) {
            return Ok(TakeOver::Refused { holder: child });
        }
    }
    let holder = match row.state {
        RowState::Waiting { owner, .. } => Some(owner),
        RowState::Dispatching { dispatch_owner } => Some(dispatch_owner),
        RowState::Parked => None,
    };
    if let Some(holder) = holder {
        if holder != me && holder != reservation.reserver && liveness.is_live(&holder) {
            return Ok(TakeOver::Refused { holder });
        }
    }
    let reserver_dead = !liveness.is_live(&reservation.reserver);
    let row = state.row_mut(key)?;
    row.state = RowState::Dispatching { dispatch_owner: me };
    if reserver_dead {
        row.slot_reservation = None;
    } else if let Some(r) = row.slot_reservation.as_mut() {
        r.child = Some(me);
    }
    state.set_runner(key, me, false);
    debug_assert_took_over(state, key, token, me, reserver_dead);
    Ok(TakeOver::Running {
        adopted_dead_parent: reserver_dead,
    })
}

/// The postconditions of a take-over: the runner is the turn's recorded runner, and a live
/// reserver's reservation stays, bound to the runner, until the reserver's second publish.
fn debug_assert_took_over(
    state: &QueueState,
    key: &TurnKey,
    token: SlotToken,
    me: ProcessIdentity,
    reserver_dead: bool,
) {
    debug_assert!(
        state.runner(key).is_some_and(|r| r.identity == me),
        "a runner that took over is the turn's recorded runner"
    );
    debug_assert!(
        reserver_dead
            || state
                .row(key)
                .and_then(|r| r.slot_reservation.as_ref())
                .is_some_and(|r| r.token == token && r.child == Some(me)),
        "a live reserver's reservation stays, bound to the runner, until its second publish"
    );
}

/// The executor of `key` leaves the queue: its row and its runner record go in one publish.
/// Refused when `me` no longer dispatches the row (it was replaced), so a late runner cannot remove
/// its successor's row.
pub fn finish_turn(
    state: &mut QueueState,
    key: &TurnKey,
    me: ProcessIdentity,
) -> Result<(), SlotError> {
    match state.row(key) {
        Some(row) => match row.state {
            RowState::Dispatching { dispatch_owner } if dispatch_owner == me => {}
            _ => {
                return Err(SlotError::NotOwner {
                    key: key.clone(),
                    identity: me,
                })
            }
        },
        None => {
            if state.runner(key).is_some_and(|r| r.identity != me) {
                return Err(SlotError::NotOwner {
                    key: key.clone(),
                    identity: me,
                });
            }
        }
    }
    state.entries.retain(|e| &e.key != key);
    state.clear_runner(key);
    debug_assert!(state.row(key).is_none(), "a finished turn keeps no row");
    debug_assert!(
        state.runner(key).is_none(),
        "a finished turn keeps no runner record"
    );
    Ok(())
}
