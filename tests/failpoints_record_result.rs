//! Issue 11, point 10: a full disk while a runner records its result loses nothing. The
//! `tasks::save_result` failpoint fails the write of the result with ENOSPC; the runner retries
//! with backoff, keeps its slot, shows the turn as `recording` in `status`, records the result once
//! when space returns, and the command never runs again. Run with
//! `cargo test --features failpoints --test failpoints_record_result`.
#![cfg(feature = "failpoints")]

mod common;

use common::describe;
use common::failpoints::{status, tollgate};
use std::path::Path;
use std::time::{Duration, Instant};

fn turn_state(view: &serde_json::Value) -> String {
    view["tasks"][0]["turns"][0]["state"]
        .as_str()
        .expect("a turn state")
        .to_string()
}

/// Polls `status` until `done` holds, for at most 30 s.
fn wait_for(
    home: &Path,
    what: &str,
    done: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let view = status(home);
        if done(&view) {
            return view;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}: {view:#}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn init(tmp: &Path) -> std::path::PathBuf {
    let home = tmp.join("home");
    let out = tollgate(&home, None, &["init", "--workers", "1"]);
    assert!(out.status.success(), "{}", describe(&out));
    home
}

/// The command appends one line per run to `marker`.
fn counting_command(marker: &Path) -> Vec<String> {
    vec![
        "sh".to_string(),
        "-c".to_string(),
        format!("echo ran >> '{}'", marker.display()),
    ]
}

fn runs(marker: &Path) -> usize {
    std::fs::read_to_string(marker).map_or(0, |text| text.lines().count())
}

#[test]
fn failpoint_enospc_three_times_then_the_result_is_recorded_once_and_the_command_ran_once() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = init(tmp.path());
    let marker = tmp.path().join("runs");
    let mut args = vec!["submit", "--task", "r", "--wait", "--"];
    let command = counting_command(&marker);
    args.extend(command.iter().map(String::as_str));
    let out = tollgate(&home, Some("tasks::save_result=3*return"), &args);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert_eq!(runs(&marker), 1, "the command ran more than once");

    // `--wait` returns once the result is on disk; the runner has left the queue once it logs
    // its end (status reads without the lock, so it is asked only then).
    let log = runner_log_when_ended(&home);
    assert!(log.contains("the disk is full"), "{log}");
    assert!(log.contains("after 3 attempt(s)"), "{log}");
    let view = status(&home);
    assert_eq!(turn_state(&view), "completed", "{view:#}");
    assert_eq!(view["tasks"][0]["turns"].as_array().map(Vec::len), Some(1));
    assert_eq!(
        view["rows"],
        serde_json::json!([]),
        "the row left the queue"
    );
    assert!(!home.join("tasks/r/turns/1/result.pending").exists());
    // Nothing is left for reconcile to repeat.
    let out = tollgate(&home, None, &["reconcile"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert_eq!(runs(&marker), 1, "reconcile ran the command again");
}

#[test]
fn failpoint_enospc_while_a_gate_file_exists_keeps_the_slot_and_shows_recording() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = init(tmp.path());
    let marker = tmp.path().join("runs");
    let disk_full = tmp.path().join("disk-full");
    std::fs::write(&disk_full, b"").expect("gate");
    let failpoints = format!("tasks::save_result=return({})", disk_full.display());
    let mut args = vec!["submit", "--task", "r", "--"];
    let command = counting_command(&marker);
    args.extend(command.iter().map(String::as_str));
    let out = tollgate(&home, Some(&failpoints), &args);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));

    // The command has run; its result cannot be written: the turn is `recording`, its runner
    // alive and its slot occupied.
    let view = wait_for(&home, "the turn to show recording", |v| {
        turn_state(v) == "recording"
    });
    assert_eq!(runs(&marker), 1);
    assert_eq!(view["occupied"], 1, "the slot must stay occupied: {view:#}");
    assert_eq!(view["rows"][0]["state"], "dispatching", "{view:#}");
    // A reconcile meanwhile neither steals the row nor runs the command again.
    let out = tollgate(&home, None, &["reconcile"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert_eq!(turn_state(&status(&home)), "recording");
    assert_eq!(runs(&marker), 1, "reconcile ran the command again");
    // The table a person reads says `recording` too (issue 31, point 10: it said `unknown`).
    let table = tollgate(&home, None, &["status"]);
    let text = String::from_utf8_lossy(&table.stdout);
    let line = text
        .lines()
        .find(|l| l.split_whitespace().any(|w| w == "r"))
        .unwrap_or_else(|| panic!("no line of task r in:\n{text}"));
    assert!(
        line.split_whitespace().any(|w| w == "recording"),
        "the table's state is not `recording`: {line}\n{text}"
    );

    // Space returns: the result is recorded once and the slot freed.
    std::fs::remove_file(&disk_full).expect("free the disk");
    let view = wait_for(&home, "the turn to complete", |v| {
        turn_state(v) == "completed" && v["rows"] == serde_json::json!([])
    });
    assert_eq!(view["occupied"], 0, "{view:#}");
    assert_eq!(runs(&marker), 1, "the command ran more than once");
    let turn: serde_json::Value = serde_json::to_value(
        tollgate::tasks::load_turn(
            &tollgate::home::Home::at(&home),
            &tollgate::protocol::slots::TurnKey::new("r", 1),
        )
        .expect("turn record")
        .expect("the turn has a record"),
    )
    .expect("json");
    assert_eq!(turn["outcome"], "completed");
    assert_eq!(turn["exit_code"], 0);
    // The runner removes its marker before it logs its end (and the marker only counts while the
    // turn has no result).
    let text = runner_log_when_ended(&home);
    assert!(!home.join("tasks/r/turns/1/result.pending").exists());
    assert!(text.contains("the disk is full"), "{text}");
}

/// The runner log of `r` turn 1 once the runner has logged its end (bounded poll).
fn runner_log_when_ended(home: &Path) -> String {
    let log = home.join("tasks/r/turns/1/runner.log");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("ran, outcome") {
            return text;
        }
        assert!(Instant::now() < deadline, "the runner never ended: {text}");
        std::thread::sleep(Duration::from_millis(20));
    }
}
