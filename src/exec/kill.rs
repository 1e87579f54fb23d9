//! Killing an item's whole process tree, through the shared containment units
//! ([`crate::process::containment`]): the item's unit is its own cgroup under the run's group where
//! one can be created, else its process group; always with the item's environment marker and the
//! run as a child subreaper. SIGTERM first, SIGKILL after the term grace (the core decides when).
//! This module adds what only a live owner does: reaping the reparented descendants it killed.

use crate::process::containment::{self, cgroup, Marker, UnitIdentity};
use crate::protocol::execution::KillSignal;
use nix::sys::signal::{killpg, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

pub use containment::{is_alive, parent_of, Containment, NO_CGROUP_ENV};

/// Environment variable every item's process carries (`<run id>/<index>`); descendants inherit it,
/// which is how the `/proc` walk attributes a reparented `setsid` grandchild to its item.
pub const ITEM_MARKER_ENV: &str = "TOLLGATE_ITEM";
/// Bound on the pids remembered for reaping.
const MAX_ORPHANS: usize = 65_536;

/// Everything needed to signal one item's tree.
#[derive(Clone, Debug)]
pub struct KillTarget {
    /// The item's direct child, leader of its own process group.
    pub pid: i32,
    /// The item's unit (its cgroup, process group, marker and leader).
    pub unit: UnitIdentity,
}

/// The kill seam. Production uses [`ProcessKiller`]; tests may pass one that does nothing to model
/// an unkillable child.
pub trait Killer: Send + Sync {
    /// Sends `signal` to every process of the item's tree it can find.
    fn signal_tree(&self, target: &KillTarget, signal: KillSignal);
    /// The item settled: kill whatever of its tree is left, reap what was reparented to us, and
    /// remove its cgroup.
    fn release(&self, target: &KillTarget);
    /// The run is over: kill and reap any process still carrying `marker_prefix`.
    fn finish_run(&self, marker_prefix: &str);
}

/// Picks the containment path (see [`containment::choose`]) and makes this process a child
/// subreaper either way.
pub fn choose_containment(force_subreaper: bool) -> Containment {
    let (chosen, reason) = containment::choose(force_subreaper);
    tracing::debug!("containment: {chosen:?} ({reason:?})");
    chosen
}

/// The marker of every item of `run_id` (a prefix): the run's own unit.
pub fn run_marker(run_id: &str) -> Marker {
    Marker::prefix(ITEM_MARKER_ENV, format!("{run_id}/"))
}

/// The marker of item `index` of `run_id`.
pub fn item_marker(run_id: &str, index: usize) -> Marker {
    Marker::exact(ITEM_MARKER_ENV, format!("{run_id}/{index}"))
}

/// Creates the run's group under `base` (`tollgate-<pid>-<n>`); items' groups go inside it.
pub fn create_run_cgroup(base: &Path) -> Option<PathBuf> {
    match cgroup::create(base, &cgroup::fresh_name()) {
        Ok(dir) => Some(dir),
        Err(e) => {
            tracing::warn!("cannot create a cgroup under {}: {e}", base.display());
            None
        }
    }
}

/// Removes empty cgroups left by runs that are gone. Returns the removed directories.
pub fn sweep_cgroups() -> Vec<PathBuf> {
    cgroup::sweep_groups()
}

/// The production killer.
#[derive(Debug, Default)]
pub struct ProcessKiller {
    /// Pids of ours (reparented descendants) to reap once dead; bounded by [`MAX_ORPHANS`].
    orphans: Mutex<HashSet<i32>>,
}

impl ProcessKiller {
    pub fn new() -> Self {
        Self::default()
    }

    fn remember(&self, target_pid: i32, killed: impl IntoIterator<Item = (i32, i32)>) {
        let own = std::process::id() as i32;
        let mut orphans = lock_orphans(&self.orphans);
        for (pid, ppid) in killed {
            if pid != target_pid && ppid == own && orphans.len() < MAX_ORPHANS {
                orphans.insert(pid);
            }
        }
    }

    fn reap_orphans(&self) {
        let own = std::process::id() as i32;
        let mut orphans = lock_orphans(&self.orphans);
        orphans.retain(|&pid| {
            if parent_of(pid) != Some(own) {
                return false;
            }
            !matches!(
                waitpid(Pid::from_raw(pid), Some(WaitPidFlag::WNOHANG)),
                Ok(WaitStatus::Exited(..)) | Ok(WaitStatus::Signaled(..)) | Err(_)
            )
        });
    }
}

impl Killer for ProcessKiller {
    fn signal_tree(&self, target: &KillTarget, signal: KillSignal) {
        fail::fail_point!("exec::kill_noop", |_| ());
        let sig = match signal {
            KillSignal::Term => Signal::SIGTERM,
            KillSignal::Kill => Signal::SIGKILL,
        };
        // The item's own group first (its leader is our child, so the pgid cannot be recycled
        // before we reap it), then the rest of its unit.
        let _ = killpg(Pid::from_raw(target.pid), sig);
        let killed = containment::signal_unit(&target.unit, sig);
        self.remember(target.pid, killed);
        self.reap_orphans();
    }

    fn release(&self, target: &KillTarget) {
        fail::fail_point!("exec::kill_noop", |_| ());
        let _ = killpg(Pid::from_raw(target.pid), Signal::SIGKILL);
        if let Some(dir) = &target.unit.cgroup {
            if !cgroup::procs(dir).is_empty() {
                let _ = cgroup::kill(dir);
            }
            // The kill is asynchronous; removal succeeds once the group is empty. A bounded
            // moment, then it is left for `tollgate sweep` (an empty group costs nothing).
            cgroup::remove_tree(dir);
        }
        // With or without a cgroup: whatever escaped the group was reparented to us.
        let killed = containment::kill_marked_children(&target.unit.marker, target.pid);
        let own = std::process::id() as i32;
        self.remember(target.pid, killed.into_iter().map(|pid| (pid, own)));
        self.reap_orphans();
    }

    fn finish_run(&self, marker_prefix: &str) {
        fail::fail_point!("exec::kill_noop", |_| ());
        let unit = UnitIdentity {
            cgroup: None,
            pgid: None,
            marker: Marker::prefix(ITEM_MARKER_ENV, marker_prefix),
            leader: None,
        };
        let killed = containment::signal_unit(&unit, Signal::SIGKILL);
        self.remember(0, killed);
        self.reap_orphans();
    }
}

fn lock_orphans(m: &Mutex<HashSet<i32>>) -> MutexGuard<'_, HashSet<i32>> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
