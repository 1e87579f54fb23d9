//! `tollgate.toml`: the home's configuration. Unknown keys and bad values are refused with the key
//! (and line) at fault; a config that does not load changes nothing.
//!
//! The schema is this module and its children: [`serve`] (`[serve]`, `[[route]]`), [`conn`] (the
//! `[serve]` keys of connections and the log) and [`limits`] (bounds shared with the turn records).
//! [`edit`] changes one key of the file in place (comments kept). They import nothing of `serve`, `tasks` or `home`, so `home` → `config` → `config::serve` →
//! `config::conn` is a DAG; `serve` reads these types (re-exported as `serve::config`).

pub mod conn;
pub mod edit;
pub mod env;
pub mod fleet;
pub mod hooks;
pub mod limits;
pub mod serve;

use self::serve::{RouteTable, ServeTable};
use crate::fsutil::{self, FileError};
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::time::Duration;

pub const CONFIG_FORMAT_VERSION: u32 = 1;
/// An upper bound on worker slots; more would only hide a typo.
pub const MAX_WORKERS: usize = 1024;
/// The longest `lock_timeout` accepted.
pub const MAX_LOCK_TIMEOUT: Duration = Duration::from_secs(24 * 60 * 60);

fn default_version() -> u32 {
    CONFIG_FORMAT_VERSION
}
fn default_workers() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get())
}
fn default_lock_timeout() -> String {
    "10s".to_string()
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default = "default_version")]
    pub version: u32,
    /// Worker slots: the cap on detached runners.
    #[serde(default = "default_workers")]
    pub workers: usize,
    /// How long a command waits for the queue's write lock (the database's, `tollgate.db`) before
    /// giving up (humantime, e.g. "10s").
    #[serde(default = "default_lock_timeout")]
    pub lock_timeout: String,
    /// When a commit of the home's database waits for the disk (spec/store.md, "Durability"):
    /// `fsync` (default) syncs every commit that makes a promise; `os` leaves every commit to the
    /// OS, trading the last moments before a power loss for speed.
    #[serde(default, skip_serializing_if = "Durability::is_default")]
    pub durability: Durability,
    /// Where the queue lives (spec/store.md): `sqlite` (default: the home's `tollgate.db`) or a
    /// `postgres://` URL (`?queue=NAME` picks the queue; default: one per home). The
    /// `TOLLGATE_STORE` environment variable overrides it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store: Option<String>,
    /// This host's name in a fleet sharing one PostgreSQL store (spec/fleet.md): 1 to 64 ASCII
    /// letters, digits, `.`, `_`, `-`. Default: derived from the machine id and the boot id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// `[serve]`: the webhook ingress (`tollgate serve`); defaults when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serve: Option<ServeTable>,
    /// `[[route]]`: one per webhook path `tollgate serve` answers.
    #[serde(default, rename = "route", skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<RouteTable>,
    /// The submitter's variables a turn stores (names or globs; `submit --env` ones always, all
    /// with `submit --env-all`); spec/turns.md, "The stored environment".
    #[serde(
        default = "env::default_env_keep",
        skip_serializing_if = "is_default_env_keep"
    )]
    pub env_keep: Vec<String>,
    /// The most bytes from the start of a detached turn's stdout (and, apart, its stderr) that its
    /// log keeps, written as they come (spec/turns.md, "Log size"). 0: no limit.
    #[serde(
        default = "default_log_bytes",
        skip_serializing_if = "is_default_log_bytes"
    )]
    pub log_bytes: u64,
    /// Past `log_bytes`, the most bytes from the END of the stream kept as well (held in memory
    /// while the turn runs, appended after the truncation line when the stream ends). 0: the head
    /// only.
    #[serde(
        default = "default_log_tail_bytes",
        skip_serializing_if = "is_default_log_tail_bytes"
    )]
    pub log_tail_bytes: u64,
    /// `[[hook]]`: commands run after a turn ends (spec/turns.md, "Hooks").
    #[serde(default, rename = "hook", skip_serializing_if = "Vec::is_empty")]
    pub hooks: Vec<hooks::HookTable>,
    /// How many ended turns `tollgate status` shows for the whole home, the newest ones (every
    /// turn that has not ended is always shown; `status --all` or `status TASK` shows them all).
    #[serde(
        default = "default_status_ended_turns",
        skip_serializing_if = "is_default_status_ended_turns"
    )]
    pub status_ended_turns: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            version: CONFIG_FORMAT_VERSION,
            workers: default_workers(),
            lock_timeout: default_lock_timeout(),
            durability: Durability::default(),
            store: None,
            host: None,
            serve: None,
            routes: Vec::new(),
            env_keep: env::default_env_keep(),
            log_bytes: default_log_bytes(),
            log_tail_bytes: default_log_tail_bytes(),
            hooks: Vec::new(),
            status_ended_turns: DEFAULT_STATUS_ENDED_TURNS,
        }
    }
}

/// `durability` in tollgate.toml: whether a promise commit waits for the disk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Durability {
    /// A commit that makes a promise (a turn queued or started, a delivery accepted) is fsynced
    /// before the promise is made.
    #[default]
    Fsync,
    /// No commit waits for the disk: a power loss may lose the last acknowledged turns (a crash
    /// of tollgate itself loses nothing; the OS still writes the commits out).
    Os,
}

/// Ended turns `status` shows by default: a screenful beside the turns that have not ended.
pub const DEFAULT_STATUS_ENDED_TURNS: usize = 10;
/// The largest `status_ended_turns`: a table longer than this is what `--all` is for.
pub const MAX_STATUS_ENDED_TURNS: usize = 10_000;

fn default_status_ended_turns() -> usize {
    DEFAULT_STATUS_ENDED_TURNS
}

fn is_default_status_ended_turns(count: &usize) -> bool {
    *count == DEFAULT_STATUS_ENDED_TURNS
}

/// 64 MiB per stream: far more than a log anyone reads, far less than a runaway fills.
pub const DEFAULT_LOG_BYTES: u64 = 64 * 1024 * 1024;

fn default_log_bytes() -> u64 {
    DEFAULT_LOG_BYTES
}

fn is_default_log_bytes(bytes: &u64) -> bool {
    *bytes == DEFAULT_LOG_BYTES
}

/// 1 MiB per stream: where a failing command usually says why, at its end.
pub const DEFAULT_LOG_TAIL_BYTES: u64 = 1024 * 1024;

/// The largest `log_tail_bytes`: the tail is held in the runner's memory while the turn runs.
pub const MAX_LOG_TAIL_BYTES: u64 = 64 * 1024 * 1024;

fn default_log_tail_bytes() -> u64 {
    DEFAULT_LOG_TAIL_BYTES
}

fn is_default_log_tail_bytes(bytes: &u64) -> bool {
    *bytes == DEFAULT_LOG_TAIL_BYTES
}

fn is_default_env_keep(keep: &[String]) -> bool {
    env::is_default_env_keep(keep)
}

impl Durability {
    fn is_default(&self) -> bool {
        *self == Durability::default()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error(transparent)]
    File(#[from] FileError),
    #[error("{path}: {detail}")]
    Invalid { path: String, detail: String },
}

impl Config {
    pub fn for_workers(workers: usize) -> Self {
        Config {
            workers,
            ..Config::default()
        }
    }

    pub fn lock_timeout(&self) -> Duration {
        // Validated on load; the fallback only serves values built in code.
        humantime::parse_duration(&self.lock_timeout).unwrap_or(Duration::from_secs(10))
    }

    pub fn validate(&self, path: &Path) -> Result<(), ConfigError> {
        let invalid = |detail: String| ConfigError::Invalid {
            path: path.display().to_string(),
            detail,
        };
        if self.version > CONFIG_FORMAT_VERSION {
            return Err(invalid(format!(
                "key `version`: {} is newer than this tollgate understands ({CONFIG_FORMAT_VERSION})",
                self.version
            )));
        }
        if self.workers == 0 || self.workers > MAX_WORKERS {
            return Err(invalid(format!(
                "key `workers`: {} is out of range 1..={MAX_WORKERS}",
                self.workers
            )));
        }
        let lock_timeout = humantime::parse_duration(&self.lock_timeout)
            .map_err(|e| invalid(format!("key `lock_timeout`: {:?}: {e}", self.lock_timeout)))?;
        // Zero would make every command fail the moment another holds the lock; a huge value
        // would turn a stuck holder into a hang (and overflow the deadline arithmetic).
        if lock_timeout.is_zero() || lock_timeout > MAX_LOCK_TIMEOUT {
            return Err(invalid(format!(
                "key `lock_timeout`: {:?} is out of range (more than 0s, at most {})",
                self.lock_timeout,
                humantime::format_duration(MAX_LOCK_TIMEOUT)
            )));
        }
        if self.log_tail_bytes > MAX_LOG_TAIL_BYTES {
            return Err(invalid(format!(
                "key `log_tail_bytes`: {} is more than {MAX_LOG_TAIL_BYTES} (the tail is held in \
                 memory while a turn runs)",
                self.log_tail_bytes
            )));
        }
        if self.status_ended_turns > MAX_STATUS_ENDED_TURNS {
            return Err(invalid(format!(
                "key `status_ended_turns`: {} is more than {MAX_STATUS_ENDED_TURNS} (`tollgate \
                 status --all` shows every turn)",
                self.status_ended_turns
            )));
        }
        if let Some(host) = &self.host {
            crate::protocol::fleet::HostId::new(host.as_str())
                .map_err(|e| invalid(format!("key `host`: {e}")))?;
        }
        serve::validate_routes(&self.routes).map_err(invalid)?;
        hooks::validate_hooks(&self.hooks).map_err(invalid)?;
        env::validate_env_keep(&self.env_keep).map_err(invalid)?;
        Ok(())
    }

    /// Loads and validates `path`; `Ok(None)` if it does not exist.
    ///
    /// The file is read through [`fsutil::read_state_file`] (a regular file of at most
    /// [`fsutil::limits::CONFIG_BYTES`]); see [`Config::parse`] for what it must hold.
    pub fn load(path: &Path) -> Result<Option<Config>, ConfigError> {
        match fsutil::read_state_file(path, "config", fsutil::limits::CONFIG_BYTES)? {
            Some(bytes) => Config::parse(path, &bytes).map(Some),
            None => Ok(None),
        }
    }

    /// Parses and validates config `bytes` read from `path` (named in errors). Refused: invalid
    /// UTF-8, and an empty (or whitespace-only) file. tollgate never writes an empty config (it
    /// publishes atomically), so an empty one is a truncation or a failed copy, and reading it as
    /// "all defaults" would silently change `workers` to this machine's core count. A file of
    /// comments only is deliberate and means the defaults.
    pub fn parse(path: &Path, bytes: &[u8]) -> Result<Config, ConfigError> {
        let invalid = |detail: String| ConfigError::Invalid {
            path: path.display().to_string(),
            detail,
        };
        let text = std::str::from_utf8(bytes).map_err(|e| {
            invalid(format!(
                "not valid UTF-8 (at byte {}); a config is TOML text",
                e.valid_up_to()
            ))
        })?;
        if text.trim().is_empty() {
            return Err(invalid(
                "the file is empty; write at least `workers = N` (or delete it and run \
                 `tollgate init` for a default config)"
                    .to_string(),
            ));
        }
        let config: Config =
            toml::from_str(text).map_err(|e| invalid(describe_toml_error(text, &e)))?;
        config.validate(path)?;
        Ok(config)
    }

    pub fn save(&self, path: &Path) -> Result<(), ConfigError> {
        let text = toml::to_string_pretty(self).map_err(|e| ConfigError::Invalid {
            path: path.display().to_string(),
            detail: e.to_string(),
        })?;
        let body = format!(
            "# tollgate home configuration (see `tollgate --help`).\n\
             # workers: slots for detached runners; lock_timeout: longest wait for the queue's lock.\n{text}"
        );
        fsutil::publish_bytes(path, body.as_bytes())?;
        Ok(())
    }
}

/// toml's message with the line number of its span and the key on that line, in one line (a
/// type error such as `lock_timeout = 5` otherwise names neither the key nor the value).
pub fn describe_toml_error(text: &str, error: &toml::de::Error) -> String {
    let message = error.message().trim().to_string();
    match error.span() {
        Some(span) => {
            let start = span.start.min(text.len());
            let line = text.as_bytes()[..start]
                .iter()
                .filter(|&&b| b == b'\n')
                .count()
                + 1;
            let key = text
                .lines()
                .nth(line - 1)
                .and_then(|l| l.split_once('='))
                .map(|(key, _)| key.trim())
                .filter(|key| !key.is_empty() && !key.starts_with('#'));
            let line_at = match hooks::hook_table_at(text, line) {
                Some(table) => format!("line {line} ({table})"),
                None => format!("line {line}"),
            };
            match key {
                // Name the key unless the message already does.
                Some(key) if !message.contains(&format!("`{key}`")) => {
                    format!("{line_at}, key `{key}`: {message}")
                }
                _ => format!("{line_at}: {message}"),
            }
        }
        None => message,
    }
}

/// The config a test writes as `text`, loaded as `tollgate` loads `tollgate.toml` (the one
/// helper the config modules' tests share).
#[cfg(test)]
pub(crate) fn load_text_for_test(text: &str) -> Result<Config, String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let path = dir.path().join("tollgate.toml");
    std::fs::write(&path, text).map_err(|e| e.to_string())?;
    Config::load(&path)
        .map_err(|e| e.to_string())
        .map(|c| c.unwrap_or_default())
}
