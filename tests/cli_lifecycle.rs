//! The lifecycle verbs through the real binary: `wait`, `restart`, `clean`, and the turn
//! references they take (TASK, TASK:N, last).

mod common;

use common::{describe, tollgate};
use std::path::Path;

fn ok(home: &Path, args: &[&str]) -> String {
    let out = tollgate(home, args);
    assert!(out.status.success(), "{args:?}: {}", describe(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn wait_returns_the_turn_exit_code_and_the_highest_of_several() {
    let home = tempfile::tempdir().expect("tempdir");
    let home = home.path();
    ok(home, &["submit", "--task", "a", "--", "sh", "-c", "exit 3"]);
    ok(home, &["submit", "--task", "b", "--", "true"]);
    ok(home, &["submit", "--task", "c", "--", "sh", "-c", "exit 7"]);
    let one = tollgate(home, &["wait", "a"]);
    assert_eq!(one.status.code(), Some(3), "{}", describe(&one));
    let done = tollgate(home, &["wait", "b:1"]);
    assert_eq!(done.status.code(), Some(0), "{}", describe(&done));
    let several = tollgate(home, &["wait", "a", "b", "c"]);
    assert_eq!(several.status.code(), Some(7), "{}", describe(&several));
    let last = tollgate(home, &["wait", "last", "--json"]);
    assert_eq!(
        last.status.code(),
        Some(7),
        "`last` is c, submitted last: {}",
        describe(&last)
    );
    let value: serde_json::Value = serde_json::from_slice(&last.stdout).expect("json");
    assert_eq!(value["turns"][0]["task"], "c");
    assert_eq!(value["exit_code"], 7);
}

#[test]
fn wait_and_restart_refuse_unknown_references_and_change_nothing() {
    let home = tempfile::tempdir().expect("tempdir");
    let home = home.path();
    ok(home, &["submit", "--task", "a", "--wait", "--", "true"]);
    for args in [
        vec!["wait", "nope"],
        vec!["wait", "a:9"],
        vec!["wait", "a:x"],
        vec!["restart", "nope"],
    ] {
        let out = tollgate(home, &args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", describe(&out));
    }
    let json = ok(home, &["status", "--json"]);
    let value: serde_json::Value = serde_json::from_str(&json).expect("json");
    assert_eq!(
        value["tasks"][0]["turns"].as_array().expect("turns").len(),
        1
    );
}

#[test]
fn restart_runs_the_same_command_in_the_same_directory_with_the_same_environment() {
    let home = tempfile::tempdir().expect("tempdir");
    let work = tempfile::tempdir().expect("workdir");
    let home = home.path();
    let cwd = work.path().to_str().expect("utf-8");
    ok(
        home,
        &[
            "submit",
            "--task",
            "echoer",
            "--cwd",
            cwd,
            "--env",
            "GREETING=hello",
            "--wait",
            "--",
            "sh",
            "-c",
            "echo \"$GREETING from $(pwd)\"",
        ],
    );
    let out = tollgate(home, &["restart", "echoer", "--wait"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let canonical = std::fs::canonicalize(work.path()).expect("canonical");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("hello from {}", canonical.display()),
        "{}",
        describe(&out)
    );
    let turn1 = ok(home, &["logs", "echoer:1"]);
    assert!(turn1.contains("hello from"), "TASK:N names turn 1: {turn1}");
    let turn2 = ok(home, &["logs", "echoer", "--turn", "2"]);
    assert!(
        turn2.contains("hello from"),
        "turn 2 is the restart: {turn2}"
    );
}

#[test]
fn clean_removes_only_ended_turns_and_honours_keep() {
    let home = tempfile::tempdir().expect("tempdir");
    let home = home.path();
    ok(home, &["init", "--workers", "1"]);
    for _ in 0..4 {
        ok(home, &["submit", "--task", "old", "--wait", "--", "true"]);
    }
    // A running turn and a queued one behind it: clean must leave both.
    ok(home, &["submit", "--task", "live", "--", "sleep", "30"]);
    ok(home, &["submit", "--task", "live", "--", "true"]);
    let dry = ok(home, &["clean", "--keep", "1", "--dry-run"]);
    assert!(dry.contains("would remove 3 ended turn(s)"), "{dry}");
    assert!(
        home.join("tasks/old/turns/1").exists(),
        "dry run removes nothing"
    );
    let out = ok(home, &["clean", "--keep", "1", "--json"]);
    let value: serde_json::Value = serde_json::from_str(&out).expect("json");
    let removed: Vec<u64> = value["removed"]
        .as_array()
        .expect("removed")
        .iter()
        .map(|r| r["turn"].as_u64().expect("turn"))
        .collect();
    assert_eq!(removed.len(), 3, "{out}");
    assert!(!home.join("tasks/old/turns/1").exists());
    assert!(
        home.join("tasks/old/turns/4").exists(),
        "--keep 1 keeps the newest"
    );
    assert!(
        home.join("tasks/live/turns/1").exists(),
        "running turn kept"
    );
    // A queued turn has no folder yet (spec/turns.md, "The turn folder"): its record is kept.
    assert!(
        tollgate::tasks::load_turn(
            &tollgate::home::Home::at(home),
            &tollgate::protocol::slots::TurnKey::new("live", 2)
        )
        .expect("turn record")
        .is_some(),
        "queued turn kept"
    );
    // --older-than: nothing ended a day ago.
    let none = ok(home, &["clean", "--older-than", "1d"]);
    assert!(none.contains("removed 0 ended turn(s)"), "{none}");
    // The task keeps its numbering: a new turn is 5, not 1 (once the slot is free again).
    ok(home, &["cancel", "live"]);
    ok(home, &["submit", "--task", "old", "--wait", "--", "true"]);
    assert!(home.join("tasks/old/turns/5").exists());
}

/// `--keep N` counts the ended turns of the whole home, so one-off submits (each a task of its
/// own) are cleaned too; a task left without turns goes with its record and folder, unless it
/// holds a setting (a strategy, a pause); one line says what was removed.
#[test]
fn clean_keeps_the_newest_ended_turns_of_the_home_and_removes_emptied_tasks() {
    let home = tempfile::tempdir().expect("tempdir");
    let home = home.path();
    ok(home, &["init", "--workers", "2"]);
    for _ in 0..6 {
        ok(home, &["submit", "--wait", "--", "true"]);
    }
    ok(
        home,
        &[
            "submit",
            "--task",
            "deploy",
            "--strategy",
            "drop",
            "--wait",
            "--",
            "true",
        ],
    );
    ok(
        home,
        &["submit", "--task", "nightly", "--wait", "--", "true"],
    );
    ok(home, &["pause", "nightly"]);
    ok(home, &["submit", "--task", "kept", "--wait", "--", "true"]);
    let out = ok(home, &["clean", "--keep", "2"]);
    assert_eq!(
        out,
        "removed 7 ended turn(s) with their logs and 6 task(s) left without turns (kept the 2 \
         newest ended)\n",
        "one summary line"
    );
    let view: serde_json::Value =
        serde_json::from_str(&ok(home, &["status", "--json", "--all"])).expect("json");
    let names: Vec<&str> = view["tasks"]
        .as_array()
        .expect("tasks")
        .iter()
        .map(|t| t["name"].as_str().expect("name"))
        .collect();
    // The 2 newest ended turns (nightly's and kept's) stay; deploy keeps its strategy although
    // its turn went; the one-off tasks are gone, records and folders.
    assert_eq!(names, ["deploy", "kept", "nightly"], "{view}");
    let folders: Vec<String> = std::fs::read_dir(home.join("tasks"))
        .expect("tasks/")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        folders.iter().all(|f| !f.starts_with("true-")),
        "no folder of a removed task is left: {folders:?}"
    );
    // A removed task's name is free again; a kept task keeps its numbering and strategy.
    ok(
        home,
        &["submit", "--task", "deploy", "--wait", "--", "true"],
    );
    let deploy: serde_json::Value =
        serde_json::from_str(&ok(home, &["status", "deploy", "--json"])).expect("json");
    assert_eq!(deploy["tasks"][0]["strategy"], "drop", "{deploy}");
    assert_eq!(deploy["tasks"][0]["turns"][0]["turn"], 2, "{deploy}");
    let json = ok(home, &["clean", "--json"]);
    let value: serde_json::Value = serde_json::from_str(&json).expect("json");
    assert_eq!(
        value["removed"].as_array().expect("removed").len(),
        3,
        "{json}"
    );
    assert_eq!(
        value["removed_tasks"],
        serde_json::json!(["kept"]),
        "{json}"
    );
}
