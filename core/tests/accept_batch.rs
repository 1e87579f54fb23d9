//! serve's group commit as one section (`AcceptBatch`), run the way the shell's section runner
//! runs it: the marks read in the section, each delivery decided on the part as the earlier ones
//! left it, each delivery's writes a group of their own, and a refused group run again with its
//! delivery failed.

mod common;

use common::{argv, id, submit_to, task, Home, World};
use std::collections::BTreeMap;
use tollgate_core::admission::{EventIdentity, Strategy};
use tollgate_core::section::Section;
use tollgate_core::slots::sections::{AcceptBatch, Accepted, BatchDelivery, Placement};
use tollgate_core::slots::TurnKey;
use tollgate_core::turns::NewTurn;

const TTL_MILLIS: u64 = 1_000;

fn identity(s: &str) -> EventIdentity {
    EventIdentity(s.into())
}

fn legacy(s: &str) -> EventIdentity {
    EventIdentity(format!("generic//{s}"))
}

/// One delivery per `(delivery id, identity, task)`, arrived at 100, each with its own token.
struct Batch {
    identities: Vec<(EventIdentity, EventIdentity)>,
    ids: Vec<(String, String)>,
    new: NewTurn,
}

impl Batch {
    fn of(deliveries: &[(&str, &str, &str)]) -> Batch {
        Batch {
            identities: deliveries
                .iter()
                .map(|(_, ident, _)| (identity(ident), legacy(ident)))
                .collect(),
            ids: deliveries
                .iter()
                .map(|(delivery, _, task)| (delivery.to_string(), task.to_string()))
                .collect(),
            new: NewTurn {
                argv: argv(&["true"]),
                ..NewTurn::default()
            },
        }
    }

    fn deliveries(&self) -> Vec<BatchDelivery<'_>> {
        self.ids
            .iter()
            .zip(&self.identities)
            .enumerate()
            .map(
                |(n, ((delivery, task), (identity, legacy)))| BatchDelivery {
                    identity,
                    legacy,
                    arrived_millis: 100,
                    id: delivery,
                    body: delivery.as_bytes(),
                    submit: submit_to(Some(task), &self.new, id(1), 10 + n as u128, 100),
                },
            )
            .collect()
    }
}

fn section<'a>(deliveries: &'a [BatchDelivery<'a>]) -> AcceptBatch<'a> {
    AcceptBatch {
        deliveries,
        ttl_millis: TTL_MILLIS,
        failed: BTreeMap::new(),
        prune_payloads: None,
    }
}

fn queued_key(answer: &Accepted) -> &TurnKey {
    match answer {
        Accepted::Queued(submitted) => &submitted.key,
        other => panic!("not queued: {other:?}"),
    }
}

/// Two deliveries of one identity in one batch queue one turn; a second delivery of the same
/// task sees the first's turn (numbered after it, parked behind it on one slot); each queued
/// delivery's mark and payload are written with its turn, in its own group.
#[test]
fn one_batch_marks_once_per_identity_and_numbers_its_turns_in_order() {
    let batch = Batch::of(&[("d1", "a", "t"), ("d2", "a", "t"), ("d3", "b", "t")]);
    let deliveries = batch.deliveries();
    let mut home = Home::default();
    let (ran, refused) = home.run_grouped(section(&deliveries), &World::default());
    assert!(refused.is_empty());
    assert_eq!(ran.effect.len(), 3);
    assert_eq!(queued_key(&ran.effect[0]), &TurnKey::new("t", 1));
    assert_eq!(ran.effect[1], Accepted::Duplicate);
    assert_eq!(queued_key(&ran.effect[2]), &TurnKey::new("t", 2));
    assert!(matches!(
        &ran.effect[0],
        Accepted::Queued(s) if matches!(s.placement, Placement::Spawn(_))
    ));
    assert_eq!(ran.writes.groups.len(), 3);
    assert!(
        ran.writes.groups[1].is_empty(),
        "a duplicate writes nothing"
    );
    assert_eq!(home.queue.entries.len(), 2);
    assert_eq!(home.turns.len(), 2);
    assert_eq!(home.tasks["t"].next_turn, 3);
    assert_eq!(
        home.marks,
        [
            (identity("a"), 100 + TTL_MILLIS),
            (identity("b"), 100 + TTL_MILLIS)
        ]
        .into_iter()
        .collect()
    );
    assert_eq!(home.payloads["d1"], (TurnKey::new("t", 1), b"d1".to_vec()));
    assert_eq!(home.payloads["d3"], (TurnKey::new("t", 2), b"d3".to_vec()));
    assert!(!home.payloads.contains_key("d2"));
    // The marks were read in one round, before anything else.
    let first = &ran.rounds[0];
    let marks: Vec<&EventIdentity> = first.marks.iter().collect();
    assert_eq!(
        marks,
        vec![&identity("a"), &identity("b"), &legacy("a"), &legacy("b")]
    );
    assert!(ran.writes.trim_marks, "the mark table keeps its bound");
}

/// A live stored mark of the identity, or of its legacy identity, is a duplicate; an expired one
/// is replaced.
#[test]
fn a_live_stored_mark_is_a_duplicate_and_an_expired_one_is_replaced() {
    let batch = Batch::of(&[
        ("d1", "live", "t"),
        ("d2", "old", "t"),
        ("d3", "legacy", "u"),
    ]);
    let deliveries = batch.deliveries();
    let mut home = Home::default();
    home.marks.insert(identity("live"), 101);
    home.marks.insert(identity("old"), 100);
    home.marks.insert(legacy("legacy"), 500);
    let (ran, _) = home.run_grouped(section(&deliveries), &World::default());
    assert_eq!(ran.effect[0], Accepted::Duplicate);
    assert_eq!(queued_key(&ran.effect[1]), &TurnKey::new("t", 1));
    assert_eq!(ran.effect[2], Accepted::Duplicate);
    assert_eq!(home.marks[&identity("old")], 100 + TTL_MILLIS);
    assert_eq!(home.turns.len(), 1);
}

/// A delivery whose write group the store refuses fails alone: the batch runs again with it
/// failed, nothing of it is kept (its mark neither), and a later delivery of the same identity,
/// a duplicate while the first was queued, now takes the mark and queues the turn.
#[test]
fn a_refused_group_fails_its_delivery_alone_and_keeps_no_mark_of_it() {
    let batch = Batch::of(&[("d1", "x", "t"), ("d2", "x", "t"), ("d3", "y", "u")]);
    let deliveries = batch.deliveries();
    let mut home = Home::default();
    home.refused_payloads.insert("d1".into());
    let (ran, refused) = home.run_grouped(section(&deliveries), &World::default());
    assert_eq!(refused, vec![0]);
    assert_eq!(ran.effect[0], Accepted::Failed("group 0 refused".into()));
    assert_eq!(queued_key(&ran.effect[1]), &TurnKey::new("t", 1));
    assert_eq!(queued_key(&ran.effect[2]), &TurnKey::new("u", 1));
    assert!(!home.payloads.contains_key("d1"));
    assert_eq!(home.payloads["d2"].0, TurnKey::new("t", 1));
    assert_eq!(home.marks.len(), 2);
    assert_eq!(home.queue.entries.len(), 2);
}

/// A delivery whose task record cannot be read fails alone: the read names its group, the batch
/// runs again without it, and the batch's other deliveries (another task's, and the same
/// identity's next one) commit.
#[test]
fn an_unreadable_record_fails_only_the_delivery_that_asked_for_it() {
    let batch = Batch::of(&[("d1", "x", "bad"), ("d2", "y", "good"), ("d3", "x", "good")]);
    let deliveries = batch.deliveries();
    let mut home = Home::default();
    home.unreadable_tasks.insert("bad".into());
    let (ran, refused) = home.run_grouped(section(&deliveries), &World::default());
    assert_eq!(refused, vec![0]);
    assert_eq!(ran.effect[0], Accepted::Failed("group 0 unreadable".into()));
    assert_eq!(queued_key(&ran.effect[1]), &TurnKey::new("good", 1));
    assert_eq!(queued_key(&ran.effect[2]), &TurnKey::new("good", 2));
    assert_eq!(home.marks.len(), 2);
    assert!(!home.tasks.contains_key("bad"));
}

/// A delivery the submit step refuses (its task has used every turn number) is failed without
/// a mark; the batch's other deliveries, the same identity's next one included, are decided as
/// if it had not come.
#[test]
fn a_refused_submit_fails_its_delivery_and_takes_no_mark() {
    let batch = Batch::of(&[("d1", "x", "full"), ("d2", "x", "t")]);
    let deliveries = batch.deliveries();
    let mut home = Home::default();
    home.tasks
        .insert("full".into(), task("full", u32::MAX, Strategy::default()));
    let (ran, refused) = home.run_grouped(section(&deliveries), &World::default());
    assert!(refused.is_empty());
    assert!(
        matches!(&ran.effect[0], Accepted::Failed(why) if why.contains("full")),
        "{:?}",
        ran.effect[0]
    );
    assert_eq!(queued_key(&ran.effect[1]), &TurnKey::new("t", 1));
    assert_eq!(home.marks.len(), 1);
    assert!(ran.writes.groups[0].is_empty());
    assert_eq!(
        home.tasks["full"].next_turn,
        u32::MAX,
        "the refused task is unchanged"
    );
}

/// A delivery failed before the batch (a request the shell could not prepare) is answered failed
/// and writes nothing; a group index past the batch, or one already failed, is no rerun.
#[test]
fn a_delivery_failed_beforehand_writes_nothing() {
    let batch = Batch::of(&[("d1", "x", "t"), ("d2", "y", "t")]);
    let deliveries = batch.deliveries();
    let mut input = section(&deliveries);
    input.failed.insert(0, "bad task name".into());
    assert!(input.without_group(0, "again".into()).is_none());
    assert!(input.without_group(2, "past the batch".into()).is_none());
    let mut home = Home::default();
    let (ran, _) = home.run_grouped(input, &World::default());
    assert_eq!(ran.effect[0], Accepted::Failed("bad task name".into()));
    assert_eq!(queued_key(&ran.effect[1]), &TurnKey::new("t", 1));
    assert!(!home.marks.contains_key(&identity("x")));
}

/// The batch reads what its deliveries' submits read, together: the part holds every task.
#[test]
fn the_batch_reads_every_deliverys_task() {
    use tollgate_core::slots::steps::Reads;
    let batch = Batch::of(&[("d1", "x", "t"), ("d2", "y", "u"), ("d3", "z", "t")]);
    let deliveries = batch.deliveries();
    let Reads::Part(part) = section(&deliveries).reads() else {
        panic!("a batch of named tasks reads a part");
    };
    let named: Vec<&str> = part
        .tasks
        .iter()
        .chain(&part.lines)
        .map(String::as_str)
        .collect();
    assert!(named.contains(&"t") && named.contains(&"u"), "{part:?}");
}

/// serve answers 200 on the strength of the batch's commit: it is a promise, synced before the
/// section returns (spec/store.md, "Durability"), never an internal commit a power loss may undo.
#[test]
fn the_batch_commits_as_a_promise() {
    use tollgate_core::section::Commit;
    let batch = Batch::of(&[("d1", "x", "t")]);
    let deliveries = batch.deliveries();
    assert_eq!(section(&deliveries).commit(), Commit::Promise);
}
