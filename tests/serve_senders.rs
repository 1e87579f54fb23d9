//! `tollgate serve`: senders are verified before anything else, and each adapter's shape gets its
//! own overload answer (spec/ingress.md; A2).
#![cfg(feature = "serve")]

mod serve_support;

use serve_support::*;

fn queued_rows(home: &TestHome) -> usize {
    home.status()["rows"].as_array().map_or(0, |r| r.len())
}

fn routes(release: &std::path::Path, ran_log: &std::path::Path) -> String {
    [
        held_route("/generic", "generic", release, ran_log, ""),
        held_route("/slack/events", "slack-events", release, ran_log, ""),
        held_route("/slack/commands", "slack-commands", release, ran_log, ""),
        held_route("/github", "github", release, ran_log, ""),
    ]
    .join("\n")
}

/// Wrong signature, stale Slack timestamp, oversized body: 401 / 401 / 413, nothing queued.
#[test]
fn bad_senders_and_oversized_bodies_are_refused_before_anything_is_queued() {
    let dir = tempfile::tempdir().unwrap();
    let home = TestHome::new(
        2,
        &format!(
            "[serve]\nbody_limit = 1024\n\n{}",
            routes(&dir.path().join("release"), &dir.path().join("ran.log"))
        ),
    );
    let serve = Serve::start(&home);
    let body = br#"{"event_id":"Ev1","team_id":"T1","type":"event_callback","event":{"type":"message","channel":"C1"}}"#;

    // Wrong signature (signed with another secret), and no signature at all.
    let headers = generic_signed("not-the-secret", now_secs(), "g1", None, Some("g1"), body);
    assert_eq!(serve.post("/generic", &headers, body).status, 401);
    let unsigned = vec![("X-Tollgate-Delivery", "g1".to_string())];
    assert_eq!(serve.post("/generic", &unsigned, body).status, 401);

    // A correctly signed Slack event whose timestamp is ten minutes old.
    let stale = slack_headers(now_secs() - 600, body);
    let r = serve.post("/slack/events", &stale, body);
    assert_eq!(r.status, 401, "{}", r.text());

    // A body over the limit, correctly signed.
    let big = vec![b'x'; 4096];
    let r = serve.post("/generic", &generic_headers("g2", None, &big), &big);
    assert_eq!(r.status, 413);

    // Unknown route.
    assert_eq!(serve.post("/nowhere", &[], b"{}").status, 404);

    assert_eq!(queued_rows(&home), 0);
    assert_eq!(serve.metric("tollgate_admitted_total"), 0);
    assert_eq!(serve.metric("tollgate_sender_refused_total"), 3);
    assert_eq!(serve.metric("tollgate_too_large_total"), 1);
    // No turn folder: `tasks/` is made with the first turn, so it is absent or empty.
    match home.home.join("tasks").read_dir() {
        Ok(mut entries) => assert!(entries.next().is_none(), "a turn folder was made"),
        Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::NotFound, "{e}"),
    }

    // Slack's url_verification is answered with its challenge, and admits nothing.
    let challenge = br#"{"type":"url_verification","challenge":"c-123"}"#;
    let r = serve.post(
        "/slack/events",
        &slack_headers(now_secs(), challenge),
        challenge,
    );
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["challenge"], "c-123");
    assert_eq!(serve.metric("tollgate_admitted_total"), 0);
}

/// Overload per shape: a slash command gets 200 with a busy text; slack events 503 Retry-After;
/// github 503 and a durable refusal record listed by `tollgate deliveries --refused`.
#[test]
fn overload_is_answered_in_each_adapters_shape() {
    let dir = tempfile::tempdir().unwrap();
    let release = dir.path().join("release");
    let ran_log = dir.path().join("ran.log");
    let home = TestHome::new(
        2,
        &format!(
            "[serve]\nmax_detached = 1\n\n{}",
            routes(&release, &ran_log)
        ),
    );
    let serve = Serve::start(&home);

    let command = |trigger: &str| {
        format!("command=%2Fdeploy&text=prod&team_id=T1&channel_id=C9&trigger_id={trigger}")
            .into_bytes()
    };
    let first = command("tr-1");
    let r = serve.post(
        "/slack/commands",
        &slack_headers(now_secs(), &first),
        &first,
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["status"], "accepted");
    assert_eq!(serve.metric("tollgate_retained"), 1);

    // Full: the slash command gets a visible busy text, not an error page, not a fake success.
    let second = command("tr-2");
    let r = serve.post(
        "/slack/commands",
        &slack_headers(now_secs(), &second),
        &second,
    );
    assert_eq!(r.status, 200);
    let answer = r.json();
    assert_eq!(answer["response_type"], "ephemeral");
    let text = answer["text"].as_str().unwrap();
    assert!(text.contains("busy") && text.contains("/deploy"), "{text}");
    assert!(
        answer.get("status").is_none(),
        "no accepted status: {answer}"
    );

    // Slack events: a retry-inducing 503.
    let event = br#"{"event_id":"Ev9","team_id":"T1","type":"event_callback","event":{"type":"message","channel":"C1"}}"#;
    let mut headers = slack_headers(now_secs(), event);
    headers.push(("X-Slack-Retry-Num", "1".to_string()));
    let r = serve.post("/slack/events", &headers, event);
    assert_eq!(r.status, 503);
    assert!(r.header("Retry-After").is_some());

    // GitHub: 503, and recorded durably as refused.
    let push = br#"{"repository":{"full_name":"acme/app"}}"#;
    let gh = vec![
        (
            "X-GitHub-Delivery",
            "72d3162e-cc78-11e3-81ab-4c9367dc0958".to_string(),
        ),
        ("X-GitHub-Event", "push".to_string()),
        (
            "X-Hub-Signature-256",
            format!("sha256={}", hmac_hex(SECRET, &[push])),
        ),
    ];
    let r = serve.post("/github", &gh, push);
    assert_eq!(r.status, 503);
    let out = home.tollgate(&["deliveries", "--refused", "--json"]);
    assert!(out.status.success(), "{out:?}");
    let listed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let refused = listed["refused"].as_array().unwrap();
    assert_eq!(refused.len(), 1, "{listed}");
    assert_eq!(
        refused[0]["identity"],
        "72d3162e-cc78-11e3-81ab-4c9367dc0958"
    );
    assert_eq!(refused[0]["event"], "push");
    assert_eq!(refused[0]["reason"], "at_capacity");
    let text = home.tollgate(&["deliveries", "--refused"]);
    assert!(String::from_utf8_lossy(&text.stdout).contains("72d3162e"));

    std::fs::write(&release, b"").unwrap();
    wait_until(60, "the slash command's turn to end", || {
        serve.metric("tollgate_retained") == 0
    });
    // Once capacity frees, GitHub's manual redelivery is accepted.
    let r = serve.post("/github", &gh, push);
    assert_eq!(r.status, 200, "{}", r.text());
    let task = r.json()["task"].as_str().unwrap().to_string();
    assert!(task.starts_with("job-acme-app-"), "{task}");
    wait_until(60, "the github delivery to end", || {
        serve.metric("tollgate_retained") == 0
    });
    assert_eq!(ran(&ran_log).len(), 2);
}
