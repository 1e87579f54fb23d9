//! Whether a home whose `tollgate.db` is missing or holds no schema had a database before
//! (spec/store.md, "A lost database"). A deleted or truncated database would otherwise be
//! started afresh, and `status` would say "no turns yet" while every earlier turn was gone; with
//! one of these signs beside it the open is refused instead (exit 2), naming the database and
//! what shows it existed:
//!
//! - a turn folder with no `turn.json` in it: with the records in the database, the folder of a
//!   turn that started holds only its logs (an earlier version's home keeps `turn.json` there,
//!   which the first open imports);
//! - a file an import moved aside (`queue.json.imported`, `task.json.imported`,
//!   `turn.json.imported`): only a database that took them in renames them;
//! - when the database file is missing or holds 0 bytes: its log `tollgate.db-wal` (or its
//!   index `tollgate.db-shm`), which every command leaves beside the database (whose first page
//!   is written at its first open) and only a removal or truncation of the database alone leaves
//!   behind.
//!
//! A new home has none of them, nor does a crash during the very first open (the database file
//! is created before its log and before any turn folder).

use crate::fsutil::{self, FileError};
use crate::home::Home;
use std::io;
use std::path::Path;

/// The signs named in an error (the first ones found; the scan stops there).
pub const MAX_SIGNS: usize = 3;

/// Up to [`MAX_SIGNS`] signs that `home` had a database, each a path relative to the home with
/// what it is. `with_log`: the database file is missing or holds 0 bytes, so its log counts too.
pub fn earlier_state(home: &Home, with_log: bool) -> Result<Vec<String>, FileError> {
    let mut signs = Vec::new();
    let root = home.root();
    if with_log {
        for suffix in ["-wal", "-shm"] {
            let mut side = home.db_path().into_os_string();
            side.push(suffix);
            if exists(Path::new(&side))? {
                signs.push(format!(
                    "{} (the database's log)",
                    relative(root, Path::new(&side))
                ));
                break;
            }
        }
    }
    if exists(&home.imported_queue_path())? {
        signs.push(format!(
            "{} (a queue the database imported)",
            relative(root, &home.imported_queue_path())
        ));
    }
    for task in fsutil::sorted_names(&home.tasks_dir())? {
        if signs.len() >= MAX_SIGNS {
            break;
        }
        let task_dir = home.task_dir(&task);
        let imported = task_dir.join("task.json.imported");
        if exists(&imported)? {
            signs.push(format!(
                "{} (a record the database imported)",
                relative(root, &imported)
            ));
            continue;
        }
        let turns = task_dir.join("turns");
        for turn in fsutil::sorted_names(&turns)? {
            let dir = turns.join(&turn);
            if !dir.is_dir() || turn.parse::<u32>().is_err() {
                continue;
            }
            if exists(&dir.join("turn.json.imported"))? || !exists(&dir.join("turn.json"))? {
                signs.push(format!(
                    "{}/ (a turn's folder whose record was in the database)",
                    relative(root, &dir)
                ));
                break;
            }
        }
    }
    signs.truncate(MAX_SIGNS);
    Ok(signs)
}

/// The refusal of a home whose database is gone (`missing`) or empty while `signs` show it had
/// one.
pub fn lost(home: &Home, missing: bool, signs: &[String]) -> FileError {
    let what = if missing {
        "the database is missing"
    } else {
        "the database is empty"
    };
    FileError::Missing {
        path: home.db_path(),
        detail: format!(
            "{what}, but the home shows it had one: {}. Restore tollgate.db (with its -wal) from \
             a backup, or move the home's files aside to start an empty home",
            signs.join(", ")
        ),
    }
}

/// Whether anything (a symbolic link included) is at `path`.
fn exists(path: &Path) -> Result<bool, FileError> {
    match std::fs::symlink_metadata(path) {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(FileError::io(path, e)),
    }
}

fn relative(root: &Path, path: &Path) -> String {
    path.strip_prefix(root)
        .unwrap_or(path)
        .display()
        .to_string()
}
