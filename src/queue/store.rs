//! The queue store: load, change and publish the queue under the lock.
//!
//! [`Store`] is what the shell needs of a store: a lock-free read of a whole document, and a
//! locked section that publishes its change only when it returns `Ok`. The home's store is
//! [`crate::queue::SqliteStore`] (`tollgate.db`, spec/store.md) or
//! [`crate::queue::PostgresStore`]; [`MemoryStore`] keeps the queue in memory for the shell
//! conformance tests (same publish rules, a mutex for the lock). [`parse_queue`] reads the
//! `queue.json` of an earlier version's file store, for the import at the database's first open.

use super::records::RecordTx;
use crate::fsutil::{self, FileError};
use crate::protocol::fleet::FleetView;
use crate::protocol::slots::steps::{Loaded, Reads};
use crate::protocol::slots::{QueueState, QUEUE_FORMAT_VERSION};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

pub use crate::protocol::section::Commit;

/// A store of the queue document. Every locked section of the shell is one `transact`.
pub trait Store {
    /// Reads the queue without the lock (publication is atomic: a whole document).
    fn load(&self) -> Result<QueueState, StoreError>;

    /// The active part of the queue, read without the lock, for a look that decides whether a
    /// section is needed at all (the bounded repair, [`crate::reconcile::repair_due`]): the meta
    /// row, the pause set, every row that is not parked, holds a reservation or is named by a
    /// runner or work record, the oldest parked row and the first parked row of the first task
    /// (by name) not held by a task pause, when the queue has one (whether there is one decides
    /// whether a free slot can start anything: `steps::reconcile_would_act`), and every runner
    /// and work record. Other parked rows may be left out, so its cost does not grow with the
    /// parked rows (the second row is found by at most one index search per paused task); a store
    /// that cannot leave them out returns the whole queue (this default). Never a section's
    /// input, never published.
    fn load_active(&self) -> Result<QueueState, StoreError> {
        self.load()
    }

    /// Runs `change` on the queue under the lock and publishes the result if it changed and
    /// `change` returned `Ok`; on an `Err` nothing is published. `commit` says whether the
    /// publication must be durable before this returns.
    fn transact_as<R, E>(
        &self,
        commit: Commit,
        change: impl FnOnce(&mut QueueState) -> Result<R, E>,
    ) -> Result<R, E>
    where
        E: From<StoreError>;

    /// [`Store::transact_as`] on the part of the queue `reads` names (spec/store.md, "What a
    /// section loads"): `change` gets the part and what was loaded ([`Loaded`]), asks the core
    /// whether the part suffices for its step, and returns an `Err` (publishing nothing) when it
    /// does not, to run again with [`Reads::Everything`]. The commit writes only the rows that
    /// changed and never removes a row it did not load. A store that cannot load a part loads
    /// the whole queue and says [`Loaded::Whole`] (this default: the memory and PostgreSQL
    /// stores).
    fn transact_reading<R, E>(
        &self,
        commit: Commit,
        reads: &Reads,
        change: impl FnOnce(&mut QueueState, &Loaded) -> Result<R, E>,
    ) -> Result<R, E>
    where
        E: From<StoreError>,
    {
        let _ = reads;
        self.transact_as(commit, |state| change(state, &Loaded::Whole))
    }

    /// [`Store::transact_reading`] for a section of the section runner ([`crate::section`]):
    /// `change` also gets the section's fleet view (`None` on one host): on a fleet, the lease
    /// table with the database's clock and whether this host may start turns, read under the
    /// lease lock in this transaction; the leases as `change` leaves them in the view are written
    /// back in the same transaction. `change` also gets the section's records ([`RecordTx`]):
    /// the store's open transaction, in which the record reads and writes it is handed to run
    /// (they commit with the queue, spec/store.md "Records"). This default (one host, no
    /// database) hands `None`, writes no lease, and hands [`RecordTx::outside`].
    fn transact_section<R, E>(
        &self,
        commit: Commit,
        reads: &Reads,
        change: impl FnOnce(
            &mut QueueState,
            &Loaded,
            &mut Option<FleetView>,
            &mut RecordTx<'_>,
        ) -> Result<R, E>,
    ) -> Result<R, E>
    where
        E: From<StoreError>,
    {
        self.transact_reading(commit, reads, |state, loaded| {
            change(state, loaded, &mut None, &mut RecordTx::outside())
        })
    }

    /// [`Store::transact_as`] with [`Commit::Promise`]: a call site that does not say is durable.
    fn transact<R, E>(&self, change: impl FnOnce(&mut QueueState) -> Result<R, E>) -> Result<R, E>
    where
        E: From<StoreError>,
    {
        self.transact_as(Commit::Promise, change)
    }

    /// On a fleet (a PostgreSQL home): the same store on a connection of its own, for the
    /// runner's lease renewals (`src/runner/lease.rs`). `None`: one host, no leases.
    fn lease_renewer(&self) -> Option<super::PostgresStore> {
        None
    }

    /// A guess at the id the next submitted turn gets ([`crate::tasks::predicted_turn_id`] of the
    /// queue as it stands), read without the lock: a submit whose task name is generated from
    /// that id reads the generated task's line in its first section, instead of learning the name
    /// in a section that then runs again (spec/store.md, "A generated task name"). Only a hint:
    /// the section generates the name again under the lock and the core checks that its part
    /// covers it, so a wrong guess costs the second section it was meant to save. `None` when the
    /// store has no cheap read of it (this default) or the read failed.
    fn next_turn_id_hint(&self) -> Option<u64> {
        None
    }

    /// [`Store::transact_as`] with [`Commit::Internal`]: a transition a power loss may undo.
    fn transact_internal<R, E>(
        &self,
        change: impl FnOnce(&mut QueueState) -> Result<R, E>,
    ) -> Result<R, E>
    where
        E: From<StoreError>,
    {
        self.transact_as(Commit::Internal, change)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database's write lock stayed taken for all of `lock_timeout`.
    #[error("timed out after {waited_millis} ms waiting for the write lock of the database {path}; another tollgate command holds it (raise `lock_timeout` in tollgate.toml if this is expected)")]
    Busy { path: PathBuf, waited_millis: u128 },
    /// SQLite failed on the database (an I/O error, a full disk, a schema this tollgate does not
    /// know). The transaction was rolled back: nothing was changed.
    #[error("the database {path}: {detail}; nothing was changed")]
    Database { path: PathBuf, detail: String },
    #[error(transparent)]
    File(#[from] FileError),
    #[error("the in-memory queue store is poisoned: a section panicked while holding it")]
    Poisoned,
    /// The changed queue would not pass the loader's checks; it was not published.
    #[error(
        "refusing to publish {path}: the new queue would not load ({detail}); nothing was changed"
    )]
    Unpublishable { path: PathBuf, detail: String },
    /// The section's COMMIT failed, or a step right after it did: whether its changes are in the
    /// database is not known (a full disk can fail a commit whose last page already is in the
    /// log, which the next open then finds committed). Never reported as "nothing changed".
    #[error("{source}, while committing: the change may or may not be in the database")]
    Uncertain {
        #[source]
        source: Box<StoreError>,
    },
}

/// Parses and checks a queue document read from `path` (named in errors): an earlier version's
/// `queue.json`, as strictly as that version's file store loaded it (the import at the
/// database's first open reads it through this).
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
pub(crate) fn check_queue(state: &QueueState) -> Result<(), String> {
    if state.version > QUEUE_FORMAT_VERSION {
        return Err(format!(
            "format version {} is newer than this tollgate understands ({QUEUE_FORMAT_VERSION})",
            state.version
        ));
    }
    state.check_structure()
}

/// The queue in memory, for tests that run the shell without a database for the queue: a section
/// holds the mutex, works on a copy and publishes it only on `Ok`. Its records are the home's
/// (`tollgate.db`), each access in a transaction of its own: the memory store lends no
/// transaction ([`RecordTx::outside`]).
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

    fn transact_as<R, E>(
        &self,
        _commit: Commit,
        change: impl FnOnce(&mut QueueState) -> Result<R, E>,
    ) -> Result<R, E>
    where
        E: From<StoreError>,
    {
        let mut guard = self.state.lock().map_err(|_| StoreError::Poisoned)?;
        let mut state = guard.clone();
        let result = change(&mut state)?;
        if state != *guard {
            // The same refusal as the database stores: never publish what a load would refuse.
            check_queue(&state).map_err(|detail| StoreError::Unpublishable {
                path: PathBuf::from("<memory>"),
                detail,
            })?;
            *guard = state;
        }
        Ok(result)
    }
}
