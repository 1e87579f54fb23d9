//! The record layer inside and outside sections of a SQLite home (spec/store.md, "Records"):
//! records commit and roll back with their section, a committed record wakes its folder's watch
//! without making a file, and a read outside a section uses the store's connection, or a side
//! connection while another thread's section holds it.

use std::collections::BTreeMap;
use std::time::Duration;
use tollgate::config::Durability;
use tollgate::home::Home;
use tollgate::protocol::slots::steps::Reads;
use tollgate::queue::records::{register, RecordHome};
use tollgate::queue::{Commit, SqliteStore, Store, StoreError};
use tollgate::tasks::{self, TurnOutcome};

/// A record written inside a section is read back inside it and committed with it; one
/// written by an `Err` section is rolled back with it; an outcome recorded by an internal
/// section survives (it is synced: see spec/store.md, "Records").
#[test]
fn records_commit_and_roll_back_with_their_section() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = Home::at(dir.path());
    register(&home, RecordHome::Sqlite, Duration::from_secs(10));
    let store = SqliteStore::new(home.clone(), Duration::from_secs(10), Durability::Fsync);
    let turn = store
        .transact_section(Commit::Promise, &Reads::Everything, |_, _, _, tx| {
            let turn = tasks::create_turn_in(
                (&home, tx),
                "t",
                vec!["true".into()],
                None,
                BTreeMap::new(),
                false,
                1,
            )?;
            assert!(
                tasks::load_turn_in(&home, tx, &turn.key)?.is_some(),
                "read inside the section"
            );
            Ok::<_, StoreError>(turn)
        })
        .expect("section");
    assert!(home.db_path().is_file());
    assert!(!home.turn_file(&turn.key).exists(), "no record file");
    let failed: Result<(), StoreError> =
        store.transact_section(Commit::Internal, &Reads::Everything, |_, _, _, tx| {
            tasks::end_unrun_in(&home, tx, &turn.key, TurnOutcome::Cancelled, 2)?;
            Err(StoreError::Poisoned)
        });
    assert!(failed.is_err());
    let back = tasks::load_turn(&home, &turn.key)
        .expect("load")
        .expect("record");
    assert!(
        !back.is_settled(),
        "the failed section's write was rolled back"
    );
    store
        .transact_section(Commit::Internal, &Reads::Everything, |_, _, _, tx| {
            tasks::end_unrun_in(&home, tx, &turn.key, TurnOutcome::Cancelled, 2)?;
            Ok::<_, StoreError>(())
        })
        .expect("internal section");
    let back = tasks::load_turn(&home, &turn.key)
        .expect("load")
        .expect("record");
    assert_eq!(back.outcome, Some(TurnOutcome::Cancelled));
    assert_eq!(tasks::unfinished_turns(&home).expect("unfinished"), []);
}

/// A turn made in a section of `store`.
fn made_turn(store: &SqliteStore, home: &Home) -> tasks::TurnRecord {
    store
        .transact_section(Commit::Promise, &Reads::Everything, |_, _, _, tx| {
            tasks::create_turn_in(
                (home, tx),
                "t",
                vec!["true".into()],
                None,
                BTreeMap::new(),
                false,
                1,
            )
            .map_err(StoreError::from)
        })
        .expect("section")
}

/// The descriptors of this process open on `db` itself (not its `-wal` or `-shm`).
fn descriptors_on(db: &std::path::Path) -> usize {
    std::fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .filter_map(|entry| std::fs::read_link(entry.ok()?.path()).ok())
        .filter(|target| target == db)
        .count()
}

/// A record written outside a section, and one written inside, wake a watch of the turn's
/// folder (the signal the watchers of `submit --wait`, `wait`, `logs -f` and serve wake on)
/// and leave no file in it.
#[test]
fn a_committed_record_wakes_the_folders_watch_and_makes_no_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = Home::at(dir.path());
    register(&home, RecordHome::Sqlite, Duration::from_secs(10));
    let store = SqliteStore::new(home.clone(), Duration::from_secs(10), Durability::Fsync);
    let mut turn = made_turn(&store, &home);
    let folder = home.turn_dir(&turn.key);
    // Made lazily, by the first writer into it (spec/turns.md, "The turn folder"): a runner.
    tollgate::fsutil::create_private_dir(&folder).expect("the turn's folder");
    let mut watch = tollgate::watch::TurnWatch::new(std::slice::from_ref(&folder), false);
    if !watch.has_events() {
        return; // inotify refused on this machine: only the fallback exists.
    }
    turn.started_at_millis = Some(2);
    tasks::save_turn(&home, &turn).expect("save outside a section");
    assert_eq!(
        watch.wait(),
        tollgate::watch::Wake::Changed,
        "outside a section"
    );
    store
        .transact_section(Commit::Internal, &Reads::Everything, |_, _, _, tx| {
            tasks::end_unrun_in(&home, tx, &turn.key, TurnOutcome::Cancelled, 3)?;
            Ok::<_, StoreError>(())
        })
        .expect("internal section");
    assert_eq!(watch.wait(), tollgate::watch::Wake::Changed, "in a section");
    let entries: Vec<_> = std::fs::read_dir(&folder)
        .expect("read the folder")
        .filter_map(|e| e.ok().map(|e| e.file_name()))
        .collect();
    assert!(entries.is_empty(), "files in the turn folder: {entries:?}");
}

/// A command opens the database once: record reads and writes outside a section run on the
/// store's own connection (one descriptor on `tollgate.db`, not a second connection).
#[test]
fn records_outside_a_section_use_the_stores_connection() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = Home::at(dir.path());
    register(&home, RecordHome::Sqlite, Duration::from_secs(10));
    let store = SqliteStore::new(home.clone(), Duration::from_secs(10), Durability::Fsync);
    let mut turn = made_turn(&store, &home);
    assert_eq!(descriptors_on(&home.db_path()), 1, "the store's connection");
    assert!(tasks::load_turn(&home, &turn.key).expect("load").is_some());
    turn.started_at_millis = Some(2);
    tasks::save_turn(&home, &turn).expect("save outside a section");
    let back = tasks::load_turn(&home, &turn.key)
        .expect("load")
        .expect("record");
    assert_eq!(back.started_at_millis, Some(2));
    assert_eq!(descriptors_on(&home.db_path()), 1, "no second connection");
    // The store's next section sees the write and still commits.
    store
        .transact_section(Commit::Internal, &Reads::Everything, |_, _, _, tx| {
            tasks::end_unrun_in(&home, tx, &turn.key, TurnOutcome::Cancelled, 3)?;
            Ok::<_, StoreError>(())
        })
        .expect("internal section");
    let back = tasks::load_turn(&home, &turn.key)
        .expect("load")
        .expect("record");
    assert_eq!(back.outcome, Some(TurnOutcome::Cancelled));
}

/// A record read on one thread while another thread's section holds the store's connection
/// does not wait for that section (`serve`: its request threads read records beside the
/// sections of others): it reads on a side connection, and sees the last commit.
#[test]
fn a_read_beside_another_threads_section_does_not_wait_for_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = Home::at(dir.path());
    register(&home, RecordHome::Sqlite, Duration::from_secs(10));
    let store = SqliteStore::new(home.clone(), Duration::from_secs(10), Durability::Fsync);
    let turn = made_turn(&store, &home);
    let (entered_tx, entered) = std::sync::mpsc::sync_channel::<()>(1);
    let (read_tx, read) = std::sync::mpsc::sync_channel::<bool>(1);
    let store = &store;
    let (found, read_during_section) = std::thread::scope(|scope| {
        let section = scope.spawn(move || {
            store
                .transact_section(Commit::Internal, &Reads::Everything, |_, _, _, _| {
                    entered_tx.send(()).expect("tell the reader");
                    // Held until the reader has read; bounded, so a reader that waited for
                    // this section fails the test instead of hanging it.
                    let read = read.recv_timeout(Duration::from_secs(10)).is_ok();
                    Ok::<_, StoreError>(read)
                })
                .expect("section")
        });
        entered.recv().expect("the section started");
        let found = tasks::load_turn(&home, &turn.key).expect("load").is_some();
        let _ = read_tx.send(found);
        (found, section.join().expect("section thread"))
    });
    assert!(
        read_during_section,
        "the read waited for the other thread's section"
    );
    assert!(found, "the read saw the committed record");
}
