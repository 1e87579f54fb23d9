//! What `serve` runs with: the validated `[serve]` table and routes with their secrets, the files
//! it keeps in the home, and its errors.

use super::adapters::Policy;
use super::config::{AdapterKind, DispatchMode, RouteTable};
use crate::config::Config;
use crate::fsutil::FileError;
use crate::home::Home;
use crate::protocol::admission::{AdmissionError, Limits};
use crate::sync::Arc;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The config (or an argument) is wrong; nothing was started.
    #[error("{0}")]
    Config(String),
    #[error("[[route]] {path}: key `secret_env`: the environment variable {var} is not set (or empty); export the route's shared secret in it")]
    MissingSecret { path: String, var: String },
    #[error("another `tollgate serve` already serves this home ({lock} is held{holder}); stop it first or use another --home")]
    AlreadyServing { lock: PathBuf, holder: String },
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    File(#[from] FileError),
}

impl From<AdmissionError> for ServeError {
    fn from(error: AdmissionError) -> Self {
        ServeError::Config(format!("[serve] key `max_detached`: {error}"))
    }
}

/// One route, ready to serve.
pub struct Route {
    pub table: RouteTable,
    pub secret: Vec<u8>,
    /// Its signature window and form, from the table.
    pub policy: Policy,
    /// `cwd`, resolved against serve's directory and checked to be a directory at start.
    pub cwd: Option<PathBuf>,
}

impl Route {
    pub fn adapter(&self) -> AdapterKind {
        self.table.adapter
    }
    pub fn dispatch(&self) -> DispatchMode {
        self.table.dispatch
    }
}

pub struct Settings {
    pub listen: SocketAddr,
    pub limits: Limits,
    pub detach_timeout_millis: u64,
    pub dedupe_ttl_millis: u64,
    pub drain_timeout_millis: u64,
    pub body_limit_bytes: usize,
    pub routes: HashMap<String, Arc<Route>>,
}

fn millis(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl Settings {
    /// From the home's config; `listen` overrides `[serve] listen`; every route's secret is read
    /// from its environment variable now.
    pub fn from_config(config: &Config, listen: Option<&str>) -> Result<Settings, ServeError> {
        let table = config.serve.clone().unwrap_or_default();
        let listen = match listen {
            Some(text) => text
                .parse()
                .map_err(|e| ServeError::Config(format!("--listen {text:?}: {e}")))?,
            None => table
                .listen_addr()
                .map_err(|e| ServeError::Config(format!("[serve] key `listen`: {e}")))?,
        };
        let limits = Limits::new(table.max_detached, table.max_detached_per_tenant)?;
        let dedupe_ttl_millis = millis(table.dedupe_ttl());
        let mut routes = HashMap::new();
        for route in &config.routes {
            let policy = Policy::of(route);
            // Within its window a captured request can only come back as a duplicate, so the
            // dedupe log must remember identities at least that long.
            let window_millis = policy
                .replay_window_secs
                .saturating_add(policy.clock_skew_secs)
                .saturating_mul(1000);
            if route.adapter != AdapterKind::Github && window_millis > dedupe_ttl_millis {
                return Err(ServeError::Config(format!(
                    "[[route]] {}: key `replay_window`: the replay window plus clock_skew ({}s) is longer than [serve] dedupe_ttl ({}s); a request replayed inside it would run again",
                    route.path,
                    window_millis / 1000,
                    dedupe_ttl_millis / 1000
                )));
            }
            let cwd = match &route.cwd {
                None => None,
                Some(dir) => {
                    let path = std::env::current_dir()
                        .map_err(|source| ServeError::Io {
                            what: "reading the current directory".into(),
                            source,
                        })?
                        .join(dir);
                    if !path.is_dir() {
                        return Err(ServeError::Config(format!(
                            "[[route]] {}: key `cwd`: {} is not a directory",
                            route.path,
                            path.display()
                        )));
                    }
                    Some(path)
                }
            };
            let secret = std::env::var(&route.secret_env)
                .ok()
                .filter(|s| !s.is_empty())
                .ok_or_else(|| ServeError::MissingSecret {
                    path: route.path.clone(),
                    var: route.secret_env.clone(),
                })?;
            routes.insert(
                route.path.clone(),
                Arc::new(Route {
                    table: route.clone(),
                    secret: secret.into_bytes(),
                    policy,
                    cwd,
                }),
            );
        }
        Ok(Settings {
            listen,
            limits,
            detach_timeout_millis: millis(table.detach_timeout()),
            dedupe_ttl_millis,
            drain_timeout_millis: millis(table.drain_timeout()),
            body_limit_bytes: table.body_limit,
            routes,
        })
    }
}

/// Where `serve` keeps its files in the home.
pub struct ServePaths {
    pub dir: PathBuf,
    pub lock: PathBuf,
    pub log: PathBuf,
    pub dedupe: PathBuf,
    pub refused: PathBuf,
    pub handed_off: PathBuf,
}

impl ServePaths {
    pub fn new(home: &Home) -> Self {
        let dir = home.root().join("serve");
        ServePaths {
            lock: home.root().join("serve.lock"),
            log: home.root().join("serve.log.jsonl"),
            dedupe: dir.join("dedupe.jsonl"),
            refused: dir.join("refused.jsonl"),
            handed_off: dir.join("handed-off.json"),
            dir,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VAR: &str = "TOLLGATE_SETTINGS_UNIT_TEST_SECRET";

    fn settings(text: &str) -> Result<Settings, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let path = dir.path().join("tollgate.toml");
        std::fs::write(&path, text).map_err(|e| e.to_string())?;
        let config = Config::load(&path)
            .map_err(|e| e.to_string())?
            .unwrap_or_default();
        Settings::from_config(&config, None).map_err(|e| e.to_string())
    }

    #[test]
    fn a_replay_window_longer_than_the_dedupe_ttl_or_a_missing_cwd_is_refused() {
        // Only this test reads the variable; nothing else in the process sets it.
        std::env::set_var(VAR, "s");
        let route = |adapter: &str, extra: &str| {
            format!("workers = 1\n[serve]\ndedupe_ttl = \"5m\"\n\n[[route]]\npath = \"/a\"\nadapter = \"{adapter}\"\nsecret_env = \"{VAR}\"\ntask = \"t\"\nrun = [\"x\"]\n{extra}")
        };
        let error = settings(&route("generic", "")).err().unwrap_or_default();
        assert!(
            error.contains("key `replay_window`") && error.contains("dedupe_ttl"),
            "{error}"
        );
        assert!(settings(&route("generic", "replay_window = \"3m\"\n")).is_ok());
        assert!(
            settings(&route("github", "")).is_ok(),
            "github has no timestamp"
        );
        let error = settings(&route(
            "slack-events",
            "replay_window = \"3m\"\ncwd = \"/nonexistent/dir\"\n",
        ))
        .err()
        .unwrap_or_default();
        assert!(
            error.contains("key `cwd`") && error.contains("/nonexistent/dir"),
            "{error}"
        );
    }
}
