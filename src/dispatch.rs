//! The reserver's shell sequence after an acquired reservation: spawn outside the lock, then hand
//! the row to the child in two publishes (spec/slots.md, "Handoff").
//!
//! Submit, a finishing runner and reconcile all start runners through [`spawn_and_hand_off`], so
//! there is one place where the order "spawn, bind + first publish, record + second publish" lives.

use crate::fsutil::FileError;
use crate::process::{RunnerSpawner, SpawnError};
use crate::protocol::slots::{
    complete_runner_spawn_first, complete_runner_spawn_second, release_runner_slot,
    token_fenced_row_after_bind, ProcessIdentity, QueueEntry, SlotError, SlotToken,
};
use crate::queue::{QueueStore, StoreError};

#[derive(Debug, thiserror::Error)]
pub enum DispatchError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Slot(#[from] SlotError),
    #[error(transparent)]
    Spawn(#[from] SpawnError),
    #[error(transparent)]
    File(#[from] FileError),
    #[error("unknown task {task:?}: no such task in {home} (`tollgate status` lists the tasks)")]
    UnknownTask { task: String, home: String },
    #[error("{context}: {source}")]
    Io {
        context: String,
        source: std::io::Error,
    },
}

impl DispatchError {
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        DispatchError::Io {
            context: context.into(),
            source,
        }
    }
}

/// How a handoff ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Handoff {
    /// Both publishes landed: the child is the recorded runner and the token is cleared.
    Completed { child: ProcessIdentity },
    /// The row moved on after the spawn (stolen, cancelled, or completed by the child itself);
    /// the token-fenced core refused to touch it. The child's own take-over decides what happens.
    Fenced {
        child: ProcessIdentity,
        reason: SlotError,
    },
}

impl Handoff {
    pub fn child(&self) -> ProcessIdentity {
        match self {
            Handoff::Completed { child } | Handoff::Fenced { child, .. } => *child,
        }
    }
}

/// Spawns the runner for `snapshot` (the row as published with the reservation `token`) and
/// completes the handoff. A failed spawn gives the unbound reservation back and parks the row.
pub fn spawn_and_hand_off(
    store: &QueueStore,
    spawner: &dyn RunnerSpawner,
    reserver: ProcessIdentity,
    token: SlotToken,
    snapshot: &QueueEntry,
) -> Result<Handoff, DispatchError> {
    let child = match spawner.spawn(&snapshot.key, token) {
        Ok(child) => child,
        Err(spawn_error) => {
            release_after_failed_spawn(store, snapshot, token, reserver)?;
            return Err(spawn_error.into());
        }
    };
    fail::fail_point!("dispatch::after_spawn");
    if let Err(reason) = publish_first(store, snapshot, token, child)? {
        return Ok(Handoff::Fenced { child, reason });
    }
    fail::fail_point!("dispatch::between_publishes");
    match publish_second(store, snapshot, token, child)? {
        Ok(()) => Ok(Handoff::Completed { child }),
        Err(reason) => Ok(Handoff::Fenced { child, reason }),
    }
}

/// The spawn failed: give the unbound reservation back (the core parks the row). Returns whether
/// the reservation was still ours to release.
pub fn release_after_failed_spawn(
    store: &QueueStore,
    snapshot: &QueueEntry,
    token: SlotToken,
    reserver: ProcessIdentity,
) -> Result<bool, DispatchError> {
    store.transact(|state| {
        Ok::<_, DispatchError>(release_runner_slot(state, &snapshot.key, token, reserver))
    })
}

/// First publish of the handoff (bind the child, keep the token). The inner result is the core's
/// answer: an error there means the row moved on and nothing was written.
pub fn publish_first(
    store: &QueueStore,
    snapshot: &QueueEntry,
    token: SlotToken,
    child: ProcessIdentity,
) -> Result<Result<(), SlotError>, DispatchError> {
    store.transact(|state| {
        Ok::<_, DispatchError>(complete_runner_spawn_first(
            state,
            &snapshot.key,
            token,
            child,
        ))
    })
}

/// Second publish of the handoff (record the runner, clear the token), fenced against the
/// snapshot with this token's child attached.
pub fn publish_second(
    store: &QueueStore,
    snapshot: &QueueEntry,
    token: SlotToken,
    child: ProcessIdentity,
) -> Result<Result<(), SlotError>, DispatchError> {
    store.transact(|state| {
        let result = token_fenced_row_after_bind(snapshot, token, child)
            .and_then(|expected| complete_runner_spawn_second(state, &expected, child, false));
        Ok::<_, DispatchError>(result)
    })
}
