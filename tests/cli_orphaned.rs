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

/// A runner SIGKILLed while its turn runs: `reconcile` says what it did in words that add up
/// (the work killed, the turn run again, a closing count instead of a bare "nothing to
/// repair"), and the re-run's log marks where the earlier run's output ends.
#[test]
fn a_turn_run_again_by_reconcile_marks_the_rerun_in_its_log() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = common::init_home(dir.path(), 1);
    let gate = common::fifo::gate(dir.path(), "gate");
    let _cancel = common::CancelOnDrop {
        home: home.clone(),
        task: "rerun".to_string(),
    };
    let script = format!("echo start; cat '{}'", gate.display());
    let out = tollgate(
        &home,
        &["submit", "--task", "rerun", "--", "sh", "-c", &script],
    );
    assert!(out.status.success(), "{}", describe(&out));
    // The first run has printed its line (the runner copied it into the log).
    let log = home.join("tasks/rerun/turns/1/stdout.log");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !std::fs::read_to_string(&log).is_ok_and(|t| t == "start\n") {
        assert!(Instant::now() < deadline, "the first run never printed");
        std::thread::sleep(Duration::from_millis(10));
    }
    let json = tollgate(&home, &["status", "--json"]);
    let value: serde_json::Value = serde_json::from_slice(&json.stdout).expect("json");
    let runner_pid = value["runners"][0]["identity"]["pid"]
        .as_i64()
        .expect("a recorded runner") as i32;
    common::containment::sigkill(runner_pid);
    let deadline = Instant::now() + Duration::from_secs(10);
    while common::containment::is_alive(runner_pid) {
        assert!(Instant::now() < deadline, "runner {runner_pid} did not die");
        std::thread::sleep(Duration::from_millis(10));
    }
    let rec = tollgate(&home, &["reconcile"]);
    assert!(rec.status.success(), "{}", describe(&rec));
    let said = String::from_utf8_lossy(&rec.stdout);
    assert!(
        said.contains("killed what was left of its command")
            && said.contains(&format!(
                "its runner (pid {runner_pid}) died before the turn ended: runs it again"
            ))
            && said
                .lines()
                .last()
                .is_some_and(|l| l.starts_with("done: 2 repair(s)")),
        "{said}"
    );
    assert!(!said.contains("nothing to repair"), "{said}");
    // The second run prints its line, then ends once the gate opens.
    common::fifo::release(&gate);
    let waited = tollgate(&home, &["wait", "rerun"]);
    assert!(waited.status.success(), "{}", describe(&waited));
    let logs = tollgate(&home, &["logs", "rerun"]);
    assert_eq!(
        String::from_utf8_lossy(&logs.stdout),
        format!("start\n{}\nstart\n", tollgate::runner::RERUN_MARK),
        "{}",
        describe(&logs)
    );
    // Nothing to do now, and it says so alone.
    let idle = tollgate(&home, &["reconcile"]);
    assert_eq!(String::from_utf8_lossy(&idle.stdout), "nothing to repair\n");
}
