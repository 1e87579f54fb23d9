//! The dedupe log of earlier versions, `<home>/serve/dedupe.jsonl`: one line per accepted
//! identity, appended and fsynced before the 200 left. Today's marks are rows of the home's
//! database, committed with their turns; an old log is only read, once, by the import into the
//! database ([`read_marks`], `super::state::import_old_files`). Its marks of the legacy key format
//! (`adapter/installation/identity`, written before keys were JSON arrays with the route) are
//! imported like the others: the core's dedupe rule honours them until they expire.

use crate::fsutil::FileError;
use serde::{Deserialize, Serialize};
use std::path::Path;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mark {
    pub identity: String,
    pub marked_at_millis: u64,
}

/// What the file is called in errors.
const KIND: &str = "dedupe log";

/// Every line of an old log at `path` (a torn last line, a crash mid-append, skipped; any other
/// bad line refused naming the file; a larger file than the bound refused, not cut: every mark
/// counts), read without changing it: what the import into the database takes.
pub fn read_marks(path: &Path) -> Result<Vec<Mark>, FileError> {
    let limit = crate::fsutil::limits::LOG_TAIL_BYTES;
    let text = crate::fsutil::read_state_text(path, KIND, limit)?.unwrap_or_default();
    let mut marks = Vec::new();
    crate::jsonl::parse_lines(path, &text, usize::MAX, |mark: Mark| marks.push(mark))?;
    Ok(marks)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A log as earlier versions wrote it, legacy lines (`adapter/installation/identity`) and a
    /// torn last line included, reads back line by line.
    #[test]
    fn an_old_log_reads_back_with_its_legacy_lines_and_without_its_torn_tail() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("dedupe.jsonl");
        std::fs::write(
            &path,
            "{\"identity\":\"generic/default/d-1\",\"marked_at_millis\":1000}\n\
             {\"identity\":\"[\\\"/r\\\",\\\"generic\\\",\\\"default\\\",\\\"d-3\\\"]\",\"marked_at_millis\":1070}\n\
             {\"identity\":\"[\\\"/r\\\",\"mar",
        )
        .expect("write");
        let names: Vec<String> = read_marks(&path)
            .expect("read")
            .into_iter()
            .map(|m| m.identity)
            .collect();
        assert_eq!(
            names,
            [
                "generic/default/d-1",
                "[\"/r\",\"generic\",\"default\",\"d-3\"]"
            ]
        );
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

        /// Whatever bytes the file holds, reading it answers marks or a corrupt-file error, never
        /// panics, and leaves the file as it was.
        #[test]
        fn any_file_content_reads_or_is_refused_without_a_panic(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..400),
            lines in proptest::collection::vec("\\{\"identity\":\"[a-z/\\[\\]\"]{0,12}\",\"marked_at_millis\":[0-9]{1,4}\\}", 0..6),
        ) {
            let dir = tempfile::tempdir().expect("tempdir");
            let path = dir.path().join("dedupe.jsonl");
            for content in [bytes, lines.join("\n").into_bytes()] {
                std::fs::write(&path, &content).expect("write");
                let _ = read_marks(&path);
                proptest::prop_assert_eq!(std::fs::read(&path).expect("read"), content);
            }
        }
    }
}
