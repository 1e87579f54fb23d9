//! Discoverability through the real binary: completions that a shell accepts, a man page that
//! `man` renders, and the hint for a command given without `--`.

mod common;

use common::{describe, tollgate, BIN};
use std::io::Write;
use std::process::{Command, Stdio};

fn run_with_stdin(program: &str, args: &[&str], input: &[u8]) -> std::process::Output {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {program}: {e}"));
    child
        .stdin
        .take()
        .expect("piped stdin")
        .write_all(input)
        .expect("write stdin");
    child.wait_with_output().expect("wait")
}

#[test]
fn bash_completion_script_parses_and_completes_subcommands() {
    let home = tempfile::tempdir().expect("tempdir");
    let out = tollgate(home.path(), &["completions", "bash"]);
    assert!(out.status.success(), "{}", describe(&out));
    let syntax = run_with_stdin("bash", &["-n"], &out.stdout);
    assert!(syntax.status.success(), "bash -n: {}", describe(&syntax));
    // Load the script and ask the completion function for `tollgate su<TAB>`.
    let script = format!(
        "{}\nCOMP_WORDS=(tollgate su); COMP_CWORD=1; COMP_LINE='tollgate su'; COMP_POINT=11\n\
         _tollgate tollgate su tollgate; printf '%s\\n' \"${{COMPREPLY[@]}}\"\n",
        String::from_utf8_lossy(&out.stdout)
    );
    let completed = run_with_stdin("bash", &[], script.as_bytes());
    let words = String::from_utf8_lossy(&completed.stdout);
    assert!(
        words.lines().any(|w| w == "submit"),
        "`tollgate su<TAB>` should offer submit: {}",
        describe(&completed)
    );
    // The script was not written into the home: completions need no state.
    assert!(!home.path().join("queue.json").exists());
}

#[test]
fn every_shell_gets_a_script_and_an_unknown_shell_is_a_usage_error() {
    let home = tempfile::tempdir().expect("tempdir");
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let out = tollgate(home.path(), &["completions", shell]);
        assert!(out.status.success(), "{shell}: {}", describe(&out));
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("submit"),
            "{shell} script names the subcommands"
        );
    }
    let out = tollgate(home.path(), &["completions", "tcsh"]);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
}

#[test]
fn man_page_renders_with_man_and_documents_every_subcommand() {
    let home = tempfile::tempdir().expect("tempdir");
    let out = tollgate(home.path(), &["man"]);
    assert!(out.status.success(), "{}", describe(&out));
    let page = tempfile::NamedTempFile::new().expect("temp file");
    std::fs::write(page.path(), &out.stdout).expect("write page");
    let rendered = Command::new("man")
        .arg("-l")
        .arg(page.path())
        .env("MANPAGER", "cat")
        .env("PAGER", "cat")
        .env("MANWIDTH", "100")
        .stdin(Stdio::null())
        .output()
        .expect("man is installed");
    assert!(rendered.status.success(), "man -l: {}", describe(&rendered));
    let text = String::from_utf8_lossy(&rendered.stdout);
    for section in [
        "NAME",
        "SYNOPSIS",
        "tollgate submit",
        "tollgate status",
        "tollgate run",
        "--strategy",
        "Exit codes",
    ] {
        assert!(
            text.contains(section),
            "man page lacks {section:?}:\n{text}"
        );
    }
    assert!(
        !text.contains("worker runner"),
        "hidden commands stay hidden"
    );
    // --out writes the same page to a file.
    let file = home.path().join("tollgate.1");
    let out = tollgate(
        home.path(),
        &["man", "--out", file.to_str().expect("utf-8")],
    );
    assert!(out.status.success(), "{}", describe(&out));
    assert_eq!(std::fs::read(&file).expect("page written"), {
        let again = tollgate(home.path(), &["man"]);
        again.stdout
    });
}

#[test]
fn a_command_without_the_separator_gets_a_hint_with_the_corrected_line() {
    let home = tempfile::tempdir().expect("tempdir");
    let out = tollgate(
        home.path(),
        &["submit", "--task", "build", "--wait", "echo", "hi"],
    );
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("tollgate submit --task build --wait -- echo hi"),
        "the hint shows where `--` goes: {stderr}"
    );
    // An option that takes a value (`--label L`) is kept on the options' side of `--`.
    let labelled = tollgate(home.path(), &["submit", "--label", "nightly", "echo", "hi"]);
    assert!(
        String::from_utf8_lossy(&labelled.stderr)
            .contains("tollgate submit --label nightly -- echo hi"),
        "{}",
        describe(&labelled)
    );
    // Nothing was queued: a usage error changes nothing.
    assert!(!home.path().join("tasks").join("build").exists());
    // With the separator no hint is given (the command is fine as typed).
    let ok = Command::new(BIN)
        .args(["--home"])
        .arg(home.path())
        .args(["submit", "--", "true"])
        .stdin(Stdio::null())
        .output()
        .expect("run");
    assert!(ok.status.success(), "{}", describe(&ok));
    assert!(!String::from_utf8_lossy(&ok.stderr).contains("hint:"));
}
