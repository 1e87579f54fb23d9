//! What every shell operation needs: the home, its config, the queue store, how runners are
//! spawned (and works killed) and how liveness is observed. Tests build one with fixture
//! spawners, liveness, or the in-memory store.

use crate::config::Config;
use crate::home::{Home, HomeError};
use crate::process::{DetachedSpawner, ProcLiveness, RunnerSpawner};
use crate::protocol::slots::Liveness;
use crate::queue::{QueueStore, Store};

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
}
