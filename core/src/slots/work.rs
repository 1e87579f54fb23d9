//! A turn's work: the process tree its runner starts. It can outlive the runner (a SIGKILLed
//! runner does not take its command's children with it), so the queue records it durably and the
//! protocol refuses to run the turn again, or to free its slot, while the work may still be alive.

use super::{ProcessIdentity, SlotToken, TurnKey};
use serde::{Deserialize, Serialize};
use std::fmt;

/// The name of a turn's work, known before its command starts: the slot token the runner took its
/// slot over with (fresh per spawn attempt, never reused, so never shared by two works). The shell
/// starts the command with `TOLLGATE_WORK=<id>` in its environment, which is how a process of the
/// work is found again after its runner and its process group leader are gone.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct WorkId(SlotToken);

impl WorkId {
    /// The environment variable every process of a work carries.
    pub const ENV: &'static str = "TOLLGATE_WORK";

    pub fn from_token(token: SlotToken) -> Self {
        WorkId(token)
    }

    pub fn token(&self) -> SlotToken {
        self.0
    }
}

impl fmt::Display for WorkId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

/// One recorded work of a turn: who started it and, once the command runs, its leader (the
/// command's first process, leader of its own process group when detached).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct WorkRecord {
    #[serde(flatten)]
    pub key: TurnKey,
    pub id: WorkId,
    /// The runner (or attached submitter) that started the work.
    pub runner: ProcessIdentity,
    /// Recorded right after the command was spawned; `None` before that (or if the runner died in
    /// between), when the work may exist and only its environment marker finds it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader: Option<ProcessIdentity>,
    /// The work's cgroup v2 directory, chosen by the runner before the command starts (the
    /// take-over records it); `None` on the process group + marker path and in older queue files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<String>,
}
