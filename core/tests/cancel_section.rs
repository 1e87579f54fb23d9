//! The cancel section (spec/slots.md, "Cancel"): rows nobody runs leave at once and their turns
//! end cancelled, decided on the part of the queue a cancel names (its task's rows), with every
//! removed turn's record read in one round however many there are.

mod common;

use common::{submit, Home, World};
use tollgate_core::records::TurnOutcome;
use tollgate_core::section::MAX_READ_ROUNDS;
use tollgate_core::slots::sections::CancelSection;
use tollgate_core::slots::steps::{cancel_reads, CancelSelection, Reads};
use tollgate_core::slots::TurnKey;

fn cancel_of(selection: CancelSelection<'_>) -> CancelSection<'_> {
    CancelSection {
        selection,
        me: common::id(9),
        now_millis: 5_000,
    }
}

#[test]
fn cancelling_a_task_ends_every_turn_nobody_runs_on_its_own_part_in_one_read_round() {
    let mut home = Home::default();
    let world = World::default();
    // More turns than read rounds; their submitter is gone, so nobody runs any of them.
    let turns: Vec<TurnKey> = (1..=MAX_READ_ROUNDS as u128 + 4)
        .map(|n| submit(&mut home, &world, "a", None, n, 1_000).effect.key)
        .collect();
    let other = submit(&mut home, &world, "b", None, 99, 1_000).effect.key;
    let ran = home.run(&cancel_of(CancelSelection::Task("a")), &world, None);
    assert_eq!(ran.effect.removed, turns);
    assert_eq!(ran.loads, [Reads::Part(cancel_reads("a"))]);
    let with_turns = ran.rounds.iter().filter(|r| !r.turns.is_empty()).count();
    assert_eq!(with_turns, 1, "{:?}", ran.rounds);
    for key in &turns {
        assert!(home.queue.row(key).is_none());
        assert_eq!(home.turn(key).outcome, Some(TurnOutcome::Cancelled));
        assert_eq!(home.turn(key).ended_at_millis, Some(5_000));
    }
    assert!(home.queue.row(&other).is_some(), "another task's row stays");
    assert_eq!(home.turn(&other).outcome, None);
}

#[test]
fn cancelling_one_turn_reads_its_tasks_rows_and_ends_only_that_turn() {
    let mut home = Home::default();
    let world = World::default();
    let first = submit(&mut home, &world, "a", None, 1, 1_000).effect.key;
    let second = submit(&mut home, &world, "a", None, 2, 1_000).effect.key;
    let ran = home.run(&cancel_of(CancelSelection::Turn(&second)), &world, None);
    assert_eq!(ran.effect.removed, std::slice::from_ref(&second));
    assert_eq!(ran.loads, [Reads::Part(cancel_reads("a"))]);
    assert_eq!(home.turn(&second).outcome, Some(TurnOutcome::Cancelled));
    assert_eq!(home.turn(&first).outcome, None);
    assert!(home.queue.row(&first).is_some());
}
