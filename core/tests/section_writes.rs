//! What a step's writes and its draft promise their callers (spec/steps.md; spec/slots.md,
//! "Dependencies and retries"): the store applies task records before turn records and removed
//! turns before their tasks, a draft sees the turns its step created among its task's numbers,
//! a step that composes another's takes in all of its writes, and a caller can tell writes that
//! change nothing and writes that record an outcome.

mod common;

use common::{record, task, Home, World};
use tollgate_core::admission::Strategy;
use tollgate_core::records::TurnOutcome;
use tollgate_core::section::{Draft, Need, RecordWrite, Records, TurnWrite, Writes};
use tollgate_core::slots::sections::{CleanEffect, CleanScope, CleanSection};
use tollgate_core::slots::TurnKey;

fn ended(key: &TurnKey, id: u64) -> tollgate_core::records::TurnRecord {
    let mut turn = record(key, id);
    turn.started_at_millis = Some(1);
    turn.ended_at_millis = Some(2);
    turn.exit_code = Some(0);
    turn.outcome = Some(TurnOutcome::Completed);
    turn
}

#[test]
fn a_clean_removes_an_emptied_task_after_its_turns() {
    let mut home = Home::default();
    let old = TurnKey::new("old", 1);
    home.turns.insert(old.clone(), ended(&old, 1));
    home.tasks
        .insert("old".to_string(), task("old", 2, Strategy::default()));
    let tasks = vec!["old".to_string()];
    let section = CleanSection {
        scope: CleanScope::Tasks(&tasks),
        keep: 0,
        ended_before_millis: None,
        dry_run: false,
    };
    let ran = home.run(&section, &World::default(), None);
    let CleanEffect::Cleaned(cleaned) = &ran.effect else {
        panic!("{:?}", ran.effect);
    };
    assert_eq!(cleaned.tasks, ["old"]);
    assert!(!ran.writes.is_empty());
    let order: Vec<RecordWrite<'_>> = ran.writes.in_order().collect();
    assert_eq!(
        order,
        [
            RecordWrite::RemoveTurn(&old),
            RecordWrite::RemoveTask("old")
        ]
    );
    assert!(home.turns.is_empty() && home.tasks.is_empty(), "{home:?}");
}

#[test]
fn a_store_applies_task_records_then_turns_then_removals() {
    let key = TurnKey::new("b", 1);
    let gone = TurnKey::new("c", 1);
    let mut writes = Writes::default();
    writes.removed_tasks.insert("c".to_string());
    writes.removed_turns.insert(gone.clone());
    let turn = TurnWrite {
        record: record(&key, 1),
        create: true,
    };
    writes.turns.insert(key.clone(), turn.clone());
    let b = task("b", 2, Strategy::default());
    writes.tasks.insert("b".to_string(), b.clone());
    let order: Vec<RecordWrite<'_>> = writes.in_order().collect();
    assert_eq!(
        order,
        [
            RecordWrite::Task(&b),
            RecordWrite::Turn(&turn),
            RecordWrite::RemoveTurn(&gone),
            RecordWrite::RemoveTask("c"),
        ]
    );
}

#[test]
fn writes_of_any_one_kind_are_not_empty_and_only_a_settled_turn_records_an_outcome() {
    assert!(Writes::default().is_empty());
    let key = TurnKey::new("a", 1);
    let mut turn = Writes::default();
    turn.turns.insert(
        key.clone(),
        TurnWrite {
            record: record(&key, 1),
            create: true,
        },
    );
    assert!(!turn.records_an_outcome(), "a new turn has no outcome");
    let mut outcome = turn.clone();
    outcome.turns.insert(
        key.clone(),
        TurnWrite {
            record: ended(&key, 1),
            create: false,
        },
    );
    assert!(outcome.records_an_outcome());
    let mut tasks = Writes::default();
    tasks
        .tasks
        .insert("a".to_string(), task("a", 2, Strategy::default()));
    let leases = Writes {
        leases: Some(Default::default()),
        ..Writes::default()
    };
    let mut removed_turn = Writes::default();
    removed_turn.removed_turns.insert(key.clone());
    let mut removed_task = Writes::default();
    removed_task.removed_tasks.insert("a".to_string());
    for writes in [turn, outcome, tasks, leases, removed_turn, removed_task] {
        assert!(!writes.is_empty(), "{writes:?}");
    }
}

#[test]
fn a_draft_counts_the_turns_its_step_created_among_its_tasks_numbers_only() {
    let mut read = Records::default();
    read.put_numbers("a".to_string(), vec![2, 1]);
    read.put_numbers("b".to_string(), vec![]);
    let mut draft = Draft::new(&read);
    draft.write_turn(record(&TurnKey::new("a", 5), 5), true);
    draft.write_turn(record(&TurnKey::new("b", 9), 9), true);
    assert_eq!(draft.numbers("a"), Ok(vec![1, 2, 5]));
    assert_eq!(draft.numbers("b"), Ok(vec![9]));
}

#[test]
fn a_step_that_composes_another_takes_in_all_of_its_writes() {
    let read = Records::default();
    let key = TurnKey::new("a", 1);
    let mut composed = Draft::new(&read);
    composed.write_turn(record(&key, 1), true);
    composed.write_task(task("a", 2, Strategy::default()));
    composed.warn("a line".to_string());
    composed.remove_turn(TurnKey::new("old", 1));
    composed.remove_task("old".to_string());
    composed.write_leases(Default::default());
    let inner = composed.into_writes();
    let mut outer = Draft::new(&read);
    let mut started = record(&key, 1);
    started.started_at_millis = Some(7);
    outer.write_turn(started.clone(), true);
    let mut inner_update = inner.clone();
    inner_update.turns.insert(
        key.clone(),
        TurnWrite {
            record: started,
            create: false,
        },
    );
    outer.absorb(inner_update);
    let writes = outer.into_writes();
    assert!(
        writes.turns[&key].create,
        "a turn this step created stays new"
    );
    assert_eq!(writes.turns[&key].record.started_at_millis, Some(7));
    assert_eq!(writes.tasks, inner.tasks);
    assert_eq!(writes.warnings, inner.warnings);
    assert_eq!(writes.removed_turns, inner.removed_turns);
    assert_eq!(writes.removed_tasks, inner.removed_tasks);
    assert_eq!(writes.leases, inner.leases);
}

#[test]
fn a_merged_need_asks_for_what_both_needed() {
    let mut need = Need {
        turns: [TurnKey::new("a", 1)].into_iter().collect(),
        ..Need::default()
    };
    need.merge(Need {
        turns: [TurnKey::new("b", 1)].into_iter().collect(),
        tasks: ["b".to_string()].into_iter().collect(),
        numbers: ["c".to_string()].into_iter().collect(),
        marks: [tollgate_core::admission::EventIdentity("d".into())]
            .into_iter()
            .collect(),
        group: Some(2),
    });
    assert_eq!(
        need.turns,
        [TurnKey::new("a", 1), TurnKey::new("b", 1)]
            .into_iter()
            .collect()
    );
    assert_eq!(need.tasks, ["b".to_string()].into_iter().collect());
    assert_eq!(need.numbers, ["c".to_string()].into_iter().collect());
    assert_eq!(need.marks.len(), 1);
    assert_eq!(need.group, Some(2), "the group that asked is kept");
    let read = Records::default();
    assert_eq!(read.missing(&need), need);
}
