//! The durable queue: `queue.json`, changed only under `queue.lock`.

mod lock;
mod store;

pub use lock::{LockError, QueueLock};
pub use store::{parse_queue, QueueStore, StoreError};
