//! The database's log stays short in a home used one command at a time (spec/store.md, "The
//! log's length"): each command is the log's only user, so SQLite rebuilds the log's index from
//! the log at every open and forgets what was copied to the database; without tollgate's own
//! truncating checkpoint the log grew by every commit, for ever, and every command read all of it.
mod common;

use common::{describe, init_home, tollgate};
use std::path::Path;

/// SQLite's automatic checkpoint mark, past which a commit trims the log: 1 000 frames of a
/// 24-byte header and a 4 KiB page.
const LIMIT_BYTES: u64 = 1_000 * (24 + 4_096);
/// What one submit may add past the mark before its own trim: far more than its ~11 frames.
const ONE_COMMIT_BYTES: u64 = 64 * (24 + 4_096);

fn log_bytes(home: &Path) -> u64 {
    std::fs::metadata(home.join("tollgate.db-wal")).map_or(0, |m| m.len())
}

#[test]
fn the_log_of_a_home_used_one_command_at_a_time_stays_bounded() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = init_home(tmp.path(), 2);
    // No runner starts: every submit parks, and each is the database's only user.
    let paused = tollgate(&home, &["pause"]);
    assert!(paused.status.success(), "pause: {}", describe(&paused));
    const SUBMITS: usize = 160;
    let (mut longest, mut emptied, mut before) = (0, 0, log_bytes(&home));
    for i in 0..SUBMITS {
        let out = tollgate(&home, &["submit", "--", "true"]);
        assert!(out.status.success(), "submit {i}: {}", describe(&out));
        let now = log_bytes(&home);
        longest = longest.max(now);
        if now < before {
            emptied += 1;
        }
        before = now;
    }
    // 160 submits write well past the mark (they grew the log to ~7 MB before the trim).
    assert!(
        longest <= LIMIT_BYTES + ONE_COMMIT_BYTES,
        "the log reached {longest} bytes, past the mark {LIMIT_BYTES}"
    );
    assert!(
        emptied >= 1,
        "the log was never trimmed (longest {longest} bytes)"
    );
    // Nothing a submit promised was lost to a trim.
    let status = tollgate(&home, &["status", "--json"]);
    assert!(status.status.success(), "status: {}", describe(&status));
    let view: serde_json::Value = serde_json::from_slice(&status.stdout).expect("status json");
    assert_eq!(view["parked"], SUBMITS, "{view}");
    let doctor = tollgate(&home, &["doctor"]);
    assert!(doctor.status.success(), "doctor: {}", describe(&doctor));
}
