//! The reviewer entry points: `tollgate model check slots|admission|execution` and
//! `tollgate model explore …`.
#![cfg(feature = "model-check")]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn tollgate() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tollgate"))
}

#[test]
fn model_check_slots_reports_states_time_and_success() {
    let out = tollgate()
        .args([
            "model",
            "check",
            "slots",
            "--submitters",
            "2",
            "--turns",
            "2",
        ])
        .args(["--cap", "1", "--no-crashes"])
        .output()
        .expect("tollgate runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("states explored:"), "{stdout}");
    assert!(stdout.contains("all properties hold"), "{stdout}");
}

/// The admission and execution models answer in the same shape as the slot model: the
/// configuration, the states explored with the time, and the verdict.
#[test]
fn model_check_admission_and_execution_report_states_time_and_success() {
    for args in [
        &["admission", "--strategy", "drop", "--max-detached", "2"][..],
        &["execution", "--lane", "playbook"][..],
    ] {
        let out = tollgate()
            .args(["model", "check"])
            .args(args)
            .output()
            .expect("tollgate runs");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {stdout}");
        assert!(
            stdout.contains(&format!("checking the {} model:", args[0])),
            "{stdout}"
        );
        let states = stdout
            .lines()
            .find_map(|l| l.strip_prefix("states explored: "))
            .unwrap_or_else(|| panic!("{args:?}: no state count: {stdout}"));
        let unique: u64 = states
            .split(' ')
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{args:?}: unreadable state count: {states}"));
        assert!(unique > 100, "{args:?}: {states}");
        assert!(states.contains(" in "), "{args:?}: no time: {states}");
        assert!(stdout.contains("all properties hold"), "{stdout}");
    }
}

/// An option of another model is refused by name, before anything is checked.
#[test]
fn model_check_refuses_an_option_of_another_model() {
    let out = tollgate()
        .args(["model", "check", "execution", "--strategy", "queue"])
        .output()
        .expect("tollgate runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--strategy"), "{stderr}");
    assert!(stderr.contains("execution model"), "{stderr}");
    assert!(out.stdout.is_empty());
}

/// The unique state count `model check` printed.
fn unique_states(stdout: &str) -> u64 {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("states explored: "))
        .and_then(|s| s.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no state count: {stdout}"))
}

/// The slot model is checked with its symmetry reduction by default; `--no-symmetry` explores
/// every state of the same configuration, more of them, with the same verdict.
#[test]
fn model_check_slots_reduces_by_symmetry_unless_told_not_to() {
    let run = |extra: &[&str]| {
        let out = tollgate()
            .args([
                "model",
                "check",
                "slots",
                "--submitters",
                "2",
                "--turns",
                "1",
            ])
            .args(["--cap", "1", "--no-crashes"])
            .args(extra)
            .output()
            .expect("tollgate runs");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert_eq!(out.status.code(), Some(0), "{stdout}");
        assert!(stdout.contains("all properties hold"), "{stdout}");
        stdout
    };
    let reduced = run(&[]);
    let every = run(&["--no-symmetry"]);
    assert!(reduced.contains("with symmetry reduction"), "{reduced}");
    assert!(every.contains("without symmetry reduction"), "{every}");
    assert!(
        unique_states(&reduced) < unique_states(&every),
        "{reduced}\n{every}"
    );
}

/// `--no-symmetry` is the slot model's option: another model refuses it by name.
#[test]
fn model_check_refuses_no_symmetry_for_another_model() {
    let out = tollgate()
        .args(["model", "check", "execution", "--no-symmetry"])
        .output()
        .expect("tollgate runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--no-symmetry"), "{stderr}");
    assert!(out.stdout.is_empty());
}

#[test]
fn model_check_rejects_a_bad_size() {
    let out = tollgate()
        .args(["model", "check", "slots", "--cap", "0"])
        .output()
        .expect("tollgate runs");
    assert_eq!(out.status.code(), Some(2));
}

/// Starts the Explorer for `model` on a free loopback port, fetches `path` once, stops it, and
/// returns the HTTP response.
fn explorer_get(model: &[&str], path: &str) -> String {
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port();
    let addr = format!("127.0.0.1:{port}");
    let mut child = tollgate()
        .args(["model", "explore"])
        .args(model)
        .args(["--listen", &addr])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("tollgate starts");
    // A bounded poll of an observable fact (the port accepts), not a sleep as synchronisation.
    let deadline = Instant::now() + Duration::from_secs(20);
    let response = loop {
        if let Ok(mut stream) = TcpStream::connect(&addr) {
            stream
                .set_read_timeout(Some(Duration::from_secs(5)))
                .expect("a read timeout");
            let request =
                format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
            stream
                .write_all(request.as_bytes())
                .expect("the request is sent");
            let mut body = String::new();
            let _ = stream.read_to_string(&mut body);
            break body;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the Explorer did not listen on {addr} within 20 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let _ = child.kill();
    let _ = child.wait();
    response
}

#[test]
fn model_explore_slots_serves_the_explorer_on_loopback() {
    let response = explorer_get(&["slots", "--no-crashes"], "/");
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert!(response.to_lowercase().contains("<html"), "{response}");
}

/// Each model's Explorer serves that model: its status names the model's type.
#[test]
fn model_explore_serves_the_admission_and_execution_models() {
    for (args, model) in [
        (&["admission", "--strategy", "queue"][..], "AdmissionModel"),
        (&["execution"][..], "ExecutionModel"),
    ] {
        let response = explorer_get(args, "/.status");
        assert!(response.starts_with("HTTP/1.1 200"), "{args:?}: {response}");
        assert!(response.contains(model), "{args:?}: {response}");
    }
}
