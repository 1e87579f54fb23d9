//! S13: a cancel signals only a turn's executor, never a dispatcher handing its row off. Issue 31,
//! point 1: `cancel x` while `resume` was between spawning x's runner and its first publish sent
//! SIGTERM to `resume` (the row's acting holder), which died with exit 143; the turn then showed
//! `orphaned` and held the slot until a `reconcile`.
//!
//! The dispatcher (`resume`, starting a row parked while the home was paused) is held after its
//! spawn by the failpoint `dispatch::after_spawn(GATE)`, and the runner it spawned before its
//! take-over by `runner::before_signals(GATE)` (both gates publish their pid in `GATE.waiting` and
//! wait for `GATE`). The cancel must signal nobody and record the request; once the gates open,
//! `resume` ends normally and the runner honours the cancel, with no other command.
//! Run with `cargo test --features failpoints --test failpoints_cancel_dispatcher`.
#![cfg(feature = "failpoints")]

mod common;

use common::containment::is_alive;
use common::describe;
use common::failpoints::{ok, settled, wait_until};
use std::process::{Command, Stdio};
use tollgate::home::Home;
use tollgate::protocol::slots::TurnKey;
use tollgate::tasks::TurnOutcome;

#[test]
fn failpoints_s13_a_cancel_during_a_dispatchers_handoff_signals_nobody_and_is_honoured() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = common::init_home(dir.path(), 1);
    let (dispatcher_gate, runner_gate) = (dir.path().join("resume"), dir.path().join("runner"));
    let marker = dir.path().join("ran");
    ok(&home, None, &["pause"]);
    let script = format!("echo ran > {}", marker.display());
    ok(
        &home,
        None,
        &["submit", "--task", "x", "--", "sh", "-c", &script],
    );
    let failpoints = format!(
        "dispatch::after_spawn=return({});runner::before_signals=return({})",
        dispatcher_gate.display(),
        runner_gate.display()
    );
    let resume = Command::new(common::BIN)
        .arg("--home")
        .arg(&home)
        .arg("resume")
        .env("FAILPOINTS", &failpoints)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start resume");
    let resume_pid = resume.id() as i32;
    for gate in [&dispatcher_gate, &runner_gate] {
        wait_until("the dispatcher and its runner to reach their gates", || {
            gate.with_extension("waiting").exists()
        });
    }
    let cancel = ok(&home, None, &["cancel", "x", "--json"]);
    let answer: serde_json::Value = serde_json::from_slice(&cancel.stdout).expect("cancel json");
    assert_eq!(
        answer["signalled"],
        serde_json::json!([]),
        "a dispatcher mid-handoff was signalled: {}",
        describe(&cancel)
    );
    assert_eq!(answer["recorded"], serde_json::json!([1]), "{answer}");
    assert!(is_alive(resume_pid), "resume died of the cancel");
    for gate in [&dispatcher_gate, &runner_gate] {
        std::fs::write(gate, b"open").expect("open the gate");
    }
    let resumed = resume.wait_with_output().expect("wait for resume");
    assert!(
        resumed.status.success(),
        "resume did not end normally: {}",
        describe(&resumed)
    );
    let turn = settled(&home, &TurnKey::new("x", 1));
    assert_eq!(turn.outcome, Some(TurnOutcome::Cancelled), "{turn:?}");
    assert!(!marker.exists(), "the cancelled command ran");
    // The slot is free again without a reconcile (read directly: `status` would repair): the
    // runner left the queue by its finishing section.
    let config = tollgate::config::Config::load(&home.join("tollgate.toml"))
        .expect("config")
        .unwrap_or_default();
    let store = tollgate::queue::HomeStore::for_home(&Home::at(&home), &config);
    wait_until("the row to leave the queue", || {
        store.load().expect("load the queue").entries.is_empty()
    });
}
