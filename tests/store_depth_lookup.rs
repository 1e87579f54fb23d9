//! Issue 12: a start decision answers its per-parked-row questions (the task's active rows, a
//! dependency's row) from one [`QueueLookup`] built per decision instead of a scan per row. Over
//! random sequences of queue operations, the indexed answers must equal the scans they replace,
//! and the start order the core computes with them must equal the order the scans give.

use proptest::prelude::*;
use std::collections::BTreeMap;
use tollgate::protocol::admission::Strategy as TaskStrategy;
use tollgate::protocol::scopes::{self, start_filter};
use tollgate::protocol::slots::order::{self, PauseScope};
use tollgate::protocol::slots::*;

const TASKS: [&str; 4] = ["a", "b", "c", "d"];
const TURNS: u32 = 6;

#[derive(Clone, Debug)]
enum Op {
    Enqueue(usize, u32),
    Park(usize),
    Dispatch(usize),
    Remove(usize),
    DependOn(usize, usize),
    Ready(usize, u64),
    Priority(usize, i32),
    Pause(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (0..TASKS.len(), 1..=TURNS).prop_map(|(t, n)| Op::Enqueue(t, n)),
        3 => any::<usize>().prop_map(Op::Park),
        2 => any::<usize>().prop_map(Op::Dispatch),
        1 => any::<usize>().prop_map(Op::Remove),
        2 => (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Op::DependOn(a, b)),
        1 => (any::<usize>(), 0..20u64).prop_map(|(i, at)| Op::Ready(i, at)),
        1 => (any::<usize>(), -2..3i32).prop_map(|(i, p)| Op::Priority(i, p)),
        1 => (0..TASKS.len()).prop_map(Op::Pause),
    ]
}

fn me() -> ProcessIdentity {
    ProcessIdentity {
        pid: 7,
        start_time_micros: 7,
    }
}

/// Applies `op` through the core's own functions where it has one (enqueue, park, pause) and as
/// a step would otherwise (a row dispatched, a row leaving, its dependencies, time, priority).
fn apply(state: &mut QueueState, op: &Op) {
    let len = state.entries.len();
    match *op {
        Op::Enqueue(t, n) => {
            let _ = enqueue(state, &TurnKey::new(TASKS[t], n), me(), 5);
        }
        Op::Park(i) if len > 0 => {
            let key = state.entries[i % len].key.clone();
            park(state, &key).unwrap();
        }
        Op::Dispatch(i) if len > 0 => {
            state.entries[i % len].state = RowState::Dispatching {
                dispatch_owner: me(),
            };
        }
        Op::Remove(i) if len > 0 => {
            state.entries.remove(i % len);
        }
        Op::DependOn(a, b) if len > 0 => {
            let key = state.entries[b % len].key.clone();
            let row = &mut state.entries[a % len];
            if row.key != key && row.after.len() < MAX_DEPENDENCIES {
                row.after.push(Dependency {
                    key,
                    rule: AfterRule::Ended,
                });
            }
        }
        Op::Ready(i, at) if len > 0 => state.entries[i % len].ready_at_millis = at,
        Op::Priority(i, p) if len > 0 => state.entries[i % len].priority = p,
        Op::Pause(t) => {
            order::pause(state, PauseScope::Task(TASKS[t])).unwrap();
        }
        _ => {}
    }
}

/// The start order as the scans gave it before the lookup: every parked row not paused whose
/// dependencies have all left (R1) and whose task's strategy has room, by priority then FIFO.
fn naive_candidates(
    state: &QueueState,
    strategies: &BTreeMap<String, TaskStrategy>,
    now_millis: u64,
) -> Vec<TurnKey> {
    let mut rows: Vec<&QueueEntry> = state
        .entries
        .iter()
        .filter(|e| {
            let strategy = strategies.get(&e.key.task).copied().unwrap_or_default();
            matches!(e.state, RowState::Parked)
                && !state.paused.holds(&e.key.task)
                && dependencies_met(state, e)
                && scopes::may_start(state, e, strategy, now_millis)
        })
        .collect();
    rows.sort_by_key(|e| (std::cmp::Reverse(e.priority), e.queue_id));
    rows.into_iter().map(|e| e.key.clone()).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn indexed_answers_equal_the_scans(
        ops in proptest::collection::vec(op(), 0..60),
        now_millis in 0..25u64,
        concurrent in 1..4u32,
    ) {
        let mut state = QueueState::default();
        let strategies: BTreeMap<String, TaskStrategy> = [
            ("b".to_string(), TaskStrategy::Concurrent { max: concurrent }),
            ("c".to_string(), TaskStrategy::Debounce { quiet_millis: 10 }),
            ("d".to_string(), TaskStrategy::Drop),
        ]
        .into_iter()
        .collect();
        for op in &ops {
            apply(&mut state, op);
            let lookup = QueueLookup::new(&state);
            for task in TASKS {
                prop_assert_eq!(
                    lookup.running_in_scope(task),
                    scopes::running_in_scope(&state, task),
                    "active rows of {}", task
                );
                for turn in 1..=TURNS {
                    let key = TurnKey::new(task, turn);
                    prop_assert_eq!(lookup.has_row(&key), state.row(&key).is_some(), "row of {}", key);
                }
            }
            prop_assert_eq!(
                start_candidates(&state, &start_filter(&strategies, now_millis)),
                naive_candidates(&state, &strategies, now_millis)
            );
        }
    }
}
