//! Process identity `{pid, start_time_micros}` from `/proc/<pid>/stat`.
//!
//! The start time (field 22, clock ticks since boot) is what makes an identity survive pid reuse:
//! a recycled pid has a later start time, so the old identity observes as gone.

use crate::protocol::slots::{Liveness, Observation, ProcessIdentity, WorkRecord};
use std::io;
use std::sync::OnceLock;

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

/// What `/proc/<pid>/stat` says: the process state letter and its start time in ticks.
pub(crate) struct Stat {
    pub(crate) state: char,
    start_ticks: u64,
}

fn parse_stat(text: &str) -> Option<Stat> {
    // comm (field 2) may hold spaces and parentheses: fields resume after the last ')'.
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_ascii_whitespace();
    let state = fields.next()?.chars().next()?;
    // After the state (field 3), start time is field 22: 19 more fields on.
    let start_ticks = fields.nth(18)?.parse().ok()?;
    Some(Stat { state, start_ticks })
}

pub(crate) enum Read {
    Missing,
    Unreadable,
    Found(Stat),
}

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

fn micros(ticks: u64) -> u64 {
    ticks.saturating_mul(1_000_000) / clock_ticks_per_second()
}

/// The identity of a running process, or `None` if it is gone (or already a zombie).
pub fn identity_of(pid: u32) -> Option<ProcessIdentity> {
    match read_stat(pid) {
        Read::Found(stat) if !matches!(stat.state, 'Z' | 'X') => Some(ProcessIdentity {
            pid,
            start_time_micros: micros(stat.start_ticks),
        }),
        _ => None,
    }
}

/// The identity of a process we just spawned, even if it already ran and is now a zombie (we are its
/// parent and have not reaped it, so its stat is still there).
pub(crate) fn identity_including_zombie(pid: u32) -> Option<ProcessIdentity> {
    match read_stat(pid) {
        Read::Found(stat) => Some(ProcessIdentity {
            pid,
            start_time_micros: micros(stat.start_ticks),
        }),
        _ => None,
    }
}

/// The identity of the calling process.
pub fn self_identity() -> io::Result<ProcessIdentity> {
    identity_of(std::process::id()).ok_or_else(|| {
        io::Error::other("cannot read this process's own start time from /proc/self/stat")
    })
}

/// Liveness from `/proc`. A zombie has stopped running anything, so it observes as gone; a process
/// whose stat cannot be read or parsed observes as ambiguous (counted as live).
#[derive(Clone, Copy, Debug, Default)]
pub struct ProcLiveness;

impl Liveness for ProcLiveness {
    fn observe(&self, identity: &ProcessIdentity) -> Observation {
        match read_stat(identity.pid) {
            Read::Missing => Observation::Gone,
            Read::Unreadable => Observation::Ambiguous,
            Read::Found(stat) if matches!(stat.state, 'Z' | 'X') => Observation::Gone,
            Read::Found(stat) if micros(stat.start_ticks) == identity.start_time_micros => {
                Observation::Matching
            }
            Read::Found(_) => Observation::Gone,
        }
    }

    /// Scans `/proc` for the work's marker and its process group (see [`super::work`]).
    fn observe_work(&self, work: &WorkRecord) -> Observation {
        super::work::observe_work(work.id, work.leader)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_comm_with_spaces_and_parentheses() {
        let line = "4242 (we (ird) name) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10";
        let stat = parse_stat(line).expect("parses");
        assert_eq!(stat.state, 'S');
        assert_eq!(stat.start_ticks, 987654);
    }

    #[test]
    fn own_identity_is_matching_and_a_changed_start_time_is_gone() {
        let me = self_identity().expect("own identity");
        assert_eq!(ProcLiveness.observe(&me), Observation::Matching);
        let reused = ProcessIdentity {
            start_time_micros: me.start_time_micros + 1,
            ..me
        };
        assert_eq!(ProcLiveness.observe(&reused), Observation::Gone);
    }
}
