//! The shell's side of the fleet (spec/fleet.md): what this host is called. The lease steps
//! themselves are pure (`tollgate_core::fleet`).

use crate::protocol::fleet::{FleetError, HostId};
use std::path::{Path, PathBuf};

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
}
