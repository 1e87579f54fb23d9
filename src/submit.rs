//! `tollgate submit`: a new turn, enqueued and started (or parked) under the lock.

use crate::dispatch::{spawn_and_hand_off, DispatchError, Handoff};
use crate::fsutil::FileError;
use crate::protocol::admission::Strategy;
use crate::protocol::scopes::{plan_submit, SubmitPlan};
use crate::protocol::slots::{
    complete_runner_spawn_first, complete_runner_spawn_second, enqueue, park, reserve_runner_slot,
    set_ready_at, token_fenced_row_after_bind, validate_task_name, Liveness, ProcessIdentity,
    ReserveOutcome, SlotToken, TurnKey,
};
use crate::runner::{self, execute_turn, Execution};
use crate::runtime::Runtime;
use crate::tasks::{self, TurnOutcome, MAX_ARGV};
use std::collections::BTreeMap;
use std::path::PathBuf;

#[derive(Clone, Debug)]
pub struct SubmitRequest {
    /// The task this turn belongs to; a fresh task name when `None`.
    pub task: Option<String>,
    /// Sets the task's strategy (kept with the task) before this turn is decided.
    pub strategy: Option<Strategy>,
    pub argv: Vec<String>,
    pub cwd: Option<PathBuf>,
    pub env: BTreeMap<String, String>,
}

impl SubmitRequest {
    /// Writes the turn's record (and the task's strategy, when set) under the queue lock.
    fn create_turn(
        &self,
        home: &crate::home::Home,
        task: &str,
        attached: bool,
        now_millis: u64,
    ) -> Result<(tasks::TurnRecord, Strategy), crate::fsutil::FileError> {
        tasks::create_turn_with(
            home,
            task,
            self.strategy,
            self.argv.clone(),
            self.cwd.clone(),
            self.env.clone(),
            attached,
            now_millis,
        )
    }
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
    /// Waits in the task's scope (its strategy: a queue/debounce waiter or a place in line),
    /// startable from `ready_at_millis` (0: as soon as the scope has room).
    Waiting { ready_at_millis: u64 },
    /// Refused: the task's strategy is `drop` and `running` is busy. Nothing was enqueued.
    Dropped { running: TurnKey },
}

#[derive(Clone, Debug)]
pub struct Submitted {
    pub key: TurnKey,
    /// 0 when the turn was never enqueued (dropped).
    pub queue_id: u64,
    pub placement: Placement,
    pub strategy: Strategy,
    /// Waiting turns this one replaced; they ended as superseded.
    pub superseded: Vec<TurnKey>,
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
    submit_detached_with(rt, me, request, |_, _| Ok(()))
}

/// [`submit_detached`], with `prepare` completing the new turn's record (and writing files into its
/// directory) under the queue lock, before the record is saved again and the row enqueued: what
/// `serve` uses to attach a delivery's payload and identity durably before it acknowledges.
pub fn submit_detached_with<L: Liveness>(
    rt: &Runtime<L>,
    me: ProcessIdentity,
    request: SubmitRequest,
    prepare: impl FnOnce(&crate::home::Home, &mut tasks::TurnRecord) -> Result<(), FileError>,
) -> Result<Submitted, DispatchError> {
    let decided = decide_submit(rt, me, &request, prepare)?;
    let placement = match (decided.acquired, decided.placement) {
        (Some((row, token)), _) => Placement::Started(spawn_and_hand_off(
            &rt.store,
            rt.spawner.as_ref(),
            me,
            token,
            &row,
        )?),
        (None, Placement::Waiting { ready_at_millis }) if ready_at_millis > 0 => {
            if let Err(e) = rt.spawner.spawn_waker(ready_at_millis) {
                tracing::warn!("{e}; the debounced turn starts at the next finish or reconcile");
            }
            Placement::Waiting { ready_at_millis }
        }
        (None, placement) => placement,
    };
    Ok(Submitted {
        key: decided.key,
        queue_id: decided.queue_id,
        placement,
        strategy: decided.strategy,
        superseded: decided.superseded,
    })
}

/// The submit critical section: create the turn, apply the task's strategy, enqueue and reserve.
/// When `acquired` is set the caller must spawn (outside the lock) and hand the row off.
pub fn decide_submit<L: Liveness>(
    rt: &Runtime<L>,
    me: ProcessIdentity,
    request: &SubmitRequest,
    prepare: impl FnOnce(&crate::home::Home, &mut tasks::TurnRecord) -> Result<(), FileError>,
) -> Result<Decided, DispatchError> {
    let task = check_request(request)?;
    let mut prepare = Some(prepare);
    let cap = rt.cap();
    rt.store.transact(|state| {
        let now = tasks::now_millis();
        let (turn, strategy) = request.create_turn(&rt.home, &task, false, now)?;
        if let Some(prepare) = prepare.take() {
            let mut turn = turn.clone();
            prepare(&rt.home, &mut turn)?;
            tasks::save_turn(&rt.home, &turn)?;
        }
        let key = turn.key.clone();
        let plan = plan_submit(state, &key, strategy, now);
        let mut superseded = Vec::new();
        let (queue_id, placement, acquired) = match plan {
            SubmitPlan::Drop { running } => {
                tasks::end_unrun(&rt.home, &key, TurnOutcome::Dropped, now)?;
                (0, Placement::Dropped { running }, None)
            }
            SubmitPlan::Start => {
                let queue_id = enqueue(state, &key, me, now)?.queue_id();
                let fresh = SlotToken::generate();
                match reserve_runner_slot(state, &key, me, None, cap, fresh, &rt.liveness)? {
                    ReserveOutcome::Acquired { token, .. } => {
                        let row = state.row(&key).cloned();
                        (queue_id, Placement::Pending, row.map(|row| (row, token)))
                    }
                    ReserveOutcome::Saturated => {
                        park(state, &key)?;
                        (queue_id, Placement::Parked, None)
                    }
                    ReserveOutcome::Pending { .. } => (queue_id, Placement::Pending, None),
                }
            }
            SubmitPlan::Park {
                ready_at_millis,
                superseded: replaced,
            } => {
                for old in replaced {
                    state.entries.retain(|e| e.key != old);
                    tasks::end_unrun(&rt.home, &old, TurnOutcome::Superseded, now)?;
                    superseded.push(old);
                }
                let queue_id = enqueue(state, &key, me, now)?.queue_id();
                park(state, &key)?;
                set_ready_at(state, &key, ready_at_millis)?;
                (queue_id, Placement::Waiting { ready_at_millis }, None)
            }
            SubmitPlan::LineUp => {
                let queue_id = enqueue(state, &key, me, now)?.queue_id();
                park(state, &key)?;
                (queue_id, Placement::Waiting { ready_at_millis: 0 }, None)
            }
        };
        Ok::<_, DispatchError>(Decided {
            key,
            queue_id,
            strategy,
            superseded,
            placement,
            acquired,
        })
    })
}

/// What the critical section of a detached submit decided.
#[derive(Clone, Debug)]
pub struct Decided {
    pub key: TurnKey,
    pub queue_id: u64,
    pub strategy: Strategy,
    pub superseded: Vec<TurnKey>,
    pub placement: Placement,
    /// The row as published with its reservation, and the token: spawn for it.
    pub acquired: Option<(crate::protocol::slots::QueueEntry, SlotToken)>,
}

/// Runs a new turn in the foreground of `me`: not capped, but it occupies a slot while it runs.
/// Afterwards it leaves the queue and starts the next parked row like any runner.
pub fn submit_attached<L: Liveness>(
    rt: &Runtime<L>,
    me: ProcessIdentity,
    request: SubmitRequest,
) -> Result<Attached, DispatchError> {
    let task = check_request(&request)?;
    runner::signals::install()
        .map_err(|e| DispatchError::io("installing signal handlers", e.into()))?;
    let turn = rt.store.transact(|state| {
        let now = tasks::now_millis();
        let (mut turn, strategy) = request.create_turn(&rt.home, &task, true, now)?;
        let key = turn.key.clone();
        // A foreground run never waits in the task's line, but a `drop` task still refuses it.
        if let SubmitPlan::Drop { running } = plan_submit(state, &key, strategy, now) {
            tasks::end_unrun(&rt.home, &key, TurnOutcome::Dropped, now)?;
            return Ok(Err((key, running)));
        }
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
        Ok::<_, DispatchError>(Ok(turn))
    })?;
    let turn = match turn {
        Ok(turn) => turn,
        Err((key, running)) => return Ok(Attached::Dropped { key, running }),
    };
    let execution = execute_turn(&rt.home, &turn, true);
    let mut turn = turn;
    execution.record(&mut turn, tasks::now_millis());
    runner::record_and_start_next(rt, &turn, me)?;
    Ok(Attached::Ran {
        key: turn.key,
        execution,
    })
}

/// How a foreground submit ended.
#[derive(Debug)]
pub enum Attached {
    Ran {
        key: TurnKey,
        execution: Execution,
    },
    /// The task's strategy is `drop` and `running` is busy; nothing ran.
    Dropped {
        key: TurnKey,
        running: TurnKey,
    },
}
