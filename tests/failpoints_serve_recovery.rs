//! Serve's recovery (spec/ingress.md, "Lifecycle"; A3 across serve crashes): a `serve` that dies
//! between reserving a delivery's row and starting its runner leaves a row only a dead process
//! holds. The restarted `serve` must run that delivery's turn to completion itself (no manual
//! `reconcile`), answer the platform's retry as a duplicate, and cancel nothing.
//!
//! The crash is the failpoint `serve::after_reserve` with the `return` action, which aborts the
//! process (no unwinding, no cleanup: a SIGKILL's effect at exactly that point).
#![cfg(feature = "failpoints")]
#![cfg(feature = "serve")]

mod common;
mod serve_support;

use common::http::post_raw;
use serve_support::*;

/// Starts `serve` with `FAILPOINTS` set, and returns it with the address it listens on.
fn serve_with_failpoint(home: &TestHome, failpoints: &str) -> Serve {
    let mut cmd = Serve::command(home);
    cmd.env("FAILPOINTS", failpoints);
    Serve::spawn(cmd)
}

#[test]
fn a_serve_killed_after_reserving_a_row_has_its_delivery_run_by_the_next_serve() {
    let dir = tempfile::tempdir().unwrap();
    let ran_log = dir.path().join("ran.log");
    let release = dir.path().join("release");
    // The turn runs at once (the release file exists): the test waits on its end, not a clock.
    std::fs::write(&release, b"").unwrap();
    let home = TestHome::new(
        2,
        &format!(
            // A detach timeout far beyond the test: a turn that never starts is not "rescued" by
            // it, and nothing may end as cancelled or timed-out.
            "[serve]\nmax_detached = 4\ndetach_timeout = \"10m\"\n\n{}",
            held_route("/hooks/r", "generic", &release, &ran_log, "")
        ),
    );
    let body = b"{}";
    let headers = generic_headers("r1", None, body);

    // The first serve dies in the accept sequence, right after its slot reservation is durable.
    // The answer does not wait for the runner's spawn (spec/ingress.md, "Group commit"): the
    // delivery was committed before the spawn, so the serve either answered 200 or died before
    // its answer left; never anything else.
    let mut doomed = serve_with_failpoint(&home, "serve::after_reserve=return");
    let raw = post_raw(&doomed.addr, "/hooks/r", &headers, body)
        .expect("the serve is listening and reads the request");
    let text = String::from_utf8_lossy(&raw);
    assert!(
        raw.is_empty() || (text.starts_with("HTTP/1.1 200") && text.contains("\"accepted\"")),
        "no answer, or the 200 of a durable delivery: {text:?}"
    );
    let code = doomed.wait_exit(30);
    assert_ne!(code, 0, "the failpoint aborted the serve");
    assert!(ran(&ran_log).is_empty(), "the turn never started");
    // Read through the library, not `status`: status repairs what it finds dead (it would start
    // the row itself, and a fast turn could end before the next serve looks: nothing to readopt).
    let queue = {
        let config = tollgate::config::Config::load(&home.home.join("tollgate.toml"))
            .unwrap()
            .unwrap_or_default();
        tollgate::queue::HomeStore::for_home(&tollgate::home::Home::at(&home.home), &config)
            .load()
            .unwrap()
    };
    assert!(
        queue.entries.iter().any(|e| e.key.task == "job-r1"),
        "the reserved row outlived its serve: {queue:?}"
    );

    // A new serve recovers the orphaned row: the turn runs and completes.
    let serve = Serve::start(&home);
    assert_eq!(serve.metric("tollgate_readopted_total"), 1);
    // The platform never got its answer and retries: the delivery is already durable, so the
    // retry is a duplicate (it must not run twice).
    let retry = serve.post("/hooks/r", &headers, body);
    assert_eq!(retry.status, 200, "{}", retry.text());
    assert_eq!(retry.json()["status"], "duplicate");

    wait_until(60, "the recovered delivery to complete", || {
        home.log().iter().any(|l| {
            l["kind"] == "outcome"
                && l["identity"] == "r1"
                && l["outcome"] == "completed"
                && l["readopted"] == true
        })
    });
    assert_eq!(ran(&ran_log), vec!["r1".to_string()], "it ran exactly once");
    let log = home.log();
    assert!(
        !log.iter().any(|l| l["kind"] == "outcome"
            && (l["outcome"] == "cancelled" || l["outcome"] == "timed-out")),
        "nothing was cancelled: {log:?}"
    );
    wait_until(30, "the delivery's capacity to come back", || {
        serve.metric("tollgate_retained") == 0
    });
}
