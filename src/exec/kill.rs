//! Killing an item's whole process tree: a cgroup v2 group (`cgroup.kill`) where one can be
//! created, else the run as a child subreaper plus a `/proc` walk (ppid links and the item's
//! environment marker) that also finds `setsid` grandchildren. SIGTERM first, SIGKILL after the
//! term grace (the core decides when).

use crate::protocol::execution::KillSignal;
use nix::sys::signal::{kill, killpg, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag};
use nix::unistd::Pid;
use std::collections::{HashMap, HashSet};
use std::fs;
use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
// Not raced under loom (it is pure bookkeeping of pids), so plain std.
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

/// Environment variable every item's process carries (`<run id>/<index>`); descendants inherit it,
/// which is how the `/proc` walk attributes a reparented `setsid` grandchild to its item.
pub const ITEM_MARKER_ENV: &str = "TOLLGATE_ITEM";
/// Set to `1` to skip cgroups and use the subreaper path.
pub const NO_CGROUP_ENV: &str = "TOLLGATE_NO_CGROUP";
/// Serial for cgroup names, unique within this process (several runs may share it).
static CGROUP_SERIAL: AtomicUsize = AtomicUsize::new(0);
/// Bound on the pids remembered for reaping.
const MAX_ORPHANS: usize = 65_536;
/// Bound on the processes a `/proc` scan looks at.
const MAX_PROC_SCAN: usize = 1 << 20;

/// Everything needed to signal one item's tree.
#[derive(Clone, Debug)]
pub struct KillTarget {
    /// The item's direct child, leader of its own process group.
    pub pid: i32,
    /// The item's cgroup directory, if it has one.
    pub cgroup: Option<PathBuf>,
    /// The value of [`ITEM_MARKER_ENV`] in the item's environment.
    pub marker: String,
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

/// How item trees are contained.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Containment {
    /// Each item gets `<base>/tollgate-<pid>-<n>`.
    Cgroup { base: PathBuf },
    /// The run is a child subreaper and walks `/proc`.
    Subreaper,
}

/// Picks cgroups when a group can be created under the current cgroup v2 group (and
/// `TOLLGATE_NO_CGROUP` is not `1`). Either way this process becomes a child subreaper: items are
/// moved into their cgroup just after the spawn, so a grandchild forked in that window stays
/// outside the group; as a subreaper the run still gets it back when its parent dies and kills it
/// by the item's marker.
pub fn choose_containment(force_subreaper: bool) -> Containment {
    // If this fails we still walk /proc; reparented grandchildren then go to init instead of us.
    if let Err(e) = nix::sys::prctl::set_child_subreaper(true) {
        tracing::warn!("PR_SET_CHILD_SUBREAPER failed: {e}");
    }
    if !force_subreaper {
        if let Some(base) = cgroup_base() {
            let serial = CGROUP_SERIAL.fetch_add(1, Ordering::Relaxed);
            let probe = base.join(format!("tollgate-{}-probe-{serial}", std::process::id()));
            if fs::create_dir(&probe).is_ok() {
                let usable = probe.join("cgroup.kill").exists();
                let _ = fs::remove_dir(&probe);
                if usable {
                    return Containment::Cgroup { base };
                }
            }
        }
    }
    Containment::Subreaper
}

/// The directory of this process's cgroup in the cgroup v2 hierarchy, if mounted.
fn cgroup_base() -> Option<PathBuf> {
    let mountinfo = fs::read_to_string("/proc/self/mountinfo").ok()?;
    let mount = mountinfo.lines().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        let fstype = right.split_whitespace().next()?;
        (fstype == "cgroup2").then(|| left.split_whitespace().nth(4).map(PathBuf::from))?
    })?;
    let own = fs::read_to_string("/proc/self/cgroup").ok()?;
    let rel = own.lines().find_map(|l| l.strip_prefix("0::"))?;
    Some(mount.join(rel.trim_start_matches('/')))
}

/// Creates the cgroup for one item. `None` when it cannot (the item then runs uncontained by a
/// cgroup, still in its own process group).
pub fn create_cgroup(base: &Path) -> Option<PathBuf> {
    let serial = CGROUP_SERIAL.fetch_add(1, Ordering::Relaxed);
    let dir = base.join(format!("tollgate-{}-{serial}", std::process::id()));
    match fs::create_dir(&dir) {
        Ok(()) => Some(dir),
        Err(e) => {
            tracing::warn!("cannot create cgroup {}: {e}", dir.display());
            None
        }
    }
}

/// Removes cgroups left by runs that are gone (an abandoned item's group cannot be removed while
/// its process lives). Non-empty groups stay. Returns the removed directories.
pub fn sweep_cgroups() -> Vec<PathBuf> {
    let mut removed = Vec::new();
    let Some(base) = cgroup_base() else {
        return removed;
    };
    let Ok(dir) = fs::read_dir(&base) else {
        return removed;
    };
    for entry in dir.flatten().take(MAX_PROC_SCAN) {
        let name = entry.file_name();
        let Some(owner) = name
            .to_str()
            .and_then(|n| n.strip_prefix("tollgate-"))
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<i32>().ok())
        else {
            continue;
        };
        if is_alive(owner) {
            continue;
        }
        if fs::remove_dir(entry.path()).is_ok() {
            removed.push(entry.path());
        }
    }
    removed
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

    fn signal_pids(&self, target: &KillTarget, signal: Signal) {
        let pids = tree_pids(target.pid, Some(&target.marker));
        let own = std::process::id() as i32;
        let mut orphans = lock_orphans(&self.orphans);
        for (pid, ppid) in pids {
            let _ = kill(Pid::from_raw(pid), signal);
            if pid != target.pid && ppid == own && orphans.len() < MAX_ORPHANS {
                orphans.insert(pid);
            }
        }
    }

    /// Subreaper path, item settled: its root is gone, so whatever of its tree escaped the
    /// process group (a `setsid` grandchild) was reparented to this process. Kill those children
    /// of ours that carry the item's marker, with their subtrees. Cheap when there are none: one
    /// read of each of our threads' `children` file.
    fn kill_reparented_leftovers(&self, target: &KillTarget) {
        let own = std::process::id() as i32;
        let exact = format!("{ITEM_MARKER_ENV}={}", target.marker);
        let leftovers: Vec<i32> = children_of(own)
            .into_iter()
            .filter(|&pid| pid != target.pid)
            .filter(|&pid| {
                fs::read(format!("/proc/{pid}/environ"))
                    .is_ok_and(|env| env.split(|&b| b == 0).any(|v| v == exact.as_bytes()))
            })
            .collect();
        if leftovers.is_empty() {
            return;
        }
        let mut orphans = lock_orphans(&self.orphans);
        let mut stack = leftovers.clone();
        let mut budget = MAX_ORPHANS;
        while let Some(pid) = stack.pop() {
            if budget == 0 {
                break;
            }
            budget -= 1;
            // Stop it first so it cannot fork while its subtree is collected.
            let _ = kill(Pid::from_raw(pid), Signal::SIGSTOP);
            stack.extend(children_of(pid));
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            if leftovers.contains(&pid) && orphans.len() < MAX_ORPHANS {
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
                Ok(nix::sys::wait::WaitStatus::Exited(..))
                    | Ok(nix::sys::wait::WaitStatus::Signaled(..))
                    | Err(_)
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
        let _ = killpg(Pid::from_raw(target.pid), sig);
        if let Some(cgroup) = &target.cgroup {
            match signal {
                KillSignal::Kill => {
                    if let Err(e) = write_file(&cgroup.join("cgroup.kill"), b"1") {
                        tracing::warn!("cgroup.kill in {}: {e}", cgroup.display());
                    }
                }
                KillSignal::Term => {
                    for pid in cgroup_pids(cgroup) {
                        let _ = kill(Pid::from_raw(pid), sig);
                    }
                }
            }
        }
        self.signal_pids(target, sig);
        self.reap_orphans();
    }

    fn release(&self, target: &KillTarget) {
        fail::fail_point!("exec::kill_noop", |_| ());
        let _ = killpg(Pid::from_raw(target.pid), Signal::SIGKILL);
        if let Some(cgroup) = &target.cgroup {
            if !cgroup_pids(cgroup).is_empty() {
                let _ = write_file(&cgroup.join("cgroup.kill"), b"1");
            }
            // The kill is asynchronous; rmdir succeeds once the group is empty. A few tries, then
            // leave it for `tollgate sweep` (an empty cgroup costs nothing meanwhile).
            for _ in 0..50 {
                if fs::remove_dir(cgroup).is_ok() || !cgroup.exists() {
                    break;
                }
                std::thread::yield_now();
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
        }
        // With or without a cgroup: whatever escaped the group was reparented to us.
        self.kill_reparented_leftovers(target);
        self.reap_orphans();
    }

    fn finish_run(&self, marker_prefix: &str) {
        fail::fail_point!("exec::kill_noop", |_| ());
        let own = std::process::id() as i32;
        let procs = scan_proc();
        let mut orphans = lock_orphans(&self.orphans);
        for (pid, info) in &procs {
            if environ_has_marker(*pid, marker_prefix) {
                let _ = kill(Pid::from_raw(*pid), Signal::SIGKILL);
                if info.ppid == own && orphans.len() < MAX_ORPHANS {
                    orphans.insert(*pid);
                }
            }
        }
        drop(orphans);
        self.reap_orphans();
    }
}

struct ProcInfo {
    ppid: i32,
}

/// Every process's parent, from `/proc/<pid>/stat`.
fn scan_proc() -> HashMap<i32, ProcInfo> {
    let mut out = HashMap::new();
    let Ok(dir) = fs::read_dir("/proc") else {
        return out;
    };
    for entry in dir.flatten().take(MAX_PROC_SCAN) {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        if let Some(ppid) = parent_of(pid) {
            out.insert(pid, ProcInfo { ppid });
        }
    }
    out
}

/// The parent pid of `pid`, or `None` if it is gone.
pub fn parent_of(pid: i32) -> Option<i32> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may contain spaces and parentheses; fields resume after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// Whether `pid` exists and is not a zombie.
pub fn is_alive(pid: i32) -> bool {
    let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let state = stat
        .rfind(')')
        .and_then(|i| stat[i + 1..].split_whitespace().next());
    !matches!(state, Some("Z") | Some("X") | None)
}

fn environ_has_marker(pid: i32, marker_prefix: &str) -> bool {
    let Ok(environ) = fs::read(format!("/proc/{pid}/environ")) else {
        return false;
    };
    let wanted = format!("{ITEM_MARKER_ENV}={marker_prefix}");
    environ
        .split(|&b| b == 0)
        .any(|var| var.starts_with(wanted.as_bytes()))
}

/// The item's tree: descendants of `root` by ppid links plus any process carrying `marker`
/// exactly, as `(pid, ppid)`.
fn tree_pids(root: i32, marker: Option<&str>) -> Vec<(i32, i32)> {
    let procs = scan_proc();
    let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
    for (pid, info) in &procs {
        children.entry(info.ppid).or_default().push(*pid);
    }
    let mut found: HashSet<i32> = HashSet::new();
    let mut stack = vec![root];
    while let Some(pid) = stack.pop() {
        if found.insert(pid) {
            if let Some(kids) = children.get(&pid) {
                stack.extend(kids);
            }
        }
    }
    if let Some(marker) = marker {
        let exact = format!("{ITEM_MARKER_ENV}={marker}");
        for pid in procs.keys() {
            if found.contains(pid) {
                continue;
            }
            if let Ok(environ) = fs::read(format!("/proc/{pid}/environ")) {
                if environ.split(|&b| b == 0).any(|v| v == exact.as_bytes()) {
                    // Its own subtree too.
                    let mut stack = vec![*pid];
                    while let Some(p) = stack.pop() {
                        if found.insert(p) {
                            if let Some(kids) = children.get(&p) {
                                stack.extend(kids);
                            }
                        }
                    }
                }
            }
        }
    }
    found
        .into_iter()
        .filter_map(|pid| procs.get(&pid).map(|info| (pid, info.ppid)))
        .collect()
}

/// The children of `pid` (all its threads'), from `/proc/<pid>/task/<tid>/children`.
fn children_of(pid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for task in tasks.flatten() {
        if let Ok(kids) = fs::read_to_string(task.path().join("children")) {
            out.extend(
                kids.split_whitespace()
                    .filter_map(|k| k.parse::<i32>().ok()),
            );
        }
    }
    out
}

fn cgroup_pids(cgroup: &Path) -> Vec<i32> {
    fs::read_to_string(cgroup.join("cgroup.procs"))
        .map(|s| s.lines().filter_map(|l| l.trim().parse().ok()).collect())
        .unwrap_or_default()
}

fn write_file(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    fs::OpenOptions::new()
        .write(true)
        .open(path)?
        .write_all(bytes)
}

/// Moves a freshly spawned item (and any child it already forked) into its cgroup.
///
/// Joining between fork and exec (a `pre_exec` hook) would close the window completely, but it
/// forces `fork` instead of `posix_spawn` and costs ~0.7 ms per item; instead the run adopts the
/// child right after the spawn returns, then its already-forked descendants through
/// `/proc/<pid>/task/<tid>/children`. A process that still slipped out is caught by the kill's
/// `/proc` walk, which matches the item's environment marker.
pub fn adopt_into_cgroup(dir: &Path, pid: i32) -> std::io::Result<()> {
    let procs = dir.join("cgroup.procs");
    write_file(&procs, pid.to_string().as_bytes())?;
    let mut stack = vec![pid];
    let mut budget = 4096usize;
    while let Some(p) = stack.pop() {
        let Ok(tasks) = fs::read_dir(format!("/proc/{p}/task")) else {
            continue;
        };
        for task in tasks.flatten() {
            let Ok(kids) = fs::read_to_string(task.path().join("children")) else {
                continue;
            };
            for kid in kids
                .split_whitespace()
                .filter_map(|k| k.parse::<i32>().ok())
            {
                if budget == 0 {
                    return Ok(());
                }
                budget -= 1;
                // It may have exited meanwhile; that is fine.
                let _ = write_file(&procs, kid.to_string().as_bytes());
                stack.push(kid);
            }
        }
    }
    Ok(())
}

fn lock_orphans(m: &Mutex<HashSet<i32>>) -> MutexGuard<'_, HashSet<i32>> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
