//! `tollgate serve`, issue 11: a captured generic request cannot be replayed under another
//! identity, tenant or scope or after its window; dedupe keys are per route and unambiguous; long
//! and non-ASCII scopes still make valid, distinct tasks; trigger rules, event type, payload
//! environment and `cwd` reach the turn (spec/ingress.md).
#![cfg(feature = "serve")]

mod serve_support;

use serve_support::*;
use std::path::Path;

fn queued_rows(home: &TestHome) -> usize {
    home.status()["rows"].as_array().map_or(0, |r| r.len())
}

fn task_dirs(home: &TestHome) -> usize {
    std::fs::read_dir(home.home.join("tasks")).map_or(0, |d| d.count())
}

/// A generic route whose turns run at once and append `$TOLLGATE_EVENT_ID $TOLLGATE_TENANT` to
/// `ran`.
fn quick_route(path: &str, adapter: &str, ran: &Path, extra: &str) -> String {
    let script = format!(
        "echo \"$TOLLGATE_EVENT_ID $TOLLGATE_TENANT\" >> '{}'",
        ran.display()
    );
    format!(
        "[[route]]\npath = \"{path}\"\nadapter = \"{adapter}\"\nsecret_env = \"{SECRET_ENV}\"\ntask = \"job-{{scope}}\"\nrun = [\"sh\", \"-c\", {script:?}]\n{extra}\n"
    )
}

fn dedupe_lines(home: &TestHome) -> String {
    dedupe_log_lines(home)
}

/// Point 1: one captured body + signature re-sent with new delivery ids, tenants and scopes is
/// refused (401) and nothing is queued; an old timestamp is refused; the legacy route still works.
#[test]
fn a_captured_generic_request_cannot_be_replayed_under_another_identity_or_later() {
    let dir = tempfile::tempdir().unwrap();
    let ran_log = dir.path().join("ran.log");
    let home = TestHome::new(
        2,
        &format!(
            "{}\n{}",
            quick_route("/g", "generic", &ran_log, ""),
            quick_route("/old", "generic", &ran_log, "legacy_signature = true")
        ),
    );
    let serve = Serve::start(&home);
    let body = br#"{"build":1}"#;
    let captured = generic_signed(SECRET, now_secs(), "d-1", Some("acme"), Some("main"), body);
    let signature = captured[1].1.clone();

    for i in 0..5 {
        let forged = vec![
            ("X-Tollgate-Delivery", format!("new-{i}")),
            ("X-Tollgate-Signature", signature.clone()),
            ("X-Tollgate-Tenant", format!("tenant-{i}")),
            ("X-Tollgate-Scope", format!("scope-{i}")),
        ];
        let r = serve.post("/g", &forged, body);
        assert_eq!(r.status, 401, "{}", r.text());
    }
    // Only the delivery id changed; then only the tenant; then only the scope.
    for (name, value) in [
        ("X-Tollgate-Delivery", "d-2"),
        ("X-Tollgate-Tenant", "globex"),
        ("X-Tollgate-Scope", "other"),
    ] {
        let mut forged = captured.clone();
        forged.retain(|(k, _)| *k != name);
        forged.push((name, value.to_string()));
        assert_eq!(serve.post("/g", &forged, body).status, 401, "{name}");
    }
    // Signed ten minutes ago (outside the 5-minute window), and two minutes ahead (over the skew).
    for t in [now_secs() - 600, now_secs() + 120] {
        let old = generic_signed(SECRET, t, "d-3", None, None, body);
        let r = serve.post("/g", &old, body);
        assert_eq!(r.status, 401, "{}", r.text());
        assert!(r.text().contains("replay window"), "{}", r.text());
    }
    // The body-only scheme is refused where the route does not allow it, naming the way out.
    let r = serve.post("/g", &legacy_generic_headers("d-4", None, body), body);
    assert_eq!(r.status, 401);
    assert!(r.text().contains("legacy_signature"), "{}", r.text());
    assert_eq!(queued_rows(&home), 0);
    assert_eq!(task_dirs(&home), 0);
    assert_eq!(serve.metric("tollgate_admitted_total"), 0);
    assert_eq!(dedupe_lines(&home), "");

    // The genuine request runs once; its replay inside the window is a duplicate.
    let r = serve.post("/g", &captured, body);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["status"], "accepted");
    let r = serve.post("/g", &captured, body);
    assert_eq!(r.json()["status"], "duplicate");

    // A legacy route still takes the old scheme.
    let r = serve.post("/old", &legacy_generic_headers("d-5", None, body), body);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["status"], "accepted");
    wait_until(60, "both turns to run", || ran(&ran_log).len() == 2);
    let mut lines = ran(&ran_log);
    lines.sort();
    assert_eq!(lines, ["d-1 acme", "d-5 default"]);
    // The legacy delivery's log line says how it was signed; the v1 one's does not.
    let accepted = |id: &str| {
        home.log()
            .into_iter()
            .find(|e| e["outcome"] == "accepted" && e["identity"] == id)
            .unwrap_or_else(|| panic!("no accepted line for {id}"))
    };
    assert!(accepted("d-5")["reason"]
        .as_str()
        .is_some_and(|r| r.contains("legacy")));
    assert!(accepted("d-1").get("reason").is_none());
}

/// Point 2: the same delivery id on two routes runs on both; tenant `a/b` id `c` and tenant `a`
/// id `b/c` do not collide; a mark of the old key format in an existing dedupe log still counts.
#[test]
fn dedupe_keys_are_per_route_unambiguous_and_old_logs_are_still_read() {
    let dir = tempfile::tempdir().unwrap();
    let ran_log = dir.path().join("ran.log");
    let home = TestHome::new(
        2,
        &format!(
            "{}\n{}",
            quick_route("/one", "generic", &ran_log, ""),
            quick_route("/two", "generic", &ran_log, "")
        ),
    );
    // What an instance before this change wrote: `adapter/installation/identity`.
    std::fs::create_dir_all(home.home.join("serve")).unwrap();
    std::fs::write(
        home.home.join("serve/dedupe.jsonl"),
        format!(
            "{{\"identity\":\"generic/default/seen-before\",\"marked_at_millis\":{}}}\n",
            now_secs() * 1000 - 1000
        ),
    )
    .unwrap();
    let serve = Serve::start(&home);
    let body = b"{}";
    let post = |route: &str, id: &str, tenant: Option<&str>| {
        let r = serve.post(
            route,
            &generic_signed(SECRET, now_secs(), id, tenant, None, body),
            body,
        );
        assert_eq!(r.status, 200, "{}", r.text());
        r.json()["status"].as_str().unwrap().to_string()
    };
    assert_eq!(post("/one", "same", None), "accepted");
    assert_eq!(post("/two", "same", None), "accepted");
    assert_eq!(post("/one", "c", Some("a/b")), "accepted");
    assert_eq!(post("/one", "b/c", Some("a")), "accepted");
    assert_eq!(post("/one", "seen-before", None), "duplicate");
    assert_eq!(post("/two", "same", None), "duplicate");
    wait_until(60, "four turns to run", || ran(&ran_log).len() == 4);
    let mut lines = ran(&ran_log);
    lines.sort();
    assert_eq!(lines, ["b/c a", "c a/b", "same default", "same default"]);
    let log = dedupe_lines(&home);
    assert!(
        log.contains(r#"[\"/one\",\"generic\",\"a/b\",\"c\"]"#),
        "{log}"
    );
    assert!(log.contains("generic/default/seen-before"), "kept: {log}");
}

/// Point 3: a GitHub repository name of 100 characters (the platform's limit) is accepted and
/// runs, in a valid task; non-ASCII scopes do not collapse into one task; a verified GitHub
/// delivery that cannot be made a turn is in the refused list.
#[test]
fn long_and_non_ascii_scopes_make_valid_distinct_tasks_and_every_lost_github_delivery_is_listed() {
    let dir = tempfile::tempdir().unwrap();
    let ran_log = dir.path().join("ran.log");
    let home = TestHome::new(
        2,
        &format!(
            "[serve]\nbody_limit = 4096\n\n{}\n{}\n[[route]]\npath = \"/stuck\"\nadapter = \"github\"\nsecret_env = \"{SECRET_ENV}\"\ntask = \"stuck\"\nrun = [\"true\"]\n",
            quick_route("/gh", "github", &ran_log, ""),
            quick_route("/g", "generic", &ran_log, ""),
        ),
    );
    let serve = Serve::start(&home);
    let name = format!("acme/{}", "r".repeat(100));
    let push = serde_json::to_vec(&serde_json::json!({"repository": {"full_name": name}})).unwrap();
    let r = serve.post("/gh", &github_headers("gh-long", "push", &push), &push);
    assert_eq!(r.status, 200, "{}", r.text());
    let task = r.json()["task"].as_str().unwrap().to_string();
    assert!(
        task.len() <= 64 && task.starts_with("job-acme-rrrr"),
        "{task}"
    );

    let mut tasks = Vec::new();
    for scope in ["é", "ü", "日本", "a/b", "a-b"] {
        let id = format!("s-{}", tasks.len());
        let r = serve.post(
            "/g",
            &generic_signed(SECRET, now_secs(), &id, None, Some(scope), b"{}"),
            b"{}",
        );
        assert_eq!(r.status, 200, "{scope}: {}", r.text());
        tasks.push(r.json()["task"].as_str().unwrap().to_string());
    }
    let distinct: std::collections::BTreeSet<_> = tasks.iter().collect();
    assert_eq!(distinct.len(), tasks.len(), "{tasks:?}");
    wait_until(60, "six turns to run", || ran(&ran_log).len() == 6);

    // A verified delivery whose turn cannot be created (its task folder is blocked by a file)
    // is answered 503 and listed for redelivery.
    std::fs::write(home.home.join("tasks").join("stuck"), b"not a folder").unwrap();
    let body = br#"{"repository":{"full_name":"acme/app"}}"#;
    let r = serve.post("/stuck", &github_headers("gh-stuck", "push", body), body);
    assert_eq!(r.status, 503, "{}", r.text());
    let out = home.tollgate(&["deliveries", "--refused", "--json"]);
    assert!(out.status.success(), "{out:?}");
    let listed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let refused = listed["refused"].as_array().unwrap();
    assert_eq!(refused.len(), 1, "{listed}");
    assert_eq!(refused[0]["identity"], "gh-stuck");
    assert!(
        refused[0]["reason"]
            .as_str()
            .unwrap()
            .starts_with("withdrawn"),
        "{listed}"
    );

    // A GitHub delivery over body_limit (never redelivered by GitHub) is listed too.
    let big = vec![b' '; 8192];
    let r = serve.post("/gh", &github_headers("gh-big", "push", &big), &big);
    assert_eq!(r.status, 413);
    let out = home.tollgate(&["deliveries", "--refused", "--json"]);
    let listed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let refused = listed["refused"].as_array().unwrap();
    assert_eq!(refused.len(), 2, "{listed}");
    assert_eq!(refused[1]["identity"], "gh-big");
    assert!(
        refused[1]["reason"]
            .as_str()
            .unwrap()
            .contains("body_limit"),
        "{listed}"
    );
}

/// Point 6: trigger rules on event type and payload fields; a delivery no rule matches is 200
/// `ignored` and admits, marks and runs nothing; the turn gets `TOLLGATE_EVENT_TYPE`, the chosen
/// payload fields and the route's `cwd`.
#[test]
fn trigger_rules_choose_deliveries_and_the_turn_gets_event_type_fields_and_cwd() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.log");
    let work = dir.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let script = format!(
        "echo \"$TOLLGATE_EVENT_TYPE|$REF|$AUTHOR|$(pwd)\" >> '{}'",
        out.display()
    );
    let home = TestHome::new(
        2,
        &format!(
            "[[route]]\npath = \"/gh\"\nadapter = \"github\"\nsecret_env = \"{SECRET_ENV}\"\ntask = \"gh-{{scope}}\"\ncwd = {:?}\nrun = [\"sh\", \"-c\", {script:?}]\n\n[[route.trigger]]\nevent = \"push\"\nmatch = [{{ pointer = \"/ref\", equals = \"refs/heads/main\" }}]\n\n[[route.trigger]]\nevent = [\"create\", \"release\"]\nmatch = [{{ pointer = \"/ref\", glob = \"v*\" }}]\n\n[route.env]\nREF = \"/ref\"\nAUTHOR = \"/pusher/name\"\n",
            work.display().to_string()
        ),
    );
    let serve = Serve::start(&home);
    let post = |id: &str, event: &str, payload: serde_json::Value| {
        let body = serde_json::to_vec(&payload).unwrap();
        let r = serve.post("/gh", &github_headers(id, event, &body), &body);
        assert_eq!(r.status, 200, "{}", r.text());
        r.json()
    };
    let repo = serde_json::json!({"full_name": "acme/app"});
    let main = serde_json::json!({"ref": "refs/heads/main", "repository": repo, "pusher": {"name": "ann"}});
    let dev = serde_json::json!({"ref": "refs/heads/dev", "repository": repo});
    let tag = serde_json::json!({"ref": "v1.0", "repository": repo});

    let ignored = post("x-dev", "push", dev);
    assert_eq!(ignored["status"], "ignored", "{ignored}");
    assert_eq!(post("x-issue", "issues", main.clone())["status"], "ignored");
    assert_eq!(
        post("x-branch", "create", main.clone())["status"],
        "ignored"
    );
    assert_eq!(queued_rows(&home), 0);
    assert_eq!(serve.metric("tollgate_admitted_total"), 0);
    assert_eq!(dedupe_lines(&home), "", "an ignored delivery marks nothing");
    assert_eq!(task_dirs(&home), 0);

    assert_eq!(post("x-main", "push", main)["status"], "accepted");
    assert_eq!(post("x-tag", "create", tag)["status"], "accepted");
    wait_until(60, "two turns to run", || ran(&out).len() == 2);
    let mut lines = ran(&out);
    lines.sort();
    let cwd = work.canonicalize().unwrap().display().to_string();
    assert_eq!(
        lines,
        [
            format!("create|v1.0||{cwd}"),
            format!("push|refs/heads/main|ann|{cwd}")
        ]
    );
    // Ignoring marked nothing: the ignored ids are free, the accepted ones are duplicates.
    assert!(!dedupe_lines(&home).contains("x-dev"));
    assert!(dedupe_lines(&home).contains("x-main"));
}

/// Issue 31, point 9: a GitHub delivery signed with the route's secret whose body is not JSON is
/// an unreadable body: 400, and nothing is queued or run (it used to run as a turn of the
/// route's default scope).
#[test]
fn a_signed_github_body_that_is_not_json_is_answered_400_and_runs_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let ran_log = dir.path().join("ran.log");
    let home = TestHome::new(1, &quick_route("/gh", "github", &ran_log, ""));
    let serve = Serve::start(&home);
    let body = b"definitely not json";
    let r = serve.post("/gh", &github_headers("gh-raw", "push", body), body);
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(queued_rows(&home), 0);
    assert_eq!(
        task_dirs(&home),
        0,
        "a task was made for an unreadable body"
    );
    // A JSON body on the same route still runs, so the refusal is about the body alone.
    let good = br#"{"repository":{"full_name":"acme/app"}}"#;
    let r = serve.post("/gh", &github_headers("gh-json", "push", good), good);
    assert_eq!(r.status, 200, "{}", r.text());
    wait_until(60, "the JSON delivery to run", || ran(&ran_log).len() == 1);
    assert_eq!(ran(&ran_log), vec!["gh-json default".to_string()]);
}
