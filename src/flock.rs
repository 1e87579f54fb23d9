//! Exclusive `flock(2)` locks on files in the home: `serve.lock`, `sweep.lock`.
//!
//! flock is released by the kernel when the holder dies, so a crashed command can never wedge
//! what the lock guards. Two ways to take one: [`try_exclusive`] answers at once (serve: one
//! instance per home), [`exclusive_within`] waits a bounded time, so a stuck holder becomes a
//! clear error instead of a hang (the queue). Callers own their error messages: this module
//! only says what happened.

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

/// Longest pause between two tries of [`exclusive_within`]; short enough that a freed lock is
/// taken promptly.
pub const MAX_BACKOFF_MICROS: u64 = 20_000;
/// First pause of [`exclusive_within`]; doubled up to [`MAX_BACKOFF_MICROS`].
const FIRST_BACKOFF_MICROS: u64 = 50;

/// Opens (creating, mode 0600, never truncating) the lock file at `path`, read-write.
pub fn open(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)
}

/// What a non-blocking try found.
pub enum TryLock {
    /// Held by us for as long as the value lives.
    Locked(Flock<File>),
    /// Another open file description holds it; the file is handed back (serve reads the
    /// holder's pid from it).
    Held(File),
}

/// Takes the exclusive lock on `file` if it is free, without waiting.
pub fn try_exclusive(mut file: File) -> Result<TryLock, Errno> {
    loop {
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(lock) => return Ok(TryLock::Locked(lock)),
            Err((returned, Errno::EWOULDBLOCK)) => return Ok(TryLock::Held(returned)),
            // A signal arrived during the call: try again (no time was spent waiting).
            Err((returned, Errno::EINTR)) => file = returned,
            Err((_, errno)) => return Err(errno),
        }
    }
}

/// Why [`exclusive_within`] gave up.
#[derive(Debug)]
pub enum WaitError {
    /// Still held by another after `waited` (at least the timeout).
    TimedOut { waited: Duration },
    /// flock itself failed.
    Failed(Errno),
}

/// Takes the exclusive lock on `file`, trying with a doubling back-off (from 50 µs up to
/// [`MAX_BACKOFF_MICROS`]) until it is free or `timeout` has passed.
pub fn exclusive_within(mut file: File, timeout: Duration) -> Result<Flock<File>, WaitError> {
    let start = Instant::now();
    let mut backoff_micros = FIRST_BACKOFF_MICROS;
    loop {
        match try_exclusive(file).map_err(WaitError::Failed)? {
            TryLock::Locked(lock) => return Ok(lock),
            TryLock::Held(returned) => file = returned,
        }
        let waited = start.elapsed();
        if waited >= timeout {
            return Err(WaitError::TimedOut { waited });
        }
        let remaining = timeout - waited;
        std::thread::sleep(Duration::from_micros(backoff_micros).min(remaining));
        backoff_micros = (backoff_micros * 2).min(MAX_BACKOFF_MICROS);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_lock_is_reported_held_and_a_bounded_wait_times_out_then_succeeds_once_freed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("x.lock");
        let held = match try_exclusive(open(&path).expect("open")).expect("flock") {
            TryLock::Locked(lock) => lock,
            TryLock::Held(_) => panic!("a fresh lock file is free"),
        };
        assert!(matches!(
            try_exclusive(open(&path).expect("open")),
            Ok(TryLock::Held(_))
        ));
        let timeout = Duration::from_millis(30);
        match exclusive_within(open(&path).expect("open"), timeout) {
            Err(WaitError::TimedOut { waited }) => assert!(waited >= timeout, "{waited:?}"),
            other => panic!("expected a timeout, got {:?}", other.map(|_| ())),
        }
        drop(held);
        assert!(exclusive_within(open(&path).expect("open"), timeout).is_ok());
    }
}
