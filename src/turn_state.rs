//! The words for where a turn stands, defined once: `status` (its table and `--json`), `logs`,
//! `wait`, the help texts, the man page, README.md and spec/turns.md ("States of a turn") all
//! use these words, and a test (`tests/cli_states.rs`) compares README.md, the spec and `--help`
//! with [`TurnState::ALL`], so no second list can drift from this one.

use crate::tasks::TurnOutcome;

/// Where a turn stands: waiting to start, running, or how it ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TurnState {
    Queued,
    Paused,
    Delayed,
    Held,
    Waiting,
    Starting,
    Running,
    Recording,
    Orphaned,
    Completed,
    Failed,
    TimedOut,
    Cancelled,
    Unstartable,
    Dropped,
    Superseded,
    DependencyFailed,
}

impl TurnState {
    /// Every state, in the order the help texts list them: before the start, running, ended.
    pub const ALL: [TurnState; 17] = [
        TurnState::Queued,
        TurnState::Paused,
        TurnState::Delayed,
        TurnState::Held,
        TurnState::Waiting,
        TurnState::Starting,
        TurnState::Running,
        TurnState::Recording,
        TurnState::Orphaned,
        TurnState::Completed,
        TurnState::Failed,
        TurnState::TimedOut,
        TurnState::Cancelled,
        TurnState::Unstartable,
        TurnState::Dropped,
        TurnState::Superseded,
        TurnState::DependencyFailed,
    ];

    /// The state's one word, the same in the table, in `--json` and in every message. For an
    /// ended turn it is its record's outcome as stored (`timed_out`, `dependency_failed`), which
    /// is also what hooks get in `TOLLGATE_OUTCOME`.
    pub fn word(self) -> &'static str {
        match self {
            TurnState::Queued => "queued",
            TurnState::Paused => "paused",
            TurnState::Delayed => "delayed",
            TurnState::Held => "held",
            TurnState::Waiting => "waiting",
            TurnState::Starting => "starting",
            TurnState::Running => "running",
            TurnState::Recording => "recording",
            TurnState::Orphaned => "orphaned",
            TurnState::Completed => "completed",
            TurnState::Failed => "failed",
            TurnState::TimedOut => "timed_out",
            TurnState::Cancelled => "cancelled",
            TurnState::Unstartable => "unstartable",
            TurnState::Dropped => "dropped",
            TurnState::Superseded => "superseded",
            TurnState::DependencyFailed => "dependency_failed",
        }
    }

    /// What the state means, in a few words (the help texts' and README's gloss).
    pub fn meaning(self) -> &'static str {
        match self {
            TurnState::Queued => "waits for a free worker slot or its task's running limit",
            TurnState::Paused => "queued, held by `tollgate pause` (with its time if also delayed)",
            TurnState::Delayed => {
                "queued until its time (--delay/--at, a debounce, a retry's backoff)"
            }
            TurnState::Held => "waits for the turns of its --after/--after-success",
            TurnState::Waiting => "waits in its task's line or debounce (its strategy)",
            TurnState::Starting => "a runner is being started for it",
            TurnState::Running => "its command runs",
            TurnState::Recording => "its command ended; the result waits for disk space",
            TurnState::Orphaned => "its submitter or runner died: `tollgate reconcile` repairs it",
            TurnState::Completed => "its command exited 0",
            TurnState::Failed => "its command exited non-zero or was killed by a signal",
            TurnState::TimedOut => "killed at its --timeout",
            TurnState::Cancelled => "ended by `tollgate cancel`",
            TurnState::Unstartable => "its command could not be started",
            TurnState::Dropped => "refused at submit by the task's `drop` strategy",
            TurnState::Superseded => "replaced by a newer turn while it waited",
            TurnState::DependencyFailed => {
                "never ran: a turn of its --after-success did not succeed"
            }
        }
    }

    /// The word `status --json` and `logs --json` gave this state before the words were made
    /// one list (kept as `legacy_state` for one version): a queued turn was `parked` whatever
    /// held it; every other word is unchanged.
    pub fn legacy_word(self) -> &'static str {
        match self {
            TurnState::Queued | TurnState::Paused | TurnState::Delayed => "parked",
            other => other.word(),
        }
    }

    /// The state of a turn whose record holds `outcome`.
    pub fn of_outcome(outcome: TurnOutcome) -> TurnState {
        match outcome {
            TurnOutcome::Completed => TurnState::Completed,
            TurnOutcome::Failed => TurnState::Failed,
            TurnOutcome::Cancelled => TurnState::Cancelled,
            TurnOutcome::Unstartable => TurnState::Unstartable,
            TurnOutcome::Dropped => TurnState::Dropped,
            TurnOutcome::Superseded => TurnState::Superseded,
            TurnOutcome::TimedOut => TurnState::TimedOut,
            TurnOutcome::DependencyFailed => TurnState::DependencyFailed,
        }
    }

    /// Whether the turn has ended (its record holds an outcome): nothing will run it any more.
    pub fn ended(self) -> bool {
        matches!(
            self,
            TurnState::Completed
                | TurnState::Failed
                | TurnState::TimedOut
                | TurnState::Cancelled
                | TurnState::Unstartable
                | TurnState::Dropped
                | TurnState::Superseded
                | TurnState::DependencyFailed
        )
    }

    /// Whether the turn is not started yet and waits for something (a slot, a pause, a time, its
    /// dependencies, its task's line).
    pub fn waits(self) -> bool {
        matches!(
            self,
            TurnState::Queued
                | TurnState::Paused
                | TurnState::Delayed
                | TurnState::Held
                | TurnState::Waiting
        )
    }
}

impl std::fmt::Display for TurnState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.word())
    }
}

impl serde::Serialize for TurnState {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.word())
    }
}

/// The "States:" paragraph of `status --help` (and of the man page): every word with its
/// meaning, from [`TurnState::ALL`].
pub fn states_help() -> String {
    let mut text = String::from("States (the same words in the table, --json, logs and wait):\n");
    for state in TurnState::ALL {
        text.push_str(&format!("  {:<18} {}\n", state.word(), state.meaning()));
    }
    text.push_str(
        "A retried turn shows its attempt (`failed 1/3`). `status --json` also carries \
         `legacy_state`, the word of earlier versions (`parked` for queued, paused and delayed), \
         for one version more.",
    );
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_unique_and_ended_states_are_the_outcomes() {
        let words: std::collections::BTreeSet<&str> =
            TurnState::ALL.iter().map(|s| s.word()).collect();
        assert_eq!(words.len(), TurnState::ALL.len());
        for state in TurnState::ALL {
            assert!(!(state.ended() && state.waits()), "{state}");
        }
        // An ended state's word is its outcome's serde word (what records and hooks carry).
        for outcome in [
            TurnOutcome::Completed,
            TurnOutcome::Failed,
            TurnOutcome::Cancelled,
            TurnOutcome::Unstartable,
            TurnOutcome::Dropped,
            TurnOutcome::Superseded,
            TurnOutcome::TimedOut,
            TurnOutcome::DependencyFailed,
        ] {
            let state = TurnState::of_outcome(outcome);
            assert!(state.ended());
            assert_eq!(
                serde_json::to_value(outcome).expect("json"),
                serde_json::json!(state.word())
            );
        }
    }
}
