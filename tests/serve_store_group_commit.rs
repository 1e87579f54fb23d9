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

/// A delivery that fails inside the batch after its mark was written (here: its task's record
/// is corrupt, so its submit step cannot read it) is rolled back alone, mark and all: it is
/// answered 503 with nothing queued, its redelivery is tried again rather than answered as a
/// duplicate, the other deliveries of the home are unaffected, and once the record is repaired
/// the same delivery is accepted and runs.
#[test]
fn a_delivery_that_fails_in_the_batch_leaves_no_mark_and_its_redelivery_is_tried_again() {
    let dir = tempfile::tempdir().unwrap();
    let ran_log = dir.path().join("ran.log");
    let release = dir.path().join("release");
    std::fs::write(&release, b"").unwrap();
    let home = TestHome::new(
        2,
        &held_route("/hooks/g", "generic", &release, &ran_log, ""),
    );
    let serve = Serve::start(&home);
    let body = br#"{"event":"push"}"#;
    let post = |id: &str, scope: &str| {
        let headers = generic_signed(SECRET, now_secs(), id, None, Some(scope), body);
        serve.post("/hooks/g", &headers, body)
    };
    // The task `job-bad` gets its record from a first, accepted delivery.
    let first = post("warm", "bad");
    assert_eq!(first.json()["status"], "accepted", "{}", first.text());
    wait_until(60, "the first delivery to run", || {
        ran(&ran_log).contains(&"warm".to_string())
    });
    let db = rusqlite::Connection::open(home.home.join("tollgate.db")).unwrap();
    db.busy_timeout(std::time::Duration::from_secs(10)).unwrap();
    let good: String = db
        .query_row("SELECT body FROM tasks WHERE name = 'job-bad'", [], |r| {
            r.get(0)
        })
        .unwrap();
    db.execute("UPDATE tasks SET body = '{' WHERE name = 'job-bad'", [])
        .unwrap();

    let failed = post("lost", "bad");
    assert_eq!(failed.status, 503, "{}", failed.text());
    assert_eq!(failed.json()["status"], "withdrawn", "{}", failed.text());
    assert!(
        !dedupe_log_lines(&home).contains("\\\"lost\\\""),
        "the failed delivery's mark was rolled back with it: {}",
        dedupe_log_lines(&home)
    );
    // Another scope's delivery in the meantime is accepted as usual.
    let other = post("other", "good");
    assert_eq!(other.json()["status"], "accepted", "{}", other.text());
    // The sender retries: tried again, not answered as a duplicate of what was never queued.
    let retried = post("lost", "bad");
    assert_eq!(retried.status, 503, "{}", retried.text());
    assert_eq!(retried.json()["status"], "withdrawn", "{}", retried.text());

    db.execute(
        "UPDATE tasks SET body = ?1 WHERE name = 'job-bad'",
        rusqlite::params![good],
    )
    .unwrap();
    let repaired = post("lost", "bad");
    assert_eq!(repaired.json()["status"], "accepted", "{}", repaired.text());
    wait_until(60, "the repaired delivery and the other one to run", || {
        let ran = ran(&ran_log);
        ran.contains(&"lost".to_string()) && ran.contains(&"other".to_string())
    });
    assert_eq!(
        ran(&ran_log).iter().filter(|id| *id == "lost").count(),
        1,
        "the redelivered event ran once"
    );
}
