//! What every durable store promises (spec/store.md), as test bodies shared by the SQLite and the
//! PostgreSQL store's tests (tests/store_sqlite.rs, tests/store_postgres.rs): each opens its own
//! store and says how the store names itself in an error.

use super::queue_shapes::every_shape;
use std::path::Path;
use tollgate::protocol::slots::QueueState;
use tollgate::queue::{Commit, Store, StoreError};

/// Every queue shape round-trips; another connection (`open()` again: another command) reads the
/// same document; a section that removes a row, clears a reservation and drops a runner and a
/// work leaves the rest as it was.
pub fn every_shape_round_trips_and_a_section_changes_only_what_it_changed<S: Store>(
    open: impl Fn() -> S,
) {
    let first = open();
    assert_eq!(first.load().expect("new store"), QueueState::default());
    let shape = every_shape();
    first
        .transact(|queue| {
            *queue = shape.clone();
            Ok::<_, StoreError>(())
        })
        .expect("publish");
    assert_eq!(first.load().expect("load"), shape);
    assert_eq!(open().load().expect("load again"), shape);

    let mut expected = shape.clone();
    expected.entries.remove(0);
    expected.entries[0].slot_reservation = None;
    expected.runners.remove(0);
    expected.works.pop();
    open()
        .transact_as(Commit::Internal, |queue| {
            queue.entries.remove(0);
            queue.entries[0].slot_reservation = None;
            queue.runners.remove(0);
            queue.works.pop();
            Ok::<_, StoreError>(())
        })
        .expect("internal commit");
    assert_eq!(first.load().expect("load"), expected);
}

/// A section that fails changes nothing, and one whose result would not load again (rows out of
/// FIFO order) is refused as unpublishable, naming the store (`names_store` says whether the
/// error's path is this store's), with nothing written.
pub fn a_failed_or_unpublishable_section_changes_nothing<S: Store>(
    store: &S,
    names_store: impl Fn(&Path) -> bool,
) {
    store
        .transact(|queue| {
            *queue = every_shape();
            Ok::<_, StoreError>(())
        })
        .expect("publish");
    let before = store.load().expect("load");

    let err = store
        .transact(|queue| {
            queue.entries.clear();
            queue.runners.clear();
            Err::<(), _>(StoreError::Poisoned)
        })
        .expect_err("the section failed");
    assert!(matches!(err, StoreError::Poisoned), "{err}");
    assert_eq!(store.load().expect("load"), before);

    let err = store
        .transact(|queue| {
            queue.entries.swap(0, 1);
            Ok::<_, StoreError>(())
        })
        .expect_err("unpublishable");
    assert!(
        matches!(&err, StoreError::Unpublishable { path, .. } if names_store(path)),
        "{err}"
    );
    assert_eq!(store.load().expect("load"), before);
}

/// The unlocked hint of the next turn id ([`Store::next_turn_id_hint`], spec/store.md "A generated
/// task name") is what a section predicts from the queue it loads
/// ([`tollgate::tasks::predicted_turn_id`]), with ids and a counter past 2^63 too. A store with
/// no queue yet may have no hint.
pub fn the_next_turn_id_hint_is_what_a_section_predicts<S: Store>(store: &S) {
    let fresh = store.load().expect("load a new store");
    if let Some(hint) = store.next_turn_id_hint() {
        assert_eq!(
            hint,
            tollgate::tasks::predicted_turn_id(&fresh),
            "a new store"
        );
    }
    let owner = tollgate::protocol::slots::ProcessIdentity {
        pid: 7,
        start_time_micros: 9,
    };
    let mut small = QueueState::default();
    for turn in 1..=3 {
        let key = tollgate::protocol::slots::TurnKey::new("hint", turn);
        tollgate::protocol::slots::enqueue(&mut small, &key, owner, 1_000 + u64::from(turn))
            .expect("enqueue");
    }
    let mut emptied = small.clone();
    emptied.entries.clear();
    for (name, state) in [
        ("three rows", small),
        ("every shape", every_shape()),
        ("the rows gone, the counter kept", emptied),
    ] {
        store
            .transact(|queue| {
                *queue = state.clone();
                Ok::<_, StoreError>(())
            })
            .unwrap_or_else(|e| panic!("publish {name}: {e}"));
        assert_eq!(
            store.next_turn_id_hint(),
            Some(tollgate::tasks::predicted_turn_id(&state)),
            "{name}"
        );
    }
}
