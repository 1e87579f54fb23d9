//! Conformance between the slot model and the database stores (issue: model ↔ shell).
//!
//! Seeded random walks of `model/slots.rs` are replayed against the store the binary builds for
//! a new home (`HomeStore::for_home`): the home's SQLite database `tollgate.db`, and a PostgreSQL
//! queue of its own when a server is there (tests/common/postgres.rs). Before every step the
//! queue is loaded through that store, and through a second one built the same way on another
//! connection (as another command reads it), and both must equal the model's queue; the model's
//! transition is then applied to the state *as loaded from the database* and must give exactly
//! the state the walk recorded; the result is committed through `Store::transact` (a durable
//! section writing only the rows that changed). Any state the model can reach must survive the
//! tables' mapping unchanged and behave the same after it. A mismatch prints the store, the seed
//! and the numbered path.
//!
//! `TOLLGATE_CONFORMANCE_SEEDS` sets the seeds per store (default 40, four configurations each:
//! the three plain ones and [`mixed`]). The walks check the mapping, not the disk: the SQLite
//! homes are in memory (`/dev/shm`) and the PostgreSQL homes say `durability = "os"`. With no
//! PostgreSQL server to be had its test skips with a message, and fails instead under
//! `TOLLGATE_REQUIRE_POSTGRES=1`.
#![cfg(feature = "model-check")]

mod common;

use stateright::Model;
use tollgate::config::Durability;
use tollgate::dispatch::DispatchError;
use tollgate::home::Home;
use tollgate::model::slots::{
    describe_action, initial_state, random_walk, SlotAction, SlotConfig, SlotModel, SlotState,
};
use tollgate::protocol::admission::{Strategy, MAX_CONCURRENT};
use tollgate::queue::HomeStore;

/// A new home's database store, twice (two connections), and the home's directory.
struct Database {
    store: HomeStore,
    reader: HomeStore,
    _dir: tempfile::TempDir,
}

/// Which database a walk runs on: the home's SQLite, or PostgreSQL at this URL.
#[derive(Clone, Copy)]
enum Kind<'a> {
    Sqlite,
    Postgres(&'a str),
}

impl Kind<'_> {
    fn name(&self) -> &'static str {
        match self {
            Kind::Sqlite => "SQLite",
            Kind::Postgres(_) => "PostgreSQL",
        }
    }

    /// A new home on this database, with its stores as the binary builds them.
    fn open(&self) -> Database {
        let dir = common::memory_temp_dir();
        let home = Home::at(dir.path());
        let mut config = home.init(None).expect("init home");
        if let Kind::Postgres(url) = self {
            let queue = common::postgres::unique("model-conformance");
            config.store = Some(common::postgres::with_queue(url, &queue));
            // The commits the walks make need not wait for the server's disk: they check the
            // mapping, and a durable commit's flush (a transaction of its own) maps nothing.
            config.durability = Durability::Os;
        }
        let store = HomeStore::for_home(&home, &config);
        let reader = HomeStore::for_home(&home, &config);
        for built in [&store, &reader] {
            let expected = matches!(
                (self, built),
                (Kind::Sqlite, HomeStore::Database(_))
                    | (Kind::Postgres(_), HomeStore::Postgres(_))
            );
            assert!(expected, "{} home built {built:?}", self.name());
        }
        Database {
            store,
            reader,
            _dir: dir,
        }
    }
}

fn trail(start: &SlotState, path: &[(SlotAction, SlotState)], upto: usize) -> String {
    let mut before = start;
    let mut lines = Vec::new();
    for (i, (action, after)) in path.iter().enumerate().take(upto + 1) {
        lines.push(format!(
            "  {:>3}. {}",
            i + 1,
            describe_action(before, action)
        ));
        before = after;
    }
    lines.join("\n")
}

fn publish(store: &HomeStore, queue: &tollgate::protocol::slots::QueueState) {
    store
        .transact(|q| {
            *q = queue.clone();
            Ok::<_, DispatchError>(())
        })
        .expect("commit the model's queue");
}

fn replay(kind: Kind<'_>, cfg: SlotConfig, seed: u64, max_steps: usize) -> usize {
    let start = initial_state(&cfg);
    let path = random_walk(cfg.clone(), seed, max_steps);
    let model = SlotModel::new(cfg.clone());
    let db = kind.open();
    let store = kind.name();
    publish(&db.store, &start.queue);
    let mut state = start.clone();
    for (i, (action, recorded)) in path.iter().enumerate() {
        let loaded = db.store.load().expect("the queue loads");
        assert_eq!(
            loaded,
            state.queue,
            "{store}, config {cfg}, seed {seed}: the stored queue differs from the model before \
             step {}\n{}",
            i + 1,
            trail(&start, &path, i)
        );
        let other = db
            .reader
            .load()
            .expect("the queue loads on another connection");
        assert_eq!(
            other,
            state.queue,
            "{store}, config {cfg}, seed {seed}: another connection reads another queue before \
             step {}\n{}",
            i + 1,
            trail(&start, &path, i)
        );
        let mut from_db = state.clone();
        from_db.queue = loaded;
        let next = model
            .next_state(&from_db, action.clone())
            .unwrap_or_else(|| {
                panic!(
                    "{store}, seed {seed}: step {} not enabled after a database round trip\n{}",
                    i + 1,
                    trail(&start, &path, i)
                )
            });
        assert_eq!(
            &next,
            recorded,
            "{store}, config {cfg}, seed {seed}: step {} from the loaded queue diverges from the \
             model\n{}",
            i + 1,
            trail(&start, &path, i)
        );
        publish(&db.store, &next.queue);
        state = next;
    }
    assert_eq!(
        db.reader.load().expect("final load"),
        state.queue,
        "{store}, seed {seed}: final queue"
    );
    path.len()
}

/// An attached submitter beside two detached ones, a canceller, commands that fail to start or
/// start without a readable leader, and two tasks (one `concurrent=1`): the rows, runner and work
/// records the three plain configurations never make (attached runners, cancel requests, works
/// with no leader).
fn mixed() -> SlotConfig {
    let mut cfg = SlotConfig::new(2, 1, 1)
        .with_command_faults()
        .with_tasks(vec![
            Strategy::Concurrent {
                max: MAX_CONCURRENT,
            },
            Strategy::Concurrent { max: 1 },
        ]);
    cfg.attached = 1;
    cfg.cancel_budget = 1;
    cfg
}

/// Every seed's walk in each of the four configurations on `kind`'s database.
fn walks(kind: Kind<'_>) {
    let seeds: u64 = std::env::var("TOLLGATE_CONFORMANCE_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(40);
    let mut steps = 0;
    for seed in 0..seeds {
        steps += replay(kind, SlotConfig::new(2, 2, 1), seed, 200);
        steps += replay(kind, SlotConfig::new(3, 2, 1), seed, 200);
        steps += replay(kind, SlotConfig::new(2, 3, 2), seed, 200);
        steps += replay(kind, mixed(), seed, 200);
    }
    tollgate::model::report(&format!(
        "slot conformance: replayed {steps} steps of {} seeded walks against {}",
        4 * seeds,
        kind.name()
    ));
    assert!(steps > 4 * seeds as usize, "the walks must take steps");
}

#[test]
fn random_walks_of_the_slot_model_round_trip_through_sqlite() {
    walks(Kind::Sqlite);
}

/// Skips with a message when no server can be had, fails instead with
/// `TOLLGATE_REQUIRE_POSTGRES=1` (tests/common/postgres.rs).
#[test]
fn random_walks_of_the_slot_model_round_trip_through_postgresql() {
    let Some(url) = common::postgres::server() else {
        return;
    };
    walks(Kind::Postgres(&url));
}
