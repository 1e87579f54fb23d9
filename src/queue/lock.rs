//! `queue.lock`: an exclusive flock with a bounded wait ([`crate::flock`]).
//!
//! flock is released by the kernel when the holder dies, so a crashed command can never wedge the
//! queue; the bounded wait turns a stuck holder into a clear error instead of a hang.

use crate::flock::{self, WaitError};
use nix::errno::Errno;
use nix::fcntl::Flock;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::Duration;

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

impl QueueLock {
    pub fn acquire(path: &Path, timeout: Duration) -> Result<QueueLock, LockError> {
        let file = flock::open(path).map_err(|source| LockError::Open {
            path: path.to_path_buf(),
            source,
        })?;
        match flock::exclusive_within(file, timeout) {
            Ok(lock) => Ok(QueueLock { _lock: lock }),
            Err(WaitError::TimedOut { waited }) => Err(LockError::Timeout {
                path: path.to_path_buf(),
                waited_millis: waited.as_millis(),
            }),
            Err(WaitError::Failed(errno)) => Err(LockError::Flock {
                path: path.to_path_buf(),
                errno,
            }),
        }
    }
}
