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
//! looks at them), the rows of some turns (a new turn's dependencies), and the first parked rows
//! in start order with the rows they wait for (a finishing runner's next start). The rows of a
//! part are a subsequence of the queue in `queue_id` order, so every structural invariant
//! ([`QueueState::check_structure`]) holds of it when it holds of the queue.

use crate::admission::Strategy;
use crate::slots::order::start_rank;
use crate::slots::{Dependency, QueueEntry, QueueState, RowState, TurnKey, MAX_QUEUE_ROWS};
use std::collections::{BTreeMap, BTreeSet};

/// How many parked rows, first in the start order, a finishing runner's section reads
/// ([`finish_reads`]): the next start is almost always the first of them that may start; a
/// finish whose start lies further on (every one of these is paused, waiting for a dependency or
/// a debounce, or its scope is busy) runs again on the whole queue ([`finish_sufficed`]).
pub const FINISH_HEADS: usize = 8;

/// What a section reads beyond the part every section reads (see the module's documentation).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct QueueReads {
    /// Every row of these tasks, and every row that depends on a turn of one of them.
    pub tasks: BTreeSet<String>,
    /// The rows of these turns, where they have one.
    pub turns: BTreeSet<TurnKey>,
    /// The first `heads` parked rows in the start order ([`start_rank`]: priority, then
    /// `queue_id`; pauses and strategies not applied), and the rows of the turns they wait for.
    pub heads: usize,
    /// For each of these tasks, its first parked row (by `queue_id`): with its running rows,
    /// which are active, what an arrival in a `concurrent=N` scope reads (the running count,
    /// and whether the line is empty: `scopes::plan_submit`).
    pub lines: BTreeSet<String>,
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
        heads: 0,
        lines: BTreeSet::new(),
    }
}

/// The part of the queue a detached submit of a new turn of `task` reads when the task's
/// strategy is `concurrent=N` (the default is `concurrent=1`): the task's line only as far as
/// its first parked row ([`QueueReads::lines`]), and the rows of the turns it waits for
/// (`after`). Whether it sufficed is [`submit_line_suffices`]'s answer once the strategy is
/// known; a new turn's own row is never in the queue before its submit (its number is the task
/// record's next one), and a row that would be there anyway is refused by the store's
/// `UNIQUE (task, turn)` key at the commit.
pub fn submit_line_reads(task: &str, after: &[Dependency]) -> QueueReads {
    QueueReads {
        tasks: BTreeSet::new(),
        turns: after.iter().map(|d| d.key.clone()).collect(),
        heads: 0,
        lines: std::iter::once(task.to_string()).collect(),
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
        heads: 0,
        lines: BTreeSet::new(),
    }
}

/// The part of the queue a finishing runner's section reads ([`super::runner_finish`] and the
/// departure before it): every row of the finished turn's task and every row depending on one of
/// its turns (its own row, a retry's scope, the dependents its departure settles), and the first
/// [`FINISH_HEADS`] parked rows in start order with the rows they wait for (the candidates of
/// the next start, and what decides whether each may start). Whether it sufficed is
/// [`finish_sufficed`]'s answer after the step.
pub fn finish_reads(key: &TurnKey) -> QueueReads {
    QueueReads {
        tasks: std::iter::once(key.task.clone()).collect(),
        turns: std::iter::once(key.clone()).collect(),
        heads: FINISH_HEADS,
        lines: BTreeSet::new(),
    }
}

/// The `heads` first parked rows of `state` in start order, and the turns they wait for.
fn heads_of(state: &QueueState, heads: usize) -> (BTreeSet<u64>, BTreeSet<TurnKey>) {
    if heads == 0 {
        return (BTreeSet::new(), BTreeSet::new());
    }
    let mut parked: Vec<&QueueEntry> = state
        .entries
        .iter()
        .filter(|e| matches!(e.state, RowState::Parked))
        .collect();
    parked.sort_by_key(|e| start_rank(e));
    parked.truncate(heads);
    let waited_for = parked
        .iter()
        .flat_map(|e| e.after.iter().map(|d| d.key.clone()))
        .collect();
    (parked.iter().map(|e| e.queue_id).collect(), waited_for)
}

/// The `queue_id` of the first parked row (in the core's `u64` order) of each task of `lines`.
fn line_heads(state: &QueueState, lines: &BTreeSet<String>) -> BTreeSet<u64> {
    let mut first: BTreeMap<&str, u64> = BTreeMap::new();
    for entry in &state.entries {
        if matches!(entry.state, RowState::Parked) && lines.contains(&entry.key.task) {
            let id = first
                .entry(entry.key.task.as_str())
                .or_insert(entry.queue_id);
            *id = (*id).min(entry.queue_id);
        }
    }
    first.into_values().collect()
}

/// Whether `entry` (a row of `state`) belongs to the part `reads` names: the reference of what
/// a store's partial load returns (tests/store_depth_projection.rs holds the SQLite store to it).
pub fn in_part(state: &QueueState, entry: &QueueEntry, reads: &QueueReads) -> bool {
    let (mut heads, waited_for) = heads_of(state, reads.heads);
    heads.extend(line_heads(state, &reads.lines));
    in_part_with(state, entry, reads, &heads, &waited_for)
}

/// `heads`: the rows named by `reads.heads` and `reads.lines`.
fn in_part_with(
    state: &QueueState,
    entry: &QueueEntry,
    reads: &QueueReads,
    heads: &BTreeSet<u64>,
    waited_for: &BTreeSet<TurnKey>,
) -> bool {
    !matches!(entry.state, RowState::Parked)
        || entry.slot_reservation.is_some()
        || state.runners.iter().any(|r| r.key == entry.key)
        || state.works.iter().any(|w| w.key == entry.key)
        || state.entries.last().map(|e| e.queue_id) == Some(entry.queue_id)
        || reads.tasks.contains(&entry.key.task)
        || reads.turns.contains(&entry.key)
        || heads.contains(&entry.queue_id)
        || waited_for.contains(&entry.key)
        || entry
            .after
            .iter()
            .any(|d| reads.tasks.contains(&d.key.task))
}

/// The part of `state` that `reads` names, as a store loads it.
pub fn project(state: &QueueState, reads: &QueueReads) -> QueueState {
    let (mut heads, waited_for) = heads_of(state, reads.heads);
    heads.extend(line_heads(state, &reads.lines));
    QueueState {
        entries: state
            .entries
            .iter()
            .filter(|e| in_part_with(state, e, reads, &heads, &waited_for))
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
            *queue_rows < MAX_QUEUE_ROWS
                && (reads.tasks.contains(task) || reads.lines.contains(task))
        }
    }
}

/// Whether a submit section whose part holds `task`'s line only ([`submit_line_reads`]) may run
/// its step there, asked once the new turn's `strategy` is known (before the step): only a
/// `concurrent=N` arrival reads no more of its task than the running rows and the line's first
/// row; a `queue`, `debounce` or `drop` arrival reads every row of its task (its waiter, its
/// busy rows), so its section runs again on [`submit_reads`]. A part holding every row of the
/// task, or the whole queue, always may.
pub fn submit_line_suffices(loaded: &Loaded, task: &str, strategy: Strategy) -> bool {
    match loaded {
        Loaded::Whole => true,
        Loaded::Part { reads, .. } => {
            reads.tasks.contains(task)
                || (reads.lines.contains(task) && matches!(strategy, Strategy::Concurrent { .. }))
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

/// The part of the queue a cancel section reads ([`super::cancel`] and the departures of the rows
/// it removes): every row of `task` (a cancel of one turn reads its task's rows too) and every row
/// that depends on a turn of it (the dependents a departure settles). The step reads and writes
/// only the selected rows, the runner and work records and the liveness of identities those rows
/// name, so the part always suffices for the step itself ([`cancel_covers`]); a departure that
/// settles a dependent may reach rows outside it, which [`cancel_stayed_inside`] catches.
pub fn cancel_reads(task: &str) -> QueueReads {
    QueueReads {
        tasks: std::iter::once(task.to_string()).collect(),
        turns: BTreeSet::new(),
        heads: 0,
        lines: BTreeSet::new(),
    }
}

/// Whether a cancel section on its part may run its step there, asked before the step: the part
/// holds every row of the cancelled task ([`cancel_reads`]). A whole queue always may.
pub fn cancel_covers(loaded: &Loaded, task: &str) -> bool {
    match loaded {
        Loaded::Whole => true,
        Loaded::Part { reads, .. } => reads.tasks.contains(task),
    }
}

/// Whether a cancel section on a part stayed inside it, asked after its step and the departures
/// of the rows it removed: every row that left is one the step `removed` (a dependent the
/// departure ended may have dependents of its own the part does not hold, whose departure the
/// whole queue decides). `before` are the part's rows as loaded.
pub fn cancel_stayed_inside(
    loaded: &Loaded,
    before: &[TurnKey],
    after: &QueueState,
    removed: &[TurnKey],
) -> bool {
    submit_stayed_inside(loaded, before, after, removed)
}

/// Whether a finishing runner's section on its part may run its step there, asked before the
/// step: the part must hold the finished turn's task ([`finish_reads`]), and the queue must be
/// below [`MAX_QUEUE_ROWS`] (a retry's enqueue counts the part's rows, which are fewer: at the
/// bound the whole queue is read, so a refusal is the step's own). A whole queue always may.
pub fn finish_covers(loaded: &Loaded, key: &TurnKey) -> bool {
    match loaded {
        Loaded::Whole => true,
        Loaded::Part { reads, queue_rows } => {
            *queue_rows < MAX_QUEUE_ROWS && reads.heads > 0 && reads.tasks.contains(&key.task)
        }
    }
}

/// Whether a finishing runner's section on its part decided what the whole queue decides, asked
/// after its step (`before` the part as loaded, `after` as the departure and
/// [`super::runner_finish`] left it, `next` the turn it started). Rows missing from the part are
/// parked rows ranked after every loaded head ([`FINISH_HEADS`]); the part's answer is the
/// whole's when:
/// - no row left but the finished turn's own (a dependent settled by the departure may have
///   dependents of its own the part does not hold), and
/// - the part holds every parked row of the queue (fewer than `heads` are parked), or the start
///   went to a row ranked no later than the last head: the step walks the candidates in start
///   order, and every candidate before that one is in the part, with the rows its eligibility
///   and the occupancy count read (the active rows, runner and work records, the rows it waits
///   for). A finish that started nothing on a part that left parked rows out may have missed a
///   row the whole queue would start: it runs again on the whole queue.
pub fn finish_sufficed(
    loaded: &Loaded,
    key: &TurnKey,
    before: &QueueState,
    after: &QueueState,
    next: Option<&TurnKey>,
) -> bool {
    let Loaded::Part { reads, .. } = loaded else {
        return true;
    };
    let others_left = before
        .entries
        .iter()
        .any(|e| &e.key != key && after.row(&e.key).is_none());
    if others_left || reads.heads == 0 {
        return false;
    }
    let mut parked: Vec<_> = before
        .entries
        .iter()
        .filter(|e| matches!(e.state, RowState::Parked))
        .map(start_rank)
        .collect();
    if parked.len() < reads.heads {
        return true;
    }
    parked.sort();
    let last_head = parked[reads.heads - 1];
    next.and_then(|k| after.row(k))
        .is_some_and(|row| start_rank(row) <= last_head)
}
