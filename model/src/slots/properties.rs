//! Ground truth the properties compare the core against, and the properties S1-S9 themselves.

use super::render::token_number;
use super::state::*;
use super::SlotModel;
use tollgate_core::slots::{
    occupied_runner_slots, Liveness, Observation, RowState, SlotRules, TurnKey,
};

impl SlotState {
    /// Live spawned children that took their slot over and have not left the queue.
    pub fn live_runners(&self) -> usize {
        self.roles
            .iter()
            .filter(|r| self.procs[r.proc as usize].alive)
            .filter(|r| matches!(r.pc, Pc::Running { .. } | Pc::Written { .. }))
            .count()
    }

    /// Live processes running `key`'s command right now.
    pub fn executors_of(&self, key: &TurnKey) -> usize {
        self.roles
            .iter()
            .filter(|r| self.procs[r.proc as usize].alive)
            .filter(|r| matches!(&r.pc, Pc::Running { key: k, .. } if k == key))
            .count()
    }

    /// No process can act: every model and unrelated process has stopped and the last reconcile
    /// pass ended with nothing happening since.
    pub fn quiescent(&self) -> bool {
        self.reconciled_clean && self.procs.iter().all(|p| !p.alive)
    }
}

pub(super) fn s1_cap(model: &SlotModel, st: &SlotState) -> bool {
    st.live_runners() <= model.cfg.cap
}

pub(super) fn s2_one_executor(_: &SlotModel, st: &SlotState) -> bool {
    st.queue
        .entries
        .iter()
        .map(|e| &e.key)
        .chain(st.queue.runners.iter().map(|r| &r.key))
        .all(|key| st.executors_of(key) <= 1)
        && st.roles.iter().all(|r| match &r.pc {
            Pc::Running { key, .. } => st.executors_of(key) <= 1,
            _ => true,
        })
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
    let table = ProcTable(&st.procs);
    let excludes: Vec<Option<u32>> = std::iter::once(None)
        .chain(
            st.procs
                .iter()
                .filter(|p| p.alive && p.kind == ProcKind::Runner)
                .map(|p| Some(p.id.pid)),
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
    let table = ProcTable(&st.procs);
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
    !parked || st.live_runners() >= model.cfg.cap
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

pub(super) fn s9_every_turn_runs(_: &SlotModel, st: &SlotState) -> bool {
    if !st.quiescent() {
        return true;
    }
    st.queue.entries.is_empty() && st.violations & violation::TURN_LOST == 0
}

pub(super) fn core_accepts_shell_calls(_: &SlotModel, st: &SlotState) -> bool {
    st.violations & violation::CORE_ERROR == 0
}

/// Property names, as `spec/invariants.md` names them (grep for the invariant id).
pub mod names {
    pub const S1: &str = "S1 cap";
    pub const S2: &str = "S2 one executor per turn";
    pub const S3: &str = "S3 retired token never acts";
    pub const S4: &str = "S4 bound child occupies";
    pub const S5: &str = "S5 crash between publishes occupies";
    pub const S6: &str = "S6 no parked row with a free slot";
    pub const S7: &str = "S7 fifo";
    pub const S8: &str = "S8 tokens fresh";
    pub const S9: &str = "S9 every turn runs";
    pub const CORE: &str = "core accepts every call the shell makes";
    pub const PENDING_LIVE: &str = "reserve: pending on a live token";
    pub const STEAL_OUTCOME: &str = "reserve: steal";
    pub const PENDING_NIL: &str = "reserve: pending nil";
    pub const SATURATED: &str = "reserve: saturated";
    pub const ACQUIRED: &str = "reserve: acquired";
    pub const STOLEN_TOKEN_REFUSED: &str = "a steal: the old token is refused";
    pub const TAKEOVER_DEAD_PARENT: &str = "take-over of a dead parent";
    pub const CRASH_BETWEEN: &str = "crash between the two publishes";

    /// The `sometimes` properties that need crashes (absent with `--no-crashes`).
    pub const NEED_FAULTS: [&str; 4] = [
        STEAL_OUTCOME,
        STOLEN_TOKEN_REFUSED,
        TAKEOVER_DEAD_PARENT,
        CRASH_BETWEEN,
    ];
}
