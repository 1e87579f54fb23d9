//! Task and turn records in PostgreSQL (spec/store.md, "PostgreSQL", schema version 5): a home
//! whose store is a PostgreSQL database keeps no record files; `submit --wait`, `status`,
//! `logs`, `wait`, `restart` and `clean` work on the rows; the record files of an earlier home
//! are imported on first use in one transaction and moved aside; a corrupt one is refused naming
//! it and nothing is imported.
//!
//! The server is `TOLLGATE_TEST_POSTGRES` (tests/common/postgres.rs): unset, these tests skip
//! with a message; with `TOLLGATE_REQUIRE_POSTGRES=1` a missing server fails them.
mod common;

use common::postgres::{server, with_queue};
use common::{describe, init_home, tollgate};
use std::path::Path;
use std::process::{Command, Stdio};

fn unique_queue(test: &str) -> String {
    format!(
        "records-{test}-{}-{}",
        std::process::id(),
        tollgate::protocol::slots::SlotToken::generate()
    )
}

/// Points `home`'s config at `url`'s database, queue `queue`.
fn use_postgres(home: &Path, url: &str, queue: &str) {
    let config = home.join("tollgate.toml");
    let mut text = std::fs::read_to_string(&config).expect("config");
    text.push_str(&format!("store = {:?}\n", with_queue(url, queue)));
    std::fs::write(&config, text).expect("write config");
}

/// `(turn rows, settled turn rows, task rows)` of `queue`.
fn rows(url: &str, queue: &str) -> (i64, i64, i64) {
    let mut client = postgres::Client::connect(url, postgres::NoTls).expect("connect");
    let turns = client
        .query_one(
            "SELECT count(*), count(*) FILTER (WHERE settled) FROM turns WHERE queue = $1",
            &[&queue],
        )
        .expect("turns");
    let tasks = client
        .query_one("SELECT count(*) FROM tasks WHERE queue = $1", &[&queue])
        .expect("tasks");
    (turns.get(0), turns.get(1), tasks.get(0))
}

/// Every `task.json` / `turn.json` under the home's `tasks/`.
fn record_files(home: &Path) -> Vec<String> {
    let out = Command::new("find")
        .arg(home.join("tasks"))
        .args(["-name", "task.json", "-o", "-name", "turn.json"])
        .stderr(Stdio::null())
        .output()
        .expect("find");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn a_postgres_home_keeps_its_records_in_the_database_and_every_command_reads_them() {
    let Some(url) = server() else { return };
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = init_home(tmp.path(), 2);
    let queue = unique_queue("e2e");
    use_postgres(&home, &url, &queue);

    let out = tollgate(
        &home,
        &[
            "submit", "--wait", "--task", "pg-rec", "--", "echo", "from-pg",
        ],
    );
    assert!(out.status.success(), "{}", describe(&out));
    assert_eq!(record_files(&home), Vec::<String>::new(), "no record files");
    assert!(!home.join("tollgate.db").exists(), "no tollgate.db");
    assert_eq!(rows(&url, &queue), (1, 1, 1), "one task, one settled turn");

    let out = tollgate(&home, &["status", "pg-rec"]);
    assert!(out.status.success(), "{}", describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("pg-rec"),
        "{}",
        describe(&out)
    );
    let out = tollgate(&home, &["logs", "pg-rec"]);
    assert!(out.status.success(), "{}", describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("from-pg"),
        "{}",
        describe(&out)
    );
    let out = tollgate(&home, &["wait", "pg-rec"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));

    let out = tollgate(&home, &["restart", "pg-rec"]);
    assert!(out.status.success(), "{}", describe(&out));
    let out = tollgate(&home, &["wait", "pg-rec"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert_eq!(rows(&url, &queue), (2, 2, 1), "the restart is turn 2");

    let out = tollgate(&home, &["clean"]);
    assert!(out.status.success(), "{}", describe(&out));
    assert_eq!(
        rows(&url, &queue).0,
        0,
        "clean removed the ended turns' rows"
    );
    assert_eq!(record_files(&home), Vec::<String>::new());
}

/// A home of an earlier version (records as files, [`common::legacy_home`]) switched to
/// PostgreSQL: its record files are imported on the first command and renamed `*.imported`; a
/// second command imports nothing.
#[test]
fn the_record_files_of_a_home_are_imported_once_and_moved_aside() {
    let Some(url) = server() else { return };
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = init_home(tmp.path(), 1);
    common::legacy_home::write(&home, "old", "before");
    let files = record_files(&home);
    assert_eq!(files.len(), 2, "{files:?}");
    let queue = unique_queue("import");
    use_postgres(&home, &url, &queue);

    let out = tollgate(&home, &["status", "old"]);
    assert!(out.status.success(), "{}", describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("old"),
        "{}",
        describe(&out)
    );
    assert_eq!(record_files(&home), Vec::<String>::new(), "moved aside");
    for file in &files {
        assert!(
            Path::new(&format!("{file}.imported")).is_file(),
            "{file}.imported"
        );
    }
    assert_eq!(rows(&url, &queue), (1, 1, 1));
    let out = tollgate(&home, &["logs", "old"]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("before"),
        "{}",
        describe(&out)
    );
    // The next turn numbers on from the imported counter.
    let out = tollgate(
        &home,
        &["submit", "--wait", "--task", "old", "--", "echo", "after"],
    );
    assert!(out.status.success(), "{}", describe(&out));
    assert_eq!(rows(&url, &queue), (2, 2, 1));
}

#[test]
fn a_corrupt_record_file_is_refused_naming_it_and_nothing_is_imported() {
    let Some(url) = server() else { return };
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = init_home(tmp.path(), 1);
    common::legacy_home::write(&home, "old", "");
    let turn = home.join("tasks/old/turns/1/turn.json");
    std::fs::write(&turn, b"{\"version\":1,").expect("corrupt");
    let queue = unique_queue("corrupt");
    use_postgres(&home, &url, &queue);

    let out = tollgate(&home, &["status"]);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(&turn.display().to_string()),
        "{}",
        describe(&out)
    );
    assert_eq!(rows(&url, &queue), (0, 0, 0), "nothing imported");
    assert_eq!(std::fs::read(&turn).expect("kept"), b"{\"version\":1,");
    assert!(home.join("tasks/old/task.json").is_file(), "nothing moved");
}

/// A record written inside a PostgreSQL section is read back inside it and commits with it; one
/// written by a section that fails is rolled back with the section's queue change; an outcome
/// recorded by an internal section is there afterwards (the record layer uses the section's own
/// transaction, spec/store.md "Records in PostgreSQL").
#[test]
fn records_commit_and_roll_back_with_their_postgres_section() {
    use std::collections::BTreeMap;
    use std::time::Duration;
    use tollgate::config::Durability;
    use tollgate::home::Home;
    use tollgate::protocol::slots::steps::Reads;
    use tollgate::queue::records::{register, RecordHome};
    use tollgate::queue::{Commit, PostgresStore, PostgresUrl, Store, StoreError};
    use tollgate::tasks::{self, TurnOutcome};

    let Some(url) = server() else { return };
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = Home::at(tmp.path());
    let queue = unique_queue("section");
    let parsed = PostgresUrl::parse(&url).expect("url");
    let timeout = Duration::from_secs(10);
    register(
        &home,
        RecordHome::Postgres {
            url: parsed.clone(),
            queue: queue.clone(),
            durability: Durability::Fsync,
        },
        timeout,
    );
    let store = PostgresStore::new(parsed, queue.clone(), timeout, Durability::Fsync)
        .for_home(home.clone());
    let turn = store
        .transact_section(Commit::Promise, &Reads::Everything, |_, _, _, tx| {
            let turn = tasks::create_turn_in(
                (&home, tx),
                "t",
                vec!["true".into()],
                Some(tmp.path().to_path_buf()),
                BTreeMap::new(),
                false,
                1,
            )?;
            assert!(
                tasks::load_turn_in(&home, tx, &turn.key)?.is_some(),
                "read inside the section"
            );
            assert_eq!(rows(&url, &queue).0, 0, "not visible before the commit");
            Ok::<_, StoreError>(turn)
        })
        .expect("section");
    assert_eq!(rows(&url, &queue), (1, 0, 1));
    assert!(!home.turn_file(&turn.key).exists(), "no record file");

    let failed: Result<(), StoreError> =
        store.transact_section(Commit::Internal, &Reads::Everything, |q, _, _, tx| {
            q.next_queue_id += 100;
            tasks::end_unrun_in(&home, tx, &turn.key, TurnOutcome::Cancelled, 2)?;
            Err(StoreError::Poisoned)
        });
    assert!(failed.is_err());
    let back = tasks::load_turn(&home, &turn.key)
        .expect("load")
        .expect("record");
    assert!(
        !back.is_settled(),
        "the failed section's write was rolled back"
    );
    assert!(
        store.load().expect("load").next_queue_id < 100,
        "and its queue change"
    );

    store
        .transact_section(Commit::Internal, &Reads::Everything, |_, _, _, tx| {
            tasks::end_unrun_in(&home, tx, &turn.key, TurnOutcome::Cancelled, 2)?;
            Ok::<_, StoreError>(())
        })
        .expect("internal section");
    let back = tasks::load_turn(&home, &turn.key)
        .expect("load")
        .expect("record");
    assert_eq!(back.outcome, Some(TurnOutcome::Cancelled));
    assert_eq!(rows(&url, &queue), (1, 1, 1));
    assert_eq!(tasks::unfinished_turns(&home).expect("unfinished"), []);
}

/// `doctor` on a PostgreSQL home: the schema version, this queue's rows and serve's tables for
/// the queue are checked; a broken row of each kind is reported naming its table and key (exit
/// 1), a healthy home is clean (exit 0), and the check changes nothing.
#[test]
fn doctor_checks_a_postgresql_homes_schema_queue_and_serve_tables() {
    let Some(url) = server() else { return };
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = init_home(tmp.path(), 1);
    let queue = unique_queue("doctor");
    use_postgres(&home, &url, &queue);
    let out = tollgate(&home, &["submit", "--task", "t", "--wait", "--", "true"]);
    assert!(out.status.success(), "{}", describe(&out));
    let mut client = postgres::Client::connect(&url, postgres::NoTls).expect("connect");
    client
        .execute(
            "INSERT INTO serve_payloads (queue, delivery, task, turn, body)
             VALUES ($1, 'good-delivery', 't', 1, '\\x7b7d')",
            &[&queue],
        )
        .expect("a payload of a real turn");
    let doctor = |home: &Path| {
        let out = tollgate(home, &["doctor", "--json"]);
        let report: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("doctor --json: {e}: {}", describe(&out)));
        (out.status.code(), report)
    };
    let (code, report) = doctor(&home);
    assert_eq!(code, Some(0), "{report}");
    let pg = &report["postgres"];
    assert_eq!(pg["queue"], queue.as_str(), "{report}");
    assert_eq!(
        pg["schema_version"],
        tollgate::queue::POSTGRES_SCHEMA_VERSION,
        "{report}"
    );
    assert_eq!(pg["queue_checked"], true, "{report}");
    assert_eq!(pg["table_problems"], serde_json::json!([]), "{report}");
    assert_eq!(
        pg["tables_checked"],
        serde_json::json!(["serve_dedupe", "serve_refused", "serve_handed_off"]),
        "{report}"
    );

    client
        .batch_execute(&format!(
            "INSERT INTO serve_dedupe (queue, key, marked_at_millis, expires_at_millis)
                 VALUES ('{queue}', 'bad-mark', 5000, 4000);
             INSERT INTO serve_payloads (queue, delivery, task, turn, body)
                 VALUES ('{queue}', 'orphan-delivery', 'ghost', 7, '\\x7b7d');
             INSERT INTO serve_refused (queue, body) VALUES ('{queue}', 'not json');
             INSERT INTO serve_handed_off (queue, home, delivery, body)
                 VALUES ('{queue}', '/some/home', 'bad-handoff', '[1]');"
        ))
        .expect("broken rows");
    let refused_id: i64 = client
        .query_one(
            "SELECT max(id) FROM serve_refused WHERE queue = $1",
            &[&queue],
        )
        .expect("refused id")
        .get(0);
    let (code, report) = doctor(&home);
    assert_eq!(code, Some(1), "{report}");
    assert_eq!(report["healthy"], false, "{report}");
    assert_eq!(
        report["postgres"]["table_problems"],
        serde_json::json!([
            "serve_dedupe key 'bad-mark': expires at 4000 ms, not after it was marked at 5000 ms",
            format!("serve_refused id {refused_id}: its body is not a JSON object"),
            "serve_handed_off delivery 'bad-handoff': its body is not a JSON object",
        ]),
        "{report}"
    );
    let out = tollgate(&home, &["doctor"]);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("serve tables: 3 problem(s):"),
        "{}",
        describe(&out)
    );
}
