//! A one-slot home whose runtime never spawns: for tests that run sections through the section
//! runner and look at what it committed, without a runner process acting on it afterwards.

use std::collections::BTreeMap;
use std::path::Path;
use tollgate::home::Home;
use tollgate::process::{ProcLiveness, RunnerSpawner, SpawnError};
use tollgate::protocol::slots::{ProcessIdentity, SlotToken, TurnKey};
use tollgate::queue::{HomeStore, Store};
use tollgate::runtime::{store_for, Runtime};
use tollgate::submit::SubmitRequest;

/// Refuses every spawn: a section's effect is not performed by these tests.
pub struct NoSpawn;

impl RunnerSpawner for NoSpawn {
    fn spawn(&self, key: &TurnKey, _token: SlotToken) -> Result<ProcessIdentity, SpawnError> {
        Err(SpawnError::Spawn {
            key: key.clone(),
            source: std::io::Error::other("no spawns in this test"),
        })
    }
}

/// A fresh one-slot home in `dir` on its configured store.
pub fn one_slot(dir: &Path) -> Runtime<ProcLiveness, HomeStore> {
    one_slot_with(dir, |store| store)
}

/// A fresh one-slot home in `dir` whose configured store is wrapped by `wrap` (a store that
/// fails on purpose, say).
pub fn one_slot_with<S: Store>(
    dir: &Path,
    wrap: impl FnOnce(HomeStore) -> S,
) -> Runtime<ProcLiveness, S> {
    let home = Home::at(dir);
    let config = home.init(Some(1)).expect("init");
    let store = wrap(store_for(&home, &config));
    Runtime {
        home,
        config,
        store,
        spawner: Box::new(NoSpawn),
        liveness: ProcLiveness,
    }
}

/// `submit --task TASK -- true`, nothing else set.
pub fn submit_true(task: &str) -> SubmitRequest {
    SubmitRequest {
        task: Some(task.into()),
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
