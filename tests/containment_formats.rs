//! The files the containment work changed stay readable both ways (issue "Turn containment",
//! acceptance 6): a queue written by the previous version (rows without `cancel_requested`, works
//! without `cgroup`) and a version-1 sweep list load; a queue that uses neither new field is
//! written in exactly the previous shape (older versions read it, since they ignore no key they
//! know and need none they do not), and the new fields round-trip. A turn record of the previous
//! version loads too (its format did not change).

use tollgate::protocol::slots::{QueueState, RowState, TurnKey};

/// `queue.json` as the version before the per-turn cgroup and the durable cancel wrote it.
const OLD_QUEUE: &str = r#"{
  "version": 1,
  "next_queue_id": 3,
  "entries": [
    {"queue_id": 1, "task": "a", "turn": 1, "enqueued_at_millis": 5, "state": "dispatching",
     "dispatch_owner": {"pid": 15272, "start_time_micros": 12164940000}},
    {"queue_id": 2, "task": "b", "turn": 1, "enqueued_at_millis": 6, "state": "parked"}
  ],
  "runners": [
    {"task": "a", "turn": 1, "identity": {"pid": 15272, "start_time_micros": 12164940000},
     "attached": false}
  ],
  "works": [
    {"task": "a", "turn": 1, "id": "01a231c6-26d9-73ff-b7e3-d7157b8d58f1",
     "runner": {"pid": 15272, "start_time_micros": 12164940000},
     "leader": {"pid": 15274, "start_time_micros": 12165000000}}
  ]
}"#;

fn parse(text: &str) -> QueueState {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("queue.json");
    std::fs::write(&path, text).expect("write");
    tollgate::queue::parse_queue(&path, text.as_bytes()).expect("the queue loads")
}

#[test]
fn a_queue_of_the_previous_version_loads_without_cancel_requests_or_groups() {
    let queue = parse(OLD_QUEUE);
    assert_eq!(queue.entries.len(), 2);
    assert!(queue.entries.iter().all(|e| !e.cancel_requested));
    assert!(matches!(queue.entries[1].state, RowState::Parked));
    assert_eq!(queue.works.len(), 1);
    assert_eq!(queue.works[0].cgroup, None);
    assert!(queue.works[0].leader.is_some());
    // Written back, it has exactly the previous shape: nothing an older version would not know.
    let written: serde_json::Value = serde_json::to_value(&queue).expect("serialises");
    let old: serde_json::Value = serde_json::from_str(OLD_QUEUE).expect("json");
    assert_eq!(written, old);
}

#[test]
fn the_new_fields_round_trip_and_an_older_reader_sees_its_own_fields() {
    let mut queue = parse(OLD_QUEUE);
    queue.entries[0].cancel_requested = true;
    queue.works[0].cgroup = Some("/sys/fs/cgroup/unified/tollgate-1-work-x".to_string());
    let text = serde_json::to_string(&queue).expect("serialises");
    let back = parse(&text);
    assert_eq!(back, queue);
    // Everything the previous version reads is unchanged beside the two new keys.
    let mut value: serde_json::Value = serde_json::from_str(&text).expect("json");
    let row = value["entries"][0].as_object_mut().expect("row");
    assert_eq!(
        row.remove("cancel_requested"),
        Some(serde_json::json!(true))
    );
    let work = value["works"][0].as_object_mut().expect("work");
    assert!(work.remove("cgroup").is_some());
    let old: serde_json::Value = serde_json::from_str(OLD_QUEUE).expect("json");
    assert_eq!(value, old);
}

#[test]
fn a_version_1_sweep_list_and_an_old_turn_record_load() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("sweep.json");
    let v1 = br#"{"version":1,"entries":[{"path":"/h/worktrees/r/0-a","kind":"copy",
        "pack_dir":"/h/worktrees/r/0-a","run_id":"r","run_pid":7,"item":"a",
        "listed_at_millis":5}]}"#;
    let list = tollgate::exec::sweep::parse(&path, v1).expect("a version-1 list loads");
    assert_eq!(list.entries.len(), 1);
    assert!(list.runs.is_empty());

    let home = tollgate::home::Home::at(dir.path());
    let key = TurnKey::new("a", 1);
    std::fs::create_dir_all(home.turn_dir(&key)).expect("turn dir");
    std::fs::write(
        home.turn_dir(&key).join("turn.json"),
        r#"{"version":1,"task":"a","turn":1,"argv":["sleep","5"],"cwd":"/tmp","env":{},
            "attached":false,"submitted_at_millis":1,"started_at_millis":2,
            "runner":{"pid":15272,"start_time_micros":12164940000},"ended_at_millis":3,
            "outcome":"cancelled"}"#,
    )
    .expect("write turn");
    let turn = tollgate::tasks::load_turn(&home, &key)
        .expect("an old turn record loads")
        .expect("present");
    assert!(turn.is_settled());
}
