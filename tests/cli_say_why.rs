//! When tollgate has nothing to show, it says why: a command that cannot start, a turn that has
//! printed nothing because it is queued, ran attached or could not start.

mod common;

use common::{describe, tollgate};

#[test]
fn submit_wait_of_a_missing_program_names_the_reason() {
    let home = tempfile::tempdir().expect("tempdir");
    let out = tollgate(
        home.path(),
        &[
            "submit",
            "--task",
            "t",
            "--wait",
            // Past submit's own check (tests/cli_submit_check.rs), to the runner's spawn.
            "--no-check",
            "--",
            "/nonexistent/program-xyz",
        ],
    );
    assert_ne!(out.status.code(), Some(0), "{}", describe(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("could not start") && stderr.contains("/nonexistent/program-xyz"),
        "the reason is printed, not only an exit code: {}",
        describe(&out)
    );
    let logs = tollgate(home.path(), &["logs", "t"]);
    assert!(logs.status.success(), "{}", describe(&logs));
    assert!(
        String::from_utf8_lossy(&logs.stderr).contains("could not start"),
        "{}",
        describe(&logs)
    );
}

#[test]
fn logs_of_a_queued_turn_says_it_waits_for_a_slot() {
    let home = tempfile::tempdir().expect("tempdir");
    let init = tollgate(home.path(), &["init", "--workers", "1"]);
    assert!(init.status.success(), "{}", describe(&init));
    let first = tollgate(
        home.path(),
        &["submit", "--task", "busy", "--", "sleep", "30"],
    );
    assert!(first.status.success(), "{}", describe(&first));
    // The first turn holds the only slot from the moment its submit returns.
    let second = tollgate(home.path(), &["submit", "--task", "later", "--", "true"]);
    assert!(
        String::from_utf8_lossy(&second.stdout).contains("queued"),
        "{}",
        describe(&second)
    );
    let logs = tollgate(home.path(), &["logs", "later"]);
    assert!(logs.status.success(), "{}", describe(&logs));
    assert!(logs.stdout.is_empty());
    assert!(
        String::from_utf8_lossy(&logs.stderr).contains("queued: it waits for a free worker slot"),
        "{}",
        describe(&logs)
    );
    for task in ["later", "busy"] {
        let out = tollgate(home.path(), &["cancel", task]);
        assert!(out.status.success(), "{}", describe(&out));
    }
}

#[test]
fn logs_of_an_attached_turn_says_where_its_output_went() {
    let home = tempfile::tempdir().expect("tempdir");
    let out = tollgate(
        home.path(),
        &["submit", "--task", "fg", "--attach", "--", "true"],
    );
    assert!(out.status.success(), "{}", describe(&out));
    let logs = tollgate(home.path(), &["logs", "fg"]);
    assert!(logs.status.success(), "{}", describe(&logs));
    assert!(
        String::from_utf8_lossy(&logs.stderr).contains("ran attached"),
        "{}",
        describe(&logs)
    );
}
