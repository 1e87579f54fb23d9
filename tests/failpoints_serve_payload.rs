//! A delivery's payload across a crash between its 200 and its file (spec/ingress.md, "The
//! accept makes no file"; issue 12, i12-serve2): the group commit writes the body only into
//! `serve_payloads`, so a `serve` killed after the commit, before the turn's runner started, left
//! no payload file and no turn folder; the next `serve` runs the turn, whose runner writes the
//! file from the row before the command starts, and the command reads the whole body.
//!
//! The crash is the failpoint `serve::after_reserve` with the `return` action, which aborts the
//! process (no unwinding, no cleanup: a SIGKILL's effect at exactly that point).
#![cfg(feature = "failpoints")]
#![cfg(feature = "serve")]

mod common;
mod serve_support;

use common::http::post_raw;
use serve_support::*;

#[test]
fn a_serve_killed_before_the_payload_file_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let seen = dir.path().join("seen");
    // The command copies what `TOLLGATE_PAYLOAD` names (it fails if the file is not there).
    let script = format!("cat \"$TOLLGATE_PAYLOAD\" > '{}'", seen.display());
    let home = TestHome::new(
        2,
        &format!(
            "[serve]\nmax_detached = 4\ndetach_timeout = \"10m\"\n\n[[route]]\npath = \"/hooks/p\"\n\
             adapter = \"generic\"\nsecret_env = \"{SECRET_ENV}\"\ntask = \"pay-{{scope}}\"\n\
             run = [\"sh\", \"-c\", {script:?}]\n"
        ),
    );
    let body = br#"{"ref":"refs/heads/main","n":"the body of p1"}"#;
    let headers = generic_headers("p1", None, body);

    let mut cmd = Serve::command(&home);
    cmd.env("FAILPOINTS", "serve::after_reserve=return");
    let mut doomed = Serve::spawn(cmd);
    let raw = post_raw(&doomed.addr, "/hooks/p", &headers, body)
        .expect("the serve is listening and reads the request");
    let text = String::from_utf8_lossy(&raw);
    // The answer does not wait for the spawn: it left, or the serve died before it did.
    assert!(
        raw.is_empty() || (text.starts_with("HTTP/1.1 200") && text.contains("\"accepted\"")),
        "no answer, or the 200 of a durable delivery: {text:?}"
    );
    let code = doomed.wait_exit(30);
    assert_ne!(code, 0, "the failpoint aborted the serve");
    assert!(!seen.exists(), "the turn never started");
    let folder = home.home.join("tasks/pay-p1/turns/1");
    assert!(
        !folder.join("payload").exists() && !folder.exists(),
        "the accept wrote no payload file and made no turn folder"
    );

    // The next serve recovers the row; the runner writes the payload from the database.
    let serve = Serve::start(&home);
    wait_until(60, "the recovered delivery to complete", || {
        home.log()
            .iter()
            .any(|l| l["kind"] == "outcome" && l["identity"] == "p1" && l["outcome"] == "completed")
    });
    assert_eq!(
        std::fs::read(&seen).expect("the command read its payload"),
        body.to_vec(),
        "the command saw the whole body"
    );
    assert_eq!(
        std::fs::read(folder.join("payload")).expect("the runner wrote the file"),
        body.to_vec()
    );
    wait_until(30, "the delivery's capacity to come back", || {
        serve.metric("tollgate_retained") == 0
    });
}
