//! Task strategies end to end, through the real binary and detached runners (spec/admission.md).
//! Turns are held running by a fifo the test opens when it is ready, so nothing is ordered by
//! sleeping.

mod common;

use common::fifo::{gate, release};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

struct Home {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

fn home(workers: usize) -> Home {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("home");
    let out = tollgate(&path, &["init", "--workers", &workers.to_string()]);
    assert!(out.status.success(), "{out:?}");
    Home { _dir: dir, path }
}

fn tollgate(home: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .arg("--home")
        .arg(home)
        .args(args)
        .output()
        .unwrap()
}

fn status(home: &Path, task: &str) -> Value {
    let out = tollgate(home, &["status", task, "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn turn_states(home: &Path, task: &str) -> Vec<String> {
    status(home, task)["tasks"][0]["turns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["state"].as_str().unwrap().to_string())
        .collect()
}

/// Polls `done` (reading tollgate's observable state) until it holds, for at most `secs`.
fn wait_until(secs: u64, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(25));
    }
}

#[test]
fn queue_strategy_runs_the_first_and_the_last_and_supersedes_the_rest() {
    let h = home(4);
    let hold = gate(h.path.parent().unwrap(), "hold-q");
    let first = tollgate(
        &h.path,
        &[
            "submit",
            "--task",
            "q",
            "--strategy",
            "queue",
            "--",
            "cat",
            hold.to_str().unwrap(),
        ],
    );
    assert!(first.status.success(), "{first:?}");
    wait_until(20, "turn 1 running", || {
        turn_states(&h.path, "q")[0] == "running"
    });
    for i in 2..=5 {
        let out = tollgate(
            &h.path,
            &["submit", "--task", "q", "--", "echo", &i.to_string()],
        );
        assert!(out.status.success(), "{out:?}");
    }
    assert_eq!(
        turn_states(&h.path, "q"),
        [
            "running",
            "superseded",
            "superseded",
            "superseded",
            "queued"
        ]
    );
    release(&hold);
    wait_until(30, "turn 5 completed", || {
        turn_states(&h.path, "q")[4] == "completed"
    });
    assert_eq!(
        turn_states(&h.path, "q"),
        [
            "completed",
            "superseded",
            "superseded",
            "superseded",
            "completed"
        ]
    );
}

#[test]
fn drop_strategy_refuses_a_second_submit_while_busy_with_exit_code_4() {
    let h = home(4);
    let hold = gate(h.path.parent().unwrap(), "hold-d");
    let first = tollgate(
        &h.path,
        &[
            "submit",
            "--task",
            "d",
            "--strategy",
            "drop",
            "--",
            "cat",
            hold.to_str().unwrap(),
        ],
    );
    assert!(first.status.success(), "{first:?}");
    wait_until(20, "turn 1 running", || {
        turn_states(&h.path, "d")[0] == "running"
    });
    let second = tollgate(&h.path, &["submit", "--task", "d", "--", "true"]);
    assert_eq!(second.status.code(), Some(4), "{second:?}");
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(stderr.contains("turn 1 is running"), "{stderr}");
    assert_eq!(turn_states(&h.path, "d")[1], "dropped");
    release(&hold);
    wait_until(30, "turn 1 completed", || {
        turn_states(&h.path, "d")[0] == "completed"
    });
    // Idle again: the next submit runs.
    let third = tollgate(&h.path, &["submit", "--task", "d", "--wait", "--", "true"]);
    assert_eq!(third.status.code(), Some(0), "{third:?}");
}

/// `drop` takes no new turn while one of the task is in the queue, running or not: here the first
/// turn waits for the only worker slot, and the refusal says so instead of calling it running.
#[test]
fn drop_refuses_beside_a_turn_waiting_for_a_slot_and_says_it_waits() {
    let h = home(1);
    let hold = gate(h.path.parent().unwrap(), "hold-slot");
    let other = tollgate(
        &h.path,
        &[
            "submit",
            "--task",
            "other",
            "--",
            "cat",
            hold.to_str().unwrap(),
        ],
    );
    assert!(other.status.success(), "{other:?}");
    wait_until(20, "the other task's turn running", || {
        turn_states(&h.path, "other")[0] == "running"
    });
    let first = tollgate(
        &h.path,
        &["submit", "--task", "d", "--strategy", "drop", "--", "true"],
    );
    assert!(first.status.success(), "{first:?}");
    assert_eq!(turn_states(&h.path, "d"), ["queued"]);
    let second = tollgate(&h.path, &["submit", "--task", "d", "--", "true"]);
    assert_eq!(second.status.code(), Some(4), "{second:?}");
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(
        stderr.contains("turn 1 is waiting for a worker slot"),
        "{stderr}"
    );
    assert!(!stderr.contains("is running"), "{stderr}");
    let json = tollgate(&h.path, &["submit", "--task", "d", "--json", "--", "true"]);
    assert_eq!(json.status.code(), Some(4), "{json:?}");
    let answer: Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(answer["busy"], "waiting_for_slot", "{answer}");
    release(&hold);
    wait_until(30, "turn 1 of d completed", || {
        turn_states(&h.path, "d")[0] == "completed"
    });
    assert_eq!(
        turn_states(&h.path, "d"),
        ["completed", "dropped", "dropped"]
    );
}

/// A foreground (`--attach`) turn honours its task's running limit: beside a running turn of a
/// `concurrent=1` task it waits, says so, and starts only once that turn ended.
#[test]
fn attach_waits_for_the_running_turn_of_a_concurrent_one_task() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    let h = home(4);
    let dir = h.path.parent().unwrap().to_path_buf();
    let hold = gate(&dir, "hold-a");
    let done1 = dir.join("done1");
    let first_cmd = format!("cat {} && touch {}", hold.display(), done1.display());
    let first = tollgate(
        &h.path,
        &[
            "submit",
            "--task",
            "c",
            "--strategy",
            "concurrent=1",
            "--",
            "sh",
            "-c",
            &first_cmd,
        ],
    );
    assert!(first.status.success(), "{first:?}");
    wait_until(20, "turn 1 running", || {
        turn_states(&h.path, "c")[0] == "running"
    });
    // The attached turn succeeds only if turn 1 had ended when its command started.
    let second_cmd = format!("test -e {}", done1.display());
    let mut attached = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .arg("--home")
        .arg(&h.path)
        .args([
            "submit",
            "--task",
            "c",
            "--attach",
            "--",
            "sh",
            "-c",
            &second_cmd,
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = attached.stderr.take().unwrap();
    let (lines_tx, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = lines_tx.send(line);
        }
    });
    let waits = lines
        .recv_timeout(Duration::from_secs(20))
        .expect("the attached submit said nothing");
    assert!(waits.contains("turn 2 waits: turn 1 is active"), "{waits}");
    assert_eq!(turn_states(&h.path, "c")[0], "running");
    release(&hold);
    let status = attached.wait().unwrap();
    assert_eq!(
        status.code(),
        Some(0),
        "the attached turn ran beside turn 1"
    );
    assert_eq!(turn_states(&h.path, "c"), ["completed", "completed"]);
}

#[test]
fn concurrent_two_never_shows_three_running_turns() {
    let h = home(4);
    let dir = h.path.parent().unwrap().to_path_buf();
    let holds: Vec<PathBuf> = (1..=4).map(|i| gate(&dir, &format!("hold-c{i}"))).collect();
    for (i, hold) in holds.iter().enumerate() {
        let mut args = vec!["submit", "--task", "c"];
        if i == 0 {
            args.extend(["--strategy", "concurrent=2"]);
        }
        args.extend(["--", "cat", hold.to_str().unwrap()]);
        let out = tollgate(&h.path, &args);
        assert!(out.status.success(), "{out:?}");
    }
    let running = |h: &Home| {
        turn_states(&h.path, "c")
            .iter()
            .filter(|s| *s == "running" || *s == "starting")
            .count()
    };
    wait_until(20, "two running", || running(&h) == 2);
    let mut max_running = 0;
    for hold in &holds {
        max_running = max_running.max(running(&h));
        release(hold);
        max_running = max_running.max(running(&h));
    }
    wait_until(30, "all completed", || {
        turn_states(&h.path, "c").iter().all(|s| s == "completed")
    });
    assert!(
        max_running <= 2,
        "saw {max_running} running turns of a concurrent=2 task"
    );
}

#[test]
fn debounce_starts_only_the_last_turn_after_the_quiet_period() {
    let h = home(2);
    for i in 1..=3 {
        let mut args = vec!["submit", "--task", "b"];
        if i == 1 {
            args.extend(["--strategy", "debounce=300ms"]);
        }
        let n = i.to_string();
        args.extend(["--", "echo", n.as_str()]);
        let out = tollgate(&h.path, &args);
        assert!(out.status.success(), "{out:?}");
    }
    wait_until(30, "the debounced turn completed", || {
        turn_states(&h.path, "b")[2] == "completed"
    });
    assert_eq!(
        turn_states(&h.path, "b"),
        ["superseded", "superseded", "completed"]
    );
    let logs = tollgate(&h.path, &["logs", "b"]);
    assert_eq!(String::from_utf8_lossy(&logs.stdout), "3\n");
}

#[test]
fn a_bad_strategy_is_refused_and_changes_nothing() {
    let h = home(1);
    for bad in ["sometimes", "concurrent=0", "debounce=soon", "concurrent=x"] {
        let out = tollgate(
            &h.path,
            &["submit", "--task", "x", "--strategy", bad, "--", "true"],
        );
        assert_eq!(out.status.code(), Some(2), "{bad}: {out:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("--strategy"),
            "{out:?}"
        );
    }
    assert!(!h.path.join("tasks/x").exists());
}
