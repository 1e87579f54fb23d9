//! The executor of one turn: the hidden `worker runner`, and the foreground (`--attach`) path.
//!
//! Order: take the slot over (token-fenced), run the command outside the lock, record its result,
//! then leave the queue and start the next parked row with this process excluded (it is giving its
//! own slot away).

mod execute;
pub mod signals;

pub use execute::{execute_turn, Execution};

use crate::dispatch::{spawn_and_hand_off, DispatchError, Handoff};
use crate::protocol::slots::{
    finish_turn, start_next_parked, take_over_reserved_slot, Liveness, ProcessIdentity, SlotError,
    SlotToken, StartNext, TakeOver, TurnKey,
};
use crate::runtime::Runtime;
use crate::tasks::{self, TurnOutcome};

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
    let decision = rt.store.transact(|state| {
        take_over_reserved_slot(state, key, token, me, &rt.liveness).map_err(DispatchError::from)
    })?;
    if let TakeOver::Refused { holder } = decision {
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
    tasks::save_turn(&rt.home, &turn)?;
    let outcome = execution.outcome;
    let next = leave_and_start_next(rt, key, me)?;
    Ok(WorkerOutcome::Ran { outcome, next })
}

/// Leaves the queue for `key` and starts the oldest parked row in the slot this process frees.
pub fn leave_and_start_next<L: Liveness>(
    rt: &Runtime<L>,
    key: &TurnKey,
    me: ProcessIdentity,
) -> Result<Option<Handoff>, DispatchError> {
    let cap = rt.cap();
    let next = rt.store.transact(|state| {
        finish_turn(state, key, me)?;
        let next = start_next_parked(
            state,
            me,
            Some(me.pid),
            cap,
            SlotToken::generate(),
            &rt.liveness,
        )?;
        let snapshot = match &next {
            StartNext::Acquired { key, token } => state.row(key).cloned().map(|row| (row, *token)),
            StartNext::Saturated | StartNext::NoneParked => None,
        };
        Ok::<_, DispatchError>(snapshot)
    })?;
    let Some((row, token)) = next else {
        return Ok(None);
    };
    let first = spawn_and_hand_off(&rt.store, rt.spawner.as_ref(), me, token, &row)?;
    // While a handoff is under way its row counts twice (its holder and its reservation), so a
    // runner finishing meanwhile found no free slot and left its parked successor waiting. Now
    // that this handoff is done, start parked rows on the slots that are really free, as reconcile
    // would (no exclusion: any row this process still held would count). At most `cap` more.
    for _ in 0..cap {
        let more = rt.store.transact(|state| {
            let next =
                start_next_parked(state, me, None, cap, SlotToken::generate(), &rt.liveness)?;
            Ok::<_, DispatchError>(match next {
                StartNext::Acquired { key, token } => {
                    state.row(&key).cloned().map(|row| (row, token))
                }
                StartNext::Saturated | StartNext::NoneParked => None,
            })
        })?;
        let Some((row, token)) = more else { break };
        spawn_and_hand_off(&rt.store, rt.spawner.as_ref(), me, token, &row)?;
    }
    Ok(Some(first))
}
