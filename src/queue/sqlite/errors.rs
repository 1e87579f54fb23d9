//! SQLite's errors as the store's: a busy lock, a file that is not a database, a full disk, and
//! the uncertain commit (spec/store.md). One mapping, so every caller names a failure alike.

use crate::fsutil::FileError;
use crate::queue::store::StoreError;
use rusqlite::ErrorCode;
use std::io;
use std::path::Path;
use std::time::Instant;

/// A failed `COMMIT`. A write into the log that failed (`SQLITE_FULL`, `SQLITE_IOERR_WRITE`: a
/// full disk) left the commit frame incomplete, so the transaction did not commit and is rolled
/// back; a busy lock is refused before anything is written. Any other failure (a sync, the log's
/// index) can come after the commit frame is whole in the log, which the next command to open
/// the database reads as committed: [`StoreError::Uncertain`].
pub(super) fn commit_error(path: &Path, started: Instant, error: rusqlite::Error) -> StoreError {
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
pub(super) fn uncertain(error: StoreError) -> StoreError {
    match error {
        busy @ StoreError::Busy { .. } => busy,
        other => StoreError::Uncertain {
            source: Box::new(other),
        },
    }
}

/// The error for a failed `BEGIN IMMEDIATE` or `COMMIT`: [`StoreError::Busy`] when the write
/// lock stayed taken for the whole busy timeout.
pub(super) fn busy_or(path: &Path, started: Instant, error: rusqlite::Error) -> StoreError {
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
pub(super) fn sql_error(path: &Path, error: rusqlite::Error) -> StoreError {
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
