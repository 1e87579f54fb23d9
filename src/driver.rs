//! The one driver: performs every effect a slot step returns. The steps decide (in the core);
//! the driver does the IO they ask for, in the order they dictate:
//!
//! - a [`Handoff`]: spawn the runner outside the lock, then the first and the second publish, each
//!   its own locked section, or the spawn-failure release when the spawn failed
//!   (spec/slots.md, "Handoff");
//! - a work to kill: its process group and every process carrying its marker, TERM then KILL,
//!   until none is left (spec/slots.md, "Work");
//! - a live executor to stop (cancel): SIGTERM if its identity still matches;
//! - a waker for a debounce deadline.
//!
//! Submit, the runner, reconcile, cancel and serve (through submit and cancel) all come here.

use crate::dispatch::DispatchError;
use crate::process::work::WorkKill;
use crate::process::RunnerSpawner;
use crate::protocol::slots::sections::{PublishFirst, PublishSecond, SpawnFailed};
use crate::protocol::slots::steps::Handoff;
use crate::protocol::slots::{Liveness, ProcessIdentity, WorkRecord};
use crate::queue::Store;
use crate::runtime::Runtime;

pub use crate::dispatch::HandoffOutcome;

/// Spawns the runner for `handoff` with `spawner` and completes it: the first publish, then the
/// second, each its own section ([`PublishFirst`], [`PublishSecond`]) on the row's part of the
/// queue, so its lock hold does not grow with the queue's depth. A failed spawn gives the unbound
/// reservation back ([`SpawnFailed`]: the core parks the row) and returns the spawn error.
pub fn hand_off<L: Liveness, S: Store>(
    rt: &Runtime<L, S>,
    spawner: &dyn RunnerSpawner,
    handoff: Handoff,
) -> Result<HandoffOutcome, DispatchError> {
    let child = match spawner.spawn(handoff.key(), handoff.token()) {
        Ok(child) => child,
        Err(spawn_error) => {
            crate::section::run(rt, &SpawnFailed { handoff })?;
            return Err(spawn_error.into());
        }
    };
    // Between the spawn and the first publish: a test holds a dispatcher here (`return(GATE)`,
    // tests/failpoints_cancel_dispatcher.rs) or kills it (`panic`).
    #[cfg(feature = "failpoints")]
    crate::failgate::hold("dispatch::after_spawn");
    // On a fleet the same section takes the child's lease (F4).
    let bound = match crate::section::run(rt, &PublishFirst { handoff, child })? {
        Ok(bound) => bound,
        Err(fenced) => {
            return Ok(HandoffOutcome::Fenced {
                child,
                reason: fenced.reason,
            })
        }
    };
    fail::fail_point!("dispatch::between_publishes");
    match crate::section::run(rt, &PublishSecond { bound })? {
        Ok(child) => Ok(HandoffOutcome::Completed { child }),
        Err(fenced) => Ok(HandoffOutcome::Fenced {
            child,
            reason: fenced.reason,
        }),
    }
}

/// Kills what is alive of `work` and returns when none of it is left (or the bounded waits ran
/// out: then [`WorkKill::remaining`] lists the survivors and the step asks again next time).
pub fn kill_work(spawner: &dyn RunnerSpawner, work: &WorkRecord) -> WorkKill {
    let killed = spawner.kill_work(work);
    if !killed.is_complete() {
        tracing::warn!(
            "{}: {} process(es) of work {} survived SIGKILL: {:?}",
            work.key,
            killed.remaining.len(),
            work.id,
            killed.remaining
        );
    }
    killed
}

/// Asks a live executor to stop; returns whether the signal was sent.
pub fn stop_executor(spawner: &dyn RunnerSpawner, executor: &ProcessIdentity) -> bool {
    spawner.stop_executor(executor)
}

/// Starts a waker for a debounce deadline; a failure only delays the start to the next finish or
/// reconcile, so it is logged, not returned.
pub fn start_waker(spawner: &dyn RunnerSpawner, at_millis: u64) {
    if let Err(e) = spawner.spawn_waker(at_millis) {
        tracing::warn!("{e}; the debounced turn starts at the next finish or reconcile");
    }
}
