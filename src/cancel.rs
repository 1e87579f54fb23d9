//! `tollgate cancel TASK [--turn N]`: rows nobody runs yet end as cancelled at once; a row someone
//! starts or runs keeps the request durably (a runner that has not spawned its command yet honours
//! it at its take-over) and, when the turn has a live executor, that executor is asked to stop
//! (SIGTERM): it kills its work's whole unit (TERM, the grace, KILL, until empty), records what
//! happened and leaves the queue itself. A dispatcher handing the row off (a submit, `resume`,
//! reconcile, a finishing runner) is never signalled: the core's step records the request for the
//! runner it starts (S13). The work of a dead runner is killed here first, and its row leaves in
//! the next section. The CLI then runs one bounded repair ([`crate::runner::repair`]).

use crate::dispatch::{DispatchError, SectionError};
use crate::driver;
use crate::process::work::WorkKill;
use crate::protocol::slots::steps::{self, CancelSelection, Reads};
use crate::protocol::slots::{Liveness, ProcessIdentity, TurnKey};
use crate::queue::{Commit, Store};
use crate::runtime::Runtime;
use crate::tasks::{self, TurnOutcome};

/// Cancel sections per call: the first may ask for kills, the second removes what they freed; a
/// third covers a kill that needed the KILL escalation. Survivors after that stay for reconcile.
const MAX_CANCEL_SECTIONS: usize = 3;

#[derive(Debug, Default)]
pub struct CancelReport {
    pub removed: Vec<TurnKey>,
    pub signalled: Vec<(TurnKey, ProcessIdentity)>,
    /// Rows being handed off: the request is recorded, their runner will not start the command.
    pub recorded: Vec<TurnKey>,
    /// Works of dead runners that were killed before their rows could leave.
    pub killed: Vec<(TurnKey, WorkKill)>,
}

pub fn cancel<L: Liveness, S: Store>(
    rt: &Runtime<L, S>,
    task: &str,
) -> Result<CancelReport, DispatchError> {
    if tasks::load_task(&rt.home, task)?.is_none() {
        return Err(DispatchError::UnknownTask {
            task: task.to_string(),
            home: rt.home.root().display().to_string(),
        });
    }
    run_cancel(rt, CancelSelection::Task(task))
}

/// `tollgate cancel TASK --turn N`: [`cancel_turn`] after checking that the task exists.
pub fn cancel_one_turn<L: Liveness, S: Store>(
    rt: &Runtime<L, S>,
    key: &TurnKey,
) -> Result<CancelReport, DispatchError> {
    if tasks::load_task(&rt.home, &key.task)?.is_none() {
        return Err(DispatchError::UnknownTask {
            task: key.task.clone(),
            home: rt.home.root().display().to_string(),
        });
    }
    cancel_turn(rt, key)
}

/// Cancels one turn of a task (a delivery that ran out of time): removed if nobody runs it yet
/// (it ends as cancelled), else its live executor is asked to stop.
pub fn cancel_turn<L: Liveness, S: Store>(
    rt: &Runtime<L, S>,
    key: &TurnKey,
) -> Result<CancelReport, DispatchError> {
    run_cancel(rt, CancelSelection::Turn(key))
}

fn run_cancel<L: Liveness, S: Store>(
    rt: &Runtime<L, S>,
    selection: CancelSelection<'_>,
) -> Result<CancelReport, DispatchError> {
    let mut report = CancelReport::default();
    for _ in 0..MAX_CANCEL_SECTIONS {
        let effect = cancel_once(rt, selection)?;
        report.removed.extend(effect.removed.iter().cloned());
        for key in &effect.recorded {
            if !report.recorded.contains(key) {
                report.recorded.push(key.clone());
            }
        }
        for (key, executor) in &effect.signal {
            let signalled = (key.clone(), *executor);
            if !report.signalled.contains(&signalled)
                && driver::stop_executor(rt.spawner.as_ref(), executor)
            {
                report.signalled.push(signalled);
            }
        }
        for work in &effect.kill {
            let killed = driver::kill_work(rt.spawner.as_ref(), work);
            report.killed.push((work.key.clone(), killed));
        }
        if !effect.again() {
            break;
        }
    }
    Ok(report)
}

/// One cancel section: the core's step, and the removed turns ended as cancelled under the lock.
/// It reads the cancelled task's part of the queue ([`steps::cancel_reads`]: its rows and their
/// dependents), so a cancel costs the same at any depth; a departure that reached rows outside the
/// part ([`steps::cancel_stayed_inside`]) rolls the section back and runs it once more on the
/// whole queue (spec/store.md, "What a section loads").
pub fn cancel_once<L: Liveness, S: Store>(
    rt: &Runtime<L, S>,
    selection: CancelSelection<'_>,
) -> Result<steps::CancelEffect, DispatchError> {
    let task = match selection {
        CancelSelection::Task(task) => task,
        CancelSelection::Turn(key) => key.task.as_str(),
    };
    let part = Reads::Part(steps::cancel_reads(task));
    match cancel_section(rt, selection, task, &part) {
        Err(SectionError::Unread(_)) => {}
        Err(SectionError::Failed(e)) => return Err(e),
        Ok(effect) => return Ok(effect),
    }
    cancel_section(rt, selection, task, &Reads::Everything).map_err(|e| e.on_whole_queue("cancel"))
}

/// One [`cancel_once`] section on what `reads` names.
fn cancel_section<L: Liveness, S: Store>(
    rt: &Runtime<L, S>,
    selection: CancelSelection<'_>,
    task: &str,
    reads: &Reads,
) -> Result<steps::CancelEffect, SectionError> {
    rt.store
        .transact_reading(Commit::Promise, reads, |state, loaded| {
            if !steps::cancel_covers(loaded, task) {
                return Err(SectionError::Unread(Reads::Everything));
            }
            let loaded_rows: Vec<TurnKey> = state.entries.iter().map(|e| e.key.clone()).collect();
            let effect = steps::cancel(state, selection, &rt.liveness);
            for key in &effect.removed {
                tasks::end_unrun(
                    &rt.home,
                    key,
                    TurnOutcome::Cancelled,
                    rt.spawner.now_millis(),
                )?;
                // Its `--after-success` dependents settle now; a cancel is never retried.
                let me = crate::process::self_identity()
                    .map_err(|e| DispatchError::io("reading this process's identity", e))?;
                crate::deps::departed_on_disk(rt, state, key, me)?;
            }
            if !steps::cancel_stayed_inside(loaded, &loaded_rows, state, &effect.removed) {
                return Err(SectionError::Unread(Reads::Everything));
            }
            Ok(effect)
        })
}
