//! `tollgate submit`: a new turn, enqueued and started (or parked) under the lock. Each locked
//! section is one core step ([`steps::submit`], [`steps::attached_start`]); [`crate::driver`]
//! performs its effect.

use crate::argv::{Argv, Env};
use crate::dispatch::SectionError;
use crate::dispatch::{DispatchError, Handoff};
use crate::driver;
use crate::fsutil::FileError;
use crate::protocol::admission::Strategy;
use crate::protocol::slots::steps::{
    self, AttachedEffect, AttachedInput, Busy, Loaded, Reads, Schedule, SubmitDecision,
    SubmitEffect, SubmitInput,
};
use crate::protocol::slots::{
    self, validate_task_name, AfterSubmit, Dependency, HeldBack, Liveness, ProcessIdentity,
    RetryPlan, SlotToken, TurnKey,
};
use crate::queue::{Commit, Store, StoreError};
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
    /// Writes the turn's record (and the task's strategy, when set) under the queue lock, with
    /// the short id its row will get (`state` is the queue before the submit step).
    fn create_turn(
        &self,
        home: &crate::home::Home,
        task: &str,
        attached: bool,
        now_millis: u64,
        state: &crate::protocol::slots::QueueState,
    ) -> Result<(tasks::TurnRecord, Strategy), crate::fsutil::FileError> {
        self.create_sequenced_turn(
            home,
            task,
            attached,
            now_millis,
            state,
            &Sequencing::default(),
        )
    }

    /// [`SubmitRequest::create_turn`] with the turn's dependencies and retry plan recorded.
    fn create_sequenced_turn(
        &self,
        home: &crate::home::Home,
        task: &str,
        attached: bool,
        now_millis: u64,
        state: &crate::protocol::slots::QueueState,
        sequencing: &Sequencing,
    ) -> Result<(tasks::TurnRecord, Strategy), crate::fsutil::FileError> {
        let meta = tasks::TurnMeta {
            id: Some(tasks::predicted_turn_id(state)),
            labels: self.labels.clone(),
            timeout_millis: self.timeout_millis,
            after: sequencing.after.clone(),
            retry: sequencing.retry,
            retry_of: None,
        };
        tasks::create_turn_with(
            home,
            task,
            self.strategy,
            self.argv.clone(),
            self.cwd.clone(),
            self.env.clone(),
            attached,
            now_millis,
            meta,
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
fn check_request(request: &SubmitRequest) -> Result<Option<String>, DispatchError> {
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
    submit_detached_with(rt, me, request, |_, _| Ok(()))
}

/// [`submit_detached`], with `prepare` completing the new turn's record (and writing files into its
/// directory) under the queue lock, before the record is saved again and the row enqueued: what
/// `serve` uses to attach a delivery's payload and identity durably before it acknowledges.
pub fn submit_detached_with<L: Liveness, S: Store>(
    rt: &Runtime<L, S>,
    me: ProcessIdentity,
    request: SubmitRequest,
    prepare: impl FnOnce(&crate::home::Home, &mut tasks::TurnRecord) -> Result<(), FileError>,
) -> Result<Submitted, DispatchError> {
    submit_detached_sequenced(rt, me, request, Sequencing::default(), prepare)
}

/// [`submit_detached_with`] for a turn with dependencies and/or retries (`submit --after`,
/// `--after-success`, `--retry`).
pub fn submit_detached_sequenced<L: Liveness, S: Store>(
    rt: &Runtime<L, S>,
    me: ProcessIdentity,
    request: SubmitRequest,
    sequencing: Sequencing,
    prepare: impl FnOnce(&crate::home::Home, &mut tasks::TurnRecord) -> Result<(), FileError>,
) -> Result<Submitted, DispatchError> {
    let (decided, held) = decide_sequenced(rt, me, &request, &sequencing, prepare)?;
    if let Some(placement) = held {
        if let SubmitEffect::Wait {
            wake_at_millis: Some(at_millis),
            ..
        } = decided.decision.effect
        {
            driver::start_waker(rt.spawner.as_ref(), at_millis);
        }
        return Ok(Submitted {
            key: decided.key,
            queue_id: decided.decision.queue_id,
            placement,
            strategy: decided.strategy,
            superseded: Vec::new(),
            held: decided.decision.held,
        });
    }
    let placement = match decided.decision.effect {
        // The turn is queued: a failed spawn (its row parked again) or a failed publish is no
        // "nothing was queued" (spec/store.md, "An uncertain commit").
        SubmitEffect::Spawn(handoff) => Placement::Started(
            driver::hand_off(&rt.store, rt.spawner.as_ref(), handoff).map_err(|e| {
                DispatchError::StateUnknown {
                    key: decided.key.clone(),
                    id: decided.decision.queue_id,
                    what: format!("was queued, but starting its runner failed: {e}"),
                }
            })?,
        ),
        SubmitEffect::Park => Placement::Parked,
        SubmitEffect::Pending => Placement::Pending,
        SubmitEffect::Wait {
            ready_at_millis,
            wake_at_millis,
        } => {
            if let Some(at_millis) = wake_at_millis {
                driver::start_waker(rt.spawner.as_ref(), at_millis);
            }
            Placement::Waiting { ready_at_millis }
        }
        SubmitEffect::Dropped { running, busy } => Placement::Dropped { running, busy },
    };
    Ok(Submitted {
        key: decided.key,
        queue_id: decided.decision.queue_id,
        placement,
        strategy: decided.strategy,
        superseded: decided.decision.superseded,
        held: decided.decision.held,
    })
}

/// The submit critical section: create the turn's record, call the core's submit step, and end
/// the turns its effect ends (superseded waiters, a dropped new turn) under the same lock.
pub fn decide_submit<L: Liveness, S: Store>(
    rt: &Runtime<L, S>,
    me: ProcessIdentity,
    request: &SubmitRequest,
    prepare: impl FnOnce(&crate::home::Home, &mut tasks::TurnRecord) -> Result<(), FileError>,
) -> Result<Decided, DispatchError> {
    decide_sequenced(rt, me, request, &Sequencing::default(), prepare).map(|(decided, _)| decided)
}

/// [`decide_submit`] with dependencies: the core's [`steps::submit`], or with `--after`
/// [`slots::submit_after`] (fed the dependencies' outcomes read under this lock). A held or
/// dependency-failed turn comes back with its placement (its `decision` then has no effect to
/// perform: `Pending`).
///
/// The section loads the part of the queue the core names for it ([`steps::submit_reads`]:
/// the task's rows, the dependencies' rows, and what every section reads; spec/store.md, "What a
/// section loads"; for a named task whose request sets `concurrent=N` or no strategy,
/// [`steps::submit_line_reads`]: the task's line only as far as its first parked row), so its
/// cost does not grow with the parked rows of other tasks, nor with its own task's line under
/// `concurrent=N`. When the core
/// says the part did not suffice ([`steps::submit_covers`] before the step: a generated task
/// name, a queue at its bound; [`steps::submit_stayed_inside`] after it), the section is rolled
/// back and run again with what it needs, at most [`PART_ATTEMPTS`] times, then on the whole
/// queue.
fn decide_sequenced<L: Liveness, S: Store>(
    rt: &Runtime<L, S>,
    me: ProcessIdentity,
    request: &SubmitRequest,
    sequencing: &Sequencing,
    prepare: impl FnOnce(&crate::home::Home, &mut tasks::TurnRecord) -> Result<(), FileError>,
) -> Result<(Decided, Option<Placement>), DispatchError> {
    let task = check_request(request)?;
    let mut prepare = Some(prepare);
    // A named task whose request sets `concurrent=N` (serve's routes), or sets no strategy (the
    // task's own, `concurrent=1` unless its record says otherwise: the common CLI submit), reads
    // its line only as far as the first parked row; the step's strategy decides in the section
    // whether that did, and a task of another strategy takes one more section on its rows.
    // A generated name is guessed from the store's unlocked hint of the next id (spec/store.md,
    // "A generated task name"), so the first section reads that task's line instead of learning
    // the name under the lock and running again; the section generates the name itself, and a
    // wrong guess is one more section, as without a hint.
    let guessed = match &task {
        Some(_) => None,
        None => rt
            .store
            .next_turn_id_hint()
            .map(|id| tasks::first_generated_name(&request.argv, id)),
    };
    let first = match (task.as_deref().or(guessed.as_deref()), request.strategy) {
        (Some(task), Some(Strategy::Concurrent { .. }) | None) => {
            steps::submit_line_reads(task, &sequencing.after)
        }
        (task, _) => steps::submit_reads(task, &sequencing.after),
    };
    let mut reads = Reads::Part(first);
    for _ in 0..PART_ATTEMPTS {
        match submit_section(
            rt,
            me,
            request,
            sequencing,
            task.as_deref(),
            &mut prepare,
            &reads,
        ) {
            Err(SectionError::Unread(next)) => reads = next,
            Err(SectionError::Failed(e)) => return Err(e),
            Ok(decided) => return Ok(decided),
        }
    }
    let everything = &Reads::Everything;
    submit_section(
        rt,
        me,
        request,
        sequencing,
        task.as_deref(),
        &mut prepare,
        everything,
    )
    .map_err(|e| e.on_whole_queue("submit"))
}

/// Sections of one submit on a part of the queue before it reads the whole queue: the first
/// names the given task (or, for a generated name, the name guessed from the store's hint, or
/// none without one), the second the name generated in the first when the guess was wrong; a
/// third covers a concurrent submit that took the id the second generated the name from.
const PART_ATTEMPTS: usize = 3;

/// One submit section on what `reads` names (see [`decide_sequenced`]).
#[allow(clippy::type_complexity)]
fn submit_section<L: Liveness, S: Store>(
    rt: &Runtime<L, S>,
    me: ProcessIdentity,
    request: &SubmitRequest,
    sequencing: &Sequencing,
    task: Option<&str>,
    prepare: &mut Option<
        impl FnOnce(&crate::home::Home, &mut tasks::TurnRecord) -> Result<(), FileError>,
    >,
    reads: &Reads,
) -> Result<(Decided, Option<Placement>), SectionError> {
    let cap = rt.cap();
    // The turn and id the step decided, for an error whose commit's outcome is unknown.
    let decided = std::cell::RefCell::new(None);
    rt.store
        .transact_reading(Commit::Promise, reads, |state, loaded| {
            let now = rt.spawner.now_millis();
            let task = tasks::fresh_task_for(&rt.home, task, &request.argv, state)?;
            if !steps::submit_covers(loaded, &task) {
                let named = steps::submit_reads(Some(&task), &sequencing.after);
                let next = match loaded {
                    Loaded::Part { reads, .. }
                        if reads.tasks.contains(&task) || reads.lines.contains(&task) =>
                    {
                        Reads::Everything
                    }
                    _ => Reads::Part(named),
                };
                return Err(SectionError::Unread(next));
            }
            let loaded_rows: Vec<TurnKey> = match loaded {
                Loaded::Whole => Vec::new(),
                Loaded::Part { .. } => state.entries.iter().map(|e| e.key.clone()).collect(),
            };
            let (turn, strategy) =
                request.create_sequenced_turn(&rt.home, &task, false, now, state, sequencing)?;
            if !steps::submit_line_suffices(loaded, &task, strategy) {
                let named = steps::submit_reads(Some(&task), &sequencing.after);
                return Err(SectionError::Unread(Reads::Part(named)));
            }
            let key = turn.key.clone();
            let input = SubmitInput {
                key: &key,
                me,
                fresh_token: rt.spawner.fresh_token(),
                now_millis: now,
                cap,
                strategy,
                liveness: &rt.liveness,
            };
            let ended = crate::deps::ended_dependencies(&rt.home, state, &sequencing.after)?;
            let after = &sequencing.after;
            let (decision, held) =
                match slots::submit_after(state, input, after, &ended, request.schedule)? {
                    AfterSubmit::Submitted(decision) => (*decision, None),
                    AfterSubmit::Held {
                        queue_id,
                        waiting_on,
                        wake_at_millis,
                    } => (
                        held_decision(queue_id, wake_at_millis),
                        Some(Placement::Held {
                            waiting_on: waiting_on.into_iter().map(|d| d.key).collect(),
                        }),
                    ),
                    AfterSubmit::DependencyFailed { cause } => {
                        crate::deps::end_dependency_failed(&rt.home, &key, &cause, now)?;
                        (unperformed(0), Some(Placement::DependencyFailed { cause }))
                    }
                };
            for old in &decision.superseded {
                tasks::end_unrun(&rt.home, old, TurnOutcome::Superseded, now)?;
                crate::deps::departed_on_disk(rt, state, old, me)?;
            }
            if !steps::submit_stayed_inside(loaded, &loaded_rows, state, &decision.superseded) {
                return Err(SectionError::Unread(Reads::Everything));
            }
            // After the step (the same section, so the same commit): a rerun on more of the
            // queue must still find `prepare` to call.
            if let Some(prepare) = prepare.take() {
                // The step rewrote the new turn's record only when it ended it dependency-failed.
                let mut turn = match held {
                    Some(Placement::DependencyFailed { .. }) => {
                        tasks::load_turn(&rt.home, &key)?.unwrap_or_else(|| turn.clone())
                    }
                    _ => turn.clone(),
                };
                let before = turn.clone();
                prepare(&rt.home, &mut turn)?;
                // One write of the record per step: saved again only when `prepare` changed it
                // (serve's delivery); a CLI submit's record stays the one `create_turn` wrote.
                if turn != before {
                    tasks::save_turn(&rt.home, &turn)?;
                }
            }
            tasks::settle_turn_id(&rt.home, &key, turn.id, decision.queue_id)?;
            if let SubmitEffect::Dropped { .. } = decision.effect {
                tasks::end_unrun(&rt.home, &key, TurnOutcome::Dropped, now)?;
            }
            *decided.borrow_mut() = Some((key.clone(), decision.queue_id));
            Ok((
                Decided {
                    key,
                    strategy,
                    decision,
                },
                held,
            ))
        })
        .map_err(|e| match e {
            SectionError::Failed(e) => {
                SectionError::Failed(commit_unknown(e, decided.into_inner()))
            }
            unread => unread,
        })
}

/// A submit section's error: one whose commit's outcome is unknown ([`StoreError::Uncertain`])
/// after the step decided `decided` (the turn and its id) names the turn, since it may be queued.
fn commit_unknown(error: DispatchError, decided: Option<(TurnKey, u64)>) -> DispatchError {
    match (error, decided) {
        (DispatchError::Store(e @ StoreError::Uncertain { .. }), Some((key, id))) => {
            DispatchError::StateUnknown {
                key,
                id,
                what: format!("may or may not be queued: {e}"),
            }
        }
        (error, _) => error,
    }
}

/// A decision with nothing left for the driver to perform (a held or dependency-failed turn).
fn unperformed(queue_id: u64) -> SubmitDecision {
    SubmitDecision {
        queue_id,
        effect: SubmitEffect::Pending,
        superseded: Vec::new(),
        held: None,
    }
}

/// The decision of a row held for its dependencies: nothing to perform, but the waker the core
/// asked for when the row also has a not-before time (`--delay`/`--at`): the dependencies may
/// end before it, and then only time starts the row.
fn held_decision(queue_id: u64, wake_at_millis: Option<u64>) -> SubmitDecision {
    match wake_at_millis {
        Some(at) => SubmitDecision {
            effect: SubmitEffect::Wait {
                ready_at_millis: at,
                wake_at_millis: Some(at),
            },
            ..unperformed(queue_id)
        },
        None => unperformed(queue_id),
    }
}

/// What the critical section of a detached submit decided.
#[derive(Clone, Debug)]
pub struct Decided {
    pub key: TurnKey,
    pub strategy: Strategy,
    /// The core's decision; its effect is for [`crate::driver`] to perform.
    pub decision: SubmitDecision,
}

/// Runs a new turn in the foreground of `me`: not capped, but it occupies a slot while it runs.
/// Afterwards it leaves the queue and starts the next parked row like any runner.
pub fn submit_attached<L: Liveness, S: Store>(
    rt: &Runtime<L, S>,
    me: ProcessIdentity,
    request: SubmitRequest,
) -> Result<Attached, DispatchError> {
    let task = check_request(&request)?;
    runner::signals::install()
        .map_err(|e| DispatchError::io("installing signal handlers", e.into()))?;
    // The turn is created by the first section; while the task's strategy has no room the
    // submitter waits in the foreground and tries the section again with the same turn.
    let mut created: Option<(TurnRecord, Strategy)> = None;
    let mut told = false;
    let (turn, effect, sent) = loop {
        // When the section was sent: the attached executor's first fence base on a fleet.
        let sent = crate::fleet::boottime_millis();
        let (turn, strategy, effect) = attached_section(rt, me, &request, &task, &created)?;
        match effect {
            AttachedEffect::Wait { running } => {
                if !told && running == turn.key {
                    eprintln!(
                        "tollgate: task {} turn {} waits: this host is drained \
                         (`tollgate drain --undo HOST` lets it start turns again)",
                        turn.key.task, turn.key.turn
                    );
                    told = true;
                }
                if !told {
                    eprintln!(
                        "tollgate: task {} turn {} waits: turn {} is active and the task's \
                         strategy is {strategy}",
                        turn.key.task, turn.key.turn, running.turn
                    );
                    told = true;
                }
                if let Some(signal) = runner::signals::requested() {
                    let now = rt.spawner.now_millis();
                    tasks::end_unrun(&rt.home, &turn.key, TurnOutcome::Cancelled, now)?;
                    return Err(DispatchError::io(
                        "waiting for the task's strategy",
                        std::io::Error::other(format!("interrupted by signal {signal}")),
                    ));
                }
                created = Some((turn, strategy));
                std::thread::sleep(std::time::Duration::from_millis(ATTACHED_POLL_MILLIS));
            }
            effect => break (turn, effect, sent),
        }
    };
    let work = match effect {
        AttachedEffect::Run { work } => work,
        AttachedEffect::Dropped { running, busy } => {
            return Ok(Attached::Dropped {
                key: turn.key,
                running,
                busy,
            })
        }
        AttachedEffect::Wait { .. } => unreachable!("the loop above only ends on Run or Dropped"),
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

/// One attached start section: the turn's record (created by the first call, `created` after),
/// then the core's [`steps::attached_start`] and the record writes its effect implies.
fn attached_section<L: Liveness, S: Store>(
    rt: &Runtime<L, S>,
    me: ProcessIdentity,
    request: &SubmitRequest,
    task: &Option<String>,
    created: &Option<(TurnRecord, Strategy)>,
) -> Result<(TurnRecord, Strategy, AttachedEffect), DispatchError> {
    // The turn and its id once the step decided, for an error whose commit's outcome is unknown.
    let decided = std::cell::RefCell::new(None);
    rt.store
        .transact(|state| {
            let now = rt.spawner.now_millis();
            let (mut turn, strategy) = match created {
                Some((turn, strategy)) => (turn.clone(), *strategy),
                None => {
                    let task =
                        tasks::fresh_task_for(&rt.home, task.as_deref(), &request.argv, state)?;
                    request.create_turn(&rt.home, &task, true, now, state)?
                }
            };
            let effect = steps::attached_start(
                state,
                AttachedInput {
                    key: &turn.key,
                    me,
                    fresh_token: rt.spawner.fresh_token(),
                    now_millis: now,
                    strategy,
                    liveness: &rt.liveness,
                },
            )?;
            match &effect {
                AttachedEffect::Run { .. } => {
                    crate::runner::lease::acquire_own(me)?;
                    turn.id = state.row(&turn.key).map(|r| r.queue_id);
                    turn.started_at_millis = Some(now);
                    turn.runner = Some(me);
                    turn.host = crate::fleet::section_host();
                    tasks::save_turn(&rt.home, &turn)?;
                }
                AttachedEffect::Dropped { .. } => {
                    tasks::settle_turn_id(&rt.home, &turn.key, turn.id, 0)?;
                    tasks::end_unrun(&rt.home, &turn.key, TurnOutcome::Dropped, now)?;
                }
                AttachedEffect::Wait { .. } => {}
            }
            *decided.borrow_mut() = Some((turn.key.clone(), turn.id.unwrap_or_default()));
            Ok::<_, DispatchError>((turn, strategy, effect))
        })
        .map_err(|e| commit_unknown(e, decided.into_inner()))
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
