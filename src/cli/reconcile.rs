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
            format!("{key}: finished the handoff its dead submitter left half done")
        }
        ReconcileStep::Parked { key } => {
            format!("{key}: whoever was starting it died; queued again")
        }
        ReconcileStep::Removed { key } => {
            format!("{key}: had already ended, removed from the queue")
        }
        ReconcileStep::Spawn {
            key,
            replaced: Some(dead),
            ..
        } => {
            format!(
                "{key}: its runner (pid {}) died before the turn ended: runs it again on a new \
                 runner (its logs get a line marking the new run)",
                dead.pid
            )
        }
        ReconcileStep::Spawn {
            key,
            replaced: None,
            ..
        } => format!("{key}: started on a free worker slot"),
        ReconcileStep::Kill { key, work } => {
            format!(
                "{key}: its runner (pid {}) died: killed what was left of its command (work {})",
                work.runner.pid, work.id
            )
        }
        ReconcileStep::Forgotten { key } => {
            format!("{key}: no turn record, removed its queue row")
        }
        ReconcileStep::Requeued { key } => {
            format!("{key}: its submitter died before queueing it; queued now")
        }
        ReconcileStep::Saturated => {
            "every worker slot is busy: queued turns start as slots free".to_string()
        }
        ReconcileStep::Idle => "nothing to repair".to_string(),
    }
}

/// The last line of a reconcile that did something: how many repairs, and that the rest is in
/// order (a bare "nothing to repair" after them read as if they had not happened).
fn summary(steps: &[ReconcileStep]) -> Option<String> {
    let repairs = steps
        .iter()
        .filter(|s| !matches!(s, ReconcileStep::Idle | ReconcileStep::Saturated))
        .count();
    (repairs > 0).then(|| format!("done: {repairs} repair(s); nothing else needs repair"))
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
        let summary = summary(&report.steps);
        for step in &report.steps {
            // After repairs, the closing "nothing to repair" is the summary's to say.
            if summary.is_some() && matches!(step, ReconcileStep::Idle) {
                continue;
            }
            println!("{}", describe(step));
        }
        if let Some(summary) = summary {
            println!("{summary}");
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
