//! Process identities and how the core learns whether one is still alive.

use super::WorkRecord;
use serde::{Deserialize, Serialize};
use std::fmt;

/// A process as the slot protocol names it: a pid alone is never enough, because pids are reused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ProcessIdentity {
    pub pid: u32,
    /// When the process started, in microseconds since boot (from `/proc/<pid>/stat`).
    pub start_time_micros: u64,
}

impl fmt::Display for ProcessIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "pid {} (started at {} µs)",
            self.pid, self.start_time_micros
        )
    }
}

/// What looking a process identity up in the process table found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Observation {
    /// The pid exists and its start time is the recorded one.
    Matching,
    /// The pid exists but the start time could not be read or compared; counted as live, because
    /// the protocol prefers overcounting a slot to starting one runner too many.
    Ambiguous,
    /// No process with that pid, or a different process (another start time) reuses the pid.
    Gone,
}

impl Observation {
    pub fn is_live(self) -> bool {
        !matches!(self, Observation::Gone)
    }
}

/// The one question the core asks the world. Production answers from `/proc`, the model from its
/// own process table, tests from fixtures.
pub trait Liveness {
    fn observe(&self, identity: &ProcessIdentity) -> Observation;

    /// Whether any process of a recorded work may still be alive. Production scans `/proc` for the
    /// work's environment marker and its process group, the model answers from its own table of
    /// works. The default is [`Observation::Ambiguous`]: an observer that cannot see works must
    /// never let a turn run twice, so it makes reconcile ask for the kill again instead.
    fn observe_work(&self, work: &WorkRecord) -> Observation {
        let _ = work;
        Observation::Ambiguous
    }

    fn is_live(&self, identity: &ProcessIdentity) -> bool {
        self.observe(identity).is_live()
    }

    /// Whether the host this step runs on may start a turn (reserve a runner slot for one). False
    /// on a drained host (spec/fleet.md, "Draining a host"):
    /// every reservation then answers as if the cap were reached, so a submit parks its row, a
    /// finish or reconcile starts nothing and a dead executor's row is parked, and an undrained
    /// host's next section starts them. It never stops running work. The default (one host, the
    /// models that do not drain) is true.
    fn may_start(&self) -> bool {
        true
    }
}

impl<F: Fn(&ProcessIdentity) -> Observation> Liveness for F {
    fn observe(&self, identity: &ProcessIdentity) -> Observation {
        self(identity)
    }
}
