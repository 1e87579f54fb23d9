//! The `[serve]` keys that bound connections and the serve log (spec/ingress.md, "Connections
//! and logs"): their defaults, their checks (each names its key, like the rest of `[serve]`), and
//! typed readings. Compiled with or without the `serve` feature, like [`super::serve`], which
//! declares the keys; this module depends on nothing of the config, so the config's modules form
//! a DAG (`config` → `config::serve` → `config::conn`).

use serde::{Deserialize, Deserializer};
use std::time::Duration;

/// From the first byte of a request to the end of its head. A client that trickles its head
/// (slowloris) holds a connection for at most this long.
pub const DEFAULT_HEADER_TIMEOUT: &str = "10s";
/// From the end of a request's head to the end of its body (answered 408, then closed).
pub const DEFAULT_BODY_TIMEOUT: &str = "30s";
/// How long a connection may wait for a request (after accept, or after the previous answer).
pub const DEFAULT_IDLE_TIMEOUT: &str = "30s";
/// Client connections open at once; the excess is answered 503 at once and closed. Below the
/// usual 1024-descriptor soft limit, with room for the files serve and its submits open.
pub const DEFAULT_MAX_CONNECTIONS: usize = 512;
/// The most `max_connections` accepted (a typo guard).
pub const MAX_MAX_CONNECTIONS: usize = 1_000_000;
/// `serve.log.jsonl` is rotated before it would grow past this size.
pub const DEFAULT_LOG_MAX_BYTES: u64 = 16 << 20;
/// The smallest `log_max_bytes` (a line must fit) and the largest (a typo guard).
pub const MIN_LOG_MAX_BYTES: u64 = 4096;
pub const MAX_LOG_MAX_BYTES: u64 = 1 << 40;
/// Rotated logs kept (`serve.log.jsonl.1` is the newest); the oldest beyond them is deleted.
pub const DEFAULT_LOG_ROTATED_FILES: usize = 2;
pub const MAX_LOG_ROTATED_FILES: usize = 16;
/// The longest any of the three timeouts may be (a typo guard: a day).
const MAX_TIMEOUT: Duration = Duration::from_secs(24 * 3600);

pub fn header_timeout_default() -> String {
    DEFAULT_HEADER_TIMEOUT.to_string()
}
pub fn body_timeout_default() -> String {
    DEFAULT_BODY_TIMEOUT.to_string()
}
pub fn idle_timeout_default() -> String {
    DEFAULT_IDLE_TIMEOUT.to_string()
}
pub fn max_connections_default() -> usize {
    DEFAULT_MAX_CONNECTIONS
}
pub fn log_max_bytes_default() -> u64 {
    DEFAULT_LOG_MAX_BYTES
}
pub fn log_rotated_files_default() -> usize {
    DEFAULT_LOG_ROTATED_FILES
}

/// `header_timeout` as a duration (see [`super::serve::ServeTable::header_timeout`]).
pub fn header_timeout(text: &str) -> Duration {
    duration_or(text, DEFAULT_HEADER_TIMEOUT)
}
/// `body_timeout` as a duration.
pub fn body_timeout(text: &str) -> Duration {
    duration_or(text, DEFAULT_BODY_TIMEOUT)
}
/// `idle_timeout` as a duration.
pub fn idle_timeout(text: &str) -> Duration {
    duration_or(text, DEFAULT_IDLE_TIMEOUT)
}

/// Validated on load; the fallback only serves values built in code.
fn duration_or(text: &str, default: &str) -> Duration {
    humantime::parse_duration(text)
        .or_else(|_| humantime::parse_duration(default))
        .unwrap_or(Duration::from_secs(10))
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

fn timeout(text: String) -> Result<String, String> {
    let duration = humantime::parse_duration(&text).map_err(|e| format!("{text:?}: {e}"))?;
    if duration < Duration::from_millis(1) || duration > MAX_TIMEOUT {
        return Err(format!("{text:?}: must be between 1ms and 24h"));
    }
    Ok(text)
}

fn in_range<T: PartialOrd + std::fmt::Display>(
    n: T,
    low: T,
    high: T,
    unit: &str,
) -> Result<T, String> {
    if n < low || n > high {
        Err(format!("{n} is out of range {low}..={high}{unit}"))
    } else {
        Ok(n)
    }
}

pub fn de_header_timeout<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    keyed(d, "header_timeout", timeout)
}
pub fn de_body_timeout<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    keyed(d, "body_timeout", timeout)
}
pub fn de_idle_timeout<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    keyed(d, "idle_timeout", timeout)
}
pub fn de_max_connections<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    keyed(d, "max_connections", |n: usize| {
        in_range(n, 1, MAX_MAX_CONNECTIONS, "")
    })
}
pub fn de_log_max_bytes<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    keyed(d, "log_max_bytes", |n: u64| {
        in_range(n, MIN_LOG_MAX_BYTES, MAX_LOG_MAX_BYTES, " (bytes)")
    })
}
pub fn de_log_rotated_files<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    keyed(d, "log_rotated_files", |n: usize| {
        in_range(n, 1, MAX_LOG_ROTATED_FILES, "")
    })
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    use crate::config::load_text_for_test as load;

    #[test]
    fn the_connection_and_log_keys_have_defaults_and_round_trip() {
        let table = load("workers = 1\n[serve]\n")
            .expect("loads")
            .serve
            .expect("[serve]");
        assert_eq!(table.header_timeout(), std::time::Duration::from_secs(10));
        assert_eq!(table.body_timeout(), std::time::Duration::from_secs(30));
        assert_eq!(table.idle_timeout(), std::time::Duration::from_secs(30));
        assert_eq!(table.max_connections, 512);
        assert_eq!(
            (table.log_max_bytes, table.log_rotated_files),
            (16 << 20, 2)
        );
        let text = "workers = 1\n[serve]\nheader_timeout = \"2s\"\nbody_timeout = \"3s\"\nidle_timeout = \"4s\"\nmax_connections = 9\nlog_max_bytes = 5000\nlog_rotated_files = 1\n";
        let config = load(text).expect("loads");
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("saved.toml");
        config.save(&path).expect("save");
        let again = Config::load(&path).expect("reload").expect("exists");
        assert_eq!(again, config);
        let table = again.serve.expect("[serve]");
        assert_eq!(table.idle_timeout(), std::time::Duration::from_secs(4));
        assert_eq!(table.max_connections, 9);
    }

    #[test]
    fn a_bad_connection_or_log_value_is_refused_with_its_key_and_line() {
        let cases = [
            ("header_timeout = \"0s\"", "line 3: key `header_timeout`"),
            ("body_timeout = \"slow\"", "line 3: key `body_timeout`"),
            ("idle_timeout = \"2d\"", "line 3: key `idle_timeout`"),
            ("max_connections = 0", "line 3: key `max_connections`"),
            ("log_max_bytes = 100", "line 3: key `log_max_bytes`"),
            ("log_rotated_files = 0", "line 3: key `log_rotated_files`"),
            ("log_rotated_files = 17", "line 3: key `log_rotated_files`"),
        ];
        for (line, expected) in cases {
            let error = load(&format!("workers = 1\n[serve]\n{line}\n")).expect_err(line);
            assert!(error.contains(expected), "{line}: {error}");
        }
    }
}
