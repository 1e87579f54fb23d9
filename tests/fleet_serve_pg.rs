//! serve's tables in PostgreSQL (issue 14 point 4; spec/admission.md "Across instances",
//! spec/store.md "What lives where"): two `serve` instances on two homes with distinct `host`s
//! and one queue in one database. The dedupe marks are one table keyed by `(queue, key)`,
//! written by insert-if-absent in the group commit's transaction that queues the delivery's turn
//! (A2 and A3 across instances: a delivery id is accepted once across the fleet, the other
//! instance answers duplicate only for a durable turn, and every acknowledged one runs once),
//! and the strategies' decisions (`queue`/`debounce` supersession, `concurrent=N`; A4) are made
//! in the one queue's sections whichever home submits.
//!
//! The server is `TOLLGATE_TEST_POSTGRES`, as in tests/fleet_postgres.rs: unset, every test here
//! skips with a message; with `TOLLGATE_REQUIRE_POSTGRES=1` a missing server fails them.
#![cfg(feature = "serve")]

mod common;
mod serve_support;

use common::fifo::{gate, release};
use common::postgres::{server, unique, with_queue};
use serde_json::Value;
use serve_support::*;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::Barrier;

/// A home of `workers` slots on queue `queue` of the test server, as host `host`, with `rest`
/// (routes) after the top-level settings.
fn pg_home(url: &str, queue: &str, host: &str, workers: usize, rest: &str) -> TestHome {
    let store = with_queue(url, queue);
    TestHome::new(
        workers,
        &format!("store = {store:?}\nhost = {host:?}\n{rest}"),
    )
}

/// The marks of `queue` in the database's `serve_dedupe`.
fn marks(url: &str, queue: &str) -> i64 {
    let mut client = postgres::Client::connect(url, postgres::NoTls).expect("connect");
    client
        .query_one(
            "SELECT count(*) FROM serve_dedupe WHERE queue = $1",
            &[&queue],
        )
        .expect("count marks")
        .get(0)
}

fn accepted_or_duplicate(r: &Response) -> String {
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()["status"].as_str().unwrap_or("?").to_string()
}

#[test]
fn one_delivery_sent_to_two_serves_of_one_queue_is_accepted_once_fleet_wide() {
    let Some(url) = server() else { return };
    let queue = unique("serve-dedupe");
    let shared = tempfile::tempdir().unwrap();
    let ran_log = shared.path().join("ran.log");
    let release = shared.path().join("release");
    std::fs::write(&release, b"").unwrap();
    let route = format!(
        "[serve]\nmax_detached = 32\n\n{}",
        held_route("/hooks/f", "generic", &release, &ran_log, "")
    );
    let a = pg_home(&url, &queue, "serve-a", 4, &route);
    let b = pg_home(&url, &queue, "serve-b", 4, &route);
    let serve_a = Serve::start(&a);
    let serve_b = Serve::start(&b);
    let body = br#"{"event":"push"}"#;
    let mut expected = Vec::new();

    // One after the other: the first instance accepts, the second finds the mark (its own gate
    // never saw the delivery) and answers duplicate, in both orders.
    for (id, first, second) in [("s1", &serve_a, &serve_b), ("s2", &serve_b, &serve_a)] {
        let headers = generic_headers(id, None, body);
        let one = first.post("/hooks/f", &headers, body);
        assert_eq!(accepted_or_duplicate(&one), "accepted", "{id} first");
        let two = second.post("/hooks/f", &headers, body);
        assert_eq!(accepted_or_duplicate(&two), "duplicate", "{id} second");
        expected.push(id.to_string());
    }

    // Concurrently: each id sent to both at once; exactly one accepts it.
    const CONCURRENT: usize = 8;
    let barrier = Barrier::new(2 * CONCURRENT);
    let answers: Vec<(String, String, String)> = std::thread::scope(|s| {
        let mut handles = Vec::new();
        for i in 0..CONCURRENT {
            for (name, serve) in [("a", &serve_a), ("b", &serve_b)] {
                let barrier = &barrier;
                handles.push(s.spawn(move || {
                    let id = format!("c{i}");
                    let headers = generic_headers(&id, None, body);
                    barrier.wait();
                    let r = serve.post("/hooks/f", &headers, body);
                    (id, name.to_string(), accepted_or_duplicate(&r))
                }));
            }
        }
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for i in 0..CONCURRENT {
        let id = format!("c{i}");
        let of_id: Vec<&str> = answers
            .iter()
            .filter(|(x, ..)| *x == id)
            .map(|(_, _, status)| status.as_str())
            .collect();
        let accepted = of_id.iter().filter(|s| **s == "accepted").count();
        let duplicate = of_id.iter().filter(|s| **s == "duplicate").count();
        assert_eq!(
            (accepted, duplicate),
            (1, 1),
            "{id}: one instance accepts, the other answers duplicate: {answers:?}"
        );
        expected.push(id);
    }

    wait_until(120, "every accepted delivery to run", || {
        ran(&ran_log).len() >= expected.len()
    });
    for serve in [&serve_a, &serve_b] {
        wait_until(60, "every delivery's capacity to come back", || {
            serve.metric("tollgate_retained") == 0
        });
    }
    let mut ran_ids = ran(&ran_log);
    ran_ids.sort();
    expected.sort();
    assert_eq!(
        ran_ids, expected,
        "each delivery ran exactly once fleet-wide"
    );
    assert_eq!(
        marks(&url, &queue),
        i64::try_from(expected.len()).unwrap(),
        "one mark per accepted delivery, in the queue's table"
    );

    // A restarted instance still answers duplicate for a delivery the other accepted.
    drop(serve_b);
    let serve_b = Serve::start(&b);
    let again = serve_b.post("/hooks/f", &generic_headers("s1", None, body), body);
    assert_eq!(accepted_or_duplicate(&again), "duplicate");
}

fn tollgate(home: &Path, args: &[&str]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .arg("--home")
        .arg(home)
        .args(args)
        .env_remove("TOLLGATE_STORE")
        .env_remove("TOLLGATE_HOST")
        .output()
        .unwrap()
}

fn submit(home: &Path, args: &[&str]) {
    let mut all = vec!["submit"];
    all.extend_from_slice(args);
    let out = tollgate(home, &all);
    assert!(out.status.success(), "{out:?}");
}

/// The states of `task`'s turns in turn order, as `status TASK --json` of `home` shows them.
fn turn_states(home: &Path, task: &str) -> Vec<String> {
    let out = tollgate(home, &["status", task, "--json"]);
    assert!(out.status.success(), "{out:?}");
    let view: Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut turns: Vec<(u64, String)> = view["tasks"][0]["turns"]
        .as_array()
        .map(|turns| {
            turns
                .iter()
                .map(|t| {
                    (
                        t["turn"].as_u64().unwrap_or(0),
                        t["state"].as_str().unwrap_or("?").to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    turns.sort();
    turns.into_iter().map(|(_, state)| state).collect()
}

#[test]
fn queue_supersession_is_decided_across_two_hosts_of_one_queue() {
    let Some(url) = server() else { return };
    let queue = unique("serve-strategy-q");
    let a = pg_home(&url, &queue, "host-a", 4, "");
    let b = pg_home(&url, &queue, "host-b", 4, "");
    let hold = gate(a.dir.path(), "hold-q");
    submit(
        &a.home,
        &[
            "--task",
            "q",
            "--strategy",
            "queue",
            "--",
            "cat",
            hold.to_str().unwrap(),
        ],
    );
    wait_until(30, "turn 1 running", || {
        turn_states(&b.home, "q").first().map(String::as_str) == Some("running")
    });
    // Turns 2..5 from both hosts: each supersedes the one parked before it, whichever host
    // queued that one (the decision is the one queue's, in its section).
    for (i, home) in [(2, &b), (3, &a), (4, &b), (5, &a)] {
        submit(&home.home, &["--task", "q", "--", "echo", &i.to_string()]);
    }
    let expected = [
        "running",
        "superseded",
        "superseded",
        "superseded",
        "queued",
    ];
    assert_eq!(turn_states(&a.home, "q"), expected);
    assert_eq!(
        turn_states(&b.home, "q"),
        expected,
        "both hosts see one queue"
    );
    release(&hold);
    wait_until(60, "turn 5 completed", || {
        turn_states(&b.home, "q").get(4).map(String::as_str) == Some("completed")
    });
    assert_eq!(
        turn_states(&a.home, "q"),
        [
            "completed",
            "superseded",
            "superseded",
            "superseded",
            "completed"
        ]
    );
}

#[test]
fn concurrent_two_holds_across_two_hosts_of_one_queue() {
    let Some(url) = server() else { return };
    let queue = unique("serve-strategy-c");
    let a = pg_home(&url, &queue, "host-a", 4, "");
    let b = pg_home(&url, &queue, "host-b", 4, "");
    let holds: Vec<PathBuf> = (1..=4)
        .map(|i| gate(a.dir.path(), &format!("hold-c{i}")))
        .collect();
    for (i, hold) in holds.iter().enumerate() {
        let home = if i % 2 == 0 { &a.home } else { &b.home };
        let mut args = vec!["--task", "c"];
        if i == 0 {
            args.extend(["--strategy", "concurrent=2"]);
        }
        args.extend(["--", "cat", hold.to_str().unwrap()]);
        submit(home, &args);
    }
    let running = |home: &Path| {
        turn_states(home, "c")
            .iter()
            .filter(|s| *s == "running" || *s == "starting")
            .count()
    };
    wait_until(30, "two running", || running(&a.home) == 2);
    // Turns 3 (host a) and 4 (host b) wait for one of the two slots of the task, fleet-wide.
    let states = turn_states(&b.home, "c");
    assert_eq!(
        states.iter().filter(|s| *s == "queued").count(),
        2,
        "two wait: {states:?}"
    );
    let mut max_running = 0;
    for hold in &holds {
        max_running = max_running.max(running(&a.home)).max(running(&b.home));
        release(hold);
        max_running = max_running.max(running(&a.home)).max(running(&b.home));
    }
    wait_until(60, "all completed", || {
        turn_states(&a.home, "c").iter().all(|s| s == "completed")
    });
    assert!(
        max_running <= 2,
        "saw {max_running} running turns of a concurrent=2 task across two hosts"
    );
}

#[test]
fn debounce_supersedes_across_two_hosts_and_starts_only_the_last_turn() {
    let Some(url) = server() else { return };
    let queue = unique("serve-strategy-d");
    let a = pg_home(&url, &queue, "host-a", 2, "");
    let b = pg_home(&url, &queue, "host-b", 2, "");
    // A quiet period long enough for three commands on a loaded machine.
    for (i, home) in [(1, &a), (2, &b), (3, &b)] {
        let n = i.to_string();
        let mut args = vec!["--task", "d"];
        if i == 1 {
            args.extend(["--strategy", "debounce=2s"]);
        }
        args.extend(["--", "echo", n.as_str()]);
        submit(&home.home, &args);
    }
    assert_eq!(
        turn_states(&a.home, "d"),
        ["superseded", "superseded", "delayed"],
        "host a sees host b's submits supersede its own"
    );
    wait_until(60, "the debounced turn completed", || {
        turn_states(&a.home, "d").get(2).map(String::as_str) == Some("completed")
    });
    assert_eq!(
        turn_states(&b.home, "d"),
        ["superseded", "superseded", "completed"]
    );
}

fn refused_line(identity: &str) -> String {
    format!(
        "{{\"at_millis\":1,\"route\":\"/gh\",\"adapter\":\"github\",\"tenant\":\"42\",\"identity\":\"{identity}\",\"event\":\"push\",\"reason\":\"withdrawn: no room\"}}\n"
    )
}

fn quick_route(ran: &Path) -> String {
    format!(
        "[[route]]\npath = \"/one\"\nadapter = \"generic\"\nsecret_env = \"{SECRET_ENV}\"\ntask = \"job-{{scope}}\"\nrun = [\"sh\", \"-c\", \"echo $TOLLGATE_EVENT_ID >> '{}'\"]\n",
        ran.display()
    )
}

fn count(url: &str, table: &str, queue: &str) -> i64 {
    let mut client = postgres::Client::connect(url, postgres::NoTls).expect("connect");
    client
        .query_one(
            &format!("SELECT count(*) FROM {table} WHERE queue = $1"),
            &[&queue],
        )
        .expect("count")
        .get(0)
}

#[test]
fn a_postgres_homes_old_serve_files_are_imported_once_and_the_marks_are_the_fleets() {
    let Some(url) = server() else { return };
    let queue = unique("serve-import");
    let shared = tempfile::tempdir().unwrap();
    let ran_log = shared.path().join("ran.log");
    let a = pg_home(&url, &queue, "import-a", 2, &quick_route(&ran_log));
    let b = pg_home(&url, &queue, "import-b", 2, &quick_route(&ran_log));
    let serve_dir = a.home.join("serve");
    std::fs::create_dir_all(&serve_dir).unwrap();
    let key = serde_json::json!(["/one", "generic", "default", "seen"]).to_string();
    let mark = serde_json::json!({"identity": key, "marked_at_millis": now_secs() * 1000 - 1000});
    std::fs::write(serve_dir.join("dedupe.jsonl"), format!("{mark}\n")).unwrap();
    std::fs::write(serve_dir.join("refused.jsonl"), refused_line("d-1")).unwrap();
    std::fs::write(serve_dir.join("handed-off.json"), "[]\n").unwrap();

    let out = a.tollgate(&["deliveries", "--refused", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(listed["refused"][0]["identity"], "d-1", "{listed}");
    for name in ["dedupe.jsonl", "refused.jsonl", "handed-off.json"] {
        assert!(!serve_dir.join(name).exists(), "{name} moved aside");
        assert!(
            serve_dir.join(format!("{name}.imported")).is_file(),
            "{name} kept as {name}.imported"
        );
    }
    assert_eq!(count(&url, "serve_dedupe", &queue), 1);
    assert_eq!(count(&url, "serve_imports", &queue), 3);
    // Imported once: listing again (from either home of the queue) shows one refusal.
    for home in [&a, &b] {
        let out = home.tollgate(&["deliveries", "--refused", "--json"]);
        let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(listed["refused"].as_array().unwrap().len(), 1, "{listed}");
    }

    // The mark imported from home a makes the redelivery a duplicate at home b's serve.
    let serve = Serve::start(&b);
    let body = b"{}";
    let r = serve.post("/one", &generic_headers("seen", None, body), body);
    assert_eq!(r.json()["status"], "duplicate", "{}", r.text());
    let r = serve.post("/one", &generic_headers("new", None, body), body);
    assert_eq!(r.json()["status"], "accepted", "{}", r.text());
    wait_until(60, "the new delivery to run", || !ran(&ran_log).is_empty());
    assert_eq!(ran(&ran_log), ["new"]);
}

#[test]
fn a_corrupt_old_serve_file_of_a_postgres_home_is_refused_naming_it_and_nothing_is_imported() {
    let Some(url) = server() else { return };
    let queue = unique("serve-import-bad");
    let dir = tempfile::tempdir().unwrap();
    let home = pg_home(
        &url,
        &queue,
        "import-bad",
        2,
        &quick_route(&dir.path().join("ran")),
    );
    // The schema exists before the files do (a refused import never connects).
    let out = home.tollgate(&["status"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let serve_dir = home.home.join("serve");
    std::fs::create_dir_all(&serve_dir).unwrap();
    let dedupe = serve_dir.join("dedupe.jsonl");
    let bad = "not json\n{\"identity\":\"[\\\"x\\\"]\",\"marked_at_millis\":1}\n";
    std::fs::write(&dedupe, bad).unwrap();
    std::fs::write(serve_dir.join("refused.jsonl"), refused_line("d-1")).unwrap();
    for args in [
        &["deliveries", "--refused"][..],
        &["serve", "--listen", "127.0.0.1:0"][..],
    ] {
        let out = home.tollgate(args);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(&dedupe.display().to_string()),
            "{args:?} names the file: {stderr}"
        );
    }
    assert_eq!(std::fs::read_to_string(&dedupe).unwrap(), bad);
    assert!(!serve_dir.join("refused.jsonl.imported").exists());
    assert_eq!(count(&url, "serve_refused", &queue), 0);
    assert_eq!(count(&url, "serve_dedupe", &queue), 0);
    assert_eq!(count(&url, "serve_imports", &queue), 0);
}

/// Not a timed test: a figure for spec/store.md. Accepted deliveries per second at 16
/// connections, 96 deliveries into one task, on a PostgreSQL home and on a SQLite home, one run
/// each, with
/// `cargo test --test fleet_serve_pg measure -- --ignored --nocapture`.
#[test]
#[ignore]
fn measure_accepts_per_second_on_postgres_and_sqlite() {
    let Some(url) = server() else { return };
    const CONNECTIONS: usize = 16;
    const PER_CONNECTION: usize = 6;
    let shared = tempfile::tempdir().unwrap();
    let ran_log = shared.path().join("ran.log");
    // One task (`concurrent=1`): the deliveries park behind its running turn, so the figure is
    // the accept path's (gate, group commit, answer), not the runners' sections competing for
    // the queue's lock.
    let route = format!(
        "[serve]\nmax_detached = 256\n\n{}",
        quick_route(&ran_log).replace("job-{scope}", "one")
    );
    let queue = unique("serve-measure");
    let homes = [
        ("postgres", pg_home(&url, &queue, "measure", 4, &route)),
        ("sqlite", TestHome::new(4, &route)),
    ];
    for (name, home) in &homes {
        let serve = Serve::start(home);
        let body = b"{}";
        let started = std::time::Instant::now();
        std::thread::scope(|s| {
            for c in 0..CONNECTIONS {
                let serve = &serve;
                s.spawn(move || {
                    for i in 0..PER_CONNECTION {
                        let id = format!("{name}-{c}-{i}");
                        let r = serve.post("/one", &generic_headers(&id, None, body), body);
                        assert_eq!(r.json()["status"], "accepted", "{}", r.text());
                    }
                });
            }
        });
        let elapsed = started.elapsed();
        let total = CONNECTIONS * PER_CONNECTION;
        eprintln!(
            "{name}: {total} accepted at {CONNECTIONS} connections in {elapsed:?}: {:.0}/s",
            total as f64 / elapsed.as_secs_f64()
        );
        wait_until(120, "every delivery to run", || {
            ran(&ran_log).iter().filter(|l| l.starts_with(name)).count() >= total
        });
    }
}

/// A delivery's turn that another host of the queue runs still reads its payload: serve on a
/// drained host queues the turn (and starts nothing), a reconcile on the other host starts it, and
/// the command finds the body through `TOLLGATE_PAYLOAD` in that host's own home (copied from the
/// queue's `serve_payloads`), not at the path in the home that queued it.
#[test]
fn a_delivery_run_by_another_host_reads_its_payload_in_that_hosts_home() {
    let Some(url) = server() else { return };
    let queue = unique("serve-payload");
    let shared = tempfile::tempdir().unwrap();
    let body_out = shared.path().join("body");
    let path_out = shared.path().join("path");
    let script = format!(
        "cat \"$TOLLGATE_PAYLOAD\" > '{}.tmp' && mv '{}.tmp' '{}'; printf '%s' \"$TOLLGATE_PAYLOAD\" > '{}.tmp' && mv '{}.tmp' '{}'",
        body_out.display(),
        body_out.display(),
        body_out.display(),
        path_out.display(),
        path_out.display(),
        path_out.display()
    );
    let route = format!(
        "[[route]]\npath = \"/hooks/p\"\nadapter = \"generic\"\nsecret_env = \"{SECRET_ENV}\"\ntask = \"pay\"\nrun = [\"sh\", \"-c\", {script:?}]\n"
    );
    let a = pg_home(&url, &queue, "payload-a", 2, &route);
    let b = pg_home(&url, &queue, "payload-b", 2, &route);
    let drained = a.tollgate(&["drain", "payload-a"]);
    assert!(
        drained.status.success(),
        "drain: {}",
        String::from_utf8_lossy(&drained.stderr)
    );
    let serve = Serve::start(&a);
    let body = br#"{"event":"push","n":42}"#;
    let answer = serve.post("/hooks/p", &generic_headers("p1", None, body), body);
    assert_eq!(accepted_or_duplicate(&answer), "accepted");
    let on_a: Vec<Value> = a.status()["turns"].as_array().cloned().unwrap_or_default();
    assert!(
        on_a.iter().all(|t| t["host"] != "payload-a"),
        "a drained host started the delivery's turn: {on_a:?}"
    );
    let reconciled = b.tollgate(&["reconcile"]);
    assert!(
        reconciled.status.success(),
        "reconcile on b: {}",
        String::from_utf8_lossy(&reconciled.stderr)
    );
    wait_until(60, "the delivery's turn to run on host b", || {
        path_out.exists()
    });
    let named = std::fs::read_to_string(&path_out).unwrap();
    let b_home = std::fs::canonicalize(&b.home).unwrap();
    let named_canonical = std::fs::canonicalize(&named).unwrap_or_else(|_| PathBuf::from(&named));
    assert!(
        named_canonical.starts_with(&b_home) || Path::new(&named).starts_with(&b.home),
        "TOLLGATE_PAYLOAD names {named}, not a file in host b's home {}",
        b.home.display()
    );
    wait_until(10, "the command to copy the payload", || body_out.exists());
    assert_eq!(std::fs::read(&body_out).unwrap(), body.to_vec());
}
