//! The hidden `tollgate worker` commands: a detached runner, and the waker of a deadline.

use super::common::me;
use super::{exit, CliError};
use crate::home::Home;
use crate::protocol::slots::{SlotToken, TurnKey};
use crate::reconcile as reconcile_shell;
use crate::runner::{run_worker, WorkerOutcome};
use crate::runtime::Runtime;
use crate::tasks;
use std::path::PathBuf;
use std::time::Duration;

pub fn worker_runner(
    home: Option<PathBuf>,
    task: &str,
    turn: u32,
    slot_token: &str,
    log_to_turn_folder: bool,
) -> Result<i32, CliError> {
    let token: SlotToken = slot_token
        .parse()
        .map_err(|e| CliError::Usage(format!("--slot-token: {e}")))?;
    let home = Home::resolve(home)?;
    let key = TurnKey::new(task, turn);
    if log_to_turn_folder {
        crate::runner::log::to_turn_folder(&home, &key);
    }
    let rt = Runtime::open(home)?;
    let stamp = || humantime::format_rfc3339_millis(std::time::SystemTime::now());
    match run_worker(&rt, &key, token)? {
        WorkerOutcome::Ran { outcome, next } => {
            eprintln!("[{}] {key}: ran, outcome {outcome:?}", stamp());
            if let Some(next) = next {
                eprintln!("[{}] started the next parked row: {next:?}", stamp());
            }
            Ok(exit::OK)
        }
        WorkerOutcome::Refused { holder } => {
            eprintln!("[{}] {key}: refused, held by {holder}", stamp());
            Ok(exit::FAILED)
        }
        WorkerOutcome::AlreadySettled => {
            eprintln!("[{}] {key}: already ended, left the queue", stamp());
            Ok(exit::OK)
        }
    }
}

/// The longest a waker sleeps; a debounce period beyond it starts at the next finish or reconcile.
const MAX_WAKE_SLEEP_MILLIS: u64 = 7 * 24 * 3600 * 1000;

pub fn worker_wake(home: Option<PathBuf>, at_millis: u64) -> Result<i32, CliError> {
    let wait_millis = at_millis
        .saturating_sub(tasks::now_millis())
        .min(MAX_WAKE_SLEEP_MILLIS);
    // Watch the home before opening it: opening creates what is missing, and a waker started
    // just before its home was deleted would make the home again and sleep on for it.
    let home = Home::resolve(home)?;
    if !crate::watch::sleep_unless_removed(home.root(), Duration::from_millis(wait_millis)) {
        // The home is gone (deleted or moved): nothing is left to wake.
        return Ok(exit::OK);
    }
    let rt = Runtime::open(home)?;
    reconcile_shell::reconcile(&rt, me()?)?;
    Ok(exit::OK)
}
