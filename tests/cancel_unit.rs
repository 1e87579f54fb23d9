//! `tollgate cancel` and a turn's whole unit (issue "Turn containment", acceptance 3), on the
//! subreaper path (`TOLLGATE_NO_CGROUP=1`) and, where this host can delegate a group, the cgroup
//! path (the test prints which ran):
//!
//! - a running tree with a `setsid` grandchild that ignores SIGTERM: nothing of it is alive
//!   grace + 1 s after the cancel, and the turn is recorded cancelled;
//! - cancel right after submit, 50 tries: no turn the record calls `cancelled` wrote its
//!   completion marker (a command that ran to its end is `completed`);
//! - `cancel TASK --turn N` cancels that turn only; an unknown turn is a usage error naming it.
//!
//! Synchronisation: pid files and turn records, polled with a bound; never a sleep.

mod common;

use common::containment::{
    is_alive, ok_on as ok, paths, read_pid, tagged, tollgate_on as tollgate, wait_files,
    wait_untagged, Reaper,
};
use common::describe;
use std::path::Path;
use std::time::{Duration, Instant};
use tollgate::home::Home;
use tollgate::protocol::slots::TurnKey;
use tollgate::tasks::{self, TurnOutcome};

/// The grace a cancel gives the unit between SIGTERM and SIGKILL.
const GRACE: Duration = Duration::from_millis(tollgate::process::work::WORK_TERM_GRACE_MILLIS);

/// The turn's record once it has an outcome (bounded wait).
fn settled(home: &Path, key: &TurnKey, within: Duration) -> tasks::TurnRecord {
    let home = Home::at(home);
    let until = Instant::now() + within;
    loop {
        if let Some(turn) = tasks::load_turn(&home, key).expect("turn record") {
            if turn.is_settled() {
                return turn;
            }
        }
        assert!(Instant::now() < until, "{key} never settled");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn cancel_a_running_tree(path: &str, force_subreaper: bool) {
    let dir = tempfile::tempdir().expect("tempdir");
    let (home, pids) = (dir.path().join("home"), dir.path().join("pids"));
    std::fs::create_dir(&pids).expect("pid dir");
    let tag = common::containment::unique_tag("cancel-tree");
    let _reaper = Reaper::new(&tag);
    ok(&home, force_subreaper, &["init", "--workers", "2"]);
    let d = pids.display();
    let script = format!(
        "sleep 600 & echo $! > {d}/plain; \
         setsid sh -c 'trap \"\" TERM; echo $$ > {d}/setsid; while :; do sleep 1; done' & \
         echo $$ > {d}/leader; wait"
    );
    let tag_env = format!("TEST_TAG={tag}");
    let args = [
        "submit", "--task", "tree", "--env", &tag_env, "--", "sh", "-c", &script,
    ];
    ok(&home, force_subreaper, &args);
    wait_files(&pids, &["leader", "plain", "setsid"]);
    let tree: Vec<i32> = ["leader", "plain", "setsid"]
        .iter()
        .map(|n| read_pid(&pids, n))
        .collect();
    let started = Instant::now();
    ok(&home, force_subreaper, &["cancel", "tree"]);
    let limit = GRACE + Duration::from_secs(1);
    while tree.iter().any(|p| is_alive(*p)) || !tagged(&tag).is_empty() {
        assert!(
            started.elapsed() < limit,
            "{path}: alive {:?} after {:?} (grace {GRACE:?} + 1 s)",
            tagged(&tag),
            started.elapsed()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let took = started.elapsed();
    eprintln!("{path} path: the cancelled tree was gone after {took:?}");
    assert!(
        took >= GRACE,
        "{path}: a SIGTERM-ignoring grandchild died before the grace: {took:?}"
    );
    let turn = settled(&home, &TurnKey::new("tree", 1), Duration::from_secs(10));
    assert_eq!(turn.outcome, Some(TurnOutcome::Cancelled), "{turn:?}");
}

fn cancel_right_after_submit(path: &str, force_subreaper: bool, tries: usize) {
    let dir = tempfile::tempdir().expect("tempdir");
    let (home, marks) = (dir.path().join("home"), dir.path().join("marks"));
    std::fs::create_dir(&marks).expect("marker dir");
    let tag = common::containment::unique_tag("cancel-early");
    let _reaper = Reaper::new(&tag);
    ok(&home, force_subreaper, &["init", "--workers", "2"]);
    let tag_env = format!("TEST_TAG={tag}");
    for i in 0..tries {
        let task = format!("early-{i}");
        // Short enough to finish now and then before the cancel lands.
        let script = format!("sleep 0.05; echo done > {}/{task}", marks.display());
        let args = [
            "submit", "--task", &task, "--env", &tag_env, "--", "sh", "-c", &script,
        ];
        ok(&home, force_subreaper, &args);
        ok(&home, force_subreaper, &["cancel", &task]);
    }
    let mut counts = std::collections::BTreeMap::new();
    let mut records = Vec::new();
    for i in 0..tries {
        let key = TurnKey::new(format!("early-{i}"), 1);
        records.push(settled(&home, &key, Duration::from_secs(30)));
    }
    // Every command has ended (or was never started) before markers are counted.
    wait_untagged(&tag, "the cancels");
    for turn in &records {
        let marked = marks.join(&turn.key.task).exists();
        *counts
            .entry(format!("{:?}, marker {marked}", turn.outcome))
            .or_insert(0) += 1;
        match turn.outcome {
            Some(TurnOutcome::Cancelled) => assert!(
                !marked,
                "{path}: {} is recorded cancelled but its command ran to its end: {turn:?}",
                turn.key
            ),
            Some(TurnOutcome::Completed) => assert!(marked, "{turn:?}"),
            other => panic!("{path}: unexpected outcome {other:?}: {turn:?}"),
        }
    }
    eprintln!("{path} path, {tries} cancels right after submit: {counts:?}");
    assert!(
        counts.keys().any(|k| k.starts_with("Some(Cancelled)")),
        "no cancel landed in time at all: {counts:?}"
    );
}

#[test]
fn cancel_kills_a_running_tree_with_a_setsid_grandchild_within_the_grace() {
    for (path, force_subreaper) in paths() {
        cancel_a_running_tree(path, force_subreaper);
    }
}

#[test]
fn a_turn_recorded_cancelled_never_ran_to_its_end() {
    for (path, force_subreaper) in paths() {
        cancel_right_after_submit(path, force_subreaper, 50);
    }
}

#[test]
fn cancel_turn_cancels_that_turn_only() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = dir.path().join("home");
    let tag = common::containment::unique_tag("cancel-turn");
    let _reaper = Reaper::new(&tag);
    ok(&home, true, &["init", "--workers", "2"]);
    let tag_env = format!("TEST_TAG={tag}");
    let args = [
        "submit",
        "--task",
        "pair",
        "--strategy",
        "concurrent=2",
        "--env",
        &tag_env,
        "--",
        "sleep",
        "600",
    ];
    ok(&home, true, &args);
    ok(&home, true, &args);
    let wrong = tollgate(&home, true, &["cancel", "pair", "--turn", "7"]);
    assert_eq!(wrong.status.code(), Some(2), "{}", describe(&wrong));
    let stderr = String::from_utf8_lossy(&wrong.stderr);
    assert!(
        stderr.contains("--turn 7") && stderr.contains("pair"),
        "{stderr}"
    );
    ok(&home, true, &["cancel", "pair", "--turn", "2"]);
    let second = settled(&home, &TurnKey::new("pair", 2), Duration::from_secs(10));
    assert_eq!(second.outcome, Some(TurnOutcome::Cancelled), "{second:?}");
    let first = tasks::load_turn(&Home::at(&home), &TurnKey::new("pair", 1))
        .expect("record")
        .expect("turn 1");
    assert_eq!(
        first.outcome, None,
        "turn 1 was not asked to stop: {first:?}"
    );
    ok(&home, true, &["cancel", "pair"]);
    settled(&home, &TurnKey::new("pair", 1), Duration::from_secs(10));
}
