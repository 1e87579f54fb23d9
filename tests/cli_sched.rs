//! Scheduling through the real binary (spec/slots.md, "Scheduling"): `pause`/`resume` (Q1),
//! `submit --delay/--at` (Q2), `submit --priority` (Q3).

mod common;

use common::{describe, init_home, tollgate};
use serde_json::Value;
use std::path::Path;
use std::time::{Duration, Instant};

fn ok(home: &Path, args: &[&str]) -> String {
    let out = tollgate(home, args);
    assert!(out.status.success(), "{args:?}: {}", describe(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn json(home: &Path, args: &[&str]) -> Value {
    serde_json::from_str(&ok(home, args)).expect("json")
}

/// The turn `task:1` as `status --json` shows it.
fn turn(home: &Path, task: &str) -> Value {
    let status = json(home, &["status", "--json", task]);
    status["tasks"][0]["turns"][0].clone()
}

/// A command that runs until `gate` exists (a fixture the test creates: the barrier).
fn blocked_until(gate: &Path) -> String {
    format!("while [ ! -e '{}' ]; do sleep 0.02; done", gate.display())
}

/// Bounded poll of observable state (the turn's record), never a sleep as synchronisation.
fn until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn q1_pause_holds_queued_turns_running_ones_go_on_and_resume_starts_up_to_the_free_slots() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = init_home(dir.path(), 2);
    let home = home.as_path();
    let gate = dir.path().join("gate");
    ok(
        home,
        &[
            "submit",
            "--task",
            "long",
            "--",
            "sh",
            "-c",
            &blocked_until(&gate),
        ],
    );
    assert_eq!(turn(home, "long")["state"], "running");

    let paused = ok(home, &["pause"]);
    assert!(paused.contains("paused the home"), "{paused}");
    let again = json(home, &["pause", "--json"]);
    assert_eq!(again["changed"], false);

    // A submit to the paused home is queued and says so, though a slot is free.
    for task in ["a", "b", "c"] {
        let out = ok(home, &["submit", "--task", task, "--", "true"]);
        assert!(out.contains("queued, paused"), "{out}");
    }
    let status = json(home, &["status", "--json"]);
    assert_eq!(status["paused"]["home"], true);
    let a = turn(home, "a");
    assert_eq!(
        (a["state"].as_str(), a["held"].as_str()),
        (Some("paused"), Some("paused"))
    );
    // The word of earlier versions stays readable for one version.
    assert_eq!(a["legacy_state"], "parked", "{a}");
    let table = ok(home, &["status"]);
    assert!(table.contains("the home is paused"), "{table}");
    assert!(table.contains("paused"), "{table}");

    // Neither reconcile nor a finishing runner starts a paused row; the running turn goes on.
    ok(home, &["reconcile"]);
    std::fs::write(&gate, b"").expect("open the gate");
    let waited = tollgate(home, &["wait", "long"]);
    assert_eq!(waited.status.code(), Some(0), "{}", describe(&waited));
    ok(home, &["reconcile"]);
    for task in ["a", "b", "c"] {
        assert_eq!(turn(home, task)["state"], "paused", "{task} stays queued");
    }

    // Resume starts what may start now, up to the two free slots, in one section.
    let resumed = json(home, &["resume", "--json"]);
    assert_eq!(resumed["changed"], true);
    let started: Vec<&str> = resumed["started"]
        .as_array()
        .expect("started")
        .iter()
        .map(|k| k["task"].as_str().expect("task"))
        .collect();
    assert_eq!(
        started,
        vec!["a", "b"],
        "FIFO among equal priorities, two slots"
    );
    let waited = tollgate(home, &["wait", "a", "b", "c"]);
    assert_eq!(waited.status.code(), Some(0), "{}", describe(&waited));
    let status = json(home, &["status", "--json"]);
    assert!(status.get("paused").is_none(), "{status}");
}

#[test]
fn q1_pausing_one_task_holds_only_its_turns() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = init_home(dir.path(), 2);
    let home = home.as_path();
    ok(home, &["submit", "--task", "held", "--wait", "--", "true"]);
    ok(home, &["pause", "held"]);
    let out = ok(home, &["submit", "--task", "held", "--", "true"]);
    assert!(
        out.contains("queued, paused") && out.contains("`tollgate resume held`"),
        "{out}"
    );
    ok(home, &["submit", "--task", "free", "--wait", "--", "true"]);
    let status = json(home, &["status", "--json"]);
    assert_eq!(status["paused"]["tasks"], serde_json::json!(["held"]));
    let held = status["tasks"]
        .as_array()
        .expect("tasks")
        .iter()
        .find(|t| t["name"] == "held")
        .expect("task held")
        .clone();
    assert_eq!(held["paused"], true);
    assert_eq!(held["turns"][1]["held"], "paused");
    assert!(ok(home, &["status"]).contains("paused task(s): held"));

    // Resuming the task while the home is paused leaves it held by the home.
    ok(home, &["pause"]);
    let out = ok(home, &["resume", "held"]);
    assert!(out.contains("the home is still paused"), "{out}");
    assert_eq!(
        json(home, &["status", "--json", "held"])["tasks"][0]["turns"][1]["state"],
        "paused"
    );
    let out = ok(home, &["resume"]);
    assert!(out.contains("held turn 2 started"), "{out}");
    let waited = tollgate(home, &["wait", "held:2"]);
    assert_eq!(waited.status.code(), Some(0), "{}", describe(&waited));
}

#[test]
fn pause_and_resume_of_an_unknown_task_are_usage_errors_and_change_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = init_home(dir.path(), 1);
    let home = home.as_path();
    ok(home, &["submit", "--task", "real", "--wait", "--", "true"]);
    for verb in ["pause", "resume"] {
        let out = tollgate(home, &[verb, "nope"]);
        assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("\"nope\""),
            "{}",
            describe(&out)
        );
    }
    let status = json(home, &["status", "--json"]);
    assert!(status.get("paused").is_none(), "{status}");
}

#[test]
fn q3_the_highest_priority_starts_first_fifo_among_equals() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = init_home(dir.path(), 1);
    let home = home.as_path();
    let gate = dir.path().join("gate");
    let order = dir.path().join("order");
    ok(
        home,
        &[
            "submit",
            "--task",
            "blocker",
            "--",
            "sh",
            "-c",
            &blocked_until(&gate),
        ],
    );
    let log = |name: &str| format!("echo {name} >> '{}'", order.display());
    for (task, priority) in [
        ("low", "0"),
        ("high1", "5"),
        ("neg", "-3"),
        ("high2", "5"),
        ("mid", "1"),
    ] {
        let out = json(
            home,
            &[
                "submit",
                "--json",
                "--task",
                task,
                "--priority",
                priority,
                "--",
                "sh",
                "-c",
                &log(task),
            ],
        );
        assert_eq!(out["placement"], "parked", "{out}");
    }
    assert_eq!(turn(home, "high1")["priority"], 5);
    std::fs::write(&gate, b"").expect("open the gate");
    let waited = tollgate(
        home,
        &["wait", "blocker", "low", "high1", "neg", "high2", "mid"],
    );
    assert_eq!(waited.status.code(), Some(0), "{}", describe(&waited));
    let ran = std::fs::read_to_string(&order).expect("order");
    assert_eq!(
        ran.lines().collect::<Vec<_>>(),
        vec!["high1", "high2", "mid", "low", "neg"]
    );
}

#[test]
fn q2_a_delayed_turn_waits_then_starts_on_its_own() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = init_home(dir.path(), 1);
    let home = home.as_path();
    let out = ok(
        home,
        &[
            "submit", "--task", "later", "--delay", "1500ms", "--", "true",
        ],
    );
    assert!(out.contains("queued, delayed until"), "{out}");
    let queued = turn(home, "later");
    assert_eq!(queued["held"], "delayed");
    let not_before = queued["not_before_millis"]
        .as_u64()
        .expect("not_before_millis");
    let table = ok(home, &["status"]);
    assert!(table.contains("delayed until"), "{table}");
    // Nothing else runs: the waker submit spawned starts it when it is due.
    until("the delayed turn to end", || {
        turn(home, "later").get("exit_code").is_some()
    });
    let ran = turn(home, "later");
    assert_eq!(ran["state"], "completed");
    let started = ran["started_at_millis"].as_u64().expect("started");
    assert!(
        started >= not_before,
        "started {started} before {not_before}"
    );
}

#[test]
fn q2_a_delayed_turn_is_not_started_early_by_reconcile_or_resume() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = init_home(dir.path(), 1);
    let home = home.as_path();
    ok(
        home,
        &["submit", "--task", "later", "--delay", "1h", "--", "true"],
    );
    ok(home, &["reconcile"]);
    ok(home, &["resume"]);
    assert_eq!(turn(home, "later")["state"], "delayed");
    // Paused, the delayed turn still shows its time beside the pause.
    ok(home, &["pause"]);
    let later = turn(home, "later");
    assert_eq!(later["state"], "paused", "{later}");
    assert!(later["not_before_millis"].as_u64().is_some(), "{later}");
    let table = ok(home, &["status"]);
    assert!(
        table
            .lines()
            .any(|l| l.contains(" later ") && l.contains("paused, delayed until ")),
        "{table}"
    );
    ok(home, &["resume"]);
    ok(home, &["cancel", "later"]);
}

#[test]
fn bad_delay_and_at_are_refused_naming_the_argument_and_enqueue_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = init_home(dir.path(), 1);
    let home = home.as_path();
    for (args, named) in [
        (vec!["--at", "soonish"], "--at \"soonish\""),
        (vec!["--at", "25:00"], "--at \"25:00\""),
        (vec!["--at", "2001-01-01T00:00:00Z"], "has passed"),
        (vec!["--delay", "banana"], "--delay \"banana\""),
        (vec!["--delay", "8days"], "7 days"),
        (vec!["--priority", "high"], "--priority"),
    ] {
        let mut full = vec!["submit", "--task", "x"];
        full.extend(args.iter().copied());
        full.extend(["--", "true"]);
        let out = tollgate(home, &full);
        assert_eq!(out.status.code(), Some(2), "{full:?}: {}", describe(&out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(named), "{full:?}: {stderr}");
    }
    let both = tollgate(
        home,
        &["submit", "--delay", "1s", "--at", "10:00", "--", "true"],
    );
    assert_eq!(both.status.code(), Some(2), "{}", describe(&both));
    let status = json(home, &["status", "--json"]);
    assert_eq!(status["tasks"], serde_json::json!([]), "{status}");
}

#[test]
fn at_an_rfc3339_time_sets_that_not_before() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = init_home(dir.path(), 1);
    let home = home.as_path();
    let now_secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs();
    let at_secs = now_secs + 3600;
    let out = std::process::Command::new("date")
        .args(["-u", "-d", &format!("@{at_secs}"), "+%Y-%m-%dT%H:%M:%SZ"])
        .output()
        .expect("date");
    let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let value = json(
        home,
        &[
            "submit", "--json", "--task", "t", "--at", &text, "--", "true",
        ],
    );
    assert_eq!(value["held"], "delayed", "{value}");
    assert_eq!(value["not_before_millis"], at_secs * 1000, "{value}");
    ok(home, &["cancel", "t"]);
}

#[test]
fn help_pause_explains() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = tollgate(dir.path(), &["help", "pause"]);
    assert!(out.status.success(), "{}", describe(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    for needle in ["stays queued", "running", "tollgate resume", "--priority"] {
        assert!(text.contains(needle), "{needle}: {text}");
    }
}

/// `tollgate --home HOME ARGS…` with extra environment (the store selection reaches the runners
/// it spawns, which inherit it).
fn tollgate_env(home: &Path, env: &[(&str, &str)], args: &[&str]) -> std::process::Output {
    std::process::Command::new(common::BIN)
        .arg("--home")
        .arg(home)
        .args(args)
        .envs(env.iter().copied())
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run tollgate")
}

/// The pause set and the priorities live in the queue state, so every store keeps them: the
/// same scenario on SQLite (the default) and PostgreSQL (when `TOLLGATE_TEST_POSTGRES` names a
/// server, or one can be started; skipped with a message otherwise).
#[test]
fn pause_and_priority_hold_on_every_store() {
    let mut stores: Vec<(&str, Vec<(String, String)>)> = vec![("sqlite", vec![])];
    if let Some(url) = common::postgres::server() {
        let sep = if url.contains('?') { '&' } else { '?' };
        let queue = format!("sched-{}", std::process::id());
        stores.push((
            "postgres",
            vec![("TOLLGATE_STORE".into(), format!("{url}{sep}queue={queue}"))],
        ));
    }
    for (name, env) in stores {
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let dir = tempfile::tempdir().expect("tempdir");
        let home = init_home(dir.path(), 1);
        let run = |args: &[&str]| {
            let out = tollgate_env(&home, &env, args);
            assert!(out.status.success(), "{name}: {args:?}: {}", describe(&out));
            String::from_utf8_lossy(&out.stdout).into_owned()
        };
        let order = dir.path().join("order");
        let log = |task: &str| format!("echo {task} >> '{}'", order.display());
        run(&["pause"]);
        for (task, priority) in [("low", "0"), ("high", "9"), ("mid", "4")] {
            let out = run(&[
                "submit",
                "--task",
                task,
                "--priority",
                priority,
                "--",
                "sh",
                "-c",
                &log(task),
            ]);
            assert!(out.contains("queued, paused"), "{name}: {out}");
        }
        run(&["pause", "low"]);
        let status: Value = serde_json::from_str(&run(&["status", "--json"])).expect("json");
        assert_eq!(status["paused"]["home"], true, "{name}: {status}");
        assert_eq!(
            status["paused"]["tasks"],
            serde_json::json!(["low"]),
            "{name}: {status}"
        );
        let rows = status["rows"].as_array().expect("rows");
        let priorities: Vec<i64> = rows
            .iter()
            .map(|r| r["priority"].as_i64().unwrap_or(0))
            .collect();
        assert_eq!(priorities, vec![0, 9, 4], "{name}: {status}");
        run(&["resume"]);
        let waited = tollgate_env(&home, &env, &["wait", "low", "high", "mid"]);
        assert_eq!(
            waited.status.code(),
            Some(0),
            "{name}: {}",
            describe(&waited)
        );
        let ran = std::fs::read_to_string(&order).expect("order");
        assert_eq!(
            ran.lines().collect::<Vec<_>>(),
            vec!["high", "mid", "low"],
            "{name}"
        );
        if name == "file" {
            assert!(home.join("queue.json").exists() && !home.join("tollgate.db").exists());
        }
    }
}
