//! proptest over random interleavings of the slot protocol's steps, driven through the production
//! core with fixture processes: enqueue + reserve (submit), spawn, release, the two publishes,
//! take-over, finish + start-next, reconcile (steals included), crashes and pid reuse. The S
//! invariants of spec/invariants.md are checked after every step.

mod common;

use common::{token, Procs};
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};
use tollgate::protocol::slots::*;

#[derive(Clone, Debug)]
enum Op {
    Submit(u8),
    Spawn(u8),
    SpawnFails(u8),
    First(u8),
    Second(u8),
    TakeOver(u8),
    Finish(u8),
    Reconcile,
    Crash(u8),
    ReusePid(u8, bool),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0u8..3).prop_map(Op::Submit),
        3 => any::<u8>().prop_map(Op::Spawn),
        1 => any::<u8>().prop_map(Op::SpawnFails),
        3 => any::<u8>().prop_map(Op::First),
        3 => any::<u8>().prop_map(Op::Second),
        3 => any::<u8>().prop_map(Op::TakeOver),
        3 => any::<u8>().prop_map(Op::Finish),
        2 => Just(Op::Reconcile),
        2 => any::<u8>().prop_map(Op::Crash),
        1 => (any::<u8>(), any::<bool>()).prop_map(|(p, a)| Op::ReusePid(p, a)),
    ]
}

/// A reserver's handoff in flight: what it holds between its steps.
#[derive(Clone, Debug)]
struct Handoff {
    owner: ProcessIdentity,
    key: TurnKey,
    token: SlotToken,
    snapshot: QueueEntry,
    child: Option<ProcessIdentity>,
    first_done: bool,
    done: bool,
}

#[derive(Clone, Debug)]
struct Child {
    me: ProcessIdentity,
    key: TurnKey,
    token: SlotToken,
    running: bool,
    finished: bool,
}

struct World {
    state: QueueState,
    procs: Procs,
    cap: usize,
    next_pid: u32,
    next_start: u64,
    next_token: u64,
    turns: BTreeMap<String, u32>,
    handoffs: Vec<Handoff>,
    children: Vec<Child>,
    all: Vec<ProcessIdentity>,
    issued: BTreeSet<SlotToken>,
    retired: BTreeSet<SlotToken>,
    ran: BTreeMap<TurnKey, u32>,
}

impl World {
    fn new(cap: usize) -> Self {
        World {
            state: QueueState::default(),
            procs: Procs::new(),
            cap,
            next_pid: 100,
            next_start: 1,
            next_token: 1,
            turns: BTreeMap::new(),
            handoffs: Vec::new(),
            children: Vec::new(),
            all: Vec::new(),
            issued: BTreeSet::new(),
            retired: BTreeSet::new(),
            ran: BTreeMap::new(),
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

    /// Tokens on rows before an operation; any that vanish from every row are retired for good.
    fn tokens_on_rows(&self) -> BTreeSet<SlotToken> {
        self.state
            .entries
            .iter()
            .filter_map(|e| e.slot_reservation.as_ref().map(|r| r.token))
            .collect()
    }

    fn start_handoff(&mut self, owner: ProcessIdentity, key: TurnKey, token: SlotToken) {
        let snapshot = self.state.row(&key).cloned().expect("acquired row exists");
        self.handoffs.push(Handoff {
            owner,
            key,
            token,
            snapshot,
            child: None,
            first_done: false,
            done: false,
        });
    }

    fn step(&mut self, op: Op) {
        let before_tokens = self.tokens_on_rows();
        match op {
            Op::Submit(task) => {
                let me = self.process();
                let name = format!("t{task}");
                let turn = self.turns.entry(name.clone()).or_insert(0);
                *turn += 1;
                let key = TurnKey::new(name, *turn);
                let fresh = self.fresh();
                enqueue(&mut self.state, &key, me, 0).expect("enqueue");
                let outcome = reserve_runner_slot(
                    &mut self.state,
                    &key,
                    me,
                    None,
                    self.cap,
                    fresh,
                    &self.procs,
                )
                .expect("reserve");
                match outcome {
                    ReserveOutcome::Acquired { token, .. } => self.start_handoff(me, key, token),
                    ReserveOutcome::Saturated => park(&mut self.state, &key).expect("park"),
                    ReserveOutcome::Pending { .. } => panic!("a fresh row cannot be pending"),
                }
            }
            Op::Spawn(i) | Op::SpawnFails(i) => {
                let open: Vec<usize> = (0..self.handoffs.len())
                    .filter(|&h| {
                        let h = &self.handoffs[h];
                        !h.done && h.child.is_none() && self.procs.is_running(&h.owner)
                    })
                    .collect();
                if open.is_empty() {
                    return;
                }
                let h = open[i as usize % open.len()];
                if matches!(op, Op::SpawnFails(_)) {
                    let (key, token, owner) = {
                        let h = &self.handoffs[h];
                        (h.key.clone(), h.token, h.owner)
                    };
                    release_runner_slot(&mut self.state, &key, token, owner);
                    self.handoffs[h].done = true;
                } else {
                    let child = self.process();
                    self.handoffs[h].child = Some(child);
                    let (key, token) = (self.handoffs[h].key.clone(), self.handoffs[h].token);
                    self.children.push(Child {
                        me: child,
                        key,
                        token,
                        running: false,
                        finished: false,
                    });
                }
            }
            Op::First(i) | Op::Second(i) => {
                let first = matches!(op, Op::First(_));
                let open: Vec<usize> = (0..self.handoffs.len())
                    .filter(|&h| {
                        let h = &self.handoffs[h];
                        !h.done
                            && h.child.is_some()
                            && h.first_done != first
                            && self.procs.is_live(&h.owner)
                    })
                    .collect();
                if open.is_empty() {
                    return;
                }
                let h = open[i as usize % open.len()];
                let hand = self.handoffs[h].clone();
                let child = hand.child.expect("filtered on child");
                let retired = self.retired.contains(&hand.token);
                let result = if first {
                    complete_runner_spawn_first(&mut self.state, &hand.key, hand.token, child)
                } else {
                    token_fenced_row_after_bind(&hand.snapshot, hand.token, child).and_then(
                        |expected| {
                            complete_runner_spawn_second(&mut self.state, &expected, child, false)
                        },
                    )
                };
                assert!(
                    !(retired && result.is_ok()),
                    "S3: retired token {} completed a publish",
                    hand.token
                );
                self.handoffs[h].first_done = true;
                if result.is_err() || !first {
                    self.handoffs[h].done = true;
                }
            }
            Op::TakeOver(i) => {
                let open: Vec<usize> = (0..self.children.len())
                    .filter(|&c| {
                        !self.children[c].running
                            && !self.children[c].finished
                            && self.live(&self.children[c].me)
                    })
                    .collect();
                if open.is_empty() {
                    return;
                }
                let c = open[i as usize % open.len()];
                let child = self.children[c].clone();
                let already_runner = self
                    .state
                    .runner(&child.key)
                    .is_some_and(|r| r.identity == child.me);
                let retired = self.retired.contains(&child.token);
                match take_over_reserved_slot(
                    &mut self.state,
                    &child.key,
                    child.token,
                    child.me,
                    &self.procs,
                ) {
                    Ok(TakeOver::Running { .. }) => {
                        assert!(
                            !retired || already_runner,
                            "S3: retired token {} took over",
                            child.token
                        );
                        self.children[c].running = true;
                    }
                    Ok(TakeOver::Refused { .. }) | Err(_) => self.children[c].finished = true,
                }
            }
            Op::Finish(i) => {
                let open: Vec<usize> = (0..self.children.len())
                    .filter(|&c| {
                        self.children[c].running
                            && !self.children[c].finished
                            && self.live(&self.children[c].me)
                    })
                    .collect();
                if open.is_empty() {
                    return;
                }
                let c = open[i as usize % open.len()];
                let child = self.children[c].clone();
                *self.ran.entry(child.key.clone()).or_insert(0) += 1;
                self.children[c].finished = true;
                if finish_turn(&mut self.state, &child.key, child.me).is_ok() {
                    let fresh = self.fresh();
                    if let StartNext::Acquired { key, token } = start_next_parked(
                        &mut self.state,
                        child.me,
                        Some(child.me.pid),
                        self.cap,
                        fresh,
                        &self.procs,
                    )
                    .expect("start next")
                    {
                        self.start_handoff(child.me, key, token);
                    }
                }
            }
            Op::Reconcile => {
                let me = self.process();
                for _ in 0..(2 * self.state.entries.len() + 2) {
                    let fresh = self.fresh();
                    let ran = self.ran.clone();
                    let step = reconcile_step(
                        &mut self.state,
                        me,
                        self.cap,
                        fresh,
                        &self.procs,
                        &|k: &TurnKey| ran.contains_key(k),
                    )
                    .expect("reconcile");
                    match step {
                        ReconcileStep::Spawn { key, token, .. } => {
                            self.start_handoff(me, key, token);
                            break;
                        }
                        ReconcileStep::Idle | ReconcileStep::Saturated => break,
                        _ => {}
                    }
                }
            }
            Op::Crash(i) => {
                let live: Vec<ProcessIdentity> =
                    self.all.iter().copied().filter(|p| self.live(p)).collect();
                if let Some(victim) = live.get(i as usize % live.len().max(1)) {
                    self.procs.kill(*victim);
                }
            }
            Op::ReusePid(i, ambiguous) => {
                let dead: Vec<ProcessIdentity> =
                    self.all.iter().copied().filter(|p| !self.live(p)).collect();
                if let Some(old) = dead.get(i as usize % dead.len().max(1)) {
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
        let executing: Vec<&Child> = self
            .children
            .iter()
            .filter(|c| c.running && !c.finished && self.live(&c.me))
            .collect();
        assert!(
            executing.len() <= self.cap,
            "S1: {} live runners over cap {}: {:#?}",
            executing.len(),
            self.cap,
            self.state
        );
        let mut per_turn: BTreeMap<&TurnKey, usize> = BTreeMap::new();
        for c in &executing {
            *per_turn.entry(&c.key).or_default() += 1;
        }
        assert!(
            per_turn.values().all(|n| *n <= 1),
            "S2: two executors of one turn: {per_turn:?}"
        );
        let occupied = occupied_runner_slots(&self.state, &self.procs, None, None);
        assert!(
            occupied >= executing.len(),
            "S4: occupancy {occupied} below {} live runners",
            executing.len()
        );
        for entry in &self.state.entries {
            if let Some(r) = &entry.slot_reservation {
                if r.child.is_some_and(|c| self.live(&c)) {
                    // S4 in ground truth: a really running bound child is counted.
                    assert!(occupied >= 1, "S4/S5: a bound live child is not counted");
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1024, ..ProptestConfig::default() })]

    #[test]
    fn s_invariants_hold_after_every_step(cap in 1usize..3, ops in prop::collection::vec(op(), 1..60)) {
        let mut world = World::new(cap);
        for op in ops {
            world.step(op);
        }
    }
}
