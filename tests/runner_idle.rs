//! A runner waiting for its command sleeps on events (the command's pidfd, the signal handler's
//! self-pipe), not on a poll: over a 2-second window of a running `sleep`, its threads together
//! wake a handful of times (the 1 s safety tick), where the former 10 ms poll woke ~200 times.
//! Its end and a cancel still wake it at once (the other tests of turns and cancels show both).

mod common;

use common::{describe, init_home, tollgate};
use std::time::Duration;

/// Voluntary context switches of every thread of `pid`, from `/proc/PID/task/*/status`.
fn wakeups(pid: u64) -> u64 {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("runner threads");
    tasks
        .filter_map(|t| t.ok())
        .filter_map(|t| std::fs::read_to_string(t.path().join("status")).ok())
        .flat_map(|status| {
            status
                .lines()
                .filter_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
                .filter_map(|v| v.trim().parse::<u64>().ok())
                .collect::<Vec<_>>()
        })
        .sum()
}

#[test]
fn a_runner_waiting_for_its_command_does_not_poll() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = init_home(dir.path(), 1);
    let out = tollgate(&home, &["submit", "--task", "idle", "--", "sleep", "60"]);
    assert!(out.status.success(), "{}", describe(&out));
    let status = tollgate(&home, &["status", "--json"]);
    let view: serde_json::Value = serde_json::from_slice(&status.stdout).expect("status json");
    let pid = view["runners"][0]["identity"]["pid"]
        .as_u64()
        .expect("the runner's pid");
    // The runner is past its start once the command's leader is recorded (status says running).
    let until = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let status = tollgate(&home, &["status", "--json"]);
        let view: serde_json::Value = serde_json::from_slice(&status.stdout).expect("json");
        if view["tasks"][0]["turns"][0]["state"] == "running" {
            break;
        }
        assert!(std::time::Instant::now() < until, "never running: {view}");
        std::thread::sleep(Duration::from_millis(10));
    }
    let before = wakeups(pid);
    // A measuring window, not a synchronisation: what is counted is what happens inside it.
    std::thread::sleep(Duration::from_secs(2));
    let woke = wakeups(pid) - before;
    let cancel = tollgate(&home, &["cancel", "idle"]);
    assert!(cancel.status.success(), "{}", describe(&cancel));
    assert!(
        woke <= 20,
        "the runner woke {woke} times in 2 s while its command slept (a poll?)"
    );
    eprintln!("runner wake-ups in 2 s of a running command: {woke}");
}
