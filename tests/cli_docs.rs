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

/// With `TOLLGATE_HOME` exported, a usage error's "Usage:" line is the command as typed: the home
/// from the environment is not shown as if `--home <DIR>` were required.
#[test]
fn a_usage_error_does_not_show_the_home_from_the_environment_as_required() {
    let home = tempfile::tempdir().expect("tempdir");
    let out = Command::new(BIN)
        .args(["submit", "--task", "x"])
        .env("TOLLGATE_HOME", home.path())
        .stdin(Stdio::null())
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("Usage: tollgate submit --task <TASK> -- <CMD>..."),
        "{}",
        describe(&out)
    );
    assert!(!stderr.contains("--home <DIR>"), "{}", describe(&out));
    // Given on the command line, it is part of what was typed.
    let typed = Command::new(BIN)
        .arg("--home")
        .arg(home.path())
        .args(["logs"])
        .env_remove("TOLLGATE_HOME")
        .stdin(Stdio::null())
        .output()
        .expect("run");
    assert_eq!(typed.status.code(), Some(2), "{}", describe(&typed));
    assert!(
        String::from_utf8_lossy(&typed.stderr).contains("Usage: tollgate logs <TURN>"),
        "{}",
        describe(&typed)
    );
}

/// Runs bash's completion of `line` (the cursor at its end) through the script `completions
/// bash` prints, the way bash calls it, and returns what it offers.
fn bash_complete(script: &str, home: &std::path::Path, line: &str) -> Vec<String> {
    let program = format!(
        "{script}\nexport TOLLGATE_HOME={home}\nCOMP_LINE={line:?}; COMP_POINT=${{#COMP_LINE}}\n\
         read -ra COMP_WORDS <<< \"$COMP_LINE\"; [[ $COMP_LINE == *' ' ]] && COMP_WORDS+=('')\n\
         COMP_CWORD=$(( ${{#COMP_WORDS[@]}} - 1 ))\n\
         _tollgate_dynamic \"${{COMP_WORDS[0]}}\" \"${{COMP_WORDS[COMP_CWORD]}}\" \"${{COMP_WORDS[COMP_CWORD-1]}}\"\n\
         printf '%s\\n' \"${{COMPREPLY[@]}}\"\n",
        home = home.display(),
    );
    let out = run_with_stdin("bash", &[], program.as_bytes());
    assert!(out.status.success(), "{}", describe(&out));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// The completion scripts hide the hidden commands, and bash's completes task names and turn ids
/// from the home (`tollgate __complete`), `TASK:N` after a colon, and falls back to the static
/// completion of commands and options.
#[test]
fn completions_offer_task_names_and_ids_and_hide_internal_commands() {
    let home = tempfile::tempdir().expect("tempdir");
    for task in ["build", "deploy"] {
        let out = tollgate(
            home.path(),
            &["submit", "--task", task, "--wait", "--", "true"],
        );
        assert!(out.status.success(), "{}", describe(&out));
    }
    let out = tollgate(
        home.path(),
        &["submit", "--task", "build", "--wait", "--", "true"],
    );
    assert!(out.status.success(), "{}", describe(&out));
    let script = tollgate(home.path(), &["completions", "bash"]);
    assert!(script.status.success(), "{}", describe(&script));
    let script = String::from_utf8_lossy(&script.stdout).to_string();
    let bin = BIN;
    let offered = bash_complete(&script, home.path(), &format!("{bin} "));
    assert!(
        offered.iter().any(|w| w == "submit") && offered.iter().any(|w| w == "logs"),
        "{offered:?}"
    );
    assert!(
        !offered.iter().any(|w| w == "worker" || w == "__complete"),
        "hidden commands are not offered: {offered:?}"
    );
    let offered = bash_complete(&script, home.path(), &format!("{bin} logs "));
    for word in ["1", "2", "3", "build", "deploy", "last"] {
        assert!(offered.iter().any(|w| w == word), "{word} in {offered:?}");
    }
    let offered = bash_complete(&script, home.path(), &format!("{bin} wait bu"));
    assert_eq!(offered, ["build"], "a prefix narrows the names");
    // After a colon bash completes what follows it (COMP_WORDBREAKS holds ':').
    let offered = bash_complete(&script, home.path(), &format!("{bin} logs build:"));
    assert_eq!(offered, ["last", "2", "1"], "{offered:?}");
    let offered = bash_complete(&script, home.path(), &format!("{bin} status "));
    assert_eq!(offered, ["build", "deploy"], "status TASK: task names only");
    // An option's name is the static script's to complete.
    let offered = bash_complete(&script, home.path(), &format!("{bin} logs --fo"));
    assert_eq!(offered, ["--follow"], "{offered:?}");
    // The other shells' scripts parse, where the shell is installed.
    for (shell, check) in [("zsh", ["-n"]), ("fish", ["-n"])] {
        let script = tollgate(home.path(), &["completions", shell]);
        assert!(script.status.success(), "{}", describe(&script));
        let text = String::from_utf8_lossy(&script.stdout);
        assert!(
            !text.contains("Take over a reserved slot") && !text.contains("Completion candidates"),
            "{shell}: the hidden commands are left out"
        );
        assert!(
            text.contains("__complete --shell"),
            "{shell}: dynamic candidates"
        );
        match Command::new(shell).arg("--version").output() {
            Ok(_) => {
                let parsed = run_with_stdin(shell, &check, &script.stdout);
                assert!(parsed.status.success(), "{shell} -n: {}", describe(&parsed));
            }
            Err(_) => eprintln!("{shell} is not installed: its script's syntax is not checked"),
        }
    }
}

/// The man page shows each option with its value (`--timeout DUR`), names positionals as
/// `--help` does (`TURN`), and prints the exit codes and the quick start once.
#[test]
fn man_page_shows_option_values_and_each_section_once() {
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
    let text = String::from_utf8_lossy(&rendered.stdout);
    for option in [
        "--timeout DUR",
        "--task TASK",
        "--after TURN...",
        "--keep N",
        "TURN",
    ] {
        assert!(text.contains(option), "the page lacks {option:?}:\n{text}");
    }
    assert!(
        !text.contains("<task>"),
        "logs' argument is TURN, as in --help"
    );
    assert_eq!(
        text.matches("EXIT CODES AND QUICK START").count(),
        1,
        "{text}"
    );
    assert_eq!(text.matches("124  submit --wait").count(), 1, "{text}");
    assert_eq!(text.matches("Quick start:").count(), 1, "{text}");
    assert!(!text.contains("EXTRA"), "{text}");
}
