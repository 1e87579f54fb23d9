//! `submit`'s check that a turn's program can be found before anything is queued: a missing
//! program would otherwise be accepted (exit 0, "started"), and the turn would end `unstartable`
//! moments later. The program is looked for the way the runner's exec looks for it
//! ([`crate::process::exec_search`]): a name with a `/` relative to the turn's cwd, a bare name
//! in the `PATH` of the turn's stored environment (glibc's `/bin:/usr/bin` when that has none,
//! as for the runner's exec of a cleared environment; empty and relative entries against the
//! cwd).
//! `submit --no-check` skips it (a program the turn's own setup makes, a path mounted later).

use super::CliError;
use crate::argv::Env;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// The search path exec uses when the environment has no `PATH` (glibc's `_CS_PATH`).
const DEFAULT_PATH: &str = "/bin:/usr/bin";

/// Whether `path` is a file this process may execute (what exec would accept).
fn executable(path: &Path) -> bool {
    path.is_file() && nix::unistd::access(path, nix::unistd::AccessFlags::X_OK).is_ok()
}

/// Where exec would find `program` for a turn running in `cwd` with `env`, or why it would not.
pub fn locate(program: &OsStr, cwd: &Path, env: &Env) -> Result<PathBuf, String> {
    let search = env
        .get(OsStr::new("PATH"))
        .map_or(OsStr::new(DEFAULT_PATH), OsString::as_os_str);
    let candidates = crate::process::exec_search::candidates(program, search);
    if let Some(found) = candidates
        .iter()
        .map(|c| cwd.join(c))
        .find(|c| executable(c))
    {
        return Ok(found);
    }
    if program.as_bytes().contains(&b'/') {
        return Err(if cwd.join(program).is_file() {
            format!("{program:?} is not executable")
        } else {
            format!(
                "{program:?}: no such file (the turn runs in {})",
                cwd.display()
            )
        });
    }
    let named = match env.get(OsStr::new("PATH")) {
        Some(path) => format!("the turn's PATH ({})", path.to_string_lossy()),
        None => format!("the turn's environment has no PATH, so exec looks in {DEFAULT_PATH}"),
    };
    Err(format!("{program:?} is not found in {named}"))
}

/// Refuses (exit 2, nothing queued) a command whose program exec could not find.
pub fn check(argv: &[OsString], cwd: &Path, env: &Env) -> Result<(), CliError> {
    let Some(program) = argv.first() else {
        return Ok(());
    };
    locate(program, cwd, env).map(drop).map_err(|why| {
        CliError::Usage(format!(
            "submit: {why}; the turn could not start, so nothing was queued (--no-check queues \
             it anyway)"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn programs_are_found_as_exec_finds_them() {
        let dir = tempfile::tempdir().expect("tempdir");
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).expect("bin");
        let script = bin.join("job.sh");
        std::fs::write(&script, "#!/bin/sh\n").expect("script");
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let plain = dir.path().join("plain.txt");
        std::fs::write(&plain, "").expect("plain");
        let env = |path: &str| Env::from([(OsString::from("PATH"), OsString::from(path))]);
        let cwd = dir.path();
        assert_eq!(
            locate(OsStr::new("job.sh"), cwd, &env("/nowhere:bin")),
            Ok(script.clone())
        );
        assert_eq!(
            locate(OsStr::new("./bin/job.sh"), cwd, &env("")),
            Ok(cwd.join("./bin/job.sh"))
        );
        assert!(locate(OsStr::new("job.sh"), cwd, &env("/nowhere")).is_err());
        assert!(locate(OsStr::new("./plain.txt"), cwd, &env(""))
            .is_err_and(|e| e.contains("not executable")));
        assert!(locate(OsStr::new("./missing.sh"), cwd, &env(""))
            .is_err_and(|e| e.contains("no such file")));
        // No PATH at all: exec's default search path.
        assert!(locate(OsStr::new("sh"), cwd, &Env::new()).is_ok());
    }
}
