//! State files that cannot be turned against tollgate (issue 11, points 7, 8, 9 and 11), through
//! the real binary on a real home:
//!
//! - special files (a FIFO, a symlink to `/dev/zero`) in place of any state or config file are
//!   refused within a bounded time with exit 2, an error naming the path, and nothing changed;
//! - existing turn records are never overwritten, counters at their end refuse instead of wrapping
//!   or repeating, and what tollgate publishes always loads again;
//! - a queue row whose task folder is gone is settled by `reconcile`, which goes on;
//! - the config's small refusals (empty file, `lock_timeout = "0s"`, invalid UTF-8) and the modes
//!   of the files and folders `run` and the sweep list create.
mod common;

use common::describe;
use std::collections::BTreeMap;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};
use tollgate::config::Durability;
use tollgate::home::Home;
use tollgate::protocol::slots::{QueueEntry, RowState, TurnKey};
use tollgate::queue::{SqliteStore, StoreError};

const USAGE: i32 = 2;
/// How long a refused command may take; a hang on a FIFO or an endless read of `/dev/zero` is
/// far beyond it.
const BOUND: Duration = Duration::from_secs(20);

/// Runs `tollgate --home HOME ARGS…` and fails the test if it has not ended within [`BOUND`].
fn tollgate(home: &Path, args: &[&str]) -> Output {
    common::tollgate_within(home, args, BOUND)
}

/// What is at one path: a directory, a file's bytes, a FIFO, a symlink's target, a mode.
#[derive(Debug, PartialEq, Eq)]
enum Node {
    Dir(u32),
    File(Vec<u8>, u32),
    Fifo,
    Symlink(PathBuf),
    Other,
}

/// Everything under `root`, without reading (or opening) anything that is not a regular file.
fn snapshot(root: &Path) -> BTreeMap<PathBuf, Node> {
    let mut tree = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read dir") {
            let path = entry.expect("dir entry").path();
            if path.ends_with("tollgate.db-shm") {
                // SQLite's shared-memory index: readers mark it; it holds no state.
                continue;
            }
            let meta = std::fs::symlink_metadata(&path).expect("lstat");
            let mode = meta.permissions().mode() & 0o7777;
            let node = if meta.file_type().is_symlink() {
                Node::Symlink(std::fs::read_link(&path).expect("readlink"))
            } else if meta.is_dir() {
                stack.push(path.clone());
                Node::Dir(mode)
            } else if meta.file_type().is_fifo() {
                Node::Fifo
            } else if meta.is_file() {
                Node::File(std::fs::read(&path).expect("read file"), mode)
            } else {
                Node::Other
            };
            tree.insert(
                path.strip_prefix(root).expect("under root").to_path_buf(),
                node,
            );
        }
    }
    tree
}

fn assert_refused(out: &Output, what: &str, needles: &[&str]) {
    assert_eq!(
        out.status.code(),
        Some(USAGE),
        "{what}: expected exit 2\n{}",
        describe(out)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    for needle in needles {
        assert!(
            stderr.contains(needle),
            "{what}: stderr does not name {needle:?}\n{}",
            describe(out)
        );
    }
}

/// Waits (bounded) until the runner of `task` turn `turn` has written its last log line, so it
/// changes nothing in the home any more.
fn runner_done(home: &Path, task: &str, turn: u32) {
    let log = home.join(format!("tasks/{task}/turns/{turn}/runner.log"));
    let deadline = Instant::now() + BOUND;
    while !std::fs::read_to_string(&log).is_ok_and(|text| text.contains("ran, outcome")) {
        assert!(
            Instant::now() < deadline,
            "the runner of {task} turn {turn} never ended"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A home with one finished detached turn (`done` turn 1, so queue, task and turn files exist),
/// an empty sweep list with its lock, and an empty refused-delivery list.
fn home_with_history(tmp: &Path) -> PathBuf {
    let home = tmp.join("home");
    let out = tollgate(&home, &["init", "--workers", "2"]);
    assert!(out.status.success(), "init: {}", describe(&out));
    let out = tollgate(
        &home,
        &["submit", "--task", "done", "--wait", "--", "echo", "one"],
    );
    assert!(out.status.success(), "submit: {}", describe(&out));
    runner_done(&home, "done", 1);
    // The lock file is created by the first sweep; creating it is not what these tests look at.
    let out = tollgate(&home, &["sweep"]);
    assert!(out.status.success(), "sweep: {}", describe(&out));
    std::fs::write(home.join("sweep.json"), "{\"version\":1,\"entries\":[]}\n").expect("sweep");
    std::fs::create_dir_all(home.join("serve")).expect("serve dir");
    std::fs::write(home.join("serve/refused.jsonl"), "").expect("refused list");
    home
}

/// Issue 11, point 9: every state and config file, replaced by a FIFO and by a symlink to
/// `/dev/zero`, is refused by each command that reads it: exit 2 within the bound, naming the path
/// and what is there, and the home is exactly as it was.
#[test]
fn special_files_in_place_of_state_files_are_refused_promptly_and_change_nothing() {
    // Task and turn records are rows of tollgate.db (spec/store.md, "Records"): the database
    // stands for them here.
    let cases: [(&str, &[&[&str]]); 4] = [
        (
            "tollgate.db",
            &[
                &["status"],
                &["submit", "--", "true"],
                &["reconcile"],
                &["status", "done"],
                &["logs", "done"],
            ],
        ),
        ("tollgate.toml", &[&["status"], &["submit", "--", "true"]]),
        ("sweep.json", &[&["sweep"]]),
        ("serve/refused.jsonl", &[&["deliveries", "--refused"]]),
    ];
    for (file, commands) in cases {
        for special in ["fifo", "/dev/zero"] {
            let tmp = tempfile::tempdir().expect("tempdir");
            let home = home_with_history(tmp.path());
            let path = home.join(file);
            std::fs::remove_file(&path).expect("remove the real file");
            let found = if special == "fifo" {
                nix::unistd::mkfifo(&path, nix::sys::stat::Mode::S_IRWXU).expect("mkfifo");
                "a FIFO"
            } else {
                std::os::unix::fs::symlink("/dev/zero", &path).expect("symlink");
                "a character device"
            };
            let before = snapshot(&home);
            let path_text = path.display().to_string();
            for args in commands {
                let what = format!("{file} as {special}, tollgate {args:?}");
                let out = tollgate(&home, args);
                assert_refused(&out, &what, &[&path_text, found]);
                assert_eq!(before, snapshot(&home), "{what}: the home changed");
            }
        }
    }
}

/// The home's queue, read and changed through the library (the database of `tollgate.db`).
fn queue_store(home: &Path) -> SqliteStore {
    SqliteStore::new(Home::at(home), Duration::from_secs(10), Durability::Fsync)
}

/// Turn `n` of `task` as JSON, read through the library (a row of tollgate.db).
fn turn_json(home: &Path, task: &str, n: u32) -> serde_json::Value {
    let record = tollgate::tasks::load_turn(&Home::at(home), &TurnKey::new(task, n))
        .expect("turn record")
        .expect("the turn has a record");
    serde_json::to_value(record).expect("json")
}

/// The task record of `task` as JSON (a row of tollgate.db), `None` when it has none.
fn task_json(home: &Path, task: &str) -> Option<serde_json::Value> {
    tollgate::tasks::load_task(&Home::at(home), task)
        .expect("task record")
        .map(|record| serde_json::to_value(record).expect("json"))
}

/// Rewrites (or, with `None`, deletes) the task record of `task` behind tollgate's back, as an
/// operator's `sqlite3` would.
fn set_task_row(home: &Path, task: &str, record: Option<&serde_json::Value>) {
    let db = rusqlite::Connection::open(home.join("tollgate.db")).expect("open the database");
    db.execute("DELETE FROM tasks WHERE name = ?1", [task])
        .expect("delete");
    if let Some(record) = record {
        db.execute(
            "INSERT INTO tasks (name, next_turn, body) VALUES (?1, ?2, ?3)",
            rusqlite::params![
                task,
                record["next_turn"].as_u64().expect("next_turn"),
                record.to_string()
            ],
        )
        .expect("insert");
    }
}

/// Issue 11, point 7: with `task.json` deleted, and again with `next_turn` rewound, the next turn
/// gets the first number after the highest recorded one; turn 1's record and output stay
/// byte-identical and a warning says what happened.
#[test]
fn a_deleted_or_rewound_task_record_never_lets_a_new_turn_overwrite_an_old_one() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = home_with_history(tmp.path());
    let turn1 = home.join("tasks/done/turns/1");
    let record = turn_json(&home, "done", 1);
    assert_eq!(
        std::fs::read_to_string(turn1.join("stdout.log")).expect("turn 1 output"),
        "one\n"
    );

    let task = task_json(&home, "done").expect("task record");
    set_task_row(&home, "done", None);
    let out = tollgate(
        &home,
        &["submit", "--task", "done", "--wait", "--", "echo", "two"],
    );
    assert!(out.status.success(), "{}", describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("already holds turn 1"),
        "the skip is not reported\n{}",
        describe(&out)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "two\n");
    assert_eq!(turn_json(&home, "done", 1), record);
    assert_eq!(
        std::fs::read_to_string(turn1.join("stdout.log")).expect("turn 1 output"),
        "one\n",
        "turn 1's output was appended to"
    );
    let turn2 = turn_json(&home, "done", 2);
    assert_eq!(turn2["argv"], serde_json::json!(["echo", "two"]));
    assert_eq!(task_json(&home, "done").expect("task")["next_turn"], 3);

    let mut task = task;
    task["next_turn"] = 1.into();
    set_task_row(&home, "done", Some(&task));
    let out = tollgate(
        &home,
        &["submit", "--task", "done", "--wait", "--", "echo", "three"],
    );
    assert!(out.status.success(), "{}", describe(&out));
    assert_eq!(turn_json(&home, "done", 1), record);
    let turn3 = turn_json(&home, "done", 3);
    assert_eq!(turn3["argv"], serde_json::json!(["echo", "three"]));
    assert_eq!(task_json(&home, "done").expect("task")["next_turn"], 4);
}

/// Issue 11, point 7: the turn counter's last value is used once; after it a submit is refused
/// (exit 2, naming the task file) and nothing is written, instead of every later submit reusing
/// the last turn.
#[test]
fn an_exhausted_turn_counter_refuses_new_turns_and_changes_nothing() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = home_with_history(tmp.path());
    let mut task = task_json(&home, "done").expect("task record");
    task["next_turn"] = (u32::MAX - 1).into();
    set_task_row(&home, "done", Some(&task));
    let out = tollgate(&home, &["submit", "--task", "done", "--wait", "--", "true"]);
    assert!(out.status.success(), "{}", describe(&out));
    assert_eq!(
        turn_json(&home, "done", u32::MAX - 1)["outcome"],
        "completed"
    );
    assert_eq!(
        task_json(&home, "done").expect("task")["next_turn"],
        u32::MAX
    );
    runner_done(&home, "done", u32::MAX - 1);

    let before = snapshot(&home);
    for args in [
        &["submit", "--task", "done", "--", "true"][..],
        &["submit", "--task", "done", "--attach", "--", "true"][..],
    ] {
        let out = tollgate(&home, args);
        let what = format!("{args:?} with next_turn = u32::MAX");
        assert_refused(
            &out,
            &what,
            &[
                &home.join("tollgate.db").display().to_string(),
                "tasks/done",
                "every turn number",
            ],
        );
        assert_eq!(before, snapshot(&home), "{what}: the home changed");
    }
}

/// Issue 11, point 7: a queue counter at its end refuses (QUEUE_IDS_EXHAUSTED, exit 2) instead of
/// wrapping to an id the loader refuses; the published queue is untouched and still loads.
#[test]
fn an_exhausted_queue_counter_is_refused_and_the_queue_still_loads() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = home_with_history(tmp.path());
    let store = queue_store(&home);
    store
        .transact(|queue| {
            assert_eq!(queue.entries, [], "{queue:?}");
            queue.next_queue_id = u64::MAX - 1;
            Ok::<_, StoreError>(())
        })
        .expect("set the counter");
    let out = tollgate(&home, &["submit", "--task", "done", "--wait", "--", "true"]);
    assert!(
        out.status.success(),
        "the last id is usable: {}",
        describe(&out)
    );
    assert_eq!(store.load().expect("queue").next_queue_id, u64::MAX);

    let queue_bytes = store.load().expect("queue");
    let out = tollgate(&home, &["submit", "--", "true"]);
    assert_refused(
        &out,
        "submit with next_queue_id = u64::MAX",
        &["QUEUE_IDS_EXHAUSTED"],
    );
    assert_eq!(store.load().expect("queue"), queue_bytes);
    let out = tollgate(&home, &["status"]);
    assert!(
        out.status.success(),
        "the queue must still load: {}",
        describe(&out)
    );
}

/// Issue 11, point 8: a parked row whose task folder is gone is removed by `reconcile`, which says
/// so and exits 0 (it used to try to start it, fail to open its runner log and exit 3, forever).
#[test]
fn reconcile_settles_a_row_whose_task_folder_is_gone_and_goes_on() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = home_with_history(tmp.path());
    let store = queue_store(&home);
    store
        .transact(|queue| {
            let next = queue.next_queue_id;
            queue.entries = vec![QueueEntry {
                queue_id: next,
                key: TurnKey::new("ghost", 1),
                enqueued_at_millis: 1_700_000_000_000,
                state: RowState::Parked,
                slot_reservation: None,
                ready_at_millis: 0,
                cancel_requested: false,
                priority: 0,
                after: Vec::new(),
            }];
            queue.next_queue_id = next + 1;
            Ok::<_, StoreError>(())
        })
        .expect("add a parked row");
    assert!(!home.join("tasks/ghost").exists());

    let out = tollgate(&home, &["reconcile"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("ghost turn 1") && stderr.contains("no record"),
        "the settled row is not reported\n{}",
        describe(&out)
    );
    assert_eq!(store.load().expect("queue").entries, []);
    assert!(
        !home.join("tasks/ghost").exists(),
        "the deleted task came back"
    );
    let out = tollgate(&home, &["reconcile"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "second reconcile: {}",
        describe(&out)
    );
    // The home works on: a new turn runs.
    let out = tollgate(&home, &["submit", "--wait", "--", "true"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
}

fn with_config(tmp: &Path, config: &[u8]) -> PathBuf {
    let home = home_with_history(tmp);
    std::fs::write(home.join("tollgate.toml"), config).expect("write config");
    home
}

/// Issue 11, point 11: an empty (or whitespace-only) config is refused, not read as defaults
/// (which would silently change `workers`); a config of comments only means the defaults.
#[test]
fn an_empty_config_is_refused_and_a_comment_only_one_means_defaults() {
    for empty in [&b""[..], b"\n  \n\t\n"] {
        let tmp = tempfile::tempdir().expect("tempdir");
        let home = with_config(tmp.path(), empty);
        let config = home.join("tollgate.toml").display().to_string();
        let before = snapshot(&home);
        for args in [
            &["status"][..],
            &["submit", "--", "true"][..],
            &["init"][..],
        ] {
            let out = tollgate(&home, args);
            let what = format!("config {empty:?}, {args:?}");
            assert_refused(&out, &what, &[&config, "empty"]);
            assert_eq!(before, snapshot(&home), "{what}: the home changed");
        }
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = with_config(tmp.path(), b"# all defaults\n");
    let out = tollgate(&home, &["status"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
}

/// Issue 11, point 11: `lock_timeout = "0s"` (every command would fail at the first contention)
/// and one beyond a day are refused naming the key.
#[test]
fn a_zero_or_huge_lock_timeout_is_refused() {
    for bad in ["0s", "0ms", "2days"] {
        let tmp = tempfile::tempdir().expect("tempdir");
        let config = format!("workers = 2\nlock_timeout = \"{bad}\"\n");
        let home = with_config(tmp.path(), config.as_bytes());
        let before = snapshot(&home);
        let out = tollgate(&home, &["status"]);
        assert_refused(
            &out,
            &format!("lock_timeout {bad}"),
            &[
                &home.join("tollgate.toml").display().to_string(),
                "`lock_timeout`",
            ],
        );
        assert_eq!(before, snapshot(&home));
    }
}

/// Issue 11, point 11: invalid UTF-8 in the config is bad input (exit 2, naming the file and the
/// byte), not an environment failure (exit 3).
#[test]
fn invalid_utf8_in_the_config_is_exit_2() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = with_config(tmp.path(), b"workers = 2\n# caf\xe9\n");
    let before = snapshot(&home);
    for args in [&["status"][..], &["submit", "--", "true"][..]] {
        let out = tollgate(&home, args);
        assert_refused(
            &out,
            &format!("invalid UTF-8, {args:?}"),
            &[
                &home.join("tollgate.toml").display().to_string(),
                "UTF-8",
                "byte 17",
            ],
        );
        assert_eq!(before, snapshot(&home));
    }
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).expect("stat").permissions().mode() & 0o777
}

/// Issue 11, point 11: `sweep.json` and `sweep.lock` are created 0600 and `worktrees/` 0700, like
/// every other file and folder of the home (the test runs under the usual 022 umask, which left
/// them 0644/0755 before).
#[test]
fn sweep_files_and_worktrees_are_private_like_the_rest_of_the_home() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = tmp.path().join("home");
    let out = tollgate(&home, &["init", "--workers", "1"]);
    assert!(out.status.success(), "{}", describe(&out));

    let pack_dir = tmp.path().join("pack");
    std::fs::create_dir(&pack_dir).expect("pack dir");
    std::fs::write(
        pack_dir.join("pack.toml"),
        "ceiling = \"60s\"\n\n[[item]]\nname = \"w\"\nshell = \"true\"\nworktree = true\n",
    )
    .expect("pack");
    let out = tollgate(
        &home,
        &["run", &pack_dir.join("pack.toml").display().to_string()],
    );
    assert!(out.status.success(), "run: {}", describe(&out));
    assert_eq!(mode(&home.join("worktrees")), 0o700, "worktrees/");

    let worktree = tmp.path().join("listed");
    std::fs::create_dir(&worktree).expect("worktree");
    tollgate::exec::sweep::add(
        &home,
        tollgate::exec::sweep::SweepEntry {
            worktree: tollgate::exec::worktree::Worktree {
                path: worktree.clone(),
                kind: tollgate::exec::worktree::WorktreeKind::Copy,
                pack_dir: worktree,
            },
            run_id: "r".to_string(),
            run_pid: std::process::id(),
            item: "w".to_string(),
            listed_at_millis: 1,
        },
    )
    .expect("list a worktree");
    // The list is rows of tollgate.db (spec/store.md, "The sweep list"); no sweep.json.
    assert!(!home.join("sweep.json").exists(), "sweep.json");
    assert_eq!(mode(&home.join("tollgate.db")), 0o600, "tollgate.db");
    let out = tollgate(&home, &["sweep"]);
    assert!(out.status.success(), "{}", describe(&out));
    assert_eq!(mode(&home.join("sweep.lock")), 0o600, "sweep.lock");
}

/// Issue 11, point 13 (the flaky `drop_strategy_refuses_a_second_submit_while_busy…`): a turn's
/// result used to be written before its runner left the queue, so `status` and `submit --wait`
/// could report it ended while its row still held the task, and the next submit of a `drop` task
/// was refused with "turn N is running". Recording and leaving are one critical section now: each
/// submit right after the previous `--wait` returned runs (the old window was short, so this loop
/// failed only under load; the fix removes the window rather than narrowing it).
#[test]
fn a_drop_task_is_free_as_soon_as_submit_wait_reports_its_turn_ended() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = tmp.path().join("home");
    let out = tollgate(&home, &["init", "--workers", "2"]);
    assert!(out.status.success(), "{}", describe(&out));
    for i in 0..20 {
        let mut args = vec!["submit", "--task", "d"];
        if i == 0 {
            args.extend(["--strategy", "drop"]);
        }
        args.extend(["--wait", "--", "true"]);
        let out = tollgate(&home, &args);
        assert_eq!(out.status.code(), Some(0), "submit {i}: {}", describe(&out));
    }
}
