//! proptest over random interleavings of the slot protocol, driven through the core's steps
//! (`tollgate::protocol::slots::steps`), the very functions each locked section of the shell calls:
//! detached submit under every strategy, the handoff (spawn, spawn failure, first and second
//! publish), take-over, the command ending, the runner leaving (finish + start next), reconcile,
//! cancel, crashes at any point and pid reuse. Works are first-class: a runner's crash does not
//! end its work; only the work ending or a kill does. The S invariants of spec/invariants.md are
//! checked after every step, S1 and S2 over works.

mod common;

use common::{token, Procs};
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};
use tollgate::protocol::admission::Strategy as TaskStrategy;
use tollgate::protocol::slots::steps::*;
use tollgate::protocol::slots::*;

/// A turn whose record holds its outcome, as reconcile's input says it.
const SETTLED: TurnOnDisk = TurnOnDisk::Record {
    settled: true,
    attached: false,
    started: true,
    runner: true,
};

#[derive(Clone, Debug)]
enum Op {
    Submit(u8),
    Spawn(u8),
    SpawnFails(u8),
    First(u8),
    Second(u8),
    TakeOver(u8),
    WorkEnds(u8),
    Leave(u8),
    Reconcile,
    Cancel(u8),
    Crash(u8),
    ReusePid(u8, bool),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => any::<u8>().prop_map(Op::Submit),
        3 => any::<u8>().prop_map(Op::Spawn),
        1 => any::<u8>().prop_map(Op::SpawnFails),
        3 => any::<u8>().prop_map(Op::First),
        3 => any::<u8>().prop_map(Op::Second),
        3 => any::<u8>().prop_map(Op::TakeOver),
        3 => any::<u8>().prop_map(Op::WorkEnds),
        3 => any::<u8>().prop_map(Op::Leave),
        2 => Just(Op::Reconcile),
        1 => any::<u8>().prop_map(Op::Cancel),
        2 => any::<u8>().prop_map(Op::Crash),
        1 => (any::<u8>(), any::<bool>()).prop_map(|(p, a)| Op::ReusePid(p, a)),
    ]
}

/// The tasks of a world and their strategies: every strategy shares the queue.
const TASKS: [(&str, TaskStrategy); 5] = [
    ("one", TaskStrategy::Concurrent { max: 1 }),
    ("queue", TaskStrategy::Queue),
    ("drop", TaskStrategy::Drop),
    ("two", TaskStrategy::Concurrent { max: 2 }),
    ("debounce", TaskStrategy::Debounce { quiet_millis: 3 }),
];

fn strategy_of(task: &str) -> TaskStrategy {
    TASKS
        .iter()
        .find(|(name, _)| *name == task)
        .map_or_else(TaskStrategy::default, |(_, s)| *s)
}

/// What the core sees: the fixture process table, and which works still have a live process.
struct Seen<'a> {
    procs: &'a Procs,
    works: &'a BTreeSet<WorkId>,
}

impl Liveness for Seen<'_> {
    fn observe(&self, identity: &ProcessIdentity) -> Observation {
        self.procs.observe(identity)
    }

    fn observe_work(&self, work: &WorkRecord) -> Observation {
        if self.works.contains(&work.id) {
            Observation::Matching
        } else {
            Observation::Gone
        }
    }
}

/// A handoff in flight: a reserver between its steps.
#[derive(Clone, Debug)]
enum InFlight {
    Reserved(Handoff),
    Bound(BoundHandoff),
}

#[derive(Clone, Debug)]
struct Flight {
    owner: ProcessIdentity,
    stage: InFlight,
    spawned: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Spawned, not yet through its take-over.
    Starting,
    /// Its command runs as this work.
    Running(WorkId),
    /// Its turn has an outcome; it has yet to leave the queue.
    Leaving,
    Done,
}

#[derive(Clone, Debug)]
struct Runner {
    me: ProcessIdentity,
    key: TurnKey,
    token: SlotToken,
    phase: Phase,
}

/// A work as it really is: the runner that started it and whether a process of it lives.
#[derive(Clone, Debug)]
struct Work {
    id: WorkId,
    key: TurnKey,
}

struct World {
    state: QueueState,
    procs: Procs,
    live_works: BTreeSet<WorkId>,
    works: Vec<Work>,
    cap: usize,
    now_millis: u64,
    next_pid: u32,
    next_start: u64,
    next_token: u64,
    turns: BTreeMap<String, u32>,
    flights: Vec<Flight>,
    runners: Vec<Runner>,
    all: Vec<ProcessIdentity>,
    issued: BTreeSet<SlotToken>,
    retired: BTreeSet<SlotToken>,
    /// Turns whose record holds an outcome (ran, dropped, superseded, cancelled).
    settled: BTreeSet<TurnKey>,
    /// How many works each turn had started.
    runs: BTreeMap<TurnKey, u32>,
    /// Turns that ever had a slot reserved (started work: never a mere waiter again).
    reserved: BTreeSet<TurnKey>,
}

impl World {
    fn new(cap: usize) -> Self {
        World {
            state: QueueState::default(),
            procs: Procs::new(),
            live_works: BTreeSet::new(),
            works: Vec::new(),
            cap,
            now_millis: 0,
            next_pid: 100,
            next_start: 1,
            next_token: 1,
            turns: BTreeMap::new(),
            flights: Vec::new(),
            runners: Vec::new(),
            all: Vec::new(),
            issued: BTreeSet::new(),
            retired: BTreeSet::new(),
            settled: BTreeSet::new(),
            runs: BTreeMap::new(),
            reserved: BTreeSet::new(),
        }
    }

    fn process(&mut self) -> ProcessIdentity {
        self.next_pid += 1;
        self.next_start += 1;
        let id = self.procs.start(self.next_pid, self.next_start);
        self.all.push(id);
        id
    }

    fn fresh(&mut self) -> SlotToken {
        self.next_token += 1;
        let t = token(self.next_token);
        assert!(self.issued.insert(t), "S8: token {t} handed out twice");
        t
    }

    /// Ground truth: the process really runs (the core only sees observations, which may be
    /// ambiguous for a dead, reused pid).
    fn live(&self, id: &ProcessIdentity) -> bool {
        self.procs.is_running(id)
    }

    fn tokens_on_rows(&self) -> BTreeSet<SlotToken> {
        self.state
            .entries
            .iter()
            .filter_map(|e| e.slot_reservation.as_ref().map(|r| r.token))
            .collect()
    }

    fn pick<T>(items: Vec<T>, i: u8) -> Option<T> {
        let n = items.len();
        items.into_iter().nth(i as usize % n.max(1))
    }

    fn fly(&mut self, owner: ProcessIdentity, handoff: Handoff) {
        self.reserved.insert(handoff.key().clone());
        self.flights.push(Flight {
            owner,
            stage: InFlight::Reserved(handoff),
            spawned: false,
        });
    }

    fn end_work(&mut self, id: WorkId) {
        self.live_works.remove(&id);
    }

    fn step(&mut self, op: Op) {
        self.now_millis += 1;
        let before_tokens = self.tokens_on_rows();
        match op {
            Op::Submit(i) => {
                let me = self.process();
                let (name, strategy) = TASKS[i as usize % TASKS.len()];
                let turn = self.turns.entry(name.to_string()).or_insert(0);
                *turn += 1;
                let key = TurnKey::new(name, *turn);
                let fresh = self.fresh();
                let seen = Seen {
                    procs: &self.procs,
                    works: &self.live_works,
                };
                let decision = submit(
                    &mut self.state,
                    SubmitInput {
                        key: &key,
                        me,
                        fresh_token: fresh,
                        now_millis: self.now_millis,
                        cap: self.cap,
                        strategy,
                        liveness: &seen,
                    },
                )
                .expect("submit");
                self.settled.extend(decision.superseded.iter().cloned());
                match decision.effect {
                    SubmitEffect::Spawn(handoff) => self.fly(me, handoff),
                    SubmitEffect::Dropped { .. } => {
                        assert!(
                            self.state.row(&key).is_none(),
                            "a dropped turn was enqueued"
                        );
                        self.settled.insert(key);
                    }
                    SubmitEffect::Pending => panic!("a fresh row cannot be pending"),
                    SubmitEffect::Park | SubmitEffect::Wait { .. } => {}
                }
            }
            Op::Spawn(i) | Op::SpawnFails(i) => {
                let open: Vec<usize> = (0..self.flights.len())
                    .filter(|&f| {
                        let f = &self.flights[f];
                        !f.spawned
                            && matches!(f.stage, InFlight::Reserved(_))
                            && self.live(&f.owner)
                    })
                    .collect();
                let Some(f) = Self::pick(open, i) else { return };
                let InFlight::Reserved(handoff) = self.flights[f].stage.clone() else {
                    unreachable!()
                };
                if matches!(op, Op::SpawnFails(_)) {
                    spawn_failed(&mut self.state, handoff);
                    self.flights.remove(f);
                } else {
                    let child = self.process();
                    self.runners.push(Runner {
                        me: child,
                        key: handoff.key().clone(),
                        token: handoff.token(),
                        phase: Phase::Starting,
                    });
                    self.flights[f].spawned = true;
                    self.flights[f].stage = InFlight::Reserved(handoff);
                }
            }
            Op::First(i) => {
                let open: Vec<usize> = (0..self.flights.len())
                    .filter(|&f| {
                        let f = &self.flights[f];
                        f.spawned && matches!(f.stage, InFlight::Reserved(_)) && self.live(&f.owner)
                    })
                    .collect();
                let Some(f) = Self::pick(open, i) else { return };
                let InFlight::Reserved(handoff) = self.flights[f].stage.clone() else {
                    unreachable!()
                };
                let child = self
                    .runners
                    .iter()
                    .rev()
                    .find(|r| r.token == handoff.token())
                    .map(|r| r.me)
                    .expect("the spawned child");
                let retired = self.retired.contains(&handoff.token());
                match handoff_publish_first(&mut self.state, handoff, child) {
                    Ok(bound) => {
                        assert!(!retired, "S3: a retired token completed the first publish");
                        self.flights[f].stage = InFlight::Bound(bound);
                    }
                    Err(_) => {
                        self.flights.remove(f);
                    }
                }
            }
            Op::Second(i) => {
                let open: Vec<usize> = (0..self.flights.len())
                    .filter(|&f| {
                        let f = &self.flights[f];
                        matches!(f.stage, InFlight::Bound(_)) && self.live(&f.owner)
                    })
                    .collect();
                let Some(f) = Self::pick(open, i) else { return };
                let InFlight::Bound(bound) = self.flights.remove(f).stage else {
                    unreachable!()
                };
                let retired = self.retired.contains(&bound.token());
                if handoff_publish_second(&mut self.state, bound).is_ok() {
                    assert!(!retired, "S3: a retired token completed the second publish");
                }
            }
            Op::TakeOver(i) => {
                let open: Vec<usize> = (0..self.runners.len())
                    .filter(|&r| {
                        self.runners[r].phase == Phase::Starting && self.live(&self.runners[r].me)
                    })
                    .collect();
                let Some(r) = Self::pick(open, i) else { return };
                let runner = self.runners[r].clone();
                let already_runner = self
                    .state
                    .runner(&runner.key)
                    .is_some_and(|rec| rec.identity == runner.me);
                let retired = self.retired.contains(&runner.token);
                let seen = Seen {
                    procs: &self.procs,
                    works: &self.live_works,
                };
                let effect = runner_take_over(
                    &mut self.state,
                    TakeOverInput {
                        key: &runner.key,
                        token: runner.token,
                        me: runner.me,
                        settled: self.settled.contains(&runner.key),
                        cgroup: None,
                        liveness: &seen,
                    },
                );
                match effect {
                    Ok(TakeOverEffect::Run { work }) => {
                        assert!(
                            !retired || already_runner,
                            "S3: retired token {} took over",
                            runner.token
                        );
                        assert!(
                            !self.settled.contains(&runner.key),
                            "finished work runs again: {}",
                            runner.key
                        );
                        *self.runs.entry(runner.key.clone()).or_default() += 1;
                        self.live_works.insert(work);
                        self.works.push(Work {
                            id: work,
                            key: runner.key.clone(),
                        });
                        self.runners[r].phase = Phase::Running(work);
                    }
                    Ok(TakeOverEffect::AlreadySettled | TakeOverEffect::Cancelled) => {
                        self.runners[r].phase = Phase::Leaving
                    }
                    Ok(TakeOverEffect::Refused { .. }) | Err(_) => {
                        self.runners[r].phase = Phase::Done
                    }
                }
            }
            Op::WorkEnds(i) => {
                // The command exits; the runner records the outcome and kills the rest of it.
                let open: Vec<usize> = (0..self.runners.len())
                    .filter(|&r| {
                        matches!(self.runners[r].phase, Phase::Running(_))
                            && self.live(&self.runners[r].me)
                    })
                    .collect();
                let Some(r) = Self::pick(open, i) else { return };
                if let Phase::Running(work) = self.runners[r].phase {
                    self.end_work(work);
                }
                self.settled.insert(self.runners[r].key.clone());
                self.runners[r].phase = Phase::Leaving;
            }
            Op::Leave(i) => {
                let open: Vec<usize> = (0..self.runners.len())
                    .filter(|&r| {
                        self.runners[r].phase == Phase::Leaving && self.live(&self.runners[r].me)
                    })
                    .collect();
                let Some(r) = Self::pick(open, i) else { return };
                let runner = self.runners[r].clone();
                self.runners[r].phase = Phase::Done;
                let fresh = self.fresh();
                let strategies: BTreeMap<String, TaskStrategy> =
                    TASKS.iter().map(|(n, s)| (n.to_string(), *s)).collect();
                let seen = Seen {
                    procs: &self.procs,
                    works: &self.live_works,
                };
                let next = runner_finish(
                    &mut self.state,
                    FinishInput {
                        key: &runner.key,
                        me: runner.me,
                        fresh_token: fresh,
                        now_millis: self.now_millis,
                        cap: self.cap,
                        strategies: &strategies,
                        liveness: &seen,
                    },
                );
                if let Ok(Some(handoff)) = next {
                    self.fly(runner.me, handoff);
                }
            }
            Op::Reconcile => {
                let me = self.process();
                let strategies: BTreeMap<String, TaskStrategy> =
                    TASKS.iter().map(|(n, s)| (n.to_string(), *s)).collect();
                for _ in 0..(3 * (self.state.entries.len() + self.state.works.len()) + 2) {
                    let fresh = self.fresh();
                    let records: TurnRecords =
                        self.settled.iter().map(|k| (k.clone(), SETTLED)).collect();
                    let seen = Seen {
                        procs: &self.procs,
                        works: &self.live_works,
                    };
                    let effect = reconcile(
                        &mut self.state,
                        ReconcileInput {
                            me,
                            fresh_token: fresh,
                            now_millis: self.now_millis,
                            cap: self.cap,
                            strategies: &strategies,
                            records: &records,
                            liveness: &seen,
                        },
                    )
                    .expect("reconcile");
                    match effect {
                        ReconcileEffect::Spawn { handoff, .. } => {
                            self.fly(me, handoff);
                            break;
                        }
                        ReconcileEffect::Kill { work, .. } => self.end_work(work.id),
                        ReconcileEffect::Idle | ReconcileEffect::Saturated => break,
                        _ => {}
                    }
                }
            }
            Op::Cancel(i) => {
                let (task, _) = TASKS[i as usize % TASKS.len()];
                let seen = Seen {
                    procs: &self.procs,
                    works: &self.live_works,
                };
                let effect = cancel(&mut self.state, CancelSelection::Task(task), &seen);
                for key in &effect.removed {
                    assert!(
                        !self
                            .live_works
                            .iter()
                            .any(|w| self.works.iter().any(|x| x.id == *w && &x.key == key)),
                        "cancel removed the row of {key} while its work lives"
                    );
                    self.settled.insert(key.clone());
                }
                for work in &effect.kill {
                    self.end_work(work.id);
                }
                // A signalled runner's command stops; it records the cancellation and leaves.
                for (key, executor) in &effect.signal {
                    if let Some(r) = self.runners.iter_mut().find(|r| r.me == *executor) {
                        if let Phase::Running(work) = r.phase {
                            self.live_works.remove(&work);
                            self.settled.insert(key.clone());
                            r.phase = Phase::Leaving;
                        }
                    }
                }
            }
            Op::Crash(i) => {
                // A process dies; the work it started does not.
                let live: Vec<ProcessIdentity> =
                    self.all.iter().copied().filter(|p| self.live(p)).collect();
                if let Some(victim) = Self::pick(live, i) {
                    self.procs.kill(victim);
                }
            }
            Op::ReusePid(i, ambiguous) => {
                let dead: Vec<ProcessIdentity> =
                    self.all.iter().copied().filter(|p| !self.live(p)).collect();
                if let Some(old) = Self::pick(dead, i) {
                    if ambiguous {
                        self.procs.make_ambiguous(old.pid);
                    } else {
                        self.next_start += 1;
                        let reused = self.procs.start(old.pid, self.next_start);
                        self.all.push(reused);
                    }
                }
            }
        }
        let after_tokens = self.tokens_on_rows();
        for gone in before_tokens.difference(&after_tokens) {
            self.retired.insert(*gone);
        }
        for t in &after_tokens {
            assert!(
                !self.retired.contains(t) || before_tokens.contains(t),
                "S8: retired token {t} reinstalled"
            );
        }
        self.check();
    }

    fn check(&self) {
        self.state.check_structure().expect("S7: FIFO structure");
        let live: Vec<&Work> = self
            .works
            .iter()
            .filter(|w| self.live_works.contains(&w.id))
            .collect();
        assert!(
            live.len() <= self.cap,
            "S1 over work: {} live works over cap {}: {live:?}\n{:#?}",
            live.len(),
            self.cap,
            self.state
        );
        let mut per_turn: BTreeMap<&TurnKey, usize> = BTreeMap::new();
        let mut per_task: BTreeMap<&str, usize> = BTreeMap::new();
        for w in &live {
            *per_turn.entry(&w.key).or_default() += 1;
            *per_task.entry(w.key.task.as_str()).or_default() += 1;
        }
        assert!(
            per_turn.values().all(|n| *n <= 1),
            "S2 over work: two live works of one turn: {per_turn:?}"
        );
        for (task, running) in &per_task {
            let max = match strategy_of(task) {
                TaskStrategy::Concurrent { max } => max as usize,
                _ => 1,
            };
            assert!(
                *running <= max,
                "{task}: {running} live works over its strategy's {max}"
            );
        }
        for (task, strategy) in TASKS {
            let rows = self.state.entries.iter().filter(|e| e.key.task == task);
            // A waiter is a parked row that never had a slot: a started turn parked again after its
            // owner died waits in line instead, and is never superseded silently.
            let waiters = rows
                .clone()
                .filter(|e| e.state == RowState::Parked && !self.reserved.contains(&e.key))
                .count();
            match strategy {
                TaskStrategy::Queue | TaskStrategy::Debounce { .. } => {
                    assert!(waiters <= 1, "A4: {task}: {waiters} parked waiters")
                }
                TaskStrategy::Drop => assert!(rows.count() <= 1, "{task}: a drop task queued two"),
                TaskStrategy::Concurrent { .. } => {}
            }
        }
        let seen = Seen {
            procs: &self.procs,
            works: &self.live_works,
        };
        let occupied = occupied_runner_slots(&self.state, &seen, None, None);
        assert!(
            occupied >= live.len(),
            "S4: occupancy {occupied} below {} live works",
            live.len()
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1024, ..ProptestConfig::default() })]

    #[test]
    fn s_invariants_hold_after_every_step(cap in 1usize..3, ops in prop::collection::vec(op(), 1..80)) {
        let mut world = World::new(cap);
        for op in ops {
            world.step(op);
        }
    }
}
