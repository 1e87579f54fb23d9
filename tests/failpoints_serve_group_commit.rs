//! A serve killed inside the group commit, after the batch was written and before its COMMIT
//! (spec/ingress.md, "Group commit"; A2, A3): none of those deliveries was answered 200, the
//! senders' retries are accepted anew by the next serve (nothing of the batch was durable: no
//! mark, no turn), and every delivery runs exactly once.
//!
//! The crash is the failpoint `serve::before_group_commit` with the `return` action, which aborts
//! the process (no unwinding, no cleanup: a SIGKILL's effect at exactly that point).
#![cfg(feature = "failpoints")]
#![cfg(feature = "serve")]

mod common;
mod serve_support;

use common::http::post_raw;
use serve_support::*;
use std::sync::Barrier;

const DELIVERIES: usize = 6;

#[test]
fn a_serve_killed_before_the_group_commit_answered_none_and_retries_run_once() {
    let dir = tempfile::tempdir().unwrap();
    let ran_log = dir.path().join("ran.log");
    let release = dir.path().join("release");
    std::fs::write(&release, b"").unwrap();
    let home = TestHome::new(
        2,
        &format!(
            "[serve]\nmax_detached = {DELIVERIES}\n\n{}",
            held_route("/hooks/c", "generic", &release, &ran_log, "")
        ),
    );
    let body = b"{}";
    let ids: Vec<String> = (0..DELIVERIES).map(|i| format!("c{i}")).collect();

    let mut cmd = Serve::command(&home);
    cmd.env("FAILPOINTS", "serve::before_group_commit=return");
    let mut doomed = Serve::spawn(cmd);
    let barrier = Barrier::new(DELIVERIES);
    let answers: Vec<Vec<u8>> = std::thread::scope(|s| {
        let handles: Vec<_> = ids
            .iter()
            .map(|id| {
                let (addr, barrier) = (&doomed.addr, &barrier);
                s.spawn(move || {
                    let headers = generic_headers(id, None, body);
                    barrier.wait();
                    post_raw(addr, "/hooks/c", &headers, body).unwrap_or_default()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (id, raw) in ids.iter().zip(&answers) {
        let text = String::from_utf8_lossy(raw);
        assert!(
            !text.starts_with("HTTP/1.1 200"),
            "{id} was answered 200 by a serve that never committed it: {text:?}"
        );
    }
    let code = doomed.wait_exit(30);
    assert_ne!(code, 0, "the failpoint aborted the serve");
    assert!(ran(&ran_log).is_empty(), "nothing of the batch ran");
    assert_eq!(
        dedupe_log_lines(&home),
        "",
        "no mark of the batch is durable"
    );

    // The senders retry: each is accepted anew (not a duplicate) and runs once.
    let serve = Serve::start(&home);
    for id in &ids {
        let r = serve.post("/hooks/c", &generic_headers(id, None, body), body);
        // A sender whose first try was refused before the crash (503) retries the same way.
        assert_eq!(r.status, 200, "{id}: {}", r.text());
        assert_eq!(r.json()["status"], "accepted", "{id}: {}", r.text());
    }
    wait_until(120, "every retried delivery to run", || {
        ran(&ran_log).len() >= DELIVERIES
    });
    wait_until(60, "every delivery's capacity to come back", || {
        serve.metric("tollgate_retained") == 0
    });
    let mut ran_ids = ran(&ran_log);
    ran_ids.sort();
    let mut expected = ids.clone();
    expected.sort();
    assert_eq!(ran_ids, expected, "each ran exactly once");
}
