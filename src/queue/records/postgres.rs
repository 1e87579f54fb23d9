//! The records in PostgreSQL (schema version 5 of the store's database, every queue its own):
//! the tables, the client as the record layer uses it inside a write transaction ([`PgConn`]:
//! writes kept for the commit's message), a record access outside a section in a short
//! transaction of its own on the home store's client, and the one-time import of a home's record
//! files (spec/store.md, "Records in PostgreSQL").

use super::access::{signal_changed, Access, TurnRow};
use super::error::{db_error, store_error, DbError};
use super::home::{side_store, PgTarget};
use crate::fsutil::FileError;
use crate::home::Home;
use crate::queue::postgres::PostgresStore;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A PostgreSQL client as the record layer uses it inside a write transaction (a section's, or
/// a short one of its own): the task and turn records it writes are not sent one statement per
/// round trip but kept as SQL text ([`PgConn::take_pending`]) and sent with the transaction's
/// `COMMIT` message (spec/store.md, "PostgreSQL", "Round trips"). A read of a record the
/// transaction wrote is served from what it wrote; a read of a set of records (names, turn
/// numbers, the unfinished turns) first sends what is pending, and so does every statement that
/// is not the record layer's (the serve tables' statements run through [`PgConn::execute`] and
/// [`PgConn::query`], which also forget what was written). So every statement sees the transaction's writes in
/// the order they were made, as when each was sent at once.
pub(crate) struct PgConn {
    pub(super) client: postgres::Client,
    /// Whether writes are kept for the commit (inside a write transaction) or sent at once.
    pub(super) buffered: bool,
    /// The kept writes, each statement ended by `;`.
    pending: String,
    /// The task records this transaction wrote or read (`None`: no such record), by name.
    pub(super) tasks: std::collections::HashMap<String, Option<String>>,
    /// The turn records this transaction wrote, deleted (`None`) or read.
    pub(super) turns: std::collections::HashMap<(String, u32), Option<String>>,
}

impl PgConn {
    pub(super) fn new(client: postgres::Client, buffered: bool) -> Self {
        PgConn {
            client,
            buffered,
            pending: String::new(),
            tasks: Default::default(),
            turns: Default::default(),
        }
    }

    pub(super) fn into_client(self) -> postgres::Client {
        self.client
    }

    /// The client, for the store's own statements of the section (not the record layer's).
    pub(super) fn client(&mut self) -> &mut postgres::Client {
        &mut self.client
    }

    /// The writes kept for the commit, taken (the written bodies stay known: the commit's
    /// message sends them before anything else of the transaction is read).
    pub(crate) fn take_pending(&mut self) -> String {
        std::mem::take(&mut self.pending)
    }

    /// Sends the kept writes now.
    pub(super) fn send_pending(&mut self) -> Result<(), postgres::Error> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let sql = std::mem::take(&mut self.pending);
        self.client.batch_execute(&sql)
    }

    /// Before a statement that is not the record layer's: the kept writes go first, and what was
    /// written is forgotten (the statement may undo it).
    fn before_foreign(&mut self) -> Result<&mut postgres::Client, postgres::Error> {
        self.send_pending()?;
        self.tasks.clear();
        self.turns.clear();
        Ok(&mut self.client)
    }

    // Only the serve tables run foreign writes (`src/queue/serve_tables.rs`).
    #[cfg(feature = "serve")]
    pub(crate) fn execute(
        &mut self,
        sql: &str,
        params: &[&(dyn postgres::types::ToSql + Sync)],
    ) -> Result<u64, postgres::Error> {
        self.before_foreign()?.execute(sql, params)
    }

    pub(crate) fn query(
        &mut self,
        sql: &str,
        params: &[&(dyn postgres::types::ToSql + Sync)],
    ) -> Result<Vec<postgres::Row>, postgres::Error> {
        self.before_foreign()?.query(sql, params)
    }

    /// Remembers a task record read in a write transaction: it holds the queue's lock, under
    /// which every writer of the queue's records writes, so the record stays as read until the
    /// transaction writes it (bounded: a section reads the records its step names).
    pub(super) fn remember_task(&mut self, name: &str, body: Option<&str>) {
        if self.buffered && self.tasks.len() < PG_REMEMBERED_RECORDS {
            self.tasks
                .insert(name.to_string(), body.map(str::to_string));
        }
    }

    /// [`PgConn::remember_task`] for a turn record.
    pub(super) fn remember_turn(&mut self, task: &str, turn: u32, body: Option<&str>) {
        if self.buffered && self.turns.len() < PG_REMEMBERED_RECORDS {
            self.turns
                .insert((task.to_string(), turn), body.map(str::to_string));
        }
    }

    /// Makes room for one more written record: at the bound the kept writes are sent and the
    /// remembered records forgotten (later reads then go to the server, which has the writes).
    pub(super) fn room(&mut self) -> Result<(), postgres::Error> {
        if self.tasks.len() >= PG_REMEMBERED_RECORDS || self.turns.len() >= PG_REMEMBERED_RECORDS {
            self.before_foreign()?;
        }
        Ok(())
    }

    /// Keeps `sql` (one statement with its values as literals) for the commit; `false`: not in a
    /// write transaction, so the caller sends its statement itself.
    pub(super) fn keep(&mut self, sql: std::fmt::Arguments<'_>) -> bool {
        if !self.buffered {
            return false;
        }
        use std::fmt::Write as _;
        let _ = self.pending.write_fmt(sql);
        self.pending.push_str(";\n");
        true
    }
}

/// The parameter types of the record statements (`query_typed`: one round trip, no prepare).
pub(super) const TEXT: postgres::types::Type = postgres::types::Type::TEXT;
pub(super) const INT8: postgres::types::Type = postgres::types::Type::INT8;
pub(super) const BOOL: postgres::types::Type = postgres::types::Type::BOOL;

/// How many task (and how many turn) records a [`PgConn`] remembers at most.
const PG_REMEMBERED_RECORDS: usize = 1024;

/// `text` as an SQL literal ([`crate::queue::postgres::quoted_text`]).
pub(super) fn lit(text: &str) -> String {
    crate::queue::postgres::quoted_text(text)
}

/// An optional integer as an SQL literal.
pub(super) fn lit_int(value: Option<i64>) -> String {
    value.map_or_else(|| "NULL".to_string(), |v| v.to_string())
}

/// [`super::db::Db::put_turn`] on PostgreSQL: in a write transaction the row is kept for the commit
/// ([`PgConn`]); `create` first asks whether the turn number is taken (from what this
/// transaction wrote, else one read: the queue's lock is held, so no other writer can take it
/// before the commit).
pub(super) fn pg_keep_turn(
    c: &mut PgConn,
    queue: &str,
    row: &TurnRow<'_>,
    create: bool,
) -> Result<bool, DbError> {
    if !c.buffered {
        return Ok(pg_put_turn(&mut c.client, queue, row, create)? == 1);
    }
    let key = (row.task.to_string(), row.turn);
    if create {
        let taken = match c.turns.get(&key) {
            Some(body) => body.is_some(),
            None => c
                .client
                .query_typed_opt(
                    "SELECT 1 FROM turns WHERE queue = $1 AND task = $2 AND turn = $3",
                    &[
                        (&queue, TEXT),
                        (&row.task, TEXT),
                        (&i64::from(row.turn), INT8),
                    ],
                )?
                .is_some(),
        };
        if taken {
            return Ok(false);
        }
    }
    c.room()?;
    c.turns.insert(key, Some(row.body.to_string()));
    let kept = c.keep(format_args!(
        "INSERT INTO turns (queue, task, turn, short_id, settled, ended_at_millis, body)
         VALUES ({}, {}, {}, {}, {}, {}, {})
         ON CONFLICT (queue, task, turn) DO UPDATE SET short_id = EXCLUDED.short_id,
            settled = EXCLUDED.settled, ended_at_millis = EXCLUDED.ended_at_millis,
            body = EXCLUDED.body",
        lit(queue),
        lit(row.task),
        row.turn,
        lit_int(row.short_id.map(|id| id as i64)),
        row.settled,
        lit_int(row.ended_at_millis.map(|at| at as i64)),
        lit(row.body)
    ));
    debug_assert!(kept, "a buffered connection keeps its writes");
    Ok(true)
}

fn pg_put_turn(
    c: &mut impl postgres::GenericClient,
    queue: &str,
    row: &TurnRow<'_>,
    create: bool,
) -> Result<u64, postgres::Error> {
    let sql = if create {
        "INSERT INTO turns (queue, task, turn, short_id, settled, ended_at_millis, body)
         VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (queue, task, turn) DO NOTHING"
    } else {
        "INSERT INTO turns (queue, task, turn, short_id, settled, ended_at_millis, body)
         VALUES ($1, $2, $3, $4, $5, $6, $7)
         ON CONFLICT (queue, task, turn) DO UPDATE SET short_id = EXCLUDED.short_id,
            settled = EXCLUDED.settled, ended_at_millis = EXCLUDED.ended_at_millis,
            body = EXCLUDED.body"
    };
    // One round trip (`execute_typed`: no separate prepare).
    c.execute_typed(
        sql,
        &[
            (&queue, TEXT),
            (&row.task, TEXT),
            (&i64::from(row.turn), INT8),
            (&row.short_id.map(|id| id as i64), INT8),
            (&row.settled, BOOL),
            (&row.ended_at_millis.map(|at| at as i64), INT8),
            (&row.body, TEXT),
        ],
    )
}

/// PostgreSQL's version 5: SQLite's version 4 record tables with the `queue` column (every
/// queue its own records; two homes may share a queue from here on, spec/store.md), and
/// `record_imports`, one row per `(queue, home)` whose record files were imported.
pub(crate) const PG_SCHEMA_V5: &str = "
CREATE TABLE tasks (
    queue TEXT NOT NULL,
    name TEXT NOT NULL,
    next_turn BIGINT NOT NULL CHECK (next_turn >= 1),
    body TEXT NOT NULL,
    PRIMARY KEY (queue, name)
);
CREATE TABLE turns (
    queue TEXT NOT NULL,
    task TEXT NOT NULL,
    turn BIGINT NOT NULL CHECK (turn >= 1),
    short_id BIGINT,
    settled BOOLEAN NOT NULL,
    ended_at_millis BIGINT,
    body TEXT NOT NULL,
    PRIMARY KEY (queue, task, turn)
);
CREATE INDEX turns_by_short_id ON turns (queue, short_id) WHERE short_id IS NOT NULL;
CREATE INDEX turns_unfinished ON turns (queue, task, turn) WHERE NOT settled;
CREATE TABLE record_imports (
    queue TEXT NOT NULL,
    home TEXT NOT NULL,
    imported_at_millis BIGINT NOT NULL,
    moved_aside BOOLEAN NOT NULL,
    PRIMARY KEY (queue, home)
);
";

/// A record access of a PostgreSQL home outside any section, on the home store's client (or a
/// store built for it): a read in autocommit, a write in a short transaction that first takes
/// the queue's lock (as SQLite's `BEGIN IMMEDIATE` does), committed and then flushed once the
/// lock is released (spec/store.md, "PostgreSQL": no internal commit may be lost while processes
/// live on). `changed` is signalled after it.
pub(super) fn on_its_own<T>(
    home: &Home,
    target: PgTarget,
    access: Access,
    changed: Option<PathBuf>,
    f: impl FnOnce(&mut PgConn, &str) -> Result<T, FileError>,
) -> Result<T, FileError> {
    let key = (target.0.connect.clone(), target.1.clone());
    let store = side_store(&key, home, &target);
    let (_, queue, _, timeout) = target;
    let result = (|| {
        let name = store.name();
        let mut guard = store.client().map_err(store_error)?;
        let Some(client) = guard.take() else {
            unreachable!("client() connected");
        };
        // Back in its slot whatever `f` returns (a panic drops it: the next use connects).
        let mut conn = PgConn::new(client, access != Access::Read);
        let result = side_transaction(&name, &queue, timeout, access, &mut conn, f);
        *guard = Some(conn.into_client());
        result
    })();
    if result.is_ok() {
        if let Some(dir) = changed {
            signal_changed(&[dir]);
        }
    }
    result
}

/// The record access of [`on_its_own`], on the side store's client: a read
/// in autocommit; a write in a short transaction holding the queue's lock, its writes sent with
/// the `COMMIT` ([`PgConn`]).
fn side_transaction<T>(
    name: &Path,
    queue: &str,
    timeout: Duration,
    access: Access,
    conn: &mut PgConn,
    f: impl FnOnce(&mut PgConn, &str) -> Result<T, FileError>,
) -> Result<T, FileError> {
    {
        let pg = |e: postgres::Error| db_error(name, DbError::Postgres(e));
        if access == Access::Read {
            return f(conn, queue);
        }
        let millis = timeout.as_millis().clamp(1, i32::MAX as u128);
        // One round trip: `BEGIN`, the `SET LOCAL`s and the queue's lock in one message (the
        // queue name as an escaped literal, super::postgres::quoted_text).
        let locked = conn
            .client
            .batch_execute(&format!(
                "BEGIN; SET LOCAL lock_timeout = {millis}; SET LOCAL synchronous_commit = off; \
                 SELECT pg_advisory_xact_lock({}, hashtext({}))",
                crate::queue::postgres::LOCK_NAMESPACE,
                crate::queue::postgres::quoted_text(queue)
            ))
            .map_err(pg);
        let result = locked.and_then(|_| f(conn, queue));
        match result {
            // The kept writes and the `COMMIT` as one message; flushed after the lock is
            // released, before the write is reported done (spec/store.md, "PostgreSQL",
            // "Durability"). A write that fails skips the rest, `COMMIT` included.
            Ok(value) => {
                let mut sql = conn.take_pending();
                sql.push_str("COMMIT");
                let client = &mut conn.client;
                let sent = if sql.contains('\0') {
                    Err(FileError::Corrupt {
                        path: name.to_path_buf(),
                        format: "tollgate record table",
                        detail: "a value holds a NUL byte, which PostgreSQL text cannot store"
                            .to_string(),
                    })
                } else {
                    client
                        .batch_execute(&sql)
                        .and_then(|()| crate::queue::postgres::flush_wal(client))
                        .map_err(pg)
                };
                match sent {
                    Ok(()) => Ok(value),
                    Err(e) => {
                        let _ = client.batch_execute("ROLLBACK");
                        Err(e)
                    }
                }
            }
            Err(e) => {
                let _ = conn.client.batch_execute("ROLLBACK");
                Err(e)
            }
        }
    }
}

/// Imports `home`'s record files (an earlier version's, or a PostgreSQL home's before schema
/// version 5) into `store`'s queue on its first connection, in one transaction holding the
/// queue's lock, then renames each file `*.imported` and records that (finished by a later first
/// connection if a crash came in between). A file that would not load is refused with its path:
/// nothing imported, nothing moved.
pub(crate) fn pg_import_records(
    store: &PostgresStore,
    client: &mut postgres::Client,
    home: &Home,
) -> Result<(), crate::queue::StoreError> {
    let home_key = crate::queue::postgres::home_key(home);
    let queue = store.queue().to_string();
    let started = std::time::Instant::now();
    let mut tx = client.transaction().map_err(|e| store.error(e))?;
    tx.execute(
        "SELECT pg_advisory_xact_lock($1, hashtext($2))",
        &[&crate::queue::postgres::LOCK_NAMESPACE, &queue],
    )
    .map_err(|e| store.busy_or(started, e))?;
    let state: Option<bool> = tx
        .query_opt(
            "SELECT moved_aside FROM record_imports WHERE queue = $1 AND home = $2",
            &[&queue, &home_key],
        )
        .map_err(|e| store.error(e))?
        .map(|row| row.try_get(0))
        .transpose()
        .map_err(|e| store.error(e))?;
    if state == Some(true) {
        return tx.commit().map_err(|e| store.error(e));
    }
    if state.is_none() {
        let old = crate::queue::sqlite::read_old_records(home)?;
        let json = |e: serde_json::Error| crate::queue::StoreError::Database {
            path: store.name(),
            detail: format!("cannot render a record: {e}"),
        };
        for task in &old.tasks {
            let body = serde_json::to_string(task).map_err(json)?;
            tx.execute(
                "INSERT INTO tasks (queue, name, next_turn, body) VALUES ($1, $2, $3, $4)
                 ON CONFLICT (queue, name) DO NOTHING",
                &[&queue, &task.name, &i64::from(task.next_turn), &body],
            )
            .map_err(|e| store.error(e))?;
        }
        for turn in &old.turns {
            let body = serde_json::to_string(turn).map_err(json)?;
            let row = TurnRow {
                task: &turn.key.task,
                turn: turn.key.turn,
                short_id: turn.id,
                settled: turn.is_settled(),
                ended_at_millis: turn.ended_at_millis,
                body: &body,
            };
            pg_put_turn(&mut tx, &queue, &row, true).map_err(|e| store.error(e))?;
        }
        let nothing = old.tasks.is_empty() && old.turns.is_empty();
        tx.execute(
            "INSERT INTO record_imports (queue, home, imported_at_millis, moved_aside)
             VALUES ($1, $2, $3, $4)",
            &[
                &queue,
                &home_key,
                &(crate::clock::now_millis() as i64),
                &nothing,
            ],
        )
        .map_err(|e| store.error(e))?;
        tx.commit().map_err(|e| store.error(e))?;
        if nothing {
            return Ok(());
        }
    } else {
        tx.commit().map_err(|e| store.error(e))?;
    }
    crate::queue::sqlite::move_record_files_aside(home)?;
    client
        .execute(
            "UPDATE record_imports SET moved_aside = true WHERE queue = $1 AND home = $2",
            &[&queue, &home_key],
        )
        .map_err(|e| store.error(e))?;
    Ok(())
}
