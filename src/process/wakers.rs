//! The wakers of a home (`tollgate worker wake --at MILLIS`, started for a turn's not-before
//! time), found in `/proc` by their command line, and stopped once the core says nothing is left
//! for them to wake ([`crate::protocol::slots::waker_needed`], Q4): a cancelled `--at 23:30`
//! turn must not leave a process sleeping until 23:30 (or for up to a week) for nothing.
//!
//! A waker is recorded nowhere (it is one `sleep` and a reconcile), so it is known by what it
//! was started with: `--home HOME worker wake --at MILLIS`; `HOME` is compared after resolving
//! it against the waker's own working directory, as the waker resolves it.

use super::procfs;
use crate::protocol::slots::{Liveness, Observation, ProcessIdentity, QueueState};
use std::path::{Path, PathBuf};

/// A waker of some home: its identity and the time it wakes at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Waker {
    pub identity: ProcessIdentity,
    pub at_millis: u64,
}

/// The home and time of a `worker wake` command line, `None` for any other process.
fn parse(args: &[&[u8]]) -> Option<(PathBuf, u64)> {
    use std::os::unix::ffi::OsStrExt;
    let position = args
        .windows(2)
        .position(|w| w[0] == b"worker".as_slice() && w[1] == b"wake".as_slice())?;
    let home = args[..position]
        .windows(2)
        .find(|w| w[0] == b"--home".as_slice())
        .map(|w| PathBuf::from(std::ffi::OsStr::from_bytes(w[1])))?;
    let at = args[position..]
        .windows(2)
        .find(|w| w[0] == b"--at".as_slice())
        .and_then(|w| std::str::from_utf8(w[1]).ok()?.parse().ok())?;
    Some((home, at))
}

/// The live wakers of the home at `root`.
pub fn wakers_of(root: &Path) -> Vec<Waker> {
    let Ok(root) = std::fs::canonicalize(root) else {
        return Vec::new();
    };
    let me = std::process::id();
    procfs::scan()
        .into_iter()
        .filter(|p| p.is_alive() && p.pid as u32 != me)
        .filter_map(|p| {
            let cmdline = procfs::cmdline_of(p.pid)?;
            let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
            let (home, at_millis) = parse(&args)?;
            let home = match home.is_absolute() {
                true => home,
                false => std::fs::read_link(format!("/proc/{}/cwd", p.pid))
                    .ok()?
                    .join(home),
            };
            (std::fs::canonicalize(home).ok()? == root).then_some(())?;
            Some(Waker {
                identity: super::identity_of(p.pid as u32)?,
                at_millis,
            })
        })
        .collect()
}

/// Stops (SIGTERM) every waker of the home at `root` that `queue` no longer needs at
/// `now_millis`, if it is still the process found (a reused pid is not ours). Returns how many.
pub fn stop_unneeded(root: &Path, queue: &QueueState, now_millis: u64) -> usize {
    wakers_of(root)
        .into_iter()
        .filter(|w| !crate::protocol::slots::waker_needed(queue, w.at_millis, now_millis))
        .filter(|w| {
            super::ProcLiveness.observe(&w.identity) == Observation::Matching
                && nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(w.identity.pid as i32),
                    nix::sys::signal::Signal::SIGTERM,
                )
                .is_ok()
        })
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_waker_is_known_by_its_command_line() {
        let line: Vec<&[u8]> = vec![
            b"/bin/tollgate",
            b"--home",
            b"/h",
            b"worker",
            b"wake",
            b"--at",
            b"1234",
        ];
        assert_eq!(parse(&line), Some((PathBuf::from("/h"), 1234)));
        let runner: Vec<&[u8]> = vec![b"/bin/tollgate", b"--home", b"/h", b"worker", b"runner"];
        assert_eq!(parse(&runner), None);
        let bad: Vec<&[u8]> = vec![
            b"tollgate",
            b"--home",
            b"/h",
            b"worker",
            b"wake",
            b"--at",
            b"x",
        ];
        assert_eq!(parse(&bad), None);
    }
}
