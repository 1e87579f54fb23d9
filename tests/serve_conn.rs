//! `tollgate serve` bounds its connections (issue 11, point 4; spec/ingress.md "Connections and
//! logs"): idle and half-sent connections are closed after their timeouts, the connection cap
//! refuses the excess at once, and running out of descriptors never stops it serving. Real
//! sockets against a real `serve` on 127.0.0.1.
#![cfg(feature = "serve")]

mod common;
mod serve_support;

use serve_support::*;
use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Starts `serve` on a free port; `nofile` (if given) is its RLIMIT_NOFILE, soft and hard.
fn start(home: &TestHome, nofile: Option<u64>) -> Serve {
    start_with(home, nofile, None)
}

/// [`start`], its stderr's lines sent to `stderr` when given (else inherited).
fn start_with(home: &TestHome, nofile: Option<u64>, stderr: Option<mpsc::Sender<String>>) -> Serve {
    let mut command = Command::new(env!("CARGO_BIN_EXE_tollgate"));
    command
        .arg("--home")
        .arg(&home.home)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env(SECRET_ENV, SECRET)
        .env("TOLLGATE_LOG", "warn")
        .current_dir(home.dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(if stderr.is_some() {
            Stdio::piped()
        } else {
            Stdio::inherit()
        });
    if let Some(limit) = nofile {
        common::rlimit::limit(
            &mut command,
            nix::sys::resource::Resource::RLIMIT_NOFILE,
            limit,
        );
    }
    let mut child = command.spawn().unwrap();
    if let (Some(tx), Some(err)) = (stderr, child.stderr.take()) {
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines() {
                let Ok(line) = line else { return };
                let _ = tx.send(line);
            }
        });
    }
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if let Some(addr) = line.strip_prefix("listening on http://") {
                let _ = tx.send(addr.to_string());
            }
        }
    });
    let addr = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("serve did not say where it listens");
    Serve { child, addr }
}

fn home_with(serve_keys: &str) -> TestHome {
    TestHome::new(
        2,
        &format!(
            "[serve]\n{serve_keys}\n\n[[route]]\npath = \"/hook\"\nadapter = \"generic\"\nsecret_env = \"{SECRET_ENV}\"\ntask = \"hook\"\nrun = [\"true\"]\n"
        ),
    )
}

fn connect(serve: &Serve) -> TcpStream {
    let stream = TcpStream::connect(&serve.addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    stream
}

/// Reads until the server closes the connection (EOF or reset); the bytes it sent before.
/// Panics if it stays open for 30 s.
fn read_until_closed(stream: &mut TcpStream) -> Vec<u8> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return got,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::ConnectionReset => return got,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => panic!("the connection was not closed by the server: {e}"),
        }
    }
}

/// Reads one answer with a Content-Length body from a kept-alive connection.
fn read_one_response(stream: &mut TcpStream) -> Response {
    let mut raw = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        if let Some(split) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = parse_response(&raw[..split + 4]);
            let length: usize = head
                .header("content-length")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            if raw.len() >= split + 4 + length {
                return parse_response(&raw[..split + 4 + length]);
            }
        }
        let n = stream.read(&mut buf).unwrap();
        assert!(n > 0, "closed before the answer was complete");
        raw.extend_from_slice(&buf[..n]);
    }
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

#[test]
fn idle_connections_are_closed_after_idle_timeout_fresh_or_kept_alive() {
    let home = home_with("idle_timeout = \"1s\"\nheader_timeout = \"20s\"");
    let serve = start(&home, None);

    // Connected, never sent a byte.
    let mut fresh = connect(&serve);
    let opened = Instant::now();
    // Kept alive after an answer.
    let mut kept = connect(&serve);
    kept.write_all(b"GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    let answer = read_one_response(&mut kept);
    assert_eq!(answer.status, 200);
    let answered = Instant::now();

    assert!(read_until_closed(&mut fresh).is_empty());
    let fresh_after = opened.elapsed();
    assert!(read_until_closed(&mut kept).is_empty());
    let kept_after = answered.elapsed();
    // The kept-alive one's idle time starts when serve has its answer ready, a little before
    // the test has read it: a looser lower bound.
    for (what, after, at_least_millis) in
        [("fresh", fresh_after, 900), ("kept-alive", kept_after, 500)]
    {
        assert!(
            after >= Duration::from_millis(at_least_millis) && after < Duration::from_secs(15),
            "{what}: closed after {:.2}s, idle_timeout is 1s",
            secs(after)
        );
    }
    assert!(
        serve.metric("tollgate_connections_timed_out_total{phase=\"idle\"}") >= 2,
        "{}",
        serve.metrics()
    );
}

#[test]
fn a_half_sent_head_is_closed_after_header_timeout() {
    let home = home_with("header_timeout = \"1s\"\nidle_timeout = \"25s\"");
    let serve = start(&home, None);
    let mut stream = connect(&serve);
    let sent = Instant::now();
    stream
        .write_all(b"POST /hook HTTP/1.1\r\nHost: t\r\nX-Tollgate-Delivery: d")
        .unwrap();
    let got = read_until_closed(&mut stream);
    let after = sent.elapsed();
    assert!(got.is_empty(), "{:?}", String::from_utf8_lossy(&got));
    assert!(
        after >= Duration::from_millis(900) && after < Duration::from_secs(15),
        "closed after {:.2}s, header_timeout is 1s (idle_timeout 25s)",
        secs(after)
    );
    assert_eq!(
        serve.metric("tollgate_connections_timed_out_total{phase=\"header\"}"),
        1
    );
}

#[test]
fn a_half_sent_body_is_answered_408_and_closed_after_body_timeout() {
    let home = home_with("body_timeout = \"1s\"\nidle_timeout = \"25s\"");
    let serve = start(&home, None);
    let mut stream = connect(&serve);
    let sent = Instant::now();
    stream
        .write_all(
            b"POST /hook HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\nX-Tollgate-Delivery: d1\r\n\r\n{\"a\":",
        )
        .unwrap();
    let got = read_until_closed(&mut stream);
    let after = sent.elapsed();
    let answer = parse_response(&got);
    assert_eq!(answer.status, 408, "{}", answer.text());
    assert!(answer.text().contains("body_timeout"), "{}", answer.text());
    assert!(
        after >= Duration::from_millis(900) && after < Duration::from_secs(15),
        "answered after {:.2}s, body_timeout is 1s",
        secs(after)
    );
    assert_eq!(
        serve.metric("tollgate_connections_timed_out_total{phase=\"body\"}"),
        1
    );
    // Nothing was admitted for it, and it is not counted as an oversized body.
    assert_eq!(serve.metric("tollgate_admitted_total"), 0);
    assert_eq!(serve.metric("tollgate_too_large_total"), 0);
}

#[test]
fn the_connection_cap_refuses_the_excess_at_once_and_frees_a_slot_on_close() {
    let home = home_with("max_connections = 3\nidle_timeout = \"60s\"");
    let serve = start(&home, None);
    // Accepted in order: these three hold every slot.
    let mut held: Vec<TcpStream> = (0..3).map(|_| connect(&serve)).collect();
    let asked = Instant::now();
    let refused = request(&serve.addr, "GET", "/metrics", &[], b"");
    let after = asked.elapsed();
    assert_eq!(refused.status, 503, "{}", refused.text());
    assert!(refused.header("retry-after").is_some());
    assert!(
        after < Duration::from_secs(3),
        "refused after {:.2}s",
        secs(after)
    );
    // One holder leaves: its slot serves the next client (once serve has seen the close).
    drop(held.pop());
    let mut metrics = String::new();
    wait_until(20, "a freed slot to serve a request", || {
        let r = request(&serve.addr, "GET", "/metrics", &[], b"");
        metrics = r.text();
        r.status == 200
    });
    let refused_total: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("tollgate_connections_refused_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap();
    assert!(refused_total >= 1, "{metrics}");
    assert!(metrics.contains("tollgate_max_connections 3"), "{metrics}");
    drop(held);
}

#[test]
fn out_of_descriptors_serve_keeps_running_and_serves_once_idle_sockets_time_out() {
    let home = home_with("idle_timeout = \"2s\"\nheader_timeout = \"2s\"");
    // 64 descriptors, far below the default max_connections (512): accepts hit EMFILE.
    let mut serve = start(&home, Some(64));
    let idle: Vec<TcpStream> = (0..150).map(|_| connect(&serve)).collect();
    // A client behind them all.
    let mut client = connect(&serve);
    let asked = Instant::now();
    client
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .unwrap();
    let got = read_until_closed(&mut client);
    let answer = parse_response(&got);
    assert_eq!(answer.status, 200, "{}", answer.text());
    let text = answer.text();
    let accept_errors: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("tollgate_accept_errors_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap();
    assert!(
        accept_errors > 0,
        "the descriptor limit was reached (else this test proves nothing): {text}"
    );
    assert!(
        asked.elapsed() < Duration::from_secs(30),
        "served after {:.1}s",
        secs(asked.elapsed())
    );
    assert!(
        serve.child.try_wait().unwrap().is_none(),
        "serve died at the descriptor limit"
    );
    drop(idle);
    // And it stays healthy: a delivery goes through end to end.
    let body = b"{}";
    let r = serve.post("/hook", &generic_headers("after-emfile", None, body), body);
    assert_eq!(r.status, 200, "{}", r.text());
    serve.signal(nix::sys::signal::Signal::SIGTERM);
    assert_eq!(serve.wait_exit(30), 0);
}

/// Issue 31, point 3: a delivery accepted while serve had no descriptor left, whose runner spawn
/// failed (EMFILE) and whose row was parked again, runs once descriptors are free, with no other
/// command: serve retries the spawn itself (and looks for startable parked rows on its own).
/// Before, it stayed parked with both slots free until something else (`status`) started it.
#[test]
fn a_delivery_whose_runner_spawn_failed_for_want_of_descriptors_runs_without_another_command() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let home = TestHome::new(
        2,
        &format!(
            "[serve]\nidle_timeout = \"30s\"\n\n[[route]]\npath = \"/hook\"\nadapter = \"generic\"\nsecret_env = \"{SECRET_ENV}\"\ntask = \"hook\"\nrun = [\"sh\", \"-c\", \"echo ran >> '{}'\"]\n",
            marker.display()
        ),
    );
    let (tx, stderr) = mpsc::channel();
    let mut serve = start_with(&home, Some(64), Some(tx));
    let runs = || {
        std::fs::read_to_string(&marker)
            .unwrap_or_default()
            .lines()
            .count()
    };
    let wait_runs = |n: usize, what: &str| {
        let until = Instant::now() + Duration::from_secs(20);
        while runs() < n {
            assert!(Instant::now() < until, "{what} never ran");
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    // A first delivery while descriptors are free: serve's database connections are open then,
    // as in a serve that has been running.
    let body = b"{}";
    let r = serve.post("/hook", &generic_headers("warm-up", None, body), body);
    assert_eq!(r.status, 200, "{}", r.text());
    wait_runs(1, "the first delivery");
    // The delivery's connection first, then idle ones until serve has no descriptor left.
    let client = connect(&serve);
    let idle: Vec<TcpStream> = (0..150).map(|_| connect(&serve)).collect();
    let r = request_on(
        client,
        &serve.addr,
        "POST",
        "/hook",
        &generic_headers("emfile-1", None, body),
        body,
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let until = Instant::now() + Duration::from_secs(20);
    let failed = loop {
        match stderr.recv_timeout(until.saturating_duration_since(Instant::now())) {
            Ok(line) if line.contains("cannot start the runner of an accepted delivery") => {
                break true
            }
            Ok(_) => {}
            Err(_) => break false,
        }
    };
    assert!(
        failed,
        "the runner's spawn did not fail (else this test proves nothing)"
    );
    drop(idle);
    wait_runs(2, "the delivery whose runner could not be spawned");
    assert!(
        serve.child.try_wait().unwrap().is_none(),
        "serve died at the descriptor limit"
    );
    serve.signal(nix::sys::signal::Signal::SIGTERM);
    assert_eq!(serve.wait_exit(30), 0);
}
