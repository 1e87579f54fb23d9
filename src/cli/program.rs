//! `submit`'s check that a turn's program can be found before anything is queued: a missing
//! program would otherwise be accepted (exit 0, "started"), and the turn would end `unstartable`
//! moments later. The program is looked for the way the runner's exec looks for it
//! ([`crate::process::exec_search`]): a name with a `/` relative to the turn's cwd, a bare name
//! in the `PATH` of the turn's stored environment (glibc's `/bin:/usr/bin` when that has none,
//! as for the runner's exec of a cleared environment; empty and relative entries against the
//! cwd).
//! `submit --no-check` skips it (a program the turn's own setup makes, a path mounted later).

use super::CliError;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The search path exec uses when the environment has no `PATH` (glibc's `_CS_PATH`).
const DEFAULT_PATH: &str = "/bin:/usr/bin";

/// Whether `path` is a file this process may execute (what exec would accept).
fn executable(path: &Path) -> bool {
    path.is_file() && nix::unistd::access(path, nix::unistd::AccessFlags::X_OK).is_ok()
}

/// Where exec would find `program` for a turn running in `cwd` with `env`, or why it would not.
pub fn locate(
    program: &str,
    cwd: &Path,
    env: &BTreeMap<String, String>,
) -> Result<PathBuf, String> {
    let search = env.get("PATH").map_or(DEFAULT_PATH, String::as_str);
    let candidates = crate::process::exec_search::candidates(program, search.as_ref());
    if let Some(found) = candidates
        .iter()
        .map(|c| cwd.join(c))
        .find(|c| executable(c))
    {
        return Ok(found);
    }
    if program.contains('/') {
        return Err(if cwd.join(program).is_file() {
            format!("{program:?} is not executable")
        } else {
            format!(
                "{program:?}: no such file (the turn runs in {})",
                cwd.display()
            )
        });
    }
    let named = match env.get("PATH") {
        Some(path) => format!("the turn's PATH ({path})"),
        None => format!("the turn's environment has no PATH, so exec looks in {DEFAULT_PATH}"),
    };
    Err(format!("{program:?} is not found in {named}"))
}

/// Refuses (exit 2, nothing queued) a command whose program exec could not find.
pub fn check(argv: &[String], cwd: &Path, env: &BTreeMap<String, String>) -> Result<(), CliError> {
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
        let env = |path: &str| BTreeMap::from([("PATH".to_string(), path.to_string())]);
        let cwd = dir.path();
        assert_eq!(
            locate("job.sh", cwd, &env("/nowhere:bin")),
            Ok(script.clone())
        );
        assert_eq!(
            locate("./bin/job.sh", cwd, &env("")),
            Ok(cwd.join("./bin/job.sh"))
        );
        assert!(locate("job.sh", cwd, &env("/nowhere")).is_err());
        assert!(locate("./plain.txt", cwd, &env("")).is_err_and(|e| e.contains("not executable")));
        assert!(locate("./missing.sh", cwd, &env("")).is_err_and(|e| e.contains("no such file")));
        // No PATH at all: exec's default search path.
        assert!(locate("sh", cwd, &BTreeMap::new()).is_ok());
    }
}
