//! Property tests for every parser of a state or config file (issue 11, acceptance: "a fuzz
//! target or proptest for every parser that takes outside input"): the config, packs,
//! `queue.json`, `task.json`, `turn.json`, `sweep.json`, `refused.jsonl` and serve's hand-off list.
//!
//! For each: arbitrary bytes (and valid documents with a byte cut, replaced or inserted) never
//! panic, and a refusal names the file; a valid document round-trips (through the file functions
//! tollgate itself uses to publish and load, where it publishes the file). The case counts are
//! small and fixed so the suite stays fast in CI.

use proptest::collection::{btree_map, vec};
use proptest::prelude::*;
use std::collections::BTreeSet;
use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};
use tollgate::config::{Config, Durability};
use tollgate::exec::pack;
use tollgate::exec::sweep::{self, SweepEntry, SweepList};
use tollgate::exec::worktree::{Worktree, WorktreeKind};
use tollgate::home::Home;
use tollgate::protocol::admission::Strategy as TaskStrategy;
use tollgate::protocol::slots::{enqueue, park, ProcessIdentity, QueueState, TurnKey};
use tollgate::queue::{parse_queue, SqliteStore};
use tollgate::serve::{load_refused, HandedOff, RefusedDelivery};
use tollgate::tasks::{self, DeliveryMeta, TaskRecord, TurnOutcome, TurnRecord};

const CASES: u32 = 64;

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: CASES,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// A valid document damaged once: cut short, one byte replaced, or one byte inserted.
fn damaged(doc: Vec<u8>, how: u8, at: usize, byte: u8) -> Vec<u8> {
    let mut doc = doc;
    if doc.is_empty() {
        return vec![byte];
    }
    let at = at % doc.len();
    match how % 3 {
        0 => doc.truncate(at),
        1 => doc[at] = byte,
        _ => doc.insert(at, byte),
    }
    doc
}

fn damage() -> impl Strategy<Value = (u8, usize, u8)> {
    (any::<u8>(), any::<usize>(), any::<u8>())
}

fn noise() -> impl Strategy<Value = Vec<u8>> {
    vec(any::<u8>(), 0..512)
}

/// A refusal must name the file it is about.
fn names(error: &impl std::fmt::Display, path: &Path) -> Result<(), TestCaseError> {
    let text = error.to_string();
    prop_assert!(
        text.contains(&path.display().to_string()),
        "the error does not name {}: {text}",
        path.display()
    );
    Ok(())
}

fn path() -> PathBuf {
    PathBuf::from("/home/state/file-under-test")
}

fn text() -> impl Strategy<Value = String> {
    // Any Unicode, control characters included, as argv, env and names carry in practice.
    ".{0,24}"
}

fn strategy() -> impl Strategy<Value = TaskStrategy> {
    prop_oneof![
        Just(TaskStrategy::Drop),
        Just(TaskStrategy::Queue),
        (1u64..10_000_000).prop_map(|quiet_millis| TaskStrategy::Debounce { quiet_millis }),
        (1u32..=1024).prop_map(|max| TaskStrategy::Concurrent { max }),
    ]
}

fn task_name() -> impl Strategy<Value = String> {
    "[a-z][a-z0-9_-]{0,11}"
}

// ---- tollgate.toml ----

fn valid_config() -> impl Strategy<Value = Config> {
    (
        1usize..=tollgate::config::MAX_WORKERS,
        prop::sample::select(vec!["1ms", "250ms", "1s", "10s", "2m", "1h", "24h"]),
    )
        .prop_map(|(workers, lock_timeout)| Config {
            workers,
            lock_timeout: lock_timeout.to_string(),
            ..Config::for_workers(workers)
        })
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn config_bytes_never_panic_and_refusals_name_the_file(bytes in noise()) {
        if let Err(e) = Config::parse(&path(), &bytes) {
            names(&e, &path())?;
        }
    }

    #[test]
    fn damaged_configs_never_panic(config in valid_config(), (how, at, byte) in damage()) {
        let text = toml::to_string(&config).expect("render");
        if let Err(e) = Config::parse(&path(), &damaged(text.into_bytes(), how, at, byte)) {
            names(&e, &path())?;
        }
    }

    #[test]
    fn valid_configs_round_trip_through_save_and_load(config in valid_config()) {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("tollgate.toml");
        config.save(&file).expect("save");
        prop_assert_eq!(Config::load(&file).expect("load"), Some(config));
    }
}

// ---- pack.toml ----

fn toml_string(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

/// One pack item: its name, its argv (`Ok`) or shell line (`Err`), its deadline in seconds.
type PackItem = (String, Result<Vec<String>, String>, Option<u64>);

/// Items with unique names.
fn valid_pack() -> impl Strategy<Value = Vec<PackItem>> {
    vec(
        (
            task_name(),
            prop_oneof![
                vec("[a-zA-Z0-9 ./=-]{1,12}", 1..4).prop_map(Ok),
                "[a-zA-Z0-9 ./=;|&-]{0,20}".prop_map(Err),
            ],
            prop::option::of(1u64..3600),
        ),
        1..6,
    )
    .prop_map(|items| {
        let mut seen = BTreeSet::new();
        items
            .into_iter()
            .filter(|(name, _, _)| seen.insert(name.clone()))
            .collect()
    })
}

fn render_pack(items: &[PackItem]) -> String {
    let mut text = String::from("ceiling = \"10m\"\njobs = 2\n");
    for (name, command, deadline) in items {
        text.push_str(&format!("\n[[item]]\nname = {}\n", toml_string(name)));
        match command {
            Ok(argv) => {
                let argv: Vec<String> = argv.iter().map(|a| toml_string(a)).collect();
                text.push_str(&format!("run = [{}]\n", argv.join(", ")));
            }
            Err(line) => text.push_str(&format!("shell = {}\n", toml_string(line))),
        }
        if let Some(secs) = deadline {
            text.push_str(&format!("deadline = \"{secs}s\"\n"));
        }
    }
    text
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn pack_bytes_never_panic_and_refusals_name_the_file(bytes in noise()) {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("pack.toml");
        std::fs::write(&file, &bytes).expect("write");
        if let Err(e) = pack::load(&file) {
            names(&e, &file)?;
        }
    }

    #[test]
    fn damaged_packs_never_panic(items in valid_pack(), (how, at, byte) in damage()) {
        let text = damaged(render_pack(&items).into_bytes(), how, at, byte);
        if let Ok(text) = String::from_utf8(text) {
            if let Err(e) = pack::parse(&text, &path(), Path::new(".")) {
                names(&e, &path())?;
            }
        }
    }

    #[test]
    fn valid_packs_parse_to_what_they_say(items in valid_pack()) {
        let text = render_pack(&items);
        let parsed = pack::parse(&text, &path(), Path::new("/packs")).expect("a valid pack");
        prop_assert_eq!(parsed.items.len(), items.len());
        prop_assert_eq!(parsed.jobs, Some(2));
        for (item, (name, command, deadline)) in parsed.items.iter().zip(&items) {
            prop_assert_eq!(&item.name, name);
            let expected = match command {
                Ok(argv) => pack::Command::Argv(argv.clone()),
                Err(line) => pack::Command::Shell(line.clone()),
            };
            prop_assert_eq!(&item.command, &expected);
            prop_assert_eq!(item.deadline, deadline.map(std::time::Duration::from_secs));
        }
    }
}

// ---- queue.json ----

fn valid_queue() -> impl Strategy<Value = QueueState> {
    (
        vec(
            (task_name(), 1u32..10_000, any::<bool>(), 0u64..1_000),
            0..12,
        ),
        0u64..1_000_000,
    )
        .prop_map(|(rows, skip)| {
            let mut state = QueueState {
                next_queue_id: 1 + skip,
                ..QueueState::default()
            };
            let owner = ProcessIdentity {
                pid: 4242,
                start_time_micros: 17,
            };
            let mut now = 1_700_000_000_000u64;
            for (task, turn, parked, step) in rows {
                now += step;
                let key = TurnKey::new(task, turn);
                if enqueue(&mut state, &key, owner, now).is_ok() && parked {
                    park(&mut state, &key).expect("park a fresh row");
                }
            }
            state
        })
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn queue_bytes_never_panic_and_refusals_name_the_file(bytes in noise()) {
        if let Err(e) = parse_queue(&path(), &bytes) {
            names(&e, &path())?;
        }
    }

    #[test]
    fn damaged_queues_never_panic(state in valid_queue(), (how, at, byte) in damage()) {
        let doc = serde_json::to_vec_pretty(&state).expect("render");
        if let Err(e) = parse_queue(&path(), &damaged(doc, how, at, byte)) {
            names(&e, &path())?;
        }
    }

    /// A valid queue as an earlier version published it (`queue.json`, pretty JSON) parses back
    /// to itself, and a home holding it imports it into its database as it was.
    #[test]
    fn valid_queues_round_trip_through_parse_and_import(state in valid_queue()) {
        let doc = serde_json::to_vec_pretty(&state).expect("render");
        prop_assert_eq!(&parse_queue(&path(), &doc).expect("parse"), &state);
        let dir = tempfile::tempdir().expect("tempdir");
        let home = Home::at(dir.path());
        std::fs::write(home.queue_path(), &doc).expect("write queue.json");
        let store = SqliteStore::new(home, std::time::Duration::from_secs(5), Durability::Os);
        prop_assert_eq!(store.load().expect("import"), state);
    }
}

// ---- task.json and turn.json ----

fn valid_task() -> impl Strategy<Value = TaskRecord> {
    (task_name(), any::<u64>(), 1u32..=u32::MAX, strategy()).prop_map(
        |(name, created_at_millis, next_turn, strategy)| TaskRecord {
            version: tasks::TASK_FORMAT_VERSION,
            name,
            created_at_millis,
            next_turn,
            strategy,
        },
    )
}

fn outcome() -> impl Strategy<Value = TurnOutcome> {
    prop::sample::select(vec![
        TurnOutcome::Completed,
        TurnOutcome::Failed,
        TurnOutcome::Cancelled,
        TurnOutcome::Unstartable,
        TurnOutcome::Dropped,
        TurnOutcome::Superseded,
    ])
}

/// An argument or an environment value: text, or any bytes (a command's words are bytes on
/// Unix; issue 31, point 4: kept losslessly).
fn word() -> impl Strategy<Value = OsString> {
    prop_oneof![
        text().prop_map(OsString::from),
        vec(1u8..=255, 0..12).prop_map(OsString::from_vec),
    ]
}

fn valid_turn() -> impl Strategy<Value = TurnRecord> {
    (
        (
            task_name(),
            1u32..=u32::MAX,
            vec(word(), 1..6),
            btree_map(
                prop_oneof![
                    "[A-Z_]{1,8}".prop_map(OsString::from),
                    vec(1u8..=255, 1..8).prop_map(OsString::from_vec),
                ],
                word(),
                0..4,
            ),
        ),
        (any::<bool>(), any::<u64>(), prop::option::of(any::<u64>())),
        (
            prop::option::of((any::<u64>(), any::<i32>(), outcome())),
            prop::option::of(text()),
            prop::option::of((text(), text())),
        ),
    )
        .prop_map(
            |(
                (task, turn, argv, env),
                (attached, submitted, started),
                (ended, error, delivery),
            )| {
                TurnRecord {
                    version: tasks::TASK_FORMAT_VERSION,
                    key: TurnKey::new(task, turn),
                    argv,
                    cwd: Some(PathBuf::from("/work")),
                    env,
                    attached,
                    submitted_at_millis: submitted,
                    started_at_millis: started,
                    runner: started.map(|start_time_micros| ProcessIdentity {
                        pid: 7,
                        start_time_micros,
                    }),
                    host: None,
                    ended_at_millis: ended.map(|(at, _, _)| at),
                    exit_code: ended.map(|(_, code, _)| code),
                    signal: None,
                    outcome: ended.map(|(_, _, outcome)| outcome),
                    error,
                    // Through serde, so fields added later with defaults keep this compiling.
                    delivery: delivery.map(|(id, identity)| {
                        serde_json::from_value::<DeliveryMeta>(serde_json::json!({
                            "id": id, "adapter": "generic", "tenant": "t",
                            "identity": identity, "admitted_at_millis": 1,
                        }))
                        .expect("a delivery record")
                    }),
                    id: None,
                    labels: Vec::new(),
                    timeout_millis: None,
                    // Dependencies and retries (`submit --after`, `--retry`) on some records.
                    after: if turn % 2 == 0 {
                        vec![tollgate::protocol::slots::Dependency {
                            key: TurnKey::new("dep", turn),
                            rule: tollgate::protocol::slots::AfterRule::Succeeded,
                        }]
                    } else {
                        Vec::new()
                    },
                    retry: (turn % 3 == 0)
                        .then(|| tollgate::protocol::slots::RetryPlan::first(2, 10)),
                    retry_of: turn.checked_sub(1).filter(|_| turn % 3 == 0),
                    retried_as: None,
                    failed_dependency: None,
                }
            },
        )
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn task_and_turn_bytes_never_panic_and_refusals_name_the_file(bytes in noise()) {
        if let Err(e) = tasks::parse_task(&path(), &bytes) {
            names(&e, &path())?;
        }
        if let Err(e) = tasks::parse_turn(&path(), &bytes, &TurnKey::new("t", 1)) {
            names(&e, &path())?;
        }
    }

    #[test]
    fn damaged_task_and_turn_records_never_panic(
        task in valid_task(),
        turn in valid_turn(),
        (how, at, byte) in damage(),
    ) {
        let doc = serde_json::to_vec_pretty(&task).expect("render");
        if let Err(e) = tasks::parse_task(&path(), &damaged(doc, how, at, byte)) {
            names(&e, &path())?;
        }
        let doc = serde_json::to_vec_pretty(&turn).expect("render");
        if let Err(e) = tasks::parse_turn(&path(), &damaged(doc, how, at, byte), &turn.key) {
            names(&e, &path())?;
        }
    }

    #[test]
    fn valid_task_records_round_trip(task in valid_task()) {
        let doc = serde_json::to_vec_pretty(&task).expect("render");
        prop_assert_eq!(tasks::parse_task(&path(), &doc).expect("parse"), task);
    }

    #[test]
    fn valid_turn_records_round_trip_through_save_and_load(turn in valid_turn()) {
        let dir = tempfile::tempdir().expect("tempdir");
        // A fresh home: the save creates its database (a turn folder without a database would
        // be a lost database's sign, refused).
        let home = Home::at(dir.path());
        tasks::save_turn(&home, &turn).expect("save");
        prop_assert_eq!(tasks::load_turn(&home, &turn.key).expect("load"), Some(turn.clone()));
        // A record is only accepted where it belongs.
        let elsewhere = TurnKey::new(turn.key.task.clone(), turn.key.turn.wrapping_add(1).max(1));
        let doc = serde_json::to_vec(&turn).expect("render");
        if elsewhere != turn.key {
            prop_assert!(tasks::parse_turn(&path(), &doc, &elsewhere).is_err());
        }
    }
}

// ---- sweep.json ----

fn valid_sweep() -> impl Strategy<Value = SweepList> {
    vec(
        (
            text(),
            any::<bool>(),
            task_name(),
            any::<u32>(),
            any::<u64>(),
        ),
        0..6,
    )
    .prop_map(|rows| SweepList {
        version: sweep::SWEEP_FORMAT_VERSION,
        entries: rows
            .into_iter()
            .map(|(path, git, item, run_pid, listed_at_millis)| SweepEntry {
                worktree: Worktree {
                    path: PathBuf::from(format!("/home/worktrees/{path}")),
                    kind: if git {
                        WorktreeKind::Git {
                            repo: PathBuf::from("/src/repo"),
                        }
                    } else {
                        WorktreeKind::Copy
                    },
                    pack_dir: PathBuf::from("/src/repo/pack"),
                },
                run_id: format!("run-{run_pid}"),
                run_pid,
                item,
                listed_at_millis,
            })
            .collect(),
        runs: Vec::new(),
    })
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn sweep_bytes_never_panic_and_refusals_name_the_file(bytes in noise()) {
        if let Err(e) = sweep::parse(&path(), &bytes) {
            names(&e, &path())?;
        }
    }

    #[test]
    fn damaged_sweep_lists_never_panic(list in valid_sweep(), (how, at, byte) in damage()) {
        let doc = serde_json::to_vec_pretty(&list).expect("render");
        if let Err(e) = sweep::parse(&path(), &damaged(doc, how, at, byte)) {
            names(&e, &path())?;
        }
    }

    #[test]
    fn valid_sweep_lists_round_trip(list in valid_sweep()) {
        let doc = serde_json::to_vec_pretty(&list).expect("render");
        prop_assert_eq!(sweep::parse(&path(), &doc).expect("parse"), list);
    }
}

// ---- serve/refused.jsonl and serve/handed-off.json ----

fn refused() -> impl Strategy<Value = RefusedDelivery> {
    (
        any::<u64>(),
        text(),
        text(),
        text(),
        prop::option::of(text()),
        text(),
    )
        .prop_map(
            |(at_millis, route, tenant, identity, event, reason)| RefusedDelivery {
                at_millis,
                route,
                adapter: "github".to_string(),
                tenant,
                identity,
                event,
                reason,
            },
        )
}

fn jsonl(rows: &[RefusedDelivery]) -> Vec<u8> {
    let mut out = Vec::new();
    for row in rows {
        out.extend(serde_json::to_vec(row).expect("render"));
        out.push(b'\n');
    }
    out
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn refused_list_bytes_never_panic_and_refusals_name_the_file(bytes in noise()) {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("refused.jsonl");
        std::fs::write(&file, &bytes).expect("write");
        if let Err(e) = load_refused(&file) {
            names(&e, &file)?;
        }
        // The hand-off list is read by the shared JSON loader.
        let file = dir.path().join("handed-off.json");
        std::fs::write(&file, &bytes).expect("write");
        if let Err(e) = tollgate::fsutil::load_json::<Vec<HandedOff>>(&file) {
            names(&e, &file)?;
        }
    }

    #[test]
    fn damaged_refused_lists_never_panic(rows in vec(refused(), 1..5), (how, at, byte) in damage()) {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("refused.jsonl");
        std::fs::write(&file, damaged(jsonl(&rows), how, at, byte)).expect("write");
        if let Err(e) = load_refused(&file) {
            names(&e, &file)?;
        }
    }

    #[test]
    fn valid_refused_lists_round_trip(rows in vec(refused(), 0..6)) {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("refused.jsonl");
        std::fs::write(&file, jsonl(&rows)).expect("write");
        prop_assert_eq!(load_refused(&file).expect("load"), rows);
    }
}
