//! A section in two round trips (spec/store.md, "PostgreSQL", "Round trips"): the statements of
//! a section's start (`BEGIN`, its `SET LOCAL`s, the locks, the reads) go to the server as one
//! simple-protocol query, and so do its writes with the `COMMIT`. Lock-serialised time is
//! what bounds a fleet's throughput (docs/PERFORMANCE.md, "Fleet"), and every round trip under the
//! locks costs two scheduler wake-ups, so a section sends two messages, not one per statement.
//!
//! **Why text, not parameters.** The sync `postgres` client sends one extended-protocol
//! statement per round trip and cannot pipeline; only the simple protocol runs several
//! statements from one message. Its statements carry their values as literals, written here by
//! [`push_text`] (an `E'…'` string with `\` and `'` escaped, which means the same whatever
//! `standard_conforming_strings` says) and by integer and boolean formatting. A value holding a
//! NUL byte (which PostgreSQL's `text` cannot hold and which would end the query string) is
//! refused before anything is sent ([`checked`]).
//!
//! **The reads as one statement.** A section's reads are one `SELECT` of one JSON document
//! ([`read_sql`]): the database clock (after the locks: the statements of one message run in
//! order), whether this host is drained, the lease table, and every table of the queue, each as a
//! `json_agg` column. One statement reads one snapshot, so the document is consistent even outside
//! a transaction (`load`).

use super::{PostgresStore, LOCK_NAMESPACE};
use crate::fsutil::FileError;
use crate::protocol::fleet::{FleetIdentity, HostId, Lease, LeaseTable, MAX_LEASES};
use crate::protocol::slots::steps::QueueReads;
use crate::protocol::slots::{
    AfterRule, Dependency, PauseSet, ProcessIdentity, QueueEntry, QueueState, RowState,
    RunnerRecord, RunnerSlotReservation, SlotToken, TurnKey, WorkId, WorkRecord,
};
use crate::queue::store::check_queue;
use crate::queue::StoreError;
use postgres::SimpleQueryMessage;
use serde::Deserialize;
use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;

/// A transaction begun by a message of its own on `client`: rolled back when dropped before
/// [`Open::commit`] sent its last message (an `Err`, a refusal, a panic).
pub(super) struct Open<'a> {
    client: &'a mut postgres::Client,
    done: bool,
}

impl<'a> Open<'a> {
    pub(super) fn new(client: &'a mut postgres::Client) -> Self {
        Open {
            client,
            done: false,
        }
    }

    pub(super) fn client(&mut self) -> &mut postgres::Client {
        self.client
    }

    /// Sends `sql`, which ends with `COMMIT`. On an error a statement failed and skipped the
    /// rest (the drop rolls back), or the `COMMIT` itself failed (the transaction is over).
    pub(super) fn commit(mut self, sql: &str) -> Result<(), postgres::Error> {
        let result = self.client.batch_execute(sql);
        self.done = result.is_ok();
        result
    }
}

impl Drop for Open<'_> {
    fn drop(&mut self) {
        if !self.done {
            let _ = self.client.batch_execute("ROLLBACK");
        }
    }
}

/// `text` as an SQL string literal: `E'…'` with `\` and `'` doubled.
pub(super) fn push_text(out: &mut String, text: &str) {
    out.push_str("E'");
    for c in text.chars() {
        match c {
            '\'' => out.push_str("''"),
            '\\' => out.push_str("\\\\"),
            c => out.push(c),
        }
    }
    out.push('\'');
}

/// `text` as an SQL string literal (see [`push_text`]).
pub(super) fn text(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 3);
    push_text(&mut out, text);
    out
}

/// `items` as an SQL array literal of `sql_type` (`ARRAY[]::text[]` when empty).
fn array<T: Literal>(items: impl IntoIterator<Item = T>, sql_type: &str) -> String {
    let mut out = String::from("ARRAY[");
    for (i, item) in items.into_iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        item.push(&mut out);
    }
    let _ = write!(out, "]::{sql_type}[]");
    out
}

/// A value written into a statement as a literal.
pub(super) trait Literal {
    fn push(&self, out: &mut String);
}

impl Literal for i64 {
    fn push(&self, out: &mut String) {
        let _ = write!(out, "{self}");
    }
}

impl Literal for i32 {
    fn push(&self, out: &mut String) {
        let _ = write!(out, "{self}");
    }
}

impl Literal for bool {
    fn push(&self, out: &mut String) {
        out.push_str(if *self { "true" } else { "false" });
    }
}

impl Literal for str {
    fn push(&self, out: &mut String) {
        push_text(out, self);
    }
}

impl Literal for String {
    fn push(&self, out: &mut String) {
        push_text(out, self);
    }
}

impl<T: Literal + ?Sized> Literal for &T {
    fn push(&self, out: &mut String) {
        (**self).push(out);
    }
}

impl<T: Literal> Literal for Option<T> {
    fn push(&self, out: &mut String) {
        match self {
            Some(value) => value.push(out),
            None => out.push_str("NULL"),
        }
    }
}

/// Appends `(v1, v2, …)`.
fn push_row(out: &mut String, values: &[&dyn Literal]) {
    out.push('(');
    for (i, value) in values.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        value.push(out);
    }
    out.push(')');
}

/// A multi-row `INSERT INTO {head} VALUES (…), (…) {tail};`, written only if it gets a row.
struct Insert<'a> {
    out: &'a mut String,
    head: &'a str,
    any: bool,
}

impl<'a> Insert<'a> {
    fn new(out: &'a mut String, head: &'a str) -> Self {
        Insert {
            out,
            head,
            any: false,
        }
    }

    fn row(&mut self, values: &[&dyn Literal]) {
        if self.any {
            self.out.push_str(", ");
        } else {
            self.out.push_str("INSERT INTO ");
            self.out.push_str(self.head);
            self.out.push_str(" VALUES ");
            self.any = true;
        }
        push_row(self.out, values);
    }

    fn finish(self, tail: &str) {
        if self.any {
            self.out.push('\n');
            self.out.push_str(tail);
            self.out.push_str(";\n");
        }
    }
}

/// `sql`, or the error a NUL byte in one of its values makes (nothing was sent).
pub(super) fn checked(store: &PostgresStore, sql: String) -> Result<String, StoreError> {
    if sql.contains('\0') {
        return Err(StoreError::Database {
            path: store.name(),
            detail: "a value holds a NUL byte, which PostgreSQL text cannot store".to_string(),
        });
    }
    Ok(sql)
}

/// Which rows of the queue [`read_sql`] reads (spec/store.md, "What a section loads"). A
/// section on a part reads by the prepared statement of [`Prepared::Part`].
#[derive(Clone, Copy, Debug)]
pub(super) enum Rows {
    /// Every row: `load`, and a section on the whole queue.
    All,
    /// The rows that are not parked, hold a reservation, or are named by a runner or work
    /// record, the oldest parked row and the first parked row of the first task not paused
    /// ([`crate::queue::Store::load_active`]); not checked as a queue, never published.
    Active,
}

/// The arms of every part's `WITH part AS (…)`: the active rows (not parked, holding a
/// reservation, or named by a runner or work record), each arm an index search
/// (`entries_by_state`, `entries_reserved`, the `(queue, task, turn)` key).
fn active_arms(q: &str) -> String {
    format!(
        "SELECT queue_id FROM entries WHERE queue = {q} AND state IN ('waiting', 'dispatching')
         UNION SELECT queue_id FROM entries WHERE queue = {q} AND reservation_token IS NOT NULL
         UNION SELECT e.queue_id FROM runners AS r JOIN entries AS e
             ON e.queue = {q} AND e.task = r.task AND e.turn = r.turn WHERE r.queue = {q}
         UNION SELECT e.queue_id FROM works AS w JOIN entries AS e
             ON e.queue = {q} AND e.task = w.task AND e.turn = w.turn WHERE w.queue = {q}"
    )
}

/// The `queue_id`s of the rows `rows` names, as the body of a `WITH part AS (…)`; `None` for
/// every row.
fn part_ids(q: &str, rows: Rows) -> Option<String> {
    match rows {
        Rows::All => None,
        // The look's active part also holds the oldest parked row (any would do) and the first
        // parked row of the first task (by name) no task pause holds: whether the queue has such
        // a row decides whether a free slot can start anything (`steps::reconcile_would_act`).
        // `entries_by_state` finds the first; the second is a loose scan of `entries_task_line`,
        // one search per paused task skipped.
        Rows::Active => Some(format!(
            "{}
         UNION SELECT min(queue_id) FROM entries WHERE queue = {q} AND state = 'parked'
         UNION SELECT min(queue_id) FROM entries WHERE queue = {q} AND state = 'parked' AND task = (
             WITH RECURSIVE skip(task) AS (
                 SELECT min(task) FROM entries WHERE queue = {q} AND state = 'parked'
                 UNION ALL
                 SELECT (SELECT min(e.task) FROM entries AS e
                         WHERE e.queue = {q} AND e.state = 'parked' AND e.task > skip.task)
                 FROM skip WHERE skip.task IN (SELECT task FROM paused_tasks WHERE queue = {q}))
             SELECT task FROM skip
             WHERE task NOT IN (SELECT task FROM paused_tasks WHERE queue = {q}) LIMIT 1)",
            active_arms(q)
        )),
    }
}

/// The one JSON document of a section's reads: the queue's tables (`rows` of its entries, or
/// none), and with `fleet` the database clock, whether that host is drained and the lease table
/// (at most `MAX_LEASES + 1` rows: a table over the bound is refused rather than read in part).
pub(super) fn read_sql(queue: &str, fleet: Option<&HostId>, rows: Option<Rows>) -> String {
    let q = text(queue);
    let host = fleet.map(|host| text(host.as_str()));
    let tables = rows.map(|rows| Tables {
        ids: part_ids(&q, rows),
        row_count: false,
    });
    document_sql(&q, host.as_deref(), tables)
}

/// What [`document_sql`] reads of the queue's tables: the entries whose `queue_id` the SQL
/// `ids` selects (every row when `None`), and whether the row count too.
struct Tables {
    ids: Option<String>,
    row_count: bool,
}

/// The one JSON document of [`read_sql`] and of the prepared part read ([`part_read_sql`]): `q`
/// and `host` are SQL expressions (a literal, or a parameter of the prepared statement).
fn document_sql(q: &str, host: Option<&str>, tables: Option<Tables>) -> String {
    let mut parts: Vec<String> = Vec::new();
    if let Some(host) = host {
        parts.push("'now', (extract(epoch FROM clock_timestamp()) * 1000)::bigint".to_string());
        parts.push(format!(
            "'drained', EXISTS (SELECT 1 FROM drained_hosts WHERE host = {host})"
        ));
        parts.push(lease_part());
    }
    let mut with = String::new();
    if let Some(Tables { ids, row_count }) = tables {
        let (entries_in, deps_in) = match &ids {
            Some(ids) => {
                let _ = writeln!(with, "WITH part AS ({ids})");
                (
                    " AND queue_id IN (SELECT queue_id FROM part)",
                    " AND queue_id IN (SELECT queue_id FROM part)",
                )
            }
            None => ("", ""),
        };
        let row_count = if row_count { ", row_count" } else { "" };
        parts.push(format!(
            "'meta', (SELECT row_to_json(m) FROM (SELECT version, next_queue_id, paused_home{row_count}
                FROM queue_meta WHERE queue = {q}) m)"
        ));
        parts.push(format!(
            "'paused', (SELECT coalesce(json_agg(task ORDER BY task), '[]')
                FROM paused_tasks WHERE queue = {q})"
        ));
        parts.push(format!(
            "'entries', (SELECT coalesce(json_agg(e ORDER BY e.queue_id), '[]') FROM (
                SELECT queue_id, task, turn, enqueued_at_millis, ready_at_millis, state,
                    owner_pid, owner_start_micros, enqueue_owner_pid, enqueue_owner_start_micros,
                    reservation_token, reserver_pid, reserver_start_micros, child_pid,
                    child_start_micros, cancel_requested, priority
                FROM entries WHERE queue = {q}{entries_in}) e)"
        ));
        parts.push(format!(
            "'deps', (SELECT coalesce(json_agg(d ORDER BY d.queue_id, d.pos), '[]') FROM (
                SELECT queue_id, pos, task, turn, rule FROM entry_dependencies
                WHERE queue = {q}{deps_in}) d)"
        ));
        parts.push(format!(
            "'runners', (SELECT coalesce(json_agg(r ORDER BY r.pos), '[]') FROM (
                SELECT pos, task, turn, pid, start_micros, attached FROM runners
                WHERE queue = {q}) r)"
        ));
        parts.push(format!(
            "'works', (SELECT coalesce(json_agg(w ORDER BY w.pos), '[]') FROM (
                SELECT pos, task, turn, work_id, runner_pid, runner_start_micros, leader_pid,
                    leader_start_micros, cgroup FROM works WHERE queue = {q}) w)"
        ));
    }
    format!(
        "{with}SELECT json_build_object({})::text",
        parts.join(",\n")
    )
}

/// A statement a connection prepares once and every later use executes (spec/store.md,
/// "PostgreSQL", "A part read planned once per connection"): the part read of a section without
/// and with the fleet's columns, and the active read of the repair's look.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Prepared {
    /// A section's part: the document of [`read_sql`] for the part a section names (the core's
    /// `steps::project` is the reference: the active rows, the last row, every row of the named
    /// tasks and every row depending on a turn of them, the named turns, the first parked row of
    /// each task of `lines`, and the first `heads` parked rows in start order with the rows they
    /// wait for) and the queue's row count (`queue_meta.row_count`, version 8). Parameters: `$1`
    /// the queue, `$2` the tasks, `$3`/`$4` the turns' tasks and numbers, `$5` the lines, `$6`
    /// the heads, `$7` (fleet) the host.
    Part { fleet: bool },
    /// [`Rows::Active`] ([`crate::queue::Store::load_active`]). Parameter: `$1` the queue.
    Active,
}

impl Prepared {
    /// How many there are: the length of a connection's "prepared" flags.
    pub(super) const COUNT: usize = 3;

    /// This statement's place among a connection's "prepared" flags.
    pub(super) fn index(self) -> usize {
        match self {
            Prepared::Part { fleet: false } => 0,
            Prepared::Part { fleet: true } => 1,
            Prepared::Active => 2,
        }
    }

    /// Its name and body. The name ends in a hash of the body, so a server session that
    /// outlives a process (a pooler that keeps prepared statements) never serves one tollgate's
    /// statement to another version under the same name.
    fn statement(self) -> &'static (String, String) {
        static STATEMENTS: std::sync::OnceLock<[(String, String); Prepared::COUNT]> =
            std::sync::OnceLock::new();
        let all = [
            Prepared::Part { fleet: false },
            Prepared::Part { fleet: true },
            Prepared::Active,
        ];
        &STATEMENTS.get_or_init(|| all.map(Prepared::named))[self.index()]
    }

    fn named(self) -> (String, String) {
        let (kind, body) = match self {
            Prepared::Part { fleet } => (
                if fleet {
                    "part_read_fleet"
                } else {
                    "part_read_home"
                },
                document_sql(
                    "$1",
                    fleet.then_some("$7"),
                    Some(Tables {
                        ids: Some(part_ids_by_parameters("$1")),
                        row_count: true,
                    }),
                ),
            ),
            Prepared::Active => (
                "active_read",
                document_sql(
                    "$1",
                    None,
                    Some(Tables {
                        ids: part_ids("$1", Rows::Active),
                        row_count: false,
                    }),
                ),
            ),
        };
        // FNV-1a: stable across builds and platforms, unlike std's hasher.
        let hash = body.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        });
        (format!("tollgate_{kind}_{hash:016x}"), body)
    }

    /// The parameters' types, and values of them that find nothing (the empty queue name).
    fn signature(self) -> (&'static str, &'static str) {
        match self {
            Prepared::Part { fleet: false } => (
                "text, text[], text[], bigint[], text[], bigint",
                "'', '{}', '{}', '{}', '{}', 0",
            ),
            Prepared::Part { fleet: true } => (
                "text, text[], text[], bigint[], text[], bigint, text",
                "'', '{}', '{}', '{}', '{}', 0, ''",
            ),
            Prepared::Active => ("text", "''"),
        }
    }
}

/// `PREPARE` of `which` on a connection, so that one statement serves every use and is planned
/// once per connection, here, outside any lock (a generic plan, kept with the statement: every
/// execution sets `plan_cache_mode` too), where a literal statement was parsed and planned
/// afresh by every use, a section's under the queue's lock.
pub(super) fn prepare_sql(which: Prepared) -> String {
    let (name, body) = which.statement();
    let (types, nothing) = which.signature();
    // One execution that finds nothing makes the generic plan and keeps it with the statement:
    // the planning, the costliest part of a cold session's first read, is done here instead of
    // by the first section under the queue's lock. A generic plan does not depend on the values.
    format!(
        "PREPARE {name} ({types}) AS {body};
         SET plan_cache_mode = force_generic_plan;
         EXECUTE {name} ({nothing});
         RESET plan_cache_mode"
    )
}

/// The active read of `queue` ([`Prepared::Active`]), one message outside a section. No
/// `BEGIN`: the message is one implicit transaction, which an error ends (its `SET` undone with
/// it), never a transaction block left open and aborted on the connection.
pub(super) fn execute_active_read_sql(queue: &str) -> String {
    format!(
        "SET plan_cache_mode = force_generic_plan;
         EXECUTE {} ({});
         RESET plan_cache_mode",
        Prepared::Active.statement().0,
        text(queue)
    )
}

/// The `queue_id`s of a part, with its lists as the parameters of [`Prepared::Part`]
/// (an empty list selects nothing). Past 2^63 (see [`int`]) an id reads negative: the highest
/// id is the highest negative one if any, and the first rows of a line or in start order are
/// taken among the ids of each sign, then the first of both.
fn part_ids_by_parameters(q: &str) -> String {
    let heads = format!(
        "SELECT queue_id FROM (
             (SELECT queue_id, priority FROM entries
              WHERE queue = {q} AND state = 'parked' AND queue_id >= 0
              ORDER BY priority DESC, queue_id LIMIT $6)
             UNION ALL
             (SELECT queue_id, priority FROM entries
              WHERE queue = {q} AND state = 'parked' AND queue_id < 0
              ORDER BY priority DESC, queue_id LIMIT $6)) AS h
         ORDER BY priority DESC, queue_id < 0, queue_id LIMIT $6"
    );
    format!(
        "{}
         UNION SELECT coalesce(
             (SELECT max(queue_id) FROM entries WHERE queue = {q} AND queue_id < 0),
             (SELECT max(queue_id) FROM entries WHERE queue = {q}))
         UNION SELECT queue_id FROM entries WHERE queue = {q} AND task = ANY ($2)
         UNION SELECT queue_id FROM entry_dependencies WHERE queue = {q} AND task = ANY ($2)
         UNION SELECT e.queue_id FROM unnest($3, $4) AS t (task, turn) JOIN entries AS e
             ON e.queue = {q} AND e.task = t.task AND e.turn = t.turn
         UNION SELECT coalesce(
             (SELECT min(queue_id) FROM entries
              WHERE queue = {q} AND task = l.task AND state = 'parked' AND queue_id >= 0),
             (SELECT min(queue_id) FROM entries
              WHERE queue = {q} AND task = l.task AND state = 'parked' AND queue_id < 0))
             FROM unnest($5) AS l (task)
         UNION ({heads})
         UNION SELECT e.queue_id FROM entry_dependencies AS d JOIN entries AS e
             ON e.queue = {q} AND e.task = d.task AND e.turn = d.turn
             WHERE d.queue = {q} AND d.queue_id IN ({heads})",
        active_arms(q)
    )
}

/// `EXECUTE` of the prepared part read ([`Prepared::Part`]) for `reads` of `queue`, with
/// `host` on a fleet: the statement a section's message runs after its locks.
pub(super) fn execute_part_read_sql(
    queue: &str,
    host: Option<&HostId>,
    reads: &QueueReads,
) -> String {
    let tasks = array(&reads.tasks, "text");
    let turn_tasks = array(reads.turns.iter().map(|k| &k.task), "text");
    let turn_numbers = array(reads.turns.iter().map(|k| i64::from(k.turn)), "bigint");
    let lines = array(&reads.lines, "text");
    let heads = i64::try_from(reads.heads).unwrap_or(i64::MAX);
    let mut sql = format!(
        "EXECUTE {} ({}, {tasks}, {turn_tasks}, {turn_numbers}, {lines}, {heads}",
        Prepared::Part {
            fleet: host.is_some()
        }
        .statement()
        .0,
        text(queue)
    );
    if let Some(host) = host {
        sql.push_str(", ");
        push_text(&mut sql, host.as_str());
    }
    String::push(&mut sql, ')'); // (not `Literal::push`)
    sql
}

/// The lease table's column of [`read_sql`] (ordered as it always was read).
fn lease_part() -> String {
    format!(
        "'leases', (SELECT coalesce(json_agg(l), '[]') FROM (
            SELECT host, pid, start_micros, expires_at_db_millis FROM leases
            ORDER BY host, pid, start_micros LIMIT {}) l)",
        MAX_LEASES as i64 + 1
    )
}

/// The lease step's reads: the database clock and the lease table.
pub(super) fn lease_read_sql() -> String {
    format!(
        "SELECT json_build_object('now', (extract(epoch FROM clock_timestamp()) * 1000)::bigint,
            {})::text",
        lease_part()
    )
}

/// The flush after a section (spec/store.md, "PostgreSQL", "Durability"): a transaction of its
/// own that writes one WAL record (a transactional logical message, which any role may emit and
/// which changes no table) and commits with `synchronous_commit = on`. Its commit waits until the
/// WAL is on disk up to its own record, and the WAL is one ordered log, so every commit before it
/// is then durable too, the section's own included. A section commits with `synchronous_commit =
/// off` under its locks and sends this after they are released: the disk's sync is no longer
/// held under the queue's and the fleet's locks (it was most of a section's lock time), and the
/// flushes of concurrent processes are shared. Nothing is told or done on a section's behalf
/// before its flush returned, so a server crash that loses the section loses nothing anyone
/// acted on; a commit made by another process after it is later in the log and lost with it.
pub(super) const FLUSH_SQL: &str = "BEGIN; SET LOCAL synchronous_commit = on; \
     SELECT pg_logical_emit_message(true, 'tollgate', 'flush'); COMMIT";

/// `BEGIN`, the section's `SET LOCAL`s and the lock statements, each ended by `;`.
pub(super) fn begin_sql(lock_timeout_millis: u128, synchronous: bool, locks: &[String]) -> String {
    let mut sql = format!(
        "BEGIN; SET LOCAL lock_timeout = {lock_timeout_millis}; \
         SET LOCAL synchronous_commit = {};\n",
        if synchronous { "on" } else { "off" }
    );
    for lock in locks {
        sql.push_str(lock);
        sql.push_str(";\n");
    }
    sql
}

/// The statement taking the advisory lock `(LOCK_NAMESPACE, key)`; `key` is SQL (a number, or
/// `hashtext(…)`).
pub(super) fn advisory_lock(key: &str) -> String {
    format!("SELECT pg_advisory_xact_lock({LOCK_NAMESPACE}, {key})")
}

/// The text of the last row the batch returned (its reading statement's one column).
pub(super) fn last_value(
    store: &PostgresStore,
    messages: &[SimpleQueryMessage],
) -> Result<String, StoreError> {
    messages
        .iter()
        .rev()
        .find_map(|m| match m {
            SimpleQueryMessage::Row(row) => Some(row.get(0).map(str::to_string)),
            _ => None,
        })
        .flatten()
        .ok_or_else(|| StoreError::Database {
            path: store.name(),
            detail: "the section's reading statement returned no row".to_string(),
        })
}

#[derive(Deserialize)]
pub(super) struct Document {
    #[serde(default)]
    pub(super) now: Option<i64>,
    #[serde(default)]
    pub(super) drained: Option<bool>,
    #[serde(default)]
    pub(super) leases: Option<Vec<LeaseRow>>,
    #[serde(default)]
    meta: Option<MetaRow>,
    #[serde(default)]
    paused: Vec<String>,
    #[serde(default)]
    entries: Vec<EntryRow>,
    #[serde(default)]
    deps: Vec<DepRow>,
    #[serde(default)]
    runners: Vec<RunnerRow>,
    #[serde(default)]
    works: Vec<WorkRow>,
}

#[derive(Deserialize)]
pub(super) struct LeaseRow {
    host: String,
    pid: i64,
    start_micros: i64,
    expires_at_db_millis: i64,
}

#[derive(Deserialize)]
struct MetaRow {
    version: i32,
    next_queue_id: i64,
    paused_home: bool,
    /// Read for a part only ([`Prepared::Part`]).
    #[serde(default)]
    row_count: Option<i64>,
}

#[derive(Deserialize)]
struct EntryRow {
    queue_id: i64,
    task: String,
    turn: i64,
    enqueued_at_millis: i64,
    ready_at_millis: i64,
    state: String,
    owner_pid: Option<i64>,
    owner_start_micros: Option<i64>,
    enqueue_owner_pid: Option<i64>,
    enqueue_owner_start_micros: Option<i64>,
    reservation_token: Option<String>,
    reserver_pid: Option<i64>,
    reserver_start_micros: Option<i64>,
    child_pid: Option<i64>,
    child_start_micros: Option<i64>,
    cancel_requested: bool,
    priority: i32,
}

#[derive(Deserialize)]
struct DepRow {
    queue_id: i64,
    task: String,
    turn: i64,
    rule: String,
}

#[derive(Deserialize)]
struct RunnerRow {
    task: String,
    turn: i64,
    pid: i64,
    start_micros: i64,
    attached: bool,
}

#[derive(Deserialize)]
struct WorkRow {
    task: String,
    turn: i64,
    work_id: String,
    runner_pid: i64,
    runner_start_micros: i64,
    leader_pid: Option<i64>,
    leader_start_micros: Option<i64>,
    cgroup: Option<String>,
}

/// The document the reading statement returned.
pub(super) fn parse_document(store: &PostgresStore, json: &str) -> Result<Document, StoreError> {
    serde_json::from_str(json).map_err(|e| StoreError::Database {
        path: store.name(),
        detail: format!("cannot decode the section's read: {e}"),
    })
}

fn turn_key(task: &str, turn: i64) -> Result<TurnKey, String> {
    u32::try_from(turn)
        .map(|n| TurnKey::new(task.to_string(), n))
        .map_err(|_| format!("turn {turn} of task {task:?} is out of range"))
}

/// A process identity from a pid and a start time; `None` when both are NULL.
fn identity(pid: Option<i64>, start: Option<i64>) -> Result<Option<ProcessIdentity>, String> {
    match (pid, start) {
        (Some(pid), Some(start)) => match u32::try_from(pid) {
            Ok(pid) => Ok(Some(ProcessIdentity {
                pid,
                start_time_micros: start as u64,
            })),
            Err(_) => Err(format!("pid {pid} is out of range")),
        },
        (None, None) => Ok(None),
        _ => Err("a pid without its start time (or the reverse)".to_string()),
    }
}

/// A slot token from its text, with the JSON loader's checks (a UUID, never nil).
fn token(text: &str) -> Result<SlotToken, String> {
    serde_json::from_value(serde_json::Value::String(text.to_string()))
        .map_err(|e| format!("token {text:?}: {e}"))
}

fn entry(row: &EntryRow) -> Result<QueueEntry, String> {
    let owner = identity(row.owner_pid, row.owner_start_micros)?;
    let enqueue_owner = identity(row.enqueue_owner_pid, row.enqueue_owner_start_micros)?;
    let state = match (row.state.as_str(), owner, enqueue_owner) {
        ("waiting", Some(owner), Some(enqueue_owner)) => RowState::Waiting {
            enqueue_owner,
            owner,
        },
        ("dispatching", Some(dispatch_owner), None) => RowState::Dispatching { dispatch_owner },
        ("parked", None, None) => RowState::Parked,
        (other, ..) => return Err(format!("state {other:?} does not match its owner columns")),
    };
    let reserver = identity(row.reserver_pid, row.reserver_start_micros)?;
    let child = identity(row.child_pid, row.child_start_micros)?;
    let slot_reservation = match (&row.reservation_token, reserver) {
        (None, None) => None,
        (Some(text), Some(reserver)) => Some(RunnerSlotReservation {
            reserver,
            token: token(text)?,
            child,
        }),
        _ => return Err("a reservation without its token or reserver".to_string()),
    };
    Ok(QueueEntry {
        queue_id: row.queue_id as u64,
        key: turn_key(&row.task, row.turn)?,
        enqueued_at_millis: row.enqueued_at_millis as u64,
        state,
        slot_reservation,
        ready_at_millis: row.ready_at_millis as u64,
        cancel_requested: row.cancel_requested,
        priority: row.priority,
        after: Vec::new(),
    })
}

impl Document {
    /// The queue's rows as the document the core takes, refusing what [`parse_queue`] would
    /// refuse.
    ///
    /// [`parse_queue`]: crate::queue::parse_queue
    pub(super) fn queue_state(&self, store: &PostgresStore) -> Result<QueueState, StoreError> {
        self.queue_rows(store, true)
    }

    /// The number of rows of the whole queue, as `queue_meta.row_count` holds it (read for a
    /// part only: [`Prepared::Part`]).
    pub(super) fn row_count(&self) -> Option<usize> {
        self.meta
            .as_ref()
            .and_then(|m| m.row_count)
            .map(|n| usize::try_from(n).unwrap_or(usize::MAX))
    }

    /// The rows read as the document the core takes; `check`: refusing what
    /// [`crate::queue::parse_queue`] would refuse (a part is checked too: its rows are a subsequence of the queue's, so
    /// the structural invariants hold of it; the active rows of `load_active` are not).
    pub(super) fn queue_rows(
        &self,
        store: &PostgresStore,
        check: bool,
    ) -> Result<QueueState, StoreError> {
        let corrupt = |detail: String| {
            StoreError::File(FileError::Corrupt {
                path: store.name(),
                format: "tollgate queue",
                detail,
            })
        };
        let meta = self
            .meta
            .as_ref()
            .ok_or_else(|| corrupt("the queue_meta row is missing".to_string()))?;
        let mut state = QueueState {
            version: u32::try_from(meta.version).map_err(|e| corrupt(format!("version: {e}")))?,
            next_queue_id: meta.next_queue_id as u64,
            entries: Vec::with_capacity(self.entries.len()),
            runners: Vec::with_capacity(self.runners.len()),
            works: Vec::with_capacity(self.works.len()),
            paused: PauseSet {
                home: meta.paused_home,
                tasks: self.paused.iter().cloned().collect(),
            },
        };
        for row in &self.entries {
            let entry = entry(row).map_err(|detail| {
                corrupt(format!("row with queue_id {}: {detail}", row.queue_id))
            })?;
            state.entries.push(entry);
        }
        let index: HashMap<u64, usize> = state
            .entries
            .iter()
            .enumerate()
            .map(|(i, e)| (e.queue_id, i))
            .collect();
        for row in &self.deps {
            let key = turn_key(&row.task, row.turn).map_err(corrupt)?;
            let rule = match row.rule.as_str() {
                "succeeded" => AfterRule::Succeeded,
                _ => AfterRule::Ended,
            };
            if let Some(&i) = index.get(&(row.queue_id as u64)) {
                state.entries[i].after.push(Dependency { key, rule });
            }
        }
        for row in &self.runners {
            let key = turn_key(&row.task, row.turn).map_err(corrupt)?;
            let identity = identity(Some(row.pid), Some(row.start_micros))
                .map_err(corrupt)?
                .ok_or_else(|| corrupt(format!("runner of {key} has no identity")))?;
            state.runners.push(RunnerRecord {
                key,
                identity,
                attached: row.attached,
            });
        }
        for row in &self.works {
            let key = turn_key(&row.task, row.turn).map_err(corrupt)?;
            let id = token(&row.work_id)
                .map(WorkId::from_token)
                .map_err(|detail| corrupt(format!("work of {key}: {detail}")))?;
            let runner = identity(Some(row.runner_pid), Some(row.runner_start_micros))
                .map_err(corrupt)?
                .ok_or_else(|| corrupt(format!("work of {key} has no runner")))?;
            let leader = identity(row.leader_pid, row.leader_start_micros).map_err(corrupt)?;
            state.works.push(WorkRecord {
                key,
                id,
                runner,
                leader,
                cgroup: row.cgroup.clone(),
            });
        }
        // Already in order unless ids passed 2^63 (as the SQLite store's BIGINT).
        state.entries.sort_by_key(|e| e.queue_id);
        if check {
            check_queue(&state).map_err(corrupt)?;
        }
        Ok(state)
    }

    /// The lease table and the database clock of a fleet read.
    pub(super) fn lease_table(
        &self,
        store: &PostgresStore,
    ) -> Result<(LeaseTable, u64), StoreError> {
        let corrupt = |detail: String| StoreError::Database {
            path: store.name(),
            detail,
        };
        let rows = self.leases.as_deref().unwrap_or_default();
        if rows.len() > MAX_LEASES {
            return Err(corrupt(format!(
                "the leases table holds more than {MAX_LEASES} rows"
            )));
        }
        let mut table = LeaseTable::default();
        for row in rows {
            let host =
                HostId::new(row.host.clone()).map_err(|e| corrupt(format!("leases: {e}")))?;
            let pid = u32::try_from(row.pid)
                .map_err(|_| corrupt(format!("leases: pid {} is out of range", row.pid)))?;
            table.leases.push(Lease {
                holder: FleetIdentity {
                    host,
                    process: ProcessIdentity {
                        pid,
                        start_time_micros: row.start_micros as u64,
                    },
                },
                expires_at_db_millis: row.expires_at_db_millis.max(0) as u64,
            });
        }
        Ok((table, self.now.unwrap_or(0).max(0) as u64))
    }
}

/// A `u64` as PostgreSQL's BIGINT, bit for bit (as in the SQLite store).
fn int(value: u64) -> i64 {
    value as i64
}

/// Appends the statements writing what differs between `old` (what the tables hold) and `new`:
/// the meta row if it changed, the pause set if it changed, the entries removed (one `DELETE`)
/// and added or changed (one multi-row upsert), the dependencies of the entries whose list
/// changed, and the runner and work lists whole when either changed.
pub(super) fn push_changes(out: &mut String, queue: &str, old: &QueueState, new: &QueueState) {
    let q = text(queue);
    if old.version != new.version
        || old.next_queue_id != new.next_queue_id
        || old.paused.home != new.paused.home
    {
        let _ = writeln!(
            out,
            "UPDATE queue_meta SET version = {}, next_queue_id = {}, paused_home = {} \
             WHERE queue = {q};",
            new.version as i32,
            int(new.next_queue_id),
            new.paused.home
        );
    }
    if old.paused.tasks != new.paused.tasks {
        let _ = writeln!(out, "DELETE FROM paused_tasks WHERE queue = {q};");
        let mut insert = Insert::new(out, "paused_tasks (queue, task)");
        for task in &new.paused.tasks {
            insert.row(&[&queue, task]);
        }
        insert.finish("");
    }
    let new_by_id: HashMap<u64, &QueueEntry> =
        new.entries.iter().map(|e| (e.queue_id, e)).collect();
    let old_by_id: HashMap<u64, &QueueEntry> =
        old.entries.iter().map(|e| (e.queue_id, e)).collect();
    let gone: Vec<String> = old
        .entries
        .iter()
        .filter(|e| !new_by_id.contains_key(&e.queue_id))
        .map(|e| int(e.queue_id).to_string())
        .collect();
    if !gone.is_empty() {
        let _ = writeln!(
            out,
            "DELETE FROM entries WHERE queue = {q} AND queue_id IN ({});",
            gone.join(", ")
        );
    }
    let pid = |o: Option<&ProcessIdentity>| o.map(|o| i64::from(o.pid));
    let start = |o: Option<&ProcessIdentity>| o.map(|o| int(o.start_time_micros));
    let mut insert = Insert::new(
        out,
        "entries (queue, queue_id, task, turn, enqueued_at_millis, ready_at_millis, state,
            owner_pid, owner_start_micros, enqueue_owner_pid, enqueue_owner_start_micros,
            reservation_token, reserver_pid, reserver_start_micros, child_pid, child_start_micros,
            cancel_requested, priority)",
    );
    for entry in &new.entries {
        if old_by_id.get(&entry.queue_id) == Some(&entry) {
            continue;
        }
        let (state, owner, enqueue_owner) = match &entry.state {
            RowState::Waiting {
                enqueue_owner,
                owner,
            } => ("waiting", Some(owner), Some(enqueue_owner)),
            RowState::Dispatching { dispatch_owner } => ("dispatching", Some(dispatch_owner), None),
            RowState::Parked => ("parked", None, None),
        };
        let reservation = entry.slot_reservation.as_ref();
        let reserver = reservation.map(|r| &r.reserver);
        let child = reservation.and_then(|r| r.child.as_ref());
        let token = reservation.map(|r| r.token.to_string());
        insert.row(&[
            &queue,
            &int(entry.queue_id),
            &entry.key.task,
            &i64::from(entry.key.turn),
            &int(entry.enqueued_at_millis),
            &int(entry.ready_at_millis),
            &state,
            &pid(owner),
            &start(owner),
            &pid(enqueue_owner),
            &start(enqueue_owner),
            &token,
            &pid(reserver),
            &start(reserver),
            &pid(child),
            &start(child),
            &entry.cancel_requested,
            &entry.priority,
        ]);
    }
    insert.finish(
        "ON CONFLICT (queue, queue_id) DO UPDATE SET
            task = EXCLUDED.task, turn = EXCLUDED.turn,
            enqueued_at_millis = EXCLUDED.enqueued_at_millis,
            ready_at_millis = EXCLUDED.ready_at_millis, state = EXCLUDED.state,
            owner_pid = EXCLUDED.owner_pid, owner_start_micros = EXCLUDED.owner_start_micros,
            enqueue_owner_pid = EXCLUDED.enqueue_owner_pid,
            enqueue_owner_start_micros = EXCLUDED.enqueue_owner_start_micros,
            reservation_token = EXCLUDED.reservation_token,
            reserver_pid = EXCLUDED.reserver_pid,
            reserver_start_micros = EXCLUDED.reserver_start_micros,
            child_pid = EXCLUDED.child_pid, child_start_micros = EXCLUDED.child_start_micros,
            cancel_requested = EXCLUDED.cancel_requested, priority = EXCLUDED.priority",
    );
    push_dependencies(out, queue, &old_by_id, &new_by_id);
    if old.runners != new.runners {
        let _ = writeln!(out, "DELETE FROM runners WHERE queue = {q};");
        let mut insert = Insert::new(
            out,
            "runners (queue, pos, task, turn, pid, start_micros, attached)",
        );
        for (pos, runner) in new.runners.iter().enumerate() {
            insert.row(&[
                &queue,
                &(pos as i32),
                &runner.key.task,
                &i64::from(runner.key.turn),
                &i64::from(runner.identity.pid),
                &int(runner.identity.start_time_micros),
                &runner.attached,
            ]);
        }
        insert.finish("");
    }
    if old.works != new.works {
        let _ = writeln!(out, "DELETE FROM works WHERE queue = {q};");
        let mut insert = Insert::new(
            out,
            "works (queue, pos, task, turn, work_id, runner_pid, runner_start_micros, \
             leader_pid, leader_start_micros, cgroup)",
        );
        for (pos, work) in new.works.iter().enumerate() {
            insert.row(&[
                &queue,
                &(pos as i32),
                &work.key.task,
                &i64::from(work.key.turn),
                &work.id.to_string(),
                &i64::from(work.runner.pid),
                &int(work.runner.start_time_micros),
                &pid(work.leader.as_ref()),
                &start(work.leader.as_ref()),
                &work.cgroup,
            ]);
        }
        insert.finish("");
    }
}

/// Rewrites the dependencies of the entries whose list changed (or that left): one `DELETE` and
/// one multi-row `INSERT`.
fn push_dependencies(
    out: &mut String,
    queue: &str,
    old_by_id: &HashMap<u64, &QueueEntry>,
    new_by_id: &HashMap<u64, &QueueEntry>,
) {
    let after = |map: &HashMap<u64, &QueueEntry>, id: &u64| -> Vec<Dependency> {
        map.get(id).map_or_else(Vec::new, |e| e.after.clone())
    };
    let mut changed: Vec<u64> = old_by_id
        .keys()
        .chain(new_by_id.keys())
        .filter(|id| after(old_by_id, id) != after(new_by_id, id))
        .copied()
        .collect::<HashSet<u64>>()
        .into_iter()
        .collect();
    if changed.is_empty() {
        return;
    }
    changed.sort_unstable();
    let ids: Vec<String> = changed.iter().map(|id| int(*id).to_string()).collect();
    let _ = writeln!(
        out,
        "DELETE FROM entry_dependencies WHERE queue = {} AND queue_id IN ({});",
        text(queue),
        ids.join(", ")
    );
    let mut insert = Insert::new(
        out,
        "entry_dependencies (queue, queue_id, pos, task, turn, rule)",
    );
    for id in &changed {
        for (pos, dependency) in after(new_by_id, id).iter().enumerate() {
            let rule = match dependency.rule {
                AfterRule::Ended => "ended",
                AfterRule::Succeeded => "succeeded",
            };
            insert.row(&[
                &queue,
                &int(*id),
                &(pos as i32),
                &dependency.key.task,
                &i64::from(dependency.key.turn),
                &rule,
            ]);
        }
    }
    insert.finish("");
}

/// Appends the statements writing the leases that differ between `original` and `table`: one
/// `DELETE` of the leases gone, one multi-row upsert of the new or changed ones.
pub(super) fn push_leases(out: &mut String, original: &LeaseTable, table: &LeaseTable) {
    let mut gone = String::new();
    for lease in original
        .leases
        .iter()
        .filter(|l| table.lease_of(&l.holder).is_none())
    {
        if !gone.is_empty() {
            gone.push_str(", ");
        }
        push_row(
            &mut gone,
            &[
                &lease.holder.host.as_str(),
                &i64::from(lease.holder.process.pid),
                &(lease.holder.process.start_time_micros as i64),
            ],
        );
    }
    if !gone.is_empty() {
        let _ = writeln!(
            out,
            "DELETE FROM leases WHERE (host, pid, start_micros) IN ({gone});"
        );
    }
    let mut insert = Insert::new(
        out,
        "leases (host, pid, start_micros, expires_at_db_millis)",
    );
    for lease in table
        .leases
        .iter()
        .filter(|l| original.lease_of(&l.holder) != Some(*l))
    {
        insert.row(&[
            &lease.holder.host.as_str(),
            &i64::from(lease.holder.process.pid),
            &(lease.holder.process.start_time_micros as i64),
            &(lease.expires_at_db_millis as i64),
        ]);
    }
    insert.finish(
        "ON CONFLICT (host, pid, start_micros)
         DO UPDATE SET expires_at_db_millis = EXCLUDED.expires_at_db_millis",
    );
}
