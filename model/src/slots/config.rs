//! The size, the budgets and the core variant of one slot model instance.

use std::fmt;
use tollgate_core::slots::TurnKey;

/// The one task all turns belong to (the protocol only cares about turn keys).
pub const TASK: &str = "job";

/// Which core the model drives: production, or one deliberately broken variant (the teeth).
///
/// The broken variants live here, never in `src/`; each test in `tests/model_slots.rs` expects the
/// checker to reject its variant with a counterexample for the property it breaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Variant {
    /// The production core, unchanged.
    Production,
    /// Occupancy counts reservations once per unique reserver pid instead of once each: several
    /// outstanding spawns of one process count as one slot (breaks S1).
    OccupancyPerReserverPid,
    /// `exclude_reserver` also drops the reservations whose reserver has that pid (breaks S1).
    ExcludeDropsReservations,
    /// Reconcile excludes its own pid, so a reconciler that holds a slot frees it (breaks S1).
    ReconcileExcludesItself,
    /// Release clears a reservation even after its child was bound (breaks S4).
    ReleaseAfterBind,
    /// Take-over adopts the row whatever the token and holders say (breaks S3, then S2).
    UnconditionalTakeOver,
}

impl Variant {
    pub const BROKEN: [Variant; 5] = [
        Variant::OccupancyPerReserverPid,
        Variant::ExcludeDropsReservations,
        Variant::ReconcileExcludesItself,
        Variant::ReleaseAfterBind,
        Variant::UnconditionalTakeOver,
    ];
}

/// The size and the budgets of one model instance.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlotConfig {
    /// Submitting processes.
    pub submitters: usize,
    /// Turns: each submitter submits every turn once (rotated, so submitters contend), which makes
    /// duplicate enqueues and the pending outcomes reachable. At most 8 (a bit set tracks them).
    pub turns: u32,
    /// Worker slots (`workers`).
    pub cap: usize,
    /// Deaths of model processes plus spawn faults, in total.
    pub crash_budget: u8,
    /// Pid reuses (by an unrelated process, or by a spawned child), in total.
    pub reuse_budget: u8,
    /// Reconciler runs started while other processes still work. The final pass after everything
    /// else stopped is not counted.
    pub reconcile_budget: u8,
    /// Children may be spawned on a reused pid (spends the reuse budget).
    pub children_reuse_pids: bool,
    /// A runner whose command runs may also run a reconcile pass (spends the reconcile budget).
    pub runner_reconciles: bool,
    /// A submitter submits its turns from concurrent threads (like a serving process) instead of
    /// one after the other; several outstanding spawns of one process become reachable.
    pub concurrent_submissions: bool,
    pub variant: Variant,
}

impl SlotConfig {
    /// The default instance: crashes and pid reuse on, one reconcile run while others work.
    pub fn new(submitters: usize, turns: u32, cap: usize) -> Self {
        SlotConfig {
            submitters,
            turns,
            cap,
            crash_budget: 1,
            reuse_budget: 1,
            reconcile_budget: 1,
            children_reuse_pids: false,
            runner_reconciles: false,
            concurrent_submissions: false,
            variant: Variant::Production,
        }
    }

    /// No crashes, no spawn faults and no pid reuse.
    pub fn without_faults(mut self) -> Self {
        self.crash_budget = 0;
        self.reuse_budget = 0;
        self
    }

    pub fn with_variant(mut self, variant: Variant) -> Self {
        self.variant = variant;
        self
    }

    /// The turn submitter `submitter` submits as its `index`-th submission.
    pub fn script(&self, submitter: usize, index: usize) -> TurnKey {
        let turns = self.turns.max(1) as usize;
        let turn = (submitter + index) % turns;
        TurnKey::new(TASK, turn as u32 + 1)
    }

    /// The submitter's clock: later submitters run behind, so enqueue coalescing is exercised.
    pub fn clock_millis(&self, submitter: usize) -> u64 {
        1_000 - 100 * submitter as u64
    }
}

impl fmt::Display for SlotConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} submitters x {} turns x cap {} (crashes {}, reuses {}, reconciles {}{}{}{}, {:?})",
            self.submitters,
            self.turns,
            self.cap,
            self.crash_budget,
            self.reuse_budget,
            self.reconcile_budget,
            if self.children_reuse_pids {
                ", children reuse pids"
            } else {
                ""
            },
            if self.runner_reconciles {
                ", runners reconcile"
            } else {
                ""
            },
            if self.concurrent_submissions {
                ", concurrent submissions"
            } else {
                ""
            },
            self.variant
        )
    }
}
