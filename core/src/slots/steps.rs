//! One core step per locked section (quinn-proto style): the shell takes the lock, loads the
//! queue, calls exactly one of these functions, publishes, and performs the returned effect.
//!
//! Every sequence of primitives a locked section runs lives here, so the shell, the stateright
//! model, the proptest and the loom test all drive the same sequences. A step takes the loaded
//! [`QueueState`] by `&mut`, plus a typed input carrying what the world told the shell (who I am,
//! a fresh token, "now", the strategies of the tasks, which turns have a settled record, liveness),
//! and returns an effect. On an `Err` the state is as it was, except where a step says otherwise;
//! the shell publishes nothing on an error in any case.
//!
//! The handoff (spec/slots.md, "Handoff") is typed: a step that reserved a slot returns a
//! [`Handoff`], a value only this module builds. The shell spawns the runner for it outside the
//! lock, then passes it to [`handoff_publish_first`] (which gives back a [`BoundHandoff`]) and that
//! to [`handoff_publish_second`], each in its own locked section; or, when the spawn failed, to
//! [`spawn_failed`]. So the order spawn → first publish → second publish cannot be changed by a
//! caller without changing these signatures.

use super::order::{held_back, HeldBack};
use super::reconcile::{reconcile_step_general, Orphans};
use super::reserve::{
    complete_runner_spawn_first, complete_runner_spawn_second, park, release_runner_slot,
    reserve_runner_slot, set_ready_at, start_next_parked_general, token_fenced_row_after_bind,
    ReserveOutcome, StartNext,
};
use super::takeover::{finish_turn, take_over_reserved_slot, TakeOver};
use super::{
    acting_queue_holder, enqueue, live_runner_for_turn, validate_task_name, Liveness,
    ProcessIdentity, ProductionRules, QueueEntry, QueueState, ReconcileStep, RowState, SlotError,
    SlotRules, SlotToken, TurnKey, WorkId, WorkRecord,
};
use crate::admission::Strategy;
pub use crate::scopes::Busy;
use crate::scopes::{attached_may_start, plan_submit, start_filter, SubmitPlan};

mod reads;
mod sched;
pub use reads::{
    cancel_covers, cancel_reads, cancel_stayed_inside, finish_covers, finish_reads,
    finish_sufficed, in_part, merge, project, row_reads, submit_covers, submit_line_reads,
    submit_line_suffices, submit_reads, submit_stayed_inside, Loaded, QueueReads, Reads,
    FINISH_HEADS,
};
pub use sched::{resume, ResumeEffect, ResumeInput, Schedule};
use std::collections::{BTreeMap, BTreeSet};

// ---------------------------------------------------------------------------------------------
// The handoff: a reservation on its way to a runner.
// ---------------------------------------------------------------------------------------------

/// A slot reserved for a runner that is not spawned yet: the row as published with the
/// reservation, the token and the reserver. Only the core builds one (the fields are private); the
/// shell spawns for it and hands it back to exactly one of [`handoff_publish_first`] or
/// [`spawn_failed`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Handoff {
    snapshot: QueueEntry,
    token: SlotToken,
    reserver: ProcessIdentity,
}

impl Handoff {
    fn reserved(
        state: &QueueState,
        key: &TurnKey,
        token: SlotToken,
        reserver: ProcessIdentity,
    ) -> Result<Self, SlotError> {
        let snapshot = state
            .row(key)
            .cloned()
            .ok_or_else(|| SlotError::UnknownRow { key: key.clone() })?;
        // Every step that hands a runner a slot comes through here: the row it hands holds this
        // reserver's unbound reservation under this token, and someone holds the row.
        debug_assert!(
            snapshot
                .slot_reservation
                .as_ref()
                .is_some_and(|r| r.token == token && r.reserver == reserver && r.child.is_none()),
            "a handoff's row holds the reserver's unbound reservation under its token"
        );
        debug_assert!(
            !matches!(snapshot.state, RowState::Parked),
            "a handed-off row is held (waiting or dispatching), not parked"
        );
        Ok(Handoff {
            snapshot,
            token,
            reserver,
        })
    }

    /// The turn to spawn a runner for.
    pub fn key(&self) -> &TurnKey {
        &self.snapshot.key
    }

    /// The token the runner is started with (`--slot-token`).
    pub fn token(&self) -> SlotToken {
        self.token
    }

    pub fn reserver(&self) -> ProcessIdentity {
        self.reserver
    }

    /// The row as the reserving step published it.
    pub fn snapshot(&self) -> &QueueEntry {
        &self.snapshot
    }
}

/// A handoff whose first publish landed: the child is bound on the reservation.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct BoundHandoff {
    handoff: Handoff,
    child: ProcessIdentity,
}

impl BoundHandoff {
    pub fn key(&self) -> &TurnKey {
        self.handoff.key()
    }

    pub fn token(&self) -> SlotToken {
        self.handoff.token
    }

    pub fn child(&self) -> ProcessIdentity {
        self.child
    }
}

/// The row moved on after the spawn (stolen, cancelled, parked, or completed by the child itself);
/// the token-fenced publish wrote nothing. The child's own take-over decides what happens next.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct Fenced {
    pub key: TurnKey,
    pub child: ProcessIdentity,
    pub reason: SlotError,
}

/// First publish of the handoff: bind `child` (the spawned runner) on the reservation and make it
/// the row's dispatch owner, keeping the token so the slot stays occupied if the reserver dies now.
pub fn handoff_publish_first(
    state: &mut QueueState,
    handoff: Handoff,
    child: ProcessIdentity,
) -> Result<BoundHandoff, Fenced> {
    match complete_runner_spawn_first(state, handoff.key(), handoff.token, child) {
        Ok(()) => {
            let row = state.row(handoff.key());
            debug_assert!(
                row.is_some_and(|r| r.state
                    == RowState::Dispatching {
                        dispatch_owner: child
                    }),
                "after the first publish the child dispatches the row"
            );
            debug_assert!(
                row.and_then(|r| r.slot_reservation.as_ref())
                    .is_some_and(|r| r.token == handoff.token && r.child == Some(child)),
                "the first publish keeps the token, bound to the child, so the slot stays taken"
            );
            Ok(BoundHandoff { handoff, child })
        }
        Err(reason) => Err(Fenced {
            key: handoff.key().clone(),
            child,
            reason,
        }),
    }
}

/// Second publish of the handoff: record the child as the runner and clear the token, fenced
/// against the reserving snapshot with this child bound. Returns the child.
pub fn handoff_publish_second(
    state: &mut QueueState,
    bound: BoundHandoff,
) -> Result<ProcessIdentity, Fenced> {
    let BoundHandoff { handoff, child } = bound;
    let published = token_fenced_row_after_bind(&handoff.snapshot, handoff.token, child)
        .and_then(|expected| complete_runner_spawn_second(state, &expected, child, false));
    if published.is_ok() {
        debug_assert!(
            state
                .runner(handoff.key())
                .is_some_and(|r| r.identity == child),
            "after the second publish the child is the turn's recorded runner"
        );
        debug_assert!(
            state
                .row(handoff.key())
                .is_some_and(|r| r.slot_reservation.is_none()),
            "the second publish clears the token"
        );
    }
    published.map(|()| child).map_err(|reason| Fenced {
        key: handoff.key().clone(),
        child,
        reason,
    })
}

/// The spawn failed: give the unbound reservation back and park the row. Returns whether the
/// reservation was still this handoff's to release (a stolen or bound one is left alone).
pub fn spawn_failed(state: &mut QueueState, handoff: Handoff) -> bool {
    let released = release_runner_slot(state, handoff.key(), handoff.token, handoff.reserver);
    debug_assert!(
        !released
            || state
                .row(handoff.key())
                .is_some_and(|r| { r.state == RowState::Parked && r.slot_reservation.is_none() }),
        "a released reservation leaves its row parked and unreserved"
    );
    released
}

// ---------------------------------------------------------------------------------------------
// What the shell must read for a step's input.
// ---------------------------------------------------------------------------------------------

/// The tasks whose strategies a start decision needs (those with parked rows): the shell reads
/// their records and passes the map as `strategies` to [`runner_finish`] and [`resume`].
pub fn strategies_needed(state: &QueueState) -> BTreeSet<&str> {
    state
        .entries
        .iter()
        .filter(|e| matches!(e.state, RowState::Parked))
        .map(|e| e.key.task.as_str())
        .collect()
}

/// Whether a reconcile step on `state` may start a parked row (its step 4): fewer slots are taken
/// than `cap`, counting as free what can end without an earlier step of the same section firing
/// on it first (a live runner whose row already left, on its way out; a dead runner's work, which
/// is dropped once seen gone). Every other holder of a slot that dies makes steps 0 to 3 act on
/// its row instead. `false` means the start decision cannot reserve a slot, so neither the
/// parked rows' records nor their tasks' strategies change what the step does (spec/slots.md,
/// "What reconcile reads"). Under [`ProductionRules`]: the shell's rules.
pub fn start_reachable(state: &QueueState, cap: usize, liveness: &impl Liveness) -> bool {
    let occupied = ProductionRules.occupied_runner_slots(state, liveness, None, None);
    let leaving = state
        .runners
        .iter()
        .filter(|r| liveness.is_live(&r.identity) && state.row(&r.key).is_none())
        .count();
    let dead_runners_works = state
        .works
        .iter()
        .filter(|w| !liveness.is_live(&w.runner))
        .count();
    occupied.saturating_sub(leaving + dead_runners_works) < cap
}

/// The tasks whose strategies one reconcile section needs: those with parked rows when the step
/// may start one ([`start_reachable`]), none otherwise (a task without a strategy in the map is
/// taken with the default one; with no slot free that decides nothing).
pub fn reconcile_strategies_needed<'a>(
    state: &'a QueueState,
    cap: usize,
    liveness: &impl Liveness,
) -> BTreeSet<&'a str> {
    if start_reachable(state, cap, liveness) {
        strategies_needed(state)
    } else {
        BTreeSet::new()
    }
}

/// What a turn's record on disk says, as [`reconcile`] needs it. The shell copies the fields
/// from the record (or says there is none); every decision taken from them is the step's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TurnOnDisk {
    /// The turn has no record: its task folder or turn folder was deleted.
    NoRecord,
    Record {
        /// The record holds an outcome.
        settled: bool,
        /// A foreground (`--attach`) turn.
        attached: bool,
        /// A start time is recorded.
        started: bool,
        /// A runner is recorded.
        runner: bool,
    },
}

impl TurnOnDisk {
    /// The turn has its outcome: it is never run again.
    pub fn is_settled(&self) -> bool {
        matches!(self, TurnOnDisk::Record { settled: true, .. })
    }

    /// A detached turn with a record that never started and has no outcome: without a row, its
    /// submitter died inside its section after writing the record (S9), and reconcile requeues it.
    pub fn is_never_started(&self) -> bool {
        matches!(
            self,
            TurnOnDisk::Record {
                settled: false,
                attached: false,
                started: false,
                runner: false,
            }
        )
    }
}

/// What the records say of each turn a reconcile step looks at (see [`records_needed`]).
pub type TurnRecords = BTreeMap<TurnKey, TurnOnDisk>;

/// The turns, among those listed on disk with what their records say, that a reconcile pass
/// must keep looking at besides the queue's rows: the never-started ones without a row (S9). The
/// shell lists the home's turns once, before the pass, and passes them here.
pub fn orphan_candidates(state: &QueueState, on_disk: &TurnRecords) -> Vec<TurnKey> {
    on_disk
        .iter()
        .filter(|(key, turn)| turn.is_never_started() && state.row(key).is_none())
        .map(|(key, _)| key.clone())
        .collect()
}

/// The most reconcile sections one pass runs over `state` with `candidates`: every section but a
/// kill and the last changes a row for good (a row started, removed or re-queued, a work killed
/// once per row and work), so a pass that runs longer is repeating itself. The shell's pass and
/// the conformance mirror both stop here.
pub fn reconcile_pass_bound(state: &QueueState, candidates: &[TurnKey]) -> usize {
    3 * (state.entries.len() + state.works.len() + candidates.len()) + 2
}

/// The turns whose records one reconcile section needs, read under its lock (spec/slots.md,
/// "What reconcile reads"): every row's that is not parked (a dead executor's turn: settled or
/// not?), the pass's orphan candidates, and the parked rows' (record gone? then the row is
/// Forgotten) only when the step may start a parked row ([`start_reachable`]). With no slot free
/// a parked row's record decides nothing now; a row whose record vanished is forgotten by the
/// first section in which a slot is free, before any parked row can start. So a parking submit's
/// repair reads the records of the active rows, not of the whole queue.
pub fn records_needed<'a>(
    state: &'a QueueState,
    candidates: &'a [TurnKey],
    cap: usize,
    liveness: &impl Liveness,
) -> impl Iterator<Item = &'a TurnKey> {
    let parked_too = start_reachable(state, cap, liveness);
    state
        .entries
        .iter()
        .filter(move |e| parked_too || !matches!(e.state, RowState::Parked))
        .map(|e| &e.key)
        .chain(candidates)
}

// ---------------------------------------------------------------------------------------------
// Detached submit.
// ---------------------------------------------------------------------------------------------

/// What a detached submit's locked section knows.
#[derive(Clone, Copy, Debug)]
pub struct SubmitInput<'a, L: Liveness> {
    /// The new turn (its record was just written by the shell, under the same lock).
    pub key: &'a TurnKey,
    pub me: ProcessIdentity,
    pub fresh_token: SlotToken,
    pub now_millis: u64,
    /// `workers`: the cap on detached starts.
    pub cap: usize,
    /// The task's strategy in force for this turn.
    pub strategy: Strategy,
    pub liveness: &'a L,
}

/// What the shell does after a detached submit.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum SubmitEffect {
    /// A slot is reserved: spawn the runner outside the lock and hand the row off.
    Spawn(Handoff),
    /// Every slot is busy: the row is parked and waits for one.
    Park,
    /// Another live process already starts or runs the turn; nothing to do.
    Pending,
    /// The row waits in its task's scope (a `queue`/`debounce` waiter, or a place in a line),
    /// startable from `ready_at_millis`. `wake_at_millis` is set when nothing but time will start
    /// it (a debounce deadline): the shell starts a waker for then.
    Wait {
        ready_at_millis: u64,
        wake_at_millis: Option<u64>,
    },
    /// The task's strategy is `drop` and its turn `running` is in the queue (`busy` says how):
    /// nothing was enqueued; the shell ends the new turn as dropped.
    Dropped { running: TurnKey, busy: Busy },
}

/// A detached submit's decision.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SubmitDecision {
    /// The new row's id; 0 when nothing was enqueued (dropped).
    pub queue_id: u64,
    pub effect: SubmitEffect,
    /// Parked waiters the new turn replaced: their rows left; the shell ends them as superseded.
    pub superseded: Vec<TurnKey>,
    /// Why the new row waits although its strategy would let it start (a pause, a not-before
    /// time; [`crate::slots::held_back`]); `None` otherwise.
    pub held: Option<HeldBack>,
}

/// The detached submit section: apply the task's strategy to the new turn, enqueue it, and
/// reserve a slot (or park it). Replaces `decide_submit`'s body in the shell.
pub fn submit<L: Liveness>(
    state: &mut QueueState,
    input: SubmitInput<'_, L>,
) -> Result<SubmitDecision, SlotError> {
    submit_scheduled(state, input, Schedule::default())
}

/// [`submit`] with the turn's [`Schedule`] (`--priority`, `--delay`/`--at`): the row gets its
/// priority, and a row that a pause or its not-before time holds back is parked instead of
/// reserved (spec/slots.md, "Scheduling").
pub fn submit_scheduled<L: Liveness>(
    state: &mut QueueState,
    input: SubmitInput<'_, L>,
    schedule: Schedule,
) -> Result<SubmitDecision, SlotError> {
    let key = input.key;
    // Checked first so that no error below can follow a change.
    validate_task_name(&key.task)?;
    let now = input.now_millis;
    let decided = match plan_submit(state, key, input.strategy, now) {
        SubmitPlan::Start => match held_back(state, &key.task, schedule.not_before_millis, now) {
            Some(_) => {
                let queue_id = enqueue(state, key, input.me, now)?.queue_id();
                park(state, key)?;
                Ok(hold(
                    state,
                    key,
                    queue_id,
                    schedule.not_before_millis,
                    now,
                    Vec::new(),
                )?)
            }
            None => submit_plan(state, input, SubmitPlan::Start),
        },
        SubmitPlan::Park {
            ready_at_millis,
            superseded,
        } => {
            let ready_at_millis = ready_at_millis.max(schedule.not_before_millis);
            let queue_id = replace_waiters(state, key, input.me, now, &superseded)?;
            park(state, key)?;
            Ok(hold(
                state,
                key,
                queue_id,
                ready_at_millis,
                now,
                superseded,
            )?)
        }
        SubmitPlan::LineUp => {
            let queue_id = enqueue(state, key, input.me, now)?.queue_id();
            park(state, key)?;
            Ok(hold(
                state,
                key,
                queue_id,
                schedule.not_before_millis,
                now,
                Vec::new(),
            )?)
        }
        plan => submit_plan(state, input, plan),
    }?;
    if decided.queue_id != 0 {
        state.row_mut(key)?.priority = schedule.priority;
    }
    Ok(decided)
}

/// The replaced waiters leave and the new turn's row is enqueued in their place. They leave
/// first, so a full queue has room for the new one; the new row's time is bounded below by the
/// last row's time *before* they leave, so that a replaced waiter that was the queue's last row
/// cannot lower it. A section on its part (which holds the queue's last row, not the rows before
/// it; `steps::project`) then gives the new row the time the whole queue gives it.
fn replace_waiters(
    state: &mut QueueState,
    key: &TurnKey,
    me: ProcessIdentity,
    now_millis: u64,
    superseded: &[TurnKey],
) -> Result<u64, SlotError> {
    let last_millis = state.entries.last().map_or(0, |e| e.enqueued_at_millis);
    state.entries.retain(|e| !superseded.contains(&e.key));
    Ok(enqueue(state, key, me, now_millis.max(last_millis))?.queue_id())
}

/// A parked new row that waits until `ready_at_millis` (or a resume): its waker, unless a pause
/// holds it (resume starts it, or spawns the waker then).
fn hold(
    state: &mut QueueState,
    key: &TurnKey,
    queue_id: u64,
    ready_at_millis: u64,
    now_millis: u64,
    superseded: Vec<TurnKey>,
) -> Result<SubmitDecision, SlotError> {
    set_ready_at(state, key, ready_at_millis)?;
    let held = held_back(state, &key.task, ready_at_millis, now_millis);
    let wake_at_millis =
        (ready_at_millis > now_millis && held != Some(HeldBack::Paused)).then_some(ready_at_millis);
    Ok(SubmitDecision {
        queue_id,
        effect: SubmitEffect::Wait {
            ready_at_millis,
            wake_at_millis,
        },
        superseded,
        held,
    })
}

/// A new row the strategy starts: a slot reserved for its runner, else parked (every slot busy),
/// else pending (another live process starts or runs the turn).
fn start_new_row<L: Liveness>(
    state: &mut QueueState,
    input: &SubmitInput<'_, L>,
) -> Result<SubmitEffect, SlotError> {
    let key = input.key;
    Ok(
        match reserve_runner_slot(
            state,
            key,
            input.me,
            None,
            input.cap,
            input.fresh_token,
            input.liveness,
        )? {
            ReserveOutcome::Acquired { token, .. } => {
                SubmitEffect::Spawn(Handoff::reserved(state, key, token, input.me)?)
            }
            ReserveOutcome::Saturated => {
                park(state, key)?;
                SubmitEffect::Park
            }
            ReserveOutcome::Pending { .. } => SubmitEffect::Pending,
        },
    )
}

/// The strategy's plan for a new row that nothing holds back.
fn submit_plan<L: Liveness>(
    state: &mut QueueState,
    input: SubmitInput<'_, L>,
    plan: SubmitPlan,
) -> Result<SubmitDecision, SlotError> {
    let key = input.key;
    let decision = |queue_id, effect, superseded| SubmitDecision {
        queue_id,
        effect,
        superseded,
        held: None,
    };
    match plan {
        SubmitPlan::Drop { running, busy } => Ok(decision(
            0,
            SubmitEffect::Dropped { running, busy },
            Vec::new(),
        )),
        SubmitPlan::Start => {
            let queue_id = enqueue(state, key, input.me, input.now_millis)?.queue_id();
            let effect = start_new_row(state, &input)?;
            Ok(decision(queue_id, effect, Vec::new()))
        }
        SubmitPlan::Park {
            ready_at_millis,
            superseded,
        } => {
            let queue_id = replace_waiters(state, key, input.me, input.now_millis, &superseded)?;
            park(state, key)?;
            set_ready_at(state, key, ready_at_millis)?;
            let wake_at_millis = (ready_at_millis > input.now_millis).then_some(ready_at_millis);
            Ok(decision(
                queue_id,
                SubmitEffect::Wait {
                    ready_at_millis,
                    wake_at_millis,
                },
                superseded,
            ))
        }
        SubmitPlan::LineUp => {
            let queue_id = enqueue(state, key, input.me, input.now_millis)?.queue_id();
            park(state, key)?;
            Ok(decision(
                queue_id,
                SubmitEffect::Wait {
                    ready_at_millis: 0,
                    wake_at_millis: None,
                },
                Vec::new(),
            ))
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Attached (foreground) start.
// ---------------------------------------------------------------------------------------------

/// What an attached submit's locked section knows.
#[derive(Clone, Copy, Debug)]
pub struct AttachedInput<'a, L: Liveness> {
    pub key: &'a TurnKey,
    pub me: ProcessIdentity,
    pub fresh_token: SlotToken,
    pub now_millis: u64,
    pub strategy: Strategy,
    pub liveness: &'a L,
}

/// What the shell does after an attached start.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum AttachedEffect {
    /// `me` is the turn's recorded executor: run the command in the foreground as `work`, then
    /// call [`runner_finish`].
    Run { work: WorkId },
    /// The task's strategy is `drop` and its turn `running` is in the queue; nothing was enqueued.
    Dropped { running: TurnKey, busy: Busy },
    /// The task's strategy has no room now (`concurrent=N` with N turns active, or one at a time
    /// with a turn active): nothing changed; the shell waits in the foreground and calls again.
    /// `running` is one of the active turns, or the turn itself when this host is drained
    /// ([`Liveness::may_start`]).
    Wait { running: TurnKey },
}

/// The attached start section: a foreground run is not capped by `workers` (it occupies, though),
/// but it honours its task's strategy: a `drop` task refuses it while a turn of the task is in the
/// queue, and it waits (in the foreground, outside the queue) while the task's running limit is
/// reached ([`attached_may_start`]). Enqueue, reserve, both handoff publishes with `me` as the
/// child, and the work record, all in one section.
pub fn attached_start<L: Liveness>(
    state: &mut QueueState,
    input: AttachedInput<'_, L>,
) -> Result<AttachedEffect, SlotError> {
    let key = input.key;
    validate_task_name(&key.task)?;
    if let SubmitPlan::Drop { running, busy } =
        plan_submit(state, key, input.strategy, input.now_millis)
    {
        return Ok(AttachedEffect::Dropped { running, busy });
    }
    // A drained host starts nothing, a foreground run included: it waits (outside the queue)
    // until the host is undrained; `running` is then the turn itself.
    if !input.liveness.may_start() {
        return Ok(AttachedEffect::Wait {
            running: key.clone(),
        });
    }
    if !attached_may_start(state, &key.task, input.strategy) {
        let running = state
            .entries
            .iter()
            .find(|e| e.key.task == key.task && !matches!(e.state, RowState::Parked))
            .map(|e| e.key.clone())
            .ok_or_else(|| SlotError::TurnBusy { key: key.clone() })?;
        return Ok(AttachedEffect::Wait { running });
    }
    let before = state.clone();
    let result = attached_start_inner(state, input);
    if result.is_err() {
        *state = before;
    }
    result
}

fn attached_start_inner<L: Liveness>(
    state: &mut QueueState,
    input: AttachedInput<'_, L>,
) -> Result<AttachedEffect, SlotError> {
    let (key, me) = (input.key, input.me);
    enqueue(state, key, me, input.now_millis)?;
    // Attached starts are not capped: the cap is usize::MAX.
    let token = match reserve_runner_slot(
        state,
        key,
        me,
        None,
        usize::MAX,
        input.fresh_token,
        input.liveness,
    )? {
        ReserveOutcome::Acquired { token, .. } => token,
        ReserveOutcome::Pending { .. } | ReserveOutcome::Saturated => {
            return Err(SlotError::TurnBusy { key: key.clone() })
        }
    };
    let snapshot = state
        .row(key)
        .cloned()
        .ok_or_else(|| SlotError::UnknownRow { key: key.clone() })?;
    complete_runner_spawn_first(state, key, token, me)?;
    let expected = token_fenced_row_after_bind(&snapshot, token, me)?;
    complete_runner_spawn_second(state, &expected, me, true)?;
    let work = WorkId::from_token(token);
    record_work(state, key, work, me, None);
    Ok(AttachedEffect::Run { work })
}

fn record_work(
    state: &mut QueueState,
    key: &TurnKey,
    id: WorkId,
    runner: ProcessIdentity,
    cgroup: Option<&str>,
) {
    if !state.works.iter().any(|w| w.id == id) {
        state.works.push(WorkRecord {
            key: key.clone(),
            id,
            runner,
            leader: None,
            cgroup: cgroup.map(str::to_string),
        });
    }
}

// ---------------------------------------------------------------------------------------------
// The runner: take-over, work started, finish.
// ---------------------------------------------------------------------------------------------

/// What a spawned runner's first locked section knows.
#[derive(Clone, Copy, Debug)]
pub struct TakeOverInput<'a, L: Liveness> {
    pub key: &'a TurnKey,
    /// The token the runner was started with.
    pub token: SlotToken,
    pub me: ProcessIdentity,
    /// Whether the turn's record already holds an outcome (a previous runner died while leaving).
    pub settled: bool,
    /// The cgroup v2 directory the runner will start the work in (`None`: process group + marker
    /// only), recorded on the work before the command exists so any process can kill it.
    pub cgroup: Option<&'a str>,
    pub liveness: &'a L,
}

/// What the runner does after its take-over.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum TakeOverEffect {
    /// Run the command as `work` (environment `TOLLGATE_WORK=<work>`, its own process group),
    /// record its leader with [`work_started`], then [`runner_finish`].
    Run { work: WorkId },
    /// Another live process holds the row: exit without running anything.
    Refused { holder: ProcessIdentity },
    /// The turn already ended: run nothing, call [`runner_finish`] at once.
    AlreadySettled,
    /// A cancel was recorded on the row before the command started: run nothing, end the turn as
    /// cancelled, then call [`runner_finish`].
    Cancelled,
}

/// The runner's take-over section: take the reserved slot over under its token (adopting a dead
/// reserver's handoff) and record the work it is about to start. The work is recorded before the
/// command starts, so a runner that dies at any later point leaves a work reconcile must kill.
pub fn runner_take_over<L: Liveness>(
    state: &mut QueueState,
    input: TakeOverInput<'_, L>,
) -> Result<TakeOverEffect, SlotError> {
    match take_over_reserved_slot(state, input.key, input.token, input.me, input.liveness)? {
        TakeOver::Refused { holder } => Ok(TakeOverEffect::Refused { holder }),
        TakeOver::Running { .. } if input.settled => Ok(TakeOverEffect::AlreadySettled),
        TakeOver::Running { .. } if state.row(input.key).is_some_and(|r| r.cancel_requested) => {
            Ok(TakeOverEffect::Cancelled)
        }
        TakeOver::Running { .. } => {
            let work = WorkId::from_token(input.token);
            record_work(state, input.key, work, input.me, input.cgroup);
            debug_assert!(
                state
                    .works
                    .iter()
                    .any(|w| w.id == work && &w.key == input.key),
                "the work is recorded before its command starts"
            );
            debug_assert!(
                state
                    .runner(input.key)
                    .is_some_and(|r| r.identity == input.me),
                "the runner that runs the command is the turn's recorded runner"
            );
            Ok(TakeOverEffect::Run { work })
        }
    }
}

/// The section right after the command was spawned: record its leader (the process group to kill
/// if the runner dies). Refused with `QUEUE_WORK_UNKNOWN` if the work is not recorded (any more).
pub fn work_started(
    state: &mut QueueState,
    key: &TurnKey,
    work: WorkId,
    leader: ProcessIdentity,
) -> Result<(), SlotError> {
    let record = state
        .works
        .iter_mut()
        .find(|w| w.id == work && &w.key == key)
        .ok_or_else(|| SlotError::UnknownWork {
            key: key.clone(),
            work: work.to_string(),
        })?;
    record.leader = Some(leader);
    Ok(())
}

/// What a finishing runner's section knows.
#[derive(Clone, Copy, Debug)]
pub struct FinishInput<'a, L: Liveness> {
    pub key: &'a TurnKey,
    pub me: ProcessIdentity,
    pub fresh_token: SlotToken,
    pub now_millis: u64,
    pub cap: usize,
    /// The strategies of the tasks with parked rows (default: one at a time).
    pub strategies: &'a BTreeMap<String, Strategy>,
    pub liveness: &'a L,
}

/// The finishing runner's section: leave the queue (row, runner record, and the work it started,
/// which it has waited out and killed the rest of), then reserve the oldest parked row its task's
/// strategy lets start, in the slot this runner frees (its own pid is excluded from occupancy).
/// `Some(handoff)`: spawn for it. An `Err` from the start half (a reused token) leaves the turn
/// finished; the shell publishes nothing then.
pub fn runner_finish<L: Liveness>(
    state: &mut QueueState,
    input: FinishInput<'_, L>,
) -> Result<Option<Handoff>, SlotError> {
    let (key, me) = (input.key, input.me);
    finish_turn(state, key, me)?;
    state.works.retain(|w| !(&w.key == key && w.runner == me));
    let filter = start_filter(input.strategies, input.now_millis);
    match start_next_parked_general(
        &ProductionRules,
        state,
        me,
        Some(me),
        input.cap,
        input.fresh_token,
        input.liveness,
        &filter,
    )? {
        StartNext::Acquired { key: next, token } => {
            debug_assert!(state.row(key).is_none(), "the finished turn left the queue");
            debug_assert!(next != *key, "a finish never restarts its own turn");
            Handoff::reserved(state, &next, token, me).map(Some)
        }
        StartNext::Saturated | StartNext::NoneParked => {
            debug_assert!(state.row(key).is_none(), "the finished turn left the queue");
            Ok(None)
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Reconcile.
// ---------------------------------------------------------------------------------------------

/// What one reconcile section knows.
#[derive(Clone, Copy, Debug)]
pub struct ReconcileInput<'a, L: Liveness> {
    pub me: ProcessIdentity,
    pub fresh_token: SlotToken,
    pub now_millis: u64,
    pub cap: usize,
    /// The strategies of [`reconcile_strategies_needed`] (a task missing from the map has the
    /// default strategy).
    pub strategies: &'a BTreeMap<String, Strategy>,
    /// What the records say of the turns in [`records_needed`] (a turn missing from the map is
    /// taken as "a record, not settled, started": the step neither requeues nor removes it, so a
    /// parked row whose record was not read is not forgotten by this step).
    pub records: &'a TurnRecords,
    pub liveness: &'a L,
}

/// The one thing a reconcile step did; the shell calls again until [`ReconcileEffect::is_final`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ReconcileEffect {
    /// A parked row nobody acts on whose turn has no record (its task or turn folder was
    /// deleted) was removed: it could never run. The shell says so on stderr; no record is
    /// written, since that would recreate what the operator removed.
    Forgotten { key: TurnKey },
    /// An orphaned turn (record, no row) was enqueued and parked.
    Requeued { key: TurnKey },
    /// A dead reserver's handoff was finished: its live bound child already runs the turn.
    CompletedHandoff { key: TurnKey },
    /// A row whose owner died before it started was parked (or a dead executor's row, with no
    /// free slot to replace it).
    Parked { key: TurnKey },
    /// A row whose turn already had an outcome was removed (its runner died while leaving).
    Removed { key: TurnKey },
    /// The work of a dead runner may still be alive: kill it (process group + environment
    /// marker), wait until none of it is left, then call again. Nothing changed.
    Kill { key: TurnKey, work: WorkRecord },
    /// Spawn a runner for the handoff; `replaced` is the dead executor it replaces (`None`: a
    /// parked row starts on a free slot).
    Spawn {
        handoff: Handoff,
        replaced: Option<ProcessIdentity>,
    },
    /// Rows are parked and no slot is free; nothing changed.
    Saturated,
    /// Nothing to repair and nothing parked.
    Idle,
}

impl ReconcileEffect {
    /// Whether reconcile is done (nothing more a step would change now).
    pub fn is_final(&self) -> bool {
        matches!(self, ReconcileEffect::Saturated | ReconcileEffect::Idle)
    }

    /// Whether the pass calls the step again once the shell performed this effect.
    /// `kill_complete`: for a [`ReconcileEffect::Kill`], whether none of the work was left after
    /// the kill (otherwise the pass ends: the next pass asks for the kill again, and no step may
    /// run the turn while a copy of its work may be alive). Ignored for the other effects.
    pub fn continues(&self, kill_complete: bool) -> bool {
        match self {
            ReconcileEffect::Kill { .. } => kill_complete,
            other => !other.is_final(),
        }
    }

    /// The step as the report and the CLI name it.
    pub fn step(&self) -> ReconcileStep {
        match self {
            ReconcileEffect::Forgotten { key } => ReconcileStep::Forgotten { key: key.clone() },
            ReconcileEffect::Requeued { key } => ReconcileStep::Requeued { key: key.clone() },
            ReconcileEffect::CompletedHandoff { key } => {
                ReconcileStep::CompletedHandoff { key: key.clone() }
            }
            ReconcileEffect::Parked { key } => ReconcileStep::Parked { key: key.clone() },
            ReconcileEffect::Removed { key } => ReconcileStep::Removed { key: key.clone() },
            ReconcileEffect::Kill { key, work } => ReconcileStep::Kill {
                key: key.clone(),
                work: work.clone(),
            },
            ReconcileEffect::Spawn { handoff, replaced } => ReconcileStep::Spawn {
                key: handoff.key().clone(),
                token: handoff.token(),
                replaced: *replaced,
            },
            ReconcileEffect::Saturated => ReconcileStep::Saturated,
            ReconcileEffect::Idle => ReconcileStep::Idle,
        }
    }
}

/// One reconcile section, in this order: forget a parked row whose turn has no record; requeue
/// one orphaned turn (S9); kill a dead runner's
/// possibly-live work (nothing else happens to its turn until the work is seen gone); finish a
/// dead reserver's handoff; park a dead owner's waiting row; remove (settled) or replace (not
/// settled) a dead executor's row; start the oldest parked row its strategy allows.
pub fn reconcile<L: Liveness>(
    state: &mut QueueState,
    input: ReconcileInput<'_, L>,
) -> Result<ReconcileEffect, SlotError> {
    reconcile_with(&ProductionRules, state, input)
}

/// Whether a reconcile step on `state` would do anything but end the pass (`Saturated`, `Idle`):
/// yes when a slot is free ([`start_reachable`]) and a parked row is there to start, else what
/// the step itself decides when run on `state`, a scratch copy the caller then drops. With no
/// slot free the step looks at no parked row that holds no reservation and that no runner or work
/// record names, so `state` may be the active part of the queue only (the other rows, every
/// runner and work record; spec/slots.md, "What reconcile reads"), with `input.records` from
/// [`records_needed`] on it, provided it holds one parked row whenever the queue has any (the
/// store's look adds the oldest one): with a slot free and no parked row in the queue the
/// active part is the whole queue, so the step on it is the step a section would run (issue 14:
/// a free slot alone made every submit on a queue without parked rows take a reconcile section
/// that did nothing). A parked row held by a pause (the home's or its task's) cannot start, so a
/// free slot is a reason only when `state` holds a parked row no pause holds (the store's look
/// holds one whenever the queue has one: `Store::load_active`); otherwise the step runs on
/// `state` as for a full home, and says yes for what it does to the active rows or to the parked
/// rows the look holds (a lost record: forgotten). Another paused row whose record is gone is
/// forgotten by the first section after its pause is lifted in which a slot may be free (a
/// paused home's every submit took a section of the whole queue, reading every parked row's
/// record: a parking submit cost 6 ms at 200 parked rows, 12 ms at 600). Dropping a stale runner
/// or work record counts as doing something (a section publishes it). The bounded repair after
/// a command's own section asks this first, and takes no section when it says no.
pub fn reconcile_would_act<L: Liveness>(
    state: &mut QueueState,
    input: ReconcileInput<'_, L>,
) -> Result<bool, SlotError> {
    let startable = state
        .entries
        .iter()
        .any(|e| matches!(e.state, RowState::Parked) && !state.paused.holds(&e.key.task));
    if startable && start_reachable(state, input.cap, input.liveness) {
        return Ok(true);
    }
    let records_before = (state.runners.len(), state.works.len());
    let effect = reconcile(state, input)?;
    Ok(!effect.is_final() || (state.runners.len(), state.works.len()) != records_before)
}

/// [`reconcile`] under explicit [`SlotRules`]: the seam the model's broken occupancy variants use.
pub fn reconcile_with<L: Liveness>(
    rules: &impl SlotRules,
    state: &mut QueueState,
    input: ReconcileInput<'_, L>,
) -> Result<ReconcileEffect, SlotError> {
    let records = input.records;
    // A row that can never run because its turn has no record, and that nobody acts on (a held
    // row is left to its holder; if it dies, the row is parked first and forgotten then).
    let forgotten = state.entries.iter().find(|e| {
        matches!(e.state, RowState::Parked)
            && e.slot_reservation.is_none()
            && state.runner(&e.key).is_none()
            && records.get(&e.key) == Some(&TurnOnDisk::NoRecord)
    });
    if let Some(entry) = forgotten {
        let key = entry.key.clone();
        state.entries.retain(|e| e.key != key);
        return Ok(ReconcileEffect::Forgotten { key });
    }
    let orphans: Vec<TurnKey> = records
        .iter()
        .filter(|(_, turn)| turn.is_never_started())
        .map(|(key, _)| key.clone())
        .collect();
    let filter = start_filter(input.strategies, input.now_millis);
    let step = reconcile_step_general(
        rules,
        state,
        input.me,
        input.cap,
        input.fresh_token,
        input.liveness,
        &|key: &TurnKey| records.get(key).is_some_and(TurnOnDisk::is_settled),
        &filter,
        Orphans {
            keys: &orphans,
            now_millis: input.now_millis,
        },
    )?;
    debug_assert_step(state, &step);
    Ok(match step {
        ReconcileStep::Forgotten { key } => ReconcileEffect::Forgotten { key },
        ReconcileStep::Requeued { key } => ReconcileEffect::Requeued { key },
        ReconcileStep::CompletedHandoff { key } => ReconcileEffect::CompletedHandoff { key },
        ReconcileStep::Parked { key } => ReconcileEffect::Parked { key },
        ReconcileStep::Removed { key } => ReconcileEffect::Removed { key },
        ReconcileStep::Kill { key, work } => ReconcileEffect::Kill { key, work },
        ReconcileStep::Spawn {
            key,
            token,
            replaced,
        } => ReconcileEffect::Spawn {
            handoff: Handoff::reserved(state, &key, token, input.me)?,
            replaced,
        },
        ReconcileStep::Saturated => ReconcileEffect::Saturated,
        ReconcileStep::Idle => ReconcileEffect::Idle,
    })
}

/// The postconditions of one reconcile step on the queue it changed: a row it removed is gone,
/// a row it parked or requeued is parked and unreserved, a finished handoff has no token left,
/// and a row it starts holds the reconciler's reservation.
fn debug_assert_step(state: &QueueState, step: &ReconcileStep) {
    let row = |key: &TurnKey| state.row(key);
    let parked = |key: &TurnKey| {
        row(key).is_some_and(|r| r.state == RowState::Parked && r.slot_reservation.is_none())
    };
    match step {
        ReconcileStep::Forgotten { key } | ReconcileStep::Removed { key } => {
            debug_assert!(row(key).is_none(), "a removed row is gone");
            debug_assert!(
                state.runner(key).is_none(),
                "a removed row's runner record is gone"
            );
        }
        ReconcileStep::Requeued { key } | ReconcileStep::Parked { key } => {
            debug_assert!(
                parked(key),
                "a requeued or parked row is parked and unreserved"
            );
        }
        ReconcileStep::CompletedHandoff { key } => debug_assert!(
            row(key).is_some_and(|r| r.slot_reservation.is_none()),
            "a finished handoff leaves no token"
        ),
        ReconcileStep::Spawn { key, token, .. } => debug_assert!(
            row(key)
                .and_then(|r| r.slot_reservation.as_ref())
                .is_some_and(|r| r.token == *token),
            "a row reconcile starts holds its reservation"
        ),
        ReconcileStep::Kill { .. } | ReconcileStep::Saturated | ReconcileStep::Idle => {}
    }
}

// ---------------------------------------------------------------------------------------------
// Cancel.
// ---------------------------------------------------------------------------------------------

/// Which rows a cancel concerns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CancelSelection<'a> {
    /// Every turn of the task (`tollgate cancel TASK`).
    Task(&'a str),
    /// One turn (a delivery that ran out of time).
    Turn(&'a TurnKey),
}

impl CancelSelection<'_> {
    fn selects(&self, key: &TurnKey) -> bool {
        match self {
            CancelSelection::Task(task) => key.task == *task,
            CancelSelection::Turn(turn) => key == *turn,
        }
    }
}

/// What the shell does after a cancel section.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct CancelEffect {
    /// Rows nobody ran: they left the queue; the shell ends their turns as cancelled.
    pub removed: Vec<TurnKey>,
    /// Live executors to ask to stop (SIGTERM): the recorded runner of the turn (a detached
    /// runner, or an attached submitter running the command in its foreground); each records the
    /// cancellation and leaves itself.
    pub signal: Vec<(TurnKey, ProcessIdentity)>,
    /// Rows a live dispatcher is handing off (a submit, `resume`, reconcile or a finishing runner
    /// that reserved it, or its spawned runner before its take-over): the request is recorded on
    /// the row and nobody is signalled, since the dispatcher is not the turn's executor; the
    /// runner it starts finds the request at its take-over and runs nothing (S13).
    pub recorded: Vec<TurnKey>,
    /// Works of dead runners that may still be alive: kill them, then cancel again; their rows
    /// stay (and keep their slots) until the work is seen gone.
    pub kill: Vec<WorkRecord>,
}

impl CancelEffect {
    /// Whether another cancel section is needed after the kills.
    pub fn again(&self) -> bool {
        !self.kill.is_empty()
    }
}

/// The cancel section. A row whose turn has a live recorded runner (its executor) is signalled
/// and keeps the request durably (`cancel_requested`); a row some other live process acts for
/// (a dispatcher mid-handoff, or the runner it spawned, bound but not yet recorded) keeps the
/// request and is signalled to nobody: the dispatcher is not the executor, and the runner honours
/// the request at its take-over (S13); a row whose dead runner's work may be alive stays while
/// that work is killed; every other selected row leaves with its runner record and its (gone)
/// works.
pub fn cancel<L: Liveness>(
    state: &mut QueueState,
    selection: CancelSelection<'_>,
    liveness: &L,
) -> CancelEffect {
    let mut effect = CancelEffect::default();
    let live_work =
        |w: &WorkRecord| !liveness.is_live(&w.runner) && liveness.observe_work(w).is_live();
    effect.kill = state
        .works
        .iter()
        .filter(|w| selection.selects(&w.key) && live_work(w))
        .cloned()
        .collect();
    for entry in state.entries.iter().filter(|e| selection.selects(&e.key)) {
        let dispatcher = acting_queue_holder(entry).filter(|h| liveness.is_live(h));
        let bound_child = entry
            .slot_reservation
            .as_ref()
            .and_then(|r| r.child)
            .filter(|c| liveness.is_live(c));
        if let Some(executor) = live_runner_for_turn(state, &entry.key, liveness) {
            effect.signal.push((entry.key.clone(), executor));
        } else if dispatcher.or(bound_child).is_some() {
            effect.recorded.push(entry.key.clone());
        } else if !effect.kill.iter().any(|w| w.key == entry.key) {
            effect.removed.push(entry.key.clone());
        }
    }
    for entry in state.entries.iter_mut() {
        if selection.selects(&entry.key) && !effect.removed.contains(&entry.key) {
            entry.cancel_requested = true;
        }
    }
    state.entries.retain(|e| !effect.removed.contains(&e.key));
    state.runners.retain(|r| !effect.removed.contains(&r.key));
    state.works.retain(|w| !effect.removed.contains(&w.key));
    debug_assert!(
        state
            .entries
            .iter()
            .filter(|e| selection.selects(&e.key))
            .all(|e| e.cancel_requested),
        "every selected row that stays keeps the cancel request durably"
    );
    debug_assert!(
        effect
            .signal
            .iter()
            .all(|(key, _)| state.row(key).is_some()),
        "a signalled executor's row stays until the executor leaves it"
    );
    effect
}

#[cfg(test)]
mod tests;
