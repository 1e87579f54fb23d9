//! `tollgate sweep`: kill what runs that died left running, and remove worktrees runs could not
//! remove, once nothing holds them.

use super::exit;
use crate::exec::sweep;
use serde_json::json;
use std::path::{Path, PathBuf};

#[derive(Debug, clap::Args)]
pub struct SweepArgs {
    /// Print what was done as one JSON document instead of lines.
    #[arg(long)]
    pub json: bool,
}

fn failures(list: &[(PathBuf, String)]) -> Vec<serde_json::Value> {
    list.iter()
        .map(|(path, why)| json!({"path": path, "error": why}))
        .collect()
}

pub fn run(args: SweepArgs, home: Option<&Path>) -> i32 {
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
    let cgroups = crate::exec::kill::sweep_cgroups();
    let survivors = report.runs.iter().any(|d| !d.survivors.is_empty());
    let dead_failed = report.runs.iter().any(|d| !d.failed.is_empty());
    let code = if report.failed.is_empty() && !survivors && !dead_failed {
        exit::OK
    } else {
        exit::FAILED
    };
    if args.json {
        let runs: Vec<_> = report
            .runs
            .iter()
            .map(|d| {
                json!({
                    "run_id": d.run_id, "run_pid": d.run_pid, "killed": d.killed,
                    "survivors": d.survivors, "removed": d.removed,
                    "failed": failures(&d.failed), "forgotten": d.forgotten,
                })
            })
            .collect();
        let value = json!({
            "home": home, "dead_runs": runs, "cgroups_removed": cgroups,
            "removed": report.removed, "kept": report.kept, "failed": failures(&report.failed),
        });
        match serde_json::to_string_pretty(&value) {
            Ok(text) => println!("{text}"),
            Err(e) => {
                eprintln!("tollgate sweep: cannot render JSON: {e}");
                return exit::ENVIRONMENT;
            }
        }
        return code;
    }
    for dead in &report.runs {
        println!(
            "killed  run {} (pid {} is gone): {} processes",
            dead.run_id, dead.run_pid, dead.killed
        );
        if !dead.survivors.is_empty() {
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
    for path in &cgroups {
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
    let nothing = report.runs.is_empty()
        && cgroups.is_empty()
        && report.removed.is_empty()
        && report.kept.is_empty()
        && report.failed.is_empty();
    if nothing {
        // Silence looked like a command that did nothing on purpose: say what was looked at.
        println!(
            "nothing to sweep in {}: no dead run left processes or worktrees",
            home.display()
        );
    } else {
        println!(
            "swept {}: {} dead run(s), {} worktree(s) removed, {} kept, {} failure(s)",
            home.display(),
            report.runs.len(),
            report.removed.len() + report.runs.iter().map(|d| d.removed.len()).sum::<usize>(),
            report.kept.len(),
            report.failed.len() + report.runs.iter().map(|d| d.failed.len()).sum::<usize>()
        );
    }
    code
}
