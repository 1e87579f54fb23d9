//! `tollgate cancel TASK`: rows nobody runs yet end as cancelled at once; live executors are asked
//! to stop (SIGTERM), and they record the cancellation and leave the queue themselves.

use crate::dispatch::DispatchError;
use crate::process::ProcLiveness;
use crate::protocol::slots::{
    cancel_task, cancel_turn as cancel_turn_row, Liveness, Observation, ProcessIdentity, TurnKey,
};
use crate::runtime::Runtime;
use crate::tasks::{self, TurnOutcome};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

#[derive(Debug, Default)]
pub struct CancelReport {
    pub removed: Vec<TurnKey>,
    pub signalled: Vec<(TurnKey, ProcessIdentity)>,
}

pub fn cancel<L: Liveness>(rt: &Runtime<L>, task: &str) -> Result<CancelReport, DispatchError> {
    if tasks::load_task(&rt.home, task)?.is_none() {
        return Err(DispatchError::UnknownTask {
            task: task.to_string(),
            home: rt.home.root().display().to_string(),
        });
    }
    let plan = rt.store.transact(|state| {
        let plan = cancel_task(state, task, &rt.liveness);
        for key in &plan.removed {
            tasks::end_unrun(&rt.home, key, TurnOutcome::Cancelled, tasks::now_millis())?;
        }
        Ok::<_, DispatchError>(plan)
    })?;
    Ok(signal_executors(plan))
}

/// Cancels one turn of a task (a delivery that ran out of time): removed if nobody runs it yet
/// (it ends as cancelled), else its live executor is asked to stop.
pub fn cancel_turn<L: Liveness>(
    rt: &Runtime<L>,
    key: &TurnKey,
) -> Result<CancelReport, DispatchError> {
    let plan = rt.store.transact(|state| {
        let plan = cancel_turn_row(state, key, &rt.liveness);
        for key in &plan.removed {
            tasks::end_unrun(&rt.home, key, TurnOutcome::Cancelled, tasks::now_millis())?;
        }
        Ok::<_, DispatchError>(plan)
    })?;
    Ok(signal_executors(plan))
}

fn signal_executors(plan: crate::protocol::slots::CancelPlan) -> CancelReport {
    let mut report = CancelReport {
        removed: plan.removed,
        signalled: Vec::new(),
    };
    for (key, identity) in plan.signal {
        // Only a process whose start time still matches is ours to signal; a reused pid is not.
        if ProcLiveness.observe(&identity) == Observation::Matching {
            let pid = Pid::from_raw(identity.pid as i32);
            if kill(pid, Signal::SIGTERM).is_ok() {
                report.signalled.push((key, identity));
            }
        }
    }
    report
}
