//! Load, change and publish `queue.json` under the lock.

use super::lock::{LockError, QueueLock};
use crate::fsutil::{self, FileError};
use crate::home::Home;
use crate::protocol::slots::{QueueState, QUEUE_FORMAT_VERSION};
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error(transparent)]
    File(#[from] FileError),
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
        let state: QueueState = fsutil::load_json(&path)?.unwrap_or_default();
        let corrupt = |detail: String| FileError::Corrupt {
            path: path.clone(),
            format: "tollgate queue",
            detail,
        };
        if state.version > QUEUE_FORMAT_VERSION {
            return Err(corrupt(format!(
                "format version {} is newer than this tollgate understands ({QUEUE_FORMAT_VERSION})",
                state.version
            ))
            .into());
        }
        state.check_structure().map_err(corrupt)?;
        Ok(state)
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
            debug_assert!(
                state.check_structure().is_ok(),
                "{:?}",
                state.check_structure()
            );
            fail::fail_point!("queue::before_publish");
            fsutil::publish_json(&self.home.queue_path(), &state).map_err(StoreError::from)?;
        }
        Ok(result)
    }
}
