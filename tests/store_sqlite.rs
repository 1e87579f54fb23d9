//! The home's database (spec/store.md) through the library and the real binary: every shape of
//! the queue round-trips through the tables; writers are serialised and a held write lock turns
//! into a clear error after `lock_timeout`; an earlier version's `queue.json` is imported once and
//! moved aside, a corrupt one refused with nothing imported; special and foreign files in place
//! of `tollgate.db` are refused naming the path and left as they were; `doctor` reports.
mod common;

use common::queue_shapes::{every_shape, id};
use common::store_contract;
use common::{describe, tollgate};
use std::path::Path;
use std::sync::{Arc, Barrier};
use std::time::Duration;
use tollgate::config::Durability;
use tollgate::home::Home;
use tollgate::protocol::slots::{
    enqueue, QueueState, RowState, RunnerSlotReservation, SlotToken, TurnKey, WorkId, WorkRecord,
};
use tollgate::queue::{parse_queue, Commit, SqliteStore, Store, StoreError};

fn store(home: &Path) -> SqliteStore {
    SqliteStore::new(Home::at(home), Duration::from_secs(10), Durability::Fsync)
}

#[test]
fn every_queue_shape_round_trips_and_only_what_a_section_changed_changes() {
    let tmp = tempfile::tempdir().expect("tempdir");
    store_contract::every_shape_round_trips_and_a_section_changes_only_what_it_changed(|| {
        store(tmp.path())
    });
}

#[test]
fn the_next_turn_id_hint_is_what_a_section_predicts() {
    let tmp = tempfile::tempdir().expect("tempdir");
    store_contract::the_next_turn_id_hint_is_what_a_section_predicts(&store(tmp.path()));
}

#[test]
fn a_failed_or_unpublishable_section_changes_nothing() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let db = tmp.path().join("tollgate.db");
    store_contract::a_failed_or_unpublishable_section_changes_nothing(&store(tmp.path()), |path| {
        path == db
    });
}

/// S7 through the database: threads released together, each with its own connection (as
/// separate commands have) and a clock further behind, enqueue; FIFO and times stay monotone.
#[test]
fn concurrent_writers_are_serialised_by_the_write_transaction() {
    let tmp = tempfile::tempdir().expect("tempdir");
    const THREADS: u64 = 8;
    let barrier = Arc::new(Barrier::new(THREADS as usize));
    let handles: Vec<_> = (0..THREADS)
        .map(|i| {
            let (root, barrier) = (tmp.path().to_path_buf(), barrier.clone());
            std::thread::spawn(move || {
                let store = store(&root);
                // Open (and migrate) before the barrier would hide the first-open race: don't.
                barrier.wait();
                store
                    .transact(|state| {
                        enqueue(
                            state,
                            &TurnKey::new(format!("t{i}"), 1),
                            id(100 + i as u32, 1),
                            10_000 - i * 100,
                        )
                        .map_err(tollgate::dispatch::DispatchError::from)
                    })
                    .expect("enqueue")
            })
        })
        .collect();
    for handle in handles {
        handle.join().expect("thread");
    }
    let state = store(tmp.path()).load().expect("load");
    assert_eq!(state.entries.len(), THREADS as usize);
    state.check_structure().expect("structure");
    let ids: Vec<u64> = state.entries.iter().map(|e| e.queue_id).collect();
    assert_eq!(ids, (1..=THREADS).collect::<Vec<_>>());
}

#[test]
fn a_held_write_lock_times_out_with_an_error_naming_the_database() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = tmp.path().join("home");
    let out = tollgate(&home, &["init", "--workers", "1"]);
    assert!(out.status.success(), "{}", describe(&out));
    std::fs::write(
        home.join("tollgate.toml"),
        "workers = 1\nlock_timeout = \"300ms\"\n",
    )
    .expect("config");
    store(&home).load().expect("create the database");
    let db = home.join("tollgate.db");
    let holder = rusqlite::Connection::open(&db).expect("open");
    holder
        .execute_batch("BEGIN IMMEDIATE")
        .expect("take the write lock");

    let short = SqliteStore::new(
        Home::at(&home),
        Duration::from_millis(200),
        Durability::Fsync,
    );
    let err = short
        .transact(|_| Ok::<_, StoreError>(()))
        .expect_err("the lock is held");
    match &err {
        StoreError::Busy {
            path,
            waited_millis,
        } => {
            assert_eq!(path, &db);
            assert!(*waited_millis >= 200, "gave up early: {err}");
        }
        other => panic!("expected Busy, got {other}"),
    }
    // A read does not need the write lock.
    short.load().expect("WAL readers are not blocked");

    let out = tollgate(&home, &["submit", "--", "true"]);
    assert_eq!(out.status.code(), Some(3), "{}", describe(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&db.display().to_string()) && stderr.contains("lock_timeout"),
        "{}",
        describe(&out)
    );
    holder.execute_batch("ROLLBACK").expect("release");
    let out = tollgate(&home, &["submit", "--wait", "--", "true"]);
    assert!(out.status.success(), "{}", describe(&out));
}

fn old_queue_json() -> String {
    r#"{
  "version": 1,
  "next_queue_id": 4,
  "entries": [
    {
      "queue_id": 3,
      "task": "old",
      "turn": 2,
      "enqueued_at_millis": 1700000000000,
      "state": "parked"
    }
  ],
  "runners": []
}
"#
    .to_string()
}

#[test]
fn an_earlier_versions_queue_json_is_imported_once_and_moved_aside() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = tmp.path().join("home");
    let out = tollgate(&home, &["init", "--workers", "1"]);
    assert!(out.status.success(), "{}", describe(&out));
    let queue_json = home.join("queue.json");
    std::fs::write(&queue_json, old_queue_json()).expect("write");
    let expected = parse_queue(&queue_json, old_queue_json().as_bytes()).expect("valid");

    let out = tollgate(&home, &["doctor"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert!(
        !home.join("tollgate.db").exists(),
        "doctor must not create the database"
    );

    assert_eq!(store(&home).load().expect("import"), expected);
    assert!(!queue_json.exists(), "queue.json was not moved aside");
    assert_eq!(
        std::fs::read_to_string(home.join("queue.json.imported")).expect("kept aside"),
        old_queue_json()
    );
    // A queue.json that appears later (an old tollgate, a restored backup) is not imported again.
    std::fs::write(&queue_json, "{ not even json").expect("write");
    assert_eq!(store(&home).load().expect("load"), expected);
    assert!(
        queue_json.exists(),
        "an unrecorded queue.json is left alone"
    );

    let out = tollgate(&home, &["doctor", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(report["healthy"], true, "{report}");
    assert_eq!(report["queue_rows"], 1, "{report}");
}

#[test]
fn a_corrupt_queue_json_is_refused_with_its_path_and_nothing_is_imported() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = tmp.path().join("home");
    let out = tollgate(&home, &["init", "--workers", "1"]);
    assert!(out.status.success(), "{}", describe(&out));
    let queue_json = home.join("queue.json");
    let full = old_queue_json();
    let half = &full.as_bytes()[..full.len() / 2];
    std::fs::write(&queue_json, half).expect("write");
    for args in [&["status"][..], &["submit", "--", "true"], &["reconcile"]] {
        let out = tollgate(&home, args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", describe(&out));
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(&queue_json.display().to_string()),
            "{args:?} does not name queue.json: {}",
            describe(&out)
        );
        assert_eq!(std::fs::read(&queue_json).expect("kept"), half);
        assert!(
            !home.join("tollgate.db").exists(),
            "{args:?} created a database"
        );
        assert!(!home.join("queue.json.imported").exists());
    }
}

#[test]
fn a_file_that_is_not_sqlite_is_refused_naming_it_and_left_as_it_was() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = tmp.path().join("home");
    let out = tollgate(&home, &["init", "--workers", "1"]);
    assert!(out.status.success(), "{}", describe(&out));
    let db = home.join("tollgate.db");
    let foreign = "this is a text file, not a database\n".repeat(200);
    std::fs::write(&db, &foreign).expect("write");
    let db_text = db.display().to_string();
    for args in [&["status"][..], &["submit", "--", "true"], &["doctor"]] {
        let out = tollgate(&home, args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", describe(&out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(&db_text) && stderr.contains("not a database"),
            "{args:?}: {}",
            describe(&out)
        );
        assert_eq!(std::fs::read_to_string(&db).expect("kept"), foreign);
        assert!(!home.join("tollgate.db-wal").exists(), "{args:?}");
    }
}

#[test]
fn special_files_as_the_database_or_its_log_are_refused_by_every_reader_and_doctor() {
    for name in ["tollgate.db", "tollgate.db-wal"] {
        for special in ["fifo", "/dev/zero"] {
            let tmp = tempfile::tempdir().expect("tempdir");
            let home = tmp.path().join("home");
            let out = tollgate(&home, &["init", "--workers", "1"]);
            assert!(out.status.success(), "{}", describe(&out));
            let path = home.join(name);
            let found = if special == "fifo" {
                nix::unistd::mkfifo(&path, nix::sys::stat::Mode::S_IRWXU).expect("mkfifo");
                "a FIFO"
            } else {
                std::os::unix::fs::symlink("/dev/zero", &path).expect("symlink");
                "a character device"
            };
            for args in [&["status"][..], &["submit", "--", "true"], &["doctor"]] {
                let what = format!("{name} as {special}, {args:?}");
                let out = tollgate(&home, args);
                assert_eq!(out.status.code(), Some(2), "{what}: {}", describe(&out));
                let stderr = String::from_utf8_lossy(&out.stderr);
                assert!(
                    stderr.contains(&path.display().to_string()) && stderr.contains(found),
                    "{what}: {}",
                    describe(&out)
                );
                let meta = std::fs::symlink_metadata(&path).expect("still there");
                assert_eq!(
                    meta.file_type().is_symlink(),
                    special != "fifo",
                    "{what}: replaced"
                );
            }
        }
    }
}

/// Undoes migrations 9 (the start order's index), 8 (the row count), 5 (serve), 4 (records), 3 (dependencies) and 2
/// (scheduling): what a version-1 database (issue 12 phase 1: the queue only) holds.
const DOWNGRADE_TO_VERSION_1: &str = "DROP TRIGGER entries_counted_in;
     DROP INDEX entries_start_order;
     DROP TRIGGER entries_counted_out; ALTER TABLE queue_meta DROP COLUMN row_count;
     DROP TABLE serve_dedupe; DROP TABLE serve_refused;
     DROP TABLE serve_payloads; DROP TABLE serve_handed_off; DROP TABLE tasks; DROP TABLE turns; DROP TABLE sync_barrier;
     DROP TABLE entry_dependencies;
     DROP TABLE paused_tasks;
     ALTER TABLE entries DROP COLUMN priority;
     ALTER TABLE queue_meta DROP COLUMN paused_home;
     DELETE FROM schema_migrations WHERE version > 1;";

/// A database of schema version 1 (no priorities, no pause set, no dependencies) is migrated to
/// the current version on its next open, its rows kept with priority 0, nothing paused and no
/// dependencies; the new fields then round-trip.
#[test]
fn a_version_1_database_migrates_to_the_current_version_keeping_its_rows() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut shape = every_shape();
    for entry in &mut shape.entries {
        entry.after.clear();
    }
    store(tmp.path())
        .transact(|queue| {
            *queue = shape.clone();
            Ok::<_, StoreError>(())
        })
        .expect("publish");
    let db = tmp.path().join("tollgate.db");
    // Turn it back into what tollgate wrote before migrations 2 and 3.
    rusqlite::Connection::open(&db)
        .expect("open")
        .execute_batch(DOWNGRADE_TO_VERSION_1)
        .expect("downgrade to version 1");
    let migrated = store(tmp.path()).load().expect("migrate");
    let mut expected = shape.clone();
    expected.paused = Default::default();
    for row in &mut expected.entries {
        row.priority = 0;
    }
    assert_eq!(migrated, expected);
    let versions: Vec<u32> = rusqlite::Connection::open(&db)
        .expect("open")
        .prepare("SELECT version FROM schema_migrations ORDER BY version")
        .expect("prepare")
        .query_map([], |row| row.get(0))
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("rows");
    assert_eq!(
        versions,
        (1..=tollgate::queue::SCHEMA_VERSION).collect::<Vec<_>>()
    );
    let full = every_shape();
    store(tmp.path())
        .transact(|queue| {
            *queue = full.clone();
            Ok::<_, StoreError>(())
        })
        .expect("publish after the migration");
    assert_eq!(store(tmp.path()).load().expect("load"), full);
}

#[test]
fn a_database_of_a_newer_schema_is_refused() {
    let tmp = tempfile::tempdir().expect("tempdir");
    store(tmp.path()).load().expect("create");
    let db = tmp.path().join("tollgate.db");
    rusqlite::Connection::open(&db)
        .expect("open")
        .execute(
            "INSERT INTO schema_migrations (version, description, applied_at_millis) VALUES (99, 'future', 0)",
            [],
        )
        .expect("insert");
    let before = std::fs::read(&db).expect("read the database");
    let err = store(tmp.path()).load().expect_err("newer schema");
    let text = err.to_string();
    assert!(
        text.contains(&db.display().to_string()) && text.contains("newer"),
        "{text}"
    );
    // Both versions are named: the database's and the newest this binary knows.
    let known = tollgate::queue::SCHEMA_VERSION.to_string();
    assert!(text.contains("99") && text.contains(&known), "{text}");
    // Nothing changed: the file is byte for byte what it was and its log holds no frame.
    assert_eq!(std::fs::read(&db).expect("read the database"), before);
    let wal = tmp.path().join("tollgate.db-wal");
    let wal_len = std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0);
    assert_eq!(wal_len, 0, "{} was written", wal.display());
}

/// The applied migrations of a database, oldest first, with when each was applied.
fn applied_migrations(db: &Path) -> Vec<(u32, i64)> {
    rusqlite::Connection::open(db)
        .expect("open")
        .prepare("SELECT version, applied_at_millis FROM schema_migrations ORDER BY version")
        .expect("prepare")
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("rows")
}

#[test]
fn only_the_migrations_newer_than_the_highest_applied_run() {
    let tmp = tempfile::tempdir().expect("tempdir");
    store(tmp.path()).load().expect("create");
    let db = tmp.path().join("tollgate.db");
    let newest = tollgate::queue::SCHEMA_VERSION;
    // Take the database back to the version before the newest: its migration's row and what
    // it made are removed; every earlier migration (CREATE TABLE without IF NOT EXISTS, which
    // fails when run twice) stays applied.
    let conn = rusqlite::Connection::open(&db).expect("open");
    conn.execute("DELETE FROM schema_migrations WHERE version = ?1", [newest])
        .expect("forget the newest migration");
    // What migration 10 made (update this with the next migration: the assertion below names
    // the version this undo is written for).
    assert_eq!(newest, 10, "undo the newest migration here");
    conn.execute_batch("DROP INDEX entries_task_line;")
        .expect("drop what the newest migration made");
    drop(conn);
    let kept = applied_migrations(&db);
    assert_eq!(
        kept.iter().map(|m| m.0).collect::<Vec<_>>(),
        (1..newest).collect::<Vec<_>>()
    );
    store(tmp.path())
        .load()
        .expect("migrate: only the newest migration runs");
    let after = applied_migrations(&db);
    assert_eq!(
        after.iter().map(|m| m.0).collect::<Vec<_>>(),
        (1..=newest).collect::<Vec<_>>()
    );
    // The earlier migrations were neither run nor recorded again.
    assert_eq!(&after[..kept.len()], &kept[..]);
    let index: bool = rusqlite::Connection::open(&db)
        .expect("open")
        .query_row(
            "SELECT count(*) = 1 FROM sqlite_schema
             WHERE type = 'index' AND name = 'entries_task_line'",
            [],
            |row| row.get(0),
        )
        .expect("query");
    assert!(index, "the newest migration did not run");
}

#[test]
fn doctor_reports_a_queue_that_breaks_its_structure_and_exits_1() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = tmp.path().join("home");
    let out = tollgate(&home, &["init", "--workers", "1"]);
    assert!(out.status.success(), "{}", describe(&out));
    store(&home)
        .transact(|queue| {
            *queue = every_shape();
            Ok::<_, StoreError>(())
        })
        .expect("publish");
    let out = tollgate(&home, &["doctor"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("healthy"),
        "{}",
        describe(&out)
    );

    // A waiting row without its owner, written behind tollgate's back.
    let db = home.join("tollgate.db");
    rusqlite::Connection::open(&db)
        .expect("open")
        .execute(
            "UPDATE entries SET owner_pid = NULL, owner_start_micros = NULL WHERE queue_id = 3",
            [],
        )
        .expect("update");
    let out = tollgate(&home, &["doctor", "--json"]);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(report["healthy"], false, "{report}");
    let problem = report["queue_problem"].as_str().expect("a queue problem");
    assert!(problem.contains("queue_id 3"), "{report}");
    // Every other command refuses the same database, naming it.
    let out = tollgate(&home, &["status"]);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(&db.display().to_string()),
        "{}",
        describe(&out)
    );
}

/// No switch runs a home on the file store of earlier versions any more: with the variable that
/// once selected it (`TOLLGATE_FILE_STORE=1`) set, a home still keeps its queue and its records in
/// `tollgate.db`, and no command writes `queue.json` or a record file.
#[test]
fn the_old_file_store_switch_selects_nothing_and_no_record_file_is_written() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = tmp.path().join("home");
    std::fs::create_dir(&home).expect("an empty home");
    let with_old_switch = |args: &[&str]| {
        std::process::Command::new(common::BIN)
            .arg("--home")
            .arg(&home)
            .args(args)
            .env("TOLLGATE_FILE_STORE", "1")
            .stdin(std::process::Stdio::null())
            .output()
            .expect("run tollgate")
    };
    let out = with_old_switch(&["submit", "--task", "t", "--wait", "--", "true"]);
    assert!(out.status.success(), "{}", describe(&out));
    assert!(home.join("tollgate.db").is_file());
    assert!(!home.join("queue.json").exists());
    assert!(!home.join("queue.lock").exists());
    assert!(!home.join("tasks/t/task.json").exists());
    assert!(!home.join("tasks/t/turns/1/turn.json").exists());
    let out = with_old_switch(&["status", "--json"]);
    assert!(out.status.success(), "{}", describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("\"t\""),
        "{}",
        describe(&out)
    );
    let record = tollgate::tasks::load_turn(&Home::at(&home), &TurnKey::new("t", 1))
        .expect("load")
        .expect("in the database");
    assert!(record.is_settled());
}

#[test]
fn a_durability_setting_that_is_not_fsync_or_os_is_refused_naming_the_key() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = tmp.path().join("home");
    let out = tollgate(&home, &["init", "--workers", "1"]);
    assert!(out.status.success(), "{}", describe(&out));
    let config = home.join("tollgate.toml");
    std::fs::write(&config, "workers = 1\ndurability = \"sometimes\"\n").expect("config");
    let out = tollgate(&home, &["submit", "--", "true"]);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&config.display().to_string()) && stderr.contains("durability"),
        "{}",
        describe(&out)
    );
    assert!(!home.join("tollgate.db").exists(), "nothing was created");
}

/// A small deterministic generator (no timing, no global state): the same walk on every run.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n.max(1)
    }
}

/// One random change that keeps the queue's structure: a row added at the end, a row removed, a
/// row's state or reservation changed, a runner or work added or removed.
fn mutate(queue: &mut QueueState, rng: &mut Lcg) {
    let owner = |rng: &mut Lcg| id(1 + rng.below(50) as u32, rng.below(3));
    match rng.below(7) {
        0 | 1 => {
            let key = TurnKey::new(format!("t{}", rng.below(20)), 1 + rng.below(3) as u32);
            let now = 1_700_000_000_000 + rng.below(1000);
            let me = owner(rng);
            let _ = enqueue(queue, &key, me, now);
        }
        2 if !queue.entries.is_empty() => {
            let at = rng.below(queue.entries.len() as u64) as usize;
            queue.entries.remove(at);
        }
        3 | 4 if !queue.entries.is_empty() => {
            let at = rng.below(queue.entries.len() as u64) as usize;
            let (a, b) = (owner(rng), owner(rng));
            let row = &mut queue.entries[at];
            row.state = match rng.below(3) {
                0 => RowState::Waiting {
                    enqueue_owner: a,
                    owner: b,
                },
                1 => RowState::Dispatching { dispatch_owner: a },
                _ => RowState::Parked,
            };
            row.slot_reservation = match rng.below(3) {
                0 => None,
                1 => Some(RunnerSlotReservation::new(b, SlotToken::generate())),
                _ => Some(RunnerSlotReservation {
                    reserver: b,
                    token: SlotToken::generate(),
                    child: Some(a),
                }),
            };
            row.ready_at_millis = rng.below(2) * 1_700_000_000_500;
            row.cancel_requested = rng.below(2) == 0;
            // Migration 2's column and the pause set change with it.
            row.priority = rng.below(3) as i32 - 1;
            queue.paused.home = rng.below(4) == 0;
            let task = format!("t{}", rng.below(5));
            if !queue.paused.tasks.remove(&task) {
                queue.paused.tasks.insert(task);
            }
            // Dependencies added, changed or cleared (schema version 3).
            row.after = (0..rng.below(3))
                .map(|n| tollgate::protocol::slots::Dependency {
                    key: TurnKey::new(format!("t{}", rng.below(20)), 1 + n as u32),
                    rule: if rng.below(2) == 0 {
                        tollgate::protocol::slots::AfterRule::Ended
                    } else {
                        tollgate::protocol::slots::AfterRule::Succeeded
                    },
                })
                .collect();
        }
        5 => {
            if queue.runners.is_empty() || rng.below(2) == 0 {
                let key = TurnKey::new(format!("t{}", rng.below(20)), 1);
                let who = owner(rng);
                queue.set_runner(&key, who, rng.below(2) == 0);
            } else {
                let at = rng.below(queue.runners.len() as u64) as usize;
                queue.runners.remove(at);
            }
        }
        _ => {
            if queue.works.is_empty() || rng.below(2) == 0 {
                let leader = (rng.below(2) == 0).then(|| owner(rng));
                queue.works.push(WorkRecord {
                    key: TurnKey::new(format!("t{}", rng.below(20)), 1),
                    id: WorkId::from_token(SlotToken::generate()),
                    runner: owner(rng),
                    cgroup: (rng.below(2) == 0).then(|| format!("/cg/work-{}", rng.below(9))),
                    leader,
                });
            } else {
                let at = rng.below(queue.works.len() as u64) as usize;
                queue.works.remove(at);
            }
        }
    }
}

/// The diff-write against a model: 400 random changes, each published by its own section
/// (alternately promise and internal commits, through a fresh connection every tenth step), and
/// after every one the database loads exactly the document the section produced.
#[test]
fn random_changes_round_trip_through_the_diff_write() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut rng = Lcg(12);
    let mut expected = QueueState::default();
    let mut current = store(tmp.path());
    for step in 0..400 {
        if step % 10 == 0 {
            current = store(tmp.path());
        }
        let commit = if step % 2 == 0 {
            Commit::Promise
        } else {
            Commit::Internal
        };
        let mut next = expected.clone();
        mutate(&mut next, &mut rng);
        current
            .transact_as(commit, |queue| {
                assert_eq!(
                    queue, &expected,
                    "step {step}: the section read another queue"
                );
                *queue = next.clone();
                Ok::<_, StoreError>(())
            })
            .unwrap_or_else(|e| panic!("step {step}: {e}"));
        expected = next;
        assert_eq!(current.load().expect("load"), expected, "step {step}");
    }
    assert!(expected.entries.len() > 3, "the walk must grow the queue");
}

/// A home of an earlier version: records as files, one finished turn (id 1), a queue.json
/// (written by [`common::legacy_home`] in that version's formats; no database).
fn home_of_files(home: &Path) {
    let out = tollgate(home, &["init", "--workers", "1"]);
    assert!(out.status.success(), "{}", describe(&out));
    common::legacy_home::write(home, "old", "before");
    assert!(home.join("tasks/old/turns/1/turn.json").is_file());
    assert!(home.join("tasks/old/task.json").is_file());
    assert!(!home.join("tollgate.db").exists());
}

/// Issue 12 phase 2: the records of a home of an earlier version are imported with its queue, in
/// one transaction, on first use; the files are moved aside (kept), status, logs ids and doctor
/// read them from the database, and a new turn of the task continues its numbering.
#[test]
fn an_earlier_versions_records_are_imported_with_the_queue_and_moved_aside() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = tmp.path().join("home");
    home_of_files(&home);
    let turn_file = home.join("tasks/old/turns/1/turn.json");
    let before = std::fs::read(&turn_file).expect("record");

    let out = tollgate(&home, &["status", "--json"]);
    assert!(out.status.success(), "{}", describe(&out));
    assert!(home.join("tollgate.db").is_file(), "imported on first use");
    assert!(!turn_file.exists(), "turn.json was not moved aside");
    assert_eq!(
        std::fs::read(home.join("tasks/old/turns/1/turn.json.imported")).expect("kept aside"),
        before
    );
    assert!(home.join("tasks/old/task.json.imported").is_file());
    assert!(home.join("queue.json.imported").is_file());
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let text = status.to_string();
    assert!(
        text.contains("\"old\""),
        "the imported turn is listed: {status:#}"
    );
    // The short id is read from the database's index.
    let out = tollgate(&home, &["logs", "1"]);
    assert!(out.status.success(), "{}", describe(&out));
    let out = tollgate(&home, &["logs", "2"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "no turn has id 2: {}",
        describe(&out)
    );

    let record = tollgate::tasks::load_turn(&Home::at(&home), &TurnKey::new("old", 1))
        .expect("load")
        .expect("imported");
    assert_eq!(
        serde_json::to_value(&record).expect("json"),
        serde_json::from_slice::<serde_json::Value>(&before).expect("json"),
        "the record was imported as it was"
    );
    assert_eq!(store(&home).load().expect("queue").entries.len(), 0);

    // The next turn of the task takes the next number: nothing is overwritten.
    let out = tollgate(&home, &["submit", "--task", "old", "--", "true"]);
    assert!(out.status.success(), "{}", describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("turn 2"),
        "{}",
        describe(&out)
    );

    let out = tollgate(&home, &["doctor", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(report["healthy"], true, "{report}");
    assert_eq!(report["task_records"], 1, "{report}");
    assert_eq!(report["turn_records"], 2, "{report}");
}

/// A corrupt record file of an earlier version is refused with its path (exit 2) and nothing is
/// imported: no database is created and every file stays as it was.
#[test]
fn a_corrupt_record_file_is_refused_with_its_path_and_nothing_is_imported() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = tmp.path().join("home");
    home_of_files(&home);
    let turn_file = home.join("tasks/old/turns/1/turn.json");
    let full = std::fs::read(&turn_file).expect("record");
    let half = &full[..full.len() / 2];
    std::fs::write(&turn_file, half).expect("damage");
    let queue_json = std::fs::read(home.join("queue.json")).expect("queue.json");
    for args in [&["status"][..], &["submit", "--", "true"], &["reconcile"]] {
        let out = tollgate(&home, args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", describe(&out));
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(&turn_file.display().to_string()),
            "{args:?} does not name the record: {}",
            describe(&out)
        );
        assert!(
            !home.join("tollgate.db").exists(),
            "{args:?} created a database"
        );
        assert_eq!(std::fs::read(&turn_file).expect("kept"), half);
        assert_eq!(
            std::fs::read(home.join("queue.json")).expect("kept"),
            queue_json
        );
        assert!(
            home.join("tasks/old/task.json").is_file(),
            "moved although refused"
        );
    }
}

/// A record whose body disagrees with its indexed columns (edited behind tollgate's back) is
/// reported by `doctor`, naming the record, exit 1.
#[test]
fn doctor_checks_the_record_tables() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = tmp.path().join("home");
    let out = tollgate(&home, &["init", "--workers", "1"]);
    assert!(out.status.success(), "{}", describe(&out));
    let out = tollgate(&home, &["submit", "--task", "t", "--wait", "--", "true"]);
    assert!(out.status.success(), "{}", describe(&out));
    let out = tollgate(&home, &["doctor"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let db = rusqlite::Connection::open(home.join("tollgate.db")).expect("open");
    db.execute("UPDATE turns SET settled = 0 WHERE task = 't'", [])
        .expect("edit");
    drop(db);
    let out = tollgate(&home, &["doctor", "--json"]);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert!(
        report["record_problems"][0]
            .as_str()
            .is_some_and(|p| p.contains("t turn 1")),
        "{report}"
    );
}

/// A database home of schema version 1 (issue 12 phase 1: the queue in tollgate.db, the records
/// still files) is migrated to version 4 on first use: the record files are imported in the
/// migration's transaction and moved aside, and the queue is kept.
#[test]
fn a_phase_one_database_home_has_its_record_files_imported_by_migration_4() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let files = tmp.path().join("files");
    home_of_files(&files);
    let home = tmp.path().join("home");
    let out = tollgate(&home, &["init", "--workers", "1"]);
    assert!(out.status.success(), "{}", describe(&out));
    let out = tollgate(&home, &["submit", "--task", "new", "--wait", "--", "true"]);
    assert!(out.status.success(), "{}", describe(&out));
    // Back to version 1: the record tables gone, the records as files (a phase-1 home's).
    let db = rusqlite::Connection::open(home.join("tollgate.db")).expect("open");
    db.execute_batch(DOWNGRADE_TO_VERSION_1).expect("downgrade");
    drop(db);
    std::fs::remove_dir_all(home.join("tasks")).expect("drop the new task");
    let copy = std::process::Command::new("cp")
        .arg("-a")
        .arg(files.join("tasks"))
        .arg(home.join("tasks"))
        .status()
        .expect("cp");
    assert!(copy.success());
    let before = std::fs::read(home.join("tasks/old/turns/1/turn.json")).expect("record file");

    let out = tollgate(&home, &["doctor", "--json"]);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(report["schema_version"], 1, "{report}");

    let record = tollgate::tasks::load_turn(&Home::at(&home), &TurnKey::new("old", 1))
        .expect("load")
        .expect("imported");
    assert_eq!(
        serde_json::to_value(&record).expect("json"),
        serde_json::from_slice::<serde_json::Value>(&before).expect("json")
    );
    assert!(home.join("tasks/old/turns/1/turn.json.imported").is_file());
    assert!(!home.join("tasks/old/turns/1/turn.json").exists());
    let out = tollgate(&home, &["doctor", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(
        report["schema_version"],
        tollgate::queue::SCHEMA_VERSION,
        "{report}"
    );
    assert_eq!(report["turn_records"], 1, "{report}");
}

/// `doctor --json` on `home`: its exit code and its report.
fn doctor_json(home: &Path) -> (Option<i32>, serde_json::Value) {
    let out = tollgate(home, &["doctor", "--json"]);
    let report = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("doctor --json: {e}: {}", describe(&out)));
    (out.status.code(), report)
}

/// A home with a settled turn `t:1` and one well-formed row in each of serve's tables and the
/// sweep list, as their writers write them.
fn home_with_table_rows(dir: &Path) -> std::path::PathBuf {
    let home = dir.join("home");
    let out = tollgate(&home, &["init", "--workers", "1"]);
    assert!(out.status.success(), "{}", describe(&out));
    let out = tollgate(&home, &["submit", "--task", "t", "--wait", "--", "true"]);
    assert!(out.status.success(), "{}", describe(&out));
    rusqlite::Connection::open(home.join("tollgate.db"))
        .expect("open")
        .execute_batch(
            "INSERT INTO serve_dedupe (key, marked_at_millis, expires_at_millis)
                 VALUES ('good-mark', 1000, 2000);
             INSERT INTO serve_payloads (delivery, task, turn, body)
                 VALUES ('good-delivery', 't', 1, x'7b7d');
             INSERT INTO serve_refused (body) VALUES ('{\"reason\":\"bad signature\"}');
             INSERT INTO serve_handed_off (delivery, body) VALUES ('good-handoff', '{}');
             INSERT INTO sweep_runs (run_id, body) VALUES ('good-run', '{\"run_id\":\"good-run\"}');
             INSERT INTO sweep_entries (path, run_id, body)
                 VALUES ('/good/path', 'good-run', '{\"path\":\"/good/path\",\"run_id\":\"good-run\"}');",
        )
        .expect("well-formed rows");
    home
}

#[test]
fn doctor_finds_a_healthy_homes_serve_and_sweep_tables_clean() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = home_with_table_rows(tmp.path());
    let (code, report) = doctor_json(&home);
    assert_eq!(code, Some(0), "{report}");
    assert_eq!(report["healthy"], true, "{report}");
    assert_eq!(report["table_problems"], serde_json::json!([]), "{report}");
    let checked: Vec<&str> = report["tables_checked"]
        .as_array()
        .expect("tables_checked")
        .iter()
        .filter_map(|t| t.as_str())
        .collect();
    for table in [
        "serve_dedupe",
        "serve_refused",
        "serve_handed_off",
        "sweep_runs",
        "sweep_entries",
    ] {
        assert!(
            checked.iter().any(|c| c.ends_with(&format!(": {table}"))),
            "{table} not checked: {report}"
        );
    }
    let out = tollgate(&home, &["doctor"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("serve and sweep tables: ok (5 table(s))"),
        "{}",
        describe(&out)
    );
}

#[test]
fn doctor_reports_a_broken_row_of_each_serve_and_sweep_table_naming_it_and_exits_1() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = home_with_table_rows(tmp.path());
    let db = home.join("tollgate.db");
    rusqlite::Connection::open(&db)
        .expect("open")
        .execute_batch(
            "INSERT INTO serve_dedupe (key, marked_at_millis, expires_at_millis)
                 VALUES ('bad-mark', 5000, 4000);
             INSERT INTO serve_payloads (delivery, task, turn, body)
                 VALUES ('orphan-delivery', 'ghost', 7, x'7b7d');
             INSERT INTO serve_refused (id, body) VALUES (41, 'not json');
             INSERT INTO serve_handed_off (delivery, body) VALUES ('bad-handoff', '[1, 2]');
             INSERT INTO sweep_runs (run_id, body) VALUES ('bad-run', '{\"run_id\":\"other-run\"}');
             INSERT INTO sweep_entries (path, run_id, body) VALUES ('/bad/path', 'good-run', '{');",
        )
        .expect("broken rows");
    let before = std::fs::read(&db).expect("read");
    let (code, report) = doctor_json(&home);
    assert_eq!(code, Some(1), "{report}");
    assert_eq!(report["healthy"], false, "{report}");
    let problems: Vec<String> = report["table_problems"]
        .as_array()
        .expect("table_problems")
        .iter()
        .filter_map(|p| p.as_str().map(str::to_string))
        .collect();
    let expected = [
        "serve_dedupe key 'bad-mark': expires at 4000 ms, not after it was marked at 5000 ms",
        "serve_refused id 41: its body is not a JSON object",
        "serve_handed_off delivery 'bad-handoff': its body is not a JSON object",
        "sweep_runs run 'bad-run': its body names run 'other-run'",
        "sweep_entries path '/bad/path': its body is not a JSON object",
    ];
    // Exactly the broken rows: none of the well-formed ones beside them, and not the payload
    // whose turn is gone (a state serve's prune removes, not damage).
    assert_eq!(problems, expected, "{report}");
    // The other checks still pass, and doctor wrote nothing.
    assert_eq!(report["queue_problem"], serde_json::Value::Null, "{report}");
    assert_eq!(std::fs::read(&db).expect("read"), before);
    let out = tollgate(&home, &["doctor"]);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("serve and sweep tables: 5 problem(s):") && text.contains(expected[1]),
        "{}",
        describe(&out)
    );
}
