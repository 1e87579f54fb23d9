//! Issue 14, point 3: the sections of one row's steps (the handoff's two publishes and its
//! spawn failure, the runner's take-over, its leader's record) read the part of the queue the
//! core names for them (`steps::row_reads`: the row, every runner and work record, the active rows
//! and the last row; spec/store.md, "What a section loads"). Over arbitrary queues (rows in every
//! state, reservations, runner and work records, dependencies, pauses), each step on the part,
//! merged back (`steps::merge`, what the store's commit does), must equal the step on the whole
//! queue: the same answer (or the same error) and the same queue. The part always suffices (the
//! row is in it in any state), so these sections never run again on the whole queue.
//!
//! Issue 12, point 4: the finishing runner's section reads its own part too
//! (`steps::finish_reads`: its task's rows and their dependents, and the first parked rows in
//! start order with the rows they wait for). That part does not always suffice; whenever
//! `steps::finish_sufficed` says it did, the finish on the part, merged back, must equal the
//! finish on the whole queue. A cancel reads its task's part too (`steps::cancel_reads`), and
//! whenever `steps::cancel_stayed_inside` says it stayed inside, equals the cancel on the whole.

use proptest::prelude::*;
use std::collections::BTreeMap;
use tollgate::protocol::admission::Strategy as TaskStrategy;
use tollgate::protocol::slots::order::{self, PauseScope};
use tollgate::protocol::slots::steps::{
    self, FinishInput, Handoff, Loaded, QueueReads, SubmitEffect, SubmitInput, TakeOverInput,
};
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
    Priority(usize, i32),
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
        2 => (any::<usize>(), -2..3i32).prop_map(|(i, p)| Op::Priority(i, p)),
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
        Op::Priority(i, p) if len > 0 => state.entries[i % len].priority = p,
        _ => {}
    }
}

/// Runs `step` on the whole queue and on the part `steps::row_reads(key)` names, and checks that
/// both answer alike and leave the same queue once the part is merged back.
fn same_on_part<R: PartialEq + std::fmt::Debug>(
    state: &QueueState,
    key: &TurnKey,
    step: impl Fn(&mut QueueState) -> R,
) -> Result<(), TestCaseError> {
    let mut whole = state.clone();
    let on_whole = step(&mut whole);
    let before = steps::project(state, &steps::row_reads(key));
    prop_assert!(before.check_structure().is_ok(), "a part is a queue");
    prop_assert_eq!(
        before.row(key).is_some(),
        state.row(key).is_some(),
        "the part holds the row in any state"
    );
    let mut part = before.clone();
    let on_part = step(&mut part);
    prop_assert_eq!(on_whole, on_part);
    prop_assert!(part.check_structure().is_ok() || whole.check_structure().is_err());
    let mut merged = state.clone();
    steps::merge(&mut merged, &before, &part);
    prop_assert_eq!(merged, whole);
    Ok(())
}

/// A queue from `ops`, and the key of its row `pick` (or a turn without a row).
fn queue_and_key(ops: &[Op], pick: Option<usize>) -> (QueueState, TurnKey) {
    let mut state = QueueState::default();
    for op in ops {
        apply(&mut state, op);
    }
    let key = match pick {
        Some(i) if !state.entries.is_empty() => state.entries[i % state.entries.len()].key.clone(),
        _ => TurnKey::new("a", TURNS + 1),
    };
    (state, key)
}

/// A handoff as the core makes one (a submit that reserved a slot for a new turn of task `h`),
/// and the queue after `later` changed it (steals, parks, removals, records of any row).
fn handed_off(ops: &[Op], later: &[Op]) -> Option<(QueueState, Handoff)> {
    let mut state = QueueState::default();
    for op in ops {
        apply(&mut state, op);
    }
    let key = TurnKey::new("h", 1);
    let decision = steps::submit(
        &mut state,
        SubmitInput {
            key: &key,
            me: who(0),
            fresh_token: token(201),
            now_millis: 30,
            cap: 8,
            strategy: TaskStrategy::default(),
            liveness: &Seen,
        },
    )
    .ok()?;
    let SubmitEffect::Spawn(handoff) = decision.effect else {
        return None;
    };
    for op in later {
        apply(&mut state, op);
    }
    Some((state, handoff))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn a_take_over_on_its_part_equals_the_take_over_on_the_whole_queue(
        ops in proptest::collection::vec(op(), 0..50),
        pick in proptest::option::of(any::<usize>()),
        own_token in any::<bool>(),
        other_token in any::<u8>(),
        me in 0..3u32,
        settled in any::<bool>(),
        cgroup in any::<bool>(),
    ) {
        let (state, key) = queue_and_key(&ops, pick);
        prop_assume!(state.check_structure().is_ok());
        let reserved = state.row(&key).and_then(|r| r.slot_reservation.as_ref()).map(|r| r.token);
        let token = match reserved {
            Some(t) if own_token => t,
            _ => token(other_token),
        };
        // Tokens are fresh (S8): no other turn's work was started under the token this runner
        // holds. The generator can record one (its tokens are bytes, drawn again), and the
        // take-over's postcondition (its work is recorded) rightly fails on such a queue.
        prop_assume!(!state
            .works
            .iter()
            .any(|w| w.key != key && w.id == WorkId::from_token(token)));
        same_on_part(&state, &key, |q| {
            steps::runner_take_over(q, TakeOverInput {
                key: &key,
                token,
                me: who(me),
                settled,
                cgroup: cgroup.then_some("/sys/fs/cgroup/t"),
                liveness: &Seen,
            })
        })?;
    }

    #[test]
    fn a_leader_record_on_its_part_equals_the_record_on_the_whole_queue(
        ops in proptest::collection::vec(op(), 0..50),
        pick in proptest::option::of(any::<usize>()),
        work in any::<u8>(),
        leader in 0..3u32,
    ) {
        let (state, key) = queue_and_key(&ops, pick);
        prop_assume!(state.check_structure().is_ok());
        // The work of the row's own record when it has one, else any.
        let id = state
            .works
            .iter()
            .find(|w| w.key == key)
            .map(|w| w.id)
            .filter(|_| work % 2 == 0)
            .unwrap_or_else(|| WorkId::from_token(token(work)));
        same_on_part(&state, &key, |q| steps::work_started(q, &key, id, who(leader)))?;
    }

    #[test]
    fn a_handoffs_publishes_on_their_part_equal_them_on_the_whole_queue(
        ops in proptest::collection::vec(op(), 0..40),
        later in proptest::collection::vec(op(), 0..6),
        between in proptest::collection::vec(op(), 0..3),
        child in 0..3u32,
    ) {
        let Some((state, handoff)) = handed_off(&ops, &later) else {
            return Ok(());
        };
        prop_assume!(state.check_structure().is_ok());
        let key = handoff.key().clone();
        same_on_part(&state, &key, |q| steps::spawn_failed(q, handoff.clone()))?;
        same_on_part(&state, &key, |q| {
            steps::handoff_publish_first(q, handoff.clone(), who(child))
        })?;
        let mut first = state.clone();
        let Ok(bound) = steps::handoff_publish_first(&mut first, handoff.clone(), who(child)) else {
            return Ok(());
        };
        for op in &between {
            apply(&mut first, op);
        }
        prop_assume!(first.check_structure().is_ok());
        same_on_part(&first, &key, |q| steps::handoff_publish_second(q, bound.clone()))?;
    }
}

/// A strategy for each task, from `picks` (one per task of [`TASKS`]).
fn strategies(picks: &[u8]) -> BTreeMap<String, TaskStrategy> {
    TASKS
        .iter()
        .zip(picks)
        .map(|(task, pick)| {
            let strategy = match pick % 5 {
                0 => TaskStrategy::default(),
                1 => TaskStrategy::Queue,
                2 => TaskStrategy::Debounce { quiet_millis: 10 },
                3 => TaskStrategy::Concurrent { max: 2 },
                _ => TaskStrategy::Drop,
            };
            (task.to_string(), strategy)
        })
        .collect()
}

/// The end of every check of a section on a part that said it sufficed: the step's answer on
/// the part (`on_part`, the part left as `part`) is its answer on the whole queue (`on_whole`,
/// the queue left as `whole`), and the part merged back into `state` is `whole`.
fn merged_equals_whole<R: PartialEq + std::fmt::Debug>(
    state: &QueueState,
    before: &QueueState,
    (part, on_part): (&QueueState, &R),
    (whole, on_whole): (&QueueState, &R),
) -> Result<Option<()>, TestCaseError> {
    prop_assert_eq!(on_whole, on_part);
    let mut merged = state.clone();
    steps::merge(&mut merged, before, part);
    prop_assert_eq!(&merged, whole);
    Ok(Some(()))
}

/// The finish of `key` by `me` on the whole `state` and on its part (with `heads` first parked
/// rows: the generated queues are small, so the proptest reads fewer than
/// [`steps::FINISH_HEADS`] to leave parked rows out); `Some(())` when the part says it sufficed
/// (and then both finishes agree), `None` when the shell would run it again on the whole queue.
#[allow(clippy::too_many_arguments)]
fn finish_both(
    state: &QueueState,
    key: &TurnKey,
    me: ProcessIdentity,
    cap: usize,
    now_millis: u64,
    strategies: &BTreeMap<String, TaskStrategy>,
    heads: usize,
) -> Result<Option<()>, TestCaseError> {
    let reads = QueueReads {
        heads,
        ..steps::finish_reads(key)
    };
    let before = steps::project(state, &reads);
    prop_assert!(before.check_structure().is_ok(), "a part is a queue");
    let loaded = Loaded::Part {
        reads,
        queue_rows: state.entries.len(),
    };
    prop_assert!(steps::finish_covers(&loaded, key));
    let input = FinishInput {
        key,
        me,
        fresh_token: token(250),
        now_millis,
        cap,
        strategies,
        liveness: &Seen,
    };
    let mut whole = state.clone();
    let on_whole = steps::runner_finish(&mut whole, input);
    let mut part = before.clone();
    let on_part = steps::runner_finish(&mut part, input);
    let Ok(next) = &on_part else {
        // An error of the part is the section's: nothing is committed, whatever the whole says.
        return Ok(None);
    };
    let next_key = next.as_ref().map(|h| h.key().clone());
    if !steps::finish_sufficed(&loaded, key, &before, &part, next_key.as_ref()) {
        return Ok(None);
    }
    merged_equals_whole(state, &before, (&part, &on_part), (&whole, &on_whole))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn a_finish_on_its_part_equals_the_finish_on_the_whole_queue_when_it_says_it_sufficed(
        ops in proptest::collection::vec(op(), 0..60),
        pick in proptest::option::of(any::<usize>()),
        me in 0..3u32,
        cap in 1..4usize,
        now_millis in 0..30u64,
        picks in proptest::collection::vec(any::<u8>(), TASKS.len()),
        heads in 1..4usize,
    ) {
        let (mut state, key) = queue_and_key(&ops, pick);
        // The finishing runner dispatches its row (when the turn still has one).
        if let Ok(row) = state.row_mut(&key) {
            row.state = RowState::Dispatching { dispatch_owner: who(me) };
        }
        prop_assume!(state.check_structure().is_ok());
        finish_both(&state, &key, who(me), cap, now_millis, &strategies(&picks), heads)?;
    }
}

/// A queue of one running turn (`run/1`, dispatched by pid 1) and `parked` parked turns of
/// tasks of their own, pids 1 and 2 live.
fn deep_queue(parked: u32) -> QueueState {
    let mut state = QueueState::default();
    let running = TurnKey::new("run", 1);
    enqueue(&mut state, &running, who(0), 1).expect("enqueue");
    state.row_mut(&running).expect("row").state = RowState::Dispatching {
        dispatch_owner: who(0),
    };
    state.set_runner(&running, who(0), false);
    for n in 0..parked {
        let key = TurnKey::new(format!("t{n}"), 1);
        enqueue(&mut state, &key, who(1), 2).expect("enqueue");
        park(&mut state, &key).expect("park");
    }
    state
}

/// [`finish_both`] for `run/1` of [`deep_queue`]: its runner finishing with one slot, at time 0,
/// default strategies, the production number of heads.
fn finish_run_1(state: &QueueState) -> Result<Option<()>, TestCaseError> {
    finish_both(
        state,
        &TurnKey::new("run", 1),
        who(0),
        1,
        0,
        &BTreeMap::new(),
        steps::FINISH_HEADS,
    )
}

#[test]
fn a_finish_at_depth_starts_the_first_row_on_a_part_of_a_few_rows() {
    let state = deep_queue(500);
    let key = TurnKey::new("run", 1);
    let part = steps::project(&state, &steps::finish_reads(&key));
    assert!(
        part.entries.len() <= steps::FINISH_HEADS + 2,
        "{} rows in the part",
        part.entries.len()
    );
    let outcome = finish_run_1(&state).expect("equal");
    assert_eq!(outcome, Some(()), "the part sufficed");
}

#[test]
fn a_finish_whose_heads_cannot_start_says_its_part_did_not_suffice() {
    // The first rows in start order are all paused: the row to start lies past the heads.
    let mut state = deep_queue(40);
    for n in 0..steps::FINISH_HEADS {
        order::pause(&mut state, PauseScope::Task(&format!("t{n}"))).expect("pause");
    }
    let outcome = finish_run_1(&state).expect("checked");
    assert_eq!(outcome, None, "run again on the whole queue");
    // A higher priority row past the heads by queue_id is a head by start order.
    let mut state = deep_queue(40);
    state.entries.last_mut().expect("rows").priority = 5;
    let outcome = finish_run_1(&state).expect("equal");
    assert_eq!(outcome, Some(()));
}

/// A cancel section's core work, as `src/cancel.rs` runs it: the step, then the departure of
/// every row it removed (a cancelled turn `Ended::Stopped`, never retried).
fn cancel_and_depart(
    state: &mut QueueState,
    selection: steps::CancelSelection<'_>,
) -> (steps::CancelEffect, Vec<Result<Departure, SlotError>>) {
    let effect = steps::cancel(state, selection, &Seen);
    let departures = effect
        .removed
        .iter()
        .map(|key| {
            depart(
                state,
                DepartInput {
                    key,
                    ended: Ended::Stopped,
                    retry: None,
                    retry_key: None,
                    me: who(0),
                    now_millis: 7,
                },
            )
        })
        .collect();
    (effect, departures)
}

/// The cancel of `selection` on the whole `state` and on its part (`steps::cancel_reads`);
/// `Some(())` when the part says the section stayed inside it (and then both agree), `None`
/// when the shell would run it again on the whole queue.
fn cancel_both(
    state: &QueueState,
    selection: steps::CancelSelection<'_>,
) -> Result<Option<()>, TestCaseError> {
    let task = match selection {
        steps::CancelSelection::Task(task) => task,
        steps::CancelSelection::Turn(key) => key.task.as_str(),
    };
    let reads = steps::cancel_reads(task);
    let before = steps::project(state, &reads);
    prop_assert!(before.check_structure().is_ok(), "a part is a queue");
    let loaded = Loaded::Part {
        reads,
        queue_rows: state.entries.len(),
    };
    prop_assert!(steps::cancel_covers(&loaded, task));
    let mut whole = state.clone();
    let on_whole = cancel_and_depart(&mut whole, selection);
    let mut part = before.clone();
    let on_part = cancel_and_depart(&mut part, selection);
    let loaded_rows: Vec<TurnKey> = before.entries.iter().map(|e| e.key.clone()).collect();
    if !steps::cancel_stayed_inside(&loaded, &loaded_rows, &part, &on_part.0.removed) {
        return Ok(None);
    }
    merged_equals_whole(state, &before, (&part, &on_part), (&whole, &on_whole))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    /// Issue 12, point 4: `tollgate cancel` reads its task's part of the queue.
    #[test]
    fn a_cancel_on_its_part_equals_the_cancel_on_the_whole_queue_when_it_stayed_inside(
        ops in proptest::collection::vec(op(), 0..60),
        pick in proptest::option::of(any::<usize>()),
        one_turn in any::<bool>(),
    ) {
        let (state, key) = queue_and_key(&ops, pick);
        prop_assume!(state.check_structure().is_ok());
        let selection = if one_turn {
            steps::CancelSelection::Turn(&key)
        } else {
            steps::CancelSelection::Task(&key.task)
        };
        cancel_both(&state, selection)?;
    }
}

#[test]
fn a_cancel_at_depth_reads_a_part_of_its_own_rows_and_stays_inside_it() {
    let mut state = deep_queue(500);
    // Two more parked turns of `t7`, and a turn of another task waiting for `t7`'s first to end.
    for turn in 2..=3 {
        let key = TurnKey::new("t7", turn);
        enqueue(&mut state, &key, who(1), 3).expect("enqueue");
        park(&mut state, &key).expect("park");
    }
    let waiter = TurnKey::new("w", 1);
    enqueue(&mut state, &waiter, who(1), 3).expect("enqueue");
    park(&mut state, &waiter).expect("park");
    state.row_mut(&waiter).expect("row").after.push(Dependency {
        key: TurnKey::new("t7", 1),
        rule: AfterRule::Ended,
    });
    let part = steps::project(&state, &steps::cancel_reads("t7"));
    // `t7`'s three rows, its dependent, the running row and the last row.
    assert!(
        part.entries.len() <= 6,
        "{} rows in the part",
        part.entries.len()
    );
    let outcome = cancel_both(&state, steps::CancelSelection::Task("t7")).expect("equal");
    assert_eq!(outcome, Some(()), "the part sufficed");
}

#[test]
fn a_cancel_whose_departure_ends_a_dependent_runs_again_on_the_whole_queue() {
    // `w/1` needs `t3/1` to succeed, and `x/1` needs `w/1` to succeed: cancelling `t3` ends `w`
    // as dependency-failed, and `x` (outside `t3`'s part) with it.
    let mut state = deep_queue(10);
    for (task, on) in [("w", "t3"), ("x", "w")] {
        let key = TurnKey::new(task, 1);
        enqueue(&mut state, &key, who(1), 3).expect("enqueue");
        park(&mut state, &key).expect("park");
        state.row_mut(&key).expect("row").after.push(Dependency {
            key: TurnKey::new(on, 1),
            rule: AfterRule::Succeeded,
        });
    }
    // So that `x` is not the last row, which every part holds.
    let last = TurnKey::new("y", 1);
    enqueue(&mut state, &last, who(1), 3).expect("enqueue");
    park(&mut state, &last).expect("park");
    assert!(steps::project(&state, &steps::cancel_reads("t3"))
        .row(&TurnKey::new("x", 1))
        .is_none());
    let outcome = cancel_both(&state, steps::CancelSelection::Task("t3")).expect("checked");
    assert_eq!(outcome, None, "run again on the whole queue");
    // On the whole queue both dependents leave.
    let mut whole = state.clone();
    let (effect, departures) = cancel_and_depart(&mut whole, steps::CancelSelection::Task("t3"));
    assert_eq!(effect.removed, vec![TurnKey::new("t3", 1)]);
    assert!(departures.iter().all(Result::is_ok));
    assert!(whole.row(&TurnKey::new("w", 1)).is_none());
    assert!(whole.row(&TurnKey::new("x", 1)).is_none());
}
