//! Task and turn records as values: what a section's step reads and writes besides the queue's
//! rows (spec/store.md, "Records"). Where they are stored is the shell's business (the store's
//! tables); what they say, and the rules a record must satisfy to be written or loaded, are here,
//! so that the steps which create and end turns, and the models that check those steps, work on
//! the very records production persists.

use crate::admission::{Strategy, TurnEnd};
use crate::argv::{Argv, Env};
use crate::fleet::HostId;
use crate::slots::{Dependency, Ended, ProcessIdentity, RetryPlan, TurnKey};
use serde::{Deserialize, Serialize};
use std::ffi::OsString;
use std::path::PathBuf;

/// The format version of task and turn records this core writes and understands.
pub const TASK_FORMAT_VERSION: u32 = 1;

/// Arguments of one command: a record with more is refused (the config's hooks and routes are
/// held to the same bound).
pub const MAX_ARGV: usize = 4096;

fn default_task_version() -> u32 {
    TASK_FORMAT_VERSION
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TaskRecord {
    #[serde(default = "default_task_version")]
    pub version: u32,
    pub name: String,
    #[serde(default)]
    pub created_at_millis: u64,
    /// The number the next turn gets; turns are numbered 1, 2, …
    #[serde(default = "one")]
    pub next_turn: u32,
    /// What a new turn does while the task is busy (`submit --strategy` sets it).
    #[serde(default)]
    pub strategy: Strategy,
}

fn one() -> u32 {
    1
}

/// How a turn ended (or where it stands).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TurnOutcome {
    /// The command exited 0.
    Completed,
    /// The command exited non-zero or was killed by a signal.
    Failed,
    /// `tollgate cancel` ended it.
    Cancelled,
    /// The command could not be started at all (bad cwd, missing program).
    Unstartable,
    /// Refused at submit: the task's strategy is `drop` and a turn was running.
    Dropped,
    /// A newer turn replaced it while it waited (strategy `queue` or `debounce`).
    Superseded,
    /// It ran longer than its `submit --timeout`; the runner killed its whole unit.
    TimedOut,
    /// Never ran: a turn it waited for with `submit --after-success` ended other than completed
    /// with exit 0 ([`TurnRecord::failed_dependency`] names it).
    DependencyFailed,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TurnRecord {
    #[serde(default = "default_task_version")]
    pub version: u32,
    #[serde(flatten)]
    pub key: TurnKey,
    /// The command and its arguments, as bytes (spec/turns.md: UTF-8 ones as plain strings).
    #[serde(with = "crate::argv::words")]
    pub argv: Argv,
    #[serde(default)]
    pub cwd: Option<PathBuf>,
    /// The environment the command runs with (the submitter's, plus `--env` overrides), as bytes.
    #[serde(default, with = "crate::argv::env")]
    pub env: Env,
    #[serde(default)]
    pub attached: bool,
    #[serde(default)]
    pub submitted_at_millis: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at_millis: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runner: Option<ProcessIdentity>,
    /// The host whose runner (or attached submitter) took the turn over: written in the
    /// take-over's record on a PostgreSQL home (spec/fleet.md, "Operations"); `None` on a SQLite
    /// home and in records written before hosts were recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<HostId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at_millis: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<TurnOutcome>,
    /// Why the command could not start, when it could not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The webhook delivery this turn serves (`tollgate serve`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery: Option<DeliveryMeta>,
    /// The turn's short id (`tollgate logs 17`): the `queue_id` of the row it got when it was
    /// submitted, so unique in the home and never reused. `None` for a turn that never got a row
    /// (dropped at submit) and for records written before ids existed; those are named `TASK:N`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<u64>,
    /// Free-form labels given at submit (`--label`), in the order given, without duplicates.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub labels: Vec<String>,
    /// How long the command may run (`submit --timeout`) before the runner kills its unit and
    /// the turn ends `timed_out`; `None`: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_millis: Option<u64>,
    /// The turns it waits for (`submit --after`/`--after-success`), as given at submit.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<Dependency>,
    /// `submit --retry`: which attempt this turn is, of how many, and the backoff.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetryPlan>,
    /// The turn (of the same task) whose failure this attempt retries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_of: Option<u32>,
    /// The turn (of the same task) that retries this failed one: where `wait` goes on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retried_as: Option<u32>,
    /// For a `dependency_failed` turn: the dependency whose end settled it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_dependency: Option<TurnKey>,
}

/// Which delivery a turn serves: what a restarted `serve` needs to re-adopt it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct DeliveryMeta {
    /// The serving instance's delivery id (unique per home: a v7 UUID).
    pub id: String,
    pub adapter: String,
    /// The tenant's installation (the adapter is the other half of the tenant).
    pub tenant: String,
    /// The event identity it was deduplicated on.
    pub identity: String,
    /// When it was admitted (ms since the epoch).
    #[serde(default)]
    pub admitted_at_millis: u64,
    /// The route it came in on (part of its dedupe key); empty in records that predate it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub route: String,
}

impl TurnRecord {
    pub fn is_settled(&self) -> bool {
        self.outcome.is_some()
    }
}

impl TurnOutcome {
    /// The outcome's name in records and `--json` (its serialised form).
    pub fn word(self) -> &'static str {
        match self {
            TurnOutcome::Completed => "completed",
            TurnOutcome::Failed => "failed",
            TurnOutcome::Cancelled => "cancelled",
            TurnOutcome::Unstartable => "unstartable",
            TurnOutcome::Dropped => "dropped",
            TurnOutcome::Superseded => "superseded",
            TurnOutcome::TimedOut => "timed_out",
            TurnOutcome::DependencyFailed => "dependency_failed",
        }
    }

    /// How a command that ended is recorded: `completed` for exit 0, else `failed`, unless its
    /// runner stopped it for a cancel: then `cancelled`, except for an exit 0 (the command ran
    /// to its end before the signal reached it). A command killed by a signal has no exit code.
    pub fn of_command(exit_code: Option<i32>, stopped_for_cancel: bool) -> TurnOutcome {
        match exit_code {
            Some(0) => TurnOutcome::Completed,
            _ if stopped_for_cancel => TurnOutcome::Cancelled,
            _ => TurnOutcome::Failed,
        }
    }

    /// How a turn's end counts for the delivery it serves (the delivery-outcome rule,
    /// [`crate::admission::delivery_outcome`], takes it from here).
    pub fn delivery_end(self) -> TurnEnd {
        match self {
            TurnOutcome::Completed => TurnEnd::Completed,
            TurnOutcome::Failed => TurnEnd::Failed,
            TurnOutcome::Unstartable => TurnEnd::Unstartable,
            TurnOutcome::Cancelled => TurnEnd::Cancelled,
            TurnOutcome::Dropped => TurnEnd::Dropped,
            TurnOutcome::Superseded => TurnEnd::Superseded,
            // For a delivery, a turn cut off at its timeout failed.
            TurnOutcome::TimedOut => TurnEnd::Failed,
            // Serve never submits with dependencies; were it to, the turn did not run.
            TurnOutcome::DependencyFailed => TurnEnd::Cancelled,
        }
    }

    /// How a turn that ended with `outcome` counts for the turns that wait for it (`--after`,
    /// `--after-success`) and for its retry plan (`--retry`): only a command that ran and did not
    /// succeed is retried; a turn stopped by a decision (cancelled, dropped, superseded, or never
    /// run because its own dependency failed) is not. `None`: not ended, or no record.
    pub fn ended(outcome: Option<TurnOutcome>) -> Ended {
        match outcome {
            Some(TurnOutcome::Completed) => Ended::Succeeded,
            Some(TurnOutcome::Failed | TurnOutcome::TimedOut | TurnOutcome::Unstartable) => {
                Ended::Failed
            }
            Some(
                TurnOutcome::Cancelled
                | TurnOutcome::Dropped
                | TurnOutcome::Superseded
                | TurnOutcome::DependencyFailed,
            )
            | None => Ended::Stopped,
        }
    }
}

/// The loader's checks on a task record.
pub fn check_task(record: &TaskRecord) -> Result<(), String> {
    if record.version > TASK_FORMAT_VERSION {
        return Err(format!(
            "format version {} is newer than this tollgate understands ({TASK_FORMAT_VERSION})",
            record.version
        ));
    }
    if record.next_turn == 0 {
        return Err("next_turn is 0; turns are numbered from 1".to_string());
    }
    Ok(())
}

/// The loader's checks on a turn record; `expected` is the turn its location names (a record that
/// names another turn would make the runner write over that turn's record).
pub fn check_turn(turn: &TurnRecord, expected: &TurnKey) -> Result<(), String> {
    if turn.version > TASK_FORMAT_VERSION {
        return Err(format!(
            "format version {} is newer than this tollgate understands ({TASK_FORMAT_VERSION})",
            turn.version
        ));
    }
    if &turn.key != expected {
        return Err(format!(
            "it names {} but lies where {expected} belongs",
            turn.key
        ));
    }
    if turn.key.turn == 0 {
        return Err("turn 0; turns are numbered from 1".to_string());
    }
    if turn.argv.len() > MAX_ARGV {
        return Err(format!("more than {MAX_ARGV} arguments"));
    }
    Ok(())
}

/// Longest program part of a generated task name (the id suffix comes on top).
const GENERATED_NAME_BASE_BYTES: usize = 32;
/// The first name a generated task takes for a turn of `argv` whose short id is `id`:
/// `<base>-<id>`, which it takes unless that task exists (only after the queue's id counter
/// started again). A submit guesses its generated name with it before its section, from the
/// store's hint for `id`.
pub fn first_generated_name(argv: &[OsString], id: u64) -> String {
    format!("{}-{id}", readable_base(argv))
}

/// The program part of a generated task name: letters, digits, '.', '_' and '-' of the program's
/// basename (or of a shell script's first word), at most [`GENERATED_NAME_BASE_BYTES`], `t` if
/// nothing is left.
pub fn readable_base(argv: &[OsString]) -> String {
    let text = |i: usize| argv.get(i).map(|w| w.to_string_lossy());
    let program = text(0).unwrap_or_default();
    let basename = |word: &str| word.rsplit('/').next().unwrap_or("").to_string();
    let mut word = basename(&program);
    let shells = ["sh", "bash", "dash", "zsh", "ksh", "fish"];
    if shells.contains(&word.as_str()) && text(1).as_deref() == Some("-c") {
        if let Some(script) = text(2) {
            if let Some(first) = script.split_whitespace().next() {
                word = basename(first);
            }
        }
    }
    let cleaned: String = word
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '-'
            }
        })
        .collect();
    let trimmed = cleaned.trim_start_matches(['.', '-']);
    let mut base: String = trimmed.chars().take(GENERATED_NAME_BASE_BYTES).collect();
    while base.ends_with('-') {
        base.pop();
    }
    if base.is_empty() {
        "t".to_string()
    } else {
        base
    }
}

#[cfg(test)]
mod name_tests {
    use super::readable_base;

    fn base(argv: &[&str]) -> String {
        readable_base(
            &argv
                .iter()
                .map(std::ffi::OsString::from)
                .collect::<Vec<_>>(),
        )
    }

    #[test]
    fn generated_names_come_from_the_program_and_stay_valid() {
        assert_eq!(base(&["/usr/bin/make", "test"]), "make");
        assert_eq!(base(&["sh", "-c", "./backup.sh --all; echo"]), "backup.sh");
        assert_eq!(base(&["bash", "-c", ""]), "bash");
        assert_eq!(base(&["./.hidden"]), "hidden");
        assert_eq!(base(&["wéird prog"]), "w-ird-prog");
        assert_eq!(base(&["///"]), "t");
        assert_eq!(base(&[&"x".repeat(100)]).len(), 32);
        for argv in [&["..."][..], &["-"], &["a b"], &["/usr/bin/python3.12"]] {
            let name = format!("{}-17", base(argv));
            assert!(crate::slots::validate_task_name(&name).is_ok(), "{name}");
        }
    }
}

#[cfg(test)]
mod word_tests {
    use super::TurnOutcome;
    use crate::slots::Ended;

    /// What a command's end is recorded as: its own result, unless its runner stopped it for a
    /// cancel, which wins over everything but an exit 0; and which of those a retry repeats.
    #[test]
    fn a_cancel_wins_over_a_failure_but_not_over_a_success() {
        use TurnOutcome::*;
        assert_eq!(TurnOutcome::of_command(Some(0), false), Completed);
        assert_eq!(TurnOutcome::of_command(Some(0), true), Completed);
        assert_eq!(TurnOutcome::of_command(Some(1), false), Failed);
        assert_eq!(TurnOutcome::of_command(Some(143), true), Cancelled);
        assert_eq!(TurnOutcome::of_command(None, false), Failed);
        assert_eq!(TurnOutcome::of_command(None, true), Cancelled);
        let retried: Vec<TurnOutcome> = [
            Completed,
            Failed,
            Cancelled,
            Unstartable,
            Dropped,
            Superseded,
            TimedOut,
            DependencyFailed,
        ]
        .into_iter()
        .filter(|o| TurnOutcome::ended(Some(*o)) == Ended::Failed)
        .collect();
        assert_eq!(retried, [Failed, Unstartable, TimedOut]);
        assert_eq!(TurnOutcome::ended(None), Ended::Stopped);
    }

    /// The word is the serialised name, so a record's text and a message agree.
    #[test]
    fn an_outcome_word_is_its_serialised_name() {
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
            let json = serde_json::to_value(outcome).expect("serialise");
            assert_eq!(json.as_str(), Some(outcome.word()));
        }
    }
}
