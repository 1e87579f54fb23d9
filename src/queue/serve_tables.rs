//! `serve`'s state in the home's database (SQLite schema version 5, PostgreSQL version 7;
//! spec/ingress.md "Durable state", spec/store.md "What lives where"): the dedupe marks, the
//! refused deliveries, the deliveries handed off at shutdown and the accepted payloads.
//!
//! Why tables and not the files of earlier versions: a mark written in the same transaction as
//! the turn it stands for cannot be lost or orphaned by a crash between two writes, and many
//! accepted deliveries share one commit (one fsync) instead of one append + fsync each (issue 12,
//! "group commit"). In PostgreSQL the marks are one table keyed by `(queue, key)` that every
//! home of the queue writes: the group commit reads the marks of its deliveries inside the queue's
//! section (serialised by its lock), the core decides, and a plain insert on that unique key
//! writes the decided mark (the key enforces it), which makes dedupe fleet-wide (issue 14, spec/admission.md "Across instances").
//!
//! **One logic, two dialects.** Every function takes the record layer's [`Db`] (inside a queue
//! section it is the section's own connection or client, so its writes commit with the step)
//! and runs the same steps on either database; only the statements differ, and each is written
//! once per dialect side by side in a [`Sql`] (`?N` parameters in SQLite; in PostgreSQL `$1` is
//! the queue and the parameters follow from `$2`).
//!
//! Bounds: marks at most [`MAX_DEDUPE_ENTRIES`] per queue (the oldest dropped first, like the
//! gate's set) and never older than the TTL; refusals at most [`MAX_REFUSED_ROWS`] per queue
//! (the oldest dropped); the hand-off list at most what one serve retained (`max_detached`),
//! per home; payloads pruned a few per batch once their turn ended.
//!
//! Without the `serve` feature (the loom build) only the schemas and [`payload_of`] (a runner on
//! another host reads the payload through it) are compiled; the rest is `serve`'s alone.

use super::records::{Db, DbError};
#[cfg(feature = "serve")]
use crate::protocol::admission::MAX_DEDUPE_ENTRIES;

/// The most refused deliveries kept (and listed by `tollgate deliveries --refused`).
pub const MAX_REFUSED_ROWS: usize = 10_000;

/// Version 5 of the SQLite schema. `serve_dedupe.key` is the gate's event identity (a JSON
/// array, or a legacy `adapter/installation/identity` key imported from an old log);
/// `expires_at_millis` is `marked_at_millis + dedupe_ttl` as it was when marked.
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

/// Version 7 of the PostgreSQL schema: SQLite's version 5 with the `queue` column (the marks,
/// refusals and payloads of a queue are shared by every home serving it: dedupe is fleet-wide),
/// the hand-off list by `(queue, home)` (each serve hands off its own deliveries to its own next
/// start), and `serve_imports`, one row per old serve file of a home imported. `home` is the
/// home's canonical path, as in `record_imports`. Independent of version 6.
pub(crate) const PG_SCHEMA_V7: &str = "
CREATE TABLE serve_dedupe (
    queue TEXT NOT NULL,
    key TEXT NOT NULL,
    marked_at_millis BIGINT NOT NULL,
    expires_at_millis BIGINT NOT NULL,
    PRIMARY KEY (queue, key)
);
CREATE INDEX serve_dedupe_by_mark ON serve_dedupe (queue, marked_at_millis, key);
CREATE INDEX serve_dedupe_by_expiry ON serve_dedupe (queue, expires_at_millis);
CREATE TABLE serve_refused (
    queue TEXT NOT NULL,
    id BIGINT GENERATED ALWAYS AS IDENTITY,
    body TEXT NOT NULL,
    PRIMARY KEY (queue, id)
);
CREATE TABLE serve_payloads (
    queue TEXT NOT NULL,
    delivery TEXT NOT NULL,
    task TEXT NOT NULL,
    turn BIGINT NOT NULL,
    body BYTEA NOT NULL,
    PRIMARY KEY (queue, delivery)
);
CREATE INDEX serve_payloads_by_turn ON serve_payloads (queue, task, turn);
CREATE TABLE serve_handed_off (
    queue TEXT NOT NULL,
    home TEXT NOT NULL,
    delivery TEXT NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (queue, home, delivery)
);
CREATE TABLE serve_imports (
    queue TEXT NOT NULL,
    home TEXT NOT NULL,
    source TEXT NOT NULL,
    imported_at_millis BIGINT NOT NULL,
    moved_aside BOOLEAN NOT NULL DEFAULT false,
    PRIMARY KEY (queue, home, source)
);
";

/// One statement in both dialects.
struct Sql {
    sqlite: &'static str,
    postgres: &'static str,
}

/// A statement's parameter. [`Arg::Home`] is bound only in PostgreSQL (SQLite's database is
/// the home's own: it has no `home` column).
#[derive(Clone, Copy)]
enum Arg<'a> {
    Text(&'a str),
    Int(i64),
    #[cfg_attr(not(feature = "serve"), allow(dead_code))] // only serve's statements
    Bytes(&'a [u8]),
    #[cfg_attr(not(feature = "serve"), allow(dead_code))] // only serve's statements
    Home(&'a str),
}

/// The type of a result column.
#[derive(Clone, Copy)]
enum Col {
    #[cfg_attr(not(feature = "serve"), allow(dead_code))] // only serve's statements
    Text,
    #[cfg_attr(not(feature = "serve"), allow(dead_code))] // only serve's statements
    Int,
    Bytes,
}

enum Val {
    #[cfg_attr(not(feature = "serve"), allow(dead_code))] // only serve's statements
    Text(String),
    #[cfg_attr(not(feature = "serve"), allow(dead_code))] // only serve's statements
    Int(i64),
    Bytes(Vec<u8>),
}

impl Val {
    #[cfg(feature = "serve")]
    fn text(self) -> String {
        match self {
            Val::Text(t) => t,
            _ => String::new(),
        }
    }

    #[cfg(feature = "serve")]
    fn int(&self) -> i64 {
        match self {
            Val::Int(i) => *i,
            _ => 0,
        }
    }

    fn bytes(self) -> Vec<u8> {
        match self {
            Val::Bytes(b) => b,
            _ => Vec::new(),
        }
    }
}

fn sqlite_args<'a>(args: &'a [Arg<'a>]) -> Vec<&'a dyn rusqlite::ToSql> {
    args.iter()
        .filter_map(|arg| match arg {
            Arg::Text(t) => Some(t as &dyn rusqlite::ToSql),
            Arg::Int(i) => Some(i as &dyn rusqlite::ToSql),
            Arg::Bytes(b) => Some(b as &dyn rusqlite::ToSql),
            Arg::Home(_) => None,
        })
        .collect()
}

fn pg_args<'a>(
    queue: &'a &'a str,
    args: &'a [Arg<'a>],
) -> Vec<&'a (dyn postgres::types::ToSql + Sync)> {
    let mut out: Vec<&(dyn postgres::types::ToSql + Sync)> = vec![queue];
    for arg in args {
        out.push(match arg {
            Arg::Text(t) | Arg::Home(t) => t,
            Arg::Int(i) => i,
            Arg::Bytes(b) => b,
        });
    }
    out
}

/// Runs `sql` with `args`; the number of rows changed.
#[cfg(feature = "serve")]
fn exec(db: &mut Db<'_>, sql: &Sql, args: &[Arg<'_>]) -> Result<usize, DbError> {
    match db {
        Db::Sqlite(c) => Ok(c
            .prepare_cached(sql.sqlite)?
            .execute(sqlite_args(args).as_slice())?),
        Db::Postgres(c, queue) => {
            let changed = c.execute(sql.postgres, &pg_args(queue, args))?;
            Ok(usize::try_from(changed).unwrap_or(usize::MAX))
        }
    }
}

/// Runs the query `sql` with `args`; each row's columns as `cols` say.
fn query(
    db: &mut Db<'_>,
    sql: &Sql,
    args: &[Arg<'_>],
    cols: &[Col],
) -> Result<Vec<Vec<Val>>, DbError> {
    match db {
        Db::Sqlite(c) => {
            let mut stmt = c.prepare_cached(sql.sqlite)?;
            let rows = stmt.query_map(sqlite_args(args).as_slice(), |row| {
                cols.iter()
                    .enumerate()
                    .map(|(i, col)| {
                        Ok(match col {
                            Col::Text => Val::Text(row.get(i)?),
                            Col::Int => Val::Int(row.get(i)?),
                            Col::Bytes => Val::Bytes(row.get(i)?),
                        })
                    })
                    .collect::<rusqlite::Result<Vec<Val>>>()
            })?;
            Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
        }
        Db::Postgres(c, queue) => {
            let rows = c.query(sql.postgres, &pg_args(queue, args))?;
            rows.iter()
                .map(|row| {
                    cols.iter()
                        .enumerate()
                        .map(|(i, col)| {
                            Ok(match col {
                                Col::Text => Val::Text(row.try_get(i)?),
                                Col::Int => Val::Int(row.try_get(i)?),
                                Col::Bytes => Val::Bytes(row.try_get(i)?),
                            })
                        })
                        .collect::<Result<Vec<Val>, DbError>>()
                })
                .collect()
        }
    }
}

#[cfg(feature = "serve")]
fn limit(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// One stored mark.
#[cfg(feature = "serve")]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredMark {
    pub key: String,
    pub marked_at_millis: u64,
}

/// Bit-for-bit `u64` in the databases' signed integers (as the queue tables do).
#[cfg(feature = "serve")]
fn int(value: u64) -> i64 {
    value as i64
}

#[cfg(feature = "serve")]
fn uint(value: i64) -> u64 {
    value as u64
}

#[cfg(feature = "serve")]
const MARKS_OF: Sql = Sql {
    sqlite: "SELECT key, expires_at_millis FROM serve_dedupe
             WHERE key IN (SELECT value FROM json_each(?1))",
    postgres: "SELECT key, expires_at_millis FROM serve_dedupe
               WHERE queue = $1 AND key IN (SELECT jsonb_array_elements_text(($2::text)::jsonb))",
};
#[cfg(feature = "serve")]
const DELETE_EXPIRED_KEY: Sql = Sql {
    sqlite: "DELETE FROM serve_dedupe WHERE key = ?1 AND expires_at_millis <= ?2",
    postgres: "DELETE FROM serve_dedupe WHERE queue = $1 AND key = $2 AND expires_at_millis <= $3",
};
#[cfg(feature = "serve")]
const INSERT_MARK: Sql = Sql {
    sqlite: "INSERT INTO serve_dedupe (key, marked_at_millis, expires_at_millis)
             VALUES (?1, ?2, ?3)",
    postgres: "INSERT INTO serve_dedupe (queue, key, marked_at_millis, expires_at_millis)
               VALUES ($1, $2, $3, $4)",
};
#[cfg(feature = "serve")]
const PUT_MARK: Sql = Sql {
    sqlite:
        "INSERT INTO serve_dedupe (key, marked_at_millis, expires_at_millis) VALUES (?1, ?2, ?3)
             ON CONFLICT (key) DO UPDATE SET marked_at_millis = excluded.marked_at_millis,
                 expires_at_millis = excluded.expires_at_millis
             WHERE excluded.marked_at_millis > serve_dedupe.marked_at_millis",
    postgres: "INSERT INTO serve_dedupe (queue, key, marked_at_millis, expires_at_millis)
               VALUES ($1, $2, $3, $4)
               ON CONFLICT (queue, key) DO UPDATE SET marked_at_millis = excluded.marked_at_millis,
                   expires_at_millis = excluded.expires_at_millis
               WHERE excluded.marked_at_millis > serve_dedupe.marked_at_millis",
};
#[cfg(feature = "serve")]
const DELETE_EXPIRED: Sql = Sql {
    sqlite: "DELETE FROM serve_dedupe WHERE expires_at_millis <= ?1",
    postgres: "DELETE FROM serve_dedupe WHERE queue = $1 AND expires_at_millis <= $2",
};
#[cfg(feature = "serve")]
const COUNT_MARKS: Sql = Sql {
    sqlite: "SELECT count(*) FROM serve_dedupe",
    postgres: "SELECT count(*) FROM serve_dedupe WHERE queue = $1",
};
#[cfg(feature = "serve")]
const DROP_OLDEST_MARKS: Sql = Sql {
    sqlite: "DELETE FROM serve_dedupe WHERE key IN
                 (SELECT key FROM serve_dedupe ORDER BY marked_at_millis, key LIMIT ?1)",
    postgres: "DELETE FROM serve_dedupe WHERE queue = $1 AND key IN
                   (SELECT key FROM serve_dedupe WHERE queue = $1
                    ORDER BY marked_at_millis, key COLLATE \"C\" LIMIT $2)",
};
#[cfg(feature = "serve")]
const LIVE_MARKS: Sql = Sql {
    sqlite: "SELECT key, marked_at_millis FROM serve_dedupe WHERE expires_at_millis > ?1
             ORDER BY marked_at_millis, key LIMIT ?2",
    postgres: "SELECT key, marked_at_millis FROM serve_dedupe
               WHERE queue = $1 AND expires_at_millis > $2
               ORDER BY marked_at_millis, key COLLATE \"C\" LIMIT $3",
};

/// The stored marks of `keys`, as `(key, expires_at_millis)`, in one statement: what the core's
/// group-commit step (`TableMarks`) decides on. Expired rows are returned too (the step judges
/// expiry at each delivery's arrival).
#[cfg(feature = "serve")]
pub(crate) fn marks_of(db: &mut Db<'_>, keys: &[&str]) -> Result<Vec<(String, u64)>, DbError> {
    let list = serde_json::to_string(keys).map_err(|e| DbError::Range(e.to_string()))?;
    let rows = query(db, &MARKS_OF, &[Arg::Text(&list)], &[Col::Text, Col::Int])?;
    Ok(rows
        .into_iter()
        .map(|row| {
            let mut row = row.into_iter();
            let key = row.next().map(Val::text).unwrap_or_default();
            let expires = row.next().map_or(0, |v| uint(v.int()));
            (key, expires)
        })
        .collect())
}

/// Writes the mark a core step decided on: drops `key`'s row expired at `marked_at_millis`, then
/// inserts. A plain insert: the unique key fails it when a live mark is there (the delivery's
/// write group is refused and the batch runs again without it), so a decision the table
/// contradicts is never written over. Does not
/// trim: the caller's transaction ends with [`trim_marks`] (one count of the table per group
/// commit), so every commit keeps the table within [`MAX_DEDUPE_ENTRIES`].
///
/// In PostgreSQL the unique key holds even between two transactions that do not share the
/// queue's lock: the second `INSERT` waits for the first's commit and then fails.
#[cfg(feature = "serve")]
pub(crate) fn insert_mark(
    db: &mut Db<'_>,
    key: &str,
    marked_at_millis: u64,
    expires_at_millis: u64,
) -> Result<(), DbError> {
    exec(
        db,
        &DELETE_EXPIRED_KEY,
        &[Arg::Text(key), Arg::Int(int(marked_at_millis))],
    )?;
    exec(
        db,
        &INSERT_MARK,
        &[
            Arg::Text(key),
            Arg::Int(int(marked_at_millis)),
            Arg::Int(int(expires_at_millis)),
        ],
    )?;
    Ok(())
}

/// Puts a mark made elsewhere (an imported log line) unless a newer one is there.
#[cfg(feature = "serve")]
pub(crate) fn put_mark(
    db: &mut Db<'_>,
    key: &str,
    marked_at_millis: u64,
    ttl_millis: u64,
) -> Result<(), DbError> {
    exec(
        db,
        &PUT_MARK,
        &[
            Arg::Text(key),
            Arg::Int(int(marked_at_millis)),
            Arg::Int(int(marked_at_millis.saturating_add(ttl_millis))),
        ],
    )?;
    Ok(())
}

/// Drops the marks expired at `now_millis`, and the oldest beyond the cap.
#[cfg(feature = "serve")]
pub(crate) fn prune_marks(db: &mut Db<'_>, now_millis: u64) -> Result<usize, DbError> {
    let expired = exec(db, &DELETE_EXPIRED, &[Arg::Int(int(now_millis))])?;
    Ok(expired + trim_marks(db)?)
}

/// Drops the oldest marks beyond [`MAX_DEDUPE_ENTRIES`]; how many.
#[cfg(feature = "serve")]
pub(crate) fn trim_marks(db: &mut Db<'_>) -> Result<usize, DbError> {
    let count = query(db, &COUNT_MARKS, &[], &[Col::Int])?
        .first()
        .and_then(|row| row.first())
        .map_or(0, Val::int);
    let over = usize::try_from(count)
        .unwrap_or(0)
        .saturating_sub(MAX_DEDUPE_ENTRIES);
    if over == 0 {
        return Ok(0);
    }
    exec(db, &DROP_OLDEST_MARKS, &[Arg::Int(limit(over))])
}

/// The live marks at `now_millis`, oldest first (at most [`MAX_DEDUPE_ENTRIES`]).
#[cfg(feature = "serve")]
pub(crate) fn live_marks(db: &mut Db<'_>, now_millis: u64) -> Result<Vec<StoredMark>, DbError> {
    let rows = query(
        db,
        &LIVE_MARKS,
        &[
            Arg::Int(int(now_millis)),
            Arg::Int(limit(MAX_DEDUPE_ENTRIES)),
        ],
        &[Col::Text, Col::Int],
    )?;
    Ok(rows
        .into_iter()
        .map(|row| {
            let mut row = row.into_iter();
            let key = row.next().map(Val::text).unwrap_or_default();
            let at = row.next().map_or(0, |v| uint(v.int()));
            StoredMark {
                key,
                marked_at_millis: at,
            }
        })
        .collect())
}

#[cfg(feature = "serve")]
const ADD_REFUSED: Sql = Sql {
    sqlite: "INSERT INTO serve_refused (body) VALUES (?1)",
    postgres: "INSERT INTO serve_refused (queue, body) VALUES ($1, $2)",
};
#[cfg(feature = "serve")]
const DROP_OLDEST_REFUSED: Sql = Sql {
    sqlite: "DELETE FROM serve_refused WHERE id <= (SELECT max(id) FROM serve_refused) - ?1",
    // Identities are shared by every queue: the bound is counted in this queue's rows.
    postgres: "DELETE FROM serve_refused WHERE queue = $1 AND id <=
                   (SELECT id FROM serve_refused WHERE queue = $1
                    ORDER BY id DESC OFFSET $2 LIMIT 1)",
};
#[cfg(feature = "serve")]
const REFUSED: Sql = Sql {
    sqlite: "SELECT body FROM serve_refused ORDER BY id LIMIT ?1",
    postgres: "SELECT body FROM serve_refused WHERE queue = $1 ORDER BY id LIMIT $2",
};

/// Appends one refusal (its JSON document), dropping the oldest beyond [`MAX_REFUSED_ROWS`].
#[cfg(feature = "serve")]
pub(crate) fn add_refused(db: &mut Db<'_>, body: &str) -> Result<(), DbError> {
    exec(db, &ADD_REFUSED, &[Arg::Text(body)])?;
    exec(
        db,
        &DROP_OLDEST_REFUSED,
        &[Arg::Int(limit(MAX_REFUSED_ROWS))],
    )?;
    Ok(())
}

/// Every kept refusal's document, oldest first.
#[cfg(feature = "serve")]
pub(crate) fn refused(db: &mut Db<'_>) -> Result<Vec<String>, DbError> {
    let rows = query(
        db,
        &REFUSED,
        &[Arg::Int(limit(MAX_REFUSED_ROWS))],
        &[Col::Text],
    )?;
    Ok(texts(rows))
}

#[cfg(feature = "serve")]
fn texts(rows: Vec<Vec<Val>>) -> Vec<String> {
    rows.into_iter()
        .filter_map(|row| row.into_iter().next().map(Val::text))
        .collect()
}

#[cfg(feature = "serve")]
const CLEAR_HANDED_OFF: Sql = Sql {
    sqlite: "DELETE FROM serve_handed_off",
    postgres: "DELETE FROM serve_handed_off WHERE queue = $1 AND home = $2",
};
#[cfg(feature = "serve")]
const PUT_HANDED_OFF: Sql = Sql {
    sqlite: "INSERT INTO serve_handed_off (delivery, body) VALUES (?1, ?2)
             ON CONFLICT (delivery) DO UPDATE SET body = excluded.body",
    postgres: "INSERT INTO serve_handed_off (queue, home, delivery, body) VALUES ($1, $2, $3, $4)
               ON CONFLICT (queue, home, delivery) DO UPDATE SET body = excluded.body",
};
#[cfg(feature = "serve")]
const HANDED_OFF: Sql = Sql {
    sqlite: "SELECT body FROM serve_handed_off ORDER BY delivery",
    postgres: "SELECT body FROM serve_handed_off WHERE queue = $1 AND home = $2
               ORDER BY delivery COLLATE \"C\"",
};

/// Replaces `home`'s hand-off list: `(delivery id, document)` each. `home` is the home's key
/// ([`home_key`]; only PostgreSQL, where homes share the tables, uses it).
#[cfg(feature = "serve")]
pub(crate) fn replace_handed_off(
    db: &mut Db<'_>,
    home: &str,
    handed: &[(String, String)],
) -> Result<(), DbError> {
    exec(db, &CLEAR_HANDED_OFF, &[Arg::Home(home)])?;
    for (delivery, body) in handed {
        exec(
            db,
            &PUT_HANDED_OFF,
            &[Arg::Home(home), Arg::Text(delivery), Arg::Text(body)],
        )?;
    }
    Ok(())
}

/// `home`'s hand-off list's documents, in delivery id order.
#[cfg(feature = "serve")]
pub(crate) fn handed_off(db: &mut Db<'_>, home: &str) -> Result<Vec<String>, DbError> {
    let rows = query(db, &HANDED_OFF, &[Arg::Home(home)], &[Col::Text])?;
    Ok(texts(rows))
}

#[cfg(feature = "serve")]
const IMPORT_STATE: Sql = Sql {
    sqlite: "SELECT moved_aside FROM imports WHERE source = ?1",
    postgres: "SELECT moved_aside::int4::int8 FROM serve_imports
               WHERE queue = $1 AND home = $2 AND source = $3",
};
#[cfg(feature = "serve")]
const RECORD_IMPORT: Sql = Sql {
    sqlite: "INSERT INTO imports (source, imported_at_millis) VALUES (?1, ?2)
             ON CONFLICT (source) DO NOTHING",
    postgres: "INSERT INTO serve_imports (queue, home, source, imported_at_millis)
               VALUES ($1, $2, $3, $4) ON CONFLICT (queue, home, source) DO NOTHING",
};
#[cfg(feature = "serve")]
const RECORD_MOVED: Sql = Sql {
    sqlite: "UPDATE imports SET moved_aside = 1 WHERE source = ?1",
    postgres: "UPDATE serve_imports SET moved_aside = true
               WHERE queue = $1 AND home = $2 AND source = $3",
};

/// Whether `home`'s old file `source` (its path under the home) was imported, and if so whether
/// it was moved aside: `None` when never imported.
#[cfg(feature = "serve")]
pub(crate) fn import_state(
    db: &mut Db<'_>,
    home: &str,
    source: &str,
) -> Result<Option<bool>, DbError> {
    let rows = query(
        db,
        &IMPORT_STATE,
        &[Arg::Home(home), Arg::Text(source)],
        &[Col::Int],
    )?;
    Ok(rows
        .first()
        .and_then(|row| row.first())
        .map(|moved| moved.int() != 0))
}

/// Records that `home`'s `source` was imported (not yet moved aside).
#[cfg(feature = "serve")]
pub(crate) fn record_import(
    db: &mut Db<'_>,
    home: &str,
    source: &str,
    now_millis: u64,
) -> Result<(), DbError> {
    exec(
        db,
        &RECORD_IMPORT,
        &[
            Arg::Home(home),
            Arg::Text(source),
            Arg::Int(int(now_millis)),
        ],
    )?;
    Ok(())
}

/// Records that `home`'s `source` was moved aside.
#[cfg(feature = "serve")]
pub(crate) fn record_moved(db: &mut Db<'_>, home: &str, source: &str) -> Result<(), DbError> {
    exec(db, &RECORD_MOVED, &[Arg::Home(home), Arg::Text(source)])?;
    Ok(())
}

#[cfg(feature = "serve")]
const PUT_PAYLOAD: Sql = Sql {
    sqlite: "INSERT INTO serve_payloads (delivery, task, turn, body) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (delivery) DO UPDATE SET task = excluded.task, turn = excluded.turn,
                 body = excluded.body",
    postgres: "INSERT INTO serve_payloads (queue, delivery, task, turn, body)
               VALUES ($1, $2, $3, $4, $5)
               ON CONFLICT (queue, delivery) DO UPDATE SET task = excluded.task,
                   turn = excluded.turn, body = excluded.body",
};
#[cfg(feature = "serve")]
const PRUNE_PAYLOADS: Sql = Sql {
    sqlite: "DELETE FROM serve_payloads WHERE delivery IN (
                 SELECT p.delivery FROM serve_payloads p
                 LEFT JOIN turns t ON t.task = p.task AND t.turn = p.turn
                 WHERE t.settled IS NULL OR t.settled = 1 LIMIT ?1)",
    postgres: "DELETE FROM serve_payloads WHERE queue = $1 AND delivery IN (
                   SELECT p.delivery FROM serve_payloads p
                   LEFT JOIN turns t ON t.queue = p.queue AND t.task = p.task AND t.turn = p.turn
                   WHERE p.queue = $1 AND (t.settled IS NULL OR t.settled) LIMIT $2)",
};
#[cfg(feature = "serve")]
const KEPT_PAYLOADS: Sql = Sql {
    sqlite: "SELECT p.task, p.turn, p.body FROM serve_payloads p
             JOIN turns t ON t.task = p.task AND t.turn = p.turn WHERE t.settled = 0",
    postgres: "SELECT p.task, p.turn, p.body FROM serve_payloads p
               JOIN turns t ON t.queue = p.queue AND t.task = p.task AND t.turn = p.turn
               WHERE p.queue = $1 AND NOT t.settled",
};

/// Keeps an accepted delivery's payload (committed with its turn; the turn's `payload` file is
/// written without a sync and restored from here at serve's start).
#[cfg(feature = "serve")]
pub(crate) fn put_payload(
    db: &mut Db<'_>,
    delivery: &str,
    task: &str,
    turn: u32,
    body: &[u8],
) -> Result<(), DbError> {
    exec(
        db,
        &PUT_PAYLOAD,
        &[
            Arg::Text(delivery),
            Arg::Text(task),
            Arg::Int(i64::from(turn)),
            Arg::Bytes(body),
        ],
    )?;
    Ok(())
}

/// Drops at most `limit` kept payloads whose turn ended or is gone.
#[cfg(feature = "serve")]
pub(crate) fn prune_payloads(db: &mut Db<'_>, most: usize) -> Result<usize, DbError> {
    exec(db, &PRUNE_PAYLOADS, &[Arg::Int(limit(most))])
}

/// The kept payloads of unfinished turns: `(task, turn, body)`. In PostgreSQL those of every
/// home of the queue: a turn's folder is in the home that queued it, so the caller keeps only
/// the turns whose folder it has.
#[cfg(feature = "serve")]
pub(crate) fn kept_payloads(db: &mut Db<'_>) -> Result<Vec<(String, u32, Vec<u8>)>, DbError> {
    let rows = query(db, &KEPT_PAYLOADS, &[], &[Col::Text, Col::Int, Col::Bytes])?;
    rows.into_iter()
        .map(|row| {
            let mut row = row.into_iter();
            let task = row.next().map(Val::text).unwrap_or_default();
            let turn = row.next().map_or(0, |v| v.int());
            let turn = u32::try_from(turn)
                .map_err(|_| DbError::Range(format!("turn {turn} is out of range")))?;
            let body = row.next().map(Val::bytes).unwrap_or_default();
            Ok((task, turn, body))
        })
        .collect()
}

const PAYLOAD_OF: Sql = Sql {
    sqlite: "SELECT body FROM serve_payloads WHERE task = ?1 AND turn = ?2 LIMIT 1",
    postgres: "SELECT body FROM serve_payloads WHERE queue = $1 AND task = $2 AND turn = $3
               LIMIT 1",
};

/// The kept payload of the turn `task`/`turn`, if any: what a runner on another host of the
/// queue writes into its own home's turn folder before the command starts (the file the
/// delivery's serve wrote is in the home that queued the turn).
pub(crate) fn payload_of(
    db: &mut Db<'_>,
    task: &str,
    turn: u32,
) -> Result<Option<Vec<u8>>, DbError> {
    let rows = query(
        db,
        &PAYLOAD_OF,
        &[Arg::Text(task), Arg::Int(i64::from(turn))],
        &[Col::Bytes],
    )?;
    Ok(rows
        .into_iter()
        .next()
        .and_then(|row| row.into_iter().next())
        .map(Val::bytes))
}
