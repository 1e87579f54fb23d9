//! `pack.toml`: the batch a run executes. Parsing turns every problem into a [`PackError`] that
//! names the file, the key and the line.

use crate::clock::duration_millis;
use crate::protocol::execution::{ItemSpec, MAX_ITEMS};
use serde::Deserialize;
use std::collections::{BTreeMap, HashSet};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;
use toml::Spanned;

/// Term and join grace when the pack does not say.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(5);
/// A pack file larger than this is refused before parsing.
pub const MAX_PACK_BYTES: u64 = 16 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum PackError {
    #[error("PACK_READ: cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("PACK_INVALID: {path}:{line}: key `{key}`: {message}")]
    Invalid {
        path: PathBuf,
        line: usize,
        key: String,
        message: String,
    },
}

/// How an item's command is given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// An argv, executed directly.
    Argv(Vec<String>),
    /// One line for `sh -c`.
    Shell(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Item {
    pub name: String,
    pub command: Command,
    /// Relative to the pack's directory (or to its image in the item's worktree).
    pub cwd: Option<PathBuf>,
    pub env: BTreeMap<String, String>,
    pub deadline: Option<Duration>,
    pub worktree: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pack {
    /// The file it came from.
    pub path: PathBuf,
    /// The directory relative paths resolve against.
    pub dir: PathBuf,
    pub ceiling: Option<Duration>,
    pub jobs: Option<usize>,
    pub grace: Duration,
    pub items: Vec<Item>,
}

impl Pack {
    /// What the core needs to know about each item.
    pub fn specs(&self) -> Vec<ItemSpec> {
        self.items
            .iter()
            .map(|item| ItemSpec {
                deadline_millis: item.deadline.map(duration_millis),
                worktree: item.worktree,
            })
            .collect()
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPack {
    ceiling: Option<Spanned<String>>,
    deadline: Option<Spanned<String>>,
    jobs: Option<Spanned<i64>>,
    grace: Option<Spanned<String>>,
    #[serde(default)]
    item: Vec<Spanned<RawItem>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawItem {
    name: Spanned<String>,
    run: Option<Spanned<Vec<String>>>,
    shell: Option<Spanned<String>>,
    cwd: Option<PathBuf>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    deadline: Option<Spanned<String>>,
    #[serde(default)]
    worktree: bool,
}

/// Reads and parses the pack at `path`.
pub fn load(path: &Path) -> Result<Pack, PackError> {
    let read_err = |source| PackError::Read {
        path: path.to_path_buf(),
        source,
    };
    let invalid_file = |message: String| PackError::Invalid {
        path: path.to_path_buf(),
        line: 1,
        key: "(file)".into(),
        message,
    };
    // Not blocking on a FIFO, refusing devices and directories, bounded in size.
    let bytes = match crate::fsutil::read_state_file(path, "pack", MAX_PACK_BYTES) {
        Ok(Some(bytes)) => bytes,
        Ok(None) => return Err(read_err(std::io::Error::from_raw_os_error(libc::ENOENT))),
        Err(crate::fsutil::FileError::Io { source, .. }) => return Err(read_err(source)),
        Err(crate::fsutil::FileError::TooLarge { .. }) => {
            return Err(invalid_file(format!(
                "more than {MAX_PACK_BYTES} bytes; a pack is at most that"
            )))
        }
        Err(other) => return Err(invalid_file(other.to_string())),
    };
    let text = String::from_utf8(bytes).map_err(|e| {
        invalid_file(format!(
            "not valid UTF-8 (at byte {})",
            e.utf8_error().valid_up_to()
        ))
    })?;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    parse(&text, path, &dir)
}

/// Parses pack text; `path` only names the file in errors, `dir` is where relative paths resolve.
pub fn parse(text: &str, path: &Path, dir: &Path) -> Result<Pack, PackError> {
    let invalid = |span: Range<usize>, key: &str, message: String| PackError::Invalid {
        path: path.to_path_buf(),
        line: line_of(text, span.start),
        key: key.to_string(),
        message,
    };
    let raw: RawPack = toml::from_str(text).map_err(|e| {
        let span = e.span().unwrap_or(0..0);
        let key = key_of(text, &span, e.message());
        invalid(span, &key, e.message().trim().to_string())
    })?;

    let duration = |value: &Spanned<String>, key: &str| {
        humantime::parse_duration(value.get_ref().trim()).map_err(|e| {
            invalid(
                value.span(),
                key,
                format!(
                    "{:?} is not a duration like \"30s\" or \"2m\": {e}",
                    value.get_ref()
                ),
            )
        })
    };
    let ceiling = raw
        .ceiling
        .as_ref()
        .map(|v| duration(v, "ceiling"))
        .transpose()?;
    let default_deadline = raw
        .deadline
        .as_ref()
        .map(|v| duration(v, "deadline"))
        .transpose()?;
    let grace = raw
        .grace
        .as_ref()
        .map(|v| duration(v, "grace"))
        .transpose()?
        .unwrap_or(DEFAULT_GRACE);
    let jobs = match &raw.jobs {
        None => None,
        Some(j) => match usize::try_from(*j.get_ref()) {
            Ok(n) if n >= 1 => Some(n),
            _ => {
                return Err(invalid(
                    j.span(),
                    "jobs",
                    format!("{} is not a positive number", j.get_ref()),
                ))
            }
        },
    };
    if raw.item.is_empty() {
        return Err(invalid(0..0, "item", "the pack has no [[item]]".into()));
    }
    if raw.item.len() > MAX_ITEMS {
        let span = raw.item[MAX_ITEMS].span();
        return Err(invalid(
            span,
            "item",
            format!("{} items; a pack holds at most {MAX_ITEMS}", raw.item.len()),
        ));
    }

    let mut names = HashSet::with_capacity(raw.item.len());
    let mut items = Vec::with_capacity(raw.item.len());
    for spanned in raw.item {
        let item_span = spanned.span();
        let raw_item = spanned.into_inner();
        let name = raw_item.name.get_ref().clone();
        if name.trim().is_empty() {
            return Err(invalid(raw_item.name.span(), "name", "is empty".into()));
        }
        if !names.insert(name.clone()) {
            return Err(invalid(
                raw_item.name.span(),
                "name",
                format!("{name:?} names two items"),
            ));
        }
        let command = match (raw_item.run, raw_item.shell) {
            (Some(run), None) => {
                if run.get_ref().is_empty() || run.get_ref()[0].is_empty() {
                    return Err(invalid(run.span(), "run", "the argv is empty".into()));
                }
                Command::Argv(run.into_inner())
            }
            (None, Some(shell)) => {
                if shell.get_ref().contains('\n') {
                    return Err(invalid(
                        shell.span(),
                        "shell",
                        "must be one line (use run = [...] for more)".into(),
                    ));
                }
                Command::Shell(shell.into_inner())
            }
            (Some(run), Some(_)) => {
                return Err(invalid(
                    run.span(),
                    "run",
                    format!("item {name:?} has both `run` and `shell`; give exactly one"),
                ))
            }
            (None, None) => {
                return Err(invalid(
                    item_span,
                    "run",
                    format!("item {name:?} has neither `run` nor `shell`; give exactly one"),
                ))
            }
        };
        let deadline = match &raw_item.deadline {
            Some(v) => Some(duration(v, "deadline")?),
            None => default_deadline,
        };
        items.push(Item {
            name,
            command,
            cwd: raw_item.cwd,
            env: raw_item.env,
            deadline,
            worktree: raw_item.worktree,
        });
    }
    Ok(Pack {
        path: path.to_path_buf(),
        dir: dir.to_path_buf(),
        ceiling,
        jobs,
        grace,
        items,
    })
}

/// 1-based line of byte `offset`.
fn line_of(text: &str, offset: usize) -> usize {
    let end = offset.min(text.len());
    text.as_bytes()[..end]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// The key an error is about: the one toml names (`unknown field `x``), else the key on the line.
fn key_of(text: &str, span: &Range<usize>, message: &str) -> String {
    if let Some(rest) = message.split("field `").nth(1) {
        if let Some(name) = rest.split('`').next() {
            return name.to_string();
        }
    }
    // Byte offsets (a span need not fall on a character boundary): a newline byte always does.
    let start = span.start.min(text.len());
    let line_start = text.as_bytes()[..start]
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |i| i + 1);
    let line = text
        .get(line_start..)
        .unwrap_or("")
        .lines()
        .next()
        .unwrap_or("");
    match line.split_once('=') {
        Some((key, _)) => key.trim().to_string(),
        None => line.trim().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> (usize, String, String) {
        match parse(text, Path::new("pack.toml"), Path::new(".")) {
            Err(PackError::Invalid {
                line, key, message, ..
            }) => (line, key, message),
            other => panic!("expected an error, got {other:?}"),
        }
    }

    #[test]
    fn parses_a_pack() {
        let pack = parse(
            "ceiling = \"1m\"\njobs = 3\n[[item]]\nname = \"a\"\nrun = [\"true\"]\ndeadline = \"2s\"\n[[item]]\nname = \"b\"\nshell = \"echo hi\"\nworktree = true\nenv = { X = \"1\" }\n",
            Path::new("p.toml"),
            Path::new("."),
        )
        .unwrap();
        assert_eq!(pack.ceiling, Some(Duration::from_secs(60)));
        assert_eq!(pack.jobs, Some(3));
        assert_eq!(pack.items.len(), 2);
        assert_eq!(pack.items[0].deadline, Some(Duration::from_secs(2)));
        assert!(pack.items[1].worktree);
        assert_eq!(pack.items[1].env.get("X").map(String::as_str), Some("1"));
    }

    #[test]
    fn unknown_key_names_key_and_line() {
        let (line, key, _) = err("[[item]]\nname = \"a\"\nrun = [\"true\"]\ncolour = 1\n");
        assert_eq!((line, key.as_str()), (4, "colour"));
    }

    #[test]
    fn bad_duration_names_key_and_line() {
        let (line, key, _) =
            err("jobs = 1\ndeadline = \"soon\"\n[[item]]\nname = \"a\"\nrun = [\"x\"]\n");
        assert_eq!((line, key.as_str()), (2, "deadline"));
    }

    #[test]
    fn more_than_the_item_bound_is_refused() {
        let text = "[[item]]\nname = \"x\"\nrun = [\"true\"]\n".repeat(MAX_ITEMS + 1);
        let (_, key, message) = err(&text);
        assert_eq!(key, "item");
        assert!(message.contains("at most 10000"), "{message}");
    }

    #[test]
    fn duplicate_names_refused() {
        let (line, key, _) =
            err("[[item]]\nname = \"a\"\nrun = [\"x\"]\n[[item]]\nname = \"a\"\nrun = [\"y\"]\n");
        assert_eq!((line, key.as_str()), (5, "name"));
    }
}
