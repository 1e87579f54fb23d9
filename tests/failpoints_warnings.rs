//! A warning the library logs reaches the operator: a CLI command's on its stderr, a detached
//! runner's in its turn's `runner.log` (src/cli/logging.rs). Before, only `serve` installed a
//! subscriber and every other command dropped its warnings unseen.
//!
//! The warning used is a failpoint gate's own (src/failgate.rs): a gate that is open (its file
//! exists, so nothing is held) but whose `GATE.waiting` cannot be written, because a directory
//! stands where the gate writes it first. `dispatch::after_spawn` is reached by `submit`, the
//! dispatcher; `runner::before_signals` by the runner it spawns.
//! Run with `cargo test --features failpoints --test failpoints_warnings`.
#![cfg(feature = "failpoints")]

mod common;

use common::failpoints::{settled, tollgate, wait_until};
use std::path::Path;
use tollgate::protocol::slots::TurnKey;

/// An open gate at `gate` whose pid file cannot be written.
fn unwritable_gate(gate: &Path) {
    std::fs::write(gate, b"").expect("the gate is open");
    std::fs::create_dir(gate.with_extension("waiting.partial")).expect("block the pid file");
}

#[test]
fn warnings_of_a_command_reach_its_stderr_and_a_runners_reach_its_runner_log() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = common::init_home(dir.path(), 1);
    let (dispatcher, runner) = (dir.path().join("dispatcher"), dir.path().join("runner"));
    unwritable_gate(&dispatcher);
    unwritable_gate(&runner);
    let failpoints = format!(
        "dispatch::after_spawn=return({});runner::before_signals=return({})",
        dispatcher.display(),
        runner.display()
    );
    let out = tollgate(
        &home,
        Some(&failpoints),
        &["submit", "--task", "w", "--", "true"],
    );
    assert!(out.status.success(), "{}", common::describe(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("failpoint dispatch::after_spawn: cannot write"),
        "submit's warning is on its stderr: {stderr:?}"
    );
    assert!(
        !stderr.contains("runner::before_signals"),
        "the runner's warning is not on submit's stderr: {stderr:?}"
    );
    let key = TurnKey::new("w", 1);
    settled(&home, &key);
    let log = home.join("tasks/w/turns/1/runner.log");
    wait_until("the runner's warning in its runner.log", || {
        std::fs::read_to_string(&log)
            .is_ok_and(|text| text.contains("failpoint runner::before_signals: cannot write"))
    });
}

#[test]
fn tollgate_log_sets_the_filter_and_off_silences_the_warnings() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = common::init_home(dir.path(), 1);
    let dispatcher = dir.path().join("dispatcher");
    unwritable_gate(&dispatcher);
    let out = std::process::Command::new(common::BIN)
        .arg("--home")
        .arg(&home)
        .args(["submit", "--task", "w", "--", "true"])
        .env(
            "FAILPOINTS",
            format!("dispatch::after_spawn=return({})", dispatcher.display()),
        )
        .env("TOLLGATE_LOG", "off")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run tollgate");
    assert!(out.status.success(), "{}", common::describe(&out));
    assert!(
        out.stderr.is_empty(),
        "TOLLGATE_LOG=off: {:?}",
        String::from_utf8_lossy(&out.stderr)
    );
}
