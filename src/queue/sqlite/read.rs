//! Reading the queue's tables into the [`QueueState`] the core takes: the whole queue, the
//! active part (`load_active`), or the part a section's reads name, each by index searches, and
//! checked as the file loader checked it. Corrupt rows are refused naming the database.

use super::columns::{identity, int, token, uint};
use super::errors::sql_error;
use crate::fsutil::FileError;
use crate::protocol::slots::order::start_rank;
use crate::protocol::slots::steps::{Loaded, QueueReads};
use crate::protocol::slots::{
    AfterRule, Dependency, PauseSet, QueueEntry, QueueState, RowState, RunnerRecord,
    RunnerSlotReservation, TurnKey, WorkId, WorkRecord,
};
use crate::queue::store::{check_queue, StoreError};
use rusqlite::{Connection, OptionalExtension};
use std::path::Path;

/// Reads the queue's tables into the document the core takes, refusing (naming the database)
/// what [`crate::queue::parse_queue`] would refuse.
pub(super) fn read_queue(conn: &Connection, path: &Path) -> Result<QueueState, StoreError> {
    read_queue_part(conn, path, Part::All)
}

/// The first task (by name) with a parked row that no task pause holds, or NULL: a loose scan of
/// the partial index `entries_task_line (task, queue_id) WHERE state = 'parked'`, one search per
/// task, stopping at the first task not in `paused_tasks`, so at most one search per paused task
/// and one more, however many rows the paused tasks hold (spec/slots.md, "A paused backlog's
/// look").
///
/// The index is named: SQLite's planner otherwise took `entries_by_state` and read every parked
/// row for each `min(task)` (seen with EXPLAIN QUERY PLAN).
const UNPAUSED_TASK: &str = "WITH RECURSIVE skip(task) AS (
        SELECT min(task) FROM entries INDEXED BY entries_task_line WHERE state = 'parked'
        UNION ALL
        SELECT (SELECT min(task) FROM entries INDEXED BY entries_task_line
                WHERE state = 'parked' AND task > skip.task)
        FROM skip WHERE skip.task IN (SELECT task FROM paused_tasks))
    SELECT task FROM skip WHERE task NOT IN (SELECT task FROM paused_tasks) LIMIT 1";

/// Which rows [`read_queue_part`] reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Part {
    /// Every row: a section's input.
    All,
    /// The rows that are not parked, those holding a reservation and those a runner or work
    /// record names ([`Store::load_active`](crate::queue::Store::load_active)); not checked as a whole queue (it is not one),
    /// never published.
    Active,
    /// [`Part::Active`], the oldest parked row and the first parked row of the first task not
    /// paused ([`Store::load_active`](crate::queue::Store::load_active)): whether the queue has a parked row no pause holds decides
    /// whether a free slot can start anything (`steps::reconcile_would_act`).
    Look,
}

/// The columns of an `entries` row as [`entry_from_row`] reads them.
const ENTRY_COLUMNS: &str = "queue_id, task, turn, enqueued_at_millis, ready_at_millis, state,
    owner_pid, owner_start_micros, enqueue_owner_pid, enqueue_owner_start_micros,
    reservation_token, reserver_pid, reserver_start_micros, child_pid,
    child_start_micros, cancel_requested, priority";

/// [`read_queue`] of `part` of the rows.
pub(super) fn read_queue_part(
    conn: &Connection,
    path: &Path,
    part: Part,
) -> Result<QueueState, StoreError> {
    let sql = |e| sql_error(path, e);
    let mut state = read_meta(conn, path)?;
    push_rows(conn, path, &mut state.entries, &part_query(part), &[])?;
    // Already in order unless ids passed 2^63 (see [`int`]); the sort is then linear.
    state.entries.sort_by_key(|e| e.queue_id);
    match part {
        Part::All => read_dependencies(conn, &mut state).map_err(sql)?,
        Part::Active | Part::Look => read_dependencies_of(conn, &mut state.entries).map_err(sql)?,
    }
    state.runners = read_runners(conn, path)?;
    state.works = read_works(conn, path)?;
    if part == Part::All {
        check_queue(&state).map_err(|detail| corrupt(path, detail))?;
    }
    Ok(state)
}

/// The error for tables that do not hold a queue the loader accepts, naming the database.
fn corrupt(path: &Path, detail: String) -> StoreError {
    StoreError::File(FileError::Corrupt {
        path: path.to_path_buf(),
        format: "tollgate queue",
        detail,
    })
}

/// The queue's meta row and its pause set, with no rows yet.
fn read_meta(conn: &Connection, path: &Path) -> Result<QueueState, StoreError> {
    let sql = |e| sql_error(path, e);
    let (version, next_queue_id, paused_home): (u32, u64, bool) = conn
        .query_row(
            "SELECT version, next_queue_id, paused_home FROM queue_meta WHERE id = 1",
            [],
            |row| Ok((row.get(0)?, uint(row, 1)?, row.get(2)?)),
        )
        .optional()
        .map_err(sql)?
        .ok_or_else(|| corrupt(path, "the queue_meta row is missing".to_string()))?;
    let mut state = QueueState {
        version,
        next_queue_id,
        entries: Vec::new(),
        runners: Vec::new(),
        works: Vec::new(),
        paused: PauseSet {
            home: paused_home,
            tasks: Default::default(),
        },
    };
    let mut paused = conn
        .prepare_cached("SELECT task FROM paused_tasks ORDER BY task")
        .map_err(sql)?;
    state.paused.tasks = paused
        .query_map([], |row| row.get::<_, String>(0))
        .map_err(sql)?
        .collect::<Result<_, _>>()
        .map_err(sql)?;
    Ok(state)
}

/// The statement that reads the rows of `part`, in `queue_id` order.
fn part_query(part: Part) -> String {
    // Each arm names ids only, and the rows are read once by their key: the same rows as a
    // `UNION` of whole rows, but SQLite compiles the row's columns once instead of once per arm.
    // Every command compiles this statement afresh (a new process), and the arms of whole rows
    // cost it three times as much (docs/PERFORMANCE.md, "Compiling the look"). The rows a runner
    // or work record names are found from the records (a join on the `(task, turn)` key):
    // `(task, turn) IN (SELECT ...)` made SQLite scan every row.
    const ACTIVE_IDS: &str =
        "SELECT queue_id FROM entries WHERE state IN ('waiting', 'dispatching')
         UNION ALL
         SELECT queue_id FROM entries WHERE reservation_token IS NOT NULL
         UNION ALL
         SELECT e.queue_id FROM runners AS r
             JOIN entries AS e ON e.task = r.task AND e.turn = r.turn
         UNION ALL
         SELECT e.queue_id FROM works AS w
             JOIN entries AS e ON e.task = w.task AND e.turn = w.turn";
    match part {
        Part::All => format!("SELECT {ENTRY_COLUMNS} FROM entries ORDER BY queue_id"),
        Part::Active => format!(
            "SELECT {ENTRY_COLUMNS} FROM entries WHERE queue_id IN ({ACTIVE_IDS}) ORDER BY queue_id"
        ),
        Part::Look => format!(
            "SELECT {ENTRY_COLUMNS} FROM entries WHERE queue_id IN ({ACTIVE_IDS}
         UNION ALL
         SELECT min(queue_id) FROM entries WHERE state = 'parked'
         UNION ALL
         SELECT min(queue_id) FROM entries INDEXED BY entries_task_line
             WHERE state = 'parked' AND task = ({UNPAUSED_TASK}))
         ORDER BY queue_id"
        ),
    }
}

/// Appends the rows `query` (with `params`) selects to `extra`, each checked as a row.
fn push_rows(
    conn: &Connection,
    path: &Path,
    extra: &mut Vec<QueueEntry>,
    query: &str,
    params: &[&dyn rusqlite::ToSql],
) -> Result<(), StoreError> {
    let sql = |e| sql_error(path, e);
    let mut rows = conn.prepare_cached(query).map_err(sql)?;
    let mut found = rows.query(params).map_err(sql)?;
    while let Some(row) = found.next().map_err(sql)? {
        let queue_id = uint(row, 0).map_err(sql)?;
        let entry = entry_from_row(row)
            .map_err(sql)?
            .map_err(|detail| corrupt(path, format!("row with queue_id {queue_id}: {detail}")))?;
        extra.push(entry);
    }
    Ok(())
}

/// The runner records, in their order.
fn read_runners(conn: &Connection, path: &Path) -> Result<Vec<RunnerRecord>, StoreError> {
    let sql = |e| sql_error(path, e);
    let mut runners = conn
        .prepare_cached("SELECT task, turn, pid, start_micros, attached FROM runners ORDER BY pos")
        .map_err(sql)?;
    let runners = runners
        .query_map([], |row| {
            Ok(RunnerRecord {
                key: TurnKey::new(row.get::<_, String>(0)?, row.get(1)?),
                identity: identity(row, 2, 3)?.ok_or(rusqlite::Error::InvalidColumnType(
                    2,
                    "pid".into(),
                    rusqlite::types::Type::Null,
                ))?,
                attached: row.get(4)?,
            })
        })
        .map_err(sql)?
        .collect::<Result<_, _>>()
        .map_err(sql)?;
    Ok(runners)
}

/// The work records, in their order; a work without its runner, or with a malformed id, is
/// corrupt.
fn read_works(conn: &Connection, path: &Path) -> Result<Vec<WorkRecord>, StoreError> {
    let sql = |e| sql_error(path, e);
    let mut works = conn
        .prepare_cached(
            "SELECT task, turn, work_id, runner_pid, runner_start_micros, leader_pid,
                    leader_start_micros, cgroup
             FROM works ORDER BY pos",
        )
        .map_err(sql)?;
    let mut query = works.query([]).map_err(sql)?;
    let mut read = Vec::new();
    while let Some(row) = query.next().map_err(sql)? {
        let key = TurnKey::new(
            row.get::<_, String>(0).map_err(sql)?,
            row.get(1).map_err(sql)?,
        );
        let id_text: String = row.get(2).map_err(sql)?;
        let id = token(&id_text)
            .map(WorkId::from_token)
            .map_err(|detail| corrupt(path, format!("work of {key}: {detail}")))?;
        let runner = identity(row, 3, 4)
            .map_err(sql)?
            .ok_or_else(|| corrupt(path, format!("work of {key} has no runner")))?;
        let leader = identity(row, 5, 6).map_err(sql)?;
        let cgroup: Option<String> = row.get(7).map_err(sql)?;
        read.push(WorkRecord {
            key,
            id,
            runner,
            leader,
            cgroup,
        });
    }
    Ok(read)
}

/// The statements of a section's part beyond the active rows ([`read_part`]).
struct PartQueries {
    last: String,
    of_task: String,
    depending: String,
    of_turn: String,
    heads: String,
    heads_past: String,
    line_head: String,
}

impl PartQueries {
    fn new() -> Self {
        PartQueries {
            // The highest id as a `u64`: past 2^63 (see [`int`]) it is the highest negative one.
            last: format!(
                "SELECT {ENTRY_COLUMNS} FROM entries WHERE queue_id = coalesce(
            (SELECT max(queue_id) FROM entries WHERE queue_id < 0),
            (SELECT max(queue_id) FROM entries))"
            ),
            of_task: format!("SELECT {ENTRY_COLUMNS} FROM entries WHERE task = ?1"),
            depending: format!(
                "SELECT {ENTRY_COLUMNS} FROM entries WHERE queue_id IN
            (SELECT queue_id FROM entry_dependencies WHERE task = ?1)"
            ),
            of_turn: format!("SELECT {ENTRY_COLUMNS} FROM entries WHERE task = ?1 AND turn = ?2"),
            // The first parked rows in start order (`order::start_rank`), by the partial index
            // `entries_start_order` (version 9), named: the planner would rather take
            // `entries_by_state`'s range and sort every parked row. Ids past 2^63 read negative
            // (see [`int`]): the first of those (a range of `entries_by_state`, empty but for
            // hand-made queues) and of the others are taken, and the first of both kept.
            heads: format!(
                "SELECT {ENTRY_COLUMNS} FROM entries INDEXED BY entries_start_order
         WHERE state = 'parked' AND queue_id >= 0
         ORDER BY priority DESC, queue_id LIMIT ?1"
            ),
            heads_past: format!(
                "SELECT {ENTRY_COLUMNS} FROM entries WHERE state = 'parked' AND queue_id < 0
         ORDER BY priority DESC, queue_id LIMIT ?1"
            ),
            // A task's first parked row in the core's `u64` order of ids (those past 2^63 read
            // negative, see [`int`]), by the partial index `entries_task_line` (version 10).
            line_head: format!(
                "SELECT {ENTRY_COLUMNS} FROM entries WHERE queue_id = coalesce(
            (SELECT min(queue_id) FROM entries
             WHERE task = ?1 AND state = 'parked' AND queue_id >= 0),
            (SELECT min(queue_id) FROM entries
             WHERE task = ?1 AND state = 'parked' AND queue_id < 0))"
            ),
        }
    }
}

/// The part of the queue `reads` names (spec/store.md, "What a section loads"; the core's
/// [`crate::protocol::slots::steps::project`] is its reference): the active part
/// ([`Part::Active`]), then the last row, the rows of the named tasks and those depending on a
/// turn of them, and the named turns, each an index search; and the number of rows in all
/// (`queue_meta.row_count`, version 8). The part is checked as a queue (it is a subsequence of
/// one, so the structural invariants hold of it); the rows it leaves out are checked where they
/// were written and by `tollgate doctor`.
pub(super) fn read_part(
    conn: &Connection,
    path: &Path,
    reads: &QueueReads,
) -> Result<(QueueState, Loaded), StoreError> {
    let sql = |e| sql_error(path, e);
    let mut state = read_queue_part(conn, path, Part::Active)?;
    let q = PartQueries::new();
    let mut extra: Vec<QueueEntry> = Vec::new();
    push_rows(conn, path, &mut extra, &q.last, &[])?;
    for task in &reads.tasks {
        push_rows(conn, path, &mut extra, &q.of_task, &[task])?;
        push_rows(conn, path, &mut extra, &q.depending, &[task])?;
    }
    for key in &reads.turns {
        push_rows(conn, path, &mut extra, &q.of_turn, &[&key.task, &key.turn])?;
    }
    for task in &reads.lines {
        push_rows(conn, path, &mut extra, &q.line_head, &[task])?;
    }
    if reads.heads > 0 {
        read_heads(conn, path, &q, reads.heads, &mut extra)?;
    }
    extra.sort_by_key(|e| e.queue_id);
    extra.dedup_by_key(|e| e.queue_id);
    extra.retain(|e| {
        state
            .entries
            .binary_search_by_key(&e.queue_id, |a| a.queue_id)
            .is_err()
    });
    read_dependencies_of(conn, &mut extra).map_err(sql)?;
    state.entries.extend(extra);
    state.entries.sort_by_key(|e| e.queue_id);
    check_queue(&state).map_err(|detail| corrupt(path, detail))?;
    let queue_rows: i64 = conn
        .prepare_cached("SELECT row_count FROM queue_meta WHERE id = 1")
        .map_err(sql)?
        .query_row([], |row| row.get(0))
        .map_err(sql)?;
    Ok((
        state,
        Loaded::Part {
            reads: reads.clone(),
            queue_rows: usize::try_from(queue_rows).unwrap_or(usize::MAX),
        },
    ))
}

/// The first `count` parked rows in start order, and the rows their dependencies name, added
/// to `extra`.
fn read_heads(
    conn: &Connection,
    path: &Path,
    q: &PartQueries,
    count: usize,
    extra: &mut Vec<QueueEntry>,
) -> Result<(), StoreError> {
    let mut heads = Vec::new();
    let limit = i64::try_from(count).unwrap_or(i64::MAX);
    push_rows(conn, path, &mut heads, &q.heads, &[&limit])?;
    push_rows(conn, path, &mut heads, &q.heads_past, &[&limit])?;
    heads.sort_by_key(start_rank);
    heads.truncate(count);
    // Their dependencies name the rows to read besides; every row's own are read below.
    let mut with_dependencies = heads.clone();
    read_dependencies_of(conn, &mut with_dependencies).map_err(|e| sql_error(path, e))?;
    let waited_for: std::collections::BTreeSet<TurnKey> = with_dependencies
        .iter()
        .flat_map(|e| e.after.iter().map(|d| d.key.clone()))
        .collect();
    for key in &waited_for {
        push_rows(conn, path, extra, &q.of_turn, &[&key.task, &key.turn])?;
    }
    extra.extend(heads);
    Ok(())
}

/// One `entries` row as a queue entry; the inner `Err` says what in the row is inconsistent.
fn entry_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Result<QueueEntry, String>> {
    let owner = identity(row, 6, 7)?;
    let enqueue_owner = identity(row, 8, 9)?;
    let state_name: String = row.get(5)?;
    let state = match (state_name.as_str(), owner, enqueue_owner) {
        ("waiting", Some(owner), Some(enqueue_owner)) => RowState::Waiting {
            enqueue_owner,
            owner,
        },
        ("dispatching", Some(dispatch_owner), None) => RowState::Dispatching { dispatch_owner },
        ("parked", None, None) => RowState::Parked,
        (other, ..) => {
            return Ok(Err(format!(
                "state {other:?} does not match its owner columns"
            )))
        }
    };
    let reservation_token: Option<String> = row.get(10)?;
    let slot_reservation = match (reservation_token, identity(row, 11, 12)?) {
        (None, None) => None,
        (Some(text), Some(reserver)) => match token(&text) {
            Ok(token) => Some(RunnerSlotReservation {
                reserver,
                token,
                child: identity(row, 13, 14)?,
            }),
            Err(detail) => return Ok(Err(detail)),
        },
        _ => {
            return Ok(Err(
                "a reservation without its token or reserver".to_string()
            ))
        }
    };
    Ok(Ok(QueueEntry {
        queue_id: uint(row, 0)?,
        key: TurnKey::new(row.get::<_, String>(1)?, row.get(2)?),
        enqueued_at_millis: uint(row, 3)?,
        state,
        slot_reservation,
        ready_at_millis: uint(row, 4)?,
        cancel_requested: row.get(15)?,
        priority: row.get(16)?,
        after: Vec::new(),
    }))
}

/// Attaches the `entry_dependencies` rows to their entries (spec/store.md, version 3), found by
/// a binary search of the entries, which are in `queue_id` order by now (no map of the queue is
/// built for the few rows that have dependencies).
fn read_dependencies(conn: &Connection, state: &mut QueueState) -> rusqlite::Result<()> {
    let mut rows = conn.prepare_cached(
        "SELECT queue_id, task, turn, rule FROM entry_dependencies ORDER BY queue_id, pos",
    )?;
    let mut query = rows.query([])?;
    while let Some(row) = query.next()? {
        let queue_id = uint(row, 0)?;
        let rule = match row.get::<_, String>(3)?.as_str() {
            "succeeded" => AfterRule::Succeeded,
            _ => AfterRule::Ended,
        };
        // A dependency of a row that is gone would be a leftover; the row's removal deletes them.
        if let Ok(i) = state
            .entries
            .binary_search_by_key(&queue_id, |e| e.queue_id)
        {
            state.entries[i].after.push(Dependency {
                key: TurnKey::new(row.get::<_, String>(1)?, row.get(2)?),
                rule,
            });
        }
    }
    Ok(())
}

/// Attaches their `entry_dependencies` rows to `entries` (a part of the queue), one primary-key
/// search per entry: the cost follows the rows loaded, not the dependencies in the queue.
fn read_dependencies_of(conn: &Connection, entries: &mut [QueueEntry]) -> rusqlite::Result<()> {
    let mut rows = conn.prepare_cached(
        "SELECT task, turn, rule FROM entry_dependencies WHERE queue_id = ?1 ORDER BY pos",
    )?;
    for entry in entries.iter_mut() {
        let mut query = rows.query([int(entry.queue_id)])?;
        while let Some(row) = query.next()? {
            let rule = match row.get::<_, String>(2)?.as_str() {
                "succeeded" => AfterRule::Succeeded,
                _ => AfterRule::Ended,
            };
            entry.after.push(Dependency {
                key: TurnKey::new(row.get::<_, String>(0)?, row.get(1)?),
                rule,
            });
        }
    }
    Ok(())
}
