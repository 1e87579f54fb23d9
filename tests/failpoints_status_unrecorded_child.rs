//! A dispatcher that dies after spawning its turn's runner but before recording it (the handoff's
//! first publish) leaves a reservation whose only live holder is that unrecorded child, which
//! adopts the slot when it starts. `status` and `wait` must call such a turn `starting`, not
//! `orphaned` ("its runner is gone"): the turn runs and completes by itself.
//!
//! The dispatcher (here `resume`, starting a row parked while the home was paused) dies at the
//! failpoint `dispatch::after_spawn` (`panic`); the runner is held
//! before its take-over by `runner::before_signals(GATE)`. Run with
//! `cargo test --features failpoints --test failpoints_status_unrecorded_child`.
#![cfg(feature = "failpoints")]

mod common;

use common::{describe, BIN};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tollgate::home::Home;
use tollgate::protocol::slots::TurnKey;
use tollgate::tasks::{self, TurnOutcome};

/// Polls `ready` every 5 ms for at most 20 s.
fn wait_until(what: &str, mut ready: impl FnMut() -> bool) {
    let until = Instant::now() + Duration::from_secs(20);
    while !ready() {
        assert!(Instant::now() < until, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn state_word(home: &Path, key: &TurnKey) -> String {
    let config = tollgate::config::Config::load(&home.join("tollgate.toml"))
        .expect("config")
        .unwrap_or_default();
    let view = Home::at(home);
    let queue = tollgate::queue::HomeStore::for_home(&view, &config)
        .load()
        .expect("load the queue");
    let turn = tasks::load_turn(&view, key)
        .expect("turn record")
        .expect("the turn has a record");
    tollgate::status::turn_state(
        &queue,
        &turn,
        &tollgate::process::ProcLiveness,
        tollgate::clock::now_millis(),
    )
    .to_string()
}

#[test]
fn failpoints_a_turn_whose_dispatcher_died_before_recording_its_runner_is_starting_not_orphaned() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = common::init_home(dir.path(), 1);
    let gate = dir.path().join("gate");
    let waiting = gate.with_extension("waiting");
    let failpoints = format!(
        "dispatch::after_spawn=panic;runner::before_signals=return({})",
        gate.display()
    );
    let tollgate = |args: &[&str], failpoints: Option<&str>| {
        let mut command = Command::new(BIN);
        command
            .arg("--home")
            .arg(&home)
            .args(args)
            .env_remove("FAILPOINTS")
            .stdin(Stdio::null());
        if let Some(failpoints) = failpoints {
            command.env("FAILPOINTS", failpoints);
        }
        command.output().expect("run tollgate")
    };
    // Parked while the home is paused; `resume` then starts it, and dies after the spawn.
    for args in [&["pause"][..], &["submit", "--task", "job", "--", "true"]] {
        let out = tollgate(args, None);
        assert!(out.status.success(), "{args:?}: {}", describe(&out));
    }
    let resume = tollgate(&["resume"], Some(&failpoints));
    assert!(
        !resume.status.success(),
        "the failpoint did not stop the dispatcher: {}",
        describe(&resume)
    );
    wait_until("the runner to reach its gate", || waiting.exists());
    let key = TurnKey::new("job", 1);
    assert_eq!(
        state_word(&home, &key),
        "starting",
        "the unrecorded runner is alive and will adopt the slot"
    );
    std::fs::write(&gate, b"open").expect("open the gate");
    let out = Command::new(BIN)
        .arg("--home")
        .arg(&home)
        .args(["wait", "job"])
        .env_remove("FAILPOINTS")
        .stdin(Stdio::null())
        .output()
        .expect("run wait");
    assert!(out.status.success(), "{}", describe(&out));
    let turn = tasks::load_turn(&Home::at(&home), &key)
        .expect("turn record")
        .expect("record");
    assert_eq!(turn.outcome, Some(TurnOutcome::Completed), "{turn:?}");
}
