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
use super::{ProcessIdentity, QueueState, RetryPlan, TurnKey};
use crate::records::{TurnOutcome, TurnRecord};
#[cfg(doc)]
use crate::section::Writes;
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
    let retry = match (due, record) {
        (Some(next), Some(failed)) => Some(planned_retry(draft, key, next, failed, input)?),
        _ => None,
    };
    let departure = depart(
        state,
        DepartInput {
            key,
            ended,
            retry: plan,
            retry_key: retry.as_ref().map(|r| &r.key),
            me: input.me,
            now_millis: input.now_millis,
        },
    )?;
    debug_assert_eq!(
        departure.retry.is_some(),
        retry.is_some(),
        "the core's depart and the record rule disagree on a retry"
    );
    let retried_as = match (&departure.retry, retry) {
        (Some(requeued), Some(retry)) => {
            debug_assert_eq!(requeued.key, retry.key);
            Some(record_retry(state, draft, key, retry, input.now_millis)?)
        }
        _ => None,
    };
    settle_dependents(state, draft, &departure.dependency_failed, input.now_millis)?;
    Ok(Left {
        wake_at_millis: departure.wake_at_millis(input.now_millis),
        retried_as,
    })
}

/// A retry the departure is about to enqueue: its turn, whether its record exists already, its
/// plan, and the leaving record it repeats.
struct Retry {
    key: TurnKey,
    recorded: bool,
    next: RetryPlan,
    failed: TurnRecord,
}

/// The retry of the leaving turn `key` whose record `failed` says one is due (`next`).
///
/// A departure repeated after a rolled-back section finds no retry; one repeated on a record that
/// names its retry already (a settled turn's row left again) reuses it, and makes its record when
/// that place is empty: the store writes the leaving record before its retry's
/// ([`Writes::in_order`]), so a crash between the two on record files leaves the name without the
/// record.
fn planned_retry(
    draft: &mut Draft<'_>,
    key: &TurnKey,
    next: RetryPlan,
    failed: TurnRecord,
    input: Leave<'_>,
) -> Result<Retry, Halt> {
    let (retry_key, recorded) = match failed.retried_as {
        Some(turn) => {
            let named = TurnKey::new(key.task.clone(), turn);
            let recorded = draft.turn(&named)?.is_some();
            (named, recorded)
        }
        None => (
            claim_turn(draft, &key.task, None, input.now_millis)?.0,
            false,
        ),
    };
    Ok(Retry {
        key: retry_key,
        recorded,
        next,
        failed,
    })
}

/// The records of a retry `depart` enqueued: its first record (the leaving turn's command, with
/// the id its row got) unless it has one, and `retried_as` on the leaving record. Returns the
/// retry's turn number.
fn record_retry(
    state: &QueueState,
    draft: &mut Draft<'_>,
    key: &TurnKey,
    retry: Retry,
    now_millis: u64,
) -> Result<u32, Halt> {
    let Retry {
        key: retry_key,
        recorded,
        next,
        failed,
    } = retry;
    if !recorded {
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
        create_turn(draft, retry_key.clone(), new, id, now_millis)?;
    }
    if failed.retried_as.is_none() {
        let mut leaving = failed;
        leaving.retried_as = Some(retry_key.turn);
        draft.write_turn(leaving, false);
    }
    Ok(retry_key.turn)
}

/// The `--after-success` dependents `depart` settled end dependency-failed, naming their cause;
/// every dependent and cause is read in one round, not one round each.
fn settle_dependents(
    state: &QueueState,
    draft: &mut Draft<'_>,
    settled: &[(TurnKey, TurnKey)],
    now_millis: u64,
) -> Result<(), Halt> {
    draft.require(&Need {
        turns: settled
            .iter()
            .flat_map(|(dependent, cause)| [dependent.clone(), cause.clone()])
            .collect(),
        ..Need::default()
    })?;
    for (dependent, cause) in settled {
        debug_assert!(
            state.row(dependent).is_none(),
            "a settled dependent kept its row"
        );
        end_dependency_failed(draft, dependent, cause, now_millis)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::{TaskRecord, TurnRecord, TASK_FORMAT_VERSION};
    use crate::section::{Records, TurnSlot, Unread, Writes};
    use crate::slots::reserve::park;
    use crate::slots::{enqueue, AfterRule, Dependency, RetryPlan};
    use crate::turns::{create_turn, NewTurn};

    fn me() -> ProcessIdentity {
        ProcessIdentity {
            pid: 7,
            start_time_micros: 7,
        }
    }

    /// A queue with `key` enqueued and a record of it ended `outcome` under `retry`.
    fn leaving(
        key: &TurnKey,
        outcome: TurnOutcome,
        retry: Option<RetryPlan>,
    ) -> (QueueState, Records) {
        let mut state = QueueState::default();
        enqueue(&mut state, key, me(), 0).expect("enqueue");
        let mut records = Records::default();
        let mut draft = Draft::new(&records);
        let new = NewTurn {
            argv: vec!["false".into()],
            retry,
            ..NewTurn::default()
        };
        let mut turn = draft_turn(&mut draft, key, new);
        turn.outcome = Some(outcome);
        records.put_turn(key.clone(), TurnSlot::Record(Box::new(turn)));
        records.put_task(
            key.task.clone(),
            Some(TaskRecord {
                version: TASK_FORMAT_VERSION,
                name: key.task.clone(),
                created_at_millis: 0,
                next_turn: key.turn + 1,
                strategy: Default::default(),
            }),
            true,
        );
        (state, records)
    }

    fn draft_turn(draft: &mut Draft<'_>, key: &TurnKey, new: NewTurn) -> TurnRecord {
        create_turn(draft, key.clone(), new, Some(1), 0).expect("a record")
    }

    /// Runs [`leave`] the way the section runner does: reading what it asks for (the slots it
    /// names are free unless `records` has them) until it decides.
    fn run(state: &mut QueueState, records: &mut Records, key: &TurnKey) -> (Left, Writes) {
        for _ in 0..crate::section::MAX_READ_ROUNDS {
            let mut attempt = state.clone();
            let mut draft = Draft::new(records);
            let input = Leave {
                key,
                me: me(),
                now_millis: 1_000,
            };
            match leave(&mut attempt, &mut draft, input) {
                Ok(left) => {
                    *state = attempt;
                    return (left, draft.into_writes());
                }
                Err(Halt::Unread(Unread::Records(need))) => {
                    for turn in need.turns {
                        records.put_turn(turn, TurnSlot::Free);
                    }
                    for task in need.tasks {
                        records.put_task(task, None, false);
                    }
                    for task in need.numbers {
                        records.put_numbers(task, Vec::new());
                    }
                }
                Err(other) => panic!("leave halted: {other:?}"),
            }
        }
        panic!("leave kept asking for records")
    }

    /// A failed turn with attempts left: its retry is enqueued and parked until its backoff
    /// passed, numbered by the task's counter, recorded with the row's id and the next plan;
    /// the leaving record names it (R3).
    #[test]
    fn a_failed_turn_with_attempts_left_is_requeued_with_its_record() {
        let key = TurnKey::new("a", 1);
        let plan = RetryPlan::first(2, 500);
        let (mut state, mut records) = leaving(&key, TurnOutcome::Failed, Some(plan));
        let (left, writes) = run(&mut state, &mut records, &key);
        let retry = TurnKey::new("a", 2);
        assert_eq!(left.retried_as, Some(2));
        assert_eq!(left.wake_at_millis, Some(1_500));
        let row = state.row(&retry).expect("the retry's row");
        let record = &writes.turns[&retry];
        assert!(record.create);
        assert_eq!(record.record.id, Some(row.queue_id));
        assert_eq!(record.record.retry_of, Some(1));
        assert_eq!(record.record.retry.map(|p| p.attempt), Some(2));
        assert_eq!(writes.turns[&key].record.retried_as, Some(2));
        assert_eq!(writes.tasks["a"].next_turn, 3);
    }

    /// A cancelled row is never retried, whatever its command did; its `--after-success`
    /// dependents end dependency-failed naming it, its `--after` ones stay (R2).
    #[test]
    fn a_cancelled_row_is_not_retried_and_settles_its_after_success_dependents() {
        let key = TurnKey::new("a", 1);
        let (mut state, mut records) =
            leaving(&key, TurnOutcome::Failed, Some(RetryPlan::first(3, 0)));
        state.row_mut(&key).expect("row").cancel_requested = true;
        let strict = TurnKey::new("b", 1);
        let loose = TurnKey::new("c", 1);
        for (dependent, rule) in [(&strict, AfterRule::Succeeded), (&loose, AfterRule::Ended)] {
            enqueue(&mut state, dependent, me(), 0).expect("enqueue");
            park(&mut state, dependent).expect("park");
            state.row_mut(dependent).expect("row").after = vec![Dependency {
                key: key.clone(),
                rule,
            }];
            let mut draft = Draft::new(&records);
            let turn = draft_turn(&mut draft, dependent, NewTurn::default());
            records.put_turn(dependent.clone(), TurnSlot::Record(Box::new(turn)));
        }
        let (left, writes) = run(&mut state, &mut records, &key);
        assert_eq!(left, Left::default());
        assert!(state.row(&TurnKey::new("a", 2)).is_none(), "no retry");
        assert!(state.row(&strict).is_none());
        assert!(state.row(&loose).is_some());
        let ended = &writes.turns[&strict].record;
        assert_eq!(ended.outcome, Some(TurnOutcome::DependencyFailed));
        assert_eq!(ended.failed_dependency.as_ref(), Some(&key));
        assert!(ended
            .error
            .as_deref()
            .is_some_and(|e| e.contains("ended failed")));
        assert!(!writes.turns.contains_key(&loose));
    }

    /// A departure repeated on a record that names its retry already makes no second one.
    #[test]
    fn a_repeated_departure_reuses_the_retry_its_record_names() {
        let key = TurnKey::new("a", 1);
        let (mut state, mut records) =
            leaving(&key, TurnOutcome::Failed, Some(RetryPlan::first(2, 0)));
        let mut named = records.turn(&key).expect("read").cloned().expect("record");
        named.retried_as = Some(2);
        records.put_turn(key.clone(), TurnSlot::Record(Box::new(named)));
        let retry = TurnKey::new("a", 2);
        let mut draft = Draft::new(&records);
        let recorded = draft_turn(&mut draft, &retry, NewTurn::default());
        records.put_turn(retry, TurnSlot::Record(Box::new(recorded)));
        let (left, writes) = run(&mut state, &mut records, &key);
        assert_eq!(left.retried_as, Some(2));
        assert!(writes.turns.is_empty(), "{writes:?}");
        assert!(writes.tasks.is_empty());
    }

    /// A record that names a retry whose own record a crash kept from being written (the store
    /// writes the leaving record first): the departure makes the retry's record at the place
    /// named, with the id its row got, and writes the leaving record no second time (R3).
    #[test]
    fn a_retry_named_but_never_recorded_is_recorded_at_its_place() {
        let key = TurnKey::new("a", 1);
        let (mut state, mut records) =
            leaving(&key, TurnOutcome::Failed, Some(RetryPlan::first(2, 0)));
        let mut named = records.turn(&key).expect("read").cloned().expect("record");
        named.retried_as = Some(2);
        records.put_turn(key.clone(), TurnSlot::Record(Box::new(named)));
        let (left, writes) = run(&mut state, &mut records, &key);
        let retry = TurnKey::new("a", 2);
        assert_eq!(left.retried_as, Some(2));
        let row = state.row(&retry).expect("the retry's row");
        let record = &writes.turns[&retry];
        assert!(record.create);
        assert_eq!(record.record.id, Some(row.queue_id));
        assert_eq!(record.record.retry_of, Some(1));
        assert!(!writes.turns.contains_key(&key), "{writes:?}");
        assert!(
            writes.tasks.is_empty(),
            "the counter moved on before the crash"
        );
    }

    /// The first call asks for the leaving turn's record, and for nothing it has read.
    #[test]
    fn a_departure_asks_for_the_leaving_record_first() {
        let key = TurnKey::new("a", 1);
        let mut state = QueueState::default();
        enqueue(&mut state, &key, me(), 0).expect("enqueue");
        let records = Records::default();
        let mut draft = Draft::new(&records);
        let input = Leave {
            key: &key,
            me: me(),
            now_millis: 0,
        };
        match leave(&mut state.clone(), &mut draft, input) {
            Err(Halt::Unread(Unread::Records(need))) => {
                assert_eq!(need.turns.into_iter().collect::<Vec<_>>(), vec![key]);
            }
            other => panic!("expected a read, got {other:?}"),
        }
    }
}
