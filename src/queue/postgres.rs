//! The queue in a PostgreSQL database (spec/store.md, "PostgreSQL"): the store a home uses when
//! its `store` setting (or `TOLLGATE_STORE`) is a `postgres://` URL.
//!
//! The tables are SQLite's (src/queue/sqlite.rs) with a `queue` column, so several homes share
//! one database, each its own queue. A locked section is one transaction that first takes a
//! transaction-level advisory lock on its queue (`pg_advisory_xact_lock`, bounded by `SET LOCAL
//! lock_timeout`): sections of one queue are serialised exactly as `BEGIN IMMEDIATE` serialises
//! them in SQLite, so the task and turn record files a section writes stay guarded by it. The
//! lock is released by the commit or rollback itself, so a killed command never leaves it taken.
//! Every commit runs with `synchronous_commit = on` except a promise commit under
//! `durability = "os"`: unlike SQLite's, the server can crash while tollgate's processes live on,
//! so an internal transition it lost (a runner's take-over) would let reconcile start a turn whose
//! work still runs (S2); spec/store.md, "PostgreSQL", says why.

use super::store::{check_queue, Commit, Store, StoreError};
use crate::clock;
use crate::config::Durability;
use crate::fsutil::FileError;
use crate::protocol::slots::{
    AfterRule, Dependency, PauseSet, ProcessIdentity, QueueEntry, QueueState, RowState,
    RunnerRecord, RunnerSlotReservation, SlotToken, TurnKey, WorkId, WorkRecord,
    QUEUE_FORMAT_VERSION,
};
use postgres::error::SqlState;
use postgres::{Client, GenericClient, NoTls, Row};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

mod lease;
mod ops;
pub use lease::{FleetContext, LeaseSnapshot, LEASE_LOCK};
pub use ops::{
    DrainChange, DrainedHost, OutputStream, StoredOutput, TURN_OUTPUT_CHUNK_BYTES,
    TURN_OUTPUT_MAX_BYTES, TURN_OUTPUT_MAX_CHUNKS,
};

/// The newest schema this tollgate writes in a PostgreSQL database.
pub const POSTGRES_SCHEMA_VERSION: i32 = 7;

/// The first key of every advisory lock tollgate takes (`pg_advisory_xact_lock(int4, int4)`):
/// "tg" in ASCII, so tollgate's locks do not collide with another application's single-key ones.
pub(crate) const LOCK_NAMESPACE: i32 = 0x7467;
/// The second key of the migration lock; a queue's lock uses `hashtext(queue)`, which may be
/// any int4: a collision only serialises two queues' sections with each other (and with a
/// migration), never breaks one.
const MIGRATION_LOCK: i32 = 0;

/// How a section serialises with the others of its queue. [`PostgresLock::Advisory`] is the
/// store's; [`PostgresLock::Row`] is kept for the measurement in tests/store_postgres.rs that
/// chose between them (spec/store.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PostgresLock {
    /// `pg_advisory_xact_lock(LOCK_NAMESPACE, hashtext(queue))`.
    Advisory,
    /// `SELECT ... FROM queue_meta WHERE queue = $1 FOR UPDATE`.
    Row,
}

/// Version 1: the queue document as tables, one queue per `queue` name.
const SCHEMA_V1: &str = "
CREATE TABLE queue_meta (
    queue TEXT PRIMARY KEY,
    version INTEGER NOT NULL,
    next_queue_id BIGINT NOT NULL
);
CREATE TABLE entries (
    queue TEXT NOT NULL REFERENCES queue_meta (queue),
    queue_id BIGINT NOT NULL,
    task TEXT NOT NULL,
    turn BIGINT NOT NULL,
    enqueued_at_millis BIGINT NOT NULL,
    ready_at_millis BIGINT NOT NULL DEFAULT 0,
    state TEXT NOT NULL CHECK (state IN ('waiting', 'dispatching', 'parked')),
    owner_pid BIGINT,
    owner_start_micros BIGINT,
    enqueue_owner_pid BIGINT,
    enqueue_owner_start_micros BIGINT,
    reservation_token TEXT,
    reserver_pid BIGINT,
    reserver_start_micros BIGINT,
    child_pid BIGINT,
    child_start_micros BIGINT,
    cancel_requested BOOLEAN NOT NULL DEFAULT false,
    PRIMARY KEY (queue, queue_id),
    UNIQUE (queue, task, turn)
);
CREATE INDEX entries_by_state ON entries (queue, state, queue_id);
CREATE TABLE runners (
    queue TEXT NOT NULL REFERENCES queue_meta (queue),
    pos INTEGER NOT NULL,
    task TEXT NOT NULL,
    turn BIGINT NOT NULL,
    pid BIGINT NOT NULL,
    start_micros BIGINT NOT NULL,
    attached BOOLEAN NOT NULL,
    PRIMARY KEY (queue, pos)
);
CREATE TABLE works (
    queue TEXT NOT NULL REFERENCES queue_meta (queue),
    pos INTEGER NOT NULL,
    task TEXT NOT NULL,
    turn BIGINT NOT NULL,
    work_id TEXT NOT NULL,
    runner_pid BIGINT NOT NULL,
    runner_start_micros BIGINT NOT NULL,
    leader_pid BIGINT,
    leader_start_micros BIGINT,
    cgroup TEXT,
    PRIMARY KEY (queue, pos)
);
";

/// Version 2: scheduling, as the SQLite store's version 2: a row's `priority`, the pause set
/// (`queue_meta.paused_home`, one `paused_tasks` row per paused task of a queue).
const SCHEMA_V2: &str = "
ALTER TABLE entries ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;
ALTER TABLE queue_meta ADD COLUMN paused_home BOOLEAN NOT NULL DEFAULT false;
CREATE TABLE paused_tasks (
    queue TEXT NOT NULL REFERENCES queue_meta (queue),
    task TEXT NOT NULL,
    PRIMARY KEY (queue, task)
);
";

/// Version 3: a row's dependencies (`submit --after`), as in the SQLite store.
const SCHEMA_V3: &str = "
CREATE TABLE entry_dependencies (
    queue TEXT NOT NULL REFERENCES queue_meta (queue),
    queue_id BIGINT NOT NULL,
    pos INTEGER NOT NULL,
    task TEXT NOT NULL,
    turn BIGINT NOT NULL,
    rule TEXT NOT NULL CHECK (rule IN ('ended', 'succeeded')),
    PRIMARY KEY (queue, queue_id, pos)
);
";

const MIGRATIONS: &[(i32, &str, &str)] = &[
    (1, "the queue as tables", SCHEMA_V1),
    (2, "scheduling: row priorities and the pause set", SCHEMA_V2),
    (3, "dependencies of queue rows", SCHEMA_V3),
    (4, "the fleet's leases", lease::SCHEMA_V4_LEASES),
    (5, "task and turn records", super::records::PG_SCHEMA_V5),
    (6, "drained hosts and the turns' output", ops::SCHEMA_V6_OPS),
    (
        7,
        "serve: dedupe marks, refused, handed-off deliveries and payloads",
        super::serve_tables::PG_SCHEMA_V7,
    ),
];

/// A `store` URL split into what the client connects with and the queue it names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PostgresUrl {
    /// The URL without tollgate's own `queue` parameter (the client refuses unknown ones).
    pub connect: String,
    /// The URL with its password replaced by `***`: what errors and `status` show.
    pub redacted: String,
    /// The `?queue=` parameter, if given.
    pub queue: Option<String>,
}

/// The longest queue name accepted (it is a key in every table).
pub const MAX_QUEUE_NAME_BYTES: usize = 200;

impl PostgresUrl {
    /// Whether `store` names a PostgreSQL database (rather than the home's SQLite database).
    pub fn is_postgres(store: &str) -> bool {
        store.starts_with("postgres://") || store.starts_with("postgresql://")
    }

    /// Splits `url`; `Err` says what is wrong with it (the caller names the setting).
    pub fn parse(url: &str) -> Result<PostgresUrl, String> {
        if !Self::is_postgres(url) {
            return Err(format!(
                "{:?} is neither \"sqlite\" nor a postgres:// or postgresql:// URL",
                redact(url)
            ));
        }
        let (base, query) = match url.split_once('?') {
            Some((base, query)) => (base, Some(query)),
            None => (url, None),
        };
        let mut queue = None;
        let mut kept = Vec::new();
        for pair in query.into_iter().flat_map(|q| q.split('&')) {
            match pair.split_once('=') {
                Some(("queue", value)) => {
                    if value.is_empty() || value.len() > MAX_QUEUE_NAME_BYTES {
                        return Err(format!(
                            "queue={value:?}: a queue name has 1 to {MAX_QUEUE_NAME_BYTES} bytes"
                        ));
                    }
                    queue = Some(value.to_string());
                }
                _ if !pair.is_empty() => kept.push(pair),
                _ => {}
            }
        }
        let connect = if kept.is_empty() {
            base.to_string()
        } else {
            format!("{base}?{}", kept.join("&"))
        };
        connect
            .parse::<postgres::Config>()
            .map_err(|e| format!("{}: {e}", redact(&connect)))?;
        Ok(PostgresUrl {
            redacted: redact(&connect),
            connect,
            queue,
        })
    }
}

/// `url` with the password of its user part and any `password=` parameter replaced by `***`.
pub fn redact(url: &str) -> String {
    let mut out = url.to_string();
    if let Some(scheme_end) = out.find("://") {
        let rest = &out[scheme_end + 3..];
        let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
        if let Some(at) = rest[..authority_end].rfind('@') {
            if let Some(colon) = rest[..at].find(':') {
                let start = scheme_end + 3 + colon + 1;
                let end = scheme_end + 3 + at;
                out.replace_range(start..end, "***");
            }
        }
    }
    if let Some(q) = out.find('?') {
        let (base, query) = out.split_at(q + 1);
        let query: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some(("password", _)) => "password=***".to_string(),
                _ => pair.to_string(),
            })
            .collect();
        out = format!("{base}{}", query.join("&"));
    }
    out
}

/// The queue of one home in a PostgreSQL database. Building one does no IO; the connection is
/// opened (and the schema migrated) on first use and kept.
pub struct PostgresStore {
    url: PostgresUrl,
    queue: String,
    lock_timeout: Duration,
    durability: Durability,
    lock: PostgresLock,
    /// The home whose task and turn records this queue holds: its record files of an earlier
    /// version are imported on the first connection (spec/store.md, "PostgreSQL").
    home: Option<crate::home::Home>,
    client: Mutex<Option<Client>>,
    /// Set on a home's store: every section reads the leases (spec/fleet.md).
    fleet: Option<FleetContext>,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("url", &self.url.redacted)
            .field("queue", &self.queue)
            .field("lock_timeout", &self.lock_timeout)
            .field("durability", &self.durability)
            .finish()
    }
}

impl PostgresStore {
    /// The store of queue `queue` at `url` (`url.queue` is ignored here: the caller decided).
    pub fn new(
        url: PostgresUrl,
        queue: String,
        lock_timeout: Duration,
        durability: Durability,
    ) -> Self {
        PostgresStore {
            url,
            queue,
            lock_timeout,
            durability,
            lock: PostgresLock::Advisory,
            home: None,
            client: Mutex::new(None),
            fleet: None,
        }
    }

    /// The same store holding `home`'s task and turn records (importing its record files).
    pub fn for_home(mut self, home: crate::home::Home) -> Self {
        self.home = Some(home);
        self
    }

    /// The `store` URL and the queue: what the record layer keys this store's records by.
    pub(crate) fn record_key(&self) -> (String, String) {
        (self.url.connect.clone(), self.queue.clone())
    }

    /// The same store serialising its sections by `lock` (for the measurement).
    pub fn with_lock(mut self, lock: PostgresLock) -> Self {
        self.lock = lock;
        self
    }

    pub fn queue(&self) -> &str {
        &self.queue
    }

    /// The database as errors name it (password redacted).
    pub fn redacted_url(&self) -> &str {
        &self.url.redacted
    }

    pub(crate) fn name(&self) -> PathBuf {
        PathBuf::from(format!("{} (queue {:?})", self.url.redacted, self.queue))
    }

    pub(crate) fn error(&self, error: postgres::Error) -> StoreError {
        StoreError::Database {
            path: self.name(),
            detail: describe(&error),
        }
    }

    /// The open connection, connecting (and migrating) on first use. A connection that broke is
    /// dropped so the next call connects again.
    pub(crate) fn client(&self) -> Result<MutexGuard<'_, Option<Client>>, StoreError> {
        let mut guard = self.client.lock().unwrap_or_else(|e| e.into_inner());
        if guard.as_ref().is_some_and(|c| c.is_closed()) {
            *guard = None;
        }
        if guard.is_none() {
            let mut config: postgres::Config = self
                .url
                .connect
                .parse()
                .map_err(|e: postgres::Error| self.error(e))?;
            if config.get_connect_timeout().is_none() {
                config.connect_timeout(self.lock_timeout.max(Duration::from_secs(1)));
            }
            let mut client = config.connect(NoTls).map_err(|e| StoreError::Database {
                path: self.name(),
                detail: format!("cannot connect: {}", describe(&e)),
            })?;
            self.migrate(&mut client)?;
            if let Some(home) = &self.home {
                super::records::pg_import_records(self, &mut client, home)?;
            }
            *guard = Some(client);
        }
        Ok(guard)
    }

    /// Applies the missing migrations and creates this queue's meta row, in one transaction
    /// serialised with every other tollgate's migration by an advisory lock.
    fn migrate(&self, client: &mut Client) -> Result<(), StoreError> {
        let started = Instant::now();
        let mut tx = client.transaction().map_err(|e| self.error(e))?;
        self.set_lock_timeout(&mut tx)?;
        tx.execute(
            "SELECT pg_advisory_xact_lock($1, $2)",
            &[&LOCK_NAMESPACE, &MIGRATION_LOCK],
        )
        .map_err(|e| self.busy_or(started, e))?;
        tx.batch_execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations (
                version INTEGER PRIMARY KEY,
                description TEXT NOT NULL,
                applied_at_millis BIGINT NOT NULL
            )",
        )
        .map_err(|e| self.error(e))?;
        let current: i32 = tx
            .query_one(
                "SELECT coalesce(max(version), 0) FROM schema_migrations",
                &[],
            )
            .and_then(|row| row.try_get(0))
            .map_err(|e| self.error(e))?;
        if current > POSTGRES_SCHEMA_VERSION {
            return Err(StoreError::Database {
                path: self.name(),
                detail: format!(
                    "schema version {current} is newer than this tollgate understands \
                     ({POSTGRES_SCHEMA_VERSION})"
                ),
            });
        }
        for &(version, description, sql) in MIGRATIONS.iter().filter(|m| m.0 > current) {
            tx.batch_execute(sql).map_err(|e| self.error(e))?;
            tx.execute(
                "INSERT INTO schema_migrations (version, description, applied_at_millis)
                 VALUES ($1, $2, $3)",
                &[&version, &description, &int(clock::now_millis())],
            )
            .map_err(|e| self.error(e))?;
        }
        tx.execute(
            "INSERT INTO queue_meta (queue, version, next_queue_id) VALUES ($1, $2, 1)
             ON CONFLICT (queue) DO NOTHING",
            &[&self.queue, &(QUEUE_FORMAT_VERSION as i32)],
        )
        .map_err(|e| self.error(e))?;
        tx.commit().map_err(|e| self.error(e))
    }

    fn set_lock_timeout(&self, tx: &mut impl GenericClient) -> Result<(), StoreError> {
        // SET takes no parameters; the value is a number this process formatted.
        let millis = self.lock_timeout.as_millis().clamp(1, i32::MAX as u128);
        tx.batch_execute(&format!("SET LOCAL lock_timeout = {millis}"))
            .map_err(|e| self.error(e))
    }

    /// [`StoreError::Busy`] when the lock stayed taken for all of `lock_timeout`.
    pub(crate) fn busy_or(&self, started: Instant, error: postgres::Error) -> StoreError {
        if error.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) {
            StoreError::Busy {
                path: self.name(),
                waited_millis: started.elapsed().as_millis(),
            }
        } else {
            self.error(error)
        }
    }

    /// [`Store::load`], callable without importing the trait.
    pub fn load(&self) -> Result<QueueState, StoreError> {
        Store::load(self)
    }
}

/// The server's message (with its detail) rather than the client's terse "db error".
pub(crate) fn describe(error: &postgres::Error) -> String {
    match error.as_db_error() {
        Some(db) => match db.detail() {
            Some(detail) => format!("{}: {detail}", db.message()),
            None => db.message().to_string(),
        },
        None => error.to_string(),
    }
}

impl Store for PostgresStore {
    /// A read-only REPEATABLE READ transaction: a consistent snapshot without the lock.
    fn load(&self) -> Result<QueueState, StoreError> {
        let mut guard = self.client()?;
        let Some(client) = guard.as_mut() else {
            unreachable!("client() connected");
        };
        let mut tx = client
            .build_transaction()
            .isolation_level(postgres::IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .map_err(|e| self.error(e))?;
        let state = self.read_queue(&mut tx)?;
        tx.commit().map_err(|e| self.error(e))?;
        Ok(state)
    }

    fn transact_as<R, E>(
        &self,
        commit: Commit,
        change: impl FnOnce(&mut QueueState) -> Result<R, E>,
    ) -> Result<R, E>
    where
        E: From<StoreError>,
    {
        let mut guard = self.client()?;
        // Only what this process is about to promise may be left to the server's WAL writer,
        // and only when the home said so: a lost internal commit would hide a live process.
        let durable = !(commit == Commit::Promise && self.durability == Durability::Os);
        let started = Instant::now();
        // The client is lent to the record layer for the section (records::PgSection): task and
        // turn records written by `change` commit with it. Dropping `section` (an `Err`, a
        // panic) rolls the transaction back and puts the client back.
        let Some(section) = super::records::PgSection::lend(&mut guard, self.record_key()) else {
            unreachable!("client() connected, and the client is back outside a section");
        };
        section
            .with(|c| c.batch_execute("BEGIN"))
            .map_err(|e| self.error(e))?;
        section.with(|c| self.set_lock_timeout(c))?;
        let sync = if durable { "on" } else { "off" };
        section
            .with(|c| c.batch_execute(&format!("SET LOCAL synchronous_commit = {sync}")))
            .map_err(|e| self.error(e))?;
        section
            .with(|c| match self.lock {
                PostgresLock::Advisory => c
                    .execute(
                        "SELECT pg_advisory_xact_lock($1, hashtext($2))",
                        &[&LOCK_NAMESPACE, &self.queue],
                    )
                    .map(drop),
                PostgresLock::Row => c
                    .execute(
                        "SELECT 1 FROM queue_meta WHERE queue = $1 FOR UPDATE",
                        &[&self.queue],
                    )
                    .map(drop),
            })
            .map_err(|e| self.busy_or(started, e))?;
        // The lock is held from here: what is read now is what the section changes.
        let fleet = section.with(|c| self.fleet_begin(c))?;
        let original = section.with(|c| self.read_queue(c))?;
        let mut state = original.clone();
        // On an `Err` (or a panic) `section` is dropped, which rolls the transaction back.
        let view = fleet.as_ref().map(|f| f.view.clone());
        let (result, fleet_after) = crate::fleet::in_section(view, || change(&mut state));
        let result = result?;
        section.with(|c| self.fleet_end(c, fleet, fleet_after))?;
        if state != original {
            check_queue(&state).map_err(|detail| StoreError::Unpublishable {
                path: self.name(),
                detail,
            })?;
            fail::fail_point!("queue::before_publish");
            section
                .with(|c| write_changes(c, &self.queue, &original, &state))
                .map_err(|e| self.error(e))?;
        }
        // A section that recorded a turn's outcome is synced whatever its class (as in SQLite:
        // `wait` and `status` tell it, reconcile trusts it).
        if !durable && section.outcome_recorded() {
            section
                .with(|c| c.batch_execute("SET LOCAL synchronous_commit = on"))
                .map_err(|e| self.error(e))?;
        }
        section
            .with(|c| c.batch_execute("COMMIT"))
            .map_err(|e| self.error(e))?;
        section.committed();
        Ok(result)
    }
}

impl PostgresStore {
    /// Reads this queue's rows into the document the core takes, refusing what the file
    /// store's loader would refuse.
    fn read_queue(&self, tx: &mut impl GenericClient) -> Result<QueueState, StoreError> {
        let corrupt = |detail: String| {
            StoreError::File(FileError::Corrupt {
                path: self.name(),
                format: "tollgate queue",
                detail,
            })
        };
        let queue = &self.queue;
        let meta = tx
            .query_opt(
                "SELECT version, next_queue_id, paused_home FROM queue_meta WHERE queue = $1",
                &[queue],
            )
            .map_err(|e| self.error(e))?
            .ok_or_else(|| corrupt("the queue_meta row is missing".to_string()))?;
        let version: i32 = meta.try_get(0).map_err(|e| self.error(e))?;
        let next: i64 = meta.try_get(1).map_err(|e| self.error(e))?;
        let paused_home: bool = meta.try_get(2).map_err(|e| self.error(e))?;
        let mut state = QueueState {
            version: u32::try_from(version).map_err(|e| corrupt(format!("version: {e}")))?,
            next_queue_id: next as u64,
            entries: Vec::new(),
            runners: Vec::new(),
            works: Vec::new(),
            paused: PauseSet {
                home: paused_home,
                tasks: Default::default(),
            },
        };
        let rows = tx
            .query(
                "SELECT task FROM paused_tasks WHERE queue = $1 ORDER BY task",
                &[queue],
            )
            .map_err(|e| self.error(e))?;
        for row in &rows {
            let task: String = row.try_get(0).map_err(|e| self.error(e))?;
            state.paused.tasks.insert(task);
        }
        let rows = tx
            .query(
                "SELECT queue_id, task, turn, enqueued_at_millis, ready_at_millis, state,
                        owner_pid, owner_start_micros, enqueue_owner_pid,
                        enqueue_owner_start_micros, reservation_token, reserver_pid,
                        reserver_start_micros, child_pid, child_start_micros, cancel_requested,
                        priority
                 FROM entries WHERE queue = $1 ORDER BY queue_id",
                &[queue],
            )
            .map_err(|e| self.error(e))?;
        for row in &rows {
            let queue_id: i64 = row.try_get(0).map_err(|e| self.error(e))?;
            let entry = entry_from_row(row)
                .map_err(|e| self.error(e))?
                .map_err(|detail| corrupt(format!("row with queue_id {queue_id}: {detail}")))?;
            state.entries.push(entry);
        }
        let rows = tx
            .query(
                "SELECT queue_id, task, turn, rule FROM entry_dependencies
                 WHERE queue = $1 ORDER BY queue_id, pos",
                &[queue],
            )
            .map_err(|e| self.error(e))?;
        let index: HashMap<u64, usize> = state
            .entries
            .iter()
            .enumerate()
            .map(|(i, e)| (e.queue_id, i))
            .collect();
        for row in &rows {
            let queue_id: i64 = row.try_get(0).map_err(|e| self.error(e))?;
            let key = turn_key(row, 1, 2)
                .map_err(|e| self.error(e))?
                .map_err(corrupt)?;
            let rule = match row
                .try_get::<_, String>(3)
                .map_err(|e| self.error(e))?
                .as_str()
            {
                "succeeded" => AfterRule::Succeeded,
                _ => AfterRule::Ended,
            };
            if let Some(&i) = index.get(&(queue_id as u64)) {
                state.entries[i].after.push(Dependency { key, rule });
            }
        }
        let rows = tx
            .query(
                "SELECT task, turn, pid, start_micros, attached FROM runners
                 WHERE queue = $1 ORDER BY pos",
                &[queue],
            )
            .map_err(|e| self.error(e))?;
        for row in &rows {
            let key = turn_key(row, 0, 1)
                .map_err(|e| self.error(e))?
                .map_err(corrupt)?;
            let identity = identity(row, 2, 3)
                .map_err(|e| self.error(e))?
                .map_err(corrupt)?
                .ok_or_else(|| corrupt(format!("runner of {key} has no identity")))?;
            state.runners.push(RunnerRecord {
                key,
                identity,
                attached: row.try_get(4).map_err(|e| self.error(e))?,
            });
        }
        let rows = tx
            .query(
                "SELECT task, turn, work_id, runner_pid, runner_start_micros, leader_pid,
                        leader_start_micros, cgroup
                 FROM works WHERE queue = $1 ORDER BY pos",
                &[queue],
            )
            .map_err(|e| self.error(e))?;
        for row in &rows {
            let key = turn_key(row, 0, 1)
                .map_err(|e| self.error(e))?
                .map_err(corrupt)?;
            let id_text: String = row.try_get(2).map_err(|e| self.error(e))?;
            let id = token(&id_text)
                .map(WorkId::from_token)
                .map_err(|detail| corrupt(format!("work of {key}: {detail}")))?;
            let runner = identity(row, 3, 4)
                .map_err(|e| self.error(e))?
                .map_err(corrupt)?
                .ok_or_else(|| corrupt(format!("work of {key} has no runner")))?;
            let leader = identity(row, 5, 6)
                .map_err(|e| self.error(e))?
                .map_err(corrupt)?;
            let cgroup: Option<String> = row.try_get(7).map_err(|e| self.error(e))?;
            state.works.push(WorkRecord {
                key,
                id,
                runner,
                leader,
                cgroup,
            });
        }
        // Already in order unless ids passed 2^63 (see [`int`]).
        state.entries.sort_by_key(|e| e.queue_id);
        check_queue(&state).map_err(corrupt)?;
        Ok(state)
    }
}

/// A `u64` as PostgreSQL's BIGINT, bit for bit (as in the SQLite store).
fn int(value: u64) -> i64 {
    value as i64
}

fn turn_key(
    row: &Row,
    task: usize,
    turn: usize,
) -> Result<Result<TurnKey, String>, postgres::Error> {
    let name: String = row.try_get(task)?;
    let number: i64 = row.try_get(turn)?;
    Ok(u32::try_from(number)
        .map(|n| TurnKey::new(name.clone(), n))
        .map_err(|_| format!("turn {number} of task {name:?} is out of range")))
}

/// A process identity from a pid and a start-time column; `None` when both are NULL.
fn identity(
    row: &Row,
    pid: usize,
    start: usize,
) -> Result<Result<Option<ProcessIdentity>, String>, postgres::Error> {
    let pid: Option<i64> = row.try_get(pid)?;
    let start: Option<i64> = row.try_get(start)?;
    Ok(match (pid, start) {
        (Some(pid), Some(start)) => match u32::try_from(pid) {
            Ok(pid) => Ok(Some(ProcessIdentity {
                pid,
                start_time_micros: start as u64,
            })),
            Err(_) => Err(format!("pid {pid} is out of range")),
        },
        (None, None) => Ok(None),
        _ => Err("a pid without its start time (or the reverse)".to_string()),
    })
}

/// A slot token from its text, with the JSON loader's checks (a UUID, never nil).
fn token(text: &str) -> Result<SlotToken, String> {
    serde_json::from_value(serde_json::Value::String(text.to_string()))
        .map_err(|e| format!("token {text:?}: {e}"))
}

/// One `entries` row as a queue entry; the inner `Err` says what in the row is inconsistent.
fn entry_from_row(row: &Row) -> Result<Result<QueueEntry, String>, postgres::Error> {
    let owner = match identity(row, 6, 7)? {
        Ok(o) => o,
        Err(e) => return Ok(Err(e)),
    };
    let enqueue_owner = match identity(row, 8, 9)? {
        Ok(o) => o,
        Err(e) => return Ok(Err(e)),
    };
    let state_name: String = row.try_get(5)?;
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
    let reservation_token: Option<String> = row.try_get(10)?;
    let reserver = match identity(row, 11, 12)? {
        Ok(r) => r,
        Err(e) => return Ok(Err(e)),
    };
    let child = match identity(row, 13, 14)? {
        Ok(c) => c,
        Err(e) => return Ok(Err(e)),
    };
    let slot_reservation = match (reservation_token, reserver) {
        (None, None) => None,
        (Some(text), Some(reserver)) => match token(&text) {
            Ok(token) => Some(RunnerSlotReservation {
                reserver,
                token,
                child,
            }),
            Err(detail) => return Ok(Err(detail)),
        },
        _ => {
            return Ok(Err(
                "a reservation without its token or reserver".to_string()
            ))
        }
    };
    let key = match turn_key(row, 1, 2)? {
        Ok(k) => k,
        Err(e) => return Ok(Err(e)),
    };
    Ok(Ok(QueueEntry {
        queue_id: row.try_get::<_, i64>(0)? as u64,
        key,
        enqueued_at_millis: row.try_get::<_, i64>(3)? as u64,
        state,
        slot_reservation,
        ready_at_millis: row.try_get::<_, i64>(4)? as u64,
        cancel_requested: row.try_get(15)?,
        priority: row.try_get(16)?,
        after: Vec::new(),
    }))
}

/// Rewrites the dependencies of the entries whose list changed (or that left).
fn write_dependencies(
    tx: &mut impl GenericClient,
    queue: &String,
    old_by_id: &HashMap<u64, &QueueEntry>,
    new_by_id: &HashMap<u64, &QueueEntry>,
) -> Result<(), postgres::Error> {
    let after = |map: &HashMap<u64, &QueueEntry>, id: &u64| -> Vec<Dependency> {
        map.get(id).map_or_else(Vec::new, |e| e.after.clone())
    };
    let changed: Vec<u64> = old_by_id
        .keys()
        .chain(new_by_id.keys())
        .filter(|id| after(old_by_id, id) != after(new_by_id, id))
        .copied()
        .collect();
    for id in changed {
        tx.execute(
            "DELETE FROM entry_dependencies WHERE queue = $1 AND queue_id = $2",
            &[queue, &int(id)],
        )?;
        for (pos, dependency) in after(new_by_id, &id).iter().enumerate() {
            let rule = match dependency.rule {
                AfterRule::Ended => "ended",
                AfterRule::Succeeded => "succeeded",
            };
            tx.execute(
                "INSERT INTO entry_dependencies (queue, queue_id, pos, task, turn, rule)
                 VALUES ($1, $2, $3, $4, $5, $6)",
                &[
                    queue,
                    &int(id),
                    &(pos as i32),
                    &dependency.key.task,
                    &i64::from(dependency.key.turn),
                    &rule,
                ],
            )?;
        }
    }
    Ok(())
}

/// Writes what differs between `old` (what the tables hold) and `new`, as the SQLite store
/// does: the meta row if it changed, the entries removed, added or changed (by `queue_id`), and
/// the runner and work lists whole when either changed.
fn write_changes(
    tx: &mut impl GenericClient,
    queue: &String,
    old: &QueueState,
    new: &QueueState,
) -> Result<(), postgres::Error> {
    if old.version != new.version || old.next_queue_id != new.next_queue_id {
        tx.execute(
            "UPDATE queue_meta SET version = $2, next_queue_id = $3 WHERE queue = $1",
            &[queue, &(new.version as i32), &int(new.next_queue_id)],
        )?;
    }
    if old.paused != new.paused {
        tx.execute(
            "UPDATE queue_meta SET paused_home = $2 WHERE queue = $1",
            &[queue, &new.paused.home],
        )?;
        tx.execute("DELETE FROM paused_tasks WHERE queue = $1", &[queue])?;
        let insert = tx.prepare("INSERT INTO paused_tasks (queue, task) VALUES ($1, $2)")?;
        for task in &new.paused.tasks {
            tx.execute(&insert, &[queue, task])?;
        }
    }
    let new_by_id: HashMap<u64, &QueueEntry> =
        new.entries.iter().map(|e| (e.queue_id, e)).collect();
    let old_by_id: HashMap<u64, &QueueEntry> =
        old.entries.iter().map(|e| (e.queue_id, e)).collect();
    let delete = tx.prepare("DELETE FROM entries WHERE queue = $1 AND queue_id = $2")?;
    for entry in &old.entries {
        if !new_by_id.contains_key(&entry.queue_id) {
            tx.execute(&delete, &[queue, &int(entry.queue_id)])?;
        }
    }
    let upsert = tx.prepare(
        "INSERT INTO entries (queue, queue_id, task, turn, enqueued_at_millis, ready_at_millis,
            state, owner_pid, owner_start_micros, enqueue_owner_pid, enqueue_owner_start_micros,
            reservation_token, reserver_pid, reserver_start_micros, child_pid, child_start_micros,
            cancel_requested, priority)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17,
            $18)
         ON CONFLICT (queue, queue_id) DO UPDATE SET
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
    )?;
    let pid = |o: Option<&ProcessIdentity>| o.map(|o| i64::from(o.pid));
    let start = |o: Option<&ProcessIdentity>| o.map(|o| int(o.start_time_micros));
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
        tx.execute(
            &upsert,
            &[
                queue,
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
            ],
        )?;
    }
    write_dependencies(tx, queue, &old_by_id, &new_by_id)?;
    if old.runners != new.runners {
        tx.execute("DELETE FROM runners WHERE queue = $1", &[queue])?;
        let insert = tx.prepare(
            "INSERT INTO runners (queue, pos, task, turn, pid, start_micros, attached)
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )?;
        for (pos, runner) in new.runners.iter().enumerate() {
            tx.execute(
                &insert,
                &[
                    queue,
                    &(pos as i32),
                    &runner.key.task,
                    &i64::from(runner.key.turn),
                    &i64::from(runner.identity.pid),
                    &int(runner.identity.start_time_micros),
                    &runner.attached,
                ],
            )?;
        }
    }
    if old.works != new.works {
        tx.execute("DELETE FROM works WHERE queue = $1", &[queue])?;
        let insert = tx.prepare(
            "INSERT INTO works (queue, pos, task, turn, work_id, runner_pid, runner_start_micros,
                leader_pid, leader_start_micros, cgroup)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
        )?;
        for (pos, work) in new.works.iter().enumerate() {
            tx.execute(
                &insert,
                &[
                    queue,
                    &(pos as i32),
                    &work.key.task,
                    &i64::from(work.key.turn),
                    &work.id.to_string(),
                    &i64::from(work.runner.pid),
                    &int(work.runner.start_time_micros),
                    &pid(work.leader.as_ref()),
                    &start(work.leader.as_ref()),
                    &work.cgroup,
                ],
            )?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redact_hides_the_password_in_the_user_part_and_in_parameters() {
        assert_eq!(
            redact("postgres://u:p%40ss@h:5432/db?sslmode=disable"),
            "postgres://u:***@h:5432/db?sslmode=disable"
        );
        assert_eq!(
            redact("postgresql://u@h/db?password=hunter2&host=/run"),
            "postgresql://u@h/db?password=***&host=/run"
        );
        assert_eq!(redact("postgres://h/db"), "postgres://h/db");
    }

    #[test]
    fn the_queue_parameter_is_tollgates_and_not_passed_to_the_client() {
        let url = PostgresUrl::parse("postgres://u:pw@h/db?sslmode=disable&queue=ci").expect("ok");
        assert_eq!(url.queue.as_deref(), Some("ci"));
        assert_eq!(url.connect, "postgres://u:pw@h/db?sslmode=disable");
        assert_eq!(url.redacted, "postgres://u:***@h/db?sslmode=disable");
        let url = PostgresUrl::parse("postgres://h/db?queue=ci").expect("ok");
        assert_eq!(url.connect, "postgres://h/db");
        let long = format!(
            "postgres://h/db?queue={}",
            "q".repeat(MAX_QUEUE_NAME_BYTES + 1)
        );
        assert!(PostgresUrl::parse(&long).is_err());
        let bad = PostgresUrl::parse("postgres://u:pw@h/db?nonsense=1").expect_err("unknown");
        assert!(!bad.contains("pw@"), "{bad}");
    }
}
