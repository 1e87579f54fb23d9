//! `tollgate serve` shutdown and restart (spec/ingress.md; A3): with deliveries in flight, SIGTERM
//! stops admission, drains, records every still-retained delivery as handed off with its turn; a
//! restarted `serve` re-adopts them, counts them against the cap, and logs their ends. One serve
//! per home.
#![cfg(feature = "serve")]

mod serve_support;

use nix::sys::signal::Signal;
use serve_support::*;
use std::collections::BTreeSet;

#[test]
fn sigterm_hands_off_in_flight_deliveries_and_a_restart_readopts_and_finishes_them() {
    let dir = tempfile::tempdir().unwrap();
    let release = dir.path().join("release");
    let ran_log = dir.path().join("ran.log");
    let home = TestHome::new(
        8,
        &format!(
            "[serve]\nmax_detached = 4\ndrain_timeout = \"300ms\"\n\n{}",
            held_route("/hooks/s", "generic", &release, &ran_log, "")
        ),
    );
    let mut serve = Serve::start(&home);
    let body = b"{}";
    let mut accepted = BTreeSet::new();
    for i in 0..3 {
        let id = format!("s{i}");
        let r = serve.post("/hooks/s", &generic_headers(&id, None, body), body);
        assert_eq!(r.status, 200, "{}", r.text());
        accepted.insert(r.json()["delivery"].as_str().unwrap().to_string());
    }

    // A second serve on the same home is refused (exit code 3), and the first keeps serving.
    let second = home.tollgate(&["serve", "--listen", "127.0.0.1:0"]);
    assert_eq!(second.status.code(), Some(3), "{second:?}");
    assert!(String::from_utf8_lossy(&second.stderr).contains("already serves this home"));

    serve.signal(Signal::SIGTERM);
    // During the drain, admission is closed: a new delivery gets 503, not an acknowledgement.
    // (Probes sent before the signal lands may still be accepted; they are in flight too.)
    let mut probe = 0;
    wait_until(30, "admission to close", || {
        probe += 1;
        let id = format!("late{probe}");
        let r = serve.post("/hooks/s", &generic_headers(&id, None, body), body);
        if r.status == 200 {
            accepted.insert(r.json()["delivery"].as_str().unwrap().to_string());
            return false;
        }
        assert_eq!(r.status, 503);
        assert!(r.header("Retry-After").is_some());
        r.json()["reason"] == "shutting_down" || r.json()["reason"] == "at_capacity"
    });
    assert_eq!(serve.wait_exit(30), 0);

    let log = home.log();
    let handed: BTreeSet<String> = log
        .iter()
        .filter(|l| l["kind"] == "outcome" && l["outcome"] == "handed-off-at-shutdown")
        .map(|l| {
            assert!(
                l["task"].is_string() && l["turn"].is_u64(),
                "with its turn: {l}"
            );
            l["delivery"].as_str().unwrap().to_string()
        })
        .collect();
    assert_eq!(handed, accepted, "every admitted delivery was handed off");
    assert!(ran(&ran_log).is_empty(), "nothing ended yet");

    // Restart: the retained deliveries are re-adopted and count against max_detached.
    let serve = Serve::start(&home);
    assert_eq!(
        serve.metric("tollgate_readopted_total"),
        accepted.len() as u64
    );
    assert_eq!(serve.metric("tollgate_retained"), accepted.len() as u64);
    if accepted.len() == 4 {
        let r = serve.post("/hooks/s", &generic_headers("over", None, body), body);
        assert_eq!(r.status, 503, "re-adopted deliveries hold capacity");
    }
    // An identity accepted by the previous instance is still a duplicate (durable dedupe log).
    let r = serve.post("/hooks/s", &generic_headers("s0", None, body), body);
    if r.status == 200 {
        assert_eq!(r.json()["status"], "duplicate");
    } else {
        assert_eq!(r.status, 503, "full: refused, never run twice");
    }

    std::fs::write(&release, b"").unwrap();
    wait_until(60, "the re-adopted deliveries to end", || {
        serve.metric("tollgate_retained") == 0
    });
    let finished: BTreeSet<String> = home
        .log()
        .iter()
        .filter(|l| l["kind"] == "outcome" && l["outcome"] == "completed" && l["readopted"] == true)
        .map(|l| l["delivery"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        finished, accepted,
        "every handed-off delivery finished after the restart"
    );
    assert_eq!(ran(&ran_log).len(), accepted.len(), "each ran exactly once");
}

/// A crash (SIGKILL) loses no acknowledged delivery: its turn was durable before the 200, and the
/// next `serve` re-adopts it from the queue and logs its end.
#[test]
fn a_killed_serve_loses_no_acknowledged_delivery() {
    let dir = tempfile::tempdir().unwrap();
    let release = dir.path().join("release");
    let ran_log = dir.path().join("ran.log");
    let home = TestHome::new(
        8,
        &format!(
            "[serve]\nmax_detached = 4\n\n{}",
            held_route("/hooks/k", "generic", &release, &ran_log, "")
        ),
    );
    let mut serve = Serve::start(&home);
    let body = b"{}";
    let r = serve.post("/hooks/k", &generic_headers("k1", None, body), body);
    assert_eq!(r.status, 200);
    let delivery = r.json()["delivery"].as_str().unwrap().to_string();
    serve.signal(Signal::SIGKILL);
    assert_eq!(serve.wait_exit(30), -1);

    let serve = Serve::start(&home);
    assert_eq!(serve.metric("tollgate_readopted_total"), 1);
    let dup = serve.post("/hooks/k", &generic_headers("k1", None, body), body);
    assert_eq!(dup.json()["status"], "duplicate");
    std::fs::write(&release, b"").unwrap();
    wait_until(60, "the re-adopted delivery to end", || {
        home.log().iter().any(|l| {
            l["delivery"] == delivery.as_str()
                && l["outcome"] == "completed"
                && l["readopted"] == true
        })
    });
    assert_eq!(ran(&ran_log), vec!["k1".to_string()]);
}
