//! The error every shell entry point of the slot protocol returns. The effects themselves (spawn,
//! the two publishes, the spawn-failure release, kills) are performed by [`crate::driver`].

use crate::fsutil::FileError;
use crate::process::SpawnError;
use crate::protocol::slots::{ProcessIdentity, SlotError};
use crate::queue::StoreError;

pub use HandoffOutcome as Handoff;

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
    /// A lease step refused a section of a fleet (spec/fleet.md); nothing was published.
    #[error(transparent)]
    Fleet(#[from] crate::protocol::fleet::FleetError),
    #[error("unknown task {task:?}: no such task in {home} (`tollgate status` lists the tasks)")]
    UnknownTask { task: String, home: String },
    #[error("{context}: {source}")]
    Io {
        context: String,
        source: std::io::Error,
    },
    /// A submit's turn was queued, or may have been (its commit's outcome is unknown), and a
    /// later step failed: reported with the turn's id, never as "nothing was queued".
    #[error("task {} turn {} (id {id}) {what}; check `tollgate status {id}` before submitting it again", key.task, key.turn)]
    StateUnknown {
        key: crate::protocol::slots::TurnKey,
        id: u64,
        /// What happened: "was queued, but …" or "may or may not be queued: …".
        what: String,
    },
}

/// Why a section on a part of the queue published nothing (the submit's and the finishing
/// runner's, spec/store.md, "What a section loads").
#[derive(Debug)]
pub enum SectionError {
    Failed(DispatchError),
    /// The part loaded did not suffice for the step: rolled back, to be run again with these.
    Unread(crate::protocol::slots::steps::Reads),
}

impl SectionError {
    /// The error of a section of `operation` on the whole queue, which never asks for more: an
    /// `Unread` there is a bug, reported rather than retried.
    pub fn on_whole_queue(self, operation: &str) -> DispatchError {
        match self {
            SectionError::Failed(e) => e,
            SectionError::Unread(_) => DispatchError::io(
                operation,
                std::io::Error::other("a section on the whole queue asked to read more"),
            ),
        }
    }
}

impl<T: Into<DispatchError>> From<T> for SectionError {
    fn from(e: T) -> Self {
        SectionError::Failed(e.into())
    }
}

impl DispatchError {
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        DispatchError::Io {
            context: context.into(),
            source,
        }
    }
}
