//! Conformance of the shell with the core: seeded random walks where every step calls a real shell
//! entry point the production paths call (`submit_detached`, the detached runner's
//! `runner::take_over_to_run`, `runner::record_leader`, its finish `runner::finish_with` with the
//! result written in the finish section, `runner::leave_and_start_next` for a turn found settled,
//! `reconcile`, `cancel`) against the in-memory store, a fixture
//! spawner and a fixture liveness, and the same step through the core's steps directly on a mirror
//! (the sequence spec/slots.md prescribes for the section and its effect). After every step the
//! store's queue must equal the mirror's, and the shell's fixture world (processes spawned, works
//! killed, executors signalled, tokens drawn) must equal the mirror's: a shell that calls another
//! step, calls them in another order, passes other inputs, or performs an effect differently fails
//! here. A mismatch prints the seed and the numbered path.
//!
//! Turn records live in a temporary home on tmpfs (they are the shell's other half of a section:
//! the mirror models them as its `settled` set). `tests/model_conformance.rs` is the separate
//! on-disk round trip of model states through `queue.json`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};
use tollgate::home::Home;
use tollgate::process::work::WorkKill;
use tollgate::process::{RunnerSpawner, SpawnError};
use tollgate::protocol::admission::Strategy;
use tollgate::protocol::slots::steps::*;
use tollgate::protocol::slots::*;
use tollgate::queue::{MemoryStore, Store};
use tollgate::runner::Execution;
use tollgate::runtime::Runtime;
use tollgate::submit::{submit_detached, SubmitRequest};
use tollgate::tasks::{self, TurnOutcome};

const TASKS: [(&str, Strategy); 5] = [
    ("one", Strategy::Concurrent { max: 1 }),
    ("queue", Strategy::Queue),
    ("drop", Strategy::Drop),
    ("two", Strategy::Concurrent { max: 2 }),
    ("debounce", Strategy::Debounce { quiet_millis: 3 }),
];

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
// The mirror: the core's steps, in the order spec/slots.md gives for each section and effect.
// ---------------------------------------------------------------------------------------------

struct Mirror {
    state: QueueState,
    world: World,
    cap: usize,
    turns: BTreeMap<String, u32>,
    /// Each task's strategy as its record holds it.
    strategies: BTreeMap<String, Strategy>,
    /// Turns whose record has an outcome.
    settled: BTreeSet<TurnKey>,
    /// Turns written without a row (a submitter that died in its section).
    orphans: BTreeSet<TurnKey>,
}

impl Mirror {
    /// The driver's handoff: spawn, then first and second publish; a failed spawn releases.
    fn hand_off(&mut self, handoff: Handoff) {
        match self.world.spawn(handoff.key(), handoff.token()) {
            None => {
                spawn_failed(&mut self.state, handoff);
            }
            Some(child) => {
                if let Ok(bound) = handoff_publish_first(&mut self.state, handoff, child) {
                    let _ = handoff_publish_second(&mut self.state, bound);
                }
            }
        }
    }

    fn next_turn(&mut self, task: &str) -> TurnKey {
        let turn = self.turns.entry(task.to_string()).or_insert(0);
        *turn += 1;
        TurnKey::new(task, *turn)
    }

    fn submit(&mut self, me: ProcessIdentity, task: &str, strategy: Strategy) {
        self.strategies.insert(task.to_string(), strategy);
        let key = self.next_turn(task);
        let now_millis = self.world.now_millis;
        let fresh_token = self.world.token();
        let decision = submit(
            &mut self.state,
            SubmitInput {
                key: &key,
                me,
                fresh_token,
                now_millis,
                cap: self.cap,
                strategy,
                liveness: &self.world,
            },
        )
        .expect("mirror submit");
        self.settled.extend(decision.superseded.iter().cloned());
        match decision.effect {
            SubmitEffect::Spawn(handoff) => self.hand_off(handoff),
            SubmitEffect::Wait {
                wake_at_millis: Some(at),
                ..
            } => self.world.wakers.push(at),
            SubmitEffect::Dropped { .. } => {
                self.settled.insert(key);
            }
            SubmitEffect::Park | SubmitEffect::Pending | SubmitEffect::Wait { .. } => {}
        }
    }

    fn take_over(
        &mut self,
        key: &TurnKey,
        token: SlotToken,
        me: ProcessIdentity,
    ) -> Result<TakeOverEffect, SlotError> {
        let settled = self.settled.contains(key);
        runner_take_over(
            &mut self.state,
            TakeOverInput {
                key,
                token,
                me,
                settled,
                cgroup: None,
                liveness: &self.world,
            },
        )
    }

    fn leave(&mut self, key: &TurnKey, me: ProcessIdentity) -> Result<(), SlotError> {
        let fresh_token = self.world.token();
        let next = runner_finish(
            &mut self.state,
            FinishInput {
                key,
                me,
                fresh_token,
                now_millis: self.world.now_millis,
                cap: self.cap,
                strategies: &self.strategies,
                liveness: &self.world,
            },
        )?;
        if let Some(handoff) = next {
            self.hand_off(handoff);
        }
        Ok(())
    }

    fn reconcile(&mut self, me: ProcessIdentity) {
        let candidates: Vec<TurnKey> = self
            .orphans
            .iter()
            .filter(|k| self.state.row(k).is_none() && !self.settled.contains(k))
            .cloned()
            .collect();
        let bound = reconcile_pass_bound(&self.state, &candidates);
        for _ in 0..bound {
            // What the shell reads from the records: the turns the core names (the rows that
            // are not parked, the parked ones when a slot may be free, and the candidates).
            let records: TurnRecords =
                records_needed(&self.state, &candidates, self.cap, &self.world)
                    .map(|k| {
                        let on_disk = TurnOnDisk::Record {
                            settled: self.settled.contains(k),
                            attached: false,
                            started: self.state.row(k).is_some(),
                            runner: false,
                        };
                        (k.clone(), on_disk)
                    })
                    .collect();
            let fresh_token = self.world.token();
            let effect = reconcile(
                &mut self.state,
                ReconcileInput {
                    me,
                    fresh_token,
                    now_millis: self.world.now_millis,
                    cap: self.cap,
                    strategies: &self.strategies,
                    records: &records,
                    liveness: &self.world,
                },
            )
            .expect("mirror reconcile");
            match effect {
                ReconcileEffect::Spawn { handoff, .. } => self.hand_off(handoff),
                ReconcileEffect::Kill { work, .. } => self.world.kill_work(&work),
                ReconcileEffect::Idle | ReconcileEffect::Saturated => break,
                _ => {}
            }
        }
    }

    fn cancel(&mut self, task: &str) {
        let mut signalled = Vec::new();
        for _ in 0..3 {
            let effect = cancel(&mut self.state, CancelSelection::Task(task), &self.world);
            self.settled.extend(effect.removed.iter().cloned());
            // One signal per executor per cancel.
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
    /// The turn's record as its take-over left it.
    record: Option<tasks::TurnRecord>,
    /// What its command did (or that a cancel came first): written in its finish section.
    result: Option<Execution>,
}

struct Walk {
    seed: u64,
    rng: XorShift,
    rt: Runtime<Shared, MemoryStore>,
    shared: Shared,
    mirror: Mirror,
    children: Vec<Child>,
    path: Vec<String>,
    _dir: tempfile::TempDir,
}

fn temp_home() -> tempfile::TempDir {
    let shm = std::path::Path::new("/dev/shm");
    let dir = if shm.is_dir() {
        tempfile::tempdir_in(shm)
    } else {
        tempfile::tempdir()
    };
    dir.expect("temp dir")
}

impl Walk {
    fn new(seed: u64) -> Self {
        let mut rng = XorShift(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let cap = 1 + rng.below(2);
        let dir = temp_home();
        let home = Home::at(dir.path());
        let config = home.init(Some(cap)).expect("init home");
        let world = World {
            next_pid: 100,
            now_millis: 1_000,
            ..World::default()
        };
        let shared = Shared(Arc::new(Mutex::new(world.clone())));
        let rt = Runtime {
            home,
            config,
            store: MemoryStore::default(),
            spawner: Box::new(shared.clone()),
            liveness: shared.clone(),
        };
        Walk {
            seed,
            rng,
            rt,
            shared,
            mirror: Mirror {
                state: QueueState::default(),
                world,
                cap,
                turns: BTreeMap::new(),
                strategies: BTreeMap::new(),
                settled: BTreeSet::new(),
                orphans: BTreeSet::new(),
            },
            children: Vec::new(),
            path: Vec::new(),
            _dir: dir,
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

    fn step(&mut self) {
        let roll = self.rng.below(100);
        let description = match roll {
            0..=24 => {
                let (task, strategy) = TASKS[self.rng.below(TASKS.len())];
                let me = self.new_process();
                self.mirror.submit(me, task, strategy);
                let request = SubmitRequest {
                    task: Some(task.to_string()),
                    strategy: Some(strategy),
                    argv: vec!["true".into()],
                    cwd: None,
                    env: BTreeMap::new(),
                    labels: Vec::new(),
                    timeout_millis: None,
                    schedule: Default::default(),
                    delivery: None,
                };
                let outcome = submit_detached(&self.rt, me, request).map(|s| s.placement);
                // The submitter exits once its command returns.
                self.both(|w| {
                    w.alive.remove(&me);
                });
                format!("submit {task} ({strategy}) as pid {}: {outcome:?}", me.pid)
            }
            25..=36 => match self.pick(|p| *p == Phase::Starting) {
                None => "take-over: no child waits".to_string(),
                Some(c) => {
                    let child = self.children[c].clone();
                    let mirrored = self.mirror.take_over(&child.key, child.token, child.me);
                    let taken = tollgate::runner::take_over_to_run(
                        &self.rt,
                        &child.key,
                        child.token,
                        child.me,
                        None,
                    );
                    let shell = match taken {
                        Ok((effect, record)) => {
                            self.children[c].record = Some(record);
                            Ok(effect)
                        }
                        Err(e) => Err(e),
                    };
                    let same = match (&mirrored, &shell) {
                        (Ok(a), Ok(b)) => a == b,
                        (Err(a), Err(tollgate::dispatch::DispatchError::Slot(b))) => a == b,
                        _ => false,
                    };
                    assert!(
                        same,
                        "seed {}: take-over answered {shell:?}, the core {mirrored:?}\n{}",
                        self.seed,
                        self.trail()
                    );
                    self.children[c].phase = match mirrored {
                        Ok(TakeOverEffect::Run { work }) => {
                            // The command starts: a process of the work, its leader recorded.
                            let leader = self.new_process();
                            self.both(|w| {
                                w.live_works.insert(work);
                            });
                            let _ = work_started(&mut self.mirror.state, &child.key, work, leader);
                            let _ =
                                tollgate::runner::record_leader(&self.rt, &child.key, work, leader);
                            Phase::Running(work)
                        }
                        Ok(TakeOverEffect::AlreadySettled) => Phase::Leaving,
                        Ok(TakeOverEffect::Cancelled) => {
                            // The runner records the honoured cancel in its finish.
                            self.children[c].result = Some(Execution::cancelled_before_start());
                            Phase::Leaving
                        }
                        Ok(TakeOverEffect::Refused { .. }) | Err(_) => Phase::Done,
                    };
                    format!(
                        "take-over of {} by pid {}: {:?}",
                        child.key, child.me.pid, self.children[c].phase
                    )
                }
            },
            37..=48 => match self.pick(|p| matches!(p, Phase::Running(_))) {
                None => "work ends: nothing runs".to_string(),
                Some(c) => {
                    let child = self.children[c].clone();
                    if let Phase::Running(work) = child.phase {
                        self.both(|w| {
                            w.live_works.remove(&work);
                        });
                    }
                    // The runner keeps the outcome for its finish section, which records it.
                    self.children[c].result = Some(Execution {
                        outcome: TurnOutcome::Completed,
                        exit_code: Some(0),
                        signal: None,
                        error: None,
                    });
                    self.children[c].phase = Phase::Leaving;
                    format!("the work of {} ends", child.key)
                }
            },
            49..=60 => match self.pick(|p| *p == Phase::Leaving) {
                None => "leave: nobody leaves".to_string(),
                Some(c) => {
                    let child = self.children[c].clone();
                    // The runner's finish: with a result, the detached runner's own
                    // (`finish_with`, the record written in the section); a turn found settled
                    // at its take-over only leaves.
                    let shell = match (child.result, child.record) {
                        (Some(result), Some(mut record)) => {
                            self.mirror.settled.insert(child.key.clone());
                            tollgate::runner::finish_with(&self.rt, &mut record, &result, child.me)
                        }
                        _ => tollgate::runner::leave_and_start_next(&self.rt, &child.key, child.me),
                    };
                    let mirrored = self.mirror.leave(&child.key, child.me);
                    self.children[c].phase = Phase::Done;
                    // The runner exits.
                    self.both(|w| {
                        w.alive.remove(&child.me);
                    });
                    format!(
                        "pid {} leaves {}: core {mirrored:?}, shell {:?}",
                        child.me.pid,
                        child.key,
                        shell.map(|n| n.map(|h| h.child()))
                    )
                }
            },
            61..=70 => {
                let me = self.new_process();
                self.mirror.reconcile(me);
                let report = tollgate::reconcile::reconcile(&self.rt, me).map(|r| r.steps);
                self.both(|w| {
                    w.alive.remove(&me);
                });
                format!("reconcile as pid {}: {report:?}", me.pid)
            }
            71..=75 => {
                let (task, _) = TASKS[self.rng.below(TASKS.len())];
                if self.mirror.turns.contains_key(task) {
                    self.mirror.cancel(task);
                    let report = tollgate::cancel::cancel(&self.rt, task)
                        .map(|r| (r.removed, r.signalled.len(), r.killed.len()));
                    format!("cancel {task}: {report:?}")
                } else {
                    format!("cancel {task}: no such task yet")
                }
            }
            76..=87 => {
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
            88..=92 => {
                let by = 1 + self.rng.below(4) as u64;
                self.both(|w| w.now_millis += by);
                format!("{by} ms pass")
            }
            93..=96 => {
                self.both(|w| w.fail_next_spawn = true);
                "the next spawn fails".to_string()
            }
            _ => {
                let (task, _) = TASKS[self.rng.below(TASKS.len())];
                // What a submitter killed between writing the record and publishing its row leaves.
                let key = self.mirror.next_turn(task);
                self.mirror.strategies.entry(task.to_string()).or_default();
                self.mirror.orphans.insert(key.clone());
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
                assert_eq!(turn.key, key, "seed {}: turn numbers agree", self.seed);
                format!("a submitter dies after writing {key}'s record, before its row")
            }
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

    fn compare(&self) {
        let shell = self.rt.store.load().expect("load the in-memory queue");
        assert!(
            shell == self.mirror.state,
            "seed {}: after step {} the shell's queue differs from the core's\nshell: {:#?}\ncore:  {:#?}\npath:\n{}",
            self.seed,
            self.path.len(),
            shell,
            self.mirror.state,
            self.trail()
        );
        let world = self.shared.world().clone();
        assert!(
            world == self.mirror.world,
            "seed {}: after step {} the shell's effects differ from the core's\nshell: {world:#?}\ncore:  {:#?}\npath:\n{}",
            self.seed,
            self.path.len(),
            self.mirror.world,
            self.trail()
        );
    }
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
        .unwrap_or(1_000);
    let steps_per_walk = 40;
    let mut steps = 0usize;
    let mut spawns = 0usize;
    let mut kills = 0usize;
    for seed in 0..walks {
        let mut walk = Walk::new(seed);
        for _ in 0..steps_per_walk {
            walk.step();
            steps += 1;
        }
        spawns += walk.mirror.world.spawned.len();
        kills += walk.mirror.world.killed.len();
    }
    report(&format!(
        "shell conformance: {walks} seeded walks, {steps} steps through the shell entry points, \
         {spawns} runner spawns, {kills} work kills, 0 mismatches"
    ));
    assert!(spawns > 0 && kills > 0, "the walks reach spawns and kills");
}
