//! The `--json` outputs README promises, through the real binary: `logs --json`, `sweep --json`
//! (and `sweep` saying what it did in text mode), and `serve --json`'s startup and stop lines.

mod common;

use common::{describe, tollgate};
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

fn json_of(out: &std::process::Output) -> Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", describe(out)))
}

#[test]
fn logs_json_carries_the_turn_and_both_streams() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = dir.path();
    let out = tollgate(
        home,
        &[
            "submit",
            "--task",
            "j",
            "--wait",
            "--",
            "sh",
            "-c",
            "echo out; echo err >&2; exit 3",
        ],
    );
    assert_eq!(out.status.code(), Some(3), "{}", describe(&out));
    let logs = tollgate(home, &["logs", "j", "--json"]);
    assert!(logs.status.success(), "{}", describe(&logs));
    let value = json_of(&logs);
    assert_eq!(value["task"], "j");
    assert_eq!(value["turn"], 1);
    assert!(value["id"].as_u64().is_some(), "{value}");
    assert_eq!(value["state"], "failed");
    assert_eq!(value["exit_code"], 3);
    assert_eq!(value["stdout"], "out\n");
    assert_eq!(value["stderr"], "err\n");
    assert_eq!(value["stdout_skipped_bytes"], 0);
    assert!(value["no_output"].is_null(), "{value}");

    // A turn that could not start: the reason, and why there is no output.
    let out = tollgate(
        home,
        &[
            "submit",
            "--task",
            "missing",
            "--wait",
            // Past submit's own check, to the runner's spawn.
            "--no-check",
            "--",
            "/nonexistent/program",
        ],
    );
    assert_ne!(out.status.code(), Some(0), "{}", describe(&out));
    let value = json_of(&tollgate(home, &["logs", "missing", "--json", "--follow"]));
    assert_eq!(value["state"], "unstartable", "{value}");
    assert!(
        value["error"].as_str().is_some_and(|e| !e.is_empty()),
        "{value}"
    );
    assert!(
        value["no_output"]
            .as_str()
            .is_some_and(|n| n.contains("could not start")),
        "{value}"
    );
}

#[test]
fn sweep_reports_what_it_did_in_text_and_json() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = dir.path();
    let text = tollgate(home, &["sweep"]);
    assert!(text.status.success(), "{}", describe(&text));
    assert!(
        String::from_utf8_lossy(&text.stdout).contains("nothing to sweep"),
        "{}",
        describe(&text)
    );
    let value = json_of(&tollgate(home, &["sweep", "--json"]));
    for key in ["dead_runs", "removed", "kept", "failed", "cgroups_removed"] {
        assert!(value[key].is_array(), "{key}: {value}");
    }
    assert_eq!(value["dead_runs"].as_array().map(Vec::len), Some(0));
}

#[test]
fn serve_json_prints_its_address_and_pid_then_a_stop_summary() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = dir.path();
    let mut child = Command::new(common::BIN)
        .arg("--home")
        .arg(home)
        .args(["serve", "--listen", "127.0.0.1:0", "--json"])
        .env("TOLLGATE_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("serve");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let first = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("serve prints a startup line");
    let start: Value = serde_json::from_str(&first).expect("the startup line is JSON");
    assert_eq!(
        start["pid"].as_u64(),
        Some(u64::from(child.id())),
        "{start}"
    );
    let address = start["address"].as_str().expect("address");
    assert!(
        address.starts_with("127.0.0.1:") && !address.ends_with(":0"),
        "{start}"
    );
    assert_eq!(start["listening"], format!("http://{address}"));
    // It answers where it said it listens.
    std::net::TcpStream::connect(address).expect("connect to the printed address");

    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .expect("SIGTERM");
    let stop = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("serve prints a stop line");
    let stop: Value = serde_json::from_str(&stop).expect("the stop line is JSON");
    assert_eq!(stop["stopped"], true, "{stop}");
    assert_eq!(stop["handed_off"], 0, "{stop}");
    assert_eq!(child.wait().expect("wait").code(), Some(0));
}
