//! Dependencies between turns (`submit --after` / `--after-success`) and retries (`submit
//! --retry N --backoff DUR`): spec/slots.md, "Dependencies and retries", invariants R1..R3.
//!
//! A row may carry dependencies: turns that must have left the queue before it may start
//! ([`dependencies_met`], composed into the start filter). Whenever a row leaves the queue (a
//! runner's finish, a cancel's removal, reconcile removing a settled row, a superseded waiter),
//! the shell calls [`depart`] in the same locked section: it re-queues a failed turn that has
//! attempts left (the dependents then follow the new attempt), or settles, transitively, every
//! `--after-success` dependent of a turn that did not succeed. The decision is made here only.

use super::reserve::{park, set_ready_at};
use super::steps::{self, SubmitDecision, SubmitInput};
use super::{
    enqueue, spend_queue_id, validate_task_name, EnqueueOutcome, Liveness, ProcessIdentity,
    QueueState, RowState, SlotError, TurnKey,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The most dependencies one turn may name (`submit --after`): a bound on every row's list.
pub const MAX_DEPENDENCIES: usize = 32;
/// The most attempts a turn may have (`submit --retry N`: N + 1 attempts).
pub const MAX_ATTEMPTS: u32 = 101;
/// The longest wait before an attempt, whatever `--backoff` and the doubling say: one hour.
pub const MAX_BACKOFF_MILLIS: u64 = 60 * 60 * 1000;

/// What a dependency asks of the turn it names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AfterRule {
    /// `--after`: the dependency has ended, however.
    Ended,
    /// `--after-success`: the dependency has ended completed with exit code 0.
    Succeeded,
}

/// One dependency of a row: the turn and the rule.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Dependency {
    #[serde(flatten)]
    pub key: TurnKey,
    pub rule: AfterRule,
}

/// How a turn ended, as dependencies and retries see it. The shell maps the record's outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Ended {
    /// Completed with exit code 0.
    Succeeded,
    /// Failed: exit code other than 0, killed by a signal, timed out, or unstartable. Retried
    /// while attempts are left.
    Failed,
    /// Ended without running to a verdict: cancelled, superseded, dropped, dependency-failed.
    /// Never retried.
    Stopped,
}

/// A turn's retry plan, kept on its turn record: attempt `attempt` of `attempts`, and the base
/// wait before a retry (doubled for each attempt after the second, capped at
/// [`MAX_BACKOFF_MILLIS`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RetryPlan {
    pub attempt: u32,
    pub attempts: u32,
    #[serde(default)]
    pub backoff_millis: u64,
}

impl RetryPlan {
    /// The plan of the first attempt of `submit --retry retries --backoff backoff_millis`.
    pub fn first(retries: u32, backoff_millis: u64) -> Self {
        RetryPlan {
            attempt: 1,
            attempts: retries.saturating_add(1).min(MAX_ATTEMPTS),
            backoff_millis,
        }
    }

    /// The wait before attempt `attempt` (2 or more): `backoff`, `2 × backoff`, `4 × backoff`, …,
    /// at most [`MAX_BACKOFF_MILLIS`].
    pub fn delay_before_millis(&self, attempt: u32) -> u64 {
        let doublings = attempt.saturating_sub(2).min(63);
        self.backoff_millis
            .saturating_mul(1u64 << doublings)
            .min(MAX_BACKOFF_MILLIS)
    }
}

/// The plan of the next attempt, when a turn that ended `ended` under `plan` is retried: only a
/// failure (never a cancel or a dependency failure), and only while attempts are left. The shell
/// creates the retry's turn record when this says so, then calls [`depart`] with its key.
pub fn retry_due(ended: Ended, plan: Option<RetryPlan>) -> Option<RetryPlan> {
    let plan = plan?;
    (ended == Ended::Failed && plan.attempt < plan.attempts).then(|| RetryPlan {
        attempt: plan.attempt + 1,
        ..plan
    })
}

/// Whether every dependency of `entry` has left the queue (R1): what a start requires besides the
/// task's strategy. A dependency with a row has not ended yet.
pub fn dependencies_met(state: &QueueState, entry: &super::QueueEntry) -> bool {
    entry.after.iter().all(|d| state.row(&d.key).is_none())
}

/// What the dependencies of a new turn say at its submit.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum DependencyCheck {
    /// Every dependency has ended as its rule asks: the turn is submitted as any other.
    Met,
    /// These dependencies are still in the queue: the turn parks until they leave.
    Pending(Vec<Dependency>),
    /// `cause` ended other than succeeded and the rule was `--after-success`: the turn is settled
    /// dependency-failed at once and never enqueued (R2).
    Failed { cause: TurnKey },
}

/// Decides a new turn's dependencies at its submit: a dependency with a row is pending; one
/// without has ended, as `ended` says (the shell reads the outcomes from the records under the
/// same lock; a dependency missing from it counts as not succeeded).
pub fn check_dependencies(
    state: &QueueState,
    after: &[Dependency],
    ended: &BTreeMap<TurnKey, Ended>,
) -> DependencyCheck {
    let mut pending = Vec::new();
    for dependency in after {
        if state.row(&dependency.key).is_some() {
            if !pending.contains(dependency) {
                pending.push(dependency.clone());
            }
            continue;
        }
        let succeeded = ended.get(&dependency.key) == Some(&Ended::Succeeded);
        if dependency.rule == AfterRule::Succeeded && !succeeded {
            return DependencyCheck::Failed {
                cause: dependency.key.clone(),
            };
        }
    }
    if pending.is_empty() {
        DependencyCheck::Met
    } else {
        DependencyCheck::Pending(pending)
    }
}

/// What a detached submit with dependencies decided.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum AfterSubmit {
    /// Every dependency had ended as asked: the ordinary submit step decided.
    Submitted(Box<SubmitDecision>),
    /// The row is enqueued and parked until `waiting_on` left the queue.
    Held {
        queue_id: u64,
        waiting_on: Vec<Dependency>,
        /// Its not-before time (`--delay`/`--at`) when later than now and no pause holds it: the
        /// shell starts a waker for then.
        wake_at_millis: Option<u64>,
    },
    /// An `--after-success` dependency had ended other than succeeded: nothing was enqueued; the
    /// shell ends the new turn dependency-failed naming `cause`. The turn keeps the id it was
    /// created with (`queue_id`, spent: no later turn gets it).
    DependencyFailed { cause: TurnKey, queue_id: u64 },
}

/// The detached submit section of a turn with dependencies (`after` empty: [`steps::submit`]
/// itself). A held row skips its task's strategy at submit (it supersedes and drops nothing); at
/// its start the strategy's running limit applies as to any parked row.
pub fn submit_after<L: Liveness>(
    state: &mut QueueState,
    input: SubmitInput<'_, L>,
    after: &[Dependency],
    ended: &BTreeMap<TurnKey, Ended>,
    schedule: steps::Schedule,
) -> Result<AfterSubmit, SlotError> {
    match check_dependencies(state, after, ended) {
        DependencyCheck::Met => steps::submit_scheduled(state, input, schedule)
            .map(|d| AfterSubmit::Submitted(Box::new(d))),
        DependencyCheck::Failed { cause } => {
            validate_task_name(&input.key.task)?;
            let queue_id = spend_queue_id(state)?;
            Ok(AfterSubmit::DependencyFailed { cause, queue_id })
        }
        DependencyCheck::Pending(waiting_on) => {
            validate_task_name(&input.key.task)?;
            if waiting_on.len() > MAX_DEPENDENCIES {
                return Err(SlotError::TooManyDependencies {
                    limit: MAX_DEPENDENCIES,
                });
            }
            let queue_id = enqueue(state, input.key, input.me, input.now_millis)?.queue_id();
            park(state, input.key)?;
            let row = state.row_mut(input.key)?;
            row.after = waiting_on.clone();
            row.priority = schedule.priority;
            row.ready_at_millis = schedule.not_before_millis;
            // Its dependencies may end before its not-before time; then only time starts it.
            let wake_at_millis = (schedule.not_before_millis > input.now_millis
                && !state.paused.holds(&input.key.task))
            .then_some(schedule.not_before_millis);
            Ok(AfterSubmit::Held {
                queue_id,
                waiting_on,
                wake_at_millis,
            })
        }
    }
}

/// What a leaving turn's section knows besides the queue.
#[derive(Clone, Copy, Debug)]
pub struct DepartInput<'a> {
    /// The turn whose row leaves (or left) the queue in this section.
    pub key: &'a TurnKey,
    pub ended: Ended,
    /// The leaving turn's retry plan, from its record.
    pub retry: Option<RetryPlan>,
    /// The turn the shell created for the retry [`retry_due`] announced (`None` when it announced
    /// none). A retry due without one is refused, changing nothing.
    pub retry_key: Option<&'a TurnKey>,
    /// Who enqueues the retry's row (it is parked at once).
    pub me: ProcessIdentity,
    pub now_millis: u64,
}

/// A retry's row, enqueued by [`depart`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Requeued {
    pub key: TurnKey,
    pub plan: RetryPlan,
    /// When it may start; later than now: the shell starts a waker for then.
    pub ready_at_millis: u64,
}

/// What [`depart`] decided.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Departure {
    /// The failed turn was re-queued as this new attempt (R3).
    pub retry: Option<Requeued>,
    /// Dependents that left the queue settled dependency-failed, each with the dependency whose
    /// failure settled it (R2); the shell ends their records so, under the same lock.
    pub dependency_failed: Vec<(TurnKey, TurnKey)>,
}

impl Departure {
    /// When a waker must start a row of this departure (a retry with a backoff).
    pub fn wake_at_millis(&self, now_millis: u64) -> Option<u64> {
        self.retry
            .as_ref()
            .map(|r| r.ready_at_millis)
            .filter(|&at| at > now_millis)
    }
}

/// The one decision taken when a row leaves the queue (spec/slots.md, "Dependencies and
/// retries"). Call it in the section where the row leaves, before or after its removal.
///
/// - A failed turn with attempts left ([`retry_due`]): its retry's row (`retry_key`) is enqueued
///   and parked, startable after the backoff; every row depending on the failed turn depends on
///   the retry instead (a dependency is on a task's attempt chain, not on one attempt).
/// - Otherwise every parked, unreserved row that depends on the leaving turn `--after-success`,
///   when the turn did not succeed, leaves the queue settled dependency-failed, and so on for
///   its own dependents (a worklist bounded by the queue's rows). Rows depending on it with
///   `--after` start once their other dependencies have left too (the start filter decides).
pub fn depart(state: &mut QueueState, input: DepartInput<'_>) -> Result<Departure, SlotError> {
    debug_assert!(
        input.retry_key != Some(input.key),
        "a retry is a new attempt, never the leaving turn itself"
    );
    let mut departure = Departure::default();
    // A turn a cancel asked for is not retried, however its command ended.
    let cancelled = state.row(input.key).is_some_and(|r| r.cancel_requested);
    let due = retry_due(input.ended, input.retry).filter(|_| !cancelled);
    if let Some(plan) = due {
        departure.retry = Some(requeue_retry(state, input, plan)?);
        return Ok(departure);
    }
    let mut leaving = vec![(input.key.clone(), input.ended)];
    while let Some((key, ended)) = leaving.pop() {
        if ended == Ended::Succeeded {
            continue;
        }
        let failed: Vec<TurnKey> = state
            .entries
            .iter()
            .filter(|e| {
                matches!(e.state, RowState::Parked)
                    && e.slot_reservation.is_none()
                    && e.key != *input.key
                    && e.after
                        .iter()
                        .any(|d| d.key == key && d.rule == AfterRule::Succeeded)
            })
            .map(|e| e.key.clone())
            .collect();
        state.entries.retain(|e| !failed.contains(&e.key));
        for dependent in failed {
            departure
                .dependency_failed
                .push((dependent.clone(), key.clone()));
            leaving.push((dependent, Ended::Stopped));
        }
    }
    debug_assert!(
        departure
            .dependency_failed
            .iter()
            .all(|(dependent, _)| state.row(dependent).is_none()),
        "a settled dependent left the queue"
    );
    Ok(departure)
}

/// The retry `plan` of the leaving turn: its row (`input.retry_key`) enqueued and parked,
/// startable after the backoff, and every row depending on the leaving turn depending on the
/// retry instead (a dependency is on a task's attempt chain, not on one attempt).
fn requeue_retry(
    state: &mut QueueState,
    input: DepartInput<'_>,
    plan: RetryPlan,
) -> Result<Requeued, SlotError> {
    let key = input
        .retry_key
        .ok_or_else(|| SlotError::RetryKeyMissing {
            key: input.key.clone(),
        })?
        .clone();
    let ready_at_millis = input
        .now_millis
        .saturating_add(plan.delay_before_millis(plan.attempt));
    // A repeated section (reconcile after a crash) finds the retry's row already there, maybe
    // started: it is left as it is.
    if let EnqueueOutcome::Enqueued { .. } = enqueue(state, &key, input.me, input.now_millis)? {
        park(state, &key)?;
        set_ready_at(state, &key, ready_at_millis)?;
    }
    for entry in state.entries.iter_mut() {
        for dependency in entry.after.iter_mut() {
            if &dependency.key == input.key {
                dependency.key = key.clone();
            }
        }
    }
    debug_assert!(state.row(&key).is_some(), "a due retry has its row");
    Ok(Requeued {
        key,
        plan,
        ready_at_millis,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slots::QueueEntry;

    fn me() -> ProcessIdentity {
        ProcessIdentity {
            pid: 7,
            start_time_micros: 7,
        }
    }

    fn parked_after(state: &mut QueueState, key: &TurnKey, after: Vec<Dependency>) {
        enqueue(state, key, me(), 0).expect("enqueue");
        park(state, key).expect("park");
        state.row_mut(key).expect("row").after = after;
    }

    fn dep(task: &str, turn: u32, rule: AfterRule) -> Dependency {
        Dependency {
            key: TurnKey::new(task, turn),
            rule,
        }
    }

    fn depart_input<'a>(key: &'a TurnKey, ended: Ended) -> DepartInput<'a> {
        DepartInput {
            key,
            ended,
            retry: None,
            retry_key: None,
            me: me(),
            now_millis: 1_000,
        }
    }

    /// R2, transitively: A failed, so B (after-success A) and C (after-success B) leave settled
    /// dependency-failed; D (plain after B) stays, and may start now that B left.
    #[test]
    fn a_failed_dependency_settles_its_after_success_chain() {
        let mut state = QueueState::default();
        let a = TurnKey::new("a", 1);
        enqueue(&mut state, &a, me(), 0).expect("enqueue");
        parked_after(
            &mut state,
            &TurnKey::new("b", 1),
            vec![dep("a", 1, AfterRule::Succeeded)],
        );
        parked_after(
            &mut state,
            &TurnKey::new("c", 1),
            vec![dep("b", 1, AfterRule::Succeeded)],
        );
        parked_after(
            &mut state,
            &TurnKey::new("d", 1),
            vec![dep("b", 1, AfterRule::Ended)],
        );
        let departure = depart(&mut state, depart_input(&a, Ended::Failed)).expect("depart");
        assert_eq!(
            departure.dependency_failed,
            vec![
                (TurnKey::new("b", 1), a.clone()),
                (TurnKey::new("c", 1), TurnKey::new("b", 1))
            ]
        );
        let d = state.row(&TurnKey::new("d", 1)).expect("d stays").clone();
        state.entries.retain(|e| e.key != a);
        assert!(dependencies_met(&state, &d), "d's dependency left");
    }

    /// A succeeded dependency settles nothing; its dependents become startable once it left.
    #[test]
    fn a_succeeded_dependency_lets_its_dependents_start() {
        let mut state = QueueState::default();
        let a = TurnKey::new("a", 1);
        enqueue(&mut state, &a, me(), 0).expect("enqueue");
        let b = TurnKey::new("b", 1);
        parked_after(&mut state, &b, vec![dep("a", 1, AfterRule::Succeeded)]);
        let row = |s: &QueueState| s.row(&b).cloned().expect("b");
        assert!(!dependencies_met(&state, &row(&state)), "R1: a is queued");
        let departure = depart(&mut state, depart_input(&a, Ended::Succeeded)).expect("depart");
        assert_eq!(departure, Departure::default());
        state.entries.retain(|e| e.key != a);
        assert!(dependencies_met(&state, &row(&state)));
    }

    /// R3: a failed turn with attempts left is re-queued exactly once as its retry, parked until
    /// the backoff passed; its dependents follow the retry. Without the retry's key nothing
    /// changes.
    #[test]
    fn a_failed_turn_with_attempts_left_is_requeued_once() {
        let mut state = QueueState::default();
        let a = TurnKey::new("a", 1);
        enqueue(&mut state, &a, me(), 0).expect("enqueue");
        let b = TurnKey::new("b", 1);
        parked_after(&mut state, &b, vec![dep("a", 1, AfterRule::Succeeded)]);
        let plan = RetryPlan::first(2, 500);
        let mut input = depart_input(&a, Ended::Failed);
        input.retry = Some(plan);
        let before = state.clone();
        assert!(matches!(
            depart(&mut state, input),
            Err(SlotError::RetryKeyMissing { .. })
        ));
        assert_eq!(state, before);
        let retry = TurnKey::new("a", 2);
        input.retry_key = Some(&retry);
        let departure = depart(&mut state, input).expect("depart");
        let requeued = departure.retry.clone().expect("retried");
        assert_eq!(requeued.plan.attempt, 2);
        assert_eq!(requeued.ready_at_millis, 1_500);
        assert_eq!(departure.wake_at_millis(1_000), Some(1_500));
        let row: QueueEntry = state.row(&retry).cloned().expect("retry row");
        assert!(matches!(row.state, RowState::Parked));
        assert_eq!(state.row(&b).expect("b").after[0].key, retry);
        // A second call (a repeated section) enqueues nothing more.
        let again = depart(&mut state, input).expect("again");
        assert_eq!(again.retry.map(|r| r.key), Some(retry));
        assert_eq!(state.entries.len(), 3);
    }

    #[test]
    fn retries_stop_at_the_last_attempt_and_never_follow_a_cancel() {
        let last = RetryPlan {
            attempt: 3,
            attempts: 3,
            backoff_millis: 0,
        };
        assert_eq!(retry_due(Ended::Failed, Some(last)), None);
        let first = RetryPlan::first(2, 0);
        assert_eq!(retry_due(Ended::Stopped, Some(first)), None);
        assert_eq!(retry_due(Ended::Succeeded, Some(first)), None);
        assert_eq!(
            retry_due(Ended::Failed, Some(first)).map(|p| p.attempt),
            Some(2)
        );
    }

    #[test]
    fn the_backoff_doubles_and_is_capped() {
        let plan = RetryPlan::first(10, 1_000);
        assert_eq!(plan.delay_before_millis(2), 1_000);
        assert_eq!(plan.delay_before_millis(3), 2_000);
        assert_eq!(plan.delay_before_millis(5), 8_000);
        assert_eq!(plan.delay_before_millis(100), MAX_BACKOFF_MILLIS);
    }

    #[test]
    fn submit_time_checks_settle_or_hold() {
        let mut state = QueueState::default();
        let a = TurnKey::new("a", 1);
        let mut ended = BTreeMap::new();
        ended.insert(a.clone(), Ended::Failed);
        let success = [dep("a", 1, AfterRule::Succeeded)];
        assert_eq!(
            check_dependencies(&state, &success, &ended),
            DependencyCheck::Failed { cause: a.clone() }
        );
        let plain = [dep("a", 1, AfterRule::Ended)];
        assert_eq!(
            check_dependencies(&state, &plain, &ended),
            DependencyCheck::Met
        );
        enqueue(&mut state, &a, me(), 0).expect("enqueue");
        assert_eq!(
            check_dependencies(&state, &success, &ended),
            DependencyCheck::Pending(success.to_vec())
        );
    }
}
