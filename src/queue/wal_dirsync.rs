//! The one directory sync of the database's log (spec/store.md, "Durability").
//!
//! A commit in WAL mode is durable once the log is fsynced *and* the log's directory entry is on
//! disk. SQLite's unix VFS cannot know whether the entry is, so it syncs the directory at the first
//! sync of every connection that opened the log (`UNIXFILE_DIRSYNC`): every tollgate command, a
//! short process, paid two syncs for its one promise. The entry of a log stays on disk once some
//! process synced the directory after the log was created, and the log is never deleted while a
//! connection has it open (SQLite deletes it only at the last close that checkpoints, which
//! tollgate's connections never do: `SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE`). So:
//!
//! - right after a connection opened the log, [`settle`] looks for the extended attribute
//!   [`MARK`] on the log's inode. Absent (a new log, or one recreated by another tool, which is a
//!   new inode): it syncs the directory itself, then sets the mark;
//! - for a log found marked (or marked here) SQLite's own directory sync is skipped: the VFS's
//!   `openDirectory` system call is replaced ([`install`]) by one that answers "cannot open" for
//!   such a log, which SQLite treats as "no directory to sync".
//!
//! A file system without user extended attributes keeps SQLite's sync (two syncs a command, as
//! before); a mark lost in a power loss only costs one more directory sync.

use rusqlite::ffi;
use rusqlite::Connection;
use std::ffi::{c_char, c_int, CStr, CString};
use std::path::Path;
use std::sync::{Mutex, OnceLock};

/// The extended attribute on a log whose directory entry was synced after it was created.
pub const MARK: &CStr = c"user.tollgate.dirsynced";

/// The most logs a process remembers as settled (a command has one; tests a few dozen homes).
const MAX_SETTLED_LOGS: usize = 64;

/// The logs (SQLite's own path of each) whose directory entry is known to be on disk.
static SETTLED: Mutex<Vec<CString>> = Mutex::new(Vec::new());

/// SQLite's `openDirectory` as it was before [`install`]; `None` when it could not be replaced.
static ORIGINAL: OnceLock<Option<OpenDirectory>> = OnceLock::new();

type OpenDirectory = unsafe extern "C" fn(*const c_char, *mut c_int) -> c_int;

/// What [`settle`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Settled {
    /// The log was marked already: nothing synced.
    Marked,
    /// The log was not marked: the directory was synced here and the mark set.
    Synced,
    /// The mark cannot be kept here (no log yet, no extended attributes, no VFS hook): SQLite
    /// syncs the directory as it always did.
    Unknown,
}

/// Replaces the unix VFS's `openDirectory` once per process. Called before a connection of
/// tollgate's syncs anything (from the open path).
fn install() -> Option<OpenDirectory> {
    *ORIGINAL.get_or_init(|| {
        // SAFETY: sqlite3_vfs_find(NULL) initialises SQLite and returns its default VFS, a static
        // object never freed (or null). Its xGetSystemCall/xSetSystemCall read and replace one
        // entry of the unix VFS's system call table: a pointer-sized store, done once (this
        // OnceLock); a connection reading the entry meanwhile gets the old or the new function,
        // both valid for the same signature. The transmutes are between the C function pointer
        // type SQLite stores and the `openDirectory(const char*, int*)` signature it casts to.
        unsafe {
            let vfs = ffi::sqlite3_vfs_find(std::ptr::null());
            if vfs.is_null() {
                return None;
            }
            let get = (*vfs).xGetSystemCall?;
            let set = (*vfs).xSetSystemCall?;
            let name = c"openDirectory";
            let original = get(vfs, name.as_ptr())?;
            let original: OpenDirectory =
                std::mem::transmute::<unsafe extern "C" fn(), OpenDirectory>(original);
            let ours = std::mem::transmute::<OpenDirectory, unsafe extern "C" fn()>(
                open_directory as OpenDirectory,
            );
            if set(vfs, name.as_ptr(), Some(ours)) != ffi::SQLITE_OK {
                return None;
            }
            Some(original)
        }
    })
}

/// The VFS's `openDirectory`: "cannot open" (SQLite then skips its directory sync) for a settled
/// log, SQLite's own for anything else.
unsafe extern "C" fn open_directory(path: *const c_char, fd: *mut c_int) -> c_int {
    // SAFETY: SQLite passes the NUL-terminated name of the file being synced, live for the call.
    let name = unsafe { CStr::from_ptr(path) };
    let settled = SETTLED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .any(|log| log.as_c_str() == name);
    match ORIGINAL.get().copied().flatten() {
        // SAFETY: the function SQLite had in the table, called with SQLite's own arguments.
        Some(original) if !settled => unsafe { original(path, fd) },
        _ => {
            // SAFETY: `fd` points at the caller's descriptor variable.
            unsafe { *fd = -1 };
            ffi::SQLITE_CANTOPEN
        }
    }
}

/// Called right after `conn` opened the database (its log is open, created if it was missing):
/// makes sure the log's directory entry is on disk, syncing the directory only when the log is
/// not marked yet, and from then on keeps SQLite from syncing the directory for it.
pub fn settle(conn: &Connection) -> Settled {
    if install().is_none() {
        return Settled::Unknown;
    }
    let Some(db) = conn.path().filter(|p| !p.is_empty()) else {
        return Settled::Unknown;
    };
    let Ok(log) = CString::new(format!("{db}-wal")) else {
        return Settled::Unknown;
    };
    let found = match has_mark(&log) {
        Ok(true) => Settled::Marked,
        Ok(false) => {
            let Some(dir) = Path::new(db).parent() else {
                return Settled::Unknown;
            };
            if sync_directory(dir).is_err() || set_mark(&log).is_err() {
                return Settled::Unknown;
            }
            Settled::Synced
        }
        Err(_) => return Settled::Unknown,
    };
    let mut settled = SETTLED.lock().unwrap_or_else(|e| e.into_inner());
    if !settled.contains(&log) {
        if settled.len() >= MAX_SETTLED_LOGS {
            settled.remove(0);
        }
        settled.push(log);
    }
    found
}

/// Whether `log` carries [`MARK`]; `Err` when it cannot (no such file, no extended attributes).
fn has_mark(log: &CStr) -> std::io::Result<bool> {
    // SAFETY: getxattr(2) with NUL-terminated path and name and no buffer (size 0): it only
    // reports the value's size.
    let size = unsafe { libc::getxattr(log.as_ptr(), MARK.as_ptr(), std::ptr::null_mut(), 0) };
    if size >= 0 {
        return Ok(true);
    }
    let error = std::io::Error::last_os_error();
    match error.raw_os_error() {
        Some(libc::ENODATA) => Ok(false),
        _ => Err(error),
    }
}

/// Sets [`MARK`] on `log`.
fn set_mark(log: &CStr) -> std::io::Result<()> {
    let value = b"1";
    // SAFETY: setxattr(2) with NUL-terminated path and name and a buffer of `value.len()` bytes.
    let rc = unsafe {
        libc::setxattr(
            log.as_ptr(),
            MARK.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// fsync(2) of a directory: its entries (the log's, the database's) reach the disk.
fn sync_directory(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open_wal(db: &Path) -> Connection {
        let conn = Connection::open(db).expect("open");
        let mode: String = conn
            .pragma_update_and_check(None, "journal_mode", "wal", |row| row.get(0))
            .expect("wal");
        assert_eq!(mode, "wal");
        conn.execute_batch("CREATE TABLE IF NOT EXISTS t (x INTEGER)")
            .expect("a table");
        conn
    }

    fn log_of(conn: &Connection) -> CString {
        CString::new(format!("{}-wal", conn.path().expect("a file"))).expect("no NUL")
    }

    /// What SQLite's directory sync of `log` would do now: `true` when it would sync.
    fn sqlite_would_sync(log: &CStr) -> bool {
        let mut fd: c_int = -1;
        // SAFETY: a NUL-terminated path and a live int, as SQLite calls it.
        let rc = unsafe { open_directory(log.as_ptr(), &mut fd) };
        if rc == ffi::SQLITE_OK {
            assert!(fd >= 0, "an opened directory has a descriptor");
            // SAFETY: the descriptor open_directory opened for us.
            unsafe { libc::close(fd) };
            true
        } else {
            assert_eq!(rc, ffi::SQLITE_CANTOPEN);
            assert_eq!(fd, -1);
            false
        }
    }

    #[test]
    fn a_log_is_synced_once_then_skipped_and_a_recreated_log_is_synced_again() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = dir.path().join("tollgate.db");
        let _ = install();
        let first = open_wal(&db);
        let log = log_of(&first);
        if has_mark(&log).is_err() {
            eprintln!("no user extended attributes on this file system: SQLite keeps its sync");
            return;
        }
        // A new log: not marked, so SQLite's own sync stays until the first settle syncs it.
        assert_eq!(has_mark(&log).ok(), Some(false));
        assert!(sqlite_would_sync(&log));
        assert_eq!(settle(&first), Settled::Synced);
        assert_eq!(has_mark(&log).ok(), Some(true));
        assert!(
            !sqlite_would_sync(&log),
            "a settled log is not synced again"
        );
        // Every later connection (the next command) finds it marked and syncs nothing.
        let second = open_wal(&db);
        assert_eq!(settle(&second), Settled::Marked);
        // These connections close as the sqlite3 shell does: the last one checkpoints and
        // deletes the log. The next connection creates a new one, an inode without the mark,
        // and it is synced again.
        drop((first, second));
        let mut wal = db.as_os_str().to_owned();
        wal.push("-wal");
        let _ = std::fs::remove_file(&wal);
        assert!(!Path::new(&wal).exists(), "the log is gone");
        let third = open_wal(&db);
        assert_eq!(has_mark(&log).ok(), Some(false));
        assert_eq!(settle(&third), Settled::Synced);
        assert_eq!(has_mark(&log).ok(), Some(true));
    }

    #[test]
    fn other_files_keep_sqlites_directory_sync() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = dir.path().join("other.db");
        let conn = open_wal(&db);
        // The hook is installed by any settle; this log was never settled.
        let _ = install();
        let log = log_of(&conn);
        assert!(sqlite_would_sync(&log));
    }
}
