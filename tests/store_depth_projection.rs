//! Issue 12, point 4: a detached submit's section runs the unchanged core step on the part of
//! the queue the core names for it (`steps::submit_reads`, `steps::project`; spec/store.md,
//! "What a section loads"). Over arbitrary queues (rows in every state, reservations, runner and
//! work records, dependencies, pauses) and arbitrary submits (task, strategy, schedule,
//! dependencies, cap), the step on the part, merged back (`steps::merge`, what the store's
//! commit does), must equal the step on the whole queue: the same decision (or the same error)
//! and the same queue, superseded waiters' departures included; or the core must say that the
//! part did not suffice (`submit_covers` before the step, `submit_stayed_inside` after it), and
//! then the shell reruns on the whole queue.

use proptest::prelude::*;
use std::collections::BTreeMap;
use tollgate::protocol::admission::Strategy as TaskStrategy;
use tollgate::protocol::slots::order::{self, PauseScope};
use tollgate::protocol::slots::steps::{self, Loaded, Schedule, SubmitInput};
use tollgate::protocol::slots::*;

const TASKS: [&str; 4] = ["a", "b", "c", "d"];
const TURNS: u32 = 5;

/// Who acts in the generated queues: pids 1 and 2 are live, 3 is dead.
fn who(n: u32) -> ProcessIdentity {
    ProcessIdentity {
        pid: 1 + n % 3,
        start_time_micros: 10,
    }
}

#[derive(Clone, Copy)]
struct Seen;

impl Liveness for Seen {
    fn observe(&self, identity: &ProcessIdentity) -> Observation {
        if identity.pid == 3 {
            Observation::Gone
        } else {
            Observation::Matching
        }
    }

    fn observe_work(&self, _work: &WorkRecord) -> Observation {
        Observation::Gone
    }
}

fn token(n: u8) -> SlotToken {
    SlotToken::new(uuid::Uuid::from_bytes([n.max(1); 16])).expect("a token")
}

#[derive(Clone, Debug)]
enum Op {
    Enqueue(usize, u32, u32),
    Park(usize),
    Dispatch(usize, u32),
    Reserve(usize, u32, u8),
    Runner(usize, u32),
    Work(usize, u32, u8),
    Remove(usize),
    DependOn(usize, usize, bool),
    Ready(usize, u64),
    Pause(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..TASKS.len(), 1..=TURNS, 0..3u32).prop_map(|(t, n, w)| Op::Enqueue(t, n, w)),
        5 => any::<usize>().prop_map(Op::Park),
        2 => (any::<usize>(), 0..3u32).prop_map(|(i, w)| Op::Dispatch(i, w)),
        1 => (any::<usize>(), 0..3u32, any::<u8>()).prop_map(|(i, w, t)| Op::Reserve(i, w, t)),
        1 => (any::<usize>(), 0..3u32).prop_map(|(i, w)| Op::Runner(i, w)),
        1 => (any::<usize>(), 0..3u32, any::<u8>()).prop_map(|(i, w, t)| Op::Work(i, w, t)),
        1 => any::<usize>().prop_map(Op::Remove),
        2 => (any::<usize>(), any::<usize>(), any::<bool>())
            .prop_map(|(a, b, s)| Op::DependOn(a, b, s)),
        1 => (any::<usize>(), 0..20u64).prop_map(|(i, at)| Op::Ready(i, at)),
        1 => (0..TASKS.len()).prop_map(Op::Pause),
    ]
}

fn apply(state: &mut QueueState, op: &Op) {
    let len = state.entries.len();
    match *op {
        Op::Enqueue(t, n, w) => {
            let _ = enqueue(state, &TurnKey::new(TASKS[t], n), who(w), 5);
        }
        Op::Park(i) if len > 0 => {
            let key = state.entries[i % len].key.clone();
            park(state, &key).expect("park");
        }
        Op::Dispatch(i, w) if len > 0 => {
            state.entries[i % len].state = RowState::Dispatching {
                dispatch_owner: who(w),
            };
        }
        Op::Reserve(i, w, t) if len > 0 => {
            state.entries[i % len].slot_reservation =
                Some(RunnerSlotReservation::new(who(w), token(t)));
        }
        Op::Runner(i, w) if len > 0 => {
            let key = state.entries[i % len].key.clone();
            state.set_runner(&key, who(w), false);
        }
        Op::Work(i, w, t) if len > 0 => {
            let key = state.entries[i % len].key.clone();
            state.works.push(WorkRecord {
                key,
                id: WorkId::from_token(token(t)),
                runner: who(w),
                leader: None,
                cgroup: None,
            });
        }
        Op::Remove(i) if len > 0 => {
            state.entries.remove(i % len);
        }
        Op::DependOn(a, b, succeeded) if len > 0 => {
            let key = state.entries[b % len].key.clone();
            let row = &mut state.entries[a % len];
            if row.key != key && row.after.len() < MAX_DEPENDENCIES {
                row.after.push(Dependency {
                    key,
                    rule: if succeeded {
                        AfterRule::Succeeded
                    } else {
                        AfterRule::Ended
                    },
                });
            }
        }
        Op::Ready(i, at) if len > 0 => state.entries[i % len].ready_at_millis = at,
        Op::Pause(t) => {
            order::pause(state, PauseScope::Task(TASKS[t])).expect("pause");
        }
        _ => {}
    }
}

fn strategy(n: u8) -> TaskStrategy {
    match n % 5 {
        0 => TaskStrategy::Queue,
        1 => TaskStrategy::Drop,
        2 => TaskStrategy::Debounce { quiet_millis: 10 },
        3 => TaskStrategy::Concurrent { max: 2 },
        _ => TaskStrategy::default(),
    }
}

/// A submit's section as the shell runs it: the step (with `--after` when it has dependencies)
/// and the departure of every waiter it superseded (a superseded turn ended other than
/// succeeded: `after-success` dependents end dependency-failed).
fn section(
    state: &mut QueueState,
    input: SubmitInput<'_, Seen>,
    after: &[Dependency],
    schedule: Schedule,
) -> Result<(AfterSubmit, Vec<Departure>), SlotError> {
    let submitted = submit_after(state, input, after, &BTreeMap::new(), schedule)?;
    let mut departures = Vec::new();
    if let AfterSubmit::Submitted(decision) = &submitted {
        for old in &decision.superseded {
            departures.push(depart(
                state,
                DepartInput {
                    key: old,
                    ended: Ended::Stopped,
                    retry: None,
                    retry_key: None,
                    me: input.me,
                    now_millis: input.now_millis,
                },
            )?);
        }
    }
    Ok((submitted, departures))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn a_submit_on_its_part_equals_the_submit_on_the_whole_queue(
        ops in proptest::collection::vec(op(), 0..50),
        task in 0..=TASKS.len(),
        turn in 1..=TURNS + 1,
        strategy_n in any::<u8>(),
        cap in 0..4usize,
        now_millis in 0..25u64,
        not_before_millis in 0..30u64,
        priority in -1..2i32,
        depend_on in proptest::option::of((any::<usize>(), any::<bool>())),
    ) {
        let mut state = QueueState::default();
        for op in &ops {
            apply(&mut state, op);
        }
        prop_assume!(state.check_structure().is_ok());
        // A task of the queue, or one without rows (a generated name).
        let task = TASKS.get(task).copied().unwrap_or("fresh");
        let key = TurnKey::new(task, turn);
        let after: Vec<Dependency> = depend_on
            .filter(|_| !state.entries.is_empty())
            .map(|(i, succeeded)| Dependency {
                key: state.entries[i % state.entries.len()].key.clone(),
                rule: if succeeded { AfterRule::Succeeded } else { AfterRule::Ended },
            })
            .into_iter()
            .filter(|d| d.key != key)
            .collect();
        let schedule = Schedule { priority, not_before_millis };
        let input = SubmitInput {
            key: &key,
            me: who(0),
            fresh_token: token(200),
            now_millis,
            cap,
            strategy: strategy(strategy_n),
            liveness: &Seen,
        };

        let mut whole = state.clone();
        let on_whole = section(&mut whole, input, &after, schedule);

        let reads = steps::submit_reads(Some(task), &after);
        let before = steps::project(&state, &reads);
        prop_assert!(before.check_structure().is_ok(), "a part is a queue");
        let loaded = Loaded::Part { reads: reads.clone(), queue_rows: state.entries.len() };
        prop_assert!(steps::submit_covers(&loaded, task));
        // A part without the task's rows never suffices.
        let elsewhere = Loaded::Part {
            reads: steps::submit_reads(None, &after),
            queue_rows: state.entries.len(),
        };
        prop_assert!(!steps::submit_covers(&elsewhere, task));

        let mut part = before.clone();
        let on_part = section(&mut part, input, &after, schedule);
        let before_keys: Vec<TurnKey> = before.entries.iter().map(|e| e.key.clone()).collect();
        match (&on_whole, &on_part) {
            (Ok((whole_decision, _)), Ok((part_decision, _))) => {
                let superseded = match part_decision {
                    AfterSubmit::Submitted(d) => d.superseded.clone(),
                    _ => Vec::new(),
                };
                if steps::submit_stayed_inside(&loaded, &before_keys, &part, &superseded) {
                    prop_assert_eq!(whole_decision, part_decision);
                    prop_assert_eq!(&on_whole.as_ref().unwrap().1, &on_part.as_ref().unwrap().1);
                    let mut merged = state.clone();
                    steps::merge(&mut merged, &before, &part);
                    prop_assert_eq!(&merged, &whole);
                    prop_assert!(part.check_structure().is_ok());
                }
            }
            (whole_result, part_result) => {
                prop_assert_eq!(whole_result.as_ref().err(), part_result.as_ref().err());
            }
        }

        // A `concurrent=N` submit's part: the line only as far as its first parked row. It is
        // asked for a new turn (its number is past every row of its task, as the task record's
        // next number is) and decides like the whole queue whenever the core says it sufficed.
        let strategy = strategy(strategy_n);
        let fresh = TurnKey::new(task, TURNS + 1);
        prop_assume!(state.row(&fresh).is_none());
        let input = SubmitInput { key: &fresh, strategy, ..input };
        let mut whole = state.clone();
        let on_whole = section(&mut whole, input, &after, schedule);
        let reads = steps::submit_line_reads(task, &after);
        let before = steps::project(&state, &reads);
        prop_assert!(before.check_structure().is_ok(), "a part is a queue");
        let loaded = Loaded::Part { reads, queue_rows: state.entries.len() };
        prop_assert!(steps::submit_covers(&loaded, task));
        if !steps::submit_line_suffices(&loaded, task, strategy) {
            let concurrent = matches!(strategy, TaskStrategy::Concurrent { .. });
            prop_assert!(!concurrent, "a concurrent task's line suffices");
            return Ok(());
        }
        let mut part = before.clone();
        let on_part = section(&mut part, input, &after, schedule);
        let before_keys: Vec<TurnKey> = before.entries.iter().map(|e| e.key.clone()).collect();
        match (&on_whole, &on_part) {
            (Ok((whole_decision, whole_held)), Ok((part_decision, part_held))) => {
                prop_assert!(steps::submit_stayed_inside(&loaded, &before_keys, &part, &[]));
                prop_assert_eq!(whole_decision, part_decision);
                prop_assert_eq!(whole_held, part_held);
                let mut merged = state.clone();
                steps::merge(&mut merged, &before, &part);
                prop_assert_eq!(&merged, &whole);
            }
            (whole_result, part_result) => {
                prop_assert_eq!(whole_result.as_ref().err(), part_result.as_ref().err());
            }
        }
    }
}
