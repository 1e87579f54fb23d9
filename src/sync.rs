//! The one place that chooses between std and loom synchronisation primitives.
//!
//! Code that is raced under loom (`loom-tests/`, built with `--cfg tollgate_loom`) takes its
//! mutexes, atomics, threads and channels from here, so the same source runs under the model
//! scheduler and in production; serve takes every primitive from here too (`tests/layout.rs`
//! checks it), so a reader finds them in one place. Our own cfg, not `loom`, keeps dependencies such as tokio out of their loom mode.

#[cfg(not(tollgate_loom))]
pub use std::sync::{atomic, mpsc, Arc, Condvar, Mutex, MutexGuard};
#[cfg(not(tollgate_loom))]
pub use std::thread;

#[cfg(tollgate_loom)]
pub use loom::sync::{atomic, mpsc, Arc, Condvar, Mutex, MutexGuard};
#[cfg(tollgate_loom)]
pub use loom::thread;

/// Locks `mutex`, recovering the guard if a holder panicked.
///
/// Every structure guarded here keeps its invariants between statements that cannot panic, so a
/// poisoned lock carries consistent data; refusing it would turn one bug into a wedged runtime.
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    match mutex.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    }
}
