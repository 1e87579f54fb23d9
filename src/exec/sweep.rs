//! The durable sweep list (`<home>/sweep.json`): worktrees a run could not remove (an abandoned
//! worker may still be inside, or the removal failed). `tollgate sweep` removes each once no live
//! process has its working directory inside it. Updates hold `<home>/sweep.lock` (flock) and
//! publish atomically: temp file, fsync, rename, fsync of the directory.

use super::worktree::{self, Worktree};
use crate::fsutil::{self, FileError};
use crate::protocol::execution::{sweep_decision, SweepDecision};
use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

pub const SWEEP_FILE: &str = "sweep.json";
const SWEEP_LOCK: &str = "sweep.lock";
pub const SWEEP_FORMAT_VERSION: u32 = 1;
/// The list's explicit bound; beyond it an addition is refused (and reported).
pub const MAX_SWEEP_ENTRIES: usize = 10_000;

#[derive(Debug, thiserror::Error)]
pub enum SweepError {
    #[error("SWEEP_IO: {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("SWEEP_UNREADABLE: {path} cannot be parsed ({message}); it was left as it is")]
    Unreadable { path: PathBuf, message: String },
    #[error("SWEEP_FULL: {path} holds its limit of {MAX_SWEEP_ENTRIES} entries")]
    Full { path: PathBuf },
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SweepEntry {
    #[serde(flatten)]
    pub worktree: Worktree,
    /// The run that listed it.
    pub run_id: String,
    pub run_pid: u32,
    pub item: String,
    pub listed_at_millis: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SweepList {
    #[serde(default = "version")]
    pub version: u32,
    #[serde(default)]
    pub entries: Vec<SweepEntry>,
}

fn version() -> u32 {
    SWEEP_FORMAT_VERSION
}

/// What one sweep did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SweepReport {
    pub removed: Vec<PathBuf>,
    pub kept: Vec<PathBuf>,
    pub failed: Vec<(PathBuf, String)>,
}

fn with_lock<T>(
    home: &Path,
    f: impl FnOnce(&mut SweepList) -> Result<T, SweepError>,
) -> Result<T, SweepError> {
    let lock_path = home.join(SWEEP_LOCK);
    // 0600 like the rest of the home; a FIFO in its place is refused, not waited on.
    let file = fsutil::open_private_file(&lock_path, "sweep lock", false)
        .map_err(|e| file_err(&lock_path, e))?;
    let _guard =
        Flock::lock(file, FlockArg::LockExclusive).map_err(|(_, errno)| SweepError::Io {
            path: lock_path.clone(),
            source: io::Error::from(errno),
        })?;
    let path = home.join(SWEEP_FILE);
    let mut list = load(&path)?;
    let before = list.clone();
    let out = f(&mut list)?;
    if list != before {
        publish(&path, &list)?;
    }
    Ok(out)
}

/// A file error as a sweep error: IO stays IO (exit 3); anything about the file's contents or
/// kind (not a regular file, too large, not JSON) is `Unreadable` (exit 2), and the file is kept.
fn file_err(path: &Path, error: FileError) -> SweepError {
    match error {
        FileError::Io { path, source } => SweepError::Io { path, source },
        other => SweepError::Unreadable {
            path: path.to_path_buf(),
            message: other.to_string(),
        },
    }
}

/// Reads the list; a missing file is an empty list, an unparsable one is an error (and kept).
pub fn load(path: &Path) -> Result<SweepList, SweepError> {
    match fsutil::read_state_file(path, "sweep list", fsutil::limits::SWEEP_BYTES)
        .map_err(|e| file_err(path, e))?
    {
        Some(bytes) => parse(path, &bytes),
        None => Ok(SweepList {
            version: SWEEP_FORMAT_VERSION,
            entries: Vec::new(),
        }),
    }
}

/// Parses a sweep list read from `path` (named in errors).
pub fn parse(path: &Path, bytes: &[u8]) -> Result<SweepList, SweepError> {
    let unreadable = |message: String| SweepError::Unreadable {
        path: path.to_path_buf(),
        message,
    };
    let list: SweepList = serde_json::from_slice(bytes).map_err(|e| unreadable(e.to_string()))?;
    if list.version > SWEEP_FORMAT_VERSION {
        return Err(unreadable(format!(
            "format version {} is newer than this tollgate understands ({SWEEP_FORMAT_VERSION})",
            list.version
        )));
    }
    Ok(list)
}

/// Publishes the list atomically and durably, 0600 like every file of the home.
fn publish(path: &Path, list: &SweepList) -> Result<(), SweepError> {
    fsutil::publish_json(path, list).map_err(|e| file_err(path, e))
}

/// Adds an entry (durably) under the lock.
pub fn add(home: &Path, entry: SweepEntry) -> Result<(), SweepError> {
    with_lock(home, |list| {
        if list
            .entries
            .iter()
            .any(|e| e.worktree.path == entry.worktree.path)
        {
            return Ok(());
        }
        if list.entries.len() >= MAX_SWEEP_ENTRIES {
            return Err(SweepError::Full {
                path: home.join(SWEEP_FILE),
            });
        }
        list.entries.push(entry);
        Ok(())
    })
}

/// Whether a live process has its working directory (or root) inside `path`.
pub fn held_by_live_process(path: &Path) -> bool {
    let Ok(dir) = fs::read_dir("/proc") else {
        return false;
    };
    let target = fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        if !super::kill::is_alive(pid) {
            continue;
        }
        if let Ok(cwd) = fs::read_link(format!("/proc/{pid}/cwd")) {
            // A removed cwd reads as "<path> (deleted)"; compare on the path part.
            let cwd_str = cwd.to_string_lossy();
            let cwd = PathBuf::from(cwd_str.trim_end_matches(" (deleted)"));
            if cwd.starts_with(&target) {
                return true;
            }
        }
    }
    false
}

/// Removes every listed worktree nothing holds any more; keeps the rest listed.
pub fn sweep(home: &Path) -> Result<SweepReport, SweepError> {
    with_lock(home, |list| {
        let mut report = SweepReport::default();
        let mut keep = Vec::with_capacity(list.entries.len());
        for entry in list.entries.drain(..) {
            let path = entry.worktree.path.clone();
            match sweep_decision(held_by_live_process(&path)) {
                SweepDecision::Keep => {
                    report.kept.push(path);
                    keep.push(entry);
                }
                SweepDecision::Remove => match worktree::remove(&entry.worktree) {
                    Ok(()) => report.removed.push(path),
                    Err(e) => {
                        report.failed.push((path, e.to_string()));
                        keep.push(entry);
                    }
                },
            }
        }
        list.entries = keep;
        Ok(report)
    })
}
