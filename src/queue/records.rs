//! Task and turn records in the home's database (SQLite schema version 4, PostgreSQL version 5;
//! spec/store.md "Records", "Records in PostgreSQL").
//!
//! **Why the open transaction is lent to the record layer instead of passed to it.** Every
//! record function keeps its `&Home` signature ([`crate::tasks`]): about 40 call sites in 14
//! files call them, inside and outside locked sections; passing the transaction to each is the
//! change still owed (spec/steps.md, "Not yet one section value"). Until then, while
//! [`crate::queue::SqliteStore`] runs a section's closure it moves its connection, in the middle
//! of its `BEGIN IMMEDIATE` transaction, into a thread-local slot ([`Section`]), and takes it back when the closure returns (or unwinds). A record read or
//! write of that home on that thread during the closure runs on the lent connection: it commits
//! with the step, in the step's durability class, and reads see the step's own writes. The
//! closure never leaves its thread (sections are synchronous), so the slot is exactly "the
//! section in progress". A record access outside a section opens a short transaction of its own
//! (`synchronous = NORMAL`: the writes made outside sections are the runner's internal ones,
//! spec/store.md) on the home's store's own connection when no section holds it
//! ([`share_sqlite`]: a command then opens the database, reads its schema and prepares its
//! statements once), else on a per-thread side connection (another thread of `serve` is in a
//! section: the access does not wait for it).
//!
//! Which homes keep their records here: a home whose store is its `tollgate.db`, and (schema
//! version 5 of that database, [`PG_SCHEMA_V5`]) a home whose store is PostgreSQL, whose
//! sections lend their client the same way ([`PgSection`]). The store registers that choice when
//! it is built ([`register`]); a process that never built a store for the home (a test reading
//! records) finds it by the home's config, or the database by its file.
//!
//! The watchers of turns (`submit --wait`, `logs -f`, serve's watcher) wait on inotify events of
//! the turn's folder. A record in the database makes no event there, so after the commit that
//! wrote a turn's record its folder gets one: the folder's own times are set to now
//! ([`signal_changed`]: one `utimensat`, `IN_ATTRIB` on the folder; no file, no data, no sync).

use super::postgres::{PostgresStore, PostgresUrl};
use crate::fsutil::{self, FileError};
use crate::home::Home;
use crate::protocol::records::{check_task, check_turn, TaskRecord, TurnRecord};
use crate::protocol::slots::TurnKey;
use rusqlite::Connection;
use std::cell::RefCell;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, TryLockError, Weak};
use std::time::Duration;

/// The most homes a process remembers the store choice of (a command has one; tests a few).
const MAX_REGISTERED_HOMES: usize = 64;

/// The connection slots of the SQLite stores built in this process, by database (the newest
/// store of a database first); at most [`MAX_REGISTERED_HOMES`].
type SharedSlot = Weak<Mutex<Option<super::sqlite::Open>>>;
static SHARED: Mutex<Vec<(PathBuf, SharedSlot)>> = Mutex::new(Vec::new());

/// Lends the connection slot of a SQLite store of `db` to the record accesses outside sections
/// (called when the store is built; no IO). Dropped stores are forgotten.
pub(crate) fn share_sqlite(db: PathBuf, slot: SharedSlot) {
    let mut shared = SHARED.lock().unwrap_or_else(|e| e.into_inner());
    shared.retain(|(path, weak)| path != &db && weak.strong_count() > 0);
    if shared.len() >= MAX_REGISTERED_HOMES {
        shared.pop();
    }
    shared.insert(0, (db, slot));
}

/// The live store slot of `db`, if a store of it was built in this process.
fn shared_slot(db: &Path) -> Option<Arc<Mutex<Option<super::sqlite::Open>>>> {
    let shared = SHARED.lock().unwrap_or_else(|e| e.into_inner());
    shared
        .iter()
        .filter(|(path, _)| path == db)
        .find_map(|(_, weak)| weak.upgrade())
}

/// A section's connection while its closure runs: the database it belongs to, the connection
/// (inside `BEGIN IMMEDIATE`), and the turn folders to signal once it commits.
struct Lent {
    db: PathBuf,
    conn: Connection,
    changed_dirs: Vec<PathBuf>,
    /// A write in the section recorded a turn's outcome: its commit is synced whatever the
    /// section's own class (spec/store.md, "Records").
    outcome_recorded: bool,
}

thread_local! {
    /// The section in progress on this thread, if any.
    static ACTIVE: RefCell<Option<Lent>> = const { RefCell::new(None) };
    /// The side connection for record accesses outside a section when the store's is taken (one
    /// home per thread), and the `synchronous` level it is at.
    static SIDE: RefCell<Option<SideConnection>> = const { RefCell::new(None) };
}

/// A side connection: its database, the connection, its `synchronous` level.
type SideConnection = (PathBuf, Connection, Option<&'static str>);

/// Where a home's task and turn records live, as its store was built.
#[derive(Clone, Debug)]
pub enum RecordHome {
    /// Files in `tasks/` (the benchmark's file store).
    Files,
    /// The home's `tollgate.db`.
    Sqlite,
    /// The PostgreSQL database of the home's store, in its queue (schema version 5).
    Postgres {
        url: PostgresUrl,
        queue: String,
        durability: crate::config::Durability,
    },
}

/// `(home root, where its records are, lock_timeout)` as the homes' stores were built.
static HOMES: Mutex<Vec<(PathBuf, RecordHome, Duration)>> = Mutex::new(Vec::new());

/// Records the store choice for `home` (called when its store is built).
pub fn register(home: &Home, records: RecordHome, lock_timeout: Duration) {
    let mut homes = HOMES.lock().unwrap_or_else(|e| e.into_inner());
    let root = home.root().to_path_buf();
    homes.retain(|(r, ..)| r != &root);
    if homes.len() >= MAX_REGISTERED_HOMES {
        homes.remove(0);
    }
    homes.push((root, records, lock_timeout));
}

fn registered(home: &Home) -> Option<(RecordHome, Duration)> {
    let homes = HOMES.lock().unwrap_or_else(|e| e.into_inner());
    homes
        .iter()
        .find(|(r, ..)| r == home.root())
        .map(|(_, records, timeout)| (records.clone(), *timeout))
}

/// Where `home` keeps its records, and the lock timeout to open its database with. A home no
/// store was built for in this process (a test reading records): a PostgreSQL home by its config
/// (or `TOLLGATE_STORE`), else the database when its file exists.
fn choice(home: &Home) -> (RecordHome, Duration) {
    if let Some(found) = registered(home) {
        return found;
    }
    let config = crate::config::Config::load(&home.config_path())
        .ok()
        .flatten()
        .unwrap_or_default();
    let env = std::env::var(crate::queue::STORE_ENV).ok();
    let store = env.filter(|v| !v.is_empty()).or(config.store.clone());
    if store.as_deref().is_some_and(PostgresUrl::is_postgres) {
        // Building the store registers its choice.
        let _ = crate::queue::HomeStore::for_home(home, &config);
        if let Some(found) = registered(home) {
            return found;
        }
    }
    let file_store = std::env::var_os(crate::queue::FILE_STORE_ENV).is_some_and(|v| v == "1");
    let records = if !file_store && home.db_path().is_file() {
        RecordHome::Sqlite
    } else {
        RecordHome::Files
    };
    (records, config.lock_timeout())
}

/// Whether `home`'s records are kept in its database (SQLite or PostgreSQL; else: files in
/// `tasks/`).
pub fn in_database(home: &Home) -> bool {
    !matches!(choice(home).0, RecordHome::Files)
}

/// Whether `home`'s records are in a PostgreSQL database: homes of a fleet, where a turn may run
/// on a host whose home has no folder for it yet.
pub fn in_postgres(home: &Home) -> bool {
    matches!(choice(home).0, RecordHome::Postgres { .. })
}

/// The database holding `home`'s records, as messages name it: `tollgate.db`'s path, or the
/// PostgreSQL URL (password redacted) and the queue.
pub fn database_name(home: &Home) -> PathBuf {
    match choice(home).0 {
        RecordHome::Postgres { url, queue, .. } => {
            PathBuf::from(format!("{} (queue {queue:?})", url.redacted))
        }
        _ => home.db_path(),
    }
}

/// A section lending its connection to the record layer; dropping it takes the connection back
/// (rolling back a transaction still open: an `Err` or a panic of the closure).
pub(crate) struct Section<'a> {
    slot: &'a mut Option<Connection>,
}

impl<'a> Section<'a> {
    /// Moves the connection in `slot` into this thread's slot for the closure's duration.
    pub(crate) fn lend(slot: &'a mut Option<Connection>, db: PathBuf) -> Option<Self> {
        let conn = slot.take()?;
        ACTIVE.with_borrow_mut(|active| {
            *active = Some(Lent {
                db,
                conn,
                changed_dirs: Vec::new(),
                outcome_recorded: false,
            })
        });
        Some(Section { slot })
    }

    /// Runs `f` on the lent connection.
    pub(crate) fn with<T>(&self, f: impl FnOnce(&Connection) -> T) -> T {
        ACTIVE.with_borrow(|active| match active {
            Some(lent) => f(&lent.conn),
            None => unreachable!("a Section's connection is lent until it drops"),
        })
    }

    /// Whether a write in the section recorded a turn's outcome (the store then syncs the
    /// commit: an outcome is what `wait` and `status` tell, and what reconcile trusts instead of
    /// running a turn again).
    pub(crate) fn outcome_recorded(&self) -> bool {
        ACTIVE.with_borrow(|active| active.as_ref().is_some_and(|lent| lent.outcome_recorded))
    }

    /// Takes the connection back after its `COMMIT` and signals the turn folders it changed.
    pub(crate) fn committed(self) {
        let dirs = ACTIVE.with_borrow_mut(|active| {
            active
                .as_mut()
                .map(|lent| std::mem::take(&mut lent.changed_dirs))
                .unwrap_or_default()
        });
        drop(self);
        signal_changed(&dirs);
    }
}

impl Drop for Section<'_> {
    fn drop(&mut self) {
        if let Some(lent) = ACTIVE.with_borrow_mut(Option::take) {
            if !lent.conn.is_autocommit() {
                let _ = lent.conn.execute_batch("ROLLBACK");
            }
            *self.slot = Some(lent.conn);
        }
    }
}

/// Sets each folder's times to now ([`crate::fsutil::touch_dir`]): the `IN_ATTRIB` event the
/// folder's watchers wake on ([`crate::watch::dir_mask`]). Best effort: a missing folder only
/// costs a watcher its fallback poll. One syscall and no new inode per signal, so a turn nobody
/// watches pays almost nothing for it.
fn signal_changed(dirs: &[PathBuf]) {
    for dir in dirs {
        let _ = crate::fsutil::touch_dir(dir);
    }
}

/// SQLite's error as a record error naming the database; a full disk (`SQLITE_FULL`) is ENOSPC,
/// so the result writer's retry ([`crate::tasks::retry_while_disk_full`]) sees it; a file that is
/// not a database, or one with malformed pages, is a bad state file (exit 2).
pub(crate) fn record_error(db: &Path, error: rusqlite::Error) -> FileError {
    let source = match error.sqlite_error_code() {
        Some(rusqlite::ErrorCode::DiskFull) => io::Error::from_raw_os_error(libc::ENOSPC),
        Some(rusqlite::ErrorCode::NotADatabase | rusqlite::ErrorCode::DatabaseCorrupt) => {
            return FileError::Corrupt {
                path: db.to_path_buf(),
                format: "SQLite database",
                detail: error.to_string(),
            }
        }
        _ => io::Error::other(error.to_string()),
    };
    FileError::io(db, source)
}

fn store_error(error: crate::queue::StoreError) -> FileError {
    match error {
        crate::queue::StoreError::File(e) => e,
        crate::queue::StoreError::Database { path, detail } => {
            FileError::io(&path, io::Error::other(detail))
        }
        other => FileError::io(
            Path::new("tollgate.db"),
            io::Error::other(other.to_string()),
        ),
    }
}

/// The home's `tollgate.db` opened as every command opens it (checks, migrations, imports), for
/// the sweep list (src/exec/sweep.rs), whose tables are part of its schema.
pub(crate) fn open_home_database(
    home: &Home,
    lock_timeout: Duration,
) -> Result<Connection, crate::queue::StoreError> {
    super::sqlite::open_for_records(home, lock_timeout)
}

/// How a record access uses the database.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Access {
    Read,
    Write,
    /// A write that records a turn's outcome: its commit is synced.
    Outcome,
}

/// Runs `f` on a connection to `home`'s database: the section's own when one of this home is in
/// progress on this thread (its reads see the section's writes, its writes commit with it), else
/// the side connection inside a short transaction of its own (`BEGIN IMMEDIATE` for a write,
/// committed with `synchronous = NORMAL`, `FULL` for an [`Access::Outcome`]). `changed` names a
/// turn folder to signal after the commit. `Err` from `f` rolls the short transaction back.
pub(crate) fn with_db<T>(
    home: &Home,
    access: Access,
    changed: Option<PathBuf>,
    f: impl FnOnce(&mut Db<'_>) -> Result<T, FileError>,
) -> Result<T, FileError> {
    match choice(home) {
        (
            RecordHome::Postgres {
                url,
                queue,
                durability,
            },
            timeout,
        ) => with_postgres(home, (url, queue, durability, timeout), access, changed, f),
        (_, timeout) => with_sqlite(home, timeout, access, changed, |conn| {
            f(&mut Db::Sqlite(conn))
        }),
    }
}

fn with_sqlite<T>(
    home: &Home,
    timeout: Duration,
    access: Access,
    changed: Option<PathBuf>,
    f: impl FnOnce(&Connection) -> Result<T, FileError>,
) -> Result<T, FileError> {
    let db = home.db_path();
    let mut f = Some(f);
    let in_section = ACTIVE.with_borrow_mut(|active| match active {
        Some(lent) if lent.db == db => {
            lent.outcome_recorded |= access == Access::Outcome;
            if let Some(dir) = &changed {
                if !lent.changed_dirs.contains(dir) {
                    lent.changed_dirs.push(dir.clone());
                }
            }
            let f = f.take().expect("taken once");
            Some(f(&lent.conn))
        }
        _ => None,
    });
    if let Some(result) = in_section {
        return result;
    }
    let f = f.take().expect("not taken");
    // The store's connection when it is free: one open per command. A section of this home on
    // another thread holds it: the side connection, so the access does not wait for the section.
    let slot = shared_slot(&db);
    let guard = slot.as_ref().and_then(|slot| match slot.try_lock() {
        Ok(guard) => Some(guard),
        // A section that panicked rolled back on its way out (records::Section's drop).
        Err(TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
        Err(TryLockError::WouldBlock) => None,
    });
    let result = match guard {
        // (A connection not in its slot is lent to a section: not this thread's, which took
        // the section's path above; never the case while the slot's lock is free.)
        Some(mut guard) if guard.as_ref().is_none_or(|open| open.conn.is_some()) => {
            on_store_connection(home, timeout, &mut guard, access, f)
        }
        _ => on_side_connection(home, timeout, access, f),
    };
    if result.is_ok() {
        if let Some(dir) = changed {
            signal_changed(&[dir]);
        }
    }
    result
}

/// [`with_sqlite`] outside a section, on the store's connection slot (opened into it if the store
/// has not opened it yet); the level it leaves the connection at is noted in the slot, as the
/// store's sections note theirs.
fn on_store_connection<T>(
    home: &Home,
    timeout: Duration,
    slot: &mut Option<super::sqlite::Open>,
    access: Access,
    f: impl FnOnce(&Connection) -> Result<T, FileError>,
) -> Result<T, FileError> {
    if slot.is_none() {
        *slot = Some(super::sqlite::Open::database(home, timeout).map_err(store_error)?);
    }
    let Some(open) = slot.as_mut() else {
        unreachable!("opened above");
    };
    let Some(conn) = open.conn.as_ref() else {
        unreachable!("checked by the caller: the connection is in its slot");
    };
    short_transaction(
        &home.db_path(),
        conn,
        &mut open.synchronous,
        timeout,
        access,
        f,
    )
}

/// [`with_sqlite`] outside a section on this thread's side connection.
fn on_side_connection<T>(
    home: &Home,
    timeout: Duration,
    access: Access,
    f: impl FnOnce(&Connection) -> Result<T, FileError>,
) -> Result<T, FileError> {
    let db = home.db_path();
    SIDE.with_borrow_mut(|side| {
        if side.as_ref().is_none_or(|(path, ..)| path != &db) {
            let conn = super::sqlite::open_for_records(home, timeout).map_err(store_error)?;
            *side = Some((db.clone(), conn, Some("NORMAL")));
        }
        let Some((_, conn, synchronous)) = side.as_mut() else {
            unreachable!("opened above");
        };
        short_transaction(&db, conn, synchronous, timeout, access, f)
    })
}

/// `f` on `conn`: as it is for a read, else in a `BEGIN IMMEDIATE` transaction committed with
/// `synchronous = NORMAL` (`FULL` for an [`Access::Outcome`]). `synchronous` is the level the
/// connection is at (set only when it differs). `Err` from `f` rolls the transaction back.
fn short_transaction<T>(
    db: &Path,
    conn: &Connection,
    synchronous: &mut Option<&'static str>,
    timeout: Duration,
    access: Access,
    f: impl FnOnce(&Connection) -> Result<T, FileError>,
) -> Result<T, FileError> {
    if access == Access::Read {
        return f(conn);
    }
    let level = if access == Access::Outcome {
        "FULL"
    } else {
        "NORMAL"
    };
    if *synchronous != Some(level) {
        // Noted as unknown until it is set: a failed pragma leaves the level unknown.
        *synchronous = None;
        conn.pragma_update(None, "synchronous", level)
            .map_err(|e| record_error(db, e))?;
        *synchronous = Some(level);
    }
    conn.execute_batch("BEGIN IMMEDIATE")
        .map_err(|e| record_error(db, e))?;
    match f(conn) {
        Ok(value) => match conn.execute_batch("COMMIT") {
            Ok(()) => {
                super::sqlite::trim_log(conn, db, timeout);
                Ok(value)
            }
            Err(e) => {
                let _ = conn.execute_batch("ROLLBACK");
                Err(record_error(db, e))
            }
        },
        Err(e) => {
            let _ = conn.execute_batch("ROLLBACK");
            Err(e)
        }
    }
}

/// Version 4 of the schema: the records (and `sync_barrier`, the one row a synced commit after an
/// internal section that recorded an outcome changes: SQLite writes no page for an update that
/// changes nothing, and a commit that writes nothing syncs nothing). A record's body is its JSON document (the serde types
/// in [`crate::tasks`] stay the one definition); what queries select on is also a column:
/// `turns.short_id` (`tollgate logs 17`), `settled` and `ended_at_millis`, with a partial index
/// of the unfinished turns (reconcile's orphan candidates come from it, not from every turn).
pub(crate) const SCHEMA_V4: &str = "
CREATE TABLE tasks (
    name TEXT PRIMARY KEY,
    next_turn INTEGER NOT NULL CHECK (next_turn >= 1),
    body TEXT NOT NULL
) STRICT;
CREATE TABLE turns (
    task TEXT NOT NULL,
    turn INTEGER NOT NULL CHECK (turn >= 1),
    short_id INTEGER,
    settled INTEGER NOT NULL CHECK (settled IN (0, 1)),
    ended_at_millis INTEGER,
    body TEXT NOT NULL,
    PRIMARY KEY (task, turn)
) STRICT, WITHOUT ROWID;
CREATE INDEX turns_by_short_id ON turns (short_id) WHERE short_id IS NOT NULL;
CREATE INDEX turns_unfinished ON turns (task, turn) WHERE settled = 0;
CREATE TABLE sync_barrier (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    commits INTEGER NOT NULL
) STRICT;
INSERT INTO sync_barrier (id, commits) VALUES (1, 0);
";

/// A turn record's row: its key, the indexed columns and the JSON body.
pub(crate) struct TurnRow<'a> {
    pub task: &'a str,
    pub turn: u32,
    pub short_id: Option<u64>,
    pub settled: bool,
    pub ended_at_millis: Option<u64>,
    pub body: &'a str,
}

pub(crate) fn task_body(conn: &Connection, name: &str) -> rusqlite::Result<Option<String>> {
    use rusqlite::OptionalExtension;
    conn.prepare_cached("SELECT body FROM tasks WHERE name = ?1")?
        .query_row([name], |row| row.get(0))
        .optional()
}

pub(crate) fn put_task(
    conn: &Connection,
    name: &str,
    next_turn: u32,
    body: &str,
) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "INSERT INTO tasks (name, next_turn, body) VALUES (?1, ?2, ?3)
         ON CONFLICT (name) DO UPDATE SET next_turn = excluded.next_turn, body = excluded.body",
    )?
    .execute(rusqlite::params![name, next_turn, body])?;
    Ok(())
}

pub(crate) fn turn_body(
    conn: &Connection,
    task: &str,
    turn: u32,
) -> rusqlite::Result<Option<String>> {
    use rusqlite::OptionalExtension;
    conn.prepare_cached("SELECT body FROM turns WHERE task = ?1 AND turn = ?2")?
        .query_row(rusqlite::params![task, turn], |row| row.get(0))
        .optional()
}

/// Writes a turn's row. `create`: a new turn, refused (`Ok(false)`) when its number is taken, so
/// no record is ever overwritten by a new turn; else an update of the turn's own record.
pub(crate) fn put_turn(
    conn: &Connection,
    row: &TurnRow<'_>,
    create: bool,
) -> rusqlite::Result<bool> {
    let sql = if create {
        "INSERT INTO turns (task, turn, short_id, settled, ended_at_millis, body)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (task, turn) DO NOTHING"
    } else {
        "INSERT INTO turns (task, turn, short_id, settled, ended_at_millis, body)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)
         ON CONFLICT (task, turn) DO UPDATE SET short_id = excluded.short_id,
            settled = excluded.settled, ended_at_millis = excluded.ended_at_millis,
            body = excluded.body"
    };
    let written = conn.prepare_cached(sql)?.execute(rusqlite::params![
        row.task,
        row.turn,
        row.short_id.map(|id| id as i64),
        row.settled,
        row.ended_at_millis.map(|at| at as i64),
        row.body,
    ])?;
    Ok(written == 1)
}

pub(crate) fn task_names(conn: &Connection) -> rusqlite::Result<Vec<String>> {
    conn.prepare_cached("SELECT name FROM tasks ORDER BY name")?
        .query_map([], |row| row.get(0))?
        .collect()
}

pub(crate) fn turn_numbers(conn: &Connection, task: &str) -> rusqlite::Result<Vec<u32>> {
    conn.prepare_cached("SELECT turn FROM turns WHERE task = ?1 ORDER BY turn")?
        .query_map([task], |row| row.get(0))?
        .collect()
}

/// `(task, turn, body)` of every turn without an outcome, from the partial index.
pub(crate) fn unfinished(conn: &Connection) -> rusqlite::Result<Vec<(String, u32, String)>> {
    conn.prepare_cached("SELECT task, turn, body FROM turns WHERE settled = 0 ORDER BY task, turn")?
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))?
        .collect()
}

/// `(task, turn)` of every turn without an outcome, from the partial index (no body read).
pub(crate) fn unfinished_keys(conn: &Connection) -> rusqlite::Result<Vec<(String, u32)>> {
    conn.prepare_cached("SELECT task, turn FROM turns WHERE settled = 0")?
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?
        .collect()
}

/// The turns whose short id is `id` (one, unless a counter started again), from its index.
pub(crate) fn turns_with_short_id(
    conn: &Connection,
    id: u64,
) -> rusqlite::Result<Vec<(String, u32)>> {
    conn.prepare_cached("SELECT task, turn FROM turns WHERE short_id = ?1 ORDER BY task, turn")?
        .query_map([id as i64], |row| Ok((row.get(0)?, row.get(1)?)))?
        .collect()
}

pub(crate) fn delete_task(conn: &Connection, name: &str) -> rusqlite::Result<()> {
    conn.prepare_cached("DELETE FROM tasks WHERE name = ?1")?
        .execute(rusqlite::params![name])?;
    Ok(())
}

pub(crate) fn delete_turn(conn: &Connection, task: &str, turn: u32) -> rusqlite::Result<()> {
    conn.prepare_cached("DELETE FROM turns WHERE task = ?1 AND turn = ?2")?
        .execute(rusqlite::params![task, turn])?;
    Ok(())
}

/// A record error from either database.
#[derive(Debug)]
pub(crate) enum DbError {
    Sqlite(rusqlite::Error),
    Postgres(postgres::Error),
    /// A value in a row out of its type's range (a corrupt row).
    Range(String),
}

impl From<rusqlite::Error> for DbError {
    fn from(e: rusqlite::Error) -> Self {
        DbError::Sqlite(e)
    }
}

impl From<postgres::Error> for DbError {
    fn from(e: postgres::Error) -> Self {
        DbError::Postgres(e)
    }
}

/// A record error as a file error naming the database `db`; a full disk is ENOSPC either way, so
/// the result writer's retry ([`crate::tasks::retry_while_disk_full`]) sees it.
pub(crate) fn db_error(db: &Path, error: DbError) -> FileError {
    match error {
        DbError::Sqlite(e) => record_error(db, e),
        DbError::Postgres(e) => {
            let source = if e.code() == Some(&postgres::error::SqlState::DISK_FULL) {
                io::Error::from_raw_os_error(libc::ENOSPC)
            } else {
                io::Error::other(super::postgres::describe(&e))
            };
            FileError::io(db, source)
        }
        DbError::Range(detail) => FileError::Corrupt {
            path: db.to_path_buf(),
            format: "tollgate record table",
            detail,
        },
    }
}

/// The record tables of one home, in either database: what [`with_db`] hands its closure.
pub(crate) enum Db<'a> {
    Sqlite(&'a Connection),
    /// The client (inside the section's transaction, or a short one of its own) and the queue.
    Postgres(&'a mut PgConn, &'a str),
}

/// A PostgreSQL client as the record layer uses it inside a write transaction (a section's, or
/// a short one of its own): the task and turn records it writes are not sent one statement per
/// round trip but kept as SQL text ([`PgConn::take_pending`]) and sent with the transaction's
/// `COMMIT` message (spec/store.md, "PostgreSQL", "Round trips"). A read of a record the
/// transaction wrote is served from what it wrote; a read of a set of records (names, turn
/// numbers, the unfinished turns) first sends what is pending, and so does every statement that
/// is not the record layer's (the serve tables' statements and savepoints run through
/// [`PgConn::execute`], [`PgConn::query`], [`PgConn::batch_execute`], which also forget what was
/// written: a `ROLLBACK TO` may undo it). So every statement sees the transaction's writes in
/// the order they were made, as when each was sent at once.
pub(crate) struct PgConn {
    client: postgres::Client,
    /// Whether writes are kept for the commit (inside a write transaction) or sent at once.
    buffered: bool,
    /// The kept writes, each statement ended by `;`.
    pending: String,
    /// The task records this transaction wrote or read (`None`: no such record), by name.
    tasks: std::collections::HashMap<String, Option<String>>,
    /// The turn records this transaction wrote, deleted (`None`) or read.
    turns: std::collections::HashMap<(String, u32), Option<String>>,
}

impl PgConn {
    fn new(client: postgres::Client, buffered: bool) -> Self {
        PgConn {
            client,
            buffered,
            pending: String::new(),
            tasks: Default::default(),
            turns: Default::default(),
        }
    }

    fn into_client(self) -> postgres::Client {
        self.client
    }

    /// The writes kept for the commit, taken (the written bodies stay known: the commit's
    /// message sends them before anything else of the transaction is read).
    pub(crate) fn take_pending(&mut self) -> String {
        std::mem::take(&mut self.pending)
    }

    /// Sends the kept writes now.
    fn send_pending(&mut self) -> Result<(), postgres::Error> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let sql = std::mem::take(&mut self.pending);
        self.client.batch_execute(&sql)
    }

    /// Before a statement that is not the record layer's: the kept writes go first, and what was
    /// written is forgotten (the statement may undo it).
    fn before_foreign(&mut self) -> Result<&mut postgres::Client, postgres::Error> {
        self.send_pending()?;
        self.tasks.clear();
        self.turns.clear();
        Ok(&mut self.client)
    }

    // Only the serve tables run foreign writes (`src/queue/serve_tables.rs`).
    #[cfg(feature = "serve")]
    pub(crate) fn execute(
        &mut self,
        sql: &str,
        params: &[&(dyn postgres::types::ToSql + Sync)],
    ) -> Result<u64, postgres::Error> {
        self.before_foreign()?.execute(sql, params)
    }

    pub(crate) fn query(
        &mut self,
        sql: &str,
        params: &[&(dyn postgres::types::ToSql + Sync)],
    ) -> Result<Vec<postgres::Row>, postgres::Error> {
        self.before_foreign()?.query(sql, params)
    }

    #[cfg(feature = "serve")]
    pub(crate) fn batch_execute(&mut self, sql: &str) -> Result<(), postgres::Error> {
        self.before_foreign()?.batch_execute(sql)
    }

    /// Remembers a task record read in a write transaction: it holds the queue's lock, under
    /// which every writer of the queue's records writes, so the record stays as read until the
    /// transaction writes it (bounded: a section reads the records its step names).
    fn remember_task(&mut self, name: &str, body: Option<&str>) {
        if self.buffered && self.tasks.len() < PG_REMEMBERED_RECORDS {
            self.tasks
                .insert(name.to_string(), body.map(str::to_string));
        }
    }

    /// [`PgConn::remember_task`] for a turn record.
    fn remember_turn(&mut self, task: &str, turn: u32, body: Option<&str>) {
        if self.buffered && self.turns.len() < PG_REMEMBERED_RECORDS {
            self.turns
                .insert((task.to_string(), turn), body.map(str::to_string));
        }
    }

    /// Makes room for one more written record: at the bound the kept writes are sent and the
    /// remembered records forgotten (later reads then go to the server, which has the writes).
    fn room(&mut self) -> Result<(), postgres::Error> {
        if self.tasks.len() >= PG_REMEMBERED_RECORDS || self.turns.len() >= PG_REMEMBERED_RECORDS {
            self.before_foreign()?;
        }
        Ok(())
    }

    /// Keeps `sql` (one statement with its values as literals) for the commit; `false`: not in a
    /// write transaction, so the caller sends its statement itself.
    fn keep(&mut self, sql: std::fmt::Arguments<'_>) -> bool {
        if !self.buffered {
            return false;
        }
        use std::fmt::Write as _;
        let _ = self.pending.write_fmt(sql);
        self.pending.push_str(";\n");
        true
    }
}

/// How many task (and how many turn) records a [`PgConn`] remembers at most.
const PG_REMEMBERED_RECORDS: usize = 1024;

/// `text` as an SQL literal ([`super::postgres::quoted_text`]).
fn lit(text: &str) -> String {
    super::postgres::quoted_text(text)
}

/// An optional integer as an SQL literal.
fn lit_int(value: Option<i64>) -> String {
    value.map_or_else(|| "NULL".to_string(), |v| v.to_string())
}

/// The parameter types of the record statements (`query_typed`: one round trip, no prepare).
const TEXT: postgres::types::Type = postgres::types::Type::TEXT;
const INT8: postgres::types::Type = postgres::types::Type::INT8;
const BOOL: postgres::types::Type = postgres::types::Type::BOOL;

fn pg_turn(value: i64) -> Result<u32, DbError> {
    u32::try_from(value).map_err(|_| DbError::Range(format!("turn {value} is out of range")))
}

impl Db<'_> {
    pub(crate) fn task_body(&mut self, name: &str) -> Result<Option<String>, DbError> {
        match self {
            Db::Sqlite(c) => Ok(task_body(c, name)?),
            Db::Postgres(c, _) if c.tasks.contains_key(name) => {
                Ok(c.tasks.get(name).cloned().flatten())
            }
            Db::Postgres(c, queue) => {
                let body: Option<String> = c
                    .client
                    .query_typed_opt(
                        "SELECT body FROM tasks WHERE queue = $1 AND name = $2",
                        &[(queue, TEXT), (&name, TEXT)],
                    )?
                    .map(|row| row.try_get(0))
                    .transpose()?;
                c.remember_task(name, body.as_deref());
                Ok(body)
            }
        }
    }

    pub(crate) fn put_task(
        &mut self,
        name: &str,
        next_turn: u32,
        body: &str,
    ) -> Result<(), DbError> {
        match self {
            Db::Sqlite(c) => Ok(put_task(c, name, next_turn, body)?),
            Db::Postgres(c, queue) => {
                c.room()?;
                c.tasks.insert(name.to_string(), Some(body.to_string()));
                if c.keep(format_args!(
                    "INSERT INTO tasks (queue, name, next_turn, body) VALUES ({}, {}, {next_turn}, {})
                     ON CONFLICT (queue, name) DO UPDATE SET next_turn = EXCLUDED.next_turn,
                        body = EXCLUDED.body",
                    lit(queue),
                    lit(name),
                    lit(body)
                )) {
                    return Ok(());
                }
                c.client.execute_typed(
                    "INSERT INTO tasks (queue, name, next_turn, body) VALUES ($1, $2, $3, $4)
                     ON CONFLICT (queue, name) DO UPDATE SET next_turn = EXCLUDED.next_turn,
                        body = EXCLUDED.body",
                    &[
                        (queue, TEXT),
                        (&name, TEXT),
                        (&i64::from(next_turn), INT8),
                        (&body, TEXT),
                    ],
                )?;
                Ok(())
            }
        }
    }

    pub(crate) fn turn_body(&mut self, task: &str, turn: u32) -> Result<Option<String>, DbError> {
        match self {
            Db::Sqlite(c) => Ok(turn_body(c, task, turn)?),
            Db::Postgres(c, _) if c.turns.contains_key(&(task.to_string(), turn)) => {
                Ok(c.turns.get(&(task.to_string(), turn)).cloned().flatten())
            }
            Db::Postgres(c, queue) => {
                let body: Option<String> = c
                    .client
                    .query_typed_opt(
                        "SELECT body FROM turns WHERE queue = $1 AND task = $2 AND turn = $3",
                        &[(queue, TEXT), (&task, TEXT), (&i64::from(turn), INT8)],
                    )?
                    .map(|row| row.try_get(0))
                    .transpose()?;
                c.remember_turn(task, turn, body.as_deref());
                Ok(body)
            }
        }
    }

    /// [`put_turn`]: `create` refuses (`Ok(false)`) a turn number that is taken.
    pub(crate) fn put_turn(&mut self, row: &TurnRow<'_>, create: bool) -> Result<bool, DbError> {
        match self {
            Db::Sqlite(c) => Ok(put_turn(c, row, create)?),
            Db::Postgres(c, queue) => pg_keep_turn(c, queue, row, create),
        }
    }

    pub(crate) fn task_names(&mut self) -> Result<Vec<String>, DbError> {
        match self {
            Db::Sqlite(c) => Ok(task_names(c)?),
            Db::Postgres(c, queue) => {
                c.send_pending()?;
                c.client
                    .query_typed(
                        "SELECT name FROM tasks WHERE queue = $1 ORDER BY name COLLATE \"C\"",
                        &[(queue, TEXT)],
                    )?
                    .iter()
                    .map(|row| Ok(row.try_get(0)?))
                    .collect()
            }
        }
    }

    pub(crate) fn turn_numbers(&mut self, task: &str) -> Result<Vec<u32>, DbError> {
        match self {
            Db::Sqlite(c) => Ok(turn_numbers(c, task)?),
            Db::Postgres(c, queue) => {
                c.send_pending()?;
                c.client
                    .query_typed(
                        "SELECT turn FROM turns WHERE queue = $1 AND task = $2 ORDER BY turn",
                        &[(queue, TEXT), (&task, TEXT)],
                    )?
                    .iter()
                    .map(|row| pg_turn(row.try_get(0)?))
                    .collect()
            }
        }
    }

    /// `(task, turn, body)` of every turn without an outcome, from the partial index.
    pub(crate) fn unfinished(&mut self) -> Result<Vec<(String, u32, String)>, DbError> {
        match self {
            Db::Sqlite(c) => Ok(unfinished(c)?),
            Db::Postgres(c, queue) => {
                c.send_pending()?;
                c.client
                    .query_typed(
                        "SELECT task, turn, body FROM turns WHERE queue = $1 AND NOT settled
                     ORDER BY task COLLATE \"C\", turn",
                        &[(queue, TEXT)],
                    )?
                    .iter()
                    .map(|row| Ok((row.try_get(0)?, pg_turn(row.try_get(1)?)?, row.try_get(2)?)))
                    .collect()
            }
        }
    }

    /// `(task, turn)` of every turn without an outcome, from the partial index (no body read).
    pub(crate) fn unfinished_keys(&mut self) -> Result<Vec<(String, u32)>, DbError> {
        match self {
            Db::Sqlite(c) => Ok(unfinished_keys(c)?),
            Db::Postgres(c, queue) => {
                c.send_pending()?;
                c.client
                    .query_typed(
                        "SELECT task, turn FROM turns WHERE queue = $1 AND NOT settled",
                        &[(queue, TEXT)],
                    )?
                    .iter()
                    .map(|row| Ok((row.try_get(0)?, pg_turn(row.try_get(1)?)?)))
                    .collect()
            }
        }
    }

    pub(crate) fn turns_with_short_id(&mut self, id: u64) -> Result<Vec<(String, u32)>, DbError> {
        match self {
            Db::Sqlite(c) => Ok(turns_with_short_id(c, id)?),
            Db::Postgres(c, queue) => {
                c.send_pending()?;
                c.client
                    .query_typed(
                        "SELECT task, turn FROM turns WHERE queue = $1 AND short_id = $2
                     ORDER BY task COLLATE \"C\", turn",
                        &[(queue, TEXT), (&(id as i64), INT8)],
                    )?
                    .iter()
                    .map(|row| Ok((row.try_get(0)?, pg_turn(row.try_get(1)?)?)))
                    .collect()
            }
        }
    }

    /// Deletes a task's record (the caller has removed its turns: `tollgate clean`).
    pub(crate) fn delete_task(&mut self, name: &str) -> Result<(), DbError> {
        match self {
            Db::Sqlite(c) => Ok(delete_task(c, name)?),
            Db::Postgres(c, queue) => {
                c.room()?;
                c.tasks.insert(name.to_string(), None);
                let (q, n) = (lit(queue), lit(name));
                if c.keep(format_args!(
                    "DELETE FROM tasks WHERE queue = {q} AND name = {n}"
                )) {
                    return Ok(());
                }
                c.client.execute_typed(
                    "DELETE FROM tasks WHERE queue = $1 AND name = $2",
                    &[(queue, TEXT), (&name, TEXT)],
                )?;
                Ok(())
            }
        }
    }

    pub(crate) fn delete_turn(&mut self, task: &str, turn: u32) -> Result<(), DbError> {
        match self {
            Db::Sqlite(c) => Ok(delete_turn(c, task, turn)?),
            Db::Postgres(c, queue) => {
                c.room()?;
                c.turns.insert((task.to_string(), turn), None);
                let (q, t) = (lit(queue), lit(task));
                if c.keep(format_args!(
                    "DELETE FROM turns WHERE queue = {q} AND task = {t} AND turn = {turn}; \
                     DELETE FROM turn_output WHERE queue = {q} AND task = {t} AND turn = {turn}"
                )) {
                    return Ok(());
                }
                let key: [(&(dyn postgres::types::ToSql + Sync), _); 3] =
                    [(queue, TEXT), (&task, TEXT), (&i64::from(turn), INT8)];
                c.client.execute_typed(
                    "DELETE FROM turns WHERE queue = $1 AND task = $2 AND turn = $3",
                    &key,
                )?;
                // Its output copied for other hosts (schema version 6) goes with it.
                c.client.execute_typed(
                    "DELETE FROM turn_output WHERE queue = $1 AND task = $2 AND turn = $3",
                    &key,
                )?;
                Ok(())
            }
        }
    }
}

/// [`Db::put_turn`] on PostgreSQL: in a write transaction the row is kept for the commit
/// ([`PgConn`]); `create` first asks whether the turn number is taken (from what this
/// transaction wrote, else one read: the queue's lock is held, so no other writer can take it
/// before the commit).
fn pg_keep_turn(
    c: &mut PgConn,
    queue: &str,
    row: &TurnRow<'_>,
    create: bool,
) -> Result<bool, DbError> {
    if !c.buffered {
        return Ok(pg_put_turn(&mut c.client, queue, row, create)? == 1);
    }
    let key = (row.task.to_string(), row.turn);
    if create {
        let taken = match c.turns.get(&key) {
            Some(body) => body.is_some(),
            None => c
                .client
                .query_typed_opt(
                    "SELECT 1 FROM turns WHERE queue = $1 AND task = $2 AND turn = $3",
                    &[
                        (&queue, TEXT),
                        (&row.task, TEXT),
                        (&i64::from(row.turn), INT8),
                    ],
                )?
                .is_some(),
        };
        if taken {
            return Ok(false);
        }
    }
    c.room()?;
    c.turns.insert(key, Some(row.body.to_string()));
    let kept = c.keep(format_args!(
        "INSERT INTO turns (queue, task, turn, short_id, settled, ended_at_millis, body)
         VALUES ({}, {}, {}, {}, {}, {}, {})
         ON CONFLICT (queue, task, turn) DO UPDATE SET short_id = EXCLUDED.short_id,
            settled = EXCLUDED.settled, ended_at_millis = EXCLUDED.ended_at_millis,
            body = EXCLUDED.body",
        lit(queue),
        lit(row.task),
        row.turn,
        lit_int(row.short_id.map(|id| id as i64)),
        row.settled,
        lit_int(row.ended_at_millis.map(|at| at as i64)),
        lit(row.body)
    ));
    debug_assert!(kept, "a buffered connection keeps its writes");
    Ok(true)
}

fn pg_put_turn(
    c: &mut impl postgres::GenericClient,
    queue: &str,
    row: &TurnRow<'_>,
    create: bool,
) -> Result<u64, postgres::Error> {
    let sql = if create {
        "INSERT INTO turns (queue, task, turn, short_id, settled, ended_at_millis, body)
         VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (queue, task, turn) DO NOTHING"
    } else {
        "INSERT INTO turns (queue, task, turn, short_id, settled, ended_at_millis, body)
         VALUES ($1, $2, $3, $4, $5, $6, $7)
         ON CONFLICT (queue, task, turn) DO UPDATE SET short_id = EXCLUDED.short_id,
            settled = EXCLUDED.settled, ended_at_millis = EXCLUDED.ended_at_millis,
            body = EXCLUDED.body"
    };
    // One round trip (`execute_typed`: no separate prepare).
    c.execute_typed(
        sql,
        &[
            (&queue, TEXT),
            (&row.task, TEXT),
            (&i64::from(row.turn), INT8),
            (&row.short_id.map(|id| id as i64), INT8),
            (&row.settled, BOOL),
            (&row.ended_at_millis.map(|at| at as i64), INT8),
            (&row.body, TEXT),
        ],
    )
}

/// PostgreSQL's version 5: SQLite's version 4 record tables with the `queue` column (every
/// queue its own records; two homes may share a queue from here on, spec/store.md), and
/// `record_imports`, one row per `(queue, home)` whose record files were imported.
pub(crate) const PG_SCHEMA_V5: &str = "
CREATE TABLE tasks (
    queue TEXT NOT NULL,
    name TEXT NOT NULL,
    next_turn BIGINT NOT NULL CHECK (next_turn >= 1),
    body TEXT NOT NULL,
    PRIMARY KEY (queue, name)
);
CREATE TABLE turns (
    queue TEXT NOT NULL,
    task TEXT NOT NULL,
    turn BIGINT NOT NULL CHECK (turn >= 1),
    short_id BIGINT,
    settled BOOLEAN NOT NULL,
    ended_at_millis BIGINT,
    body TEXT NOT NULL,
    PRIMARY KEY (queue, task, turn)
);
CREATE INDEX turns_by_short_id ON turns (queue, short_id) WHERE short_id IS NOT NULL;
CREATE INDEX turns_unfinished ON turns (queue, task, turn) WHERE NOT settled;
CREATE TABLE record_imports (
    queue TEXT NOT NULL,
    home TEXT NOT NULL,
    imported_at_millis BIGINT NOT NULL,
    moved_aside BOOLEAN NOT NULL,
    PRIMARY KEY (queue, home)
);
";

/// A PostgreSQL section's client while its closure runs, like [`Lent`] for SQLite.
struct PgLent {
    /// `(connect URL, queue)`: the record accesses this section serves.
    key: (String, String),
    conn: PgConn,
    changed_dirs: Vec<PathBuf>,
    outcome_recorded: bool,
    committed: bool,
}

thread_local! {
    static PG_ACTIVE: RefCell<Option<PgLent>> = const { RefCell::new(None) };
}

/// The side stores for record accesses outside a section, one per `(URL, queue)`, shared by the
/// process's threads (each store serialises its own client). A static, not a thread-local: a
/// client dropped at thread exit would need tokio's thread-local context, already gone by then.
static PG_SIDES: Mutex<Vec<(PgKey, std::sync::Arc<PostgresStore>)>> = Mutex::new(Vec::new());

/// `(connect URL, queue)`: what a section and the record accesses it serves are matched by.
type PgKey = (String, String);

fn side_store(
    key: &(String, String),
    home: &Home,
    (url, queue, durability, timeout): &PgTarget,
) -> std::sync::Arc<PostgresStore> {
    let find = || {
        let sides = PG_SIDES.lock().unwrap_or_else(|e| e.into_inner());
        sides
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, store)| store.clone())
    };
    if let Some(store) = find() {
        return store;
    }
    // Building a home's store registers it (sharing its connection) as the side store.
    let built = PostgresStore::new(url.clone(), queue.clone(), *timeout, *durability)
        .for_home(home.clone());
    find().unwrap_or_else(|| std::sync::Arc::new(built))
}

/// Makes `store` (sharing a home store's connection, [`PostgresStore::for_home`]) the side store
/// of `key`, replacing an earlier one.
pub(crate) fn share_side_store(key: PgKey, store: std::sync::Arc<PostgresStore>) {
    let mut sides = PG_SIDES.lock().unwrap_or_else(|e| e.into_inner());
    sides.retain(|(k, _)| k != &key);
    if sides.len() >= MAX_REGISTERED_HOMES {
        sides.remove(0);
    }
    sides.push((key, store));
}

/// A PostgreSQL section lending its client to the record layer ([`Section`] for SQLite).
pub(crate) struct PgSection<'a> {
    slot: &'a mut Option<postgres::Client>,
}

impl<'a> PgSection<'a> {
    pub(crate) fn lend(
        slot: &'a mut Option<postgres::Client>,
        key: (String, String),
    ) -> Option<Self> {
        let client = slot.take()?;
        PG_ACTIVE.with_borrow_mut(|active| {
            *active = Some(PgLent {
                key,
                conn: PgConn::new(client, true),
                changed_dirs: Vec::new(),
                outcome_recorded: false,
                committed: false,
            })
        });
        Some(PgSection { slot })
    }

    pub(crate) fn with<T>(&self, f: impl FnOnce(&mut postgres::Client) -> T) -> T {
        PG_ACTIVE.with_borrow_mut(|active| match active {
            Some(lent) => f(&mut lent.conn.client),
            None => unreachable!("a PgSection's client is lent until it drops"),
        })
    }

    /// The record writes `change` made, kept for the commit's message ([`PgConn`]).
    pub(crate) fn take_pending(&self) -> String {
        PG_ACTIVE.with_borrow_mut(|active| match active {
            Some(lent) => lent.conn.take_pending(),
            None => String::new(),
        })
    }

    pub(crate) fn outcome_recorded(&self) -> bool {
        PG_ACTIVE.with_borrow(|active| active.as_ref().is_some_and(|lent| lent.outcome_recorded))
    }

    /// Takes the client back after its `COMMIT` and signals the turn folders it changed.
    pub(crate) fn committed(self) {
        let dirs = PG_ACTIVE.with_borrow_mut(|active| match active.as_mut() {
            Some(lent) => {
                lent.committed = true;
                std::mem::take(&mut lent.changed_dirs)
            }
            None => Vec::new(),
        });
        drop(self);
        signal_changed(&dirs);
    }
}

impl Drop for PgSection<'_> {
    fn drop(&mut self) {
        if let Some(lent) = PG_ACTIVE.with_borrow_mut(Option::take) {
            let mut client = lent.conn.into_client();
            if !lent.committed {
                let _ = client.batch_execute("ROLLBACK");
            }
            *self.slot = Some(client);
        }
    }
}

type PgTarget = (PostgresUrl, String, crate::config::Durability, Duration);

/// [`with_db`] for a PostgreSQL home: the section's client when one of its queue is in progress
/// on this thread, else the thread's side client: a read in autocommit, a write in a short
/// transaction that first takes the queue's lock (as SQLite's `BEGIN IMMEDIATE` does), committed
/// and then flushed once the lock is released (spec/store.md, "PostgreSQL": no internal commit
/// may be lost while processes live on).
fn with_postgres<T>(
    home: &Home,
    target: PgTarget,
    access: Access,
    changed: Option<PathBuf>,
    f: impl FnOnce(&mut Db<'_>) -> Result<T, FileError>,
) -> Result<T, FileError> {
    let key = (target.0.connect.clone(), target.1.clone());
    let queue = target.1.clone();
    let mut f = Some(f);
    let in_section = PG_ACTIVE.with_borrow_mut(|active| match active {
        Some(lent) if lent.key == key => {
            lent.outcome_recorded |= access == Access::Outcome;
            if let Some(dir) = &changed {
                if !lent.changed_dirs.contains(dir) {
                    lent.changed_dirs.push(dir.clone());
                }
            }
            let f = f.take().expect("taken once");
            Some(f(&mut Db::Postgres(&mut lent.conn, &queue)))
        }
        _ => None,
    });
    if let Some(result) = in_section {
        return result;
    }
    let f = f.take().expect("not taken");
    let store = side_store(&key, home, &target);
    let (_, queue, _, timeout) = target;
    let result = (|| {
        let name = store.name();
        let mut guard = store.client().map_err(store_error)?;
        let Some(client) = guard.take() else {
            unreachable!("client() connected");
        };
        // Back in its slot whatever `f` returns (a panic drops it: the next use connects).
        let mut conn = PgConn::new(client, access != Access::Read);
        let result = side_transaction(&name, &queue, timeout, access, &mut conn, f);
        *guard = Some(conn.into_client());
        result
    })();
    if result.is_ok() {
        if let Some(dir) = changed {
            signal_changed(&[dir]);
        }
    }
    result
}

/// The record access of [`with_postgres`] outside a section, on the side store's client: a read
/// in autocommit; a write in a short transaction holding the queue's lock, its writes sent with
/// the `COMMIT` ([`PgConn`]).
fn side_transaction<T>(
    name: &Path,
    queue: &str,
    timeout: Duration,
    access: Access,
    conn: &mut PgConn,
    f: impl FnOnce(&mut Db<'_>) -> Result<T, FileError>,
) -> Result<T, FileError> {
    {
        let pg = |e: postgres::Error| db_error(name, DbError::Postgres(e));
        if access == Access::Read {
            return f(&mut Db::Postgres(conn, queue));
        }
        let millis = timeout.as_millis().clamp(1, i32::MAX as u128);
        // One round trip: `BEGIN`, the `SET LOCAL`s and the queue's lock in one message (the
        // queue name as an escaped literal, super::postgres::quoted_text).
        let locked = conn
            .client
            .batch_execute(&format!(
                "BEGIN; SET LOCAL lock_timeout = {millis}; SET LOCAL synchronous_commit = off; \
                 SELECT pg_advisory_xact_lock({}, hashtext({}))",
                super::postgres::LOCK_NAMESPACE,
                super::postgres::quoted_text(queue)
            ))
            .map_err(pg);
        let result = locked.and_then(|_| f(&mut Db::Postgres(conn, queue)));
        match result {
            // The kept writes and the `COMMIT` as one message; flushed after the lock is
            // released, before the write is reported done (spec/store.md, "PostgreSQL",
            // "Durability"). A write that fails skips the rest, `COMMIT` included.
            Ok(value) => {
                let mut sql = conn.take_pending();
                sql.push_str("COMMIT");
                let client = &mut conn.client;
                let sent = if sql.contains('\0') {
                    Err(FileError::Corrupt {
                        path: name.to_path_buf(),
                        format: "tollgate record table",
                        detail: "a value holds a NUL byte, which PostgreSQL text cannot store"
                            .to_string(),
                    })
                } else {
                    client
                        .batch_execute(&sql)
                        .and_then(|()| super::postgres::flush_wal(client))
                        .map_err(pg)
                };
                match sent {
                    Ok(()) => Ok(value),
                    Err(e) => {
                        let _ = client.batch_execute("ROLLBACK");
                        Err(e)
                    }
                }
            }
            Err(e) => {
                let _ = conn.client.batch_execute("ROLLBACK");
                Err(e)
            }
        }
    }
}

/// Imports `home`'s record files (an earlier version's, or a PostgreSQL home's before schema
/// version 5) into `store`'s queue on its first connection, in one transaction holding the
/// queue's lock, then renames each file `*.imported` and records that (finished by a later first
/// connection if a crash came in between). A file that would not load is refused with its path:
/// nothing imported, nothing moved.
pub(crate) fn pg_import_records(
    store: &PostgresStore,
    client: &mut postgres::Client,
    home: &Home,
) -> Result<(), crate::queue::StoreError> {
    let home_key = super::postgres::home_key(home);
    let queue = store.queue().to_string();
    let started = std::time::Instant::now();
    let mut tx = client.transaction().map_err(|e| store.error(e))?;
    tx.execute(
        "SELECT pg_advisory_xact_lock($1, hashtext($2))",
        &[&super::postgres::LOCK_NAMESPACE, &queue],
    )
    .map_err(|e| store.busy_or(started, e))?;
    let state: Option<bool> = tx
        .query_opt(
            "SELECT moved_aside FROM record_imports WHERE queue = $1 AND home = $2",
            &[&queue, &home_key],
        )
        .map_err(|e| store.error(e))?
        .map(|row| row.try_get(0))
        .transpose()
        .map_err(|e| store.error(e))?;
    if state == Some(true) {
        return tx.commit().map_err(|e| store.error(e));
    }
    if state.is_none() {
        let old = super::sqlite::read_old_records(home)?;
        let json = |e: serde_json::Error| crate::queue::StoreError::Database {
            path: store.name(),
            detail: format!("cannot render a record: {e}"),
        };
        for task in &old.tasks {
            let body = serde_json::to_string(task).map_err(json)?;
            tx.execute(
                "INSERT INTO tasks (queue, name, next_turn, body) VALUES ($1, $2, $3, $4)
                 ON CONFLICT (queue, name) DO NOTHING",
                &[&queue, &task.name, &i64::from(task.next_turn), &body],
            )
            .map_err(|e| store.error(e))?;
        }
        for turn in &old.turns {
            let body = serde_json::to_string(turn).map_err(json)?;
            let row = TurnRow {
                task: &turn.key.task,
                turn: turn.key.turn,
                short_id: turn.id,
                settled: turn.is_settled(),
                ended_at_millis: turn.ended_at_millis,
                body: &body,
            };
            pg_put_turn(&mut tx, &queue, &row, true).map_err(|e| store.error(e))?;
        }
        let nothing = old.tasks.is_empty() && old.turns.is_empty();
        tx.execute(
            "INSERT INTO record_imports (queue, home, imported_at_millis, moved_aside)
             VALUES ($1, $2, $3, $4)",
            &[
                &queue,
                &home_key,
                &(crate::clock::now_millis() as i64),
                &nothing,
            ],
        )
        .map_err(|e| store.error(e))?;
        tx.commit().map_err(|e| store.error(e))?;
        if nothing {
            return Ok(());
        }
    } else {
        tx.commit().map_err(|e| store.error(e))?;
    }
    super::sqlite::move_record_files_aside(home)?;
    client
        .execute(
            "UPDATE record_imports SET moved_aside = true WHERE queue = $1 AND home = $2",
            &[&queue, &home_key],
        )
        .map_err(|e| store.error(e))?;
    Ok(())
}

fn corrupt(path: &Path, format: &'static str, detail: String) -> FileError {
    FileError::Corrupt {
        path: path.to_path_buf(),
        format,
        detail,
    }
}

/// Parses and checks a `task.json` read from `path` (named in errors).
pub fn parse_task(path: &Path, bytes: &[u8]) -> Result<TaskRecord, FileError> {
    let record: TaskRecord = fsutil::parse_json(path, bytes)?;
    check_task(&record).map_err(|detail| corrupt(path, "tollgate task record", detail))?;
    Ok(record)
}

/// Parses and checks a `turn.json` read from `path`, the record of `expected`.
pub fn parse_turn(path: &Path, bytes: &[u8], expected: &TurnKey) -> Result<TurnRecord, FileError> {
    let turn: TurnRecord = fsutil::parse_json(path, bytes)?;
    check_turn(&turn, expected).map_err(|detail| corrupt(path, "tollgate turn record", detail))?;
    Ok(turn)
}
