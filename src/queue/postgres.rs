//! The queue in a PostgreSQL database (spec/store.md, "PostgreSQL"): the store a home uses when
//! its `store` setting (or `TOLLGATE_STORE`) is a `postgres://` URL.
//!
//! The tables are SQLite's (src/queue/sqlite.rs) with a `queue` column, so several homes share
//! one database, each its own queue. A locked section is one transaction that first takes a
//! transaction-level advisory lock on its queue (`pg_advisory_xact_lock`, bounded by `SET LOCAL
//! lock_timeout`): sections of one queue are serialised exactly as `BEGIN IMMEDIATE` serialises
//! them in SQLite, so the task and turn record files a section writes stay guarded by it. The
//! lock is released by the commit or rollback itself, so a killed command never leaves it taken.
//! Every section is on disk before it returns except a promise under `durability = "os"`:
//! unlike SQLite's, the server can crash while tollgate's processes live on, so an internal
//! transition it lost (a runner's take-over) would let reconcile start a turn whose work still
//! runs (S2). A section commits without waiting for the disk under its locks and is flushed
//! after them ([`batch::FLUSH_SQL`]); spec/store.md, "PostgreSQL", "Durability", says why that
//! is safe.

use super::records::RecordTx;
use super::store::{check_queue, Commit, Store, StoreError};
use crate::clock;
use crate::config::Durability;
use crate::protocol::fleet::FleetView;
use crate::protocol::slots::steps::{Loaded, QueueReads, Reads};
use crate::protocol::slots::{QueueState, QUEUE_FORMAT_VERSION};
use postgres::error::SqlState;
use postgres::{Client, GenericClient, NoTls};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

mod batch;
mod lease;
mod ops;
pub use lease::{FleetContext, LeaseSnapshot, LEASE_LOCK};
pub use ops::{
    DrainChange, DrainedHost, OutputStream, StoredOutput, TURN_OUTPUT_CHUNK_BYTES,
    TURN_OUTPUT_MAX_BYTES, TURN_OUTPUT_MAX_CHUNKS,
};

/// The newest schema this tollgate writes in a PostgreSQL database.
pub const POSTGRES_SCHEMA_VERSION: i32 = 10;

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
    (
        8,
        "sections on a part of the queue: indexes and the row count",
        SCHEMA_V8,
    ),
    (9, "an index of the parked rows in start order", SCHEMA_V9),
    (10, "an index of each task's parked rows", SCHEMA_V10),
];

/// Version 10: each task's parked rows by `queue_id`, so a submit of a `concurrent=N` task finds
/// the first row of its line (`steps::submit_line_reads`) without reading the whole line. An
/// index only (`IF NOT EXISTS`).
const SCHEMA_V10: &str = "
CREATE INDEX IF NOT EXISTS entries_task_line
    ON entries (queue, task, queue_id) WHERE state = 'parked';
";

/// Version 9: each queue's parked rows in start order (priority descending, then `queue_id`), so
/// a finishing runner's section finds the first few it may start (`steps::finish_reads`) without
/// a scan of every parked row. An index only (`IF NOT EXISTS`).
const SCHEMA_V9: &str = "
CREATE INDEX IF NOT EXISTS entries_start_order
    ON entries (queue, priority DESC, queue_id) WHERE state = 'parked';
";

/// Version 8: what a section on a part of the queue reads by index searches
/// ([`Store::transact_reading`], spec/store.md, "What a section loads"): the dependencies by the
/// turn they name (the rows depending on a task's turns) and the rows holding a reservation (a
/// few: one per slot being handed off); and the number of rows of each queue in
/// `queue_meta.row_count`, kept by a trigger (so a row inserted or deleted by hand is counted
/// too), for the bound check of a section on a part (`MAX_QUEUE_ROWS` needs the count only;
/// `count(*)` reads a whole index). Rows are written by `INSERT … ON CONFLICT DO UPDATE`, whose
/// updates fire no `INSERT` trigger. Every statement may run again (`IF NOT EXISTS`, `OR
/// REPLACE`): a database taken back to an earlier version by hand (the migration tests do)
/// migrates again.
const SCHEMA_V8: &str = "
CREATE INDEX IF NOT EXISTS entry_dependencies_by_turn
    ON entry_dependencies (queue, task, turn);
CREATE INDEX IF NOT EXISTS entries_reserved
    ON entries (queue, queue_id) WHERE reservation_token IS NOT NULL;
ALTER TABLE queue_meta ADD COLUMN IF NOT EXISTS row_count BIGINT NOT NULL DEFAULT 0;
UPDATE queue_meta AS m SET row_count = (SELECT count(*) FROM entries AS e WHERE e.queue = m.queue);
CREATE OR REPLACE FUNCTION tollgate_entries_counted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        UPDATE queue_meta SET row_count = row_count + 1 WHERE queue = NEW.queue;
    ELSE
        UPDATE queue_meta SET row_count = row_count - 1 WHERE queue = OLD.queue;
    END IF;
    RETURN NULL;
END
$$;
DROP TRIGGER IF EXISTS entries_counted ON entries;
CREATE TRIGGER entries_counted AFTER INSERT OR DELETE ON entries
    FOR EACH ROW EXECUTE FUNCTION tollgate_entries_counted();
";

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
                    // The name is written into statements as a literal ([`batch`]), which a
                    // NUL would end.
                    if value.contains('\0') {
                        return Err(format!("queue={value:?}: a queue name holds no NUL byte"));
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
    /// Shared with the record layer's side store of this URL and queue ([`Self::for_home`]).
    client: Arc<Mutex<Option<Client>>>,
    /// Set on a home's store: every section reads the leases (spec/fleet.md).
    fleet: Option<FleetContext>,
    /// The queue rows the last section loaded ([`PostgresStore::rows_loaded_by_last_section`]).
    rows_loaded: std::sync::atomic::AtomicUsize,
    /// Whether the connection in `client` has each of [`batch::Prepared`] prepared (by
    /// [`batch::Prepared::index`]); shared with the stores sharing the client, cleared when it
    /// connects again.
    prepared: Arc<[AtomicBool; batch::Prepared::COUNT]>,
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
            client: Arc::new(Mutex::new(None)),
            fleet: None,
            rows_loaded: Default::default(),
            prepared: Default::default(),
        }
    }

    /// The same store holding `home`'s task and turn records (importing its record files). Its
    /// connection also serves the record accesses of this process outside sections (the record
    /// layer's side store): one connection per process instead of two. Those accesses run on a
    /// thread with no section of this queue in progress (one in progress serves them itself), so
    /// they only ever wait for another thread's use of the connection, never for their own.
    pub fn for_home(mut self, home: crate::home::Home) -> Self {
        self.home = Some(home);
        super::records::share_side_store(self.record_key(), Arc::new(self.sharing_client()));
        self
    }

    /// A store on this one's connection (the same client slot), without a fleet context.
    fn sharing_client(&self) -> PostgresStore {
        PostgresStore {
            url: self.url.clone(),
            queue: self.queue.clone(),
            lock_timeout: self.lock_timeout,
            durability: self.durability,
            lock: self.lock,
            home: self.home.clone(),
            client: self.client.clone(),
            fleet: None,
            rows_loaded: Default::default(),
            prepared: self.prepared.clone(),
        }
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
            // Most connections find everything done: one statement checks it, with no lock.
            let (migrated, imported) = self.ready(&mut client);
            if !migrated {
                self.migrate(&mut client)?;
            }
            if let Some(home) = self.home.as_ref().filter(|_| !imported) {
                super::records::pg_import_records(self, &mut client, home)?;
            }
            // A new session has no prepared statement.
            for ready in self.prepared.iter() {
                ready.store(false, Ordering::Relaxed);
            }
            *guard = Some(client);
        }
        Ok(guard)
    }

    /// Whether the schema is at this tollgate's version with this queue's meta row, and whether
    /// this home's record files were imported and moved aside: one statement without a lock, so
    /// a process's later connections skip the migration's and the import's locked transactions.
    /// Both only ever become true (a migration never goes back, `moved_aside` is final); any
    /// error (a database without `schema_migrations`) answers "not yet", and the locked paths
    /// decide.
    fn ready(&self, client: &mut Client) -> (bool, bool) {
        let home = self.home.as_ref().map(home_key);
        let imported = match &home {
            Some(home) => format!(
                "coalesce((SELECT moved_aside FROM record_imports WHERE queue = {} AND home = {}), \
                 false)",
                batch::text(&self.queue),
                batch::text(home)
            ),
            None => "true".to_string(),
        };
        let sql = format!(
            "SELECT (SELECT coalesce(max(version), 0) FROM schema_migrations) = {POSTGRES_SCHEMA_VERSION}
                AND EXISTS (SELECT 1 FROM queue_meta WHERE queue = {}), {imported}",
            batch::text(&self.queue)
        );
        if home.as_ref().is_some_and(|h| h.contains('\0')) || self.queue.contains('\0') {
            return (false, false);
        }
        let row = client.simple_query(&sql).ok().and_then(|messages| {
            messages.into_iter().find_map(|m| match m {
                postgres::SimpleQueryMessage::Row(row) => Some(row),
                _ => None,
            })
        });
        match row {
            Some(row) => (row.get(0) == Some("t"), row.get(1) == Some("t")),
            None => (false, false),
        }
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
        tx.batch_execute(&format!(
            "SET LOCAL lock_timeout = {}",
            self.lock_timeout_millis()
        ))
        .map_err(|e| self.error(e))
    }

    /// `lock_timeout` as `SET LOCAL lock_timeout` takes it (0 would mean no bound).
    pub(crate) fn lock_timeout_millis(&self) -> u128 {
        self.lock_timeout.as_millis().clamp(1, i32::MAX as u128)
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

    /// A failed commit message: a full disk as ENOSPC (the record writes it carries are the
    /// result writer's, whose retry looks for it: [`crate::tasks::retry_while_disk_full`]).
    fn commit_error(&self, error: postgres::Error) -> StoreError {
        if error.code() == Some(&SqlState::DISK_FULL) {
            StoreError::File(crate::fsutil::FileError::io(
                &self.name(),
                std::io::Error::from_raw_os_error(libc::ENOSPC),
            ))
        } else {
            self.error(error)
        }
    }

    /// [`Store::load`], callable without importing the trait.
    pub fn load(&self) -> Result<QueueState, StoreError> {
        Store::load(self)
    }
}

/// `text` as an SQL string literal (`E'…'`, escaped; [`batch`] says why statements carry
/// literals).
pub(crate) fn quoted_text(text: &str) -> String {
    batch::text(text)
}

/// Makes every commit so far durable ([`batch::FLUSH_SQL`]): sent after a write transaction
/// committed with `synchronous_commit = off`, once its locks are released.
pub(crate) fn flush_wal(client: &mut Client) -> Result<(), postgres::Error> {
    client.batch_execute(batch::FLUSH_SQL)
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
    /// One statement reading every table of the queue: one snapshot, without the lock, in one
    /// round trip ([`batch`]).
    fn load(&self) -> Result<QueueState, StoreError> {
        let mut guard = self.client()?;
        let Some(client) = guard.as_mut() else {
            unreachable!("client() connected");
        };
        let sql = batch::read_sql(&self.queue, None, Some(batch::Rows::All));
        let messages = client.simple_query(&sql).map_err(|e| self.error(e))?;
        let json = batch::last_value(self, &messages)?;
        batch::parse_document(self, &json)?.queue_state(self)
    }

    /// One statement, one round trip, no lock: the queue's id counter and its highest row id (in
    /// the `u64` order, see [`int`]). A failure is only a missing hint.
    fn next_turn_id_hint(&self) -> Option<u64> {
        let mut guard = self.client().ok()?;
        let client = guard.as_mut()?;
        let q = batch::text(&self.queue);
        let sql = format!(
            "SELECT next_queue_id, coalesce(
                (SELECT max(queue_id) FROM entries WHERE queue = {q} AND queue_id < 0),
                (SELECT max(queue_id) FROM entries WHERE queue = {q}))
             FROM queue_meta WHERE queue = {q}"
        );
        let messages = match client.simple_query(&sql) {
            Ok(messages) => messages,
            Err(e) => {
                tracing::debug!("no hint of the next turn id: {}", describe(&e));
                return None;
            }
        };
        let row = messages.into_iter().find_map(|m| match m {
            postgres::SimpleQueryMessage::Row(row) => Some(row),
            _ => None,
        })?;
        let next: i64 = row.get(0)?.parse().ok()?;
        // NULL (no row in the queue) reads as `None`.
        let last: Option<i64> = row.get(1).map(str::parse).transpose().ok()?;
        Some(crate::protocol::slots::next_queue_id(
            next as u64,
            last.map(|v| v as u64),
        ))
    }

    /// One statement reading the active part ([`batch::Rows::Active`], prepared once per
    /// connection: [`batch::Prepared::Active`]): index searches, so its cost does not grow with
    /// the parked rows.
    fn load_active(&self) -> Result<QueueState, StoreError> {
        let mut guard = self.client()?;
        let Some(client) = guard.as_mut() else {
            unreachable!("client() connected");
        };
        self.prepare(client, batch::Prepared::Active)?;
        let sql = batch::execute_active_read_sql(&self.queue);
        let messages = client.simple_query(&sql).map_err(|e| self.error(e))?;
        let json = batch::last_value(self, &messages)?;
        batch::parse_document(self, &json)?.queue_rows(self, false)
    }

    /// Two round trips ([`batch`]): `BEGIN`, the `SET LOCAL`s, the queue's lock, the lease lock
    /// and the reads as one message; then the writes of what changed and the `COMMIT` as
    /// another. Task and turn records `change` writes go between them, on the same transaction.
    fn transact_as<R, E>(
        &self,
        commit: Commit,
        change: impl FnOnce(&mut QueueState) -> Result<R, E>,
    ) -> Result<R, E>
    where
        E: From<StoreError>,
    {
        self.section(commit, None, |state, _, _, _| change(state))
    }

    /// A section on the part `reads` names (spec/store.md, "What a section loads"): the same
    /// two round trips, its reading statement selecting the part's rows by index searches
    /// (`batch::Prepared::Part`, prepared once per connection) and the row count; only those
    /// rows are sent, decoded, checked, cloned and diffed. [`Reads::Everything`] is the whole queue, as [`Store::transact_as`].
    fn transact_reading<R, E>(
        &self,
        commit: Commit,
        reads: &Reads,
        change: impl FnOnce(&mut QueueState, &Loaded) -> Result<R, E>,
    ) -> Result<R, E>
    where
        E: From<StoreError>,
    {
        self.transact_section(commit, reads, |state, loaded, _, _| change(state, loaded))
    }

    /// [`Store::transact_reading`] with the section's fleet view (its leases written back) and
    /// its records (the section's client, lent: [`RecordTx`]).
    fn transact_section<R, E>(
        &self,
        commit: Commit,
        reads: &Reads,
        change: impl FnOnce(
            &mut QueueState,
            &Loaded,
            &mut Option<FleetView>,
            &mut RecordTx<'_>,
        ) -> Result<R, E>,
    ) -> Result<R, E>
    where
        E: From<StoreError>,
    {
        match reads {
            Reads::Everything => self.section(commit, None, |state, _, fleet, records| {
                change(state, &Loaded::Whole, fleet, records)
            }),
            Reads::Part(part) => self.section(commit, Some(part), change),
        }
    }
}

impl PostgresStore {
    /// How many queue rows the last section of this store loaded: a test hook
    /// (tests/store_postgres_depth.rs checks that a parking submit at depth loads only its part).
    pub fn rows_loaded_by_last_section(&self) -> usize {
        self.rows_loaded.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Prepares `which` on `client` unless it is already (one round trip per connection, outside
    /// any transaction and lock).
    fn prepare(&self, client: &mut Client, which: batch::Prepared) -> Result<(), StoreError> {
        let ready = &self.prepared[which.index()];
        if ready.load(Ordering::Relaxed) {
            return Ok(());
        }
        match client.simple_query(&batch::prepare_sql(which)) {
            Ok(_) => {}
            // Prepared by an earlier call whose answer was lost: it is there.
            Err(e) if e.code() == Some(&postgres::error::SqlState::DUPLICATE_PSTATEMENT) => {}
            Err(e) => return Err(self.error(e)),
        }
        ready.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// The one transaction of [`Store::transact_as`] and [`Store::transact_reading`]: the whole
    /// queue when `part` is `None`.
    fn section<R, E>(
        &self,
        commit: Commit,
        part: Option<&QueueReads>,
        change: impl FnOnce(
            &mut QueueState,
            &Loaded,
            &mut Option<FleetView>,
            &mut RecordTx<'_>,
        ) -> Result<R, E>,
    ) -> Result<R, E>
    where
        E: From<StoreError>,
    {
        let mut guard = self.client()?;
        if part.is_some() {
            let Some(client) = guard.as_mut() else {
                unreachable!("client() connected");
            };
            let fleet = self.fleet.is_some();
            self.prepare(client, batch::Prepared::Part { fleet })?;
        }
        // Only what this process is about to promise may be left to the server's WAL writer,
        // and only when the home said so: a lost internal commit would hide a live process.
        let durable = !(commit == Commit::Promise && self.durability == Durability::Os);
        let started = Instant::now();
        // The client is lent to the section's records (records::PgSection, handed to `change`
        // as its RecordTx): task and turn records written through it commit with the queue.
        // Dropping `section` (an `Err`, a panic) rolls the transaction back and puts the client
        // back.
        let Some(mut section) = super::records::PgSection::lend(&mut guard, self.record_key())
        else {
            unreachable!("client() connected, and the client is back outside a section");
        };
        let queue = batch::text(&self.queue);
        let mut locks = vec![match self.lock {
            PostgresLock::Advisory => batch::advisory_lock(&format!("hashtext({queue})")),
            PostgresLock::Row => {
                format!("SELECT 1 FROM queue_meta WHERE queue = {queue} FOR UPDATE")
            }
        }];
        // The lease lock always after the queue's, never before, so the two cannot deadlock.
        if self.fleet.is_some() {
            locks.push(batch::advisory_lock(&LEASE_LOCK.to_string()));
        }
        // Committed without waiting for the disk under the locks; made durable by the flush
        // after them ([`batch::FLUSH_SQL`]).
        let mut sql = batch::begin_sql(self.lock_timeout_millis(), false, &locks);
        // The statements of one message run in order: the reads (and the database clock) come
        // after both locks are held.
        let host = self.fleet.as_ref().map(|f| &f.host);
        match part {
            None => sql.push_str(&batch::read_sql(&self.queue, host, Some(batch::Rows::All))),
            // The prepared statement's generic plan, made by its first execution on this
            // connection and kept for the next ones (a custom plan would be made every time).
            Some(reads) => {
                sql.push_str("SET LOCAL plan_cache_mode = force_generic_plan;\n");
                sql.push_str(&batch::execute_part_read_sql(&self.queue, host, reads));
            }
        }
        let messages = section
            .with(|c| c.simple_query(&sql))
            .map_err(|e| self.busy_or(started, e))?;
        let document = batch::parse_document(self, &batch::last_value(self, &messages)?)?;
        let fleet = self.fleet_begin(&document)?;
        let original = document.queue_state(self)?;
        let loaded = match part {
            None => Loaded::Whole,
            Some(reads) => Loaded::Part {
                reads: reads.clone(),
                queue_rows: document.row_count().ok_or_else(|| StoreError::Database {
                    path: self.name(),
                    detail: "queue_meta.row_count was not read".to_string(),
                })?,
            },
        };
        drop(document);
        self.rows_loaded
            .store(original.entries.len(), std::sync::atomic::Ordering::Relaxed);
        let mut state = original.clone();
        // On an `Err` (or a panic) `section` is dropped, which rolls the transaction back.
        let mut view = fleet.as_ref().map(|f| f.view.clone());
        let result = change(&mut state, &loaded, &mut view, &mut section.records())?;
        let fleet_after = view;
        // The task and turn records `change` wrote, kept for this message (records::PgConn).
        let mut sql = section.take_pending();
        let leases_changed = self.fleet_end(&mut sql, fleet, fleet_after);
        if state != original {
            check_queue(&state).map_err(|detail| StoreError::Unpublishable {
                path: self.name(),
                detail,
            })?;
            fail::fail_point!("queue::before_publish");
            batch::push_changes(&mut sql, &self.queue, &original, &state);
        }
        // Whether the transaction wrote anything (queue rows, records, leases): only then is
        // there a commit to flush.
        sql.push_str("SELECT (pg_current_xact_id_if_assigned() IS NOT NULL)::text;\n");
        // A statement that fails skips the rest of the message, `COMMIT` included: the
        // transaction is then aborted and `section`'s drop rolls it back.
        sql.push_str("COMMIT");
        let sql = batch::checked(self, sql)?;
        // A statement the server refused skipped the `COMMIT` (nothing committed); a connection
        // lost while the message was in flight leaves it unknown whether the `COMMIT` ran.
        let messages = section
            .with(|c| c.simple_query(&sql))
            .map_err(|e| match e.code() {
                Some(_) => self.commit_error(e),
                None => StoreError::Uncertain {
                    source: Box::new(self.error(e)),
                },
            })?;
        let wrote = batch::last_value(self, &messages)? == "true";
        // Durable before anything is told or done on its behalf, waking the turn folders'
        // watchers included. A lease change and a recorded outcome are flushed whatever the
        // section's class (another host judges a process by its lease; `wait` and `status` tell
        // an outcome and reconcile trusts it); only a promise under `durability = "os"` is left
        // to the server's WAL writer.
        if wrote && (durable || leases_changed || section.outcome_recorded()) {
            fail::fail_point!("queue::before_flush");
            section
                .with(|c| c.batch_execute(batch::FLUSH_SQL))
                .map_err(|e| StoreError::Uncertain {
                    source: Box::new(self.error(e)),
                })?;
        }
        section.committed();
        Ok(result)
    }
}

/// The key of `home` in `record_imports`: its canonical root.
pub(crate) fn home_key(home: &crate::home::Home) -> String {
    std::fs::canonicalize(home.root())
        .unwrap_or_else(|_| home.root().to_path_buf())
        .display()
        .to_string()
}

/// A `u64` as PostgreSQL's BIGINT, bit for bit (as in the SQLite store).
fn int(value: u64) -> i64 {
    value as i64
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
