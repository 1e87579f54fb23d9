//! The rules that make and end turn records inside a section (spec/turns.md): which number a new
//! turn gets, what its first record says, and how a turn that never ran is ended. Steps call them
//! on their [`Draft`]; the store only persists what they wrote.

use crate::admission::Strategy;
use crate::argv::{Argv, Env};
use crate::records::{
    check_turn, DeliveryMeta, TaskRecord, TurnOutcome, TurnRecord, TASK_FORMAT_VERSION,
};
use crate::section::{Draft, Halt, Need, TurnSlotRef};
use crate::slots::{Dependency, RetryPlan, SlotError, TurnKey};
use std::path::PathBuf;

/// What a new turn's first record carries besides its key, its id and its submit time.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct NewTurn {
    pub argv: Argv,
    pub cwd: Option<PathBuf>,
    pub env: Env,
    pub attached: bool,
    pub labels: Vec<String>,
    pub timeout_millis: Option<u64>,
    pub after: Vec<Dependency>,
    pub retry: Option<RetryPlan>,
    /// The turn (of the same task) whose failure this one retries.
    pub retry_of: Option<u32>,
    pub delivery: Option<DeliveryMeta>,
}

/// Hands out the next turn number of `task`, writing the task's record with its counter moved on
/// (and `strategy` when given; a task without a record is created). The number is the counter's
/// when that place is free; when it is taken (a deleted task record, a rewound counter) the turn
/// gets the first number after the highest recorded one, the existing records stay as they are,
/// and a warning says so. A task whose numbers are used up refuses new turns.
pub fn claim_turn(
    draft: &mut Draft<'_>,
    task: &str,
    strategy: Option<Strategy>,
    now_millis: u64,
) -> Result<(TurnKey, Strategy), Halt> {
    let mut record = draft.task(task)?.cloned().unwrap_or(TaskRecord {
        version: TASK_FORMAT_VERSION,
        name: task.to_string(),
        created_at_millis: now_millis,
        next_turn: 1,
        strategy: Strategy::default(),
    });
    debug_assert!(record.next_turn >= 1, "turns are numbered from 1");
    if let Some(strategy) = strategy {
        record.strategy = strategy;
    }
    let wanted = TurnKey::new(task, record.next_turn);
    next_number(task, wanted.turn)?;
    let key = if matches!(draft.slot(&wanted)?, TurnSlotRef::Free) {
        wanted
    } else {
        let highest = draft.numbers(task)?.last().copied().unwrap_or(0);
        let free = TurnKey::new(task, next_number(task, highest.max(wanted.turn))?);
        next_number(task, free.turn)?;
        if !matches!(draft.slot(&free)?, TurnSlotRef::Free) {
            return Err(SlotError::TurnPlaceTaken { key: free }.into());
        }
        draft.warn(format!(
            "the home already holds turn {} of task {task:?} (its task record was deleted or its \
             next_turn rewound); the new turn is {} and the existing records are kept",
            wanted.turn, free.turn
        ));
        free
    };
    record.next_turn = next_number(task, key.turn)?;
    let strategy = record.strategy;
    draft.write_task(record);
    debug_assert!(key.turn >= 1);
    Ok((key, strategy))
}

/// The number after `turn`, or the refusal of a task that has used every number.
fn next_number(task: &str, turn: u32) -> Result<u32, Halt> {
    turn.checked_add(1).ok_or_else(|| {
        Halt::Refused(SlotError::TurnNumbersExhausted {
            task: task.to_string(),
        })
    })
}

/// Writes the first record of the turn `key` (claimed by [`claim_turn`] in the same step), with
/// the short id `id` (the `queue_id` of its row; `None` when it got none).
pub fn create_turn(
    draft: &mut Draft<'_>,
    key: TurnKey,
    new: NewTurn,
    id: Option<u64>,
    now_millis: u64,
) -> Result<TurnRecord, Halt> {
    let record = TurnRecord {
        version: TASK_FORMAT_VERSION,
        key,
        argv: new.argv,
        cwd: new.cwd,
        env: new.env,
        attached: new.attached,
        submitted_at_millis: now_millis,
        started_at_millis: None,
        runner: None,
        host: None,
        ended_at_millis: None,
        exit_code: None,
        signal: None,
        outcome: None,
        error: None,
        delivery: new.delivery,
        id,
        labels: new.labels,
        timeout_millis: new.timeout_millis,
        after: new.after,
        retry: new.retry,
        retry_of: new.retry_of,
        retried_as: None,
        failed_dependency: None,
    };
    check_turn(&record, &record.key).map_err(|detail| SlotError::RecordInvalid {
        key: record.key.clone(),
        detail,
    })?;
    draft.write_turn(record.clone(), true);
    Ok(record)
}

/// Ends the turn `key`, which never ran, with `outcome` (dropped, superseded, cancelled), unless
/// its record is settled already or it has none.
pub fn end_unrun(
    draft: &mut Draft<'_>,
    key: &TurnKey,
    outcome: TurnOutcome,
    now_millis: u64,
) -> Result<(), Halt> {
    if let Some(turn) = draft.turn(key)?.filter(|t| !t.is_settled()) {
        let mut turn = turn.clone();
        turn.outcome = Some(outcome);
        turn.ended_at_millis = Some(now_millis);
        draft.write_turn(turn, false);
    }
    Ok(())
}

/// Ends the turn `key`, which never ran, as dependency-failed: its `--after-success` dependency
/// `cause` ended other than completed. Its error names the dependency, its id and how it ended.
pub fn end_dependency_failed(
    draft: &mut Draft<'_>,
    key: &TurnKey,
    cause: &TurnKey,
    now_millis: u64,
) -> Result<(), Halt> {
    draft.require(&Need {
        turns: [key.clone(), cause.clone()].into_iter().collect(),
        ..Need::default()
    })?;
    let Some(turn) = draft.turn(key)?.filter(|t| !t.is_settled()).cloned() else {
        return Ok(());
    };
    let cause_record = draft.turn(cause)?;
    let how = match cause_record.and_then(|t| t.outcome) {
        Some(outcome) => format!("ended {}", outcome.word()),
        None => "did not complete".to_string(),
    };
    let id = match cause_record.and_then(|t| t.id) {
        Some(id) => format!(" (id {id})"),
        None => String::new(),
    };
    let mut turn = turn;
    turn.outcome = Some(TurnOutcome::DependencyFailed);
    turn.ended_at_millis = Some(now_millis);
    turn.failed_dependency = Some(cause.clone());
    turn.error = Some(format!(
        "not run: its dependency {cause}{id} {how} (--after-success)"
    ));
    draft.write_turn(turn, false);
    Ok(())
}
