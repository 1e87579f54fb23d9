//! `tollgate submit`: a new turn, enqueued and started (or parked) under the lock. Each locked
//! section is one core step ([`steps::submit`], [`steps::attached_start`]); [`crate::driver`]
//! performs its effect.

use crate::argv::{Argv, Env};
use crate::dispatch::{DispatchError, Handoff};
use crate::driver;
use crate::protocol::admission::Strategy;
use crate::protocol::slots::sections::{self, AttachedSection, AttachedStart, SubmitSection};
use crate::protocol::slots::steps::{Busy, Schedule};
use crate::protocol::slots::{
    validate_task_name, Dependency, HeldBack, Liveness, ProcessIdentity, RetryPlan, SlotToken,
    TurnKey,
};
use crate::protocol::turns::NewTurn;
use crate::queue::Store;
use crate::runner::{self, Execution};
use crate::runtime::Runtime;
use crate::tasks::{self, TurnOutcome, TurnRecord, MAX_ARGV};
use std::path::PathBuf;

#[derive(Clone, Debug)]
pub struct SubmitRequest {
    /// The task this turn belongs to; a fresh task name when `None`.
    pub task: Option<String>,
    /// Sets the task's strategy (kept with the task) before this turn is decided.
    pub strategy: Option<Strategy>,
    pub argv: Argv,
    pub cwd: Option<PathBuf>,
    pub env: Env,
    /// Labels recorded on the turn (`submit --label`).
    pub labels: Vec<String>,
    /// `submit --timeout`: see [`tasks::TurnRecord::timeout_millis`].
    pub timeout_millis: Option<u64>,
    /// `submit --priority`, `--delay`/`--at` (spec/slots.md, "Scheduling"); detached only.
    pub schedule: Schedule,
    /// The webhook delivery this turn serves (`serve`), recorded on the turn.
    pub delivery: Option<tasks::DeliveryMeta>,
}

/// `submit --after`/`--after-success` and `--retry`/`--backoff`: what orders a turn among
/// others (spec/slots.md, "Dependencies and retries"). Detached turns only.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sequencing {
    /// The turns the new one waits for (resolved by the caller; at most
    /// [`crate::protocol::slots::MAX_DEPENDENCIES`]).
    pub after: Vec<Dependency>,
    /// The first attempt's retry plan (`None`: no retries).
    pub retry: Option<RetryPlan>,
}

impl SubmitRequest {
    /// The first record's contents (its command, environment, labels, timeout, dependencies and
    /// retry plan) of the turn this request makes: what the submit section is given, so a test
    /// that runs the core's section beside the shell's gives it the same.
    pub fn new_turn(&self, attached: bool, sequencing: &Sequencing) -> NewTurn {
        NewTurn {
            argv: self.argv.clone(),
            cwd: self.cwd.clone(),
            env: self.env.clone(),
            attached,
            labels: self.labels.clone(),
            timeout_millis: self.timeout_millis,
            after: sequencing.after.clone(),
            retry: sequencing.retry,
            retry_of: None,
            delivery: self.delivery.clone(),
        }
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
    /// Refused: the task's strategy is `drop` and its turn `running` is in the queue (`busy`
    /// says how). Nothing was enqueued.
    Dropped { running: TurnKey, busy: Busy },
    /// Parked until the turns it waits for (`--after`) have left the queue.
    Held { waiting_on: Vec<TurnKey> },
    /// Not run: its `--after-success` dependency `cause` had ended other than completed with
    /// exit 0. Nothing was enqueued; the turn's record says so.
    DependencyFailed { cause: TurnKey },
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
    /// What holds the new turn back although its strategy would start it: a pause, a
    /// not-before time (`--delay`/`--at`, or a debounce deadline).
    pub held: Option<HeldBack>,
}

/// A fresh task name, unique enough to never collide in one home: `t-` and 12 hex digits of a v7
/// UUID's random part.
pub fn fresh_task_name() -> String {
    let hex = SlotToken::generate().as_uuid().simple().to_string();
    format!("t-{}", &hex[hex.len() - 12..])
}

/// Checks a request before the lock; returns its task name, `None` when the turn gets a fresh
/// task (named under the lock by [`tasks::fresh_task_for`]).
pub(crate) fn check_request(request: &SubmitRequest) -> Result<Option<String>, DispatchError> {
    let task = request.task.clone();
    if let Some(task) = &task {
        validate_task_name(task)?;
    }
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
pub fn submit_detached<L: Liveness, S: Store>(
    rt: &Runtime<L, S>,
    me: ProcessIdentity,
    request: SubmitRequest,
) -> Result<Submitted, DispatchError> {
    submit_detached_sequenced(rt, me, request, Sequencing::default())
}

/// [`submit_detached`] for a turn with dependencies and/or retries (`submit --after`,
/// `--after-success`, `--retry`): the section ([`decide_submit`]), then its effect (a waker, the
/// runner's handoff).
pub fn submit_detached_sequenced<L: Liveness, S: Store>(
    rt: &Runtime<L, S>,
    me: ProcessIdentity,
    request: SubmitRequest,
    sequencing: Sequencing,
) -> Result<Submitted, DispatchError> {
    let decided = decide_submit(rt, me, &request, &sequencing)?;
    if let Some(at_millis) = decided.placement.wake_at_millis() {
        driver::start_waker(rt.spawner.as_ref(), at_millis);
    }
    let placement = match decided.placement {
        sections::Placement::Spawn(handoff) => {
            // The turn is queued: a failed spawn (its row parked again) or a failed publish is no
            // "nothing was queued" (spec/store.md, "An uncertain commit").
            Placement::Started(
                driver::hand_off(rt, rt.spawner.as_ref(), handoff).map_err(|e| {
                    DispatchError::StateUnknown {
                        key: decided.key.clone(),
                        id: decided.queue_id,
                        what: format!("was queued, but starting its runner failed: {e}"),
                    }
                })?,
            )
        }
        sections::Placement::Park => Placement::Parked,
        sections::Placement::Pending => Placement::Pending,
        sections::Placement::Wait {
            ready_at_millis, ..
        } => Placement::Waiting { ready_at_millis },
        sections::Placement::Dropped { running, busy } => Placement::Dropped { running, busy },
        sections::Placement::Held { waiting_on, .. } => Placement::Held { waiting_on },
        sections::Placement::DependencyFailed { cause } => Placement::DependencyFailed { cause },
    };
    Ok(Submitted {
        key: decided.key,
        queue_id: decided.queue_id,
        placement,
        strategy: decided.strategy,
        superseded: decided.superseded,
        held: decided.held,
    })
}

/// The submit section ([`sections::submit`]): the turn's record, the core's decision and the
/// records its effect ends, in one transaction on the part of the queue the core names. A
/// generated task name is guessed from the store's unlocked hint of the next id (spec/store.md,
/// "A generated task name"), so the first section reads that task's line instead of learning the
/// name under the lock and running again; the section generates the name itself, and a wrong
/// guess costs one more section.
pub fn decide_submit<L: Liveness, S: Store>(
    rt: &Runtime<L, S>,
    me: ProcessIdentity,
    request: &SubmitRequest,
    sequencing: &Sequencing,
) -> Result<Decided, DispatchError> {
    let task = check_request(request)?;
    let guessed = match &task {
        Some(_) => None,
        None => rt
            .store
            .next_turn_id_hint()
            .map(|id| tasks::first_generated_name(&request.argv, id)),
    };
    let new = request.new_turn(false, sequencing);
    let fallback = fresh_task_name();
    crate::section::run_keeping(
        rt,
        &SubmitSection {
            task: task.as_deref(),
            fallback_task: &fallback,
            planned: task.as_deref().or(guessed.as_deref()),
            strategy: request.strategy,
            new: &new,
            schedule: request.schedule,
            me,
            fresh_token: rt.spawner.fresh_token(),
            now_millis: rt.spawner.now_millis(),
            cap: rt.cap(),
        },
    )
    .map_err(|failed| match failed.decided {
        // The commit's outcome is unknown after the step decided the turn: it may be queued.
        Some(decided) => DispatchError::StateUnknown {
            key: decided.key,
            id: decided.queue_id,
            what: format!("may or may not be queued: {}", failed.error),
        },
        None => failed.error,
    })
}

/// What the critical section of a detached submit decided.
pub type Decided = sections::Submitted;

/// Runs a new turn in the foreground of `me`: not capped, but it occupies a slot while it runs.
/// Afterwards it leaves the queue and starts the next parked row like any runner.
pub fn submit_attached<L: Liveness, S: Store>(
    rt: &Runtime<L, S>,
    me: ProcessIdentity,
    request: SubmitRequest,
) -> Result<Attached, DispatchError> {
    let task = check_request(&request)?;
    crate::process::signals::install()
        .map_err(|e| DispatchError::io("installing signal handlers", e.into()))?;
    let new = request.new_turn(true, &Sequencing::default());
    let fallback = fresh_task_name();
    // The turn is made by the first section; while the task's strategy has no room the
    // submitter waits in the foreground and tries the section again with the same turn.
    let mut created: Option<(TurnKey, Strategy)> = None;
    let mut told = false;
    let (turn, start, sent) = loop {
        // When the section was sent: the attached executor's first fence base on a fleet.
        let sent = crate::fleet::boottime_millis();
        let done = crate::section::run_keeping(
            rt,
            &AttachedSection {
                task: task.as_deref(),
                fallback_task: &fallback,
                strategy: request.strategy,
                new: &new,
                created: created.as_ref().map(|(key, strategy)| (key, *strategy)),
                me,
                fresh_token: rt.spawner.fresh_token(),
                now_millis: rt.spawner.now_millis(),
            },
        )
        .map_err(|failed| match failed.decided {
            // The turn's record (and, for a run, its start) may be committed.
            Some(decided) => DispatchError::StateUnknown {
                id: decided.turn.id.unwrap_or_default(),
                key: decided.turn.key,
                what: format!("may or may not be queued: {}", failed.error),
            },
            None => failed.error,
        })?;
        let key = &done.turn.key;
        let waiting = match &done.start {
            AttachedStart::WaitDrained => {
                "this host is drained (`tollgate drain --undo HOST` lets it start turns again)"
                    .to_string()
            }
            AttachedStart::WaitFor { running } => format!(
                "turn {} is active and the task's strategy is {}",
                running.turn, done.strategy
            ),
            _ => break (done.turn, done.start, sent),
        };
        if !told {
            eprintln!(
                "tollgate: task {} turn {} waits: {waiting}",
                key.task, key.turn
            );
            told = true;
        }
        if let Some(signal) = crate::process::signals::requested() {
            cancel_waiting(rt, key)?;
            return Err(DispatchError::io(
                "waiting for the task's strategy",
                std::io::Error::other(format!("interrupted by signal {signal}")),
            ));
        }
        created = Some((key.clone(), done.strategy));
        std::thread::sleep(std::time::Duration::from_millis(ATTACHED_POLL_MILLIS));
    };
    let work = match start {
        AttachedStart::Run { work } => work,
        AttachedStart::Dropped { running, busy } => {
            return Ok(Attached::Dropped {
                key: turn.key,
                running,
                busy,
            })
        }
        AttachedStart::WaitFor { .. } | AttachedStart::WaitDrained => {
            unreachable!("the loop above only ends on Run or Dropped")
        }
    };
    // The turn is queued and started from here on: an error is no "nothing was queued".
    let queued = |e: DispatchError, turn: &TurnRecord| DispatchError::StateUnknown {
        key: turn.key.clone(),
        id: turn.id.unwrap_or_default(),
        what: format!("was queued, but then: {e}"),
    };
    // On a fleet: its lease (taken by the section) renewed, self-fencing (spec/fleet.md).
    let lease = runner::lease::start_if_fleet(rt, &turn.key, me, work, None, sent)
        .map_err(|e| queued(e, &turn))?;
    let execution = runner::run_work(rt, &turn, me, work, true);
    drop(lease); // the work is dead: the renewals end, no fence any more
    let mut turn = turn;
    execution.record(&mut turn, tasks::now_millis());
    runner::record_and_start_next(rt, &turn, me).map_err(|e| queued(e, &turn))?;
    runner::hooks::run_hooks(&rt.home, &rt.config.hooks, &turn);
    Ok(Attached::Ran {
        key: turn.key,
        execution,
    })
}

/// How often a foreground submit whose task's strategy has no room tries its start again.
const ATTACHED_POLL_MILLIS: u64 = 100;

/// A foreground submit interrupted while it waited: its turn, which never ran and has no row,
/// ends cancelled ([`sections::EndUnrun`]).
fn cancel_waiting<L: Liveness, S: Store>(
    rt: &Runtime<L, S>,
    key: &TurnKey,
) -> Result<(), DispatchError> {
    crate::section::run(
        rt,
        &sections::EndUnrun {
            key,
            outcome: TurnOutcome::Cancelled,
            now_millis: rt.spawner.now_millis(),
        },
    )
}

/// How a foreground submit ended.
#[derive(Debug)]
pub enum Attached {
    Ran {
        key: TurnKey,
        execution: Execution,
    },
    /// The task's strategy is `drop` and its turn `running` is in the queue; nothing ran.
    Dropped {
        key: TurnKey,
        running: TurnKey,
        busy: Busy,
    },
}
