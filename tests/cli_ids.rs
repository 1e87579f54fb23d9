//! Short turn ids through the real binary: every submitted turn gets one (its queue row's id),
//! shown by `submit` and `status`, and accepted wherever a turn is named: `logs`, `wait`,
//! `restart`, `cancel`. A task named with digits stays reachable as `TASK:last` / `TASK:N`.

mod common;

use common::{describe, tollgate};
use serde_json::Value;
use std::path::Path;

fn json_of(home: &Path, args: &[&str]) -> Value {
    let out = tollgate(home, args);
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {}", describe(&out)))
}

fn id_of(value: &Value) -> u64 {
    value["id"]
        .as_u64()
        .unwrap_or_else(|| panic!("no id in {value}"))
}

/// Polls `status TASK --json` (bounded) until turn `turn` shows `state`.
fn await_state(home: &Path, task: &str, turn: u64, state: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let view = json_of(home, &["status", task, "--json"]);
        let now = view["tasks"][0]["turns"]
            .as_array()
            .and_then(|t| t.iter().find(|t| t["turn"] == turn))
            .map(|t| t["state"].clone());
        if now.as_ref().and_then(Value::as_str) == Some(state) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{task}:{turn} never became {state}: {view}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).to_string()
}

#[test]
fn ids_name_turns_in_logs_wait_restart_and_status() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = dir.path();
    let first = json_of(
        home,
        &[
            "submit", "--task", "a", "--wait", "--json", "--", "sh", "-c", "echo one",
        ],
    );
    let second = json_of(
        home,
        &[
            "submit",
            "--task",
            "b",
            "--wait",
            "--json",
            "--",
            "sh",
            "-c",
            "echo two; exit 5",
        ],
    );
    let (a, b) = (id_of(&first), id_of(&second));
    assert!(b > a, "ids grow: {a} then {b}");

    let logs = tollgate(home, &["logs", &a.to_string()]);
    assert_eq!(stdout(&logs), "one\n", "{}", describe(&logs));
    let logs = tollgate(home, &["logs", &b.to_string()]);
    assert_eq!(stdout(&logs), "two\n", "{}", describe(&logs));

    let wait = tollgate(home, &["wait", &b.to_string()]);
    assert_eq!(wait.status.code(), Some(5), "{}", describe(&wait));

    // restart by id: a new turn of the same task, with a new, larger id.
    let again = json_of(home, &["restart", &a.to_string(), "--wait", "--json"]);
    assert_eq!(again["task"], "a");
    assert_eq!(again["turn"], 2);
    let c = id_of(&again);
    assert!(c > b, "{again}");
    assert_eq!(stdout(&tollgate(home, &["logs", &c.to_string()])), "one\n");

    // status: the id column and the JSON field.
    let status = tollgate(home, &["status"]);
    let text = stdout(&status);
    let row = text
        .lines()
        .find(|l| l.split_whitespace().nth(1) == Some("b"))
        .unwrap_or_else(|| panic!("a row for b: {text}"));
    assert_eq!(
        row.split_whitespace().next(),
        Some(b.to_string().as_str()),
        "{text}"
    );
    let view = json_of(home, &["status", "--json"]);
    let b_turn = &view["tasks"]
        .as_array()
        .expect("tasks")
        .iter()
        .find(|t| t["name"] == "b")
        .expect("task b")["turns"][0];
    assert_eq!(b_turn["id"].as_u64(), Some(b), "{view}");

    // An unknown id is a usage error that says where ids are shown.
    let unknown = tollgate(home, &["logs", "999"]);
    assert_eq!(unknown.status.code(), Some(2), "{}", describe(&unknown));
    assert!(
        String::from_utf8_lossy(&unknown.stderr).contains("no turn has id 999"),
        "{}",
        describe(&unknown)
    );
}

#[test]
fn a_task_named_with_digits_is_reached_as_task_last_or_task_n() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = dir.path();
    let out = tollgate(
        home,
        &["submit", "--task", "42", "--wait", "--", "echo", "numeric"],
    );
    assert!(out.status.success(), "{}", describe(&out));
    assert_eq!(stdout(&tollgate(home, &["logs", "42:last"])), "numeric\n");
    assert_eq!(stdout(&tollgate(home, &["logs", "42:1"])), "numeric\n");
    // `42` alone is an id; there is none, and the error says how to name the task.
    let bare = tollgate(home, &["logs", "42"]);
    assert_eq!(bare.status.code(), Some(2), "{}", describe(&bare));
    let err = String::from_utf8_lossy(&bare.stderr);
    assert!(err.contains("42:last"), "{err}");
}

#[test]
fn cancel_by_id_cancels_that_turn_only_and_a_dropped_turn_has_no_id() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = dir.path();
    // Two turns of one task: the second waits in line behind the first (concurrent=1).
    let running = json_of(
        home,
        &["submit", "--task", "slow", "--json", "--", "sleep", "30"],
    );
    let waiting = json_of(
        home,
        &["submit", "--task", "slow", "--json", "--", "sleep", "30"],
    );
    assert_eq!(waiting["placement"], "waiting", "{waiting}");
    let (run_id, wait_id) = (id_of(&running), id_of(&waiting));
    await_state(home, "slow", 1, "running");

    let cancel = json_of(home, &["cancel", &wait_id.to_string(), "--json"]);
    assert_eq!(cancel["cancelled"], serde_json::json!([2]), "{cancel}");
    assert_eq!(cancel["signalled"], serde_json::json!([]), "{cancel}");
    let view = json_of(home, &["status", "slow", "--json"]);
    let states: Vec<&str> = view["tasks"][0]["turns"]
        .as_array()
        .expect("turns")
        .iter()
        .map(|t| t["state"].as_str().unwrap_or("?"))
        .collect();
    assert_eq!(states[1], "cancelled", "{view}");
    assert_ne!(
        states[0], "cancelled",
        "the running turn is left alone: {view}"
    );

    // A drop task refuses a second turn while one runs: the refused turn gets no id, and the
    // earlier turn's id still resolves past it.
    let kept = json_of(
        home,
        &[
            "submit",
            "--task",
            "d",
            "--strategy",
            "drop",
            "--json",
            "--",
            "sleep",
            "30",
        ],
    );
    await_state(home, "d", 1, "running");
    let dropped = tollgate(home, &["submit", "--task", "d", "--json", "--", "true"]);
    assert_eq!(dropped.status.code(), Some(4), "{}", describe(&dropped));
    let view = json_of(home, &["status", "d", "--json"]);
    assert!(view["tasks"][0]["turns"][1].get("id").is_none(), "{view}");
    let kept_id = id_of(&kept);
    let cancel = json_of(home, &["cancel", &kept_id.to_string(), "--json"]);
    assert_eq!(cancel["task"], "d", "{cancel}");
    assert_eq!(cancel["signalled"][0]["turn"], 1, "{cancel}");

    // The running turn of `slow`, by id too; `wait` sees both stopped turns end.
    let cancel = json_of(home, &["cancel", &run_id.to_string(), "--json"]);
    assert_eq!(cancel["signalled"][0]["turn"], 1, "{cancel}");
    let wait = tollgate(home, &["wait", &run_id.to_string(), &kept_id.to_string()]);
    assert_ne!(wait.status.code(), Some(0), "{}", describe(&wait));
}

#[test]
fn unnamed_submits_get_a_task_named_after_the_program_and_the_id() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = dir.path();
    let one = json_of(
        home,
        &["submit", "--wait", "--json", "--", "/bin/echo", "hi"],
    );
    let two = json_of(
        home,
        &["submit", "--wait", "--json", "--", "/bin/echo", "hi"],
    );
    let script = json_of(
        home,
        &[
            "submit",
            "--wait",
            "--json",
            "--",
            "sh",
            "-c",
            "true && echo done",
        ],
    );
    for (value, program) in [(&one, "echo"), (&two, "echo"), (&script, "true")] {
        assert_eq!(
            value["task"].as_str(),
            Some(format!("{program}-{}", id_of(value)).as_str()),
            "{value}"
        );
    }
    assert_ne!(
        one["task"], two["task"],
        "each unnamed submit is its own task"
    );
    // The generated name works wherever a task does.
    let task = one["task"].as_str().expect("task");
    let logs = tollgate(home, &["logs", task]);
    assert_eq!(stdout(&logs), "hi\n", "{}", describe(&logs));
    // The text line names the task and the id.
    let out = tollgate(home, &["submit", "--", "true"]);
    let line = stdout(&out);
    assert!(
        line.starts_with("task true-") && line.contains("(id "),
        "{}",
        describe(&out)
    );
}

#[test]
fn labels_are_stored_on_the_turn_shown_by_status_and_filtered_on() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = dir.path();
    let run = |task: &str, labels: &[&str]| {
        let mut args = vec!["submit", "--task", task, "--wait"];
        for label in labels {
            args.extend(["--label", label]);
        }
        args.extend(["--", "true"]);
        let out = tollgate(home, &args);
        assert!(out.status.success(), "{}", describe(&out));
    };
    run("backup", &["nightly", "db", "nightly"]);
    let submitted = json_of(
        home,
        &[
            "submit", "--task", "other", "--label", "adhoc", "--json", "--", "true",
        ],
    );
    assert_eq!(
        submitted["labels"],
        serde_json::json!(["adhoc"]),
        "{submitted}"
    );
    assert!(tollgate(home, &["wait", "other"]).status.success());
    run("backup", &[]);
    run("build", &["ci"]);
    // Older than the 5 recent turns `status` shows by default, still found by the filter.
    for _ in 0..5 {
        run("build", &[]);
    }
    run("build", &["nightly"]);

    let view = json_of(home, &["status", "backup", "--json"]);
    assert_eq!(
        view["tasks"][0]["turns"][0]["labels"],
        serde_json::json!(["nightly", "db"]),
        "stored once each, in order: {view}"
    );
    assert!(
        view["tasks"][0]["turns"][1].get("labels").is_none(),
        "{view}"
    );

    let text = stdout(&tollgate(home, &["status", "--label", "nightly"]));
    let rows: Vec<(String, String)> = text
        .lines()
        .skip(2)
        .filter_map(|l| {
            let cells: Vec<&str> = l.split_whitespace().collect();
            Some((
                format!("{}:{}", cells.get(1)?, cells.get(2)?),
                cells.get(3)?.to_string(),
            ))
        })
        .collect();
    assert_eq!(
        rows,
        [
            ("backup:1".to_string(), "nightly,db".to_string()),
            ("build:7".to_string(), "nightly".to_string())
        ],
        "{text}"
    );
    let ci = json_of(home, &["status", "--label", "ci", "--json"]);
    let tasks = ci["tasks"].as_array().expect("tasks");
    assert_eq!(tasks.len(), 1, "{ci}");
    assert_eq!(
        tasks[0]["turns"][0]["turn"], 1,
        "an old turn is not hidden: {ci}"
    );

    // A bad label is refused before anything is queued.
    let bad = tollgate(
        home,
        &["submit", "--task", "x", "--label", "a b", "--", "true"],
    );
    assert_eq!(bad.status.code(), Some(2), "{}", describe(&bad));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--label"));
    let view = json_of(home, &["status", "--json"]);
    assert!(
        !view["tasks"]
            .as_array()
            .expect("tasks")
            .iter()
            .any(|t| t["name"] == "x"),
        "{view}"
    );
}

/// An auto-named turn's name carries its own id and no other turn's: an `--after-success`
/// turn whose dependency had already failed gets no queue row but keeps the id its name was
/// made with, so the next submit gets the next id and a name of its own (issue: `deploy.sh-14`
/// then `deploy.sh-14-2` with id 14, and `logs 14` showed the other task's output).
#[test]
fn a_generated_name_never_carries_another_turns_id() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = common::init_home(dir.path(), 2);
    let failed = tollgate(&home, &["submit", "--wait", "--", "false"]);
    assert_eq!(failed.status.code(), Some(1), "{}", describe(&failed));
    let never = tollgate(
        &home,
        &[
            "submit",
            "--after-success",
            "1",
            "--json",
            "--",
            "echo",
            "never",
        ],
    );
    assert_eq!(never.status.code(), Some(5), "{}", describe(&never));
    let never: Value = serde_json::from_slice(&never.stdout).expect("json");
    assert_eq!(
        (never["task"].as_str(), never["id"].as_u64()),
        (Some("echo-2"), Some(2)),
        "{never}"
    );
    let next = json_of(&home, &["submit", "--json", "--", "echo", "next"]);
    assert_eq!(
        (next["task"].as_str(), id_of(&next)),
        (Some("echo-3"), 3),
        "{next}"
    );
    let waited = tollgate(&home, &["wait", "3"]);
    assert!(waited.status.success(), "{}", describe(&waited));
    // Each id names the turn whose name carries it.
    let logs = tollgate(&home, &["logs", "3"]);
    assert_eq!(
        String::from_utf8_lossy(&logs.stdout),
        "next\n",
        "{}",
        describe(&logs)
    );
    let two = json_of(&home, &["logs", "2", "--json"]);
    assert_eq!(
        (two["task"].as_str(), two["state"].as_str()),
        (Some("echo-2"), Some("dependency_failed")),
        "{two}"
    );
}
