//! The reviewer entry points: `tollgate model check slots` and `tollgate model explore slots`.
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

#[test]
fn model_check_rejects_a_bad_size() {
    let out = tollgate()
        .args(["model", "check", "slots", "--cap", "0"])
        .output()
        .expect("tollgate runs");
    assert_eq!(out.status.code(), Some(2));
}

/// Starts the Explorer on a free loopback port, fetches `/` once, and stops it.
#[test]
fn model_explore_slots_serves_the_explorer_on_loopback() {
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port();
    let addr = format!("127.0.0.1:{port}");
    let mut child = tollgate()
        .args([
            "model",
            "explore",
            "slots",
            "--no-crashes",
            "--listen",
            &addr,
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("tollgate starts");
    let deadline = Instant::now() + Duration::from_secs(20);
    let response = loop {
        if let Ok(mut stream) = TcpStream::connect(&addr) {
            stream
                .set_read_timeout(Some(Duration::from_secs(5)))
                .expect("a read timeout");
            stream
                .write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
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
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert!(response.to_lowercase().contains("<html"), "{response}");
}
