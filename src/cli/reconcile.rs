//! `tollgate reconcile`: the repair loop and the sweep of dead runs, reported step by step.

use super::common::{me, open, print_json};
use super::{exit, CliError, ReconcileArgs};
use crate::protocol::slots::ReconcileStep;
use crate::reconcile as reconcile_shell;
use serde_json::json;
use std::path::PathBuf;

fn describe(step: &ReconcileStep) -> String {
    match step {
        ReconcileStep::CompletedHandoff { key } => {
            format!("{key}: finished a dead submitter's handoff")
        }
        ReconcileStep::Parked { key } => format!("{key}: owner gone, parked"),
        ReconcileStep::Removed { key } => {
            format!("{key}: had already ended, removed from the queue")
        }
        ReconcileStep::Spawn {
            key,
            replaced: Some(dead),
            ..
        } => {
            format!(
                "{key}: runner pid {} is gone, started a replacement",
                dead.pid
            )
        }
        ReconcileStep::Spawn {
            key,
            replaced: None,
            ..
        } => format!("{key}: started on a free slot"),
        ReconcileStep::Kill { key, work } => {
            format!(
                "{key}: runner pid {} is gone, killing its work {}",
                work.runner.pid, work.id
            )
        }
        ReconcileStep::Forgotten { key } => {
            format!("{key}: no turn record, removed its queue row")
        }
        ReconcileStep::Requeued { key } => {
            format!("{key}: owner gone, parked (its row was never queued)")
        }
        ReconcileStep::Saturated => "every worker slot is busy; parked rows wait".to_string(),
        ReconcileStep::Idle => "nothing left to repair".to_string(),
    }
}

pub fn reconcile(home: Option<PathBuf>, args: ReconcileArgs) -> Result<i32, CliError> {
    let rt = open(home)?;
    let report = reconcile_shell::reconcile(&rt, me()?)?;
    // What a SIGKILLed `tollgate run` left on this home is killed too (spec/execution.md, D8).
    // Only when a run ever recorded itself here: a home without a sweep list gains no file.
    let dead_runs = if crate::exec::sweep::has_list(rt.home.root()) {
        crate::exec::sweep::sweep_dead_runs(rt.home.root()).map_err(|e| match e {
            e @ crate::exec::sweep::SweepError::Unreadable { .. } => CliError::Usage(e.to_string()),
            e => CliError::Environment(e.to_string()),
        })?
    } else {
        Vec::new()
    };
    let failed: Vec<String> = report
        .handoffs
        .iter()
        .filter_map(|(key, r)| r.as_ref().err().map(|e| format!("{key}: {e}")))
        .collect();
    let runs: Vec<String> = dead_runs
        .iter()
        .map(|d| {
            let mut line = format!(
                "run {} (pid {} is gone): killed {} process(es) it left",
                d.run_id, d.run_pid, d.killed
            );
            if !d.survivors.is_empty() {
                line.push_str(&format!(
                    ", {} survived SIGKILL: {:?}",
                    d.survivors.len(),
                    d.survivors
                ));
            }
            line
        })
        .collect();
    if args.json {
        print_json(&json!({
            "steps": report.steps.iter().map(describe).collect::<Vec<_>>(),
            "spawn_failures": failed,
            "dead_runs": runs,
        }))?;
    } else {
        for line in &runs {
            println!("{line}");
        }
        for step in &report.steps {
            println!("{}", describe(step));
        }
        for failure in &failed {
            eprintln!("tollgate: could not start {failure}");
        }
    }
    Ok(if failed.is_empty() {
        exit::OK
    } else {
        exit::ENVIRONMENT
    })
}
