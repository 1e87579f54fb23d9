//! Conformance between the slot model and the real queue store (issue: model ↔ shell).
//!
//! Seeded random walks of `model/slots.rs` are replayed against `queue.json` in a temporary home:
//! before every step the queue is loaded from disk through `QueueStore` (lock, parse, structure
//! checks) and must equal the model's queue; the model's transition is then applied to the state
//! *as loaded from disk* and must give exactly the state the walk recorded; the result is
//! published through `QueueStore::transact` (flock, write-temp, fsync, rename). Any state the model
//! can reach must survive the disk unchanged and behave the same after it. A mismatch prints the
//! seed and the numbered path.
#![cfg(feature = "model-check")]

use stateright::Model;
use std::time::Duration;
use tollgate::dispatch::DispatchError;
use tollgate::home::Home;
use tollgate::model::slots::{
    describe_action, initial_state, random_walk, SlotAction, SlotConfig, SlotModel, SlotState,
};
use tollgate::queue::QueueStore;

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

fn replay(cfg: SlotConfig, seed: u64, max_steps: usize) -> usize {
    let start = initial_state(&cfg);
    let path = random_walk(cfg.clone(), seed, max_steps);
    let model = SlotModel::new(cfg.clone());
    let dir = tempfile::tempdir().expect("temp dir");
    let home = Home::at(dir.path());
    home.ensure().expect("home");
    let store = QueueStore::new(home, Duration::from_secs(10));
    store
        .transact(|queue| {
            *queue = start.queue.clone();
            Ok::<_, DispatchError>(())
        })
        .expect("publish the initial queue");
    let mut state = start.clone();
    for (i, (action, recorded)) in path.iter().enumerate() {
        let on_disk = store.load().expect("queue.json loads");
        assert_eq!(
            on_disk,
            state.queue,
            "config {cfg}, seed {seed}: queue.json differs from the model before step {}\n{}",
            i + 1,
            trail(&start, &path, i)
        );
        let mut from_disk = state.clone();
        from_disk.queue = on_disk;
        let next = model
            .next_state(&from_disk, action.clone())
            .unwrap_or_else(|| {
                panic!(
                    "seed {seed}: step {} not enabled after a disk round trip\n{}",
                    i + 1,
                    trail(&start, &path, i)
                )
            });
        assert_eq!(
            &next,
            recorded,
            "config {cfg}, seed {seed}: step {} from the loaded queue diverges from the model\n{}",
            i + 1,
            trail(&start, &path, i)
        );
        store
            .transact(|queue| {
                *queue = next.queue.clone();
                Ok::<_, DispatchError>(())
            })
            .expect("publish");
        state = next;
    }
    assert_eq!(
        store.load().expect("final load"),
        state.queue,
        "seed {seed}: final queue"
    );
    path.len()
}

#[test]
fn random_walks_of_the_slot_model_round_trip_through_the_real_store() {
    let seeds: u64 = std::env::var("TOLLGATE_CONFORMANCE_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(40);
    let mut steps = 0;
    for seed in 0..seeds {
        steps += replay(SlotConfig::new(2, 2, 1), seed, 200);
        steps += replay(SlotConfig::new(3, 2, 1), seed, 200);
        steps += replay(SlotConfig::new(2, 3, 2), seed, 200);
    }
    tollgate::model::report(&format!(
        "slot conformance: replayed {steps} steps of {} seeded walks against queue.json",
        3 * seeds
    ));
    assert!(steps > 3 * seeds as usize, "the walks must take steps");
}
