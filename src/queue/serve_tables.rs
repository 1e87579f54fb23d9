//! `serve`'s state in the home's database (schema version 5, spec/ingress.md "Durable state"):
//! the dedupe marks, the refused deliveries and the deliveries handed off at shutdown.
//!
//! Why tables and not the files of earlier versions: a mark written in the same transaction as
//! the turn it stands for cannot be lost or orphaned by a crash between two writes, and many
//! accepted deliveries share one commit (one fsync) instead of one append + fsync each (issue 12,
//! "group commit"). Every function takes the connection the record layer gives
//! ([`super::records::with_db`]): inside a queue section it is the section's own, so its writes
//! commit with the step.
//!
//! Bounds: marks at most [`MAX_DEDUPE_ENTRIES`] (the oldest dropped first, like the gate's set)
//! and never older than the TTL; refusals at most [`MAX_REFUSED_ROWS`] (the oldest dropped); the
//! hand-off list at most what one serve retained (`max_detached`).

use crate::protocol::admission::MAX_DEDUPE_ENTRIES;
use rusqlite::{params, Connection, OptionalExtension};

/// The most refused deliveries kept (and listed by `tollgate deliveries --refused`).
pub const MAX_REFUSED_ROWS: usize = 10_000;

/// Version 5 of the schema. `serve_dedupe.key` is the gate's event identity (a JSON array, or a
/// legacy `adapter/installation/identity` key imported from an old log); `expires_at_millis` is
/// `marked_at_millis + dedupe_ttl` as it was when marked.
pub(crate) const SCHEMA_V5: &str = "
CREATE TABLE serve_dedupe (
    key TEXT PRIMARY KEY,
    marked_at_millis INTEGER NOT NULL,
    expires_at_millis INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
CREATE INDEX serve_dedupe_by_mark ON serve_dedupe (marked_at_millis);
CREATE TABLE serve_refused (
    id INTEGER PRIMARY KEY,
    body TEXT NOT NULL
) STRICT;
CREATE TABLE serve_payloads (
    delivery TEXT PRIMARY KEY,
    task TEXT NOT NULL,
    turn INTEGER NOT NULL,
    body BLOB NOT NULL
) STRICT;
CREATE INDEX serve_payloads_by_turn ON serve_payloads (task, turn);
CREATE TABLE serve_handed_off (
    delivery TEXT PRIMARY KEY,
    body TEXT NOT NULL
) STRICT;
";

/// One stored mark.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredMark {
    pub key: String,
    pub marked_at_millis: u64,
}

/// Bit-for-bit `u64` in SQLite's signed integers (as the queue tables do).
fn int(value: u64) -> i64 {
    value as i64
}

fn uint(value: i64) -> u64 {
    value as u64
}

/// Insert-if-absent: marks `key` unless a live mark (unexpired at `now_millis`) exists. Returns
/// `true` when this call made the mark (a new delivery), `false` for a duplicate. An expired mark
/// is replaced. Keeps the table within [`MAX_DEDUPE_ENTRIES`] by dropping the oldest marks.
pub fn mark_if_absent(
    conn: &Connection,
    key: &str,
    now_millis: u64,
    ttl_millis: u64,
) -> rusqlite::Result<bool> {
    conn.execute(
        "DELETE FROM serve_dedupe WHERE key = ?1 AND expires_at_millis <= ?2",
        params![key, int(now_millis)],
    )?;
    let inserted = conn.execute(
        "INSERT OR IGNORE INTO serve_dedupe (key, marked_at_millis, expires_at_millis) VALUES (?1, ?2, ?3)",
        params![key, int(now_millis), int(now_millis.saturating_add(ttl_millis))],
    )?;
    if inserted == 1 {
        trim_marks(conn)?;
    }
    Ok(inserted == 1)
}

/// Puts a mark made elsewhere (an imported log line) unless a newer one is there.
pub fn put_mark(
    conn: &Connection,
    key: &str,
    marked_at_millis: u64,
    ttl_millis: u64,
) -> rusqlite::Result<()> {
    conn.execute(
        "INSERT INTO serve_dedupe (key, marked_at_millis, expires_at_millis) VALUES (?1, ?2, ?3)
         ON CONFLICT (key) DO UPDATE SET marked_at_millis = excluded.marked_at_millis,
             expires_at_millis = excluded.expires_at_millis
         WHERE excluded.marked_at_millis > serve_dedupe.marked_at_millis",
        params![
            key,
            int(marked_at_millis),
            int(marked_at_millis.saturating_add(ttl_millis))
        ],
    )?;
    Ok(())
}

/// Forgets `key`'s mark (a delivery withdrawn before it was acknowledged).
pub fn unmark(conn: &Connection, key: &str) -> rusqlite::Result<()> {
    conn.execute("DELETE FROM serve_dedupe WHERE key = ?1", [key])?;
    Ok(())
}

/// Whether `key` has a live mark at `now_millis`.
pub fn is_marked(conn: &Connection, key: &str, now_millis: u64) -> rusqlite::Result<bool> {
    conn.query_row(
        "SELECT 1 FROM serve_dedupe WHERE key = ?1 AND expires_at_millis > ?2",
        params![key, int(now_millis)],
        |_| Ok(()),
    )
    .optional()
    .map(|found| found.is_some())
}

/// Drops the marks expired at `now_millis`, and the oldest beyond the cap.
pub fn prune_marks(conn: &Connection, now_millis: u64) -> rusqlite::Result<usize> {
    let expired = conn.execute(
        "DELETE FROM serve_dedupe WHERE expires_at_millis <= ?1",
        [int(now_millis)],
    )?;
    Ok(expired + trim_marks(conn)?)
}

fn trim_marks(conn: &Connection) -> rusqlite::Result<usize> {
    let count: i64 = conn.query_row("SELECT count(*) FROM serve_dedupe", [], |r| r.get(0))?;
    let over = usize::try_from(count)
        .unwrap_or(0)
        .saturating_sub(MAX_DEDUPE_ENTRIES);
    if over == 0 {
        return Ok(0);
    }
    conn.execute(
        "DELETE FROM serve_dedupe WHERE key IN
             (SELECT key FROM serve_dedupe ORDER BY marked_at_millis, key LIMIT ?1)",
        [i64::try_from(over).unwrap_or(i64::MAX)],
    )
}

/// The live marks at `now_millis`, oldest first (at most [`MAX_DEDUPE_ENTRIES`]).
pub fn live_marks(conn: &Connection, now_millis: u64) -> rusqlite::Result<Vec<StoredMark>> {
    let mut stmt = conn.prepare(
        "SELECT key, marked_at_millis FROM serve_dedupe WHERE expires_at_millis > ?1
         ORDER BY marked_at_millis, key LIMIT ?2",
    )?;
    let rows = stmt.query_map(
        params![
            int(now_millis),
            i64::try_from(MAX_DEDUPE_ENTRIES).unwrap_or(i64::MAX)
        ],
        |row| {
            Ok(StoredMark {
                key: row.get(0)?,
                marked_at_millis: uint(row.get(1)?),
            })
        },
    )?;
    rows.collect()
}

/// Appends one refusal (its JSON document), dropping the oldest beyond [`MAX_REFUSED_ROWS`].
pub fn add_refused(conn: &Connection, body: &str) -> rusqlite::Result<()> {
    conn.execute("INSERT INTO serve_refused (body) VALUES (?1)", [body])?;
    conn.execute(
        "DELETE FROM serve_refused WHERE id <= (SELECT max(id) FROM serve_refused) - ?1",
        [i64::try_from(MAX_REFUSED_ROWS).unwrap_or(i64::MAX)],
    )?;
    Ok(())
}

/// Every kept refusal's document, oldest first.
pub fn refused(conn: &Connection) -> rusqlite::Result<Vec<String>> {
    let mut stmt = conn.prepare("SELECT body FROM serve_refused ORDER BY id LIMIT ?1")?;
    let rows = stmt.query_map(
        [i64::try_from(MAX_REFUSED_ROWS).unwrap_or(i64::MAX)],
        |row| row.get(0),
    )?;
    rows.collect()
}

/// Replaces the hand-off list: `(delivery id, document)` each.
pub fn replace_handed_off(conn: &Connection, handed: &[(String, String)]) -> rusqlite::Result<()> {
    conn.execute("DELETE FROM serve_handed_off", [])?;
    let mut stmt =
        conn.prepare("INSERT OR REPLACE INTO serve_handed_off (delivery, body) VALUES (?1, ?2)")?;
    for (delivery, body) in handed {
        stmt.execute(params![delivery, body])?;
    }
    Ok(())
}

/// The hand-off list's documents, in delivery id order.
pub fn handed_off(conn: &Connection) -> rusqlite::Result<Vec<String>> {
    let mut stmt = conn.prepare("SELECT body FROM serve_handed_off ORDER BY delivery")?;
    let rows = stmt.query_map([], |row| row.get(0))?;
    rows.collect()
}

/// Whether the old file `source` (its path under the home) was imported, and if so whether it
/// was moved aside: `None` when never imported.
pub fn import_state(conn: &Connection, source: &str) -> rusqlite::Result<Option<bool>> {
    conn.query_row(
        "SELECT moved_aside FROM imports WHERE source = ?1",
        [source],
        |row| row.get::<_, i64>(0).map(|m| m != 0),
    )
    .optional()
}

/// Records that `source` was imported (not yet moved aside).
pub fn record_import(conn: &Connection, source: &str, now_millis: u64) -> rusqlite::Result<()> {
    conn.execute(
        "INSERT OR IGNORE INTO imports (source, imported_at_millis) VALUES (?1, ?2)",
        params![source, int(now_millis)],
    )?;
    Ok(())
}

/// Records that `source` was moved aside.
pub fn record_moved(conn: &Connection, source: &str) -> rusqlite::Result<()> {
    conn.execute(
        "UPDATE imports SET moved_aside = 1 WHERE source = ?1",
        [source],
    )?;
    Ok(())
}

/// Keeps an accepted delivery's payload (committed with its turn; the turn's `payload` file is
/// written without a sync and restored from here at serve's start).
pub fn put_payload(
    conn: &Connection,
    delivery: &str,
    task: &str,
    turn: u32,
    body: &[u8],
) -> rusqlite::Result<()> {
    conn.execute(
        "INSERT OR REPLACE INTO serve_payloads (delivery, task, turn, body) VALUES (?1, ?2, ?3, ?4)",
        params![delivery, task, turn, body],
    )?;
    Ok(())
}

/// Drops at most `limit` kept payloads whose turn ended or is gone.
pub fn prune_payloads(conn: &Connection, limit: usize) -> rusqlite::Result<usize> {
    conn.execute(
        "DELETE FROM serve_payloads WHERE delivery IN (
             SELECT p.delivery FROM serve_payloads p
             LEFT JOIN turns t ON t.task = p.task AND t.turn = p.turn
             WHERE t.settled IS NULL OR t.settled = 1 LIMIT ?1)",
        [i64::try_from(limit).unwrap_or(i64::MAX)],
    )
}

/// The kept payloads of unfinished turns: `(task, turn, body)`.
pub fn kept_payloads(conn: &Connection) -> rusqlite::Result<Vec<(String, u32, Vec<u8>)>> {
    let mut stmt = conn.prepare(
        "SELECT p.task, p.turn, p.body FROM serve_payloads p
         JOIN turns t ON t.task = p.task AND t.turn = p.turn WHERE t.settled = 0",
    )?;
    let rows = stmt.query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))?;
    rows.collect()
}

/// Runs `sql` (a `SAVEPOINT`, `RELEASE` or `ROLLBACK TO`): one delivery of a group commit.
pub fn savepoint(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.execute_batch(sql)
}
