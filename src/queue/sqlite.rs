//! The home's store: the queue as tables of one SQLite database, `tollgate.db` (spec/store.md).
//!
//! A locked section is one write transaction (`BEGIN IMMEDIATE`, which takes the database's write
//! lock at once, waiting at most `lock_timeout` for it): SQLite serialises writers exactly as
//! `queue.lock` did, so the task and turn record files a section writes stay guarded by it. A
//! section reads the tables into the same [`QueueState`] the core takes, and on commit writes
//! only the rows that changed. Whether the commit waits for the disk is the caller's
//! [`Commit`] and the home's [`Durability`].

use super::earlier_state;
use super::records;
use super::store::{check_queue, parse_queue, Commit, Store, StoreError};
use super::wal_dirsync;
use crate::clock;
use crate::config::Durability;
use crate::fsutil::{self, FileError};
use crate::home::Home;
use crate::protocol::slots::order::start_rank;
use crate::protocol::slots::steps::{Loaded, QueueReads, Reads};
use crate::protocol::slots::{
    AfterRule, Dependency, PauseSet, ProcessIdentity, QueueEntry, QueueState, RowState,
    RunnerRecord, RunnerSlotReservation, SlotToken, TurnKey, WorkId, WorkRecord,
    QUEUE_FORMAT_VERSION,
};
use rusqlite::config::DbConfig;
use rusqlite::{params, Connection, ErrorCode, OpenFlags, OptionalExtension, TransactionBehavior};
use serde::Serialize;
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The newest schema this tollgate writes; a database whose `schema_migrations` names a newer
/// one is refused (it was written by a newer tollgate).
pub const SCHEMA_VERSION: u32 = 10;

/// The schema's migrations in order: `(version, what it does, SQL)`. Each runs once, inside the
/// write transaction that records it in `schema_migrations`.
const MIGRATIONS: &[(u32, &str, &str)] = &[
    (1, "the queue as tables", SCHEMA_V1),
    (2, "scheduling: row priorities and the pause set", SCHEMA_V2),
    (3, "dependencies of queue rows", SCHEMA_V3),
    (4, "task and turn records", records::SCHEMA_V4),
    (
        5,
        "serve: dedupe marks, refused and handed-off deliveries",
        super::serve_tables::SCHEMA_V5,
    ),
    (6, "the sweep list", SWEEP_SCHEMA_V6),
    (7, "an index of the reserved rows", SCHEMA_V7),
    (
        8,
        "an index of the dependencies by the turn they name",
        SCHEMA_V8,
    ),
    (9, "an index of the parked rows in start order", SCHEMA_V9),
    (10, "an index of each task's parked rows", SCHEMA_V10),
];

/// Version 10: each task's parked rows by `queue_id`, so a submit of a `concurrent=N` task finds
/// the first row of its line (`steps::submit_line_reads`) without reading the whole line. An
/// index only (`IF NOT EXISTS`, as version 7).
const SCHEMA_V10: &str = "
CREATE INDEX IF NOT EXISTS entries_task_line ON entries (task, queue_id)
    WHERE state = 'parked';
";

/// Version 9: the parked rows in start order (priority descending, then `queue_id`), so a
/// finishing runner's section finds the first few it may start (`steps::finish_reads`) without a
/// scan of every parked row. An index only (`IF NOT EXISTS`, as version 7).
const SCHEMA_V9: &str = "
CREATE INDEX IF NOT EXISTS entries_start_order ON entries (priority DESC, queue_id)
    WHERE state = 'parked';
";

/// Version 8: the dependencies indexed by the turn they name, so a section that reads a task's
/// rows also finds the rows waiting on one of its turns ([`Store::transact_reading`]) without a
/// scan of `entry_dependencies`. An index only (`IF NOT EXISTS`, as version 7).
///
/// It also keeps the number of rows in `queue_meta.row_count`, by triggers (so a row inserted or
/// deleted by hand is counted too), for the bound check of a section on a part (`MAX_QUEUE_ROWS`
/// needs the count only; `count(*)` reads a whole index). Rows are inserted with a plain `INSERT`
/// and changed with `UPDATE` ([`write_changes`]), never `INSERT OR REPLACE`, whose implicit delete
/// fires no trigger (and could remove a row the section did not load).
const SCHEMA_V8: &str = "
CREATE INDEX IF NOT EXISTS entry_dependencies_by_turn ON entry_dependencies (task, turn);
ALTER TABLE queue_meta ADD COLUMN row_count INTEGER NOT NULL DEFAULT 0;
UPDATE queue_meta SET row_count = (SELECT count(*) FROM entries);
CREATE TRIGGER entries_counted_in AFTER INSERT ON entries
    BEGIN UPDATE queue_meta SET row_count = row_count + 1 WHERE id = 1; END;
CREATE TRIGGER entries_counted_out AFTER DELETE ON entries
    BEGIN UPDATE queue_meta SET row_count = row_count - 1 WHERE id = 1; END;
";

/// Version 7: the rows holding a reservation, indexed (a few: one per slot being handed off), so
/// the active part of the queue ([`Store::load_active`]: the rows that are not parked, found by
/// `entries_by_state`, and the reserved ones) is read without a scan of the parked rows. `IF NOT
/// EXISTS`: an index only, so a database taken back to an earlier version by hand (the migration
/// tests do) migrates again.
const SCHEMA_V7: &str = "
CREATE INDEX IF NOT EXISTS entries_reserved ON entries (queue_id)
    WHERE reservation_token IS NOT NULL;
";

/// Version 3: a row's dependencies (`submit --after`), in their own table so rows without any
/// cost nothing: `pos` keeps the row's order; `rule` is `ended` (`--after`) or `succeeded`
/// (`--after-success`). At most `MAX_DEPENDENCIES` per row (the core refuses more).
const SCHEMA_V3: &str = "
CREATE TABLE entry_dependencies (
    queue_id INTEGER NOT NULL,
    pos INTEGER NOT NULL,
    task TEXT NOT NULL,
    turn INTEGER NOT NULL,
    rule TEXT NOT NULL CHECK (rule IN ('ended', 'succeeded')),
    PRIMARY KEY (queue_id, pos)
) STRICT;
";

/// Version 1: the queue document as tables. `entries` is FIFO by `queue_id` (the rowid, so the
/// primary key is its index); a row's state and owners are columns (`owner_*` is the waiting
/// row's owner or the dispatching row's dispatch owner; parked rows have none), its reservation
/// the `reserv*`/`child_*` columns. `runners` and `works` keep the document's order in `pos`.
const SCHEMA_V1: &str = "
CREATE TABLE queue_meta (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    version INTEGER NOT NULL,
    next_queue_id INTEGER NOT NULL
) STRICT;
CREATE TABLE entries (
    queue_id INTEGER PRIMARY KEY,
    task TEXT NOT NULL,
    turn INTEGER NOT NULL,
    enqueued_at_millis INTEGER NOT NULL,
    ready_at_millis INTEGER NOT NULL DEFAULT 0,
    state TEXT NOT NULL CHECK (state IN ('waiting', 'dispatching', 'parked')),
    owner_pid INTEGER,
    owner_start_micros INTEGER,
    enqueue_owner_pid INTEGER,
    enqueue_owner_start_micros INTEGER,
    reservation_token TEXT,
    reserver_pid INTEGER,
    reserver_start_micros INTEGER,
    child_pid INTEGER,
    child_start_micros INTEGER,
    cancel_requested INTEGER NOT NULL DEFAULT 0 CHECK (cancel_requested IN (0, 1)),
    UNIQUE (task, turn)
) STRICT;
CREATE INDEX entries_by_state ON entries (state, queue_id);
CREATE TABLE runners (
    pos INTEGER PRIMARY KEY,
    task TEXT NOT NULL,
    turn INTEGER NOT NULL,
    pid INTEGER NOT NULL,
    start_micros INTEGER NOT NULL,
    attached INTEGER NOT NULL
) STRICT;
CREATE INDEX runners_by_turn ON runners (task, turn);
CREATE TABLE works (
    pos INTEGER PRIMARY KEY,
    task TEXT NOT NULL,
    turn INTEGER NOT NULL,
    work_id TEXT NOT NULL,
    runner_pid INTEGER NOT NULL,
    runner_start_micros INTEGER NOT NULL,
    leader_pid INTEGER,
    leader_start_micros INTEGER,
    cgroup TEXT
) STRICT;
CREATE INDEX works_by_turn ON works (task, turn);
CREATE TABLE imports (
    source TEXT PRIMARY KEY,
    imported_at_millis INTEGER NOT NULL,
    moved_aside INTEGER NOT NULL DEFAULT 0
) STRICT;
";

/// Version 2: scheduling (spec/slots.md, "Scheduling"). A row's `priority` (0 for the rows of
/// version 1); the pause set: `queue_meta.paused_home` and one `paused_tasks` row per paused
/// task (bounded by the core's `MAX_PAUSED_TASKS`).
const SCHEMA_V2: &str = "
ALTER TABLE entries ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;
ALTER TABLE queue_meta ADD COLUMN paused_home INTEGER NOT NULL DEFAULT 0
    CHECK (paused_home IN (0, 1));
CREATE TABLE paused_tasks (task TEXT PRIMARY KEY) STRICT;
";

/// The sweep tables: schema version 6 of `tollgate.db`, and the whole schema of `sweep.db`
/// (`IF NOT EXISTS` so one text serves both). A row's body is its JSON document (the serde types
/// below stay the one definition); the key columns make additions idempotent. Rowid order is
/// insertion order, the order the file kept.
pub(crate) const SWEEP_SCHEMA_V6: &str = "
CREATE TABLE IF NOT EXISTS sweep_runs (
    run_id TEXT NOT NULL UNIQUE,
    body TEXT NOT NULL
) STRICT;
CREATE TABLE IF NOT EXISTS sweep_entries (
    path TEXT NOT NULL UNIQUE,
    run_id TEXT NOT NULL,
    body TEXT NOT NULL
) STRICT;
";

/// The queue in `tollgate.db`. Building one does no IO (serve builds one per request); the
/// database is opened, checked and migrated on first use, and the connection kept.
pub struct SqliteStore {
    home: Home,
    lock_timeout: Duration,
    durability: Durability,
    /// Shared with the record layer ([`records::share_sqlite`]): a record access outside a
    /// section uses this connection when it is free, so a command opens the database once.
    open: Arc<Mutex<Option<Open>>>,
    /// The queue rows the last section loaded ([`SqliteStore::rows_loaded_by_last_section`]).
    rows_loaded: std::sync::atomic::AtomicUsize,
    /// Sections begun on this store, committed or rolled back ([`SqliteStore::sections_begun`]).
    sections: std::sync::atomic::AtomicUsize,
}

/// An open connection and the `synchronous` level it was last set to.
pub(crate) struct Open {
    /// `None` only while a section's closure runs on this thread and the record layer holds it
    /// ([`records::Section`]); the store's mutex is held meanwhile, so no one else sees that.
    pub(crate) conn: Option<Connection>,
    pub(crate) synchronous: Option<&'static str>,
}

impl Open {
    /// The home's database opened as the store opens it (checks, migrations, imports), its
    /// `synchronous` level not set yet.
    pub(crate) fn database(home: &Home, lock_timeout: Duration) -> Result<Open, StoreError> {
        Ok(Open {
            conn: Some(open_retrying_busy(home, lock_timeout)?),
            synchronous: None,
        })
    }
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
        records::share_sqlite(home.db_path(), Arc::downgrade(&open));
        SqliteStore {
            home,
            lock_timeout,
            durability,
            open,
            rows_loaded: std::sync::atomic::AtomicUsize::new(0),
            sections: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    pub fn home(&self) -> &Home {
        &self.home
    }

    /// [`Store::load`], callable without importing the trait (as on the file store).
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
    /// `u64` order, see [`int`]), from the primary key. A failure is only a missing hint.
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
        self.section(commit, None, |state, _| change(state))
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
        match reads {
            Reads::Everything => {
                self.section(commit, None, |state, _| change(state, &Loaded::Whole))
            }
            Reads::Part(part) => self.section(commit, Some(part), change),
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
        change: impl FnOnce(&mut QueueState, &Loaded) -> Result<R, E>,
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
        // WAL mode: FULL syncs the log at this commit (and so every commit before it); NORMAL
        // leaves the commit to the next sync or checkpoint. Set outside the transaction.
        let level = if durable { "FULL" } else { "NORMAL" };
        if open.synchronous != Some(level) {
            if let Some(conn) = &open.conn {
                conn.pragma_update(None, "synchronous", level)
                    .map_err(|e| sql_error(&path, e))?;
            }
            open.synchronous = Some(level);
        }
        let started = Instant::now();
        // The connection is lent to the record layer for the section (records::Section): task
        // and turn records written by `change` commit with it. Dropping `section` (an `Err`, a
        // panic) rolls the transaction back and puts the connection back.
        let Some(section) = records::Section::lend(&mut open.conn, path.clone()) else {
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
        let result = change(&mut state, &loaded)?;
        let changed = state != original;
        if changed {
            // Never publish what the next load would refuse: that would stop every command.
            check_queue(&state).map_err(|detail| StoreError::Unpublishable {
                path: path.clone(),
                detail,
            })?;
            fail::fail_point!("queue::before_publish");
            section
                .with(|c| write_changes(c, &original, &state))
                .map_err(|e| sql_error(&path, e))?;
        }
        let outcome = section.outcome_recorded() && self.durability == Durability::Fsync;
        // From here on an error may be no "nothing changed" (spec/store.md, "An uncertain
        // commit").
        section
            .with(|c| c.execute_batch("COMMIT"))
            .map_err(|e| commit_error(&path, started, e))?;
        section.committed();
        // A section that recorded a turn's outcome is synced whatever its class (spec/store.md,
        // "Records"). SQLite fixes a commit's sync level before the transaction begins, and
        // whether a section records an outcome is known only at its end, so an internal one is
        // followed by a one-row synced commit that syncs the log up to and including it.
        if outcome && !durable {
            if let Some(conn) = &open.conn {
                sync_barrier(conn).map_err(|e| uncertain(busy_or(&path, started, e)))?;
            }
            open.synchronous = Some("FULL");
        }
        if let Some(conn) = &open.conn {
            trim_log(conn, &path, self.lock_timeout);
        }
        #[cfg(feature = "failpoints")]
        if durable || outcome {
            if let Some(conn) = &open.conn {
                snapshot_for_tests(conn, &path).map_err(|e| uncertain(e.into()))?;
            }
        }
        Ok(result)
    }
}

/// [`super::log_trim::trim`] after a commit; a failure is logged, never an error of the step
/// (the commit stands, and a later commit trims again).
pub(crate) fn trim_log(conn: &Connection, db: &Path, lock_timeout: Duration) {
    match super::log_trim::trim(conn, db, lock_timeout) {
        Ok(super::log_trim::Trimmed::Short) => {}
        Ok(trimmed) => tracing::debug!("{}: log {trimmed:?}", db.display()),
        Err(e) => tracing::debug!("{}: log not trimmed: {e}", db.display()),
    }
}

/// Syncs the log up to the last commit: a synced write transaction that counts itself in
/// `sync_barrier` (a transaction that writes no page, an unchanged row included, syncs nothing).
/// Leaves the connection at `synchronous = FULL`.
fn sync_barrier(conn: &Connection) -> rusqlite::Result<()> {
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.execute_batch(
        "BEGIN IMMEDIATE; UPDATE sync_barrier SET commits = commits + 1 WHERE id = 1; COMMIT;",
    )
}

/// With the `failpoints` feature, `store::after_durable_commit(DIR)` copies the database as it
/// stands after every synced commit to `DIR/tollgate.db`: what a disk that lost every unsynced
/// write would hold (the power-loss test, tests/failpoints_store_durability.rs).
#[cfg(feature = "failpoints")]
fn snapshot_for_tests(conn: &Connection, path: &Path) -> Result<(), FileError> {
    let Some(Some(dir)) = fail::eval("store::after_durable_commit", |dir| dir) else {
        return Ok(());
    };
    let dir = PathBuf::from(dir);
    let temp = dir.join(format!(".tollgate.db.{}", std::process::id()));
    let _ = std::fs::remove_file(&temp);
    conn.execute("VACUUM INTO ?1", [temp.to_string_lossy()])
        .map_err(|e| FileError::io(path, io::Error::other(e.to_string())))?;
    std::fs::rename(&temp, dir.join("tollgate.db")).map_err(|e| FileError::io(&dir, e))
}

/// A failed `COMMIT`. A write into the log that failed (`SQLITE_FULL`, `SQLITE_IOERR_WRITE`: a
/// full disk) left the commit frame incomplete, so the transaction did not commit and is rolled
/// back; a busy lock is refused before anything is written. Any other failure (a sync, the log's
/// index) can come after the commit frame is whole in the log, which the next command to open
/// the database reads as committed: [`StoreError::Uncertain`].
fn commit_error(path: &Path, started: Instant, error: rusqlite::Error) -> StoreError {
    let extended = match &error {
        rusqlite::Error::SqliteFailure(e, _) => Some(e.extended_code),
        _ => None,
    };
    match extended {
        Some(rusqlite::ffi::SQLITE_FULL | rusqlite::ffi::SQLITE_IOERR_WRITE) => {
            busy_or(path, started, error)
        }
        _ => uncertain(busy_or(path, started, error)),
    }
}

/// A failure after a `COMMIT` (or of one whose outcome is unknown): [`StoreError::Uncertain`],
/// except a busy lock, which SQLite reports before it writes anything.
fn uncertain(error: StoreError) -> StoreError {
    match error {
        busy @ StoreError::Busy { .. } => busy,
        other => StoreError::Uncertain {
            source: Box::new(other),
        },
    }
}

/// The error for a failed `BEGIN IMMEDIATE` or `COMMIT`: [`StoreError::Busy`] when the write
/// lock stayed taken for the whole busy timeout.
fn busy_or(path: &Path, started: Instant, error: rusqlite::Error) -> StoreError {
    if error.sqlite_error_code() == Some(ErrorCode::DatabaseBusy) {
        StoreError::Busy {
            path: path.to_path_buf(),
            waited_millis: started.elapsed().as_millis(),
        }
    } else {
        sql_error(path, error)
    }
}

/// SQLite's error as the store's: a file that is not a database is corrupt input (left as it
/// is); anything else is the database failing.
fn sql_error(path: &Path, error: rusqlite::Error) -> StoreError {
    match error.sqlite_error_code() {
        // Not a database, or one whose pages are malformed: a bad state file (exit 2), kept.
        Some(ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt) => {
            StoreError::File(FileError::Corrupt {
                path: path.to_path_buf(),
                format: "SQLite database",
                detail: error.to_string(),
            })
        }
        Some(ErrorCode::DatabaseBusy) => StoreError::Busy {
            path: path.to_path_buf(),
            waited_millis: 0,
        },
        // ENOSPC, so a runner recording a result retries (`tasks::retry_while_disk_full`).
        Some(ErrorCode::DiskFull) => StoreError::File(FileError::io(
            path,
            io::Error::from_raw_os_error(libc::ENOSPC),
        )),
        _ => StoreError::Database {
            path: path.to_path_buf(),
            detail: error.to_string(),
        },
    }
}

/// Refuses anything but a regular file at `path` (a FIFO would hang SQLite's reads, a symlink to
/// `/dev/zero` would be taken for an empty database and written to). `Ok(false)` when absent.
fn check_regular(path: &Path, kind: &'static str) -> Result<bool, FileError> {
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_file() => Ok(true),
        Ok(meta) => Err(FileError::NotRegular {
            path: path.to_path_buf(),
            kind,
            found: fsutil::describe_type(meta.file_type()),
        }),
        // A symbolic link to nothing: the database was there (or was meant to be) and is not;
        // creating one through the link would put the home's state somewhere else.
        Err(e) if e.kind() == io::ErrorKind::NotFound => match std::fs::read_link(path) {
            Ok(target) => Err(FileError::Missing {
                path: path.to_path_buf(),
                detail: format!(
                    "a symbolic link to {}, which does not exist (restore what it points to, \
                     or remove the link)",
                    target.display()
                ),
            }),
            Err(_) => Ok(false),
        },
        Err(e) => Err(FileError::io(path, e)),
    }
}

/// Whether the (regular) file at `path` holds 0 bytes: a database SQLite would start afresh,
/// deleting its log (tollgate's own databases hold their first page from their first open).
fn is_empty(path: &Path) -> Result<bool, FileError> {
    std::fs::metadata(path)
        .map(|meta| meta.len() == 0)
        .map_err(|e| FileError::io(path, e))
}

/// SQLite's files of the database at `path`: the database itself, its log and its shared
/// memory index. All must be regular files (or absent) before SQLite opens any of them.
fn check_database_files(path: &Path) -> Result<bool, FileError> {
    let exists = check_regular(path, "database")?;
    for suffix in ["-wal", "-shm"] {
        let mut side = path.as_os_str().to_owned();
        side.push(suffix);
        check_regular(Path::new(&side), "database log")?;
    }
    Ok(exists)
}

/// [`open_database`], tried again while it meets a busy database, up to `lock_timeout` in all.
///
/// Commands that open a new database at the same moment race on its first moments (one creates
/// the tables while another, still in the rollback journal mode of an empty file, switches to WAL
/// or reads the schema): SQLite answers some of those with `SQLITE_BUSY` at once, without its busy
/// handler, so the wait is here. Bounded like every lock wait.
fn open_retrying_busy(home: &Home, lock_timeout: Duration) -> Result<Connection, StoreError> {
    let started = Instant::now();
    let mut pause_millis = 1;
    loop {
        match open_database(home, lock_timeout) {
            Err(StoreError::Busy { path, .. }) => {
                if started.elapsed() >= lock_timeout {
                    return Err(StoreError::Busy {
                        path,
                        waited_millis: started.elapsed().as_millis(),
                    });
                }
                std::thread::sleep(Duration::from_millis(pause_millis));
                pause_millis = (pause_millis * 2).min(OPEN_RETRY_MAX_PAUSE_MILLIS);
            }
            other => return other,
        }
    }
}

/// Statements kept prepared per connection. rusqlite keeps 16 by default; one section (its part's
/// reads, its writes, the records it touches) uses more than that, so with 16 a process that ran
/// several sections prepared the same statements again in each (measured with a uprobe on
/// `sqlite3Prepare`: docs/PERFORMANCE.md, "Compiling the look, and the turn folder made by the
/// runner").
const STATEMENT_CACHE_CAPACITY: usize = 128;

/// The longest pause between two tries of a busy first open.
const OPEN_RETRY_MAX_PAUSE_MILLIS: u64 = 20;

/// Opens the home's database, creating it (0600) if missing, in WAL mode, and brings its schema
/// to [`SCHEMA_VERSION`], importing an earlier version's `queue.json` when the database is new.
fn open_database(home: &Home, lock_timeout: Duration) -> Result<Connection, StoreError> {
    let path = home.db_path();
    let exists = check_database_files(&path)?;
    if !exists {
        // A corrupt queue.json (or record file) is refused before anything is created, and
        // named as what is wrong first.
        read_old_queue(home)?;
        read_old_records(home)?;
    }
    // A database that is gone, or emptied to 0 bytes (SQLite would then delete its log), while
    // the home shows it had one is refused before SQLite opens anything ("A lost database").
    if !exists || is_empty(&path)? {
        let signs = earlier_state::earlier_state(home, true)?;
        if !signs.is_empty() {
            return Err(earlier_state::lost(home, !exists, &signs).into());
        }
    }
    if !exists {
        // Created here, not by SQLite, for its mode and so a planted symlink is refused.
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(&path)
        {
            Ok(_) => {}
            // Another command created it meanwhile (or something else is there: checked again).
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                if !check_regular(&path, "database")? {
                    return Err(FileError::io(&path, e).into());
                }
            }
            Err(e) => return Err(FileError::io(&path, e).into()),
        }
    }
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let mut conn = Connection::open_with_flags(&path, flags).map_err(|e| sql_error(&path, e))?;
    // The queue lock's wait: short, growing pauses up to `lock_timeout` (src/queue/busy.rs).
    super::busy::install(&conn, lock_timeout).map_err(|e| sql_error(&path, e))?;
    // Every command is a short process: a checkpoint at each close would cost every command the
    // syncs of the database file. The log is checkpointed as it grows (SQLite's automatic
    // checkpoint every 1000 pages) by whichever commit crosses the mark.
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)
        .map_err(|e| sql_error(&path, e))?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE_CAPACITY);
    // A restarted log is cut back to the automatic checkpoint's mark (src/queue/log_trim.rs).
    conn.pragma_update(None, "journal_size_limit", super::log_trim::LIMIT_BYTES)
        .map_err(|e| sql_error(&path, e))?;
    let started = Instant::now();
    let mode: String = conn
        .pragma_update_and_check(None, "journal_mode", "wal", |row| row.get(0))
        .map_err(|e| busy_or(&path, started, e))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(StoreError::Database {
            path,
            detail: format!("cannot switch to WAL mode (journal_mode is {mode:?})"),
        });
    }
    // Every command opens the database: its usual case (the newest schema, nothing imported
    // left to move aside) costs one read; anything else takes the full checks below.
    if up_to_date(&conn) != Some(true) {
        let version = schema_version(&conn, &path)?;
        if version == 0 {
            // A database with no schema (replaced by an empty one) is a new one to SQLite.
            let signs = earlier_state::earlier_state(home, false)?;
            if !signs.is_empty() {
                return Err(earlier_state::lost(home, false, &signs).into());
            }
        }
        if version < SCHEMA_VERSION {
            migrate(home, &mut conn, &path)?;
        } else if version > SCHEMA_VERSION {
            return Err(newer_schema(&path, version));
        }
        move_imported_aside(home, &conn, &path)?;
        move_records_aside(home, &conn, &path)?;
    }
    // The log is open now: its directory entry is synced once, not by every connection.
    let settled = wal_dirsync::settle(&conn);
    tracing::debug!("{}: log directory entry {settled:?}", path.display());
    Ok(conn)
}

/// One read on the open path: whether the schema is [`SCHEMA_VERSION`] and no import waits for
/// its files to be moved aside. `None` when the tables are not there yet (a new database).
fn up_to_date(conn: &Connection) -> Option<bool> {
    conn.query_row(
        "SELECT (SELECT coalesce(max(version), 0) FROM schema_migrations),
                (SELECT count(*) FROM imports WHERE moved_aside = 0)",
        [],
        |row| Ok(row.get::<_, u32>(0)? == SCHEMA_VERSION && row.get::<_, u32>(1)? == 0),
    )
    .ok()
}

/// A connection for the record layer's accesses outside a section ([`records`]): the same open,
/// checks and migrations as the store's, and `synchronous = NORMAL` (those writes are internal
/// transitions, spec/store.md "Records").
pub(crate) fn open_for_records(
    home: &Home,
    lock_timeout: Duration,
) -> Result<Connection, StoreError> {
    let conn = open_retrying_busy(home, lock_timeout)?;
    conn.pragma_update(None, "synchronous", "NORMAL")
        .map_err(|e| sql_error(&home.db_path(), e))?;
    Ok(conn)
}

/// The record files of an earlier version's home (or of a home whose database predates schema
/// version 4): every `tasks/<task>/task.json` and `tasks/<task>/turns/<n>/turn.json`, checked as
/// strictly as the file loader checks them. The first file that would not load is an error
/// naming it (nothing is imported).
pub(super) struct OldRecords {
    pub(super) tasks: Vec<crate::protocol::records::TaskRecord>,
    pub(super) turns: Vec<crate::protocol::records::TurnRecord>,
}

pub(super) fn read_old_records(home: &Home) -> Result<OldRecords, StoreError> {
    let mut old = OldRecords {
        tasks: Vec::new(),
        turns: Vec::new(),
    };
    let tasks_dir = home.tasks_dir();
    for task in fsutil::sorted_names(&tasks_dir)? {
        let task_file = home.task_file(&task);
        if let Some(bytes) =
            fsutil::read_state_file(&task_file, "task record", fsutil::limits::TASK_BYTES)?
        {
            old.tasks
                .push(super::records::parse_task(&task_file, &bytes)?);
        }
        let turns_dir = home.task_dir(&task).join("turns");
        for name in fsutil::sorted_names(&turns_dir)? {
            let Ok(turn) = name.parse::<u32>() else {
                continue;
            };
            let key = TurnKey::new(task.clone(), turn);
            let file = home.turn_file(&key);
            if let Some(bytes) =
                fsutil::read_state_file(&file, "turn record", fsutil::limits::TURN_BYTES)?
            {
                old.turns
                    .push(super::records::parse_turn(&file, &bytes, &key)?);
            }
        }
    }
    Ok(old)
}

/// Writes the home's record files into the version 4 tables (inside the migration's
/// transaction) and records the import; the files are moved aside after the commit.
fn import_records(home: &Home, tx: &Connection, path: &Path) -> Result<(), StoreError> {
    let old = read_old_records(home)?;
    if old.tasks.is_empty() && old.turns.is_empty() {
        return Ok(());
    }
    let sql = |e| sql_error(path, e);
    let json = |e: serde_json::Error| StoreError::Database {
        path: path.to_path_buf(),
        detail: format!("cannot render a record: {e}"),
    };
    for task in &old.tasks {
        let body = serde_json::to_string(task).map_err(json)?;
        records::put_task(tx, &task.name, task.next_turn, &body).map_err(sql)?;
    }
    for turn in &old.turns {
        let body = serde_json::to_string(turn).map_err(json)?;
        records::put_turn(
            tx,
            &records::TurnRow {
                task: &turn.key.task,
                turn: turn.key.turn,
                short_id: turn.id,
                settled: turn.is_settled(),
                ended_at_millis: turn.ended_at_millis,
                body: &body,
            },
            true,
        )
        .map_err(sql)?;
    }
    tx.execute(
        "INSERT OR REPLACE INTO imports (source, imported_at_millis) VALUES ('records', ?1)",
        [clock::now_millis()],
    )
    .map_err(sql)?;
    Ok(())
}

/// After the record files were imported, renames each `task.json` and `turn.json` to
/// `*.imported` (kept, never deleted) and records that; finished by a later open if a crash came
/// in between.
fn move_records_aside(home: &Home, conn: &Connection, path: &Path) -> Result<(), StoreError> {
    let pending: Option<bool> = conn
        .query_row(
            "SELECT moved_aside = 0 FROM imports WHERE source = 'records'",
            [],
            |row| row.get(0),
        )
        .optional()
        .map_err(|e| sql_error(path, e))?;
    if pending != Some(true) {
        return Ok(());
    }
    move_record_files_aside(home)?;
    conn.execute(
        "UPDATE imports SET moved_aside = 1 WHERE source = 'records'",
        [],
    )
    .map_err(|e| sql_error(path, e))?;
    Ok(())
}

/// Renames every `task.json` and `turn.json` of `home` to `*.imported` (kept, never deleted);
/// also used by the PostgreSQL store's import of a home's record files.
pub(super) fn move_record_files_aside(home: &Home) -> Result<(), StoreError> {
    let aside = |file: PathBuf| -> Result<(), StoreError> {
        if file.is_file() {
            let mut to = file.as_os_str().to_owned();
            to.push(".imported");
            match std::fs::rename(&file, &to) {
                // Another command opening the home at the same moment moved it first.
                Err(e) if e.kind() != io::ErrorKind::NotFound => {
                    return Err(FileError::io(&file, e).into())
                }
                _ => {}
            }
        }
        Ok(())
    };
    for task in fsutil::sorted_names(&home.tasks_dir())? {
        aside(home.task_file(&task))?;
        for name in fsutil::sorted_names(&home.task_dir(&task).join("turns"))? {
            if let Ok(turn) = name.parse::<u32>() {
                aside(home.turn_file(&TurnKey::new(task.clone(), turn)))?;
            }
        }
    }
    Ok(())
}

fn newer_schema(path: &Path, version: u32) -> StoreError {
    StoreError::File(FileError::Corrupt {
        path: path.to_path_buf(),
        format: "tollgate database",
        detail: format!(
            "schema version {version} is newer than this tollgate understands ({SCHEMA_VERSION})"
        ),
    })
}

/// The highest applied migration; 0 for a database without tables.
fn schema_version(conn: &Connection, path: &Path) -> Result<u32, StoreError> {
    let has_table: bool = conn
        .query_row(
            "SELECT count(*) > 0 FROM sqlite_schema WHERE type = 'table' AND name = 'schema_migrations'",
            [],
            |row| row.get(0),
        )
        .map_err(|e| sql_error(path, e))?;
    if !has_table {
        return Ok(0);
    }
    conn.query_row(
        "SELECT coalesce(max(version), 0) FROM schema_migrations",
        [],
        |row| row.get(0),
    )
    .map_err(|e| sql_error(path, e))
}

/// Applies the missing migrations in one durable write transaction; a new database also gets
/// the home's `queue.json` (if any) imported in it, so either all of it is in the tables or none.
fn migrate(home: &Home, conn: &mut Connection, path: &Path) -> Result<(), StoreError> {
    conn.pragma_update(None, "synchronous", "FULL")
        .map_err(|e| sql_error(path, e))?;
    let started = Instant::now();
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(|e| busy_or(path, started, e))?;
    tx.execute_batch(
        "CREATE TABLE IF NOT EXISTS schema_migrations (
            version INTEGER PRIMARY KEY,
            description TEXT NOT NULL,
            applied_at_millis INTEGER NOT NULL
        ) STRICT;",
    )
    .map_err(|e| sql_error(path, e))?;
    // Read again under the write lock: another command may have migrated meanwhile.
    let current = schema_version(&tx, path)?;
    if current > SCHEMA_VERSION {
        return Err(newer_schema(path, current));
    }
    for &(version, description, sql) in MIGRATIONS.iter().filter(|m| m.0 > current) {
        tx.execute_batch(sql).map_err(|e| sql_error(path, e))?;
        tx.execute(
            "INSERT INTO schema_migrations (version, description, applied_at_millis) VALUES (?1, ?2, ?3)",
            params![version, description, clock::now_millis()],
        )
        .map_err(|e| sql_error(path, e))?;
        if version == 1 {
            tx.execute(
                "INSERT INTO queue_meta (id, version, next_queue_id) VALUES (1, ?1, 1)",
                [QUEUE_FORMAT_VERSION],
            )
            .map_err(|e| sql_error(path, e))?;
        }
    }
    // A new database imports `queue.json` once every table of the newest schema exists.
    if current == 0 {
        if let Some(old) = read_old_queue(home)? {
            write_changes(&tx, &QueueState::default(), &old).map_err(|e| sql_error(path, e))?;
            tx.execute(
                "INSERT INTO imports (source, imported_at_millis) VALUES ('queue.json', ?1)",
                [clock::now_millis()],
            )
            .map_err(|e| sql_error(path, e))?;
        }
    }
    // Version 4 moved the records into the database: the record files of a home that had them
    // (a new database, or one of version 1-3) are imported in the same transaction.
    if current < 4 {
        import_records(home, &tx, path)?;
    }
    tx.commit().map_err(|e| busy_or(path, started, e))
}

/// The home's `queue.json` of an earlier version, checked as strictly as the file store loaded
/// it: `Ok(None)` when there is none, an error naming it when it would not load.
fn read_old_queue(home: &Home) -> Result<Option<QueueState>, StoreError> {
    let old = home.queue_path();
    match fsutil::read_state_file(&old, "queue", fsutil::limits::QUEUE_BYTES)? {
        Some(bytes) => Ok(Some(parse_queue(&old, &bytes)?)),
        None => Ok(None),
    }
}

/// After `queue.json` was imported (recorded in `imports`), moves it to
/// [`Home::imported_queue_path`] and records that; done on a later open if a crash came between
/// the import's commit and the move. A `queue.json` that appears after that (an old tollgate run
/// on this home, a restored backup) is neither imported nor moved: `doctor` names it.
fn move_imported_aside(home: &Home, conn: &Connection, path: &Path) -> Result<(), StoreError> {
    let old = home.queue_path();
    if !old.exists() {
        return Ok(());
    }
    let pending: Option<bool> = conn
        .query_row(
            "SELECT moved_aside = 0 FROM imports WHERE source = 'queue.json'",
            [],
            |row| row.get(0),
        )
        .optional()
        .map_err(|e| sql_error(path, e))?;
    if pending != Some(true) {
        return Ok(());
    }
    let mut aside = home.imported_queue_path();
    if aside.exists() {
        aside = aside.with_extension(format!("imported.{}", clock::now_millis()));
    }
    std::fs::rename(&old, &aside).map_err(|e| FileError::io(&old, e))?;
    conn.execute(
        "UPDATE imports SET moved_aside = 1 WHERE source = 'queue.json'",
        [],
    )
    .map_err(|e| sql_error(path, e))?;
    Ok(())
}

/// Reads the queue's tables into the document the core takes, refusing (naming the database)
/// what the file store's loader would refuse.
fn read_queue(conn: &Connection, path: &Path) -> Result<QueueState, StoreError> {
    read_queue_part(conn, path, Part::All)
}

/// The first task (by name) with a parked row that no task pause holds, or NULL: a loose scan of
/// the partial index `entries_task_line (task, queue_id) WHERE state = 'parked'`, one search per
/// task, stopping at the first task not in `paused_tasks`, so at most one search per paused task
/// and one more, however many rows the paused tasks hold (spec/slots.md, "A paused backlog's
/// look").
///
/// The index is named: SQLite's planner otherwise took `entries_by_state` and read every parked
/// row for each `min(task)` (seen with EXPLAIN QUERY PLAN).
const UNPAUSED_TASK: &str = "WITH RECURSIVE skip(task) AS (
        SELECT min(task) FROM entries INDEXED BY entries_task_line WHERE state = 'parked'
        UNION ALL
        SELECT (SELECT min(task) FROM entries INDEXED BY entries_task_line
                WHERE state = 'parked' AND task > skip.task)
        FROM skip WHERE skip.task IN (SELECT task FROM paused_tasks))
    SELECT task FROM skip WHERE task NOT IN (SELECT task FROM paused_tasks) LIMIT 1";

/// Which rows [`read_queue_part`] reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Part {
    /// Every row: a section's input.
    All,
    /// The rows that are not parked, those holding a reservation and those a runner or work
    /// record names ([`Store::load_active`]); not checked as a whole queue (it is not one),
    /// never published.
    Active,
    /// [`Part::Active`], the oldest parked row and the first parked row of the first task not
    /// paused ([`Store::load_active`]): whether the queue has a parked row no pause holds decides
    /// whether a free slot can start anything (`steps::reconcile_would_act`).
    Look,
}

/// The columns of an `entries` row as [`entry_from_row`] reads them.
const ENTRY_COLUMNS: &str = "queue_id, task, turn, enqueued_at_millis, ready_at_millis, state,
    owner_pid, owner_start_micros, enqueue_owner_pid, enqueue_owner_start_micros,
    reservation_token, reserver_pid, reserver_start_micros, child_pid,
    child_start_micros, cancel_requested, priority";

/// [`read_queue`] of `part` of the rows.
fn read_queue_part(conn: &Connection, path: &Path, part: Part) -> Result<QueueState, StoreError> {
    let corrupt = |detail: String| {
        StoreError::File(FileError::Corrupt {
            path: path.to_path_buf(),
            format: "tollgate queue",
            detail,
        })
    };
    let sql = |e| sql_error(path, e);
    let (version, next_queue_id, paused_home): (u32, u64, bool) = conn
        .query_row(
            "SELECT version, next_queue_id, paused_home FROM queue_meta WHERE id = 1",
            [],
            |row| Ok((row.get(0)?, uint(row, 1)?, row.get(2)?)),
        )
        .optional()
        .map_err(sql)?
        .ok_or_else(|| corrupt("the queue_meta row is missing".to_string()))?;
    let mut state = QueueState {
        version,
        next_queue_id,
        entries: Vec::new(),
        runners: Vec::new(),
        works: Vec::new(),
        paused: PauseSet {
            home: paused_home,
            tasks: Default::default(),
        },
    };
    let mut paused = conn
        .prepare_cached("SELECT task FROM paused_tasks ORDER BY task")
        .map_err(sql)?;
    state.paused.tasks = paused
        .query_map([], |row| row.get::<_, String>(0))
        .map_err(sql)?
        .collect::<Result<_, _>>()
        .map_err(sql)?;
    drop(paused);
    let all = format!("SELECT {ENTRY_COLUMNS} FROM entries ORDER BY queue_id");
    // Each arm names ids only, and the rows are read once by their key: the same rows as a
    // `UNION` of whole rows, but SQLite compiles the row's columns once instead of once per arm.
    // Every command compiles this statement afresh (a new process), and the arms of whole rows
    // cost it three times as much (docs/PERFORMANCE.md, "Compiling the look"). The rows a runner
    // or work record names are found from the records (a join on the `(task, turn)` key):
    // `(task, turn) IN (SELECT ...)` made SQLite scan every row.
    const ACTIVE_IDS: &str =
        "SELECT queue_id FROM entries WHERE state IN ('waiting', 'dispatching')
         UNION ALL
         SELECT queue_id FROM entries WHERE reservation_token IS NOT NULL
         UNION ALL
         SELECT e.queue_id FROM runners AS r
             JOIN entries AS e ON e.task = r.task AND e.turn = r.turn
         UNION ALL
         SELECT e.queue_id FROM works AS w
             JOIN entries AS e ON e.task = w.task AND e.turn = w.turn";
    let active = format!(
        "SELECT {ENTRY_COLUMNS} FROM entries WHERE queue_id IN ({ACTIVE_IDS}) ORDER BY queue_id"
    );
    let look = format!(
        "SELECT {ENTRY_COLUMNS} FROM entries WHERE queue_id IN ({ACTIVE_IDS}
         UNION ALL
         SELECT min(queue_id) FROM entries WHERE state = 'parked'
         UNION ALL
         SELECT min(queue_id) FROM entries INDEXED BY entries_task_line
             WHERE state = 'parked' AND task = ({UNPAUSED_TASK}))
         ORDER BY queue_id"
    );
    let mut rows = conn
        .prepare_cached(match part {
            Part::All => &all,
            Part::Active => &active,
            Part::Look => &look,
        })
        .map_err(sql)?;
    let mut query = rows.query([]).map_err(sql)?;
    while let Some(row) = query.next().map_err(sql)? {
        let queue_id = uint(row, 0).map_err(sql)?;
        let entry = entry_from_row(row)
            .map_err(sql)?
            .map_err(|detail| corrupt(format!("row with queue_id {queue_id}: {detail}")))?;
        state.entries.push(entry);
    }
    drop(query);
    // Already in order unless ids passed 2^63 (see [`int`]); the sort is then linear.
    state.entries.sort_by_key(|e| e.queue_id);
    match part {
        Part::All => read_dependencies(conn, &mut state).map_err(sql)?,
        Part::Active | Part::Look => read_dependencies_of(conn, &mut state.entries).map_err(sql)?,
    }
    let mut runners = conn
        .prepare_cached("SELECT task, turn, pid, start_micros, attached FROM runners ORDER BY pos")
        .map_err(sql)?;
    state.runners = runners
        .query_map([], |row| {
            Ok(RunnerRecord {
                key: TurnKey::new(row.get::<_, String>(0)?, row.get(1)?),
                identity: identity(row, 2, 3)?.ok_or(rusqlite::Error::InvalidColumnType(
                    2,
                    "pid".into(),
                    rusqlite::types::Type::Null,
                ))?,
                attached: row.get(4)?,
            })
        })
        .map_err(sql)?
        .collect::<Result<_, _>>()
        .map_err(sql)?;
    let mut works = conn
        .prepare_cached(
            "SELECT task, turn, work_id, runner_pid, runner_start_micros, leader_pid,
                    leader_start_micros, cgroup
             FROM works ORDER BY pos",
        )
        .map_err(sql)?;
    let mut query = works.query([]).map_err(sql)?;
    while let Some(row) = query.next().map_err(sql)? {
        let key = TurnKey::new(
            row.get::<_, String>(0).map_err(sql)?,
            row.get(1).map_err(sql)?,
        );
        let id_text: String = row.get(2).map_err(sql)?;
        let id = token(&id_text)
            .map(WorkId::from_token)
            .map_err(|detail| corrupt(format!("work of {key}: {detail}")))?;
        let runner = identity(row, 3, 4)
            .map_err(sql)?
            .ok_or_else(|| corrupt(format!("work of {key} has no runner")))?;
        let leader = identity(row, 5, 6).map_err(sql)?;
        let cgroup: Option<String> = row.get(7).map_err(sql)?;
        state.works.push(WorkRecord {
            key,
            id,
            runner,
            leader,
            cgroup,
        });
    }
    if part == Part::All {
        check_queue(&state).map_err(corrupt)?;
    }
    Ok(state)
}

/// The part of the queue `reads` names (spec/store.md, "What a section loads"; the core's
/// [`crate::protocol::slots::steps::project`] is its reference): the active part
/// ([`Part::Active`]), then the last row, the rows of the named tasks and those depending on a
/// turn of them, and the named turns, each an index search; and the number of rows in all (`queue_meta.row_count`, version 8). The
/// part is checked as a queue (it is a subsequence of one, so the structural invariants hold of
/// it); the rows it leaves out are checked where they were written and by `tollgate doctor`.
fn read_part(
    conn: &Connection,
    path: &Path,
    reads: &QueueReads,
) -> Result<(QueueState, Loaded), StoreError> {
    let corrupt = |detail: String| {
        StoreError::File(FileError::Corrupt {
            path: path.to_path_buf(),
            format: "tollgate queue",
            detail,
        })
    };
    let sql = |e| sql_error(path, e);
    let mut state = read_queue_part(conn, path, Part::Active)?;
    let mut extra: Vec<QueueEntry> = Vec::new();
    // The highest id as a `u64`: past 2^63 (see [`int`]) it is the highest negative one.
    let last = format!(
        "SELECT {ENTRY_COLUMNS} FROM entries WHERE queue_id = coalesce(
            (SELECT max(queue_id) FROM entries WHERE queue_id < 0),
            (SELECT max(queue_id) FROM entries))"
    );
    let of_task = format!("SELECT {ENTRY_COLUMNS} FROM entries WHERE task = ?1");
    let depending = format!(
        "SELECT {ENTRY_COLUMNS} FROM entries WHERE queue_id IN
            (SELECT queue_id FROM entry_dependencies WHERE task = ?1)"
    );
    let of_turn = format!("SELECT {ENTRY_COLUMNS} FROM entries WHERE task = ?1 AND turn = ?2");
    // The first parked rows in start order (`order::start_rank`), by the partial index
    // `entries_start_order` (version 9), named: the planner would rather take `entries_by_state`'s
    // range and sort every parked row. Ids past 2^63 read negative (see [`int`]): the first of
    // those (a range of `entries_by_state`, empty but for hand-made queues) and of the others
    // are taken, and the first of both kept.
    let heads_sql = format!(
        "SELECT {ENTRY_COLUMNS} FROM entries INDEXED BY entries_start_order
         WHERE state = 'parked' AND queue_id >= 0
         ORDER BY priority DESC, queue_id LIMIT ?1"
    );
    let heads_past_sql = format!(
        "SELECT {ENTRY_COLUMNS} FROM entries WHERE state = 'parked' AND queue_id < 0
         ORDER BY priority DESC, queue_id LIMIT ?1"
    );
    // A task's first parked row in the core's `u64` order of ids (those past 2^63 read
    // negative, see [`int`]), by the partial index `entries_task_line` (version 10).
    let line_head = format!(
        "SELECT {ENTRY_COLUMNS} FROM entries WHERE queue_id = coalesce(
            (SELECT min(queue_id) FROM entries
             WHERE task = ?1 AND state = 'parked' AND queue_id >= 0),
            (SELECT min(queue_id) FROM entries
             WHERE task = ?1 AND state = 'parked' AND queue_id < 0))"
    );
    let push = |extra: &mut Vec<QueueEntry>,
                query: &str,
                params: &[&dyn rusqlite::ToSql]|
     -> Result<(), StoreError> {
        let mut rows = conn.prepare_cached(query).map_err(sql)?;
        let mut found = rows.query(params).map_err(sql)?;
        while let Some(row) = found.next().map_err(sql)? {
            let queue_id = uint(row, 0).map_err(sql)?;
            let entry = entry_from_row(row)
                .map_err(sql)?
                .map_err(|detail| corrupt(format!("row with queue_id {queue_id}: {detail}")))?;
            extra.push(entry);
        }
        Ok(())
    };
    push(&mut extra, &last, &[])?;
    for task in &reads.tasks {
        push(&mut extra, &of_task, &[task])?;
        push(&mut extra, &depending, &[task])?;
    }
    for key in &reads.turns {
        push(&mut extra, &of_turn, &[&key.task, &key.turn])?;
    }
    for task in &reads.lines {
        push(&mut extra, &line_head, &[task])?;
    }
    if reads.heads > 0 {
        let mut heads = Vec::new();
        let limit = i64::try_from(reads.heads).unwrap_or(i64::MAX);
        push(&mut heads, &heads_sql, &[&limit])?;
        push(&mut heads, &heads_past_sql, &[&limit])?;
        heads.sort_by_key(start_rank);
        heads.truncate(reads.heads);
        // Their dependencies name the rows to read besides; every row's own are read below.
        let mut with_dependencies = heads.clone();
        read_dependencies_of(conn, &mut with_dependencies).map_err(sql)?;
        let waited_for: std::collections::BTreeSet<TurnKey> = with_dependencies
            .iter()
            .flat_map(|e| e.after.iter().map(|d| d.key.clone()))
            .collect();
        for key in &waited_for {
            push(&mut extra, &of_turn, &[&key.task, &key.turn])?;
        }
        extra.extend(heads);
    }
    extra.sort_by_key(|e| e.queue_id);
    extra.dedup_by_key(|e| e.queue_id);
    extra.retain(|e| {
        state
            .entries
            .binary_search_by_key(&e.queue_id, |a| a.queue_id)
            .is_err()
    });
    read_dependencies_of(conn, &mut extra).map_err(sql)?;
    state.entries.extend(extra);
    state.entries.sort_by_key(|e| e.queue_id);
    check_queue(&state).map_err(corrupt)?;
    let queue_rows: i64 = conn
        .prepare_cached("SELECT row_count FROM queue_meta WHERE id = 1")
        .map_err(sql)?
        .query_row([], |row| row.get(0))
        .map_err(sql)?;
    Ok((
        state,
        Loaded::Part {
            reads: reads.clone(),
            queue_rows: usize::try_from(queue_rows).unwrap_or(usize::MAX),
        },
    ))
}

/// A `u64` as SQLite's 64-bit signed INTEGER, bit for bit: every value the core can hold (a
/// queue counter at `u64::MAX` included) round-trips. Values past `i64::MAX` read as negative in
/// the `sqlite3` shell and sort before the others there, which is why the loader sorts the rows by
/// their `u64` id (the order `ORDER BY queue_id` gives for every id below 2^63).
fn int(value: u64) -> i64 {
    value as i64
}

/// The inverse of [`int`].
fn uint(row: &rusqlite::Row<'_>, column: usize) -> rusqlite::Result<u64> {
    Ok(row.get::<_, i64>(column)? as u64)
}

/// A process identity from a pid and a start-time column; `None` when both are NULL.
fn identity(
    row: &rusqlite::Row<'_>,
    pid: usize,
    start: usize,
) -> rusqlite::Result<Option<ProcessIdentity>> {
    let pid: Option<u32> = row.get(pid)?;
    let start: Option<u64> = row.get::<_, Option<i64>>(start)?.map(|v| v as u64);
    Ok(match (pid, start) {
        (Some(pid), Some(start_time_micros)) => Some(ProcessIdentity {
            pid,
            start_time_micros,
        }),
        _ => None,
    })
}

/// A slot token from its text, with the JSON loader's checks (a UUID, never nil).
fn token(text: &str) -> Result<SlotToken, String> {
    serde_json::from_value(serde_json::Value::String(text.to_string()))
        .map_err(|e| format!("token {text:?}: {e}"))
}

/// One `entries` row as a queue entry; the inner `Err` says what in the row is inconsistent.
fn entry_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Result<QueueEntry, String>> {
    let owner = identity(row, 6, 7)?;
    let enqueue_owner = identity(row, 8, 9)?;
    let state_name: String = row.get(5)?;
    let state = match (state_name.as_str(), owner, enqueue_owner) {
        ("waiting", Some(owner), Some(enqueue_owner)) => RowState::Waiting {
            enqueue_owner,
            owner,
        },
        ("dispatching", Some(dispatch_owner), None) => RowState::Dispatching { dispatch_owner },
        ("parked", None, None) => RowState::Parked,
        (other, ..) => {
            return Ok(Err(format!(
                "state {other:?} does not match its owner columns"
            )))
        }
    };
    let reservation_token: Option<String> = row.get(10)?;
    let slot_reservation = match (reservation_token, identity(row, 11, 12)?) {
        (None, None) => None,
        (Some(text), Some(reserver)) => match token(&text) {
            Ok(token) => Some(RunnerSlotReservation {
                reserver,
                token,
                child: identity(row, 13, 14)?,
            }),
            Err(detail) => return Ok(Err(detail)),
        },
        _ => {
            return Ok(Err(
                "a reservation without its token or reserver".to_string()
            ))
        }
    };
    Ok(Ok(QueueEntry {
        queue_id: uint(row, 0)?,
        key: TurnKey::new(row.get::<_, String>(1)?, row.get(2)?),
        enqueued_at_millis: uint(row, 3)?,
        state,
        slot_reservation,
        ready_at_millis: uint(row, 4)?,
        cancel_requested: row.get(15)?,
        priority: row.get(16)?,
        after: Vec::new(),
    }))
}

/// Attaches the `entry_dependencies` rows to their entries (spec/store.md, version 3), found by
/// a binary search of the entries, which are in `queue_id` order by now (no map of the queue is
/// built for the few rows that have dependencies).
fn read_dependencies(conn: &Connection, state: &mut QueueState) -> rusqlite::Result<()> {
    let mut rows = conn.prepare_cached(
        "SELECT queue_id, task, turn, rule FROM entry_dependencies ORDER BY queue_id, pos",
    )?;
    let mut query = rows.query([])?;
    while let Some(row) = query.next()? {
        let queue_id = uint(row, 0)?;
        let rule = match row.get::<_, String>(3)?.as_str() {
            "succeeded" => AfterRule::Succeeded,
            _ => AfterRule::Ended,
        };
        // A dependency of a row that is gone would be a leftover; the row's removal deletes them.
        if let Ok(i) = state
            .entries
            .binary_search_by_key(&queue_id, |e| e.queue_id)
        {
            state.entries[i].after.push(Dependency {
                key: TurnKey::new(row.get::<_, String>(1)?, row.get(2)?),
                rule,
            });
        }
    }
    Ok(())
}

/// Attaches their `entry_dependencies` rows to `entries` (a part of the queue), one primary-key
/// search per entry: the cost follows the rows loaded, not the dependencies in the queue.
fn read_dependencies_of(conn: &Connection, entries: &mut [QueueEntry]) -> rusqlite::Result<()> {
    let mut rows = conn.prepare_cached(
        "SELECT task, turn, rule FROM entry_dependencies WHERE queue_id = ?1 ORDER BY pos",
    )?;
    for entry in entries.iter_mut() {
        let mut query = rows.query([int(entry.queue_id)])?;
        while let Some(row) = query.next()? {
            let rule = match row.get::<_, String>(2)?.as_str() {
                "succeeded" => AfterRule::Succeeded,
                _ => AfterRule::Ended,
            };
            entry.after.push(Dependency {
                key: TurnKey::new(row.get::<_, String>(0)?, row.get(1)?),
                rule,
            });
        }
    }
    Ok(())
}

/// Rewrites the dependencies of the entry `queue_id` as `after` (none: the row left or lost them).
fn write_dependencies(
    tx: &Connection,
    queue_id: u64,
    after: &[Dependency],
) -> rusqlite::Result<()> {
    tx.prepare_cached("DELETE FROM entry_dependencies WHERE queue_id = ?1")?
        .execute([int(queue_id)])?;
    let mut insert = tx.prepare_cached(
        "INSERT INTO entry_dependencies (queue_id, pos, task, turn, rule) VALUES (?1, ?2, ?3, ?4, ?5)",
    )?;
    for (pos, dependency) in after.iter().enumerate() {
        let rule = match dependency.rule {
            AfterRule::Ended => "ended",
            AfterRule::Succeeded => "succeeded",
        };
        insert.execute(params![
            int(queue_id),
            pos,
            dependency.key.task,
            dependency.key.turn,
            rule
        ])?;
    }
    Ok(())
}

/// Deletes the row of an entry that left, with its dependencies.
fn remove_entry(tx: &Connection, entry: &QueueEntry) -> rusqlite::Result<()> {
    tx.prepare_cached("DELETE FROM entries WHERE queue_id = ?1")?
        .execute([int(entry.queue_id)])?;
    if !entry.after.is_empty() {
        write_dependencies(tx, entry.queue_id, &[])?;
    }
    Ok(())
}

/// Writes one entry's row: a plain `INSERT` of an `added` one (a row already there with its id or
/// its turn fails the section instead of being replaced: a section never removes a row it did not
/// load), an `UPDATE` of a changed one.
fn upsert_entry(tx: &Connection, entry: &QueueEntry, added: bool) -> rusqlite::Result<()> {
    let mut upsert = tx.prepare_cached(if added {
        "INSERT INTO entries (queue_id, task, turn, enqueued_at_millis, ready_at_millis,
            state, owner_pid, owner_start_micros, enqueue_owner_pid, enqueue_owner_start_micros,
            reservation_token, reserver_pid, reserver_start_micros, child_pid, child_start_micros,
            cancel_requested, priority)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)"
    } else {
        "UPDATE entries SET task = ?2, turn = ?3, enqueued_at_millis = ?4, ready_at_millis = ?5,
            state = ?6, owner_pid = ?7, owner_start_micros = ?8, enqueue_owner_pid = ?9,
            enqueue_owner_start_micros = ?10, reservation_token = ?11, reserver_pid = ?12,
            reserver_start_micros = ?13, child_pid = ?14, child_start_micros = ?15,
            cancel_requested = ?16, priority = ?17
         WHERE queue_id = ?1"
    })?;
    let (state, owner, enqueue_owner) = match &entry.state {
        RowState::Waiting {
            enqueue_owner,
            owner,
        } => ("waiting", Some(owner), Some(enqueue_owner)),
        RowState::Dispatching { dispatch_owner } => ("dispatching", Some(dispatch_owner), None),
        RowState::Parked => ("parked", None, None),
    };
    let reservation = entry.slot_reservation.as_ref();
    let child = reservation.and_then(|r| r.child.as_ref());
    upsert.execute(params![
        int(entry.queue_id),
        entry.key.task,
        entry.key.turn,
        int(entry.enqueued_at_millis),
        int(entry.ready_at_millis),
        state,
        owner.map(|o| o.pid),
        owner.map(|o| int(o.start_time_micros)),
        enqueue_owner.map(|o| o.pid),
        enqueue_owner.map(|o| int(o.start_time_micros)),
        reservation.map(|r| r.token.to_string()),
        reservation.map(|r| r.reserver.pid),
        reservation.map(|r| int(r.reserver.start_time_micros)),
        child.map(|c| c.pid),
        child.map(|c| int(c.start_time_micros)),
        entry.cancel_requested,
        entry.priority,
    ])?;
    Ok(())
}

/// Writes what differs between `old` (what the tables hold) and `new`: the meta row if its
/// fields changed, the entries that were removed, added or changed (by `queue_id`), and the
/// runner and work lists whole when either changed (each is bounded by the slots in use).
///
/// The entries are compared in one merge walk over both lists, which are in `queue_id` order
/// (the loader sorts `old`; `new` passed the structure check, which requires it): no map of the
/// queue is built, and only the rows that changed are written (issue 12).
fn write_changes(tx: &Connection, old: &QueueState, new: &QueueState) -> rusqlite::Result<()> {
    if old.version != new.version || old.next_queue_id != new.next_queue_id {
        tx.prepare_cached("UPDATE queue_meta SET version = ?1, next_queue_id = ?2 WHERE id = 1")?
            .execute(params![new.version, int(new.next_queue_id)])?;
    }
    if old.paused != new.paused {
        tx.prepare_cached("UPDATE queue_meta SET paused_home = ?1 WHERE id = 1")?
            .execute([new.paused.home])?;
        tx.execute("DELETE FROM paused_tasks", [])?;
        let mut insert = tx.prepare_cached("INSERT INTO paused_tasks (task) VALUES (?1)")?;
        for task in &new.paused.tasks {
            insert.execute([task])?;
        }
    }
    if old.entries != new.entries {
        let (mut olds, mut news) = (old.entries.iter().peekable(), new.entries.iter().peekable());
        loop {
            match (olds.peek(), news.peek()) {
                (None, None) => break,
                (Some(o), Some(n)) if o.queue_id == n.queue_id => {
                    if o != n {
                        upsert_entry(tx, n, false)?;
                        if o.after != n.after {
                            write_dependencies(tx, n.queue_id, &n.after)?;
                        }
                    }
                    olds.next();
                    news.next();
                }
                // A row of `old` before the next of `new` (or after the last): it left.
                (Some(o), None) => {
                    remove_entry(tx, o)?;
                    olds.next();
                }
                (Some(o), Some(n)) if o.queue_id < n.queue_id => {
                    remove_entry(tx, o)?;
                    olds.next();
                }
                // A row of `new` not in `old`: added.
                (_, Some(n)) => {
                    upsert_entry(tx, n, true)?;
                    if !n.after.is_empty() {
                        write_dependencies(tx, n.queue_id, &n.after)?;
                    }
                    news.next();
                }
            }
        }
    }
    if old.runners != new.runners {
        tx.execute("DELETE FROM runners", [])?;
        let mut insert = tx.prepare_cached(
            "INSERT INTO runners (pos, task, turn, pid, start_micros, attached)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )?;
        for (pos, runner) in new.runners.iter().enumerate() {
            insert.execute(params![
                pos,
                runner.key.task,
                runner.key.turn,
                runner.identity.pid,
                int(runner.identity.start_time_micros),
                runner.attached,
            ])?;
        }
    }
    if old.works != new.works {
        tx.execute("DELETE FROM works", [])?;
        let mut insert = tx.prepare_cached(
            "INSERT INTO works (pos, task, turn, work_id, runner_pid, runner_start_micros,
                leader_pid, leader_start_micros, cgroup)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
        )?;
        for (pos, work) in new.works.iter().enumerate() {
            insert.execute(params![
                pos,
                work.key.task,
                work.key.turn,
                work.id.to_string(),
                work.runner.pid,
                int(work.runner.start_time_micros),
                work.leader.map(|l| l.pid),
                work.leader.map(|l| int(l.start_time_micros)),
                work.cgroup,
            ])?;
        }
    }
    Ok(())
}

/// What `tollgate doctor` found in a home's database.
#[derive(Clone, Debug, Serialize)]
pub struct DoctorReport {
    pub database: PathBuf,
    /// False for a home that has no database yet (nothing to check).
    pub exists: bool,
    pub schema_version: u32,
    /// `PRAGMA integrity_check`'s findings; empty when it said "ok".
    pub integrity_problems: Vec<String>,
    /// The queue's structure check (or why the tables do not load as a queue).
    pub queue_problem: Option<String>,
    pub queue_rows: usize,
    /// Task and turn records in the database (schema version 4).
    pub task_records: usize,
    pub turn_records: usize,
    /// Records whose body would not load, or whose indexed columns disagree with it (at most
    /// [`MAX_INTEGRITY_FINDINGS`]), each naming the record.
    pub record_problems: Vec<String>,
    /// A `queue.json` in the home that the database does not read (not a problem of the
    /// database: imported already, or waiting for the first command to import it).
    pub unread_queue_json: Option<PathBuf>,
    /// The database is missing or holds no schema while the home shows it had one (what every
    /// command refuses, naming the signs; "A lost database").
    pub lost_database: Option<String>,
}

impl DoctorReport {
    pub fn healthy(&self) -> bool {
        self.integrity_problems.is_empty()
            && self.queue_problem.is_none()
            && self.record_problems.is_empty()
            && self.lost_database.is_none()
    }
}

/// The most findings `PRAGMA integrity_check` is asked for.
const MAX_INTEGRITY_FINDINGS: u32 = 100;

/// Runs SQLite's integrity check and the queue's structure check on the home's database,
/// changing nothing (no migration, no import). `Err` when it cannot be opened at all.
pub fn check_database(home: &Home) -> Result<DoctorReport, StoreError> {
    let path = home.db_path();
    let mut report = DoctorReport {
        database: path.clone(),
        exists: false,
        schema_version: 0,
        integrity_problems: Vec::new(),
        queue_problem: None,
        queue_rows: 0,
        task_records: 0,
        turn_records: 0,
        record_problems: Vec::new(),
        unread_queue_json: Some(home.queue_path()).filter(|p| p.exists()),
        lost_database: None,
    };
    let lost = |missing: bool, with_log: bool| -> Result<Option<String>, StoreError> {
        let signs = earlier_state::earlier_state(home, with_log)?;
        Ok((!signs.is_empty()).then(|| earlier_state::lost(home, missing, &signs).to_string()))
    };
    if !check_database_files(&path)? {
        report.lost_database = lost(true, true)?;
        return Ok(report);
    }
    report.exists = true;
    // Not opened: SQLite would take an empty file for a new database and delete its log.
    if is_empty(&path)? {
        report.queue_problem = Some("the database is empty (0 bytes)".to_string());
        report.lost_database = lost(false, true)?;
        return Ok(report);
    }
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let mut conn = Connection::open_with_flags(&path, flags).map_err(|e| sql_error(&path, e))?;
    conn.busy_timeout(Duration::from_secs(10))
        .map_err(|e| sql_error(&path, e))?;
    report.schema_version = schema_version(&conn, &path)?;
    if report.schema_version > SCHEMA_VERSION {
        return Err(newer_schema(&path, report.schema_version));
    }
    let findings: Vec<String> = {
        let mut check = conn
            .prepare(&format!("PRAGMA integrity_check({MAX_INTEGRITY_FINDINGS})"))
            .map_err(|e| sql_error(&path, e))?;
        let rows = check
            .query_map([], |row| row.get(0))
            .map_err(|e| sql_error(&path, e))?;
        rows.collect::<Result<_, _>>()
            .map_err(|e| sql_error(&path, e))?
    };
    if findings != ["ok"] {
        report.integrity_problems = findings;
    }
    if report.schema_version == 0 {
        report.queue_problem = Some("the database has no tollgate schema".to_string());
        report.lost_database = lost(false, false)?;
        return Ok(report);
    }
    let tx = conn.transaction().map_err(|e| sql_error(&path, e))?;
    match read_queue(&tx, &path) {
        Ok(state) => report.queue_rows = state.entries.len(),
        Err(StoreError::File(FileError::Corrupt { detail, .. })) => {
            report.queue_problem = Some(detail)
        }
        Err(e) => report.queue_problem = Some(e.to_string()),
    }
    if report.schema_version >= 4 {
        check_records(&tx, &path, &mut report)?;
    }
    Ok(report)
}

/// `doctor`'s check of the record tables: every body loads with the loader's checks (as the
/// record it is filed under) and the indexed columns agree with it.
fn check_records(
    conn: &Connection,
    path: &Path,
    report: &mut DoctorReport,
) -> Result<(), StoreError> {
    let sql = |e| sql_error(path, e);
    let limit = MAX_INTEGRITY_FINDINGS as usize;
    let mut problems = Vec::new();
    let mut tasks = conn
        .prepare("SELECT name, next_turn, body FROM tasks ORDER BY name")
        .map_err(sql)?;
    let mut rows = tasks.query([]).map_err(sql)?;
    while let Some(row) = rows.next().map_err(sql)? {
        report.task_records += 1;
        let name: String = row.get(0).map_err(sql)?;
        let next_turn: i64 = row.get(1).map_err(sql)?;
        let body: String = row.get(2).map_err(sql)?;
        let place = PathBuf::from(format!("tasks/{name}"));
        match super::records::parse_task(&place, body.as_bytes()) {
            Ok(task) if task.name != name || i64::from(task.next_turn) != next_turn => problems
                .push(format!(
                    "task record {name:?}: its columns (name, next_turn {next_turn}) disagree with its body"
                )),
            Ok(_) => {}
            Err(e) => problems.push(format!("task record {name:?}: {e}")),
        }
    }
    drop(rows);
    let mut turns = conn
        .prepare(
            "SELECT task, turn, short_id, settled, ended_at_millis, body FROM turns
             ORDER BY task, turn",
        )
        .map_err(sql)?;
    let mut rows = turns.query([]).map_err(sql)?;
    while let Some(row) = rows.next().map_err(sql)? {
        report.turn_records += 1;
        let key = TurnKey::new(
            row.get::<_, String>(0).map_err(sql)?,
            row.get(1).map_err(sql)?,
        );
        let short_id: Option<u64> = row.get::<_, Option<i64>>(2).map_err(sql)?.map(|v| v as u64);
        let settled: bool = row.get(3).map_err(sql)?;
        let ended: Option<u64> = row.get::<_, Option<i64>>(4).map_err(sql)?.map(|v| v as u64);
        let body: String = row.get(5).map_err(sql)?;
        let place = PathBuf::from(format!("turns/{}/{}", key.task, key.turn));
        match super::records::parse_turn(&place, body.as_bytes(), &key) {
            Ok(turn)
                if turn.id != short_id
                    || turn.is_settled() != settled
                    || turn.ended_at_millis != ended =>
            {
                problems.push(format!(
                    "turn record {key}: its columns (short_id, settled, ended_at_millis) disagree with its body"
                ))
            }
            Ok(_) => {}
            Err(e) => problems.push(format!("turn record {key}: {e}")),
        }
    }
    problems.truncate(limit);
    report.record_problems = problems;
    Ok(())
}
