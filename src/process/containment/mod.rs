//! Containment units: the one way tollgate owns, finds and kills a command's whole process tree,
//! for `tollgate run`'s items and for turns alike.
//!
//! A unit is a cgroup v2 group where this process can create one under its own group (and
//! `TOLLGATE_NO_CGROUP` is not `1`), else a process group plus an environment marker that a `/proc`
//! walk matches, with the owner as `PR_SET_CHILD_SUBREAPER` so orphaned descendants come back to it
//! while it lives. Every unit also has its own process group and marker, so a process that slipped
//! out of the group (forked between spawn and adoption) is still found.
//!
//! A unit's identity ([`UnitIdentity`]) is a serde value: the owner records it durably *before*
//! the command starts, and any later process — not only the owner, e.g. `tollgate sweep` after the
//! owner died — kills the unit with [`kill_unit`]: SIGTERM, SIGKILL after the grace, and it
//! returns only once the unit is observed empty (or a bounded wait ran out, reporting survivors).

pub mod cgroup;
/// The one `/proc` reader ([`crate::process::procfs`]), under the name the walk has used.
pub use crate::process::procfs;

use crate::process::ProcLiveness;
use crate::protocol::slots::{Liveness, Observation, ProcessIdentity};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub use cgroup::Probe;
pub use procfs::{is_alive, parent_of};

/// Set to `1` to skip cgroups and use the process group + subreaper + marker path.
pub const NO_CGROUP_ENV: &str = "TOLLGATE_NO_CGROUP";
/// How long [`kill_unit`] waits, after SIGKILL, for the unit to be observed empty.
pub const KILL_WAIT_MILLIS: u64 = 2_000;
/// Poll interval while waiting for a unit to empty.
const POLL_MILLIS: u64 = 5;
/// Bound on the processes one walk attributes to a unit.
const MAX_MEMBERS: usize = 65_536;

/// How this process contains the units it starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Containment {
    /// Each unit gets a group under `base` (this process's own v2 group).
    Cgroup { base: PathBuf },
    /// Process group + subreaper + marker walk.
    Subreaper,
}

/// Why [`decide`] chose what it chose (for logs and for the tests that say which path ran).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reason {
    /// `TOLLGATE_NO_CGROUP=1`.
    Forced,
    /// No cgroup2 mount, or this process has no v2 group line.
    NoV2Hierarchy,
    /// A probe group could not be created under the base.
    NotDelegated(PathBuf),
    /// The probe group had no `cgroup.kill` (kernel before 5.14).
    NoCgroupKill(PathBuf),
    /// A group can be created and killed.
    Delegated(PathBuf),
}

/// The decision, pure: forced off, else a base, else whether a probe under it can be created and
/// has `cgroup.kill`.
pub fn decide(
    force_no_cgroup: bool,
    base: Option<PathBuf>,
    probe: impl FnOnce(&Path) -> Probe,
) -> (Containment, Reason) {
    if force_no_cgroup {
        return (Containment::Subreaper, Reason::Forced);
    }
    let Some(base) = base else {
        return (Containment::Subreaper, Reason::NoV2Hierarchy);
    };
    match probe(&base) {
        Probe::Usable => (
            Containment::Cgroup { base: base.clone() },
            Reason::Delegated(base),
        ),
        Probe::NoKill => (Containment::Subreaper, Reason::NoCgroupKill(base)),
        Probe::CannotCreate => (Containment::Subreaper, Reason::NotDelegated(base)),
    }
}

/// Whether the environment asks for the subreaper path.
pub fn forced_off_by_env() -> bool {
    std::env::var(NO_CGROUP_ENV).is_ok_and(|v| v == "1")
}

/// Makes this process a child subreaper (both paths: a grandchild forked before adoption into the
/// group, or escaping it, is reparented to us while we live) and chooses the path.
pub fn choose(force_no_cgroup: bool) -> (Containment, Reason) {
    // If this fails we still walk /proc; reparented grandchildren then go to init instead of us.
    if let Err(e) = nix::sys::prctl::set_child_subreaper(true) {
        tracing::warn!("PR_SET_CHILD_SUBREAPER failed: {e}");
    }
    decide(force_no_cgroup, cgroup::base(), cgroup::probe)
}

/// An environment variable every process of a unit carries (descendants inherit it), which is how
/// the `/proc` walk attributes a reparented `setsid` grandchild to its unit.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Marker {
    /// The variable's name, e.g. `TOLLGATE_ITEM`.
    pub var: String,
    /// Its value, or the value's prefix when `prefix` is set.
    pub value: String,
    /// Matches every value that starts with `value` (a run's unit covers all its items').
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub prefix: bool,
}

impl Marker {
    pub fn exact(var: &str, value: impl Into<String>) -> Self {
        Self {
            var: var.to_string(),
            value: value.into(),
            prefix: false,
        }
    }

    pub fn prefix(var: &str, value: impl Into<String>) -> Self {
        Self {
            var: var.to_string(),
            value: value.into(),
            prefix: true,
        }
    }

    /// Whether one `NAME=value` entry matches.
    pub fn matches_entry(&self, entry: &[u8]) -> bool {
        let Some(rest) = entry
            .strip_prefix(self.var.as_bytes())
            .and_then(|r| r.strip_prefix(b"="))
        else {
            return false;
        };
        if self.prefix {
            rest.starts_with(self.value.as_bytes())
        } else {
            rest == self.value.as_bytes()
        }
    }

    /// Whether a raw `/proc/<pid>/environ` (NUL-separated) carries the marker.
    pub fn matches_environ(&self, environ: &[u8]) -> bool {
        // An empty marker would match everything: refuse it.
        !self.var.is_empty()
            && !(self.value.is_empty())
            && environ.split(|&b| b == 0).any(|e| self.matches_entry(e))
    }
}

/// Everything any process needs to find and kill a unit. Recorded before the command starts
/// (`cgroup` and `marker` are known then; `pgid` and `leader` once it is spawned).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnitIdentity {
    /// The unit's cgroup v2 directory (absolute), on the cgroup path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<PathBuf>,
    /// The unit's process group (its leader's pid).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pgid: Option<i32>,
    pub marker: Marker,
    /// The leader's identity: the process group is signalled only while this still matches, so a
    /// recycled pgid is never hit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader: Option<ProcessIdentity>,
}

impl UnitIdentity {
    /// Owner side, before the spawn: a unit with `marker` and, when `parent` is given (the
    /// owner's base on the cgroup path, or a run's group), a fresh group `<parent>/<name>`. A group
    /// that cannot be created leaves the unit on its process group and marker (logged).
    pub fn prepare(parent: Option<&Path>, name: &str, marker: Marker) -> Self {
        let cgroup = parent.and_then(|p| match cgroup::create(p, name) {
            Ok(dir) => Some(dir),
            Err(e) => {
                tracing::warn!("cannot create cgroup {}/{name}: {e}", p.display());
                None
            }
        });
        Self {
            cgroup,
            pgid: None,
            marker,
            leader: None,
        }
    }

    /// Puts the marker in the command's environment, makes it lead a new process group, and has
    /// the forked child join the unit's group before exec ([`cgroup::join_in_child`]), so nothing
    /// it forks starts outside the group.
    pub fn configure(&self, cmd: &mut std::process::Command) {
        use std::os::unix::process::CommandExt;
        cmd.env(&self.marker.var, &self.marker.value)
            .process_group(0);
        if let Some(procs) = self.cgroup.as_deref().and_then(cgroup::procs_path) {
            // SAFETY: runs in the forked child before exec; the join is open/write/close of a
            // path made before the fork, plain syscalls that allocate nothing.
            unsafe {
                cmd.pre_exec(move || {
                    cgroup::join_in_child(&procs);
                    Ok(())
                });
            }
        }
    }

    /// Owner side, right after the spawn: moves the child (and what it already forked) into the
    /// group and records its process group and identity. An adoption error leaves the unit on its
    /// process group and marker.
    pub fn started(&mut self, pid: u32) -> std::io::Result<()> {
        self.pgid = Some(pid as i32);
        self.leader = crate::process::identity_of(pid);
        match &self.cgroup {
            Some(dir) => cgroup::adopt(dir, pid as i32),
            None => Ok(()),
        }
    }
}

/// The pure membership rule of the `/proc` walk: a live process belongs to the unit if it is in
/// the unit's cgroup, carries the marker, or is in the process group of a leader that is still the
/// recorded one. (Descendants of members are added afterwards.)
pub fn is_member(
    stat: &procfs::ProcStat,
    in_cgroup: bool,
    marked: bool,
    live_pgid: Option<i32>,
) -> bool {
    stat.is_alive() && (in_cgroup || marked || live_pgid == Some(stat.pgrp))
}

/// The unit's process group, if its recorded leader is still the process with that pid.
fn live_pgid(unit: &UnitIdentity) -> Option<i32> {
    let pgid = unit.pgid?;
    let leader = unit.leader.as_ref()?;
    matches!(ProcLiveness.observe(leader), Observation::Matching).then_some(pgid)
}

/// The pure rule for trusting the recorded process group: while its leader is the recorded one,
/// or (the leader gone) while a process carrying the marker is still in it — a pgid is not reused
/// while its group has a member, so that group is still the unit's.
pub fn group_is_ours(pgid: Option<i32>, leader_matches: bool, marked_pgrps: &[i32]) -> Option<i32> {
    let pgid = pgid?;
    (leader_matches || marked_pgrps.contains(&pgid)).then_some(pgid)
}

/// The live members of `unit` as `(pid, ppid)`: by cgroup, marker, live process group, then every
/// live descendant of those by ppid links. Never this process.
pub fn members(unit: &UnitIdentity) -> Vec<(i32, i32)> {
    let own = std::process::id() as i32;
    let procs = procfs::scan();
    let in_cgroup: HashSet<i32> = unit
        .cgroup
        .as_deref()
        .map(|dir| cgroup::procs(dir).into_iter().collect())
        .unwrap_or_default();
    let mut children: HashMap<i32, Vec<usize>> = HashMap::new();
    for (i, p) in procs.iter().enumerate() {
        children.entry(p.ppid).or_default().push(i);
    }
    let marked: Vec<bool> = procs
        .iter()
        .map(|p| {
            p.pid != own
                && p.is_alive()
                && procfs::environ_of(p.pid).is_some_and(|e| unit.marker.matches_environ(&e))
        })
        .collect();
    let marked_pgrps: Vec<i32> = procs
        .iter()
        .zip(&marked)
        .filter(|(_, m)| **m)
        .map(|(p, _)| p.pgrp)
        .collect();
    let pgid = group_is_ours(unit.pgid, live_pgid(unit).is_some(), &marked_pgrps);
    let mut found: HashSet<i32> = HashSet::new();
    let mut stack: Vec<usize> = Vec::new();
    for (i, p) in procs.iter().enumerate() {
        if p.pid != own && is_member(p, in_cgroup.contains(&p.pid), marked[i], pgid) {
            stack.push(i);
        }
    }
    let mut out = Vec::new();
    while let Some(i) = stack.pop() {
        let p = &procs[i];
        if out.len() >= MAX_MEMBERS || p.pid == own || !found.insert(p.pid) {
            continue;
        }
        if p.is_alive() {
            out.push((p.pid, p.ppid));
        }
        if let Some(kids) = children.get(&p.pid) {
            stack.extend(kids);
        }
    }
    out
}

/// Sends `signal` to every member (and, for SIGKILL, writes `cgroup.kill`); returns the members
/// signalled as `(pid, ppid)`.
pub fn signal_unit(unit: &UnitIdentity, signal: Signal) -> Vec<(i32, i32)> {
    // Found first, so the answer names what was alive when the signal went out.
    let found = members(unit);
    if signal == Signal::SIGKILL {
        if let Some(dir) = &unit.cgroup {
            if dir.exists() {
                if let Err(e) = cgroup::kill(dir) {
                    tracing::warn!("cgroup.kill in {}: {e}", dir.display());
                }
            }
        }
    }
    if let Some(pgid) = live_pgid(unit) {
        let _ = nix::sys::signal::killpg(Pid::from_raw(pgid), signal);
    }
    for (pid, _) in &found {
        let _ = kill(Pid::from_raw(*pid), signal);
    }
    found
}

/// What [`kill_unit`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KillReport {
    /// Members found at the first signal.
    pub signalled: usize,
    /// Whether SIGKILL was needed (something outlived the grace).
    pub escalated: bool,
    /// Members still alive when the bounded wait ran out (empty: the unit was observed empty).
    pub survivors: Vec<i32>,
    /// Whether the unit's cgroup (if any) is gone.
    pub cgroup_removed: bool,
}

/// Waits (bounded) until `unit` has no live member; SIGKILLs again each round when `resend`
/// (a member may fork while it dies). Returns the members left.
fn wait_empty(unit: &UnitIdentity, until: Instant, resend: Option<Signal>) -> Vec<(i32, i32)> {
    loop {
        let left = match resend {
            Some(sig) => signal_unit(unit, sig),
            None => members(unit),
        };
        if left.is_empty() || Instant::now() >= until {
            return left;
        }
        std::thread::sleep(Duration::from_millis(POLL_MILLIS));
    }
}

/// Kills a unit from any process: SIGTERM to every member, SIGKILL (with `cgroup.kill`) to what is
/// left after `grace`, and returns once the unit is observed empty or [`KILL_WAIT_MILLIS`] after
/// the SIGKILL passed; then removes its cgroup. A zombie counts as gone: reaping is its parent's
/// business (this function never waits on a child, so it cannot steal an owner's exit status).
pub fn kill_unit(unit: &UnitIdentity, grace: Duration) -> KillReport {
    let first = signal_unit(unit, Signal::SIGTERM);
    let mut report = KillReport {
        signalled: first.len(),
        ..KillReport::default()
    };
    let mut left = first;
    if !left.is_empty() {
        left = wait_empty(unit, Instant::now() + grace, None);
    }
    if !left.is_empty() {
        report.escalated = true;
        let until = Instant::now() + Duration::from_millis(KILL_WAIT_MILLIS);
        left = wait_empty(unit, until, Some(Signal::SIGKILL));
    }
    report.survivors = left.into_iter().map(|(pid, _)| pid).collect();
    report.cgroup_removed = match &unit.cgroup {
        Some(dir) => report.survivors.is_empty() && cgroup::remove_tree(dir),
        None => true,
    };
    report
}

/// What the owner saw when it reaped its children after its unit's leader was collected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reaped {
    /// `waitpid` said ECHILD: this process has no child left, live or zombie.
    NoChildren,
    /// A child is still alive (or stopped, or still exiting).
    LiveChild,
    /// `waitpid` failed otherwise: nothing is known.
    Unknown,
}

/// Bound on the exited children one [`reap_exited_children`] collects (a fork bomb's orphans).
const MAX_REAPED: usize = 65_536;

/// Collects every child of this process that has exited (`waitpid(-1, WNOHANG | __WALL)`, so
/// clone children too) and says whether any is left. Only for a process whose every child is part
/// of the unit being ended (the detached runner after its command was collected): it takes the
/// exit status of whatever child it finds.
pub fn reap_exited_children() -> Reaped {
    use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
    let flags = WaitPidFlag::WNOHANG | WaitPidFlag::__WALL;
    for _ in 0..MAX_REAPED {
        match waitpid(Pid::from_raw(-1), Some(flags)) {
            Ok(WaitStatus::StillAlive) => return Reaped::LiveChild,
            // An orphan of the unit that had already died: collected, look again.
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(nix::errno::Errno::ECHILD) => return Reaped::NoChildren,
            Err(_) => return Reaped::Unknown,
        }
    }
    Reaped::Unknown
}

/// The pure rule by which the owner of a unit knows, without a `/proc` walk, that every process
/// it started for the unit is dead (spec/containment.md, "The owner's proof at a unit's end"): it
/// is a child subreaper, so every descendant of its unit that lost its parent was reparented to
/// it, and each stays its child (live, or a zombie until reaped) — so once it has collected the
/// leader and then found no child at all, no descendant is left; and the unit's group, if it has
/// one, is not populated (`cgroup_populated`: `None` without a group, `Some(None)` unreadable).
/// Anything else (not a subreaper, a live child, an unreadable or populated group) is no proof:
/// the caller falls back to [`kill_unit`] and its walk.
pub fn owner_proves_dead(
    subreaper: bool,
    reaped: Reaped,
    cgroup_populated: Option<Option<bool>>,
) -> bool {
    subreaper
        && reaped == Reaped::NoChildren
        && match cgroup_populated {
            None => true,
            Some(populated) => populated == Some(false),
        }
}

/// The owner's cheap leftover kill when a unit's leader has exited: whatever escaped the process
/// group was reparented to us (we are a subreaper), so SIGKILL our children that carry the marker,
/// with their subtrees (each stopped first so it cannot fork while its subtree is collected).
/// Returns the killed children of ours (the caller reaps them). One read of each of our threads'
/// `children` file when there are none.
pub fn kill_marked_children(marker: &Marker, except: i32) -> Vec<i32> {
    let own = std::process::id() as i32;
    let leftovers: Vec<i32> = procfs::children_of(own)
        .into_iter()
        .filter(|&pid| pid != except)
        .filter(|&pid| procfs::environ_of(pid).is_some_and(|e| marker.matches_environ(&e)))
        .collect();
    let mut stack = leftovers.clone();
    let mut budget = MAX_MEMBERS;
    while let Some(pid) = stack.pop() {
        if budget == 0 {
            break;
        }
        budget -= 1;
        let _ = kill(Pid::from_raw(pid), Signal::SIGSTOP);
        stack.extend(procfs::children_of(pid));
        let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
    }
    leftovers
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forced_off_never_probes() {
        let (c, r) = decide(true, Some(PathBuf::from("/sys/fs/cgroup/unified")), |_| {
            panic!("probed although forced off")
        });
        assert_eq!((c, r), (Containment::Subreaper, Reason::Forced));
    }

    #[test]
    fn each_probe_result_picks_its_path() {
        let base = PathBuf::from("/sys/fs/cgroup/unified");
        assert_eq!(
            decide(false, None, |_| Probe::Usable),
            (Containment::Subreaper, Reason::NoV2Hierarchy)
        );
        assert_eq!(
            decide(false, Some(base.clone()), |_| Probe::CannotCreate),
            (Containment::Subreaper, Reason::NotDelegated(base.clone()))
        );
        assert_eq!(
            decide(false, Some(base.clone()), |_| Probe::NoKill),
            (Containment::Subreaper, Reason::NoCgroupKill(base.clone()))
        );
        assert_eq!(
            decide(false, Some(base.clone()), |p| {
                assert_eq!(p, base.as_path());
                Probe::Usable
            }),
            (
                Containment::Cgroup { base: base.clone() },
                Reason::Delegated(base)
            )
        );
    }

    #[test]
    fn exact_and_prefix_markers() {
        let env = b"PATH=/bin\0TOLLGATE_ITEM=run-1/3\0HOME=/root\0";
        assert!(Marker::exact("TOLLGATE_ITEM", "run-1/3").matches_environ(env));
        assert!(!Marker::exact("TOLLGATE_ITEM", "run-1/").matches_environ(env));
        assert!(!Marker::exact("TOLLGATE_ITEM", "run-1/30").matches_environ(env));
        assert!(Marker::prefix("TOLLGATE_ITEM", "run-1/").matches_environ(env));
        assert!(!Marker::prefix("TOLLGATE_ITEM", "run-2/").matches_environ(env));
        // The name must match whole: TOLLGATE_ITEMX is another variable.
        assert!(
            !Marker::prefix("TOLLGATE_ITEM", "run-1/").matches_environ(b"TOLLGATE_ITEMX=run-1/3\0")
        );
        // A value in another variable does not count.
        assert!(!Marker::exact("TOLLGATE_WORK", "w1").matches_environ(b"X=TOLLGATE_WORK=w1\0"));
        // An empty marker matches nothing rather than everything.
        assert!(!Marker::prefix("TOLLGATE_ITEM", "").matches_environ(env));
    }

    #[test]
    fn membership_rule() {
        let p = |state, pgrp| procfs::ProcStat {
            pid: 10,
            state,
            ppid: 1,
            pgrp,
            start_ticks: 5,
        };
        assert!(is_member(&p('S', 7), true, false, None));
        assert!(is_member(&p('S', 7), false, true, None));
        assert!(is_member(&p('S', 7), false, false, Some(7)));
        assert!(!is_member(&p('S', 7), false, false, Some(8)));
        assert!(!is_member(&p('S', 7), false, false, None));
        assert!(
            !is_member(&p('Z', 7), true, true, Some(7)),
            "a zombie is gone"
        );
    }

    #[test]
    fn the_process_group_is_trusted_only_through_its_leader_or_a_marked_member() {
        assert_eq!(group_is_ours(Some(7), true, &[]), Some(7));
        assert_eq!(group_is_ours(Some(7), false, &[3, 7]), Some(7));
        assert_eq!(
            group_is_ours(Some(7), false, &[3]),
            None,
            "recycled or empty"
        );
        assert_eq!(group_is_ours(None, true, &[7]), None);
    }

    #[test]
    fn the_owner_proves_its_unit_dead_only_as_a_subreaper_with_no_child_and_an_empty_group() {
        use Reaped::*;
        assert!(owner_proves_dead(true, NoChildren, None));
        assert!(owner_proves_dead(true, NoChildren, Some(Some(false))));
        // Not a subreaper: an orphan went to init, and no child says nothing.
        assert!(!owner_proves_dead(false, NoChildren, None));
        // A child left behind is alive: the walk and the kill run.
        assert!(!owner_proves_dead(true, LiveChild, None));
        assert!(!owner_proves_dead(true, Unknown, None));
        // The group still holds a process (one that is not our descendant), or cannot be read.
        assert!(!owner_proves_dead(true, NoChildren, Some(Some(true))));
        assert!(!owner_proves_dead(true, NoChildren, Some(None)));
    }

    #[test]
    fn a_recorded_identity_reads_back_and_old_fields_are_optional() {
        let unit = UnitIdentity {
            cgroup: Some(PathBuf::from("/sys/fs/cgroup/unified/tollgate-1-2")),
            pgid: Some(42),
            marker: Marker::exact("TOLLGATE_WORK", "w-1"),
            leader: Some(ProcessIdentity {
                pid: 42,
                start_time_micros: 99,
            }),
        };
        let text = serde_json::to_string(&unit).unwrap();
        assert_eq!(serde_json::from_str::<UnitIdentity>(&text).unwrap(), unit);
        let minimal: UnitIdentity = serde_json::from_str(
            r#"{"marker":{"var":"TOLLGATE_ITEM","value":"r/","prefix":true}}"#,
        )
        .unwrap();
        assert_eq!(minimal.cgroup, None);
        assert_eq!(minimal.marker, Marker::prefix("TOLLGATE_ITEM", "r/"));
    }

    #[test]
    fn a_stale_leader_never_lends_its_process_group() {
        // Our own pid as pgid but a start time that is not ours: the group is not trusted.
        let me = crate::process::self_identity().unwrap();
        let unit = UnitIdentity {
            cgroup: None,
            pgid: Some(nix::unistd::getpgrp().as_raw()),
            marker: Marker::exact("TOLLGATE_TEST_NOBODY", "x"),
            leader: Some(ProcessIdentity {
                start_time_micros: me.start_time_micros + 1,
                ..me
            }),
        };
        assert_eq!(live_pgid(&unit), None);
    }
}
