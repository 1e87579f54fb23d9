//! The sweep list as tables (spec/store.md, "The sweep list"): an earlier version's `sweep.json`
//! is imported by `tollgate sweep` in one transaction and moved aside, and the sweep then works
//! on the rows (its `--json` keeps its shape); a corrupt or oversized file is refused naming it
//! and nothing is imported or moved; a home whose store is not `tollgate.db` (PostgreSQL) keeps
//! its list in the machine-local `sweep.db` and gains no `tollgate.db`.
mod common;

use common::{describe, init_home, tollgate};
use std::path::Path;
use tollgate::exec::sweep;

/// A `sweep.json` listing `worktree` (a copy worktree nobody is inside) and one dead run.
fn old_list(home: &Path, worktree: &Path) -> String {
    format!(
        r#"{{"version":2,"entries":[{{"path":{path:?},"kind":"copy","pack_dir":{path:?},
        "run_id":"old-run","run_pid":7,"item":"a","listed_at_millis":5}}],
        "runs":[{{"run_id":"dead-run","run":{{"pid":4194304,"start_time_micros":1}},
        "unit":{{"cgroup":null,"pgid":null,"marker":{{"var":"TOLLGATE_ITEM","value":"dead-run/","prefix":true}},"leader":null}},
        "worktree_root":{root:?},"grace_millis":0,"started_at_millis":1}}]}}"#,
        path = worktree.display().to_string(),
        root = home.join("worktrees/dead-run").display().to_string(),
    )
}

fn rows(db: &Path, table: &str) -> i64 {
    let conn = rusqlite::Connection::open(db).expect("open");
    conn.query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))
        .expect("count")
}

#[test]
fn an_old_sweep_file_is_imported_once_moved_aside_and_swept_from_the_tables() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = init_home(tmp.path(), 1);
    let worktree = tmp.path().join("left-behind");
    std::fs::create_dir(&worktree).expect("worktree");
    std::fs::write(worktree.join("f"), "x").expect("file");
    let text = old_list(&home, &worktree);
    std::fs::write(home.join("sweep.json"), &text).expect("sweep.json");

    let out = tollgate(&home, &["sweep", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let keys: Vec<&str> = report
        .as_object()
        .expect("object")
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "cgroups_removed",
            "dead_runs",
            "failed",
            "home",
            "kept",
            "removed"
        ],
        "{report}"
    );
    assert_eq!(report["dead_runs"][0]["run_id"], "dead-run", "{report}");
    assert_eq!(report["dead_runs"][0]["forgotten"], true, "{report}");
    assert_eq!(
        report["removed"][0],
        worktree.display().to_string(),
        "{report}"
    );
    assert!(!worktree.exists(), "the listed worktree was removed");
    assert!(!home.join("sweep.json").exists(), "moved aside");
    assert_eq!(
        std::fs::read_to_string(home.join("sweep.json.imported")).expect("kept"),
        text,
        "kept as it was"
    );
    let db = home.join("tollgate.db");
    assert_eq!(rows(&db, "sweep_entries"), 0, "swept rows are deleted");
    assert_eq!(rows(&db, "sweep_runs"), 0);
    assert!(
        !home.join("sweep.db").exists(),
        "a tollgate.db home has no sweep.db"
    );

    // Imported once: a second sweep finds nothing, and an entry added now is a row.
    let out = tollgate(&home, &["sweep", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(report["removed"], serde_json::json!([]), "{report}");
    assert_eq!(report["dead_runs"], serde_json::json!([]), "{report}");
}

#[test]
fn a_corrupt_or_oversized_sweep_file_is_refused_naming_it_and_nothing_is_imported() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = init_home(tmp.path(), 1);
    let worktree = tmp.path().join("listed");
    std::fs::create_dir(&worktree).expect("worktree");
    // A row already in the table stays as it is through both refusals.
    sweep::add(
        &home,
        sweep::SweepEntry {
            worktree: tollgate::exec::worktree::Worktree {
                path: worktree.clone(),
                kind: tollgate::exec::worktree::WorktreeKind::Copy,
                pack_dir: worktree.clone(),
            },
            run_id: "r".into(),
            run_pid: 1,
            item: "a".into(),
            listed_at_millis: 1,
        },
    )
    .expect("add");
    let db = home.join("tollgate.db");
    assert_eq!(rows(&db, "sweep_entries"), 1);

    let corrupt = b"{\"version\":2,\"entries\":[{\"path\":";
    std::fs::write(home.join("sweep.json"), corrupt).expect("corrupt");
    let out = tollgate(&home, &["sweep"]);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("sweep.json"), "{stderr}");
    assert_eq!(
        std::fs::read(home.join("sweep.json")).expect("kept"),
        corrupt
    );
    assert!(!home.join("sweep.json.imported").exists());
    assert!(worktree.exists(), "nothing was swept");
    assert_eq!(rows(&db, "sweep_entries"), 1);

    // One run too many: the import's inserts so far are rolled back with it.
    let runs: Vec<String> = (0..=sweep::MAX_SWEEP_RUNS)
        .map(|n| {
            format!(
                r#"{{"run_id":"r{n}","run":{{"pid":1,"start_time_micros":1}},
                "unit":{{"cgroup":null,"pgid":null,"marker":{{"var":"TOLLGATE_ITEM","value":"r{n}/","prefix":true}},"leader":null}},
                "worktree_root":"/nowhere/r{n}","grace_millis":0,"started_at_millis":1}}"#
            )
        })
        .collect();
    let big = format!(
        r#"{{"version":2,"entries":[],"runs":[{}]}}"#,
        runs.join(",")
    );
    std::fs::write(home.join("sweep.json"), &big).expect("big");
    let err = sweep::list(&home).expect_err("over the bound");
    assert!(matches!(err, sweep::SweepError::RunsFull { .. }), "{err}");
    assert_eq!(rows(&db, "sweep_runs"), 0, "nothing of it was imported");
    assert!(home.join("sweep.json").exists(), "not moved");
    assert_eq!(rows(&db, "sweep_entries"), 1);
}

/// A PostgreSQL home's list is on this machine: `sweep.db`, no `tollgate.db`. The server is
/// never contacted (the URL points nowhere).
#[test]
fn a_postgres_home_keeps_its_sweep_list_in_the_local_sweep_db() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = tmp.path().join("home");
    std::fs::create_dir(&home).expect("home");
    std::fs::write(
        home.join("tollgate.toml"),
        "workers = 1\nstore = \"postgres://nobody@127.0.0.1:1/none\"\n",
    )
    .expect("config");
    let worktree = tmp.path().join("left-behind");
    std::fs::create_dir(&worktree).expect("worktree");
    std::fs::write(home.join("sweep.json"), old_list(&home, &worktree)).expect("sweep.json");

    let out = tollgate(&home, &["sweep", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(report["dead_runs"][0]["run_id"], "dead-run", "{report}");
    assert!(!worktree.exists());
    assert!(home.join("sweep.json.imported").is_file());
    assert!(
        !home.join("tollgate.db").exists(),
        "no tollgate.db for a PostgreSQL home"
    );
    let local = home.join("sweep.db");
    assert!(local.is_file());
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&local)
            .expect("stat")
            .permissions()
            .mode()
            & 0o777,
        0o600
    );
    assert_eq!(rows(&local, "sweep_runs"), 0);
    assert_eq!(rows(&local, "sweep_entries"), 0);
}
