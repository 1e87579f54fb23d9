//! `tollgate submit`: a new turn, enqueued and started (or parked) under the lock.

use crate::dispatch::{spawn_and_hand_off, DispatchError, Handoff};
use crate::protocol::slots::{
    complete_runner_spawn_first, complete_runner_spawn_second, enqueue, park, reserve_runner_slot,
    token_fenced_row_after_bind, validate_task_name, Liveness, ProcessIdentity, ReserveOutcome,
    SlotToken, TurnKey,
};
use crate::runner::{self, execute_turn, Execution};
use crate::runtime::Runtime;
use crate::tasks::{self, MAX_ARGV};
use std::collections::BTreeMap;
use std::path::PathBuf;

#[derive(Clone, Debug)]
pub struct SubmitRequest {
    /// The task this turn belongs to; a fresh task name when `None`.
    pub task: Option<String>,
    pub argv: Vec<String>,
    pub cwd: Option<PathBuf>,
    pub env: BTreeMap<String, String>,
}

/// Where a detached submit left its turn.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Placement {
    /// A runner was spawned for it.
    Started(Handoff),
    /// All slots were busy: the row waits for one.
    Parked,
    /// Another live process already holds the turn (only possible for a re-submitted row).
    Pending,
}

#[derive(Clone, Debug)]
pub struct Submitted {
    pub key: TurnKey,
    pub queue_id: u64,
    pub placement: Placement,
}

/// A fresh task name, unique enough to never collide in one home: `t-` and 12 hex digits of a v7
/// UUID's random part.
pub fn fresh_task_name() -> String {
    let hex = SlotToken::generate().as_uuid().simple().to_string();
    format!("t-{}", &hex[hex.len() - 12..])
}

fn check_request(request: &SubmitRequest) -> Result<String, DispatchError> {
    let task = request.task.clone().unwrap_or_else(fresh_task_name);
    validate_task_name(&task)?;
    if request.argv.is_empty() {
        return Err(DispatchError::io(
            "submit",
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "no command given after --",
            ),
        ));
    }
    if request.argv.len() > MAX_ARGV {
        return Err(DispatchError::io(
            "submit",
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("the command has more than {MAX_ARGV} arguments"),
            ),
        ));
    }
    Ok(task)
}

/// Creates the turn, enqueues it and reserves a slot in one critical section; spawns its runner
/// outside the lock if a slot was acquired, parks it otherwise.
pub fn submit_detached<L: Liveness>(
    rt: &Runtime<L>,
    me: ProcessIdentity,
    request: SubmitRequest,
) -> Result<Submitted, DispatchError> {
    let task = check_request(&request)?;
    let cap = rt.cap();
    let (key, queue_id, outcome, snapshot) = rt.store.transact(|state| {
        let now = tasks::now_millis();
        let turn = tasks::create_turn(
            &rt.home,
            &task,
            request.argv.clone(),
            request.cwd.clone(),
            request.env.clone(),
            false,
            now,
        )?;
        let key = turn.key.clone();
        let queue_id = enqueue(state, &key, me, now)?.queue_id();
        let outcome = reserve_runner_slot(
            state,
            &key,
            me,
            None,
            cap,
            SlotToken::generate(),
            &rt.liveness,
        )?;
        if outcome == ReserveOutcome::Saturated {
            park(state, &key)?;
        }
        let snapshot = state.row(&key).cloned();
        Ok::<_, DispatchError>((key, queue_id, outcome, snapshot))
    })?;
    let placement = match (outcome, snapshot) {
        (ReserveOutcome::Acquired { token, .. }, Some(row)) => Placement::Started(
            spawn_and_hand_off(&rt.store, rt.spawner.as_ref(), me, token, &row)?,
        ),
        (ReserveOutcome::Saturated, _) => Placement::Parked,
        _ => Placement::Pending,
    };
    Ok(Submitted {
        key,
        queue_id,
        placement,
    })
}

/// Runs a new turn in the foreground of `me`: not capped, but it occupies a slot while it runs.
/// Afterwards it leaves the queue and starts the next parked row like any runner.
pub fn submit_attached<L: Liveness>(
    rt: &Runtime<L>,
    me: ProcessIdentity,
    request: SubmitRequest,
) -> Result<(TurnKey, Execution), DispatchError> {
    let task = check_request(&request)?;
    runner::signals::install()
        .map_err(|e| DispatchError::io("installing signal handlers", e.into()))?;
    let turn = rt.store.transact(|state| {
        let now = tasks::now_millis();
        let mut turn = tasks::create_turn(
            &rt.home,
            &task,
            request.argv.clone(),
            request.cwd.clone(),
            request.env.clone(),
            true,
            now,
        )?;
        let key = turn.key.clone();
        enqueue(state, &key, me, now)?;
        // Attached starts are not capped: the cap argument is usize::MAX.
        let token = match reserve_runner_slot(
            state,
            &key,
            me,
            None,
            usize::MAX,
            SlotToken::generate(),
            &rt.liveness,
        )? {
            ReserveOutcome::Acquired { token, .. } => token,
            other => {
                return Err(DispatchError::io(
                    format!("starting {key} in the foreground"),
                    std::io::Error::other(format!("the slot protocol answered {other:?}")),
                ))
            }
        };
        let snapshot = state
            .row(&key)
            .cloned()
            .ok_or_else(|| crate::protocol::slots::SlotError::UnknownRow { key: key.clone() })?;
        complete_runner_spawn_first(state, &key, token, me)?;
        let expected = token_fenced_row_after_bind(&snapshot, token, me)?;
        complete_runner_spawn_second(state, &expected, me, true)?;
        turn.started_at_millis = Some(now);
        turn.runner = Some(me);
        tasks::save_turn(&rt.home, &turn)?;
        Ok::<_, DispatchError>(turn)
    })?;
    let execution = execute_turn(&rt.home, &turn, true);
    let mut turn = turn;
    execution.record(&mut turn, tasks::now_millis());
    tasks::save_turn(&rt.home, &turn)?;
    runner::leave_and_start_next(rt, &turn.key, me)?;
    Ok((turn.key, execution))
}
