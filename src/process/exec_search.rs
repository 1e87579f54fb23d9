//! Where `execvp` looks for a program: a name with a `/` is used as it is (relative to the
//! working directory), a bare name is tried in each directory of a search path in order, an
//! empty entry meaning the working directory. The PID-namespace init execs the candidates
//! itself, and `submit` checks that one of them exists before it queues a turn.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

/// The paths `execvp` would try for `program` with the search path `path`, in order.
pub fn candidates(program: &OsStr, path: &OsStr) -> Vec<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    if program.as_bytes().contains(&b'/') {
        return vec![PathBuf::from(program)];
    }
    std::env::split_paths(path)
        .map(|dir| {
            let dir = if dir.as_os_str().is_empty() {
                Path::new(".").to_path_buf()
            } else {
                dir
            };
            dir.join(program)
        })
        .collect()
}
