//! serve's files of an earlier version (spec/ingress.md, "Durable state"): `serve/dedupe.jsonl`,
//! `serve/refused.jsonl` and `serve/handed-off.json` are imported into `tollgate.db` on first use
//! in one transaction and moved aside (kept, never deleted); a corrupt one is refused with its
//! path and nothing is imported or moved.
#![cfg(feature = "serve")]

mod serve_support;

use serve_support::*;

fn refused_line(identity: &str) -> String {
    format!(
        "{{\"at_millis\":1,\"route\":\"/gh\",\"adapter\":\"github\",\"tenant\":\"42\",\"identity\":\"{identity}\",\"event\":\"push\",\"reason\":\"withdrawn: no room\"}}\n"
    )
}

fn quick_route(ran: &std::path::Path) -> String {
    format!(
        "[[route]]\npath = \"/one\"\nadapter = \"generic\"\nsecret_env = \"{SECRET_ENV}\"\ntask = \"job-{{scope}}\"\nrun = [\"sh\", \"-c\", \"echo $TOLLGATE_EVENT_ID >> '{}'\"]\n",
        ran.display()
    )
}

#[test]
fn old_serve_files_are_imported_once_and_moved_aside() {
    let dir = tempfile::tempdir().unwrap();
    let ran_log = dir.path().join("ran.log");
    let home = TestHome::new(2, &quick_route(&ran_log));
    let serve_dir = home.home.join("serve");
    std::fs::create_dir_all(&serve_dir).unwrap();
    let key = serde_json::json!(["/one", "generic", "default", "seen"]).to_string();
    let mark = serde_json::json!({"identity": key, "marked_at_millis": now_secs() * 1000 - 1000});
    std::fs::write(serve_dir.join("dedupe.jsonl"), format!("{mark}\n")).unwrap();
    std::fs::write(serve_dir.join("refused.jsonl"), refused_line("d-1")).unwrap();
    std::fs::write(serve_dir.join("handed-off.json"), "[]\n").unwrap();

    let out = home.tollgate(&["deliveries", "--refused", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(listed["refused"][0]["identity"], "d-1", "{listed}");
    for name in ["dedupe.jsonl", "refused.jsonl", "handed-off.json"] {
        assert!(!serve_dir.join(name).exists(), "{name} moved aside");
        assert!(
            serve_dir.join(format!("{name}.imported")).is_file(),
            "{name} kept as {name}.imported"
        );
    }
    // Imported once: listing again shows the one refusal, not two.
    let out = home.tollgate(&["deliveries", "--refused", "--json"]);
    let listed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(listed["refused"].as_array().unwrap().len(), 1, "{listed}");

    // The imported mark still makes its redelivery a duplicate; a new one is accepted and runs.
    let serve = Serve::start(&home);
    let body = b"{}";
    let r = serve.post("/one", &generic_headers("seen", None, body), body);
    assert_eq!(r.json()["status"], "duplicate", "{}", r.text());
    let r = serve.post("/one", &generic_headers("new", None, body), body);
    assert_eq!(r.json()["status"], "accepted", "{}", r.text());
    wait_until(60, "the new delivery to run", || !ran(&ran_log).is_empty());
    assert_eq!(ran(&ran_log), ["new"]);
}

#[test]
fn a_corrupt_old_file_is_refused_with_its_path_and_nothing_is_imported() {
    let dir = tempfile::tempdir().unwrap();
    let home = TestHome::new(2, &quick_route(&dir.path().join("ran.log")));
    let serve_dir = home.home.join("serve");
    std::fs::create_dir_all(&serve_dir).unwrap();
    let dedupe = serve_dir.join("dedupe.jsonl");
    // A bad line that is not the torn last one: corrupt, not a crash mid-append.
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
    // Nothing imported, nothing moved.
    assert_eq!(std::fs::read_to_string(&dedupe).unwrap(), bad);
    assert_eq!(
        std::fs::read_to_string(serve_dir.join("refused.jsonl")).unwrap(),
        refused_line("d-1")
    );
    assert!(!serve_dir.join("refused.jsonl.imported").exists());
    let db = home.home.join("tollgate.db");
    if db.is_file() {
        let conn =
            rusqlite::Connection::open_with_flags(&db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
                .unwrap();
        let count = |table: &str| -> i64 {
            conn.query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))
                .unwrap_or(0)
        };
        assert_eq!(count("serve_refused"), 0);
        assert_eq!(count("serve_dedupe"), 0);
    }
}
