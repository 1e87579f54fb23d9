//! The turn folder made lazily (spec/turns.md, "The turn folder"; issue 12, i12-serve2): in a
//! database home a queued turn has no folder, not even its task's; every reader takes the
//! missing folder for an empty one; the runner makes it when it starts, and a `wait` begun while
//! the folder was missing sees the turn end.

mod common;

use common::{describe, init_home, tollgate};
use std::process::{Command, Stdio};

#[test]
fn a_queued_turn_has_no_folder_until_its_runner_makes_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = init_home(dir.path(), 1);
    let release = dir.path().join("release");
    // The one slot is held until the release file exists (the command waits on it, not the test).
    let hold = format!(
        "i=0; while [ ! -e '{}' ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done",
        release.display()
    );
    let held = tollgate(
        &home,
        &["submit", "--task", "hold", "--", "sh", "-c", &hold],
    );
    assert!(held.status.success(), "{}", describe(&held));
    let queued = tollgate(
        &home,
        &[
            "submit",
            "--task",
            "later",
            "--",
            "sh",
            "-c",
            "echo ran-later",
        ],
    );
    assert!(queued.status.success(), "{}", describe(&queued));

    // Parked behind the held slot: its record is in the database, no folder was made for it.
    assert!(
        !home.join("tasks/later").exists(),
        "a queued turn's task and turn folders are made lazily"
    );
    let status = tollgate(&home, &["status", "--json"]);
    assert!(status.status.success(), "{}", describe(&status));
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(
        text.contains("\"later\""),
        "status lists the queued turn: {text}"
    );
    let logs = tollgate(&home, &["logs", "later"]);
    assert!(logs.status.success(), "{}", describe(&logs));
    assert!(logs.stdout.is_empty(), "no output yet: {}", describe(&logs));

    // A wait that starts while the folder is missing ends with the turn.
    let waiter = Command::new(common::BIN)
        .arg("--home")
        .arg(&home)
        .args(["wait", "later"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn wait");
    std::fs::write(&release, b"").expect("release the slot");
    let waited = waiter.wait_with_output().expect("wait ends");
    assert_eq!(waited.status.code(), Some(0), "{}", describe(&waited));
    let out = std::fs::read_to_string(home.join("tasks/later/turns/1/stdout.log"))
        .expect("the runner made the folder and wrote the log");
    assert_eq!(out, "ran-later\n");
}
