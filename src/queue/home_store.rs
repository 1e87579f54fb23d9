//! The store the binary builds for a home: the database ([`SqliteStore`]), or, only for the
//! benchmark's side by side and tests, the file store of earlier versions ([`QueueStore`]).

use super::sqlite::SqliteStore;
use super::store::{Commit, QueueStore, Store, StoreError};
use crate::config::Config;
use crate::home::Home;
use crate::protocol::slots::QueueState;

/// Set to `1` to run a home on the file store (`queue.json` under `queue.lock`) instead of the
/// database: for `benches/store_fsync.sh`, which measures both in one run. Never for a real home:
/// the two stores do not share state, so a home that has a database refuses it.
pub const FILE_STORE_ENV: &str = "TOLLGATE_FILE_STORE";

#[derive(Debug)]
pub enum HomeStore {
    Database(SqliteStore),
    File(QueueStore),
}

impl HomeStore {
    /// The home's store with the config's `lock_timeout` and `durability`. No IO.
    pub fn for_home(home: &Home, config: &Config) -> HomeStore {
        if std::env::var_os(FILE_STORE_ENV).is_some_and(|v| v == "1") {
            HomeStore::File(QueueStore::new(home.clone(), config.lock_timeout()))
        } else {
            HomeStore::Database(SqliteStore::new(
                home.clone(),
                config.lock_timeout(),
                config.durability,
            ))
        }
    }

    /// [`Store::load`], callable without importing the trait.
    pub fn load(&self) -> Result<QueueState, StoreError> {
        Store::load(self)
    }

    /// [`Store::transact`]: a durable ([`Commit::Promise`]) section.
    pub fn transact<R, E>(
        &self,
        change: impl FnOnce(&mut QueueState) -> Result<R, E>,
    ) -> Result<R, E>
    where
        E: From<StoreError>,
    {
        Store::transact(self, change)
    }

    /// The file store on a home that has a database would show a different queue: refused.
    fn file_store(store: &QueueStore) -> Result<&QueueStore, StoreError> {
        let db = store.home().db_path();
        if db.exists() {
            return Err(StoreError::Database {
                path: db,
                detail: format!(
                    "{FILE_STORE_ENV}=1 asks for the file store, but this home keeps its queue in \
                     this database; unset {FILE_STORE_ENV}"
                ),
            });
        }
        Ok(store)
    }
}

impl Store for HomeStore {
    fn load(&self) -> Result<QueueState, StoreError> {
        match self {
            HomeStore::Database(store) => Store::load(store),
            HomeStore::File(store) => Self::file_store(store)?.load(),
        }
    }

    fn transact_as<R, E>(
        &self,
        commit: Commit,
        change: impl FnOnce(&mut QueueState) -> Result<R, E>,
    ) -> Result<R, E>
    where
        E: From<StoreError>,
    {
        match self {
            HomeStore::Database(store) => store.transact_as(commit, change),
            HomeStore::File(store) => Self::file_store(store)?.transact_as(commit, change),
        }
    }
}
