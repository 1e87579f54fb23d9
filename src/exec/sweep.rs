//! The durable sweep list (`<home>/sweep.json`): worktrees a run could not remove (an abandoned
//! worker may still be inside, or the removal failed). `tollgate sweep` removes each once no live
//! process has its working directory inside it. Updates hold `<home>/sweep.lock` (flock) and
//! publish atomically: temp file, fsync, rename, fsync of the directory.

use super::worktree::{self, Worktree};
use crate::protocol::execution::{sweep_decision, SweepDecision};
use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};
use std::fs;
use std::io::{self, Write};
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

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> SweepError + '_ {
    move |source| SweepError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn with_lock<T>(
    home: &Path,
    f: impl FnOnce(&mut SweepList) -> Result<T, SweepError>,
) -> Result<T, SweepError> {
    let lock_path = home.join(SWEEP_LOCK);
    let file = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(io_err(&lock_path))?;
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

/// Reads the list; a missing file is an empty list, an unparsable one is an error (and kept).
pub fn load(path: &Path) -> Result<SweepList, SweepError> {
    match fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| SweepError::Unreadable {
            path: path.to_path_buf(),
            message: e.to_string(),
        }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(SweepList {
            version: SWEEP_FORMAT_VERSION,
            entries: Vec::new(),
        }),
        Err(e) => Err(io_err(path)(e)),
    }
}

fn publish(path: &Path, list: &SweepList) -> Result<(), SweepError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp = dir.join(format!(".{SWEEP_FILE}.{}.tmp", std::process::id()));
    let bytes = serde_json::to_vec_pretty(list).map_err(|e| SweepError::Io {
        path: path.to_path_buf(),
        source: io::Error::other(e),
    })?;
    {
        let mut file = fs::File::create(&tmp).map_err(io_err(&tmp))?;
        file.write_all(&bytes).map_err(io_err(&tmp))?;
        file.sync_all().map_err(io_err(&tmp))?;
    }
    fs::rename(&tmp, path).map_err(io_err(path))?;
    fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err(dir))?;
    Ok(())
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
