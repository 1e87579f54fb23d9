//! A step's refusal about a record names where that record lives (the database and the record's
//! place), as every error about a state file does: here a task whose turn numbers are used up.

mod common;

use common::sections::{one_slot, submit_true};
use tollgate::submit::{decide_submit, Sequencing};

#[test]
fn a_task_whose_numbers_are_used_up_is_refused_naming_its_record() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = one_slot(dir.path());
    let me = tollgate::process::self_identity().expect("this test's identity");
    decide_submit(&rt, me, &submit_true("job"), &Sequencing::default()).expect("the first turn");
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
    let err = decide_submit(&rt, me, &submit_true("job"), &Sequencing::default())
        .expect_err("no number is left");
    let message = err.to_string();
    let record = tollgate::tasks::task_record_location(&rt.home, "job");
    assert!(
        message.contains(&record.display().to_string()),
        "{message} names {}",
        record.display()
    );
}
