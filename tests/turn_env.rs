//! The environment stored per turn (issue 13, "Output and storage bounds"): by default only the
//! variables `env_keep` names (PATH, HOME, USER, LANG, LC_*, TERM, SHELL, TZ) and every `--env`;
//! `--env-all` stores the whole environment as before, and such a record still restarts with it.
//! Prints the bytes of turn.json both ways (the figure the issue measured: ~11 KB).

mod common;

use common::{describe, init_home, BIN};
use std::path::Path;
use std::process::{Command, Output, Stdio};

/// `tollgate` with a fat environment: the test's own, plus FOO and 8 KB in BIG.
fn tollgate(home: &Path, args: &[&str]) -> Output {
    Command::new(BIN)
        .arg("--home")
        .arg(home)
        .args(args)
        .env("FOO", "from-the-shell")
        .env("BIG", "x".repeat(8192))
        .env("TOLLGATE_NO_CGROUP", "1")
        .stdin(Stdio::null())
        .output()
        .expect("run tollgate")
}

fn record(home: &Path, task: &str, turn: u32) -> (usize, serde_json::Value) {
    // The record's body in tollgate.db (compact JSON).
    let value: serde_json::Value = serde_json::to_value(
        tollgate::tasks::load_turn(
            &tollgate::home::Home::at(home),
            &tollgate::protocol::slots::TurnKey::new(task, turn),
        )
        .expect("turn record")
        .expect("the turn has a record"),
    )
    .expect("json");
    (value.to_string().len(), value)
}

fn stdout_of(home: &Path, task: &str, turn: u32) -> String {
    std::fs::read_to_string(home.join(format!("tasks/{task}/turns/{turn}/stdout.log")))
        .expect("stdout log")
}

const SHOW: &str = "echo \"FOO=$FOO GIVEN=$GIVEN BIG=${#BIG} PATH=${PATH:+set}\"";

#[test]
fn a_turn_stores_only_kept_and_given_variables_unless_env_all() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = init_home(dir.path(), 1);
    let lean = tollgate(
        &home,
        &[
            "submit", "--task", "lean", "--wait", "--env", "GIVEN=1", "--", "sh", "-c", SHOW,
        ],
    );
    assert!(lean.status.success(), "{}", describe(&lean));
    let full = tollgate(
        &home,
        &[
            "submit",
            "--task",
            "full",
            "--wait",
            "--env-all",
            "--env",
            "GIVEN=1",
            "--",
            "sh",
            "-c",
            SHOW,
        ],
    );
    assert!(full.status.success(), "{}", describe(&full));
    let (lean_bytes, lean_record) = record(&home, "lean", 1);
    let (full_bytes, full_record) = record(&home, "full", 1);
    eprintln!("turn.json: {lean_bytes} bytes with env_keep, {full_bytes} bytes with --env-all");
    let env = &lean_record["env"];
    assert!(env.get("PATH").is_some(), "{env}");
    assert_eq!(env["GIVEN"], "1", "{env}");
    assert!(
        env.get("FOO").is_none() && env.get("BIG").is_none(),
        "{env}"
    );
    assert_eq!(stdout_of(&home, "lean", 1), "FOO= GIVEN=1 BIG=0 PATH=set\n");
    assert_eq!(full_record["env"]["FOO"], "from-the-shell");
    assert_eq!(
        stdout_of(&home, "full", 1),
        "FOO=from-the-shell GIVEN=1 BIG=8192 PATH=set\n"
    );
    assert!(
        lean_bytes + 8192 < full_bytes,
        "{lean_bytes} bytes stored vs {full_bytes} with the whole environment"
    );

    // A record holding the whole environment (as every record did before env_keep) restarts
    // with all of it.
    let restart = tollgate(&home, &["restart", "full:1", "--wait"]);
    assert!(restart.status.success(), "{}", describe(&restart));
    assert_eq!(record(&home, "full", 2).1["env"], full_record["env"]);
    assert_eq!(
        stdout_of(&home, "full", 2),
        "FOO=from-the-shell GIVEN=1 BIG=8192 PATH=set\n"
    );
}

#[test]
fn env_keep_in_the_config_chooses_the_variables_and_a_bad_one_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = init_home(dir.path(), 1);
    let config = home.join("tollgate.toml");
    let original = std::fs::read_to_string(&config).expect("config");
    std::fs::write(
        &config,
        format!("env_keep = [\"PATH\", \"FO*\"]\n{original}"),
    )
    .expect("write");
    let out = tollgate(
        &home,
        &["submit", "--task", "t", "--wait", "--", "sh", "-c", SHOW],
    );
    assert!(out.status.success(), "{}", describe(&out));
    let env = record(&home, "t", 1).1["env"].clone();
    let names: Vec<&str> = env
        .as_object()
        .expect("env")
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(names, ["FOO", "PATH"], "{env}");

    std::fs::write(&config, format!("env_keep = [\"NOT OK\"]\n{original}")).expect("write");
    let bad = tollgate(&home, &["submit", "--task", "u", "--", "true"]);
    assert_eq!(bad.status.code(), Some(2), "{}", describe(&bad));
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("env_keep"),
        "{}",
        describe(&bad)
    );
    assert!(!home.join("tasks/u").exists());
}
