//! Keeps the database's log short (spec/store.md, "The log's length").
//!
//! Every tollgate command is a short process, and the unix VFS empties the shared-memory index of
//! the log (`tollgate.db-shm`) whenever a connection opens it while no other connection has it
//! open. That connection rebuilds the index by reading and checksumming every frame of the log,
//! and forgets how far the log had been copied into the database. SQLite's automatic checkpoint
//! (a passive one, at the commit that takes the log past [`LIMIT_BYTES`]) then copies the whole
//! log again at every later commit, two more syncs each, and the log is never restarted: it grows
//! without bound and every command reads all of it. Measured in a paused home, one submit at a
//! time: after 600 submits a 38 MB log, 10 000 reads and 3 syncs per submit, and growing
//! (docs/PERFORMANCE.md, "One submit at a time in a paused home").
//!
//! So after a commit that finds the log longer than [`LIMIT_BYTES`] (the automatic checkpoint's
//! mark), tollgate checkpoints with SQLite's `TRUNCATE` mode, which leaves a log of zero bytes.
//! Where commands overlap (a burst: runners and submits), the index survives, the automatic
//! checkpoint restarts the log as before, and `journal_size_limit` cuts a restarted log back to
//! the mark, so this trim rarely finds anything to do.
//!
//! A trim waits for readers and writers at most [`TRIM_WAIT`]: past that it copies what it can,
//! as a passive checkpoint does, and a later commit trims again. A failed trim fails nothing: the
//! commit before it stands. The checkpoint syncs the database file before it truncates the log,
//! so no commit is lost to a power loss (SQLite's own guarantee for this mode).

use super::busy;
use rusqlite::Connection;
use std::path::Path;
use std::time::Duration;

/// The log's length past which a commit trims it: SQLite's automatic checkpoint mark (1 000
/// frames, each a 24-byte header and a 4 KiB page), and the length a restarted log is cut to.
pub const LIMIT_BYTES: u64 = 1_000 * (24 + 4_096);
/// How long a trim waits for the write lock and for readers of older snapshots.
pub const TRIM_WAIT: Duration = Duration::from_millis(5);

/// What [`trim`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trimmed {
    /// The log was within [`LIMIT_BYTES`] (or not there).
    Short,
    /// The log was checkpointed and truncated to zero bytes.
    Emptied,
    /// Checkpointed as far as readers allowed, not truncated.
    Partly,
}

/// Trims the log of the database at `db` when it is longer than [`LIMIT_BYTES`]. `lock_timeout`
/// is the connection's busy bound, put back afterwards.
pub fn trim(conn: &Connection, db: &Path, lock_timeout: Duration) -> rusqlite::Result<Trimmed> {
    let mut log = db.as_os_str().to_owned();
    log.push("-wal");
    match std::fs::symlink_metadata(&log) {
        Ok(meta) if meta.len() > LIMIT_BYTES => {}
        _ => return Ok(Trimmed::Short),
    }
    busy::install(conn, TRIM_WAIT)?;
    let busy = conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |row| {
        row.get::<_, i64>(0)
    });
    busy::install(conn, lock_timeout)?;
    Ok(if busy? == 0 {
        Trimmed::Emptied
    } else {
        Trimmed::Partly
    })
}
