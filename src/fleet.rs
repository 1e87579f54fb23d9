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

use crate::config::Config;
use crate::protocol::fleet::{FleetError, HostId, LeaseTable, LeaseTiming};
use crate::protocol::section::SectionLiveness;
use crate::protocol::slots::{Liveness, ProcessIdentity};
use std::path::{Path, PathBuf};

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

/// Shortens the lease numbers (tests, demos): `TOLLGATE_LEASE_MILLIS=<lease duration in ms>`
/// scales the defaults of [`LeaseTiming::DEFAULT`] (30 s lease, 5 s renewals, 2 s margin, 3 s
/// kill budget) to that duration, keeping ρ; the result must pass [`LeaseTiming::validate`].
pub const LEASE_MILLIS_ENV: &str = "TOLLGATE_LEASE_MILLIS";

/// The machine's id (systemd's, also written by dbus on other systems).
pub const MACHINE_ID_PATH: &str = "/etc/machine-id";
/// This boot's id, new at every boot.
pub const BOOT_ID_PATH: &str = "/proc/sys/kernel/random/boot_id";

/// Why this host's default name could not be derived.
#[derive(Debug, thiserror::Error)]
pub enum HostNameError {
    #[error("cannot read {}: {source} (set `host` explicitly)", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: {source} (set `host` explicitly)", path.display())]
    Invalid {
        path: PathBuf,
        #[source]
        source: FleetError,
    },
}

/// The default `host`: derived from this machine's id and this boot's id
/// ([`HostId::derived`]).
pub fn default_host() -> Result<HostId, HostNameError> {
    host_from_files(Path::new(MACHINE_ID_PATH), Path::new(BOOT_ID_PATH))
}

/// [`default_host`] from the given files: an error names the file at fault.
pub fn host_from_files(machine_id: &Path, boot_id: &Path) -> Result<HostId, HostNameError> {
    let read = |path: &Path| {
        std::fs::read_to_string(path).map_err(|source| HostNameError::Read {
            path: path.to_path_buf(),
            source,
        })
    };
    let machine = read(machine_id)?;
    let boot = read(boot_id)?;
    // Validate each file on its own, so the error names the one at fault.
    let valid_boot = "00000000-0000-0000-0000-000000000000";
    HostId::derived(&machine, valid_boot).map_err(|source| HostNameError::Invalid {
        path: machine_id.to_path_buf(),
        source,
    })?;
    HostId::derived(&machine, &boot).map_err(|source| HostNameError::Invalid {
        path: boot_id.to_path_buf(),
        source,
    })
}

/// Overrides the `host` setting for one command (and the runners it starts, which inherit it):
/// several "hosts" on one machine sharing one home, as the fleet tests run them.
pub const HOST_ENV: &str = "TOLLGATE_HOST";

/// This home's host: [`HOST_ENV`], else its `host` setting, else [`default_host`].
pub fn host_for(config: &Config) -> Result<HostId, HostNameError> {
    if let Some(name) = std::env::var(HOST_ENV).ok().filter(|v| !v.is_empty()) {
        return HostId::new(name).map_err(|source| HostNameError::Invalid {
            path: PathBuf::from(HOST_ENV),
            source,
        });
    }
    match &config.host {
        // Validated when the config was loaded; validated again for configs built in code.
        Some(name) => HostId::new(name.as_str()).map_err(|source| HostNameError::Invalid {
            path: PathBuf::from("tollgate.toml key `host`"),
            source,
        }),
        None => default_host(),
    }
}

/// A PostgreSQL home's fleet context: its host ([`host_for`]) and the lease numbers
/// ([`lease_timing`]); the error names what is at fault.
pub fn context_for(config: &Config) -> Result<crate::queue::FleetContext, String> {
    let host = host_for(config).map_err(|e| e.to_string())?;
    let timing = lease_timing().map_err(|e| e.to_string())?;
    Ok(crate::queue::FleetContext { host, timing })
}

/// The lease numbers: [`LeaseTiming::DEFAULT`], or scaled by [`LEASE_MILLIS_ENV`].
pub fn lease_timing() -> Result<LeaseTiming, FleetError> {
    lease_timing_from(std::env::var(LEASE_MILLIS_ENV).ok().as_deref())
}

/// [`lease_timing`] from the variable's value (`None`: unset).
pub fn lease_timing_from(value: Option<&str>) -> Result<LeaseTiming, FleetError> {
    match value {
        None => Ok(LeaseTiming::DEFAULT),
        Some(text) => {
            let bad = |reason: String| FleetError::InvalidTiming {
                reason: format!("{LEASE_MILLIS_ENV}={text:?}: {reason}"),
            };
            let lease: u64 = text
                .trim()
                .parse()
                .map_err(|e| bad(format!("not a number of milliseconds ({e})")))?;
            let d = LeaseTiming::DEFAULT;
            let scale = |part: u64| {
                (u128::from(part) * u128::from(lease) / u128::from(d.lease_duration_millis)) as u64
            };
            let timing = LeaseTiming {
                lease_duration_millis: lease,
                renew_interval_millis: scale(d.renew_interval_millis).max(1),
                margin_millis: scale(d.margin_millis),
                kill_budget_millis: scale(d.kill_budget_millis),
                drift_ppm: d.drift_ppm,
            };
            timing
                .validate()
                .map_err(|e| bad(format!("the scaled numbers are refused: {e}")))?;
            Ok(timing)
        }
    }
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
    fn this_machine_has_a_default_host_name_and_bad_files_are_named() {
        let host = default_host().expect("this machine has a machine id and a boot id");
        assert_eq!(host.as_str().len(), 21, "{host}");
        let dir = tempfile::tempdir().unwrap();
        let machine = dir.path().join("machine-id");
        let boot = dir.path().join("boot_id");
        std::fs::write(&machine, "not hex at all\n").unwrap();
        std::fs::write(&boot, "51165a30-1234-4abc-8def-001122334455\n").unwrap();
        let err = host_from_files(&machine, &boot).unwrap_err().to_string();
        assert!(err.contains("machine-id"), "{err}");
        std::fs::write(&machine, "3d1219c7a0b14c2e9f00112233445566\n").unwrap();
        assert_eq!(
            host_from_files(&machine, &boot).unwrap().as_str(),
            "3d1219c7a0b1-51165a30"
        );
        let missing = dir.path().join("nope");
        let err = host_from_files(&machine, &missing).unwrap_err().to_string();
        assert!(err.contains("nope"), "{err}");
    }

    #[test]
    fn the_host_setting_is_used_and_a_bad_one_is_refused_naming_the_key() {
        let mut config = Config::default();
        assert_eq!(host_for(&config).unwrap(), default_host().unwrap());
        config.host = Some("ci-box-1".to_string());
        assert_eq!(host_for(&config).unwrap().as_str(), "ci-box-1");
        let path = Path::new("/h/tollgate.toml");
        let err = Config::parse(path, b"host = \"a b\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("tollgate.toml") && err.contains("`host`"),
            "{err}"
        );
        let ok = Config::parse(path, b"host = \"box-2\"\n").unwrap();
        assert_eq!(ok.host.as_deref(), Some("box-2"));
    }

    #[test]
    fn test_lease_numbers_scale_the_defaults_and_bad_ones_name_the_variable() {
        assert_eq!(lease_timing_from(None).unwrap(), LeaseTiming::DEFAULT);
        let short = lease_timing_from(Some("3000")).unwrap();
        assert_eq!(
            (
                short.lease_duration_millis,
                short.renew_interval_millis,
                short.margin_millis,
                short.kill_budget_millis
            ),
            (3_000, 500, 200, 300)
        );
        assert_eq!(short.kill_at_local_millis(0), 2_470);
        for bad in ["soon", "0", "-5"] {
            let err = lease_timing_from(Some(bad)).unwrap_err().to_string();
            assert!(err.contains(LEASE_MILLIS_ENV), "{err}");
        }
    }

    #[test]
    fn the_boot_clock_does_not_go_back() {
        let a = boottime_millis();
        let b = boottime_millis();
        assert!(a > 0 && b >= a);
    }
}
