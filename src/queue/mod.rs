//! The queue store: `queue.json`, changed only under `queue.lock` (or in memory, for tests).

mod lock;
mod store;

pub use lock::{LockError, QueueLock};
pub use store::{MemoryStore, QueueStore, Store, StoreError};
