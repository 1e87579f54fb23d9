//! Reading `/proc`: the one parser of `/proc/<pid>/stat` (state, parent, process group, start
//! time) and of environment markers in `/proc/<pid>/environ`, and the walk over every pid.
//!
//! [`super::identity`] turns a stat into an identity and a liveness answer. The containment walk
//! (`super::containment`, which [`super::work`] uses) still has its own reader of the same files;
//! folding it in here is the next step. Nothing here decides
//! anything: a read either finds the process, finds it gone, or cannot tell.

use std::io;
use std::sync::OnceLock;

/// What `/proc/<pid>/stat` says about a process.
pub(crate) struct Stat {
    /// The state letter (field 3): `R`, `S`, `D`, `Z` (zombie), `X` (dead), ….
    pub(crate) state: char,
    /// The parent's pid (field 4). Read by the tests today; the containment walk
    /// (`containment/procfs.rs`, its own parser for now) is to read it here once it moves.
    #[allow(dead_code)]
    pub(crate) ppid: u32,
    /// The process group (field 5), likewise.
    #[allow(dead_code)]
    pub(crate) pgrp: u32,
    /// The start time (field 22), in clock ticks since boot; see [`ticks_to_micros`].
    pub(crate) start_ticks: u64,
}

impl Stat {
    /// A zombie or dead process runs nothing any more: it only waits to be reaped.
    pub(crate) fn is_exited(&self) -> bool {
        matches!(self.state, 'Z' | 'X')
    }
}

/// Parses the text of `/proc/<pid>/stat`.
pub(crate) fn parse_stat(text: &str) -> Option<Stat> {
    // comm (field 2) may hold spaces and parentheses: fields resume after the last ')'.
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_ascii_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    let pgrp = fields.next()?.parse().ok()?;
    // After the process group (field 5), start time is field 22: 17 more fields on.
    let start_ticks = fields.nth(16)?.parse().ok()?;
    Some(Stat {
        state,
        ppid,
        pgrp,
        start_ticks,
    })
}

/// The answer of one read of `/proc/<pid>/stat`.
pub(crate) enum Read {
    /// No such process.
    Missing,
    /// There, but the file could not be read or parsed (counted as live by liveness).
    Unreadable,
    Found(Stat),
}

/// Reads and parses `/proc/<pid>/stat`.
pub(crate) fn read_stat(pid: u32) -> Read {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(text) => match parse_stat(&text) {
            Some(stat) => Read::Found(stat),
            None => Read::Unreadable,
        },
        Err(e) if e.kind() == io::ErrorKind::NotFound => Read::Missing,
        // ESRCH shows up when the process exits while we read.
        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => Read::Missing,
        Err(_) => Read::Unreadable,
    }
}

fn clock_ticks_per_second() -> u64 {
    static TICKS: OnceLock<u64> = OnceLock::new();
    *TICKS.get_or_init(|| {
        match nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK) {
            Ok(Some(ticks)) if ticks > 0 => ticks as u64,
            // Linux has used 100 for USER_HZ on every architecture we run on.
            _ => 100,
        }
    })
}

/// A start time in clock ticks since boot, in microseconds (what identities record).
pub(crate) fn ticks_to_micros(ticks: u64) -> u64 {
    ticks.saturating_mul(1_000_000) / clock_ticks_per_second()
}

/// Whether `/proc` is mounted and readable at all (else every answer from it is a guess).
pub(crate) fn available() -> bool {
    std::fs::metadata("/proc/self").is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_comm_with_spaces_and_parentheses() {
        let line = "4242 (we (ird) name) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10";
        let stat = parse_stat(line).expect("parses");
        assert_eq!(stat.state, 'S');
        assert_eq!(stat.ppid, 1);
        assert_eq!(stat.start_ticks, 987654);
        assert_eq!(stat.pgrp, 4242);
        assert!(!stat.is_exited());
    }
}
