//! One JSON line per decision and per terminal outcome, appended to `<home>/serve.log.jsonl` and
//! written to stderr through tracing; bounded under a flood (spec/ingress.md, "Connections and
//! logs"):
//!
//! - Every line about an admitted delivery (an accepted or re-adopted decision, every outcome) is
//!   written. A decision that admitted nothing (duplicate, rejected, refused-sender, withdrawn, …:
//!   it has no delivery id) is aggregated per route and outcome: at most one line per
//!   [`AGGREGATE_MILLIS`], carrying `"suppressed": N` for the N like it that were not written
//!   since the previous one. What is left pending is written once its interval has passed
//!   ([`EventLog::flush_due`]) and at shutdown ([`EventLog::sync`]), so the sum of `1 + suppressed`
//!   over the lines is the number of decisions. `/metrics` counts every one.
//! - The file is rotated before it would grow past `log_max_bytes`: `serve.log.jsonl.1` is the
//!   newest rotated file, up to `log_rotated_files` are kept, the oldest is dropped.

use super::config::ServeTable;
use crate::fsutil::FileError;
use crate::sync::atomic::{AtomicU64, Ordering};
use crate::sync::{Arc, Mutex};
use serde::Serialize;
use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// At most one line per route and outcome of a decision that admitted nothing, per this period.
pub const AGGREGATE_MILLIS: u64 = 1_000;
/// The most (route, outcome) pairs aggregated separately; beyond, they share one catch-all entry.
const MAX_AGGREGATE_KEYS: usize = 1_024;

/// What a line says: a decision about a delivery, or how a delivery ended.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Event {
    pub at_millis: u64,
    /// `decision` or `outcome`.
    pub kind: &'static str,
    pub route: String,
    pub adapter: String,
    pub tenant: String,
    /// The serving instance's delivery id (a UUID), once admitted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delivery: Option<String>,
    /// The sender's event identity.
    pub identity: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub turn: Option<u32>,
    /// accepted, duplicate, rejected, refused-sender, challenge (decisions); a terminal outcome
    /// (completed, failed, …, handed-off-at-shutdown) for outcomes.
    pub outcome: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry: Option<String>,
    /// Set on outcomes of deliveries adopted from a previous instance.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub readopted: bool,
    /// How many decisions of this route and outcome this line stands for besides itself (they
    /// were not written); see the module doc.
    #[serde(skip_serializing_if = "is_zero")]
    pub suppressed: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Event {
    /// A decision that admitted nothing: aggregated. Everything about an admitted delivery has
    /// its delivery id and is always written.
    fn aggregated(&self) -> bool {
        self.kind == "decision" && self.delivery.is_none()
    }
}

/// Size bounds of the log file, from `[serve]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogBounds {
    pub max_bytes: u64,
    pub rotated_files: usize,
}

impl LogBounds {
    pub fn from_table(table: &ServeTable) -> LogBounds {
        LogBounds {
            max_bytes: table.log_max_bytes,
            rotated_files: table.log_rotated_files,
        }
    }
}

/// The log's own counters, for `/metrics`.
#[derive(Debug, Default)]
pub struct LogStats {
    pub lines: AtomicU64,
    pub suppressed: AtomicU64,
    pub rotations: AtomicU64,
    pub write_errors: AtomicU64,
}

struct Aggregate {
    last_written: Instant,
    /// Decisions not written since `last_written`; the newest of them is `pending`.
    suppressed: u64,
    pending: Option<Event>,
}

struct Inner {
    file: File,
    size_bytes: u64,
    aggregates: HashMap<(String, String), Aggregate>,
}

pub struct EventLog {
    path: PathBuf,
    bounds: LogBounds,
    inner: Mutex<Inner>,
    stats: Arc<LogStats>,
}

/// Opened through [`crate::jsonl`]: append, 0600, a regular file only.
fn open_append(path: &Path) -> Result<File, FileError> {
    crate::jsonl::open_append(path, "serve log")
}

impl EventLog {
    pub fn open(path: &Path, config: &crate::config::Config) -> Result<Self, FileError> {
        let table = config.serve.clone().unwrap_or_default();
        Self::open_bounded(path, LogBounds::from_table(&table))
    }

    pub fn open_bounded(path: &Path, bounds: LogBounds) -> Result<Self, FileError> {
        let file = open_append(path)?;
        let size_bytes = file.metadata().map_err(|e| FileError::io(path, e))?.len();
        Ok(EventLog {
            path: path.to_path_buf(),
            bounds,
            inner: Mutex::new(Inner {
                file,
                size_bytes,
                aggregates: HashMap::new(),
            }),
            stats: Arc::new(LogStats::default()),
        })
    }

    pub fn stats(&self) -> Arc<LogStats> {
        Arc::clone(&self.stats)
    }

    /// Appends the line (one `write` of the whole line, so lines never interleave) and logs it,
    /// or counts it into the next line of its kind (see the module doc).
    pub fn record(&self, event: &Event) {
        self.record_at(event, Instant::now());
    }

    fn record_at(&self, event: &Event, now: Instant) {
        let mut inner = crate::sync::lock(&self.inner);
        self.flush_due_locked(&mut inner, now, false);
        if !event.aggregated() {
            self.write(&mut inner, event);
            return;
        }
        let interval = Duration::from_millis(AGGREGATE_MILLIS);
        let mut key = (event.route.clone(), event.outcome.clone());
        if inner.aggregates.len() >= MAX_AGGREGATE_KEYS && !inner.aggregates.contains_key(&key) {
            key = (String::new(), String::new());
        }
        match inner.aggregates.get_mut(&key) {
            Some(entry) if now.saturating_duration_since(entry.last_written) < interval => {
                entry.suppressed += 1;
                entry.pending = Some(event.clone());
                self.stats.suppressed.fetch_add(1, Ordering::Relaxed);
            }
            Some(entry) => {
                // The pending one was written by the flush above, so nothing is owed here.
                entry.last_written = now;
                self.write(&mut inner, event);
            }
            None => {
                inner.aggregates.insert(
                    key,
                    Aggregate {
                        last_written: now,
                        suppressed: 0,
                        pending: None,
                    },
                );
                self.write(&mut inner, event);
            }
        }
    }

    /// Writes the aggregated decisions whose interval has passed (called about once per
    /// [`AGGREGATE_MILLIS`] while serving, so a flood that stops is still accounted for).
    pub fn flush_due(&self) {
        let mut inner = crate::sync::lock(&self.inner);
        self.flush_due_locked(&mut inner, Instant::now(), false);
    }

    fn flush_due_locked(&self, inner: &mut Inner, now: Instant, all: bool) {
        let interval = Duration::from_millis(AGGREGATE_MILLIS);
        let mut due = Vec::new();
        inner.aggregates.retain(|_, entry| {
            let quiet = now.saturating_duration_since(entry.last_written) >= interval;
            if (quiet || all) && entry.suppressed > 0 {
                if let Some(mut event) = entry.pending.take() {
                    // The pending decision is one of the suppressed: it stands for the others.
                    event.suppressed = entry.suppressed - 1;
                    self.stats.suppressed.fetch_sub(1, Ordering::Relaxed);
                    due.push(event);
                }
                entry.suppressed = 0;
                entry.last_written = now;
            }
            // An entry with nothing owed that has been quiet for a while is forgotten.
            entry.suppressed > 0 || now.saturating_duration_since(entry.last_written) < interval * 2
        });
        due.sort_by_key(|e| e.at_millis);
        for event in &due {
            self.write(inner, event);
        }
    }

    fn write(&self, inner: &mut Inner, event: &Event) {
        let bytes = match crate::jsonl::render_line(&self.path, event) {
            Ok(bytes) => bytes,
            Err(e) => {
                tracing::error!("cannot render a serve log line: {e}");
                return;
            }
        };
        let line = String::from_utf8_lossy(bytes.strip_suffix(b"\n").unwrap_or(&bytes));
        tracing::info!(target: "tollgate::serve", "{line}");
        let len = bytes.len() as u64;
        if inner.size_bytes > 0 && inner.size_bytes.saturating_add(len) > self.bounds.max_bytes {
            self.rotate(inner);
        }
        match inner.file.write_all(&bytes) {
            Ok(()) => {
                inner.size_bytes = inner.size_bytes.saturating_add(len);
                self.stats.lines.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                self.stats.write_errors.fetch_add(1, Ordering::Relaxed);
                tracing::error!("{}: {e}", self.path.display());
            }
        }
    }

    /// `serve.log.jsonl.N` of the rotation.
    pub fn rotated_path(path: &Path, n: usize) -> PathBuf {
        let mut name = path.as_os_str().to_owned();
        name.push(format!(".{n}"));
        PathBuf::from(name)
    }

    /// Shifts `.1` → `.2` …, the live file to `.1`, and opens a new live file. If the new one
    /// cannot be opened, lines go on to the old descriptor (now `.1`) rather than nowhere.
    fn rotate(&self, inner: &mut Inner) {
        let keep = self.bounds.rotated_files.max(1);
        let _ = std::fs::remove_file(Self::rotated_path(&self.path, keep + 1));
        for n in (1..keep).rev() {
            let from = Self::rotated_path(&self.path, n);
            if let Err(e) = std::fs::rename(&from, Self::rotated_path(&self.path, n + 1)) {
                if e.kind() != std::io::ErrorKind::NotFound {
                    tracing::error!("rotating {}: {e}", from.display());
                }
            }
        }
        if let Err(e) = std::fs::rename(&self.path, Self::rotated_path(&self.path, 1)) {
            tracing::error!("rotating {}: {e}", self.path.display());
            self.stats.write_errors.fetch_add(1, Ordering::Relaxed);
            return;
        }
        match open_append(&self.path) {
            Ok(file) => {
                if let Err(e) = inner.file.sync_data() {
                    tracing::error!("{}: {e}", self.path.display());
                }
                inner.file = file;
                inner.size_bytes = 0;
                self.stats.rotations.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                self.stats.write_errors.fetch_add(1, Ordering::Relaxed);
                // The error names the path.
                tracing::error!("{e}");
            }
        }
    }

    /// Writes what aggregation still owes and forces the log to disk (at shutdown).
    pub fn sync(&self) {
        let mut inner = crate::sync::lock(&self.inner);
        self.flush_due_locked(&mut inner, Instant::now(), true);
        if let Err(e) = inner.file.sync_data() {
            tracing::error!("{}: {e}", self.path.display());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(route: &str, n: u64) -> Event {
        Event {
            at_millis: n,
            kind: "decision",
            route: route.into(),
            outcome: "refused-sender".into(),
            ..Event::default()
        }
    }

    fn lines(path: &Path) -> Vec<serde_json::Value> {
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).expect("JSON line"))
            .collect()
    }

    fn stands_for(lines: &[serde_json::Value]) -> u64 {
        lines
            .iter()
            .map(|l| 1 + l["suppressed"].as_u64().unwrap_or(0))
            .sum()
    }

    #[test]
    fn a_flood_of_refusals_is_one_line_per_interval_and_the_counts_add_up() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("serve.log.jsonl");
        let bounds = LogBounds {
            max_bytes: 1 << 20,
            rotated_files: 1,
        };
        let log = EventLog::open_bounded(&path, bounds).expect("open");
        let start = Instant::now();
        // 3 000 refusals on two routes over 2.5 s, with accepted deliveries in between.
        for i in 0..3_000u64 {
            let at = start + Duration::from_millis(i * 2500 / 3000);
            log.record_at(&refused(if i % 3 == 0 { "/b" } else { "/a" }, i), at);
            if i % 1000 == 0 {
                let accepted = Event {
                    kind: "decision",
                    outcome: "accepted".into(),
                    delivery: Some(format!("d{i}")),
                    ..refused("/a", i)
                };
                log.record_at(&accepted, at);
            }
        }
        let written = lines(&path);
        let accepted = written
            .iter()
            .filter(|l| l["outcome"] == "accepted")
            .count();
        assert_eq!(accepted, 3, "every accepted line is written");
        // Per route: one at 0 s, 1 s, 2 s; the rest pending until flushed.
        let refusals: Vec<_> = written
            .iter()
            .filter(|l| l["outcome"] == "refused-sender")
            .cloned()
            .collect();
        assert_eq!(refusals.len(), 6, "{refusals:?}");
        log.record_at(&refused("/c", 0), start + Duration::from_millis(4_000));
        let written = lines(&path);
        let refusals: Vec<_> = written
            .iter()
            .filter(|l| l["outcome"] == "refused-sender")
            .cloned()
            .collect();
        assert_eq!(stands_for(&refusals), 3_001, "{refusals:?}");
        assert_eq!(log.stats.suppressed.load(Ordering::Relaxed), 3_001 - 9);
    }

    #[test]
    fn sync_writes_what_is_still_owed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("serve.log.jsonl");
        let bounds = LogBounds {
            max_bytes: 1 << 20,
            rotated_files: 1,
        };
        let log = EventLog::open_bounded(&path, bounds).expect("open");
        for i in 0..50 {
            log.record(&refused("/a", i));
        }
        log.sync();
        let written = lines(&path);
        assert_eq!(stands_for(&written), 50, "{written:?}");
        assert_eq!(written.last().expect("a line")["at_millis"], 49);
    }

    #[test]
    fn the_log_rotates_at_its_bound_and_keeps_the_newest_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("serve.log.jsonl");
        let bounds = LogBounds {
            max_bytes: 4096,
            rotated_files: 2,
        };
        let log = EventLog::open_bounded(&path, bounds).expect("open");
        let total = 200u64;
        for i in 0..total {
            let accepted = Event {
                outcome: "accepted".into(),
                delivery: Some(format!("delivery-{i:05}")),
                ..refused("/a", i)
            };
            log.record(&accepted);
        }
        let sizes: Vec<u64> = [
            path.clone(),
            EventLog::rotated_path(&path, 1),
            EventLog::rotated_path(&path, 2),
        ]
        .iter()
        .map(|p| std::fs::metadata(p).expect("file exists").len())
        .collect();
        assert!(sizes.iter().all(|s| *s <= 4096), "{sizes:?}");
        assert!(!EventLog::rotated_path(&path, 3).exists());
        // The newest lines are in the live file, the ones before them in .1, then .2.
        let newest = lines(&path);
        assert_eq!(newest.last().expect("a line")["at_millis"], total - 1);
        let before = lines(&EventLog::rotated_path(&path, 1));
        assert_eq!(
            before.last().expect("a line")["at_millis"].as_u64(),
            newest[0]["at_millis"].as_u64().map(|n| n - 1)
        );
        assert!(log.stats.rotations.load(Ordering::Relaxed) >= 2);
    }
}
