//! What every shell operation needs: the home, its config, the queue store, how runners are
//! spawned (and works killed) and how liveness is observed. Tests build one with fixture
//! spawners, liveness, or the in-memory store.

use crate::config::Config;
use crate::fsutil::FileError;
use crate::home::{Home, HomeError};
use crate::process::{DetachedSpawner, ProcLiveness, RunnerSpawner};
use crate::protocol::admission::Strategy;
use crate::protocol::slots::{steps, Liveness, QueueState};
use crate::queue::{QueueStore, Store};
use crate::tasks;
use std::collections::BTreeMap;

pub struct Runtime<L: Liveness = ProcLiveness, S: Store = QueueStore> {
    pub home: Home,
    pub config: Config,
    pub store: S,
    pub spawner: Box<dyn RunnerSpawner>,
    pub liveness: L,
}

impl Runtime<ProcLiveness> {
    /// Opens (creating if needed) `home` with the production spawner and `/proc` liveness.
    pub fn open(home: Home) -> Result<Self, HomeError> {
        let config = home.ensure()?;
        let store = QueueStore::new(home.clone(), config.lock_timeout());
        let spawner = Box::new(DetachedSpawner {
            home: home.clone(),
            executable: None,
        });
        Ok(Runtime {
            home,
            config,
            store,
            spawner,
            liveness: ProcLiveness,
        })
    }
}

impl<L: Liveness, S: Store> Runtime<L, S> {
    /// The cap for detached starts.
    pub fn cap(&self) -> usize {
        self.config.workers
    }

    /// The strategies a start decision on `state` needs, read from the task records (a task
    /// without a record has the default strategy).
    pub fn strategies_for(
        &self,
        state: &QueueState,
    ) -> Result<BTreeMap<String, Strategy>, FileError> {
        let mut strategies = BTreeMap::new();
        for task in steps::strategies_needed(state) {
            let strategy = tasks::load_task(&self.home, task)?
                .map(|t| t.strategy)
                .unwrap_or_default();
            strategies.insert(task.to_string(), strategy);
        }
        Ok(strategies)
    }
}
