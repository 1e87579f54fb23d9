//! Durable file primitives: atomic publish and strict loading.
//!
//! Publishing is write-temp, fsync, rename, fsync-directory, so a reader (or a crash) sees the old
//! document or the new one, never a torn one. Loading never "repairs": a file that does not parse is
//! an error naming the file, and the file is left exactly as it was.

use serde::de::DeserializeOwned;
use serde::Serialize;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{path} is not valid {format} ({detail}); it was left untouched")]
    Corrupt {
        path: PathBuf,
        format: &'static str,
        detail: String,
    },
}

impl FileError {
    pub fn io(path: &Path, source: io::Error) -> Self {
        FileError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// Creates `dir` and its missing parents with mode 0700.
pub fn create_private_dir(dir: &Path) -> Result<(), FileError> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| FileError::io(dir, e))
}

/// Replaces `path` with `bytes` atomically and durably.
pub fn publish_bytes(path: &Path, bytes: &[u8]) -> Result<(), FileError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let temp = dir.join(format!(".{name}.tmp.{}", std::process::id()));
    let write = || -> io::Result<()> {
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&temp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        Ok(())
    };
    if let Err(e) = write() {
        let _ = fs::remove_file(&temp);
        return Err(FileError::io(&temp, e));
    }
    fs::rename(&temp, path).map_err(|e| {
        let _ = fs::remove_file(&temp);
        FileError::io(path, e)
    })?;
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| FileError::io(dir, e))
}

/// Serialises `value` as pretty JSON (with a final newline) and publishes it at `path`.
pub fn publish_json<T: Serialize>(path: &Path, value: &T) -> Result<(), FileError> {
    let mut bytes = serde_json::to_vec_pretty(value).map_err(|e| FileError::Corrupt {
        path: path.to_path_buf(),
        format: "JSON",
        detail: e.to_string(),
    })?;
    bytes.push(b'\n');
    publish_bytes(path, &bytes)
}

/// Loads JSON from `path`; `Ok(None)` when the file does not exist.
pub fn load_json<T: DeserializeOwned>(path: &Path) -> Result<Option<T>, FileError> {
    let bytes = match fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(FileError::io(path, e)),
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| FileError::Corrupt {
            path: path.to_path_buf(),
            format: "JSON",
            detail: e.to_string(),
        })
}
