//! `tollgate cancel TASK [--turn N]`: rows nobody runs yet end as cancelled at once; a row someone
//! starts or runs keeps the request durably (a runner that has not spawned its command yet honours
//! it at its take-over) and, when the turn has a live executor, that executor is asked to stop
//! (SIGTERM): it kills its work's whole unit (TERM, the grace, KILL, until empty), records what
//! happened and leaves the queue itself. A dispatcher handing the row off (a submit, `resume`,
//! reconcile, a finishing runner) is never signalled: the core's step records the request for the
//! runner it starts (S13). The work of a dead runner is killed here first, and its row leaves in
//! the next section. The CLI then runs one bounded repair ([`crate::runner::repair`]).

use crate::dispatch::DispatchError;
use crate::driver;
use crate::process::work::WorkKill;
use crate::protocol::slots::sections::CancelSection;
use crate::protocol::slots::steps::{self, CancelSelection};
use crate::protocol::slots::{Liveness, ProcessIdentity, TurnKey};
use crate::queue::Store;
use crate::runtime::Runtime;
use crate::tasks;

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

/// One cancel section ([`sections::cancel`]): the core's step, the removed turns ended as
/// cancelled and departed in the same transaction, on the cancelled task's part of the queue
/// ([`steps::cancel_reads`]), once more on the whole queue when a departure reached further.
pub fn cancel_once<L: Liveness, S: Store>(
    rt: &Runtime<L, S>,
    selection: CancelSelection<'_>,
) -> Result<steps::CancelEffect, DispatchError> {
    let me = crate::process::self_identity()
        .map_err(|e| DispatchError::io("reading this process's identity", e))?;
    crate::section::run(
        rt,
        &CancelSection {
            selection,
            me,
            now_millis: rt.spawner.now_millis(),
        },
    )
}
