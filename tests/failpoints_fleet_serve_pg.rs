//! A PostgreSQL serve killed inside its group commit (spec/ingress.md "Group commit", spec/store.md
//! "What lives where"; A2, A3): the batch's marks, turns and payloads were written in the
//! queue's transaction but not committed, so the server rolls them back when the connection
//! drops. A delivery acknowledged before (its batch committed) is not lost and stays a duplicate
//! on either instance of the queue; no delivery of the killed batch was answered 200 and none
//! left a mark, so the senders' retries are accepted anew (by the other instance here) and every
//! delivery runs exactly once.
//!
//! The crash is the failpoint `serve::before_group_commit` (`1*off->return`: the first batch
//! commits, the next aborts the process before its COMMIT, no unwinding: a SIGKILL's effect at
//! exactly that point), as in tests/failpoints_serve_group_commit.rs. Named `failpoints_*` so CI's
//! failpoints step (`--test 'failpoints_*'`) runs it; it is the fleet serve tests' kill case.
#![cfg(feature = "failpoints")]
#![cfg(feature = "serve")]

mod common;
mod serve_support;

use common::http::post_raw;
use common::postgres::{server, unique, with_queue};
use serve_support::*;
use std::sync::Barrier;

const DELIVERIES: usize = 6;

fn pg_home(url: &str, queue: &str, host: &str, rest: &str) -> TestHome {
    let store = with_queue(url, queue);
    TestHome::new(2, &format!("store = {store:?}\nhost = {host:?}\n{rest}"))
}

/// The keys of `queue`'s marks in the database.
fn mark_keys(url: &str, queue: &str) -> Vec<String> {
    let mut client = postgres::Client::connect(url, postgres::NoTls).expect("connect");
    client
        .query(
            "SELECT key FROM serve_dedupe WHERE queue = $1 ORDER BY key",
            &[&queue],
        )
        .expect("read marks")
        .iter()
        .map(|row| row.get(0))
        .collect()
}

#[test]
fn a_pg_serve_killed_in_its_group_commit_loses_no_acknowledged_delivery_and_leaves_no_mark() {
    let Some(url) = server() else { return };
    let queue = unique("serve-kill");
    let shared = tempfile::tempdir().unwrap();
    let ran_log = shared.path().join("ran.log");
    let release = shared.path().join("release");
    std::fs::write(&release, b"").unwrap();
    let route = format!(
        "[serve]\nmax_detached = {}\n\n{}",
        DELIVERIES + 1,
        held_route("/hooks/k", "generic", &release, &ran_log, "")
    );
    let a = pg_home(&url, &queue, "kill-a", &route);
    let b = pg_home(&url, &queue, "kill-b", &route);
    let body = b"{}";

    let mut cmd = Serve::command(&a);
    cmd.env("FAILPOINTS", "serve::before_group_commit=1*off->return");
    let mut doomed = Serve::spawn(cmd);
    // The first batch commits: acknowledged.
    let first = doomed.post("/hooks/k", &generic_headers("k-acked", None, body), body);
    assert_eq!(first.status, 200, "{}", first.text());
    assert_eq!(first.json()["status"], "accepted", "{}", first.text());
    assert_eq!(
        mark_keys(&url, &queue).len(),
        1,
        "the acknowledged mark is durable"
    );

    // The next batch dies before its COMMIT.
    let ids: Vec<String> = (0..DELIVERIES).map(|i| format!("k{i}")).collect();
    let barrier = Barrier::new(DELIVERIES);
    let answers: Vec<Vec<u8>> = std::thread::scope(|s| {
        let handles: Vec<_> = ids
            .iter()
            .map(|id| {
                let (addr, barrier) = (&doomed.addr, &barrier);
                s.spawn(move || {
                    let headers = generic_headers(id, None, body);
                    barrier.wait();
                    post_raw(addr, "/hooks/k", &headers, body).unwrap_or_default()
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
    let left = mark_keys(&url, &queue);
    assert_eq!(
        left.len(),
        1,
        "only the acknowledged delivery's mark survives the kill: {left:?}"
    );

    // The senders retry at the other instance of the queue: the acknowledged one is a duplicate
    // there, every one of the killed batch is accepted anew, and each runs once.
    let serve_b = Serve::start(&b);
    let again = serve_b.post("/hooks/k", &generic_headers("k-acked", None, body), body);
    assert_eq!(again.status, 200, "{}", again.text());
    assert_eq!(again.json()["status"], "duplicate", "{}", again.text());
    for id in &ids {
        let r = serve_b.post("/hooks/k", &generic_headers(id, None, body), body);
        assert_eq!(r.status, 200, "{id}: {}", r.text());
        assert_eq!(r.json()["status"], "accepted", "{id}: {}", r.text());
    }
    let mut expected = ids.clone();
    expected.push("k-acked".to_string());
    expected.sort();
    // The acknowledged turn was queued by the killed instance: a serve of its home (started
    // again, without the failpoint) reconciles and runs it.
    let serve_a = Serve::start(&a);
    wait_until(120, "every delivery to run", || {
        ran(&ran_log).len() >= expected.len()
    });
    for serve in [&serve_a, &serve_b] {
        wait_until(60, "every delivery's capacity to come back", || {
            serve.metric("tollgate_retained") == 0
        });
    }
    let mut ran_ids = ran(&ran_log);
    ran_ids.sort();
    assert_eq!(ran_ids, expected, "each ran exactly once");
    assert_eq!(mark_keys(&url, &queue).len(), expected.len());
}
