//! Issue 12: a section's commit writes only the queue rows it changed, however deep the queue.
//! Triggers planted in the test's database count every row the store inserts into or deletes
//! from `entries` and `entry_dependencies`; a section that parks one new row behind 2 000 parked
//! rows, changes one, or removes one writes exactly that, and the queue reads back as changed.

use std::path::Path;
use std::time::Duration;
use tollgate::config::Durability;
use tollgate::home::Home;
use tollgate::protocol::slots::{
    enqueue, park, AfterRule, Dependency, ProcessIdentity, QueueState, TurnKey,
};
use tollgate::queue::{SqliteStore, StoreError};

const DEPTH: u32 = 2_000;

fn store(home: &Path) -> SqliteStore {
    SqliteStore::new(Home::at(home), Duration::from_secs(10), Durability::Os)
}

fn me() -> ProcessIdentity {
    ProcessIdentity {
        pid: 1,
        start_time_micros: 1,
    }
}

fn add_parked(queue: &mut QueueState, key: &TurnKey) {
    enqueue(queue, key, me(), 1).expect("enqueue");
    park(queue, key).expect("park");
}

/// Counts the row writes of the store: `(table, op)` → rows, reset before each section.
fn plant_counters(db: &Path) {
    rusqlite::Connection::open(db)
        .expect("open")
        .execute_batch(
            "CREATE TABLE test_writes (what TEXT PRIMARY KEY, n INTEGER NOT NULL);
             CREATE TRIGGER test_entries_insert AFTER INSERT ON entries BEGIN
               INSERT INTO test_writes VALUES ('entries insert', 1)
                 ON CONFLICT (what) DO UPDATE SET n = n + 1; END;
             CREATE TRIGGER test_entries_update AFTER UPDATE ON entries BEGIN
               INSERT INTO test_writes VALUES ('entries update', 1)
                 ON CONFLICT (what) DO UPDATE SET n = n + 1; END;
             CREATE TRIGGER test_entries_delete AFTER DELETE ON entries BEGIN
               INSERT INTO test_writes VALUES ('entries delete', 1)
                 ON CONFLICT (what) DO UPDATE SET n = n + 1; END;
             CREATE TRIGGER test_deps_insert AFTER INSERT ON entry_dependencies BEGIN
               INSERT INTO test_writes VALUES ('deps insert', 1)
                 ON CONFLICT (what) DO UPDATE SET n = n + 1; END;
             CREATE TRIGGER test_deps_delete AFTER DELETE ON entry_dependencies BEGIN
               INSERT INTO test_writes VALUES ('deps delete', 1)
                 ON CONFLICT (what) DO UPDATE SET n = n + 1; END;",
        )
        .expect("plant the counting triggers");
}

/// The writes counted since the last call, as sorted `what=n` items; resets the counters.
fn writes(db: &Path) -> Vec<String> {
    let conn = rusqlite::Connection::open(db).expect("open");
    let mut stmt = conn
        .prepare("SELECT what, n FROM test_writes ORDER BY what")
        .expect("prepare");
    let rows: Vec<String> = stmt
        .query_map([], |row| {
            Ok(format!(
                "{}={}",
                row.get::<_, String>(0)?,
                row.get::<_, i64>(1)?
            ))
        })
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("rows");
    conn.execute("DELETE FROM test_writes", []).expect("reset");
    rows
}

#[test]
fn a_section_writes_only_the_rows_it_changed_behind_a_deep_queue() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let db = tmp.path().join("tollgate.db");
    let store = store(tmp.path());
    store
        .transact(|queue| {
            for n in 0..DEPTH {
                add_parked(queue, &TurnKey::new(format!("bulk-{n}"), 1));
            }
            Ok::<_, StoreError>(())
        })
        .expect("fill");
    plant_counters(&db);

    // A parking submit's change: one new row at the end, with one dependency.
    let new = TurnKey::new("new", 1);
    store
        .transact(|queue| {
            add_parked(queue, &new);
            queue
                .entries
                .last_mut()
                .expect("the new row")
                .after
                .push(Dependency {
                    key: TurnKey::new("bulk-7", 1),
                    rule: AfterRule::Ended,
                });
            Ok::<_, StoreError>(())
        })
        .expect("park one more");
    assert_eq!(writes(&db), ["deps insert=1", "entries insert=1"]);

    // One row changed in the middle (rewritten in place), its neighbours untouched.
    let middle = TurnKey::new(format!("bulk-{}", DEPTH / 2), 1);
    store
        .transact(|queue| {
            queue.row_mut(&middle).expect("row").priority = 3;
            Ok::<_, StoreError>(())
        })
        .expect("change one");
    assert_eq!(writes(&db), ["entries update=1"]);

    // One row removed from the front, and the new row (with its dependency) from the end.
    store
        .transact(|queue| {
            queue.entries.remove(0);
            queue.entries.retain(|e| e.key != new);
            Ok::<_, StoreError>(())
        })
        .expect("remove two");
    assert_eq!(writes(&db), ["deps delete=1", "entries delete=2"]);

    // A section that changes nothing writes nothing.
    store
        .transact(|_| Ok::<_, StoreError>(()))
        .expect("unchanged");
    assert!(writes(&db).is_empty());

    let queue = store.load().expect("load");
    assert_eq!(queue.entries.len(), DEPTH as usize - 1);
    // Schema 8's row count (what a section on a part checks the queue's bound against) followed
    // every insert and delete.
    let counted: (i64, i64) = rusqlite::Connection::open(&db)
        .expect("open")
        .query_row(
            "SELECT row_count, (SELECT count(*) FROM entries) FROM queue_meta WHERE id = 1",
            [],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .expect("the row count");
    let left = i64::from(DEPTH) - 1;
    assert_eq!(counted, (left, left));
    assert_eq!(queue.entries[0].key, TurnKey::new("bulk-1", 1));
    assert_eq!(queue.row(&middle).expect("row").priority, 3);
    assert!(queue.row(&new).is_none());
    assert!(queue.entries.iter().all(|e| e.after.is_empty()));
}
