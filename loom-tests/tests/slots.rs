//! loom races of the slot core as the shell drives it: each locked section (what the shell does
//! under `queue.lock`) is one core step (`tollgate::protocol::slots::steps`) run under a
//! `tollgate::sync::Mutex`, and loom explores every order in which concurrent submitters, a
//! finishing runner and a reconciler killing a dead runner's work can take it.
#![cfg(tollgate_loom)]

use std::collections::{BTreeMap, BTreeSet};
use tollgate::protocol::admission::Strategy;
use tollgate::protocol::slots::steps::*;
use tollgate::protocol::slots::*;
use tollgate::sync::{lock, thread, Arc, Mutex};

fn id(pid: u32) -> ProcessIdentity {
    ProcessIdentity {
        pid,
        start_time_micros: 1,
    }
}

fn token(n: u64) -> SlotToken {
    SlotToken::new(uuid::Uuid::from_u64_pair(1, n)).expect("non-nil")
}

/// Processes alive unless listed dead; works alive while listed.
struct World<'a> {
    dead: &'a [ProcessIdentity],
    live_works: &'a BTreeSet<WorkId>,
}

impl Liveness for World<'_> {
    fn observe(&self, identity: &ProcessIdentity) -> Observation {
        if self.dead.contains(identity) {
            Observation::Gone
        } else {
            Observation::Matching
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

const NO_WORKS: &BTreeSet<WorkId> = &BTreeSet::new();
const ALL_LIVE: World<'static> = World {
    dead: &[],
    live_works: NO_WORKS,
};

/// The submit section: one core step. Returns the handoff when it reserved a slot.
fn submit_section(
    queue: &Mutex<QueueState>,
    liveness: &World<'_>,
    me: ProcessIdentity,
    task: &str,
    fresh: SlotToken,
    cap: usize,
) -> Option<Handoff> {
    let mut state = lock(queue);
    let key = TurnKey::new(task, 1);
    let decision = submit(
        &mut state,
        SubmitInput {
            key: &key,
            me,
            fresh_token: fresh,
            now_millis: 0,
            cap,
            strategy: Strategy::default(),
            liveness,
        },
    )
    .expect("submit");
    match decision.effect {
        SubmitEffect::Spawn(handoff) => Some(handoff),
        _ => None,
    }
}

/// A queue where `runner` runs `x turn 1` on the only slot, reached through the steps.
fn one_running(runner: ProcessIdentity) -> QueueState {
    let mut state = QueueState::default();
    let x = TurnKey::new("x", 1);
    let decision = submit(
        &mut state,
        SubmitInput {
            key: &x,
            me: id(9),
            fresh_token: token(1),
            now_millis: 0,
            cap: 1,
            strategy: Strategy::default(),
            liveness: &ALL_LIVE,
        },
    )
    .expect("submit x");
    let SubmitEffect::Spawn(handoff) = decision.effect else {
        panic!("x starts on the free slot")
    };
    let bound = handoff_publish_first(&mut state, handoff, runner).expect("first publish");
    handoff_publish_second(&mut state, bound).expect("second publish");
    runner_take_over(
        &mut state,
        TakeOverInput {
            key: &x,
            token: token(1),
            me: runner,
            settled: false,
            cgroup: None,
            liveness: &ALL_LIVE,
        },
    )
    .expect("take over x");
    state
}

/// S1 under concurrency: with one slot held by a runner that is finishing, a concurrent submitter
/// and the finisher's start-next never both acquire; if neither does, the row is left parked (the
/// case reconcile exists for, S6).
#[test]
fn finishing_runner_and_submitter_never_overspawn() {
    loom::model(|| {
        let runner = id(1);
        let queue = Arc::new(Mutex::new(one_running(runner)));

        let q = queue.clone();
        let submitter =
            thread::spawn(move || submit_section(&q, &ALL_LIVE, id(2), "a", token(2), 1).is_some());
        let q = queue.clone();
        let finisher = thread::spawn(move || {
            let mut state = lock(&q);
            let strategies = BTreeMap::new();
            runner_finish(
                &mut state,
                FinishInput {
                    key: &TurnKey::new("x", 1),
                    me: runner,
                    fresh_token: token(3),
                    now_millis: 0,
                    cap: 1,
                    strategies: &strategies,
                    liveness: &ALL_LIVE,
                },
            )
            .expect("finish")
            .is_some()
        });
        let submitted = submitter.join().expect("submitter");
        let started = finisher.join().expect("finisher");
        assert!(!(submitted && started), "S1: both acquired the one slot");
        let state = lock(&queue);
        let a = state.row(&TurnKey::new("a", 1)).expect("row a");
        if !submitted && !started {
            assert_eq!(
                a.state,
                RowState::Parked,
                "S6: not started means parked for reconcile"
            );
        }
        assert!(
            occupied_runner_slots(&state, &ALL_LIVE, None, None)
                >= usize::from(submitted || started)
        );
    });
}

/// S1 and S7: two submitters racing for one slot: exactly one acquires, FIFO holds.
#[test]
fn two_submitters_one_slot_exactly_one_acquires() {
    loom::model(|| {
        let queue = Arc::new(Mutex::new(QueueState::default()));
        let handles: Vec<_> = (0..2u32)
            .map(|i| {
                let q = queue.clone();
                thread::spawn(move || {
                    submit_section(
                        &q,
                        &ALL_LIVE,
                        id(10 + i),
                        &format!("t{i}"),
                        token(10 + u64::from(i)),
                        1,
                    )
                    .is_some()
                })
            })
            .collect();
        let acquired = handles
            .into_iter()
            .map(|h| h.join().expect("submitter"))
            .filter(|a| *a)
            .count();
        assert_eq!(acquired, 1);
        let state = lock(&queue);
        state.check_structure().expect("S7");
        assert_eq!(occupied_runner_slots(&state, &ALL_LIVE, None, None), 1);
    });
}

/// S1 over work: the runner of the only slot died, its work lives on. A reconciler (kill, then
/// replace) and a submitter race; the work is killed outside the queue lock, as the driver does.
/// Whoever reserves the slot does so only after the work is gone, and only one of them does.
#[test]
fn a_dead_runners_live_work_keeps_its_slot_until_killed() {
    loom::model(|| {
        let runner = id(1);
        let initial = one_running(runner);
        let work = initial.works[0].id;
        let queue = Arc::new(Mutex::new(initial));
        let works = Arc::new(Mutex::new(BTreeSet::from([work])));
        const DEAD: &[ProcessIdentity] = &[ProcessIdentity {
            pid: 1,
            start_time_micros: 1,
        }];

        let (q, w) = (queue.clone(), works.clone());
        let submitter = thread::spawn(move || {
            let mut state = lock(&q);
            let live = lock(&w).clone();
            let world = World {
                dead: DEAD,
                live_works: &live,
            };
            let decision = submit(
                &mut state,
                SubmitInput {
                    key: &TurnKey::new("a", 1),
                    me: id(2),
                    fresh_token: token(2),
                    now_millis: 0,
                    cap: 1,
                    strategy: Strategy::default(),
                    liveness: &world,
                },
            )
            .expect("submit");
            let acquired = matches!(decision.effect, SubmitEffect::Spawn(_));
            assert!(
                !(acquired && live.contains(&work)),
                "S1 over work: a slot was given while the dead runner's work lives"
            );
            acquired
        });
        let (q, w) = (queue.clone(), works.clone());
        let reconciler = thread::spawn(move || {
            let mut spawned = 0usize;
            for n in 0..4u64 {
                let effect = {
                    let mut state = lock(&q);
                    let live = lock(&w).clone();
                    let world = World {
                        dead: DEAD,
                        live_works: &live,
                    };
                    let (strategies, records) = (BTreeMap::new(), TurnRecords::new());
                    let effect = reconcile(
                        &mut state,
                        ReconcileInput {
                            me: id(3),
                            fresh_token: token(20 + n),
                            now_millis: 0,
                            cap: 1,
                            strategies: &strategies,
                            records: &records,
                            liveness: &world,
                        },
                    )
                    .expect("reconcile");
                    if matches!(effect, ReconcileEffect::Spawn { .. }) {
                        assert!(
                            !live.contains(&work),
                            "S2 over work: re-run next to the old work"
                        );
                    }
                    effect
                };
                match effect {
                    // The driver's kill, outside the queue lock.
                    ReconcileEffect::Kill { work, .. } => {
                        lock(&w).remove(&work.id);
                    }
                    ReconcileEffect::Spawn { .. } => spawned += 1,
                    ReconcileEffect::Idle | ReconcileEffect::Saturated => break,
                    _ => {}
                }
            }
            spawned
        });
        let submitted = usize::from(submitter.join().expect("submitter"));
        let replaced = reconciler.join().expect("reconciler");
        assert!(submitted + replaced <= 1, "S1: two starts on the one slot");
    });
}
