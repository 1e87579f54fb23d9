//! The durable sweep list: worktrees a run could not remove (an abandoned worker may still be
//! inside, or the removal failed), and every run in progress with its containment unit, recorded
//! before its first item starts. `tollgate sweep` (and the next `tollgate run` or `reconcile` on
//! the home) kills the unit of a run whose process is gone and removes its worktrees; a listed
//! worktree is removed once no live process has its working directory inside it.
//!
//! **Where it lives** (spec/store.md, "The sweep list"): two tables, `sweep_runs` and
//! `sweep_entries`, in a SQLite database on this machine. For a home whose store is its
//! `tollgate.db` that is `tollgate.db` (schema version 6); for a home whose store is PostgreSQL it
//! is `<home>/sweep.db`, holding only these tables. The list is
//! per machine on purpose: it names this machine's processes (pids, start times, cgroups) and
//! worktree paths, which another host could neither observe nor remove, so it never goes to a
//! shared database. Every change is one short write transaction committed with `synchronous =
//! FULL` (a run's record is durable before its first item starts, as the file's fsync was).
//!
//! The slow part of a sweep (killing a unit with its grace, `git worktree remove`, the `/proc`
//! walk) runs outside any transaction, so it never holds the home's write lock; sweepers are
//! serialised with each other by `<home>/sweep.lock` (flock, bounded wait).
//!
//! **`sweep.json`** (the file of earlier versions; format version 2 adds `runs`) is imported by
//! the first access that finds it, inside the same transaction as that access, then renamed
//! `sweep.json.imported` (kept, never deleted). A corrupt one is refused naming it, and nothing
//! is imported or moved. One that appears later (an older tollgate ran on the home) is imported
//! the same way: its runs and worktrees are real leftovers to clean up, and the import is
//! idempotent (rows are keyed by run id and by path).

use super::worktree::{self, Worktree, WorktreeKind};
use crate::config::Config;
use crate::flock;
use crate::fsutil::{self, FileError};
use crate::home::Home;
use crate::process::containment::{self, UnitIdentity};
use crate::process::ProcLiveness;
use crate::protocol::execution::{sweep_decision, SweepDecision};
use crate::protocol::slots::{Liveness, Observation, ProcessIdentity};
use crate::queue::{records, HomeStore, StoreError};
use rusqlite::{Connection, ErrorCode, OpenFlags, OptionalExtension};
use serde::{Deserialize, Serialize};
use std::fs;
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The sweep list of earlier versions, imported on first use.
pub const SWEEP_FILE: &str = "sweep.json";
/// The machine-local database of a home whose store is not `tollgate.db`.
pub const SWEEP_DB: &str = "sweep.db";
/// Serialises sweepers with each other (not the list's writes: those are transactions).
const SWEEP_LOCK: &str = "sweep.lock";
pub const SWEEP_FORMAT_VERSION: u32 = 2;
/// The list's explicit bound; beyond it an addition is refused (and reported).
pub const MAX_SWEEP_ENTRIES: usize = 10_000;
/// Bound on the runs recorded at once (live runs on one home, plus dead ones not yet swept).
pub const MAX_SWEEP_RUNS: usize = 1_000;
/// The longest SIGTERM-to-SIGKILL grace a sweep grants a dead run's unit, whatever its pack said.
pub const MAX_SWEEP_GRACE_MILLIS: u64 = 30_000;

#[derive(Debug, thiserror::Error)]
pub enum SweepError {
    #[error("SWEEP_IO: {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("SWEEP_UNREADABLE: {path} cannot be parsed ({message}); it was left as it is")]
    Unreadable { path: PathBuf, message: String },
    #[error("SWEEP_DATABASE: {path}: {detail}")]
    Database { path: PathBuf, detail: String },
    #[error("SWEEP_FULL: {path} holds its limit of {MAX_SWEEP_ENTRIES} entries")]
    Full { path: PathBuf },
    #[error(
        "SWEEP_RUNS_FULL: {path} holds its limit of {MAX_SWEEP_RUNS} runs; run `tollgate sweep`"
    )]
    RunsFull { path: PathBuf },
    #[error(
        "SWEEP_LOCK_TIMEOUT: {path} is still held by another tollgate process after \
         {waited_millis} ms; nothing was changed (try again once it finished)"
    )]
    LockTimeout { path: PathBuf, waited_millis: u64 },
}

/// The longest a sweeper waits for `sweep.lock` (held while a sweep kills and removes: a holder
/// that keeps it this long is stuck).
pub const SWEEP_LOCK_TIMEOUT_MILLIS: u64 = 10_000;

/// A run in progress, recorded before its first item starts: enough for any later process to kill
/// everything it started and remove its worktrees once the run's process is gone.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunRecord {
    pub run_id: String,
    /// The run's process: while it is alive its unit is never touched.
    pub run: ProcessIdentity,
    /// The run's unit: its cgroup (items' groups inside) and the marker prefix every item carries.
    pub unit: UnitIdentity,
    /// `<home>/worktrees/<run id>`: every worktree of the run is below it.
    pub worktree_root: PathBuf,
    /// The pack's grace (SIGTERM to SIGKILL), used when a sweep kills the unit.
    pub grace_millis: u64,
    pub started_at_millis: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SweepEntry {
    #[serde(flatten)]
    pub worktree: Worktree,
    /// The run that listed it.
    pub run_id: String,
    pub run_pid: u32,
    pub item: String,
    pub listed_at_millis: u64,
}

/// The list as a document: what `sweep.json` held, and what [`list`] returns.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SweepList {
    #[serde(default = "version")]
    pub version: u32,
    #[serde(default)]
    pub entries: Vec<SweepEntry>,
    /// Runs in progress (or dead and not yet swept). Absent in version 1.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runs: Vec<RunRecord>,
}

fn version() -> u32 {
    SWEEP_FORMAT_VERSION
}

/// What one sweep did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SweepReport {
    /// Dead runs whose units were killed (first, before any worktree is looked at).
    pub runs: Vec<DeadRun>,
    pub removed: Vec<PathBuf>,
    pub kept: Vec<PathBuf>,
    pub failed: Vec<(PathBuf, String)>,
}

/// What a sweep did about one run whose process is gone.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeadRun {
    pub run_id: String,
    pub run_pid: u32,
    /// Processes of its unit found alive and signalled.
    pub killed: usize,
    /// Processes still alive after SIGKILL and the bounded wait (the record is kept).
    pub survivors: Vec<i32>,
    /// Worktrees removed, and the record dropped once none is left.
    pub removed: Vec<PathBuf>,
    pub failed: Vec<(PathBuf, String)>,
    /// Whether the run's record left the list (everything of it is gone).
    pub forgotten: bool,
}

/// Which database holds a home's list, and how long a write waits for its lock.
enum Location {
    /// The home's `tollgate.db` (its store): opened through the store's own open, so the
    /// migrations (and their imports) run as for any command.
    HomeDatabase(Home, Duration),
    /// `<home>/sweep.db`: a home whose store is elsewhere.
    Local(PathBuf, Duration),
}

impl Location {
    fn path(&self) -> PathBuf {
        match self {
            Location::HomeDatabase(home, _) => home.db_path(),
            Location::Local(path, _) => path.clone(),
        }
    }
}

/// Where `home`'s list lives: its config's (or `TOLLGATE_STORE`'s) store decides. No IO but
/// reading the config.
fn locate(home: &Path) -> Result<Location, SweepError> {
    let home = Home::at(home);
    let config_path = home.config_path();
    let config = Config::load(&config_path)
        .map_err(|e| SweepError::Unreadable {
            path: config_path.clone(),
            message: e.to_string(),
        })?
        .unwrap_or_default();
    let timeout = config.lock_timeout();
    match HomeStore::for_home(&home, &config) {
        HomeStore::Database(_) => Ok(Location::HomeDatabase(home, timeout)),
        HomeStore::Misconfigured { setting, detail } => Err(SweepError::Unreadable {
            path: setting.into(),
            message: detail,
        }),
        HomeStore::Postgres(_) => Ok(Location::Local(home.root().join(SWEEP_DB), timeout)),
    }
}

/// Whether `home` may have a sweep list (its database or an old file exists): `reconcile` sweeps
/// only then, so a home that never ran `tollgate run` gains no file.
pub fn has_list(home: &Path) -> bool {
    home.join(SWEEP_FILE).exists()
        || match locate(home) {
            Ok(location) => location.path().exists(),
            Err(_) => true,
        }
}

/// A store error opening the home's database as a sweep error.
fn store_err(error: StoreError) -> SweepError {
    match error {
        StoreError::Busy {
            path,
            waited_millis,
        } => SweepError::LockTimeout {
            path,
            waited_millis: u64::try_from(waited_millis).unwrap_or(u64::MAX),
        },
        StoreError::File(e) => {
            let path = match &e {
                FileError::Io { path, .. }
                | FileError::Corrupt { path, .. }
                | FileError::NotRegular { path, .. }
                | FileError::Refused { path, .. }
                | FileError::TooLarge { path, .. }
                | FileError::Missing { path, .. } => path.clone(),
            };
            file_err(&path, e)
        }
        StoreError::Database { path, detail } => SweepError::Database { path, detail },
        other => SweepError::Database {
            path: PathBuf::from("tollgate.db"),
            detail: other.to_string(),
        },
    }
}

/// SQLite's error on the list's database: a busy write lock is a lock timeout (nothing changed).
fn sql_err(path: &Path, started: Instant, error: rusqlite::Error) -> SweepError {
    match error.sqlite_error_code() {
        Some(ErrorCode::DatabaseBusy) => SweepError::LockTimeout {
            path: path.to_path_buf(),
            waited_millis: crate::clock::duration_millis(started.elapsed()),
        },
        Some(ErrorCode::NotADatabase) => SweepError::Unreadable {
            path: path.to_path_buf(),
            message: error.to_string(),
        },
        _ => SweepError::Database {
            path: path.to_path_buf(),
            detail: error.to_string(),
        },
    }
}

/// Refuses anything but a regular file (or nothing) at `path`, before SQLite opens it: a FIFO
/// would hang its reads, a symlink to `/dev/zero` would be written through.
fn check_regular(path: &Path) -> Result<bool, SweepError> {
    match fs::metadata(path) {
        Ok(meta) if meta.is_file() => Ok(true),
        Ok(meta) => Err(SweepError::Unreadable {
            path: path.to_path_buf(),
            message: format!(
                "is {}, not a regular file",
                fsutil::describe_type(meta.file_type())
            ),
        }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(SweepError::Io {
            path: path.to_path_buf(),
            source: e,
        }),
    }
}

/// Opens (creating 0600 if missing) `sweep.db` in WAL mode with the sweep tables.
fn open_local(path: &Path, timeout: Duration) -> Result<Connection, SweepError> {
    let exists = check_regular(path)?;
    for suffix in ["-wal", "-shm"] {
        let mut side = path.as_os_str().to_owned();
        side.push(suffix);
        check_regular(Path::new(&side))?;
    }
    if !exists {
        match fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(path)
        {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                check_regular(path)?;
            }
            Err(e) => {
                return Err(SweepError::Io {
                    path: path.to_path_buf(),
                    source: e,
                })
            }
        }
    }
    let started = Instant::now();
    let err = |e| sql_err(path, started, e);
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags).map_err(err)?;
    conn.busy_timeout(timeout).map_err(err)?;
    let mode: String = conn
        .pragma_update_and_check(None, "journal_mode", "wal", |row| row.get(0))
        .map_err(err)?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(SweepError::Database {
            path: path.to_path_buf(),
            detail: format!("cannot switch to WAL mode (journal_mode is {mode:?})"),
        });
    }
    conn.execute_batch(crate::queue::SWEEP_SCHEMA_V6)
        .map_err(err)?;
    Ok(conn)
}

/// Runs `f` inside one write transaction (`BEGIN IMMEDIATE`, committed with `synchronous =
/// FULL`) on `home`'s list, importing `sweep.json` first if it is there. `Err` from `f` (or from
/// the import) rolls everything back. `f` gets the connection and the database's path (for
/// errors).
fn with_list<T>(
    home: &Path,
    f: impl FnOnce(&Connection, &Path) -> Result<T, SweepError>,
) -> Result<T, SweepError> {
    let location = locate(home)?;
    let db = location.path();
    let conn = match &location {
        Location::HomeDatabase(home, timeout) => {
            records::open_home_database(home, *timeout).map_err(store_err)?
        }
        Location::Local(path, timeout) => open_local(path, *timeout)?,
    };
    let started = Instant::now();
    conn.pragma_update(None, "synchronous", "FULL")
        .map_err(|e| sql_err(&db, started, e))?;
    conn.execute_batch("BEGIN IMMEDIATE")
        .map_err(|e| sql_err(&db, started, e))?;
    let result = import_file(&conn, home, &db).and_then(|imported| Ok((imported, f(&conn, &db)?)));
    let (imported, value) = match result {
        Ok(done) => done,
        Err(e) => {
            let _ = conn.execute_batch("ROLLBACK");
            return Err(e);
        }
    };
    if let Err(e) = conn.execute_batch("COMMIT") {
        let _ = conn.execute_batch("ROLLBACK");
        return Err(sql_err(&db, started, e));
    }
    if imported {
        move_file_aside(home)?;
    }
    Ok(value)
}

/// Imports `<home>/sweep.json` into the tables (inside the caller's transaction); `Ok(true)` when
/// there was one. A file that would not load is refused naming it.
fn import_file(conn: &Connection, home: &Path, db: &Path) -> Result<bool, SweepError> {
    let path = home.join(SWEEP_FILE);
    let Some(bytes) = fsutil::read_state_file(&path, "sweep list", fsutil::limits::SWEEP_BYTES)
        .map_err(|e| file_err(&path, e))?
    else {
        return Ok(false);
    };
    let list = parse(&path, &bytes)?;
    for record in list.runs {
        insert_run(conn, db, &record)?;
    }
    for entry in list.entries {
        insert_entry(conn, db, &entry)?;
    }
    Ok(true)
}

/// Renames an imported `sweep.json` to `sweep.json.imported` (`.imported.<millis>` when that
/// exists): kept, never deleted. Another process having moved it first is fine.
fn move_file_aside(home: &Path) -> Result<(), SweepError> {
    let from = home.join(SWEEP_FILE);
    let mut to = home.join(format!("{SWEEP_FILE}.imported"));
    if to.exists() {
        to = home.join(format!(
            "{SWEEP_FILE}.imported.{}",
            crate::clock::now_millis()
        ));
    }
    match fs::rename(&from, &to) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(SweepError::Io {
            path: from,
            source: e,
        }),
        _ => Ok(()),
    }
}

fn render<T: Serialize>(db: &Path, value: &T) -> Result<String, SweepError> {
    serde_json::to_string(value).map_err(|e| SweepError::Database {
        path: db.to_path_buf(),
        detail: format!("cannot render a sweep row: {e}"),
    })
}

fn db_err(db: &Path) -> impl Fn(rusqlite::Error) -> SweepError + '_ {
    move |e| SweepError::Database {
        path: db.to_path_buf(),
        detail: e.to_string(),
    }
}

fn count(conn: &Connection, db: &Path, table: &str) -> Result<usize, SweepError> {
    let n: i64 = conn
        .query_row(&format!("SELECT count(*) FROM {table}"), [], |row| {
            row.get(0)
        })
        .map_err(db_err(db))?;
    Ok(usize::try_from(n).unwrap_or(usize::MAX))
}

/// Inserts a run's record unless its id is there; refused at [`MAX_SWEEP_RUNS`].
fn insert_run(conn: &Connection, db: &Path, record: &RunRecord) -> Result<(), SweepError> {
    let known: Option<i64> = conn
        .query_row(
            "SELECT 1 FROM sweep_runs WHERE run_id = ?1",
            [&record.run_id],
            |row| row.get(0),
        )
        .optional()
        .map_err(db_err(db))?;
    if known.is_some() {
        return Ok(());
    }
    if count(conn, db, "sweep_runs")? >= MAX_SWEEP_RUNS {
        return Err(SweepError::RunsFull {
            path: db.to_path_buf(),
        });
    }
    conn.execute(
        "INSERT INTO sweep_runs (run_id, body) VALUES (?1, ?2)",
        [&record.run_id, &render(db, record)?],
    )
    .map_err(db_err(db))?;
    Ok(())
}

/// Inserts a worktree's entry unless its path is there; refused at [`MAX_SWEEP_ENTRIES`].
fn insert_entry(conn: &Connection, db: &Path, entry: &SweepEntry) -> Result<(), SweepError> {
    let key = entry.worktree.path.to_string_lossy();
    let known: Option<i64> = conn
        .query_row(
            "SELECT 1 FROM sweep_entries WHERE path = ?1",
            [key.as_ref()],
            |row| row.get(0),
        )
        .optional()
        .map_err(db_err(db))?;
    if known.is_some() {
        return Ok(());
    }
    if count(conn, db, "sweep_entries")? >= MAX_SWEEP_ENTRIES {
        return Err(SweepError::Full {
            path: db.to_path_buf(),
        });
    }
    conn.execute(
        "INSERT INTO sweep_entries (path, run_id, body) VALUES (?1, ?2, ?3)",
        [key.as_ref(), &entry.run_id, &render(db, entry)?],
    )
    .map_err(db_err(db))?;
    Ok(())
}

/// Reads the list in insertion order; a row whose body does not parse is refused naming it.
fn read_list(conn: &Connection, db: &Path) -> Result<SweepList, SweepError> {
    fn rows<T: for<'de> Deserialize<'de>>(
        conn: &Connection,
        db: &Path,
        sql: &str,
        what: &str,
    ) -> Result<Vec<T>, SweepError> {
        let mut statement = conn.prepare(sql).map_err(db_err(db))?;
        let found = statement
            .query_map([], |row| {
                Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?))
            })
            .map_err(db_err(db))?;
        let mut out = Vec::new();
        for row in found {
            let (key, body) = row.map_err(db_err(db))?;
            let value = serde_json::from_str(&body).map_err(|e| SweepError::Unreadable {
                path: PathBuf::from(format!("{} ({what} {key})", db.display())),
                message: e.to_string(),
            })?;
            out.push(value);
        }
        Ok(out)
    }
    Ok(SweepList {
        version: SWEEP_FORMAT_VERSION,
        runs: rows(
            conn,
            db,
            "SELECT run_id, body FROM sweep_runs ORDER BY rowid",
            "sweep run",
        )?,
        entries: rows(
            conn,
            db,
            "SELECT path, body FROM sweep_entries ORDER BY rowid",
            "sweep entry",
        )?,
    })
}

/// The home's list as it stands (importing `sweep.json` if it is there).
pub fn list(home: &Path) -> Result<SweepList, SweepError> {
    with_list(home, read_list)
}

/// Takes `sweep.lock`, waiting at most `timeout`: sweepers one at a time.
fn sweeper_lock(home: &Path, timeout: Duration) -> Result<nix::fcntl::Flock<fs::File>, SweepError> {
    let lock_path = home.join(SWEEP_LOCK);
    // 0600 like the rest of the home; a FIFO in its place is refused, not waited on.
    let file = fsutil::open_private_file(&lock_path, "sweep lock", false)
        .map_err(|e| file_err(&lock_path, e))?;
    flock::exclusive_within(file, timeout).map_err(|e| match e {
        flock::WaitError::TimedOut { waited } => SweepError::LockTimeout {
            path: lock_path.clone(),
            waited_millis: crate::clock::duration_millis(waited),
        },
        flock::WaitError::Failed(errno) => SweepError::Io {
            path: lock_path.clone(),
            source: io::Error::from(errno),
        },
    })
}

/// A file error as a sweep error: IO stays IO (exit 3); anything about the file's contents or
/// kind (not a regular file, too large, not JSON) is `Unreadable` (exit 2), and the file is kept.
fn file_err(path: &Path, error: FileError) -> SweepError {
    match error {
        FileError::Io { path, source } => SweepError::Io { path, source },
        other => SweepError::Unreadable {
            path: path.to_path_buf(),
            message: other.to_string(),
        },
    }
}

/// Parses a sweep list read from `path` (named in errors): the format of `sweep.json`.
pub fn parse(path: &Path, bytes: &[u8]) -> Result<SweepList, SweepError> {
    let unreadable = |message: String| SweepError::Unreadable {
        path: path.to_path_buf(),
        message,
    };
    let list: SweepList = serde_json::from_slice(bytes).map_err(|e| unreadable(e.to_string()))?;
    if list.version > SWEEP_FORMAT_VERSION {
        return Err(unreadable(format!(
            "format version {} is newer than this tollgate understands ({SWEEP_FORMAT_VERSION})",
            list.version
        )));
    }
    Ok(list)
}

/// Lists a worktree (durably, before its run reports it abandoned).
pub fn add(home: &Path, entry: SweepEntry) -> Result<(), SweepError> {
    with_list(home, |conn, db| insert_entry(conn, db, &entry))
}

/// Records a run before its first item starts (durably: committed with `synchronous = FULL`).
pub fn record_run(home: &Path, record: RunRecord) -> Result<(), SweepError> {
    with_list(home, |conn, db| insert_run(conn, db, &record))
}

/// Drops a finished run's record (its items have all settled and been released).
pub fn forget_run(home: &Path, run_id: &str) -> Result<(), SweepError> {
    with_list(home, |conn, db| {
        conn.execute("DELETE FROM sweep_runs WHERE run_id = ?1", [run_id])
            .map_err(db_err(db))?;
        Ok(())
    })
}

/// Drops the entries of `paths` (their worktrees were removed).
fn forget_entries(home: &Path, paths: &[PathBuf]) -> Result<(), SweepError> {
    if paths.is_empty() {
        return Ok(());
    }
    with_list(home, |conn, db| {
        for path in paths {
            conn.execute(
                "DELETE FROM sweep_entries WHERE path = ?1",
                [path.to_string_lossy().as_ref()],
            )
            .map_err(db_err(db))?;
        }
        Ok(())
    })
}

/// Whether a recorded run's process is gone for sure (ambiguous counts as alive).
fn run_is_gone(record: &RunRecord) -> bool {
    record.run.pid != std::process::id()
        && matches!(ProcLiveness.observe(&record.run), Observation::Gone)
}

/// How a worktree found under a dead run's root was made: a git worktree has a `.git` file; its
/// repository is the parent of `git rev-parse --git-common-dir`.
fn worktree_at(path: &Path) -> Worktree {
    let kind = fs::symlink_metadata(path.join(".git"))
        .ok()
        .filter(|m| m.is_file())
        .and_then(|_| {
            let out = std::process::Command::new("git")
                .arg("-C")
                .arg(path)
                .args(["rev-parse", "--path-format=absolute", "--git-common-dir"])
                .stdin(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .output()
                .ok()?;
            let common = String::from_utf8(out.stdout).ok()?;
            let common = PathBuf::from(common.trim_end_matches('\n'));
            Some(WorktreeKind::Git {
                repo: common.parent()?.to_path_buf(),
            })
        })
        .unwrap_or(WorktreeKind::Copy);
    Worktree {
        path: path.to_path_buf(),
        kind,
        pack_dir: path.to_path_buf(),
    }
}

/// Kills the units of recorded runs whose process is gone, then removes their worktrees and
/// records. A live run (its identity still matches) is never touched. The kills and removals run
/// outside any transaction (they may take a grace); `sweep.lock` keeps other sweepers out.
pub fn sweep_dead_runs(home: &Path) -> Result<Vec<DeadRun>, SweepError> {
    // The common case (every `run` and `reconcile` asks): no dead run, no lock taken, no file made.
    if !list(home)?.runs.iter().any(run_is_gone) {
        return Ok(Vec::new());
    }
    let _sweeper = sweeper_lock(home, Duration::from_millis(SWEEP_LOCK_TIMEOUT_MILLIS))?;
    sweep_dead_runs_locked(home)
}

fn sweep_dead_runs_locked(home: &Path) -> Result<Vec<DeadRun>, SweepError> {
    let dead: Vec<RunRecord> = list(home)?.runs.into_iter().filter(run_is_gone).collect();
    let mut out = Vec::with_capacity(dead.len());
    for record in dead {
        let grace = Duration::from_millis(record.grace_millis.min(MAX_SWEEP_GRACE_MILLIS));
        let killed = containment::kill_unit(&record.unit, grace);
        let mut report = DeadRun {
            run_id: record.run_id.clone(),
            run_pid: record.run.pid,
            killed: killed.signalled,
            survivors: killed.survivors,
            ..DeadRun::default()
        };
        if report.survivors.is_empty() {
            if let Ok(dir) = fs::read_dir(&record.worktree_root) {
                for entry in dir.flatten().take(MAX_SWEEP_ENTRIES) {
                    let wt = worktree_at(&entry.path());
                    if held_after_exits(&wt.path) {
                        report
                            .failed
                            .push((wt.path, "a live process is inside".to_string()));
                        continue;
                    }
                    match worktree::remove(&wt) {
                        Ok(()) => report.removed.push(wt.path),
                        Err(e) => report.failed.push((wt.path, e.to_string())),
                    }
                }
            }
            if report.failed.is_empty() {
                let _ = fs::remove_dir(&record.worktree_root);
                forget_run(home, &record.run_id)?;
                report.forgotten = true;
            }
        }
        out.push(report);
    }
    Ok(out)
}

/// How long [`held_after_exits`] lets killed processes finish exiting.
const EXIT_SETTLE_MILLIS: u64 = 2_000;

/// [`held_by_live_process`], given killed processes time to finish exiting: an exiting process
/// drops its memory (so the marker walk no longer sees it, and the unit reads empty) before it
/// drops its working directory, so right after a kill a worktree can still look held for a
/// moment (a CI run saw a dead run's worktree left that way). Bounded: a process really working
/// inside keeps it held.
fn held_after_exits(path: &Path) -> bool {
    let until = std::time::Instant::now() + std::time::Duration::from_millis(EXIT_SETTLE_MILLIS);
    while held_by_live_process(path) {
        if std::time::Instant::now() >= until {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    false
}

/// Whether a live process has its working directory (or root) inside `path`.
pub fn held_by_live_process(path: &Path) -> bool {
    let Ok(dir) = fs::read_dir("/proc") else {
        return false;
    };
    let target = fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        if !containment::is_alive(pid) {
            continue;
        }
        if let Ok(cwd) = fs::read_link(format!("/proc/{pid}/cwd")) {
            // A removed cwd reads as "<path> (deleted)"; compare on the path part.
            let cwd_str = cwd.to_string_lossy();
            let cwd = PathBuf::from(cwd_str.trim_end_matches(" (deleted)"));
            if cwd.starts_with(&target) {
                return true;
            }
        }
    }
    false
}

/// Kills what dead runs left ([`sweep_dead_runs`]), then removes every listed worktree nothing
/// holds any more; keeps the rest listed.
pub fn sweep(home: &Path) -> Result<SweepReport, SweepError> {
    sweep_within(home, Duration::from_millis(SWEEP_LOCK_TIMEOUT_MILLIS))
}

/// [`sweep`], waiting at most `timeout` for `sweep.lock`.
fn sweep_within(home: &Path, timeout: Duration) -> Result<SweepReport, SweepError> {
    let _sweeper = sweeper_lock(home, timeout)?;
    let runs = sweep_dead_runs_locked(home)?;
    let mut report = SweepReport {
        runs,
        ..SweepReport::default()
    };
    let mut removed = Vec::new();
    for entry in list(home)?.entries {
        let path = entry.worktree.path.clone();
        match sweep_decision(held_by_live_process(&path)) {
            SweepDecision::Keep => report.kept.push(path),
            SweepDecision::Remove => match worktree::remove(&entry.worktree) {
                Ok(()) => {
                    report.removed.push(path.clone());
                    removed.push(path);
                }
                Err(e) => report.failed.push((path, e.to_string())),
            },
        }
    }
    forget_entries(home, &removed)?;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::containment::Marker;

    #[test]
    fn a_held_sweep_lock_is_a_bounded_wait_and_an_error_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let lock_path = dir.path().join(SWEEP_LOCK);
        let held = match flock::try_exclusive(flock::open(&lock_path).unwrap()).unwrap() {
            flock::TryLock::Locked(lock) => lock,
            flock::TryLock::Held(_) => panic!("a fresh lock file is free"),
        };
        let timeout = Duration::from_millis(40);
        let err = sweep_within(dir.path(), timeout).unwrap_err();
        let SweepError::LockTimeout {
            path,
            waited_millis,
        } = &err
        else {
            panic!("expected a lock timeout, got {err}");
        };
        assert_eq!(path, &lock_path);
        assert!(*waited_millis >= 40, "{waited_millis}");
        assert!(err.to_string().contains("sweep.lock"), "{err}");
        let home = Home::at(dir.path());
        assert!(!home.db_path().exists(), "nothing was changed");
        drop(held);
        assert!(sweep_within(dir.path(), timeout).is_ok());
    }

    fn record(run_id: &str) -> RunRecord {
        RunRecord {
            run_id: run_id.into(),
            run: ProcessIdentity {
                pid: 9,
                start_time_micros: 3,
            },
            unit: UnitIdentity {
                cgroup: None,
                pgid: None,
                marker: Marker::prefix("TOLLGATE_ITEM", format!("{run_id}/")),
                leader: None,
            },
            worktree_root: format!("/h/worktrees/{run_id}").into(),
            grace_millis: 100,
            started_at_millis: 1,
        }
    }

    /// A version-1 `sweep.json` is imported by the first access (and moved aside); the list then
    /// lives in `tollgate.db`, where runs are added and dropped.
    #[test]
    fn a_version_1_file_is_imported_and_runs_are_recorded_in_the_database() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(SWEEP_FILE);
        let v1 = r#"{"version":1,"entries":[{"path":"/h/worktrees/r/0-a","kind":"copy",
            "pack_dir":"/h/worktrees/r/0-a","run_id":"r","run_pid":7,"item":"a",
            "listed_at_millis":5}]}"#;
        fs::write(&path, v1).unwrap();
        let list = list(dir.path()).unwrap();
        assert_eq!(list.entries.len(), 1);
        assert_eq!(list.entries[0].item, "a");
        assert!(list.runs.is_empty());
        assert!(!path.exists(), "moved aside");
        assert!(dir.path().join("sweep.json.imported").is_file());
        assert!(Home::at(dir.path()).db_path().is_file());

        let r2 = record("r2");
        record_run(dir.path(), r2.clone()).unwrap();
        record_run(dir.path(), r2.clone()).unwrap();
        let back = super::list(dir.path()).unwrap();
        assert_eq!(back.entries.len(), 1, "the imported entry is kept");
        assert_eq!(back.runs, vec![r2], "recorded once");
        forget_run(dir.path(), "r2").unwrap();
        assert!(super::list(dir.path()).unwrap().runs.is_empty());
    }

    /// The runs' bound holds in the table as it held in the file.
    #[test]
    fn the_run_bound_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        with_list(dir.path(), |conn, db| {
            for n in 0..MAX_SWEEP_RUNS {
                insert_run(conn, db, &record(&format!("r{n}")))?;
            }
            Ok(())
        })
        .unwrap();
        let err = record_run(dir.path(), record("one-more")).unwrap_err();
        assert!(matches!(err, SweepError::RunsFull { .. }), "{err}");
        assert!(err.to_string().contains("tollgate.db"), "{err}");
        assert_eq!(super::list(dir.path()).unwrap().runs.len(), MAX_SWEEP_RUNS);
    }

    #[test]
    fn a_dead_runs_git_worktree_is_recognised_and_removed_through_git() {
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path().join("repo");
        fs::create_dir(&repo).unwrap();
        let git = |args: &[&str]| {
            let out = std::process::Command::new("git")
                .arg("-C")
                .arg(&repo)
                .args(["-c", "user.name=t", "-c", "user.email=t@t"])
                .args(args)
                .output()
                .unwrap();
            assert!(out.status.success(), "git {args:?}: {out:?}");
            String::from_utf8(out.stdout).unwrap()
        };
        git(&["init", "-q"]);
        git(&["commit", "-q", "--allow-empty", "-m", "x"]);
        let wt = dir.path().join("worktrees").join("run").join("0-a");
        fs::create_dir_all(wt.parent().unwrap()).unwrap();
        git(&[
            "worktree",
            "add",
            "-q",
            "--detach",
            wt.to_str().unwrap(),
            "HEAD",
        ]);
        let copy = dir.path().join("worktrees").join("run").join("1-b");
        fs::create_dir(&copy).unwrap();

        let found = worktree_at(&wt);
        let repo = fs::canonicalize(&repo).unwrap();
        assert_eq!(found.kind, WorktreeKind::Git { repo: repo.clone() });
        assert_eq!(worktree_at(&copy).kind, WorktreeKind::Copy);
        worktree::remove(&found).unwrap();
        assert!(!wt.exists());
        assert_eq!(
            git(&["worktree", "list", "--porcelain"])
                .matches("worktree ")
                .count(),
            1
        );
    }

    #[test]
    fn a_live_run_is_never_swept() {
        let dir = tempfile::tempdir().unwrap();
        let me = crate::process::self_identity().unwrap();
        // A live process that is not us: our parent (the test harness).
        let parent = crate::process::identity_of(nix::unistd::getppid().as_raw() as u32).unwrap();
        for run in [me, parent] {
            let record = RunRecord {
                run_id: format!("live-{}", run.pid),
                run,
                unit: UnitIdentity {
                    cgroup: None,
                    pgid: None,
                    marker: Marker::prefix("TOLLGATE_ITEM", format!("live-{}/", run.pid)),
                    leader: None,
                },
                worktree_root: dir.path().join("worktrees"),
                grace_millis: 0,
                started_at_millis: 0,
            };
            record_run(dir.path(), record).unwrap();
        }
        assert!(sweep_dead_runs(dir.path()).unwrap().is_empty());
        assert_eq!(list(dir.path()).unwrap().runs.len(), 2);
    }
}
