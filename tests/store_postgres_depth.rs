//! Issue 14 (fleet throughput): a PostgreSQL section on a part of the queue (spec/store.md,
//! "What a section loads", "PostgreSQL"). The store reads only the part the core names
//! (`steps::project` is the reference: the active rows, the last row, the named tasks' rows and
//! the rows depending on them, the named turns) with the queue's row count, and its commit
//! writes back exactly what `steps::merge` says; a parking submit at depth, through a home whose
//! store is the database, loads the held row and the last row, not the parked rows behind them.
//!
//! The server is `TOLLGATE_TEST_POSTGRES` (`.ci/run` starts one); unset, every test skips.
mod common;

use common::postgres::{server, unique, with_queue};
use common::queue_shapes::every_shape;
use common::sections::submit_true;
use std::collections::BTreeSet;
use std::sync::Mutex;
use std::time::Duration;
use tollgate::config::{Config, Durability};
use tollgate::home::Home;
use tollgate::process::{identity_of, self_identity, ProcLiveness, RunnerSpawner, SpawnError};
use tollgate::protocol::slots::steps::{self, Loaded, QueueReads, Reads};
use tollgate::protocol::slots::{
    AfterRule, Dependency, ProcessIdentity, QueueEntry, QueueState, RowState, SlotToken, TurnKey,
};
use tollgate::queue::{HomeStore, PostgresStore, PostgresUrl, Store, StoreError};
use tollgate::runtime::{store_for, Runtime};
use tollgate::submit::{submit_detached, Placement};

/// Parked rows behind the active ones.
const PARKED: u64 = 40;

fn store(url: &str, queue: &str) -> PostgresStore {
    let url = PostgresUrl::parse(url).expect("test URL parses");
    PostgresStore::new(
        url,
        queue.to_string(),
        Duration::from_secs(10),
        Durability::Fsync,
    )
}

/// Every shape of row (common::queue_shapes), and behind its rows `PARKED` parked rows
/// `p-0` … of turn 1: every fifth depends on `waiting`'s turn 7, every seventh on `dep`'s turn
/// 2 (a task with no row). The last row stays the shape's, whose id is past 2^63.
fn deep_queue() -> QueueState {
    let mut state = every_shape();
    for n in 0..PARKED {
        let mut after = Vec::new();
        if n % 5 == 0 {
            after.push(Dependency {
                key: TurnKey::new("waiting", 7),
                rule: AfterRule::Ended,
            });
        }
        if n % 7 == 0 {
            after.push(Dependency {
                key: TurnKey::new("dep", 2),
                rule: AfterRule::Succeeded,
            });
        }
        state.entries.push(QueueEntry {
            queue_id: 100 + n,
            key: TurnKey::new(format!("p-{n}"), 1),
            enqueued_at_millis: 1_700_000_000_100 + n,
            state: RowState::Parked,
            slot_reservation: None,
            ready_at_millis: 0,
            cancel_requested: false,
            priority: 0,
            after,
        });
    }
    state.entries.sort_by_key(|e| e.queue_id);
    state.check_structure().expect("a valid queue");
    state
}

fn reads(tasks: &[&str], turns: &[(&str, u32)]) -> QueueReads {
    QueueReads {
        tasks: tasks.iter().map(|t| t.to_string()).collect(),
        turns: turns
            .iter()
            .map(|(task, turn)| TurnKey::new(*task, *turn))
            .collect::<BTreeSet<_>>(),
        heads: 0,
        lines: BTreeSet::new(),
    }
}

/// What a section on `reads` gets, rolled back.
fn part_of(store: &PostgresStore, reads: &QueueReads) -> (QueueState, Loaded) {
    let seen = store.transact_reading(
        tollgate::queue::Commit::Internal,
        &Reads::Part(reads.clone()),
        |state, loaded| Err::<(), _>(Seen::Part(Box::new((state.clone(), loaded.clone())))),
    );
    match seen {
        Ok(()) => unreachable!("the closure returned an Err"),
        Err(Seen::Part(seen)) => *seen,
        Err(Seen::Store(e)) => panic!("section failed: {e}"),
    }
}

/// A section's `Err`: what it saw, or the store's failure.
enum Seen {
    Part(Box<(QueueState, Loaded)>),
    Store(StoreError),
}

impl From<StoreError> for Seen {
    fn from(e: StoreError) -> Self {
        Seen::Store(e)
    }
}

#[test]
fn a_section_on_a_part_loads_what_the_core_projects_and_commits_what_it_merges() {
    let Some(url) = server() else { return };
    let queue = unique("depth-part");
    let store = store(&url, &queue);
    let full = deep_queue();
    store
        .transact(|q| {
            *q = full.clone();
            Ok::<_, StoreError>(())
        })
        .expect("publish the deep queue");
    assert_eq!(store.load().expect("load"), full);

    let cases = [
        reads(&["p-3"], &[]),
        reads(&["waiting"], &[]),
        reads(&["dep"], &[]),
        reads(&[], &[("p-7", 1), ("absent", 1)]),
        reads(&["absent"], &[("waiting", 7)]),
        reads(&[], &[]),
        reads(&["p-0", "p-21", "it's \\ quoted"], &[("p-9", 1)]),
        // A finishing runner's part: the first parked rows in start order (version 9's index)
        // and the rows they wait for.
        steps::finish_reads(&TurnKey::new("waiting", 7)),
        QueueReads {
            heads: 3,
            ..reads(&["dep"], &[])
        },
        // A `concurrent=N` submit's part: the first parked row of each named line.
        steps::submit_line_reads("p-3", &[]),
        QueueReads {
            lines: ["p-5", "waiting", "absent"]
                .iter()
                .map(|t| t.to_string())
                .collect(),
            ..reads(&[], &[("p-9", 1)])
        },
    ];
    for case in &cases {
        let (part, loaded) = part_of(&store, case);
        assert_eq!(part, steps::project(&full, case), "the part of {case:?}");
        assert_eq!(
            loaded,
            Loaded::Part {
                reads: case.clone(),
                queue_rows: full.entries.len(),
            }
        );
        assert_eq!(store.rows_loaded_by_last_section(), part.entries.len());
        assert!(
            part.entries.len() < 20,
            "{case:?}: {} of {} rows",
            part.entries.len(),
            full.entries.len()
        );
    }

    // A commit on a part: p-3's row leaves, a new row of p-3 comes, the waiting row changes; the
    // rows the part did not hold stay as they were (`steps::merge`), and the count follows.
    let case = reads(&["p-3"], &[]);
    let (before, _) = part_of(&store, &case);
    let mut after = before.clone();
    after.entries.retain(|e| e.key.task != "p-3");
    after.entries.push(QueueEntry {
        queue_id: 200,
        key: TurnKey::new("p-3", 2),
        // After every parked row's (enqueue times do not fall along the queue).
        enqueued_at_millis: 1_700_000_000_100 + PARKED,
        ..before
            .row(&TurnKey::new("p-3", 1))
            .expect("p-3's row")
            .clone()
    });
    if let Some(row) = after.entries.iter_mut().find(|e| e.key.task == "waiting") {
        row.priority = 5;
    }
    after.entries.sort_by_key(|e| e.queue_id);
    store
        .transact_reading(
            tollgate::queue::Commit::Internal,
            &Reads::Part(case.clone()),
            |state, _| {
                *state = after.clone();
                Ok::<_, StoreError>(())
            },
        )
        .expect("commit on the part");
    let mut expected = full.clone();
    steps::merge(&mut expected, &before, &after);
    assert_eq!(store.load().expect("load"), expected);
    let (_, loaded) = part_of(&store, &reads(&[], &[]));
    assert_eq!(
        loaded,
        Loaded::Part {
            reads: reads(&[], &[]),
            queue_rows: expected.entries.len(),
        }
    );
    // Reads::Everything is the whole queue.
    let whole = store
        .transact_reading(
            tollgate::queue::Commit::Internal,
            &Reads::Everything,
            |state, loaded| Ok::<_, StoreError>((state.clone(), loaded.clone())),
        )
        .expect("a section on the whole queue");
    assert_eq!(whole, (expected, Loaded::Whole));
}

/// Starts a real `sleep` as the "runner" (it never takes its slot over, so the slot stays
/// reserved for as long as the test runs) and reads its identity from /proc; killed at the end.
struct SleepSpawner(Mutex<Vec<std::process::Child>>);

impl RunnerSpawner for SleepSpawner {
    fn spawn(&self, key: &TurnKey, _token: SlotToken) -> Result<ProcessIdentity, SpawnError> {
        let failed = |source| SpawnError::Spawn {
            key: key.clone(),
            source,
        };
        let child = std::process::Command::new("sleep")
            .arg("120")
            .spawn()
            .map_err(failed)?;
        let id = identity_of(child.id())
            .ok_or_else(|| failed(std::io::Error::other("no /proc entry for the sleep")))?;
        self.0.lock().expect("children").push(child);
        Ok(id)
    }
}

impl Drop for SleepSpawner {
    fn drop(&mut self) {
        for child in self.0.get_mut().expect("children").iter_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn postgres(rt: &Runtime<ProcLiveness, HomeStore>) -> &PostgresStore {
    match &rt.store {
        HomeStore::Postgres(store) => store,
        other => panic!("the home's store is the database: {other:?}"),
    }
}

/// A parking submit's section on a PostgreSQL home loads the held row and the last row, not the
/// parked rows before it: its cost does not grow with the queue's depth (before, every section
/// read, sent and decoded the whole queue).
#[test]
fn a_parking_submit_at_depth_loads_only_its_part() {
    let Some(url) = server() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let home_dir = common::init_home(dir.path(), 1);
    let config_path = home_dir.join("tollgate.toml");
    let mut text = std::fs::read_to_string(&config_path).expect("config");
    let store_url = with_queue(&url, &unique("depth-submit"));
    text.push_str(&format!("store = {store_url:?}\nhost = \"depth-host\"\n"));
    std::fs::write(&config_path, text).expect("write config");
    let home = Home::at(&home_dir);
    let config = Config::load(&config_path)
        .expect("config loads")
        .expect("config exists");
    let store = store_for(&home, &config);
    let rt = Runtime {
        home: home.clone(),
        config,
        store,
        spawner: Box::new(SleepSpawner(Mutex::new(Vec::new()))),
        liveness: ProcLiveness,
    };
    let me = self_identity().expect("me");
    let held = submit_detached(&rt, me, submit_true("hold")).expect("submit hold");
    assert!(
        matches!(held.placement, Placement::Started(_)),
        "{:?}",
        held.placement
    );
    for n in 0..PARKED {
        let submitted = submit_detached(&rt, me, submit_true(&format!("p-{n}"))).expect("submit");
        assert_eq!(submitted.placement, Placement::Parked, "p-{n} parks");
        // The held row and the last row (the one before this submit), none of the others.
        assert!(
            postgres(&rt).rows_loaded_by_last_section() <= 2,
            "p-{n}'s section loaded {} rows",
            postgres(&rt).rows_loaded_by_last_section()
        );
    }
    let state = rt.store.load().expect("load");
    assert_eq!(state.entries.len(), PARKED as usize + 1);
    // The repair's look (a prepared statement too): the held row and the oldest parked row, and
    // the same again on the same connection.
    for _ in 0..2 {
        let active = rt.store.load_active().expect("load the active part");
        let keys: Vec<&TurnKey> = active.entries.iter().map(|e| &e.key).collect();
        assert_eq!(keys, [&held.key, &TurnKey::new("p-0", 1)]);
        assert_eq!(active.runners, state.runners);
    }
    // With the first tasks by name paused (`p-0`, `p-1`, `p-10` .. `p-13`), the look also holds
    // the first parked row of the first task that is not: `p-14`.
    rt.store
        .transact(|q| {
            for task in ["p-0", "p-1", "p-10", "p-11", "p-12", "p-13"] {
                tollgate::protocol::slots::order::pause(
                    q,
                    tollgate::protocol::slots::order::PauseScope::Task(task),
                )?;
            }
            Ok::<_, tollgate::dispatch::DispatchError>(())
        })
        .expect("pause the first tasks");
    let active = rt.store.load_active().expect("load the active part");
    let keys: Vec<&TurnKey> = active.entries.iter().map(|e| &e.key).collect();
    assert_eq!(
        keys,
        [&held.key, &TurnKey::new("p-0", 1), &TurnKey::new("p-14", 1)]
    );
}

/// A section's part is read by a statement prepared once per connection (spec/store.md,
/// "PostgreSQL", "A part read planned once per connection"), and a new connection has none: after
/// the server ended the store's session (a restart, a pooler, an administrator), the store
/// connects again and prepares it again. Sections on parts read what the core projects before
/// and after; it fails if the store believes the new session has the statement.
#[test]
fn a_part_read_is_prepared_again_on_a_new_connection() {
    let Some(url) = server() else { return };
    let queue = unique("depth-reconnect");
    let separator = if url.contains('?') { '&' } else { '?' };
    let store = store(&format!("{url}{separator}application_name={queue}"), &queue);
    let full = deep_queue();
    store
        .transact(|q| {
            *q = full.clone();
            Ok::<_, StoreError>(())
        })
        .expect("publish the deep queue");
    let cases = [
        reads(&["p-3"], &[]),
        steps::finish_reads(&TurnKey::new("waiting", 7)),
    ];
    for case in &cases {
        assert_eq!(
            part_of(&store, case).0,
            steps::project(&full, case),
            "{case:?}"
        );
    }

    let mut admin = postgres::Client::connect(&url, postgres::NoTls).expect("connect");
    let ended = admin
        .query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1",
            &[&queue],
        )
        .expect("end the store's session");
    assert_eq!(ended.len(), 1, "the store's one session");
    // The first use after it finds the session gone and fails; the store connects again.
    assert!(
        (0..3).any(|_| store.load().is_ok()),
        "the store connects again after its session ended"
    );
    for case in &cases {
        assert_eq!(
            part_of(&store, case).0,
            steps::project(&full, case),
            "{case:?} on the new connection"
        );
    }
}
