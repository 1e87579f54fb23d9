//! `tollgate serve` dispatch: the payload reaches the turn, a sync route answers with the turn's
//! outcome, a deferred delivery past `detach_timeout` is cancelled and ends timed-out (A3, A5).
#![cfg(feature = "serve")]

mod serve_support;

use serve_support::*;

fn route(path: &str, script: &str, extra: &str) -> String {
    format!(
        "[[route]]\npath = \"{path}\"\nadapter = \"generic\"\nsecret_env = \"{SECRET_ENV}\"\ntask = \"{}\"\nrun = [\"sh\", \"-c\", {script:?}]\n{extra}\n",
        path.trim_start_matches('/')
    )
}

#[test]
fn sync_routes_answer_with_the_outcome_and_the_turn_gets_payload_and_delivery() {
    let dir = tempfile::tempdir().unwrap();
    let seen = dir.path().join("seen");
    let copy = format!(
        "cat \"$TOLLGATE_PAYLOAD\" > '{0}.body'; echo \"$TOLLGATE_DELIVERY $TOLLGATE_TENANT ${{{SECRET_ENV}:-nosecret}}\" > '{0}.env'",
        seen.display()
    );
    let home = TestHome::new(
        2,
        &[
            route("/ok", &copy, "dispatch = \"sync\""),
            route("/fails", "exit 3", "dispatch = \"sync\""),
        ]
        .join("\n"),
    );
    let serve = Serve::start(&home);
    let body = br#"{"ref":"refs/heads/main"}"#;
    let r = serve.post("/ok", &generic_headers("p1", Some("acme"), body), body);
    assert_eq!(r.status, 200, "{}", r.text());
    let answer = r.json();
    assert_eq!(answer["outcome"], "completed");
    assert_eq!(answer["exit_code"], 0);
    let delivery = answer["delivery"].as_str().unwrap();
    assert_eq!(std::fs::read(seen.with_extension("body")).unwrap(), body);
    assert_eq!(
        std::fs::read_to_string(seen.with_extension("env"))
            .unwrap()
            .trim(),
        format!("{delivery} acme nosecret"),
        "the route's secret is not passed to the turn"
    );
    // The turn records which delivery it serves, and keeps the payload in its directory.
    let turn_dir = home.home.join("tasks/ok/turns/1");
    let record: serde_json::Value = serde_json::to_value(
        tollgate::tasks::load_turn(
            &tollgate::home::Home::at(&home.home),
            &tollgate::protocol::slots::TurnKey::new("ok", 1),
        )
        .expect("turn record")
        .expect("the turn has a record"),
    )
    .expect("json");
    assert_eq!(record["delivery"]["id"], delivery);
    assert_eq!(record["delivery"]["identity"], "p1");
    assert_eq!(std::fs::read(turn_dir.join("payload")).unwrap(), body);

    let r = serve.post("/fails", &generic_headers("p2", None, body), body);
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["outcome"], "failed");
    assert_eq!(r.json()["exit_code"], 3);
    assert_eq!(
        serve.metric("tollgate_outcomes_total{outcome=\"failed\"}"),
        1
    );
}

#[test]
fn a_deferred_delivery_past_detach_timeout_is_cancelled_and_ends_timed_out() {
    let dir = tempfile::tempdir().unwrap();
    let release = dir.path().join("never");
    let ran_log = dir.path().join("ran.log");
    let home = TestHome::new(
        2,
        &format!(
            "[serve]\nmax_detached = 1\ndetach_timeout = \"300ms\"\n\n{}",
            held_route("/slow", "generic", &release, &ran_log, "")
        ),
    );
    let serve = Serve::start(&home);
    let body = b"{}";
    let r = serve.post("/slow", &generic_headers("slow1", None, body), body);
    assert_eq!(r.status, 200);
    let delivery = r.json()["delivery"].as_str().unwrap().to_string();
    // Capacity is held until the cancelled turn has really ended.
    wait_until(60, "the timed-out outcome", || {
        home.log()
            .iter()
            .any(|l| l["delivery"] == delivery.as_str() && l["outcome"] == "timed-out")
    });
    assert_eq!(serve.metric("tollgate_retained"), 0);
    let record: serde_json::Value = serde_json::to_value(
        tollgate::tasks::load_turn(
            &tollgate::home::Home::at(&home.home),
            &tollgate::protocol::slots::TurnKey::new("job-slow1", 1),
        )
        .expect("turn record")
        .expect("the turn has a record"),
    )
    .expect("json");
    assert_eq!(record["outcome"], "cancelled");
    assert!(ran(&ran_log).is_empty());
}
