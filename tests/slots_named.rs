//! The named cases of the slot protocol (spec/slots.md), on the production core with fixture
//! process identities. Invariant names (S1…) refer to spec/invariants.md.

mod common;

use common::{token, Procs};
use tollgate::protocol::slots::*;
use tollgate::queue::Store as _;

fn key(task: &str, turn: u32) -> TurnKey {
    TurnKey::new(task, turn)
}

fn queue_with(rows: &[(&str, u32)], owner: ProcessIdentity) -> QueueState {
    let mut state = QueueState::default();
    for (i, (task, turn)) in rows.iter().enumerate() {
        enqueue(&mut state, &key(task, *turn), owner, 1_000 + i as u64).expect("enqueue");
    }
    state
}

/// S1: two reservations by one reserver pid are two occupied slots, not one.
#[test]
fn same_reserver_two_jobs_cap_one_grants_exactly_one_acquired() {
    let mut procs = Procs::new();
    let r = procs.start(10, 1);
    let mut state = queue_with(&[("a", 1), ("b", 1)], r);
    let first =
        reserve_runner_slot(&mut state, &key("a", 1), r, None, 1, token(1), &procs).unwrap();
    let second =
        reserve_runner_slot(&mut state, &key("b", 1), r, None, 1, token(2), &procs).unwrap();
    assert!(matches!(
        first,
        ReserveOutcome::Acquired { stolen: None, .. }
    ));
    assert_eq!(second, ReserveOutcome::Saturated);
    assert_eq!(occupied_runner_slots(&state, &procs, None, None), 1);
}

/// S2: reserving the same row twice answers pending on the first token; one executor is started.
#[test]
fn same_reserver_same_job_starts_executor_once() {
    let mut procs = Procs::new();
    let r = procs.start(10, 1);
    let mut state = queue_with(&[("a", 1)], r);
    let first =
        reserve_runner_slot(&mut state, &key("a", 1), r, None, 4, token(1), &procs).unwrap();
    let before = state.clone();
    let again =
        reserve_runner_slot(&mut state, &key("a", 1), r, None, 4, token(2), &procs).unwrap();
    assert_eq!(
        first,
        ReserveOutcome::Acquired {
            token: token(1),
            stolen: None
        }
    );
    assert_eq!(
        again,
        ReserveOutcome::Pending {
            token: Some(token(1))
        }
    );
    assert_eq!(state, before, "a pending answer changes nothing");
}

/// S2: once a child has taken the row over, nobody else reserves it and reconcile leaves it.
#[test]
fn same_job_after_adoption_does_not_spawn_again() {
    let mut procs = Procs::new();
    let r = procs.start(10, 1);
    let other = procs.start(11, 1);
    let mut state = queue_with(&[("a", 1)], r);
    reserve_runner_slot(&mut state, &key("a", 1), r, None, 2, token(1), &procs).unwrap();
    let child = procs.start(20, 2);
    let taken = take_over_reserved_slot(&mut state, &key("a", 1), token(1), child, &procs).unwrap();
    assert_eq!(
        taken,
        TakeOver::Running {
            adopted_dead_parent: false
        }
    );
    let snapshot = state.clone();
    let by_other =
        reserve_runner_slot(&mut state, &key("a", 1), other, None, 2, token(2), &procs).unwrap();
    assert_eq!(
        by_other,
        ReserveOutcome::Pending {
            token: Some(token(1))
        }
    );
    // After the reserver's second publish the token is gone; a reserve is still pending (nil).
    let snapshot_row = snapshot.row(&key("a", 1)).unwrap().clone();
    let mut expected = snapshot_row.clone();
    expected.slot_reservation.as_mut().unwrap().child = Some(child);
    complete_runner_spawn_second(&mut state, &expected, child, false).unwrap();
    let by_other =
        reserve_runner_slot(&mut state, &key("a", 1), other, None, 2, token(3), &procs).unwrap();
    assert_eq!(by_other, ReserveOutcome::Pending { token: None });
    let step =
        reconcile_step(&mut state, other, 2, token(4), &procs, &|_: &TurnKey| false).unwrap();
    assert_eq!(step, ReconcileStep::Idle);
}

/// S1: `exclude_reserver` drops the pid from identities only; its reservations still count.
#[test]
fn exclude_reserver_still_counts_that_pid_reservations_against_cap() {
    let mut procs = Procs::new();
    let r = procs.start(10, 1);
    let mut state = queue_with(&[("a", 1), ("b", 1)], r);
    reserve_runner_slot(&mut state, &key("a", 1), r, None, 1, token(1), &procs).unwrap();
    assert_eq!(occupied_runner_slots(&state, &procs, Some(r), None), 1);
    let b = reserve_runner_slot(&mut state, &key("b", 1), r, Some(r), 1, token(2), &procs).unwrap();
    assert_eq!(b, ReserveOutcome::Saturated);
}

/// S4, S5: after the first publish (child bound, token still on the row) the slot stays taken
/// even if the reserver dies, and releasing it is a no-op.
#[test]
fn queue_publish_before_runner_record_does_not_free_the_slot() {
    let mut procs = Procs::new();
    let r = procs.start(10, 1);
    let mut state = queue_with(&[("a", 1), ("b", 1)], r);
    reserve_runner_slot(&mut state, &key("a", 1), r, None, 1, token(1), &procs).unwrap();
    let child = procs.start(20, 2);
    complete_runner_spawn_first(&mut state, &key("a", 1), token(1), child).unwrap();
    procs.kill(r); // crash between the two publishes
    assert!(!release_runner_slot(&mut state, &key("a", 1), token(1), r));
    assert!(state.row(&key("a", 1)).unwrap().slot_reservation.is_some());
    assert!(occupied_runner_slots(&state, &procs, None, None) >= 1);
    let reconciler = procs.start(30, 3);
    let b = reserve_runner_slot(
        &mut state,
        &key("b", 1),
        reconciler,
        None,
        1,
        token(2),
        &procs,
    )
    .unwrap();
    assert_eq!(b, ReserveOutcome::Saturated);
}

/// S3: a complete that arrives after a steal cannot touch the new token's child.
#[test]
fn stale_complete_after_steal_does_not_clear_the_new_child() {
    let mut procs = Procs::new();
    let r1 = procs.start(10, 1);
    let mut state = queue_with(&[("a", 1)], r1);
    reserve_runner_slot(&mut state, &key("a", 1), r1, None, 1, token(1), &procs).unwrap();
    let snapshot1 = state.row(&key("a", 1)).unwrap().clone();
    let c1 = ProcessIdentity {
        pid: 21,
        start_time_micros: 2,
    };
    procs.kill(r1);
    // The reconciler steals the dead reservation and binds its own child.
    let rec = procs.start(30, 3);
    let step = reconcile_step(&mut state, rec, 1, token(2), &procs, &|_: &TurnKey| false).unwrap();
    assert_eq!(step, ReconcileStep::Parked { key: key("a", 1) });
    let step = reconcile_step(&mut state, rec, 1, token(3), &procs, &|_: &TurnKey| false).unwrap();
    assert!(matches!(step, ReconcileStep::Spawn { ref token, .. } if *token == common::token(3)));
    let c2 = procs.start(22, 4);
    complete_runner_spawn_first(&mut state, &key("a", 1), token(3), c2).unwrap();
    let after_bind = state.clone();
    // The old reserver's delayed steps: every one refused, nothing changes.
    assert!(matches!(
        complete_runner_spawn_first(&mut state, &key("a", 1), token(1), c1),
        Err(SlotError::TokenMismatch { .. })
    ));
    assert!(token_fenced_row_after_bind(&snapshot1, token(1), c1)
        .and_then(|expected| complete_runner_spawn_second(&mut state, &expected, c1, false))
        .is_err());
    assert!(!release_runner_slot(&mut state, &key("a", 1), token(1), r1));
    assert!(matches!(
        take_over_reserved_slot(&mut state, &key("a", 1), token(1), c1, &procs),
        Err(SlotError::TokenMismatch { .. })
    ));
    assert_eq!(state, after_bind);
    assert_eq!(
        state
            .row(&key("a", 1))
            .unwrap()
            .slot_reservation
            .as_ref()
            .unwrap()
            .child,
        Some(c2)
    );
}

/// S2, S5: the spawned child adopts its dead parent's reservation; reconcile spawns nothing more.
#[test]
fn token_current_child_takes_over_dead_parent_without_a_second_spawn() {
    let mut procs = Procs::new();
    let r = procs.start(10, 1);
    let mut state = queue_with(&[("a", 1)], r);
    reserve_runner_slot(&mut state, &key("a", 1), r, None, 1, token(1), &procs).unwrap();
    let child = procs.start(20, 2);
    procs.kill(r); // the submitter dies before it could bind
    let taken = take_over_reserved_slot(&mut state, &key("a", 1), token(1), child, &procs).unwrap();
    assert_eq!(
        taken,
        TakeOver::Running {
            adopted_dead_parent: true
        }
    );
    let row = state.row(&key("a", 1)).unwrap();
    assert_eq!(
        row.state,
        RowState::Dispatching {
            dispatch_owner: child
        }
    );
    assert_eq!(row.slot_reservation, None);
    assert_eq!(state.runner(&key("a", 1)).unwrap().identity, child);
    let rec = procs.start(30, 3);
    let step = reconcile_step(&mut state, rec, 1, token(2), &procs, &|_: &TurnKey| false).unwrap();
    assert_eq!(step, ReconcileStep::Idle);
}

/// S3, S8: a released token stays dead after the row is started again under a new one.
#[test]
fn released_then_reused_job_rejects_the_old_token() {
    let mut procs = Procs::new();
    let r = procs.start(10, 1);
    let mut state = queue_with(&[("a", 1)], r);
    reserve_runner_slot(&mut state, &key("a", 1), r, None, 1, token(1), &procs).unwrap();
    assert!(
        release_runner_slot(&mut state, &key("a", 1), token(1), r),
        "spawn failed: release"
    );
    assert_eq!(state.row(&key("a", 1)).unwrap().state, RowState::Parked);
    let next = start_next_parked(&mut state, r, None, 1, token(2), &procs).unwrap();
    assert_eq!(
        next,
        StartNext::Acquired {
            key: key("a", 1),
            token: token(2)
        }
    );
    let before = state.clone();
    let stale_child = procs.start(20, 2);
    assert!(bind_runner_slot_child(&mut state, &key("a", 1), token(1), stale_child).is_err());
    assert!(
        take_over_reserved_slot(&mut state, &key("a", 1), token(1), stale_child, &procs).is_err()
    );
    let err = bind_runner_slot_child(&mut state, &key("a", 1), token(1), stale_child).unwrap_err();
    assert_eq!(err.code(), "QUEUE_SLOT_TOKEN_MISMATCH");
    assert_eq!(state, before);
}

/// S8: queue JSON from before reservations existed still loads; the field is omitted when absent,
/// `child` is omitted until bind, and the nil token is refused.
#[test]
fn old_queue_snapshot_without_slot_reservation_deserializes() {
    let old = r#"{"next_queue_id": 3, "entries": [
        {"queue_id": 1, "task": "a", "turn": 1, "enqueued_at_millis": 5, "state": "parked"},
        {"queue_id": 2, "task": "b", "turn": 4, "enqueued_at_millis": 6, "state": "dispatching",
         "dispatch_owner": {"pid": 7, "start_time_micros": 8}}]}"#;
    let state: QueueState = serde_json::from_str(old).expect("old snapshot loads");
    assert_eq!(state.version, QUEUE_FORMAT_VERSION);
    assert!(state.entries.iter().all(|e| e.slot_reservation.is_none()));
    assert!(state.runners.is_empty());
    let text = serde_json::to_string(&state).unwrap();
    assert!(!text.contains("slot_reservation"), "{text}");

    let with = r#"{"queue_id": 1, "task": "a", "turn": 1, "enqueued_at_millis": 5, "state": "parked",
        "slot_reservation": {"reserver": {"pid": 1, "start_time_micros": 1},
                             "token": "018f0f4a-6b5c-7d8e-9f00-112233445566"}}"#;
    let entry: QueueEntry = serde_json::from_str(with).expect("unbound reservation loads");
    let reservation = entry.slot_reservation.clone().unwrap();
    assert_eq!(reservation.child, None);
    assert_eq!(
        reservation.token.to_string(),
        "018f0f4a-6b5c-7d8e-9f00-112233445566"
    );
    let text = serde_json::to_string(&entry).unwrap();
    assert!(!text.contains("child"), "{text}");
    assert!(
        text.contains(r#""token":"018f0f4a-6b5c-7d8e-9f00-112233445566""#),
        "{text}"
    );

    let nil = with.replace(
        "018f0f4a-6b5c-7d8e-9f00-112233445566",
        "00000000-0000-0000-0000-000000000000",
    );
    let err = serde_json::from_str::<QueueEntry>(&nil).unwrap_err();
    assert!(err.to_string().contains("nil"), "{err}");
    assert_eq!(SlotToken::new(uuid::Uuid::nil()), Err(SlotError::NilToken));
}

/// The recovered-controller exception is per row: a controller that adopted row A may reserve A,
/// but its ownership of another row B still counts.
#[test]
fn recovered_dispatch_owner_without_token_or_runner_may_acquire() {
    let mut procs = Procs::new();
    let submitter = procs.start(5, 1);
    let controller = procs.start(10, 1);
    let mut state = queue_with(&[("a", 1), ("b", 1)], submitter);
    procs.kill(submitter);
    adopt_row(&mut state, &key("a", 1), controller).unwrap();
    let got = reserve_runner_slot(
        &mut state,
        &key("a", 1),
        controller,
        None,
        1,
        token(1),
        &procs,
    )
    .unwrap();
    assert_eq!(
        got,
        ReserveOutcome::Acquired {
            token: token(1),
            stolen: None
        }
    );

    // A different process sees the controller as a live foreign holder: pending, nil token.
    let mut state2 = queue_with(&[("a", 1)], submitter);
    adopt_row(&mut state2, &key("a", 1), controller).unwrap();
    let other = procs.start(11, 1);
    let got =
        reserve_runner_slot(&mut state2, &key("a", 1), other, None, 1, token(2), &procs).unwrap();
    assert_eq!(got, ReserveOutcome::Pending { token: None });

    // Not "ignore every current pid": the controller also holds B, which still counts.
    let mut state3 = queue_with(&[("a", 1), ("b", 1)], submitter);
    adopt_row(&mut state3, &key("a", 1), controller).unwrap();
    adopt_row(&mut state3, &key("b", 1), controller).unwrap();
    let got = reserve_runner_slot(
        &mut state3,
        &key("a", 1),
        controller,
        None,
        1,
        token(3),
        &procs,
    )
    .unwrap();
    assert_eq!(got, ReserveOutcome::Saturated);
}

/// S7: a duplicate enqueue changes nothing and a caller with a clock behind cannot make the
/// enqueue times fall.
#[test]
fn duplicate_enqueue_and_backwards_time_do_not_mutate_fifo_state() {
    let owner = ProcessIdentity {
        pid: 1,
        start_time_micros: 1,
    };
    let mut state = QueueState::default();
    let a = enqueue(&mut state, &key("a", 1), owner, 100).unwrap();
    let b = enqueue(&mut state, &key("b", 1), owner, 50).unwrap();
    assert_eq!(a, EnqueueOutcome::Enqueued { queue_id: 1 });
    assert_eq!(b, EnqueueOutcome::Enqueued { queue_id: 2 });
    assert_eq!(state.row(&key("b", 1)).unwrap().enqueued_at_millis, 100);
    let before = state.clone();
    let again = enqueue(&mut state, &key("a", 1), owner, 10).unwrap();
    assert_eq!(again, EnqueueOutcome::AlreadyQueued { queue_id: 1 });
    assert_eq!(state, before);
    state.check_structure().unwrap();
}

/// S7 through the real store: threads released together by a barrier, each with a clock further
/// behind and its own connection to the home's database, enqueue under the database's write
/// lock; FIFO and times stay monotone.
#[test]
fn concurrent_enqueue_coalesces_inverted_clocks() {
    use std::sync::{Arc, Barrier};
    use std::time::Duration;
    use tollgate::config::Durability;
    use tollgate::home::Home;
    use tollgate::queue::SqliteStore;

    let dir = tempfile::tempdir().unwrap();
    let home = Home::at(dir.path());
    home.ensure().unwrap();
    let store_of =
        |home: &Home| SqliteStore::new(home.clone(), Duration::from_secs(30), Durability::Os);
    let store = store_of(&home);
    const THREADS: u64 = 8;
    let barrier = Arc::new(Barrier::new(THREADS as usize));
    let handles: Vec<_> = (0..THREADS)
        .map(|i| {
            let (store, barrier) = (store_of(&home), barrier.clone());
            std::thread::spawn(move || {
                let owner = ProcessIdentity {
                    pid: 100 + i as u32,
                    start_time_micros: 1,
                };
                barrier.wait();
                store
                    .transact(|state| {
                        enqueue(
                            state,
                            &TurnKey::new(format!("t{i}"), 1),
                            owner,
                            10_000 - i * 100,
                        )
                        .map_err(tollgate::dispatch::DispatchError::from)
                    })
                    .unwrap()
            })
        })
        .collect();
    for handle in handles {
        handle.join().unwrap();
    }
    let state = store.load().unwrap();
    assert_eq!(state.entries.len(), THREADS as usize);
    state.check_structure().unwrap();
    let ids: Vec<u64> = state.entries.iter().map(|e| e.queue_id).collect();
    assert_eq!(ids, (1..=THREADS).collect::<Vec<_>>());
}

/// S4, S5 through the shell: a detached submit binds the spawned child (a real process), records
/// it as the runner and clears the token.
#[test]
fn submit_completes_handoff_after_bind_records_the_child() {
    use std::sync::Mutex;
    use tollgate::dispatch::Handoff;
    use tollgate::home::Home;
    use tollgate::process::{self_identity, ProcLiveness, RunnerSpawner, SpawnError};
    use tollgate::runtime::{store_for, Runtime};
    use tollgate::submit::{submit_detached, Placement};

    /// Starts a real `sleep` as the "runner" and reads its identity from /proc.
    struct SleepSpawner(Mutex<Vec<std::process::Child>>);
    impl RunnerSpawner for SleepSpawner {
        fn spawn(&self, _key: &TurnKey, _token: SlotToken) -> Result<ProcessIdentity, SpawnError> {
            let child = std::process::Command::new("sleep")
                .arg("30")
                .spawn()
                .unwrap();
            let id = tollgate::process::identity_of(child.id()).unwrap();
            self.0.lock().unwrap().push(child);
            Ok(id)
        }
    }

    let dir = tempfile::tempdir().unwrap();
    let home = Home::at(dir.path());
    let config = home.init(Some(1)).unwrap();
    let spawner = SleepSpawner(Mutex::new(Vec::new()));
    let rt = Runtime {
        store: store_for(&home, &config),
        home,
        config,
        spawner: Box::new(spawner),
        liveness: ProcLiveness,
    };
    let me = self_identity().unwrap();
    let request = common::sections::submit_true("a");
    let submitted = submit_detached(&rt, me, request).unwrap();
    let Placement::Started(Handoff::Completed { child }) = submitted.placement else {
        panic!(
            "expected a completed handoff, got {:?}",
            submitted.placement
        );
    };
    let state = rt.store.load().unwrap();
    let row = state.row(&submitted.key).unwrap();
    assert_eq!(
        row.state,
        RowState::Dispatching {
            dispatch_owner: child
        }
    );
    assert_eq!(row.slot_reservation, None);
    assert_eq!(state.runner(&submitted.key).unwrap().identity, child);
    assert_eq!(occupied_runner_slots(&state, &ProcLiveness, None, None), 1);
    // A second submit (another task) with one slot parks: the bound child occupies.
    let second = common::sections::submit_true("b");
    assert_eq!(
        submit_detached(&rt, me, second).unwrap().placement,
        Placement::Parked
    );
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    );
}

/// S6: reconcile starts parked rows without excluding itself: a reconciler that already holds the
/// only slot (it runs an attached turn) must not start a parked row.
#[test]
fn interrupted_legacy_reassignment_recovers_from_an_unrelated_working_directory() {
    let mut procs = Procs::new();
    let submitter = procs.start(5, 1);
    let reconciler = procs.start(10, 1);
    let mut state = queue_with(&[("held", 1), ("a", 1)], submitter);
    // The reconciler runs `held` in the foreground: it is that turn's recorded runner.
    adopt_row(&mut state, &key("held", 1), reconciler).unwrap();
    let snapshot = state.row(&key("held", 1)).unwrap().clone();
    let _ = snapshot;
    reserve_runner_slot(
        &mut state,
        &key("held", 1),
        reconciler,
        None,
        usize::MAX,
        token(1),
        &procs,
    )
    .unwrap();
    let snap = state.row(&key("held", 1)).unwrap().clone();
    complete_runner_spawn_first(&mut state, &key("held", 1), token(1), reconciler).unwrap();
    let expected = token_fenced_row_after_bind(&snap, token(1), reconciler).unwrap();
    complete_runner_spawn_second(&mut state, &expected, reconciler, true).unwrap();
    // Row `a` was mid-reassignment by a controller that died: dispatching by a dead owner.
    let dead_controller = ProcessIdentity {
        pid: 99,
        start_time_micros: 9,
    };
    adopt_row(&mut state, &key("a", 1), dead_controller).unwrap();
    procs.kill(submitter);
    let step = reconcile_step(
        &mut state,
        reconciler,
        1,
        token(2),
        &procs,
        &|_: &TurnKey| false,
    )
    .unwrap();
    assert_eq!(
        step,
        ReconcileStep::Parked { key: key("a", 1) },
        "no free slot: park, not spawn"
    );
    let step = reconcile_step(
        &mut state,
        reconciler,
        1,
        token(3),
        &procs,
        &|_: &TurnKey| false,
    )
    .unwrap();
    assert_eq!(step, ReconcileStep::Saturated);
    // Once the foreground turn ends, the next reconcile (from anywhere) starts the parked row.
    finish_turn(&mut state, &key("held", 1), reconciler).unwrap();
    let other_place = procs.start(11, 1);
    let step = reconcile_step(
        &mut state,
        other_place,
        1,
        token(4),
        &procs,
        &|_: &TurnKey| false,
    )
    .unwrap();
    assert!(
        matches!(step, ReconcileStep::Spawn { replaced: None, .. }),
        "{step:?}"
    );
}

/// S9: a dead runner of an unfinished turn is replaced (a steal when its token was left behind);
/// a dead runner of a finished turn is only removed.
#[test]
fn reconcile_replaces_a_dead_runner_for_an_active_task_turn() {
    let mut procs = Procs::new();
    let submitter = procs.start(5, 1);
    let mut state = queue_with(&[("a", 1), ("b", 1)], submitter);
    for (task, n) in [("a", 1u64), ("b", 2)] {
        reserve_runner_slot(
            &mut state,
            &key(task, 1),
            submitter,
            None,
            2,
            token(n),
            &procs,
        )
        .unwrap();
        let child = procs.start(20 + n as u32, 2);
        take_over_reserved_slot(&mut state, &key(task, 1), token(n), child, &procs).unwrap();
        procs.kill(child);
    }
    procs.kill(submitter);
    let rec = procs.start(30, 3);
    let settled = |k: &TurnKey| k.task == "b";
    let step = reconcile_step(&mut state, rec, 2, token(10), &procs, &settled).unwrap();
    match step {
        ReconcileStep::Spawn {
            key: k,
            token: t,
            replaced: Some(dead),
        } => {
            assert_eq!(k, key("a", 1));
            assert_eq!(t, token(10));
            assert_eq!(dead.pid, 21);
        }
        other => panic!("expected a replacement spawn, got {other:?}"),
    }
    let step = reconcile_step(&mut state, rec, 2, token(11), &procs, &settled).unwrap();
    assert_eq!(step, ReconcileStep::Removed { key: key("b", 1) });
    assert!(state.row(&key("b", 1)).is_none());
}

/// The real-process half of the case above: a turn left dispatching by a controller that died is
/// recovered by `tollgate reconcile` started from an unrelated directory (`/`), and runs in its
/// own recorded working directory.
#[test]
fn interrupted_legacy_reassignment_recovers_from_an_unrelated_working_directory_with_real_processes(
) {
    use std::collections::BTreeMap;
    use std::time::{Duration, Instant};
    use tollgate::home::Home;
    use tollgate::queue::SqliteStore;
    use tollgate::tasks;

    let dir = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let home = Home::at(dir.path().join("home"));
    let config = home.init(Some(1)).unwrap();
    let store = SqliteStore::new(home.clone(), Duration::from_secs(10), config.durability);
    // A controller that is certainly gone: a process we started and reaped.
    let mut gone = std::process::Command::new("true").spawn().unwrap();
    let gone_pid = gone.id();
    gone.wait().unwrap();
    let dead = ProcessIdentity {
        pid: gone_pid,
        start_time_micros: 1,
    };
    let turn = store
        .transact_section(
            tollgate::queue::Commit::Promise,
            &steps::Reads::Everything,
            |state, _, _, tx| {
                let turn = tasks::create_turn_in(
                    (&home, tx),
                    "legacy",
                    vec!["sh".into(), "-c".into(), "pwd > ran.txt".into()],
                    Some(work.path().to_path_buf()),
                    std::env::vars_os().collect::<BTreeMap<_, _>>(),
                    false,
                    1,
                )?;
                enqueue(state, &turn.key, dead, 1)?;
                adopt_row(state, &turn.key, dead)?;
                Ok::<_, tollgate::dispatch::DispatchError>(turn)
            },
        )
        .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .current_dir("/")
        .arg("--home")
        .arg(home.root())
        .arg("reconcile")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let record = tasks::load_turn(&home, &turn.key).unwrap().unwrap();
        if record.is_settled() {
            assert_eq!(record.exit_code, Some(0), "{record:?}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the recovered turn never ended: {record:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let ran = std::fs::read_to_string(work.path().join("ran.txt")).unwrap();
    assert_eq!(
        ran.trim(),
        std::fs::canonicalize(work.path())
            .unwrap()
            .to_str()
            .unwrap()
    );
}

/// S1 fleet-wide: a finishing runner leaves only its own identity out of the count. Another host's
/// live runner that happens to have the same pid (pids repeat across hosts, their start times
/// differ) still holds its slot; excluding by pid alone let a fleet start one turn too many.
#[test]
fn a_finishing_runner_excludes_itself_not_another_hosts_runner_with_its_pid() {
    let mut procs = Procs::new();
    let here = procs.start(10, 1);
    let there = procs.start(10, 2);
    let mut state = queue_with(&[("a", 1), ("b", 1)], here);
    state.runners = vec![
        RunnerRecord {
            key: key("a", 1),
            identity: here,
            attached: false,
        },
        RunnerRecord {
            key: key("b", 1),
            identity: there,
            attached: false,
        },
    ];
    assert_eq!(occupied_runner_slots(&state, &procs, None, None), 2);
    assert_eq!(occupied_runner_slots(&state, &procs, Some(here), None), 1);
    assert_eq!(occupied_runner_slots(&state, &procs, Some(there), None), 1);
}
