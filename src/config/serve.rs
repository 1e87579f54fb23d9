//! The `[serve]` table and the `[[route]]` array of `tollgate.toml`.
//!
//! Compiled with or without the `serve` feature, so a config written for `serve` stays valid for
//! every build. Each value is checked while it is parsed, by a function that names its key, so a
//! bad value is refused with the key and (through toml's span) the line at fault.

use super::conn as cc;
use crate::protocol::admission::Strategy;
use serde::{Deserialize, Deserializer, Serialize};
use std::collections::BTreeMap;
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
/// How old a signed generic or Slack request may be (its timestamp behind the clock).
pub const DEFAULT_REPLAY_WINDOW: &str = "5m";
/// How far ahead of the clock a request's timestamp may be (the sender's clock runs fast).
pub const DEFAULT_CLOCK_SKEW: &str = "1m";
/// The longest replay window accepted: a signature stays replayable (to the dedupe log) that long.
pub const MAX_REPLAY_WINDOW_SECS: u64 = 60 * 60;
/// Bounds of a route's trigger rules and payload-derived environment.
pub const MAX_TRIGGERS: usize = 32;
pub const MAX_MATCHES_PER_TRIGGER: usize = 16;
pub const MAX_ROUTE_ENV: usize = 64;
/// Hex digits of the scope's SHA-256 appended to a task name whose scope had to be rewritten.
pub const SCOPE_HASH_HEX: usize = 8;
/// The least room a `{scope}` needs in a task name: 3 readable bytes, `-` and the hash.
pub const MIN_SCOPE_ROOM: usize = 4 + SCOPE_HASH_HEX;

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
    // Connections and the serve log: defaults and checks in `conn`.
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
    pub fn header_timeout(&self) -> Duration {
        cc::header_timeout(&self.header_timeout)
    }
    pub fn body_timeout(&self) -> Duration {
        cc::body_timeout(&self.body_timeout)
    }
    pub fn idle_timeout(&self) -> Duration {
        cc::idle_timeout(&self.idle_timeout)
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
    /// The directory the command runs in (relative: to serve's own); default serve's own.
    #[serde(
        default,
        deserialize_with = "de_cwd",
        skip_serializing_if = "Option::is_none"
    )]
    pub cwd: Option<String>,
    /// Signed generic and Slack requests older than this are refused (default 5m).
    #[serde(
        default,
        deserialize_with = "de_replay_window",
        skip_serializing_if = "Option::is_none"
    )]
    pub replay_window: Option<String>,
    /// Signed requests up to this far in the future are accepted (default 1m; `0s`: none).
    #[serde(
        default,
        deserialize_with = "de_clock_skew",
        skip_serializing_if = "Option::is_none"
    )]
    pub clock_skew: Option<String>,
    /// Generic only: also accept the old body-only `sha256=` signature (replayable; a warning is
    /// logged for each delivery that uses it).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub legacy_signature: bool,
    /// Trigger rules: when any is given, a delivery runs only if one of them matches it.
    #[serde(
        default,
        deserialize_with = "de_triggers",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub trigger: Vec<TriggerTable>,
    /// Environment variables of the turn taken from the payload: name → JSON pointer.
    #[serde(
        default,
        deserialize_with = "de_route_env",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub env: BTreeMap<String, String>,
}

/// One `[[route.trigger]]`: matches when the event type is one of `event` (if given) and every
/// `match` holds (an empty rule matches everything).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TriggerTable {
    /// The event types (`X-GitHub-Event`, Slack's `event.type` or command) this rule accepts.
    #[serde(
        default,
        deserialize_with = "de_events",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub event: Vec<String>,
    /// Conditions on payload fields, all of which must hold.
    #[serde(default, rename = "match", skip_serializing_if = "Vec::is_empty")]
    pub matches: Vec<FieldMatch>,
}

/// A condition on the payload value at a JSON pointer (RFC 6901): `equals` a text, or matches
/// a `glob` (`*` any run of characters, `?` one character). Numbers and booleans compare as their
/// JSON text; a missing field never matches.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FieldMatch {
    pub pointer: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub equals: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub glob: Option<String>,
}

impl FieldMatch {
    /// Whether the payload's value at the pointer satisfies the condition.
    pub fn holds(&self, payload: &serde_json::Value) -> bool {
        let Some(text) = payload.pointer(&self.pointer).and_then(scalar_text) else {
            return false;
        };
        match (&self.equals, &self.glob) {
            (Some(expected), _) => text == *expected,
            (None, Some(pattern)) => glob_matches(pattern, &text),
            (None, None) => false,
        }
    }
}

impl TriggerTable {
    pub fn matches(&self, event: Option<&str>, payload: &serde_json::Value) -> bool {
        let event_ok =
            self.event.is_empty() || event.is_some_and(|e| self.event.iter().any(|x| x == e));
        event_ok && self.matches.iter().all(|m| m.holds(payload))
    }
}

/// A payload value as text: strings as they are, numbers and booleans as JSON; `None` for null,
/// arrays and objects (they are never equal to a text).
pub fn scalar_text(value: &serde_json::Value) -> Option<String> {
    match value {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        serde_json::Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// `*` matches any run of characters (also none), `?` exactly one; everything else itself.
/// Iterative with one backtrack point: linear in practice, never exponential.
pub fn glob_matches(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || (p[pi] != '*' && p[pi] == t[ti])) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ti));
            pi += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

fn deferred() -> DispatchMode {
    DispatchMode::Deferred
}

impl RouteTable {
    /// The route's strategy (validated on load).
    pub fn strategy(&self) -> Option<Strategy> {
        self.strategy.as_deref().and_then(|s| s.parse().ok())
    }

    /// The replay window in seconds (validated on load).
    pub fn replay_window_secs(&self) -> u64 {
        let text = self
            .replay_window
            .as_deref()
            .unwrap_or(DEFAULT_REPLAY_WINDOW);
        duration_or(text, DEFAULT_REPLAY_WINDOW).as_secs()
    }

    /// The clock-skew tolerance in seconds (validated on load; `0s` is allowed).
    pub fn clock_skew_secs(&self) -> u64 {
        let text = self.clock_skew.as_deref().unwrap_or(DEFAULT_CLOCK_SKEW);
        humantime::parse_duration(text).map_or(60, |d| d.as_secs())
    }

    /// Whether a delivery of `event` with `payload` is to run: no rules, or one rule matches.
    pub fn triggered(&self, event: Option<&str>, payload: &serde_json::Value) -> bool {
        self.trigger.is_empty() || self.trigger.iter().any(|t| t.matches(event, payload))
    }

    /// The task for a delivery with `scope` (no scope: `default`). It always is a valid task
    /// name: each `{scope}` becomes [`scope_fragment`] sized to the room the template leaves.
    #[cfg(feature = "serve")]
    pub fn task_for(&self, scope: Option<&str>) -> String {
        let occurrences = self.task.matches(SCOPE_PLACEHOLDER).count();
        if occurrences == 0 {
            return self.task.clone();
        }
        let fixed = self.task.len() - occurrences * SCOPE_PLACEHOLDER.len();
        let room = crate::protocol::slots::MAX_TASK_NAME_BYTES.saturating_sub(fixed) / occurrences;
        let fragment = scope_fragment(scope.unwrap_or("default"), room);
        self.task.replace(SCOPE_PLACEHOLDER, &fragment)
    }
}

/// A scope as a task-name fragment of at most `room` bytes (`room` >= [`MIN_SCOPE_ROOM`], which
/// the route's task template is checked for). A *plain* scope (only ASCII letters, digits, `.`,
/// `_`, `-`; not starting with `.`; short enough; not itself ending like a hashed fragment) is kept as it is. Any other
/// becomes a readable prefix (other characters as `-`, cut to fit) + `-` + the first
/// [`SCOPE_HASH_HEX`] hex digits of SHA-256(scope). Plain fragments never end in `-<8 hex>`, and
/// hashed ones always do, so two different scopes give two different tasks (up to a collision of
/// the hash), however long or non-ASCII they are.
#[cfg(feature = "serve")]
pub fn scope_fragment(scope: &str, room: usize) -> String {
    use sha2::{Digest, Sha256};
    let plain = !scope.is_empty()
        && !scope.starts_with('.')
        && scope.len() <= room
        && scope
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        && !looks_hashed(scope);
    if plain {
        return scope.to_string();
    }
    let digest = Sha256::digest(scope.as_bytes());
    let hash: String = hex::encode(digest).chars().take(SCOPE_HASH_HEX).collect();
    let readable_room = room.saturating_sub(SCOPE_HASH_HEX + 1).max(1);
    let mut readable: String = scope
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '-'
            }
        })
        .take(readable_room)
        .collect();
    if readable.is_empty() {
        readable.push('s');
    } else if readable.starts_with('.') {
        readable.replace_range(0..1, "-");
    }
    format!("{readable}-{hash}")
}

/// Whether a fragment ends in `-` and [`SCOPE_HASH_HEX`] lowercase hex digits.
#[cfg(feature = "serve")]
fn looks_hashed(fragment: &str) -> bool {
    let bytes = fragment.as_bytes();
    bytes.len() > SCOPE_HASH_HEX
        && bytes[bytes.len() - SCOPE_HASH_HEX - 1] == b'-'
        && bytes[bytes.len() - SCOPE_HASH_HEX..]
            .iter()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
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
        if route.adapter == AdapterKind::Generic
            && route.trigger.iter().any(|t| !t.event.is_empty())
        {
            return Err(format!(
                "[[route]] #{}: key `trigger.event`: the generic adapter has no event type; match on payload fields instead",
                i + 1
            ));
        }
        if route.adapter == AdapterKind::Github
            && (route.replay_window.is_some() || route.clock_skew.is_some())
        {
            return Err(format!(
                "[[route]] #{}: key `replay_window`/`clock_skew`: GitHub sends no timestamp to check",
                i + 1
            ));
        }
        if route.legacy_signature && route.adapter != AdapterKind::Generic {
            return Err(format!(
                "[[route]] #{}: key `legacy_signature`: only the generic adapter has a legacy signature",
                i + 1
            ));
        }
        if let Some(name) = route
            .env
            .keys()
            .find(|name| routes.iter().any(|r| &r.secret_env == *name))
        {
            return Err(format!(
                "[[route]] #{}: key `env`: {name:?} is a route's secret_env",
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
        // Every scope must fit: probe with the smallest fragment each `{scope}` may become.
        let probe = s.replace(SCOPE_PLACEHOLDER, &"x".repeat(MIN_SCOPE_ROOM));
        crate::protocol::slots::validate_task_name(&probe).map_err(|e| {
            if s.contains(SCOPE_PLACEHOLDER) {
                format!("{e} (each {SCOPE_PLACEHOLDER} needs room for {MIN_SCOPE_ROOM} bytes)")
            } else {
                e.to_string()
            }
        })?;
        Ok(s)
    })
}
fn parse_span(text: &str, allow_zero: bool, max_secs: u64) -> Result<(), String> {
    let duration = humantime::parse_duration(text).map_err(|e| format!("{text:?}: {e}"))?;
    if duration.is_zero() && !allow_zero {
        return Err(format!("{text:?}: must be positive"));
    }
    if duration.as_secs() > max_secs {
        return Err(format!("{text:?}: at most {max_secs}s"));
    }
    Ok(())
}
fn de_replay_window<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    keyed(d, "replay_window", |s: String| {
        parse_span(&s, false, MAX_REPLAY_WINDOW_SECS).map(|_| Some(s))
    })
}
fn de_clock_skew<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    keyed(d, "clock_skew", |s: String| {
        parse_span(&s, true, MAX_REPLAY_WINDOW_SECS).map(|_| Some(s))
    })
}
fn de_cwd<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    keyed(d, "cwd", |s: String| {
        if s.is_empty() || s.contains('\0') {
            Err(format!("{s:?} is not a directory path"))
        } else {
            Ok(Some(s))
        }
    })
}
fn check_pointer(pointer: &str) -> Result<(), String> {
    if pointer.is_empty() || pointer.starts_with('/') {
        Ok(())
    } else {
        Err(format!(
            "{pointer:?} is not a JSON pointer (RFC 6901: \"\" or starting with '/', e.g. \"/ref\")"
        ))
    }
}
#[derive(Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}
fn de_events<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    keyed(d, "event", |v: OneOrMany| {
        let events = match v {
            OneOrMany::One(e) => vec![e],
            OneOrMany::Many(events) => events,
        };
        if events.is_empty() || events.iter().any(|e| e.is_empty()) {
            Err("give an event type or a non-empty list of them".to_string())
        } else {
            Ok(events)
        }
    })
}
fn de_triggers<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<TriggerTable>, D::Error> {
    keyed(d, "trigger", |rules: Vec<TriggerTable>| {
        if rules.len() > MAX_TRIGGERS {
            return Err(format!("{} rules, at most {MAX_TRIGGERS}", rules.len()));
        }
        for (i, rule) in rules.iter().enumerate() {
            if rule.matches.len() > MAX_MATCHES_PER_TRIGGER {
                return Err(format!(
                    "rule #{}: {} matches, at most {MAX_MATCHES_PER_TRIGGER}",
                    i + 1,
                    rule.matches.len()
                ));
            }
            for m in &rule.matches {
                check_pointer(&m.pointer)
                    .map_err(|e| format!("rule #{}: `pointer`: {e}", i + 1))?;
                if m.equals.is_some() == m.glob.is_some() {
                    return Err(format!(
                        "rule #{}: the match on {:?} needs exactly one of `equals`, `glob`",
                        i + 1,
                        m.pointer
                    ));
                }
            }
        }
        Ok(rules)
    })
}
/// Names a payload may never set: the loader's and the shell's, and tollgate's own.
fn reserved_env(name: &str) -> bool {
    const EXACT: [&str; 9] = [
        "PATH",
        "IFS",
        "HOME",
        "SHELL",
        "ENV",
        "BASH_ENV",
        "SHELLOPTS",
        "BASHOPTS",
        "PS4",
    ];
    EXACT.contains(&name)
        || ["TOLLGATE_", "LD_", "DYLD_", "BASH_FUNC_"]
            .iter()
            .any(|p| name.starts_with(p))
}
fn de_route_env<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<String, String>, D::Error> {
    keyed(d, "env", |map: BTreeMap<String, String>| {
        if map.len() > MAX_ROUTE_ENV {
            return Err(format!("{} variables, at most {MAX_ROUTE_ENV}", map.len()));
        }
        for (name, pointer) in &map {
            let valid = !name.is_empty()
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !name.starts_with(|c: char| c.is_ascii_digit());
            if !valid {
                return Err(format!("{name:?} is not an environment variable name"));
            }
            if reserved_env(name) {
                return Err(format!(
                    "{name:?} is reserved (PATH, HOME, IFS, shell start-up, LD_*, TOLLGATE_*): a payload may not set it"
                ));
            }
            check_pointer(pointer).map_err(|e| format!("{name}: {e}"))?;
        }
        Ok(map)
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
        } else if argv.len() > super::limits::MAX_ARGV {
            Err(format!("more than {} arguments", super::limits::MAX_ARGV))
        } else {
            Ok(argv)
        }
    })
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    use crate::config::load_text_for_test as load;

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
        #[cfg(feature = "serve")]
        {
            assert_eq!(config.routes[0].task_for(Some("C1")), "t-C1");
            assert!(config.routes[0]
                .task_for(Some("C1/x y"))
                .starts_with("t-C1-x-y-"));
        }
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

    const ROUTE: &str = "[[route]]\npath = \"/a\"\nadapter = \"github\"\nsecret_env = \"S\"\ntask = \"t-{scope}\"\nrun = [\"x\"]\n";

    #[test]
    fn trigger_rules_env_and_windows_parse_match_and_round_trip() {
        let slack = ROUTE.replace("github", "slack-events");
        let text = format!(
            "workers = 1\n{slack}cwd = \"sub\"\nreplay_window = \"2m\"\nclock_skew = \"0s\"\n\n[[route.trigger]]\nevent = \"push\"\nmatch = [{{ pointer = \"/ref\", equals = \"refs/heads/main\" }}]\n\n[[route.trigger]]\nevent = [\"release\", \"create\"]\nmatch = [{{ pointer = \"/ref\", glob = \"v1.*\" }}, {{ pointer = \"/n\", equals = \"3\" }}]\n\n[route.env]\nREF = \"/ref\"\n"
        );
        let config = load(&text).expect("loads");
        let route = &config.routes[0];
        assert_eq!(
            (route.replay_window_secs(), route.clock_skew_secs()),
            (120, 0)
        );
        let push = serde_json::json!({"ref": "refs/heads/main"});
        assert!(route.triggered(Some("push"), &push));
        assert!(!route.triggered(Some("push"), &serde_json::json!({"ref": "refs/heads/dev"})));
        assert!(!route.triggered(Some("issues"), &push));
        assert!(!route.triggered(None, &push));
        let tag = serde_json::json!({"ref": "v1.2", "n": 3});
        assert!(route.triggered(Some("create"), &tag));
        assert!(!route.triggered(Some("create"), &serde_json::json!({"ref": "v1.2"})));
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("saved.toml");
        config.save(&path).expect("save");
        assert_eq!(
            Config::load(&path).expect("reload").expect("exists"),
            config
        );
    }

    #[test]
    fn bad_rules_env_and_windows_are_refused_naming_the_key() {
        let cases = [
            ("replay_window = \"0s\"\n", "key `replay_window`"),
            ("replay_window = \"2h\"\n", "key `replay_window`"),
            ("clock_skew = \"soon\"\n", "key `clock_skew`"),
            ("[route.env]\nPATH = \"/x\"\n", "reserved"),
            ("[route.env]\nTOLLGATE_X = \"/x\"\n", "reserved"),
            ("[route.env]\nREF = \"ref\"\n", "not a JSON pointer"),
            (
                "[[route.trigger]]\nmatch = [{ pointer = \"/a\" }]\n",
                "exactly one of",
            ),
            ("[[route.trigger]]\nevent = []\n", "key `event`"),
            ("legacy_signature = true\n", "only the generic adapter"),
            ("replay_window = \"2m\"\n", "GitHub sends no timestamp"),
        ];
        for (extra, expected) in cases {
            let error = load(&format!("workers = 1\n{ROUTE}{extra}")).expect_err(extra);
            assert!(error.contains(expected), "{extra}: {error}");
        }
        let generic = ROUTE.replace("github", "generic");
        let error = load(&format!(
            "workers = 1\n{generic}[[route.trigger]]\nevent = \"push\"\n"
        ))
        .expect_err("generic event");
        assert!(error.contains("no event type"), "{error}");
        let long = ROUTE.replace("t-{scope}", &format!("{}-{{scope}}", "p".repeat(55)));
        let error = load(&format!("workers = 1\n{long}")).expect_err("no room");
        assert!(error.contains("needs room"), "{error}");
    }

    #[test]
    fn globs_match_like_a_shell_pattern() {
        use super::glob_matches;
        for (pattern, text, expected) in [
            ("refs/heads/*", "refs/heads/main", true),
            ("refs/heads/*", "refs/tags/v1", false),
            ("v?.*", "v1.2.3", true),
            ("*", "", true),
            ("a*b*c", "aXbYbc", true),
            ("a*b*c", "aXbYb", false),
            ("", "x", false),
            ("ü*", "über", true),
        ] {
            assert_eq!(glob_matches(pattern, text), expected, "{pattern} {text}");
        }
    }

    #[cfg(feature = "serve")]
    mod names {
        use super::super::{scope_fragment, RouteTable};
        use proptest::prelude::*;

        fn route(task: &str) -> RouteTable {
            let text = format!("path = \"/a\"\nadapter = \"github\"\nsecret_env = \"S\"\ntask = \"{task}\"\nrun = [\"x\"]\n");
            toml::from_str(&text).expect("route")
        }

        #[test]
        fn a_hundred_character_repository_gets_a_valid_readable_task() {
            let r = route("job-{scope}");
            let scope = format!("acme/{}", "r".repeat(100));
            let task = r.task_for(Some(&scope));
            crate::protocol::slots::validate_task_name(&task).expect("valid");
            assert!(task.starts_with("job-acme-rrr"), "{task}");
            assert_eq!(r.task_for(Some("C123")), "job-C123");
            assert_ne!(r.task_for(Some("é")), r.task_for(Some("ü")));
            assert_ne!(r.task_for(Some("a/b")), r.task_for(Some("a-b")));
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(512))]

            /// Any value under any route key loads or is refused with an error naming a line;
            /// never a panic.
            #[test]
            fn arbitrary_route_values_load_or_are_refused(
                key in prop_oneof![Just("task"), Just("replay_window"), Just("clock_skew"), Just("cwd"), Just("legacy_signature"), Just("path"), Just("adapter")],
                value in prop_oneof![
                    "\"[ -~]{0,70}\"".prop_map(|v| v.replace('\\', "")),
                    "[0-9]{1,20}",
                    Just("true".to_string()),
                    Just("[\"a\", 1]".to_string()),
                ],
                rule in prop_oneof![
                    Just(String::new()),
                    "\"[ -~]{0,20}\"".prop_map(|v| format!("\n[[route.trigger]]\nevent = {}\nmatch = [{{ pointer = {}, glob = \"*\" }}]\n", v.replace('\\', ""), v.replace('\\', ""))),
                    "\"[ -~]{0,20}\"".prop_map(|v| format!("\n[route.env]\nX = {}\n", v.replace('\\', ""))),
                ],
            ) {
                let base = "path = \"/a\"\nadapter = \"generic\"\nsecret_env = \"S\"\ntask = \"t\"\nrun = [\"x\"]\n";
                let lines: String = base
                    .lines()
                    .filter(|l| !l.starts_with(&format!("{key} ")))
                    .map(|l| format!("{l}\n"))
                    .collect();
                let text = format!("workers = 1\n[[route]]\n{lines}{key} = {value}\n{rule}");
                if let Err(error) = super::load(&text) {
                    prop_assert!(!error.is_empty());
                }
            }

            /// Globs never panic; a pattern without wildcards matches exactly itself; `*` + text
            /// + `*` matches whatever contains the text.
            #[test]
            fn globs_are_total_and_agree_with_plain_text(
                pattern in "[a*?\\u{e9}]{0,12}",
                text in "[ab\\u{e9}]{0,12}",
                plain in "[a-c]{0,6}",
            ) {
                let _ = super::super::glob_matches(&pattern, &text);
                prop_assert!(super::super::glob_matches(&plain, &plain));
                prop_assert_eq!(super::super::glob_matches(&plain, &text), plain == text);
                let around = format!("*{plain}*");
                prop_assert_eq!(super::super::glob_matches(&around, &text), text.contains(&plain));
            }

            /// Whatever the scope, the task is a valid name, and two scopes never share one.
            #[test]
            fn every_scope_gives_a_valid_and_distinct_task(
                template in prop_oneof![Just("{scope}".to_string()), Just("job-{scope}".to_string()), Just("{scope}.x".to_string()), Just("a-{scope}-{scope}".to_string()), Just("p".repeat(40) + "-{scope}")],
                a in "\\PC{0,120}",
                b in "\\PC{0,120}",
            ) {
                let r = route(&template);
                let (ta, tb) = (r.task_for(Some(&a)), r.task_for(Some(&b)));
                prop_assert!(crate::protocol::slots::validate_task_name(&ta).is_ok(), "{:?} -> {:?}", a, ta);
                if a != b {
                    prop_assert_ne!(&ta, &tb);
                }
                let hashed_looking = format!("{}-{}", a, &ta[ta.len().saturating_sub(8)..]);
                prop_assert_ne!(r.task_for(Some(&hashed_looking)), ta.clone());
                prop_assert!(scope_fragment(&a, 12).len() <= 12);
            }
        }
    }
}
