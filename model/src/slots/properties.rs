//! Ground truth the properties compare the core against, and the properties S1-S13 themselves.

use super::state::*;
use super::SlotModel;
use tollgate_core::slots::{
    occupied_runner_slots, Liveness, Observation, ProcessIdentity, RowState, SlotRules, TurnKey,
};

impl SlotState {
    /// Live works started by detached runners (the capped ones).
    pub fn live_detached_works(&self) -> usize {
        self.works.iter().filter(|w| w.detached).count()
    }

    /// Live works of `key`, whoever started them and whatever became of their runner.
    pub fn works_of(&self, key: &TurnKey) -> usize {
        self.works.iter().filter(|w| &w.key == key).count()
    }

    /// Whether `id` may receive a cancel's SIGTERM for `key`: it is no live process (the driver
    /// checks the identity before it signals, so nothing is sent), or a role of its process is
    /// the runner of `key` from its take-over to its finish (a detached runner, or an attached
    /// submitter running the command itself). A dispatcher handing `key` off is neither.
    pub fn may_be_signalled_for(&self, id: &ProcessIdentity, key: &TurnKey) -> bool {
        let Some(proc) = self.procs.iter().position(|p| p.alive && p.id == *id) else {
            return true;
        };
        self.roles.iter().any(|role| {
            usize::from(role.proc) == proc
                && match &role.pc {
                    Pc::TakeOver { key: k, .. }
                    | Pc::StartWork { key: k, .. }
                    | Pc::Running { key: k, .. }
                    | Pc::Written { key: k, .. } => k == key,
                    _ => false,
                }
        })
    }

    /// No process can act: every model and unrelated process has stopped and the last reconcile
    /// pass ended with nothing happening since.
    pub fn quiescent(&self) -> bool {
        self.reconciled_clean && self.procs.iter().all(|p| !p.alive)
    }
}

/// S1 over work: never more live detached works than `workers`. A runner that died does not end
/// its work, so the count is over works, not runner processes.
pub(super) fn s1_cap(model: &SlotModel, st: &SlotState) -> bool {
    st.live_detached_works() <= model.cfg.cap
}

/// S2 over work: never two live works of one turn (a replacement runner next to the dead runner's
/// surviving work is two).
pub(super) fn s2_one_work_per_turn(_: &SlotModel, st: &SlotState) -> bool {
    st.works.iter().all(|w| st.works_of(&w.key) <= 1)
}

pub(super) fn s3_retired_token(_: &SlotModel, st: &SlotState) -> bool {
    st.violations & violation::RETIRED_TOKEN_ACTED == 0
}

pub(super) fn s4_bound_child(model: &SlotModel, st: &SlotState) -> bool {
    if st.violations & violation::BOUND_CHILD_DROPPED != 0 {
        return false;
    }
    // Reservations whose bound child lives are counted, one each, under every exclusion the shell
    // passes (none, or a runner's own pid): the occupancy never falls below their number. (An
    // identity seen only on reserved rows is represented by those reservations, so the count
    // cannot be split per reservation; the bound still catches any exclusion that drops one.)
    let rules = model.rules();
    let table = ProcTable::of(st);
    let excludes: Vec<Option<ProcessIdentity>> = std::iter::once(None)
        .chain(
            st.procs
                .iter()
                .filter(|p| p.alive && p.kind == ProcKind::Runner)
                .map(|p| Some(p.id)),
        )
        .collect();
    let bound_live = st
        .queue
        .entries
        .iter()
        .filter(|e| {
            e.slot_reservation
                .as_ref()
                .and_then(|r| r.child)
                .is_some_and(|c| table.observe(&c) == Observation::Matching)
        })
        .count();
    bound_live == 0
        || excludes.iter().all(|&exclude| {
            rules.occupied_runner_slots(&st.queue, &table, exclude, None) >= bound_live
        })
}

pub(super) fn s5_crash_between_publishes(_: &SlotModel, st: &SlotState) -> bool {
    let table = ProcTable::of(st);
    st.orphaned_handoffs.iter().all(|(queue_id, token, child)| {
        if table.observe(child) != Observation::Matching {
            return true;
        }
        let Some(row) = st.queue.entries.iter().find(|e| e.queue_id == *queue_id) else {
            return true;
        };
        let key = &row.key;
        let still_reserved = row
            .slot_reservation
            .as_ref()
            .is_some_and(|r| r.token == *token && r.child == Some(*child));
        let handed_over = st.queue.runner(key).map(|r| r.identity) == Some(*child);
        (still_reserved || handed_over) && occupied_runner_slots(&st.queue, &table, None, None) >= 1
    })
}

pub(super) fn s6_no_parked_with_free_slot(model: &SlotModel, st: &SlotState) -> bool {
    if !st.quiescent() {
        return true;
    }
    let parked = st
        .queue
        .entries
        .iter()
        .any(|e| matches!(e.state, RowState::Parked));
    !parked || st.live_detached_works() >= model.cfg.cap
}

pub(super) fn s7_fifo(_: &SlotModel, st: &SlotState) -> bool {
    st.violations & violation::FIFO == 0 && st.queue.check_structure().is_ok()
}

pub(super) fn s8_tokens_fresh(_: &SlotModel, st: &SlotState) -> bool {
    st.violations & violation::TOKEN_REUSED == 0
        && tokens_of(&st.queue).all(|t| {
            let n = token_number(&t);
            !t.as_uuid().is_nil() && n >= 1 && n < u128::from(st.next_token)
        })
}

/// S9: in a quiescent state after reconcile, every turn whose record was written has ended (ran,
/// superseded, dropped or cancelled), and the queue is empty; no row ever left before its turn
/// ended.
pub(super) fn s9_every_turn_ends(_: &SlotModel, st: &SlotState) -> bool {
    if st.violations & violation::TURN_LOST != 0 {
        return false;
    }
    if !st.quiescent() {
        return true;
    }
    st.queue.entries.is_empty() && st.recorded & !st.ended == 0
}

/// S10: a task's strategy holds on every submit: under `queue`/`debounce` one parked waiter (a
/// newer arrival supersedes it), under `drop` nothing is enqueued while a row of the task exists.
pub(super) fn s10_strategies(_: &SlotModel, st: &SlotState) -> bool {
    st.violations & violation::STRATEGY == 0
}

/// S11: a turn that ended (ran, superseded, dropped, cancelled) never starts a work again.
pub(super) fn s11_ended_never_runs(_: &SlotModel, st: &SlotState) -> bool {
    st.violations & violation::ENDED_RAN == 0
}

/// S12: a turn recorded `cancelled` never had its work run to its end (a cancel that arrives
/// after the command ended leaves the outcome the command earned).
pub(super) fn s12_cancelled_never_completed(_: &SlotModel, st: &SlotState) -> bool {
    st.cancelled & st.ran == 0
}

/// S13: a cancel signals only the executor of the turn it cancels, never a dispatcher handing
/// the row off (checked on every cancel section, [`SlotState::may_be_signalled_for`]).
pub(super) fn s13_cancel_signals_only_executors(_: &SlotModel, st: &SlotState) -> bool {
    st.violations & violation::SIGNALLED_DISPATCHER == 0
}

pub(super) fn core_accepts_shell_calls(_: &SlotModel, st: &SlotState) -> bool {
    st.violations & violation::CORE_ERROR == 0
}

/// Property names, as `spec/invariants.md` names them (grep for the invariant id).
pub mod names {
    pub const S1: &str = "S1 cap over work";
    pub const S2: &str = "S2 one live work per turn";
    pub const S3: &str = "S3 retired token never acts";
    pub const S4: &str = "S4 bound child occupies";
    pub const S5: &str = "S5 crash between publishes occupies";
    pub const S6: &str = "S6 no parked row with a free slot";
    pub const S7: &str = "S7 fifo";
    pub const S8: &str = "S8 tokens fresh";
    pub const S9: &str = "S9 every turn ends";
    pub const S10: &str = "S10 strategies hold on submit";
    pub const S11: &str = "S11 an ended turn never runs again";
    pub const S12: &str = "S12 a cancelled turn never completed its work";
    pub const S13: &str = "S13 cancel signals only executors";
    pub const CORE: &str = "core accepts every call the shell makes";
    pub const ACQUIRED: &str = "submit: spawn";
    pub const SATURATED: &str = "submit: park (saturated)";
    pub const WAIT: &str = "submit: wait in the task's scope";
    pub const SUPERSEDED: &str = "submit: a waiter superseded";
    pub const DROPPED: &str = "submit: dropped";
    pub const KILL: &str = "reconcile: kill a dead runner's work";
    pub const REPLACED: &str = "reconcile: replace a dead executor";
    pub const REQUEUED: &str = "reconcile: requeue an orphaned turn";
    pub const CRASH_BETWEEN: &str = "crash between the two publishes";
    pub const ATTACHED_RUN: &str = "attached start runs";
    pub const ATTACHED_WAIT: &str = "attached start waits for its task's running limit";
    pub const CANCEL_REMOVED: &str = "cancel removes a row";
    pub const CANCEL_HONOURED: &str = "take-over honours a recorded cancel";
    pub const CANCEL_STOPPED: &str = "a signalled runner stops its work";
}
