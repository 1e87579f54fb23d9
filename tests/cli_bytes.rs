//! A command's arguments and environment are bytes (issue 31, point 4; spec/turns.md,
//! "Arguments and environment as bytes"). Non-UTF-8 arguments used to panic the CLI (exit 101,
//! from `std::env::args()` in the usage error's hint), `--env` could not carry them, and
//! `--env-all` dropped a non-UTF-8 variable without a word. Now they reach the command exactly,
//! are stored losslessly (a restart runs the same bytes), and a non-UTF-8 value where tollgate
//! wants text (a task name) is a usage error, exit 2.
//!
//! The fuzz at the end parses arbitrary argument bytes the way the binary does (clap, then the
//! hint for a missing `--`), in process, and checks that nothing panics and that the answer is
//! well-formed: a parse whose command after `--` is exactly the bytes given, or an error whose
//! exit code is 0 (help) or 2 (usage).

mod common;

use clap::{CommandFactory, FromArgMatches};
use common::{describe, init_home, BIN};
use proptest::prelude::*;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use tollgate::cli::{Cli, Command as Sub};

fn os(bytes: &[u8]) -> OsString {
    OsString::from_vec(bytes.to_vec())
}

/// `tollgate --home HOME ARGS…` with arguments of any bytes.
fn run(home: &Path, args: &[OsString], env: &[(OsString, OsString)]) -> Output {
    let mut command = Command::new(BIN);
    command
        .arg("--home")
        .arg(home)
        .args(args)
        .stdin(Stdio::null());
    for (k, v) in env {
        command.env(k, v);
    }
    command.output().expect("run tollgate")
}

fn args(words: &[&[u8]]) -> Vec<OsString> {
    words.iter().map(|w| os(w)).collect()
}

fn stdout_log(home: &Path, task: &str, turn: u32) -> Vec<u8> {
    std::fs::read(home.join(format!("tasks/{task}/turns/{turn}/stdout.log"))).expect("stdout.log")
}

/// No panic and no backtrace: a clap error (exit 2) or a refusal naming the argument.
fn refused_without_panic(out: &Output) {
    assert_eq!(out.status.code(), Some(2), "{}", describe(out));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        !said.contains("panicked") && !said.contains("RUST_BACKTRACE"),
        "{said}"
    );
}

#[test]
fn non_utf8_where_tollgate_wants_text_is_a_usage_error_not_a_panic() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = init_home(dir.path(), 1);
    for bad in [
        args(&[b"submit", b"--task", b"a\xffb", b"--", b"true"]),
        args(&[b"submit", b"--task", b"a\xffb", b"true"]),
        args(&[b"submit", b"\xff", b"--wait"]),
        args(&[b"st\xffatus"]),
        args(&[b"logs", b"k\xfe:1"]),
    ] {
        let out = run(&home, &bad, &[]);
        refused_without_panic(&out);
    }
    // An `--env` without `=` whose name is bytes: refused, naming the option.
    let out = run(
        &home,
        &args(&[b"submit", b"--env", b"K\xff", b"--", b"true"]),
        &[],
    );
    refused_without_panic(&out);
    assert!(String::from_utf8_lossy(&out.stderr).contains("--env"));
}

#[test]
fn argument_and_environment_bytes_reach_the_command_and_a_restart_unchanged() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = init_home(dir.path(), 1);
    // printf's operands after `--`, and an `--env` value and name, all bytes.
    let out = run(
        &home,
        &args(&[
            b"submit",
            b"--task",
            b"raw",
            b"--wait",
            b"--env",
            b"VAL=v\xfe\x80w",
            b"--",
            b"sh",
            b"-c",
            b"printf '%s|%s|' \"$1\" \"$VAL\"",
            b"sh",
            b"a\xffb",
        ]),
        &[],
    );
    assert!(out.status.success(), "{}", describe(&out));
    let expected: &[u8] = b"a\xffb|v\xfe\x80w|";
    assert_eq!(stdout_log(&home, "raw", 1), expected);
    // Stored losslessly: a restart runs the same bytes again.
    let out = run(&home, &args(&[b"restart", b"raw:1"]), &[]);
    assert!(out.status.success(), "{}", describe(&out));
    let out = run(&home, &args(&[b"wait", b"raw:2"]), &[]);
    assert!(out.status.success(), "{}", describe(&out));
    assert_eq!(stdout_log(&home, "raw", 2), expected);
    // `status --json` shows the bytes it cannot write as text, never an invalid string.
    let out = run(&home, &args(&[b"status", b"raw", b"--json"]), &[]);
    assert!(out.status.success(), "{}", describe(&out));
    let view: serde_json::Value = serde_json::from_slice(&out.stdout).expect("status --json");
    assert_eq!(
        view["tasks"][0]["turns"][0]["argv"][4],
        serde_json::json!({"hex": "61ff62"}),
        "{view:#}"
    );
}

/// The `RAW…` lines of `env`'s output. The tests run `env` itself: a shell would not even export
/// a variable whose name is not an identifier.
fn environment_of(out: &[u8]) -> Vec<&[u8]> {
    out.split(|&b| b == b'\n')
        .filter(|l| l.starts_with(b"RAW"))
        .collect()
}

/// An `--env` name of any bytes reaches the command.
#[test]
fn an_env_name_of_any_bytes_reaches_the_command() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = init_home(dir.path(), 1);
    let out = run(
        &home,
        &args(&[
            b"submit",
            b"--task",
            b"named",
            b"--wait",
            b"--env",
            b"RAW\xffNAME=x",
            b"--",
            b"env",
        ]),
        &[],
    );
    assert!(out.status.success(), "{}", describe(&out));
    let log = stdout_log(&home, "named", 1);
    assert_eq!(environment_of(&log), [&b"RAW\xffNAME=x"[..]]);
}

#[test]
fn env_all_keeps_a_non_utf8_variable() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = init_home(dir.path(), 1);
    let env = [
        (os(b"RAW_VALUE"), os(b"\xfd\xfe")),
        (os(b"RAW\xffNAME"), os(b"plain")),
    ];
    let out = run(
        &home,
        &args(&[
            b"submit",
            b"--task",
            b"all",
            b"--wait",
            b"--env-all",
            b"--",
            b"env",
        ]),
        &env,
    );
    assert!(out.status.success(), "{}", describe(&out));
    let log = stdout_log(&home, "all", 1);
    let mut found = environment_of(&log);
    found.sort();
    assert_eq!(found, [&b"RAW_VALUE=\xfd\xfe"[..], b"RAW\xffNAME=plain"]);
}

/// An argument: text that looks like tollgate's own options and words, or any bytes.
fn word() -> impl Strategy<Value = OsString> {
    prop_oneof![
        prop::sample::select(vec![
            "submit",
            "--",
            "--task",
            "--env",
            "--env-all",
            "--wait",
            "--label",
            "-x",
            "status",
            "logs",
            "cancel",
            "=",
            "K=V",
            "--home",
        ])
        .prop_map(OsString::from),
        "[ -~]{0,12}".prop_map(OsString::from),
        prop::collection::vec(1u8..=255, 0..12).prop_map(OsString::from_vec),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// What the binary does with its arguments before any command runs: clap's parse and, on an
    /// error, the hint for a missing `--`. Never a panic; a parse keeps the command's bytes.
    #[test]
    fn arbitrary_argument_bytes_parse_or_are_refused_without_panic(
        before in prop::collection::vec(word(), 0..6),
        command in prop::collection::vec(word(), 0..5),
        separated in any::<bool>(),
    ) {
        let mut argv = vec![OsString::from("tollgate"), OsString::from("submit")];
        argv.extend(before.iter().cloned());
        if separated {
            argv.push(OsString::from("--"));
        }
        argv.extend(command.iter().cloned());
        let parsed = Cli::command()
            .try_get_matches_from(&argv)
            .and_then(|m| Cli::from_arg_matches(&m));
        match parsed {
            Ok(cli) => {
                if let Sub::Submit(submit) = cli.command {
                    // Whatever came after the first `--` is the command, byte for byte.
                    if let Some(at) = argv.iter().position(|a| a == OsStr::new("--")) {
                        prop_assert_eq!(&submit.command[..], &argv[at + 1..]);
                    }
                    prop_assert!(!submit.command.is_empty());
                    for pair in &submit.env {
                        if let Some((k, v)) = tollgate::argv::split_assignment(pair) {
                            let mut joined = k.as_bytes().to_vec();
                            joined.push(b'=');
                            joined.extend_from_slice(v.as_bytes());
                            prop_assert_eq!(joined.as_slice(), pair.as_bytes());
                        }
                    }
                }
            }
            Err(error) => {
                let code = if error.use_stderr() { 2 } else { 0 };
                prop_assert!(code == 2 || matches!(
                    error.kind(),
                    clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion
                ));
                let _ = error.render().to_string();
                let lossy: Vec<String> =
                    argv[1..].iter().map(|a| a.to_string_lossy().into_owned()).collect();
                if let Some(hint) = tollgate::cli::missing_separator_hint(error.kind(), &lossy) {
                    prop_assert!(hint.contains("--"));
                }
            }
        }
    }
}
