//! `tollgate serve`: the webhook ingress (spec/ingress.md). The admission decisions stay in the
//! core (`protocol::admission`) behind the in-process gate (`gate`); this module verifies senders,
//! maps the gate's answers to HTTP, makes admitted deliveries durable turns and watches them.
//!
//! - [`config`]: the `[serve]` table and `[[route]]` array of `tollgate.toml` (always compiled)
//! - `settings`: validated settings with secrets, paths in the home, errors
//! - `adapters`: sender verification and event identity per adapter
//! - `handler`: one delivery, in order: verify, admit + mark, durable turn, acknowledge
//! - `watcher`: settles permits with their turns' outcomes; detach timeout
//! - `dedupe_log`, `refused`, `events`, `metrics`: durable marks, refused github deliveries, the
//!   JSON-lines log and `/metrics`
//! - `lifecycle`: single instance per home, re-adoption at start, drain and hand-off at shutdown

pub mod config;

#[cfg(feature = "serve")]
mod adapters;
#[cfg(feature = "serve")]
mod dedupe_log;
#[cfg(feature = "serve")]
mod events;
#[cfg(feature = "serve")]
mod handler;
#[cfg(feature = "serve")]
mod lifecycle;
#[cfg(feature = "serve")]
mod metrics;
#[cfg(feature = "serve")]
mod refused;
#[cfg(feature = "serve")]
mod settings;
#[cfg(feature = "serve")]
mod watcher;

#[cfg(feature = "serve")]
pub use lifecycle::{run, HandedOff, Summary};
#[cfg(feature = "serve")]
pub use refused::{load_refused, RefusedDelivery};
#[cfg(feature = "serve")]
pub use settings::{ServeError, ServePaths};

/// A runtime for this process's shell calls (submit, cancel): no IO to build.
#[cfg(feature = "serve")]
fn runtime_for(
    home: &crate::home::Home,
    config: &crate::config::Config,
) -> crate::runtime::Runtime {
    crate::runtime::Runtime {
        home: home.clone(),
        config: config.clone(),
        store: crate::queue::QueueStore::new(home.clone(), config.lock_timeout()),
        spawner: Box::new(crate::process::DetachedSpawner {
            home: home.clone(),
            executable: None,
        }),
        liveness: crate::process::ProcLiveness,
    }
}
