//! Opening the home's database: its files refused unless regular, created 0600 and never through
//! a planted link, a lost database refused before SQLite touches it, WAL mode and the
//! connection's settings, and the schema brought up to date. Every connection of the store and of
//! the record layer is opened here.

use super::errors::{busy_or, sql_error};
use super::import::{move_imported_aside, move_records_aside, read_old_queue, read_old_records};
use super::schema::{migrate, newer_schema, schema_version, up_to_date, SCHEMA_VERSION};
use crate::fsutil::{self, FileError};
use crate::home::Home;
use crate::queue::earlier_state;
use crate::queue::store::StoreError;
use crate::queue::wal_dirsync;
use rusqlite::config::DbConfig;
use rusqlite::{Connection, OpenFlags};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

/// An open connection and the `synchronous` level it was last set to.
pub(crate) struct Open {
    /// `None` only while a section's closure runs and its records hold it ([`records::Section`],
    /// lent as the closure's `RecordTx`); the store's mutex is held meanwhile, so no one else
    /// sees that.
    pub(crate) conn: Option<Connection>,
    pub(crate) synchronous: Option<&'static str>,
}

impl Open {
    /// The home's database opened as the store opens it (checks, migrations, imports), its
    /// `synchronous` level not set yet.
    pub(crate) fn database(home: &Home, lock_timeout: Duration) -> Result<Open, StoreError> {
        Ok(Open {
            conn: Some(open_retrying_busy(home, lock_timeout)?),
            synchronous: None,
        })
    }
}

/// Refuses anything but a regular file at `path` (a FIFO would hang SQLite's reads, a symlink to
/// `/dev/zero` would be taken for an empty database and written to). `Ok(false)` when absent.
fn check_regular(path: &Path, kind: &'static str) -> Result<bool, FileError> {
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_file() => Ok(true),
        Ok(meta) => Err(FileError::NotRegular {
            path: path.to_path_buf(),
            kind,
            found: fsutil::describe_type(meta.file_type()),
        }),
        // A symbolic link to nothing: the database was there (or was meant to be) and is not;
        // creating one through the link would put the home's state somewhere else.
        Err(e) if e.kind() == io::ErrorKind::NotFound => match std::fs::read_link(path) {
            Ok(target) => Err(FileError::Missing {
                path: path.to_path_buf(),
                detail: format!(
                    "a symbolic link to {}, which does not exist (restore what it points to, \
                     or remove the link)",
                    target.display()
                ),
            }),
            Err(_) => Ok(false),
        },
        Err(e) => Err(FileError::io(path, e)),
    }
}

/// Whether the (regular) file at `path` holds 0 bytes: a database SQLite would start afresh,
/// deleting its log (tollgate's own databases hold their first page from their first open).
pub(super) fn is_empty(path: &Path) -> Result<bool, FileError> {
    std::fs::metadata(path)
        .map(|meta| meta.len() == 0)
        .map_err(|e| FileError::io(path, e))
}

/// SQLite's files of the database at `path`: the database itself, its log and its shared
/// memory index. All must be regular files (or absent) before SQLite opens any of them.
pub(super) fn check_database_files(path: &Path) -> Result<bool, FileError> {
    let exists = check_regular(path, "database")?;
    for suffix in ["-wal", "-shm"] {
        let mut side = path.as_os_str().to_owned();
        side.push(suffix);
        check_regular(Path::new(&side), "database log")?;
    }
    Ok(exists)
}

/// [`open_database`], tried again while it meets a busy database, up to `lock_timeout` in all.
///
/// Commands that open a new database at the same moment race on its first moments (one creates
/// the tables while another, still in the rollback journal mode of an empty file, switches to WAL
/// or reads the schema): SQLite answers some of those with `SQLITE_BUSY` at once, without its busy
/// handler, so the wait is here. Bounded like every lock wait.
fn open_retrying_busy(home: &Home, lock_timeout: Duration) -> Result<Connection, StoreError> {
    let started = Instant::now();
    let mut pause_millis = 1;
    loop {
        match open_database(home, lock_timeout) {
            Err(StoreError::Busy { path, .. }) => {
                if started.elapsed() >= lock_timeout {
                    return Err(StoreError::Busy {
                        path,
                        waited_millis: started.elapsed().as_millis(),
                    });
                }
                std::thread::sleep(Duration::from_millis(pause_millis));
                pause_millis = (pause_millis * 2).min(OPEN_RETRY_MAX_PAUSE_MILLIS);
            }
            other => return other,
        }
    }
}

/// Statements kept prepared per connection. rusqlite keeps 16 by default; one section (its part's
/// reads, its writes, the records it touches) uses more than that, so with 16 a process that ran
/// several sections prepared the same statements again in each (measured with a uprobe on
/// `sqlite3Prepare`: docs/PERFORMANCE.md, "Compiling the look, and the turn folder made by the
/// runner").
const STATEMENT_CACHE_CAPACITY: usize = 128;

/// The longest pause between two tries of a busy first open.
const OPEN_RETRY_MAX_PAUSE_MILLIS: u64 = 20;

/// Opens the home's database, creating it (0600) if missing, in WAL mode, and brings its schema
/// to [`SCHEMA_VERSION`], importing an earlier version's `queue.json` when the database is new.
fn open_database(home: &Home, lock_timeout: Duration) -> Result<Connection, StoreError> {
    let path = home.db_path();
    prepare_file(home, &path)?;
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let mut conn = Connection::open_with_flags(&path, flags).map_err(|e| sql_error(&path, e))?;
    configure(&conn, &path, lock_timeout)?;
    // Every command opens the database: its usual case (the newest schema, nothing imported
    // left to move aside) costs one read; anything else takes the full checks.
    if up_to_date(&conn) != Some(true) {
        bring_up_to_date(home, &mut conn, &path)?;
    }
    // The log is open now: its directory entry is synced once, not by every connection.
    let settled = wal_dirsync::settle(&conn);
    tracing::debug!("{}: log directory entry {settled:?}", path.display());
    Ok(conn)
}

/// Decides, before SQLite opens anything, whether the database file at `path` may be opened:
/// a new one only when the earlier version's files would import and the home shows no sign of
/// a lost database, and then created here (0600, never through a link); an existing one only
/// when it is not emptied while the home shows it had one ("A lost database").
fn prepare_file(home: &Home, path: &Path) -> Result<(), StoreError> {
    let exists = check_database_files(path)?;
    if !exists {
        // A corrupt queue.json (or record file) is refused before anything is created, and
        // named as what is wrong first.
        read_old_queue(home)?;
        read_old_records(home)?;
    }
    // A database that is gone, or emptied to 0 bytes (SQLite would then delete its log), while
    // the home shows it had one is refused before SQLite opens anything ("A lost database").
    if !exists || is_empty(path)? {
        let signs = earlier_state::earlier_state(home, true)?;
        if !signs.is_empty() {
            return Err(earlier_state::lost(home, !exists, &signs).into());
        }
    }
    if !exists {
        // Created here, not by SQLite, for its mode and so a planted symlink is refused.
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(path)
        {
            Ok(_) => {}
            // Another command created it meanwhile (or something else is there: checked again).
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                if !check_regular(path, "database")? {
                    return Err(FileError::io(path, e).into());
                }
            }
            Err(e) => return Err(FileError::io(path, e).into()),
        }
    }
    Ok(())
}

/// The connection's settings, each for a measured reason: the lock wait, no checkpoint at
/// close, the statement cache, the log's size limit, and WAL mode (refused if SQLite will not
/// switch).
fn configure(conn: &Connection, path: &Path, lock_timeout: Duration) -> Result<(), StoreError> {
    // The queue lock's wait: short, growing pauses up to `lock_timeout` (src/queue/busy.rs).
    crate::queue::busy::install(conn, lock_timeout).map_err(|e| sql_error(path, e))?;
    // Every command is a short process: a checkpoint at each close would cost every command the
    // syncs of the database file. The log is checkpointed as it grows (SQLite's automatic
    // checkpoint every 1000 pages) by whichever commit crosses the mark.
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)
        .map_err(|e| sql_error(path, e))?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE_CAPACITY);
    // A restarted log is cut back to the automatic checkpoint's mark (src/queue/log_trim.rs).
    conn.pragma_update(
        None,
        "journal_size_limit",
        crate::queue::log_trim::LIMIT_BYTES,
    )
    .map_err(|e| sql_error(path, e))?;
    let started = Instant::now();
    let mode: String = conn
        .pragma_update_and_check(None, "journal_mode", "wal", |row| row.get(0))
        .map_err(|e| busy_or(path, started, e))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(StoreError::Database {
            path: path.to_path_buf(),
            detail: format!("cannot switch to WAL mode (journal_mode is {mode:?})"),
        });
    }
    Ok(())
}

/// The full checks of an open whose schema is not the newest or whose import is not finished:
/// a database with no schema while the home shows it had one is refused, an older schema is
/// migrated, a newer one refused, and imported files are moved aside.
fn bring_up_to_date(home: &Home, conn: &mut Connection, path: &Path) -> Result<(), StoreError> {
    let version = schema_version(conn, path)?;
    if version == 0 {
        // A database with no schema (replaced by an empty one) is a new one to SQLite.
        let signs = earlier_state::earlier_state(home, false)?;
        if !signs.is_empty() {
            return Err(earlier_state::lost(home, false, &signs).into());
        }
    }
    if version < SCHEMA_VERSION {
        migrate(home, conn, path)?;
    } else if version > SCHEMA_VERSION {
        return Err(newer_schema(path, version));
    }
    move_imported_aside(home, conn, path)?;
    move_records_aside(home, conn, path)?;
    Ok(())
}

/// A connection for the record layer's accesses outside a section ([`records`](crate::queue::records)): the same open,
/// checks and migrations as the store's, and `synchronous = NORMAL` (those writes are internal
/// transitions, spec/store.md "Records").
pub(crate) fn open_for_records(
    home: &Home,
    lock_timeout: Duration,
) -> Result<Connection, StoreError> {
    let conn = open_retrying_busy(home, lock_timeout)?;
    conn.pragma_update(None, "synchronous", "NORMAL")
        .map_err(|e| sql_error(&home.db_path(), e))?;
    Ok(conn)
}
