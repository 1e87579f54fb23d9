//! Durable file primitives: atomic publish and strict loading.
//!
//! Publishing is write-temp, fsync, rename, fsync-directory, so a reader (or a crash) sees the old
//! document or the new one, never a torn one. Loading never "repairs": a file that does not parse is
//! an error naming the file, and the file is left exactly as it was.
//!
//! Every state and config file is read through [`read_state_file`]: opened without blocking, refused
//! unless it is a regular file (a FIFO would hang the reader while it holds the queue lock, a
//! symlink to `/dev/zero` would be read until memory runs out), and read up to a bound per kind of
//! file ([`limits`]).

use serde::de::DeserializeOwned;
use serde::Serialize;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, OpenOptionsExt};
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
    /// A FIFO, device, socket or directory where tollgate keeps a regular file.
    #[error("{path} is {found}, not a regular file; tollgate refuses to read its {kind} from it and left it untouched")]
    NotRegular {
        path: PathBuf,
        kind: &'static str,
        found: &'static str,
    },
    /// A write tollgate refused because its result could not be loaded or would overwrite a
    /// record (a counter at its end, a document the loader would refuse).
    #[error("{path}: {detail}; nothing was written")]
    Refused { path: PathBuf, detail: String },
    #[error(
        "{path} holds more than {limit_bytes} bytes, the bound for a {kind}; it was left untouched"
    )]
    TooLarge {
        path: PathBuf,
        kind: &'static str,
        limit_bytes: u64,
    },
    /// A state file that the home shows it had is gone, emptied, or a symbolic link to nothing:
    /// starting it afresh would silently lose what it held.
    #[error("{path}: {detail}; tollgate refuses to start it afresh and changed nothing")]
    Missing { path: PathBuf, detail: String },
}

/// Read bounds per kind of file, far above what tollgate itself writes (so only a damaged or
/// planted file reaches them) and small enough that reading one cannot exhaust memory.
pub mod limits {
    /// `tollgate.toml`.
    pub const CONFIG_BYTES: u64 = 1 << 20;
    /// An earlier version's `queue.json` (read by the import): up to `MAX_QUEUE_ROWS` (100 000)
    /// rows of well under 1 KiB each.
    pub const QUEUE_BYTES: u64 = 128 << 20;
    /// `task.json`: a name, a counter and a strategy.
    pub const TASK_BYTES: u64 = 64 << 10;
    /// `turn.json`: argv and environment (bounded by the kernel's ARG_MAX, a few MiB) as JSON.
    pub const TURN_BYTES: u64 = 32 << 20;
    /// `sweep.json`: up to `MAX_SWEEP_ENTRIES` (10 000) entries.
    pub const SWEEP_BYTES: u64 = 32 << 20;
    /// The tail of an append-only log read back (`refused.jsonl`, the dedupe log).
    pub const LOG_TAIL_BYTES: u64 = 64 << 20;
    /// Other JSON documents (serve's hand-off list).
    pub const DOCUMENT_BYTES: u64 = 32 << 20;
}

impl FileError {
    pub fn io(path: &Path, source: io::Error) -> Self {
        FileError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// Sets the access and modification times of the directory `dir` (not following a symlink) to
/// now: one `utimensat`, no entry created, no data and no sync. A watcher of `dir` gets
/// `IN_ATTRIB` (the turn folders' change signal, [`crate::queue::records`]): the kernel reports
/// a change of both times as `IN_ATTRIB`, of the modification time alone as `IN_MODIFY`.
pub fn touch_dir(dir: &Path) -> io::Result<()> {
    use nix::sys::stat::{utimensat, UtimensatFlags};
    use nix::sys::time::TimeSpec;
    utimensat(
        None,
        dir,
        &TimeSpec::UTIME_NOW,
        &TimeSpec::UTIME_NOW,
        UtimensatFlags::NoFollowSymlink,
    )
    .map_err(io::Error::from)
}

/// Creates `dir` and its missing parents with mode 0700.
pub fn create_private_dir(dir: &Path) -> Result<(), FileError> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| FileError::io(dir, e))
}

/// Creates `dir`, a folder below the existing folder `root`, and its missing parents between the
/// two, with mode 0700, one level at a time: a `root` that is gone (a removed home) is never made
/// again, not even when it is removed while this runs, so a process that outlives its home sees
/// the error instead of leaving a partial home behind. `dir` must lie below `root`.
pub fn create_private_dir_under(root: &Path, dir: &Path) -> Result<(), FileError> {
    let below = dir.strip_prefix(root).map_err(|_| {
        FileError::io(
            dir,
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("not below {}", root.display()),
            ),
        )
    })?;
    if !root.is_dir() {
        return Err(FileError::io(
            root,
            io::Error::new(io::ErrorKind::NotFound, "the folder is gone"),
        ));
    }
    let mut path = root.to_path_buf();
    for part in below.components() {
        path.push(part);
        match fs::DirBuilder::new().mode(0o700).create(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && path.is_dir() => {}
            Err(e) => return Err(FileError::io(&path, e)),
        }
    }
    Ok(())
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
            // A planted FIFO or symlink at the temporary name is refused, not waited on.
            .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW)
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

/// What a non-regular file is, for the error that refuses it.
pub(crate) fn describe_type(file_type: fs::FileType) -> &'static str {
    if file_type.is_dir() {
        "a directory"
    } else if file_type.is_fifo() {
        "a FIFO"
    } else if file_type.is_char_device() {
        "a character device"
    } else if file_type.is_block_device() {
        "a block device"
    } else if file_type.is_socket() {
        "a socket"
    } else if file_type.is_symlink() {
        "a symbolic link"
    } else {
        "not a regular file"
    }
}

/// Opens `path` without blocking (`O_NONBLOCK`: opening a FIFO neither waits for a writer nor,
/// for writing, for a reader) and refuses anything but a regular file. Symbolic links are
/// followed (a symlinked config is common) and the file they reach is what is checked.
/// `Ok(None)` when the file does not exist.
fn open_regular(
    path: &Path,
    kind: &'static str,
    options: &mut OpenOptions,
) -> Result<Option<File>, FileError> {
    open_regular_with(path, kind, options, 0)
}

/// [`open_regular`] with more open flags (`O_NOFOLLOW`: a symbolic link is refused as such).
fn open_regular_with(
    path: &Path,
    kind: &'static str,
    options: &mut OpenOptions,
    flags: libc::c_int,
) -> Result<Option<File>, FileError> {
    let not_regular = |found| FileError::NotRegular {
        path: path.to_path_buf(),
        kind,
        found,
    };
    let file = match options.custom_flags(libc::O_NONBLOCK | flags).open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        // A socket (ENXIO), a FIFO without a reader (opened for writing) or, with `O_NOFOLLOW`,
        // a symbolic link (ELOOP) cannot be opened at all: name what is there rather than the
        // errno.
        Err(e) => {
            let meta = if flags & libc::O_NOFOLLOW != 0 {
                fs::symlink_metadata(path)
            } else {
                fs::metadata(path)
            };
            return Err(match meta {
                Ok(meta) if !meta.is_file() => not_regular(describe_type(meta.file_type())),
                _ => FileError::io(path, e),
            });
        }
    };
    let meta = file.metadata().map_err(|e| FileError::io(path, e))?;
    if !meta.is_file() {
        return Err(not_regular(describe_type(meta.file_type())));
    }
    Ok(Some(file))
}

/// Opens a turn's log (`stdout.log`, `stderr.log`) to read it back: `O_NONBLOCK | O_NOFOLLOW`, and
/// only a regular file. tollgate writes its logs itself, so a FIFO (whose reads would wait for a
/// writer for ever), a device or a symbolic link in a log's place was put there by someone else:
/// an error naming it, nothing read. `Ok(None)` when the log does not exist.
pub fn open_log(path: &Path) -> Result<Option<File>, FileError> {
    open_regular_with(path, "log", OpenOptions::new().read(true), libc::O_NOFOLLOW)
}

/// Reads the state or config file at `path` (a `kind` such as "queue", named in errors), at most
/// `limit_bytes` of it: `Ok(None)` when it does not exist; an error naming the path when it is
/// not a regular file (FIFO, device, socket, directory) or is larger than the bound. Nothing is
/// changed either way.
pub fn read_state_file(
    path: &Path,
    kind: &'static str,
    limit_bytes: u64,
) -> Result<Option<Vec<u8>>, FileError> {
    let Some(file) = open_regular(path, kind, OpenOptions::new().read(true))? else {
        return Ok(None);
    };
    let too_large = || FileError::TooLarge {
        path: path.to_path_buf(),
        kind,
        limit_bytes,
    };
    let len = file.metadata().map_err(|e| FileError::io(path, e))?.len();
    if len > limit_bytes {
        return Err(too_large());
    }
    let mut bytes = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    // One byte past the bound tells a file that grew since the fstat.
    file.take(limit_bytes.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| FileError::io(path, e))?;
    if bytes.len() as u64 > limit_bytes {
        return Err(too_large());
    }
    Ok(Some(bytes))
}

/// [`read_state_file`] for an append-only log: its last `tail_bytes` at most, and whether
/// anything before them was skipped (the first line of a cut tail is then partial).
pub fn read_state_tail(
    path: &Path,
    kind: &'static str,
    tail_bytes: u64,
) -> Result<Option<(Vec<u8>, bool)>, FileError> {
    let Some(mut file) = open_regular(path, kind, OpenOptions::new().read(true))? else {
        return Ok(None);
    };
    let len = file.metadata().map_err(|e| FileError::io(path, e))?.len();
    let start = len.saturating_sub(tail_bytes);
    file.seek(SeekFrom::Start(start))
        .map_err(|e| FileError::io(path, e))?;
    let mut bytes = Vec::new();
    file.take(tail_bytes)
        .read_to_end(&mut bytes)
        .map_err(|e| FileError::io(path, e))?;
    Ok(Some((bytes, start > 0)))
}

/// [`read_state_file`] as UTF-8 text; invalid UTF-8 is a [`FileError::Corrupt`] naming the byte.
pub fn read_state_text(
    path: &Path,
    kind: &'static str,
    limit_bytes: u64,
) -> Result<Option<String>, FileError> {
    match read_state_file(path, kind, limit_bytes)? {
        Some(bytes) => utf8(path, bytes).map(Some),
        None => Ok(None),
    }
}

/// `bytes` as a `String`, or an error naming `path` and the first bad byte.
pub fn utf8(path: &Path, bytes: Vec<u8>) -> Result<String, FileError> {
    String::from_utf8(bytes).map_err(|e| FileError::Corrupt {
        path: path.to_path_buf(),
        format: "UTF-8 text",
        detail: format!("invalid UTF-8 at byte {}", e.utf8_error().valid_up_to()),
    })
}

/// Opens (creating, 0600) a file tollgate appends to or locks, without blocking and refusing
/// anything but a regular file (a FIFO in its place would block the open for good).
pub fn open_private_file(path: &Path, kind: &'static str, append: bool) -> Result<File, FileError> {
    let mut options = OpenOptions::new();
    options.create(true).mode(0o600);
    if append {
        options.append(true);
    } else {
        options.read(true).write(true).truncate(false);
    }
    open_regular(path, kind, &mut options)?.ok_or_else(|| {
        FileError::io(
            path,
            io::Error::new(io::ErrorKind::NotFound, "vanished while being created"),
        )
    })
}

/// Parses JSON `bytes` read from `path` (named in the error).
pub fn parse_json<T: DeserializeOwned>(path: &Path, bytes: &[u8]) -> Result<T, FileError> {
    serde_json::from_slice(bytes).map_err(|e| FileError::Corrupt {
        path: path.to_path_buf(),
        format: "JSON",
        detail: e.to_string(),
    })
}

/// Loads a JSON `kind` of file from `path`, read through [`read_state_file`] with `limit_bytes`;
/// `Ok(None)` when the file does not exist.
pub fn load_json_bounded<T: DeserializeOwned>(
    path: &Path,
    kind: &'static str,
    limit_bytes: u64,
) -> Result<Option<T>, FileError> {
    match read_state_file(path, kind, limit_bytes)? {
        Some(bytes) => parse_json(path, &bytes).map(Some),
        None => Ok(None),
    }
}

/// Loads JSON from `path` (bounded by [`limits::DOCUMENT_BYTES`]); `Ok(None)` when the file does
/// not exist.
pub fn load_json<T: DeserializeOwned>(path: &Path) -> Result<Option<T>, FileError> {
    load_json_bounded(path, "state file", limits::DOCUMENT_BYTES)
}

/// The entry names of `dir`, sorted; none when it does not exist.
pub fn sorted_names(dir: &Path) -> Result<Vec<String>, FileError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(FileError::io(dir, e)),
    };
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| FileError::io(dir, e))?;
        names.push(entry.file_name().to_string_lossy().into_owned());
    }
    names.sort();
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_private_dir_under_a_gone_root_is_refused_and_the_root_not_made_again() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("home");
        let err = create_private_dir_under(&root, &root.join("tasks/t/turns/1"))
            .expect_err("a gone root is refused");
        assert!(err.to_string().contains("home"), "{err}");
        assert!(!root.exists(), "the gone root was made again");
    }

    #[test]
    fn a_private_dir_under_an_existing_root_is_made_with_its_parents_0700() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        let leaf = root.join("tasks/t/turns/1");
        create_private_dir_under(root, &leaf).expect("made");
        create_private_dir_under(root, &leaf).expect("made again: nothing to do");
        for path in [root.join("tasks"), root.join("tasks/t"), leaf] {
            let mode = fs::metadata(&path).expect("made").permissions().mode();
            assert_eq!(mode & 0o777, 0o700, "{}", path.display());
        }
        assert!(create_private_dir_under(&root.join("tasks"), root).is_err());
    }
}
