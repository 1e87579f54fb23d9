//! `tollgate sweep`: remove worktrees runs could not remove, once nothing holds them.

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
    if report.failed.is_empty() {
        exit::OK
    } else {
        exit::FAILED
    }
}
