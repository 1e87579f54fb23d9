//! The group commit of accepted deliveries (spec/ingress.md, "Group commit"): every delivery the
//! gate admitted while a batch was being committed is made durable in the next batch — one
//! `BEGIN IMMEDIATE` transaction, one fsync — before any of them is answered. The batch is one
//! section of the core's ([`AcceptBatch`]), run by the one section runner like every other: it
//! reads the stored marks of its deliveries' identities (and legacy identities), decides each
//! delivery in turn (the dedupe rule, then the detached submit's own step on the part as the
//! earlier ones left it) and returns each delivery's writes (its mark, its turn's records, its
//! payload) as a group of its own. A group the store refuses (a full disk, a value the database
//! refuses) rolls the batch back and runs it again with that delivery failed, so one delivery's
//! error never fails the others and no mark is kept without its turn. The effects (spawning a
//! runner, a waker) are performed after the answers: the 200 does not wait for a spawn.
//!
//! The batch's section loads only the part of the queue its deliveries' submits name (spec/store.md,
//! "What a section loads"), once for the batch, and runs again on the whole queue when a step says
//! the part does not suffice (nobody was answered yet). What does not need the queue (the request
//! checked, the turn it makes, a fresh token) is prepared before the section.
use super::delivery::{Committed, Pending};
use super::handler::App;
use crate::group_commit::Worker;
use crate::protocol::slots::sections::{
    AcceptBatch, Accepted, BatchDelivery, Placement, SubmitSection,
};
use crate::protocol::slots::{ProcessIdentity, SlotToken};
use crate::protocol::turns::NewTurn;
use crate::queue::records::{self, Access};
use crate::runner::payload::PAYLOAD_FILE;
use crate::runtime::Runtime;
use crate::submit::{check_request, fresh_task_name, Decided, Sequencing};
use crate::sync::Arc;
use std::collections::BTreeMap;

/// How often a batch prunes the kept payloads of ended turns. The prune scans every kept payload
/// (each unfinished turn's), so doing it in every batch made a batch's cost grow with the turns
/// waiting; once a second it is bounded work per second instead.
pub const PRUNE_EVERY_MILLIS: u64 = 1_000;
/// The most kept payloads one prune drops (at [`PRUNE_EVERY_MILLIS`], more than the accept path
/// can add in that time).
pub const PRUNE_MOST: usize = 8_192;

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

/// What a delivery's submit is given that needs no queue: its task name (checked), the turn it
/// makes, the name a generated task falls back to, and its fresh token.
struct Prepared {
    task: Option<String>,
    new: NewTurn,
    fallback: String,
    token: SlotToken,
}

/// Prepares `pending`'s submit, or says why the request is refused (it is then answered failed
/// and nothing of it is written).
fn prepare(rt: &Runtime, pending: &Pending) -> (Prepared, Option<String>) {
    let (task, refused) = match check_request(&pending.request) {
        Ok(task) => (task, None),
        Err(e) => (None, Some(e.to_string())),
    };
    let prepared = Prepared {
        task,
        new: pending.request.new_turn(false, &Sequencing::default()),
        fallback: fresh_task_name(),
        token: rt.spawner.fresh_token(),
    };
    (prepared, refused)
}

/// One batch: one section for all of `batch`, one result per delivery in order, and the
/// decisions whose effects are performed after the answers. Prunes the kept payloads when
/// `next_prune` has passed.
fn commit_batch(
    app: &App,
    rt: &Runtime,
    batch: Vec<Pending>,
    next_prune: &mut std::time::Instant,
) -> (Vec<Committed>, Vec<Decided>) {
    let mut failed = BTreeMap::new();
    let prepared: Vec<Prepared> = batch
        .iter()
        .enumerate()
        .map(|(index, pending)| {
            let (prepared, refused) = prepare(rt, pending);
            if let Some(why) = refused {
                failed.insert(index, why);
            }
            prepared
        })
        .collect();
    let now_millis = rt.spawner.now_millis();
    let deliveries: Vec<BatchDelivery<'_>> = batch
        .iter()
        .zip(&prepared)
        .map(|(pending, prepared)| delivery(app.me, rt.cap(), now_millis, pending, prepared))
        .collect();
    let now = std::time::Instant::now();
    let prune = now >= *next_prune;
    if prune {
        *next_prune = now + std::time::Duration::from_millis(PRUNE_EVERY_MILLIS);
    }
    let section = AcceptBatch {
        deliveries: &deliveries,
        ttl_millis: app.settings.dedupe_ttl_millis,
        failed,
        prune_payloads: prune.then_some(PRUNE_MOST),
    };
    match crate::section::run(rt, &section) {
        Ok(answers) => {
            debug_assert_eq!(answers.len(), batch.len());
            let mut effects = Vec::new();
            let results = answers
                .into_iter()
                .map(|answer| match answer {
                    Accepted::Queued(decided) => {
                        effects.push((*decided).clone());
                        Committed::Queued(decided)
                    }
                    Accepted::Duplicate => Committed::Duplicate,
                    Accepted::Failed(why) => Committed::Failed(why),
                })
                .collect();
            (results, effects)
        }
        Err(e) => {
            let error = e.to_string();
            let results = batch
                .iter()
                .map(|_| Committed::Failed(error.clone()))
                .collect();
            (results, Vec::new())
        }
    }
}

/// `pending` as the batch's section decides it: its identities, its arrival, its payload and its
/// submit (the route's task, its strategy and schedule, by `me` on `cap` slots).
fn delivery<'a>(
    me: ProcessIdentity,
    cap: usize,
    now_millis: u64,
    pending: &'a Pending,
    prepared: &'a Prepared,
) -> BatchDelivery<'a> {
    BatchDelivery {
        identity: &pending.identity,
        legacy: &pending.legacy,
        arrived_millis: pending.now_millis,
        id: &pending.meta.id,
        body: &pending.body,
        submit: SubmitSection {
            task: prepared.task.as_deref(),
            fallback_task: &prepared.fallback,
            planned: prepared.task.as_deref(),
            strategy: pending.request.strategy,
            new: &prepared.new,
            schedule: pending.request.schedule,
            me,
            fresh_token: prepared.token,
            now_millis,
            cap,
        },
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
