//! Reconcile: repair what crashes left behind, one decision per call.
//!
//! The shell calls [`reconcile_step`] under the lock, publishes, spawns outside the lock when told
//! to, and calls again until [`ReconcileStep::Idle`] or [`ReconcileStep::Saturated`]. Each call
//! changes at most one row, so every intermediate queue is a state the model also explores.

use super::occupancy::live_runner_for_turn;
use super::queue::enqueue;
use super::reserve::every_row;
use super::reserve::{
    adopt_row, park, reserve_runner_slot_with, start_next_parked_general, ReserveOutcome, StartNext,
};
use super::{
    Liveness, ProcessIdentity, ProductionRules, QueueEntry, QueueState, RowState, SlotError,
    SlotRules, SlotToken, TurnKey, WorkRecord,
};

/// The one thing a reconcile step did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReconcileStep {
    /// A dead reserver's handoff was finished: its live bound child already runs the turn.
    CompletedHandoff { key: TurnKey },
    /// A row whose owner died before it started was parked.
    Parked { key: TurnKey },
    /// A row whose turn already has an outcome (its runner died while leaving) was removed.
    Removed { key: TurnKey },
    /// Spawn a runner for `key` under `token`: `replaced` is the dead executor it replaces, `None`
    /// when a parked row starts.
    Spawn {
        key: TurnKey,
        token: SlotToken,
        replaced: Option<ProcessIdentity>,
    },
    /// The work of a dead runner may still be alive: the shell kills it (process group and
    /// environment marker) and calls again. Nothing changed.
    Kill { key: TurnKey, work: WorkRecord },
    /// A turn with a record but no row (its submitter died between the two) was enqueued and
    /// parked (S9).
    Requeued { key: TurnKey },
    /// A parked row whose turn has no record (its folder was deleted) was removed: it could
    /// never run.
    Forgotten { key: TurnKey },
    /// Rows are parked and no slot is free; nothing changed.
    Saturated,
    /// Nothing to repair and nothing parked.
    Idle,
}

/// Turns the shell found with a record but no queue row, never started (S9), and the time their
/// rows are enqueued at.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Orphans<'a> {
    pub keys: &'a [TurnKey],
    pub now_millis: u64,
}

impl Orphans<'_> {
    const NONE: Orphans<'static> = Orphans {
        keys: &[],
        now_millis: 0,
    };
}

/// A reservation no live process stands behind (reserver and bound child both gone).
fn reservation_is_dead(entry: &QueueEntry, liveness: &impl Liveness) -> bool {
    entry.slot_reservation.as_ref().is_none_or(|r| {
        !liveness.is_live(&r.reserver) && !r.child.is_some_and(|c| liveness.is_live(&c))
    })
}

/// One reconcile decision by `reconciler`. `is_settled` says whether a turn already has its
/// recorded outcome (read by the shell from the turn's file before the call).
pub fn reconcile_step(
    state: &mut QueueState,
    reconciler: ProcessIdentity,
    cap: usize,
    fresh_token: SlotToken,
    liveness: &impl Liveness,
    is_settled: &impl Fn(&TurnKey) -> bool,
) -> Result<ReconcileStep, SlotError> {
    reconcile_step_general(
        &ProductionRules,
        state,
        reconciler,
        cap,
        fresh_token,
        liveness,
        is_settled,
        &every_row,
        Orphans::NONE,
    )
}

/// [`reconcile_step`] under explicit [`SlotRules`]: the seam the model's broken variants use.
pub fn reconcile_step_with(
    rules: &impl SlotRules,
    state: &mut QueueState,
    reconciler: ProcessIdentity,
    cap: usize,
    fresh_token: SlotToken,
    liveness: &impl Liveness,
    is_settled: &impl Fn(&TurnKey) -> bool,
) -> Result<ReconcileStep, SlotError> {
    reconcile_step_general(
        rules,
        state,
        reconciler,
        cap,
        fresh_token,
        liveness,
        is_settled,
        &every_row,
        Orphans::NONE,
    )
}

/// The one implementation behind the three entry points above: the first of its stages that
/// finds something to do decides the step.
#[allow(clippy::too_many_arguments)]
pub(crate) fn reconcile_step_general(
    rules: &impl SlotRules,
    state: &mut QueueState,
    reconciler: ProcessIdentity,
    cap: usize,
    fresh_token: SlotToken,
    liveness: &impl Liveness,
    is_settled: &impl Fn(&TurnKey) -> bool,
    eligible: &impl Fn(&super::QueueLookup<'_>, &QueueEntry) -> bool,
    orphans: Orphans<'_>,
) -> Result<ReconcileStep, SlotError> {
    if let Some(step) = requeue_orphan(state, reconciler, orphans)? {
        return Ok(step);
    }
    let exclude_reserver = rules.reconcile_exclude_reserver(reconciler);
    forget_the_gone(state, liveness);
    if let Some(step) = kill_orphaned_work(state, liveness) {
        return Ok(step);
    }
    if let Some(step) = complete_handoff(state, liveness)? {
        return Ok(step);
    }
    if let Some(step) = park_orphaned_waiter(state, liveness)? {
        return Ok(step);
    }
    let replace = Replace {
        reconciler,
        exclude_reserver,
        cap,
        fresh_token,
    };
    if let Some(step) = replace_dead_dispatch(rules, state, replace, liveness, is_settled)? {
        return Ok(step);
    }
    // 4. Start the oldest parked row if a slot is free. The reconciler does not exclude itself.
    match start_next_parked_general(
        rules,
        state,
        reconciler,
        exclude_reserver,
        cap,
        fresh_token,
        liveness,
        eligible,
    )? {
        StartNext::Acquired { key, token } => Ok(ReconcileStep::Spawn {
            key,
            token,
            replaced: None,
        }),
        StartNext::Saturated => Ok(ReconcileStep::Saturated),
        StartNext::NoneParked => Ok(ReconcileStep::Idle),
    }
}

/// S9: a turn that has its record but no row (the shell lists such never-started turns) is
/// enqueued and parked, one per step; it then starts like any parked row. (One index of the rows
/// for all the candidates: a pass lists every never-started turn.)
fn requeue_orphan(
    state: &mut QueueState,
    reconciler: ProcessIdentity,
    orphans: Orphans<'_>,
) -> Result<Option<ReconcileStep>, SlotError> {
    let orphan = match orphans.keys {
        [] => None,
        keys => {
            let lookup = super::QueueLookup::new(state);
            keys.iter().find(|k| !lookup.has_row(k))
        }
    };
    let Some(key) = orphan else {
        return Ok(None);
    };
    let key = key.clone();
    enqueue(state, &key, reconciler, orphans.now_millis)?;
    park(state, &key)?;
    Ok(Some(ReconcileStep::Requeued { key }))
}

/// Runner records of rows that left, whose process is gone, are dropped silently: they count for
/// nothing, and keeping them would grow the document without bound. Works nobody can still be
/// running (their runner is gone and no process of theirs is left) are forgotten the same way.
fn forget_the_gone(state: &mut QueueState, liveness: &impl Liveness) {
    let QueueState {
        entries, runners, ..
    } = &mut *state;
    runners.retain(|r| liveness.is_live(&r.identity) || entries.iter().any(|e| e.key == r.key));
    state
        .works
        .retain(|w| liveness.is_live(&w.runner) || liveness.observe_work(w).is_live());
}

/// Stage 0: a work whose runner died but which may still be alive is killed before anything else: its
/// turn must not run again, nor its slot be given away, while a copy of it runs (S1, S2 over
/// work). Nothing changes; the next step sees it gone, or asks for the kill again.
fn kill_orphaned_work(state: &QueueState, liveness: &impl Liveness) -> Option<ReconcileStep> {
    let work = state.works.iter().find(|w| !liveness.is_live(&w.runner))?;
    Some(ReconcileStep::Kill {
        key: work.key.clone(),
        work: work.clone(),
    })
}

/// Stage 1: a dead reserver whose live child already took over: clear the token it never cleared.
fn complete_handoff(
    state: &mut QueueState,
    liveness: &impl Liveness,
) -> Result<Option<ReconcileStep>, SlotError> {
    let finished_handoff = state.entries.iter().find(|e| {
        e.slot_reservation.as_ref().is_some_and(|r| {
            !liveness.is_live(&r.reserver)
                && r.child.is_some_and(|c| {
                    liveness.is_live(&c)
                        && e.state == RowState::Dispatching { dispatch_owner: c }
                        && state.runner(&e.key).is_some_and(|run| run.identity == c)
                })
        })
    });
    let Some(entry) = finished_handoff else {
        return Ok(None);
    };
    let key = entry.key.clone();
    state.row_mut(&key)?.slot_reservation = None;
    Ok(Some(ReconcileStep::CompletedHandoff { key }))
}

/// Stage 2: a waiting row whose owner died (and whose reservation, if any, is dead too) is parked. So
/// is a parked row holding a dead reservation (a submitter took the parked row and died before
/// its spawn): the dead reservation would otherwise count against the cap forever, and stage 4
/// stops at the first saturated parked row before ever reaching it to steal.
fn park_orphaned_waiter(
    state: &mut QueueState,
    liveness: &impl Liveness,
) -> Result<Option<ReconcileStep>, SlotError> {
    let orphaned_waiter = state.entries.iter().find(|e| {
        let abandoned = match e.state {
            RowState::Waiting { owner, .. } => !liveness.is_live(&owner),
            RowState::Parked => e.slot_reservation.is_some(),
            RowState::Dispatching { .. } => false,
        };
        abandoned
            && reservation_is_dead(e, liveness)
            && live_runner_for_turn(state, &e.key, liveness).is_none()
    });
    let Some(entry) = orphaned_waiter else {
        return Ok(None);
    };
    let key = entry.key.clone();
    park(state, &key)?;
    Ok(Some(ReconcileStep::Parked { key }))
}

/// Who replaces a dead executor's runner, and with what.
#[derive(Clone, Copy)]
struct Replace {
    reconciler: ProcessIdentity,
    exclude_reserver: Option<ProcessIdentity>,
    cap: usize,
    fresh_token: SlotToken,
}

/// Stage 3: an active turn whose executor died: remove it if it had ended, else replace its runner.
fn replace_dead_dispatch(
    rules: &impl SlotRules,
    state: &mut QueueState,
    by: Replace,
    liveness: &impl Liveness,
    is_settled: &impl Fn(&TurnKey) -> bool,
) -> Result<Option<ReconcileStep>, SlotError> {
    let dead_dispatch = state.entries.iter().find_map(|e| match e.state {
        RowState::Dispatching { dispatch_owner }
            if !liveness.is_live(&dispatch_owner)
                && reservation_is_dead(e, liveness)
                && live_runner_for_turn(state, &e.key, liveness).is_none() =>
        {
            Some((e.key.clone(), dispatch_owner))
        }
        _ => None,
    });
    let Some((key, dead_owner)) = dead_dispatch else {
        return Ok(None);
    };
    if is_settled(&key) {
        state.entries.retain(|e| e.key != key);
        state.clear_runner(&key);
        return Ok(Some(ReconcileStep::Removed { key }));
    }
    let before = state.row(&key).cloned();
    adopt_row(state, &key, by.reconciler)?;
    match reserve_runner_slot_with(
        rules,
        state,
        &key,
        by.reconciler,
        by.exclude_reserver,
        by.cap,
        by.fresh_token,
        liveness,
    )? {
        ReserveOutcome::Acquired { token, .. } => Ok(Some(ReconcileStep::Spawn {
            key,
            token,
            replaced: Some(dead_owner),
        })),
        ReserveOutcome::Saturated => {
            park(state, &key)?;
            Ok(Some(ReconcileStep::Parked { key }))
        }
        ReserveOutcome::Pending { .. } => {
            // Unreachable given the filter above; restore rather than guess (the next stage
            // decides the step).
            if let (Some(before), Ok(row)) = (before, state.row_mut(&key)) {
                *row = before;
            }
            Ok(None)
        }
    }
}
