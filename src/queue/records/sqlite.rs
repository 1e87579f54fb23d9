//! The records in SQLite (schema version 4 of `tollgate.db`): the tables, their statements, and
//! a record access outside a section, in a short transaction of its own on the home store's
//! connection when it is free, else on the store's side connection, else on one opened for the
//! call (spec/store.md, "Records").

use super::access::{signal_changed, Access, TurnRow};
use super::error::{record_error, store_error};
use super::home::{shared_slots, SideConnection};
use crate::fsutil::FileError;
use crate::home::Home;
use rusqlite::Connection;
use std::path::{Path, PathBuf};
use std::sync::TryLockError;
use std::time::Duration;

/// The home's `tollgate.db` opened as every command opens it (checks, migrations, imports), for
/// the sweep list (src/exec/sweep.rs), whose tables are part of its schema.
pub(crate) fn open_home_database(
    home: &Home,
    lock_timeout: Duration,
) -> Result<Connection, crate::queue::StoreError> {
    crate::queue::sqlite::open_for_records(home, lock_timeout)
}

/// A record access outside any section: on the store's connection when no section holds it (one
/// open per command), else on the store's side connection (a section of this home on another
/// thread holds the first: the access does not wait for it), else on a connection opened for the
/// call (no store of this home was built in this process, or both are in use). `changed` is
/// signalled after the commit.
pub(super) fn on_its_own<T>(
    home: &Home,
    timeout: Duration,
    access: Access,
    changed: Option<PathBuf>,
    f: impl FnOnce(&Connection) -> Result<T, FileError>,
) -> Result<T, FileError> {
    let slots = shared_slots(&home.db_path());
    let guard = slots.as_ref().and_then(|(open, _)| match open.try_lock() {
        Ok(guard) => Some(guard),
        // A section that panicked rolled back on its way out (records::Section's drop).
        Err(TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
        Err(TryLockError::WouldBlock) => None,
    });
    let result = match guard {
        // (A connection not in its slot is lent to a section, which holds the slot's lock:
        // never the case while the lock is free.)
        Some(mut guard) if guard.as_ref().is_none_or(|open| open.conn.is_some()) => {
            on_store_connection(home, timeout, &mut guard, access, f)
        }
        _ => on_side_connection(
            home,
            timeout,
            slots.as_ref().map(|(_, side)| side),
            access,
            f,
        ),
    };
    if result.is_ok() {
        if let Some(dir) = changed {
            signal_changed(&[dir]);
        }
    }
    result
}

/// [`on_its_own`] on the store's connection slot (opened into it if the store
/// has not opened it yet); the level it leaves the connection at is noted in the slot, as the
/// store's sections note theirs.
fn on_store_connection<T>(
    home: &Home,
    timeout: Duration,
    slot: &mut Option<crate::queue::sqlite::Open>,
    access: Access,
    f: impl FnOnce(&Connection) -> Result<T, FileError>,
) -> Result<T, FileError> {
    if slot.is_none() {
        *slot = Some(crate::queue::sqlite::Open::database(home, timeout).map_err(store_error)?);
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

/// [`on_its_own`] on the store's side connection when it is free (opened into it on first use),
/// else on a connection opened for this call.
fn on_side_connection<T>(
    home: &Home,
    timeout: Duration,
    side: Option<&std::sync::Arc<std::sync::Mutex<Option<SideConnection>>>>,
    access: Access,
    f: impl FnOnce(&Connection) -> Result<T, FileError>,
) -> Result<T, FileError> {
    let db = home.db_path();
    let open = || crate::queue::sqlite::open_for_records(home, timeout).map_err(store_error);
    let guard = side.and_then(|side| match side.try_lock() {
        Ok(guard) => Some(guard),
        // Its last user's short transaction ended (committed or rolled back) before the panic
        // could leave it.
        Err(TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
        Err(TryLockError::WouldBlock) => None,
    });
    match guard {
        Some(mut guard) => {
            if guard.is_none() {
                *guard = Some((open()?, Some("NORMAL")));
            }
            let Some((conn, synchronous)) = guard.as_mut() else {
                unreachable!("opened above");
            };
            short_transaction(&db, conn, synchronous, timeout, access, f)
        }
        None => {
            let conn = open()?;
            short_transaction(&db, &conn, &mut Some("NORMAL"), timeout, access, f)
        }
    }
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
                crate::queue::sqlite::trim_log(conn, db, timeout);
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
