//! What a power loss can cost (spec/store.md, "Durability"): never an acknowledged turn.
//!
//! The `store::after_durable_commit(DIR)` failpoint copies the database to `DIR/tollgate.db` after
//! every synced commit, so the copy is what a disk that dropped every unsynced write would hold.
//! A parking `submit` (a promise: "parked") is synced, and so is every commit that records a
//! turn's outcome (spec/store.md, "Records"); the other transitions (the handoff to the parked
//! turn, its take-over, its started record) are internal and are not. Putting the copy back
//! stands for the power loss: the parked turn's row is there, and `reconcile` repairs the rest
//! from it. Run with `cargo test --features failpoints --test failpoints_store_durability`.
#![cfg(feature = "failpoints")]

mod common;

use common::describe;
use common::failpoints::{status, tollgate};
use std::path::Path;
use std::time::{Duration, Instant};
use tollgate::config::Durability;
use tollgate::home::Home;
use tollgate::queue::SqliteStore;

/// The state of `task`'s first turn in `status --json`.
fn state_of(view: &serde_json::Value, task: &str) -> String {
    view["tasks"]
        .as_array()
        .and_then(|tasks| tasks.iter().find(|t| t["name"] == task))
        .and_then(|t| t["turns"][0]["state"].as_str())
        .unwrap_or("absent")
        .to_string()
}

/// Polls `status` until `done` holds, for at most 30 s.
fn wait_for(home: &Path, what: &str, done: impl Fn(&serde_json::Value) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let view = status(home);
        if done(&view) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}: {view:#}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits (bounded) until the runner of `task` turn 1 has logged its end: it writes nothing more.
fn runner_ended(home: &Path, task: &str) {
    let log = home.join(format!("tasks/{task}/turns/1/runner.log"));
    let deadline = Instant::now() + Duration::from_secs(30);
    while !std::fs::read_to_string(&log).is_ok_and(|text| text.contains("ran, outcome")) {
        assert!(
            Instant::now() < deadline,
            "the runner of {task} never ended"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn lines(path: &Path) -> usize {
    std::fs::read_to_string(path).map_or(0, |text| text.lines().count())
}

#[test]
fn a_power_loss_after_a_parking_submit_keeps_the_parked_turn_and_reconcile_runs_it() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = tmp.path().join("home");
    let snapshots = tmp.path().join("synced");
    std::fs::create_dir(&snapshots).expect("snapshot dir");
    let synced = snapshots.join("tollgate.db");
    let failpoints = format!(
        "store::after_durable_commit=return({})",
        snapshots.display()
    );
    let fp = Some(failpoints.as_str());
    let out = tollgate(&home, None, &["init", "--workers", "1"]);
    assert!(out.status.success(), "{}", describe(&out));

    // `first` holds the only slot until the test creates `release`.
    let release = tmp.path().join("release");
    let hold = format!(
        "while [ ! -e '{}' ]; do sleep 0.01; done",
        release.display()
    );
    let out = tollgate(
        &home,
        fp,
        &["submit", "--task", "first", "--", "sh", "-c", &hold],
    );
    assert!(out.status.success(), "{}", describe(&out));
    wait_for(&home, "first to run", |v| state_of(v, "first") == "running");

    let runs = tmp.path().join("runs");
    let release_parked = tmp.path().join("release-parked");
    let count = format!(
        "echo ran >> '{}'; while [ ! -e '{}' ]; do sleep 0.01; done",
        runs.display(),
        release_parked.display()
    );
    let out = tollgate(
        &home,
        fp,
        &["submit", "--task", "parked", "--", "sh", "-c", &count],
    );
    assert!(out.status.success(), "{}", describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("parked"),
        "the promise is `parked`: {}",
        describe(&out)
    );
    let at_promise = std::fs::read(&synced).expect("the parking submit's commit was synced");

    // first's finish records its outcome: synced. The handoff to `parked`, its take-over and
    // its started record are internal: not synced (in the copy, parked never started).
    std::fs::write(&release, b"").expect("release");
    wait_for(&home, "parked to run", |v| {
        state_of(v, "parked") == "running"
    });
    runner_ended(&home, "first");
    let at_finish = std::fs::read(&synced).expect("copy");
    assert_ne!(at_finish, at_promise, "first's outcome was not synced");
    let inspect = tmp.path().join("inspect.db");
    std::fs::write(&inspect, &at_finish).expect("inspect copy");
    let copy = rusqlite::Connection::open(&inspect).expect("open the copy");
    let record = |task: &str| -> serde_json::Value {
        let body: String = copy
            .query_row(
                "SELECT body FROM turns WHERE task = ?1 AND turn = 1",
                [task],
                |row| row.get(0),
            )
            .expect("the turn's record is in the copy");
        serde_json::from_str(&body).expect("json")
    };
    assert_eq!(record("first")["outcome"], "completed");
    assert!(
        record("parked")["started_at_millis"].is_null(),
        "parked's take-over was synced: {}",
        record("parked")
    );
    drop(copy);
    std::fs::write(&release_parked, b"").expect("release parked");
    wait_for(&home, "parked to complete", |v| {
        state_of(v, "parked") == "completed"
    });
    runner_ended(&home, "parked");
    assert_eq!(lines(&runs), 1);

    // The power loss: the disk holds the database as of the last synced commit (parked's
    // outcome).
    for name in ["tollgate.db-wal", "tollgate.db-shm"] {
        let _ = std::fs::remove_file(home.join(name));
    }
    std::fs::copy(&synced, home.join("tollgate.db")).expect("put the synced copy back");
    let store = SqliteStore::new(Home::at(&home), Duration::from_secs(10), Durability::Fsync);
    let queue = store.load().expect("the synced copy loads");
    assert_eq!(queue.entries, [], "both finishes were synced: {queue:?}");

    // Reconcile finds nothing to repair: no turn runs twice (their outcomes were synced).
    let out = tollgate(&home, None, &["reconcile"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    wait_for(&home, "the queue to empty", |v| {
        v["rows"] == serde_json::json!([])
    });
    let view = status(&home);
    assert_eq!(state_of(&view, "parked"), "completed", "{view:#}");
    assert_eq!(state_of(&view, "first"), "completed", "{view:#}");
    assert_eq!(lines(&runs), 1, "the acknowledged turn ran again");
    // The home goes on.
    let out = tollgate(&home, None, &["submit", "--wait", "--", "true"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
}

#[test]
fn a_power_loss_right_after_a_parking_submit_loses_nothing_and_the_turn_runs() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = tmp.path().join("home");
    let snapshots = tmp.path().join("synced");
    std::fs::create_dir(&snapshots).expect("snapshot dir");
    let failpoints = format!(
        "store::after_durable_commit=return({})",
        snapshots.display()
    );
    let fp = Some(failpoints.as_str());
    let out = tollgate(&home, None, &["init", "--workers", "1"]);
    assert!(out.status.success(), "{}", describe(&out));

    // `first` runs until the power loss kills it (its command ends only once `release` exists).
    let release = tmp.path().join("release");
    let hold = format!(
        "while [ ! -e '{}' ]; do sleep 0.01; done",
        release.display()
    );
    let out = tollgate(
        &home,
        fp,
        &["submit", "--task", "first", "--", "sh", "-c", &hold],
    );
    assert!(out.status.success(), "{}", describe(&out));
    wait_for(&home, "first to run", |v| state_of(v, "first") == "running");
    let runs = tmp.path().join("runs");
    let count = format!("echo ran >> '{}'", runs.display());
    let out = tollgate(
        &home,
        fp,
        &["submit", "--task", "parked", "--", "sh", "-c", &count],
    );
    assert!(out.status.success(), "{}", describe(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("parked"));

    // The power loss kills every process: first's runner and its command (once its leader is
    // recorded, so the whole process group is known).
    wait_for(&home, "first's command to be recorded", |v| {
        v["works"][0]["leader"]["pid"].is_u64()
    });
    let view = status(&home);
    let pid = |value: &serde_json::Value| {
        nix::unistd::Pid::from_raw(value["pid"].as_u64().expect("a pid") as i32)
    };
    let runner = pid(&view["runners"][0]["identity"]);
    let leader = pid(&view["works"][0]["leader"]);
    nix::sys::signal::kill(runner, nix::sys::signal::Signal::SIGKILL).expect("kill the runner");
    nix::sys::signal::killpg(leader, nix::sys::signal::Signal::SIGKILL).expect("kill the command");
    // Watched through /proc, not `status`: `status` repairs what it finds dead (its bounded
    // reconcile step), and this power loss must come before any repair.
    let deadline = Instant::now() + Duration::from_secs(30);
    while tollgate::process::identity_of(runner.as_raw() as u32).is_some() {
        assert!(
            Instant::now() < deadline,
            "first's runner {runner} did not die"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    for name in ["tollgate.db-wal", "tollgate.db-shm"] {
        let _ = std::fs::remove_file(home.join(name));
    }
    std::fs::copy(snapshots.join("tollgate.db"), home.join("tollgate.db")).expect("restore");

    // Reconcile replaces first's dead runner (the turn was started and never ended: it runs
    // again) and keeps the acknowledged parked turn in line behind it.
    let out = tollgate(&home, None, &["reconcile"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    wait_for(&home, "first to run again", |v| {
        state_of(v, "first") == "running" && state_of(v, "parked") == "queued"
    });
    std::fs::write(&release, b"").expect("release");
    wait_for(&home, "the acknowledged turn to run", |v| {
        state_of(v, "parked") == "completed" && state_of(v, "first") == "completed"
    });
    assert_eq!(lines(&runs), 1);
}

#[test]
fn with_durability_os_no_commit_waits_for_the_disk() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = tmp.path().join("home");
    let snapshots = tmp.path().join("synced");
    std::fs::create_dir(&snapshots).expect("snapshot dir");
    let failpoints = format!(
        "store::after_durable_commit=return({})",
        snapshots.display()
    );
    let out = tollgate(&home, None, &["init", "--workers", "1"]);
    assert!(out.status.success(), "{}", describe(&out));
    let config = home.join("tollgate.toml");
    let text = std::fs::read_to_string(&config).expect("config");
    std::fs::write(&config, format!("{text}durability = \"os\"\n")).expect("config");
    let out = tollgate(
        &home,
        Some(&failpoints),
        &["submit", "--wait", "--", "true"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert!(
        !snapshots.join("tollgate.db").exists(),
        "a commit was synced with durability = \"os\""
    );
    // The same submit with the default syncs its promise.
    std::fs::write(&config, text).expect("config");
    let out = tollgate(
        &home,
        Some(&failpoints),
        &["submit", "--wait", "--", "true"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert!(snapshots.join("tollgate.db").exists());
}
