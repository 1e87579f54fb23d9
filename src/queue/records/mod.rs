//! Task and turn records in the home's database (SQLite schema version 4, PostgreSQL version 5;
//! spec/store.md "Records", "Records in PostgreSQL").
//!
//! **Why a section's records reach it as an argument.** A record a section reads or writes must
//! be read and written in the section's own transaction: its writes commit with the step, in the
//! step's durability class, and its reads see the step's own writes. So the store hands the
//! section's closure a [`RecordTx`] (`Store::transact_section`), which lends the transaction's
//! connection to the record functions that take it ([`crate::tasks::read_records`],
//! [`crate::tasks::apply_writes`]); nothing per thread or per process carries it, so a reader of
//! a signature sees which records run in which transaction. A record access outside a section
//! (the ~40 `&Home` callers of [`crate::tasks`]: `status`, `logs`, `wait`, the runner's started
//! record, serve's watcher) opens a short transaction of its own on the home's store connection
//! when it is free, else on a connection opened for the call.
//!
//! One job per file, each importing only those below it: `access` (how an access uses the
//! database, a turn's row, the change signal) and `error` (both databases' record errors);
//! [`home`] (where a home keeps its records, as its store was built, and the store connections
//! an access outside a section uses); `sqlite` and `postgres` (each database's schema,
//! statements and short transactions); [`db`] (the record statements of both databases behind
//! one type); [`tx`] (the section's lent connection, [`RecordTx`], and the one entry point
//! [`with_db_in`]).
//!
//! The watchers of turns (`submit --wait`, `logs -f`, serve's watcher) wait on inotify events of
//! the turn's folder. A record in the database makes no event there, so after the commit that
//! wrote a turn's record its folder gets one: the folder's own times are set to now
//! (`access::signal_changed`: one `utimensat`, `IN_ATTRIB` on the folder; no file, no data, no
//! sync).

mod access;
pub(crate) mod db;
mod error;
pub(crate) mod home;
mod postgres;
mod sqlite;
pub(crate) mod tx;

pub(crate) use access::{Access, TurnRow};
pub(crate) use db::Db;
pub(crate) use error::{db_error, DbError};
pub use home::{database_name, in_postgres, register, RecordHome};
pub(crate) use home::{share_side_store, share_sqlite, SideConnection, SqliteSlots};
pub(crate) use postgres::{pg_import_records, PG_SCHEMA_V5};
pub(crate) use sqlite::{open_home_database, put_task, put_turn, SCHEMA_V4};
pub use tx::RecordTx;
pub(crate) use tx::{with_db, with_db_in, PgSection, Section};

use crate::fsutil::{self, FileError};
use crate::protocol::records::{check_task, check_turn, TaskRecord, TurnRecord};
use crate::protocol::slots::TurnKey;
use std::path::Path;

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
