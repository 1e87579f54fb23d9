//! `tollgate doctor` compares the queue's kept row count (`queue_meta.row_count`, which a
//! section's bound check reads instead of counting) with the rows it counts (spec/store.md,
//! "Doctor").

mod common;

use common::{describe, tollgate};
use std::path::Path;

fn doctor_json(home: &Path) -> (Option<i32>, serde_json::Value) {
    let out = tollgate(home, &["doctor", "--json"]);
    let report = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("doctor --json: {e}: {}", describe(&out)));
    (out.status.code(), report)
}

/// A home whose queue holds two rows: one running (held until the test ends it) and one parked.
fn home_with_rows(dir: &Path) -> std::path::PathBuf {
    let home = common::init_home(dir, 1);
    let release = dir.join("release");
    let hold = format!(
        "while [ ! -e '{}' ]; do sleep 0.02; done",
        release.display()
    );
    let out = tollgate(
        &home,
        &["submit", "--task", "hold", "--", "sh", "-c", &hold],
    );
    assert!(out.status.success(), "{}", describe(&out));
    let out = tollgate(&home, &["submit", "--task", "parked", "--", "true"]);
    assert!(out.status.success(), "{}", describe(&out));
    home
}

fn end_rows(dir: &Path, home: &Path) {
    std::fs::write(dir.join("release"), b"").expect("release the held turn");
    let out = tollgate(home, &["wait", "hold", "parked"]);
    assert!(out.status.success(), "{}", describe(&out));
}

#[test]
fn doctor_finds_the_kept_row_count_equal_to_the_rows_counted() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = home_with_rows(tmp.path());
    let (code, report) = doctor_json(&home);
    assert_eq!(code, Some(0), "{report}");
    assert_eq!(report["queue_row_count"]["kept"], 2, "{report}");
    assert_eq!(report["queue_row_count"]["counted"], 2, "{report}");
    assert!(report["queue_row_count_problem"].is_null(), "{report}");
    let out = tollgate(&home, &["doctor"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("queue row count: ok (2)"),
        "{}",
        describe(&out)
    );
    end_rows(tmp.path(), &home);
}

#[test]
fn doctor_reports_a_kept_row_count_that_disagrees_with_the_rows_and_exits_1() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = home_with_rows(tmp.path());
    let db = home.join("tollgate.db");
    {
        let conn = rusqlite::Connection::open(&db).expect("open the database");
        conn.execute("UPDATE queue_meta SET row_count = 7 WHERE id = 1", [])
            .expect("change the count by hand");
    }
    let (code, report) = doctor_json(&home);
    assert_eq!(code, Some(1), "{report}");
    assert_eq!(report["healthy"], false, "{report}");
    assert_eq!(report["queue_row_count"]["kept"], 7, "{report}");
    assert_eq!(report["queue_row_count"]["counted"], 2, "{report}");
    let problem = report["queue_row_count_problem"]
        .as_str()
        .unwrap_or_else(|| panic!("no row count problem: {report}"));
    assert!(
        problem.contains("tollgate.db")
            && problem.contains("queue_meta.row_count is 7, but the queue has 2 row(s)"),
        "{problem}"
    );
    let out = tollgate(&home, &["doctor"]);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("queue row count: ") && text.contains("problems found"),
        "{}",
        describe(&out)
    );
    // Put back, so the turns end through the store as usual.
    {
        let conn = rusqlite::Connection::open(&db).expect("open the database");
        conn.execute("UPDATE queue_meta SET row_count = 2 WHERE id = 1", [])
            .expect("restore the count");
    }
    end_rows(tmp.path(), &home);
}
