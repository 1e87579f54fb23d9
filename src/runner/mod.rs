//! The executor of one turn: the hidden `worker runner`, and the foreground (`--attach`) path.
//!
//! Order: take the slot over (token-fenced), run the command outside the lock, record its result,
//! then leave the queue and start the next parked row with this process excluded (it is giving its
//! own slot away).

mod execute;
pub mod signals;

pub use execute::{execute_turn, Execution};

use crate::dispatch::{spawn_and_hand_off, DispatchError, Handoff};
use crate::protocol::scopes::start_filter;
use crate::protocol::slots::{
    finish_turn, start_next_parked_where, take_over_reserved_slot, Liveness, ProcessIdentity,
    QueueEntry, SlotError, SlotToken, StartNext, TakeOver, TurnKey,
};
use crate::runtime::Runtime;
use crate::tasks::{self, TurnOutcome, TurnRecord};

/// What a detached runner did, for its exit code and its log line.
#[derive(Debug)]
pub enum WorkerOutcome {
    /// Took the slot over and ran the turn.
    Ran {
        outcome: TurnOutcome,
        next: Option<Handoff>,
    },
    /// Another live process holds the row; nothing ran.
    Refused { holder: ProcessIdentity },
    /// The turn already had a result (a previous runner died while leaving); nothing ran again.
    AlreadySettled,
}

/// The hidden `worker runner <task> <turn> --slot-token <uuid>`.
pub fn run_worker<L: Liveness>(
    rt: &Runtime<L>,
    key: &TurnKey,
    token: SlotToken,
) -> Result<WorkerOutcome, DispatchError> {
    let me = crate::process::self_identity()
        .map_err(|e| DispatchError::io("reading this runner's identity", e))?;
    signals::install().map_err(|e| DispatchError::io("installing signal handlers", e.into()))?;
    if let TakeOver::Refused { holder } = take_over(rt, key, token, me)? {
        return Ok(WorkerOutcome::Refused { holder });
    }
    let mut turn = tasks::load_turn(&rt.home, key)?
        .ok_or_else(|| SlotError::UnknownRow { key: key.clone() })?;
    if turn.is_settled() {
        leave_and_start_next(rt, key, me)?;
        return Ok(WorkerOutcome::AlreadySettled);
    }
    turn.started_at_millis = Some(tasks::now_millis());
    turn.runner = Some(me);
    tasks::save_turn(&rt.home, &turn)?;
    let execution = execute_turn(&rt.home, &turn, false);
    execution.record(&mut turn, tasks::now_millis());
    let outcome = execution.outcome;
    let next = record_and_start_next(rt, &turn, me)?;
    Ok(WorkerOutcome::Ran { outcome, next })
}

/// The runner's first critical section: take the reserved slot over under `token`.
pub fn take_over<L: Liveness>(
    rt: &Runtime<L>,
    key: &TurnKey,
    token: SlotToken,
    me: ProcessIdentity,
) -> Result<TakeOver, DispatchError> {
    rt.store.transact(|state| {
        take_over_reserved_slot(state, key, token, me, &rt.liveness).map_err(DispatchError::from)
    })
}

/// Leaves the queue for `key` and starts the oldest parked row in the slot this process frees.
pub fn leave_and_start_next<L: Liveness>(
    rt: &Runtime<L>,
    key: &TurnKey,
    me: ProcessIdentity,
) -> Result<Option<Handoff>, DispatchError> {
    match leave_and_pick_next(rt, key, me)? {
        Some((row, token)) => {
            spawn_and_hand_off(&rt.store, rt.spawner.as_ref(), me, token, &row).map(Some)
        }
        None => Ok(None),
    }
}

/// Records the result of `turn` (whose command has run) and leaves the queue in one critical
/// section, so nobody sees the turn ended while its row still holds the task's scope (a `drop`
/// submit after `submit --wait` returned was refused with "turn N is running"). Retried while the
/// disk is full ([`tasks::retry_while_disk_full`]): the slot stays occupied, nothing runs again.
pub fn record_and_start_next<L: Liveness>(
    rt: &Runtime<L>,
    turn: &TurnRecord,
    me: ProcessIdentity,
) -> Result<Option<Handoff>, DispatchError> {
    let picked = tasks::retry_while_disk_full(&rt.home, &turn.key, || {
        pick_next(rt, &turn.key, me, Some(turn))
    })?;
    match picked {
        Some((row, token)) => {
            spawn_and_hand_off(&rt.store, rt.spawner.as_ref(), me, token, &row).map(Some)
        }
        None => Ok(None),
    }
}

/// The finishing runner's critical section: leave the queue and reserve the next parked row that
/// may start (excluding itself from identities). Returns that row as published, with its token.
pub fn leave_and_pick_next<L: Liveness>(
    rt: &Runtime<L>,
    key: &TurnKey,
    me: ProcessIdentity,
) -> Result<Option<(QueueEntry, SlotToken)>, DispatchError> {
    pick_next(rt, key, me, None)
}

/// [`leave_and_pick_next`], first saving `result` (the turn's ended record) under the same lock.
fn pick_next<L: Liveness>(
    rt: &Runtime<L>,
    key: &TurnKey,
    me: ProcessIdentity,
    result: Option<&TurnRecord>,
) -> Result<Option<(QueueEntry, SlotToken)>, DispatchError> {
    let cap = rt.cap();
    rt.store.transact(|state| {
        if let Some(turn) = result {
            tasks::save_result(&rt.home, turn)?;
        }
        finish_turn(state, key, me)?;
        let strategies = tasks::parked_strategies(&rt.home, state)?;
        let next = start_next_parked_where(
            state,
            me,
            Some(me.pid),
            cap,
            SlotToken::generate(),
            &rt.liveness,
            &start_filter(&strategies, tasks::now_millis()),
        )?;
        let snapshot = match &next {
            StartNext::Acquired { key, token } => state.row(key).cloned().map(|row| (row, *token)),
            StartNext::Saturated | StartNext::NoneParked => None,
        };
        Ok::<_, DispatchError>(snapshot)
    })
}
