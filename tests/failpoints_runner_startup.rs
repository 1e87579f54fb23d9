//! A cancel that reaches a runner still starting up (spawned, its SIGTERM handler not installed
//! yet) must not kill it by the default action: the spawner blocks SIGTERM in the runner until the
//! handler is in place, the signal stays pending, and the runner honours the cancel at its
//! take-over, recording the turn cancelled without any other command running.
//!
//! Before the fix, the runner died of the signal; its row stayed with a dead process until a later
//! command's repair settled it, so the last cancel of a series stayed unsettled (CI saw
//! `cancel_unit::a_turn_recorded_cancelled_never_ran_to_its_end` fail that way).
//!
//! The window is held open by the failpoint `runner::before_signals(GATE)`: the runner writes its
//! pid to `GATE.waiting` and waits until `GATE` exists. Run with
//! `cargo test --features failpoints --test failpoints_runner_startup`.
#![cfg(feature = "failpoints")]

mod common;

use common::containment::is_alive;
use common::failpoints::{ok as tollgate, settled, wait_until};
use tollgate::protocol::slots::TurnKey;
use tollgate::tasks::TurnOutcome;

#[test]
fn failpoints_a_cancel_before_the_runner_handles_signals_is_honoured_not_fatal() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = common::init_home(dir.path(), 1);
    let gate = dir.path().join("gate");
    let waiting = gate.with_extension("waiting");
    let marker = dir.path().join("ran");
    let failpoints = format!("runner::before_signals=return({})", gate.display());
    let script = format!("echo ran > {}", marker.display());
    tollgate(
        &home,
        Some(&failpoints),
        &["submit", "--task", "early", "--", "sh", "-c", &script],
    );
    wait_until("the runner to reach the failpoint", || waiting.exists());
    let pid: i32 = std::fs::read_to_string(&waiting)
        .expect("runner pid")
        .trim()
        .parse()
        .expect("a pid");
    tollgate(&home, None, &["cancel", "early"]);
    // The SIGTERM was sent to the starting runner (its bound child); it must still live.
    assert!(
        is_alive(pid),
        "the runner {pid} died of a cancel's SIGTERM before it could handle it"
    );
    std::fs::write(&gate, b"open").expect("open the gate");
    let turn = settled(&home, &TurnKey::new("early", 1));
    assert_eq!(turn.outcome, Some(TurnOutcome::Cancelled), "{turn:?}");
    assert!(!marker.exists(), "the cancelled command ran");
    wait_until("the runner to exit", || !is_alive(pid));
}
