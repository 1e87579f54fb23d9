//! What every shell operation needs: the home, its config, the queue store, how runners are
//! spawned (and works killed) and how liveness is observed. Tests build one with fixture
//! spawners, liveness, or the in-memory store.

use crate::config::Config;
use crate::fsutil::FileError;
use crate::home::{Home, HomeError};
use crate::process::{DetachedSpawner, ProcLiveness, RunnerSpawner};
use crate::protocol::admission::Strategy;
use crate::protocol::slots::{steps, Liveness, QueueState};
use crate::queue::{HomeStore, Store};
use crate::tasks;
use std::collections::BTreeMap;

pub struct Runtime<L: Liveness = ProcLiveness, S: Store = HomeStore> {
    pub home: Home,
    pub config: Config,
    pub store: S,
    pub spawner: Box<dyn RunnerSpawner>,
    pub liveness: L,
}

impl Runtime<ProcLiveness> {
    /// Opens (creating if needed) `home` with the production spawner and `/proc` liveness. The
    /// store is the home's database; it is opened (and an old `queue.json` imported) on first use.
    pub fn open(home: Home) -> Result<Self, HomeError> {
        let config = home.ensure()?;
        let store = store_for(&home, &config);
        let spawner = Box::new(DetachedSpawner {
            home: home.clone(),
            executable: None,
            settle: None,
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

/// The home's store: `tollgate.db` (or the PostgreSQL database its `store` setting names) with
/// the config's `lock_timeout` and `durability`. No IO.
pub fn store_for(home: &Home, config: &Config) -> HomeStore {
    HomeStore::for_home(home, config)
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
        self.strategies_of(steps::strategies_needed(state))
    }

    /// The strategies of `tasks`, read from their task records (a task without a record has the
    /// default strategy): the core names the tasks ([`steps::strategies_needed`],
    /// [`steps::reconcile_strategies_needed`]), the shell only reads them.
    pub fn strategies_of<'a>(
        &self,
        tasks: impl IntoIterator<Item = &'a str>,
    ) -> Result<BTreeMap<String, Strategy>, FileError> {
        let mut strategies = BTreeMap::new();
        for task in tasks {
            let strategy = tasks::load_task(&self.home, task)?
                .map(|t| t.strategy)
                .unwrap_or_default();
            strategies.insert(task.to_string(), strategy);
        }
        Ok(strategies)
    }
}
