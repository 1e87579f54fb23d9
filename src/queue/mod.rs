//! The queue store: the home's database `tollgate.db` ([`SqliteStore`], spec/store.md), the file
//! store of earlier versions (`queue.json` under `queue.lock`), or memory (tests).

mod busy;
mod earlier_state;
mod home_store;
mod lock;
mod log_trim;
mod postgres;
pub mod records;
pub mod serve_tables;
mod sqlite;
mod store;
mod wal_dirsync;

pub use home_store::{HomeStore, FILE_STORE_ENV, STORE_ENV};
pub use lock::{LockError, QueueLock};
pub use postgres::{
    redact, FleetContext, PostgresLock, PostgresStore, PostgresUrl, POSTGRES_SCHEMA_VERSION,
};
pub use postgres::{
    DrainChange, DrainedHost, OutputStream, StoredOutput, TURN_OUTPUT_CHUNK_BYTES,
    TURN_OUTPUT_MAX_BYTES, TURN_OUTPUT_MAX_CHUNKS,
};
pub use postgres::{LeaseSnapshot, LEASE_LOCK};
pub use records::RecordTx;
pub(crate) use sqlite::SWEEP_SCHEMA_V6;
pub use sqlite::{check_database, DoctorReport, SqliteStore, SCHEMA_VERSION};
pub use store::{parse_queue, Commit, MemoryStore, QueueStore, Store, StoreError};
