//! What a turn's command leaves behind when it exits on its own is dead before its turn is
//! recorded ended (spec/containment.md, "The owner's proof at a unit's end"), on the subreaper
//! path (`TOLLGATE_NO_CGROUP=1`) and, where this host can delegate a group, the cgroup path (the
//! test prints which ran):
//!
//! - the leader exits 0 leaving a plain background child and a `setsid` grandchild that ignores
//!   SIGTERM: when `submit --wait` returns (the outcome is recorded after the runner's end-of-work
//!   kill), none of them is alive, and the wait lasted at least the grace (the deaf grandchild
//!   needed the SIGKILL): the runner did not take its reaped-everything shortcut while children
//!   of the work lived;
//! - the leader exits 0 after an orphaned grandchild already died (reparented to the runner, a
//!   zombie until reaped): the turn completes, nothing of it is left, and the runner's shortcut
//!   (reap, find no child) applies; its group, on the cgroup path, is gone.
//!
//! Synchronisation: pid files and the turn's record (read by `submit --wait`); never a sleep.

mod common;

use common::containment::{is_alive, ok_on as ok, paths, read_pid, tagged, Reaper};
use std::time::{Duration, Instant};
use tollgate::home::Home;
use tollgate::protocol::slots::TurnKey;
use tollgate::tasks::{self, TurnOutcome};

/// The grace the end-of-work kill gives the unit between SIGTERM and SIGKILL.
const GRACE: Duration = Duration::from_millis(tollgate::process::work::WORK_TERM_GRACE_MILLIS);

/// The work groups (`tollgate-<pid>-work-…`) directly under the base this host would use.
fn work_groups() -> Vec<String> {
    let Some(base) = common::containment::cgroup_base() else {
        return Vec::new();
    };
    std::fs::read_dir(base)
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| n.starts_with("tollgate-") && n.contains("-work-"))
                .collect()
        })
        .unwrap_or_default()
}

fn leftovers_are_killed_before_the_turn_ends(path: &str, force_subreaper: bool) {
    let dir = tempfile::tempdir().expect("tempdir");
    let (home, pids) = (dir.path().join("home"), dir.path().join("pids"));
    std::fs::create_dir(&pids).expect("pid dir");
    let tag = common::containment::unique_tag("leftovers");
    let _reaper = Reaper::new(&tag);
    ok(&home, force_subreaper, &["init", "--workers", "2"]);
    let d = pids.display();
    // The leader exits only once both pid files are in place (a bounded poll inside the command).
    let script = format!(
        "sleep 600 & echo $! > {d}/plain.tmp && mv {d}/plain.tmp {d}/plain; \
         setsid sh -c 'trap \"\" TERM; echo $$ > {d}/setsid.tmp && mv {d}/setsid.tmp {d}/setsid; \
         exec sleep 600' & \
         i=0; while [ ! -e {d}/setsid ] && [ $i -lt 2000 ]; do sleep 0.01; i=$((i+1)); done; \
         echo $$ > {d}/leader; exit 0"
    );
    let tag_env = format!("TEST_TAG={tag}");
    let args = [
        "submit", "--wait", "--task", "left", "--env", &tag_env, "--", "sh", "-c", &script,
    ];
    let started = Instant::now();
    ok(&home, force_subreaper, &args);
    let took = started.elapsed();
    let tree: Vec<(&str, i32)> = ["leader", "plain", "setsid"]
        .into_iter()
        .map(|n| (n, read_pid(&pids, n)))
        .collect();
    let alive: Vec<_> = tree.iter().filter(|(_, p)| is_alive(*p)).collect();
    assert!(
        alive.is_empty() && tagged(&tag).is_empty(),
        "{path}: alive when the turn was recorded ended: {alive:?}, tagged {:?}",
        tagged(&tag)
    );
    assert!(
        took >= GRACE,
        "{path}: the turn ended after {took:?}, before a SIGTERM-ignoring leftover could have been \
         killed (grace {GRACE:?}): the end-of-work kill did not run"
    );
    eprintln!("{path} path: leftovers killed, the turn ended after {took:?}");
}

fn dead_orphans_are_reaped_and_nothing_is_left(path: &str, force_subreaper: bool) {
    let dir = tempfile::tempdir().expect("tempdir");
    let (home, pids) = (dir.path().join("home"), dir.path().join("pids"));
    std::fs::create_dir(&pids).expect("pid dir");
    let tag = common::containment::unique_tag("orphans");
    let _reaper = Reaper::new(&tag);
    ok(&home, force_subreaper, &["init", "--workers", "2"]);
    let groups_before = work_groups();
    let d = pids.display();
    // The middle shell exits at once; its child (reparented to the runner) writes its pid and
    // exits; the leader waits for that file, then for the orphan to be gone (a zombie or reaped).
    let script = format!(
        "sh -c '(echo $$ > {d}/orphan.tmp && mv {d}/orphan.tmp {d}/orphan) &'; \
         i=0; while [ ! -e {d}/orphan ] && [ $i -lt 2000 ]; do sleep 0.01; i=$((i+1)); done; \
         exit 0"
    );
    let tag_env = format!("TEST_TAG={tag}");
    for n in 0..3 {
        let task = format!("orphans-{n}");
        let args = [
            "submit", "--wait", "--task", &task, "--env", &tag_env, "--", "sh", "-c", &script,
        ];
        ok(&home, force_subreaper, &args);
        let turn = tasks::load_turn(&Home::at(&home), &TurnKey::new(task.as_str(), 1))
            .expect("read the turn")
            .expect("the turn's record");
        assert_eq!(
            turn.outcome,
            Some(TurnOutcome::Completed),
            "{path}: {turn:?}"
        );
        let orphan = read_pid(&pids, "orphan");
        assert!(!is_alive(orphan), "{path}: the orphan {orphan} is alive");
        std::fs::remove_file(pids.join("orphan")).expect("remove the pid file");
    }
    assert!(tagged(&tag).is_empty(), "{path}: left {:?}", tagged(&tag));
    if !force_subreaper {
        let left: Vec<_> = work_groups()
            .into_iter()
            .filter(|g| !groups_before.contains(g))
            .collect();
        assert!(left.is_empty(), "{path}: work groups left: {left:?}");
    }
}

#[test]
fn leftovers_of_a_command_that_exited_are_dead_before_its_turn_ends() {
    for (path, force_subreaper) in paths() {
        leftovers_are_killed_before_the_turn_ends(path, force_subreaper);
    }
}

#[test]
fn orphans_that_died_already_are_reaped_and_the_work_leaves_nothing() {
    for (path, force_subreaper) in paths() {
        dead_orphans_are_reaped_and_nothing_is_left(path, force_subreaper);
    }
}
