//! Group commit (issue 12 point 3, spec/ingress.md "Group commit"): concurrent deliveries that
//! passed the gate are made durable together and answered once durable, without waiting for a
//! runner. A1-A3 as before: every accepted delivery is a durable turn that runs exactly once,
//! and a redelivery of any of them is a duplicate.
#![cfg(feature = "serve")]

mod serve_support;

use serve_support::*;
use std::collections::BTreeSet;
use std::sync::Barrier;

/// How many deliveries are sent at once.
const DELIVERIES: usize = 24;

#[test]
fn concurrent_deliveries_are_all_accepted_durable_and_run_once() {
    let dir = tempfile::tempdir().unwrap();
    let ran_log = dir.path().join("ran.log");
    let release = dir.path().join("release");
    // Turns run at once: the test waits on their ends.
    std::fs::write(&release, b"").unwrap();
    let home = TestHome::new(
        2,
        &format!(
            "[serve]\nmax_detached = {DELIVERIES}\n\n{}",
            held_route("/hooks/g", "generic", &release, &ran_log, "")
        ),
    );
    let serve = Serve::start(&home);
    let body = br#"{"event":"push"}"#;
    let barrier = Barrier::new(DELIVERIES);
    let answers: Vec<(String, Response)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..DELIVERIES)
            .map(|i| {
                let serve = &serve;
                let barrier = &barrier;
                s.spawn(move || {
                    let id = format!("g{i}");
                    let headers = generic_headers(&id, None, body);
                    barrier.wait();
                    (id, serve.post("/hooks/g", &headers, body))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (id, answer) in &answers {
        assert_eq!(answer.status, 200, "{id}: {}", answer.text());
        assert_eq!(
            answer.json()["status"],
            "accepted",
            "{id}: {}",
            answer.text()
        );
    }
    // Durable: every answered delivery's turn record (with its delivery) and its mark are in
    // the database as soon as it was answered, before any of them ran to completion.
    let db = rusqlite::Connection::open_with_flags(
        home.home.join("tollgate.db"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .unwrap();
    for (id, answer) in &answers {
        let task = answer.json()["task"].as_str().unwrap().to_string();
        let turn = answer.json()["turn"].as_u64().unwrap();
        let body: String = db
            .query_row(
                "SELECT body FROM turns WHERE task = ?1 AND turn = ?2",
                rusqlite::params![task, turn],
                |r| r.get(0),
            )
            .unwrap_or_else(|e| panic!("{id}: no durable turn record {task}/{turn}: {e}"));
        let record: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(record["delivery"]["identity"], id.as_str());
    }
    let marks = dedupe_log_lines(&home);
    for (id, _) in &answers {
        assert!(
            marks.contains(&format!("\\\"{id}\\\"")),
            "{id} is marked: {marks}"
        );
    }
    wait_until(120, "every accepted delivery to run", || {
        ran(&ran_log).len() >= DELIVERIES
    });
    wait_until(60, "every delivery's capacity to come back", || {
        serve.metric("tollgate_retained") == 0
    });
    let ran_ids = ran(&ran_log);
    let distinct: BTreeSet<&String> = ran_ids.iter().collect();
    assert_eq!(ran_ids.len(), DELIVERIES, "each ran once: {ran_ids:?}");
    assert_eq!(distinct.len(), DELIVERIES, "each ran once: {ran_ids:?}");
    // A redelivery of any of them is a duplicate, and runs nothing.
    let again = serve.post("/hooks/g", &generic_headers("g3", None, body), body);
    assert_eq!(again.status, 200);
    assert_eq!(again.json()["status"], "duplicate", "{}", again.text());
    assert_eq!(
        serve.metric("tollgate_outcomes_total{outcome=\"completed\"}"),
        DELIVERIES as u64
    );
}
