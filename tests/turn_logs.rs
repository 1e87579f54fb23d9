//! Bounded turn output (issue 13, "Output and storage bounds"): each stream of a detached turn
//! keeps at most `log_bytes` (tollgate.toml); past it the runner keeps draining the pipe (the
//! command is never blocked: writing 1 MB past a 1000-byte cap still completes), writes nothing
//! more, and ends the log with a truncation line that `logs` shows. `log_bytes = 0`: no limit.

mod common;

use common::{describe, init_home, tollgate};
use std::path::Path;

fn with_log_bytes(home: &Path, bytes: u64) {
    let config = home.join("tollgate.toml");
    let original = std::fs::read_to_string(&config).expect("config");
    std::fs::write(&config, format!("log_bytes = {bytes}\n{original}")).expect("write config");
}

const NOISY: &str = "head -c 1000000 /dev/zero | tr '\\0' a; echo err >&2";

#[test]
fn a_log_past_its_cap_keeps_its_head_and_says_it_was_truncated() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = init_home(dir.path(), 1);
    with_log_bytes(&home, 1000);
    let out = tollgate(
        &home,
        &[
            "submit", "--task", "noisy", "--wait", "--", "sh", "-c", NOISY,
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let turn = home.join("tasks/noisy/turns/1");
    let stdout = std::fs::read_to_string(turn.join("stdout.log")).expect("stdout log");
    let expected_line = tollgate::runner::truncation_line(1000, 1_000_000 - 1000);
    assert_eq!(stdout, format!("{}{expected_line}", "a".repeat(1000)));
    assert_eq!(
        std::fs::read_to_string(turn.join("stderr.log")).expect("stderr log"),
        "err\n",
        "the stream under its cap is whole"
    );
    let logs = tollgate(&home, &["logs", "noisy"]);
    assert!(logs.status.success(), "{}", describe(&logs));
    assert!(
        String::from_utf8_lossy(&logs.stdout).contains("output truncated"),
        "{}",
        describe(&logs)
    );
}

#[test]
fn log_bytes_zero_keeps_everything() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = init_home(dir.path(), 1);
    with_log_bytes(&home, 0);
    let out = tollgate(
        &home,
        &[
            "submit", "--task", "noisy", "--wait", "--", "sh", "-c", NOISY,
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let stdout = std::fs::read(home.join("tasks/noisy/turns/1/stdout.log")).expect("stdout log");
    assert_eq!(stdout.len(), 1_000_000);
}
