//! `tollgate serve` keeps its logs bounded under a flood (issue 11, point 12; spec/ingress.md
//! "Connections and logs"): refused requests are aggregated into at most one line per route and
//! outcome per second (with how many it stands for), `/metrics` counts every one, every accepted
//! delivery keeps its line, and `serve.log.jsonl` rotates at `log_max_bytes`.
#![cfg(feature = "serve")]

mod serve_support;

use serve_support::*;
use std::path::Path;
use std::time::Instant;

/// Starts `serve` logging at info (every line also goes to stderr), stderr into `stderr`.
fn start(home: &TestHome, stderr: &Path) -> Serve {
    let mut cmd = Serve::command(home);
    cmd.env("TOLLGATE_LOG", "info")
        .stderr(std::fs::File::create(stderr).unwrap());
    Serve::spawn(cmd)
}

fn route(serve_keys: &str) -> String {
    format!(
        "[serve]\n{serve_keys}\n\n[[route]]\npath = \"/hook\"\nadapter = \"generic\"\nsecret_env = \"{SECRET_ENV}\"\ntask = \"hook-{{scope}}\"\nrun = [\"true\"]\n"
    )
}

fn len(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

/// Lines for refused senders and the number of refusals they stand for.
fn refusals(home: &TestHome) -> (usize, u64) {
    let lines: Vec<_> = home
        .log()
        .into_iter()
        .filter(|l| l["outcome"] == "refused-sender")
        .collect();
    let stands_for = lines
        .iter()
        .map(|l| 1 + l["suppressed"].as_u64().unwrap_or(0))
        .sum();
    (lines.len(), stands_for)
}

#[test]
fn a_flood_of_refused_requests_writes_bounded_logs_and_is_counted_in_full() {
    const REFUSED: u64 = 2_000;
    const ACCEPTED: u64 = 5;
    let home = TestHome::new(2, &route(""));
    let stderr = home.scratch("serve.stderr");
    let serve = start(&home, &stderr);
    let stderr_at_start = len(&stderr);
    let body = b"{}";
    let bad = vec![
        ("X-Tollgate-Delivery", "forged".to_string()),
        ("X-Tollgate-Signature", format!("sha256={}", "0".repeat(64))),
    ];
    let started = Instant::now();
    let mut accepted_ids = Vec::new();
    for i in 0..REFUSED {
        if i % (REFUSED / ACCEPTED) == 0 {
            let id = format!("good-{i}");
            let r = serve.post("/hook", &generic_headers(&id, None, body), body);
            assert_eq!(r.status, 200, "{}", r.text());
            accepted_ids.push(id);
        }
        let r = serve.post("/hook", &bad, body);
        assert_eq!(r.status, 401, "{}", r.text());
    }
    let flood_secs = started.elapsed().as_secs() + 1;

    // Every refusal is counted, in /metrics and (aggregated) in the log.
    assert_eq!(serve.metric("tollgate_sender_refused_total"), REFUSED);
    wait_until(20, "the log to account for every refusal", || {
        refusals(&home).1 == REFUSED
    });
    let (lines, _) = refusals(&home);
    // At most one line per second of flood (plus the flush of what was pending).
    assert!(
        lines as u64 <= flood_secs + 2,
        "{lines} refusal lines for a {flood_secs}s flood"
    );
    assert!(serve.metric("tollgate_log_lines_suppressed_total") >= REFUSED - lines as u64);

    // Every accepted delivery still has its line.
    let log = home.log();
    for id in &accepted_ids {
        assert!(
            log.iter()
                .any(|l| l["outcome"] == "accepted" && l["identity"] == id.as_str()),
            "no accepted line for {id}"
        );
    }
    // A bound on the bytes: a line is a few hundred bytes; allow 1 KiB per line we expect
    // (refusal lines, and a decision plus an outcome per accepted delivery).
    let bound = (flood_secs + 2 + 2 * ACCEPTED) * 1024;
    let file_bytes = len(&home.home.join("serve.log.jsonl"));
    assert!(
        file_bytes <= bound,
        "serve.log.jsonl is {file_bytes} bytes after {REFUSED} refusals (bound {bound})"
    );
    let stderr_bytes = len(&stderr) - stderr_at_start;
    assert!(
        stderr_bytes <= bound + 4096,
        "stderr got {stderr_bytes} bytes after {REFUSED} refusals (bound {bound})"
    );
    eprintln!(
        "{REFUSED} refusals in {:.1}s: {lines} lines, {file_bytes} log bytes, {stderr_bytes} stderr bytes",
        started.elapsed().as_secs_f64()
    );
}

#[test]
fn the_log_rotates_at_log_max_bytes_and_keeps_log_rotated_files() {
    let home = TestHome::new(2, &route("log_max_bytes = 4096\nlog_rotated_files = 1"));
    let stderr = home.scratch("serve.stderr");
    let serve = start(&home, &stderr);
    let body = b"{}";
    let total = 30;
    for i in 0..total {
        let id = format!("rot-{i}");
        let r = serve.post("/hook", &generic_headers(&id, None, body), body);
        assert_eq!(r.status, 200, "{}", r.text());
    }
    wait_until(30, "the log to rotate", || {
        serve.metric("tollgate_log_rotations_total") >= 2
    });
    let live = home.home.join("serve.log.jsonl");
    let rotated = home.home.join("serve.log.jsonl.1");
    assert!(len(&live) <= 4096, "{} bytes", len(&live));
    assert!(
        len(&rotated) > 0 && len(&rotated) <= 4096,
        "{} bytes",
        len(&rotated)
    );
    assert!(!home.home.join("serve.log.jsonl.2").exists());
    // The newest accepted delivery is in the live file (or, just rotated, in .1).
    let text = format!(
        "{}{}",
        std::fs::read_to_string(&rotated).unwrap(),
        std::fs::read_to_string(&live).unwrap()
    );
    assert!(text.contains(&format!("\"rot-{}\"", total - 1)));
}
