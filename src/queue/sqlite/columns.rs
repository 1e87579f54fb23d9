//! How the core's values are kept in SQLite's columns: a `u64` bit for bit in a signed INTEGER,
//! a process identity in two columns, a slot token as its text. Shared by the reads and the
//! writes, so both encode a value alike.

use crate::protocol::slots::{ProcessIdentity, SlotToken};

/// A `u64` as SQLite's 64-bit signed INTEGER, bit for bit: every value the core can hold (a
/// queue counter at `u64::MAX` included) round-trips. Values past `i64::MAX` read as negative in
/// the `sqlite3` shell and sort before the others there, which is why the loader sorts the rows by
/// their `u64` id (the order `ORDER BY queue_id` gives for every id below 2^63).
pub(super) fn int(value: u64) -> i64 {
    value as i64
}

/// The inverse of [`int`].
pub(super) fn uint(row: &rusqlite::Row<'_>, column: usize) -> rusqlite::Result<u64> {
    Ok(row.get::<_, i64>(column)? as u64)
}

/// A process identity from a pid and a start-time column; `None` when both are NULL.
pub(super) fn identity(
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
pub(super) fn token(text: &str) -> Result<SlotToken, String> {
    serde_json::from_value(serde_json::Value::String(text.to_string()))
        .map_err(|e| format!("token {text:?}: {e}"))
}
