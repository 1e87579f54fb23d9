//! The durable sweep list (`<home>/sweep.json`): worktrees a run could not remove (an abandoned
//! worker may still be inside, or the removal failed), and every run in progress with its
//! containment unit, recorded before its first item starts. `tollgate sweep` (and the next
//! `tollgate run` on the home) kills the unit of a run whose process is gone and removes its
//! worktrees; a listed worktree is removed once no live process has its working directory inside
//! it. Updates hold `<home>/sweep.lock` (flock) and publish atomically: temp file, fsync, rename,
//! fsync of the directory.
//!
//! Format: version 2 adds `runs` (absent when empty). Version 1 files load unchanged (no runs);
//! older tollgate versions read version 2 files too (they ignore `runs`, and rewrite without it).

use super::worktree::{self, Worktree, WorktreeKind};
use crate::flock;
use crate::fsutil::{self, FileError};
use crate::process::containment::{self, UnitIdentity};
use crate::process::ProcLiveness;
use crate::protocol::execution::{sweep_decision, SweepDecision};
use crate::protocol::slots::{Liveness, Observation, ProcessIdentity};
use serde::{Deserialize, Serialize};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub const SWEEP_FILE: &str = "sweep.json";
const SWEEP_LOCK: &str = "sweep.lock";
pub const SWEEP_FORMAT_VERSION: u32 = 2;
/// The list's explicit bound; beyond it an addition is refused (and reported).
pub const MAX_SWEEP_ENTRIES: usize = 10_000;
/// Bound on the runs recorded at once (live runs on one home, plus dead ones not yet swept).
pub const MAX_SWEEP_RUNS: usize = 1_000;
/// The longest SIGTERM-to-SIGKILL grace a sweep grants a dead run's unit, whatever its pack said.
pub const MAX_SWEEP_GRACE_MILLIS: u64 = 30_000;

#[derive(Debug, thiserror::Error)]
pub enum SweepError {
    #[error("SWEEP_IO: {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("SWEEP_UNREADABLE: {path} cannot be parsed ({message}); it was left as it is")]
    Unreadable { path: PathBuf, message: String },
    #[error("SWEEP_FULL: {path} holds its limit of {MAX_SWEEP_ENTRIES} entries")]
    Full { path: PathBuf },
    #[error(
        "SWEEP_RUNS_FULL: {path} holds its limit of {MAX_SWEEP_RUNS} runs; run `tollgate sweep`"
    )]
    RunsFull { path: PathBuf },
    #[error(
        "SWEEP_LOCK_TIMEOUT: {path} is still held by another tollgate process after \
         {waited_millis} ms; nothing was changed (try again once it finished)"
    )]
    LockTimeout { path: PathBuf, waited_millis: u64 },
}

/// The longest a sweep-list update waits for `sweep.lock` (held only for a read-modify-publish of
/// a small file, so a holder that keeps it this long is stuck).
pub const SWEEP_LOCK_TIMEOUT_MILLIS: u64 = 10_000;

/// A run in progress, recorded before its first item starts: enough for any later process to kill
/// everything it started and remove its worktrees once the run's process is gone.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunRecord {
    pub run_id: String,
    /// The run's process: while it is alive its unit is never touched.
    pub run: ProcessIdentity,
    /// The run's unit: its cgroup (items' groups inside) and the marker prefix every item carries.
    pub unit: UnitIdentity,
    /// `<home>/worktrees/<run id>`: every worktree of the run is below it.
    pub worktree_root: PathBuf,
    /// The pack's grace (SIGTERM to SIGKILL), used when a sweep kills the unit.
    pub grace_millis: u64,
    pub started_at_millis: u64,
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
    /// Runs in progress (or dead and not yet swept). Absent in version 1.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runs: Vec<RunRecord>,
}

fn version() -> u32 {
    SWEEP_FORMAT_VERSION
}

/// What one sweep did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SweepReport {
    /// Dead runs whose units were killed (first, before any worktree is looked at).
    pub runs: Vec<DeadRun>,
    pub removed: Vec<PathBuf>,
    pub kept: Vec<PathBuf>,
    pub failed: Vec<(PathBuf, String)>,
}

/// What a sweep did about one run whose process is gone.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeadRun {
    pub run_id: String,
    pub run_pid: u32,
    /// Processes of its unit found alive and signalled.
    pub killed: usize,
    /// Processes still alive after SIGKILL and the bounded wait (the record is kept).
    pub survivors: Vec<i32>,
    /// Worktrees removed, and the record dropped once none is left.
    pub removed: Vec<PathBuf>,
    pub failed: Vec<(PathBuf, String)>,
    /// Whether the run's record left the list (everything of it is gone).
    pub forgotten: bool,
}

fn with_lock<T>(
    home: &Path,
    f: impl FnOnce(&mut SweepList) -> Result<T, SweepError>,
) -> Result<T, SweepError> {
    with_lock_within(home, Duration::from_millis(SWEEP_LOCK_TIMEOUT_MILLIS), f)
}

/// [`with_lock`], waiting at most `timeout` for `sweep.lock`.
fn with_lock_within<T>(
    home: &Path,
    timeout: Duration,
    f: impl FnOnce(&mut SweepList) -> Result<T, SweepError>,
) -> Result<T, SweepError> {
    let lock_path = home.join(SWEEP_LOCK);
    // 0600 like the rest of the home; a FIFO in its place is refused, not waited on.
    let file = fsutil::open_private_file(&lock_path, "sweep lock", false)
        .map_err(|e| file_err(&lock_path, e))?;
    let _guard = flock::exclusive_within(file, timeout).map_err(|e| match e {
        flock::WaitError::TimedOut { waited } => SweepError::LockTimeout {
            path: lock_path.clone(),
            waited_millis: crate::clock::duration_millis(waited),
        },
        flock::WaitError::Failed(errno) => SweepError::Io {
            path: lock_path.clone(),
            source: io::Error::from(errno),
        },
    })?;
    let path = home.join(SWEEP_FILE);
    let mut list = load(&path)?;
    let before = list.clone();
    let out = f(&mut list)?;
    if list != before {
        list.version = SWEEP_FORMAT_VERSION;
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
            runs: Vec::new(),
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

/// Records a run before its first item starts (durably, under the lock).
pub fn record_run(home: &Path, record: RunRecord) -> Result<(), SweepError> {
    with_lock(home, |list| {
        if list.runs.iter().any(|r| r.run_id == record.run_id) {
            return Ok(());
        }
        if list.runs.len() >= MAX_SWEEP_RUNS {
            return Err(SweepError::RunsFull {
                path: home.join(SWEEP_FILE),
            });
        }
        list.runs.push(record);
        Ok(())
    })
}

/// Drops a finished run's record (its items have all settled and been released).
pub fn forget_run(home: &Path, run_id: &str) -> Result<(), SweepError> {
    with_lock(home, |list| {
        list.runs.retain(|r| r.run_id != run_id);
        Ok(())
    })
}

/// Whether a recorded run's process is gone for sure (ambiguous counts as alive).
fn run_is_gone(record: &RunRecord) -> bool {
    record.run.pid != std::process::id()
        && matches!(ProcLiveness.observe(&record.run), Observation::Gone)
}

/// How a worktree found under a dead run's root was made: a git worktree has a `.git` file; its
/// repository is the parent of `git rev-parse --git-common-dir`.
fn worktree_at(path: &Path) -> Worktree {
    let kind = fs::symlink_metadata(path.join(".git"))
        .ok()
        .filter(|m| m.is_file())
        .and_then(|_| {
            let out = std::process::Command::new("git")
                .arg("-C")
                .arg(path)
                .args(["rev-parse", "--path-format=absolute", "--git-common-dir"])
                .stdin(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .output()
                .ok()?;
            let common = String::from_utf8(out.stdout).ok()?;
            let common = PathBuf::from(common.trim_end_matches('\n'));
            Some(WorktreeKind::Git {
                repo: common.parent()?.to_path_buf(),
            })
        })
        .unwrap_or(WorktreeKind::Copy);
    Worktree {
        path: path.to_path_buf(),
        kind,
        pack_dir: path.to_path_buf(),
    }
}

/// Kills the units of recorded runs whose process is gone, then removes their worktrees and
/// records. A live run (its identity still matches) is never touched. The kills happen outside
/// the lock (they may take a grace); the removals under it.
pub fn sweep_dead_runs(home: &Path) -> Result<Vec<DeadRun>, SweepError> {
    let dead: Vec<RunRecord> = with_lock(home, |list| {
        Ok(list
            .runs
            .iter()
            .filter(|r| run_is_gone(r))
            .cloned()
            .collect())
    })?;
    let mut out = Vec::with_capacity(dead.len());
    for record in dead {
        let grace =
            std::time::Duration::from_millis(record.grace_millis.min(MAX_SWEEP_GRACE_MILLIS));
        let killed = containment::kill_unit(&record.unit, grace);
        let mut report = DeadRun {
            run_id: record.run_id.clone(),
            run_pid: record.run.pid,
            killed: killed.signalled,
            survivors: killed.survivors,
            ..DeadRun::default()
        };
        if report.survivors.is_empty() {
            with_lock(home, |list| {
                if let Ok(dir) = fs::read_dir(&record.worktree_root) {
                    for entry in dir.flatten().take(MAX_SWEEP_ENTRIES) {
                        let wt = worktree_at(&entry.path());
                        if held_after_exits(&wt.path) {
                            report
                                .failed
                                .push((wt.path, "a live process is inside".to_string()));
                            continue;
                        }
                        match worktree::remove(&wt) {
                            Ok(()) => report.removed.push(wt.path),
                            Err(e) => report.failed.push((wt.path, e.to_string())),
                        }
                    }
                }
                if report.failed.is_empty() {
                    let _ = fs::remove_dir(&record.worktree_root);
                    list.runs.retain(|r| r.run_id != record.run_id);
                    report.forgotten = true;
                }
                Ok(())
            })?;
        }
        out.push(report);
    }
    Ok(out)
}

/// How long [`held_after_exits`] lets killed processes finish exiting.
const EXIT_SETTLE_MILLIS: u64 = 2_000;

/// [`held_by_live_process`], given killed processes time to finish exiting: an exiting process
/// drops its memory (so the marker walk no longer sees it, and the unit reads empty) before it
/// drops its working directory, so right after a kill a worktree can still look held for a
/// moment (a CI run saw a dead run's worktree left that way). Bounded: a process really working
/// inside keeps it held.
fn held_after_exits(path: &Path) -> bool {
    let until = std::time::Instant::now() + std::time::Duration::from_millis(EXIT_SETTLE_MILLIS);
    while held_by_live_process(path) {
        if std::time::Instant::now() >= until {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    false
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
        if !containment::is_alive(pid) {
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

/// Kills what dead runs left ([`sweep_dead_runs`]), then removes every listed worktree nothing
/// holds any more; keeps the rest listed.
pub fn sweep(home: &Path) -> Result<SweepReport, SweepError> {
    let runs = sweep_dead_runs(home)?;
    with_lock(home, |list| {
        let mut report = SweepReport {
            runs,
            ..SweepReport::default()
        };
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::containment::Marker;

    #[test]
    fn a_held_sweep_lock_is_a_bounded_wait_and_an_error_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let lock_path = dir.path().join(SWEEP_LOCK);
        let held = match flock::try_exclusive(flock::open(&lock_path).unwrap()).unwrap() {
            flock::TryLock::Locked(lock) => lock,
            flock::TryLock::Held(_) => panic!("a fresh lock file is free"),
        };
        let timeout = Duration::from_millis(40);
        let err = with_lock_within(dir.path(), timeout, |_| Ok(())).unwrap_err();
        let SweepError::LockTimeout {
            path,
            waited_millis,
        } = &err
        else {
            panic!("expected a lock timeout, got {err}");
        };
        assert_eq!(path, &lock_path);
        assert!(*waited_millis >= 40, "{waited_millis}");
        assert!(err.to_string().contains("sweep.lock"), "{err}");
        assert!(!dir.path().join(SWEEP_FILE).exists(), "nothing was changed");
        drop(held);
        assert!(with_lock_within(dir.path(), timeout, |_| Ok(())).is_ok());
    }

    #[test]
    fn a_version_1_list_loads_with_no_runs_and_a_version_2_list_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(SWEEP_FILE);
        let v1 = r#"{"version":1,"entries":[{"path":"/h/worktrees/r/0-a","kind":"copy",
            "pack_dir":"/h/worktrees/r/0-a","run_id":"r","run_pid":7,"item":"a",
            "listed_at_millis":5}]}"#;
        fs::write(&path, v1).unwrap();
        let list = load(&path).unwrap();
        assert_eq!(list.entries.len(), 1);
        assert!(list.runs.is_empty());

        let record = RunRecord {
            run_id: "r2".into(),
            run: ProcessIdentity {
                pid: 9,
                start_time_micros: 3,
            },
            unit: UnitIdentity {
                cgroup: None,
                pgid: None,
                marker: Marker::prefix("TOLLGATE_ITEM", "r2/"),
                leader: None,
            },
            worktree_root: "/h/worktrees/r2".into(),
            grace_millis: 100,
            started_at_millis: 1,
        };
        record_run(dir.path(), record.clone()).unwrap();
        let list = load(&path).unwrap();
        assert_eq!(list.version, SWEEP_FORMAT_VERSION);
        assert_eq!(list.entries.len(), 1, "the old entry is kept");
        assert_eq!(list.runs, vec![record]);
        // What a version-1 reader sees: `version` and `entries`, the rest ignored.
        #[derive(Deserialize)]
        struct V1 {
            entries: Vec<serde_json::Value>,
        }
        let old: V1 = serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
        assert_eq!(old.entries.len(), 1);
        forget_run(dir.path(), "r2").unwrap();
        assert!(load(&path).unwrap().runs.is_empty());
    }

    #[test]
    fn a_dead_runs_git_worktree_is_recognised_and_removed_through_git() {
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path().join("repo");
        fs::create_dir(&repo).unwrap();
        let git = |args: &[&str]| {
            let out = std::process::Command::new("git")
                .arg("-C")
                .arg(&repo)
                .args(["-c", "user.name=t", "-c", "user.email=t@t"])
                .args(args)
                .output()
                .unwrap();
            assert!(out.status.success(), "git {args:?}: {out:?}");
            String::from_utf8(out.stdout).unwrap()
        };
        git(&["init", "-q"]);
        git(&["commit", "-q", "--allow-empty", "-m", "x"]);
        let wt = dir.path().join("worktrees").join("run").join("0-a");
        fs::create_dir_all(wt.parent().unwrap()).unwrap();
        git(&[
            "worktree",
            "add",
            "-q",
            "--detach",
            wt.to_str().unwrap(),
            "HEAD",
        ]);
        let copy = dir.path().join("worktrees").join("run").join("1-b");
        fs::create_dir(&copy).unwrap();

        let found = worktree_at(&wt);
        let repo = fs::canonicalize(&repo).unwrap();
        assert_eq!(found.kind, WorktreeKind::Git { repo: repo.clone() });
        assert_eq!(worktree_at(&copy).kind, WorktreeKind::Copy);
        worktree::remove(&found).unwrap();
        assert!(!wt.exists());
        assert_eq!(
            git(&["worktree", "list", "--porcelain"])
                .matches("worktree ")
                .count(),
            1
        );
    }

    #[test]
    fn a_live_run_is_never_swept() {
        let dir = tempfile::tempdir().unwrap();
        let me = crate::process::self_identity().unwrap();
        // A live process that is not us: our parent (the test harness).
        let parent = crate::process::identity_of(nix::unistd::getppid().as_raw() as u32).unwrap();
        for run in [me, parent] {
            let record = RunRecord {
                run_id: format!("live-{}", run.pid),
                run,
                unit: UnitIdentity {
                    cgroup: None,
                    pgid: None,
                    marker: Marker::prefix("TOLLGATE_ITEM", format!("live-{}/", run.pid)),
                    leader: None,
                },
                worktree_root: dir.path().join("worktrees"),
                grace_millis: 0,
                started_at_millis: 0,
            };
            record_run(dir.path(), record).unwrap();
        }
        assert!(sweep_dead_runs(dir.path()).unwrap().is_empty());
        assert_eq!(load(&dir.path().join(SWEEP_FILE)).unwrap().runs.len(), 2);
    }
}
