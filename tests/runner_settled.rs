//! A runner whose take-over finds its turn already settled (a result recorded, the row still
//! queued: a runner that died while leaving, or a record ended outside the queue's section) runs
//! nothing, and still does its finish: it leaves the row and starts the oldest parked row in the
//! slot it frees (S5's handoff). Driven through `runner::run_worker`, the entry point the hidden
//! `worker runner` command calls, on a real SQLite home, with a spawner that hands out this test
//! process as every runner so no process is left behind. Nothing here reads through `status` or
//! `wait`, whose bounded repair would start the parked row itself and hide a runner that did not.

mod common;

use common::sections::submit_true;
use std::sync::{Arc, Mutex};
use tollgate::dispatch::Handoff;
use tollgate::home::Home;
use tollgate::process::{self_identity, ProcLiveness, RunnerSpawner, SpawnError};
use tollgate::protocol::slots::{ProcessIdentity, RowState, SlotToken, TurnKey};
use tollgate::runner::{run_worker, WorkerOutcome};
use tollgate::runtime::{store_for, Runtime};
use tollgate::submit::{submit_detached, Placement};
use tollgate::tasks::TurnOutcome;

/// Records each spawn and answers with this process as the runner (alive, and the identity the
/// in-process `run_worker` below takes over with).
struct ThisProcess(Arc<Mutex<Vec<(TurnKey, SlotToken)>>>);

impl RunnerSpawner for ThisProcess {
    fn spawn(&self, key: &TurnKey, token: SlotToken) -> Result<ProcessIdentity, SpawnError> {
        let me = self_identity().map_err(|source| SpawnError::Spawn {
            key: key.clone(),
            source,
        })?;
        self.0.lock().expect("spawn log").push((key.clone(), token));
        Ok(me)
    }
}

#[test]
fn a_runner_finding_its_turn_settled_leaves_and_starts_the_parked_row() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = Home::at(dir.path());
    let config = home.init(Some(1)).expect("init");
    let spawned = Arc::new(Mutex::new(Vec::new()));
    let rt = Runtime {
        store: store_for(&home, &config),
        home,
        config,
        spawner: Box::new(ThisProcess(Arc::clone(&spawned))),
        liveness: ProcLiveness,
    };
    let me = self_identity().expect("this process");
    let first = submit_detached(&rt, me, submit_true("a")).expect("submit a");
    assert!(
        matches!(
            first.placement,
            Placement::Started(Handoff::Completed { .. })
        ),
        "{:?}",
        first.placement
    );
    let second = submit_detached(&rt, me, submit_true("b")).expect("submit b");
    assert_eq!(second.placement, Placement::Parked, "one slot, taken by a");
    let token = {
        let log = spawned.lock().expect("spawn log");
        assert_eq!(log.len(), 1, "only a's runner was started: {log:?}");
        assert_eq!(log[0].0, first.key);
        log[0].1
    };
    // a's record ends while its row is still queued: the state a runner dying while leaving left.
    tollgate::tasks::end_unrun(&rt.home, &first.key, TurnOutcome::Cancelled, 1)
        .expect("settle a's record");

    let outcome = run_worker(&rt, &first.key, token).expect("the runner's run");

    assert!(
        matches!(outcome, WorkerOutcome::AlreadySettled),
        "{outcome:?}"
    );
    let state = rt.store.load().expect("queue");
    assert!(
        state.row(&first.key).is_none(),
        "the settled turn's row left the queue"
    );
    let log = spawned.lock().expect("spawn log").clone();
    assert_eq!(
        log.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>(),
        vec![first.key.clone(), second.key.clone()],
        "the runner started the parked row in the slot it freed"
    );
    let row = state.row(&second.key).expect("b's row");
    assert!(
        matches!(row.state, RowState::Dispatching { .. }),
        "b is dispatched, not parked: {:?}",
        row.state
    );
    let turn = tollgate::tasks::load_turn(&rt.home, &first.key)
        .expect("a's record")
        .expect("a has a record");
    assert_eq!(
        turn.outcome,
        Some(TurnOutcome::Cancelled),
        "nothing ran again"
    );
}
