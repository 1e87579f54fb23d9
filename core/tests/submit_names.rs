//! How a detached submit names its task and numbers its turn (spec/slots.md, "Submit";
//! spec/turns.md): a generated name skips every name a task record or a task folder holds, the
//! candidates are read in one round, and a task whose counter was rewound numbers its turn after
//! the highest one on disk, saying so.

mod common;

use common::{argv, id, record, submit, submit_to, task, Home, World};
use tollgate_core::admission::Strategy;
use tollgate_core::records::first_generated_name;
use tollgate_core::section::MAX_READ_ROUNDS;
use tollgate_core::slots::sections::GENERATED_NAME_TRIES;
use tollgate_core::slots::TurnKey;
use tollgate_core::turns::NewTurn;

fn make() -> NewTurn {
    NewTurn {
        argv: argv(&["make", "all"]),
        ..NewTurn::default()
    }
}

#[test]
fn a_named_submit_takes_the_task_given_and_numbers_its_turns_from_one() {
    let mut home = Home::default();
    let world = World::default();
    let first = submit(&mut home, &world, "build", None, 1, 1_000).effect;
    let second = submit(&mut home, &world, "build", None, 2, 1_001).effect;
    assert_eq!(first.key, TurnKey::new("build", 1));
    assert_eq!(second.key, TurnKey::new("build", 2));
    assert_eq!(home.tasks["build"].next_turn, 3);
    assert_eq!(home.turn(&second.key).id, Some(second.queue_id));
}

#[test]
fn a_generated_name_is_the_program_and_the_turns_id_when_it_is_free() {
    let mut home = Home::default();
    let new = make();
    let ran = home.run(
        &submit_to(None, &new, id(1), 1, 1_000),
        &World::default(),
        None,
    );
    let expected = first_generated_name(&new.argv, ran.effect.queue_id);
    assert_eq!(ran.effect.key, TurnKey::new(expected, 1));
}

#[test]
fn a_generated_name_skips_names_a_record_or_a_left_folder_holds_reading_them_in_one_round() {
    let mut home = Home::default();
    let new = make();
    let first = first_generated_name(&new.argv, home.queue.id_of_next_enqueue());
    // Taken by records, then by a folder whose record is gone; more of them than read rounds.
    home.tasks
        .insert(first.clone(), task(&first, 1, Strategy::default()));
    let taken = MAX_READ_ROUNDS as u32 + 4;
    for n in 2..=taken {
        let name = format!("{first}-{n}");
        if n % 2 == 0 {
            home.tasks
                .insert(name.clone(), task(&name, 1, Strategy::default()));
        } else {
            home.leftover_tasks.insert(name);
        }
    }
    let ran = home.run(
        &submit_to(None, &new, id(1), 1, 1_000),
        &World::default(),
        None,
    );
    assert_eq!(
        ran.effect.key,
        TurnKey::new(format!("{first}-{}", taken + 1), 1)
    );
    assert_eq!(
        ran.rounds[1].tasks.len(),
        GENERATED_NAME_TRIES as usize - 1,
        "every numbered variant is read in the one round after the first name: {:?}",
        ran.rounds
    );
}

#[test]
fn a_generated_name_with_every_variant_taken_is_the_fallback() {
    let mut home = Home::default();
    let new = make();
    let first = first_generated_name(&new.argv, home.queue.id_of_next_enqueue());
    home.leftover_tasks.insert(first.clone());
    for n in 2..=GENERATED_NAME_TRIES {
        home.leftover_tasks.insert(format!("{first}-{n}"));
    }
    let ran = home.run(
        &submit_to(None, &new, id(1), 1, 1_000),
        &World::default(),
        None,
    );
    assert_eq!(ran.effect.key, TurnKey::new("fallback", 1));
}

#[test]
fn a_task_whose_record_was_deleted_numbers_after_its_highest_turn_and_warns() {
    let mut home = Home::default();
    for turn in 1..=3 {
        let key = TurnKey::new("a", turn);
        home.turns
            .insert(key.clone(), record(&key, u64::from(turn)));
    }
    let ran = submit(&mut home, &World::default(), "a", None, 1, 1_000);
    assert_eq!(ran.effect.key, TurnKey::new("a", 4));
    assert!(
        ran.rounds.iter().any(|r| r.numbers.contains("a")),
        "the task's recorded numbers are read: {:?}",
        ran.rounds
    );
    assert_eq!(home.tasks["a"].next_turn, 5);
    assert_eq!(ran.writes.warnings.len(), 1, "{:?}", ran.writes.warnings);
    assert!(
        ran.writes.warnings[0].contains("turn 1 of task \"a\""),
        "{:?}",
        ran.writes.warnings
    );
    for turn in 1..=3 {
        assert_eq!(
            home.turn(&TurnKey::new("a", turn)).id,
            Some(u64::from(turn))
        );
    }
}
