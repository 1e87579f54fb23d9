//! `tollgate doctor`: SQLite's integrity check and the queue's structure check on the home's
//! database (spec/store.md, "Doctor"). It changes nothing: no home, database or migration is
//! created, and an old `queue.json` is not imported.

use super::CliError;
use crate::home::Home;
use crate::queue::{check_database, DoctorReport};
use clap::Args;
use std::path::PathBuf;

/// `doctor`'s own exit codes (documented in its `--help`).
pub mod exit {
    /// The database passed both checks (or the home has none yet).
    pub const HEALTHY: i32 = 0;
    /// A check found a problem; the report names it.
    pub const PROBLEMS: i32 = 1;
    /// The database could not be opened at all (not a regular file, not SQLite, unreadable).
    pub const CANNOT_OPEN: i32 = 2;
}

#[derive(Debug, Args)]
#[command(after_help = "Exit codes:
  0  healthy (or no database yet)
  1  problems found (listed)
  2  the database cannot be opened (the error names it)")]
pub struct DoctorArgs {
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn doctor(home: Option<PathBuf>, args: DoctorArgs) -> Result<i32, CliError> {
    let home = Home::resolve(home)?;
    let report = match check_database(&home) {
        Ok(report) => report,
        Err(error) => {
            if args.json {
                let value = serde_json::json!({
                    "database": home.db_path(),
                    "healthy": false,
                    "error": error.to_string(),
                });
                println!("{value}");
            } else {
                eprintln!("tollgate: cannot open the database: {error}");
            }
            return Ok(exit::CANNOT_OPEN);
        }
    };
    if args.json {
        let mut value = serde_json::to_value(&report)
            .map_err(|e| CliError::Environment(format!("cannot render the report: {e}")))?;
        value["healthy"] = report.healthy().into();
        println!("{value}");
    } else {
        print_report(&report);
    }
    Ok(if report.healthy() {
        exit::HEALTHY
    } else {
        exit::PROBLEMS
    })
}

fn print_report(report: &DoctorReport) {
    let path = report.database.display();
    if !report.exists {
        println!("{path}: no database yet (created on first use); healthy");
        return;
    }
    println!("{path}: schema version {}", report.schema_version);
    if report.integrity_problems.is_empty() {
        println!("integrity check: ok");
    } else {
        println!(
            "integrity check: {} problem(s):",
            report.integrity_problems.len()
        );
        for problem in &report.integrity_problems {
            println!("  {problem}");
        }
    }
    match &report.queue_problem {
        None => println!("queue structure: ok ({} row(s))", report.queue_rows),
        Some(problem) => println!("queue structure: {problem}"),
    }
    if report.record_problems.is_empty() {
        println!(
            "records: ok ({} task(s), {} turn(s))",
            report.task_records, report.turn_records
        );
    } else {
        println!("records: {} problem(s):", report.record_problems.len());
        for problem in &report.record_problems {
            println!("  {problem}");
        }
    }
    if let Some(old) = &report.unread_queue_json {
        println!(
            "note: {} is not read by the database (imported once on first use, never again)",
            old.display()
        );
    }
    println!(
        "{}",
        if report.healthy() {
            "healthy"
        } else {
            "problems found"
        }
    );
}
