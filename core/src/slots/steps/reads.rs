//! What a section's step reads of the queue (issue 12, point 4; spec/store.md, "What a section
//! loads"): the core names the part of the queue a step may touch, the store loads only that
//! part, the unchanged step runs on it, and a check of the core says whether the part sufficed
//! (otherwise the shell rolls the section back and runs it again on the whole queue).
//!
//! A part ([`project`]) always holds the queue's counters (`next_queue_id`), the pause set, every
//! runner and work record, the *active* rows (not parked, holding a reservation, or named by a
//! runner or work record: everything occupancy counts), and the last row (the highest
//! `queue_id`: [`crate::slots::enqueue`] takes the next id and the enqueue time from it). A
//! [`QueueReads`] adds every row of some tasks (a strategy's scope: its running rows, its waiter,
//! its line), the rows that depend on a turn of those tasks (a superseded waiter's departure
//! looks at them), and the rows of some turns (a new turn's dependencies). The rows of a part are
//! a subsequence of the queue in `queue_id` order, so every structural invariant
//! ([`QueueState::check_structure`]) holds of it when it holds of the queue.

use crate::slots::{Dependency, QueueEntry, QueueState, RowState, TurnKey, MAX_QUEUE_ROWS};
use std::collections::BTreeSet;

/// What a section reads beyond the part every section reads (see the module's documentation).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct QueueReads {
    /// Every row of these tasks, and every row that depends on a turn of one of them.
    pub tasks: BTreeSet<String>,
    /// The rows of these turns, where they have one.
    pub turns: BTreeSet<TurnKey>,
}

/// What a section asks the store to load.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Reads {
    /// The whole queue: what every section read before, and the rerun of a section whose part did
    /// not suffice.
    Everything,
    /// The part [`project`] names.
    Part(QueueReads),
}

/// What the store loaded for a section.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Loaded {
    /// The whole queue (a store that cannot load a part, or [`Reads::Everything`]).
    Whole,
    /// The part `reads` names, of a queue of `queue_rows` rows in all.
    Part {
        reads: QueueReads,
        queue_rows: usize,
    },
}

/// The part of the queue a detached submit's section reads: every row of the submitted turn's
/// `task` (its strategy's scope, and the new turn's own row if it already has one) and the rows
/// of the turns it waits for (`after`). `task` is `None` when the shell generates the task's
/// name inside the section: then [`submit_covers`] says no, and the shell runs the section again
/// with the name it generated.
pub fn submit_reads(task: Option<&str>, after: &[Dependency]) -> QueueReads {
    QueueReads {
        tasks: task.map(str::to_string).into_iter().collect(),
        turns: after.iter().map(|d| d.key.clone()).collect(),
    }
}

/// The part of the queue a section of one row's steps reads (issue 14): the handoff's publishes
/// ([`super::handoff_publish_first`], [`super::handoff_publish_second`], and
/// `fleet::handoff_publish_first_leased`), [`super::spawn_failed`], the runner's take-over
/// ([`super::runner_take_over`]) and its leader's record ([`super::work_started`]). Each of these
/// reads and writes only the row of `key`, the runner and work records and the counters (none of
/// them enqueues, removes a row, or counts occupancy), and the liveness of identities named in
/// that row; the part holds all of them: the runner and work records whole, and the row of `key`
/// in any state (`turns`), so it always suffices and the step on it, merged back ([`merge`]),
/// equals the step on the whole queue (tests/store_section_parts.rs). The store then loads the
/// active rows and the last one besides, not the parked rows, so the section's cost does not grow
/// with the queue's depth.
pub fn row_reads(key: &TurnKey) -> QueueReads {
    QueueReads {
        tasks: BTreeSet::new(),
        turns: std::iter::once(key.clone()).collect(),
    }
}

/// Whether `entry` (a row of `state`) belongs to the part `reads` names: the reference of what
/// a store's partial load returns (tests/store_depth_projection.rs holds the SQLite store to it).
pub fn in_part(state: &QueueState, entry: &QueueEntry, reads: &QueueReads) -> bool {
    !matches!(entry.state, RowState::Parked)
        || entry.slot_reservation.is_some()
        || state.runners.iter().any(|r| r.key == entry.key)
        || state.works.iter().any(|w| w.key == entry.key)
        || state.entries.last().map(|e| e.queue_id) == Some(entry.queue_id)
        || reads.tasks.contains(&entry.key.task)
        || reads.turns.contains(&entry.key)
        || entry
            .after
            .iter()
            .any(|d| reads.tasks.contains(&d.key.task))
}

/// The part of `state` that `reads` names, as a store loads it.
pub fn project(state: &QueueState, reads: &QueueReads) -> QueueState {
    QueueState {
        entries: state
            .entries
            .iter()
            .filter(|e| in_part(state, e, reads))
            .cloned()
            .collect(),
        ..state.clone()
    }
}

/// Writes back into `full` what a section changed in its part (`before` as loaded, `after` as
/// the step left it), as a store's commit does: the counters, the pause set and the runner and
/// work records whole; the rows of `before` missing from `after` removed, the rows of `after`
/// added or replaced (by `queue_id`). A row the part did not hold is never touched.
pub fn merge(full: &mut QueueState, before: &QueueState, after: &QueueState) {
    full.version = after.version;
    full.next_queue_id = after.next_queue_id;
    full.paused = after.paused.clone();
    full.runners = after.runners.clone();
    full.works = after.works.clone();
    let left: BTreeSet<u64> = before
        .entries
        .iter()
        .map(|e| e.queue_id)
        .filter(|id| !after.entries.iter().any(|e| e.queue_id == *id))
        .collect();
    full.entries.retain(|e| !left.contains(&e.queue_id));
    for entry in &after.entries {
        match full
            .entries
            .iter_mut()
            .find(|e| e.queue_id == entry.queue_id)
        {
            Some(row) => *row = entry.clone(),
            None => full.entries.push(entry.clone()),
        }
    }
    full.entries.sort_by_key(|e| e.queue_id);
}

/// Whether a submit section's part suffices for a new turn of `task`, asked before its step:
/// the part holds every row of the task (so the strategy's scope, the supersession and the
/// "already queued" check see what the whole queue shows), and the queue is below
/// [`MAX_QUEUE_ROWS`] (the step counts the part's rows, which are fewer: at the bound the whole
/// queue is read, so the refusal is the step's own). A whole queue always suffices.
pub fn submit_covers(loaded: &Loaded, task: &str) -> bool {
    match loaded {
        Loaded::Whole => true,
        Loaded::Part { reads, queue_rows } => {
            *queue_rows < MAX_QUEUE_ROWS && reads.tasks.contains(task)
        }
    }
}

/// Whether a submit section on a part stayed inside it, asked after its step and the departures
/// of the waiters it superseded: every row that left is one of `superseded` (a row removed for
/// another reason, a dependent ended dependency-failed, may have dependents the part does not
/// hold, whose own departure the whole queue decides). `before` are the part's rows as loaded.
pub fn submit_stayed_inside(
    loaded: &Loaded,
    before: &[TurnKey],
    after: &QueueState,
    superseded: &[TurnKey],
) -> bool {
    match loaded {
        Loaded::Whole => true,
        Loaded::Part { .. } => before
            .iter()
            .all(|key| after.row(key).is_some() || superseded.contains(key)),
    }
}
