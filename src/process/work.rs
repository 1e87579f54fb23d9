//! A turn's work on this host: finding its processes and killing them.
//!
//! A work's processes are the ones whose environment carries `TOLLGATE_WORK=<id>` (the runner
//! starts the command with it, and children inherit it), plus the members of the command's process
//! group while that group is provably the work's (its leader still matches, or a member carries the
//! marker). A process that both clears its environment and leaves the group escapes this; the
//! containment issue (cgroups) closes that gap in this same module.
//!
//! Killing is TERM to every process found and to the group, a bounded grace, then KILL, then a
//! bounded wait until none is left. Zombies are not alive (they run nothing and only wait to be
//! reaped) and are never counted.

use super::procfs::{self, read_stat, Read};
use super::ProcLiveness;
use crate::protocol::slots::{Liveness, Observation, ProcessIdentity, WorkId};
use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;
use std::time::{Duration, Instant};

/// How long a work's processes get between SIGTERM and SIGKILL.
pub const WORK_TERM_GRACE_MILLIS: u64 = 2_000;
/// How long to wait after SIGKILL for the processes to disappear before reporting them left.
pub const WORK_KILL_WAIT_MILLIS: u64 = 2_000;
/// Poll period while waiting for a work's processes to go.
const WORK_POLL_MILLIS: u64 = 10;
/// Upper bound on the processes a scan reports (a fork bomb must not grow our memory).
const MAX_WORK_PROCESSES: usize = 65_536;

/// What a kill of a work did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkKill {
    /// Processes of the work found alive when the kill began.
    pub found: usize,
    /// Whether SIGKILL was needed (something outlived the TERM grace).
    pub escalated: bool,
    /// Pids still alive when the kill gave up; empty when the whole work is gone.
    pub remaining: Vec<u32>,
}

impl WorkKill {
    pub fn is_complete(&self) -> bool {
        self.remaining.is_empty()
    }
}

/// The pids of every process on this host whose environment names the work, or that sits in the
/// work's process group while the group is provably the work's. Our own process is never listed.
pub fn work_processes(work: WorkId, leader: Option<ProcessIdentity>) -> Vec<u32> {
    let marker = format!("{}={}", WorkId::ENV, work);
    let me = std::process::id();
    let leader_matches = leader.is_some_and(|l| ProcLiveness.observe(&l) == Observation::Matching);
    let mut marked = Vec::new();
    let mut grouped = Vec::new();
    let mut group_is_ours = leader_matches;
    let Some(pids) = procfs::pids() else {
        return marked;
    };
    for pid in pids {
        if pid == me {
            continue;
        }
        let Read::Found(stat) = read_stat(pid) else {
            continue;
        };
        if stat.is_exited() {
            continue;
        }
        let in_group = leader.is_some_and(|l| l.pid == stat.pgrp);
        if procfs::environ_carries(pid, marker.as_bytes()) {
            group_is_ours |= in_group;
            marked.push(pid);
        } else if in_group {
            grouped.push(pid);
        }
        if marked.len() + grouped.len() >= MAX_WORK_PROCESSES {
            break;
        }
    }
    if group_is_ours {
        marked.extend(grouped);
    }
    marked
}

/// Whether any process of the work is alive. An unreadable `/proc` is ambiguous (counted live).
pub fn observe_work(work: WorkId, leader: Option<ProcessIdentity>) -> Observation {
    if !procfs::available() {
        return Observation::Ambiguous;
    }
    if work_processes(work, leader).is_empty() {
        Observation::Gone
    } else {
        Observation::Matching
    }
}

fn signal_all(pids: &[u32], leader: Option<ProcessIdentity>, signal: Signal) {
    if let Some(leader) = leader {
        // Only when some member of the group was found: then the group is the work's.
        if !pids.is_empty() {
            let _ = killpg(Pid::from_raw(leader.pid as i32), signal);
        }
    }
    for pid in pids {
        let _ = kill(Pid::from_raw(*pid as i32), signal);
    }
}

/// Polls until the work has no process left or `wait` passes; returns what is left.
fn wait_gone(work: WorkId, leader: Option<ProcessIdentity>, wait: Duration) -> Vec<u32> {
    let deadline = Instant::now() + wait;
    loop {
        let left = work_processes(work, leader);
        if left.is_empty() || Instant::now() >= deadline {
            return left;
        }
        std::thread::sleep(Duration::from_millis(WORK_POLL_MILLIS));
    }
}

/// Kills every process of the work: TERM, up to [`WORK_TERM_GRACE_MILLIS`], KILL, up to
/// [`WORK_KILL_WAIT_MILLIS`]. Returns when none is left or the waits ran out.
pub fn kill_work(work: WorkId, leader: Option<ProcessIdentity>) -> WorkKill {
    let found = work_processes(work, leader);
    if found.is_empty() {
        return WorkKill::default();
    }
    signal_all(&found, leader, Signal::SIGTERM);
    let left = wait_gone(work, leader, Duration::from_millis(WORK_TERM_GRACE_MILLIS));
    if left.is_empty() {
        return WorkKill {
            found: found.len(),
            escalated: false,
            remaining: left,
        };
    }
    signal_all(&left, leader, Signal::SIGKILL);
    let remaining = wait_gone(work, leader, Duration::from_millis(WORK_KILL_WAIT_MILLIS));
    WorkKill {
        found: found.len(),
        escalated: true,
        remaining,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;

    fn work_id() -> WorkId {
        WorkId::from_token(crate::protocol::slots::SlotToken::generate())
    }

    #[test]
    fn a_work_is_found_by_its_marker_and_killed_with_its_detached_children() {
        let work = work_id();
        // The leader backgrounds a child, as a command whose children outlive its runner does.
        let mut leader = std::process::Command::new("sh")
            .args(["-c", "sleep 30 & sleep 30"])
            .env(WorkId::ENV, work.to_string())
            .process_group(0)
            .spawn()
            .expect("spawn sh");
        let leader_id = crate::process::identity_of(leader.id()).expect("leader identity");
        let deadline = Instant::now() + Duration::from_secs(10);
        while work_processes(work, Some(leader_id)).len() < 3 {
            assert!(
                Instant::now() < deadline,
                "the work's processes never showed up"
            );
            std::thread::sleep(Duration::from_millis(WORK_POLL_MILLIS));
        }
        assert_eq!(observe_work(work, Some(leader_id)), Observation::Matching);
        let killed = kill_work(work, Some(leader_id));
        let _ = leader.wait();
        assert!(killed.found >= 3, "{killed:?}");
        assert!(killed.is_complete(), "{killed:?}");
        assert!(work_processes(work, Some(leader_id)).is_empty());
        assert_eq!(observe_work(work, Some(leader_id)), Observation::Gone);
    }

    #[test]
    fn another_works_processes_are_never_listed() {
        let (mine, other) = (work_id(), work_id());
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .env(WorkId::ENV, other.to_string())
            .spawn()
            .expect("spawn sleep");
        assert!(work_processes(mine, None).is_empty());
        assert_eq!(kill_work(mine, None), WorkKill::default());
        let _ = child.kill();
        let _ = child.wait();
    }
}
