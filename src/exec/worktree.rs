//! An item's worktree: `git worktree add --detach` when the pack's directory is inside a git
//! repository, else a copy of the pack directory. Only the run (or `tollgate sweep`) removes one;
//! a worker never does.

use serde::{Deserialize, Serialize};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Bound on the files a copy-worktree may hold, so a huge pack directory fails loudly.
const MAX_COPY_ENTRIES: usize = 100_000;

#[derive(Debug, thiserror::Error)]
pub enum WorktreeError {
    #[error("WORKTREE_CREATE: cannot create {path}: {message}")]
    Create { path: PathBuf, message: String },
    #[error("WORKTREE_REMOVE: cannot remove {path}: {message}")]
    Remove { path: PathBuf, message: String },
}

/// How a worktree was made (and so how it is removed).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum WorktreeKind {
    /// `git worktree add --detach` from `repo`.
    Git { repo: PathBuf },
    /// A plain copy of the pack directory.
    Copy,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Worktree {
    pub path: PathBuf,
    #[serde(flatten)]
    pub kind: WorktreeKind,
    /// Where the pack's directory lives inside the worktree.
    pub pack_dir: PathBuf,
}

/// The git top level of `dir`, if `dir` is inside a work tree.
fn git_toplevel(dir: &Path) -> Option<PathBuf> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["rev-parse", "--show-toplevel"])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let top = String::from_utf8(out.stdout).ok()?;
    Some(PathBuf::from(top.trim_end_matches('\n')))
}

/// Creates a worktree for the pack in `pack_dir` at `path` (which must not exist).
pub fn create(pack_dir: &Path, path: &Path) -> Result<Worktree, WorktreeError> {
    let fail = |message: String| WorktreeError::Create {
        path: path.to_path_buf(),
        message,
    };
    let pack_dir = fs::canonicalize(pack_dir).map_err(|e| fail(e.to_string()))?;
    if let Some(parent) = path.parent() {
        // `<home>/worktrees/<run>`: 0700 like the rest of the home.
        crate::fsutil::create_private_dir(parent).map_err(|e| fail(e.to_string()))?;
    }
    if let Some(repo) = git_toplevel(&pack_dir) {
        let repo = fs::canonicalize(&repo).unwrap_or(repo);
        let out = Command::new("git")
            .arg("-C")
            .arg(&repo)
            .args(["worktree", "add", "--detach", "--quiet"])
            .arg(path)
            .arg("HEAD")
            .stdin(Stdio::null())
            .output()
            .map_err(|e| fail(format!("git worktree add: {e}")))?;
        if !out.status.success() {
            return Err(fail(format!(
                "git worktree add: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        let rel = pack_dir.strip_prefix(&repo).unwrap_or(Path::new(""));
        return Ok(Worktree {
            path: path.to_path_buf(),
            pack_dir: path.join(rel),
            kind: WorktreeKind::Git { repo },
        });
    }
    let mut budget = MAX_COPY_ENTRIES;
    // The worktree may live below the pack directory (a home inside it): never copy into itself.
    let dest_parent = path
        .parent()
        .and_then(|p| fs::canonicalize(p).ok())
        .unwrap_or_else(|| path.to_path_buf());
    if let Err(e) = copy_tree(&pack_dir, path, &dest_parent, &mut budget) {
        let _ = fs::remove_dir_all(path);
        return Err(fail(e.to_string()));
    }
    Ok(Worktree {
        path: path.to_path_buf(),
        pack_dir: path.to_path_buf(),
        kind: WorktreeKind::Copy,
    })
}

fn copy_tree(from: &Path, to: &Path, skip: &Path, budget: &mut usize) -> io::Result<()> {
    fs::create_dir(to)?;
    for entry in fs::read_dir(from)? {
        let entry = entry?;
        if skip.starts_with(entry.path()) {
            continue;
        }
        if *budget == 0 {
            return Err(io::Error::other(format!(
                "more than {MAX_COPY_ENTRIES} entries to copy"
            )));
        }
        *budget -= 1;
        let kind = entry.file_type()?;
        let dest = to.join(entry.file_name());
        if kind.is_dir() {
            copy_tree(&entry.path(), &dest, skip, budget)?;
        } else if kind.is_symlink() {
            std::os::unix::fs::symlink(fs::read_link(entry.path())?, &dest)?;
        } else if kind.is_file() {
            fs::copy(entry.path(), &dest)?;
        }
    }
    Ok(())
}

/// Removes a worktree; a missing one counts as removed.
pub fn remove(worktree: &Worktree) -> Result<(), WorktreeError> {
    let fail = |message: String| WorktreeError::Remove {
        path: worktree.path.clone(),
        message,
    };
    if let WorktreeKind::Git { repo } = &worktree.kind {
        // Best effort through git so its bookkeeping stays right; the directory removal below is
        // what counts.
        let _ = Command::new("git")
            .arg("-C")
            .arg(repo)
            .args(["worktree", "remove", "--force", "--force"])
            .arg(&worktree.path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
    match fs::remove_dir_all(&worktree.path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(fail(e.to_string())),
    }
    if let WorktreeKind::Git { repo } = &worktree.kind {
        let _ = Command::new("git")
            .arg("-C")
            .arg(repo)
            .args(["worktree", "prune"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
    Ok(())
}
