//! `tollgate status` as a person reads it, through the real binary: one table, natural order,
//! hidden turns counted in a footer, colour only on a terminal, `--watch` redrawing in place in a
//! pseudo-terminal.

mod common;

use common::{describe, tollgate};
use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// The TASK cell of a table row (the second column, after the short id).
fn task_of(line: &str) -> Option<&str> {
    line.split_whitespace().nth(1)
}

fn submit_wait(home: &std::path::Path, task: &str, cmd: &[&str]) {
    let mut args = vec!["submit", "--task", task, "--wait", "--"];
    args.extend_from_slice(cmd);
    let out = tollgate(home, &args);
    assert!(out.status.code().is_some(), "{}", describe(&out));
}

#[test]
fn status_is_one_table_in_natural_order_with_a_footer_for_hidden_turns() {
    let home = tempfile::tempdir().expect("tempdir");
    let home = home.path();
    for task in ["job10", "job2", "job1"] {
        submit_wait(home, task, &["true"]);
    }
    submit_wait(home, "job2", &["sh", "-c", "exit 3"]);
    for _ in 0..7 {
        submit_wait(home, "many", &["true"]);
    }
    let out = tollgate(home, &["status"]);
    assert!(out.status.success(), "{}", describe(&out));
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[1].split_whitespace().take(5).collect::<Vec<_>>()
            == ["ID", "TASK", "TURN", "LABEL", "STATE"]
            && lines[1].contains("EXIT"),
        "a header row: {text}"
    );
    let tasks: Vec<&str> = lines[2..]
        .iter()
        .filter_map(|l| l.split_whitespace().nth(1))
        .filter(|w| w.starts_with("job") || *w == "many")
        .collect();
    let mut dedup = tasks.clone();
    dedup.dedup();
    assert_eq!(
        dedup,
        ["job1", "job2", "job10", "many"],
        "natural order: {text}"
    );
    assert!(
        text.lines()
            .any(|l| task_of(l) == Some("job2") && l.contains("failed") && l.contains(" 3 ")),
        "failed turn with its exit code: {text}"
    );
    assert!(
        !text.contains("dispatching") && !text.contains("reservation"),
        "{text}"
    );
    assert!(
        text.contains("2 older turn(s) hidden; `tollgate status --all` shows every turn"),
        "{text}"
    );
    assert!(
        !text.contains('\x1b'),
        "no colour when stdout is not a terminal: {text:?}"
    );

    let all = tollgate(home, &["status", "--all"]);
    let all_text = String::from_utf8_lossy(&all.stdout);
    assert_eq!(
        all_text
            .lines()
            .filter(|l| task_of(l) == Some("many"))
            .count(),
        7,
        "{all_text}"
    );
    assert!(!all_text.contains("hidden"), "{all_text}");

    // --json keeps its shape, with the hidden count added.
    let json = tollgate(home, &["status", "--json"]);
    let value: serde_json::Value = serde_json::from_slice(&json.stdout).expect("json");
    let many = value["tasks"]
        .as_array()
        .expect("tasks")
        .iter()
        .find(|t| t["name"] == "many")
        .expect("many");
    assert_eq!(many["hidden_turns"], 2);
    assert_eq!(many["turns"].as_array().expect("turns").len(), 5);
    assert!(value["rows"].is_array() && value["runners"].is_array());
}

/// Runs `cmd` under `script` (a pseudo-terminal), reading its output on a thread.
fn in_pty(cmd: &str, env: &[(&str, &str)]) -> (std::process::Child, mpsc::Receiver<Vec<u8>>) {
    let mut command = Command::new("script");
    command
        .args(["-qfec", cmd, "/dev/null"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    for (k, v) in env {
        command.env(k, v);
    }
    let mut child = command.spawn().expect("script(1) from util-linux");
    let mut stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = stdout.read(&mut buf) {
            if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    (child, rx)
}

fn read_until(rx: &mpsc::Receiver<Vec<u8>>, seen: &mut Vec<u8>, done: impl Fn(&[u8]) -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !done(seen) {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok(chunk) => seen.extend_from_slice(&chunk),
            Err(_) => panic!(
                "pty output never matched; got {:?}",
                String::from_utf8_lossy(seen)
            ),
        }
    }
}

#[test]
fn watch_redraws_the_table_in_place_on_a_terminal_with_colour_unless_no_color() {
    let home = tempfile::tempdir().expect("tempdir");
    submit_wait(home.path(), "watched", &["true"]);
    let bin = common::BIN;
    let cmd = format!(
        "{bin} --home {} status --watch --interval 100ms",
        home.path().display()
    );
    let (mut child, rx) = in_pty(&cmd, &[]);
    let mut seen = Vec::new();
    let clear = b"\x1b[H\x1b[2J";
    let frames = |s: &[u8]| s.windows(clear.len()).filter(|w| *w == clear).count();
    read_until(&rx, &mut seen, |s| frames(s) >= 3);
    let text = String::from_utf8_lossy(&seen);
    assert!(text.contains("watched"), "{text}");
    assert!(
        text.contains("\x1b[32mdone\x1b[0m"),
        "a done turn is green on a terminal: {text:?}"
    );
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let _ = child.wait();

    // NO_COLOR: the same table, no escape sequences but the redraw.
    let (mut child, rx) = in_pty(&cmd, &[("NO_COLOR", "1")]);
    let mut seen = Vec::new();
    read_until(&rx, &mut seen, |s| frames(s) >= 2);
    let text = String::from_utf8_lossy(&seen);
    assert!(
        text.contains("done") && !text.contains("\x1b[32m"),
        "{text:?}"
    );
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let _ = child.wait();
}

#[test]
fn a_bad_watch_interval_is_a_usage_error() {
    let home = tempfile::tempdir().expect("tempdir");
    let out = tollgate(home.path(), &["status", "--watch", "--interval", "1ms"]);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--interval"));
}

/// A reader that goes away (`tollgate status --json | head -c 10`) ends a printing command the way
/// it ends `cat`: by SIGPIPE, quietly, not by a panic and a backtrace on stderr. The pipe's read
/// end is closed before the command starts, so its first write fails whatever the timing.
#[test]
fn a_printing_command_whose_reader_went_away_ends_quietly_by_sigpipe() {
    use std::os::unix::process::ExitStatusExt;
    let home = tempfile::tempdir().expect("tempdir");
    submit_wait(home.path(), "job", &["echo", "some output"]);
    for args in [
        vec!["status", "--json"],
        vec!["status"],
        vec!["logs", "job"],
        vec!["completions", "bash"],
    ] {
        let (reader, writer) = std::io::pipe().expect("pipe");
        drop(reader);
        let out = Command::new(common::BIN)
            .arg("--home")
            .arg(home.path())
            .args(&args)
            .stdin(Stdio::null())
            .stdout(writer)
            .stderr(Stdio::piped())
            .output()
            .expect("run tollgate");
        assert_eq!(
            out.status.signal(),
            Some(libc::SIGPIPE),
            "{args:?}: {}",
            describe(&out)
        );
        assert!(out.stderr.is_empty(), "{args:?}: {}", describe(&out));
    }
}
