//! Load, change and publish `queue.json` under the lock.

use super::lock::{LockError, QueueLock};
use crate::fsutil::{self, FileError};
use crate::home::Home;
use crate::protocol::slots::{QueueState, QUEUE_FORMAT_VERSION};
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error(transparent)]
    File(#[from] FileError),
    /// The changed queue would not pass the loader's checks; it was not published.
    #[error("refusing to publish {path}: the new queue would not load ({detail}); the file keeps its previous contents")]
    Unpublishable { path: PathBuf, detail: String },
}

/// Parses and checks a queue document read from `path` (named in errors): what [`QueueStore::load`]
/// accepts, and what [`QueueStore::transact`] checks before it publishes.
pub fn parse_queue(path: &Path, bytes: &[u8]) -> Result<QueueState, FileError> {
    let state: QueueState = fsutil::parse_json(path, bytes)?;
    check_queue(&state).map_err(|detail| FileError::Corrupt {
        path: path.to_path_buf(),
        format: "tollgate queue",
        detail,
    })?;
    Ok(state)
}

/// The loader's checks on a queue document: a format version this tollgate understands and the
/// structural invariants.
fn check_queue(state: &QueueState) -> Result<(), String> {
    if state.version > QUEUE_FORMAT_VERSION {
        return Err(format!(
            "format version {} is newer than this tollgate understands ({QUEUE_FORMAT_VERSION})",
            state.version
        ));
    }
    state.check_structure()
}

#[derive(Clone, Debug)]
pub struct QueueStore {
    home: Home,
    lock_timeout: Duration,
}

impl QueueStore {
    pub fn new(home: Home, lock_timeout: Duration) -> Self {
        QueueStore { home, lock_timeout }
    }

    pub fn home(&self) -> &Home {
        &self.home
    }

    /// Reads the queue without the lock (publication is atomic, so this sees a whole document).
    /// A missing file is the empty queue; a malformed one is an error naming it.
    pub fn load(&self) -> Result<QueueState, StoreError> {
        let path = self.home.queue_path();
        match fsutil::read_state_file(&path, "queue", fsutil::limits::QUEUE_BYTES)? {
            Some(bytes) => Ok(parse_queue(&path, &bytes)?),
            None => Ok(QueueState::default()),
        }
    }

    /// Runs `change` on the queue under the lock and publishes the result if it changed.
    ///
    /// On an error from `change` nothing is published: the file keeps its previous contents. The
    /// closure may also write task and turn files, which the same lock guards.
    pub fn transact<R, E>(
        &self,
        change: impl FnOnce(&mut QueueState) -> Result<R, E>,
    ) -> Result<R, E>
    where
        E: From<StoreError>,
    {
        let _lock = QueueLock::acquire(&self.home.lock_path(), self.lock_timeout)
            .map_err(StoreError::from)?;
        let original = self.load()?;
        let mut state = original.clone();
        let result = change(&mut state)?;
        if state != original {
            // Never publish what the next load would refuse: that would stop every command.
            check_queue(&state).map_err(|detail| StoreError::Unpublishable {
                path: self.home.queue_path(),
                detail,
            })?;
            fail::fail_point!("queue::before_publish");
            fsutil::publish_json(&self.home.queue_path(), &state).map_err(StoreError::from)?;
        }
        Ok(result)
    }
}
