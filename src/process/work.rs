//! A turn's work on this host as one containment unit: chosen before the command starts, found
//! and killed through the one containment module ([`super::containment`]) that `tollgate run`'s
//! items use too.
//!
//! Where the runner can delegate a cgroup v2 group (see [`containment::choose`]), the work gets
//! its own group `<runner's group>/tollgate-<runner pid>-work-<work id>`; its path is recorded on
//! the queue's work record by the take-over, *before* the command exists, so any later process
//! (reconcile, cancel) kills the whole tree with `cgroup.kill`, `setsid` escapees and processes
//! that cleared their environment included. Otherwise (or with `TOLLGATE_NO_CGROUP=1`) the work
//! is its process group plus the environment marker `TOLLGATE_WORK=<id>` that every descendant
//! inherits, with the runner as child subreaper. Both paths also walk the marker and the process
//! group, so a process that slipped out of the group before it was adopted is still found.
//!
//! Killing is TERM, [`WORK_TERM_GRACE_MILLIS`], then KILL (and `cgroup.kill`), then a bounded wait
//! until none is left; the emptied group is removed. Zombies are not alive (they run nothing and
//! only wait to be reaped) and are never counted.

use super::containment::{self, Containment, Marker, UnitIdentity};
use crate::protocol::slots::{Observation, ProcessIdentity, WorkId, WorkRecord};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long a work's processes get between SIGTERM and SIGKILL, whoever kills it: the runner on
/// `cancel`, the canceller or reconciler for a dead runner's work, the runner for leftovers.
pub const WORK_TERM_GRACE_MILLIS: u64 = 2_000;

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

/// The group name of a work started by the process `runner_pid`. It starts with the owner's pid
/// (`cgroup::owner_of` reads it), so an empty group a dead runner left is swept like `run`'s.
pub fn group_name(runner_pid: u32, work: WorkId) -> String {
    format!(
        "{}{runner_pid}-work-{work}",
        containment::cgroup::GROUP_PREFIX
    )
}

/// Where this runner will start `work`: a group under its own base on the cgroup path, `None`
/// on the process group + marker path. Pure; nothing is created.
pub fn cgroup_for(containment: &Containment, work: WorkId) -> Option<PathBuf> {
    match containment {
        Containment::Cgroup { base } => Some(base.join(group_name(std::process::id(), work))),
        Containment::Subreaper => None,
    }
}

/// The containment unit of a work as any process rebuilds it from the queue's work record.
pub fn unit_of(record: &WorkRecord) -> UnitIdentity {
    unit_from(
        record.id,
        record.leader,
        record.cgroup.as_deref().map(Path::new),
    )
}

/// The unit of `work` with its (optional) leader and group.
pub fn unit_from(
    work: WorkId,
    leader: Option<ProcessIdentity>,
    cgroup: Option<&Path>,
) -> UnitIdentity {
    UnitIdentity {
        cgroup: cgroup.map(Path::to_path_buf),
        pgid: leader.map(|l| l.pid as i32),
        marker: Marker::exact(WorkId::ENV, work.to_string()),
        leader,
    }
}

/// The pids of every live process of the work on this host. Our own process is never listed.
pub fn work_processes(record: &WorkRecord) -> Vec<u32> {
    containment::members(&unit_of(record))
        .into_iter()
        .filter_map(|(pid, _)| u32::try_from(pid).ok())
        .collect()
}

/// Whether any process of the work is alive. An unreadable `/proc` is ambiguous (counted live).
pub fn observe_work(record: &WorkRecord) -> Observation {
    if !super::procfs::available() {
        return Observation::Ambiguous;
    }
    if work_processes(record).is_empty() {
        Observation::Gone
    } else {
        Observation::Matching
    }
}

/// Kills every process of the work: TERM, up to [`WORK_TERM_GRACE_MILLIS`], KILL, then the
/// containment module's bounded wait; removes the work's group once it is empty. Returns when
/// none is left or the waits ran out.
pub fn kill_work(record: &WorkRecord) -> WorkKill {
    kill_unit(
        &unit_of(record),
        Duration::from_millis(WORK_TERM_GRACE_MILLIS),
    )
}

/// [`kill_work`] for a unit in hand (the runner's own, on cancel) with an explicit grace.
pub fn kill_unit(unit: &UnitIdentity, grace: Duration) -> WorkKill {
    let report = containment::kill_unit(unit, grace);
    if !report.cgroup_removed {
        if let Some(dir) = &unit.cgroup {
            tracing::warn!("the work's group {} is not empty yet", dir.display());
        }
    }
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

/// The detached runner's end of its work, once it has collected its command: whether its own
/// observations prove the whole work dead ([`containment::owner_proves_dead`]: a subreaper with
/// no child left, the work's group unpopulated), so the `/proc` walk of [`kill_unit`] is not
/// needed; the empty group is then removed here. `false`: nothing is proven, and the caller kills
/// the work as any other process would. Only for a process all of whose children belong to the
/// work, since it reaps whatever child has exited.
pub fn owner_proves_gone(unit: &UnitIdentity) -> bool {
    let subreaper = nix::sys::prctl::get_child_subreaper().unwrap_or(false);
    let reaped = if subreaper {
        containment::reap_exited_children()
    } else {
        containment::Reaped::Unknown
    };
    let populated = unit.cgroup.as_deref().map(containment::cgroup::populated);
    if !containment::owner_proves_dead(subreaper, reaped, populated) {
        return false;
    }
    match &unit.cgroup {
        Some(dir) => containment::cgroup::remove_tree(dir),
        None => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::slots::{SlotToken, TurnKey};
    use std::os::unix::process::CommandExt;
    use std::time::Instant;

    const POLL_MILLIS: u64 = 10;

    fn record(leader: Option<ProcessIdentity>) -> WorkRecord {
        WorkRecord {
            key: TurnKey::new("job", 1),
            id: WorkId::from_token(SlotToken::generate()),
            runner: crate::process::self_identity().expect("own identity"),
            leader,
            cgroup: None,
        }
    }

    #[test]
    fn a_work_is_found_by_its_marker_and_killed_with_its_detached_children() {
        let mut work = record(None);
        // The leader backgrounds a child, as a command whose children outlive its runner does.
        let mut leader = std::process::Command::new("sh")
            .args(["-c", "sleep 30 & sleep 30"])
            .env(WorkId::ENV, work.id.to_string())
            .process_group(0)
            .spawn()
            .expect("spawn sh");
        work.leader = Some(crate::process::identity_of(leader.id()).expect("leader identity"));
        let deadline = Instant::now() + Duration::from_secs(10);
        while work_processes(&work).len() < 3 {
            assert!(
                Instant::now() < deadline,
                "the work's processes never showed up"
            );
            std::thread::sleep(Duration::from_millis(POLL_MILLIS));
        }
        assert_eq!(observe_work(&work), Observation::Matching);
        let killed = kill_work(&work);
        let _ = leader.wait();
        assert!(killed.found >= 3, "{killed:?}");
        assert!(killed.is_complete(), "{killed:?}");
        assert!(work_processes(&work).is_empty());
        assert_eq!(observe_work(&work), Observation::Gone);
    }

    #[test]
    fn another_works_processes_are_never_listed() {
        let (mine, other) = (record(None), record(None));
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .env(WorkId::ENV, other.id.to_string())
            .spawn()
            .expect("spawn sleep");
        assert!(work_processes(&mine).is_empty());
        assert_eq!(kill_work(&mine), WorkKill::default());
        let _ = child.kill();
        let _ = child.wait();
    }

    #[test]
    fn the_group_of_a_work_is_chosen_from_the_path_and_named_for_its_owner() {
        let work = WorkId::from_token(SlotToken::generate());
        assert_eq!(cgroup_for(&Containment::Subreaper, work), None);
        let base = PathBuf::from("/sys/fs/cgroup/unified/x");
        let dir = cgroup_for(&Containment::Cgroup { base: base.clone() }, work).expect("a group");
        assert_eq!(dir.parent(), Some(base.as_path()));
        let name = dir.file_name().and_then(|n| n.to_str()).expect("a name");
        assert_eq!(
            containment::cgroup::owner_of(name),
            Some(std::process::id() as i32)
        );
        assert!(name.ends_with(&work.to_string()));
        let mut rec = record(None);
        rec.cgroup = Some(dir.display().to_string());
        assert_eq!(unit_of(&rec).cgroup, Some(dir));
        assert_eq!(
            unit_of(&rec).marker,
            Marker::exact(WorkId::ENV, rec.id.to_string())
        );
    }
}
