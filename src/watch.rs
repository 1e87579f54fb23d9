//! Waiting for a turn without polling: one way to sleep until "this turn's folder changed" (its
//! record published by rename, its output growing) or "its runner died", with a bounded fallback
//! poll so a missed event only costs latency.
//!
//! The events are inotify on the turn folders (`IN_ATTRIB` for a record committed in the
//! database, which sets the folder's times; `IN_MOVED_TO` for the rename publish of `turn.json`,
//! `IN_CLOSE_WRITE`, and `IN_MODIFY` when the caller streams output) and a pidfd of
//! the runner (`pidfd_open`, Linux ≥ 5.3), readable once the runner has exited. Where either is
//! refused (another filesystem, `max_user_watches` or `max_user_instances` reached, an older
//! kernel) the wait degrades to a sleep of [`FALLBACK_POLL_MILLIS`]; the caller re-reads what it
//! watches after every wake, so correctness never depends on an event arriving.
//!
//! No lost wake-up: create the watch *before* the first read of the record; a change after that
//! read is queued in the inotify instance and ends the next [`TurnWatch::wait`] at once.
//!
//! A queued turn may have no folder yet (it is made by its runner, spec/turns.md "The turn
//! folder"): its nearest existing ancestor is watched for entries made in it ([`ancestor_mask`]),
//! and each wake tries the folder itself again; the wait that finds it there returns
//! [`Wake::Changed`], so the caller reads again whatever changed before the folder was watched.
//!
//! `TOLLGATE_TEST_NO_WATCH=1` refuses both the inotify watch and the pidfd, so tests can prove
//! the fallback path completes. It exists for tests only.

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};
use std::os::fd::{AsFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The longest one wait sleeps when no event arrives: the latency a missed event costs, and the
/// period of the `/proc` check of a runner no pidfd watches.
pub const FALLBACK_POLL_MILLIS: u64 = 1_000;

/// Bound on the folders one [`TurnWatch`] watches; beyond it the wait is the fallback poll.
pub const MAX_WATCHED_DIRS: usize = 64;

/// The variable that makes every watch refused (tests of the fallback path only).
pub const NO_WATCH_ENV: &str = "TOLLGATE_TEST_NO_WATCH";

/// Whether events are refused for this process (the test switch).
pub fn events_refused() -> bool {
    std::env::var_os(NO_WATCH_ENV).is_some_and(|v| v == "1")
}

/// Why a [`TurnWatch::wait`] returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wake {
    /// A watched folder changed (a record published, output written).
    Changed,
    /// The watched runner has exited (its pidfd became readable, or it was already gone).
    RunnerEnded,
    /// Nothing arrived within the fallback period (or events are unavailable): check by reading.
    Fallback,
}

/// The inotify events that mean "a watched folder changed", for [`TurnWatch::new`] and serve.
/// `IN_ATTRIB` is the signal of a record committed in the database (the folder's times set,
/// [`crate::queue::records`]); the others are files published, written or created in it.
pub fn dir_mask(with_output: bool) -> AddWatchFlags {
    let mut mask = AddWatchFlags::IN_MOVED_TO
        | AddWatchFlags::IN_ATTRIB
        | AddWatchFlags::IN_CLOSE_WRITE
        | AddWatchFlags::IN_CREATE
        | AddWatchFlags::IN_DELETE_SELF
        | AddWatchFlags::IN_ONLYDIR;
    if with_output {
        mask |= AddWatchFlags::IN_MODIFY;
    }
    mask
}

/// The inotify events of the nearest existing ancestor of a folder not made yet: an entry made in
/// it (the folder, or a folder on the way to it).
pub fn ancestor_mask() -> AddWatchFlags {
    AddWatchFlags::IN_CREATE
        | AddWatchFlags::IN_MOVED_TO
        | AddWatchFlags::IN_DELETE_SELF
        | AddWatchFlags::IN_ONLYDIR
}

/// Watches the nearest existing ancestor of `dir` (a folder not made yet) with [`ancestor_mask`];
/// its descriptor and path, or `None` when none could be watched (the caller polls).
pub fn watch_ancestor(inotify: &Inotify, dir: &Path) -> Option<(WatchDescriptor, PathBuf)> {
    for parent in dir.ancestors().skip(1) {
        if parent.as_os_str().is_empty() {
            break;
        }
        match inotify.add_watch(parent, ancestor_mask()) {
            Ok(wd) => return Some((wd, parent.to_path_buf())),
            Err(nix::errno::Errno::ENOENT) => continue,
            Err(e) => {
                tracing::debug!(
                    "cannot watch {} ({e}); waiting by polling",
                    parent.display()
                );
                return None;
            }
        }
    }
    None
}

/// Opens a non-blocking inotify instance, or `None` when refused (logged, not an error).
pub fn inotify_instance() -> Option<Inotify> {
    if events_refused() {
        return None;
    }
    match Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC) {
        Ok(inotify) => Some(inotify),
        Err(e) => {
            tracing::debug!("inotify refused ({e}); waiting by polling");
            None
        }
    }
}

/// Sleeps for `duration`, or less if the folder `dir` is deleted or moved away meanwhile: a
/// waker (`worker wake`) whose home is gone has nothing left to wake, and must not outlive it by
/// hours (a removed test home, a home deleted by hand). Returns whether `dir` is still there.
/// Without inotify it sleeps the whole `duration`.
pub fn sleep_unless_removed(dir: &Path, duration: Duration) -> bool {
    let deadline = Instant::now() + duration;
    let mask =
        AddWatchFlags::IN_DELETE_SELF | AddWatchFlags::IN_MOVE_SELF | AddWatchFlags::IN_ONLYDIR;
    let inotify = match inotify_instance().map(|inotify| {
        let added = inotify.add_watch(dir, mask);
        (inotify, added)
    }) {
        Some((inotify, Ok(_))) => inotify,
        // Removed before the watch could be added (a waker that had just started when its home
        // was deleted): there is nothing to sleep for.
        Some((_, Err(_))) if !dir.is_dir() => return false,
        Some((_, Err(_))) | None => {
            std::thread::sleep(duration);
            return dir.is_dir();
        }
    };
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return dir.is_dir();
        }
        let mut fds = [PollFd::new(inotify.as_fd(), PollFlags::POLLIN)];
        let timeout = PollTimeout::try_from(left).unwrap_or(PollTimeout::MAX);
        match poll(&mut fds, timeout) {
            Ok(0) | Err(nix::errno::Errno::EINTR) => continue,
            Ok(_) => {
                if inotify.read_events().is_ok_and(|events| {
                    events.iter().any(|e| {
                        e.mask.intersects(
                            AddWatchFlags::IN_DELETE_SELF
                                | AddWatchFlags::IN_MOVE_SELF
                                | AddWatchFlags::IN_IGNORED,
                        )
                    })
                }) {
                    return dir.is_dir();
                }
            }
            Err(_) => {
                std::thread::sleep(left);
                return dir.is_dir();
            }
        }
    }
}

/// A pidfd of `pid` (readable once it exits), or `None` when refused or `pid` is gone.
pub(crate) fn pidfd_open(pid: u32) -> Result<OwnedFd, nix::errno::Errno> {
    if events_refused() {
        return Err(nix::errno::Errno::ENOSYS);
    }
    let pid = libc::pid_t::try_from(pid).map_err(|_| nix::errno::Errno::EINVAL)?;
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1; no memory is
    // shared with the kernel.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0u32) };
    if fd < 0 {
        return Err(nix::errno::Errno::last());
    }
    let fd = i32::try_from(fd).map_err(|_| nix::errno::Errno::EBADF)?;
    // SAFETY: `fd` was just returned by pidfd_open and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// One wait's watch: inotify on the turns' folders and, once known, a pidfd of the runner.
pub struct TurnWatch {
    inotify: Option<Inotify>,
    /// The folders not made yet: their nearest existing ancestor is watched, and each wait tries
    /// the folder again.
    missing: Vec<PathBuf>,
    mask: AddWatchFlags,
    runner: Option<(u32, OwnedFd)>,
    /// The runner's pid was gone when we tried to open its pidfd: the next wait says so at once.
    runner_gone: bool,
    fallback: Duration,
}

impl TurnWatch {
    /// Watches `dirs` (at most [`MAX_WATCHED_DIRS`]; more, or any refused, means the fallback
    /// poll). `with_output` also wakes on writes to the folder's files (streamed logs).
    pub fn new(dirs: &[PathBuf], with_output: bool) -> Self {
        let mut inotify = if dirs.len() <= MAX_WATCHED_DIRS {
            inotify_instance()
        } else {
            None
        };
        let mut missing = Vec::new();
        if let Some(instance) = &inotify {
            for dir in dirs {
                match instance.add_watch(dir.as_path(), dir_mask(with_output)) {
                    Ok(_) => {}
                    // A queued turn's folder not made yet: wait for it on its ancestor.
                    Err(nix::errno::Errno::ENOENT)
                        if watch_ancestor(instance, dir.as_path()).is_some() =>
                    {
                        missing.push(dir.clone());
                    }
                    Err(e) => {
                        tracing::debug!("cannot watch {} ({e}); waiting by polling", dir.display());
                        inotify = None;
                        break;
                    }
                }
            }
        }
        TurnWatch {
            inotify,
            missing,
            mask: dir_mask(with_output),
            runner: None,
            runner_gone: false,
            fallback: Duration::from_millis(FALLBACK_POLL_MILLIS),
        }
    }

    /// Whether a folder change wakes this watch (false: only the fallback poll does).
    pub fn has_events(&self) -> bool {
        self.inotify.is_some()
    }

    /// Whether the runner `pid` is followed by a pidfd (so its death wakes the wait).
    pub fn follows(&self, pid: u32) -> bool {
        self.runner.as_ref().is_some_and(|(p, _)| *p == pid)
    }

    /// Follows the runner `pid`: its exit wakes the next wait. The caller still checks the
    /// runner's identity by reading (a pid reused before the open is caught on the fallback tick).
    pub fn follow_runner(&mut self, pid: u32) {
        if self.follows(pid) {
            return;
        }
        self.runner = None;
        match pidfd_open(pid) {
            Ok(fd) => self.runner = Some((pid, fd)),
            Err(nix::errno::Errno::ESRCH) => self.runner_gone = true,
            Err(e) => tracing::debug!("pidfd_open({pid}) refused ({e}); checking /proc instead"),
        }
    }

    /// Watches the folders made since the last try (`true`: one was, and what happened in it
    /// before its watch was not seen), and the nearest ancestor of those still missing.
    fn arm_missing(&mut self) -> bool {
        let Some(instance) = &self.inotify else {
            return false;
        };
        let mut appeared = false;
        let mut refused = false;
        self.missing.retain(|dir| {
            match instance.add_watch(dir.as_path(), self.mask) {
                Ok(_) => {
                    appeared = true;
                    false
                }
                Err(nix::errno::Errno::ENOENT) => {
                    // A folder on the way may have been made: watch the nearest one now.
                    refused |= watch_ancestor(instance, dir.as_path()).is_none();
                    true
                }
                Err(_) => {
                    refused = true;
                    true
                }
            }
        });
        if refused {
            tracing::debug!("cannot watch a turn folder's ancestor; waiting by polling");
            self.inotify = None;
        }
        appeared
    }

    /// Sleeps until a watched folder changes, the runner exits, or the fallback period passes.
    pub fn wait(&mut self) -> Wake {
        if std::mem::take(&mut self.runner_gone) {
            return Wake::RunnerEnded;
        }
        if !self.missing.is_empty() && self.arm_missing() {
            return Wake::Changed;
        }
        let deadline = Instant::now() + self.fallback;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Wake::Fallback;
            }
            let (inotify, runner) = (self.inotify.as_ref(), self.runner.as_ref());
            if inotify.is_none() && runner.is_none() {
                std::thread::sleep(left);
                return Wake::Fallback;
            }
            let mut fds = Vec::with_capacity(2);
            if let Some(instance) = inotify {
                fds.push(PollFd::new(instance.as_fd(), PollFlags::POLLIN));
            }
            if let Some((_, fd)) = runner {
                fds.push(PollFd::new(fd.as_fd(), PollFlags::POLLIN));
            }
            let timeout = PollTimeout::try_from(left).unwrap_or(PollTimeout::MAX);
            match poll(&mut fds, timeout) {
                Ok(0) => return Wake::Fallback,
                Ok(_) => {}
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => {
                    tracing::debug!("poll failed ({e}); waiting by polling");
                    drop(fds);
                    self.inotify = None;
                    self.runner = None;
                    continue;
                }
            }
            let ready =
                |fd: Option<&PollFd>| fd.and_then(|f| f.revents()).is_some_and(|r| !r.is_empty());
            let changed = inotify.is_some() && ready(fds.first());
            let ended = runner.is_some() && ready(fds.get(usize::from(inotify.is_some())));
            drop(fds);
            if changed {
                self.drain();
                if !self.missing.is_empty() {
                    self.arm_missing();
                }
            }
            if ended {
                // A pidfd stays readable once its process exited: stop following it.
                self.runner = None;
                return Wake::RunnerEnded;
            }
            if changed {
                return Wake::Changed;
            }
        }
    }

    /// Reads every queued event (they are coalesced: the caller re-reads the folder anyway).
    fn drain(&mut self) {
        let Some(instance) = &self.inotify else {
            return;
        };
        // Bounded: each read empties up to a kernel buffer; the queue itself is bounded.
        for _ in 0..64 {
            match instance.read_events() {
                Ok(events) if !events.is_empty() => {
                    if events
                        .iter()
                        .any(|e| e.mask.contains(AddWatchFlags::IN_Q_OVERFLOW))
                    {
                        tracing::debug!("inotify queue overflowed; the caller re-reads anyway");
                    }
                }
                Ok(_) | Err(nix::errno::Errno::EAGAIN) => return,
                Err(e) => {
                    tracing::debug!("reading inotify events failed ({e}); waiting by polling");
                    self.inotify = None;
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A record published by rename after the watch exists wakes the wait (no lost wake-up: the
    /// rename happens before `wait` is called).
    #[test]
    fn a_rename_into_the_folder_wakes_the_wait() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut watch = TurnWatch::new(&[dir.path().to_path_buf()], false);
        if !watch.has_events() {
            return; // inotify refused on this machine: only the fallback exists.
        }
        let tmp = dir.path().join(".turn.json.tmp");
        std::fs::write(&tmp, b"{}").expect("write");
        std::fs::rename(&tmp, dir.path().join("turn.json")).expect("rename");
        assert_eq!(watch.wait(), Wake::Changed);
    }

    /// The record-change signal (the folder's times set, no file made) wakes the wait.
    #[test]
    fn touching_the_folder_wakes_the_wait() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut watch = TurnWatch::new(&[dir.path().to_path_buf()], false);
        if !watch.has_events() {
            return; // inotify refused on this machine: only the fallback exists.
        }
        crate::fsutil::touch_dir(dir.path()).expect("touch");
        assert_eq!(watch.wait(), Wake::Changed);
        let entries = std::fs::read_dir(dir.path()).expect("read_dir").count();
        assert_eq!(entries, 0, "the signal creates nothing in the folder");
    }

    /// A folder not made yet (a queued turn's) is waited for on its nearest ancestor: the wait
    /// ends when it is made (two levels down), and a change in it then wakes the next wait.
    #[test]
    fn a_folder_made_later_wakes_the_wait_then_is_watched() {
        let home = tempfile::tempdir().expect("tempdir");
        let folder = home.path().join("turns").join("1");
        let mut watch = TurnWatch::new(std::slice::from_ref(&folder), false);
        if !watch.has_events() {
            return; // inotify refused on this machine: only the fallback exists.
        }
        std::fs::create_dir(home.path().join("turns")).expect("turns");
        // The first level made wakes the wait; the folder is not there yet.
        assert_eq!(watch.wait(), Wake::Changed);
        std::fs::create_dir(&folder).expect("folder");
        assert_eq!(watch.wait(), Wake::Changed);
        assert!(watch.missing.is_empty(), "the folder itself is watched now");
        crate::fsutil::touch_dir(&folder).expect("touch");
        assert_eq!(watch.wait(), Wake::Changed);
    }

    /// The runner's exit wakes the wait through its pidfd, and the pidfd is dropped after.
    #[test]
    fn a_runner_that_exits_wakes_the_wait() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut watch = TurnWatch::new(&[dir.path().to_path_buf()], false);
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("spawn sleep");
        watch.follow_runner(child.id());
        if !watch.follows(child.id()) {
            let _ = child.kill();
            let _ = child.wait();
            return; // no pidfd on this kernel: the /proc check on the fallback tick covers it.
        }
        child.kill().expect("kill");
        assert_eq!(watch.wait(), Wake::RunnerEnded);
        assert!(!watch.follows(child.id()));
        let _ = child.wait();
    }

    /// More folders than the bound: no watch at all, the wait is the fallback poll.
    #[test]
    fn beyond_the_bound_the_wait_falls_back() {
        let dir = tempfile::tempdir().expect("tempdir");
        let dirs = vec![dir.path().to_path_buf(); MAX_WATCHED_DIRS + 1];
        assert!(!TurnWatch::new(&dirs, false).has_events());
    }
}
