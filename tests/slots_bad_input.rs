//! Bad input gets a clear error (exit 2, naming what was wrong and where) and changes nothing: every
//! test snapshots the whole home (every file's bytes, every directory) before and after.
//!
//! Invariants touched: S3 (a non-current token never acts), S8 (a nil token is never installed,
//! not even by loading a queue file that holds one).
mod common;

use common::{describe, tollgate};

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;
use tollgate::config::Durability;
use tollgate::dispatch::DispatchError;
use tollgate::home::Home;
use tollgate::process::{self_identity, ProcLiveness};
use tollgate::protocol::slots::steps::Reads;
use tollgate::protocol::slots::{
    enqueue, park, reserve_runner_slot, ReserveOutcome, SlotToken, TurnKey,
};
use tollgate::queue::{Commit, SqliteStore, Store};
use tollgate::tasks;

const USAGE: i32 = 2;

/// Asserts exit 2 and that stderr mentions every one of `needles`.
fn assert_usage_error(output: &Output, what: &str, needles: &[&str]) {
    assert_eq!(
        output.status.code(),
        Some(USAGE),
        "{what}: expected exit 2\n{}",
        describe(output)
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    for needle in needles {
        assert!(
            stderr.contains(needle),
            "{what}: stderr does not name {needle:?}\n{}",
            describe(output)
        );
    }
}

/// Everything under `root`: directories, and files with their bytes.
#[derive(Debug, PartialEq, Eq)]
struct Tree {
    dirs: BTreeSet<PathBuf>,
    files: BTreeMap<PathBuf, Vec<u8>>,
}

fn snapshot(root: &Path) -> Tree {
    let mut tree = Tree {
        dirs: BTreeSet::new(),
        files: BTreeMap::new(),
    };
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read dir") {
            let path = entry.expect("dir entry").path();
            let relative = path.strip_prefix(root).expect("under root").to_path_buf();
            if path.ends_with("tollgate.db-shm") {
                // SQLite's shared-memory index: readers mark it; it holds no state.
                continue;
            } else if path.is_dir() {
                tree.dirs.insert(relative);
                stack.push(path);
            } else {
                tree.files
                    .insert(relative, std::fs::read(&path).expect("read file"));
            }
        }
    }
    tree
}

fn assert_unchanged(before: &Tree, root: &Path, what: &str) {
    let after = snapshot(root);
    assert_eq!(
        before.dirs,
        after.dirs,
        "{what}: directories changed under {}",
        root.display()
    );
    for (path, bytes) in &before.files {
        assert_eq!(
            Some(bytes),
            after.files.get(path),
            "{what}: {} changed (before: {:?})",
            path.display(),
            String::from_utf8_lossy(bytes)
        );
    }
    assert_eq!(
        before.files.keys().collect::<Vec<_>>(),
        after.files.keys().collect::<Vec<_>>(),
        "{what}: files appeared or vanished under {}",
        root.display()
    );
}

/// An initialised home with `workers` slots, one finished turn (so tasks, turns and a queue
/// document exist), and the lock file present (taking the lock creates it; that is not a change).
fn home_with_history(tmp: &Path, workers: usize) -> PathBuf {
    let home = tmp.join("home");
    let out = tollgate(&home, &["init", "--workers", &workers.to_string()]);
    assert!(out.status.success(), "init: {}", describe(&out));
    let out = tollgate(
        &home,
        &["submit", "--task", "done", "--attach", "--", "true"],
    );
    assert!(out.status.success(), "attached submit: {}", describe(&out));
    assert!(home.join("tollgate.db").is_file());
    home
}

/// Turns `home` into an earlier version's home (state in `queue.json`, no database), where a
/// queue.json is imported on first use.
fn remove_database(home: &Path) {
    for name in ["tollgate.db", "tollgate.db-wal", "tollgate.db-shm"] {
        let _ = std::fs::remove_file(home.join(name));
    }
}

fn valid_queue_json() -> String {
    // A parked row for the finished turn's task number 2, written by hand so its bytes are known.
    r#"{
  "version": 1,
  "next_queue_id": 3,
  "entries": [
    {
      "queue_id": 2,
      "task": "done",
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
fn truncated_queue_json_is_refused_by_submit_status_and_reconcile_and_left_untouched() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = home_with_history(tmp.path(), 2);
    let full = valid_queue_json();
    let half = &full.as_bytes()[..full.len() / 2];
    remove_database(&home);
    std::fs::write(home.join("queue.json"), half).expect("write half a queue");
    let queue_path = home.join("queue.json").display().to_string();
    let before = snapshot(&home);
    let marker = tmp.path().join("ran");
    let marker_arg = marker.display().to_string();

    let cases: [&[&str]; 5] = [
        &["submit", "--", "touch", &marker_arg],
        &["submit", "--task", "done", "--", "touch", &marker_arg],
        &["status"],
        &["status", "--json"],
        &["reconcile"],
    ];
    for args in cases {
        let out = tollgate(&home, args);
        let what = format!("truncated queue.json, {args:?}");
        assert_usage_error(&out, &what, &[&queue_path]);
        assert_unchanged(&before, &home, &what);
    }
    assert_eq!(
        std::fs::read(home.join("queue.json")).expect("queue"),
        half,
        "queue.json must stay byte-identical"
    );
    assert!(
        !marker.exists(),
        "nothing may run from a queue that did not load"
    );
}

/// S8: the nil UUID is never a token, neither on the command line nor in a loaded queue.
#[test]
fn s8_nil_token_is_refused_on_the_runner_command_line() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = home_with_history(tmp.path(), 2);
    let before = snapshot(&home);
    let nil = "00000000-0000-0000-0000-000000000000";
    let out = tollgate(
        &home,
        &["worker", "runner", "done", "1", "--slot-token", nil],
    );
    assert_usage_error(
        &out,
        "worker runner with nil token",
        &["QUEUE_SLOT_TOKEN_NIL"],
    );
    assert_unchanged(&before, &home, "worker runner with nil token");

    let out = tollgate(
        &home,
        &[
            "worker",
            "runner",
            "done",
            "1",
            "--slot-token",
            "not-a-uuid",
        ],
    );
    assert_usage_error(
        &out,
        "worker runner with malformed token",
        &["QUEUE_SLOT_TOKEN_MALFORMED", "not-a-uuid"],
    );
    assert_unchanged(&before, &home, "worker runner with malformed token");
}

#[test]
fn s8_queue_json_holding_a_nil_slot_token_is_refused_on_load() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = home_with_history(tmp.path(), 2);
    let me = self_identity().expect("own identity");
    let queue = format!(
        r#"{{
  "version": 1,
  "next_queue_id": 3,
  "entries": [
    {{
      "queue_id": 2,
      "task": "done",
      "turn": 2,
      "enqueued_at_millis": 1700000000000,
      "state": "dispatching",
      "dispatch_owner": {{ "pid": {pid}, "start_time_micros": {start} }},
      "slot_reservation": {{
        "reserver": {{ "pid": {pid}, "start_time_micros": {start} }},
        "token": "00000000-0000-0000-0000-000000000000"
      }}
    }}
  ],
  "runners": []
}}
"#,
        pid = me.pid,
        start = me.start_time_micros
    );
    remove_database(&home);
    std::fs::write(home.join("queue.json"), &queue).expect("write queue");
    let queue_path = home.join("queue.json").display().to_string();
    let before = snapshot(&home);
    let token = SlotToken::generate().to_string();
    let cases: [&[&str]; 4] = [
        &["status"],
        &["submit", "--", "true"],
        &["reconcile"],
        &["worker", "runner", "done", "2", "--slot-token", &token],
    ];
    for args in cases {
        let out = tollgate(&home, args);
        let what = format!("nil token in queue.json, {args:?}");
        assert_usage_error(&out, &what, &[&queue_path, "nil"]);
        assert_unchanged(&before, &home, &what);
    }
}

/// S3: a valid-looking token that is not the row's current one never acts: the runner is refused
/// with QUEUE_SLOT_TOKEN_MISMATCH, the queue is unchanged and the command does not run. Covered
/// for a row with a live reservation under another token and for a parked row with none.
#[test]
fn s3_stale_token_on_worker_runner_is_refused_and_runs_nothing() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = home_with_history(tmp.path(), 2);
    let marker = tmp.path().join("ran");
    let home = Home::at(&root);
    let store = SqliteStore::new(home.clone(), Duration::from_secs(10), Durability::Fsync);
    // The test process is the reserver: it stays live, so its reservation is current.
    let me = self_identity().expect("own identity");
    let current = SlotToken::generate();
    let (reserved, parked) = store
        .transact_section(Commit::Promise, &Reads::Everything, |state, _, _, tx| {
            let argv: Vec<std::ffi::OsString> =
                vec!["touch".into(), marker.clone().into_os_string()];
            let now = tasks::now_millis();
            let mut keys = Vec::new();
            for _ in 0..2 {
                let turn = tasks::create_turn_in(
                    (&home, &mut *tx),
                    "stale",
                    argv.clone(),
                    None,
                    BTreeMap::new(),
                    false,
                    now,
                )?;
                enqueue(state, &turn.key, me, now)?;
                keys.push(turn.key);
            }
            let outcome =
                reserve_runner_slot(state, &keys[0], me, None, 2, current, &ProcLiveness)?;
            assert!(
                matches!(outcome, ReserveOutcome::Acquired { .. }),
                "{outcome:?}"
            );
            park(state, &keys[1])?;
            Ok::<(TurnKey, TurnKey), DispatchError>((keys[0].clone(), keys[1].clone()))
        })
        .expect("set up rows");
    let before = snapshot(&root);

    for key in [&reserved, &parked] {
        let stale = SlotToken::generate();
        assert_ne!(stale, current);
        let out = tollgate(
            &root,
            &[
                "worker",
                "runner",
                &key.task,
                &key.turn.to_string(),
                "--slot-token",
                &stale.to_string(),
            ],
        );
        let what = format!("stale token for {key}");
        assert_usage_error(
            &out,
            &what,
            &["QUEUE_SLOT_TOKEN_MISMATCH", &stale.to_string()],
        );
        assert_unchanged(&before, &root, &what);
        assert!(!marker.exists(), "{what}: the command ran");
    }
}

#[test]
fn unknown_task_is_named_and_nothing_is_created() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = home_with_history(tmp.path(), 2);
    let before = snapshot(&home);
    let cases: [&[&str]; 5] = [
        &["status", "nope"],
        &["status", "nope", "--json"],
        &["logs", "nope"],
        &["logs", "nope", "--turn", "1"],
        &["cancel", "nope"],
    ];
    for args in cases {
        let out = tollgate(&home, args);
        let what = format!("unknown task, {args:?}");
        assert_usage_error(&out, &what, &["\"nope\""]);
        assert_unchanged(&before, &home, &what);
    }
    // A known task with an unknown turn is named too.
    let out = tollgate(&home, &["logs", "done", "--turn", "7"]);
    assert_usage_error(&out, "unknown turn", &["\"done\"", "7"]);
    assert_unchanged(&before, &home, "unknown turn");
}

#[test]
fn invalid_config_is_refused_naming_file_and_key_and_left_untouched() {
    let cases = [
        ("workers = 2", "workers = 0", "workers"),
        ("workers = 2", "workers = \"two\"", "workers"),
        ("workers = 2", "workers = 2\nbogus = 1", "bogus"),
        (
            "lock_timeout = \"10s\"",
            "lock_timeout = \"soon\"",
            "lock_timeout",
        ),
        ("lock_timeout = \"10s\"", "lock_timeout = 5", "lock_timeout"),
        (
            "lock_timeout = \"10s\"",
            "lock_timeout = \"0s\"",
            "lock_timeout",
        ),
    ];
    for (good, bad, key) in cases {
        let tmp = tempfile::tempdir().expect("tempdir");
        let home = home_with_history(tmp.path(), 2);
        let config = home.join("tollgate.toml");
        let text = std::fs::read_to_string(&config).expect("config");
        assert!(text.contains(good), "{text}");
        std::fs::write(&config, text.replace(good, bad)).expect("write config");
        let config_path = config.display().to_string();
        let quoted_key = format!("`{key}`");
        let before = snapshot(&home);
        let commands: [&[&str]; 6] = [
            &["status"],
            &["submit", "--", "true"],
            &["reconcile"],
            &["cancel", "done"],
            &["logs", "done"],
            &["init", "--workers", "3"],
        ];
        for args in commands {
            let out = tollgate(&home, args);
            let what = format!("config with {bad:?}, {args:?}");
            assert_usage_error(&out, &what, &[&config_path, &quoted_key]);
            assert_unchanged(&before, &home, &what);
        }
    }
}

#[test]
fn init_with_zero_workers_is_refused_and_keeps_the_config() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = home_with_history(tmp.path(), 2);
    let before = snapshot(&home);
    let out = tollgate(&home, &["init", "--workers", "0"]);
    let config_path = home.join("tollgate.toml").display().to_string();
    assert_usage_error(&out, "init --workers 0", &[&config_path, "`workers`"]);
    assert_unchanged(&before, &home, "init --workers 0");
}

#[test]
fn bad_env_and_cwd_are_refused_before_anything_is_written() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = home_with_history(tmp.path(), 2);
    let before = snapshot(&home);
    let not_a_dir = tmp.path().join("plain-file");
    std::fs::write(&not_a_dir, b"x").expect("write file");
    let missing = tmp.path().join("missing").display().to_string();
    let file = not_a_dir.display().to_string();
    let cases: [(&[&str], &str); 5] = [
        (&["submit", "--env", "NOEQUALS", "--", "true"], "NOEQUALS"),
        (&["submit", "--env", "=value", "--", "true"], "=value"),
        (&["submit", "--cwd", &missing, "--", "true"], &missing),
        (&["submit", "--cwd", &file, "--", "true"], &file),
        (
            &["submit", "--attach", "--cwd", &missing, "--", "true"],
            &missing,
        ),
    ];
    for (args, named) in cases {
        let out = tollgate(&home, args);
        let what = format!("{args:?}");
        assert_usage_error(&out, &what, &[named]);
        assert_unchanged(&before, &home, &what);
    }
}
