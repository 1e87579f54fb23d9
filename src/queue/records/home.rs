//! Where a home keeps its task and turn records, as its store was built, and the store
//! connections a record access outside a section uses.
//!
//! **Why a registry by home.** About 40 callers of [`crate::tasks`] (`status`, `logs`, `wait`,
//! the runner's started record, serve's watcher) read and write records outside any section with
//! only a `&Home` in hand: the store is built where the command starts, far from them. So the
//! store registers, when it is built, where its home's records are ([`register`]) and the
//! connections it can lend to those accesses ([`share_sqlite`], [`share_side_store`]): a command
//! then opens its database once instead of once per record. What is registered is a choice and
//! idle connections, never a transaction in progress: a section's records reach it as its
//! [`super::RecordTx`], and a registered connection is used only while no section holds it.

use crate::home::Home;
use crate::queue::postgres::{PostgresStore, PostgresUrl};
use rusqlite::Connection;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

/// The most homes a process remembers the store choice of (a command has one; tests a few).
const MAX_REGISTERED_HOMES: usize = 64;

/// A store's side connection and the `synchronous` level it is at.
pub(crate) type SideConnection = (Connection, Option<&'static str>);

/// A SQLite store's connection slots as the record layer may use them outside sections: the
/// store's own connection (free while no section of the store runs) and the store's side
/// connection (for an access while another thread's section holds the first).
#[derive(Clone)]
pub(crate) struct SqliteSlots {
    pub(crate) open: Weak<Mutex<Option<crate::queue::sqlite::Open>>>,
    pub(crate) side: Weak<Mutex<Option<SideConnection>>>,
}

/// The slots of a live store ([`SqliteSlots`], upgraded).
pub(crate) type LiveSlots = (
    Arc<Mutex<Option<crate::queue::sqlite::Open>>>,
    Arc<Mutex<Option<SideConnection>>>,
);

/// The connection slots of the SQLite stores built in this process, by database (the newest
/// store of a database first); at most [`MAX_REGISTERED_HOMES`].
static SHARED: Mutex<Vec<(PathBuf, SqliteSlots)>> = Mutex::new(Vec::new());

/// Lends the connection slots of a SQLite store of `db` to the record accesses outside sections
/// (called when the store is built; no IO). Dropped stores are forgotten; an earlier live store
/// of the same database is kept behind the new one, so a short-lived store (serve builds one per
/// batch) does not leave the accesses without the long-lived one's connections once it is gone.
pub(crate) fn share_sqlite(db: PathBuf, slot: SqliteSlots) {
    let mut shared = SHARED.lock().unwrap_or_else(|e| e.into_inner());
    shared.retain(|(_, slots)| slots.open.strong_count() > 0);
    if shared.len() >= MAX_REGISTERED_HOMES {
        shared.pop();
    }
    shared.insert(0, (db, slot));
}

/// The live store slots of `db`, if a store of it was built in this process.
pub(crate) fn shared_slots(db: &Path) -> Option<LiveSlots> {
    let shared = SHARED.lock().unwrap_or_else(|e| e.into_inner());
    shared
        .iter()
        .filter(|(path, _)| path == db)
        .find_map(|(_, slots)| Some((slots.open.upgrade()?, slots.side.upgrade()?)))
}

/// Where a home's task and turn records live, as its store was built: always a database (an
/// earlier version's record files are only imported, at its first open).
#[derive(Clone, Debug)]
pub enum RecordHome {
    /// The home's `tollgate.db`.
    Sqlite,
    /// The PostgreSQL database of the home's store, in its queue (schema version 5).
    Postgres {
        url: PostgresUrl,
        queue: String,
        durability: crate::config::Durability,
    },
    /// A home whose store setting (or config) is refused: every record access fails naming
    /// `setting`, and none falls back to a `tollgate.db` the home may never have had.
    Misconfigured { setting: String, detail: String },
}

/// `(home root, where its records are, lock_timeout)` as the homes' stores were built.
static HOMES: Mutex<Vec<(PathBuf, RecordHome, Duration)>> = Mutex::new(Vec::new());

/// Records the store choice for `home` (called when its store is built).
pub fn register(home: &Home, records: RecordHome, lock_timeout: Duration) {
    let mut homes = HOMES.lock().unwrap_or_else(|e| e.into_inner());
    let root = home.root().to_path_buf();
    homes.retain(|(r, ..)| r != &root);
    if homes.len() >= MAX_REGISTERED_HOMES {
        homes.remove(0);
    }
    homes.push((root, records, lock_timeout));
}

fn registered(home: &Home) -> Option<(RecordHome, Duration)> {
    let homes = HOMES.lock().unwrap_or_else(|e| e.into_inner());
    homes
        .iter()
        .find(|(r, ..)| r == home.root())
        .map(|(_, records, timeout)| (records.clone(), *timeout))
}

/// Where `home` keeps its records, and the lock timeout to open its database with. A home no
/// store was built for in this process (a test reading records): a PostgreSQL home by its config
/// (or `TOLLGATE_STORE`), else its `tollgate.db`, opened as every command opens it: created if
/// missing, an earlier version's files imported into it (spec/store.md, "Records").
pub(crate) fn choice(home: &Home) -> (RecordHome, Duration) {
    if let Some(found) = registered(home) {
        return found;
    }
    let config = match crate::config::Config::load(&home.config_path()) {
        Ok(config) => config.unwrap_or_default(),
        // Not guessed: a PostgreSQL home read as a SQLite one would open (or refuse as lost) a
        // `tollgate.db` it never had.
        Err(e) => {
            let refused = RecordHome::Misconfigured {
                setting: home.config_path().display().to_string(),
                detail: e.to_string(),
            };
            return (refused, crate::config::Config::default().lock_timeout());
        }
    };
    // Building the store registers its choice (the database's, or the setting's refusal).
    let _ = crate::queue::HomeStore::for_home(home, &config);
    registered(home).unwrap_or((RecordHome::Sqlite, config.lock_timeout()))
}

/// Whether `home`'s records are in a PostgreSQL database: homes of a fleet, where a turn may run
/// on a host whose home has no folder for it yet.
pub fn in_postgres(home: &Home) -> bool {
    matches!(choice(home).0, RecordHome::Postgres { .. })
}

/// The database holding `home`'s records, as messages name it: `tollgate.db`'s path, or the
/// PostgreSQL URL (password redacted) and the queue.
pub fn database_name(home: &Home) -> PathBuf {
    match choice(home).0 {
        RecordHome::Postgres { url, queue, .. } => {
            PathBuf::from(format!("{} (queue {queue:?})", url.redacted))
        }
        RecordHome::Sqlite => home.db_path(),
        RecordHome::Misconfigured { setting, .. } => PathBuf::from(setting),
    }
}

/// The PostgreSQL stores whose connection serves record accesses outside a section, one per
/// `(URL, queue)`, shared by the process's threads (each store serialises its own client; a
/// section holds it for its whole transaction, so an access never runs inside another's). A
/// static, not a thread-local: a client dropped at thread exit would need tokio's thread-local
/// context, already gone by then.
static PG_SIDES: Mutex<Vec<(PgKey, std::sync::Arc<PostgresStore>)>> = Mutex::new(Vec::new());

/// `(connect URL, queue)`: what a section and the record accesses it serves are matched by.
pub(crate) type PgKey = (String, String);

/// A PostgreSQL home as the record layer reaches it: the URL, the queue, the durability and the
/// lock timeout.
pub(crate) type PgTarget = (PostgresUrl, String, crate::config::Durability, Duration);

/// The store whose connection serves `key`'s record accesses outside a section: the home's store
/// when one was built in this process, else one built here (and registered by being built).
pub(crate) fn side_store(
    key: &(String, String),
    home: &Home,
    (url, queue, durability, timeout): &PgTarget,
) -> std::sync::Arc<PostgresStore> {
    let find = || {
        let sides = PG_SIDES.lock().unwrap_or_else(|e| e.into_inner());
        sides
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, store)| store.clone())
    };
    if let Some(store) = find() {
        return store;
    }
    // Building a home's store registers it (sharing its connection) as the side store.
    let built = PostgresStore::new(url.clone(), queue.clone(), *timeout, *durability)
        .for_home(home.clone());
    find().unwrap_or_else(|| std::sync::Arc::new(built))
}

/// Makes `store` (sharing a home store's connection, [`PostgresStore::for_home`]) the side store
/// of `key`, replacing an earlier one.
pub(crate) fn share_side_store(key: PgKey, store: std::sync::Arc<PostgresStore>) {
    let mut sides = PG_SIDES.lock().unwrap_or_else(|e| e.into_inner());
    sides.retain(|(k, _)| k != &key);
    if sides.len() >= MAX_REGISTERED_HOMES {
        sides.remove(0);
    }
    sides.push((key, store));
}

#[cfg(test)]
mod tests {
    use crate::fsutil::FileError;
    use crate::home::Home;

    /// The record of task `job`, read as every record access outside a section reads it.
    fn read_task(home: &Home) -> Result<Option<String>, FileError> {
        let name = super::database_name(home);
        super::super::with_db(home, super::super::Access::Read, None, |db| {
            db.task_body("job")
                .map_err(|e| super::super::db_error(&name, e))
        })
    }

    /// A home whose store setting is refused (here a fleet host whose URL names no queue) has
    /// its record accesses refused naming the setting: none opens, creates or refuses as lost a
    /// `tollgate.db` the home never had.
    #[test]
    fn a_refused_store_setting_refuses_record_accesses_and_creates_no_database() {
        let dir = tempfile::tempdir().expect("tempdir");
        let home = Home::at(dir.path());
        std::fs::write(
            home.config_path(),
            "store = \"postgres://nobody@127.0.0.1:1/none\"\nhost = \"a\"\n",
        )
        .expect("config");
        let err = read_task(&home).expect_err("refused");
        let message = err.to_string();
        assert!(message.contains("tollgate.toml"), "{message}");
        assert!(message.contains("?queue="), "{message}");
        assert!(!home.db_path().exists(), "no tollgate.db was created");
    }

    /// A config that does not parse is not read as "no store setting": the record access is
    /// refused naming the file, and no `tollgate.db` appears.
    #[test]
    fn an_unreadable_config_refuses_record_accesses_and_creates_no_database() {
        let dir = tempfile::tempdir().expect("tempdir");
        let home = Home::at(dir.path());
        std::fs::write(home.config_path(), "store = [\n").expect("config");
        let err = read_task(&home).expect_err("refused");
        assert!(err.to_string().contains("tollgate.toml"), "{err}");
        assert!(!home.db_path().exists(), "no tollgate.db was created");
    }

    /// While a thread builds a PostgreSQL home's store again and again (serve builds one per
    /// batch), another thread's record accesses always see the home as PostgreSQL: the choice is
    /// registered once, never first as SQLite (CI once saw a restarted serve refuse its home as a
    /// lost `tollgate.db` through that instant).
    #[test]
    fn a_postgres_home_is_never_seen_as_sqlite_while_its_store_is_built() {
        let dir = tempfile::tempdir().expect("tempdir");
        let home = Home::at(dir.path());
        std::fs::write(
            home.config_path(),
            "store = \"postgres://nobody@127.0.0.1:1/none?queue=q\"\n",
        )
        .expect("config");
        let config = crate::config::Config::load(&home.config_path())
            .expect("config")
            .unwrap_or_default();
        let _ = crate::queue::HomeStore::for_home(&home, &config);
        const BUILDS: usize = 20_000;
        let done = std::sync::atomic::AtomicBool::new(false);
        let seen_sqlite = std::thread::scope(|s| {
            let reader = s.spawn(|| {
                let mut seen = 0usize;
                while !done.load(std::sync::atomic::Ordering::Acquire) {
                    if !super::in_postgres(&home) {
                        seen += 1;
                    }
                }
                seen
            });
            for _ in 0..BUILDS {
                let _ = crate::queue::HomeStore::for_home(&home, &config);
            }
            done.store(true, std::sync::atomic::Ordering::Release);
            reader.join().expect("reader")
        });
        assert_eq!(
            seen_sqlite, 0,
            "reads that saw the PostgreSQL home as SQLite"
        );
        assert!(!home.db_path().exists());
    }
}
