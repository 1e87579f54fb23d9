//! Process identity `{pid, start_time_micros}` from `/proc/<pid>/stat` (read by [`super::procfs`]).
//!
//! The start time (field 22, clock ticks since boot) is what makes an identity survive pid reuse:
//! a recycled pid has a later start time, so the old identity observes as gone.

use super::procfs::{read as read_stat, ticks_to_micros as micros, Read};
use crate::protocol::slots::{Liveness, Observation, ProcessIdentity, WorkRecord};
use std::io;

/// The identity of a running process, or `None` if it is gone (or already a zombie).
pub fn identity_of(pid: u32) -> Option<ProcessIdentity> {
    match read_stat(pid) {
        Read::Found(stat) if stat.is_alive() => Some(ProcessIdentity {
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

/// This host's processes only: on a fleet, a section's step observes another host's processes
/// through their leases (`SectionLiveness` over the section's view), around this observer.
impl Liveness for ProcLiveness {
    fn observe(&self, identity: &ProcessIdentity) -> Observation {
        observe_here(identity)
    }

    /// Scans `/proc` for the work's marker and its process group (see [`super::work`]).
    fn observe_work(&self, work: &WorkRecord) -> Observation {
        super::work::observe_work(work)
    }
}

fn observe_here(identity: &ProcessIdentity) -> Observation {
    match read_stat(identity.pid) {
        Read::Missing => Observation::Gone,
        Read::Unreadable => Observation::Ambiguous,
        Read::Found(stat) if !stat.is_alive() => Observation::Gone,
        Read::Found(stat) if micros(stat.start_ticks) == identity.start_time_micros => {
            Observation::Matching
        }
        Read::Found(_) => Observation::Gone,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
