//! The shell half of dependencies and retries (spec/slots.md, "Dependencies and retries"): what
//! a section where a row leaves the queue writes around the core's [`slots::depart`]. Every
//! decision (retry or not, which dependents settle) is the core's; this module copies the record
//! fields the core needs, creates the retry's turn record the core asks for, and ends the
//! records of the dependents the core settled, all under the caller's lock.

use crate::dispatch::DispatchError;
use crate::protocol::slots::{
    self, DepartInput, Ended, ProcessIdentity, QueueState, RetryPlan, TurnKey,
};
use crate::queue::Store;
use crate::runtime::Runtime;
use crate::tasks::{self, TurnOutcome, TurnRecord};
use std::collections::BTreeMap;

/// A record's outcome as dependencies and retries see it ([`TurnOutcome::ended`]).
pub fn ended_of(outcome: Option<TurnOutcome>) -> Ended {
    TurnOutcome::ended(outcome)
}

/// The most attempts `wait` and `--after` follow along a retry chain (`retried_as`).
const MAX_CHAIN: u32 = slots::MAX_ATTEMPTS;

/// The last attempt of the retry chain starting at `key` (itself when never retried).
pub fn last_attempt(home: &crate::home::Home, key: &TurnKey) -> Result<TurnKey, DispatchError> {
    let mut key = key.clone();
    for _ in 0..MAX_CHAIN {
        match tasks::load_turn(home, &key)?.and_then(|t| t.retried_as) {
            Some(next) => key = TurnKey::new(key.task.clone(), next),
            None => break,
        }
    }
    Ok(key)
}

/// How the dependencies of a new turn ended, for those without a row: read from their records
/// under the submit's lock.
pub fn ended_dependencies(
    home: &crate::home::Home,
    state: &QueueState,
    after: &[slots::Dependency],
) -> Result<BTreeMap<TurnKey, Ended>, DispatchError> {
    let mut ended = BTreeMap::new();
    for dependency in after.iter().filter(|d| state.row(&d.key).is_none()) {
        let outcome = tasks::load_turn(home, &dependency.key)?.and_then(|t| t.outcome);
        ended.insert(dependency.key.clone(), ended_of(outcome));
    }
    Ok(ended)
}

/// Ends a turn that never ran as dependency-failed, naming the dependency `cause`.
pub fn end_dependency_failed(
    home: &crate::home::Home,
    key: &TurnKey,
    cause: &TurnKey,
    now_millis: u64,
) -> Result<(), DispatchError> {
    if let Some(mut turn) = tasks::load_turn(home, key)? {
        if !turn.is_settled() {
            let how = tasks::load_turn(home, cause)?
                .and_then(|t| t.outcome)
                .and_then(|o| serde_json::to_value(o).ok())
                .and_then(|v| v.as_str().map(|w| format!("ended {w}")))
                .unwrap_or_else(|| "did not complete".to_string());
            turn.outcome = Some(TurnOutcome::DependencyFailed);
            turn.ended_at_millis = Some(now_millis);
            turn.failed_dependency = Some(cause.clone());
            turn.error = Some(format!(
                "not run: its dependency {cause}{} {how} (--after-success)",
                id_suffix(home, cause)
            ));
            tasks::save_turn(home, &turn)?;
        }
    }
    Ok(())
}

fn id_suffix(home: &crate::home::Home, key: &TurnKey) -> String {
    match tasks::load_turn(home, key)
        .ok()
        .flatten()
        .and_then(|t| t.id)
    {
        Some(id) => format!(" (id {id})"),
        None => String::new(),
    }
}

/// The retry of `failed` already created by an earlier section that did not commit (a crash
/// between the retry's record and the queue's commit): a later turn of the task whose
/// `retry_of` is `failed`. Reusing it keeps a retry from being created twice.
fn existing_retry(
    home: &crate::home::Home,
    failed: &TurnRecord,
) -> Result<Option<TurnKey>, DispatchError> {
    if let Some(turn) = failed.retried_as {
        return Ok(Some(TurnKey::new(failed.key.task.clone(), turn)));
    }
    for turn in tasks::list_turns(home, &failed.key.task)?
        .into_iter()
        .filter(|&n| n > failed.key.turn)
    {
        let key = TurnKey::new(failed.key.task.clone(), turn);
        if tasks::load_turn(home, &key)?.is_some_and(|t| t.retry_of == Some(failed.key.turn)) {
            return Ok(Some(key));
        }
    }
    Ok(None)
}

/// The turn record of the retry `plan` of `failed`: the same command, cwd, env, labels and
/// timeout, detached.
fn create_retry<L: slots::Liveness, S: Store>(
    rt: &Runtime<L, S>,
    state: &QueueState,
    failed: &TurnRecord,
    plan: RetryPlan,
    now_millis: u64,
) -> Result<TurnKey, DispatchError> {
    let meta = tasks::TurnMeta {
        id: Some(tasks::predicted_turn_id(state)),
        labels: failed.labels.clone(),
        timeout_millis: failed.timeout_millis,
        after: Vec::new(),
        retry: Some(plan),
        retry_of: Some(failed.key.turn),
    };
    let (turn, _) = tasks::create_turn_with(
        &rt.home,
        &failed.key.task,
        None,
        failed.argv.clone(),
        failed.cwd.clone(),
        failed.env.clone(),
        false,
        now_millis,
        meta,
    )?;
    Ok(turn.key)
}

/// What a leaving section must do after its commit.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AfterDeparture {
    /// Start a waker for then (a retry waits out its backoff).
    pub wake_at_millis: Option<u64>,
    /// The turn number of the retry (the leaving record's `retried_as`).
    pub retried_as: Option<u32>,
}

/// The section where `key`'s row leaves (or left) the queue: the core's [`slots::depart`] with
/// what the turn's record (`record`, `None`: none) says, and the writes its decision implies
/// (the retry's record before the caller saves the leaving one with `retried_as`, so a reader
/// that sees the failed turn settled also sees where it went on). Call under the queue lock, in
/// the section that removes the row.
pub fn departed<L: slots::Liveness, S: Store>(
    rt: &Runtime<L, S>,
    state: &mut QueueState,
    key: &TurnKey,
    record: Option<&TurnRecord>,
    me: ProcessIdentity,
) -> Result<AfterDeparture, DispatchError> {
    let now = rt.spawner.now_millis();
    let ended = ended_of(record.and_then(|t| t.outcome));
    let plan = record.and_then(|t| t.retry);
    let retry_key = match (slots::retry_due(ended, plan), record) {
        (Some(next), Some(failed)) => Some(match existing_retry(&rt.home, failed)? {
            Some(existing) => existing,
            None => create_retry(rt, state, failed, next, now)?,
        }),
        _ => None,
    };
    let departure = slots::depart(
        state,
        DepartInput {
            key,
            ended,
            retry: plan,
            retry_key: retry_key.as_ref(),
            me,
            now_millis: now,
        },
    )?;
    if let Some(retry) = &departure.retry {
        let queue_id = state.row(&retry.key).map_or(0, |r| r.queue_id);
        let recorded = tasks::load_turn(&rt.home, &retry.key)?.and_then(|t| t.id);
        tasks::settle_turn_id(&rt.home, &retry.key, recorded, queue_id)?;
    }
    for (dependent, cause) in &departure.dependency_failed {
        end_dependency_failed(&rt.home, dependent, cause, now)?;
    }
    Ok(AfterDeparture {
        wake_at_millis: departure.wake_at_millis(now),
        retried_as: departure.retry.map(|r| r.key.turn),
    })
}

/// [`departed`] for a turn whose record is on disk already (reconcile, cancel, a take-over that
/// found the turn settled, a superseded waiter): also records `retried_as` on it.
pub fn departed_on_disk<L: slots::Liveness, S: Store>(
    rt: &Runtime<L, S>,
    state: &mut QueueState,
    key: &TurnKey,
    me: ProcessIdentity,
) -> Result<AfterDeparture, DispatchError> {
    let record = tasks::load_turn(&rt.home, key)?;
    let after = departed(rt, state, key, record.as_ref(), me)?;
    if let (Some(mut turn), Some(retry)) = (record, after.retried_as) {
        if turn.retried_as != Some(retry) {
            turn.retried_as = Some(retry);
            tasks::save_turn(&rt.home, &turn)?;
        }
    }
    Ok(after)
}

/// Performs what [`departed`] asked for after the commit.
pub fn after_commit<L: slots::Liveness, S: Store>(rt: &Runtime<L, S>, after: &AfterDeparture) {
    if let Some(at_millis) = after.wake_at_millis {
        crate::driver::start_waker(rt.spawner.as_ref(), at_millis);
    }
}
