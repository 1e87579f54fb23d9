//! The detached runner's own output: the turn's `runner.log`.
//!
//! The spawner starts the runner (`worker runner … --log-to-turn-folder`) with stdout and stderr
//! on `/dev/null`; the runner's first act is to make the turn's folder and point both at
//! `runner.log` there (appended, `0600`, never through a symlink). A `worker runner` started by
//! hand without the flag keeps its output and makes nothing before its token is checked.
//!
//! The folder used to be made by the spawner, on the path of the `submit` that starts the turn:
//! three directory creations and an open before it could answer (docs/PERFORMANCE.md, "Compiling
//! the look, and the turn folder made by the runner"). The runner makes it off that path, beside
//! the work of other turns, and a runner started for a turn submitted from another home of a
//! fleet makes it in its own home.
//!
//! Best effort: a folder that cannot be made (a full disk, a home removed meanwhile) leaves the
//! output on `/dev/null` and the turn runs; its own logs then fail to open and the turn's record
//! says so, as before.

use crate::fsutil::create_private_dir_under;
use crate::home::Home;
use crate::protocol::slots::TurnKey;
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;

/// Makes `key`'s folder in `home` and appends this process's stdout and stderr to its
/// `runner.log`. Returns whether they point there now.
pub fn to_turn_folder(home: &Home, key: &TurnKey) -> bool {
    let Some(log) = open_turn_log(home, key) else {
        return false;
    };
    // Nothing was written to either stream before this: std's stdout buffer is empty.
    [libc::STDOUT_FILENO, libc::STDERR_FILENO]
        .into_iter()
        .all(|target| nix::unistd::dup2(log.as_raw_fd(), target).is_ok())
}

/// `key`'s `runner.log` in `home`, opened to append (made `0600` if missing), its folder and the
/// missing folders above it made `0700`; `None` where that cannot be done: a home that is gone
/// (never made again), a symlink planted at the log's place, a file where a folder should be.
pub fn open_turn_log(home: &Home, key: &TurnKey) -> Option<File> {
    let path = home.runner_log(key);
    create_private_dir_under(home.root(), path.parent()?).ok()?;
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&path)
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn the_log_is_made_in_a_private_folder_and_appended_to() {
        let tmp = tempfile::tempdir().expect("a temp dir");
        let home = Home::at(tmp.path());
        let key = TurnKey::new("t", 3);
        let mut log = open_turn_log(&home, &key).expect("the log");
        log.write_all(b"one\n").expect("a line");
        let mut again = open_turn_log(&home, &key).expect("the log again");
        again.write_all(b"two\n").expect("a line");
        let path = home.runner_log(&key);
        assert_eq!(std::fs::read_to_string(&path).expect("read"), "one\ntwo\n");
        let mode = |p: &std::path::Path| {
            std::fs::metadata(p).expect("metadata").permissions().mode() & 0o777
        };
        assert_eq!(mode(&path), 0o600);
        let turn_dir = path.parent().expect("a folder");
        assert_eq!(mode(turn_dir), 0o700);
        assert_eq!(mode(turn_dir.parent().expect("turns")), 0o700);
    }

    #[test]
    fn a_planted_symlink_and_a_removed_home_are_refused() {
        let tmp = tempfile::tempdir().expect("a temp dir");
        let root = tmp.path().join("home");
        std::fs::create_dir(&root).expect("home");
        let home = Home::at(&root);
        let key = TurnKey::new("t", 1);
        let path = home.runner_log(&key);
        std::fs::create_dir_all(path.parent().expect("a folder")).expect("the folder");
        let target = tmp.path().join("elsewhere");
        std::fs::write(&target, b"kept").expect("target");
        std::os::unix::fs::symlink(&target, &path).expect("symlink");
        assert!(
            open_turn_log(&home, &key).is_none(),
            "a symlink was followed"
        );
        assert_eq!(std::fs::read(&target).expect("target"), b"kept");
        std::fs::remove_dir_all(&root).expect("remove the home");
        assert!(open_turn_log(&home, &TurnKey::new("u", 1)).is_none());
        assert!(!root.exists(), "a removed home was made again");
    }
}
