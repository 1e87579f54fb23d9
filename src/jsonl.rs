//! JSON-lines files: one JSON document per line, appended, read back in bounded pieces.
//!
//! Used by serve's log (`serve.log.jsonl`), its refused-delivery list (`refused.jsonl`) and its
//! dedupe marks (`dedupe.jsonl`); the rules are the same for all of them:
//!
//! - opened for append with mode 0600 through [`fsutil::open_private_file`]: without blocking and
//!   only if a regular file is there (a FIFO planted in its place would block the open for good);
//! - a line is rendered first and written with one `write` of the whole line and its newline, so
//!   lines from two writers never interleave; [`Durability::Synced`] fsyncs it before returning
//!   (for records that must survive a crash before the sender is answered);
//! - read back bounded: at most [`fsutil::limits::LOG_TAIL_BYTES`] and at most a number of
//!   records, the newest; a torn last line (a crash mid-append) is skipped, any other line that
//!   does not parse is an error naming the file and the line, and the file is left as it was.

use crate::fsutil::{self, FileError};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::fs::File;
use std::io::{self, Write};
use std::path::Path;

/// Whether an appended line is forced to disk before [`append`] returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// `fdatasync` after the write: the line survives a crash once `append` returned.
    Synced,
    /// Left to the kernel's write-back (a log whose loss in a crash is acceptable).
    Buffered,
}

/// Opens (creating, 0600) the JSON-lines file at `path` for appending; `kind` names it in errors.
pub fn open_append(path: &Path, kind: &'static str) -> Result<File, FileError> {
    fsutil::open_private_file(path, kind, true)
}

/// `value` as one JSON line, newline included; `path` names the file in the (never expected)
/// error of a value serde cannot render.
pub fn render_line<T: Serialize>(path: &Path, value: &T) -> Result<Vec<u8>, FileError> {
    let mut line = serde_json::to_vec(value).map_err(|e| FileError::Corrupt {
        path: path.to_path_buf(),
        format: "JSON",
        detail: e.to_string(),
    })?;
    line.push(b'\n');
    Ok(line)
}

/// Writes `value` to `out` as one line, with one `write_all` of the whole line, and flushes.
pub fn write_line<W: Write, T: Serialize>(out: &mut W, value: &T) -> io::Result<()> {
    let mut line = serde_json::to_vec(value).map_err(io::Error::other)?;
    line.push(b'\n');
    out.write_all(&line)?;
    out.flush()
}

/// Appends `value` as one line to `file` (opened by [`open_append`] on `path`).
pub fn append<T: Serialize>(
    file: &mut File,
    path: &Path,
    value: &T,
    durability: Durability,
) -> Result<(), FileError> {
    let line = render_line(path, value)?;
    file.write_all(&line)
        .and_then(|()| match durability {
            Durability::Synced => file.sync_data(),
            Durability::Buffered => Ok(()),
        })
        .map_err(|e| FileError::io(path, e))
}

/// Every value as one line each: the body of a compacted file (published atomically by the
/// caller through [`fsutil::publish_bytes`]).
pub fn render_all<'a, T: Serialize + 'a>(
    path: &Path,
    values: impl IntoIterator<Item = &'a T>,
) -> Result<Vec<u8>, FileError> {
    let mut body = Vec::new();
    for value in values {
        body.extend_from_slice(&render_line(path, value)?);
    }
    Ok(body)
}

/// Parses the non-empty lines of `text` (read from `path`), oldest first, handing each of the
/// newest `max_records` to `each`. A last line without its newline that does not parse is a torn
/// append and is skipped; any other bad line is a [`FileError::Corrupt`] naming its number
/// (counted over the non-empty lines).
pub fn parse_lines<T: DeserializeOwned>(
    path: &Path,
    text: &str,
    max_records: usize,
    mut each: impl FnMut(T),
) -> Result<(), FileError> {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let skip = lines.len().saturating_sub(max_records);
    for (i, line) in lines.iter().enumerate().skip(skip) {
        match serde_json::from_str(line) {
            Ok(value) => each(value),
            Err(_) if i + 1 == lines.len() && !text.ends_with('\n') => {}
            Err(e) => {
                return Err(FileError::Corrupt {
                    path: path.to_path_buf(),
                    format: "JSON lines",
                    detail: format!("line {}: {e}", i + 1),
                })
            }
        }
    }
    Ok(())
}

/// The newest records of the JSON-lines file at `path`: from its last `tail_bytes` at most (a
/// cut tail loses its partial first line), the newest `max_records` of them, oldest first. An
/// absent file has none. Refused like every state file when it is not a regular file.
pub fn read_tail<T: DeserializeOwned>(
    path: &Path,
    kind: &'static str,
    tail_bytes: u64,
    max_records: usize,
) -> Result<Vec<T>, FileError> {
    let Some((mut bytes, cut)) = fsutil::read_state_tail(path, kind, tail_bytes)? else {
        return Ok(Vec::new());
    };
    if cut {
        bytes.drain(
            ..bytes
                .iter()
                .position(|&b| b == b'\n')
                .map_or(bytes.len(), |i| i + 1),
        );
    }
    let text = fsutil::utf8(path, bytes)?;
    let mut out = Vec::new();
    parse_lines(path, &text, max_records, |value| out.push(value))?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appended_lines_read_back_newest_last_and_a_torn_tail_is_skipped() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("x.jsonl");
        let mut file = open_append(&path, "test log").expect("open");
        for n in 0..5u32 {
            append(&mut file, &path, &n, Durability::Synced).expect("append");
        }
        file.write_all(b"{\"a").expect("torn write");
        // The torn line is one of the newest four lines; it is skipped, not replaced.
        let newest: Vec<u32> = read_tail(&path, "test log", 1 << 20, 4).expect("read");
        assert_eq!(newest, vec![2, 3, 4]);
        // A cut tail drops its (possibly partial) first line: the last 9 bytes are `2\n3\n4\n{"a`.
        let cut: Vec<u32> = read_tail(&path, "test log", 9, 10).expect("read");
        assert_eq!(cut, vec![3, 4]);
    }

    #[test]
    fn a_bad_line_before_the_last_is_an_error_naming_the_file_and_line() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("x.jsonl");
        std::fs::write(&path, "1\nnot json\n3\n").expect("write");
        let err = read_tail::<u32>(&path, "test log", 1 << 20, 10).expect_err("corrupt");
        let text = err.to_string();
        assert!(
            text.contains("x.jsonl") && text.contains("line 2"),
            "{text}"
        );
    }

    #[test]
    fn a_fifo_in_place_of_the_file_is_refused_not_waited_on() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("x.jsonl");
        nix::unistd::mkfifo(&path, nix::sys::stat::Mode::S_IRWXU).expect("mkfifo");
        assert!(matches!(
            open_append(&path, "test log"),
            Err(FileError::NotRegular { .. })
        ));
    }
}
