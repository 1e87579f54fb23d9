//! The schema of `tollgate.db`: its versions, the migrations that bring a database to the newest
//! one (inside one durable write transaction, with the import of an earlier home's files), and
//! the reads of which version a database is at. Kept apart from the open path so each version's
//! SQL and the reason for it stand together.

use super::errors::{busy_or, sql_error};
use super::import::{import_records, read_old_queue};
use super::write::write_changes;
use crate::clock;
use crate::fsutil::FileError;
use crate::home::Home;
use crate::protocol::slots::{QueueState, QUEUE_FORMAT_VERSION};
use crate::queue::records;
use crate::queue::store::StoreError;
use rusqlite::{params, Connection, TransactionBehavior};
use std::path::Path;
use std::time::Instant;

/// The newest schema this tollgate writes; a database whose `schema_migrations` names a newer
/// one is refused (it was written by a newer tollgate).
pub const SCHEMA_VERSION: u32 = 10;

/// The schema's migrations in order: `(version, what it does, SQL)`. Each runs once, inside the
/// write transaction that records it in `schema_migrations`.
const MIGRATIONS: &[(u32, &str, &str)] = &[
    (1, "the queue as tables", SCHEMA_V1),
    (2, "scheduling: row priorities and the pause set", SCHEMA_V2),
    (3, "dependencies of queue rows", SCHEMA_V3),
    (4, "task and turn records", records::SCHEMA_V4),
    (
        5,
        "serve: dedupe marks, refused and handed-off deliveries",
        crate::queue::serve_tables::SCHEMA_V5,
    ),
    (6, "the sweep list", SWEEP_SCHEMA_V6),
    (7, "an index of the reserved rows", SCHEMA_V7),
    (
        8,
        "an index of the dependencies by the turn they name",
        SCHEMA_V8,
    ),
    (9, "an index of the parked rows in start order", SCHEMA_V9),
    (10, "an index of each task's parked rows", SCHEMA_V10),
];

/// Version 10: each task's parked rows by `queue_id`, so a submit of a `concurrent=N` task finds
/// the first row of its line (`steps::submit_line_reads`) without reading the whole line. An
/// index only (`IF NOT EXISTS`, as version 7).
const SCHEMA_V10: &str = "
CREATE INDEX IF NOT EXISTS entries_task_line ON entries (task, queue_id)
    WHERE state = 'parked';
";

/// Version 9: the parked rows in start order (priority descending, then `queue_id`), so a
/// finishing runner's section finds the first few it may start (`steps::finish_reads`) without a
/// scan of every parked row. An index only (`IF NOT EXISTS`, as version 7).
const SCHEMA_V9: &str = "
CREATE INDEX IF NOT EXISTS entries_start_order ON entries (priority DESC, queue_id)
    WHERE state = 'parked';
";

/// Version 8: the dependencies indexed by the turn they name, so a section that reads a task's
/// rows also finds the rows waiting on one of its turns ([`Store::transact_reading`](crate::queue::Store::transact_reading)) without a
/// scan of `entry_dependencies`. An index only (`IF NOT EXISTS`, as version 7).
///
/// It also keeps the number of rows in `queue_meta.row_count`, by triggers (so a row inserted or
/// deleted by hand is counted too), for the bound check of a section on a part (`MAX_QUEUE_ROWS`
/// needs the count only; `count(*)` reads a whole index). Rows are inserted with a plain `INSERT`
/// and changed with `UPDATE` ([`write_changes`]), never `INSERT OR REPLACE`, whose implicit delete
/// fires no trigger (and could remove a row the section did not load).
const SCHEMA_V8: &str = "
CREATE INDEX IF NOT EXISTS entry_dependencies_by_turn ON entry_dependencies (task, turn);
ALTER TABLE queue_meta ADD COLUMN row_count INTEGER NOT NULL DEFAULT 0;
UPDATE queue_meta SET row_count = (SELECT count(*) FROM entries);
CREATE TRIGGER entries_counted_in AFTER INSERT ON entries
    BEGIN UPDATE queue_meta SET row_count = row_count + 1 WHERE id = 1; END;
CREATE TRIGGER entries_counted_out AFTER DELETE ON entries
    BEGIN UPDATE queue_meta SET row_count = row_count - 1 WHERE id = 1; END;
";

/// Version 7: the rows holding a reservation, indexed (a few: one per slot being handed off), so
/// the active part of the queue ([`Store::load_active`](crate::queue::Store::load_active): the rows that are not parked, found by
/// `entries_by_state`, and the reserved ones) is read without a scan of the parked rows. `IF NOT
/// EXISTS`: an index only, so a database taken back to an earlier version by hand (the migration
/// tests do) migrates again.
const SCHEMA_V7: &str = "
CREATE INDEX IF NOT EXISTS entries_reserved ON entries (queue_id)
    WHERE reservation_token IS NOT NULL;
";

/// Version 3: a row's dependencies (`submit --after`), in their own table so rows without any
/// cost nothing: `pos` keeps the row's order; `rule` is `ended` (`--after`) or `succeeded`
/// (`--after-success`). At most `MAX_DEPENDENCIES` per row (the core refuses more).
const SCHEMA_V3: &str = "
CREATE TABLE entry_dependencies (
    queue_id INTEGER NOT NULL,
    pos INTEGER NOT NULL,
    task TEXT NOT NULL,
    turn INTEGER NOT NULL,
    rule TEXT NOT NULL CHECK (rule IN ('ended', 'succeeded')),
    PRIMARY KEY (queue_id, pos)
) STRICT;
";

/// Version 1: the queue document as tables. `entries` is FIFO by `queue_id` (the rowid, so the
/// primary key is its index); a row's state and owners are columns (`owner_*` is the waiting
/// row's owner or the dispatching row's dispatch owner; parked rows have none), its reservation
/// the `reserv*`/`child_*` columns. `runners` and `works` keep the document's order in `pos`.
const SCHEMA_V1: &str = "
CREATE TABLE queue_meta (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    version INTEGER NOT NULL,
    next_queue_id INTEGER NOT NULL
) STRICT;
CREATE TABLE entries (
    queue_id INTEGER PRIMARY KEY,
    task TEXT NOT NULL,
    turn INTEGER NOT NULL,
    enqueued_at_millis INTEGER NOT NULL,
    ready_at_millis INTEGER NOT NULL DEFAULT 0,
    state TEXT NOT NULL CHECK (state IN ('waiting', 'dispatching', 'parked')),
    owner_pid INTEGER,
    owner_start_micros INTEGER,
    enqueue_owner_pid INTEGER,
    enqueue_owner_start_micros INTEGER,
    reservation_token TEXT,
    reserver_pid INTEGER,
    reserver_start_micros INTEGER,
    child_pid INTEGER,
    child_start_micros INTEGER,
    cancel_requested INTEGER NOT NULL DEFAULT 0 CHECK (cancel_requested IN (0, 1)),
    UNIQUE (task, turn)
) STRICT;
CREATE INDEX entries_by_state ON entries (state, queue_id);
CREATE TABLE runners (
    pos INTEGER PRIMARY KEY,
    task TEXT NOT NULL,
    turn INTEGER NOT NULL,
    pid INTEGER NOT NULL,
    start_micros INTEGER NOT NULL,
    attached INTEGER NOT NULL
) STRICT;
CREATE INDEX runners_by_turn ON runners (task, turn);
CREATE TABLE works (
    pos INTEGER PRIMARY KEY,
    task TEXT NOT NULL,
    turn INTEGER NOT NULL,
    work_id TEXT NOT NULL,
    runner_pid INTEGER NOT NULL,
    runner_start_micros INTEGER NOT NULL,
    leader_pid INTEGER,
    leader_start_micros INTEGER,
    cgroup TEXT
) STRICT;
CREATE INDEX works_by_turn ON works (task, turn);
CREATE TABLE imports (
    source TEXT PRIMARY KEY,
    imported_at_millis INTEGER NOT NULL,
    moved_aside INTEGER NOT NULL DEFAULT 0
) STRICT;
";

/// Version 2: scheduling (spec/slots.md, "Scheduling"). A row's `priority` (0 for the rows of
/// version 1); the pause set: `queue_meta.paused_home` and one `paused_tasks` row per paused
/// task (bounded by the core's `MAX_PAUSED_TASKS`).
const SCHEMA_V2: &str = "
ALTER TABLE entries ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;
ALTER TABLE queue_meta ADD COLUMN paused_home INTEGER NOT NULL DEFAULT 0
    CHECK (paused_home IN (0, 1));
CREATE TABLE paused_tasks (task TEXT PRIMARY KEY) STRICT;
";

/// The sweep tables: schema version 6 of `tollgate.db`, and the whole schema of `sweep.db`
/// (`IF NOT EXISTS` so one text serves both). A row's body is its JSON document (the serde types
/// below stay the one definition); the key columns make additions idempotent. Rowid order is
/// insertion order, the order the file kept.
pub(crate) const SWEEP_SCHEMA_V6: &str = "
CREATE TABLE IF NOT EXISTS sweep_runs (
    run_id TEXT NOT NULL UNIQUE,
    body TEXT NOT NULL
) STRICT;
CREATE TABLE IF NOT EXISTS sweep_entries (
    path TEXT NOT NULL UNIQUE,
    run_id TEXT NOT NULL,
    body TEXT NOT NULL
) STRICT;
";

/// One read on the open path: whether the schema is [`SCHEMA_VERSION`] and no import waits for
/// its files to be moved aside. `None` when the tables are not there yet (a new database).
pub(super) fn up_to_date(conn: &Connection) -> Option<bool> {
    conn.query_row(
        "SELECT (SELECT coalesce(max(version), 0) FROM schema_migrations),
                (SELECT count(*) FROM imports WHERE moved_aside = 0)",
        [],
        |row| Ok(row.get::<_, u32>(0)? == SCHEMA_VERSION && row.get::<_, u32>(1)? == 0),
    )
    .ok()
}

/// The error for a database written by a newer tollgate: refused as a state file this one cannot read.
pub(super) fn newer_schema(path: &Path, version: u32) -> StoreError {
    StoreError::File(FileError::Corrupt {
        path: path.to_path_buf(),
        format: "tollgate database",
        detail: format!(
            "schema version {version} is newer than this tollgate understands ({SCHEMA_VERSION})"
        ),
    })
}

/// The highest applied migration; 0 for a database without tables.
pub(super) fn schema_version(conn: &Connection, path: &Path) -> Result<u32, StoreError> {
    let has_table: bool = conn
        .query_row(
            "SELECT count(*) > 0 FROM sqlite_schema WHERE type = 'table' AND name = 'schema_migrations'",
            [],
            |row| row.get(0),
        )
        .map_err(|e| sql_error(path, e))?;
    if !has_table {
        return Ok(0);
    }
    conn.query_row(
        "SELECT coalesce(max(version), 0) FROM schema_migrations",
        [],
        |row| row.get(0),
    )
    .map_err(|e| sql_error(path, e))
}

/// Applies the missing migrations in one durable write transaction; a new database also gets
/// the home's `queue.json` (if any) imported in it, so either all of it is in the tables or none.
pub(super) fn migrate(home: &Home, conn: &mut Connection, path: &Path) -> Result<(), StoreError> {
    conn.pragma_update(None, "synchronous", "FULL")
        .map_err(|e| sql_error(path, e))?;
    let started = Instant::now();
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(|e| busy_or(path, started, e))?;
    tx.execute_batch(
        "CREATE TABLE IF NOT EXISTS schema_migrations (
            version INTEGER PRIMARY KEY,
            description TEXT NOT NULL,
            applied_at_millis INTEGER NOT NULL
        ) STRICT;",
    )
    .map_err(|e| sql_error(path, e))?;
    // Read again under the write lock: another command may have migrated meanwhile.
    let current = schema_version(&tx, path)?;
    if current > SCHEMA_VERSION {
        return Err(newer_schema(path, current));
    }
    for &(version, description, sql) in MIGRATIONS.iter().filter(|m| m.0 > current) {
        tx.execute_batch(sql).map_err(|e| sql_error(path, e))?;
        tx.execute(
            "INSERT INTO schema_migrations (version, description, applied_at_millis) VALUES (?1, ?2, ?3)",
            params![version, description, clock::now_millis()],
        )
        .map_err(|e| sql_error(path, e))?;
        if version == 1 {
            tx.execute(
                "INSERT INTO queue_meta (id, version, next_queue_id) VALUES (1, ?1, 1)",
                [QUEUE_FORMAT_VERSION],
            )
            .map_err(|e| sql_error(path, e))?;
        }
    }
    // A new database imports `queue.json` once every table of the newest schema exists.
    if current == 0 {
        if let Some(old) = read_old_queue(home)? {
            write_changes(&tx, &QueueState::default(), &old).map_err(|e| sql_error(path, e))?;
            tx.execute(
                "INSERT INTO imports (source, imported_at_millis) VALUES ('queue.json', ?1)",
                [clock::now_millis()],
            )
            .map_err(|e| sql_error(path, e))?;
        }
    }
    // Version 4 moved the records into the database: the record files of a home that had them
    // (a new database, or one of version 1-3) are imported in the same transaction.
    if current < 4 {
        import_records(home, &tx, path)?;
    }
    tx.commit().map_err(|e| busy_or(path, started, e))
}
