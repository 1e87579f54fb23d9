//! The store the binary builds for a home: its database, `tollgate.db` ([`SqliteStore`]) or
//! PostgreSQL ([`PostgresStore`]). An earlier version's files (`queue.json`, the record files)
//! are only imported, once, when the database is opened (spec/store.md, "Migration from
//! `queue.json` and the record files").

use super::postgres::{PostgresStore, PostgresUrl};
use super::records::RecordTx;
use super::sqlite::SqliteStore;
use super::store::{Commit, Store, StoreError};
use crate::config::Config;
use crate::home::Home;
use crate::protocol::fleet::FleetView;
use crate::protocol::slots::steps::{Loaded, Reads};
use crate::protocol::slots::QueueState;

/// Overrides the `store` setting of tollgate.toml: `sqlite` (the home's `tollgate.db`) or a
/// `postgres://` URL (spec/store.md, "PostgreSQL").
pub const STORE_ENV: &str = "TOLLGATE_STORE";

#[derive(Debug)]
pub enum HomeStore {
    Database(SqliteStore),
    /// Boxed: the client and its URL make it several times the size of the others.
    Postgres(Box<PostgresStore>),
    /// A `store` setting that does not parse: every use fails naming it, nothing is changed.
    Misconfigured {
        setting: String,
        detail: String,
    },
}

impl HomeStore {
    /// The home's store with the config's `lock_timeout` and `durability`. No IO.
    pub fn for_home(home: &Home, config: &Config) -> HomeStore {
        let (setting, store) = match std::env::var(STORE_ENV) {
            Ok(value) if !value.is_empty() => (STORE_ENV.to_string(), Some(value)),
            _ => (
                format!("{}: `store`", home.config_path().display()),
                config.store.clone(),
            ),
        };
        // The records follow the queue into its database (spec/store.md, "Records"). The
        // choice is registered once, when it is made: another thread's record access must never
        // see a PostgreSQL home as a SQLite one, not even for an instant (it would open, or
        // refuse as lost, a `tollgate.db` the home never had).
        if let Some(url) = store.filter(|s| s != "sqlite") {
            let built = Self::postgres_for_home(home, config, setting, &url);
            if let HomeStore::Misconfigured { setting, detail } = &built {
                super::records::register(
                    home,
                    super::records::RecordHome::Misconfigured {
                        setting: setting.clone(),
                        detail: detail.clone(),
                    },
                    config.lock_timeout(),
                );
            }
            return built;
        }
        super::records::register(
            home,
            super::records::RecordHome::Sqlite,
            config.lock_timeout(),
        );
        HomeStore::Database(SqliteStore::new(
            home.clone(),
            config.lock_timeout(),
            config.durability,
        ))
    }

    /// The PostgreSQL store `url` names for `home` (registering its records' choice), or why
    /// the setting is refused.
    fn postgres_for_home(home: &Home, config: &Config, setting: String, url: &str) -> HomeStore {
        let url = match PostgresUrl::parse(url) {
            Ok(url) => url,
            Err(detail) => return HomeStore::Misconfigured { setting, detail },
        };
        // A `host` setting says this home is one of a fleet, whose homes must name one queue:
        // without `?queue=` each would get its own (named by its path) and the fleet would split
        // silently (spec/fleet.md, "One queue per fleet").
        if url.queue.is_none() && config.host.is_some() {
            return HomeStore::Misconfigured {
                setting,
                detail: format!(
                    "`host` names this machine in a fleet, but the store URL names no queue, so \
                     this home would get a queue of its own (named by its path) instead of \
                     sharing the fleet's; add `?queue=NAME` (the same on every host of the \
                     fleet) to it, e.g. `{}?queue=fleet`, or remove `host` for a home of its own",
                    url.redacted
                ),
            };
        }
        // Every section sees the fleet's leases (spec/fleet.md).
        let fleet = match context_for(config) {
            Ok(fleet) => fleet,
            Err(detail) => return HomeStore::Misconfigured { setting, detail },
        };
        // Each home its own queue unless the URL names one (the records are in the queue's
        // tables, so homes naming one queue share them). The canonical path, so `--home h`,
        // `--home ./h` and `--home /abs/h` are one queue (the home exists by the time a command
        // uses its store).
        let queue = url.queue.clone().unwrap_or_else(|| {
            std::fs::canonicalize(home.root())
                .or_else(|_| std::path::absolute(home.root()))
                .unwrap_or_else(|_| home.root().to_path_buf())
                .display()
                .to_string()
        });
        super::records::register(
            home,
            super::records::RecordHome::Postgres {
                url: url.clone(),
                queue: queue.clone(),
                durability: config.durability,
            },
            config.lock_timeout(),
        );
        let store = PostgresStore::new(url, queue, config.lock_timeout(), config.durability)
            .for_home(home.clone());
        HomeStore::Postgres(Box::new(store.with_fleet(fleet)))
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
}

impl Store for HomeStore {
    fn load(&self) -> Result<QueueState, StoreError> {
        match self {
            HomeStore::Database(store) => Store::load(store),
            HomeStore::Postgres(store) => Store::load(store.as_ref()),
            HomeStore::Misconfigured { setting, detail } => Err(misconfigured(setting, detail)),
        }
    }

    fn load_active(&self) -> Result<QueueState, StoreError> {
        match self {
            HomeStore::Database(store) => store.load_active(),
            HomeStore::Postgres(store) => store.load_active(),
            other => Store::load(other),
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
            HomeStore::Postgres(store) => store.transact_as(commit, change),
            HomeStore::Misconfigured { setting, detail } => {
                Err(misconfigured(setting, detail).into())
            }
        }
    }

    fn transact_reading<R, E>(
        &self,
        commit: Commit,
        reads: &Reads,
        change: impl FnOnce(&mut QueueState, &Loaded) -> Result<R, E>,
    ) -> Result<R, E>
    where
        E: From<StoreError>,
    {
        match self {
            HomeStore::Database(store) => store.transact_reading(commit, reads, change),
            HomeStore::Postgres(store) => store.transact_reading(commit, reads, change),
            other => other.transact_as(commit, |state| change(state, &Loaded::Whole)),
        }
    }

    fn transact_section<R, E>(
        &self,
        commit: Commit,
        reads: &Reads,
        change: impl FnOnce(
            &mut QueueState,
            &Loaded,
            &mut Option<FleetView>,
            &mut RecordTx<'_>,
        ) -> Result<R, E>,
    ) -> Result<R, E>
    where
        E: From<StoreError>,
    {
        match self {
            HomeStore::Database(store) => store.transact_section(commit, reads, change),
            HomeStore::Postgres(store) => store.transact_section(commit, reads, change),
            other => other.transact_reading(commit, reads, |state, loaded| {
                change(state, loaded, &mut None, &mut RecordTx::outside())
            }),
        }
    }

    fn lease_renewer(&self) -> Option<PostgresStore> {
        match self {
            HomeStore::Postgres(store) if store.fleet().is_some() => {
                Some(store.on_own_connection())
            }
            _ => None,
        }
    }

    fn next_turn_id_hint(&self) -> Option<u64> {
        match self {
            HomeStore::Database(store) => store.next_turn_id_hint(),
            HomeStore::Postgres(store) => store.next_turn_id_hint(),
            _ => None,
        }
    }
}

fn misconfigured(setting: &str, detail: &str) -> StoreError {
    StoreError::Database {
        path: setting.into(),
        detail: detail.to_string(),
    }
}

/// A PostgreSQL home's fleet context: its host ([`crate::config::fleet::host_for`]) and the lease numbers
/// ([`crate::config::fleet::lease_timing`]); the error names what is at fault.
fn context_for(config: &Config) -> Result<super::FleetContext, String> {
    let host = crate::config::fleet::host_for(config).map_err(|e| e.to_string())?;
    let timing = crate::config::fleet::lease_timing().map_err(|e| e.to_string())?;
    Ok(super::FleetContext { host, timing })
}
