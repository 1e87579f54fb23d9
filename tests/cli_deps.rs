//! `submit --after`/`--after-success` and `--retry`/`--backoff` through the real binary
//! (spec/slots.md, "Dependencies and retries"; invariants R1..R3).
//!
//! Commands that must stay running until the test says so wait for a gate file the test creates
//! (a barrier, not a sleep); the test polls observable state (`status --json`) with a bound.

mod common;

use common::{describe, init_home, tollgate};
use serde_json::Value;
use std::path::Path;
use std::time::{Duration, Instant};
use tollgate::protocol::slots::TurnKey;

fn ok(home: &Path, args: &[&str]) -> String {
    let out = tollgate(home, args);
    assert!(out.status.success(), "{args:?}: {}", describe(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn status(home: &Path) -> Value {
    serde_json::from_str(&ok(home, &["status", "--all", "--json"])).expect("status json")
}

/// The status view of `task`'s turn `turn`, if listed.
fn turn_view(home: &Path, task: &str, turn: u64) -> Option<Value> {
    let value = status(home);
    value["tasks"]
        .as_array()?
        .iter()
        .find(|t| t["name"] == task)?["turns"]
        .as_array()?
        .iter()
        .find(|t| t["turn"] == turn)
        .cloned()
}

fn state_of(home: &Path, task: &str, turn: u64) -> Option<String> {
    turn_view(home, task, turn).and_then(|t| t["state"].as_str().map(str::to_string))
}

/// Polls `status` until `check` holds (at most 30 s).
fn until(home: &Path, what: &str, check: impl Fn(&Path) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !check(home) {
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}: {}",
            status(home)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A command that waits for `gate` to exist, appends `name` to `order`, then exits `code`.
fn gated(dir: &Path, name: &str, code: i32) -> String {
    format!(
        "while [ ! -e {gate} ]; do sleep 0.02; done; echo {name} >> {order}; exit {code}",
        gate = dir.join("gate").display(),
        order = dir.join("order").display(),
    )
}

fn order(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("order")).unwrap_or_default()
}

/// R1: a turn submitted `--after` a running turn is held (never started) until that turn has
/// ended, then starts by itself; `--after` does not care how the dependency ended.
#[test]
fn after_holds_a_turn_until_its_dependency_ended_however_it_ended() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = init_home(tmp.path(), 4);
    let dir = tmp.path();
    ok(
        &home,
        &[
            "submit",
            "--task",
            "a",
            "--",
            "sh",
            "-c",
            &gated(dir, "a", 3),
        ],
    );
    let line = ok(
        &home,
        &[
            "submit",
            "--task",
            "b",
            "--after",
            "a",
            "--",
            "sh",
            "-c",
            &format!("echo b >> {}", dir.join("order").display()),
        ],
    );
    assert!(line.contains("waits for a turn 1"), "{line}");
    // Free slots are left, yet b is held, and its logs say why.
    assert_eq!(state_of(&home, "b", 1).as_deref(), Some("held"));
    let logs = tollgate(&home, &["logs", "b"]);
    let text = String::from_utf8_lossy(&logs.stderr);
    assert!(text.contains("held") && text.contains("a turn 1"), "{text}");
    let table = ok(&home, &["status"]);
    assert!(table.contains("held"), "{table}");
    assert_eq!(order(dir), "", "nothing ran yet");
    std::fs::write(dir.join("gate"), "").expect("open the gate");
    let waited = tollgate(&home, &["wait", "b"]);
    assert_eq!(waited.status.code(), Some(0), "{}", describe(&waited));
    assert_eq!(order(dir), "a\nb\n", "b ran after a ended (failed)");
}

/// R2: `--after-success` of a turn that fails settles the dependent `dependency-failed` without
/// running it, naming the dependency, transitively; a plain `--after` dependent of the settled
/// turn still runs. `wait` exits 5 for it.
#[test]
fn a_failed_dependency_settles_its_after_success_chain_and_wait_exits_5() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = init_home(tmp.path(), 4);
    let dir = tmp.path();
    let record = |name: &str| format!("echo {name} >> {}", dir.join("order").display());
    ok(
        &home,
        &[
            "submit",
            "--task",
            "a",
            "--",
            "sh",
            "-c",
            &gated(dir, "a", 1),
        ],
    );
    for (task, flag, on) in [
        ("b", "--after-success", "a"),
        ("c", "--after-success", "b"),
        ("d", "--after", "b"),
    ] {
        ok(
            &home,
            &[
                "submit",
                "--task",
                task,
                flag,
                on,
                "--",
                "sh",
                "-c",
                &record(task),
            ],
        );
    }
    for task in ["b", "c", "d"] {
        assert_eq!(state_of(&home, task, 1).as_deref(), Some("held"), "{task}");
    }
    std::fs::write(dir.join("gate"), "").expect("open the gate");
    let a = tollgate(&home, &["wait", "a"]);
    assert_eq!(a.status.code(), Some(1), "{}", describe(&a));
    let c = tollgate(&home, &["wait", "c"]);
    assert_eq!(c.status.code(), Some(5), "{}", describe(&c));
    let said = String::from_utf8_lossy(&c.stderr);
    assert!(
        said.contains("dependency_failed") && said.contains("b turn 1"),
        "{said}"
    );
    let d = tollgate(&home, &["wait", "d"]);
    assert_eq!(d.status.code(), Some(0), "{}", describe(&d));
    assert_eq!(order(dir), "a\nd\n", "b and c never ran");
    let b = turn_view(&home, "b", 1).expect("b");
    assert_eq!(b["state"], "dependency_failed");
    assert_eq!(b["failed_dependency"]["task"], "a");
    assert!(b["started_at_millis"].is_null(), "{b}");
    let logs = tollgate(&home, &["logs", "b"]);
    let text = String::from_utf8_lossy(&logs.stderr);
    assert!(
        text.contains("dependency_failed") && text.contains("a turn 1"),
        "{text}"
    );
    let table = ok(&home, &["status"]);
    assert!(table.contains("dependency_failed"), "{table}");
}

/// A dependency that has already ended is decided at submit: the turn starts at once, or (an
/// `--after-success` of a failed turn) is settled at once with exit code 5 and never queued.
#[test]
fn a_dependency_ended_before_the_submit_is_decided_at_the_submit() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = init_home(tmp.path(), 2);
    ok(&home, &["submit", "--task", "good", "--wait", "--", "true"]);
    let bad = tollgate(
        &home,
        &[
            "submit", "--task", "bad", "--wait", "--", "sh", "-c", "exit 2",
        ],
    );
    assert_eq!(bad.status.code(), Some(2), "{}", describe(&bad));
    let runs = tollgate(
        &home,
        &[
            "submit",
            "--after-success",
            "good",
            "--wait",
            "--",
            "sh",
            "-c",
            "exit 0",
        ],
    );
    assert_eq!(runs.status.code(), Some(0), "{}", describe(&runs));
    let refused = tollgate(
        &home,
        &[
            "submit",
            "--task",
            "after-bad",
            "--after-success",
            "bad",
            "--",
            "true",
        ],
    );
    assert_eq!(refused.status.code(), Some(5), "{}", describe(&refused));
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        said.contains("bad turn 1") && said.contains("failed"),
        "{said}"
    );
    assert_eq!(
        state_of(&home, "after-bad", 1).as_deref(),
        Some("dependency_failed")
    );
    // `--after` of a failed turn just runs.
    let plain = tollgate(&home, &["submit", "--after", "bad", "--wait", "--", "true"]);
    assert_eq!(plain.status.code(), Some(0), "{}", describe(&plain));
}

/// An unknown reference is a usage error naming it, and nothing is queued; so is a list longer
/// than the bound, and --after with --attach.
#[test]
fn bad_dependencies_and_retries_are_refused_naming_them_and_change_nothing() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = init_home(tmp.path(), 2);
    let unknown = tollgate(
        &home,
        &["submit", "--task", "x", "--after", "nope", "--", "true"],
    );
    assert_eq!(unknown.status.code(), Some(2), "{}", describe(&unknown));
    assert!(
        String::from_utf8_lossy(&unknown.stderr).contains("nope"),
        "{}",
        describe(&unknown)
    );
    ok(&home, &["submit", "--task", "one", "--wait", "--", "true"]);
    let many: Vec<String> = (0..33).map(|_| "one".to_string()).collect();
    let mut args = vec!["submit", "--task", "x", "--after"];
    args.extend(many.iter().map(String::as_str));
    args.extend(["--", "true"]);
    let too_many = tollgate(&home, &args);
    assert_eq!(too_many.status.code(), Some(2), "{}", describe(&too_many));
    assert!(String::from_utf8_lossy(&too_many.stderr).contains("at most 32"));
    for args in [
        vec!["submit", "--task", "x", "--retry", "101", "--", "true"],
        vec![
            "submit",
            "--task",
            "x",
            "--retry",
            "1",
            "--backoff",
            "2h",
            "--",
            "true",
        ],
        vec![
            "submit",
            "--task",
            "x",
            "--retry",
            "1",
            "--backoff",
            "soon",
            "--",
            "true",
        ],
        vec![
            "submit", "--task", "x", "--after", "one", "--attach", "--", "true",
        ],
    ] {
        let out = tollgate(&home, &args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", describe(&out));
    }
    let value = status(&home);
    let names: Vec<&str> = value["tasks"]
        .as_array()
        .expect("tasks")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert_eq!(names, ["one"], "nothing else was queued");
}

/// R3: a failing turn with `--retry 2 --backoff 200ms` is re-queued as new turns of its task with
/// the same command and cwd, each recording its attempt and the turn it retries, after a doubling
/// wait, with no other command; `submit --wait` follows the chain to the attempt that succeeded.
#[test]
fn a_failing_turn_is_retried_as_new_turns_after_a_doubling_backoff() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = init_home(tmp.path(), 2);
    let work = tmp.path().join("work");
    std::fs::create_dir(&work).expect("work dir");
    // Fails on its first two runs, succeeds on the third: the count lives in its cwd.
    let script = "n=$(cat count 2>/dev/null || echo 0); n=$((n+1)); echo $n > count; \
                  echo \"run $n of $RETRY_ENV\"; [ $n -ge 3 ]";
    let out = tollgate(
        &home,
        &[
            "submit",
            "--task",
            "flaky",
            "--retry",
            "2",
            "--backoff",
            "200ms",
            "--cwd",
            work.to_str().expect("utf-8"),
            "--env",
            "RETRY_ENV=kept",
            "--wait",
            "--",
            "sh",
            "-c",
            script,
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("run 3 of kept"), "{}", describe(&out));
    assert_eq!(
        std::fs::read_to_string(work.join("count")).expect("count"),
        "3\n"
    );
    let views: Vec<Value> = (1..=3)
        .map(|n| turn_view(&home, "flaky", n).expect("attempt"))
        .collect();
    for (n, view) in views.iter().enumerate() {
        assert_eq!(view["retry"]["attempt"], n as u64 + 1, "{view}");
        assert_eq!(view["retry"]["attempts"], 3, "{view}");
    }
    assert_eq!(views[0]["state"], "failed");
    assert_eq!(views[1]["state"], "failed");
    assert_eq!(views[2]["state"], "completed");
    assert!(turn_view(&home, "flaky", 4).is_none(), "no fourth attempt");
    let gap = |a: &Value, b: &Value| {
        b["started_at_millis"].as_u64().expect("started")
            - a["ended_at_millis"].as_u64().expect("ended")
    };
    assert!(gap(&views[0], &views[1]) >= 200, "{views:?}");
    assert!(gap(&views[1], &views[2]) >= 400, "doubled: {views:?}");
    let record = serde_json::to_value(
        tollgate::tasks::load_turn(&tollgate::home::Home::at(&home), &TurnKey::new("flaky", 2))
            .expect("turn 2 record")
            .expect("turn 2 exists"),
    )
    .expect("record json");
    assert_eq!(record["retry_of"], 1, "{record}");
    assert_eq!(record["retried_as"], 3, "{record}");
    let table = ok(&home, &["status"]);
    assert!(table.contains("completed 3/3"), "{table}");
    // `wait` on the first attempt follows the chain too.
    let waited = tollgate(&home, &["wait", "flaky:1"]);
    assert_eq!(waited.status.code(), Some(0), "{}", describe(&waited));
}

/// Every attempt fails: the last one's exit code is what `wait` returns; an `--after-success`
/// dependent waits for the whole chain, and settles dependency-failed only after the last one.
#[test]
fn the_last_attempt_decides_and_dependents_follow_the_chain() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = init_home(tmp.path(), 2);
    let dir = tmp.path();
    ok(
        &home,
        &[
            "submit",
            "--task",
            "always",
            "--retry",
            "1",
            "--",
            "sh",
            "-c",
            &gated(dir, "always", 4),
        ],
    );
    ok(
        &home,
        &[
            "submit",
            "--task",
            "next",
            "--after-success",
            "always",
            "--",
            "true",
        ],
    );
    std::fs::write(dir.join("gate"), "").expect("open the gate");
    let waited = tollgate(&home, &["wait", "always:1"]);
    assert_eq!(waited.status.code(), Some(4), "{}", describe(&waited));
    let next = tollgate(&home, &["wait", "next"]);
    assert_eq!(next.status.code(), Some(5), "{}", describe(&next));
    assert_eq!(order(dir), "always\nalways\n", "two attempts ran");
    let view = turn_view(&home, "next", 1).expect("next");
    assert_eq!(view["failed_dependency"]["turn"], 2, "{view}");
}

/// Cancel stops retries: a retry waiting out its backoff is cancelled with its task, and no
/// further attempt is made; a turn cancelled while it runs is never retried.
#[test]
fn cancel_stops_the_retries_of_a_task() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = init_home(tmp.path(), 2);
    ok(
        &home,
        &[
            "submit",
            "--task",
            "slow",
            "--retry",
            "3",
            "--backoff",
            "1h",
            "--",
            "false",
        ],
    );
    until(&home, "the retry to wait out its backoff", |h| {
        state_of(h, "slow", 2).as_deref() == Some("delayed")
    });
    ok(&home, &["cancel", "slow"]);
    assert_eq!(state_of(&home, "slow", 2).as_deref(), Some("cancelled"));
    ok(&home, &["reconcile"]);
    assert!(turn_view(&home, "slow", 3).is_none(), "no third attempt");

    let dir = tmp.path();
    ok(
        &home,
        &[
            "submit",
            "--task",
            "running",
            "--retry",
            "2",
            "--",
            "sh",
            "-c",
            &gated(dir, "running", 1),
        ],
    );
    until(&home, "the turn to run", |h| {
        state_of(h, "running", 1).as_deref() == Some("running")
    });
    ok(&home, &["cancel", "running"]);
    let waited = tollgate(&home, &["wait", "running"]);
    assert_ne!(waited.status.code(), Some(0), "{}", describe(&waited));
    assert_eq!(state_of(&home, "running", 1).as_deref(), Some("cancelled"));
    assert!(
        turn_view(&home, "running", 2).is_none(),
        "a cancel is not retried"
    );
}

#[test]
fn submit_help_explains_dependencies_and_retries() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let out = ok(tmp.path(), &["submit", "--help"]);
    for word in [
        "--after ",
        "--after-success",
        "--retry",
        "--backoff",
        "dependency_failed",
    ] {
        assert!(out.contains(word), "{word}: {out}");
    }
}

/// R3 across a crash: the runner of a failing turn dies inside its finish section after the
/// turn's result was written and before the queue's commit (made here by SIGKILLing the runner
/// and writing the failed result the section writes first). `reconcile` removes the settled row
/// and re-queues the retry in that same section; a second `reconcile` does not double it.
#[test]
fn a_crash_between_the_result_and_the_commit_neither_loses_nor_doubles_the_retry() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = init_home(tmp.path(), 2);
    let first = tmp.path().join("first");
    // Its first run marks `first` and runs until killed; its retry exits 0.
    let script = format!(
        "if [ -e {first} ]; then exit 0; fi; touch {first}; while :; do sleep 0.05; done",
        first = first.display()
    );
    ok(
        &home,
        &[
            "submit", "--task", "a", "--retry", "1", "--", "sh", "-c", &script,
        ],
    );
    until(&home, "the first run", |h| {
        first.exists() && state_of(h, "a", 1).as_deref() == Some("running")
    });
    let records = tollgate::home::Home::at(&home);
    let key = TurnKey::new("a", 1);
    let mut record = tollgate::tasks::load_turn(&records, &key)
        .expect("record")
        .expect("turn 1 exists");
    let runner = record.runner.expect("runner").pid;
    let killed = std::process::Command::new("kill")
        .args(["-9", &runner.to_string()])
        .status()
        .expect("kill");
    assert!(killed.success());
    // Watched through /proc, not `status`: status repairs a dead runner's turn (runs it again).
    let deadline = Instant::now() + Duration::from_secs(30);
    let alive = || {
        std::fs::read_to_string(format!("/proc/{runner}/stat")).is_ok_and(|stat| {
            stat.rsplit(')')
                .next()
                .is_some_and(|r| !r.trim_start().starts_with('Z'))
        })
    };
    while alive() {
        assert!(Instant::now() < deadline, "runner {runner} still alive");
        std::thread::sleep(Duration::from_millis(10));
    }
    // What the finish section writes before its commit: the failed result.
    record.outcome = Some(tollgate::tasks::TurnOutcome::Failed);
    record.exit_code = Some(1);
    record.ended_at_millis = record.started_at_millis;
    tollgate::tasks::save_turn(&records, &record).expect("write the failed result");
    ok(&home, &["reconcile"]);
    ok(&home, &["reconcile"]);
    let waited = tollgate(&home, &["wait", "a:1"]);
    assert_eq!(waited.status.code(), Some(0), "{}", describe(&waited));
    let retry = turn_view(&home, "a", 2).expect("the retry");
    assert_eq!(retry["state"], "completed", "{retry}");
    assert_eq!(retry["retry"]["attempt"], 2, "{retry}");
    assert!(
        turn_view(&home, "a", 3).is_none(),
        "the retry was not doubled"
    );
}

/// A turn that cannot start (a missing program) or runs past its `--timeout` is a failure too:
/// each is retried, and the last attempt's exit code is what `submit --wait` returns.
#[test]
fn unstartable_and_timed_out_turns_are_retried() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = init_home(tmp.path(), 2);
    let missing = tollgate(
        &home,
        &[
            "submit",
            "--task",
            "missing",
            "--retry",
            "1",
            "--wait",
            // Past submit's own check, to see the runner's spawn fail.
            "--no-check",
            "--",
            "/nonexistent/program",
        ],
    );
    assert_eq!(missing.status.code(), Some(127), "{}", describe(&missing));
    for n in [1, 2] {
        assert_eq!(
            state_of(&home, "missing", n).as_deref(),
            Some("unstartable"),
            "attempt {n}"
        );
    }
    let slow = tollgate(
        &home,
        &[
            "submit",
            "--task",
            "slow",
            "--retry",
            "1",
            "--timeout",
            "100ms",
            "--wait",
            "--",
            "sleep",
            "30",
        ],
    );
    assert_eq!(slow.status.code(), Some(124), "{}", describe(&slow));
    for n in [1, 2] {
        assert_eq!(
            state_of(&home, "slow", n).as_deref(),
            Some("timed_out"),
            "attempt {n}"
        );
    }
    assert!(turn_view(&home, "slow", 3).is_none());
}

/// `--after` and `--delay` together: the dependency ends first, and then only time starts the
/// held row, through the waker its submit started (watched through the library, not `status`,
/// whose repair could start a due row itself). The dependency ends when the test opens its gate,
/// after `b`'s submit: a timed dependency (`sleep 0.2`) could end before a slow submit was
/// decided, and `b` was then not held for it at all.
#[test]
fn a_dependent_with_a_delay_starts_at_its_time_after_its_dependency_ended() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = init_home(tmp.path(), 2);
    ok(
        &home,
        &[
            "submit",
            "--task",
            "a",
            "--",
            "sh",
            "-c",
            &gated(tmp.path(), "a", 0),
        ],
    );
    let held = ok(
        &home,
        &[
            "submit", "--task", "b", "--after", "a", "--delay", "2s", "--", "true",
        ],
    );
    assert!(held.contains("waits for"), "{held}");
    std::fs::write(tmp.path().join("gate"), "").expect("open the gate");
    let records = tollgate::home::Home::at(&home);
    let settled = |task: &str| {
        tollgate::tasks::load_turn(&records, &TurnKey::new(task, 1))
            .expect("record")
            .filter(|t| t.is_settled())
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let b = loop {
        if let Some(b) = settled("b") {
            break b;
        }
        assert!(Instant::now() < deadline, "b never ran");
        std::thread::sleep(Duration::from_millis(20));
    };
    let a = settled("a").expect("a ended before b");
    assert_eq!(
        b.outcome,
        Some(tollgate::tasks::TurnOutcome::Completed),
        "{b:?}"
    );
    let started = b.started_at_millis.expect("b started");
    assert!(
        started >= b.submitted_at_millis + 2_000,
        "b started {} ms after its submit, before its delay",
        started - b.submitted_at_millis
    );
    assert!(
        started >= a.ended_at_millis.expect("a ended"),
        "b started before a ended"
    );
}
