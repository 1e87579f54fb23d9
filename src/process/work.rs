//! A turn's work on this host: finding its processes and killing them, through the one
//! containment module ([`super::containment`]) that `tollgate run`'s items use too.
//!
//! A work is a containment unit without a cgroup (yet): its processes are the ones whose
//! environment carries `TOLLGATE_WORK=<id>` (the runner starts the command with it, and children
//! inherit it), the members of the command's process group while that group is provably the
//! work's (its leader still matches, or a member carries the marker), and their descendants. A
//! process that both clears its environment and leaves the group escapes this; a cgroup per turn
//! closes that gap (issue "Turn containment").
//!
//! Killing is TERM, a bounded grace, then KILL, then a bounded wait until none is left. Zombies
//! are not alive (they run nothing and only wait to be reaped) and are never counted.

use super::containment::{self, Marker, UnitIdentity};
use crate::protocol::slots::{Observation, ProcessIdentity, WorkId};
use std::time::Duration;

/// How long a work's processes get between SIGTERM and SIGKILL.
pub const WORK_TERM_GRACE_MILLIS: u64 = 2_000;
#[cfg(test)]
const WORK_POLL_MILLIS: u64 = 10;

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

/// The containment unit of a work, as any process can rebuild it from the queue's work record.
pub fn unit_of(work: WorkId, leader: Option<ProcessIdentity>) -> UnitIdentity {
    UnitIdentity {
        cgroup: None,
        pgid: leader.map(|l| l.pid as i32),
        marker: Marker::exact(WorkId::ENV, work.to_string()),
        leader,
    }
}

/// The pids of every live process of the work on this host. Our own process is never listed.
pub fn work_processes(work: WorkId, leader: Option<ProcessIdentity>) -> Vec<u32> {
    containment::members(&unit_of(work, leader))
        .into_iter()
        .filter_map(|(pid, _)| u32::try_from(pid).ok())
        .collect()
}

/// Whether any process of the work is alive. An unreadable `/proc` is ambiguous (counted live).
pub fn observe_work(work: WorkId, leader: Option<ProcessIdentity>) -> Observation {
    if !super::procfs::available() {
        return Observation::Ambiguous;
    }
    if work_processes(work, leader).is_empty() {
        Observation::Gone
    } else {
        Observation::Matching
    }
}

/// Kills every process of the work: TERM, up to [`WORK_TERM_GRACE_MILLIS`], KILL, then the
/// containment module's bounded wait. Returns when none is left or the waits ran out.
pub fn kill_work(work: WorkId, leader: Option<ProcessIdentity>) -> WorkKill {
    let report = containment::kill_unit(
        &unit_of(work, leader),
        Duration::from_millis(WORK_TERM_GRACE_MILLIS),
    );
    WorkKill {
        found: report.signalled,
        escalated: report.escalated,
        remaining: report
            .survivors
            .into_iter()
            .filter_map(|pid| u32::try_from(pid).ok())
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;
    use std::time::Instant;

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
