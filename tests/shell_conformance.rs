//! Conformance of the shell with the core: seeded random walks where every step calls a shell
//! entry point the production paths call, against a mirror that runs the core's own sections for
//! the same step, and the two must agree after every step.
//!
//! The shell side calls, on a real store with a fixture spawner and a fixture liveness:
//! `submit::submit_detached_sequenced` (named tasks with their strategies, generated task names,
//! `--after`/`--after-success` dependencies, `--retry` with a backoff, `--delay`, `--priority`),
//! `submit::submit_attached` (the command really runs in the foreground, `/bin/true` or
//! `/bin/false`), the detached runner's take-over `runner::take_over_to_run`, its
//! `runner::record_leader`, its finish `runner::finish_with` (the result written in the finish
//! section: the departure re-queues a retry or settles the `--after-success` dependents) or
//! `runner::leave_and_start_next` for a turn found settled, `reconcile::reconcile`,
//! `cancel::cancel`, `schedule::pause` and `schedule::resume`. Each walk runs on one of the two
//! stores the shell runs in-process: the home's database (SQLite: the queue and the records in
//! `tollgate.db`, sections on parts of the queue) and the in-memory queue (its records in the home's
//! `tollgate.db`, each access in a transaction of its own: the memory store lends none). Both
//! are wrapped so that the store's unlocked hint of the next id is sometimes wrong (as when
//! another submitter took that id): a submit whose guessed task part misses widens (the section
//! runner's part-then-whole retry), which the walks count.
//!
//! The mirror holds the queue and the records as the core's records (`model::slots::store`, the
//! store the deps model runs on) and runs each step's sections (`SubmitSection`,
//! `AttachedSection`, `TakeOverSection`, `FinishSection`, `ReconcileSection`, `CancelSection`,
//! `PauseSection`, `ResumeSection`, the handoff's `PublishFirst`/`PublishSecond`/`SpawnFailed`)
//! through the core's `section::decide` on the whole queue, then performs their effects as
//! spec/steps.md says the driver does. No rule is typed here: what a departure re-queues, which
//! dependents end, what a pause holds back is the core's, for both sides. After every step the
//! store's queue must equal the mirror's, every task and turn record must equal the mirror's (the
//! take-over's start and the command's end carry the wall clock in the shell: only their presence
//! is compared), and the fixture world (processes spawned, works killed, executors signalled,
//! tokens drawn, wakers started) must equal the mirror's: a shell that runs another section,
//! gives it other inputs, applies its writes differently, decides differently on a part of the
//! queue than on the whole, or performs an effect differently fails here. A mismatch prints the
//! store, the seed and the numbered path.
//!
//! `TOLLGATE_SHELL_CONFORMANCE_WALKS` sets the walks per store (default 600).
//! `tests/model_conformance.rs` is the separate round trip of model states through the database.
#![cfg(feature = "model-check")]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use tollgate::home::Home;
use tollgate::model::slots::store::{Decided, Store as CoreStore};
use tollgate::process::work::WorkKill;
use tollgate::process::{RunnerSpawner, SpawnError};
use tollgate::protocol::admission::Strategy;
use tollgate::protocol::fleet::FleetView;
use tollgate::protocol::records::{TaskRecord, TurnRecord};
use tollgate::protocol::section::{Section, Undecided};
use tollgate::protocol::slots::order::PauseScope;
use tollgate::protocol::slots::sections::{
    on_disk, AttachedSection, AttachedStart, CancelSection, FinishSection, PauseSection, Placement,
    PublishFirst, PublishSecond, ReconcileSection, ResumeSection, SpawnFailed, SubmitSection,
    TakeOverSection, WorkStarted,
};
use tollgate::protocol::slots::steps::*;
use tollgate::protocol::slots::*;
use tollgate::queue::{HomeStore, MemoryStore, Store, StoreError};
use tollgate::runner::Execution;
use tollgate::runtime::Runtime;
use tollgate::submit::{Sequencing, SubmitRequest};
use tollgate::tasks::{self, TurnOutcome};

const TASKS: [(&str, Strategy); 5] = [
    ("one", Strategy::Concurrent { max: 1 }),
    ("queue", Strategy::Queue),
    ("drop", Strategy::Drop),
    ("two", Strategy::Concurrent { max: 2 }),
    ("debounce", Strategy::Debounce { quiet_millis: 3 }),
];

/// The name a generated task takes when every generated one is taken; never reached here (ids
/// are never reused), so the shell's random one and this one do not differ in effect.
const FALLBACK_TASK: &str = "t-fallback";

/// The fixture world both sides act on (each its own copy): processes, works, the clock, tokens,
/// and a log of every effect performed on it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct World {
    alive: BTreeSet<ProcessIdentity>,
    live_works: BTreeSet<WorkId>,
    next_pid: u32,
    next_token: u64,
    now_millis: u64,
    /// The next spawn fails (then the flag clears).
    fail_next_spawn: bool,
    spawned: Vec<(TurnKey, SlotToken, ProcessIdentity)>,
    killed: Vec<WorkId>,
    stopped: Vec<ProcessIdentity>,
    wakers: Vec<u64>,
}

impl World {
    fn process(&mut self) -> ProcessIdentity {
        self.next_pid += 1;
        let id = ProcessIdentity {
            pid: self.next_pid,
            start_time_micros: u64::from(self.next_pid) * 7,
        };
        self.alive.insert(id);
        id
    }

    /// The token [`World::token`] draws next, without drawing it.
    fn peek_token(&self) -> SlotToken {
        self.clone().token()
    }

    fn token(&mut self) -> SlotToken {
        self.next_token += 1;
        SlotToken::new(uuid::Uuid::from_u64_pair(
            0x0190_0000_0000_7000,
            0x8000_0000_0000_0000 | self.next_token,
        ))
        .expect("non-nil")
    }

    fn spawn(&mut self, key: &TurnKey, token: SlotToken) -> Option<ProcessIdentity> {
        if std::mem::take(&mut self.fail_next_spawn) {
            return None;
        }
        let child = self.process();
        self.spawned.push((key.clone(), token, child));
        Some(child)
    }

    fn kill_work(&mut self, work: &WorkRecord) {
        self.live_works.remove(&work.id);
        self.killed.push(work.id);
    }

    fn stop(&mut self, executor: &ProcessIdentity) -> bool {
        self.stopped.push(*executor);
        true
    }
}

impl Liveness for World {
    fn observe(&self, identity: &ProcessIdentity) -> Observation {
        if self.alive.contains(identity) {
            Observation::Matching
        } else {
            Observation::Gone
        }
    }

    fn observe_work(&self, work: &WorkRecord) -> Observation {
        if self.live_works.contains(&work.id) {
            Observation::Matching
        } else {
            Observation::Gone
        }
    }
}

/// The shell's view of its world: liveness and spawner over one shared [`World`].
#[derive(Clone)]
struct Shared(Arc<Mutex<World>>);

impl Shared {
    fn world(&self) -> MutexGuard<'_, World> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Liveness for Shared {
    fn observe(&self, identity: &ProcessIdentity) -> Observation {
        self.world().observe(identity)
    }

    fn observe_work(&self, work: &WorkRecord) -> Observation {
        self.world().observe_work(work)
    }
}

impl RunnerSpawner for Shared {
    fn spawn(&self, key: &TurnKey, token: SlotToken) -> Result<ProcessIdentity, SpawnError> {
        self.world()
            .spawn(key, token)
            .ok_or_else(|| SpawnError::Spawn {
                key: key.clone(),
                source: std::io::Error::other("the fixture refuses this spawn"),
            })
    }

    fn spawn_waker(&self, at_millis: u64) -> Result<(), SpawnError> {
        self.world().wakers.push(at_millis);
        Ok(())
    }

    fn fresh_token(&self) -> SlotToken {
        self.world().token()
    }

    fn now_millis(&self) -> u64 {
        self.world().now_millis
    }

    fn kill_work(&self, work: &WorkRecord) -> WorkKill {
        self.world().kill_work(work);
        WorkKill {
            found: 1,
            escalated: false,
            remaining: Vec::new(),
        }
    }

    fn stop_executor(&self, executor: &ProcessIdentity) -> bool {
        self.world().stop(executor)
    }
}

// ---------------------------------------------------------------------------------------------
// The shell's store, with a hint that can be wrong.
// ---------------------------------------------------------------------------------------------

/// A store of the shell with its unlocked hint of the next id moved by `skew` (as when another
/// submitter took ids meanwhile), counting the section runs on a part of the queue that published
/// nothing (the part did not suffice, or the step refused).
struct Hinted<S> {
    inner: S,
    skew: AtomicU64,
    part_runs: AtomicU64,
    part_runs_unpublished: AtomicU64,
}

impl<S> Hinted<S> {
    fn new(inner: S) -> Self {
        Hinted {
            inner,
            skew: AtomicU64::new(0),
            part_runs: AtomicU64::new(0),
            part_runs_unpublished: AtomicU64::new(0),
        }
    }
}

impl<S: Store> Store for Hinted<S> {
    fn load(&self) -> Result<QueueState, StoreError> {
        self.inner.load()
    }

    fn load_active(&self) -> Result<QueueState, StoreError> {
        self.inner.load_active()
    }

    fn transact_as<R, E>(
        &self,
        commit: tollgate::queue::Commit,
        change: impl FnOnce(&mut QueueState) -> Result<R, E>,
    ) -> Result<R, E>
    where
        E: From<StoreError>,
    {
        self.inner.transact_as(commit, change)
    }

    fn transact_reading<R, E>(
        &self,
        commit: tollgate::queue::Commit,
        reads: &Reads,
        change: impl FnOnce(&mut QueueState, &Loaded) -> Result<R, E>,
    ) -> Result<R, E>
    where
        E: From<StoreError>,
    {
        self.inner.transact_reading(commit, reads, change)
    }

    fn transact_section<R, E>(
        &self,
        commit: tollgate::queue::Commit,
        reads: &Reads,
        change: impl FnOnce(
            &mut QueueState,
            &Loaded,
            &mut Option<FleetView>,
            &mut tollgate::queue::RecordTx<'_>,
        ) -> Result<R, E>,
    ) -> Result<R, E>
    where
        E: From<StoreError>,
    {
        let on_part = matches!(reads, Reads::Part(_));
        self.inner
            .transact_section(commit, reads, |part, loaded, fleet, records| {
                let result = change(part, loaded, fleet, records);
                if on_part && matches!(loaded, Loaded::Part { .. }) {
                    self.part_runs.fetch_add(1, Ordering::Relaxed);
                    if result.is_err() {
                        self.part_runs_unpublished.fetch_add(1, Ordering::Relaxed);
                    }
                }
                result
            })
    }

    fn next_turn_id_hint(&self) -> Option<u64> {
        let skew = self.skew.load(Ordering::Relaxed);
        self.inner.next_turn_id_hint().map(|id| id + skew)
    }
}

/// The stores a walk runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StoreKind {
    /// The home's database (the queue and the records in `tollgate.db`).
    Sqlite,
    /// The queue in memory, the records in the home's database (outside any section).
    Memory,
}

// ---------------------------------------------------------------------------------------------
// The mirror: the core's sections on the core's records, their effects performed as the driver
// performs them (spec/steps.md).
// ---------------------------------------------------------------------------------------------

struct Mirror {
    store: CoreStore,
    world: World,
    cap: usize,
    /// The process `cancel` runs as (the test's own, as `cancel::cancel_once` reads it).
    canceller: ProcessIdentity,
}

/// A section the mirror did not commit, as its text.
type Refused = String;

impl Mirror {
    fn decide<X: Section>(&self, section: &X) -> Result<Decided<X::Effect>, Undecided<Infallible>> {
        self.store.decide(section, &self.world, |record| record)
    }

    fn run<X: Section>(&mut self, section: &X) -> Result<X::Effect, Refused> {
        let decided = self.decide(section).map_err(|e| format!("{e:?}"))?;
        self.store.commit(decided).map_err(|e| format!("{e:?}"))
    }

    /// `driver::hand_off`: spawn, then the first and second publish; a failed spawn releases
    /// (and is the handoff's error).
    fn hand_off(&mut self, handoff: Handoff) -> Result<(), Refused> {
        match self.world.spawn(handoff.key(), handoff.token()) {
            None => {
                let _ = self.run(&SpawnFailed { handoff });
                Err("the spawn failed".to_string())
            }
            Some(child) => {
                if let Ok(bound) = self.run(&PublishFirst { handoff, child })? {
                    let _ = self.run(&PublishSecond { bound })?;
                }
                Ok(())
            }
        }
    }

    /// `submit::submit_detached_sequenced`.
    fn submit(&mut self, me: ProcessIdentity, ask: &Ask) -> Result<(TurnKey, u64), Refused> {
        let new = ask.request().new_turn(false, &ask.sequencing());
        let section = SubmitSection {
            task: ask.task.as_deref(),
            fallback_task: FALLBACK_TASK,
            planned: ask.task.as_deref(),
            strategy: ask.strategy,
            new: &new,
            schedule: ask.schedule,
            me,
            fresh_token: self.world.token(),
            now_millis: self.world.now_millis,
            cap: self.cap,
        };
        let submitted = self.run(&section)?;
        if let Some(at) = submitted.placement.wake_at_millis() {
            self.world.wakers.push(at);
        }
        if let Placement::Spawn(handoff) = submitted.placement {
            // Queued either way: a failed start is no "nothing was queued".
            let _ = self.hand_off(handoff);
        }
        Ok((submitted.key, submitted.queue_id))
    }

    /// The first section of `submit::submit_attached` decided but not committed: `None` when the
    /// submitter would wait (the walk then does not submit: a wait has nothing to let it end).
    fn attached_would_run(&self, me: ProcessIdentity, ask: &Ask) -> Option<()> {
        let new = ask.request().new_turn(true, &Sequencing::default());
        let section = self.attached_section(me, ask, &new, self.world.peek_token());
        let decided = self.decide(&section).ok()?;
        match decided.step.effect.start {
            AttachedStart::WaitFor { .. } | AttachedStart::WaitDrained => None,
            AttachedStart::Run { .. } | AttachedStart::Dropped { .. } => Some(()),
        }
    }

    fn attached_section<'a>(
        &self,
        me: ProcessIdentity,
        ask: &'a Ask,
        new: &'a tollgate::protocol::turns::NewTurn,
        fresh_token: SlotToken,
    ) -> AttachedSection<'a> {
        AttachedSection {
            task: ask.task.as_deref(),
            fallback_task: FALLBACK_TASK,
            strategy: ask.strategy,
            new,
            created: None,
            me,
            fresh_token,
            now_millis: self.world.now_millis,
        }
    }

    /// `submit::submit_attached` whose first section runs or drops the turn: the command runs as
    /// the work (its leader is a real process, and its row leaves within this step), the work is
    /// killed, the result is recorded in the finish.
    fn attached(&mut self, me: ProcessIdentity, ask: &Ask, exit_code: i32) -> Result<(), Refused> {
        let new = ask.request().new_turn(true, &Sequencing::default());
        let token = self.world.token();
        let section = self.attached_section(me, ask, &new, token);
        let attached = self.run(&section)?;
        let AttachedStart::Run { work } = attached.start else {
            return Ok(());
        };
        let mut turn = attached.turn;
        self.world.kill_work(&WorkRecord {
            key: turn.key.clone(),
            id: work,
            runner: me,
            leader: None,
            cgroup: None,
        });
        command_ended(exit_code).record(&mut turn, 0);
        self.finish(&turn.key.clone(), me, Some(turn)).map(|_| ())
    }

    /// `runner::take_over_to_run` (the take-over's start time is the wall clock in the shell).
    fn take_over(
        &mut self,
        key: &TurnKey,
        token: SlotToken,
        me: ProcessIdentity,
    ) -> Result<(TakeOverEffect, TurnRecord), Refused> {
        self.run(&TakeOverSection {
            key,
            token,
            me,
            cgroup: None,
            record_started: true,
            now_millis: 0,
        })
    }

    /// `runner::finish_with` (`result`: the ended record) or `runner::leave_and_start_next`.
    fn finish(
        &mut self,
        key: &TurnKey,
        me: ProcessIdentity,
        result: Option<TurnRecord>,
    ) -> Result<Option<TurnKey>, Refused> {
        let section = FinishSection {
            key,
            me,
            result: result.as_ref(),
            fresh_token: self.world.token(),
            now_millis: self.world.now_millis,
            cap: self.cap,
        };
        let effect = self.run(&section)?;
        if let Some(at) = effect.left.wake_at_millis {
            self.world.wakers.push(at);
        }
        let next = effect.next.as_ref().map(|h| h.key().clone());
        if let Some(handoff) = effect.next {
            self.hand_off(handoff)?;
        }
        Ok(next)
    }

    /// `reconcile::reconcile`: the pass's candidates from the unfinished records, then its
    /// sections while the core says the pass goes on.
    fn reconcile(&mut self, me: ProcessIdentity) {
        let unfinished: TurnRecords = self
            .store
            .turns
            .values()
            .filter(|record| !record.is_settled())
            .map(|record| (record.key.clone(), on_disk(Some(record))))
            .collect();
        let candidates = orphan_candidates(&self.store.queue, &unfinished);
        let bound = reconcile_pass_bound(&self.store.queue, &candidates);
        for _ in 0..bound {
            let section = ReconcileSection {
                me,
                fresh_token: self.world.token(),
                now_millis: self.world.now_millis,
                cap: self.cap,
                orphan_candidates: &candidates,
            };
            let done = self.run(&section).expect("mirror reconcile");
            if let Some(at) = done.wake_at_millis {
                self.world.wakers.push(at);
            }
            match &done.effect {
                ReconcileEffect::Spawn { handoff, .. } => {
                    let _ = self.hand_off(handoff.clone());
                }
                ReconcileEffect::Kill { work, .. } => self.world.kill_work(work),
                _ => {}
            }
            if !done.effect.continues(true) {
                break;
            }
        }
    }

    /// `cancel::cancel` of a task: its sections (at most 3), one signal per executor.
    fn cancel(&mut self, task: &str) -> Result<(), Refused> {
        if !self.store.tasks.contains_key(task) {
            return Err(format!("no task {task}"));
        }
        let mut signalled = Vec::new();
        for _ in 0..3 {
            let effect = self.run(&CancelSection {
                selection: CancelSelection::Task(task),
                me: self.canceller,
                now_millis: self.world.now_millis,
            })?;
            for signal in &effect.signal {
                if !signalled.contains(signal) && self.world.stop(&signal.1) {
                    signalled.push(signal.clone());
                }
            }
            for work in &effect.kill {
                self.world.kill_work(work);
            }
            if !effect.again() {
                break;
            }
        }
        Ok(())
    }

    /// `schedule::pause` of the home (`None`) or a task.
    fn pause(&mut self, task: Option<&str>) -> Result<(), Refused> {
        self.known(task)?;
        self.run(&PauseSection {
            scope: task.map_or(PauseScope::Home, PauseScope::Task),
        })
        .map(|_| ())
    }

    /// `schedule::resume`: a token per slot, the section, each start handed off, the waker.
    fn resume(&mut self, me: ProcessIdentity, task: Option<&str>) -> Result<(), Refused> {
        self.known(task)?;
        let tokens: Vec<SlotToken> = (0..self.cap).map(|_| self.world.token()).collect();
        let (effect, _) = self.run(&ResumeSection {
            scope: task.map_or(PauseScope::Home, PauseScope::Task),
            me,
            fresh_tokens: &tokens,
            now_millis: self.world.now_millis,
            cap: self.cap,
        })?;
        for handoff in effect.spawn {
            let _ = self.hand_off(handoff);
        }
        if let Some(at) = effect.wake_at_millis {
            self.world.wakers.push(at);
        }
        Ok(())
    }

    fn known(&self, task: Option<&str>) -> Result<(), Refused> {
        match task {
            Some(task) if !self.store.tasks.contains_key(task) => Err(format!("no task {task}")),
            _ => Ok(()),
        }
    }
}

/// What a command that exited `exit_code` left for its finish (the runner's `Execution`).
fn command_ended(exit_code: i32) -> Execution {
    Execution {
        outcome: TurnOutcome::of_command(Some(exit_code), false),
        exit_code: Some(exit_code),
        signal: None,
        error: None,
    }
}

/// A submission both sides make: the shell's `SubmitRequest` and `Sequencing` are built from it.
#[derive(Clone, Debug)]
struct Ask {
    task: Option<String>,
    strategy: Option<Strategy>,
    argv: &'static str,
    after: Vec<Dependency>,
    retry: Option<RetryPlan>,
    schedule: Schedule,
}

impl Ask {
    fn request(&self) -> SubmitRequest {
        SubmitRequest {
            task: self.task.clone(),
            strategy: self.strategy,
            argv: vec![self.argv.into()],
            cwd: None,
            env: BTreeMap::new(),
            labels: Vec::new(),
            timeout_millis: None,
            schedule: self.schedule,
            delivery: None,
        }
    }

    fn sequencing(&self) -> Sequencing {
        Sequencing {
            after: self.after.clone(),
            retry: self.retry,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The walk.
// ---------------------------------------------------------------------------------------------

struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Starting,
    Running(WorkId),
    Leaving,
    Done,
}

#[derive(Clone, Debug)]
struct Child {
    key: TurnKey,
    token: SlotToken,
    me: ProcessIdentity,
    phase: Phase,
    /// The turn's record as the shell's take-over left it, and as the mirror's did.
    record: Option<(TurnRecord, TurnRecord)>,
    /// What its command did (or that a cancel came first): written in its finish section.
    result: Option<Execution>,
}

/// What the walks of one store saw.
#[derive(Debug, Default)]
struct Tally {
    walks: u64,
    steps: usize,
    spawns: usize,
    kills: usize,
    retries: usize,
    dependency_failed: usize,
    held_dependents: usize,
    attached_runs: usize,
    pauses: usize,
    part_runs: u64,
    part_runs_unpublished: u64,
}

struct Walk<S: Store> {
    kind: StoreKind,
    seed: u64,
    rng: XorShift,
    rt: Runtime<Shared, Hinted<S>>,
    shared: Shared,
    mirror: Mirror,
    children: Vec<Child>,
    path: Vec<String>,
    attached_runs: usize,
    pauses: usize,
    _home: Kept,
}

/// What a walk's home keeps alive until the walk ends: its directory, and for the in-memory
/// queue the home's database store, whose connection the record accesses outside any section
/// reuse (as a command's accesses reuse its store's) instead of opening one each.
struct Kept {
    _dir: tempfile::TempDir,
    _records: Option<HomeStore>,
}

/// A walk's runtime on `kind`'s store in a new home with `cap` slots.
fn walk_on(kind: StoreKind, seed: u64) -> Box<dyn Walking> {
    let mut rng = XorShift(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let cap = 1 + rng.below(2);
    let dir = common::memory_temp_dir();
    let home = Home::at(dir.path());
    let config = home.init(Some(cap)).expect("init home");
    let world = World {
        next_pid: 100,
        now_millis: 1_000,
        ..World::default()
    };
    let shared = Shared(Arc::new(Mutex::new(world.clone())));
    let canceller = tollgate::process::self_identity().expect("this process's identity");
    let mirror = Mirror {
        store: CoreStore::default(),
        world,
        cap,
        canceller,
    };
    match kind {
        StoreKind::Sqlite => {
            // The store the binary builds for a home (it also says where its records are).
            let store = HomeStore::for_home(&home, &config);
            assert!(matches!(store, HomeStore::Database(_)), "a SQLite home");
            let kept = Kept {
                _dir: dir,
                _records: None,
            };
            Box::new(Walk::new(
                kind, seed, rng, home, config, store, shared, mirror, kept,
            ))
        }
        StoreKind::Memory => {
            // Building the home's database store registers where its records are and lends its
            // connection to the record accesses; the queue itself is the memory store's.
            let records = HomeStore::for_home(&home, &config);
            assert!(matches!(records, HomeStore::Database(_)), "a SQLite home");
            let store = MemoryStore::default();
            let kept = Kept {
                _dir: dir,
                _records: Some(records),
            };
            Box::new(Walk::new(
                kind, seed, rng, home, config, store, shared, mirror, kept,
            ))
        }
    }
}

/// A walk on either store.
trait Walking {
    fn step(&mut self);
    fn tally(&self, tally: &mut Tally);
}

impl<S: Store> Walking for Walk<S> {
    fn step(&mut self) {
        Walk::step(self)
    }

    fn tally(&self, tally: &mut Tally) {
        let world = &self.mirror.world;
        tally.walks += 1;
        tally.steps += self.path.len();
        tally.spawns += world.spawned.len();
        tally.kills += world.killed.len();
        let turns = self.mirror.store.turns.values();
        for turn in turns {
            tally.retries += usize::from(turn.retry_of.is_some());
            tally.dependency_failed +=
                usize::from(turn.outcome == Some(TurnOutcome::DependencyFailed));
            tally.held_dependents += usize::from(!turn.after.is_empty());
        }
        tally.attached_runs += self.attached_runs;
        tally.pauses += self.pauses;
        tally.part_runs += self.rt.store.part_runs.load(Ordering::Relaxed);
        tally.part_runs_unpublished += self.rt.store.part_runs_unpublished.load(Ordering::Relaxed);
    }
}

impl<S: Store> Walk<S> {
    #[allow(clippy::too_many_arguments)]
    fn new(
        kind: StoreKind,
        seed: u64,
        rng: XorShift,
        home: Home,
        config: tollgate::config::Config,
        store: S,
        shared: Shared,
        mirror: Mirror,
        kept: Kept,
    ) -> Self {
        let rt = Runtime {
            home,
            config,
            store: Hinted::new(store),
            spawner: Box::new(shared.clone()),
            liveness: shared.clone(),
        };
        Walk {
            kind,
            seed,
            rng,
            rt,
            shared,
            mirror,
            children: Vec::new(),
            path: Vec::new(),
            attached_runs: 0,
            pauses: 0,
            _home: kept,
        }
    }

    /// Both worlds change the same way (what happens outside any section).
    fn both(&mut self, change: impl Fn(&mut World)) {
        change(&mut self.mirror.world);
        change(&mut self.shared.world());
    }

    fn new_process(&mut self) -> ProcessIdentity {
        let me = self.mirror.world.process();
        let shell = self.shared.world().process();
        assert_eq!(me, shell, "seed {}: the worlds allocate alike", self.seed);
        me
    }

    fn adopt_spawned(&mut self) {
        let known = self.children.len();
        for (key, token, me) in self.mirror.world.spawned.iter().skip(known) {
            self.children.push(Child {
                key: key.clone(),
                token: *token,
                me: *me,
                phase: Phase::Starting,
                record: None,
                result: None,
            });
        }
    }

    fn pick(&mut self, phase: fn(&Phase) -> bool) -> Option<usize> {
        let open: Vec<usize> = (0..self.children.len())
            .filter(|&c| {
                phase(&self.children[c].phase)
                    && self.mirror.world.alive.contains(&self.children[c].me)
            })
            .collect();
        (!open.is_empty()).then(|| open[self.rng.below(open.len())])
    }

    /// A task the walk may name: one of [`TASKS`], or one it generated.
    fn some_task(&mut self) -> String {
        let generated: Vec<String> = self
            .mirror
            .store
            .tasks
            .keys()
            .filter(|t| !TASKS.iter().any(|(name, _)| name == t))
            .cloned()
            .collect();
        if !generated.is_empty() && self.rng.chance(20) {
            generated[self.rng.below(generated.len())].clone()
        } else {
            TASKS[self.rng.below(TASKS.len())].0.to_string()
        }
    }

    /// A detached submission: a named task with its strategy (sometimes with dependencies on
    /// turns the walk made, a retry plan, a delay or a priority), or a generated task name.
    fn ask(&mut self) -> Ask {
        let generated = self.rng.chance(20);
        let (task, strategy) = if generated {
            (None, None)
        } else {
            let (task, strategy) = TASKS[self.rng.below(TASKS.len())];
            (Some(task.to_string()), Some(strategy))
        };
        let mut after = Vec::new();
        if self.rng.chance(30) && !self.mirror.store.turns.is_empty() {
            let keys: Vec<TurnKey> = self.mirror.store.turns.keys().cloned().collect();
            for _ in 0..1 + self.rng.below(2) {
                let key = keys[self.rng.below(keys.len())].clone();
                let rule = if self.rng.chance(50) {
                    AfterRule::Succeeded
                } else {
                    AfterRule::Ended
                };
                if !after.iter().any(|d: &Dependency| d.key == key) {
                    after.push(Dependency { key, rule });
                }
            }
        }
        let retry = self
            .rng
            .chance(50)
            .then(|| RetryPlan::first(2 + self.rng.below(2) as u32, self.rng.below(3) as u64));
        let mut schedule = Schedule::default();
        if self.rng.chance(10) {
            schedule.not_before_millis =
                self.mirror.world.now_millis + 1 + self.rng.below(4) as u64;
        }
        if self.rng.chance(10) {
            schedule.priority = self.rng.below(3) as i32 - 1;
        }
        Ask {
            task,
            strategy,
            argv: "true",
            after,
            retry,
            schedule,
        }
    }

    fn submit(&mut self) -> String {
        let ask = self.ask();
        // The hint of the next id is sometimes wrong: the guessed task's part misses.
        let skew = if ask.task.is_none() && self.rng.chance(50) {
            1 + self.rng.below(3) as u64
        } else {
            0
        };
        self.rt.store.skew.store(skew, Ordering::Relaxed);
        let me = self.new_process();
        let mirrored = self.mirror.submit(me, &ask);
        let shell = tollgate::submit::submit_detached_sequenced(
            &self.rt,
            me,
            ask.request(),
            ask.sequencing(),
        );
        // Queued: the turn and its id, also when starting its runner failed afterwards.
        let queued = match &shell {
            Ok(s) => Some((s.key.clone(), s.queue_id)),
            Err(tollgate::dispatch::DispatchError::StateUnknown { key, id, .. }) => {
                Some((key.clone(), *id))
            }
            Err(_) => None,
        };
        let same = mirrored.as_ref().ok() == queued.as_ref();
        self.agree(
            same,
            "submit",
            &mirrored,
            &shell.as_ref().map(|s| &s.placement),
        );
        // The submitter exits once its command returns.
        self.both(|w| {
            w.alive.remove(&me);
        });
        format!(
            "submit {:?} ({:?}) after {:?} retry {:?} {:?} hint+{skew} as pid {}: {:?}",
            ask.task,
            ask.strategy,
            ask.after,
            ask.retry,
            ask.schedule,
            me.pid,
            shell.map(|s| (s.key, s.placement))
        )
    }

    fn attached(&mut self) -> String {
        let mut ask = self.ask();
        ask.after.clear();
        ask.retry = None;
        ask.schedule = Schedule::default();
        let exit_code = if self.rng.chance(30) { 1 } else { 0 };
        ask.argv = if exit_code == 0 {
            "/bin/true"
        } else {
            "/bin/false"
        };
        let me = self.new_process();
        let shown = format!(
            "attached submit {:?} of {} as pid {}",
            ask.task, ask.argv, me.pid
        );
        let outcome = if self.mirror.attached_would_run(me, &ask).is_none() {
            format!("{shown}: it would wait, not submitted")
        } else {
            let mirrored = self.mirror.attached(me, &ask, exit_code);
            let shell = tollgate::submit::submit_attached(&self.rt, me, ask.request());
            self.agree(
                mirrored.is_ok() == shell.is_ok(),
                "attached submit",
                &mirrored,
                &shell,
            );
            if let Ok(tollgate::submit::Attached::Ran { execution, .. }) = &shell {
                self.attached_runs += 1;
                assert_eq!(
                    execution.exit_code,
                    Some(exit_code),
                    "{}",
                    self.failure("the attached command's exit")
                );
            }
            format!("{shown}: {shell:?}")
        };
        self.both(|w| {
            w.alive.remove(&me);
        });
        outcome
    }

    fn take_over(&mut self) -> String {
        let Some(c) = self.pick(|p| *p == Phase::Starting) else {
            return "take-over: no child waits".to_string();
        };
        let child = self.children[c].clone();
        let mirrored = self.mirror.take_over(&child.key, child.token, child.me);
        let shell =
            tollgate::runner::take_over_to_run(&self.rt, &child.key, child.token, child.me, None);
        let same = match (&mirrored, &shell) {
            (Ok((a, _)), Ok((b, _))) => a == b,
            (Err(_), Err(_)) => true,
            _ => false,
        };
        self.agree(same, "take-over", &mirrored, &shell);
        if let (Ok((_, mirror_record)), Ok((_, shell_record))) = (&mirrored, &shell) {
            self.children[c].record = Some((shell_record.clone(), mirror_record.clone()));
        }
        self.children[c].phase = match mirrored {
            Ok((TakeOverEffect::Run { work }, _)) => {
                // The command starts: a process of the work, its leader recorded.
                let leader = self.new_process();
                self.both(|w| {
                    w.live_works.insert(work);
                });
                let _ = self.mirror.run(&WorkStarted {
                    key: &child.key,
                    work,
                    leader,
                });
                let _ = tollgate::runner::record_leader(&self.rt, &child.key, work, leader);
                Phase::Running(work)
            }
            Ok((TakeOverEffect::AlreadySettled, _)) => Phase::Leaving,
            Ok((TakeOverEffect::Cancelled, _)) => {
                // The runner records the honoured cancel in its finish.
                self.children[c].result = Some(Execution::cancelled_before_start());
                Phase::Leaving
            }
            Ok((TakeOverEffect::Refused { .. }, _)) | Err(_) => Phase::Done,
        };
        format!(
            "take-over of {} by pid {}: {:?}",
            child.key, child.me.pid, self.children[c].phase
        )
    }

    fn work_ends(&mut self) -> String {
        let Some(c) = self.pick(|p| matches!(p, Phase::Running(_))) else {
            return "work ends: nothing runs".to_string();
        };
        let child = self.children[c].clone();
        if let Phase::Running(work) = child.phase {
            self.both(|w| {
                w.live_works.remove(&work);
            });
        }
        let exit_code = if self.rng.chance(40) { 1 } else { 0 };
        // The runner keeps the outcome for its finish section, which records it.
        self.children[c].result = Some(command_ended(exit_code));
        self.children[c].phase = Phase::Leaving;
        format!("the work of {} ends with exit {exit_code}", child.key)
    }

    fn leave(&mut self) -> String {
        let Some(c) = self.pick(|p| *p == Phase::Leaving) else {
            return "leave: nobody leaves".to_string();
        };
        let child = self.children[c].clone();
        // The runner's finish: with a result, the detached runner's own (`finish_with`, the
        // record written in the section); a turn found settled at its take-over only leaves.
        let (mirrored, shell) = match (child.result, child.record) {
            (Some(result), Some((mut shell_record, mut mirror_record))) => {
                result.record(&mut mirror_record, 0);
                let mirrored = self
                    .mirror
                    .finish(&child.key, child.me, Some(mirror_record));
                let shell =
                    tollgate::runner::finish_with(&self.rt, &mut shell_record, &result, child.me);
                (mirrored, shell)
            }
            _ => {
                let mirrored = self.mirror.finish(&child.key, child.me, None);
                let shell = tollgate::runner::leave_and_start_next(&self.rt, &child.key, child.me);
                (mirrored, shell)
            }
        };
        self.agree(
            mirrored.is_ok() == shell.is_ok(),
            "finish",
            &mirrored,
            &shell,
        );
        self.children[c].phase = Phase::Done;
        // The runner exits.
        self.both(|w| {
            w.alive.remove(&child.me);
        });
        format!(
            "pid {} leaves {}: next {mirrored:?}",
            child.me.pid, child.key
        )
    }

    fn reconcile(&mut self) -> String {
        let me = self.new_process();
        self.mirror.reconcile(me);
        let report = tollgate::reconcile::reconcile(&self.rt, me).map(|r| r.steps);
        assert!(report.is_ok(), "{}", self.failure("reconcile failed"));
        self.both(|w| {
            w.alive.remove(&me);
        });
        format!("reconcile as pid {}: {report:?}", me.pid)
    }

    fn cancel(&mut self) -> String {
        let task = self.some_task();
        let mirrored = self.mirror.cancel(&task);
        let shell = tollgate::cancel::cancel(&self.rt, &task)
            .map(|r| (r.removed, r.signalled.len(), r.killed.len()));
        self.agree(
            mirrored.is_ok() == shell.is_ok(),
            "cancel",
            &mirrored,
            &shell,
        );
        format!("cancel {task}: {shell:?}")
    }

    fn pause(&mut self) -> String {
        let task = self.rng.chance(50).then(|| self.some_task());
        let mirrored = self.mirror.pause(task.as_deref());
        let shell = tollgate::schedule::pause(&self.rt, task.as_deref());
        self.agree(
            mirrored.is_ok() == shell.is_ok(),
            "pause",
            &mirrored,
            &shell,
        );
        self.pauses += usize::from(shell.as_ref().is_ok_and(|p| p.changed));
        format!("pause {task:?}: {shell:?}")
    }

    fn resume(&mut self) -> String {
        let task = self.rng.chance(40).then(|| self.some_task());
        let me = self.new_process();
        let mirrored = self.mirror.resume(me, task.as_deref());
        let shell = tollgate::schedule::resume(&self.rt, me, task.as_deref());
        self.agree(
            mirrored.is_ok() == shell.is_ok(),
            "resume",
            &mirrored,
            &shell,
        );
        self.both(|w| {
            w.alive.remove(&me);
        });
        format!(
            "resume {task:?} as pid {}: {:?}",
            me.pid,
            shell.map(|r| (r.changed, r.started))
        )
    }

    /// What a submitter killed between writing the record and publishing its row leaves (on
    /// record files): a record without a row. Outside any section, so both sides take it as the
    /// world left it.
    fn orphan(&mut self) -> String {
        let (task, _) = TASKS[self.rng.below(TASKS.len())];
        let turn = tasks::create_turn(
            &self.rt.home,
            task,
            vec!["true".into()],
            None,
            BTreeMap::new(),
            false,
            self.mirror.world.now_millis,
        )
        .expect("orphan record");
        let record = tasks::load_task(&self.rt.home, task)
            .expect("task record")
            .expect("a task record");
        self.mirror.store.tasks.insert(task.to_string(), record);
        self.mirror
            .store
            .turns
            .insert(turn.key.clone(), turn.clone());
        format!(
            "a submitter dies after writing {}'s record, before its row",
            turn.key
        )
    }

    fn step(&mut self) {
        let roll = self.rng.below(100);
        let description = match roll {
            0..=21 => self.submit(),
            22..=31 => self.take_over(),
            32..=41 => self.work_ends(),
            42..=53 => self.leave(),
            54..=59 => self.reconcile(),
            60..=62 => self.cancel(),
            63..=64 => self.pause(),
            65..=68 => self.resume(),
            69..=70 => self.attached(),
            71..=80 => {
                let alive: Vec<ProcessIdentity> = self.mirror.world.alive.iter().copied().collect();
                if alive.is_empty() {
                    "crash: nothing alive".to_string()
                } else {
                    let victim = alive[self.rng.below(alive.len())];
                    self.both(|w| {
                        w.alive.remove(&victim);
                    });
                    format!("pid {} dies (its work, if any, lives on)", victim.pid)
                }
            }
            81..=90 => {
                let by = 1 + self.rng.below(4) as u64;
                self.both(|w| w.now_millis += by);
                format!("{by} ms pass")
            }
            91..=95 => {
                self.both(|w| w.fail_next_spawn = true);
                "the next spawn fails".to_string()
            }
            _ => self.orphan(),
        };
        self.path.push(description);
        self.adopt_spawned();
        self.compare();
    }

    fn trail(&self) -> String {
        self.path
            .iter()
            .enumerate()
            .map(|(i, line)| format!("  {:>3}. {line}", i + 1))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The message of a mismatch at the current step.
    fn failure(&self, what: &str) -> String {
        format!(
            "{:?} store, seed {}, step {}: {what}\npath:\n{}",
            self.kind,
            self.seed,
            self.path.len() + 1,
            self.trail()
        )
    }

    /// Both sides of an entry point answered alike (`same`), or the walk fails naming them.
    fn agree(
        &self,
        same: bool,
        what: &str,
        core: &dyn std::fmt::Debug,
        shell: &dyn std::fmt::Debug,
    ) {
        assert!(
            same,
            "{}",
            self.failure(&format!(
                "{what}: the shell answered {shell:?}, the core {core:?}"
            ))
        );
    }

    /// Every task and turn record of the shell's home.
    fn shell_records(&self) -> (BTreeMap<String, TaskRecord>, BTreeMap<TurnKey, TurnRecord>) {
        let home = &self.rt.home;
        let mut tasks_read = BTreeMap::new();
        let mut turns = BTreeMap::new();
        for task in tasks::list_tasks(home).expect("list the tasks") {
            if let Some(record) = tasks::load_task(home, &task).expect("a task record") {
                tasks_read.insert(task.clone(), record);
            }
            for turn in tasks::list_turns(home, &task).expect("list the turns") {
                let key = TurnKey::new(task.clone(), turn);
                if let Some(record) = tasks::load_turn(home, &key).expect("a turn record") {
                    turns.insert(key, wall_clock_blind(record));
                }
            }
        }
        (tasks_read, turns)
    }

    fn compare(&self) {
        let shell = self.rt.store.load().expect("load the queue");
        assert!(
            shell == self.mirror.store.queue,
            "{}",
            self.failure(&format!(
                "the shell's queue differs from the core's\nshell: {shell:#?}\ncore:  {:#?}",
                self.mirror.store.queue
            ))
        );
        let (shell_tasks, shell_turns) = self.shell_records();
        assert!(
            shell_tasks == self.mirror.store.tasks,
            "{}",
            self.failure(&format!(
                "the shell's task records differ from the core's\nshell: {shell_tasks:#?}\ncore:  {:#?}",
                self.mirror.store.tasks
            ))
        );
        let mirror_turns: BTreeMap<TurnKey, TurnRecord> = self
            .mirror
            .store
            .turns
            .iter()
            .map(|(k, r)| (k.clone(), wall_clock_blind(r.clone())))
            .collect();
        if shell_turns != mirror_turns {
            let differ: Vec<_> = mirror_turns
                .keys()
                .chain(shell_turns.keys())
                .collect::<BTreeSet<_>>()
                .into_iter()
                .filter(|k| shell_turns.get(*k) != mirror_turns.get(*k))
                .map(|k| (k, shell_turns.get(k), mirror_turns.get(k)))
                .collect();
            panic!(
                "{}",
                self.failure(&format!(
                    "the shell's turn records differ from the core's (key, shell, core):\n{differ:#?}"
                ))
            );
        }
        let world = self.shared.world().clone();
        assert!(
            world == self.mirror.world,
            "{}",
            self.failure(&format!(
                "the shell's effects differ from the core's\nshell: {world:#?}\ncore:  {:#?}",
                self.mirror.world
            ))
        );
    }
}

/// A turn record with the times the shell reads from the wall clock (the take-over's start, a
/// command's end) reduced to whether they are there.
fn wall_clock_blind(mut record: TurnRecord) -> TurnRecord {
    record.started_at_millis = record.started_at_millis.map(|_| 0);
    record.ended_at_millis = record.ended_at_millis.map(|_| 0);
    record
}

fn report(line: &str) {
    use std::io::Write;
    eprintln!("{line}");
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/target/model-report.txt");
    if let Ok(mut file) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        let _ = writeln!(file, "{line}");
    }
}

#[test]
fn seeded_walks_through_the_shell_entry_points_match_the_core_step_by_step() {
    let walks: u64 = std::env::var("TOLLGATE_SHELL_CONFORMANCE_WALKS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(600);
    let steps_per_walk = 40;
    for kind in [StoreKind::Sqlite, StoreKind::Memory] {
        let started = std::time::Instant::now();
        let mut tally = Tally::default();
        for seed in 0..walks {
            let mut walk = walk_on(kind, seed);
            for _ in 0..steps_per_walk {
                walk.step();
            }
            walk.tally(&mut tally);
        }
        report(&format!(
            "shell conformance ({kind:?} store): {} seeded walks, {} steps through the shell \
             entry points, {} runner spawns, {} work kills, {} retries, {} turns with \
             dependencies ({} ended dependency-failed), {} attached runs, {} pauses, {} of {} \
             section runs on a part published nothing and ran again or refused, 0 mismatches, \
             {:.1} s",
            tally.walks,
            tally.steps,
            tally.spawns,
            tally.kills,
            tally.retries,
            tally.held_dependents,
            tally.dependency_failed,
            tally.attached_runs,
            tally.pauses,
            tally.part_runs_unpublished,
            tally.part_runs,
            started.elapsed().as_secs_f64()
        ));
        assert!(
            tally.spawns > 0 && tally.kills > 0,
            "the walks reach spawns and kills"
        );
        assert!(
            tally.retries > 0 && tally.dependency_failed > 0 && tally.attached_runs > 0,
            "the walks reach retries, failed dependencies and attached runs: {tally:?}"
        );
        if kind == StoreKind::Sqlite {
            assert!(
                tally.part_runs_unpublished > 0,
                "the walks reach a part of the queue that does not suffice: {tally:?}"
            );
        }
    }
}
