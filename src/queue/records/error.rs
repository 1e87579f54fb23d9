//! Record errors of both databases, and how they read as file errors naming the database (a
//! full disk is ENOSPC whichever database reported it, so the result writer's retry sees it).

use crate::fsutil::FileError;
use std::io;
use std::path::Path;

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
                io::Error::other(crate::queue::postgres::describe(&e))
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

/// A store error met by a record access, as a file error.
pub(super) fn store_error(error: crate::queue::StoreError) -> FileError {
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
