//! What names this host on a fleet and how long its leases run (spec/fleet.md): the `host`
//! setting (or `TOLLGATE_HOST`, or a name derived from the machine's and the boot's ids) and the
//! lease numbers (`TOLLGATE_LEASE_MILLIS` scales the defaults, for tests and demos). Read from
//! the config and the environment; the lease steps that use them are the core's.

use super::Config;
use crate::protocol::fleet::{FleetError, HostId, LeaseTiming};
use std::path::{Path, PathBuf};

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
}
