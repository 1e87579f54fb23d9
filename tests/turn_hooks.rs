//! On-finish hooks (issue 13, "On-finish hooks"): `[[hook]]` tables run after a turn's result
//! is recorded, with the turn's task, turn, outcome, exit code and log path in their
//! environment, filtered by `on` and a `task` glob; a failing, unstartable or timed-out hook is
//! logged in the runner's log and never changes the turn; a hook's whole unit (a `setsid` child
//! included) is killed at its timeout, on both containment paths. Bad hook tables are refused
//! (exit 2) naming the table and key.
//!
//! Synchronisation: hooks run after `submit --wait` may have returned, so the test polls (bounded)
//! for the runner's log line of the last matching hook; an absent effect is checked only after it.

mod common;

use common::containment::{is_alive, paths, read_pid, tollgate_on as tollgate};
use common::{describe, init_home};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn add_config(home: &Path, text: &str) {
    let path = home.join("tollgate.toml");
    let mut config = std::fs::read_to_string(&path).expect("config");
    config.push_str(text);
    std::fs::write(&path, config).expect("write config");
}

fn turn_dir(home: &Path, task: &str, turn: u32) -> PathBuf {
    home.join("tasks")
        .join(task)
        .join("turns")
        .join(turn.to_string())
}

/// Polls (bounded) until the turn's runner log contains `needle`; returns the log.
fn wait_for_log(home: &Path, task: &str, needle: &str) -> String {
    let path = turn_dir(home, task, 1).join("runner.log");
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let log = std::fs::read_to_string(&path).unwrap_or_default();
        if log.contains(needle) {
            return log;
        }
        assert!(
            Instant::now() < until,
            "no {needle:?} in {}:\n{log}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn state(home: &Path) -> serde_json::Value {
    let out = tollgate(home, true, &["status", "--json", "--all"]);
    assert!(out.status.success(), "{}", describe(&out));
    let value: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    value["tasks"][0]["turns"][0]["state"].clone()
}

#[test]
fn matching_hooks_see_the_turn_and_others_do_not_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = init_home(dir.path(), 1);
    let out_dir = dir.path().join("out");
    std::fs::create_dir(&out_dir).expect("out dir");
    let o = out_dir.display();
    add_config(
        &home,
        &format!(
            r#"
[[hook]]
on = "success"
command = ["sh", "-c", "touch {o}/success"]

[[hook]]
on = "finish"
task = "other*"
command = ["sh", "-c", "touch {o}/other"]

[[hook]]
on = "finish"
task = "bu?ld*"
command = ["sh", "-c", "env | grep ^TOLLGATE_ | sort > {o}/finish.tmp && mv {o}/finish.tmp {o}/finish"]

[[hook]]
on = "failure"
command = ["sh", "-c", "touch {o}/failure"]
"#
        ),
    );
    let out = tollgate(
        &home,
        true,
        &[
            "submit",
            "--task",
            "build-x",
            "--wait",
            "--",
            "sh",
            "-c",
            "echo hi; exit 3",
        ],
    );
    assert_eq!(out.status.code(), Some(3), "{}", describe(&out));
    let log = wait_for_log(&home, "build-x", "hook[3]");
    assert!(log.contains("hook[2]"), "{log}");
    let env = std::fs::read_to_string(out_dir.join("finish")).expect("the finish hook ran");
    assert!(env.contains("TOLLGATE_TASK=build-x\n"), "{env}");
    assert!(env.contains("TOLLGATE_TURN=1\n"), "{env}");
    assert!(env.contains("TOLLGATE_OUTCOME=failed\n"), "{env}");
    assert!(env.contains("TOLLGATE_EXIT_CODE=3\n"), "{env}");
    assert!(
        !env.contains("TOLLGATE_WORK="),
        "the turn's marker leaked: {env}"
    );
    let log_path = env
        .lines()
        .find_map(|l| l.strip_prefix("TOLLGATE_LOG="))
        .expect("TOLLGATE_LOG");
    assert_eq!(
        std::fs::read_to_string(log_path).expect("stdout log"),
        "hi\n"
    );
    assert!(
        out_dir.join("failure").exists(),
        "the failure hook did not run"
    );
    assert!(
        !out_dir.join("success").exists(),
        "a success hook ran for a failure"
    );
    assert!(
        !out_dir.join("other").exists(),
        "a hook of another task ran"
    );
    assert!(
        !log.contains("hook[0]") && !log.contains("hook[1]"),
        "{log}"
    );
    assert_eq!(state(&home), "failed");
}

#[test]
fn an_attached_turns_hooks_have_run_when_submit_returns() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = init_home(dir.path(), 1);
    let flag = dir.path().join("flag");
    add_config(
        &home,
        &format!(
            "[[hook]]\non = \"success\"\ncommand = [\"sh\", \"-c\", \"echo $TOLLGATE_OUTCOME > {}\"]\n",
            flag.display()
        ),
    );
    let out = tollgate(&home, true, &["submit", "--attach", "--", "true"]);
    assert!(out.status.success(), "{}", describe(&out));
    assert_eq!(
        std::fs::read_to_string(&flag).expect("the hook ran before submit returned"),
        "completed\n"
    );
}

fn failing_hooks_change_nothing_on(path: &str, force_subreaper: bool) {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = init_home(dir.path(), 1);
    let pid_dir = dir.path().join("pids");
    std::fs::create_dir(&pid_dir).expect("pid dir");
    let d = pid_dir.display();
    add_config(
        &home,
        &format!(
            r#"
[[hook]]
on = "finish"
command = ["/nonexistent/hook"]

[[hook]]
on = "finish"
command = ["sh", "-c", "exit 7"]

[[hook]]
on = "finish"
timeout = "1s"
command = ["sh", "-c", "setsid sh -c 'echo $$ > {d}/setsid.tmp && mv {d}/setsid.tmp {d}/setsid; exec sleep 600' & echo $$ > {d}/leader.tmp && mv {d}/leader.tmp {d}/leader; wait"]
"#
        ),
    );
    let out = tollgate(
        &home,
        force_subreaper,
        &["submit", "--task", "t", "--wait", "--", "true"],
    );
    assert_eq!(out.status.code(), Some(0), "{path}: {}", describe(&out));
    let log = wait_for_log(&home, "t", "hook[2]");
    assert!(
        log.contains("hook[0]") && log.contains("cannot start"),
        "{log}"
    );
    assert!(
        log.contains("hook[1]") && log.contains("exit status: 7"),
        "{log}"
    );
    assert!(log.contains("killed at its timeout of 1s"), "{log}");
    let leader = read_pid(&pid_dir, "leader");
    let escapee = read_pid(&pid_dir, "setsid");
    let until = Instant::now() + Duration::from_secs(10);
    while is_alive(leader) || is_alive(escapee) {
        assert!(
            Instant::now() < until,
            "{path}: the hook's unit outlived its timeout"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(state(&home), "completed", "{path}: a hook changed the turn");
    eprintln!("{path} path: failing hooks logged, the timed-out hook's unit is gone");
}

#[test]
fn failing_and_timed_out_hooks_are_logged_killed_whole_and_change_nothing() {
    for (path, force_subreaper) in paths() {
        failing_hooks_change_nothing_on(path, force_subreaper);
    }
}

#[test]
fn bad_hook_tables_are_refused_naming_the_table_and_key() {
    let cases = [
        ("[[hook]]\non = \"sometimes\"\ncommand = [\"true\"]\n", "on"),
        ("[[hook]]\non = \"finish\"\ncommand = []\n", "`command`"),
        (
            "[[hook]]\non = \"finish\"\ncommand = [\"true\"]\ntimeout = \"0s\"\n",
            "`timeout`",
        ),
        (
            "[[hook]]\non = \"finish\"\ncommand = [\"true\"]\nwhen = \"now\"\n",
            "when",
        ),
    ];
    for (table, key) in cases {
        let dir = tempfile::tempdir().expect("tempdir");
        let home = init_home(dir.path(), 1);
        add_config(&home, table);
        let out = tollgate(&home, true, &["submit", "--task", "t", "--", "true"]);
        assert_eq!(out.status.code(), Some(2), "{table}: {}", describe(&out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("[[hook]] 0"), "{table}: {stderr}");
        assert!(stderr.contains(key), "{table}: no {key} in {stderr}");
        assert!(!home.join("tasks/t").exists(), "{table}: a turn was queued");
    }
}
