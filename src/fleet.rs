//! The shell's side of the fleet (spec/fleet.md): what this host is called, and the lease table a
//! reader outside any section sees. The lease steps themselves are pure (`tollgate_core::fleet`).
//!
//! **A section's view.** On a PostgreSQL home every queue section also takes the fleet's lease
//! lock and reads the lease table and the database clock inside its transaction
//! (`src/queue/postgres/lease.rs`), and hands them to the section's step as its view's
//! [`FleetView`] (`Store::transact_section`); the step observes processes through it
//! (`SectionLiveness`: another host's executor is live while its lease is unexpired on the
//! database clock, this host's through `/proc`) and returns the leases it changed, which the store
//! writes back in the same transaction. A reader outside a section ([`observing`]) gets the same
//! liveness over a snapshot of the lease table. On SQLite homes there is no view.

use crate::protocol::fleet::LeaseTable;
use crate::protocol::section::SectionLiveness;
use crate::protocol::slots::{Liveness, ProcessIdentity};

pub use crate::config::fleet::{
    default_host, host_for, host_from_files, lease_timing, lease_timing_from, HostNameError,
    BOOT_ID_PATH, HOST_ENV, LEASE_MILLIS_ENV, MACHINE_ID_PATH,
};
pub use crate::protocol::fleet::FleetView;

/// Runs `f` as a reader outside any section (`status`, `wait`, `logs`) sees processes: on a
/// fleet with the lease table and the database clock read once beforehand, so that another host's
/// runner is judged by its lease as the slot steps judge it, not by this host's `/proc` (where it
/// never appears, and would look orphaned); elsewhere with `local` alone.
pub fn observing<S: crate::queue::Store, L: Liveness, R>(
    store: &S,
    local: &L,
    f: impl FnOnce(&SectionLiveness<'_, L>) -> R,
) -> Result<R, crate::queue::StoreError> {
    let view = reader_view(store)?;
    Ok(f(&SectionLiveness::new(local, view.as_ref())))
}

/// The fleet's view for a reader outside any section: the lease table and the database clock
/// read now (`None` on one host).
pub fn reader_view<S: crate::queue::Store>(
    store: &S,
) -> Result<Option<FleetView>, crate::queue::StoreError> {
    let Some(fleet_store) = store.lease_renewer() else {
        return Ok(None);
    };
    let Some(fleet) = fleet_store.fleet().cloned() else {
        return Ok(None);
    };
    let snapshot = fleet_store.leases()?;
    Ok(Some(FleetView {
        host: fleet.host,
        timing: fleet.timing,
        leases: snapshot.table,
        now_db_millis: snapshot.now_db_millis,
        may_start: true,
    }))
}

/// The lease table now, for a report (`status`): its own read, not the queue snapshot's (no step
/// decides on it). `None` on one host, or when the leases cannot be read (logged: the report
/// then shows no hosts).
pub fn leases_for_report<S: crate::queue::Store>(store: &S) -> Option<LeaseTable> {
    let fleet = store.lease_renewer()?;
    match fleet.leases() {
        Ok(snapshot) => Some(snapshot.table),
        Err(e) => {
            tracing::warn!("cannot read the fleet's leases: {e}");
            None
        }
    }
}

/// The host of the lease naming `identity`, if one does (several hosts' processes with one pid
/// and start time: their names, comma-separated).
pub fn host_of(leases: Option<&LeaseTable>, identity: &ProcessIdentity) -> Option<String> {
    let hosts: Vec<&str> = leases?
        .leases
        .iter()
        .filter(|l| &l.holder.process == identity)
        .map(|l| l.holder.host.as_str())
        .collect();
    (!hosts.is_empty()).then(|| hosts.join(","))
}

/// Milliseconds of `CLOCK_BOOTTIME`: the runner's fence clock. Monotonic, and unlike
/// `CLOCK_MONOTONIC` it keeps counting while the machine is suspended, so a suspended runner
/// wakes up past its fence deadline rather than believing its lease still runs (spec/fleet.md).
pub fn boottime_millis() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_BOOTTIME exists on every Linux since
    // 2.6.39, and clock_gettime writes only `ts`.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    // The only documented failures are a bad clock id or pointer, neither possible here.
    assert_eq!(rc, 0, "clock_gettime(CLOCK_BOOTTIME) failed");
    (ts.tv_sec as u64) * 1_000 + (ts.tv_nsec as u64) / 1_000_000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_boot_clock_does_not_go_back() {
        let a = boottime_millis();
        let b = boottime_millis();
        assert!(a > 0 && b >= a);
    }
}
