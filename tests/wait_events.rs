//! Issue 12, point 6: `submit --wait`, `wait` and `logs --follow` sleep on the turn folder's
//! events and the runner's pidfd (src/watch.rs) instead of a 100 ms poll. What a user relies on
//! is unchanged: the turn's exit code and output, a dead runner reported (exit 3, with the
//! reason), and the fallback poll (events refused with `TOLLGATE_TEST_NO_WATCH=1`) still
//! completing every wait.

mod common;

use common::{describe, tollgate, BIN};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// `tollgate --home HOME ARGS…`, with the watches refused when `fallback` is set.
fn command(home: &Path, args: &[&str], fallback: bool) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.arg("--home").arg(home).args(args).stdin(Stdio::null());
    if fallback {
        cmd.env("TOLLGATE_TEST_NO_WATCH", "1");
    } else {
        cmd.env_remove("TOLLGATE_TEST_NO_WATCH");
    }
    cmd
}

fn run(home: &Path, args: &[&str], fallback: bool) -> Output {
    command(home, args, fallback)
        .output()
        .expect("run tollgate")
}

fn spawn(home: &Path, args: &[&str], fallback: bool) -> Child {
    command(home, args, fallback)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tollgate")
}

/// The pid of the one runner recorded in `home` (a bounded poll of `status --json`).
fn runner_pid(home: &Path) -> i32 {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let json = tollgate(home, &["status", "--json"]);
        let value: serde_json::Value = serde_json::from_slice(&json.stdout).expect("json");
        if let Some(pid) = value["runners"][0]["identity"]["pid"].as_i64() {
            return i32::try_from(pid).expect("pid");
        }
        assert!(
            Instant::now() < deadline,
            "no runner recorded: {}",
            describe(&json)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn sigkill(pid: i32) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("kill runner");
}

fn submit_wait_returns_the_exit_code_and_output(fallback: bool) {
    let home = tempfile::tempdir().expect("tempdir");
    let home = home.path();
    let out = run(
        home,
        &[
            "submit",
            "--task",
            "t",
            "--wait",
            "--",
            "sh",
            "-c",
            "echo to-out; echo to-err >&2; exit 5",
        ],
        fallback,
    );
    assert_eq!(out.status.code(), Some(5), "{}", describe(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "to-out\n");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("to-err"),
        "{}",
        describe(&out)
    );
    let ok = run(
        home,
        &["submit", "--task", "u", "--wait", "--", "true"],
        fallback,
    );
    assert_eq!(ok.status.code(), Some(0), "{}", describe(&ok));
    // `wait` on a turn that already ended, and `logs --follow` of it, end too.
    let waited = run(home, &["wait", "t", "u"], fallback);
    assert_eq!(waited.status.code(), Some(5), "{}", describe(&waited));
    let logs = run(home, &["logs", "t", "--follow"], fallback);
    assert!(
        String::from_utf8_lossy(&logs.stdout).contains("to-out"),
        "{}",
        describe(&logs)
    );
}

#[test]
fn submit_wait_returns_the_turns_exit_code_and_output() {
    submit_wait_returns_the_exit_code_and_output(false);
}

#[test]
fn with_events_refused_the_fallback_poll_still_completes() {
    submit_wait_returns_the_exit_code_and_output(true);
}

/// A turn that ends while `wait`, `submit --wait` and `logs --follow` are already waiting on it:
/// the release is a file the test creates, so every waiter is blocked before the turn ends.
fn waiters_see_a_turn_end(fallback: bool) {
    let home = tempfile::tempdir().expect("tempdir");
    let gate = tempfile::tempdir().expect("gate dir");
    let release = gate.path().join("release");
    let script = format!(
        "echo started; while [ ! -e {} ]; do sleep 0.01; done; echo finished; exit 4",
        release.display()
    );
    let home = home.path();
    let submit = spawn(
        home,
        &[
            "submit", "--task", "slow", "--wait", "--", "sh", "-c", &script,
        ],
        fallback,
    );
    runner_pid(home);
    let waiter = spawn(home, &["wait", "slow"], fallback);
    let follower = spawn(home, &["logs", "slow", "--follow"], fallback);
    std::fs::write(&release, b"").expect("release the turn");
    for (name, child) in [("submit", submit), ("wait", waiter)] {
        let out = child.wait_with_output().expect(name);
        assert_eq!(out.status.code(), Some(4), "{name}: {}", describe(&out));
    }
    let out = follower.wait_with_output().expect("logs --follow");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("started") && text.contains("finished"),
        "{}",
        describe(&out)
    );
}

#[test]
fn waiters_blocked_on_events_see_the_turn_end() {
    waiters_see_a_turn_end(false);
}

#[test]
fn waiters_blocked_on_the_fallback_poll_see_the_turn_end() {
    waiters_see_a_turn_end(true);
}

/// The runner is SIGKILLed while `submit --wait` and `wait` wait on it: both end and say the runner
/// is gone (the pidfd, or the `/proc` check of the fallback tick, notices). `wait` exits 3;
/// `submit --wait` exits 6 (state unknown, naming the turn's id), since its turn is queued and a
/// repair runs it again: its exit 3 means that nothing was queued (issue 31, point 2).
fn a_killed_runner_ends_the_waits(fallback: bool) {
    let home = tempfile::tempdir().expect("tempdir");
    let home = home.path();
    let submit = spawn(
        home,
        &["submit", "--task", "victim", "--wait", "--", "sleep", "60"],
        fallback,
    );
    let pid = runner_pid(home);
    let waiter = spawn(home, &["wait", "victim"], fallback);
    sigkill(pid);
    for (name, child, code) in [("submit --wait", submit, 6), ("wait", waiter, 3)] {
        let out = child.wait_with_output().expect(name);
        assert_eq!(out.status.code(), Some(code), "{name}: {}", describe(&out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("is gone") && stderr.contains("tollgate reconcile"),
            "{name}: {}",
            describe(&out)
        );
    }
    // Repair, so nothing is left behind (the turn's `sleep` is in the killed runner's work).
    let _ = tollgate(home, &["cancel", "victim"]);
    let _ = tollgate(home, &["reconcile"]);
}

#[test]
fn a_sigkilled_runner_ends_submit_wait_with_exit_6_and_wait_with_exit_3() {
    a_killed_runner_ends_the_waits(false);
}

#[test]
fn a_sigkilled_runner_is_noticed_on_the_fallback_tick() {
    a_killed_runner_ends_the_waits(true);
}

/// The settle signal (src/process/settle.rs): the runner a `submit --wait` started closes a pipe
/// once the outcome is committed, before its hooks. So the wait ends while an on-finish hook is
/// still blocked (here on a FIFO nobody has opened for writing yet); had the signal closed only
/// at the runner's exit, the wait would last the hook's whole timeout.
#[test]
fn submit_wait_ends_at_the_outcome_not_after_the_hooks() {
    let home = tempfile::tempdir().expect("tempdir");
    let home = home.path();
    let gate = tempfile::tempdir().expect("gate dir");
    let fifo = common::fifo::gate(gate.path(), "hook-gate");
    let init = tollgate(home, &["init"]);
    assert!(init.status.success(), "{}", describe(&init));
    let config = home.join("tollgate.toml");
    let mut text = std::fs::read_to_string(&config).expect("config");
    text.push_str(&format!(
        "\n[[hook]]\non = \"finish\"\ncommand = [\"cat\", \"{}\"]\n",
        fifo.display()
    ));
    std::fs::write(&config, text).expect("write config");
    let submit = spawn(
        home,
        &["submit", "--task", "h", "--wait", "--", "true"],
        false,
    );
    let pid = nix::unistd::Pid::from_raw(i32::try_from(submit.id()).expect("pid"));
    let (exited, status) = std::sync::mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let _ = exited.send(submit.wait_with_output().expect("wait for submit").status);
    });
    let status = status.recv_timeout(Duration::from_secs(20));
    // Release the hook either way, so the runner ends.
    common::fifo::release(&fifo);
    let status = status.unwrap_or_else(|_| {
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
        panic!("submit --wait still waited 20 s after the turn ended (it waited for the hook)")
    });
    waiter.join().expect("waiter");
    assert_eq!(status.code(), Some(0));
}

/// A `submit --wait` of task `task` whose command prints `first`, blocks on a fifo gate (until
/// `common::fifo::release`), then prints `second`; the gate's folder lives as long as the guard.
fn gated_submit_wait(home: &Path, task: &str) -> (Child, std::path::PathBuf, tempfile::TempDir) {
    let gate = tempfile::tempdir().expect("gate dir");
    let fifo = common::fifo::gate(gate.path(), "gate");
    let script = format!("echo first; cat {} >/dev/null; echo second", fifo.display());
    let submit = spawn(
        home,
        &[
            "submit", "--task", task, "--wait", "--", "sh", "-c", &script,
        ],
        false,
    );
    (submit, fifo, gate)
}

/// `submit --wait` streams the turn's output while it runs, also when it sleeps on its runner's
/// settle signal: the first line arrives while the command still blocks on a FIFO that the test
/// opens only after reading it.
#[test]
fn submit_wait_streams_output_while_the_turn_runs() {
    use std::io::BufRead;
    let home = tempfile::tempdir().expect("tempdir");
    let home = home.path();
    let (mut submit, fifo, _gate) = gated_submit_wait(home, "s");
    let stdout = submit.stdout.take().expect("stdout");
    let (lines, seen) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    let first = seen.recv_timeout(Duration::from_secs(20));
    // Release the command either way, so nothing is left running.
    common::fifo::release(&fifo);
    assert_eq!(
        first.as_deref(),
        Ok("first"),
        "the first line was not streamed while the turn ran"
    );
    assert_eq!(
        seen.recv_timeout(Duration::from_secs(20)).as_deref(),
        Ok("second")
    );
    let status = submit.wait().expect("wait for submit");
    assert_eq!(status.code(), Some(0));
    reader.join().expect("reader");
}

/// A `submit --wait` killed while its turn runs takes nothing with it: the runner's next write
/// into the settle pipe finds no reader (EPIPE, not a fatal SIGPIPE), and the turn runs to its
/// end and is recorded.
#[test]
fn a_killed_submit_wait_leaves_its_turn_running_to_the_end() {
    use std::io::BufRead;
    let home = tempfile::tempdir().expect("tempdir");
    let home = home.path();
    let (mut submit, fifo, _gate) = gated_submit_wait(home, "k");
    let mut stdout = std::io::BufReader::new(submit.stdout.take().expect("stdout"));
    let mut first = String::new();
    stdout.read_line(&mut first).expect("the first line");
    assert_eq!(first.trim(), "first");
    submit.kill().expect("SIGKILL the waiting submit");
    submit.wait().expect("reap it");
    drop(stdout);
    // The command now prints again: the runner copies it and writes into the dead waiter's pipe.
    common::fifo::release(&fifo);
    let waited = run(home, &["wait", "k"], false);
    assert_eq!(waited.status.code(), Some(0), "{}", describe(&waited));
    let logs = run(home, &["logs", "k"], false);
    let text = String::from_utf8_lossy(&logs.stdout);
    assert!(
        text.contains("first") && text.contains("second"),
        "{}",
        describe(&logs)
    );
}

/// The runner's end of the settle signal is close-on-exec: the turn's command (and what it
/// starts) never holds it, so a waiter's wake-up does not depend on the work's descendants.
#[test]
fn the_turns_command_does_not_inherit_the_settle_signal() {
    let home = tempfile::tempdir().expect("tempdir");
    let home = home.path();
    let out = run(
        home,
        &[
            "submit",
            "--task",
            "fds",
            "--wait",
            "--",
            "sh",
            "-c",
            "readlink /proc/self/fd/3 || echo no-fd-3",
        ],
        false,
    );
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("no-fd-3"),
        "fd 3 inherited: {}",
        describe(&out)
    );
}

#[cfg(feature = "serve")]
mod serve_support;

/// serve's watcher: a sync route answers with its turn's outcome whether the watcher is woken
/// by inotify or only by its fallback tick (watches refused).
#[cfg(feature = "serve")]
mod serve_watcher {
    use super::serve_support::*;

    fn sync_routes_answer(fallback: bool) {
        let routes = ["ok", "fails"]
            .iter()
            .zip(["exit 0", "echo out; exit 3"])
            .map(|(task, script)| {
                format!(
                    "[[route]]\npath = \"/{task}\"\nadapter = \"generic\"\nsecret_env = \"{SECRET_ENV}\"\ntask = \"{task}\"\nrun = [\"sh\", \"-c\", {script:?}]\ndispatch = \"sync\"\n"
                )
            })
            .collect::<Vec<_>>()
            .join("\n");
        let home = TestHome::new(2, &routes);
        let mut cmd = Serve::command(&home);
        if fallback {
            cmd.env("TOLLGATE_TEST_NO_WATCH", "1");
        } else {
            cmd.env_remove("TOLLGATE_TEST_NO_WATCH");
        }
        let serve = Serve::spawn(cmd);
        let body = br#"{"n":1}"#;
        for round in 0..3 {
            let r = serve.post(
                "/ok",
                &generic_headers(&format!("ok{round}"), None, body),
                body,
            );
            assert_eq!(r.status, 200, "{}", r.text());
            assert_eq!(r.json()["outcome"], "completed", "{}", r.text());
            let r = serve.post(
                "/fails",
                &generic_headers(&format!("f{round}"), None, body),
                body,
            );
            assert_eq!(r.status, 200, "{}", r.text());
            assert_eq!(r.json()["outcome"], "failed", "{}", r.text());
            assert_eq!(r.json()["exit_code"], 3, "{}", r.text());
        }
        assert_eq!(
            serve.metric("tollgate_outcomes_total{outcome=\"failed\"}"),
            3
        );
    }

    #[test]
    fn serve_sync_routes_answer_on_events() {
        sync_routes_answer(false);
    }

    #[test]
    fn serve_sync_routes_answer_on_the_fallback_tick() {
        sync_routes_answer(true);
    }
}
