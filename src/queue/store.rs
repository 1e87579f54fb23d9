//! The queue store: load, change and publish the queue under the lock.
//!
//! [`Store`] is what the shell needs of a store: a lock-free read of a whole document, and a
//! locked section that publishes its change only when it returns `Ok`. [`QueueStore`] keeps
//! `queue.json` under `queue.lock`; [`MemoryStore`] keeps the queue in memory for the shell
//! conformance tests (same publish rules, a mutex for the lock).

use super::lock::{LockError, QueueLock};
use crate::fsutil::{self, FileError};
use crate::home::Home;
use crate::protocol::slots::{QueueState, QUEUE_FORMAT_VERSION};
use std::sync::Mutex;
use std::time::Duration;

/// A store of the queue document. Every locked section of the shell is one `transact`.
pub trait Store {
    /// Reads the queue without the lock (publication is atomic: a whole document).
    fn load(&self) -> Result<QueueState, StoreError>;

    /// Runs `change` on the queue under the lock and publishes the result if it changed and
    /// `change` returned `Ok`; on an `Err` nothing is published.
    fn transact<R, E>(&self, change: impl FnOnce(&mut QueueState) -> Result<R, E>) -> Result<R, E>
    where
        E: From<StoreError>;
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error(transparent)]
    File(#[from] FileError),
    #[error("the in-memory queue store is poisoned: a section panicked while holding it")]
    Poisoned,
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

impl Store for QueueStore {
    fn load(&self) -> Result<QueueState, StoreError> {
        QueueStore::load(self)
    }

    fn transact<R, E>(&self, change: impl FnOnce(&mut QueueState) -> Result<R, E>) -> Result<R, E>
    where
        E: From<StoreError>,
    {
        QueueStore::transact(self, change)
    }
}

/// The queue in memory, for tests that run the shell without a `queue.json`: a section holds the
/// mutex, works on a copy and publishes it only on `Ok`, exactly like [`QueueStore::transact`].
#[derive(Debug, Default)]
pub struct MemoryStore {
    state: Mutex<QueueState>,
}

impl MemoryStore {
    pub fn new(state: QueueState) -> Self {
        MemoryStore {
            state: Mutex::new(state),
        }
    }
}

impl Store for MemoryStore {
    fn load(&self) -> Result<QueueState, StoreError> {
        self.state
            .lock()
            .map(|s| s.clone())
            .map_err(|_| StoreError::Poisoned)
    }

    fn transact<R, E>(&self, change: impl FnOnce(&mut QueueState) -> Result<R, E>) -> Result<R, E>
    where
        E: From<StoreError>,
    {
        let mut guard = self.state.lock().map_err(|_| StoreError::Poisoned)?;
        let mut state = guard.clone();
        let result = change(&mut state)?;
        if state != *guard {
            debug_assert!(
                state.check_structure().is_ok(),
                "{:?}",
                state.check_structure()
            );
            *guard = state;
        }
        Ok(result)
    }
}
