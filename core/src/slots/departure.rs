//! A row's departure with its records (spec/slots.md, "Dependencies and retries"): the one rule
//! every section where a row leaves the queue applies (a runner's finish, a cancel's removal,
//! reconcile removing a settled or forgotten row, a superseded waiter). It reads the leaving
//! turn's record, decides with [`depart`] whether a retry is due and which dependents settle,
//! and writes every record that decision implies into the section's [`Draft`]: the retry's first
//! record (numbered by its task's counter, with the id its row got), `retried_as` on the leaving
//! record, and the dependency-failed ends of the dependents. The queue's change and the records
//! commit in the one transaction of the section, so nothing here survives a crash without the
//! rest.

use super::deps::{depart, retry_due, DepartInput};
use super::{ProcessIdentity, QueueState, TurnKey};
use crate::records::TurnOutcome;
use crate::section::{Draft, Halt, Need};
use crate::turns::{claim_turn, create_turn, end_dependency_failed, NewTurn};

/// Who makes a row leave, and when.
#[derive(Clone, Copy, Debug)]
pub struct Leave<'a> {
    /// The turn whose row leaves (or left) the queue in this section.
    pub key: &'a TurnKey,
    /// Who enqueues a retry's row (it is parked at once).
    pub me: ProcessIdentity,
    pub now_millis: u64,
}

/// What a departure leaves for after the commit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Left {
    /// A retry waits out its backoff: a waker must start it then.
    pub wake_at_millis: Option<u64>,
    /// The turn number of the retry (what the leaving record's `retried_as` now says).
    pub retried_as: Option<u32>,
}

/// The departure of `input.key`'s row, on `state` (the section's part) and `draft` (its records,
/// with whatever the section wrote before: a finish writes the turn's result first). A turn
/// without a record departs as stopped: nothing retries it and its `--after-success` dependents
/// settle.
pub fn leave(
    state: &mut QueueState,
    draft: &mut Draft<'_>,
    input: Leave<'_>,
) -> Result<Left, Halt> {
    let key = input.key;
    let record = draft.turn(key)?.cloned();
    let ended = TurnOutcome::ended(record.as_ref().and_then(|t| t.outcome));
    let plan = record.as_ref().and_then(|t| t.retry);
    // A turn a cancel asked for is not retried, however its command ended (`depart` says so too:
    // a retry's record is made only when its row will be).
    let cancelled = state.row(key).is_some_and(|r| r.cancel_requested);
    let due = retry_due(ended, plan).filter(|_| !cancelled);
    let retry = match (due, &record) {
        (Some(next), Some(failed)) => {
            // A departure repeated after a rolled-back section finds no retry; one repeated on a
            // record that names its retry already (a settled turn's row left again) reuses it.
            let retry_key = match failed.retried_as {
                Some(turn) => TurnKey::new(key.task.clone(), turn),
                None => claim_turn(draft, &key.task, None, input.now_millis)?.0,
            };
            Some((retry_key, next, failed.clone()))
        }
        _ => None,
    };
    let departure = depart(
        state,
        DepartInput {
            key,
            ended,
            retry: plan,
            retry_key: retry.as_ref().map(|(k, ..)| k),
            me: input.me,
            now_millis: input.now_millis,
        },
    )?;
    debug_assert_eq!(
        departure.retry.is_some(),
        retry.is_some(),
        "the core's depart and the record rule disagree on a retry"
    );
    let mut retried_as = None;
    if let (Some(requeued), Some((retry_key, next, failed))) = (&departure.retry, retry) {
        debug_assert_eq!(requeued.key, retry_key);
        if failed.retried_as.is_none() {
            let id = state.row(&retry_key).map(|r| r.queue_id);
            debug_assert!(id.is_some(), "a new retry's row is enqueued by depart");
            let new = NewTurn {
                argv: failed.argv.clone(),
                cwd: failed.cwd.clone(),
                env: failed.env.clone(),
                attached: false,
                labels: failed.labels.clone(),
                timeout_millis: failed.timeout_millis,
                after: Vec::new(),
                retry: Some(next),
                retry_of: Some(key.turn),
                delivery: None,
            };
            create_turn(draft, retry_key.clone(), new, id, input.now_millis)?;
            let mut leaving = failed;
            leaving.retried_as = Some(retry_key.turn);
            draft.write_turn(leaving, false);
        }
        retried_as = Some(retry_key.turn);
    }
    // Every settled dependent and its cause read in one round, not one round each.
    draft.require(&Need {
        turns: departure
            .dependency_failed
            .iter()
            .flat_map(|(dependent, cause)| [dependent.clone(), cause.clone()])
            .collect(),
        ..Need::default()
    })?;
    for (dependent, cause) in &departure.dependency_failed {
        debug_assert!(
            state.row(dependent).is_none(),
            "a settled dependent kept its row"
        );
        end_dependency_failed(draft, dependent, cause, input.now_millis)?;
    }
    Ok(Left {
        wake_at_millis: departure.wake_at_millis(input.now_millis),
        retried_as,
    })
}
