//! `tollgate serve` under a flood (spec/ingress.md; A1, A2, A5): the cap holds, refusals are honest
//! (503 with Retry-After, never marked), and duplicates never run twice.
#![cfg(feature = "serve")]

mod serve_support;

use serve_support::*;
use std::collections::BTreeSet;

fn identities_in_dedupe_log(home: &TestHome) -> BTreeSet<String> {
    dedupe_log_lines(home)
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["identity"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect()
}

/// A1, A2, A5: 50 distinct deliveries against max_detached = 5.
#[test]
fn fifty_deliveries_at_max_detached_five_accept_five_refuse_the_rest_honestly() {
    let dir = tempfile::tempdir().unwrap();
    let release = dir.path().join("release");
    let ran_log = dir.path().join("ran.log");
    let home = TestHome::new(
        8,
        &format!(
            "[serve]\nmax_detached = 5\n\n{}",
            held_route("/hooks/flood", "generic", &release, &ran_log, "")
        ),
    );
    let serve = Serve::start(&home);
    let body = br#"{"event":"push"}"#;

    // 50 distinct deliveries from 10 concurrent senders.
    let results: Vec<(String, Response)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..10)
            .map(|t| {
                let serve = &serve;
                s.spawn(move || {
                    (0..5)
                        .map(|i| {
                            let id = format!("d{}", t * 5 + i);
                            let r =
                                serve.post("/hooks/flood", &generic_headers(&id, None, body), body);
                            (id, r)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    let accepted: Vec<&String> = results
        .iter()
        .filter(|(_, r)| r.status == 200)
        .map(|(id, _)| id)
        .collect();
    let refused: Vec<&(String, Response)> =
        results.iter().filter(|(_, r)| r.status == 503).collect();
    assert_eq!(accepted.len(), 5, "{results:?}");
    assert_eq!(refused.len(), 45);
    for (_, r) in &refused {
        assert_eq!(r.header("Retry-After"), Some("5"), "{r:?}");
        assert_eq!(r.json()["reason"], "at_capacity");
    }
    for (_, r) in results.iter().filter(|(_, r)| r.status == 200) {
        let answer = r.json();
        assert_eq!(answer["status"], "accepted");
        assert!(answer["task"].as_str().unwrap().starts_with("job-"));
        assert!(answer["turn"].as_u64().unwrap() >= 1);
        assert!(answer["delivery"].as_str().is_some());
    }
    // None of the 45 was marked: the durable dedupe log holds exactly the five accepted.
    let marked = identities_in_dedupe_log(&home);
    let expected: BTreeSet<String> = accepted
        .iter()
        .map(|id| serde_json::json!(["/hooks/flood", "generic", "default", id]).to_string())
        .collect();
    assert_eq!(marked, expected);
    assert_eq!(serve.metric("tollgate_retained"), 5);
    assert_eq!(serve.metric("tollgate_admitted_total"), 5);
    assert_eq!(
        serve.metric("tollgate_rejected_total{reason=\"at_capacity\"}"),
        45
    );

    // While full, a refused identity's redelivery is refused again (judged afresh, not deduped).
    let refused_id = refused[0].0.clone();
    let again = serve.post(
        "/hooks/flood",
        &generic_headers(&refused_id, None, body),
        body,
    );
    assert_eq!(again.status, 503);

    // The five end; capacity comes back only with their outcomes.
    std::fs::write(&release, b"").unwrap();
    wait_until(60, "the five accepted deliveries to end", || {
        serve.metric("tollgate_retained") == 0
    });
    assert_eq!(
        serve.metric("tollgate_outcomes_total{outcome=\"completed\"}"),
        5
    );

    // A refused identity is accepted on redelivery; an accepted one is a duplicate.
    let redelivered = serve.post(
        "/hooks/flood",
        &generic_headers(&refused_id, None, body),
        body,
    );
    assert_eq!(redelivered.status, 200, "{}", redelivered.text());
    assert_eq!(redelivered.json()["status"], "accepted");
    let duplicate_id = accepted[0].clone();
    let duplicate = serve.post(
        "/hooks/flood",
        &generic_headers(&duplicate_id, None, body),
        body,
    );
    assert_eq!(duplicate.status, 200);
    assert_eq!(duplicate.json()["status"], "duplicate");
    wait_until(60, "the redelivered delivery to end", || {
        serve.metric("tollgate_retained") == 0
    });
    let ran = ran(&ran_log);
    assert_eq!(
        ran.iter().filter(|r| **r == duplicate_id).count(),
        1,
        "ran twice: {ran:?}"
    );
    assert_eq!(
        ran.iter().filter(|r| **r == refused_id).count(),
        1,
        "{ran:?}"
    );
    assert_eq!(ran.len(), 6, "{ran:?}");

    // One decision per delivery (refusals are aggregated: a line stands for itself and the
    // `suppressed` like it, written within a second), one outcome line per admitted one.
    let decisions = |log: &[serde_json::Value]| -> u64 {
        log.iter()
            .filter(|l| l["kind"] == "decision")
            .map(|l| 1 + l["suppressed"].as_u64().unwrap_or(0))
            .sum()
    };
    wait_until(10, "every decision in the log", || {
        decisions(&home.log()) == 50 + 3
    });
    let log = home.log();
    let outcomes: Vec<_> = log.iter().filter(|l| l["kind"] == "outcome").collect();
    assert_eq!(outcomes.len(), 6);
    assert!(outcomes
        .iter()
        .all(|l| l["outcome"] == "completed" && l["turn"].is_u64()));
}

/// A1: one tenant flooding holds at most its ceiling; another tenant is still admitted.
#[test]
fn one_tenant_cannot_take_more_than_its_ceiling() {
    let dir = tempfile::tempdir().unwrap();
    let release = dir.path().join("release");
    let ran_log = dir.path().join("ran.log");
    let home = TestHome::new(
        8,
        &format!(
            "[serve]\nmax_detached = 10\nmax_detached_per_tenant = 3\n\n{}",
            held_route("/hooks/t", "generic", &release, &ran_log, "")
        ),
    );
    let serve = Serve::start(&home);
    let body = b"{}";
    let flood: Vec<u16> = (0..8)
        .map(|i| {
            let id = format!("a{i}");
            serve
                .post("/hooks/t", &generic_headers(&id, Some("acme"), body), body)
                .status
        })
        .collect();
    assert_eq!(flood.iter().filter(|s| **s == 200).count(), 3, "{flood:?}");
    assert_eq!(flood.iter().filter(|s| **s == 503).count(), 5, "{flood:?}");
    assert_eq!(
        serve.metric("tollgate_rejected_total{reason=\"tenant_at_capacity\"}"),
        5
    );
    for i in 0..2 {
        let id = format!("b{i}");
        let r = serve.post(
            "/hooks/t",
            &generic_headers(&id, Some("globex"), body),
            body,
        );
        assert_eq!(r.status, 200, "another tenant is admitted: {}", r.text());
    }
    assert_eq!(serve.metric("tollgate_retained"), 5);
    std::fs::write(&release, b"").unwrap();
    wait_until(60, "every delivery to end", || {
        serve.metric("tollgate_retained") == 0
    });
}
