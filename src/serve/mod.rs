//! `tollgate serve`: the webhook ingress (spec/ingress.md). The admission decisions stay in the
//! core (`protocol::admission`) behind the in-process gate (`gate`); this module verifies senders,
//! maps the gate's answers to HTTP, makes admitted deliveries durable turns and watches them.
//!
//! - [`config`]: the `[serve]` table and `[[route]]` array of `tollgate.toml` (in `src/config/`,
//!   re-exported here; always compiled)
//! - `settings`: validated settings with secrets, paths in the home, errors
//! - `adapters`: sender verification and event identity per adapter
//! - `handler`: one delivery, in order: verify, admit + mark, durable turn, acknowledge
//! - `watcher`: settles permits with their turns' outcomes; detach timeout
//! - `accept`: the group commit of accepted deliveries (one transaction, one fsync for all)
//! - `state`: the dedupe marks, refused and handed-off deliveries (tables of `tollgate.db`);
//!   `dedupe_log`, `refused`: their files in homes without the database, and the import
//! - `events`, `metrics`: the JSON-lines log and `/metrics`
//! - `conn`: the accept loop and each connection: cap, timeouts, EMFILE back-off
//! - `conn_config`: the `[serve]` keys of connections and the log (`src/config/conn.rs`)
//! - `lifecycle`: single instance per home, re-adoption at start, drain and hand-off at shutdown
//! - `starter`: starts parked rows on free slots by itself, retrying a failed runner spawn

/// The connection and log keys of `[serve]`, declared in [`crate::config::conn`].
pub use crate::config::conn as conn_config;
/// The `[serve]` and `[[route]]` schema, declared in [`crate::config::serve`] (the config must
/// not import the ingress); kept under this path for the ingress's modules.
pub use crate::config::serve as config;

#[cfg(feature = "serve")]
mod accept;
#[cfg(feature = "serve")]
mod adapters;
#[cfg(feature = "serve")]
mod conn;
#[cfg(feature = "serve")]
mod dedupe_log;
#[cfg(feature = "serve")]
mod delivery;
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
mod starter;
#[cfg(feature = "serve")]
mod state;
#[cfg(feature = "serve")]
mod watcher;

#[cfg(feature = "serve")]
pub use lifecycle::{run, Summary};
#[cfg(feature = "serve")]
pub use refused::{load_refused, RefusedDelivery};
#[cfg(feature = "serve")]
pub use settings::{ServeError, ServePaths};
#[cfg(feature = "serve")]
pub use state::list_refused;
#[cfg(feature = "serve")]
pub use state::HandedOff;

/// A runtime for this process's shell calls (submit, cancel): no IO to build. Its runners (and
/// wakers) start without the routes' secrets ([`secret_variables`]).
#[cfg(feature = "serve")]
fn runtime_for(
    home: &crate::home::Home,
    config: &crate::config::Config,
) -> crate::runtime::Runtime {
    crate::runtime::Runtime {
        home: home.clone(),
        config: config.clone(),
        store: crate::runtime::store_for(home, config),
        spawner: Box::new(crate::process::ScrubbedSpawner {
            spawner: crate::process::DetachedSpawner {
                home: home.clone(),
                executable: None,
                settle: None,
            },
            remove_env: secret_variables(config).into_iter().collect(),
        }),
        liveness: crate::process::ProcLiveness,
    }
}

/// The variables no process `serve` starts may inherit, and no turn's stored environment holds:
/// every route's `secret_env`, and any other variable of this process whose value *contains* one
/// of their (non-empty) values, so a secret exported under a second name, or inside a longer
/// value (`AUTH="Bearer <secret>"`), does not leak through it.
#[cfg(feature = "serve")]
pub(crate) fn secret_variables(
    config: &crate::config::Config,
) -> std::collections::BTreeSet<std::ffi::OsString> {
    use std::os::unix::ffi::OsStrExt;
    let mut names: std::collections::BTreeSet<std::ffi::OsString> = config
        .routes
        .iter()
        .map(|r| std::ffi::OsString::from(&r.secret_env))
        .collect();
    let secrets: Vec<std::ffi::OsString> = names
        .iter()
        .filter_map(std::env::var_os)
        .filter(|v| !v.is_empty())
        .collect();
    for (name, value) in std::env::vars_os() {
        if secrets
            .iter()
            .any(|secret| contains(value.as_bytes(), secret.as_bytes()))
        {
            names.insert(name);
        }
    }
    names
}

/// Whether `needle` (non-empty) occurs in `haystack`.
#[cfg(feature = "serve")]
fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && haystack.windows(needle.len()).any(|w| w == needle)
}
