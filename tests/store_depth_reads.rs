//! Issue 12, point 4: a reconcile section reads the records of parked rows only when a slot may
//! be free for one of them (spec/slots.md, "What reconcile reads"). With the only slot held by a
//! live runner, a section leaves parked rows whose turn records were deleted where they are (it
//! did not read them: before, it read every row's record and forgot them at once); once a slot is
//! free, the first section forgets them (`Forgotten`), before any parked row starts.

mod common;

use common::sections::submit_true;

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;
use tollgate::dispatch::Handoff;
use tollgate::home::Home;
use tollgate::process::{identity_of, self_identity, ProcLiveness, RunnerSpawner, SpawnError};
use tollgate::protocol::slots::steps::{self, ReconcileEffect};
use tollgate::protocol::slots::{ProcessIdentity, RowState, SlotToken, TurnKey};
use tollgate::queue::Store;
use tollgate::runtime::{store_for, Runtime};
use tollgate::submit::{
    submit_detached, submit_detached_sequenced, Placement, Sequencing, SubmitRequest,
};

/// Parked rows behind the held slot.
const PARKED: usize = 40;

/// Starts a real `sleep` as the "runner" (it never takes its slot over, so it holds the slot for
/// as long as it lives) and reads its identity from /proc; killed when the test ends.
struct SleepSpawner(Mutex<Vec<std::process::Child>>);

impl RunnerSpawner for SleepSpawner {
    fn spawn(&self, key: &TurnKey, _token: SlotToken) -> Result<ProcessIdentity, SpawnError> {
        let failed = |source| SpawnError::Spawn {
            key: key.clone(),
            source,
        };
        let child = std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .map_err(failed)?;
        let id = identity_of(child.id())
            .ok_or_else(|| failed(std::io::Error::other("no /proc entry for the sleep")))?;
        self.0.lock().expect("children").push(child);
        Ok(id)
    }
}

impl Drop for SleepSpawner {
    fn drop(&mut self) {
        for child in self.0.get_mut().expect("children").iter_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A one-slot home in `dir` whose "runners" are [`SleepSpawner`]'s, and this test's identity.
fn one_slot_home(
    dir: &std::path::Path,
) -> (
    Runtime<ProcLiveness, tollgate::queue::HomeStore>,
    ProcessIdentity,
) {
    home_with_slots(dir, 1)
}

/// [`one_slot_home`] with `workers` slots.
fn home_with_slots(
    dir: &std::path::Path,
    workers: usize,
) -> (
    Runtime<ProcLiveness, tollgate::queue::HomeStore>,
    ProcessIdentity,
) {
    let home = Home::at(dir);
    let config = home.init(Some(workers)).expect("init");
    let store = store_for(&home, &config);
    let rt = Runtime {
        home,
        config,
        store,
        spawner: Box::new(SleepSpawner(Mutex::new(Vec::new()))),
        liveness: ProcLiveness,
    };
    (rt, self_identity().expect("me"))
}

/// Deletes the turn record of `key` from the home's database, as an operator removing it would.
fn delete_record(home: &Home, key: &TurnKey) {
    let conn = rusqlite::Connection::open(home.db_path()).expect("open the database");
    conn.busy_timeout(Duration::from_secs(10)).expect("busy");
    let deleted = conn
        .execute(
            "DELETE FROM turns WHERE task = ?1 AND turn = ?2",
            rusqlite::params![key.task, key.turn],
        )
        .expect("delete the record");
    assert_eq!(deleted, 1, "{key} had a record");
}

fn rows(rt: &Runtime<ProcLiveness, tollgate::queue::HomeStore>) -> Vec<TurnKey> {
    let state = rt.store.load().expect("load");
    state.entries.iter().map(|e| e.key.clone()).collect()
}

#[test]
fn parked_rows_records_are_read_only_when_a_slot_may_be_free() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut rt, me) = one_slot_home(dir.path());
    let home = rt.home.clone();

    // The only slot: a live "runner" bound to the turn `hold`.
    let held = submit_detached(&rt, me, submit_true("hold")).expect("submit hold");
    assert!(
        matches!(
            held.placement,
            Placement::Started(Handoff::Completed { .. })
        ),
        "hold started: {:?}",
        held.placement
    );
    let mut parked = Vec::new();
    for n in 0..PARKED {
        let submitted = submit_detached(&rt, me, submit_true(&format!("p-{n}"))).expect("submit");
        assert_eq!(submitted.placement, Placement::Parked, "p-{n} parks");
        parked.push(submitted.key);
    }
    let head = parked[0].clone();
    let deep = parked[PARKED - 5].clone();

    // What the core names for a section on this queue: the held row's record, no parked row's.
    let state = rt.store.load().expect("load");
    assert!(!steps::start_reachable(&state, 1, &ProcLiveness));
    let needed: Vec<&TurnKey> = steps::records_needed(&state, &[], 1, &ProcLiveness).collect();
    assert_eq!(needed, [&held.key]);
    assert!(steps::reconcile_strategies_needed(&state, 1, &ProcLiveness).is_empty());
    // With a second slot, every row's record and every parked task's strategy.
    assert!(steps::start_reachable(&state, 2, &ProcLiveness));
    assert_eq!(
        steps::records_needed(&state, &[], 2, &ProcLiveness).count(),
        PARKED + 1
    );
    assert_eq!(
        steps::reconcile_strategies_needed(&state, 2, &ProcLiveness).len(),
        PARKED
    );

    delete_record(&home, &head);
    delete_record(&home, &deep);

    // No slot free: the section does not read the parked rows' records, so the rows stay.
    let effect = tollgate::reconcile::reconcile_once(&rt, me, &[]).expect("reconcile");
    assert_eq!(effect, ReconcileEffect::Saturated);
    let before = rows(&rt);
    assert_eq!(before.len(), PARKED + 1);
    assert!(before.contains(&head) && before.contains(&deep));

    // A slot comes free (a second worker): the first sections forget both rows, the head first,
    // before any parked row starts; then the next parked row starts on the free slot.
    rt.config.workers = 2;
    let effects: Vec<ReconcileEffect> = (0..3)
        .map(|_| tollgate::reconcile::reconcile_once(&rt, me, &[]).expect("reconcile"))
        .collect();
    assert_eq!(effects[0], ReconcileEffect::Forgotten { key: head.clone() });
    assert_eq!(effects[1], ReconcileEffect::Forgotten { key: deep.clone() });
    match &effects[2] {
        ReconcileEffect::Spawn {
            handoff,
            replaced: None,
        } => assert_eq!(handoff.key(), &parked[1]),
        other => panic!("expected the next parked row to start, got {other:?}"),
    }
    let after = rows(&rt);
    assert!(!after.contains(&head) && !after.contains(&deep));
    assert_eq!(after.len(), PARKED + 1 - 2);
    let state = rt.store.load().expect("load");
    let started = state.row(&parked[1]).expect("the started row");
    assert!(
        !matches!(started.state, RowState::Parked),
        "{} left the parked rows: {:?}",
        parked[1],
        started.state
    );
}

/// The bounded repair's look: on a healthy deep queue (the only slot held by a live runner) the
/// store's active part holds the held row alone and the core says no section is needed; once the
/// runner is gone, the look sees its dead row and the repair runs (and replaces it).
#[test]
fn the_repairs_look_reads_the_active_rows_and_sees_a_dead_runner() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (rt, me) = one_slot_home(dir.path());
    let held = submit_detached(&rt, me, submit_true("hold")).expect("submit hold");
    let Placement::Started(Handoff::Completed { child }) = held.placement else {
        panic!("hold started: {:?}", held.placement);
    };
    for n in 0..PARKED {
        let submitted = submit_detached(&rt, me, submit_true(&format!("p-{n}"))).expect("submit");
        assert_eq!(submitted.placement, Placement::Parked);
    }

    let active = rt.store.load_active().expect("load the active part");
    let keys: Vec<&TurnKey> = active.entries.iter().map(|e| &e.key).collect();
    let oldest_parked = TurnKey::new("p-0", 1);
    assert_eq!(
        keys,
        [&held.key, &oldest_parked],
        "only the held row is active; the oldest parked row says the queue has one"
    );
    assert_eq!(active.runners.len(), 1);
    assert_eq!(rt.store.load().expect("load").entries.len(), PARKED + 1);
    assert!(!tollgate::reconcile::repair_due(&rt, me).expect("look"));
    let repair = tollgate::runner::repair::bounded_repair(&rt, me).expect("repair");
    assert!(repair.steps.is_empty(), "no section: {:?}", repair.steps);

    // The runner dies: its row needs a repair, and the repair replaces it.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("kill the runner");
    let gone = (0..200).any(|_| {
        if tollgate::process::identity_of(child.pid) != Some(child) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
        false
    });
    assert!(gone, "the killed runner left /proc");
    assert!(tollgate::reconcile::repair_due(&rt, me).expect("look"));
    let repair = tollgate::runner::repair::bounded_repair(&rt, me).expect("repair");
    assert!(
        matches!(
            repair.steps.first(),
            Some(tollgate::protocol::slots::ReconcileStep::Spawn {
                replaced: Some(_),
                ..
            })
        ),
        "the dead runner was replaced: {:?}",
        repair.steps
    );
}

/// The database store's section of `rt`, for its test hook.
fn database(
    rt: &Runtime<ProcLiveness, tollgate::queue::HomeStore>,
) -> &tollgate::queue::SqliteStore {
    match &rt.store {
        tollgate::queue::HomeStore::Database(store) => store,
        other => panic!("the home's store is the database: {other:?}"),
    }
}

/// Issue 12, point 4: a parking submit's section loads the part of the queue the core names
/// (spec/store.md, "What a section loads"): the held row and the last row, not the parked rows of
/// other tasks, whether the task is named or generated in the section; and a submit whose
/// strategy must see a deep parked row of its task (`queue`: the newest waiter replaces it) loads
/// that row and supersedes it. The part the store loads is the core's `steps::project`.
#[test]
fn a_parking_submit_loads_only_the_rows_its_step_names() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (rt, me) = one_slot_home(dir.path());
    let home = rt.home.clone();
    let held = submit_detached(&rt, me, submit_true("hold")).expect("submit hold");
    assert!(matches!(held.placement, Placement::Started(_)));
    let mut waiter = submit_true("q");
    waiter.strategy = Some(tollgate::protocol::admission::Strategy::Queue);
    let first = submit_detached(&rt, me, waiter.clone()).expect("submit q");
    assert_eq!(first.placement, Placement::Parked);
    for n in 0..PARKED {
        let submitted = submit_detached(&rt, me, submit_true(&format!("p-{n}"))).expect("submit");
        assert_eq!(submitted.placement, Placement::Parked, "p-{n} parks");
        // The held row, the last row (the one before this submit) and nothing of the others.
        assert!(
            database(&rt).rows_loaded_by_last_section() <= 2,
            "p-{n}'s section loaded {} rows",
            database(&rt).rows_loaded_by_last_section()
        );
    }
    let total = rt.store.load().expect("load").entries.len();
    assert_eq!(total, PARKED + 2);

    // A generated task name: the first section names no task and is rolled back, the second
    // loads the generated task's rows (none).
    let mut generated = submit_true("unused");
    generated.task = None;
    let submitted = submit_detached(&rt, me, generated).expect("submit a generated task");
    assert_eq!(submitted.placement, Placement::Parked);
    assert!(database(&rt).rows_loaded_by_last_section() <= 2);
    assert_eq!(rt.store.load().expect("load").entries.len(), PARKED + 3);

    // The deep waiter of `q` is replaced by the newer turn: its section loaded it.
    let second = submit_detached(&rt, me, waiter).expect("submit q again");
    assert_eq!(
        second.superseded.as_slice(),
        std::slice::from_ref(&first.key)
    );
    assert!(
        matches!(second.placement, Placement::Waiting { .. }),
        "{:?}",
        second.placement
    );
    assert_eq!(
        database(&rt).rows_loaded_by_last_section(),
        3,
        "held, last and q's waiter"
    );
    let state = rt.store.load().expect("load");
    assert!(state.row(&first.key).is_none(), "the superseded row left");
    assert!(state.row(&second.key).is_some());
    assert_eq!(state.entries.len(), PARKED + 3);
    let record = tollgate::tasks::load_turn(&home, &first.key)
        .expect("read")
        .expect("the superseded turn's record");
    assert_eq!(
        record.outcome,
        Some(tollgate::tasks::TurnOutcome::Superseded)
    );

    // What the store loads for a part is the core's projection of the whole queue.
    assert_eq!(state.entries.len(), PARKED + 3);
    assert_loads_the_projection(&rt, &state, &steps::submit_reads(Some("p-3"), &[]));
}

/// A queue of one row, `running`, dispatched by `me` with its runner record.
fn running_alone(running: &TurnKey, me: ProcessIdentity) -> tollgate::protocol::slots::QueueState {
    let mut state = tollgate::protocol::slots::QueueState::default();
    tollgate::protocol::slots::enqueue(&mut state, running, me, 1).expect("enqueue");
    state.row_mut(running).expect("row").state = RowState::Dispatching { dispatch_owner: me };
    state.set_runner(running, me, false);
    state
}

/// Replaces the home's queue with `state` (one section).
fn publish(
    rt: &Runtime<ProcLiveness, tollgate::queue::HomeStore>,
    state: &tollgate::protocol::slots::QueueState,
) {
    rt.store
        .transact(|q| {
            *q = state.clone();
            Ok::<_, tollgate::queue::StoreError>(())
        })
        .expect("publish");
}

/// Asserts that what the home's store loads for the part `reads` names is the core's
/// `steps::project` of `state` (the home's whole queue), and that the section was told it loaded
/// that part of a queue of `state`'s rows. Returns the projection.
fn assert_loads_the_projection(
    rt: &Runtime<ProcLiveness, tollgate::queue::HomeStore>,
    state: &tollgate::protocol::slots::QueueState,
    reads: &steps::QueueReads,
) -> tollgate::protocol::slots::QueueState {
    let expected = steps::project(state, reads);
    let (part, loaded) = loaded_part(rt, reads);
    assert_eq!(part, expected);
    assert_eq!(
        loaded,
        steps::Loaded::Part {
            reads: reads.clone(),
            queue_rows: state.entries.len()
        }
    );
    expected
}

/// What the home's store loads for a section on the part `reads` names, and what it says it
/// loaded (the section commits nothing).
fn loaded_part(
    rt: &Runtime<ProcLiveness, tollgate::queue::HomeStore>,
    reads: &steps::QueueReads,
) -> (tollgate::protocol::slots::QueueState, steps::Loaded) {
    let seen = std::cell::RefCell::new(None);
    rt.store
        .transact_reading(
            tollgate::queue::Commit::Internal,
            &steps::Reads::Part(reads.clone()),
            |part, loaded| {
                *seen.borrow_mut() = Some((part.clone(), loaded.clone()));
                Ok::<_, tollgate::queue::StoreError>(())
            },
        )
        .expect("a section on the part");
    seen.into_inner().expect("the section ran")
}

/// Parks a new turn of each of `tasks` (its record, then its row, in one section) as a failed
/// spawn would leave it, slots free or not; returns their keys.
fn park_new_turns(
    rt: &Runtime<ProcLiveness, tollgate::queue::HomeStore>,
    me: ProcessIdentity,
    tasks: &[&str],
) -> Vec<TurnKey> {
    let keys: Vec<TurnKey> = tasks
        .iter()
        .map(|task| {
            tollgate::tasks::create_turn(
                &rt.home,
                task,
                vec!["true".into()],
                None,
                BTreeMap::new(),
                false,
                1,
            )
            .expect("record")
            .key
        })
        .collect();
    rt.store
        .transact(|state| {
            for key in &keys {
                tollgate::protocol::slots::enqueue(state, key, me, 1)?;
                tollgate::protocol::slots::park(state, key)?;
            }
            Ok::<_, tollgate::dispatch::DispatchError>(())
        })
        .expect("park rows");
    keys
}

/// Pauses (`paused`) or lifts the pause of `scope` in one section.
fn set_paused(
    rt: &Runtime<ProcLiveness, tollgate::queue::HomeStore>,
    scope: tollgate::protocol::slots::order::PauseScope<'_>,
    paused: bool,
) {
    rt.store
        .transact(|state| {
            if paused {
                tollgate::protocol::slots::order::pause(state, scope)?;
            } else {
                tollgate::protocol::slots::order::unpause(state, scope);
            }
            Ok::<_, tollgate::dispatch::DispatchError>(())
        })
        .expect("pause or resume");
}

/// Issue 14: the repair's look takes no section for a free slot alone. With two slots, one held
/// by a live "runner" and no row parked, nothing can start: the look says so (before, a free slot
/// made every submit on a queue without parked rows run a reconcile section that did nothing: on
/// a fleet, the seventh section of a turn under both locks). With a parked row that the free slot
/// can start (released by hand: a failed spawn parks its row the same way), the look says yes,
/// and the repair starts it.
#[test]
fn a_free_slot_without_a_parked_row_takes_no_repair_section() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (rt, me) = home_with_slots(dir.path(), 2);
    let held = submit_detached(&rt, me, submit_true("hold")).expect("submit hold");
    assert!(matches!(held.placement, Placement::Started(_)), "{held:?}");
    assert!(steps::start_reachable(
        &rt.store.load().expect("load"),
        rt.cap(),
        &ProcLiveness
    ));
    assert!(
        !tollgate::reconcile::repair_due(&rt, me).expect("look"),
        "a free slot and no parked row: nothing to repair"
    );
    let repair = tollgate::runner::repair::bounded_repair(&rt, me).expect("repair");
    assert!(repair.steps.is_empty(), "no section: {:?}", repair.steps);

    // A parked row behind deeper ones: the look sees the oldest parked row and says yes.
    let parked = park_new_turns(&rt, me, &["w-0", "w-1", "w-2"]);
    let active = rt.store.load_active().expect("look");
    assert!(active
        .entries
        .iter()
        .any(|e| e.key == parked[0] && e.state == RowState::Parked));
    assert!(tollgate::reconcile::repair_due(&rt, me).expect("look"));
}

/// Issue 12, point 4: what the SQLite store loads for a finishing runner's part
/// (`steps::finish_reads`: its task's rows, the first parked rows in start order and the rows
/// they wait for, by the index `entries_start_order`) is the core's `steps::project`, on a queue
/// whose start order is not its FIFO order (priorities) and whose heads wait for deep rows.
#[test]
fn a_finishing_runners_part_is_the_cores_projection() {
    use tollgate::protocol::slots::{enqueue, park, AfterRule, Dependency};
    let dir = tempfile::tempdir().expect("tempdir");
    let (rt, me) = one_slot_home(dir.path());
    let running = TurnKey::new("run", 1);
    let mut state = running_alone(&running, me);
    for n in 0..PARKED {
        let key = TurnKey::new(format!("p-{n}"), 1);
        enqueue(&mut state, &key, me, 2 + n as u64).expect("enqueue");
        park(&mut state, &key).expect("park");
        // Every fifth row has a higher priority: the heads are spread over the queue.
        state.row_mut(&key).expect("row").priority = i32::from(n % 5 == 4);
    }
    // The first head by start order waits for a deep row of another task.
    let deep = TurnKey::new("p-1", 1);
    state.row_mut(&TurnKey::new("p-4", 1)).expect("row").after = vec![Dependency {
        key: deep.clone(),
        rule: AfterRule::Ended,
    }];
    publish(&rt, &state);
    assert_eq!(state.entries.len(), PARKED + 1);
    let expected = assert_loads_the_projection(&rt, &state, &steps::finish_reads(&running));
    assert!(
        expected.row(&deep).is_some(),
        "the head's dependency is in the part"
    );
    assert!(
        expected.entries.len() < state.entries.len() / 2,
        "the part leaves parked rows out"
    );
    assert_eq!(
        database(&rt).rows_loaded_by_last_section(),
        expected.entries.len()
    );
}

/// Issue 12, point 4: a `concurrent=N` submit's part (`steps::submit_line_reads`) holds its
/// task's line only as far as the first parked row (the index `entries_task_line`), not the whole
/// line; what the SQLite store loads is the core's `steps::project`.
#[test]
fn a_concurrent_submits_part_holds_the_first_row_of_its_line() {
    use tollgate::protocol::slots::{enqueue, park};
    let dir = tempfile::tempdir().expect("tempdir");
    let (rt, me) = one_slot_home(dir.path());
    let mut state = running_alone(&TurnKey::new("line", 1), me);
    for n in 0..PARKED as u32 {
        // The line of `line`, interleaved with rows of other tasks.
        for key in [
            TurnKey::new("line", n + 2),
            TurnKey::new(format!("o-{n}"), 1),
        ] {
            enqueue(&mut state, &key, me, 2 + u64::from(n)).expect("enqueue");
            park(&mut state, &key).expect("park");
        }
    }
    publish(&rt, &state);
    assert_eq!(state.entries.len(), 2 * PARKED + 1);
    let expected = assert_loads_the_projection(&rt, &state, &steps::submit_line_reads("line", &[]));
    assert!(
        expected.row(&TurnKey::new("line", 2)).is_some(),
        "the line's first row"
    );
    assert!(
        expected.row(&TurnKey::new("line", 3)).is_none(),
        "not the rest of the line"
    );
    assert!(database(&rt).rows_loaded_by_last_section() <= 3);
}

/// Issue 12, point 4: a CLI `submit --task T` sets no strategy, and `T`'s is its record's
/// (`concurrent=1` by default): its section reads `T`'s line only as far as the first parked row,
/// so a long line of its own task costs each submit the same. A task whose record says `queue`,
/// submitted without a strategy, still supersedes its deep waiter (its first section, on the line
/// part, does not suffice for `queue` and is rolled back; the second reads the task's rows).
#[test]
fn a_submit_without_a_strategy_reads_its_lines_first_row() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (rt, me) = one_slot_home(dir.path());
    let held = submit_detached(&rt, me, submit_true("hold")).expect("submit hold");
    assert!(matches!(held.placement, Placement::Started(_)));
    for n in 0..PARKED {
        let submitted = submit_detached(&rt, me, submit_true("cli")).expect("submit cli");
        assert!(
            matches!(
                submitted.placement,
                Placement::Parked | Placement::Waiting { .. }
            ),
            "cli turn {n} waits: {:?}",
            submitted.placement
        );
        // The held row, the line's first row and the last row: not the line behind them.
        assert!(
            database(&rt).rows_loaded_by_last_section() <= 3,
            "cli's submit {n} loaded {} rows",
            database(&rt).rows_loaded_by_last_section()
        );
    }

    let mut waiter = submit_true("qq");
    waiter.strategy = Some(tollgate::protocol::admission::Strategy::Queue);
    let first = submit_detached(&rt, me, waiter).expect("submit qq");
    assert_eq!(first.placement, Placement::Parked);
    let second = submit_detached(&rt, me, submit_true("qq")).expect("submit qq without a strategy");
    assert_eq!(
        second.superseded.as_slice(),
        std::slice::from_ref(&first.key),
        "the record's queue strategy replaced the waiter"
    );
    let state = rt.store.load().expect("load");
    assert!(state.row(&first.key).is_none());
    assert!(state.row(&second.key).is_some());
    assert_eq!(state.entries.len(), PARKED + 2);
}

/// A request of `true` with no task: its name is generated (`true-<id>`).
fn generated() -> SubmitRequest {
    SubmitRequest {
        task: None,
        ..submit_true("unused")
    }
}

/// A submit whose task name is generated from its turn's id (`tollgate submit -- CMD`, the common
/// CLI submit) guesses the name from the store's unlocked hint of the next id (spec/store.md, "A
/// generated task name"): its first section reads that task's line and is the only one, where it
/// used to learn the name in a section that was then rolled back and run again. When the guess
/// is wrong (a task already has the `<base>-<id>` name, so the section generates `<base>-<id>-2`),
/// the section still generates the right name and runs once more, leaving the other task alone.
#[test]
fn a_submit_with_a_generated_task_name_takes_one_section() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (rt, me) = one_slot_home(dir.path());
    let held = submit_detached(&rt, me, submit_true("hold")).expect("submit hold");
    assert!(matches!(held.placement, Placement::Started(_)));
    for n in 0..5 {
        let before = database(&rt).sections_begun();
        let submitted = submit_detached(&rt, me, generated()).expect("submit a generated name");
        assert_eq!(submitted.placement, Placement::Parked, "generated turn {n}");
        assert_eq!(
            submitted.key.task,
            format!("true-{}", submitted.queue_id),
            "the name is the program and the turn's id"
        );
        assert_eq!(
            database(&rt).sections_begun() - before,
            1,
            "generated turn {n} ({}) took one section",
            submitted.key
        );
    }

    // A task already named as the guess will be: the section generates another name.
    let next = rt.store.load().expect("load").next_queue_id;
    let squatter = submit_detached(&rt, me, submit_true(&format!("true-{}", next + 1)))
        .expect("submit the squatter");
    let before = database(&rt).sections_begun();
    let submitted = submit_detached(&rt, me, generated()).expect("submit a generated name");
    assert_eq!(submitted.queue_id, next + 1);
    assert_eq!(submitted.key.task, format!("true-{}-2", next + 1));
    assert_eq!(
        database(&rt).sections_begun() - before,
        2,
        "a wrong guess costs one more section"
    );
    let state = rt.store.load().expect("load");
    assert!(
        state.row(&squatter.key).is_some(),
        "the squatter's row stays"
    );
    assert!(state.row(&submitted.key).is_some());
    assert_eq!(state.entries.len(), 1 + 5 + 2);
}

/// Issue 12, point 4: `tollgate cancel TASK` reads its task's part of the queue
/// (`steps::cancel_reads`: the task's rows and their dependents), not the parked rows of other
/// tasks; what it cancels ends as cancelled, and everything else stays queued. A cancel whose
/// departure ends a dependent of another task's dependent runs again on the whole queue and
/// ends that one too.
#[test]
fn a_cancel_at_depth_loads_only_its_tasks_part() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (rt, me) = one_slot_home(dir.path());
    let held = submit_detached(&rt, me, submit_true("hold")).expect("submit hold");
    assert!(matches!(held.placement, Placement::Started(_)));
    for n in 0..PARKED {
        submit_detached(&rt, me, submit_true(&format!("p-{n}"))).expect("submit");
    }
    let mut doomed = Vec::new();
    for _ in 0..3 {
        doomed.push(
            submit_detached(&rt, me, submit_true("doomed"))
                .expect("submit")
                .key,
        );
    }
    for n in PARKED..PARKED + 5 {
        submit_detached(&rt, me, submit_true(&format!("p-{n}"))).expect("submit");
    }
    let before = rows(&rt).len();
    let report = tollgate::cancel::cancel(&rt, "doomed").expect("cancel");
    assert_eq!(report.removed, doomed);
    // `doomed`'s three rows, the held row and the last row.
    assert_eq!(database(&rt).rows_loaded_by_last_section(), 5);
    assert_eq!(rows(&rt).len(), before - 3);
    for key in &doomed {
        let record = tollgate::tasks::load_turn(&rt.home, key)
            .expect("read")
            .expect("a record");
        assert_eq!(
            record.outcome,
            Some(tollgate::tasks::TurnOutcome::Cancelled)
        );
    }

    // `w` needs `c` to succeed, `x` needs `w` to succeed, and a row follows `x`: cancelling `c`
    // ends `w` and `x`, which the part of `c` does not hold; the section runs on the whole queue.
    let c = submit_detached(&rt, me, submit_true("c"))
        .expect("submit c")
        .key;
    let after_success = |key: &TurnKey| Sequencing {
        after: vec![tollgate::protocol::slots::Dependency {
            key: key.clone(),
            rule: tollgate::protocol::slots::AfterRule::Succeeded,
        }],
        retry: None,
    };
    let submit_after = |task: &str, key: &TurnKey| {
        submit_detached_sequenced(&rt, me, submit_true(task), after_success(key))
            .expect("submit with a dependency")
            .key
    };
    let w = submit_after("w", &c);
    let x = submit_after("x", &w);
    submit_detached(&rt, me, submit_true("last")).expect("submit last");
    let before = rows(&rt).len();
    tollgate::cancel::cancel(&rt, "c").expect("cancel c");
    assert_eq!(
        database(&rt).rows_loaded_by_last_section(),
        before,
        "the whole queue"
    );
    assert_eq!(rows(&rt).len(), before - 3);
    for key in [&w, &x] {
        let record = tollgate::tasks::load_turn(&rt.home, key)
            .expect("read")
            .expect("a record");
        assert_eq!(
            record.outcome,
            Some(tollgate::tasks::TurnOutcome::DependencyFailed),
            "{key}"
        );
    }
}

/// Issue 12, point 4: a paused home starts no parked row, so its free slots are no reason for
/// the repair's reconcile section, which reads the whole queue and every parked row's record (a
/// paused home's parking submit cost 6 ms at 200 parked rows and 12 ms at 600 for that section).
/// The look still says yes for what acts on a row it holds: the oldest parked row, once its
/// record is gone, is forgotten. Once the pause is lifted, a free slot and a parked row take the
/// section again.
#[test]
fn a_paused_homes_free_slots_take_no_repair_section() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (rt, me) = home_with_slots(dir.path(), 2);
    set_paused(
        &rt,
        tollgate::protocol::slots::order::PauseScope::Home,
        true,
    );
    let mut keys = Vec::new();
    for n in 0..PARKED {
        let submitted = submit_detached(&rt, me, submit_true(&format!("p-{n}"))).expect("submit");
        assert!(
            matches!(submitted.placement, Placement::Waiting { .. }),
            "p-{n} waits for the resume: {:?}",
            submitted.placement
        );
        keys.push(submitted.key);
    }
    let before = database(&rt).sections_begun();
    assert!(!tollgate::reconcile::repair_due(&rt, me).expect("look"));
    let submitted = submit_detached(&rt, me, submit_true("one-more")).expect("submit");
    assert!(matches!(submitted.placement, Placement::Waiting { .. }));
    tollgate::runner::repair::after_section(&rt, me);
    assert_eq!(
        database(&rt).sections_begun() - before,
        1,
        "the submit's own section only"
    );

    // The oldest parked row's record is gone: the look says yes, the repair forgets it.
    delete_record(&rt.home, &keys[0]);
    assert!(tollgate::reconcile::repair_due(&rt, me).expect("look"));
    let repair = tollgate::runner::repair::bounded_repair(&rt, me).expect("repair");
    assert_eq!(
        repair.steps.first(),
        Some(&tollgate::protocol::slots::ReconcileStep::Forgotten {
            key: keys[0].clone()
        })
    );
    assert!(!rows(&rt).contains(&keys[0]));

    // Lifted: a free slot and a parked row take the section again.
    set_paused(
        &rt,
        tollgate::protocol::slots::order::PauseScope::Home,
        false,
    );
    assert!(tollgate::reconcile::repair_due(&rt, me).expect("look"));
}

/// The same for a paused task's backlog: a free slot is a reason for the repair's section only
/// when a parked row no pause holds is there, and the look holds one whenever the queue has one
/// (the first parked row of the first task by name that is not paused, found past the paused
/// tasks by one index search each).
#[test]
fn a_paused_tasks_backlog_takes_no_repair_section() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (rt, me) = home_with_slots(dir.path(), 2);
    set_paused(
        &rt,
        tollgate::protocol::slots::order::PauseScope::Task("p"),
        true,
    );
    for _ in 0..PARKED {
        let submitted = submit_detached(&rt, me, submit_true("p")).expect("submit p");
        assert!(
            matches!(submitted.placement, Placement::Waiting { .. }),
            "{:?}",
            submitted.placement
        );
    }
    assert!(!tollgate::reconcile::repair_due(&rt, me).expect("look"));
    // Another task's turn starts on a free slot; its command's repair takes no section.
    let started = submit_detached(&rt, me, submit_true("q")).expect("submit q");
    assert!(matches!(started.placement, Placement::Started(_)));
    let before = database(&rt).sections_begun();
    tollgate::runner::repair::after_section(&rt, me);
    assert_eq!(database(&rt).sections_begun(), before, "no repair section");

    // A parked row of a task after `p` by name, which no pause holds: the look holds it and
    // says yes.
    let key = park_new_turns(&rt, me, &["z"]).remove(0);
    let look = rt.store.load_active().expect("look");
    let parked: Vec<&TurnKey> = look
        .entries
        .iter()
        .filter(|e| e.state == RowState::Parked)
        .map(|e| &e.key)
        .collect();
    assert_eq!(parked, [&TurnKey::new("p", 1), &key]);
    assert!(tollgate::reconcile::repair_due(&rt, me).expect("look"));
}

/// Answers from fixed lists: the processes in `live` are alive, every other one is gone, and
/// every recorded work may still have a process.
struct Fixed {
    live: Vec<ProcessIdentity>,
}

impl tollgate::protocol::slots::Liveness for Fixed {
    fn observe(&self, identity: &ProcessIdentity) -> tollgate::protocol::slots::Observation {
        if self.live.contains(identity) {
            tollgate::protocol::slots::Observation::Matching
        } else {
            tollgate::protocol::slots::Observation::Gone
        }
    }

    fn observe_work(
        &self,
        _work: &tollgate::protocol::slots::WorkRecord,
    ) -> tollgate::protocol::slots::Observation {
        tollgate::protocol::slots::Observation::Matching
    }
}

/// The start decision counts a slot as reconcile's steps free it: a live runner's work holds its
/// slot, so no parked row's record is read; a dead runner's work is dropped once seen gone, so
/// its slot counts as free and the parked row's record is read (spec/slots.md, "What reconcile
/// reads").
#[test]
fn a_live_runners_work_holds_its_slot_and_a_dead_runners_work_frees_it() {
    use tollgate::protocol::slots::{enqueue, park, QueueState, WorkId, WorkRecord};
    let runner = ProcessIdentity {
        pid: 10,
        start_time_micros: 1,
    };
    let submitter = ProcessIdentity {
        pid: 11,
        start_time_micros: 1,
    };
    let running = TurnKey::new("run", 1);
    let parked = TurnKey::new("wait", 1);
    let mut state = QueueState::default();
    enqueue(&mut state, &running, submitter, 1).expect("enqueue");
    enqueue(&mut state, &parked, submitter, 2).expect("enqueue");
    park(&mut state, &parked).expect("park");
    state.row_mut(&running).expect("row").state = RowState::Dispatching {
        dispatch_owner: runner,
    };
    state.set_runner(&running, runner, false);
    state.works.push(WorkRecord {
        key: running.clone(),
        id: WorkId::from_token(common::token(1)),
        runner,
        leader: None,
        cgroup: None,
    });
    assert_eq!(state.check_structure(), Ok(()));

    let everyone = Fixed {
        live: vec![runner, submitter],
    };
    assert!(!steps::start_reachable(&state, 1, &everyone));
    let needed: Vec<&TurnKey> = steps::records_needed(&state, &[], 1, &everyone).collect();
    assert_eq!(
        needed,
        [&running],
        "a live runner's work holds the only slot"
    );

    let runner_dead = Fixed {
        live: vec![submitter],
    };
    assert!(steps::start_reachable(&state, 1, &runner_dead));
    let needed: Vec<&TurnKey> = steps::records_needed(&state, &[], 1, &runner_dead).collect();
    assert_eq!(
        needed,
        [&running, &parked],
        "a dead runner's work frees its slot for the parked row"
    );
}
