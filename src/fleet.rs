//! The shell's side of the fleet (spec/fleet.md): what this host is called, and the lease table a
//! queue section of a PostgreSQL home sees. The lease steps themselves are pure
//! (`tollgate_core::fleet`).
//!
//! **The section's view.** On a PostgreSQL home every queue section also takes the fleet's lease
//! lock and reads the lease table and the database clock inside its transaction
//! (`src/queue/postgres/lease.rs`); for the length of the section's closure that view is this
//! thread's [`FleetView`]. Through it, and only inside a section:
//! - [`crate::process::ProcLiveness`] answers as [`LeaseLiveness`] (another host's executor is
//!   live while its lease is unexpired on the database clock; this host's through `/proc`), so
//!   every slot step of the shell runs with the fleet's liveness without a new type through every
//!   caller;
//! - the handoff's first publish takes the child's lease ([`publish_first`], `F4`), the runner's
//!   take-over renews its own first ([`renew_own`]) and its finish releases it
//!   ([`release_own`]); the store writes the changed leases back in the same transaction.
//!
//! Outside a section, and on SQLite homes, there is no view and everything is as on one host.

use crate::config::Config;
use crate::protocol::fleet::{
    self, FleetError, FleetIdentity, HostId, LeaseLiveness, LeaseTable, LeaseTiming, RenewOutcome,
};
use crate::protocol::slots::steps::{self, BoundHandoff, Fenced, Handoff};
use crate::protocol::slots::{Liveness, Observation, ProcessIdentity, QueueState, WorkRecord};
use std::cell::RefCell;
use std::path::{Path, PathBuf};

pub use crate::protocol::fleet::FleetView;

thread_local! {
    /// The view of the section running on this thread, if any (see the module docs).
    static SECTION: RefCell<Option<FleetView>> = const { RefCell::new(None) };
}

/// Runs `section` with `view` as this thread's fleet view and returns the view as the section
/// left it (its lease changes, for the store to write back). `None`: a section without leases.
/// The previous view is restored even if `section` panics.
pub fn in_section<R>(
    view: Option<FleetView>,
    section: impl FnOnce() -> R,
) -> (R, Option<FleetView>) {
    struct Restore(Option<FleetView>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let previous = self.0.take();
            SECTION.with(|s| *s.borrow_mut() = previous);
        }
    }
    let restore = Restore(SECTION.with(|s| s.replace(view)));
    let result = section();
    let view = SECTION.with(|s| s.borrow_mut().take());
    drop(restore);
    (result, view)
}

/// Runs `f` as a reader outside any section (`status`, `wait`, `logs`) sees processes: on a
/// fleet with the lease table and the database clock read once beforehand as this thread's view,
/// so that another host's runner is judged by its lease as the slot steps judge it, not by this
/// host's `/proc` (where it never appears, and would look orphaned); elsewhere `f` alone. The
/// view only observes: `f` must not run a section (it would nest one).
pub fn observing<S: crate::queue::Store, R>(
    store: &S,
    f: impl FnOnce() -> R,
) -> Result<R, crate::queue::StoreError> {
    let Some(fleet_store) = store.lease_renewer() else {
        return Ok(f());
    };
    let Some(fleet) = fleet_store.fleet().cloned() else {
        return Ok(f());
    };
    let snapshot = fleet_store.leases()?;
    let view = FleetView {
        host: fleet.host,
        timing: fleet.timing,
        leases: snapshot.table,
        now_db_millis: snapshot.now_db_millis,
        may_start: true,
    };
    Ok(in_section(Some(view), f).0)
}

/// The fleet view of the section running on this thread, for the section runner to hand its step
/// ([`crate::section`]); `None` outside a fleet section.
pub fn current_view() -> Option<FleetView> {
    SECTION.with(|s| s.borrow().clone())
}

/// Makes `leases` the lease table of the section running on this thread (what its step wrote),
/// for the store to write back in the same transaction.
pub fn write_back_leases(leases: LeaseTable) {
    let _ = with_view(|view| view.leases = leases);
}

fn with_view<R>(f: impl FnOnce(&mut FleetView) -> R) -> Option<R> {
    SECTION.with(|s| s.borrow_mut().as_mut().map(f))
}

/// This host's own observers, as [`LeaseLiveness`] takes them.
struct Here {
    observe: fn(&ProcessIdentity) -> Observation,
    observe_work: fn(&WorkRecord) -> Observation,
}

impl Liveness for Here {
    fn observe(&self, identity: &ProcessIdentity) -> Observation {
        (self.observe)(identity)
    }
    fn observe_work(&self, work: &WorkRecord) -> Observation {
        (self.observe_work)(work)
    }
}

/// This host's observers as a [`LeaseLiveness`] over `view`'s leases with no local process at
/// all: `Matching` exactly when the remote lease speaks for the process. The local observers run
/// outside the view's borrow (they observe processes themselves, through [`observe`]).
fn remote_only(view: &FleetView) -> LeaseLiveness<'_, Here> {
    const NOBODY: Here = Here {
        observe: |_| Observation::Gone,
        observe_work: |_| Observation::Gone,
    };
    LeaseLiveness {
        host: &view.host,
        leases: &view.leases,
        now_db_millis: view.now_db_millis,
        local: &NOBODY,
    }
}

fn remote_says_live(ask: impl FnOnce(&LeaseLiveness<'_, Here>) -> Observation) -> bool {
    SECTION.with(|s| {
        s.borrow()
            .as_ref()
            .is_some_and(|view| ask(&remote_only(view)) == Observation::Matching)
    })
}

/// Liveness of `identity`: inside a fleet section [`LeaseLiveness`] over the section's leases
/// (another host's process is live while its lease is unexpired), with this host's observer
/// `local` for the rest; elsewhere `local` alone.
pub fn observe(
    identity: &ProcessIdentity,
    local: fn(&ProcessIdentity) -> Observation,
) -> Observation {
    if remote_says_live(|fleet| fleet.observe(identity)) {
        return Observation::Matching;
    }
    local(identity)
}

/// [`observe`] for a work: its runner's unexpired lease on another host stands for it.
pub fn observe_work(work: &WorkRecord, local: fn(&WorkRecord) -> Observation) -> Observation {
    if remote_says_live(|fleet| fleet.observe_work(work)) {
        return Observation::Matching;
    }
    local(work)
}

/// The handoff's first publish: in a fleet section [`fleet::handoff_publish_first_leased`] (the
/// child's lease in the same transaction, `F4`), else [`steps::handoff_publish_first`]. `Err`:
/// the lease was refused and the section must be rolled back.
pub fn publish_first(
    state: &mut QueueState,
    handoff: Handoff,
    child: ProcessIdentity,
) -> Result<Result<BoundHandoff, Fenced>, FleetError> {
    let mut handoff = Some(handoff);
    let leased = with_view(|view| {
        let Some(handoff) = handoff.take() else {
            unreachable!("taken once");
        };
        let child = FleetIdentity {
            host: view.host.clone(),
            process: child,
        };
        fleet::handoff_publish_first_leased(
            state,
            &mut view.leases,
            handoff,
            &child,
            view.now_db_millis,
            &view.timing,
        )
    });
    match (leased, handoff) {
        (Some(result), _) => result,
        (None, Some(handoff)) => Ok(steps::handoff_publish_first(state, handoff, child)),
        (None, None) => unreachable!("the handoff is used once"),
    }
}

/// In a fleet section, renews `me`'s own lease ([`fleet::renew`]); `None` outside one (no lease
/// to keep). The runner's take-over starts with it: `Lost` means it must not take over.
pub fn renew_own(me: ProcessIdentity) -> Option<RenewOutcome> {
    with_view(|view| {
        let me = FleetIdentity {
            host: view.host.clone(),
            process: me,
        };
        fleet::renew(&mut view.leases, &me, &me, view.now_db_millis, &view.timing)
    })
}

/// In a fleet section, `me`'s lease ([`fleet::acquire`]); `None` outside one.
pub fn acquire_own(me: ProcessIdentity) -> Option<Result<(), FleetError>> {
    with_view(|view| {
        let me = FleetIdentity {
            host: view.host.clone(),
            process: me,
        };
        fleet::acquire(&mut view.leases, &me, view.now_db_millis, &view.timing).map(drop)
    })
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

/// Whether this host may start a turn now: in a fleet section, false while the host is drained
/// (spec/fleet.md, "Draining a host"); outside one (one host, no fleet), always true.
pub fn section_may_start() -> bool {
    with_view(|view| view.may_start).unwrap_or(true)
}

/// The host of the fleet section running on this thread, if any.
pub fn section_host() -> Option<HostId> {
    with_view(|view| view.host.clone())
}

/// In a fleet section, releases `me`'s lease ([`fleet::release`]): its finishing section, or a
/// take-over that was refused. Whether there was one.
pub fn release_own(me: ProcessIdentity) -> bool {
    with_view(|view| {
        let me = FleetIdentity {
            host: view.host.clone(),
            process: me,
        };
        fleet::release(&mut view.leases, &me)
    })
    .unwrap_or(false)
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
