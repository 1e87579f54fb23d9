//! Terminal outcomes: how every delivery, turn or item observably ends.

use serde::{Deserialize, Serialize};
use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    Completed,
    Failed,
    /// The scope's strategy is `drop` and a turn was running.
    Dropped,
    /// A newer delivery replaced this parked waiter (`queue`, `debounce`).
    Superseded,
    TimedOut,
    /// The holder of the delivery went away without settling it.
    Abandoned,
    /// Refused at the gate; never acknowledged, never marked.
    AdmissionRejected,
    Cancelled,
    /// Still retained when shutdown's drain ran out; recorded with its turn for the next instance.
    HandedOffAtShutdown,
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = match self {
            Outcome::Completed => "completed",
            Outcome::Failed => "failed",
            Outcome::Dropped => "dropped",
            Outcome::Superseded => "superseded",
            Outcome::TimedOut => "timed-out",
            Outcome::Abandoned => "abandoned",
            Outcome::AdmissionRejected => "admission-rejected",
            Outcome::Cancelled => "cancelled",
            Outcome::HandedOffAtShutdown => "handed-off-at-shutdown",
        };
        f.write_str(text)
    }
}
