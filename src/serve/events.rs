//! One JSON line per decision and per terminal outcome, appended to `<home>/serve.log.jsonl` and
//! written to stderr through tracing.

use crate::fsutil::FileError;
use serde::Serialize;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

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
}

pub struct EventLog {
    path: PathBuf,
    file: Mutex<File>,
}

impl EventLog {
    pub fn open(path: &Path) -> Result<Self, FileError> {
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(path)
            .map_err(|e| FileError::io(path, e))?;
        Ok(EventLog {
            path: path.to_path_buf(),
            file: Mutex::new(file),
        })
    }

    /// Appends the line (one `write` of the whole line, so lines never interleave) and logs it.
    pub fn record(&self, event: &Event) {
        let line = match serde_json::to_string(event) {
            Ok(line) => line,
            Err(e) => {
                tracing::error!("cannot render a serve log line: {e}");
                return;
            }
        };
        tracing::info!(target: "tollgate::serve", "{line}");
        let mut file = crate::sync::lock(&self.file);
        if let Err(e) = file.write_all(format!("{line}\n").as_bytes()) {
            tracing::error!("{}: {e}", self.path.display());
        }
    }

    /// Forces the log to disk (at shutdown).
    pub fn sync(&self) {
        if let Err(e) = crate::sync::lock(&self.file).sync_data() {
            tracing::error!("{}: {e}", self.path.display());
        }
    }
}
