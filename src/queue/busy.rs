//! How a section waits for the queue lock (the database's write lock) another process holds:
//! SQLite's busy handler for the home's database, bounded by `lock_timeout` as before.
//!
//! SQLite cannot block on its WAL write lock (it takes it with a non-blocking `fcntl`), so a
//! waiter sleeps and tries again. The handler `busy_timeout` installs sleeps 1, 2, 5, 10, 15, 20,
//! 25, 25, 25, 50, 50 and then 100 ms between tries, however briefly the lock is held; a core
//! step's section holds it for well under a millisecond, so a waiter that lost twice slept 5 ms
//! more on a lock that sat free. In a burst of 60 `submit -- true` on 4 slots that was about
//! 30 ms of sleep per turn across the submits and runners (strace: 330 sleeps of 1 to 100 ms;
//! docs/PERFORMANCE.md, "Where one turn goes"). This handler tries again after
//! [`FIRST_PAUSE_MICROS`], doubling up to [`MAX_PAUSE_MICROS`], until `lock_timeout` has passed
//! since the first refusal; then the statement fails with `SQLITE_BUSY` as before and the store
//! names the database in its error.

use rusqlite::Connection;
use std::cell::Cell;
use std::os::raw::{c_int, c_void};
use std::time::{Duration, Instant};

/// The first pause after a refused try.
pub const FIRST_PAUSE_MICROS: u64 = 50;
/// The longest pause between two tries: the poll period of a long wait (a try is one `fcntl`).
pub const MAX_PAUSE_MICROS: u64 = 1_000;

thread_local! {
    /// When the current wait of this thread began (its first refusal). A wait runs on the thread
    /// of the statement that waits, and SQLite calls the handler with a count that is 0 at each
    /// new wait, so one cell per thread serves every connection it uses.
    static WAIT_BEGAN: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// The pause before try `count + 1`.
pub fn pause(count: u32) -> Duration {
    Duration::from_micros((FIRST_PAUSE_MICROS << count.min(16)).min(MAX_PAUSE_MICROS))
}

/// Whether a wait that began `waited` ago may go on under `timeout`.
pub fn may_wait(waited: Duration, timeout: Duration) -> bool {
    waited < timeout
}

/// Installs the handler on `conn` with `timeout` (the config's `lock_timeout`), replacing the one
/// `busy_timeout` set.
pub fn install(conn: &Connection, timeout: Duration) -> rusqlite::Result<()> {
    // The timeout travels in the handler's context pointer (no allocation to own or free).
    let millis = usize::try_from(timeout.as_millis()).unwrap_or(usize::MAX);
    // SAFETY: an FFI call on the open connection's handle, which outlives the registration (it is
    // replaced or dropped with the connection); `on_busy` matches the callback's C signature and
    // reads its context only as an integer.
    let rc = unsafe {
        rusqlite::ffi::sqlite3_busy_handler(conn.handle(), Some(on_busy), millis as *mut c_void)
    };
    match rc {
        rusqlite::ffi::SQLITE_OK => Ok(()),
        code => Err(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(code),
            Some("cannot install the busy handler".to_string()),
        )),
    }
}

/// SQLite's busy callback: sleep and try again (non-zero), or give up (0) once the wait has
/// lasted the timeout. `count` is how many times it was called in this wait.
extern "C" fn on_busy(context: *mut c_void, count: c_int) -> c_int {
    let timeout = Duration::from_millis(context as usize as u64);
    let now = Instant::now();
    let began = WAIT_BEGAN.with(|cell| match (count, cell.get()) {
        (0, _) | (_, None) => {
            cell.set(Some(now));
            now
        }
        (_, Some(began)) => began,
    });
    if !may_wait(now.duration_since(began), timeout) {
        return 0;
    }
    std::thread::sleep(pause(u32::try_from(count).unwrap_or(0)));
    1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pauses_start_short_and_are_capped() {
        assert_eq!(pause(0), Duration::from_micros(50));
        assert_eq!(pause(1), Duration::from_micros(100));
        assert_eq!(pause(4), Duration::from_micros(800));
        assert_eq!(pause(5), Duration::from_micros(MAX_PAUSE_MICROS));
        assert_eq!(pause(u32::MAX), Duration::from_micros(MAX_PAUSE_MICROS));
        assert!(may_wait(Duration::ZERO, Duration::from_millis(1)));
        assert!(!may_wait(
            Duration::from_millis(1),
            Duration::from_millis(1)
        ));
        assert!(!may_wait(Duration::ZERO, Duration::ZERO));
    }

    /// A writer that holds the lock makes a second connection wait, and that wait ends with the
    /// writer's commit (a channel says when), not with the timeout; a wait that outlasts the
    /// timeout fails busy.
    #[test]
    fn a_waiter_gets_the_lock_once_it_is_released_and_gives_up_at_the_timeout() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let path = dir.path().join("t.db");
        let open = |timeout_millis: u64| {
            let conn = Connection::open(&path).expect("open");
            conn.pragma_update(None, "journal_mode", "wal")
                .expect("wal");
            install(&conn, Duration::from_millis(timeout_millis)).expect("handler");
            conn
        };
        let holder = open(60_000);
        holder
            .execute_batch("CREATE TABLE t (x INTEGER); BEGIN IMMEDIATE; INSERT INTO t VALUES (1)")
            .expect("the holder's transaction");
        // Given up: the lock stays held longer than this waiter's timeout.
        let impatient = open(20);
        let refused = impatient.execute_batch("BEGIN IMMEDIATE");
        assert_eq!(
            refused.err().and_then(|e| e.sqlite_error_code()),
            Some(rusqlite::ErrorCode::DatabaseBusy)
        );
        // Waited for: the holder commits once the waiter is waiting.
        let (started, waiting) = std::sync::mpsc::channel();
        let path2 = path.clone();
        let waiter = std::thread::spawn(move || {
            let conn = Connection::open(&path2).expect("open");
            install(&conn, Duration::from_secs(60)).expect("handler");
            started.send(()).expect("the test waits");
            conn.execute_batch("BEGIN IMMEDIATE; INSERT INTO t VALUES (2); COMMIT")
        });
        waiting.recv().expect("the waiter started");
        holder.execute_batch("COMMIT").expect("commit");
        waiter
            .join()
            .expect("the waiter")
            .expect("the waiter's transaction");
        let rows: i64 = holder
            .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
            .expect("count");
        assert_eq!(rows, 2);
    }
}
