//! A runner killed between forking its turn's command and the child arming its parent-death
//! signal must not leave that child to run the command as an orphan: the child checks, after
//! arming `PR_SET_PDEATHSIG`, that its parent is still the runner, and refuses to exec otherwise.
//!
//! Before the fix, such an orphan ran the command with no runner and no recorded leader, so a
//! repair that found the runner dead could start the turn again beside it (CI's crash storm once
//! saw three live works with two workers on the cgroup path).
//!
//! The window is held open by the failpoint `runner::child_before_pdeathsig(MILLIS)`: the forked
//! child waits there before arming the signal. Run with
//! `cargo test --features failpoints --test failpoints_runner_child`.
#![cfg(feature = "failpoints")]

mod common;

use common::containment::is_alive;
use common::failpoints::{ok as tollgate, wait_until};
use std::path::Path;

/// `(pid, ppid, argv)` of every process, read from `/proc`.
fn processes() -> Vec<(i32, i32, Vec<Vec<u8>>)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse().ok()) else {
            continue;
        };
        let (Ok(stat), Ok(cmdline)) = (
            std::fs::read_to_string(format!("/proc/{pid}/stat")),
            std::fs::read(format!("/proc/{pid}/cmdline")),
        ) else {
            continue;
        };
        let Some(ppid) = stat
            .rfind(')')
            .and_then(|i| stat[i + 1..].split_whitespace().nth(1))
            .and_then(|p| p.parse().ok())
        else {
            continue;
        };
        let argv = cmdline
            .split(|&b| b == 0)
            .filter(|a| !a.is_empty())
            .map(<[u8]>::to_vec)
            .collect();
        out.push((pid, ppid, argv));
    }
    out
}

/// The runner of `home` and the child it forked for the command (not exec'd yet: it still has
/// the runner's command line).
fn runner_and_child(home: &Path) -> Option<(i32, i32)> {
    let home = home.as_os_str().as_encoded_bytes();
    let all = processes();
    let runner = all.iter().find(|(_, _, argv)| {
        argv.windows(2)
            .any(|w| w[0] == b"worker" && w[1] == b"runner")
            && argv.iter().any(|a| a == home)
    })?;
    let child = all.iter().find(|(_, ppid, _)| *ppid == runner.0)?;
    Some((runner.0, child.0))
}

#[test]
fn failpoints_a_runner_killed_before_its_child_armed_pdeathsig_leaves_no_orphan_command() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = common::init_home(dir.path(), 1);
    let marker = dir.path().join("ran");
    let script = format!("echo ran >> {}", marker.display());
    tollgate(
        &home,
        Some("runner::child_before_pdeathsig=return(1500)"),
        &["submit", "--task", "orphan", "--", "sh", "-c", &script],
    );
    let mut found = None;
    wait_until("the runner to fork the command", || {
        found = runner_and_child(&home);
        found.is_some()
    });
    let (runner, child) = found.expect("runner and child");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(runner),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("SIGKILL the runner");
    // The child leaves the failpoint's hold and either refuses to exec (it is gone) or runs the
    // command (the marker appears): whichever comes first.
    wait_until("the orphaned child to exit or run the command", || {
        !is_alive(child) || marker.exists()
    });
    assert!(
        !marker.exists(),
        "the command ran although its runner died before the child armed its parent-death signal"
    );
    // The repair then runs the turn at most once more, never beside an orphan copy.
    tollgate(&home, None, &["reconcile"]);
    tollgate(&home, None, &["wait", "orphan"]);
    let ran = std::fs::read_to_string(&marker).unwrap_or_default();
    assert!(ran.lines().count() <= 1, "the command ran twice: {ran:?}");
}
