//! The size, the budgets, the tasks' strategies and the core variant of one slot model instance.

use super::canonical::MAX_SYMMETRIC_SUBMITTERS;
use super::state::SubmitterShape;
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
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
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
    /// beside a running turn of a `concurrent=1` task (breaks S10; no attached start ever waits).
    AttachedIgnoresStrategy,
    /// Cancel also signals the live process that acts for a row being handed off (the
    /// dispatcher that reserved it, or its spawned runner before it is recorded), as the step
    /// did before S13: a submitter, reconciler or finishing runner is killed mid-handoff (breaks
    /// S13).
    CancelSignalsDispatchers,
    /// Reconcile takes the row of a reserver that died between the two publishes from the live
    /// child bound on it: it drops the reservation and parks the row (breaks S5, and S4).
    ParksBoundRowOfDeadReserver,
    /// A finishing runner and reconcile are given no free slot, so a row that a submit parked
    /// never starts (breaks S6, and S9).
    StartsNoParkedRow,
    /// A new row keeps its submitter's clock when that runs behind the last row's (no enqueue
    /// coalescing; breaks S7: `enqueued_at_millis` falls along the queue).
    EnqueuesAtOwnClock,
    /// A queue that empties hands its queue ids out again from 1 (breaks S7: `next_queue_id`
    /// falls).
    QueueIdsRestart,
    /// The token source repeats the last token it handed out (breaks S8).
    ReusesLastToken,
    /// A runner records its work's leader under the next turn's key, a call the core refuses
    /// (breaks "core accepts every call the shell makes").
    LeaderUnderAnotherTurn,
    /// A submit is given no free slot: no submit spawns (the example "submit: spawn" is never
    /// reached).
    SubmitSeesNoSlot,
    /// A submit reserves a slot for its turn whatever the cap and its task's strategy say (breaks
    /// S1, and S10 under `drop`; no submit parks, waits, supersedes or drops).
    SubmitStartsEverything,
    /// Reconcile sees every process and work alive: it never kills a dead runner's work nor
    /// replaces it (breaks S9; its kill and replace examples are never reached).
    ReconcileSeesEveryoneAlive,
    /// The two publishes of a handoff run in one section, so nothing can die between them (the
    /// example "crash between the two publishes" is never reached).
    PublishesInOneSection,
    /// The driver never runs an attached start: it waits as if the task were full (the example
    /// "attached start runs" is never reached).
    AttachedNeverRuns,
    /// Cancel names a task without turns (the example "cancel removes a row" is never reached).
    CancelSelectsNothing,
}

impl Variant {
    pub const BROKEN: [Variant; 25] = [
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
        Variant::ParksBoundRowOfDeadReserver,
        Variant::StartsNoParkedRow,
        Variant::EnqueuesAtOwnClock,
        Variant::QueueIdsRestart,
        Variant::ReusesLastToken,
        Variant::LeaderUnderAnotherTurn,
        Variant::SubmitSeesNoSlot,
        Variant::SubmitStartsEverything,
        Variant::ReconcileSeesEveryoneAlive,
        Variant::PublishesInOneSection,
        Variant::AttachedNeverRuns,
        Variant::CancelSelectsNothing,
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

    /// The clock of a submission, given how many turn records were written before it: the
    /// submissions of a run take turns between two clocks 100 ms apart (the second, fourth, …
    /// run behind), so a submit whose clock is behind the last row's (enqueue coalescing, S7) and
    /// one whose clock is ahead both happen. The clock belongs to the submission, not to the
    /// submitter, so submitters stay interchangeable (symmetry reduction, [`Self::symmetric`]).
    pub fn clock_millis(submissions_before: u32) -> u64 {
        1_000 - 100 * u64::from(submissions_before % 2)
    }

    /// The submitters' shape when they are interchangeable: one task (every submission goes to
    /// it), at least two detached submitters (at most [`MAX_SYMMETRIC_SUBMITTERS`]), and at most
    /// one crash, so reconcile (which requeues orphaned turns in turn order) never holds two
    /// orphans at once whose order a permutation could swap. Attached submitters are never
    /// permuted.
    pub fn symmetric(&self) -> Option<SubmitterShape> {
        let shape = SubmitterShape {
            count: u8::try_from(self.submitters).ok()?,
            turns: u8::try_from(self.turns).ok()?,
        };
        (self.tasks.len() == 1
            && (2..=MAX_SYMMETRIC_SUBMITTERS).contains(&shape.count)
            && self.crash_budget <= 1)
            .then_some(shape)
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
