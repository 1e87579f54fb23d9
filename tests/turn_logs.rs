//! Bounded turn output (issue 13, "Output and storage bounds"): each stream of a detached turn
//! keeps its first `log_bytes` and its last `log_tail_bytes` (tollgate.toml); past the head the
//! runner keeps draining the pipe (the command is never blocked: writing 1 MB past a 1000-byte
//! cap still completes), and when the stream ends it writes a truncation line that `logs` shows,
//! then the tail. `log_tail_bytes = 0` keeps the head only; `log_bytes = 0`: no limit.

mod common;

use common::{describe, init_home, tollgate};
use std::path::Path;

fn with_config(home: &Path, lines: &str) {
    let config = home.join("tollgate.toml");
    let original = std::fs::read_to_string(&config).expect("config");
    std::fs::write(&config, format!("{lines}\n{original}")).expect("write config");
}

fn with_log_bytes(home: &Path, bytes: u64) {
    with_config(home, &format!("log_bytes = {bytes}"));
}

const NOISY: &str = "head -c 1000000 /dev/zero | tr '\\0' a; echo err >&2";

/// 1 MB of `a`, then a last line that says why it failed.
const NOISY_THEN_WHY: &str =
    "head -c 1000000 /dev/zero | tr '\\0' a; echo; echo 'error: the reason'; exit 3";

#[test]
fn a_log_past_its_cap_keeps_its_head_and_its_tail() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = init_home(dir.path(), 1);
    with_config(&home, "log_bytes = 1000\nlog_tail_bytes = 100");
    let out = tollgate(
        &home,
        &[
            "submit",
            "--task",
            "noisy",
            "--wait",
            "--",
            "sh",
            "-c",
            NOISY_THEN_WHY,
        ],
    );
    assert_eq!(out.status.code(), Some(3), "{}", describe(&out));
    let stdout =
        std::fs::read_to_string(home.join("tasks/noisy/turns/1/stdout.log")).expect("stdout log");
    let total = 1_000_000 + "\nerror: the reason\n".len() as u64;
    let tail = "error: the reason\n";
    let expected = format!(
        "{}{}{}\n{tail}",
        "a".repeat(1000),
        tollgate::runner::truncation_line(1000, total - 1000 - 100, 100),
        "a".repeat(100 - tail.len() - 1),
    );
    assert_eq!(stdout.len(), expected.len());
    assert_eq!(stdout, expected);
    let logs = tollgate(&home, &["logs", "noisy"]);
    let shown = String::from_utf8_lossy(&logs.stdout);
    assert!(
        shown.contains("output truncated") && shown.trim_end().ends_with("error: the reason"),
        "{}",
        describe(&logs)
    );
}

#[test]
fn a_log_just_past_its_cap_is_whole_when_the_tail_covers_the_rest() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = init_home(dir.path(), 1);
    with_config(&home, "log_bytes = 1000\nlog_tail_bytes = 5000");
    let script = "head -c 3000 /dev/zero | tr '\\0' a";
    let out = tollgate(
        &home,
        &["submit", "--task", "t", "--wait", "--", "sh", "-c", script],
    );
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let stdout =
        std::fs::read_to_string(home.join("tasks/t/turns/1/stdout.log")).expect("stdout log");
    assert_eq!(
        stdout,
        "a".repeat(3000),
        "nothing dropped, no truncation line"
    );
}

#[test]
fn a_tail_bigger_than_its_bound_is_refused_naming_the_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = init_home(dir.path(), 1);
    with_config(&home, "log_tail_bytes = 1000000000000");
    let out = tollgate(&home, &["status"]);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("log_tail_bytes"),
        "{}",
        describe(&out)
    );
}

#[test]
fn with_no_tail_a_log_past_its_cap_keeps_its_head_and_says_it_was_truncated() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = init_home(dir.path(), 1);
    with_config(&home, "log_bytes = 1000\nlog_tail_bytes = 0");
    let out = tollgate(
        &home,
        &[
            "submit", "--task", "noisy", "--wait", "--", "sh", "-c", NOISY,
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let turn = home.join("tasks/noisy/turns/1");
    let stdout = std::fs::read_to_string(turn.join("stdout.log")).expect("stdout log");
    let expected_line = tollgate::runner::truncation_line(1000, 1_000_000 - 1000, 0);
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
