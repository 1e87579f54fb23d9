//! What every record access is made of, whichever database and transaction it runs in: how it
//! uses the database ([`Access`]), the row a turn record is written as ([`TurnRow`]), and the
//! change signal its commit gives the turn's watchers ([`signal_changed`]). Kept apart from the
//! databases' code so that each database's file, and the section's, can use them without
//! importing each other.

use std::path::PathBuf;

/// How a record access uses the database.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Access {
    Read,
    Write,
    /// A write that records a turn's outcome: its commit is synced.
    Outcome,
}

/// A turn record's row: its key, the indexed columns and the JSON body.
pub(crate) struct TurnRow<'a> {
    pub task: &'a str,
    pub turn: u32,
    pub short_id: Option<u64>,
    pub settled: bool,
    pub ended_at_millis: Option<u64>,
    pub body: &'a str,
}

/// Sets each folder's times to now ([`crate::fsutil::touch_dir`]): the `IN_ATTRIB` event the
/// folder's watchers wake on ([`crate::watch::dir_mask`]). Best effort: a missing folder only
/// costs a watcher its fallback poll. One syscall and no new inode per signal, so a turn nobody
/// watches pays almost nothing for it.
pub(crate) fn signal_changed(dirs: &[PathBuf]) {
    for dir in dirs {
        let _ = crate::fsutil::touch_dir(dir);
    }
}
