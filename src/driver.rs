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
use crate::protocol::slots::steps::{
    handoff_publish_second, row_reads, spawn_failed, Handoff, Reads,
};
use crate::protocol::slots::{ProcessIdentity, SlotError, WorkRecord};
use crate::queue::{Commit, Store};

/// How a handoff ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HandoffOutcome {
    /// Both publishes landed: the child is the recorded runner and the token is cleared.
    Completed { child: ProcessIdentity },
    /// The row moved on after the spawn (stolen, cancelled, or completed by the child itself);
    /// the token-fenced core refused to touch it. The child's own take-over decides what happens.
    Fenced {
        child: ProcessIdentity,
        reason: SlotError,
    },
}

impl HandoffOutcome {
    pub fn child(&self) -> ProcessIdentity {
        match self {
            HandoffOutcome::Completed { child } | HandoffOutcome::Fenced { child, .. } => *child,
        }
    }
}

/// Spawns the runner for `handoff` and completes it: first publish, then second publish. A failed
/// spawn gives the unbound reservation back (the core parks the row) and returns the spawn error.
pub fn hand_off<S: Store>(
    store: &S,
    spawner: &dyn RunnerSpawner,
    handoff: Handoff,
) -> Result<HandoffOutcome, DispatchError> {
    // Each section of the handoff reads the part of the queue its row-local step needs (the
    // row, the runner and work records, the active rows: `steps::row_reads`), not the parked
    // rows, so its lock hold does not grow with the queue's depth.
    let reads = Reads::Part(row_reads(handoff.key()));
    let child = match spawner.spawn(handoff.key(), handoff.token()) {
        Ok(child) => child,
        Err(spawn_error) => {
            store.transact_reading(Commit::Internal, &reads, |state, _| {
                Ok::<_, DispatchError>(spawn_failed(state, handoff))
            })?;
            return Err(spawn_error.into());
        }
    };
    // Between the spawn and the first publish: a test holds a dispatcher here (`return(GATE)`,
    // tests/failpoints_cancel_dispatcher.rs) or kills it (`panic`).
    #[cfg(feature = "failpoints")]
    crate::failgate::hold("dispatch::after_spawn");
    // On a fleet the same section takes the child's lease (F4, `crate::fleet::publish_first`).
    let bound = match store.transact_reading(Commit::Internal, &reads, |state, _| {
        crate::fleet::publish_first(state, handoff, child).map_err(DispatchError::from)
    })? {
        Ok(bound) => bound,
        Err(fenced) => {
            return Ok(HandoffOutcome::Fenced {
                child,
                reason: fenced.reason,
            })
        }
    };
    fail::fail_point!("dispatch::between_publishes");
    match store.transact_reading(Commit::Internal, &reads, |state, _| {
        Ok::<_, DispatchError>(handoff_publish_second(state, bound))
    })? {
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
