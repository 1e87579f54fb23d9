//! The `[serve]` table and the `[[route]]` array of `tollgate.toml`.
//!
//! Compiled with or without the `serve` feature, so a config written for `serve` stays valid for
//! every build. Each value is checked while it is parsed, by a function that names its key, so a
//! bad value is refused with the key and (through toml's span) the line at fault.

use super::conn_config as cc;
use crate::protocol::admission::Strategy;
use serde::{Deserialize, Deserializer, Serialize};
use std::net::SocketAddr;
use std::time::Duration;

pub const DEFAULT_LISTEN: &str = "127.0.0.1:8787";
pub const DEFAULT_MAX_DETACHED: usize = crate::protocol::admission::DEFAULT_MAX_DETACHED;
/// GitHub, Slack and the generic adapter's senders redeliver within hours; a day covers them.
pub const DEFAULT_DEDUPE_TTL: &str = "24h";
pub const DEFAULT_DETACH_TIMEOUT: &str = "1h";
pub const DEFAULT_DRAIN_TIMEOUT: &str = "10s";
/// GitHub caps payloads at 25 MiB; Slack's are far smaller. 1 MiB unless raised.
pub const DEFAULT_BODY_LIMIT_BYTES: usize = 1 << 20;
/// The largest body limit accepted (a typo guard).
pub const MAX_BODY_LIMIT_BYTES: usize = 64 << 20;
/// The most routes one home serves.
pub const MAX_ROUTES: usize = 256;
/// The placeholder a route's task may contain, replaced by the delivery's scope.
pub const SCOPE_PLACEHOLDER: &str = "{scope}";

fn listen_default() -> String {
    DEFAULT_LISTEN.to_string()
}
fn max_detached_default() -> usize {
    DEFAULT_MAX_DETACHED
}
fn dedupe_ttl_default() -> String {
    DEFAULT_DEDUPE_TTL.to_string()
}
fn detach_timeout_default() -> String {
    DEFAULT_DETACH_TIMEOUT.to_string()
}
fn drain_timeout_default() -> String {
    DEFAULT_DRAIN_TIMEOUT.to_string()
}
fn body_limit_default() -> usize {
    DEFAULT_BODY_LIMIT_BYTES
}

/// `[serve]`: how the ingress listens and what it retains.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServeTable {
    /// Address to listen on, `HOST:PORT` (port 0 picks a free one).
    #[serde(default = "listen_default", deserialize_with = "de_listen")]
    pub listen: String,
    /// Admitted deferred deliveries retained at once (must be positive).
    #[serde(default = "max_detached_default", deserialize_with = "de_max_detached")]
    pub max_detached: usize,
    /// At most this many of them for any one tenant; 0 = no per-tenant ceiling.
    #[serde(default)]
    pub max_detached_per_tenant: usize,
    /// Longest a deferred delivery may run before its turn is cancelled and it ends timed-out.
    #[serde(
        default = "detach_timeout_default",
        deserialize_with = "de_detach_timeout"
    )]
    pub detach_timeout: String,
    /// How long an accepted event identity is remembered; at least the platforms' redelivery window.
    #[serde(default = "dedupe_ttl_default", deserialize_with = "de_dedupe_ttl")]
    pub dedupe_ttl: String,
    /// On SIGTERM/SIGINT, how long retained deliveries may still end before the rest is handed off.
    #[serde(
        default = "drain_timeout_default",
        deserialize_with = "de_drain_timeout"
    )]
    pub drain_timeout: String,
    /// Largest request body accepted, in bytes; larger ones are answered 413.
    #[serde(default = "body_limit_default", deserialize_with = "de_body_limit")]
    pub body_limit: usize,
    // Connections and the serve log: defaults and checks in `conn_config`.
    #[serde(
        default = "cc::header_timeout_default",
        deserialize_with = "cc::de_header_timeout"
    )]
    pub header_timeout: String,
    #[serde(
        default = "cc::body_timeout_default",
        deserialize_with = "cc::de_body_timeout"
    )]
    pub body_timeout: String,
    #[serde(
        default = "cc::idle_timeout_default",
        deserialize_with = "cc::de_idle_timeout"
    )]
    pub idle_timeout: String,
    #[serde(
        default = "cc::max_connections_default",
        deserialize_with = "cc::de_max_connections"
    )]
    pub max_connections: usize,
    #[serde(
        default = "cc::log_max_bytes_default",
        deserialize_with = "cc::de_log_max_bytes"
    )]
    pub log_max_bytes: u64,
    #[serde(
        default = "cc::log_rotated_files_default",
        deserialize_with = "cc::de_log_rotated_files"
    )]
    pub log_rotated_files: usize,
}

impl Default for ServeTable {
    fn default() -> Self {
        ServeTable {
            listen: listen_default(),
            max_detached: max_detached_default(),
            max_detached_per_tenant: 0,
            detach_timeout: detach_timeout_default(),
            dedupe_ttl: dedupe_ttl_default(),
            drain_timeout: drain_timeout_default(),
            body_limit: body_limit_default(),
            header_timeout: cc::header_timeout_default(),
            body_timeout: cc::body_timeout_default(),
            idle_timeout: cc::idle_timeout_default(),
            max_connections: cc::max_connections_default(),
            log_max_bytes: cc::log_max_bytes_default(),
            log_rotated_files: cc::log_rotated_files_default(),
        }
    }
}

impl ServeTable {
    pub fn listen_addr(&self) -> Result<SocketAddr, String> {
        parse_listen(&self.listen)
    }
    pub fn detach_timeout(&self) -> Duration {
        duration_or(&self.detach_timeout, DEFAULT_DETACH_TIMEOUT)
    }
    pub fn dedupe_ttl(&self) -> Duration {
        duration_or(&self.dedupe_ttl, DEFAULT_DEDUPE_TTL)
    }
    pub fn drain_timeout(&self) -> Duration {
        duration_or(&self.drain_timeout, DEFAULT_DRAIN_TIMEOUT)
    }
}

/// Validated on load; the fallback only serves values built in code.
fn duration_or(text: &str, default: &str) -> Duration {
    humantime::parse_duration(text)
        .or_else(|_| humantime::parse_duration(default))
        .unwrap_or(Duration::from_secs(1))
}

/// Who sends to a route and how it is verified.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AdapterKind {
    Generic,
    Github,
    SlackEvents,
    SlackCommands,
}

impl AdapterKind {
    pub fn name(self) -> &'static str {
        match self {
            AdapterKind::Generic => "generic",
            AdapterKind::Github => "github",
            AdapterKind::SlackEvents => "slack-events",
            AdapterKind::SlackCommands => "slack-commands",
        }
    }
}

/// `deferred`: acknowledge, then work (retained, capped). `sync`: answer when the turn ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DispatchMode {
    Deferred,
    Sync,
}

/// One `[[route]]`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteTable {
    /// The URL path, e.g. `/hooks/build`.
    #[serde(deserialize_with = "de_path")]
    pub path: String,
    #[serde(deserialize_with = "de_adapter")]
    pub adapter: AdapterKind,
    /// The environment variable holding the shared secret (checked when `serve` starts).
    #[serde(deserialize_with = "de_secret_env")]
    pub secret_env: String,
    /// The task each delivery becomes a turn of; `{scope}` is replaced by the delivery's scope.
    #[serde(deserialize_with = "de_task")]
    pub task: String,
    /// The task's strategy (`drop`, `queue`, `debounce=DUR`, `concurrent=N`); default concurrent=1.
    #[serde(default, deserialize_with = "de_strategy")]
    pub strategy: Option<String>,
    #[serde(default = "deferred", deserialize_with = "de_dispatch")]
    pub dispatch: DispatchMode,
    /// The command each turn runs.
    #[serde(deserialize_with = "de_run")]
    pub run: Vec<String>,
}

fn deferred() -> DispatchMode {
    DispatchMode::Deferred
}

impl RouteTable {
    /// The route's strategy (validated on load).
    pub fn strategy(&self) -> Option<Strategy> {
        self.strategy.as_deref().and_then(|s| s.parse().ok())
    }

    /// The task for a delivery with `scope` (sanitised to a task-name fragment).
    pub fn task_for(&self, scope: Option<&str>) -> String {
        if !self.task.contains(SCOPE_PLACEHOLDER) {
            return self.task.clone();
        }
        let fragment = sanitize_scope(scope.unwrap_or("default"));
        self.task.replace(SCOPE_PLACEHOLDER, &fragment)
    }
}

/// The longest scope fragment put into a task name.
const MAX_SCOPE_BYTES: usize = 64;

/// Letters, digits, `.`, `_`, `-` kept; anything else becomes `-`; bounded in length.
pub fn sanitize_scope(scope: &str) -> String {
    let mut out: String = scope
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '-'
            }
        })
        .take(MAX_SCOPE_BYTES)
        .collect();
    if out.is_empty() || out.starts_with('.') {
        out.insert(0, 's');
    }
    out
}

/// Checks the routes as a whole (each value was checked while parsing): count and unique paths.
pub fn validate_routes(routes: &[RouteTable]) -> Result<(), String> {
    if routes.len() > MAX_ROUTES {
        return Err(format!(
            "key `route`: {} routes, at most {MAX_ROUTES}",
            routes.len()
        ));
    }
    for (i, route) in routes.iter().enumerate() {
        if route.path == "/metrics" {
            return Err(format!(
                "[[route]] #{}: key `path`: \"/metrics\" is reserved for the metrics endpoint",
                i + 1
            ));
        }
        if let Some(j) = routes[..i].iter().position(|r| r.path == route.path) {
            return Err(format!(
                "[[route]] #{}: key `path`: {:?} is already used by [[route]] #{}",
                i + 1,
                route.path,
                j + 1
            ));
        }
    }
    Ok(())
}

fn keyed<'de, D, T, V>(
    deserializer: D,
    key: &str,
    check: impl FnOnce(T) -> Result<V, String>,
) -> Result<V, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    let value = T::deserialize(deserializer)?;
    check(value).map_err(|why| serde::de::Error::custom(format!("key `{key}`: {why}")))
}

fn parse_listen(text: &str) -> Result<SocketAddr, String> {
    text.parse::<SocketAddr>()
        .map_err(|e| format!("{text:?} is not HOST:PORT ({e})"))
}

fn parse_duration(text: &str) -> Result<(), String> {
    let duration = humantime::parse_duration(text).map_err(|e| format!("{text:?}: {e}"))?;
    if duration.is_zero() {
        return Err(format!("{text:?}: must be positive"));
    }
    Ok(())
}

fn de_listen<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    keyed(d, "listen", |s: String| parse_listen(&s).map(|_| s))
}
fn de_max_detached<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    keyed(d, "max_detached", |n: usize| {
        if n == 0 {
            Err("must be positive (it bounds what deferred deliveries retain)".to_string())
        } else {
            Ok(n)
        }
    })
}
fn de_detach_timeout<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    keyed(d, "detach_timeout", |s: String| {
        parse_duration(&s).map(|_| s)
    })
}
fn de_dedupe_ttl<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    keyed(d, "dedupe_ttl", |s: String| parse_duration(&s).map(|_| s))
}
fn de_drain_timeout<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    keyed(d, "drain_timeout", |s: String| {
        parse_duration(&s).map(|_| s)
    })
}
fn de_body_limit<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    keyed(d, "body_limit", |n: usize| {
        if n == 0 || n > MAX_BODY_LIMIT_BYTES {
            Err(format!(
                "{n} is out of range 1..={MAX_BODY_LIMIT_BYTES} (bytes)"
            ))
        } else {
            Ok(n)
        }
    })
}
fn de_path<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    keyed(d, "path", |s: String| {
        if !s.starts_with('/') || s.len() > 256 || s.chars().any(|c| c.is_whitespace() || c == '?')
        {
            Err(format!(
                "{s:?} must start with '/', have no spaces or '?', and be at most 256 bytes"
            ))
        } else {
            Ok(s)
        }
    })
}
fn de_adapter<'de, D: Deserializer<'de>>(d: D) -> Result<AdapterKind, D::Error> {
    keyed(d, "adapter", |s: String| match s.as_str() {
        "generic" => Ok(AdapterKind::Generic),
        "github" => Ok(AdapterKind::Github),
        "slack-events" => Ok(AdapterKind::SlackEvents),
        "slack-commands" => Ok(AdapterKind::SlackCommands),
        _ => Err(format!(
            "{s:?} is not one of generic, github, slack-events, slack-commands"
        )),
    })
}
fn de_secret_env<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    keyed(d, "secret_env", |s: String| {
        let valid = !s.is_empty()
            && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !s.starts_with(|c: char| c.is_ascii_digit());
        if valid {
            Ok(s)
        } else {
            Err(format!("{s:?} is not an environment variable name"))
        }
    })
}
fn de_task<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    keyed(d, "task", |s: String| {
        let probe = s.replace(SCOPE_PLACEHOLDER, "x");
        crate::protocol::slots::validate_task_name(&probe)
            .map(|_| s)
            .map_err(|e| e.to_string())
    })
}
fn de_strategy<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    keyed(d, "strategy", |s: String| {
        s.parse::<Strategy>()
            .map(|_| Some(s))
            .map_err(|e| e.to_string())
    })
}
fn de_dispatch<'de, D: Deserializer<'de>>(d: D) -> Result<DispatchMode, D::Error> {
    keyed(d, "dispatch", |s: String| match s.as_str() {
        "deferred" => Ok(DispatchMode::Deferred),
        "sync" => Ok(DispatchMode::Sync),
        _ => Err(format!("{s:?} is not one of deferred, sync")),
    })
}
fn de_run<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    keyed(d, "run", |argv: Vec<String>| {
        if argv.is_empty() || argv[0].is_empty() {
            Err("the command is empty; give an argv such as [\"./hook.sh\"]".to_string())
        } else if argv.len() > crate::tasks::MAX_ARGV {
            Err(format!("more than {} arguments", crate::tasks::MAX_ARGV))
        } else {
            Ok(argv)
        }
    })
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    fn load(text: &str) -> Result<Config, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let path = dir.path().join("tollgate.toml");
        std::fs::write(&path, text).map_err(|e| e.to_string())?;
        Config::load(&path)
            .map_err(|e| e.to_string())
            .map(|c| c.unwrap_or_default())
    }

    #[test]
    fn a_config_without_serve_still_loads_and_gets_the_defaults() {
        let config = load("workers = 2\nlock_timeout = \"5s\"\n").expect("old config");
        assert!(config.serve.is_none() && config.routes.is_empty());
        let table = config.serve.unwrap_or_default();
        assert_eq!(
            (table.listen.as_str(), table.max_detached),
            ("127.0.0.1:8787", 1024)
        );
    }

    #[test]
    fn serve_and_routes_round_trip_through_save() {
        let text = "workers = 2\n[serve]\nmax_detached = 7\n\n[[route]]\npath = \"/a\"\nadapter = \"slack-events\"\nsecret_env = \"A_SECRET\"\ntask = \"t-{scope}\"\nstrategy = \"queue\"\nrun = [\"true\"]\n";
        let config = load(text).expect("loads");
        assert_eq!(config.routes[0].task_for(Some("C1/x y")), "t-C1-x-y");
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("saved.toml");
        config.save(&path).expect("save");
        let again = Config::load(&path).expect("reload").expect("exists");
        assert_eq!(again, config);
    }

    #[test]
    fn a_bad_value_is_refused_with_its_key_and_line() {
        let cases = [
            ("[serve]\nmax_detached = 0\n", "line 3: key `max_detached`"),
            ("[serve]\ndrain_timeout = \"soon\"\n", "line 3: key `drain_timeout`"),
            ("[[route]]\npath = \"/a\"\nadapter = \"gitlab\"\nsecret_env = \"S\"\ntask = \"t\"\nrun = [\"x\"]\n", "line 4: key `adapter`"),
            ("[[route]]\npath = \"/a\"\nadapter = \"generic\"\nsecret_env = \"S\"\ntask = \"t\"\nstrategy = \"often\"\nrun = [\"x\"]\n", "line 7: key `strategy`"),
            ("[[route]]\npath = \"/a\"\nadapter = \"generic\"\nsecret_env = \"S\"\ntask = \"t\"\ndispatch = \"later\"\nrun = [\"x\"]\n", "line 7: key `dispatch`"),
            ("[[route]]\npath = \"/a\"\nadapter = \"generic\"\nsecret_env = \"S\"\ntask = \"t/{scope}\"\nrun = [\"x\"]\n", "line 6: key `task`"),
            ("[serve]\nport = 1\n", "line 3: unknown field `port`"),
        ];
        for (body, expected) in cases {
            let error = load(&format!("workers = 1\n{body}")).expect_err(body);
            assert!(error.contains(expected), "{body}: {error}");
        }
    }
}
