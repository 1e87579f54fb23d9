//! What follows a section's commit: the sync barrier that makes an internal section durable once
//! it recorded an outcome, the trim of the log, and (with `failpoints`) the snapshot of what a
//! disk that lost every unsynced write would hold. Apart from the section so the commit's
//! durability rules read in one place.

#[cfg(feature = "failpoints")]
use crate::fsutil::FileError;
use rusqlite::Connection;
#[cfg(feature = "failpoints")]
use std::io;
use std::path::Path;
#[cfg(feature = "failpoints")]
use std::path::PathBuf;
use std::time::Duration;

/// [`crate::queue::log_trim::trim`] after a commit; a failure is logged, never an error of the step
/// (the commit stands, and a later commit trims again).
pub(crate) fn trim_log(conn: &Connection, db: &Path, lock_timeout: Duration) {
    match crate::queue::log_trim::trim(conn, db, lock_timeout) {
        Ok(crate::queue::log_trim::Trimmed::Short) => {}
        Ok(trimmed) => tracing::debug!("{}: log {trimmed:?}", db.display()),
        Err(e) => tracing::debug!("{}: log not trimmed: {e}", db.display()),
    }
}

/// Syncs the log up to the last commit: a synced write transaction that counts itself in
/// `sync_barrier` (a transaction that writes no page, an unchanged row included, syncs nothing).
/// Leaves the connection at `synchronous = FULL`.
pub(super) fn sync_barrier(conn: &Connection) -> rusqlite::Result<()> {
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.execute_batch(
        "BEGIN IMMEDIATE; UPDATE sync_barrier SET commits = commits + 1 WHERE id = 1; COMMIT;",
    )
}

/// With the `failpoints` feature, `store::after_durable_commit(DIR)` copies the database as it
/// stands after every synced commit to `DIR/tollgate.db`: what a disk that lost every unsynced
/// write would hold (the power-loss test, tests/failpoints_store_durability.rs).
#[cfg(feature = "failpoints")]
pub(super) fn snapshot_for_tests(conn: &Connection, path: &Path) -> Result<(), FileError> {
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
