//! Tasks as strategy scopes on the queue: the admission strategies (`drop`, `queue`, `debounce`,
//! `concurrent`) applied to a task's queue rows. Submit asks [`plan_submit`] what a new turn does;
//! every start of a parked row (a finishing runner, reconcile) asks [`may_start`].

use super::admission::{Arrival, Scope, Strategy};
use super::slots::{QueueEntry, QueueLookup, QueueState, RowState, TurnKey};

/// What a new turn of a task does, decided from the task's rows under the queue lock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SubmitPlan {
    /// Reserve a slot now (the global cap may still park it).
    Start,
    /// Park as the task's single waiter, startable from `ready_at_millis`; the `superseded` rows
    /// (parked waiters it replaces) leave the queue and end as superseded.
    Park {
        ready_at_millis: u64,
        superseded: Vec<TurnKey>,
    },
    /// Park in the task's line, behind its older rows.
    LineUp,
    /// Refuse: the strategy is `drop` and the task's turn `running` is still in the queue (`busy`
    /// says how). Nothing is enqueued.
    Drop { running: TurnKey, busy: Busy },
}

/// How a task's turn holds the task busy, as a refusal names it: a `drop` task takes no new turn
/// while any turn of it is in the queue, running or not yet (spec/admission.md, "Strategies").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Busy {
    /// Its command runs (a runner or a foreground submitter is recorded).
    Running,
    /// A slot is reserved for it and its runner is being started.
    Starting,
    /// It waits for a worker slot (parked by the global cap).
    WaitingForSlot,
}

impl Busy {
    /// How the turn of `key` holds its task in `state`.
    pub fn of(state: &QueueState, key: &TurnKey) -> Busy {
        match state.row(key).map(|e| &e.state) {
            Some(RowState::Parked) => Busy::WaitingForSlot,
            _ if state.runner(key).is_some() => Busy::Running,
            _ => Busy::Starting,
        }
    }
}

impl std::fmt::Display for Busy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Busy::Running => "is running",
            Busy::Starting => "is starting",
            Busy::WaitingForSlot => "is waiting for a worker slot",
        })
    }
}

fn is_active(entry: &QueueEntry) -> bool {
    !matches!(entry.state, RowState::Parked)
}

/// Rows of `task` that are running or being started: one scan, for a decision that asks once
/// (a decision that asks per parked row uses [`QueueLookup::running_in_scope`]).
pub fn running_in_scope(state: &QueueState, task: &str) -> usize {
    state
        .entries
        .iter()
        .filter(|e| e.key.task == task && is_active(e))
        .count()
}

/// The task's retained rows seen as a strategy scope.
fn scope_of(state: &QueueState, task: &str, strategy: Strategy) -> Scope<TurnKey> {
    let mut scope = Scope::default();
    for entry in state.entries.iter().filter(|e| e.key.task == task) {
        if is_active(entry) {
            scope.running.push(entry.key.clone());
            continue;
        }
        match strategy {
            // A drop task's parked row (parked only by the global cap) is busy work too.
            Strategy::Drop => scope.running.push(entry.key.clone()),
            Strategy::Queue | Strategy::Debounce { .. } => {
                // The newest parked row is the waiter; older ones (from a strategy change) wait
                // in line and are never superseded silently.
                if let Some((older, _)) = scope
                    .parked
                    .replace((entry.key.clone(), entry.ready_at_millis))
                {
                    scope.line.push_back(older);
                }
            }
            Strategy::Concurrent { .. } => scope.line.push_back(entry.key.clone()),
        }
    }
    scope
}

/// Decides what the new turn `key` does under `strategy` at `now_millis`.
pub fn plan_submit(
    state: &QueueState,
    key: &TurnKey,
    strategy: Strategy,
    now_millis: u64,
) -> SubmitPlan {
    let mut scope = scope_of(state, &key.task, strategy);
    match scope.arrive(strategy, key.clone(), now_millis) {
        Arrival::Start(_) => SubmitPlan::Start,
        Arrival::Park {
            ready_at_millis,
            superseded,
            ..
        } => SubmitPlan::Park {
            ready_at_millis,
            superseded: superseded.into_iter().collect(),
        },
        Arrival::LineUp(_) => SubmitPlan::LineUp,
        Arrival::Dropped { running, .. } => SubmitPlan::Drop {
            busy: Busy::of(state, &running),
            running,
        },
    }
}

/// Whether an attached (foreground) start of a turn of `task` may run now under `strategy`: the
/// task's running limit has room (`concurrent=N`: fewer than N of its turns active; one at a time
/// otherwise). An attached turn is no waiter (it is never superseded, and a debounce quiet period
/// does not delay it): it waits in the foreground until this holds. `drop` is decided before, by
/// [`plan_submit`].
pub fn attached_may_start(state: &QueueState, task: &str, strategy: Strategy) -> bool {
    strategy.may_start(running_in_scope(state, task), 0, 0)
}

/// Whether the parked row `entry` may start now under its task's `strategy`: room in the scope
/// and its debounce deadline passed. Rows are tried in FIFO order, so a task's line keeps order.
pub fn may_start(
    state: &QueueState,
    entry: &QueueEntry,
    strategy: Strategy,
    now_millis: u64,
) -> bool {
    strategy.may_start(
        running_in_scope(state, &entry.key.task),
        entry.ready_at_millis,
        now_millis,
    )
}

/// The start filter of [`crate::slots::steps::runner_finish`] and
/// [`crate::slots::steps::reconcile`]: each parked row may start when its task's strategy
/// (default: one at a time) allows it at `now_millis`. It answers [`crate::slots::dependencies_met`]
/// and [`may_start`] from the decision's [`QueueLookup`] (the same answers, in O(1) per row;
/// tests/store_depth_lookup.rs checks them against the scans).
pub fn start_filter(
    strategies: &std::collections::BTreeMap<String, Strategy>,
    now_millis: u64,
) -> impl Fn(&QueueLookup<'_>, &QueueEntry) -> bool + '_ {
    move |lookup, entry| {
        let strategy = strategies.get(&entry.key.task).copied().unwrap_or_default();
        // R1: a row whose dependencies are still queued never starts.
        entry.after.iter().all(|d| !lookup.has_row(&d.key))
            && strategy.may_start(
                lookup.running_in_scope(&entry.key.task),
                entry.ready_at_millis,
                now_millis,
            )
    }
}
