//! `queue.lock`: an exclusive flock with a bounded wait.
//!
//! flock is released by the kernel when the holder dies, so a crashed command can never wedge the
//! queue; the bounded wait turns a stuck holder into a clear error instead of a hang.

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("cannot open the queue lock {path}: {source}")]
    Open {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("timed out after {waited_millis} ms waiting for the queue lock {path}; another tollgate command holds it (raise `lock_timeout` in tollgate.toml if this is expected)")]
    Timeout { path: PathBuf, waited_millis: u128 },
    #[error("cannot lock {path}: {errno}")]
    Flock { path: PathBuf, errno: Errno },
}

/// Held for as long as the value lives.
pub struct QueueLock {
    _lock: Flock<File>,
}

/// Longest pause between two tries; short enough that a freed lock is taken promptly.
const MAX_BACKOFF_MICROS: u64 = 20_000;

impl QueueLock {
    pub fn acquire(path: &Path, timeout: Duration) -> Result<QueueLock, LockError> {
        let start = Instant::now();
        let mut backoff_micros = 50u64;
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(path)
            .map_err(|source| LockError::Open {
                path: path.to_path_buf(),
                source,
            })?;
        loop {
            match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
                Ok(lock) => return Ok(QueueLock { _lock: lock }),
                Err((returned, Errno::EWOULDBLOCK)) | Err((returned, Errno::EINTR)) => {
                    file = returned;
                }
                Err((_, errno)) => {
                    return Err(LockError::Flock {
                        path: path.to_path_buf(),
                        errno,
                    })
                }
            }
            let waited = start.elapsed();
            if waited >= timeout {
                return Err(LockError::Timeout {
                    path: path.to_path_buf(),
                    waited_millis: waited.as_millis(),
                });
            }
            let remaining = timeout - waited;
            std::thread::sleep(Duration::from_micros(backoff_micros).min(remaining));
            backoff_micros = (backoff_micros * 2).min(MAX_BACKOFF_MICROS);
        }
    }
}
