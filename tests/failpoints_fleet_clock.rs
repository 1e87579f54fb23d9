//! Hosts whose clocks disagree (spec/fleet.md, "Leases": every lease time is the database's
//! clock, never a host's). Two homes on one PostgreSQL queue, as two machines; the second runs
//! its wall clock an hour ahead (`TOLLGATE_TEST_CLOCK_OFFSET_MILLIS`, read by fault-injection
//! builds only). A host that judged the first host's leases by its own clock would see the
//! first host's runner's lease long expired: it would sweep it, count the runner dead, and
//! replace it or start its own turn in the slot. On the database's clock nothing of that
//! happens: the turn runs once, on the first host, and the second host's turn waits for the slot.
//!
//! The server is `TOLLGATE_TEST_POSTGRES` (tests/common/postgres.rs): unset, this test skips
//! with a message; with `TOLLGATE_REQUIRE_POSTGRES=1` a missing server fails it.
#![cfg(feature = "failpoints")]

mod common;

use common::fleet::{home_on, json, ok, shared_url, tollgate_with, turn_view, wait_state};
use common::postgres::{server, unique};
use std::path::Path;

/// How far ahead the second host's clock runs: far past any lease's duration.
const AHEAD_MILLIS: u64 = 3_600_000;

/// The binary on `home` as the host whose clock runs ahead.
fn ahead(home: &Path, args: &[&str]) -> serde_json::Value {
    let offset = AHEAD_MILLIS.to_string();
    let env = [(tollgate::clock::TEST_OFFSET_ENV, offset.as_str())];
    let out = tollgate_with(home, args, &env);
    assert!(out.status.success(), "{args:?}: {}", common::describe(&out));
    if args.contains(&"--json") {
        serde_json::from_slice(&out.stdout).expect("JSON")
    } else {
        serde_json::Value::Null
    }
}

#[test]
fn a_host_whose_clock_runs_an_hour_ahead_neither_steals_nor_replaces_another_hosts_running_turn() {
    let Some(server) = server() else { return };
    let url = shared_url(&server, "clock-ahead");
    let (host_a, host_b) = (unique("clock-a"), unique("clock-b"));
    let tmp = tempfile::tempdir().expect("tempdir");
    let a = home_on(&tmp.path().join("a"), &url, &host_a, 1);
    let b = home_on(&tmp.path().join("b"), &url, &host_b, 1);
    let gate = tmp.path().join("go");
    let runs = tmp.path().join("runs");
    let _open = common::OpenOnDrop(gate.clone());

    // A turn of a that runs until the test opens its gate (the command's own bounded wait), and
    // notes each start of it.
    let long = format!(
        "echo run >> {r}; i=0; while [ ! -e {g} ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done",
        r = runs.display(),
        g = gate.display()
    );
    ok(&a, &["submit", "--task", "long", "--", "sh", "-c", &long]);
    common::wait_until("the long turn to start", || runs.exists());

    // b, an hour ahead, submits a turn of its own and reconciles: its clock is in effect (its
    // record says so), yet a's runner is live to it and keeps the one slot.
    let before_millis = tollgate::clock::now_millis();
    ahead(&b, &["submit", "--task", "other", "--", "true"]);
    let other = turn_view(&b, "other", 1);
    let submitted = other["submitted_at_millis"].as_u64().expect("submitted_at");
    assert!(
        submitted >= before_millis + AHEAD_MILLIS - 60_000,
        "b's clock runs ahead: {other}"
    );
    ahead(&b, &["reconcile"]);
    let view = ahead(&b, &["status", "--json", "--all"]);
    let long_turn = turn_view(&b, "long", 1);
    assert_eq!(long_turn["state"], "running", "{long_turn}\n{view}");
    assert_eq!(long_turn["host"], host_a.as_str(), "{long_turn}");
    let other = turn_view(&b, "other", 1);
    assert_eq!(other["state"], "queued", "the slot is a's: {other}");
    let hosts = json(&a, &["hosts", "--json"]);
    assert!(
        hosts["hosts"]
            .as_array()
            .is_some_and(|h| h.iter().any(|h| h["host"] == host_a.as_str())),
        "a's runner still holds its lease: {hosts}"
    );

    // The turn ends on a, once; then the slot is free and b's turn runs.
    std::fs::write(&gate, b"").expect("open the gate");
    let long_turn = wait_state(&a, "long", 1, "completed");
    assert_eq!(long_turn["host"], host_a.as_str(), "{long_turn}");
    let started = std::fs::read_to_string(&runs).expect("runs");
    assert_eq!(started.lines().count(), 1, "the turn ran once: {started:?}");
    ahead(&b, &["reconcile"]);
    wait_state(&b, "other", 1, "completed");
}
