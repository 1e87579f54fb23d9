//! The group commit of accepted deliveries (spec/ingress.md, "Group commit"): every delivery the
//! gate admitted while a batch was being committed is made durable in the next batch — one
//! `BEGIN IMMEDIATE` transaction, one fsync — before any of them is answered. The batch reads the
//! stored marks of its deliveries' identities (and legacy identities) once; inside it each
//! delivery is, in order: the core's mark step ([`TableMarks::mark`]: a live mark makes it a
//! duplicate, else the mark it returns is written), its turn record with the payload, and the
//! core's submit step ([`crate::submit::decide_submit`], called per delivery on the section's
//! queue). Each delivery is a savepoint, so one that fails (a bad task name, a full disk) is
//! rolled back alone, its mark with it (in the table and in the step's marks), and the others
//! commit. The effects (spawning a runner, a waker) are performed after the answers: the
//! 200 does not wait for a spawn.
//!
//! The batch's section loads only the part of the queue the core names for its deliveries (the
//! union of [`steps::submit_reads`] of their tasks; spec/store.md, "What a section loads"), once
//! for the batch. When a delivery's step says the part does not suffice, the whole batch is rolled
//! back and run again on the whole queue (nobody was answered yet). What does not need the queue
//! (the request, its environment, the task's name) is prepared by the connection's thread before
//! the delivery is queued.
use super::delivery::{Committed, Pending};
use super::handler::App;
use crate::group_commit::Worker;
use crate::protocol::admission::{EventIdentity, MarkStep, Strategy, TableMarks};
use crate::protocol::fleet::FleetView;
use crate::protocol::slots::sections::Placement;
use crate::protocol::slots::steps::{self, Loaded, QueueReads, Reads};
use crate::protocol::slots::{ProcessIdentity, QueueState};
use crate::queue::records::{self, Access};
use crate::queue::RecordTx;
use crate::queue::{Commit, Store, StoreError};
use crate::runner::payload::PAYLOAD_FILE;
use crate::runtime::Runtime;
use crate::submit::{decide_submit, Decided, Sequencing};
use crate::sync::Arc;
use crate::tasks::DeliveryMeta;
use std::cell::{Cell, RefCell};

/// How often a batch prunes the kept payloads of ended turns. The prune scans every kept payload
/// (each unfinished turn's), so doing it in every batch made a batch's cost grow with the turns
/// waiting; once a second it is bounded work per second instead.
pub const PRUNE_EVERY_MILLIS: u64 = 1_000;
/// The most kept payloads one prune drops (at [`PRUNE_EVERY_MILLIS`], more than the accept path
/// can add in that time).
pub const PRUNE_MOST: usize = 8_192;

/// The part of the queue a batch's section loads: what the core's submit step names for each
/// delivery's task ([`steps::submit_reads`]), together.
fn batch_reads(batch: &[Pending]) -> Reads {
    let mut reads = QueueReads::default();
    for pending in batch {
        // A route with `concurrent=N` reads its task's line only as far as its first parked row
        // (`steps::submit_line_reads`), as a submit of its own would (`submit::decide_sequenced`).
        let named = match (pending.request.task.as_deref(), pending.request.strategy) {
            (Some(task), Some(Strategy::Concurrent { .. })) => steps::submit_line_reads(task, &[]),
            (task, _) => steps::submit_reads(task, &[]),
        };
        reads.tasks.extend(named.tasks);
        reads.turns.extend(named.turns);
        reads.lines.extend(named.lines);
    }
    Reads::Part(reads)
}

/// A store that is the queue of the section in progress: the outer group transaction's. A
/// delivery's submit step runs on it exactly as it would in a section of its own (a copy changed,
/// kept only on `Ok`). On a part of the queue, a step that asks for what the part does not hold
/// (more tasks, the whole queue) is refused and `needs_everything` set: the batch is then run
/// again on the whole queue.
struct InSection<'a> {
    state: RefCell<&'a mut QueueState>,
    /// The batch's records (its transaction), in which each delivery's section reads and writes.
    records: RefCell<RecordTx<'a>>,
    /// What the batch's section loaded.
    loaded: Loaded,
    /// The rows of the part as loaded (to keep `queue_rows` true as deliveries add rows).
    rows_at_load: usize,
    needs_everything: Cell<bool>,
    /// The batch's fleet view (`None` on one host), as its deliveries' sections leave it.
    fleet: RefCell<Option<FleetView>>,
}

impl InSection<'_> {
    /// What the section loaded, as a delivery's step sees it now (the rows added by the batch's
    /// earlier deliveries counted), when it covers `reads`; `None` (and the batch marked to run
    /// again on the whole queue) when it does not.
    fn covering(&self, reads: Option<&Reads>) -> Option<Loaded> {
        match (&self.loaded, reads) {
            (Loaded::Whole, _) => Some(Loaded::Whole),
            (
                Loaded::Part {
                    reads: outer,
                    queue_rows,
                },
                Some(Reads::Part(inner)),
            ) if inner.tasks.is_subset(&outer.tasks)
                && inner.turns.is_subset(&outer.turns)
                && inner
                    .lines
                    .iter()
                    .all(|t| outer.lines.contains(t) || outer.tasks.contains(t)) =>
            {
                let now = self.state.borrow().entries.len();
                Some(Loaded::Part {
                    reads: outer.clone(),
                    queue_rows: (queue_rows + now).saturating_sub(self.rows_at_load),
                })
            }
            _ => {
                self.needs_everything.set(true);
                None
            }
        }
    }
}

/// The refusal of a step that needs more than the batch's part (the batch runs again).
fn beyond_part() -> StoreError {
    StoreError::Database {
        path: "serve group commit".into(),
        detail: "a delivery's step needs more of the queue than the batch loaded".into(),
    }
}

impl Store for InSection<'_> {
    fn load(&self) -> Result<QueueState, StoreError> {
        self.covering(None).ok_or_else(beyond_part)?;
        Ok((**self.state.borrow()).clone())
    }

    fn transact_as<R, E>(
        &self,
        _commit: Commit,
        change: impl FnOnce(&mut QueueState) -> Result<R, E>,
    ) -> Result<R, E>
    where
        E: From<StoreError>,
    {
        self.covering(None).ok_or_else(beyond_part)?;
        let mut copy = (**self.state.borrow()).clone();
        let result = change(&mut copy)?;
        **self.state.borrow_mut() = copy;
        Ok(result)
    }

    fn transact_reading<R, E>(
        &self,
        commit: Commit,
        reads: &Reads,
        change: impl FnOnce(&mut QueueState, &Loaded) -> Result<R, E>,
    ) -> Result<R, E>
    where
        E: From<StoreError>,
    {
        self.transact_section(commit, reads, |state, loaded, _, _| change(state, loaded))
    }

    /// A delivery's section sees the batch's fleet view, and its lease changes stay in it for the
    /// batch's commit (a delivery's section takes no lease: a submit binds no child).
    fn transact_section<R, E>(
        &self,
        _commit: Commit,
        reads: &Reads,
        change: impl FnOnce(
            &mut QueueState,
            &Loaded,
            &mut Option<FleetView>,
            &mut RecordTx<'_>,
        ) -> Result<R, E>,
    ) -> Result<R, E>
    where
        E: From<StoreError>,
    {
        let loaded = self.covering(Some(reads)).ok_or_else(beyond_part)?;
        let mut copy = (**self.state.borrow()).clone();
        let mut fleet = self.fleet.borrow().clone();
        let mut records = self.records.borrow_mut();
        let result = change(&mut copy, &loaded, &mut fleet, &mut records)?;
        **self.state.borrow_mut() = copy;
        *self.fleet.borrow_mut() = fleet;
        Ok(result)
    }
}

/// Why a batch's section published nothing.
enum BatchError {
    Store(StoreError),
    /// A delivery needed more than the part loaded: run the batch again on the whole queue.
    NeedsEverything,
}

impl From<StoreError> for BatchError {
    fn from(e: StoreError) -> Self {
        BatchError::Store(e)
    }
}

/// Runs the committer until the queue is closed and empty. The runtime is built once, so its
/// database connection stays open across batches.
pub fn run_worker(app: Arc<App>, worker: Worker<Pending, Committed>) {
    let rt = super::runtime_for(&app.home, &app.config);
    let mut next_prune = std::time::Instant::now();
    worker.run(
        |batch| commit_batch(&app, &rt, batch, &mut next_prune),
        |decided| perform(&app, &rt, decided),
    );
}

/// One batch: one transaction for all of `batch`, one result per delivery in order. Prunes the
/// kept payloads when `next_prune` has passed.
fn commit_batch(
    app: &App,
    rt: &Runtime,
    batch: Vec<Pending>,
    next_prune: &mut std::time::Instant,
) -> (Vec<Committed>, Vec<Decided>) {
    let count = batch.len();
    let outcome = match section(app, rt, &batch, &batch_reads(&batch), next_prune) {
        Err(BatchError::NeedsEverything) => {
            section(app, rt, &batch, &Reads::Everything, next_prune)
        }
        other => other,
    };
    match outcome {
        Ok(results) => {
            let effects = results
                .iter()
                .filter_map(|result| match result {
                    Committed::Queued(decided) => Some((**decided).clone()),
                    Committed::Duplicate | Committed::Failed(_) => None,
                })
                .collect();
            (results, effects)
        }
        Err(e) => {
            let error = match e {
                BatchError::Store(e) => e.to_string(),
                BatchError::NeedsEverything => beyond_part().to_string(),
            };
            let results = (0..count)
                .map(|_| Committed::Failed(error.clone()))
                .collect();
            (results, Vec::new())
        }
    }
}

/// The batch's one section on what `reads` names.
fn section(
    app: &App,
    rt: &Runtime,
    batch: &[Pending],
    reads: &Reads,
    next_prune: &mut std::time::Instant,
) -> Result<Vec<Committed>, BatchError> {
    rt.store
        .transact_section(Commit::Promise, reads, |state, loaded, fleet, tx| {
            let rows_at_load = state.entries.len();
            let base = super::runtime_for(&app.home, &app.config);
            let inner = Runtime {
                home: base.home,
                config: base.config,
                store: InSection {
                    state: RefCell::new(state),
                    records: RefCell::new(tx.reborrow()),
                    loaded: loaded.clone(),
                    rows_at_load,
                    needs_everything: Cell::new(false),
                    fleet: RefCell::new(fleet.clone()),
                },
                spawner: base.spawner,
                liveness: base.liveness,
            };
            // The stored marks the batch's deliveries are judged on, read once under the queue's
            // lock; the core's step decides each delivery on them and on the batch's own writes.
            let keys: Vec<&EventIdentity> = batch
                .iter()
                .flat_map(|p| [&p.identity, &p.legacy])
                .collect();
            let stored = app
                .serve_state
                .marks_of(&mut inner.store.records.borrow_mut(), &keys)
                .map_err(StoreError::from)?;
            let mut marks = TableMarks::read(stored, app.settings.dedupe_ttl_millis);
            let mut results = Vec::with_capacity(batch.len());
            for pending in batch {
                let records = &inner.store.records;
                app.serve_state
                    .savepoint(&mut records.borrow_mut(), "SAVEPOINT delivery")
                    .map_err(StoreError::from)?;
                // The queue as it was before this delivery: a delivery that fails after its
                // section (its payload row) is rolled back in memory as in the database.
                let before = (**inner.store.state.borrow()).clone();
                let marks_before = marks.clone();
                let result = one(app, &inner, pending, &mut marks);
                if inner.store.needs_everything.get() {
                    // Rolled back with the section: nobody was answered.
                    return Err(BatchError::NeedsEverything);
                }
                let end = match &result {
                    Committed::Queued(_) => "RELEASE delivery",
                    Committed::Duplicate | Committed::Failed(_) => {
                        **inner.store.state.borrow_mut() = before;
                        marks = marks_before;
                        "ROLLBACK TO delivery; RELEASE delivery"
                    }
                };
                app.serve_state
                    .savepoint(&mut records.borrow_mut(), end)
                    .map_err(StoreError::from)?;
                results.push(result);
            }
            // The marks' bound, once for the batch (a count of the table per delivery was O(marks)).
            let mut records = inner.store.records.borrow_mut();
            app.serve_state
                .trim_marks(&mut records)
                .map_err(StoreError::from)?;
            let now = std::time::Instant::now();
            if now >= *next_prune {
                prune_payloads(app, &mut records);
                *next_prune = now + std::time::Duration::from_millis(PRUNE_EVERY_MILLIS);
            }
            // A crash here is what `tests/failpoints_serve_group_commit.rs` injects: the batch is
            // written, not committed, and nobody was answered.
            fail::fail_point!("serve::before_group_commit", |_| std::process::abort());
            *fleet = inner.store.fleet.take();
            Ok(results)
        })
}

/// One delivery inside the batch's transaction: the core's mark step on the batch's `marks`
/// (judged at the delivery's arrival, as the gate judged it), the mark it returns written, then
/// the submit step and the payload.
fn one(
    app: &App,
    inner: &Runtime<crate::process::ProcLiveness, InSection>,
    pending: &Pending,
    marks: &mut TableMarks,
) -> Committed {
    let write = match marks.mark(pending.keys(), pending.now_millis) {
        MarkStep::Duplicate => return Committed::Duplicate,
        MarkStep::Write(write) => write,
    };
    if let Err(e) = app
        .serve_state
        .write_mark(&mut inner.store.records.borrow_mut(), &write)
    {
        return Committed::Failed(e.to_string());
    }
    let decided = match decide_submit(inner, app.me, &pending.request, &Sequencing::default()) {
        Ok(decided) => decided,
        Err(e) => return Committed::Failed(e.to_string()),
    };
    let mut records = inner.store.records.borrow_mut();
    match keep_payload(
        app,
        &mut records,
        &decided.key,
        &pending.meta,
        &pending.body,
    ) {
        Ok(()) => Committed::Queued(Box::new(decided)),
        Err(e) => Committed::Failed(e.to_string()),
    }
}

/// The delivery's body, in the same transaction as its turn: a row of the home's database (its
/// only durable copy: the turn's runner writes the file from it before the command starts,
/// [`crate::runner::payload::localised`]; spec/ingress.md "Group commit"), so an accept makes no
/// inode.
fn keep_payload(
    app: &App,
    tx: &mut RecordTx<'_>,
    key: &crate::protocol::slots::TurnKey,
    meta: &DeliveryMeta,
    body: &[u8],
) -> Result<(), crate::fsutil::FileError> {
    let home = &app.home;
    records::with_db_in(home, tx, Access::Write, None, |db| {
        crate::queue::serve_tables::put_payload(db, &meta.id, &key.task, key.turn, body)
            .map_err(|e| records::db_error(&records::database_name(home), e))
    })
}

/// Drops the kept payloads of turns that ended or are gone (at most [`PRUNE_MOST`]), in the
/// batch's transaction `tx`.
fn prune_payloads(app: &App, tx: &mut RecordTx<'_>) {
    let pruned = records::with_db_in(&app.home, tx, Access::Write, None, |db| {
        crate::queue::serve_tables::prune_payloads(db, PRUNE_MOST)
            .map_err(|e| records::db_error(&records::database_name(&app.home), e))
    });
    if let Err(e) = pruned {
        tracing::warn!("cannot prune kept payloads: {e}");
    }
}

/// After the answers: performs each committed decision's effect (spawn its runner, start a
/// waker), as `submit` does after its section.
fn perform(app: &App, rt: &Runtime, decided: Vec<Decided>) {
    for decided in decided {
        if let Some(at_millis) = decided.placement.wake_at_millis() {
            crate::driver::start_waker(rt.spawner.as_ref(), at_millis);
        }
        if let Placement::Spawn(handoff) = decided.placement {
            let _spawning = crate::sync::lock(&app.spawn_lock);
            let spawner = AcceptSpawner(super::runtime_for(&app.home, &app.config).spawner);
            if let Err(e) = crate::driver::hand_off(rt, &spawner, handoff) {
                tracing::error!(
                    "{}: cannot start the runner of an accepted delivery ({e}); its row is parked and serve tries again (at most {} ms apart)",
                    decided.key,
                    super::starter::RETRY_MAX_MILLIS
                );
                app.starter.spawn_failed();
            }
        }
    }
}

/// Rewrites the payload files of unfinished turns from their kept copies (a power loss may have
/// lost an unsynced file); returns how many were rewritten.
pub fn restore_payloads(app: &App) -> usize {
    let kept = records::with_db(&app.home, Access::Read, None, |db| {
        crate::queue::serve_tables::kept_payloads(db)
            .map_err(|e| records::db_error(&records::database_name(&app.home), e))
    });
    let kept = match kept {
        Ok(kept) => kept,
        Err(e) => {
            tracing::warn!("cannot read the kept payloads: {e}");
            return 0;
        }
    };
    let mut restored = 0;
    for (task, turn, body) in kept {
        let key = crate::protocol::slots::TurnKey::new(task, turn);
        let dir = app.home.turn_dir(&key);
        if !dir.is_dir() {
            // Not started yet (its runner writes the file from the row), or queued by another
            // home of the queue (PostgreSQL).
            continue;
        }
        let path = dir.join(PAYLOAD_FILE);
        if std::fs::read(&path).is_ok_and(|b| b == body) {
            continue;
        }
        match crate::fsutil::publish_bytes(&path, &body) {
            Ok(()) => restored += 1,
            Err(e) => tracing::warn!("{key}: cannot restore the delivery's payload: {e}"),
        }
    }
    restored
}

/// The spawner of the accept sequence: the runtime's own, behind the failpoint
/// `serve::after_reserve` (spec/ingress.md, "Crash windows"): the turn's row is durable and its
/// slot reserved by this serve, its runner not started yet.
struct AcceptSpawner(Box<dyn crate::process::RunnerSpawner>);

impl crate::process::RunnerSpawner for AcceptSpawner {
    fn spawn(
        &self,
        key: &crate::protocol::slots::TurnKey,
        token: crate::protocol::slots::SlotToken,
    ) -> Result<ProcessIdentity, crate::process::SpawnError> {
        // A crash here is what `tests/failpoints_serve_recovery.rs` injects (`return` aborts).
        fail::fail_point!("serve::after_reserve", |_| std::process::abort());
        self.0.spawn(key, token)
    }

    fn spawn_waker(&self, at_millis: u64) -> Result<(), crate::process::SpawnError> {
        self.0.spawn_waker(at_millis)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::slots::{QueueEntry, RowState, TurnKey};
    use crate::submit::SubmitRequest;

    fn row(task: &str, queue_id: u64) -> QueueEntry {
        QueueEntry {
            queue_id,
            key: TurnKey::new(task, 1),
            enqueued_at_millis: 0,
            state: RowState::Parked,
            slot_reservation: None,
            ready_at_millis: 0,
            cancel_requested: false,
            priority: 0,
            after: Vec::new(),
        }
    }

    fn part(tasks: &[&str]) -> QueueReads {
        QueueReads {
            tasks: tasks.iter().map(|t| t.to_string()).collect(),
            turns: Default::default(),
            heads: 0,
            lines: Default::default(),
        }
    }

    fn in_section(state: &mut QueueState, loaded: Loaded) -> InSection<'_> {
        let rows_at_load = state.entries.len();
        InSection {
            state: RefCell::new(state),
            records: RefCell::new(RecordTx::outside()),
            loaded,
            rows_at_load,
            needs_everything: Cell::new(false),
            fleet: RefCell::new(None),
        }
    }

    /// A delivery's step on the batch's part sees the batch's part (with the rows earlier
    /// deliveries added counted), so the core's `submit_covers` keeps the queue's bound.
    #[test]
    fn a_task_of_the_batch_is_covered_by_its_part() {
        let mut state = QueueState::default();
        let loaded = Loaded::Part {
            reads: part(&["a", "b"]),
            queue_rows: 10,
        };
        let section = in_section(&mut state, loaded);
        let reads = Reads::Part(steps::submit_reads(Some("a"), &[]));
        let seen = section
            .transact_reading(Commit::Promise, &reads, |state, loaded| {
                state.entries.push(row("a", 1));
                Ok::<_, StoreError>(loaded.clone())
            })
            .expect("covered");
        assert_eq!(
            seen,
            Loaded::Part {
                reads: part(&["a", "b"]),
                queue_rows: 10
            }
        );
        let again = section.covering(Some(&reads)).expect("covered");
        assert_eq!(
            again,
            Loaded::Part {
                reads: part(&["a", "b"]),
                queue_rows: 11
            },
            "the row the first delivery added counts toward the queue's bound"
        );
        assert!(!section.needs_everything.get());
    }

    /// A step that asks for more than the part (another task, the whole queue, a section on
    /// the whole queue) is refused before it runs, and the batch is marked to run again on the
    /// whole queue.
    #[test]
    fn a_step_beyond_the_part_runs_the_batch_again_on_the_whole_queue() {
        for reads in [Reads::Part(part(&["c"])), Reads::Everything] {
            let mut state = QueueState::default();
            let section = in_section(
                &mut state,
                Loaded::Part {
                    reads: part(&["a"]),
                    queue_rows: 0,
                },
            );
            let ran =
                section.transact_reading(Commit::Promise, &reads, |_, _| Ok::<_, StoreError>(()));
            assert!(
                ran.is_err(),
                "{reads:?} ran on a part that does not hold it"
            );
            assert!(section.needs_everything.get(), "{reads:?}");
        }
        let mut state = QueueState::default();
        let section = in_section(
            &mut state,
            Loaded::Part {
                reads: part(&["a"]),
                queue_rows: 0,
            },
        );
        assert!(section.transact(|_| Ok::<_, StoreError>(())).is_err());
        assert!(section.needs_everything.get());
        // On the whole queue every step runs.
        let mut state = QueueState::default();
        let section = in_section(&mut state, Loaded::Whole);
        let reads = Reads::Part(part(&["c"]));
        let seen = section
            .transact_reading(Commit::Promise, &reads, |_, l| {
                Ok::<_, StoreError>(l.clone())
            })
            .expect("the whole queue covers every step");
        assert_eq!(seen, Loaded::Whole);
        assert!(!section.needs_everything.get());
    }

    /// The batch's part names every delivery's task.
    #[test]
    fn the_batch_part_names_every_task() {
        let pending = |task: &str| Pending {
            meta: DeliveryMeta {
                id: task.into(),
                adapter: "generic".into(),
                tenant: String::new(),
                identity: task.into(),
                admitted_at_millis: 0,
                route: "/hook".into(),
            },
            request: SubmitRequest {
                task: Some(task.into()),
                strategy: None,
                argv: vec!["true".into()],
                cwd: None,
                env: crate::argv::Env::new(),
                labels: Vec::new(),
                timeout_millis: None,
                schedule: Default::default(),
                delivery: None,
            },
            body: Vec::new(),
            identity: EventIdentity(task.into()),
            legacy: EventIdentity(format!("generic//{task}")),
            now_millis: 0,
        };
        assert_eq!(
            batch_reads(&[pending("x"), pending("y"), pending("x")]),
            Reads::Part(part(&["x", "y"]))
        );
    }
}
