//! `submit --timeout DUR` (issue 13, "Submit options"): once a turn's command has run DUR, the
//! runner kills its whole containment unit (TERM, grace, KILL), a `setsid` grandchild included;
//! the turn ends `timed_out`, `status` shows `timed_out`, and `submit --wait`/`--attach` exit 124
//! saying why. Runs on the subreaper path (`TOLLGATE_NO_CGROUP=1`) and, where this host can
//! delegate a group, on the cgroup path. A bad DUR is refused (exit 2, naming `--timeout`) and
//! queues nothing.
//!
//! Synchronisation: the command's processes write their pids to files before sleeping; the
//! test waits for the submit to return (the timeout is what ends it), then checks the pids.

mod common;

use common::containment::{is_alive, paths, read_pid, tollgate_on as tollgate, unique_tag, Reaper};
use common::{describe, init_home};
use std::path::Path;
use std::time::{Duration, Instant};

/// A leader and a `setsid` grandchild, each writing its pid and sleeping far past any timeout.
fn script(dir: &Path) -> String {
    let d = dir.display();
    format!(
        "setsid sh -c 'echo $$ > {d}/setsid.tmp && mv {d}/setsid.tmp {d}/setsid; exec sleep 600' & \
         echo $$ > {d}/leader.tmp && mv {d}/leader.tmp {d}/leader; wait"
    )
}

fn status_json(home: &Path) -> serde_json::Value {
    let out = tollgate(home, true, &["status", "--json", "--all"]);
    assert!(out.status.success(), "{}", describe(&out));
    serde_json::from_slice(&out.stdout).expect("status json")
}

fn timed_out_on(path: &str, force_subreaper: bool, mode: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = init_home(dir.path(), 1);
    let pids = dir.path().join("pids");
    std::fs::create_dir(&pids).expect("pid dir");
    let tag = unique_tag("turn-timeout");
    let _reaper = Reaper::new(&tag);
    let tag_env = format!("TEST_TAG={tag}");
    let started = Instant::now();
    let out = tollgate(
        &home,
        force_subreaper,
        &[
            "submit",
            "--task",
            "slow",
            mode,
            "--timeout",
            "1s",
            "--env",
            &tag_env,
            "--",
            "sh",
            "-c",
            &script(&pids),
        ],
    );
    let took = started.elapsed();
    assert_eq!(
        out.status.code(),
        Some(124),
        "{path} {mode}: {}",
        describe(&out)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("timed out"), "{path} {mode}: {stderr}");
    assert!(
        took >= Duration::from_secs(1),
        "ended before its timeout: {took:?}"
    );
    assert!(
        took < Duration::from_secs(30),
        "the timeout did not fire: {took:?}"
    );
    // Both processes started, and none is left: the whole unit was killed, not just the leader.
    let leader = read_pid(&pids, "leader");
    let grandchild = read_pid(&pids, "setsid");
    let until = Instant::now() + Duration::from_secs(10);
    while is_alive(leader) || is_alive(grandchild) {
        assert!(
            Instant::now() < until,
            "{path} {mode}: the unit outlived its timeout (leader {leader} alive: {}, setsid {grandchild} alive: {})",
            is_alive(leader),
            is_alive(grandchild)
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let status = status_json(&home);
    let turn = &status["tasks"][0]["turns"][0];
    assert_eq!(turn["state"], "timed_out", "{path} {mode}: {status}");
    let record: serde_json::Value = serde_json::to_value(
        tollgate::tasks::load_turn(
            &tollgate::home::Home::at(&home),
            &tollgate::protocol::slots::TurnKey::new("slow", 1),
        )
        .expect("turn record")
        .expect("the turn has a record"),
    )
    .expect("json");
    assert_eq!(record["outcome"], "timed_out", "{record}");
    assert_eq!(record["timeout_millis"], 1000, "{record}");
    let table = tollgate(&home, true, &["status"]);
    assert!(
        String::from_utf8_lossy(&table.stdout).contains("timed_out"),
        "{}",
        describe(&table)
    );
    eprintln!("{path} path, {mode}: timed out after {took:?}");
}

#[test]
fn a_detached_turn_past_its_timeout_is_killed_whole_and_ends_timed_out() {
    for (path, force_subreaper) in paths() {
        timed_out_on(path, force_subreaper, "--wait");
    }
}

#[test]
fn an_attached_turn_past_its_timeout_is_killed_whole_and_ends_timed_out() {
    for (path, force_subreaper) in paths() {
        timed_out_on(path, force_subreaper, "--attach");
    }
}

#[test]
fn a_turn_that_ends_before_its_timeout_keeps_its_own_exit_code() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = init_home(dir.path(), 1);
    let out = tollgate(
        &home,
        true,
        &[
            "submit",
            "--task",
            "quick",
            "--wait",
            "--timeout",
            "5m",
            "--",
            "sh",
            "-c",
            "exit 3",
        ],
    );
    assert_eq!(out.status.code(), Some(3), "{}", describe(&out));
    assert_eq!(
        status_json(&home)["tasks"][0]["turns"][0]["state"],
        "failed"
    );
}

#[test]
fn a_bad_timeout_is_refused_naming_the_argument_and_queues_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = init_home(dir.path(), 1);
    for bad in ["0s", "soon", "-5s", "100days"] {
        let arg = format!("--timeout={bad}");
        let out = tollgate(&home, true, &["submit", "--task", "t", &arg, "--", "true"]);
        assert_eq!(out.status.code(), Some(2), "{bad}: {}", describe(&out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("--timeout"), "{bad}: {stderr}");
    }
    let status = status_json(&home);
    assert_eq!(
        status["tasks"].as_array().map(Vec::len),
        Some(0),
        "{status}"
    );
    assert!(
        !home.join("tasks/t").exists(),
        "a refused submit created its task"
    );
}
