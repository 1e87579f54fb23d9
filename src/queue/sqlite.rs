//! The home's store: the queue as tables of one SQLite database, `tollgate.db` (spec/store.md).
//!
//! A locked section is one write transaction (`BEGIN IMMEDIATE`, which takes the database's write
//! lock at once, waiting at most `lock_timeout` for it): SQLite serialises writers exactly as
//! `queue.lock` did, so the task and turn record files a section writes stay guarded by it. A
//! section reads the tables into the same [`QueueState`] the core takes, and on commit writes
//! only the rows that changed. Whether the commit waits for the disk is the caller's
//! [`Commit`] and the home's [`Durability`].
//!
//! This file is the store and its section; each other job has its module: `schema` (the
//! versions and their migrations), `open` (the database's files, the connection's settings),
//! `import` (the earlier file store, imported once at open), `read` and `write` (the tables to
//! and from a [`QueueState`]), `columns` (how a value is kept in a column), `errors` (SQLite's
//! errors as the store's), `durability` (what follows a commit) and `doctor` (`tollgate doctor`'s
//! checks, read-only).

mod columns;
mod doctor;
mod durability;
mod errors;
mod import;
mod open;
mod read;
mod schema;
mod write;

pub use doctor::{check_database, DoctorReport};
pub(crate) use durability::trim_log;
pub(super) use import::{move_record_files_aside, read_old_records};
pub(crate) use open::{open_for_records, Open};
pub use schema::SCHEMA_VERSION;
pub(crate) use schema::SWEEP_SCHEMA_V6;

use super::records::{self, RecordTx};
use super::store::{check_queue, Commit, Store, StoreError};
use crate::config::Durability;
use crate::home::Home;
use crate::protocol::fleet::FleetView;
use crate::protocol::slots::steps::{Loaded, QueueReads, Reads};
use crate::protocol::slots::QueueState;
use columns::uint;
#[cfg(feature = "failpoints")]
use durability::snapshot_for_tests;
use durability::sync_barrier;
use errors::{busy_or, commit_error, sql_error, uncertain};
use read::{read_part, read_queue, read_queue_part, Part};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use write::write_changes;

/// The queue in `tollgate.db`. Building one does no IO (serve builds one per request); the
/// database is opened, checked and migrated on first use, and the connection kept.
pub struct SqliteStore {
    home: Home,
    lock_timeout: Duration,
    durability: Durability,
    /// Shared with the record layer ([`records::share_sqlite`]): a record access outside a
    /// section uses this connection when it is free, so a command opens the database once.
    open: Arc<Mutex<Option<Open>>>,
    /// The connection a record access outside a section uses while a section (of another
    /// thread: serve's committer) holds `open`; opened on first such use. Owned here, reached by
    /// the record layer through what the store registered ([`records::share_sqlite`]).
    _side: Arc<Mutex<Option<records::SideConnection>>>,
    /// The queue rows the last section loaded ([`SqliteStore::rows_loaded_by_last_section`]).
    rows_loaded: std::sync::atomic::AtomicUsize,
    /// Sections begun on this store, committed or rolled back ([`SqliteStore::sections_begun`]).
    sections: std::sync::atomic::AtomicUsize,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.home.db_path())
            .field("lock_timeout", &self.lock_timeout)
            .field("durability", &self.durability)
            .finish()
    }
}

impl SqliteStore {
    pub fn new(home: Home, lock_timeout: Duration, durability: Durability) -> Self {
        let open = Arc::new(Mutex::new(None));
        let side = Arc::new(Mutex::new(None));
        records::share_sqlite(
            home.db_path(),
            records::SqliteSlots {
                open: Arc::downgrade(&open),
                side: Arc::downgrade(&side),
            },
        );
        SqliteStore {
            home,
            lock_timeout,
            durability,
            open,
            _side: side,
            rows_loaded: std::sync::atomic::AtomicUsize::new(0),
            sections: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    pub fn home(&self) -> &Home {
        &self.home
    }

    /// [`Store::load`], callable without importing the trait.
    pub fn load(&self) -> Result<QueueState, StoreError> {
        Store::load(self)
    }

    /// [`Store::transact`]: a durable ([`Commit::Promise`]) section.
    pub fn transact<R, E>(
        &self,
        change: impl FnOnce(&mut QueueState) -> Result<R, E>,
    ) -> Result<R, E>
    where
        E: From<StoreError>,
    {
        Store::transact(self, change)
    }

    /// The open connection, opening (and migrating) the database on first use. A section that
    /// panicked left no transaction open (its drop rolled back), so a poisoned guard is reused.
    fn connection(&self) -> Result<MutexGuard<'_, Option<Open>>, StoreError> {
        let mut guard = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if guard.is_none() {
            *guard = Some(Open::database(&self.home, self.lock_timeout)?);
        }
        Ok(guard)
    }
}

impl Store for SqliteStore {
    /// A read transaction: a consistent snapshot of the tables, taken without the write lock.
    fn load(&self) -> Result<QueueState, StoreError> {
        let path = self.home.db_path();
        let mut guard = self.connection()?;
        let Some(open) = guard.as_mut() else {
            unreachable!("connection() opened it");
        };
        let Some(conn) = open.conn.as_mut() else {
            unreachable!("the connection is back in its slot outside a section");
        };
        let tx = conn.transaction().map_err(|e| sql_error(&path, e))?;
        let state = read_queue(&tx, &path)?;
        tx.commit().map_err(|e| sql_error(&path, e))?;
        Ok(state)
    }

    /// One statement outside any transaction: the id counter and the highest row id (in the
    /// `u64` order, see [`columns::int`]), from the primary key. A failure is only a missing hint.
    fn next_turn_id_hint(&self) -> Option<u64> {
        let path = self.home.db_path();
        let mut guard = self.connection().ok()?;
        let conn = guard.as_mut()?.conn.as_mut()?;
        let read = conn
            .query_row(
                "SELECT next_queue_id, coalesce(
                    (SELECT max(queue_id) FROM entries WHERE queue_id < 0),
                    (SELECT max(queue_id) FROM entries))
                 FROM queue_meta WHERE id = 1",
                [],
                |row| Ok((uint(row, 0)?, row.get::<_, Option<i64>>(1)?)),
            )
            .map_err(|e| sql_error(&path, e));
        match read {
            Ok((next, last)) => Some(crate::protocol::slots::next_queue_id(
                next,
                last.map(|v| v as u64),
            )),
            Err(e) => {
                tracing::debug!("no hint of the next turn id: {e}");
                None
            }
        }
    }

    /// A read transaction of the active part only: the rows that are not parked, hold a
    /// reservation, or are named by a runner or work record, the oldest parked row and the first
    /// parked row of the first task not paused (index searches: `entries_by_state`,
    /// `entries_reserved`, the `(task, turn)` key for the few runner and work records, and
    /// `entries_task_line` once per paused task skipped).
    fn load_active(&self) -> Result<QueueState, StoreError> {
        let path = self.home.db_path();
        let mut guard = self.connection()?;
        let Some(open) = guard.as_mut() else {
            unreachable!("connection() opened it");
        };
        let Some(conn) = open.conn.as_mut() else {
            unreachable!("the connection is back in its slot outside a section");
        };
        let tx = conn.transaction().map_err(|e| sql_error(&path, e))?;
        let state = read_queue_part(&tx, &path, Part::Look)?;
        tx.commit().map_err(|e| sql_error(&path, e))?;
        Ok(state)
    }

    fn transact_as<R, E>(
        &self,
        commit: Commit,
        change: impl FnOnce(&mut QueueState) -> Result<R, E>,
    ) -> Result<R, E>
    where
        E: From<StoreError>,
    {
        self.section(commit, None, |state, _, _| change(state))
    }

    /// A section on the part `reads` names: index searches for the active rows (as
    /// [`Store::load_active`]), the last row, the rows of the named tasks (the `(task, turn)`
    /// key), the rows depending on them (`entry_dependencies_by_turn`, version 8) and the named
    /// turns, plus the row count; only those rows are checked, cloned and diffed.
    fn transact_reading<R, E>(
        &self,
        commit: Commit,
        reads: &Reads,
        change: impl FnOnce(&mut QueueState, &Loaded) -> Result<R, E>,
    ) -> Result<R, E>
    where
        E: From<StoreError>,
    {
        self.transact_section(commit, reads, |state, loaded, _, _| change(state, loaded))
    }

    /// [`Store::transact_reading`] with the section's records (its connection, lent:
    /// [`RecordTx`]); one host, so no fleet view.
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
        match reads {
            Reads::Everything => self.section(commit, None, |state, _, records| {
                change(state, &Loaded::Whole, &mut None, records)
            }),
            Reads::Part(part) => self.section(commit, Some(part), |state, loaded, records| {
                change(state, loaded, &mut None, records)
            }),
        }
    }
}

impl SqliteStore {
    /// How many queue rows the last section of this store loaded: a test hook
    /// (tests/store_depth_reads.rs checks that a parking submit at depth loads only its part).
    pub fn rows_loaded_by_last_section(&self) -> usize {
        self.rows_loaded.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// How many sections (write transactions) this store has begun, those rolled back included:
    /// a test hook (tests/store_depth_reads.rs checks that a submit with a generated task name
    /// takes one section when the hint was right).
    pub fn sections_begun(&self) -> usize {
        self.sections.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The one write transaction of [`Store::transact_as`] and [`Store::transact_reading`]:
    /// the whole queue when `part` is `None`.
    fn section<R, E>(
        &self,
        commit: Commit,
        part: Option<&QueueReads>,
        change: impl FnOnce(&mut QueueState, &Loaded, &mut RecordTx<'_>) -> Result<R, E>,
    ) -> Result<R, E>
    where
        E: From<StoreError>,
    {
        let path = self.home.db_path();
        let mut guard = self.connection()?;
        let Some(open) = guard.as_mut() else {
            unreachable!("connection() opened it");
        };
        let durable = matches!(commit, Commit::Promise | Commit::Outcome)
            && self.durability == Durability::Fsync;
        set_sync_level(open, durable, &path)?;
        let started = Instant::now();
        // The connection is lent to the section's records (records::Section, handed to `change`
        // as its RecordTx): task and turn records written through it commit with the queue.
        // Dropping `section` (an `Err`, a panic) rolls the transaction back and puts the
        // connection back.
        let Some(mut section) = records::Section::lend(&mut open.conn, path.clone()) else {
            unreachable!("the connection is back in its slot outside a section");
        };
        section
            .with(|c| c.execute_batch("BEGIN IMMEDIATE"))
            .map_err(|e| busy_or(&path, started, e))?;
        self.sections
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (original, loaded) = match part {
            None => (section.with(|c| read_queue(c, &path))?, Loaded::Whole),
            Some(reads) => section.with(|c| read_part(c, &path, reads))?,
        };
        self.rows_loaded
            .store(original.entries.len(), std::sync::atomic::Ordering::Relaxed);
        let mut state = original.clone();
        let result = change(&mut state, &loaded, &mut section.records())?;
        let changed = state != original;
        if changed {
            publish(&section, &original, &state, &path)?;
        }
        let outcome = section.outcome_recorded() && self.durability == Durability::Fsync;
        // From here on an error may be no "nothing changed" (spec/store.md, "An uncertain
        // commit").
        section
            .with(|c| c.execute_batch("COMMIT"))
            .map_err(|e| commit_error(&path, started, e))?;
        section.committed();
        self.after_commit(open, &path, started, durable, outcome)?;
        Ok(result)
    }

    /// What follows a committed section. A section that recorded a turn's outcome is synced
    /// whatever its class (spec/store.md, "Records"). SQLite fixes a commit's sync level before
    /// the transaction begins, and whether a section records an outcome is known only at its
    /// end, so an internal one is followed by a one-row synced commit that syncs the log up to
    /// and including it. Then the log is trimmed. Every error here is uncertain: the commit
    /// stands.
    fn after_commit(
        &self,
        open: &mut Open,
        path: &Path,
        started: Instant,
        durable: bool,
        outcome: bool,
    ) -> Result<(), StoreError> {
        if outcome && !durable {
            if let Some(conn) = &open.conn {
                sync_barrier(conn).map_err(|e| uncertain(busy_or(path, started, e)))?;
            }
            open.synchronous = Some("FULL");
        }
        if let Some(conn) = &open.conn {
            trim_log(conn, path, self.lock_timeout);
        }
        #[cfg(feature = "failpoints")]
        if durable || outcome {
            if let Some(conn) = &open.conn {
                snapshot_for_tests(conn, path).map_err(|e| uncertain(e.into()))?;
            }
        }
        Ok(())
    }
}

/// Sets the connection's sync level for a section that is `durable` or not, outside the
/// transaction (SQLite fixes it there). WAL mode: FULL syncs the log at this commit (and so
/// every commit before it); NORMAL leaves the commit to the next sync or checkpoint.
fn set_sync_level(open: &mut Open, durable: bool, path: &Path) -> Result<(), StoreError> {
    let level = if durable { "FULL" } else { "NORMAL" };
    if open.synchronous != Some(level) {
        if let Some(conn) = &open.conn {
            conn.pragma_update(None, "synchronous", level)
                .map_err(|e| sql_error(path, e))?;
        }
        open.synchronous = Some(level);
    }
    Ok(())
}

/// Writes a section's changed queue over the rows it loaded. Never publishes what the next load
/// would refuse: that would stop every command.
fn publish(
    section: &records::Section<'_>,
    original: &QueueState,
    state: &QueueState,
    path: &Path,
) -> Result<(), StoreError> {
    check_queue(state).map_err(|detail| StoreError::Unpublishable {
        path: path.to_path_buf(),
        detail,
    })?;
    fail::fail_point!("queue::before_publish");
    section
        .with(|c| write_changes(c, original, state))
        .map_err(|e| sql_error(path, e))
}
