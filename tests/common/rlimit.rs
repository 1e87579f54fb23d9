//! Resource limits of a process a test starts, set between fork and exec: `RLIMIT_NOFILE` (a
//! serve short of descriptors) and `RLIMIT_FSIZE` (a disk that is full past a given offset of
//! every file the process writes).

use nix::sys::resource::{setrlimit, Resource};
use std::os::unix::process::CommandExt;
use std::process::Command;

/// `resource` limited to `limit` (soft and hard) in the process `command` starts.
pub fn limit(command: &mut Command, resource: Resource, limit: u64) {
    // SAFETY: setrlimit(2) only, between fork and exec: async-signal-safe, no allocation.
    unsafe {
        command.pre_exec(move || setrlimit(resource, limit, limit).map_err(std::io::Error::from));
    }
}

/// No file the process writes grows past `bytes`: a write there fails (short, or `EFBIG`) as on a
/// full disk. `SIGXFSZ` is ignored, so the write fails instead of the signal killing the process.
pub fn file_size(command: &mut Command, bytes: u64) {
    // SAFETY: signal(2) setting one disposition to SIG_IGN between fork and exec (async-signal-
    // safe; an ignored signal stays ignored across exec).
    unsafe {
        command.pre_exec(|| {
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            Ok(())
        });
    }
    limit(command, Resource::RLIMIT_FSIZE, bytes);
}
