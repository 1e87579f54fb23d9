//! The PostgreSQL store (spec/store.md, "PostgreSQL") against a real server: every shape of the
//! queue round-trips; a failed section changes nothing; concurrent writers are serialised (no
//! lost update) under both lock kinds, whose throughput is printed; a held lock turns into a clear
//! error after `lock_timeout` and an unreachable server into one naming it, password redacted; a
//! home whose tollgate.toml names the database runs `submit --wait` and `status` on it; a `store`
//! value that is not a store is refused naming the setting, creating nothing; a version-1 database
//! migrates to version 2 (scheduling) keeping its rows.
//!
//! The server is `TOLLGATE_TEST_POSTGRES` (a postgres:// URL; `.ci/run` starts a throwaway
//! cluster and sets it). Unset, every test here skips with a message; with
//! `TOLLGATE_REQUIRE_POSTGRES=1` (set by `.ci/run`) a missing or unreachable server fails them.
mod common;

use common::queue_shapes::every_shape;
use common::store_contract;
use common::{describe, init_home, tollgate};
use std::path::Path;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};
use tollgate::config::Durability;
use tollgate::protocol::slots::{QueueState, SlotToken};
use tollgate::queue::{PostgresLock, PostgresStore, PostgresUrl, Store, StoreError};

use common::postgres::{server, with_queue};

fn unique_queue(test: &str) -> String {
    format!("test-{test}-{}-{}", std::process::id(), uuid_suffix())
}

fn uuid_suffix() -> String {
    SlotToken::generate().to_string()
}

fn store_at(url: &str, queue: &str, lock_timeout: Duration) -> PostgresStore {
    let url = PostgresUrl::parse(url).expect("test URL parses");
    PostgresStore::new(url, queue.to_string(), lock_timeout, Durability::Fsync)
}

fn store(url: &str, queue: &str) -> PostgresStore {
    store_at(url, queue, Duration::from_secs(10))
}

#[test]
fn every_queue_shape_round_trips_and_only_what_a_section_changed_changes() {
    let Some(url) = server() else { return };
    let queue = unique_queue("shapes");
    store_contract::every_shape_round_trips_and_a_section_changes_only_what_it_changed(|| {
        store(&url, &queue)
    });
    // Another queue in the same database is not this one.
    let other = store(&url, &unique_queue("shapes-other"));
    assert_eq!(other.load().expect("other queue"), QueueState::default());
}

#[test]
fn the_next_turn_id_hint_is_what_a_section_predicts() {
    let Some(url) = server() else { return };
    let queue = unique_queue("hint");
    store_contract::the_next_turn_id_hint_is_what_a_section_predicts(&store(&url, &queue));
}

#[test]
fn a_failed_or_unpublishable_section_changes_nothing() {
    let Some(url) = server() else { return };
    let queue = unique_queue("failed");
    store_contract::a_failed_or_unpublishable_section_changes_nothing(
        &store(&url, &queue),
        |path| path.to_string_lossy().contains(&queue),
    );
}

/// A section's statements carry their values as escaped literals (spec/store.md, "Round
/// trips"): a queue name and task names with quotes and backslashes round-trip exactly, and a
/// value holding a NUL byte is refused with an error naming the database, nothing written.
#[test]
fn quotes_and_backslashes_round_trip_and_a_nul_byte_is_refused_changing_nothing() {
    let Some(url) = server() else { return };
    let queue = format!("{}-o'b\\r\\'q", unique_queue("quotes"));
    let store = store(&url, &queue);
    let mut shape = every_shape();
    shape.entries[0].key = tollgate::protocol::slots::TurnKey::new("it's a \\ 'task'\\", 1);
    if let Some(work) = shape.works.first_mut() {
        work.cgroup = Some("/sys/fs/cgroup/a'b\\c".to_string());
    }
    store
        .transact(|q| {
            *q = shape.clone();
            Ok::<_, StoreError>(())
        })
        .expect("publish");
    assert_eq!(store.load().expect("load"), shape);
    // Another connection reads the same rows under the same (escaped) queue name.
    assert_eq!(self::store(&url, &queue).load().expect("load again"), shape);

    let err = store
        .transact(|q| {
            q.entries[0].key = tollgate::protocol::slots::TurnKey::new("nul\0byte", 1);
            Ok::<_, StoreError>(())
        })
        .expect_err("a NUL byte cannot be stored");
    assert!(
        matches!(&err, StoreError::Database { path, detail }
            if path.to_string_lossy().contains("o'b") && detail.contains("NUL")),
        "{err}"
    );
    assert_eq!(store.load().expect("load"), shape);
    // The connection is usable after the refused section (its transaction was rolled back).
    store
        .transact(|q| {
            q.entries.pop();
            Ok::<_, StoreError>(())
        })
        .expect("a later section commits");
    let mut expected = shape.clone();
    expected.entries.pop();
    assert_eq!(store.load().expect("load"), expected);
}

/// THREADS writers, each its own connection, released together, each doing SECTIONS
/// read-modify-write increments of the queue's counter: no increment is lost. Run under both
/// lock kinds; the sections per second are printed (spec/store.md quotes them).
fn serialised_increments(url: &str, lock: PostgresLock) -> f64 {
    const THREADS: usize = 4;
    const SECTIONS: u64 = 150;
    let queue = unique_queue(&format!("{lock:?}"));
    store(url, &queue).load().expect("create the queue");
    let barrier = Arc::new(Barrier::new(THREADS));
    let started = Instant::now();
    let handles: Vec<_> = (0..THREADS)
        .map(|_| {
            let (url, queue, barrier) = (url.to_string(), queue.clone(), barrier.clone());
            std::thread::spawn(move || {
                let store = store(&url, &queue).with_lock(lock);
                store.load().expect("connect");
                barrier.wait();
                for _ in 0..SECTIONS {
                    store
                        .transact_internal(|q| {
                            q.next_queue_id += 1;
                            Ok::<_, StoreError>(())
                        })
                        .expect("increment");
                }
            })
        })
        .collect();
    for handle in handles {
        handle.join().expect("writer");
    }
    let elapsed = started.elapsed();
    let total = THREADS as u64 * SECTIONS;
    assert_eq!(
        store(url, &queue).load().expect("load").next_queue_id,
        1 + total,
        "an increment was lost under {lock:?}"
    );
    let rate = total as f64 / elapsed.as_secs_f64();
    eprintln!(
        "{lock:?}: {THREADS} writers x {SECTIONS} sections in {elapsed:?}: {rate:.0} sections/s"
    );
    rate
}

#[test]
fn concurrent_writers_lose_no_update_under_either_lock() {
    let Some(url) = server() else { return };
    serialised_increments(&url, PostgresLock::Advisory);
    serialised_increments(&url, PostgresLock::Row);
}

/// The lock a section of `queue` takes, held by another connection until it is dropped.
fn hold_lock(url: &str, queue: &str) -> postgres::Client {
    let mut holder = postgres::Client::connect(url, postgres::NoTls).expect("connect");
    holder.batch_execute("BEGIN").expect("begin");
    holder
        .execute(
            "SELECT pg_advisory_xact_lock(29799, hashtext($1))",
            &[&queue],
        )
        .expect("take the queue's lock");
    holder
}

#[test]
fn a_held_lock_times_out_with_an_error_naming_the_database_and_changes_nothing() {
    let Some(url) = server() else { return };
    let queue = unique_queue("timeout");
    let short = store_at(&url, &queue, Duration::from_millis(200));
    short.load().expect("create the queue");
    let holder = hold_lock(&url, &queue);
    let err = short
        .transact(|q| {
            q.next_queue_id += 1;
            Ok::<_, StoreError>(())
        })
        .expect_err("the lock is held");
    match &err {
        StoreError::Busy {
            path,
            waited_millis,
        } => {
            let named = path.to_string_lossy();
            assert!(named.contains(&queue), "{err}");
            assert!(*waited_millis >= 200, "gave up early: {err}");
        }
        other => panic!("expected Busy, got {other}"),
    }
    assert!(err.to_string().contains("lock_timeout"), "{err}");
    // A read does not need the lock.
    assert_eq!(
        short.load().expect("readers are not blocked").next_queue_id,
        1
    );
    drop(holder);
    short
        .transact(|q| {
            q.next_queue_id += 1;
            Ok::<_, StoreError>(())
        })
        .expect("the lock is free again");
    assert_eq!(short.load().expect("load").next_queue_id, 2);
}

#[test]
fn an_unreachable_server_is_named_with_its_password_redacted() {
    // Needs no server: port 1 on loopback refuses connections.
    let url =
        PostgresUrl::parse("postgres://tollgate:s3cret-pw@127.0.0.1:1/tollgate").expect("parses");
    let store = PostgresStore::new(url, "q".into(), Duration::from_secs(2), Durability::Fsync);
    let err = store.load().expect_err("nothing listens there");
    let message = err.to_string();
    assert!(
        message.contains("postgres://tollgate:***@127.0.0.1:1/tollgate")
            && message.contains("cannot connect"),
        "{message}"
    );
    assert!(!message.contains("s3cret-pw"), "password leaked: {message}");
    let bad = PostgresUrl::parse("postgres://u:pw@h/db?queue=").expect_err("empty queue");
    assert!(bad.contains("queue"), "{bad}");
}

#[test]
fn a_home_whose_config_names_the_database_submits_waits_and_shows_status() {
    let Some(url) = server() else { return };
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = init_home(tmp.path(), 2);
    let queue = unique_queue("e2e");
    let config = home.join("tollgate.toml");
    let mut text = std::fs::read_to_string(&config).expect("config");
    text.push_str(&format!("store = {:?}\n", with_queue(&url, &queue)));
    std::fs::write(&config, text).expect("write config");

    let out = tollgate(
        &home,
        &["submit", "--wait", "--task", "pg-e2e", "--", "true"],
    );
    assert!(out.status.success(), "{}", describe(&out));
    let out = tollgate(&home, &["status"]);
    assert!(out.status.success(), "{}", describe(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("pg-e2e"), "{}", describe(&out));
    // The queue lived in PostgreSQL: the home has no SQLite database, and the queue's row is
    // there (its counter moved past the one turn).
    assert!(!home.join("tollgate.db").exists(), "a tollgate.db was made");
    let state = store(&url, &queue).load().expect("load");
    assert!(state.next_queue_id > 1, "{state:?}");
    assert!(state.entries.is_empty(), "{state:?}");
    check_store_env_overrides(&url, tmp.path());
    check_default_queue_is_the_canonical_home(&url, tmp.path());
}

/// `submit --after-success` and `--retry` on a home whose queue is in PostgreSQL: the held row's
/// dependency is stored (schema version 3) and the dependent runs after the retry succeeded.
#[test]
fn dependencies_and_retries_work_on_a_postgres_queue() {
    let Some(url) = server() else { return };
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = init_home(tmp.path(), 1);
    let queue = unique_queue("deps");
    let config = home.join("tollgate.toml");
    let mut text = std::fs::read_to_string(&config).expect("config");
    text.push_str(&format!("store = {:?}\n", with_queue(&url, &queue)));
    std::fs::write(&config, text).expect("write config");
    let gate = tmp.path().join("gate");
    let count = tmp.path().join("count");
    // Fails its first run (after the gate opens), succeeds its second.
    let script = format!(
        "while [ ! -e {gate} ]; do sleep 0.02; done; n=$(cat {count} 2>/dev/null || echo 0); \
         echo $((n+1)) > {count}; [ $n -ge 1 ]",
        gate = gate.display(),
        count = count.display()
    );
    let out = tollgate(
        &home,
        &[
            "submit", "--task", "a", "--retry", "1", "--", "sh", "-c", &script,
        ],
    );
    assert!(out.status.success(), "{}", describe(&out));
    let out = tollgate(
        &home,
        &[
            "submit",
            "--task",
            "b",
            "--after-success",
            "a",
            "--",
            "true",
        ],
    );
    assert!(out.status.success(), "{}", describe(&out));
    let state = store(&url, &queue).load().expect("load");
    let held = state
        .entries
        .iter()
        .find(|e| e.key.task == "b")
        .expect("b's row");
    assert_eq!(held.after.len(), 1, "{state:?}");
    assert_eq!(held.after[0].key.task, "a");
    std::fs::write(&gate, "").expect("open the gate");
    let out = tollgate(&home, &["wait", "b"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let out = tollgate(&home, &["wait", "a:1"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "followed to the retry: {}",
        describe(&out)
    );
    assert!(store(&url, &queue).load().expect("load").entries.is_empty());
}

/// Without `?queue=`, the queue is the home's canonical path: the home named relatively from
/// its parent and absolutely through a `..` detour is one queue.
fn check_default_queue_is_the_canonical_home(url: &str, dir: &Path) {
    let home = dir.join("plain-home");
    let out = tollgate(&home, &["init", "--workers", "1"]);
    assert!(out.status.success(), "{}", describe(&out));
    let run = |home_arg: &Path, args: &[&str]| {
        std::process::Command::new(common::BIN)
            .current_dir(dir)
            .arg("--home")
            .arg(home_arg)
            .args(args)
            .env("TOLLGATE_STORE", url)
            .stdin(std::process::Stdio::null())
            .output()
            .expect("run tollgate")
    };
    let out = run(
        Path::new("plain-home"),
        &["submit", "--wait", "--task", "relative", "--", "true"],
    );
    assert!(out.status.success(), "{}", describe(&out));
    let detour = dir.join("plain-home").join("..").join("plain-home");
    let out = run(&detour, &["status"]);
    assert!(out.status.success(), "{}", describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("relative"),
        "{}",
        describe(&out)
    );
    let canonical = std::fs::canonicalize(&home).expect("canonical");
    let state = store(url, &canonical.display().to_string())
        .load()
        .expect("load");
    assert!(
        state.next_queue_id > 1,
        "the turn is not in the queue named by the canonical path: {state:?}"
    );
}

/// `TOLLGATE_STORE` overrides the config; a value that is neither `sqlite` nor a postgres URL
/// is refused naming the variable, and nothing is created.
fn check_store_env_overrides(url: &str, dir: &Path) {
    let home = dir.join("env-home");
    let out = tollgate(&home, &["init", "--workers", "1"]);
    assert!(out.status.success(), "{}", describe(&out));
    let queue = unique_queue("env");
    let run = |store: &str, args: &[&str]| {
        std::process::Command::new(common::BIN)
            .arg("--home")
            .arg(&home)
            .args(args)
            .env("TOLLGATE_STORE", store)
            .stdin(std::process::Stdio::null())
            .output()
            .expect("run tollgate")
    };
    let out = run("mysql://nope", &["submit", "--", "true"]);
    assert!(!out.status.success(), "{}", describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("TOLLGATE_STORE"),
        "{}",
        describe(&out)
    );
    let out = run(
        &with_queue(url, &queue),
        &["submit", "--wait", "--", "true"],
    );
    assert!(out.status.success(), "{}", describe(&out));
    assert!(!home.join("tollgate.db").exists(), "a tollgate.db was made");
    assert!(store(url, &queue).load().expect("load").next_queue_id > 1);
}

#[test]
fn a_store_setting_that_is_not_a_store_is_refused_naming_it_and_nothing_is_created() {
    // Needs no server: refused before any connection.
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = init_home(tmp.path(), 1);
    let config = home.join("tollgate.toml");
    let mut text = std::fs::read_to_string(&config).expect("config");
    text.push_str("store = \"mysql://db.example/tollgate\"\n");
    std::fs::write(&config, text).expect("write config");
    let out = tollgate(&home, &["submit", "--", "true"]);
    assert!(!out.status.success(), "{}", describe(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&config.display().to_string())
            && stderr.contains("`store`")
            && stderr.contains("mysql://db.example/tollgate"),
        "{}",
        describe(&out)
    );
    assert!(!home.join("tollgate.db").exists(), "a tollgate.db was made");
    let tasks = std::fs::read_dir(home.join("tasks")).map_or(0, |d| d.count());
    assert_eq!(tasks, 0, "a task was recorded");
}

/// A database of schema version 1 (no priorities, no pause set, no dependencies, no leases) is
/// migrated to the current version by the next store that opens it, its rows kept with priority
/// 0, nothing paused and no dependencies; the new fields round-trip afterwards. Run in a database of its own (created and dropped here), since the
/// downgrade below would change the shared one under the other tests.
#[test]
fn a_version_1_database_migrates_to_the_current_version_keeping_its_rows() {
    let Some(url) = server() else { return };
    let name = format!("tg_migrate_{}", std::process::id());
    let (base, query) = url
        .split_once('?')
        .map_or((url.as_str(), ""), |(b, q)| (b, q));
    let (prefix, _db) = base.rsplit_once('/').expect("the URL names a database");
    let own = if query.is_empty() {
        format!("{prefix}/{name}")
    } else {
        format!("{prefix}/{name}?{query}")
    };
    let mut admin = postgres::Client::connect(&url, postgres::NoTls).expect("connect");
    admin
        .batch_execute(&format!("DROP DATABASE IF EXISTS {name}"))
        .expect("drop a leftover database");
    admin
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .expect("create the test's database");
    let queue = unique_queue("migrate");
    let shape = every_shape();
    store(&own, &queue)
        .transact(|q| {
            *q = shape.clone();
            Ok::<_, StoreError>(())
        })
        .expect("publish");
    let mut client = postgres::Client::connect(&own, postgres::NoTls).expect("connect");
    client
        .batch_execute(
            "DROP TABLE IF EXISTS tasks, turns, record_imports, serve_dedupe, serve_refused,
                 serve_payloads, serve_handed_off, serve_imports, drained_hosts, turn_output;
             DROP TABLE leases;
             DROP TABLE entry_dependencies;
             DROP TABLE paused_tasks;
             ALTER TABLE entries DROP COLUMN priority;
             ALTER TABLE queue_meta DROP COLUMN paused_home;
             DELETE FROM schema_migrations WHERE version > 1;",
        )
        .expect("downgrade to version 1");
    let migrated = store(&own, &queue).load().expect("migrate");
    let mut expected = shape.clone();
    expected.paused = Default::default();
    for row in &mut expected.entries {
        row.priority = 0;
        row.after.clear();
    }
    assert_eq!(migrated, expected);
    let version: i32 = client
        .query_one("SELECT max(version) FROM schema_migrations", &[])
        .expect("version")
        .get(0);
    assert_eq!(version, tollgate::queue::POSTGRES_SCHEMA_VERSION);
    store(&own, &queue)
        .transact(|q| {
            *q = shape.clone();
            Ok::<_, StoreError>(())
        })
        .expect("publish after the migration");
    assert_eq!(store(&own, &queue).load().expect("load"), shape);
    drop(client);
    admin
        .batch_execute(&format!("DROP DATABASE {name} WITH (FORCE)"))
        .expect("drop the test's database");
}

/// A section commits under its locks without waiting for the disk and is flushed after them,
/// before `transact` returns (spec/store.md, "PostgreSQL", "Durability"): what a caller is told
/// is on disk. The write-ahead log position read *inside* the section (from another session) is
/// before the section's commit record, so the server's flushed position must have passed it
/// when `transact` returns. Without the flush the WAL writer would pass it only on its next
/// round (`wal_writer_delay`, 200 ms by default), long after the return.
#[test]
fn a_section_is_on_disk_when_it_returns_though_it_committed_without_waiting_under_its_locks() {
    let Some(url) = server() else { return };
    let queue = unique_queue("flushed");
    let store = store(&url, &queue);
    store.load().expect("create the queue");
    let mut observer = postgres::Client::connect(&url, postgres::NoTls).expect("connect");
    let mut lsn = |sql: &str| -> String {
        observer
            .query_one(sql, &[])
            .expect("read the WAL position")
            .get(0)
    };
    for round in 0..5 {
        let mut inside = String::new();
        store
            .transact(|state| {
                inside = lsn("SELECT pg_current_wal_insert_lsn()::text");
                // Every round changes the queue: the full shape, then empty again.
                *state = if round % 2 == 0 {
                    every_shape()
                } else {
                    QueueState::default()
                };
                Ok::<_, StoreError>(())
            })
            .expect("a section that writes");
        let flushed = lsn("SELECT pg_current_wal_flush_lsn()::text");
        let mut check = postgres::Client::connect(&url, postgres::NoTls).expect("connect");
        let on_disk: bool = check
            .query_one(
                "SELECT $1::text::pg_lsn >= $2::text::pg_lsn",
                &[&flushed, &inside],
            )
            .expect("compare")
            .get(0);
        assert!(
            on_disk,
            "round {round}: flushed up to {flushed} when the section returned, \
             but its commit comes after {inside}"
        );
    }
}
