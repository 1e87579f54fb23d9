//! The settle signal: a pipe from a `submit --wait` to the runner it started, closed by the runner
//! once the turn's outcome is committed.
//!
//! Why not the turn folder's inotify watch alone: closing an inotify instance waits for an SRCU
//! grace period in the kernel (`fsnotify_destroy_group` flushes the mark reaper), about 16 ms on
//! this project's VMs, and a process cannot exit without closing it. That one close was more than
//! half of `submit --wait -- true` (docs/PERFORMANCE.md). A pipe's end costs nothing to close, and
//! its end of file is level-triggered: no wake-up is lost between a read and the wait.
//!
//! The pipe only says "look now": the waiter still reads the turn's record, and a closed pipe whose
//! turn has no outcome (the runner died, or was refused) sends it back to the general watch
//! ([`crate::watch::TurnWatch`]), which tells a dead runner from a live one.

use crate::protocol::slots::TurnKey;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// The descriptor number the runner finds its end at (`worker runner … --settle-fd 3`).
pub const RUNNER_FD: RawFd = 3;

/// At most this many signals per process: a submit starts its own turn's runner, and seldom more
/// (rows its section started besides); beyond it, a runner starts without one.
const MAX_SIGNALS: usize = 8;

/// The read ends a waiting process keeps, one per runner it started. Only the submitting thread
/// touches them (the spawner is shared by reference), so std's mutex, outside loom's races.
#[derive(Debug, Default)]
pub struct SettleSignals {
    read_ends: std::sync::Mutex<Vec<(TurnKey, OwnedFd)>>,
}

fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl SettleSignals {
    /// A new pipe for `key`'s runner: keeps the read end and returns the write end (close-on-exec;
    /// the spawn moves it to [`RUNNER_FD`] in the child). `None` when full or the pipe is refused:
    /// the runner then starts without one and the waiter uses the general watch.
    pub fn open_for(&self, key: &TurnKey) -> Option<OwnedFd> {
        // The test switch that refuses events refuses this one too, so the fallback is tested.
        if crate::watch::events_refused() {
            return None;
        }
        let mut read_ends = lock(&self.read_ends);
        if read_ends.len() >= MAX_SIGNALS {
            return None;
        }
        match nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC | nix::fcntl::OFlag::O_NONBLOCK) {
            Ok((read, write)) => {
                read_ends.retain(|(k, _)| k != key);
                read_ends.push((key.clone(), read));
                Some(write)
            }
            Err(e) => {
                tracing::debug!("no settle signal for {key}: pipe refused ({e})");
                None
            }
        }
    }

    /// Forgets `key`'s pipe (its runner did not start).
    pub fn discard(&self, key: &TurnKey) {
        lock(&self.read_ends).retain(|(k, _)| k != key);
    }

    /// Takes the read end for `key`'s runner, if this process started it with one.
    pub fn take(&self, key: &TurnKey) -> Option<OwnedFd> {
        let mut read_ends = lock(&self.read_ends);
        let at = read_ends.iter().position(|(k, _)| k == key)?;
        Some(read_ends.swap_remove(at).1)
    }
}

/// What a wait on a read end saw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seen {
    /// Every write end is closed: the runner settled the turn, or exited.
    Closed,
    /// The runner wrote: it copied some of the command's output into the turn's logs.
    Output,
    /// `timeout` passed first.
    Quiet,
}

/// At most this many bytes are drained per wake (each byte says only "output grew").
const DRAIN_BYTES: usize = 512;

/// Waits up to `timeout` for the runner to say something: output written, or its end closed.
pub fn wait(read_end: &OwnedFd, timeout: Duration) -> Seen {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let mut fds = [PollFd::new(read_end.as_fd(), PollFlags::POLLIN)];
        match poll(
            &mut fds,
            PollTimeout::try_from(left).unwrap_or(PollTimeout::MAX),
        ) {
            Ok(0) => return Seen::Quiet,
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) if !left.is_zero() => continue,
            Err(nix::errno::Errno::EINTR) => return Seen::Quiet,
            // A poll that fails cannot wait (retrying would spin): report the signal gone, so
            // the caller reads the record and falls back to the folder watch.
            Err(_) => return Seen::Closed,
        }
        let mut bytes = [0u8; DRAIN_BYTES];
        return match nix::unistd::read(read_end.as_raw_fd(), &mut bytes) {
            Ok(0) => Seen::Closed,
            Ok(_) => Seen::Output,
            Err(nix::errno::Errno::EAGAIN | nix::errno::Errno::EINTR) => Seen::Quiet,
            Err(_) => Seen::Closed,
        };
    }
}

/// In the child between fork and exec: puts `write_end` at [`RUNNER_FD`] without close-on-exec.
/// Only dup2(2) and fcntl(2): async-signal-safe, no allocation.
pub fn install_in_child(write_end: BorrowedFd<'_>) -> std::io::Result<()> {
    let raw = write_end.as_raw_fd();
    if raw == RUNNER_FD {
        // dup2 onto itself keeps the flags: clear close-on-exec instead.
        // SAFETY: fcntl(F_SETFD) on a descriptor we own; it only changes descriptor flags.
        if unsafe { libc::fcntl(RUNNER_FD, libc::F_SETFD, 0) } < 0 {
            return Err(std::io::Error::last_os_error());
        }
        return Ok(());
    }
    // SAFETY: dup2(2) with two integer descriptors; the target is replaced in this child only.
    if unsafe { libc::dup2(raw, RUNNER_FD) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The runner's end, held until the outcome is committed. A process-wide slot set once at start
/// and taken once (never raced), so std's const mutex rather than [`crate::sync`]'s.
static RUNNER_END: std::sync::Mutex<Option<OwnedFd>> = std::sync::Mutex::new(None);

fn runner_end() -> std::sync::MutexGuard<'static, Option<OwnedFd>> {
    lock(&RUNNER_END)
}

/// The runner adopts `fd` as its settle signal if it is a pipe (anything else is left alone: the
/// number came from our own spawn, but a runner started by hand may name any descriptor).
pub fn adopt(fd: RawFd) {
    // SAFETY: fstat(2) fills a local struct; an invalid descriptor only makes it fail.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above; `stat` outlives the call.
    if unsafe { libc::fstat(fd, &mut stat) } != 0 || stat.st_mode & libc::S_IFMT != libc::S_IFIFO {
        tracing::debug!("--settle-fd {fd} is not a pipe: ignored");
        return;
    }
    // SAFETY: the descriptor was handed to this process for this purpose and nothing else in it
    // refers to it; close-on-exec is set first so the turn's work never inherits it.
    unsafe {
        libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
    }
    // SAFETY: see above; from here on the OwnedFd is the one owner.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    *runner_end() = Some(owned);
}

/// Runner side: the turn's output was written to its log (a drain thread copied a chunk). One
/// byte into the non-blocking pipe wakes the waiter, which streams the logs; a full pipe already
/// says "look", and with no signal held this does nothing. A waiter that died leaves no reader:
/// the write fails with EPIPE, ignored (Rust's runtime ignores SIGPIPE before `main`, so it is
/// not fatal; `tests/wait_events.rs` kills a waiter and checks the turn still ends).
pub fn output_written() {
    if let Some(fd) = lock(&RUNNER_END).as_ref() {
        let _ = nix::unistd::write(fd, &[1u8]);
    }
}

/// Called by the runner right after the turn's outcome is committed: the waiter wakes now, not
/// when the hooks and the exit are done.
pub fn announce_settled() {
    drop(runner_end().take());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_and_a_closed_write_end_wake_and_an_open_one_times_out() {
        let signals = SettleSignals::default();
        let key = TurnKey::new("t", 1);
        let write = signals.open_for(&key).expect("a pipe");
        let read = signals.take(&key).expect("the read end");
        assert_eq!(wait(&read, Duration::from_millis(1)), Seen::Quiet);
        nix::unistd::write(&write, &[1, 1]).expect("write");
        assert_eq!(wait(&read, Duration::from_secs(5)), Seen::Output);
        assert_eq!(
            wait(&read, Duration::from_millis(1)),
            Seen::Quiet,
            "drained"
        );
        drop(write);
        assert_eq!(wait(&read, Duration::from_secs(5)), Seen::Closed);
        assert!(signals.take(&key).is_none(), "taken once");
    }

    #[test]
    fn signals_are_bounded() {
        let signals = SettleSignals::default();
        let mut ends = Vec::new();
        for turn in 0..MAX_SIGNALS as u32 {
            ends.push(signals.open_for(&TurnKey::new("t", turn)).expect("a pipe"));
        }
        assert!(signals.open_for(&TurnKey::new("t", 99)).is_none());
        signals.discard(&TurnKey::new("t", 0));
        assert!(signals.open_for(&TurnKey::new("t", 99)).is_some());
    }
}
