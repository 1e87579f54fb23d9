//! A turn whose runner was SIGKILLed: `status` calls it orphaned and says how to repair it, and
//! `logs --follow` ends with a message instead of following forever.

mod common;

use common::{describe, tollgate, BIN};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn a_dead_runner_is_shown_orphaned_and_follow_ends_with_a_reason() {
    let home = tempfile::tempdir().expect("tempdir");
    let home = home.path();
    let out = tollgate(home, &["submit", "--task", "victim", "--", "sleep", "30"]);
    assert!(out.status.success(), "{}", describe(&out));
    // The runner is recorded once it has taken its slot over.
    let deadline = Instant::now() + Duration::from_secs(20);
    let runner_pid = loop {
        let json = tollgate(home, &["status", "--json"]);
        let value: serde_json::Value = serde_json::from_slice(&json.stdout).expect("json");
        if let Some(pid) = value["runners"][0]["identity"]["pid"].as_i64() {
            break pid;
        }
        assert!(
            Instant::now() < deadline,
            "no runner recorded: {}",
            describe(&json)
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(runner_pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("kill runner");
    // Gone from /proc once its parent (init or a subreaper) reaped it.
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::fs::read_to_string(format!("/proc/{runner_pid}/stat"))
        .is_ok_and(|s| !s.contains(") Z "))
    {
        assert!(Instant::now() < deadline, "runner {runner_pid} did not die");
        std::thread::sleep(Duration::from_millis(10));
    }
    // `logs --follow` first: `status` repairs after it reports (a bounded reconcile step), and
    // would start the turn again.
    let started = Instant::now();
    let follow = Command::new(BIN)
        .arg("--home")
        .arg(home)
        .args(["logs", "victim", "--follow"])
        .stdin(Stdio::null())
        .output()
        .expect("logs --follow");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "follow must end promptly, took {:?}",
        started.elapsed()
    );
    assert_eq!(follow.status.code(), Some(3), "{}", describe(&follow));
    let stderr = String::from_utf8_lossy(&follow.stderr);
    assert!(
        stderr.contains("is gone") && stderr.contains("tollgate reconcile"),
        "{}",
        describe(&follow)
    );
    let status = tollgate(home, &["status"]);
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(
        text.lines()
            .any(|l| l.split_whitespace().nth(1) == Some("victim") && l.contains("orphaned")),
        "{text}"
    );
    assert!(text.contains("`tollgate reconcile` repairs them"), "{text}");

    // Repair, so nothing is left behind by the test.
    let _ = tollgate(home, &["cancel", "victim"]);
    let _ = tollgate(home, &["reconcile"]);
}
