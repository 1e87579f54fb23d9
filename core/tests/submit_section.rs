//! What a detached submit's section decides and writes (spec/slots.md, "Submit", "Dependencies
//! and retries"): where it places its turn and when a waker must start it, how a turn whose
//! dependency already failed ends with its own id, that a newcomer ends the waiters it replaces,
//! that the records it needs are read in few rounds, and which part of the queue it runs on.

mod common;

use common::{argv, id, record, submit, submit_to, Home, World};
use tollgate_core::admission::Strategy;
use tollgate_core::records::TurnOutcome;
use tollgate_core::section::Undecided;
use tollgate_core::slots::sections::{Placement, SubmitSection};
use tollgate_core::slots::steps::{submit_line_reads, submit_reads, Reads, Schedule};
use tollgate_core::slots::{
    AfterRule, Dependency, QueueEntry, QueueState, RowState, SlotError, TurnKey, MAX_QUEUE_ROWS,
};
use tollgate_core::turns::NewTurn;

fn after(keys: &[TurnKey], rule: AfterRule) -> NewTurn {
    NewTurn {
        argv: argv(&["true"]),
        after: keys
            .iter()
            .map(|key| Dependency {
                key: key.clone(),
                rule,
            })
            .collect(),
        ..NewTurn::default()
    }
}

/// A turn of `task` that ended with `outcome` and left the queue.
fn ended(home: &mut Home, key: &TurnKey, id: u64, outcome: TurnOutcome) {
    let mut turn = record(key, id);
    turn.started_at_millis = Some(10);
    turn.ended_at_millis = Some(20);
    turn.outcome = Some(outcome);
    turn.exit_code = Some(i32::from(outcome != TurnOutcome::Completed));
    home.turns.insert(key.clone(), turn);
    home.queue.next_queue_id = home.queue.next_queue_id.max(id + 1);
}

#[test]
fn a_debounced_turn_waits_for_its_quiet_period_and_names_its_waker_a_spawn_needs_none() {
    let mut home = Home::default();
    let world = World::default();
    let spawned = submit(&mut home, &world, "now", None, 1, 1_000).effect;
    assert!(
        matches!(spawned.placement, Placement::Spawn(_)),
        "{spawned:?}"
    );
    assert_eq!(spawned.placement.wake_at_millis(), None);
    let quiet = Strategy::Debounce { quiet_millis: 500 };
    let waiting = submit(&mut home, &world, "quiet", Some(quiet), 2, 1_000).effect;
    let Placement::Wait {
        ready_at_millis,
        wake_at_millis,
    } = waiting.placement
    else {
        panic!("a debounced turn waits: {waiting:?}");
    };
    assert_eq!(ready_at_millis, 1_500);
    assert_eq!(wake_at_millis, Some(1_500));
    assert_eq!(waiting.placement.wake_at_millis(), Some(1_500));
}

#[test]
fn a_turn_held_for_a_running_dependency_until_a_not_before_time_names_that_waker() {
    let mut home = Home::default();
    let world = World::default();
    let running = submit(&mut home, &world, "dep", None, 1, 1_000).effect.key;
    let new = after(std::slice::from_ref(&running), AfterRule::Ended);
    let section = SubmitSection {
        schedule: Schedule {
            priority: 0,
            not_before_millis: 9_000,
        },
        ..submit_to(Some("later"), &new, id(1), 2, 1_000)
    };
    let held = home.run(&section, &world, None).effect;
    assert_eq!(
        held.placement,
        Placement::Held {
            waiting_on: vec![running],
            wake_at_millis: Some(9_000),
        }
    );
    assert_eq!(held.placement.wake_at_millis(), Some(9_000));
}

#[test]
fn after_success_on_a_turn_that_already_failed_ends_the_new_turn_with_its_own_id() {
    let mut home = Home::default();
    let failed = TurnKey::new("dep", 1);
    ended(&mut home, &failed, 4, TurnOutcome::Failed);
    let new = after(std::slice::from_ref(&failed), AfterRule::Succeeded);
    let ran = home.run(
        &submit_to(Some("next"), &new, id(1), 1, 1_000),
        &World::default(),
        None,
    );
    let submitted = ran.effect;
    assert_eq!(
        submitted.placement,
        Placement::DependencyFailed {
            cause: failed.clone()
        }
    );
    assert!(home.queue.entries.is_empty(), "nothing was enqueued");
    assert_eq!(submitted.queue_id, 5, "the id after the dependency's");
    let turn = home.turn(&submitted.key);
    assert_eq!(turn.id, Some(5));
    assert_eq!(turn.outcome, Some(TurnOutcome::DependencyFailed));
    assert_eq!(turn.failed_dependency, Some(failed));
    assert_eq!(home.queue.id_of_next_enqueue(), 6, "its id is spent");
}

#[test]
fn a_turn_after_many_ended_turns_reads_their_records_in_one_round_and_starts() {
    let mut home = Home::default();
    let deps: Vec<TurnKey> = (1..=12)
        .map(|n| TurnKey::new(format!("dep{n}"), 1))
        .collect();
    for (n, key) in deps.iter().enumerate() {
        ended(&mut home, key, n as u64 + 1, TurnOutcome::Completed);
    }
    let new = after(&deps, AfterRule::Succeeded);
    let ran = home.run(
        &submit_to(Some("next"), &new, id(1), 1, 1_000),
        &World::default(),
        None,
    );
    assert!(
        matches!(ran.effect.placement, Placement::Spawn(_)),
        "{:?}",
        ran.effect
    );
    let with_deps: Vec<_> = ran
        .rounds
        .iter()
        .filter(|r| r.turns.iter().any(|k| deps.contains(k)))
        .collect();
    assert_eq!(with_deps.len(), 1, "{:?}", ran.rounds);
    assert!(
        deps.iter().all(|k| with_deps[0].turns.contains(k)),
        "{:?}",
        ran.rounds
    );
}

#[test]
fn a_queue_arrival_ends_the_waiter_it_replaces_superseded_and_older_waiters_stay_in_line() {
    let mut home = Home::default();
    let world = World::default();
    let running = submit(&mut home, &world, "a", None, 1, 1_000).effect;
    assert!(matches!(running.placement, Placement::Spawn(_)));
    // A line of waiters under the default concurrent=1; the newest is the queue's waiter.
    let waiters: Vec<TurnKey> = (2..=4u32)
        .map(|n| {
            submit(&mut home, &world, "a", None, u128::from(n), 1_000)
                .effect
                .key
        })
        .collect();
    let newest = submit(&mut home, &world, "a", Some(Strategy::Queue), 20, 1_100).effect;
    let replaced = &waiters[2];
    assert_eq!(newest.superseded, std::slice::from_ref(replaced));
    assert_eq!(home.turn(replaced).outcome, Some(TurnOutcome::Superseded));
    assert_eq!(home.turn(replaced).ended_at_millis, Some(1_100));
    assert!(home.queue.row(replaced).is_none());
    for older in &waiters[..2] {
        assert_eq!(home.turn(older).outcome, None);
        assert!(home.queue.row(older).is_some());
    }
    assert!(home.queue.row(&newest.key).is_some());
}

#[test]
fn a_generated_name_other_than_the_planned_one_runs_again_on_its_own_task() {
    let mut home = Home::default();
    let new = NewTurn {
        argv: argv(&["make"]),
        ..NewTurn::default()
    };
    let section = SubmitSection {
        planned: Some("make-7"),
        ..submit_to(None, &new, id(1), 1, 1_000)
    };
    let ran = home.run(&section, &World::default(), None);
    let task = ran.effect.key.task.clone();
    assert_ne!(task, "make-7");
    assert_eq!(
        ran.loads,
        [
            Reads::Part(submit_line_reads("make-7", &[])),
            Reads::Part(submit_reads(Some(&task), &[])),
        ]
    );
}

/// A queue at its bound of rows, every one parked.
fn full_queue() -> QueueState {
    let entries = (1..=MAX_QUEUE_ROWS as u64)
        .map(|n| QueueEntry {
            queue_id: n,
            key: TurnKey::new("bulk", n as u32),
            enqueued_at_millis: 0,
            state: RowState::Parked,
            slot_reservation: None,
            ready_at_millis: 0,
            cancel_requested: false,
            priority: 0,
            after: Vec::new(),
        })
        .collect();
    QueueState {
        entries,
        next_queue_id: MAX_QUEUE_ROWS as u64 + 1,
        ..QueueState::default()
    }
}

#[test]
fn a_submit_to_a_full_queue_reads_the_whole_queue_and_is_refused_there() {
    let home = Home {
        queue: full_queue(),
        ..Home::default()
    };
    let new = NewTurn {
        argv: argv(&["true"]),
        ..NewTurn::default()
    };
    for strategy in [None, Some(Strategy::Queue)] {
        let section = SubmitSection {
            strategy,
            ..submit_to(Some("one"), &new, id(1), 1, 1_000)
        };
        let Err((undecided, loads)) = home.decide(&section, &World::default(), None) else {
            panic!("a submit to a full queue was decided");
        };
        assert_eq!(
            undecided,
            Undecided::Refused(SlotError::QueueFull {
                limit: MAX_QUEUE_ROWS
            })
        );
        assert_eq!(loads.len(), 2, "{loads:?}");
        assert_eq!(loads[1], Reads::Everything);
    }
}
