//! The size, the budgets, the tasks' strategies and the core variant of one slot model instance.

use std::collections::BTreeMap;
use std::fmt;
use tollgate_core::admission::{Strategy, MAX_CONCURRENT};
use tollgate_core::slots::TurnKey;

/// The name of the first task (the only one when the configuration has one task); task `i > 0` is
/// `job<i>`.
pub const TASK: &str = "job";

/// The clock of runners, reconcilers and cancellers: later than every submission plus any quiet
/// period, so a debounce waiter is due for every start that comes after its submission. (Time
/// passes between a submission and a later start; production's waker for a debounce deadline is
/// a start like reconcile's.)
pub const LATE_MILLIS: u64 = 1_000_000;

/// Which core the model drives: production, or one deliberately broken variant (the teeth).
///
/// Every variant wraps the production step and changes one decision of it (or of the driver that
/// performs its effect); the broken code lives here, never in the core. Each test in
/// `tests/model_slots.rs` expects the checker to reject its variant with a counterexample for the
/// property it breaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Variant {
    /// The production core, unchanged.
    Production,
    /// Occupancy counts reservations once per unique reserver pid instead of once each (reached
    /// through reconcile's rules seam; breaks S1).
    OccupancyPerReserverPid,
    /// `exclude_reserver` also drops the reservations whose reserver has that pid (breaks S4).
    ExcludeDropsReservations,
    /// Reconcile excludes its own pid, so a reconciler that holds a slot frees it (breaks S1).
    ReconcileExcludesItself,
    /// The spawn-failure release clears a reservation even after its child was bound (breaks S4).
    ReleaseAfterBind,
    /// Take-over adopts the row whatever the token and holders say (breaks S3, then S2).
    UnconditionalTakeOver,
    /// The driver treats reconcile's `Kill` as done without killing: the dead runner's work lives
    /// on while its turn runs again (breaks S2 and S1 over work).
    ReplaceWithoutKill,
    /// A `queue` submit keeps the waiter it should supersede: two waiters (breaks S10).
    QueueKeepsTwoWaiters,
    /// A `drop` submit that is refused enqueues the turn anyway (breaks S10).
    DropEnqueues,
    /// Reconcile is given no orphaned turns: a turn whose submitter died after writing its
    /// record never gets a row (breaks S9).
    SkipOrphanRequeue,
    /// Cancel ends the turns it removes but leaves their rows, which later run (breaks S11).
    CancelLeavesRow,
    /// The runner records `cancelled` whenever a cancel was requested, even for a command that
    /// had already run to its end (the outcome from the request, not from what happened; breaks
    /// S12).
    CancelledAfterCompletion,
    /// The attached start is given a strategy without a running limit: a foreground turn runs
    /// beside a running turn of a `concurrent=1` task (breaks S10).
    AttachedIgnoresStrategy,
    /// Cancel also signals the live process that acts for a row being handed off (the
    /// dispatcher that reserved it, or its spawned runner before it is recorded), as the step
    /// did before S13: a submitter, reconciler or finishing runner is killed mid-handoff (breaks
    /// S13).
    CancelSignalsDispatchers,
}

impl Variant {
    pub const BROKEN: [Variant; 13] = [
        Variant::OccupancyPerReserverPid,
        Variant::ExcludeDropsReservations,
        Variant::ReconcileExcludesItself,
        Variant::ReleaseAfterBind,
        Variant::UnconditionalTakeOver,
        Variant::ReplaceWithoutKill,
        Variant::QueueKeepsTwoWaiters,
        Variant::DropEnqueues,
        Variant::SkipOrphanRequeue,
        Variant::CancelLeavesRow,
        Variant::CancelledAfterCompletion,
        Variant::AttachedIgnoresStrategy,
        Variant::CancelSignalsDispatchers,
    ];
}

/// The size and the budgets of one model instance.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlotConfig {
    /// Detached submitting processes.
    pub submitters: usize,
    /// Attached (foreground) submitters: each starts its turns with the attached start and runs
    /// them itself, uncapped but occupying.
    pub attached: usize,
    /// Turns each submitter submits, each a new turn (the shell numbers turns from their records).
    /// At most 16 turns in all (bit sets track them).
    pub turns: u32,
    /// Worker slots (`workers`).
    pub cap: usize,
    /// The tasks and their strategies: submission `k` of submitter `s` goes to task
    /// `(s + k) % tasks.len()`, so submitters share task names.
    pub tasks: Vec<Strategy>,
    /// Deaths of model processes plus spawn faults, in total.
    pub crash_budget: u8,
    /// Pid reuses (by an unrelated process, or by a spawned child), in total.
    pub reuse_budget: u8,
    /// Reconciler runs started while other processes still work. The final pass after everything
    /// else stopped is not counted.
    pub reconcile_budget: u8,
    /// `tollgate cancel job` runs (of the first task), at any time while others work.
    pub cancel_budget: u8,
    /// Children may be spawned on a reused pid (spends the reuse budget).
    pub children_reuse_pids: bool,
    /// A runner whose command runs may also run a reconcile pass (spends the reconcile budget).
    pub runner_reconciles: bool,
    /// A submitter submits its turns from concurrent threads (like a serving process) instead of
    /// one after the other; several outstanding spawns of one process become reachable.
    pub concurrent_submissions: bool,
    /// A runner's command may fail to start (nothing runs, the turn ends unstartable: no leader is
    /// ever recorded) or start without its leader's identity being readable (the work runs with
    /// no leader recorded), as `execute_turn` can in production.
    pub command_faults: bool,
    pub variant: Variant,
}

impl SlotConfig {
    /// The default instance: one task whose strategy lets every turn run at once
    /// (`concurrent=MAX_CONCURRENT`, so the worker cap is what bites), crashes and pid reuse on,
    /// one reconcile run while others work.
    pub fn new(submitters: usize, turns: u32, cap: usize) -> Self {
        SlotConfig {
            submitters,
            attached: 0,
            turns,
            cap,
            tasks: vec![Strategy::Concurrent {
                max: MAX_CONCURRENT,
            }],
            crash_budget: 1,
            reuse_budget: 1,
            reconcile_budget: 1,
            cancel_budget: 0,
            children_reuse_pids: false,
            runner_reconciles: false,
            concurrent_submissions: false,
            command_faults: false,
            variant: Variant::Production,
        }
    }

    /// No crashes, no spawn faults and no pid reuse.
    pub fn without_faults(mut self) -> Self {
        self.crash_budget = 0;
        self.reuse_budget = 0;
        self
    }

    pub fn with_command_faults(mut self) -> Self {
        self.command_faults = true;
        self
    }

    pub fn with_variant(mut self, variant: Variant) -> Self {
        self.variant = variant;
        self
    }

    pub fn with_tasks(mut self, tasks: Vec<Strategy>) -> Self {
        self.tasks = tasks;
        self
    }

    /// All submitting processes, detached first, then attached.
    pub fn all_submitters(&self) -> usize {
        self.submitters + self.attached
    }

    /// The name of task `index`.
    pub fn task_name(index: usize) -> String {
        if index == 0 {
            TASK.to_string()
        } else {
            format!("{TASK}{index}")
        }
    }

    /// The turn submitter `submitter` (attached ones numbered after the detached) submits as its
    /// `index`-th submission.
    pub fn script(&self, submitter: usize, index: usize) -> TurnKey {
        let tasks = self.tasks.len().max(1);
        let task = (submitter + index) % tasks;
        let turn = submitter * self.turns as usize + index + 1;
        TurnKey::new(Self::task_name(task), turn as u32)
    }

    /// The strategy of `task`.
    pub fn strategy(&self, task: &str) -> Strategy {
        self.strategies().get(task).copied().unwrap_or_default()
    }

    /// Every task's strategy, as the shell passes them to the steps.
    pub fn strategies(&self) -> BTreeMap<String, Strategy> {
        self.tasks
            .iter()
            .enumerate()
            .map(|(i, s)| (Self::task_name(i), *s))
            .collect()
    }

    pub fn has_strategy(&self, pred: fn(&Strategy) -> bool) -> bool {
        self.tasks.iter().any(pred)
    }

    /// The submitter's clock: later submitters run behind, so enqueue coalescing is exercised.
    pub fn clock_millis(&self, submitter: usize) -> u64 {
        1_000 - 100 * submitter as u64
    }
}

impl fmt::Display for SlotConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tasks: Vec<String> = self.tasks.iter().map(|s| s.to_string()).collect();
        write!(
            f,
            "{} submitters{} x {} turns x cap {} tasks [{}] (crashes {}, reuses {}, reconciles {}{}{}{}{}{}, {:?})",
            self.submitters,
            if self.attached > 0 {
                format!(" + {} attached", self.attached)
            } else {
                String::new()
            },
            self.turns,
            self.cap,
            tasks.join(", "),
            self.crash_budget,
            self.reuse_budget,
            self.reconcile_budget,
            if self.cancel_budget > 0 {
                format!(", cancels {}", self.cancel_budget)
            } else {
                String::new()
            },
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
            if self.command_faults {
                ", command faults"
            } else {
                ""
            },
            self.variant
        )
    }
}
