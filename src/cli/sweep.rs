//! `tollgate sweep`: kill what runs that died left running, and remove worktrees runs could not
//! remove, once nothing holds them.

use super::exit;
use crate::exec::sweep;
use std::path::Path;

#[derive(Debug, clap::Args)]
pub struct SweepArgs {}

pub fn run(_args: SweepArgs, home: Option<&Path>) -> i32 {
    let home = match super::run::resolve_home(home) {
        Ok(h) => h,
        Err(e) => {
            eprintln!("tollgate sweep: cannot use the state directory: {e}");
            return exit::ENVIRONMENT;
        }
    };
    let report = match sweep::sweep(&home) {
        Ok(r) => r,
        Err(e @ sweep::SweepError::Unreadable { .. }) => {
            eprintln!("tollgate sweep: {e}");
            return exit::USAGE;
        }
        Err(e) => {
            eprintln!("tollgate sweep: {e}");
            return exit::ENVIRONMENT;
        }
    };
    let mut survivors = false;
    for dead in &report.runs {
        println!(
            "killed  run {} (pid {} is gone): {} processes",
            dead.run_id, dead.run_pid, dead.killed
        );
        if !dead.survivors.is_empty() {
            survivors = true;
            eprintln!(
                "failed  run {}: {} processes survived SIGKILL: {:?}",
                dead.run_id,
                dead.survivors.len(),
                dead.survivors
            );
        }
        for path in &dead.removed {
            println!("removed {} (worktree of the dead run)", path.display());
        }
        for (path, why) in &dead.failed {
            eprintln!("failed  {}: {why}", path.display());
        }
    }
    for path in crate::exec::kill::sweep_cgroups() {
        println!("removed {} (cgroup of a finished run)", path.display());
    }
    for path in &report.removed {
        println!("removed {}", path.display());
    }
    for path in &report.kept {
        println!("kept    {} (a live process is inside)", path.display());
    }
    for (path, why) in &report.failed {
        eprintln!("failed  {}: {why}", path.display());
    }
    let dead_failed = report.runs.iter().any(|d| !d.failed.is_empty());
    if report.failed.is_empty() && !survivors && !dead_failed {
        exit::OK
    } else {
        exit::FAILED
    }
}
