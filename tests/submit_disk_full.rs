//! Issue 31, point 2: a `submit` that exits 3 queued nothing. A disk that fills during a submit
//! used to make it exit 3 ("tollgate.db: No space left on device") although its turn was queued
//! and later ran: the handoff's publish after the submit's commit failed, or the commit itself
//! failed after its last page was in the log. Now every failure after (or during) the commit is
//! exit 6, "state unknown", naming the turn's id.
//!
//! The full disk is `RLIMIT_FSIZE`: no file the submit (and the runner it starts) writes grows
//! past N bytes. The submit writes the database's log (`tollgate.db-wal`) at its end, so moving N
//! one log frame at a time from the log's length before the submit to its length after a whole
//! one fails each write of the submit in turn: its section, its commit, the two publishes of the
//! handoff, the repair. After each, the home is read without any limit: an exit 3 must have left
//! no record and no row of the turn, an exit 0 both, an exit 6 says the turn's id.

mod common;

use common::containment::{runners, sigkill};
use common::{describe, init_home, tollgate};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tollgate::home::Home;
use tollgate::protocol::slots::TurnKey;

/// One frame of the log: a 24-byte header and a 4 KiB page.
const FRAME_BYTES: u64 = 24 + 4096;

fn wal(home: &Path) -> PathBuf {
    home.join("tollgate.db-wal")
}

fn wal_len(home: &Path) -> u64 {
    std::fs::metadata(wal(home)).map_or(0, |m| m.len())
}

/// A copy of the home at `from` (database, log and index; no process has them open).
fn copy_home(from: &Path, to: &Path) {
    std::fs::create_dir_all(to.join("tasks")).expect("home");
    for name in [
        "tollgate.toml",
        "tollgate.db",
        "tollgate.db-wal",
        "tollgate.db-shm",
    ] {
        if from.join(name).exists() {
            std::fs::copy(from.join(name), to.join(name)).expect("copy");
        }
    }
}

/// Kills the runners the submit left in `home` (held in their own disk-full retry by the same
/// limit) and waits until they are gone: nothing a test starts outlives it.
fn kill_runners(home: &Path) {
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let live = runners(home);
        if live.is_empty() {
            return;
        }
        assert!(Instant::now() < until, "runners {live:?} would not die");
        live.into_iter().for_each(sigkill);
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Whether the turn `probe:1` left a trace: its record, or a row in the queue; and whether the
/// record holds an outcome (its runner, which inherits the size limit, may get as far as its
/// finish before it is killed, and then the row has left).
fn queued(home: &Path) -> (bool, bool, bool) {
    let view = Home::at(home);
    let key = TurnKey::new("probe", 1);
    let found = tollgate::tasks::load_turn(&view, &key).expect("read the records");
    let settled = found.as_ref().is_some_and(|t| t.is_settled());
    let record = found.is_some();
    let config = tollgate::config::Config::load(&home.join("tollgate.toml"))
        .expect("config")
        .unwrap_or_default();
    let row = tollgate::queue::HomeStore::for_home(&view, &config)
        .load()
        .expect("load the queue")
        .row(&key)
        .is_some();
    (record, row, settled)
}

#[test]
fn a_submit_that_exits_3_on_a_full_disk_queued_nothing_at_any_write() {
    let dir = tempfile::tempdir().expect("tempdir");
    let template = init_home(dir.path(), 1);
    // The schema, and a log with a few frames already, as in a home in use.
    let warm = tollgate(
        &template,
        &["submit", "--task", "warm", "--wait", "--", "true"],
    );
    assert!(warm.status.success(), "{}", describe(&warm));
    kill_runners(&template);
    let before = wal_len(&template);
    // How far one whole submit (and its runner) takes the log.
    let whole = dir.path().join("whole");
    copy_home(&template, &whole);
    let out = tollgate(&whole, &["submit", "--task", "probe", "--", "true"]);
    assert!(out.status.success(), "{}", describe(&out));
    kill_runners(&whole);
    let after = wal_len(&whole).max(before + FRAME_BYTES);
    let (mut unknown, mut failed, mut queued_ok) = (0, 0, 0);
    let mut limit = before;
    while limit <= after {
        let home = dir.path().join(format!("at-{limit}"));
        copy_home(&template, &home);
        let mut submit = Command::new(common::BIN);
        submit
            .arg("--home")
            .arg(&home)
            .args(["submit", "--task", "probe", "--", "true"])
            .stdin(Stdio::null());
        common::rlimit::file_size(&mut submit, limit);
        let out = submit.output().expect("run submit");
        kill_runners(&home);
        let (record, row, settled) = queued(&home);
        let said = describe(&out);
        match out.status.code() {
            Some(3) => {
                failed += 1;
                assert!(
                    !record && !row,
                    "limit {limit}: exit 3, but the turn was queued (record {record}, row \
                     {row}): {said}"
                );
            }
            Some(0) => {
                queued_ok += 1;
                assert!(
                    record && (row || settled),
                    "limit {limit}: exit 0, but no turn (record {record}, row {row}, settled \
                     {settled}): {said}"
                );
            }
            Some(6) => {
                unknown += 1;
                let stderr = String::from_utf8_lossy(&out.stderr);
                assert!(
                    stderr.contains("state unknown")
                        && stderr.contains("probe")
                        && stderr.contains("tollgate status"),
                    "limit {limit}: exit 6 without naming the turn: {said}"
                );
            }
            _ => panic!("limit {limit}: an exit code submit does not promise: {said}"),
        }
        std::fs::remove_dir_all(&home).expect("clean up");
        limit += FRAME_BYTES;
    }
    eprintln!("exits: 3 × {failed}, 6 × {unknown}, 0 × {queued_ok} over limits {before}..={after}");
    // The sweep reached every outcome: the window before the commit, after it, and beyond.
    assert!(
        failed > 0 && unknown > 0 && queued_ok > 0,
        "exits: 3 × {failed}, 6 × {unknown}, 0 × {queued_ok} over limits {before}..={after}"
    );
}
