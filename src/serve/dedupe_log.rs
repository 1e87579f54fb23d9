//! The durable copy of the gate's dedupe marks: `<home>/serve/dedupe.jsonl`, one line per accepted
//! identity (appended and fsynced before the 200 leaves), reloaded at start, expired lines
//! compacted away. It only ever records identities the gate already marked: it is never asked,
//! and its marks of the legacy key format (`adapter/installation/identity`, written before keys
//! were JSON arrays with the route) are kept read-only until they expire; [`DedupeLog::open`]
//! returns them with the others, for the gate (the core's dedupe rule honours them).

use crate::fsutil::{self, FileError};
use crate::jsonl::{self, Durability};
use crate::protocol::admission::MAX_DEDUPE_ENTRIES;
use crate::sync::Mutex;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};

/// Appended lines between two compactions while serving (beyond the live entries).
const COMPACT_AFTER_LINES: usize = 4096;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mark {
    pub identity: String,
    pub marked_at_millis: u64,
}

/// Whether a logged identity is a current key: a JSON array (`["route","adapter",...]`). Old
/// keys start with the adapter's name, never with `[`.
pub fn is_current_key(identity: &str) -> bool {
    identity.starts_with('[')
}

struct Inner {
    file: File,
    /// identity → when it was marked; bounded like the gate's set.
    live: BTreeMap<String, u64>,
    appended: usize,
}

pub struct DedupeLog {
    path: PathBuf,
    ttl_millis: u64,
    inner: Mutex<Inner>,
    /// Marks in the legacy key format found at start: never added to, expire with the TTL.
    legacy: BTreeMap<String, u64>,
}

/// What the file is called in errors.
const KIND: &str = "dedupe log";

fn open_append(path: &Path) -> Result<File, FileError> {
    jsonl::open_append(path, KIND)
}

/// Every line of an old log at `path`, read with the same checks as [`DedupeLog::open`] (a torn
/// last line skipped, any other bad line refused naming the file) and without changing it: what
/// the import into the database takes.
pub fn read_marks(path: &Path) -> Result<Vec<Mark>, FileError> {
    let limit = crate::fsutil::limits::LOG_TAIL_BYTES;
    let text = crate::fsutil::read_state_text(path, KIND, limit)?.unwrap_or_default();
    let mut marks = Vec::new();
    jsonl::parse_lines(path, &text, usize::MAX, |mark: Mark| marks.push(mark))?;
    Ok(marks)
}

impl DedupeLog {
    /// Loads the unexpired marks (in the order they were made) and compacts the file to them. A
    /// torn last line (a crash mid-append) is skipped; any other bad line is an error that keeps
    /// the file. Every live mark is returned (for the gate), the legacy ones too; those stay in
    /// the file until they expire and are never added to.
    pub fn open(
        path: &Path,
        now_millis: u64,
        ttl_millis: u64,
    ) -> Result<(Self, Vec<Mark>), FileError> {
        let limit = crate::fsutil::limits::LOG_TAIL_BYTES;
        // The whole file, bounded (a larger one is refused, not cut: every mark counts).
        let text = crate::fsutil::read_state_text(path, KIND, limit)?.unwrap_or_default();
        let mut live = BTreeMap::new();
        jsonl::parse_lines(path, &text, usize::MAX, |mark: Mark| {
            if mark.marked_at_millis.saturating_add(ttl_millis) > now_millis {
                live.insert(mark.identity, mark.marked_at_millis);
            }
        })?;
        let mut marks: Vec<Mark> = live
            .iter()
            .map(|(identity, at)| Mark {
                identity: identity.clone(),
                marked_at_millis: *at,
            })
            .collect();
        marks.sort_by_key(|m| m.marked_at_millis);
        Self::rewrite(path, &marks)?;
        let legacy = marks
            .iter()
            .filter(|m| !is_current_key(&m.identity))
            .map(|m| (m.identity.clone(), m.marked_at_millis))
            .collect();
        live.retain(|identity, _| is_current_key(identity));
        let log = DedupeLog {
            path: path.to_path_buf(),
            ttl_millis,
            inner: Mutex::new(Inner {
                file: open_append(path)?,
                live,
                appended: 0,
            }),
            legacy,
        };
        Ok((log, marks))
    }

    fn rewrite(path: &Path, marks: &[Mark]) -> Result<(), FileError> {
        fsutil::publish_bytes(path, &jsonl::render_all(path, marks)?)
    }

    /// Appends one mark and fsyncs it; compacts now and then.
    pub fn append(&self, identity: &str, marked_at_millis: u64) -> Result<(), FileError> {
        let mut inner = crate::sync::lock(&self.inner);
        let mark = Mark {
            identity: identity.to_string(),
            marked_at_millis,
        };
        jsonl::append(&mut inner.file, &self.path, &mark, Durability::Synced)?;
        if inner.live.len() >= MAX_DEDUPE_ENTRIES {
            let oldest = inner
                .live
                .iter()
                .min_by_key(|(_, at)| **at)
                .map(|(id, _)| id.clone());
            if let Some(oldest) = oldest {
                inner.live.remove(&oldest);
            }
        }
        inner.live.insert(identity.to_string(), marked_at_millis);
        inner.appended += 1;
        if inner.appended > COMPACT_AFTER_LINES {
            let ttl = self.ttl_millis;
            inner
                .live
                .retain(|_, at| at.saturating_add(ttl) > marked_at_millis);
            let legacy = self
                .legacy
                .iter()
                .filter(|(_, at)| at.saturating_add(ttl) > marked_at_millis);
            let mut marks: Vec<Mark> = inner
                .live
                .iter()
                .chain(legacy)
                .map(|(identity, at)| Mark {
                    identity: identity.clone(),
                    marked_at_millis: *at,
                })
                .collect();
            marks.sort_by_key(|m| m.marked_at_millis);
            Self::rewrite(&self.path, &marks)?;
            inner.file = open_append(&self.path)?;
            inner.appended = 0;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_survive_a_reopen_and_expired_ones_are_compacted_away() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("dedupe.jsonl");
        let (log, marks) = DedupeLog::open(&path, 1_000, 100).expect("open");
        assert!(marks.is_empty());
        log.append("[\"old\"]", 1_000).expect("append");
        log.append("[\"new\"]", 1_090).expect("append");
        drop(log);
        let (_, marks) = DedupeLog::open(&path, 1_150, 100).expect("reopen");
        assert_eq!(
            marks,
            vec![Mark {
                identity: "[\"new\"]".into(),
                marked_at_millis: 1_090
            }]
        );
        let text = std::fs::read_to_string(&path).expect("read");
        assert_eq!(text.lines().count(), 1, "compacted: {text}");
    }

    /// A log written before keys carried the route (`adapter/installation/identity` lines) is
    /// still read: its marks are honoured until they expire, and survive compaction.
    #[test]
    fn legacy_lines_are_still_honoured_until_they_expire() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("dedupe.jsonl");
        std::fs::write(
            &path,
            "{\"identity\":\"generic/default/d-1\",\"marked_at_millis\":1000}\n\
             {\"identity\":\"github/42/a/b\",\"marked_at_millis\":1050}\n",
        )
        .expect("write");
        let (log, marks) = DedupeLog::open(&path, 1_060, 100).expect("open");
        let names = |marks: &[Mark]| marks.iter().map(|m| m.identity.clone()).collect::<Vec<_>>();
        assert_eq!(names(&marks), ["generic/default/d-1", "github/42/a/b"]);
        assert!(marks.iter().all(|m| !is_current_key(&m.identity)));
        log.append("[\"/r\",\"generic\",\"default\",\"d-3\"]", 1_070)
            .expect("append");
        drop(log);
        let (_, marks) = DedupeLog::open(&path, 1_120, 100).expect("reopen");
        assert_eq!(
            names(&marks),
            ["github/42/a/b", "[\"/r\",\"generic\",\"default\",\"d-3\"]"],
            "the expired legacy mark is gone, the live one kept through compaction"
        );
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

        /// Whatever bytes the file holds, opening it answers marks or a corrupt-file error, and
        /// never panics; a file it refused is left as it was.
        #[test]
        fn any_file_content_opens_or_is_refused_without_a_panic(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..400),
            lines in proptest::collection::vec("\\{\"identity\":\"[a-z/\\[\\]\"]{0,12}\",\"marked_at_millis\":[0-9]{1,4}\\}", 0..6),
        ) {
            let dir = tempfile::tempdir().expect("tempdir");
            let path = dir.path().join("dedupe.jsonl");
            for content in [bytes, lines.join("\n").into_bytes()] {
                std::fs::write(&path, &content).expect("write");
                match DedupeLog::open(&path, 5_000, 10_000) {
                    Ok((_, marks)) => {
                        proptest::prop_assert!(marks.iter().all(|m| m.marked_at_millis.saturating_add(10_000) > 5_000));
                    }
                    Err(_) => {
                        proptest::prop_assert_eq!(std::fs::read(&path).expect("read"), content);
                    }
                }
            }
        }
    }
}
