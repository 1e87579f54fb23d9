//! The queue store: the home's database, `tollgate.db` ([`SqliteStore`], spec/store.md) or
//! PostgreSQL ([`PostgresStore`]), or memory (tests). The file store of earlier versions
//! (`queue.json` under `queue.lock`) survives only as what the database's first open imports
//! ([`parse_queue`], `sqlite/import.rs`).

mod busy;
mod earlier_state;
mod home_store;
mod log_trim;
mod postgres;
pub mod records;
pub mod serve_tables;
pub mod serve_writes;
mod sqlite;
mod store;
mod wal_dirsync;

pub use home_store::{HomeStore, STORE_ENV};
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
pub use store::{parse_queue, Commit, MemoryStore, Store, StoreError};
