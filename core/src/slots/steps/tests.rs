//! Unit tests of the steps: each sequence the shell runs, and the work rule (S1/S2 over work).

use super::*;
use crate::slots::Observation;
use std::collections::BTreeSet;
use uuid::Uuid;

/// A fixture world: which identities and which works are alive.
#[derive(Default)]
struct World {
    live: BTreeSet<ProcessIdentity>,
    live_works: BTreeSet<WorkId>,
    /// The host the steps run on is drained (`Liveness::may_start` is false).
    drained: bool,
}

impl Liveness for World {
    fn observe(&self, identity: &ProcessIdentity) -> Observation {
        if self.live.contains(identity) {
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

    fn may_start(&self) -> bool {
        !self.drained
    }
}

fn id(pid: u32) -> ProcessIdentity {
    ProcessIdentity {
        pid,
        start_time_micros: u64::from(pid) * 10,
    }
}

fn token(n: u128) -> SlotToken {
    SlotToken::new(Uuid::from_u128(0x7000_8000_0000_0000_0000 | n)).unwrap()
}

const NO_STRATEGIES: &BTreeMap<String, Strategy> = &BTreeMap::new();

fn submit_one(
    state: &mut QueueState,
    world: &World,
    key: &TurnKey,
    me: ProcessIdentity,
    n: u128,
    cap: usize,
    strategy: Strategy,
) -> SubmitDecision {
    submit(
        state,
        SubmitInput {
            key,
            me,
            fresh_token: token(n),
            now_millis: 1_000,
            cap,
            strategy,
            liveness: world,
        },
    )
    .unwrap()
}

/// Submit → spawn → both publishes → take-over: the runner ends up recorded with a work.
fn run_turn(
    state: &mut QueueState,
    world: &mut World,
    key: &TurnKey,
    submitter: ProcessIdentity,
    child: ProcessIdentity,
    n: u128,
) -> WorkId {
    world.live.insert(submitter);
    let decision = submit_one(state, world, key, submitter, n, 1, Strategy::default());
    let SubmitEffect::Spawn(handoff) = decision.effect else {
        panic!("expected a spawn, got {:?}", decision.effect)
    };
    world.live.insert(child);
    let bound = handoff_publish_first(state, handoff, child).unwrap();
    assert_eq!(handoff_publish_second(state, bound).unwrap(), child);
    let effect = runner_take_over(
        state,
        TakeOverInput {
            key,
            token: token(n),
            me: child,
            settled: false,
            cgroup: None,
            liveness: &*world,
        },
    )
    .unwrap();
    let TakeOverEffect::Run { work } = effect else {
        panic!("expected to run, got {effect:?}")
    };
    work_started(state, key, work, id(child.pid + 1)).unwrap();
    world.live_works.insert(work);
    work
}

fn reconcile_once(
    state: &mut QueueState,
    world: &World,
    me: ProcessIdentity,
    n: u128,
    settled: &BTreeSet<TurnKey>,
) -> ReconcileEffect {
    let records = settled_records(settled);
    reconcile(
        state,
        ReconcileInput {
            me,
            fresh_token: token(n),
            now_millis: 2_000,
            cap: 1,
            strategies: NO_STRATEGIES,
            records: &records,
            liveness: world,
        },
    )
    .unwrap()
}

/// What the records say for reconcile when only `settled` matters: those turns have outcomes.
fn settled_records(settled: &BTreeSet<TurnKey>) -> TurnRecords {
    settled
        .iter()
        .map(|k| {
            let turn = TurnOnDisk::Record {
                settled: true,
                attached: false,
                started: true,
                runner: true,
            };
            (k.clone(), turn)
        })
        .collect()
}

/// A runner that was taken for dead and replaced (reconcile started another runner for its turn)
/// cannot finish the turn when it comes back: its finish is refused (`QUEUE_NOT_OWNER`) and
/// changes nothing, so the replacement keeps its row, its runner record and its slot.
#[test]
fn a_replaced_runner_coming_back_cannot_finish_its_successors_turn() {
    let mut state = QueueState::default();
    let mut world = World::default();
    let key = TurnKey::new("t", 1);
    let late = id(11);
    let work = run_turn(&mut state, &mut world, &key, id(10), late, 1);
    // The runner and its work are seen gone: reconcile replaces the runner.
    world.live.remove(&late);
    world.live_works.remove(&work);
    let reconciler = id(20);
    world.live.insert(reconciler);
    let effect = reconcile_once(&mut state, &world, reconciler, 2, &BTreeSet::new());
    let ReconcileEffect::Spawn { handoff, replaced } = effect else {
        panic!("expected the runner to be replaced, got {effect:?}")
    };
    assert_eq!(replaced, Some(late));
    let successor = id(21);
    world.live.insert(successor);
    let bound = handoff_publish_first(&mut state, handoff, successor).unwrap();
    handoff_publish_second(&mut state, bound).unwrap();
    let before = state.clone();
    // The replaced runner was alive after all, and finishes.
    world.live.insert(late);
    let finished = runner_finish(
        &mut state,
        FinishInput {
            key: &key,
            me: late,
            fresh_token: token(3),
            now_millis: 3_000,
            cap: 1,
            strategies: NO_STRATEGIES,
            liveness: &world,
        },
    );
    assert!(
        matches!(finished, Err(SlotError::NotOwner { .. })),
        "a late runner's finish is refused: {finished:?}"
    );
    assert_eq!(state, before, "the refused finish changed nothing");
    assert_eq!(state.runner(&key).map(|r| r.identity), Some(successor));
}

/// A parked row holding a dead reservation (its reserver died before its spawn) is stolen by the
/// next start decision, but never on a drained host: the steal would start the turn there. The
/// finishing runner of a drained host hands nothing off and leaves the dead reservation as it
/// was; the same finish on a host that may start steals it under a fresh token.
#[test]
fn a_drained_host_never_steals_a_dead_reservation() {
    for drained in [true, false] {
        let mut state = QueueState::default();
        let mut world = World::default();
        let (a, b) = (TurnKey::new("a", 1), TurnKey::new("b", 1));
        let runner = id(11);
        run_turn(&mut state, &mut world, &a, id(10), runner, 1);
        world.live.insert(id(20));
        let parked = submit_one(&mut state, &world, &b, id(20), 2, 1, Strategy::default());
        assert_eq!(parked.effect, SubmitEffect::Park);
        let dead = id(30);
        state.row_mut(&b).unwrap().slot_reservation =
            Some(crate::slots::RunnerSlotReservation::new(dead, token(9)));
        world.drained = drained;
        let next = runner_finish(
            &mut state,
            FinishInput {
                key: &a,
                me: runner,
                fresh_token: token(3),
                now_millis: 3_000,
                cap: 1,
                strategies: NO_STRATEGIES,
                liveness: &world,
            },
        )
        .unwrap();
        let held = state.row(&b).and_then(|r| r.slot_reservation.as_ref());
        if drained {
            assert!(next.is_none(), "a drained host handed off {next:?}");
            assert_eq!(held.map(|r| r.token), Some(token(9)), "nothing was stolen");
            assert_eq!(state.row(&b).map(|r| &r.state), Some(&RowState::Parked));
        } else {
            let handoff = next.expect("an undrained host steals the dead reservation");
            assert_eq!(handoff.key(), &b);
            assert_eq!(
                held.map(|r| (r.token, r.reserver)),
                Some((token(3), runner))
            );
        }
    }
}

#[test]
fn a_drained_host_starts_nothing_and_an_undrained_one_starts_what_it_queued() {
    let mut state = QueueState::default();
    let mut world = World {
        drained: true,
        ..World::default()
    };
    let (submitter, reconciler) = (id(10), id(20));
    world.live.insert(submitter);
    let key = TurnKey::new("t", 1);
    // Its submit queues the row though a slot is free.
    let decision = submit_one(
        &mut state,
        &world,
        &key,
        submitter,
        1,
        2,
        Strategy::default(),
    );
    assert_eq!(decision.effect, SubmitEffect::Park);
    assert!(state
        .row(&key)
        .is_some_and(|r| r.slot_reservation.is_none()));
    // Its reconcile starts nothing, and its attached start waits with the turn itself.
    assert_eq!(
        reconcile_once(&mut state, &world, reconciler, 2, &BTreeSet::new()),
        ReconcileEffect::Saturated
    );
    let attached = TurnKey::new("fg", 1);
    let effect = attached_start(
        &mut state,
        AttachedInput {
            key: &attached,
            me: submitter,
            fresh_token: token(3),
            now_millis: 1_000,
            strategy: Strategy::default(),
            liveness: &world,
        },
    )
    .unwrap();
    assert_eq!(
        effect,
        AttachedEffect::Wait {
            running: attached.clone()
        }
    );
    assert!(state.row(&attached).is_none(), "nothing was enqueued");
    // Another (undrained) host's reconcile starts the queued row.
    world.drained = false;
    let effect = reconcile_once(&mut state, &world, reconciler, 4, &BTreeSet::new());
    assert!(
        matches!(&effect, ReconcileEffect::Spawn { handoff, replaced: None } if handoff.key() == &key),
        "{effect:?}"
    );
}

#[test]
fn the_whole_detached_sequence_records_the_runner_and_its_work() {
    let (mut state, mut world) = (QueueState::default(), World::default());
    let key = TurnKey::new("job", 1);
    let work = run_turn(&mut state, &mut world, &key, id(10), id(20), 1);
    assert_eq!(state.runner(&key).map(|r| r.identity), Some(id(20)));
    assert!(state.row(&key).unwrap().slot_reservation.is_none());
    let works: Vec<_> = state.works_of(&key).collect();
    assert_eq!(works.len(), 1);
    assert_eq!((works[0].id, works[0].leader), (work, Some(id(21))));
    let next = runner_finish(
        &mut state,
        FinishInput {
            key: &key,
            me: id(20),
            fresh_token: token(2),
            now_millis: 3_000,
            cap: 1,
            strategies: NO_STRATEGIES,
            liveness: &world,
        },
    )
    .unwrap();
    assert_eq!(next, None);
    assert!(state.entries.is_empty() && state.runners.is_empty() && state.works.is_empty());
}

#[test]
fn s2_over_work_a_dead_runners_live_work_is_killed_before_its_turn_runs_again() {
    let (mut state, mut world) = (QueueState::default(), World::default());
    let key = TurnKey::new("job", 1);
    let work = run_turn(&mut state, &mut world, &key, id(10), id(20), 1);
    world.live.clear(); // submitter and runner die; the work lives on
    let before = state.clone();
    let settled = BTreeSet::new();
    let effect = reconcile_once(&mut state, &world, id(30), 2, &settled);
    assert!(
        matches!(&effect, ReconcileEffect::Kill { key: k, work: w } if k == &key && w.id == work),
        "{effect:?}"
    );
    assert_eq!(state, before, "a kill request changes nothing");
    // The dead runner's work still holds its slot: a new turn parks (S1 over work).
    let other = TurnKey::new("other", 1);
    world.live.insert(id(40));
    let parked = submit_one(
        &mut state,
        &world,
        &other,
        id(40),
        3,
        1,
        Strategy::default(),
    );
    assert_eq!(parked.effect, SubmitEffect::Park);
    // Asking again without the kill having worked asks again.
    let again = reconcile_once(&mut state, &world, id(30), 4, &settled);
    assert!(matches!(again, ReconcileEffect::Kill { .. }), "{again:?}");
    // Once the work is gone the turn is replaced.
    world.live_works.clear();
    let replaced = reconcile_once(&mut state, &world, id(30), 5, &settled);
    match replaced {
        ReconcileEffect::Spawn { handoff, replaced } => {
            assert_eq!(handoff.key(), &key);
            assert_eq!(replaced, Some(id(20)));
        }
        other => panic!("expected the replacement, got {other:?}"),
    }
    assert!(state.works.is_empty(), "the gone work is forgotten");
}

#[test]
fn reconcile_never_reruns_a_settled_turn_and_kills_its_leftovers_first() {
    let (mut state, mut world) = (QueueState::default(), World::default());
    let key = TurnKey::new("job", 1);
    run_turn(&mut state, &mut world, &key, id(10), id(20), 1);
    world.live.clear();
    let settled: BTreeSet<TurnKey> = [key.clone()].into();
    assert!(matches!(
        reconcile_once(&mut state, &world, id(30), 2, &settled),
        ReconcileEffect::Kill { .. }
    ));
    world.live_works.clear();
    assert_eq!(
        reconcile_once(&mut state, &world, id(30), 3, &settled),
        ReconcileEffect::Removed { key: key.clone() }
    );
    assert_eq!(
        reconcile_once(&mut state, &world, id(30), 4, &settled),
        ReconcileEffect::Idle
    );
    assert!(state.entries.is_empty());
}

#[test]
fn s9_an_orphaned_turn_is_requeued_once_and_then_started() {
    let (mut state, mut world) = (QueueState::default(), World::default());
    world.live.insert(id(30));
    let key = TurnKey::new("job", 1);
    let never_started = TurnOnDisk::Record {
        settled: false,
        attached: false,
        started: false,
        runner: false,
    };
    let records: TurnRecords = [(key.clone(), never_started)].into();
    let input = |n| ReconcileInput {
        me: id(30),
        fresh_token: token(n),
        now_millis: 5,
        cap: 1,
        strategies: NO_STRATEGIES,
        records: &records,
        liveness: &world,
    };
    let mut state2 = state.clone();
    assert_eq!(
        reconcile(&mut state, input(1)).unwrap(),
        ReconcileEffect::Requeued { key: key.clone() }
    );
    assert!(matches!(
        reconcile(&mut state, input(2)).unwrap(),
        ReconcileEffect::Spawn { replaced: None, .. }
    ));
    // Without the turn's record nothing would bring it back.
    let no_records = TurnRecords::new();
    let none = ReconcileInput {
        records: &no_records,
        ..input(3)
    };
    assert_eq!(reconcile(&mut state2, none).unwrap(), ReconcileEffect::Idle);
}

#[test]
fn queue_keeps_one_waiter_and_drop_never_enqueues() {
    let (mut state, mut world) = (QueueState::default(), World::default());
    let first = TurnKey::new("job", 1);
    run_turn(&mut state, &mut world, &first, id(10), id(20), 1);
    let second = TurnKey::new("job", 2);
    let third = TurnKey::new("job", 3);
    let d2 = submit_one(&mut state, &world, &second, id(10), 2, 4, Strategy::Queue);
    assert!(matches!(d2.effect, SubmitEffect::Wait { .. }));
    let d3 = submit_one(&mut state, &world, &third, id(10), 3, 4, Strategy::Queue);
    assert_eq!(d3.superseded, vec![second.clone()]);
    assert!(state.row(&second).is_none() && state.row(&third).is_some());
    let rows = state.entries.len();
    let fourth = TurnKey::new("job", 4);
    let d4 = submit_one(&mut state, &world, &fourth, id(10), 4, 4, Strategy::Drop);
    assert_eq!(
        (d4.queue_id, d4.effect),
        (
            0,
            SubmitEffect::Dropped {
                running: first,
                busy: Busy::Running
            }
        )
    );
    assert_eq!(state.entries.len(), rows);
}

#[test]
fn drop_names_a_parked_turn_as_waiting_for_a_slot_not_running() {
    let (mut state, mut world) = (QueueState::default(), World::default());
    world.live.insert(id(10));
    // cap 1 is taken by another task's turn: the drop task's first turn parks.
    run_turn(
        &mut state,
        &mut world,
        &TurnKey::new("other", 1),
        id(10),
        id(20),
        1,
    );
    let first = TurnKey::new("d", 1);
    let d1 = submit_one(&mut state, &world, &first, id(10), 2, 1, Strategy::Drop);
    assert_eq!(d1.effect, SubmitEffect::Park);
    let second = TurnKey::new("d", 2);
    let d2 = submit_one(&mut state, &world, &second, id(10), 3, 1, Strategy::Drop);
    assert_eq!(
        d2.effect,
        SubmitEffect::Dropped {
            running: first.clone(),
            busy: Busy::WaitingForSlot
        }
    );
    assert_eq!(
        Busy::WaitingForSlot.to_string(),
        "is waiting for a worker slot"
    );
    assert_eq!(Busy::Running.to_string(), "is running");
    assert!(state.row(&second).is_none());
}

#[test]
fn an_attached_start_waits_while_its_task_is_at_its_running_limit() {
    let (mut state, mut world) = (QueueState::default(), World::default());
    let first = TurnKey::new("job", 1);
    run_turn(&mut state, &mut world, &first, id(10), id(20), 1);
    world.live.insert(id(50));
    let input = |key, strategy| AttachedInput {
        key,
        me: id(50),
        fresh_token: token(9),
        now_millis: 1,
        strategy,
        liveness: &world,
    };
    let second = TurnKey::new("job", 2);
    let before = state.clone();
    for one_at_a_time in [
        Strategy::Concurrent { max: 1 },
        Strategy::Queue,
        Strategy::Debounce { quiet_millis: 5 },
    ] {
        assert_eq!(
            attached_start(&mut state, input(&second, one_at_a_time)).unwrap(),
            AttachedEffect::Wait {
                running: first.clone()
            }
        );
        assert_eq!(state, before, "a waiting attached start changes nothing");
    }
    assert!(matches!(
        attached_start(&mut state, input(&second, Strategy::Concurrent { max: 2 })).unwrap(),
        AttachedEffect::Run { .. }
    ));
}

#[test]
fn debounce_asks_for_a_waker_at_its_deadline() {
    let (mut state, world) = (QueueState::default(), World::default());
    let key = TurnKey::new("job", 1);
    let d = submit_one(
        &mut state,
        &world,
        &key,
        id(10),
        1,
        4,
        Strategy::Debounce { quiet_millis: 500 },
    );
    assert_eq!(
        d.effect,
        SubmitEffect::Wait {
            ready_at_millis: 1_500,
            wake_at_millis: Some(1_500)
        }
    );
}

#[test]
fn a_failed_spawn_parks_the_row_and_frees_the_slot() {
    let (mut state, mut world) = (QueueState::default(), World::default());
    world.live.insert(id(10));
    let key = TurnKey::new("job", 1);
    let SubmitEffect::Spawn(handoff) =
        submit_one(&mut state, &world, &key, id(10), 1, 1, Strategy::default()).effect
    else {
        panic!("expected a spawn")
    };
    assert!(spawn_failed(&mut state, handoff));
    let row = state.row(&key).unwrap();
    assert_eq!(row.state, crate::slots::RowState::Parked);
    assert!(row.slot_reservation.is_none());
}

#[test]
fn a_stolen_reservation_fences_both_publishes() {
    let (mut state, mut world) = (QueueState::default(), World::default());
    world.live.insert(id(10));
    let key = TurnKey::new("job", 1);
    let SubmitEffect::Spawn(handoff) =
        submit_one(&mut state, &world, &key, id(10), 1, 1, Strategy::default()).effect
    else {
        panic!("expected a spawn")
    };
    // The submitter is presumed dead and reconcile parks and restarts the row under a new token.
    world.live.clear();
    world.live.insert(id(30));
    let settled = BTreeSet::new();
    assert!(matches!(
        reconcile_once(&mut state, &world, id(30), 2, &settled),
        ReconcileEffect::Parked { .. }
    ));
    let snapshot = state.clone();
    let fenced = handoff_publish_first(&mut state, handoff, id(20)).unwrap_err();
    assert_eq!(fenced.key, key);
    assert_eq!(state, snapshot, "a fenced publish writes nothing");
}

#[test]
fn cancel_keeps_a_row_whose_dead_runners_work_lives_until_it_is_killed() {
    let (mut state, mut world) = (QueueState::default(), World::default());
    let key = TurnKey::new("job", 1);
    let work = run_turn(&mut state, &mut world, &key, id(10), id(20), 1);
    // A live runner is signalled, its row stays.
    let live = cancel(&mut state, CancelSelection::Task("job"), &world);
    assert_eq!(live.signal, vec![(key.clone(), id(20))]);
    assert!(live.removed.is_empty() && state.row(&key).is_some());
    world.live.clear();
    let dead = cancel(&mut state, CancelSelection::Turn(&key), &world);
    assert_eq!(
        dead.kill.iter().map(|w| w.id).collect::<Vec<_>>(),
        vec![work]
    );
    assert!(dead.again() && state.row(&key).is_some());
    world.live_works.clear();
    let gone = cancel(&mut state, CancelSelection::Turn(&key), &world);
    assert_eq!(gone.removed, vec![key.clone()]);
    assert!(state.entries.is_empty() && state.runners.is_empty() && state.works.is_empty());
}

#[test]
fn attached_start_runs_uncapped_and_drop_refuses_it() {
    let (mut state, mut world) = (QueueState::default(), World::default());
    let first = TurnKey::new("job", 1);
    run_turn(&mut state, &mut world, &first, id(10), id(20), 1);
    let input = |key, strategy| AttachedInput {
        key,
        me: id(50),
        fresh_token: token(9),
        now_millis: 1,
        strategy,
        liveness: &world,
    };
    let other = TurnKey::new("fg", 1);
    let mut s = state.clone();
    let AttachedEffect::Run { work } =
        attached_start(&mut s, input(&other, Strategy::default())).unwrap()
    else {
        panic!("expected a foreground run")
    };
    assert!(s
        .runner(&other)
        .is_some_and(|r| r.attached && r.identity == id(50)));
    assert!(s
        .works_of(&other)
        .any(|w| w.id == work && w.runner == id(50)));
    let second = TurnKey::new("job", 2);
    assert_eq!(
        attached_start(&mut state, input(&second, Strategy::Drop)).unwrap(),
        AttachedEffect::Dropped {
            running: first,
            busy: Busy::Running
        }
    );
}

#[test]
fn a_take_over_of_a_settled_turn_runs_nothing_and_records_no_work() {
    let (mut state, mut world) = (QueueState::default(), World::default());
    world.live.insert(id(10));
    let key = TurnKey::new("job", 1);
    let SubmitEffect::Spawn(handoff) =
        submit_one(&mut state, &world, &key, id(10), 1, 1, Strategy::default()).effect
    else {
        panic!("expected a spawn")
    };
    world.live.insert(id(20));
    let bound = handoff_publish_first(&mut state, handoff, id(20)).unwrap();
    handoff_publish_second(&mut state, bound).unwrap();
    let effect = runner_take_over(
        &mut state,
        TakeOverInput {
            key: &key,
            token: token(1),
            me: id(20),
            settled: true,
            cgroup: None,
            liveness: &world,
        },
    )
    .unwrap();
    assert_eq!(effect, TakeOverEffect::AlreadySettled);
    assert!(
        state.works.is_empty(),
        "no work for a turn that already ended"
    );
}

/// Cancel between the spawn and the runner's take-over: the request stays on the row, the
/// take-over answers `Cancelled` and records no work; the recorded group of a work that does run
/// is on its work record.
#[test]
fn a_cancel_before_the_take_over_is_recorded_and_honoured_and_a_work_keeps_its_group() {
    let (mut state, mut world) = (QueueState::default(), World::default());
    let key = TurnKey::new("job", 1);
    let (submitter, child) = (id(100), id(200));
    world.live.insert(submitter);
    let decision = submit_one(
        &mut state,
        &world,
        &key,
        submitter,
        1,
        1,
        Strategy::default(),
    );
    let SubmitEffect::Spawn(handoff) = decision.effect else {
        panic!("expected a spawn, got {:?}", decision.effect)
    };
    world.live.insert(child);
    let bound = handoff_publish_first(&mut state, handoff, child).unwrap();
    let effect = cancel(&mut state, CancelSelection::Task("job"), &world);
    assert!(
        effect.removed.is_empty(),
        "a row someone starts stays: {effect:?}"
    );
    assert!(state.row(&key).unwrap().cancel_requested);
    // The row moved on (it carries the request): the second publish is fenced, and the child's
    // own take-over decides.
    assert!(handoff_publish_second(&mut state, bound).is_err());
    let effect = runner_take_over(
        &mut state,
        TakeOverInput {
            key: &key,
            token: token(1),
            me: child,
            settled: false,
            cgroup: Some("/sys/fs/cgroup/unified/tollgate-200-work-x"),
            liveness: &world,
        },
    )
    .unwrap();
    assert_eq!(effect, TakeOverEffect::Cancelled);
    assert!(
        state.works.is_empty(),
        "nothing may be started: {:?}",
        state.works
    );

    let other = TurnKey::new("other", 1);
    world.live.insert(id(300));
    let decision = submit_one(
        &mut state,
        &world,
        &other,
        id(300),
        2,
        2,
        Strategy::default(),
    );
    let SubmitEffect::Spawn(handoff) = decision.effect else {
        panic!("expected a spawn, got {:?}", decision.effect)
    };
    world.live.insert(id(400));
    let bound = handoff_publish_first(&mut state, handoff, id(400)).unwrap();
    handoff_publish_second(&mut state, bound).unwrap();
    let effect = runner_take_over(
        &mut state,
        TakeOverInput {
            key: &other,
            token: token(2),
            me: id(400),
            settled: false,
            cgroup: Some("/g/tollgate-400-work-y"),
            liveness: &world,
        },
    )
    .unwrap();
    assert!(matches!(effect, TakeOverEffect::Run { .. }), "{effect:?}");
    assert_eq!(
        state.works[0].cgroup.as_deref(),
        Some("/g/tollgate-400-work-y")
    );
}

#[test]
fn a_parked_row_without_a_record_is_forgotten_and_a_held_one_is_left() {
    let (mut state, mut world) = (QueueState::default(), World::default());
    world.live.insert(id(30));
    // The submitter of the held row below lives; the parked row has no owner.
    world.live.insert(id(10));
    let ghost = TurnKey::new("ghost", 1);
    let no_records = TurnRecords::new();
    enqueue(&mut state, &ghost, id(10), 0).unwrap();
    park(&mut state, &ghost).unwrap();
    let records: TurnRecords = [(ghost.clone(), TurnOnDisk::NoRecord)].into();
    let input = |n, records| ReconcileInput {
        me: id(30),
        fresh_token: token(n),
        now_millis: 5,
        cap: 1,
        strategies: NO_STRATEGIES,
        records,
        liveness: &world,
    };
    // With a record the parked row would start; without one it leaves the queue.
    let mut with_record = state.clone();
    assert!(matches!(
        reconcile(&mut with_record, input(1, &no_records)).unwrap(),
        ReconcileEffect::Spawn { replaced: None, .. }
    ));
    assert_eq!(
        reconcile(&mut state, input(2, &records)).unwrap(),
        ReconcileEffect::Forgotten { key: ghost.clone() }
    );
    assert!(state.entries.is_empty());
    // A row someone acts on (here: a live submitter still owns it) is left to its holder.
    let mut held = QueueState::default();
    enqueue(&mut held, &ghost, id(10), 0).unwrap();
    assert_ne!(
        reconcile(&mut held, input(3, &records)).unwrap(),
        ReconcileEffect::Forgotten { key: ghost.clone() }
    );
    assert!(held.row(&ghost).is_some());
}

#[test]
fn only_a_never_started_detached_record_is_an_orphan() {
    let base = |settled, attached, started, runner| TurnOnDisk::Record {
        settled,
        attached,
        started,
        runner,
    };
    assert!(base(false, false, false, false).is_never_started());
    for other in [
        base(true, false, false, false),
        base(false, true, false, false),
        base(false, false, true, false),
        base(false, false, false, true),
        TurnOnDisk::NoRecord,
    ] {
        assert!(!other.is_never_started(), "{other:?}");
    }
    assert!(base(true, false, false, false).is_settled());
    assert!(!base(false, false, true, true).is_settled());
    assert!(!TurnOnDisk::NoRecord.is_settled());
    let key = TurnKey::new("job", 1);
    let mut state = QueueState::default();
    let on_disk: TurnRecords = [(key.clone(), base(false, false, false, false))].into();
    assert_eq!(orphan_candidates(&state, &on_disk), vec![key.clone()]);
    enqueue(&mut state, &key, id(10), 0).unwrap();
    assert!(orphan_candidates(&state, &on_disk).is_empty());
}

#[test]
fn a_pass_goes_on_after_a_complete_kill_only() {
    let key = TurnKey::new("job", 1);
    let work = WorkRecord {
        key: key.clone(),
        id: WorkId::from_token(token(1)),
        runner: id(10),
        leader: None,
        cgroup: None,
    };
    let kill = ReconcileEffect::Kill {
        key: key.clone(),
        work,
    };
    assert!(kill.continues(true));
    assert!(!kill.continues(false));
    assert!(!ReconcileEffect::Idle.continues(true));
    assert!(!ReconcileEffect::Saturated.continues(true));
    assert!(ReconcileEffect::Requeued { key: key.clone() }.continues(false));
    assert!(ReconcileEffect::Forgotten { key }.continues(true));
}

#[test]
fn a_live_reservers_unbound_reservation_is_never_stolen() {
    // Mutation audit: `reserve_runner_slot` must keep a reservation whose reserver lives even
    // when no child is bound yet (the reserver is about to spawn).
    let (mut state, mut world) = (QueueState::default(), World::default());
    world.live.insert(id(10));
    world.live.insert(id(11));
    let key = TurnKey::new("job", 1);
    let SubmitEffect::Spawn(handoff) =
        submit_one(&mut state, &world, &key, id(10), 1, 2, Strategy::default()).effect
    else {
        panic!("expected a spawn")
    };
    let before = state.clone();
    let again =
        crate::slots::reserve_runner_slot(&mut state, &key, id(11), None, 2, token(2), &world)
            .unwrap();
    assert_eq!(
        again,
        crate::slots::ReserveOutcome::Pending {
            token: Some(handoff.token())
        }
    );
    assert_eq!(state, before, "a live reserver's reservation was taken");
}

#[test]
fn the_second_publish_is_fenced_when_the_row_moved_on_after_the_first() {
    // Mutation audit: `complete_runner_spawn_second` writes only over the row it expects.
    let (mut state, mut world) = (QueueState::default(), World::default());
    world.live.insert(id(10));
    world.live.insert(id(20));
    let key = TurnKey::new("job", 1);
    let SubmitEffect::Spawn(handoff) =
        submit_one(&mut state, &world, &key, id(10), 1, 1, Strategy::default()).effect
    else {
        panic!("expected a spawn")
    };
    let bound = handoff_publish_first(&mut state, handoff, id(20)).unwrap();
    // The row moves on between the publishes (here: parked again, its reservation gone).
    crate::slots::park(&mut state, &key).unwrap();
    let moved = state.clone();
    let fenced = handoff_publish_second(&mut state, bound).unwrap_err();
    assert_eq!(fenced.child, id(20));
    assert_eq!(state, moved, "a fenced second publish changed the queue");
    assert!(state.runner(&key).is_none());
}

/// A debounce that replaces the queue's last row: the new row's time is bounded by the replaced
/// row's, so a section on its part (which holds the last row but not the parked rows before it)
/// and one on the whole queue give it the same time (the case tests/store_depth_projection.rs
/// found: the part gave 0 where the whole gave the earlier row's time).
#[test]
fn a_replaced_last_waiter_does_not_lower_the_new_rows_time() {
    let (mut whole, world) = (QueueState::default(), World::default());
    let other = TurnKey::new("other", 1);
    let first = TurnKey::new("job", 1);
    for (key, at) in [(&other, 3), (&first, 5)] {
        enqueue(&mut whole, key, id(10), at).unwrap();
        park(&mut whole, key).unwrap();
    }
    let mut part = project(&whole, &submit_reads(Some("job"), &[]));
    assert!(
        part.row(&other).is_none(),
        "the part leaves the parked row out"
    );
    let second = TurnKey::new("job", 2);
    for state in [&mut whole, &mut part] {
        let decision = submit(
            state,
            SubmitInput {
                key: &second,
                me: id(10),
                fresh_token: token(2),
                now_millis: 0,
                cap: 0,
                strategy: Strategy::Debounce { quiet_millis: 10 },
                liveness: &world,
            },
        )
        .unwrap();
        assert_eq!(decision.superseded, vec![first.clone()]);
        assert_eq!(state.row(&second).unwrap().enqueued_at_millis, 5);
        state.check_structure().unwrap();
    }
}

/// S13: a row a dispatcher hands off (here a reconciler that adopted the parked row, between its
/// spawn and its publishes, then its spawned runner before it is recorded) keeps the request and
/// signals nobody; once the runner is recorded (the second publish), it is the one signalled.
#[test]
fn a_cancel_during_a_handoff_records_the_request_and_signals_nobody() {
    let (mut state, mut world) = (QueueState::default(), World::default());
    let key = TurnKey::new("job", 1);
    let (submitter, reconciler, child) = (id(10), id(20), id(30));
    world.live.insert(submitter);
    // Parked: the submitter saw no free slot (cap 0).
    let parked = submit_one(
        &mut state,
        &world,
        &key,
        submitter,
        1,
        0,
        Strategy::default(),
    );
    assert_eq!(parked.effect, SubmitEffect::Park);
    world.live.insert(reconciler);
    let ReconcileEffect::Spawn { handoff, .. } =
        reconcile_once(&mut state, &world, reconciler, 2, &BTreeSet::new())
    else {
        panic!("expected the reconciler to start the parked row")
    };
    let mid_spawn = cancel(&mut state, CancelSelection::Task("job"), &world);
    assert_eq!(mid_spawn.signal, vec![], "the dispatcher is no executor");
    assert_eq!(mid_spawn.recorded, vec![key.clone()]);
    assert!(mid_spawn.removed.is_empty() && state.row(&key).unwrap().cancel_requested);
    world.live.insert(child);
    let bound = handoff_publish_first(&mut state, handoff, child).unwrap();
    let bound_only = cancel(&mut state, CancelSelection::Task("job"), &world);
    assert_eq!(bound_only.signal, vec![], "a bound child not recorded yet");
    assert_eq!(bound_only.recorded, vec![key.clone()]);
    // The row moved on (it carries the request): the second publish is fenced, and the
    // child's own take-over records it as the runner, honouring the request.
    assert!(handoff_publish_second(&mut state, bound).is_err());
    let taken = runner_take_over(
        &mut state,
        TakeOverInput {
            key: &key,
            token: token(2),
            me: child,
            settled: false,
            cgroup: None,
            liveness: &world,
        },
    )
    .unwrap();
    assert_eq!(taken, TakeOverEffect::Cancelled);
    let recorded = cancel(&mut state, CancelSelection::Task("job"), &world);
    assert_eq!(recorded.signal, vec![(key.clone(), child)]);
    assert!(recorded.recorded.is_empty());
}

/// A runner whose row is already gone (a runner on its way out, as [`start_reachable`] counts
/// it) still leaves: its own runner record goes. A runner record that names another process is
/// that process's: a late runner's finish is refused and changes nothing.
#[test]
fn a_finish_after_the_row_left_clears_only_its_own_runner_record() {
    let key = TurnKey::new("t", 1);
    let (me, other) = (id(10), id(11));
    let mut state = QueueState::default();
    state.set_runner(&key, me, false);
    finish_turn(&mut state, &key, me).unwrap();
    assert!(
        state.runner(&key).is_none(),
        "the leaving runner's record is gone"
    );

    let mut state = QueueState::default();
    state.set_runner(&key, other, false);
    let before = state.clone();
    let refused = finish_turn(&mut state, &key, me);
    assert!(
        matches!(refused, Err(SlotError::NotOwner { .. })),
        "another runner's record is not this runner's to clear: {refused:?}"
    );
    assert_eq!(state, before, "the refused finish changed nothing");
}
