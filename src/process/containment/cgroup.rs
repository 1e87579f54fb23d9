//! The cgroup v2 half of containment: finding this process's group in the v2 hierarchy (a hybrid
//! host mounts it at `/sys/fs/cgroup/unified` next to v1 controllers), probing whether a child
//! group can be created there and has `cgroup.kill`, creating, adopting into, killing and removing
//! groups. The parsing and the decision are pure functions, tested where no group can be made.

use crate::process::procfs;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Prefix of every group tollgate creates: `tollgate-<owner pid>-<serial>`.
pub const GROUP_PREFIX: &str = "tollgate-";
/// Serial for group names, unique within this process (several runs may share it).
static SERIAL: AtomicUsize = AtomicUsize::new(0);
/// Bound on the groups one walk of a unit's subtree visits.
const MAX_GROUPS: usize = 65_536;
/// Bound on the pids an adoption moves.
const MAX_ADOPT: usize = 4096;
/// How long a removal waits for an asynchronous `cgroup.kill` to empty the group.
const REMOVE_WAIT_MILLIS: u64 = 500;

/// Undoes the octal escapes (`\040` for a space, ...) the kernel writes in mountinfo paths.
fn unescape_mount_path(raw: &str) -> String {
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = (bytes[i] == b'\\')
            .then(|| bytes.get(i + 1..i + 4))
            .flatten()
            .filter(|d| d.iter().all(|b| (b'0'..=b'7').contains(b)))
            .and_then(|d| u8::from_str_radix(std::str::from_utf8(d).ok()?, 8).ok());
        match escaped {
            Some(b) => {
                out.push(b);
                i += 4;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The mount point of the cgroup v2 hierarchy in a `/proc/self/mountinfo` text: the first line
/// whose filesystem type (after the ` - ` separator) is `cgroup2`. v1 lines (`cgroup`) are skipped.
pub fn cgroup2_mount(mountinfo: &str) -> Option<PathBuf> {
    mountinfo.lines().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        let fstype = right.split_whitespace().next()?;
        if fstype != "cgroup2" {
            return None;
        }
        left.split_whitespace()
            .nth(4)
            .map(|p| PathBuf::from(unescape_mount_path(p)))
    })
}

/// This process's group in the v2 hierarchy, from a `/proc/self/cgroup` text: the `0::<path>`
/// line. v1 lines (`4:memory:/...`) are ignored.
pub fn own_v2_group(self_cgroup: &str) -> Option<&str> {
    self_cgroup.lines().find_map(|l| l.strip_prefix("0::"))
}

/// Where this process's own v2 group lives on disk, from the two texts.
pub fn base_from(mountinfo: &str, self_cgroup: &str) -> Option<PathBuf> {
    let mount = cgroup2_mount(mountinfo)?;
    let rel = own_v2_group(self_cgroup)?;
    // A process whose group was removed reads "/path (deleted)"; nothing can be created there.
    if rel.ends_with(" (deleted)") {
        return None;
    }
    Some(mount.join(rel.trim_start_matches('/')))
}

/// The directory of this process's cgroup in the v2 hierarchy, if one is mounted.
pub fn base() -> Option<PathBuf> {
    let mountinfo = fs::read_to_string("/proc/self/mountinfo").ok()?;
    let own = fs::read_to_string("/proc/self/cgroup").ok()?;
    base_from(&mountinfo, &own)
}

/// What a probe under the base found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Probe {
    /// A child group could not be created (no delegation, read-only, no permission).
    CannotCreate,
    /// One was created but has no `cgroup.kill` (kernel before 5.14).
    NoKill,
    /// A group can be created and killed as a whole.
    Usable,
}

/// Creates and removes a probe group under `base`.
pub fn probe(base: &Path) -> Probe {
    let serial = SERIAL.fetch_add(1, Ordering::Relaxed);
    let dir = base.join(format!(
        "{GROUP_PREFIX}{}-probe-{serial}",
        std::process::id()
    ));
    if fs::create_dir(&dir).is_err() {
        return Probe::CannotCreate;
    }
    let has_kill = dir.join("cgroup.kill").exists();
    let _ = fs::remove_dir(&dir);
    if has_kill {
        Probe::Usable
    } else {
        Probe::NoKill
    }
}

/// A fresh group name for a unit owned by this process.
pub fn fresh_name() -> String {
    let serial = SERIAL.fetch_add(1, Ordering::Relaxed);
    format!("{GROUP_PREFIX}{}-{serial}", std::process::id())
}

/// Creates `parent/name`.
pub fn create(parent: &Path, name: &str) -> io::Result<PathBuf> {
    let dir = parent.join(name);
    fs::create_dir(&dir)?;
    Ok(dir)
}

fn write_file(path: &Path, bytes: &[u8]) -> io::Result<()> {
    fs::OpenOptions::new()
        .write(true)
        .open(path)?
        .write_all(bytes)
}

/// The `cgroup.procs` file of `dir` as a C string, made before a fork: the forked child may not
/// allocate, so [`join_in_child`] gets it ready-made.
pub fn procs_path(dir: &Path) -> Option<std::ffi::CString> {
    use std::os::unix::ffi::OsStringExt;
    std::ffi::CString::new(dir.join("cgroup.procs").into_os_string().into_vec()).ok()
}

/// Moves the calling process into the group whose `cgroup.procs` is `procs`. Called in a forked
/// child before exec (a `pre_exec` hook), so the command and everything it ever forks start
/// inside the group: adopting the child after the spawn left a window in which a fast command
/// forked outside it (seen in CI: the leader still in `/`). Only async-signal-safe calls (open,
/// write, close) and no allocation. A failure here is left to the parent's [`adopt`] and to the
/// unit's marker.
pub fn join_in_child(procs: &std::ffi::CStr) {
    // SAFETY: open, write and close are async-signal-safe syscalls; `procs` is a valid
    // NUL-terminated path and the buffer is a static one-byte string ("0" = the writer itself).
    unsafe {
        let fd = libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd >= 0 {
            let _ = libc::write(fd, b"0".as_ptr().cast(), 1);
            libc::close(fd);
        }
    }
}

/// Moves a spawned process (and any child it already forked) into `dir`: the fallback for a
/// child whose own [`join_in_child`] failed, and for callers that cannot hook the fork. Its
/// already-forked descendants are found through `/proc/<pid>/task/<tid>/children`; a process
/// that still slipped out is found by the unit's environment marker.
pub fn adopt(dir: &Path, pid: i32) -> io::Result<()> {
    let procs = dir.join("cgroup.procs");
    write_file(&procs, pid.to_string().as_bytes())?;
    let mut stack = vec![pid];
    let mut budget = MAX_ADOPT;
    while let Some(p) = stack.pop() {
        for kid in procfs::children_of(p) {
            if budget == 0 {
                return Ok(());
            }
            budget -= 1;
            // It may have exited meanwhile; that is fine.
            let _ = write_file(&procs, kid.to_string().as_bytes());
            stack.push(kid);
        }
    }
    Ok(())
}

/// `dir` and every group below it, parents first (bounded by [`MAX_GROUPS`]).
fn subtree(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        if out.len() >= MAX_GROUPS {
            break;
        }
        if let Ok(entries) = fs::read_dir(&d) {
            for e in entries.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    stack.push(e.path());
                }
            }
        }
        out.push(d);
    }
    out
}

/// Every pid in `dir` and the groups below it.
pub fn procs(dir: &Path) -> Vec<i32> {
    let mut out = Vec::new();
    for group in subtree(dir) {
        if let Ok(text) = fs::read_to_string(group.join("cgroup.procs")) {
            out.extend(text.lines().filter_map(|l| l.trim().parse::<i32>().ok()));
        }
    }
    out
}

/// Whether `dir` or a group below it holds a live process: the `populated` key of its
/// `cgroup.events` (the kernel keeps it for the whole subtree, zombies excluded). `None` when the
/// file cannot be read or parsed (no group there, or not a v2 group): the caller then knows nothing.
pub fn populated(dir: &Path) -> Option<bool> {
    parse_populated(&fs::read_to_string(dir.join("cgroup.events")).ok()?)
}

/// The `populated` key of a `cgroup.events` text (`populated 0` / `populated 1`).
pub fn parse_populated(events: &str) -> Option<bool> {
    events
        .lines()
        .find_map(|l| l.strip_prefix("populated "))
        .and_then(|v| match v.trim() {
            "0" => Some(false),
            "1" => Some(true),
            _ => None,
        })
}

/// SIGKILLs everything in `dir` and below, atomically with respect to forks (`cgroup.kill`).
pub fn kill(dir: &Path) -> io::Result<()> {
    write_file(&dir.join("cgroup.kill"), b"1")
}

/// Removes `dir` and the groups below it, children first. The kernel finishes a kill
/// asynchronously, so a group that is still busy is retried for a bounded moment. Returns whether
/// `dir` is gone.
pub fn remove_tree(dir: &Path) -> bool {
    let until = Instant::now() + Duration::from_millis(REMOVE_WAIT_MILLIS);
    loop {
        let mut groups = subtree(dir);
        groups.reverse();
        for g in &groups {
            let _ = fs::remove_dir(g);
        }
        if !dir.exists() {
            return true;
        }
        if Instant::now() >= until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// The owner pid encoded in a group name `tollgate-<pid>-...`.
pub fn owner_of(name: &str) -> Option<i32> {
    name.strip_prefix(GROUP_PREFIX)?
        .split('-')
        .next()?
        .parse()
        .ok()
}

/// Removes the empty groups (with their empty sub-groups) left under this process's base by
/// owners that are gone. Non-empty groups stay. Returns the removed directories.
pub fn sweep_groups() -> Vec<PathBuf> {
    let mut removed = Vec::new();
    let Some(base) = base() else {
        return removed;
    };
    let Ok(dir) = fs::read_dir(&base) else {
        return removed;
    };
    for entry in dir.flatten().take(MAX_GROUPS) {
        let Some(owner) = entry.file_name().to_str().and_then(owner_of) else {
            continue;
        };
        if procfs::is_alive(owner) || !procs(&entry.path()).is_empty() {
            continue;
        }
        let mut groups = subtree(&entry.path());
        groups.reverse();
        for g in &groups {
            let _ = fs::remove_dir(g);
        }
        if !entry.path().exists() {
            removed.push(entry.path());
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This host's hybrid layout: v1 controllers, then cgroup2 at `/sys/fs/cgroup/unified`.
    const HYBRID_MOUNTINFO: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";
    const HYBRID_SELF: &str = "\
9:name=systemd:/
4:memory:/process_api/e93d
1:cpu:/
0::/
";

    #[test]
    fn hybrid_host_finds_the_unified_mount_and_the_root_group() {
        assert_eq!(
            cgroup2_mount(HYBRID_MOUNTINFO),
            Some(PathBuf::from("/sys/fs/cgroup/unified"))
        );
        assert_eq!(own_v2_group(HYBRID_SELF), Some("/"));
        assert_eq!(
            base_from(HYBRID_MOUNTINFO, HYBRID_SELF),
            Some(PathBuf::from("/sys/fs/cgroup/unified"))
        );
    }

    #[test]
    fn unified_host_with_a_nested_group_and_an_escaped_mount_point() {
        let mountinfo =
            "29 23 0:26 / /sys/fs/cgroup\\040v2 rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n";
        let own = "0::/user.slice/user-1000.slice/session-2.scope\n";
        assert_eq!(
            base_from(mountinfo, own),
            Some(PathBuf::from(
                "/sys/fs/cgroup v2/user.slice/user-1000.slice/session-2.scope"
            ))
        );
    }

    #[test]
    fn populated_is_read_from_cgroup_events() {
        assert_eq!(parse_populated("populated 0\nfrozen 0\n"), Some(false));
        assert_eq!(parse_populated("populated 1\nfrozen 0\n"), Some(true));
        assert_eq!(parse_populated("frozen 0\n"), None);
        assert_eq!(parse_populated("populated x\n"), None);
        assert_eq!(populated(Path::new("/nonexistent/tollgate-test")), None);
    }

    #[test]
    fn v1_only_or_removed_group_has_no_base() {
        let v1 = "32 31 0:29 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n";
        assert_eq!(cgroup2_mount(v1), None);
        assert_eq!(base_from(v1, "0::/\n"), None);
        assert_eq!(own_v2_group("4:memory:/x\n1:cpu:/\n"), None);
        assert_eq!(
            base_from(HYBRID_MOUNTINFO, "0::/gone (deleted)\n"),
            None,
            "a removed group cannot take children"
        );
    }

    #[test]
    fn group_names_carry_their_owner() {
        assert_eq!(owner_of("tollgate-4242-7"), Some(4242));
        assert_eq!(owner_of("tollgate-4242-probe-1"), Some(4242));
        assert_eq!(owner_of("other-4242-7"), None);
        assert_eq!(owner_of("tollgate-x-7"), None);
        let name = fresh_name();
        assert_eq!(owner_of(&name), Some(std::process::id() as i32));
        assert_ne!(fresh_name(), name);
    }
}
