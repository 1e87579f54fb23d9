//! Refused deliveries of senders that do not retry by themselves (github), recorded durably so
//! `tollgate deliveries --refused` can list them for redelivery: rows of the home's database
//! (`super::state`). Earlier versions appended them to `<home>/serve/refused.jsonl`, which is
//! only read, once, by the import into the database ([`load_refused`]).

use crate::fsutil::FileError;
use crate::jsonl;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The most refusals `deliveries --refused` reads back (the newest ones).
pub const MAX_LISTED: usize = 10_000;
/// What the file is called in errors.
const KIND: &str = "refused-delivery list";

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefusedDelivery {
    pub at_millis: u64,
    pub route: String,
    pub adapter: String,
    pub tenant: String,
    /// The sender's delivery id (what to redeliver).
    pub identity: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<String>,
    pub reason: String,
}

/// Every recorded refusal of an old list, oldest first (at most the newest [`MAX_LISTED`]). A torn last line is
/// skipped.
pub fn load_refused(path: &Path) -> Result<Vec<RefusedDelivery>, FileError> {
    // The newest part only (a bounded read of a regular file; a cut tail loses its partial line).
    jsonl::read_tail(
        path,
        KIND,
        crate::fsutil::limits::LOG_TAIL_BYTES,
        MAX_LISTED,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_old_lists_refusal_reads_back_and_a_torn_last_line_is_skipped() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("refused.jsonl");
        let refused = RefusedDelivery {
            at_millis: 1,
            route: "/gh".into(),
            adapter: "github".into(),
            tenant: "42".into(),
            identity: "d-1".into(),
            event: Some("push".into()),
            reason: "withdrawn: no room".into(),
        };
        // As earlier versions appended it: one JSON line per refusal.
        let mut text = serde_json::to_string(&refused).expect("render") + "\n";
        text.push_str("{\"at_millis\":2,\"rou");
        std::fs::write(&path, text).expect("write");
        assert_eq!(load_refused(&path).expect("load"), vec![refused]);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

        /// Whatever bytes the file holds, listing answers refusals or a corrupt-file error and
        /// never panics.
        #[test]
        fn any_file_content_lists_or_is_refused_without_a_panic(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..400),
        ) {
            let dir = tempfile::tempdir().expect("tempdir");
            let path = dir.path().join("refused.jsonl");
            std::fs::write(&path, &bytes).expect("write");
            let _ = load_refused(&path);
        }
    }
}
