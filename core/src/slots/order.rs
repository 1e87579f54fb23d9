//! Scheduling: pause, not-before times and priorities (spec/slots.md, "Scheduling").
//!
//! One pure decision, [`start_candidates`], says which parked rows a start-next may try and in
//! which order; every path that starts a parked row (a finishing runner, reconcile and its waker,
//! resume) goes through it via `start_next_parked_general`, and a fresh submit asks
//! [`held_back`] before it reserves. The pause set lives in the queue state, so the section
//! that decides a start also sees the pause under the same lock.

use super::{QueueEntry, QueueLookup, QueueState, RowState, SlotError, TurnKey};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// The bound on individually paused task names (the pause set is stored in the queue state).
pub const MAX_PAUSED_TASKS: usize = 256;

/// What is paused: the whole home, and/or single tasks. A paused row stays parked.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PauseSet {
    /// `tollgate pause` without a task: no parked row of any task starts.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub home: bool,
    /// `tollgate pause TASK`: no parked row of these tasks starts. At most [`MAX_PAUSED_TASKS`].
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub tasks: BTreeSet<String>,
}

impl PauseSet {
    pub fn is_empty(&self) -> bool {
        !self.home && self.tasks.is_empty()
    }

    /// Whether rows of `task` are held by a pause (the home's or the task's own).
    pub fn holds(&self, task: &str) -> bool {
        self.home || self.tasks.contains(task)
    }
}

/// Why a row that could otherwise start does not start now.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HeldBack {
    /// The home or the row's task is paused.
    Paused,
    /// The row may not start before this time (`--delay`/`--at`, or a debounce deadline).
    NotBefore { ready_at_millis: u64 },
}

/// The one eligibility rule of scheduling (Q1, Q2): `None` when pause and time let the row of
/// `task` with `ready_at_millis` start at `now_millis`. A pause wins over a time.
pub fn held_back(
    state: &QueueState,
    task: &str,
    ready_at_millis: u64,
    now_millis: u64,
) -> Option<HeldBack> {
    if state.paused.holds(task) {
        Some(HeldBack::Paused)
    } else if ready_at_millis > now_millis {
        Some(HeldBack::NotBefore { ready_at_millis })
    } else {
        None
    }
}

/// Whether a waker set for `at_millis` still has something to wake at `now_millis` (Q4): its time
/// has come (it reconciles now), or a row not started yet waits for exactly that time. Every
/// waker is started for one row's not-before time (`--delay`/`--at`, a debounce deadline, a
/// retry's backoff, the first time a resume leaves), and every such row gets its own; so once no
/// row waits for a waker's time (its turn was cancelled, started by a resume or a finishing
/// runner, or superseded), the waker would only wake to find nothing, possibly days later, and
/// may be stopped. A row whose own waker is gone still starts at the next finish or reconcile,
/// as before.
pub fn waker_needed(state: &QueueState, at_millis: u64, now_millis: u64) -> bool {
    at_millis <= now_millis
        || state.entries.iter().any(|e| {
            !matches!(e.state, RowState::Dispatching { .. }) && e.ready_at_millis == at_millis
        })
}

/// The one order of scheduling (Q3): the parked rows a start-next may try, not paused and
/// accepted by `eligible` (the task's strategy, the time), highest `priority` first and FIFO
/// (`queue_id`) among equal priorities. A row that holds a slot is never among them, so a
/// priority never reorders a row that already started.
///
/// `eligible` is asked about every parked row against one [`QueueLookup`] of `state`, built once
/// here, so its per-row questions (the task's active rows, a dependency's row) cost O(1) and the
/// whole decision O(rows log rows), not O(rows²) (issue 12).
pub fn start_candidates(
    state: &QueueState,
    eligible: &impl Fn(&QueueLookup<'_>, &QueueEntry) -> bool,
) -> Vec<TurnKey> {
    let lookup = QueueLookup::new(state);
    let mut rows: Vec<&QueueEntry> = state
        .entries
        .iter()
        .filter(|e| {
            matches!(e.state, RowState::Parked)
                && !state.paused.holds(&e.key.task)
                && eligible(&lookup, e)
        })
        .collect();
    rows.sort_by_key(|e| start_rank(e));
    rows.into_iter().map(|e| e.key.clone()).collect()
}

/// A parked row's place in the start order: priority descending, then `queue_id` ascending (a
/// total key, since `queue_id`s are unique). [`start_candidates`] sorts by it, and a finishing
/// runner's part of the queue (`steps::finish_reads`) holds the first parked rows by it.
pub fn start_rank(entry: &QueueEntry) -> (std::cmp::Reverse<i32>, u64) {
    (std::cmp::Reverse(entry.priority), entry.queue_id)
}

/// What a pause or resume applies to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PauseScope<'a> {
    /// The whole home. Resuming the home also resumes every paused task.
    Home,
    /// One task.
    Task(&'a str),
}

/// Pauses `scope`. Returns whether anything changed (pausing what is paused already does not).
/// Refused, changing nothing, when a new task would exceed [`MAX_PAUSED_TASKS`].
pub fn pause(state: &mut QueueState, scope: PauseScope<'_>) -> Result<bool, SlotError> {
    match scope {
        PauseScope::Home => Ok(!std::mem::replace(&mut state.paused.home, true)),
        PauseScope::Task(task) => {
            super::validate_task_name(task)?;
            if state.paused.tasks.contains(task) {
                return Ok(false);
            }
            if state.paused.tasks.len() >= MAX_PAUSED_TASKS {
                return Err(SlotError::TooManyPaused {
                    limit: MAX_PAUSED_TASKS,
                });
            }
            state.paused.tasks.insert(task.to_string());
            Ok(true)
        }
    }
}

/// Lifts the pause of `scope`. Returns whether anything changed.
pub fn unpause(state: &mut QueueState, scope: PauseScope<'_>) -> bool {
    match scope {
        PauseScope::Home => {
            let changed = !state.paused.is_empty();
            state.paused = PauseSet::default();
            changed
        }
        PauseScope::Task(task) => state.paused.tasks.remove(task),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slots::{enqueue, park, ProcessIdentity};

    fn queue(rows: &[(&str, i32)]) -> QueueState {
        let mut state = QueueState::default();
        let me = ProcessIdentity {
            pid: 1,
            start_time_micros: 1,
        };
        for (i, (task, priority)) in rows.iter().enumerate() {
            let key = TurnKey::new(*task, i as u32 + 1);
            enqueue(&mut state, &key, me, 0).unwrap();
            park(&mut state, &key).unwrap();
            state.row_mut(&key).unwrap().priority = *priority;
        }
        state
    }

    fn every(_: &QueueLookup<'_>, _: &QueueEntry) -> bool {
        true
    }

    #[test]
    fn q3_highest_priority_first_fifo_among_equals() {
        let state = queue(&[("a", 0), ("b", 5), ("c", 0), ("d", 5), ("e", -1)]);
        let order: Vec<u32> = start_candidates(&state, &every)
            .into_iter()
            .map(|k| k.turn)
            .collect();
        assert_eq!(order, vec![2, 4, 1, 3, 5]);
    }

    #[test]
    fn q1_paused_rows_are_no_candidates() {
        let mut state = queue(&[("a", 0), ("b", 9)]);
        assert!(pause(&mut state, PauseScope::Task("b")).unwrap());
        assert!(!pause(&mut state, PauseScope::Task("b")).unwrap());
        let order = start_candidates(&state, &every);
        assert_eq!(order, vec![TurnKey::new("a", 1)]);
        pause(&mut state, PauseScope::Home).unwrap();
        assert!(start_candidates(&state, &every).is_empty());
        assert!(unpause(&mut state, PauseScope::Home));
        assert!(state.paused.is_empty());
        assert_eq!(start_candidates(&state, &every).len(), 2);
    }

    #[test]
    fn q4_a_waker_is_needed_while_a_row_waits_for_its_time() {
        let mut state = queue(&[("a", 0), ("b", 0)]);
        state
            .row_mut(&TurnKey::new("a", 1))
            .unwrap()
            .ready_at_millis = 5_000;
        state
            .row_mut(&TurnKey::new("b", 2))
            .unwrap()
            .ready_at_millis = 9_000;
        // At 1 000: the waker for 5 000 wakes `a`, the one for 9 000 wakes `b`; one for 3 000
        // (whose row went) has nothing to wake.
        assert!(waker_needed(&state, 5_000, 1_000));
        assert!(waker_needed(&state, 9_000, 1_000));
        assert!(!waker_needed(&state, 3_000, 1_000));
        // A waker whose time has come reconciles whatever is there.
        assert!(waker_needed(&state, 3_000, 3_000));
        // `b` cancelled: its waker has nothing left to wake, though `a` still waits (for its own).
        state.entries.retain(|e| e.key.task != "b");
        assert!(!waker_needed(&state, 9_000, 1_000));
        assert!(waker_needed(&state, 5_000, 1_000));
        state.entries.clear();
        assert!(!waker_needed(&state, 5_000, 1_000));
    }

    #[test]
    fn pause_set_is_bounded() {
        let mut state = QueueState::default();
        for i in 0..MAX_PAUSED_TASKS {
            pause(&mut state, PauseScope::Task(&format!("t{i}"))).unwrap();
        }
        let before = state.clone();
        let err = pause(&mut state, PauseScope::Task("one-more")).unwrap_err();
        assert!(err.to_string().contains(&MAX_PAUSED_TASKS.to_string()));
        assert_eq!(state, before);
    }

    #[test]
    fn queue_json_keeps_priority_and_pause_and_older_documents_load_without_them() {
        let mut state = queue(&[("a", 3)]);
        pause(&mut state, PauseScope::Task("a")).unwrap();
        let text = serde_json::to_string(&state).unwrap();
        assert!(
            text.contains("\"priority\":3") && text.contains("\"paused\""),
            "{text}"
        );
        let back: QueueState = serde_json::from_str(&text).unwrap();
        assert_eq!(back, state);
        // A document from before scheduling: no priority, no pause set.
        let plain = serde_json::to_string(&queue(&[("a", 0)])).unwrap();
        assert!(
            !plain.contains("priority") && !plain.contains("paused"),
            "{plain}"
        );
        let old: QueueState = serde_json::from_str(&plain).unwrap();
        assert!(old.paused.is_empty());
        assert_eq!(old.entries[0].priority, 0);
    }

    #[test]
    fn q2_held_back_until_ready() {
        let state = QueueState::default();
        assert_eq!(
            held_back(&state, "a", 10, 5),
            Some(HeldBack::NotBefore {
                ready_at_millis: 10
            })
        );
        assert_eq!(held_back(&state, "a", 10, 10), None);
    }
}
