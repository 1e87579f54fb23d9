//! A step's refusal about a record names where that record lives (the database and the record's
//! place), as every error about a state file does: here a task whose turn numbers are used up.

use std::collections::BTreeMap;
use tollgate::home::Home;
use tollgate::process::{ProcLiveness, RunnerSpawner, SpawnError};
use tollgate::protocol::slots::{ProcessIdentity, SlotToken, TurnKey};
use tollgate::runtime::{store_for, Runtime};
use tollgate::submit::{decide_submit, Sequencing, SubmitRequest};

/// Never asked to spawn: the submit's effect is not performed here.
struct NoSpawn;

impl RunnerSpawner for NoSpawn {
    fn spawn(&self, key: &TurnKey, _token: SlotToken) -> Result<ProcessIdentity, SpawnError> {
        Err(SpawnError::Spawn {
            key: key.clone(),
            source: std::io::Error::other("no spawns in this test"),
        })
    }
}

fn request() -> SubmitRequest {
    SubmitRequest {
        task: Some("job".into()),
        strategy: None,
        argv: vec!["true".into()],
        cwd: None,
        env: BTreeMap::new(),
        labels: Vec::new(),
        timeout_millis: None,
        schedule: Default::default(),
        delivery: None,
    }
}

#[test]
fn a_task_whose_numbers_are_used_up_is_refused_naming_its_record() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = Home::at(dir.path());
    let config = home.init(Some(1)).expect("init");
    let store = store_for(&home, &config);
    let rt = Runtime {
        home,
        config,
        store,
        spawner: Box::new(NoSpawn),
        liveness: ProcLiveness,
    };
    let me = tollgate::process::self_identity().expect("this test's identity");
    decide_submit(&rt, me, &request(), &Sequencing::default()).expect("the first turn");
    let db = rusqlite::Connection::open(rt.home.db_path()).expect("open");
    db.busy_timeout(std::time::Duration::from_secs(10))
        .expect("busy");
    let changed = db
        .execute(
            "UPDATE tasks SET body = json_set(body, '$.next_turn', 4294967295) WHERE name = 'job'",
            [],
        )
        .expect("rewrite the counter");
    assert_eq!(changed, 1);
    drop(db);
    let err =
        decide_submit(&rt, me, &request(), &Sequencing::default()).expect_err("no number is left");
    let message = err.to_string();
    let record = tollgate::tasks::task_record_location(&rt.home, "job");
    assert!(
        message.contains(&record.display().to_string()),
        "{message} names {}",
        record.display()
    );
}
