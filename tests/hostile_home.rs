//! Hostile files in a home (issue 31, points 5, 6, 7 and 10): every command refuses them with
//! exit 2, naming the file, and changes nothing; `doctor` says so too.
//!
//! - A deleted or emptied `tollgate.db` beside signs that it existed (turn folders, its log) is
//!   refused (spec/store.md, "A lost database"); it used to be started afresh: `status` said "no
//!   turns yet" and `doctor` "healthy", every earlier turn gone.
//! - A dangling `tollgate.db` symlink is named and refused (it used to fail every command with
//!   "File exists" as exit 3, while `doctor` said "no database yet … healthy").
//! - A malformed database is a bad state file: exit 2, not 3.
//! - `logs` of a turn whose `stdout.log` is a FIFO (or a symlink) refuses it at once instead of
//!   waiting for a writer for ever.

mod common;

use common::{describe, init_home, tollgate};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

/// A home with three completed turns of task `done` and one queued turn of task `later` (the
/// home paused, so it stays queued).
fn home_with_history(dir: &Path) -> PathBuf {
    let home = init_home(dir, 1);
    for _ in 0..3 {
        let out = tollgate(
            &home,
            &["submit", "--task", "done", "--wait", "--", "echo", "hi"],
        );
        assert!(out.status.success(), "{}", describe(&out));
    }
    for args in [&["pause"][..], &["submit", "--task", "later", "--", "true"]] {
        let out = tollgate(&home, args);
        assert!(out.status.success(), "{}", describe(&out));
    }
    home
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `tollgate ARGS…` that must end within 10 s: a command that hangs on a hostile file fails.
fn tollgate_bounded(home: &Path, args: &[&str]) -> Output {
    common::tollgate_within(home, args, Duration::from_secs(10))
}

/// Every command that opens the store refuses the home with exit 2 naming the database and
/// `named`, and `doctor` reports it (exit 1) naming `named` too.
fn refused_everywhere(home: &Path, named: &str) {
    for args in [
        &["status"][..],
        &["submit", "--task", "new", "--", "true"],
        &["reconcile"],
        &["logs", "done:1"],
    ] {
        let out = tollgate(home, args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", describe(&out));
        let said = stderr(&out);
        assert!(
            said.contains("tollgate.db") && said.contains(named),
            "{args:?} does not name what is missing: {said}"
        );
    }
    let doctor = tollgate(home, &["doctor"]);
    assert_eq!(doctor.status.code(), Some(1), "{}", describe(&doctor));
    let said = stdout(&doctor);
    assert!(
        said.contains(named) && !said.contains("healthy\n") && said.contains("problems found"),
        "doctor: {said}"
    );
}

#[test]
fn a_deleted_database_beside_turn_folders_is_refused_and_doctor_says_so() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = home_with_history(dir.path());
    std::fs::remove_file(home.join("tollgate.db")).expect("delete the database");
    refused_everywhere(&home, "tasks/done/turns/1/");
    assert!(
        !home.join("tollgate.db").exists(),
        "a refused command created a new database"
    );
    // Without its log the turn folders still show it: refused all the same.
    for side in ["tollgate.db-wal", "tollgate.db-shm"] {
        std::fs::remove_file(home.join(side)).expect("remove the log");
    }
    refused_everywhere(&home, "tasks/done/turns/1/");
}

#[test]
fn an_emptied_database_is_refused_and_its_log_is_kept() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = home_with_history(dir.path());
    let wal = std::fs::read(home.join("tollgate.db-wal")).expect("the log");
    std::fs::write(home.join("tollgate.db"), b"").expect("truncate the database");
    refused_everywhere(&home, "tollgate.db-wal");
    assert_eq!(
        std::fs::read(home.join("tollgate.db-wal")).expect("the log is still there"),
        wal,
        "the log of the emptied database was changed"
    );
    assert_eq!(
        std::fs::metadata(home.join("tollgate.db")).unwrap().len(),
        0
    );
}

#[test]
fn a_new_home_is_no_lost_database() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = init_home(dir.path(), 1);
    let out = tollgate(&home, &["status"]);
    assert!(out.status.success(), "{}", describe(&out));
    let doctor = tollgate(&home, &["doctor"]);
    assert!(doctor.status.success(), "{}", describe(&doctor));
}

#[test]
fn a_dangling_database_symlink_is_named_and_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = init_home(dir.path(), 1);
    let target = dir.path().join("elsewhere/tollgate.db");
    std::os::unix::fs::symlink(&target, home.join("tollgate.db")).expect("symlink");
    for args in [&["status"][..], &["submit", "--", "true"]] {
        let out = tollgate(&home, args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", describe(&out));
        let said = stderr(&out);
        assert!(
            said.contains("symbolic link") && said.contains(&target.display().to_string()),
            "{args:?}: {said}"
        );
    }
    let doctor = tollgate(&home, &["doctor"]);
    assert_eq!(doctor.status.code(), Some(2), "{}", describe(&doctor));
    let said = format!("{}{}", stdout(&doctor), stderr(&doctor));
    assert!(
        said.contains("symbolic link") && !said.contains("healthy"),
        "{said}"
    );
    assert!(!target.exists(), "something was created through the link");
}

#[test]
fn a_malformed_database_is_a_bad_state_file_exit_2() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = home_with_history(dir.path());
    let db = home.join("tollgate.db");
    {
        // Everything into the database file, then every page after the first overwritten.
        let conn = rusqlite::Connection::open(&db).expect("open");
        conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
            .expect("checkpoint");
    }
    let len = std::fs::metadata(&db).expect("db").len();
    assert!(len > 4096 * 4, "the database is all in its first page?");
    let mut bytes = std::fs::read(&db).expect("read");
    bytes[4096..].iter_mut().for_each(|b| *b = 0x5a);
    std::fs::write(&db, &bytes).expect("damage");
    for args in [&["status"][..], &["submit", "--", "true"]] {
        let out = tollgate(&home, args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", describe(&out));
        assert!(stderr(&out).contains("tollgate.db"), "{}", describe(&out));
    }
    assert_eq!(
        std::fs::read(&db).expect("read"),
        bytes,
        "the damaged file was changed"
    );
}

#[test]
fn logs_refuse_a_fifo_or_a_symlink_in_place_of_a_log_at_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = init_home(dir.path(), 1);
    let out = tollgate(
        &home,
        &["submit", "--task", "k", "--wait", "--", "echo", "hi"],
    );
    assert!(out.status.success(), "{}", describe(&out));
    let log = home.join("tasks/k/turns/1/stdout.log");
    std::fs::remove_file(&log).expect("remove the log");
    nix::unistd::mkfifo(&log, nix::sys::stat::Mode::S_IRWXU).expect("mkfifo");
    for args in [&["logs", "k:1"][..], &["logs", "k:1", "--json"]] {
        let out = tollgate_bounded(&home, args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", describe(&out));
        let said = stderr(&out);
        assert!(
            said.contains("stdout.log") && said.contains("FIFO"),
            "{said}"
        );
    }
    std::fs::remove_file(&log).expect("remove the fifo");
    let elsewhere = dir.path().join("secret.txt");
    std::fs::write(&elsewhere, b"not a log").expect("write");
    std::os::unix::fs::symlink(&elsewhere, &log).expect("symlink");
    let out = tollgate_bounded(&home, &["logs", "k:1"]);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert!(stderr(&out).contains("symbolic link"), "{}", describe(&out));
    assert!(!stdout(&out).contains("not a log"), "the link was followed");
}
