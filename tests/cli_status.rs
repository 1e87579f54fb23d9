//! `tollgate status` as a person reads it, through the real binary: one table in id order, every
//! turn that has not ended shown and old ended ones counted in a footer, colour only on a
//! terminal, the table fitted to the terminal's width and `--watch` redrawing in place in a
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

/// The status of `home` as JSON.
fn status_json(home: &std::path::Path) -> serde_json::Value {
    let out = tollgate(home, &["status", "--json"]);
    assert!(out.status.success(), "{}", describe(&out));
    serde_json::from_slice(&out.stdout).expect("status --json")
}

/// The state of every shown turn of `task`, by turn number.
fn states_of(view: &serde_json::Value, task: &str) -> Vec<(u64, String)> {
    view["tasks"]
        .as_array()
        .expect("tasks")
        .iter()
        .filter(|t| t["name"] == task)
        .flat_map(|t| t["turns"].as_array().expect("turns").clone())
        .map(|t| {
            (
                t["turn"].as_u64().expect("turn"),
                t["state"].as_str().expect("state").to_string(),
            )
        })
        .collect()
}

/// The case: ten turns of one task running two at a time, between one-off turns that
/// ended. The
/// plain table shows every turn that has not ended (the two running ones included), in id
/// order across tasks, and of the ended ones only the newest `status_ended_turns`, with a
/// footer saying how many are hidden and how to see them.
#[test]
fn status_shows_every_turn_not_ended_in_id_order_and_hides_only_old_ended_ones() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Three slots: two for the crunch turns, one for the one-off turns between them.
    let home = common::init_home(dir.path(), 3);
    let config = home.join("tollgate.toml");
    let mut text = std::fs::read_to_string(&config).expect("config");
    text.push_str("status_ended_turns = 3\n");
    std::fs::write(&config, text).expect("config");
    let gate = common::fifo::gate(dir.path(), "gate");
    let _cancel = common::CancelOnDrop {
        home: home.clone(),
        task: "crunch".to_string(),
    };
    let crunch = |first: bool| {
        let mut args = vec!["submit", "--task", "crunch"];
        if first {
            args.extend(["--strategy", "concurrent=2"]);
        }
        args.extend(["--", "cat", gate.to_str().expect("utf-8")]);
        let out = tollgate(&home, &args);
        assert!(out.status.success(), "{}", describe(&out));
    };
    // Ids: one-off ended turns and crunch turns interleaved, so the id order is not the
    // task-name order.
    for i in 0..10 {
        if i < 5 {
            let out = tollgate(&home, &["submit", "--wait", "--", "true"]);
            assert!(out.status.success(), "{}", describe(&out));
        }
        crunch(i == 0);
    }
    // Both slots run crunch turns (a bounded wait for their runners to take over).
    let until = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let running = states_of(&status_json(&home), "crunch")
            .iter()
            .filter(|(_, s)| s == "running")
            .count();
        if running == 2 {
            break;
        }
        assert!(
            std::time::Instant::now() < until,
            "two crunch turns never ran"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = tollgate(&home, &["status"]);
    assert!(out.status.success(), "{}", describe(&out));
    let table = String::from_utf8_lossy(&out.stdout).to_string();
    let rows: Vec<&str> = table
        .lines()
        .skip_while(|l| !l.starts_with("ID"))
        .skip(1)
        .take_while(|l| !l.contains("hidden"))
        .collect();
    let ids: Vec<u64> = rows
        .iter()
        .map(|l| {
            l.split_whitespace()
                .next()
                .expect("id")
                .parse()
                .expect("an id")
        })
        .collect();
    let mut sorted = ids.clone();
    sorted.sort_unstable();
    assert_eq!(ids, sorted, "rows in id order:\n{table}");
    let crunch_rows: Vec<&&str> = rows
        .iter()
        .filter(|l| task_of(l) == Some("crunch"))
        .collect();
    assert_eq!(
        crunch_rows.len(),
        10,
        "every crunch turn is shown:\n{table}"
    );
    assert_eq!(
        crunch_rows
            .iter()
            .filter(|l| l.contains(" running "))
            .count(),
        2,
        "the running turns are shown:\n{table}"
    );
    assert_eq!(
        crunch_rows
            .iter()
            .filter(|l| l.contains(" queued "))
            .count(),
        8,
        "{table}"
    );
    let ended: Vec<&&str> = rows.iter().filter(|l| l.contains(" completed ")).collect();
    assert_eq!(ended.len(), 3, "the 3 newest ended turns:\n{table}");
    assert!(
        ended
            .iter()
            .all(|l| !l.contains("true-1 ") && !l.contains("true-3 ")),
        "the oldest ended turns are the hidden ones:\n{table}"
    );
    assert!(
        table.contains("2 older ended turn(s) hidden (status_ended_turns = 3 in tollgate.toml)")
            && table.contains("`tollgate status --all` shows every turn"),
        "{table}"
    );
    assert!(
        !table.contains('\x1b'),
        "no colour off a terminal: {table:?}"
    );

    // --all shows every turn; the JSON counts what the table hid.
    let all = tollgate(&home, &["status", "--all"]);
    let all_text = String::from_utf8_lossy(&all.stdout);
    assert_eq!(all_text.matches(" completed ").count(), 5, "{all_text}");
    assert!(!all_text.contains("hidden"), "{all_text}");
    let view = status_json(&home);
    assert_eq!(view["hidden_turns"], 2, "{view}");
    assert_eq!(view["ended_turns_shown"], 3, "{view}");
    assert!(view["rows"].is_array() && view["runners"].is_array());

    // The turns are the test's: cancel them and see the running two end.
    let out = tollgate(&home, &["cancel", "crunch"]);
    assert!(out.status.success(), "{}", describe(&out));
    let out = tollgate(&home, &["wait", "crunch:1", "crunch:2"]);
    assert!(out.status.code().is_some(), "{}", describe(&out));
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
        text.contains("\x1b[32mcompleted\x1b[0m"),
        "a completed turn is green on a terminal: {text:?}"
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
        text.contains("completed") && !text.contains("\x1b[32m"),
        "{text:?}"
    );
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let _ = child.wait();
}

/// `text` without terminal escapes and carriage returns: what a terminal shows of it.
fn shown(text: &str) -> String {
    let mut out = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\x1b' => {
                // CSI: ESC [ parameters, then one final letter.
                if chars.peek() == Some(&'[') {
                    chars.next();
                    for c in chars.by_ref() {
                        if c.is_ascii_alphabetic() {
                            break;
                        }
                    }
                }
            }
            '\r' => {}
            c => out.push(c),
        }
    }
    out
}

/// The table fits the terminal it is printed on: at 80 columns no line of it is wider (the
/// command is cut, `…` marking the cut, and a long task name or label gives way too), at 200
/// columns a long command is shown whole (not cut at a fixed width), and `--watch` redraws at
/// the terminal's width as well.
#[test]
fn the_table_fits_the_terminal_width_and_watch_keeps_to_it() {
    let home = tempfile::tempdir().expect("tempdir");
    let long = format!("payload-{}", "x".repeat(60));
    let out = tollgate(
        home.path(),
        &[
            "submit",
            "--wait",
            "--task",
            "a-task-with-a-rather-long-name-for-a-table",
            "--label",
            "nightly-database-backup",
            "--",
            "echo",
            &long,
        ],
    );
    assert!(out.status.success(), "{}", describe(&out));
    let bin = common::BIN;
    let widest = |text: &str| {
        text.lines()
            .map(|l| l.chars().count())
            .max()
            .unwrap_or_default()
    };
    for columns in [80usize, 200] {
        let cmd = format!(
            "stty cols {columns} rows 40; {bin} --home {} status",
            home.path().display()
        );
        let (mut child, rx) = in_pty(&cmd, &[]);
        let status = child.wait().expect("script(1) ends with the status");
        assert!(status.success(), "{status:?}");
        // The reader's channel closes at the pty's end: everything printed is in.
        let seen: Vec<u8> = rx.iter().flatten().collect();
        let text = shown(&String::from_utf8_lossy(&seen));
        let row = text
            .lines()
            .find(|l| l.contains("echo pay"))
            .expect("the turn's row")
            .to_string();
        assert!(
            widest(&text) <= columns,
            "a line wider than {columns} columns:\n{text}"
        );
        if columns == 80 {
            assert!(
                row.ends_with('…'),
                "the command is cut at 80 columns: {row}"
            );
        } else {
            assert!(
                row.contains(&long),
                "the whole command at 200 columns: {row}"
            );
        }
    }
    let cmd = format!(
        "stty cols 80 rows 40; {bin} --home {} status --watch --interval 100ms",
        home.path().display()
    );
    let (mut child, rx) = in_pty(&cmd, &[]);
    let mut seen = Vec::new();
    let clear = b"\x1b[H\x1b[2J";
    let frames = |s: &[u8]| s.windows(clear.len()).filter(|w| *w == clear).count();
    read_until(&rx, &mut seen, |s| frames(s) >= 3);
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let _ = child.wait();
    let text = shown(&String::from_utf8_lossy(&seen));
    assert!(text.contains("echo payloa…"), "{text}");
    assert!(
        widest(&text) <= 80,
        "--watch drew a line wider than 80:\n{text}"
    );
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

/// `status --json` names the process group leader of a running turn's work (the command itself),
/// as the runner recorded it right after the spawn: what a cancel and a repair kill by, and what
/// an operator looks up in `ps`. The command writes its own pid, then blocks on a gate.
#[test]
fn status_names_the_leader_of_a_running_command() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = common::init_home(dir.path(), 1);
    let gate = common::fifo::gate(dir.path(), "gate");
    let pid_file = dir.path().join("leader");
    let script = format!(
        "echo $$ > {p}.tmp && mv {p}.tmp {p} && exec cat {g}",
        p = pid_file.display(),
        g = gate.display()
    );
    let _cancel = common::CancelOnDrop {
        home: home.clone(),
        task: "held".to_string(),
    };
    let out = tollgate(
        &home,
        &["submit", "--task", "held", "--", "sh", "-c", &script],
    );
    assert!(out.status.success(), "{}", describe(&out));
    common::wait_until("the command's pid", || pid_file.is_file());
    let pid: u64 = std::fs::read_to_string(&pid_file)
        .expect("pid file")
        .trim()
        .parse()
        .expect("a pid");
    // The leader is recorded in the section right after the spawn, which may trail the command.
    let mut last = serde_json::Value::Null;
    common::wait_until("the leader in status", || {
        last = status_json(&home);
        last["works"]
            .as_array()
            .is_some_and(|works| works.iter().any(|w| w["leader"]["pid"] == pid))
    });
    let works = last["works"].as_array().expect("works");
    assert_eq!(works.len(), 1, "{last}");
    assert_eq!(works[0]["task"], "held", "{last}");
    assert_ne!(
        works[0]["runner"]["pid"], pid,
        "the runner is not the command: {last}"
    );
    common::fifo::release(&gate);
    let out = tollgate(&home, &["wait", "held:1"]);
    assert!(out.status.success(), "{}", describe(&out));
}
