//! The dependencies-and-retries model (spec/slots.md, "Dependencies and retries"; R1..R3): turn
//! A (task `a`, `--retry`: a bounded number of attempts) and turn B (task `b`, `--after-success
//! A`), one worker slot, runners that may end their command completed or failed and may crash
//! anywhere, including inside the finish section after some of its record writes and before the
//! queue's commit; a reconciler that repairs whatever a crash left, when nothing else runs.
//!
//! Every locked section calls the production core: `steps::submit` / `slots::submit_after`,
//! `steps::runner_take_over`, the finish section as the shell runs it (`slots::retry_due` →
//! the retry's record → `slots::depart` → the leaving record → `steps::runner_finish`), and
//! `steps::reconcile` with `slots::depart` where it removes a row. Reductions: a spawn and its
//! two publishes are one action (the handoff's own interleavings are the slot model's subject);
//! a work ends with its runner (works outliving runners are the slot model's subject too); a
//! reconcile pass runs whole, only when no runner is alive. Retries have no backoff (time does
//! not matter to R1..R3). Records are files in production: the model keeps them apart from the
//! queue, and a crash keeps the record writes done before it and loses the queue's section.

use super::state::token_from_counter;
use stateright::{Model, Property};
use std::collections::{BTreeMap, BTreeSet};
use tollgate_core::admission::Strategy;
use tollgate_core::slots::steps::{
    self, FinishInput, Handoff, ReconcileEffect, ReconcileInput, SubmitEffect, SubmitInput,
    TakeOverEffect, TakeOverInput, TurnOnDisk, TurnRecords,
};
use tollgate_core::slots::{
    self as slots, AfterRule, AfterSubmit, DepartInput, Dependency, Ended, Liveness, Observation,
    ProcessIdentity, QueueState, RetryPlan, SlotToken, TurnKey, WorkRecord,
};

/// The property names (spec/invariants.md).
pub mod names {
    pub const R1: &str = "R1 a dependent never starts before its dependencies ended";
    pub const R2: &str =
        "R2 an after-success dependent of a failed dependency never starts and ends dependency-failed";
    pub const R3: &str =
        "R3 a failed turn with attempts left is re-queued exactly once, never lost by a crash";
    pub const CORE: &str = "the core accepts every call the shell makes (deps)";
    pub const RETRIED_SUCCESS: &str = "example: a retry succeeds and B runs";
    pub const DEPENDENCY_FAILED: &str = "example: every attempt fails and B ends dependency-failed";
}

/// Which of production's decisions the model breaks (teeth; never in the core).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DepsVariant {
    Production,
    /// BUG: B is submitted as if it had no dependencies (R1 fails).
    IgnoreDependencies,
    /// BUG: the retry is re-queued in a section of its own after the finish committed; a crash
    /// in between loses it (R3 fails).
    RequeueAfterCommit,
    /// BUG: a failure that is not retried settles no dependent (R2 fails: B waits forever).
    NoSettleOnFailure,
    /// BUG: dependents read a failed dependency as a success, at B's submit and at A's
    /// departure: B starts after A failed (R2 fails; B never ends dependency-failed).
    FailureCountsAsSuccess,
    /// BUG: the retry's record is created anew without looking for one a crashed finish already
    /// wrote: a turn is retried twice (R3 fails).
    RetryNotReused,
    /// BUG: a failed turn is never retried (R3 fails; the example of a retry that succeeds is
    /// never reached).
    NoRetry,
    /// BUG: the finishing runner's section names the submitter as the one leaving, a call the
    /// core refuses (the "core accepts every call" property fails).
    FinishesAsAnotherProcess,
}

impl DepsVariant {
    pub const BROKEN: [DepsVariant; 7] = [
        DepsVariant::IgnoreDependencies,
        DepsVariant::RequeueAfterCommit,
        DepsVariant::NoSettleOnFailure,
        DepsVariant::FailureCountsAsSuccess,
        DepsVariant::RetryNotReused,
        DepsVariant::NoRetry,
        DepsVariant::FinishesAsAnotherProcess,
    ];
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DepsConfig {
    /// A's attempts (`--retry attempts-1`).
    pub attempts: u32,
    pub crash_budget: u8,
    pub variant: DepsVariant,
}

impl std::fmt::Display for DepsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "deps: A with {} attempt(s), B after-success A, cap 1, {} crash(es), {:?}",
            self.attempts, self.crash_budget, self.variant
        )
    }
}

/// What a turn's record holds (the fields the finish and reconcile sections read).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Rec {
    pub outcome: Option<Outcome>,
    pub started: bool,
    pub plan: Option<(u32, u32)>,
    pub retry_of: Option<u32>,
    pub retried_as: Option<u32>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Outcome {
    Completed,
    Failed,
    DependencyFailed,
}

impl Rec {
    fn ended(&self) -> Ended {
        match self.outcome {
            Some(Outcome::Completed) => Ended::Succeeded,
            Some(Outcome::Failed) => Ended::Failed,
            _ => Ended::Stopped,
        }
    }

    fn retry_plan(&self) -> Option<RetryPlan> {
        self.plan.map(|(attempt, attempts)| RetryPlan {
            attempt,
            attempts,
            backoff_millis: 0,
        })
    }
}

/// How dependents read how a dependency ended: as it ended, or (FailureCountsAsSuccess) a failure
/// as a success.
fn as_dependents_read(ended: Ended, variant: DepsVariant) -> Ended {
    match (variant, ended) {
        (DepsVariant::FailureCountsAsSuccess, Ended::Failed) => Ended::Succeeded,
        _ => ended,
    }
}

/// Where a runner is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RunnerPc {
    /// Spawned: its take-over is next.
    Spawned,
    /// Its command runs.
    Running,
    /// (RequeueAfterCommit only) the finish committed; the retry's section is next.
    Requeue,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Runner {
    pub id: ProcessIdentity,
    pub key: TurnKey,
    pub token: SlotToken,
    pub pc: RunnerPc,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DepsState {
    pub queue: QueueState,
    pub records: BTreeMap<TurnKey, Rec>,
    pub runners: Vec<Runner>,
    pub submitted: u8,
    pub crashes_left: u8,
    pub tokens: u32,
    pub next_pid: u32,
    /// Something changed since the last complete reconcile pass.
    pub dirty: bool,
    /// A core step refused a call the shell makes.
    pub core_refused: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum DepsAction {
    SubmitA,
    SubmitB,
    TakeOver(usize),
    /// The command ended (`true`: completed) and the finish section ran whole.
    Finish(usize, bool),
    /// The command failed; the runner died in the finish section after `writes` of its record
    /// writes (1: the retry's record, 2: and the failed turn's result), before the commit.
    CrashInFinish(usize, u8),
    /// The runner died outside a section.
    Crash(usize),
    /// (RequeueAfterCommit only) the retry's own section.
    Requeue(usize),
    Reconcile,
}

const SUBMITTER: ProcessIdentity = ProcessIdentity {
    pid: 1,
    start_time_micros: 1,
};
const RECONCILER: ProcessIdentity = ProcessIdentity {
    pid: 2,
    start_time_micros: 2,
};
const NOW: u64 = 1_000;
const CAP: usize = 1;

fn a(turn: u32) -> TurnKey {
    TurnKey::new("a", turn)
}

fn b() -> TurnKey {
    TurnKey::new("b", 1)
}

/// The live processes, as the core observes them; a work lives while its runner does.
struct Live(BTreeSet<ProcessIdentity>);

impl Liveness for Live {
    fn observe(&self, id: &ProcessIdentity) -> Observation {
        if self.0.contains(id) {
            Observation::Matching
        } else {
            Observation::Gone
        }
    }

    fn observe_work(&self, work: &WorkRecord) -> Observation {
        self.observe(&work.runner)
    }
}

impl DepsState {
    fn live(&self, extra: Option<ProcessIdentity>) -> Live {
        Live(self.runners.iter().map(|r| r.id).chain(extra).collect())
    }

    fn fresh_token(&mut self) -> SlotToken {
        self.tokens += 1;
        token_from_counter(self.tokens)
    }

    fn spawn(&mut self, handoff: Handoff) {
        self.next_pid += 1;
        let child = ProcessIdentity {
            pid: self.next_pid,
            start_time_micros: u64::from(self.next_pid),
        };
        let key = handoff.key().clone();
        let token = handoff.token();
        let published = steps::handoff_publish_first(&mut self.queue, handoff, child)
            .and_then(|bound| steps::handoff_publish_second(&mut self.queue, bound));
        if published.is_err() {
            self.core_refused = true;
            return;
        }
        self.runners.push(Runner {
            id: child,
            key,
            token,
            pc: RunnerPc::Spawned,
        });
    }

    /// The latest attempt of task `a` (what `--after-success a` names at submit).
    fn latest_a(&self) -> Option<TurnKey> {
        self.records.keys().filter(|k| k.task == "a").max().cloned()
    }

    fn existing_retry(&self, failed: &TurnKey) -> Option<TurnKey> {
        self.records
            .iter()
            .find(|(k, r)| k.task == failed.task && r.retry_of == Some(failed.turn))
            .map(|(k, _)| k.clone())
    }

    /// The retry's record, as `crate::deps::departed` creates it (or finds it).
    fn retry_record(&mut self, failed: &TurnKey, plan: RetryPlan, variant: DepsVariant) -> TurnKey {
        if let Some(existing) = self
            .existing_retry(failed)
            .filter(|_| variant != DepsVariant::RetryNotReused)
        {
            return existing;
        }
        let turn = self
            .records
            .keys()
            .filter(|k| k.task == failed.task)
            .map(|k| k.turn)
            .max()
            .unwrap_or(0)
            + 1;
        let key = TurnKey::new(failed.task.clone(), turn);
        self.records.insert(
            key.clone(),
            Rec {
                outcome: None,
                started: false,
                plan: Some((plan.attempt, plan.attempts)),
                retry_of: Some(failed.turn),
                retried_as: None,
            },
        );
        key
    }

    /// The shell's departure of `key` (`crate::deps::departed`), under the caller's section.
    fn depart(&mut self, key: &TurnKey, me: ProcessIdentity, variant: DepsVariant) {
        let Some(rec) = self.records.get(key).cloned() else {
            return;
        };
        let ended = rec.ended();
        if variant == DepsVariant::NoSettleOnFailure
            && ended != Ended::Succeeded
            && slots::retry_due(ended, rec.retry_plan()).is_none()
        {
            return;
        }
        let plan = rec.retry_plan().filter(|_| variant != DepsVariant::NoRetry);
        let retry_key = slots::retry_due(ended, plan).map(|p| self.retry_record(key, p, variant));
        let departed = slots::depart(
            &mut self.queue,
            DepartInput {
                key,
                ended: as_dependents_read(ended, variant),
                retry: plan,
                retry_key: retry_key.as_ref(),
                me,
                now_millis: NOW,
            },
        );
        let Ok(departure) = departed else {
            self.core_refused = true;
            return;
        };
        if let Some(retry) = &departure.retry {
            if let Some(r) = self.records.get_mut(key) {
                r.retried_as = Some(retry.key.turn);
            }
        }
        for (dependent, _) in &departure.dependency_failed {
            if let Some(r) = self.records.get_mut(dependent) {
                if r.outcome.is_none() {
                    r.outcome = Some(Outcome::DependencyFailed);
                }
            }
        }
    }

    fn submit(&mut self, key: TurnKey, rec: Rec, after: Vec<Dependency>, variant: DepsVariant) {
        self.records.insert(key.clone(), rec);
        let token = self.fresh_token();
        let live = self.live(Some(SUBMITTER));
        let input = SubmitInput {
            key: &key,
            me: SUBMITTER,
            fresh_token: token,
            now_millis: NOW,
            cap: CAP,
            strategy: Strategy::default(),
            liveness: &live,
        };
        let decided = if variant == DepsVariant::IgnoreDependencies {
            steps::submit(&mut self.queue, input).map(|d| AfterSubmit::Submitted(Box::new(d)))
        } else {
            let ended: BTreeMap<TurnKey, Ended> = after
                .iter()
                .filter(|d| self.queue.row(&d.key).is_none())
                .map(|d| {
                    let ended = self.records.get(&d.key).map_or(Ended::Stopped, Rec::ended);
                    (d.key.clone(), as_dependents_read(ended, variant))
                })
                .collect();
            slots::submit_after(&mut self.queue, input, &after, &ended, Default::default())
        };
        match decided {
            Ok(AfterSubmit::Submitted(decision)) => {
                if let SubmitEffect::Spawn(handoff) = decision.effect {
                    self.spawn(handoff);
                }
            }
            Ok(AfterSubmit::Held { .. }) => {}
            Ok(AfterSubmit::DependencyFailed { .. }) => {
                if let Some(r) = self.records.get_mut(&key) {
                    r.outcome = Some(Outcome::DependencyFailed);
                }
            }
            Err(_) => self.core_refused = true,
        }
    }

    /// `steps::runner_finish` for runner `i` (its row leaves; the next parked row may start).
    fn runner_finish(&mut self, i: usize, variant: DepsVariant) {
        let runner = self.runners.remove(i);
        let token = self.fresh_token();
        let live = self.live(Some(runner.id));
        let strategies = BTreeMap::new();
        let me = match variant {
            DepsVariant::FinishesAsAnotherProcess => SUBMITTER,
            _ => runner.id,
        };
        match steps::runner_finish(
            &mut self.queue,
            FinishInput {
                key: &runner.key,
                me,
                fresh_token: token,
                now_millis: NOW,
                cap: CAP,
                strategies: &strategies,
                liveness: &live,
            },
        ) {
            Ok(Some(handoff)) => self.spawn(handoff),
            Ok(None) => {}
            Err(_) => self.core_refused = true,
        }
    }

    fn on_disk(&self) -> TurnRecords {
        self.records
            .iter()
            .map(|(k, r)| {
                (
                    k.clone(),
                    TurnOnDisk::Record {
                        settled: r.outcome.is_some(),
                        attached: false,
                        started: r.started,
                        runner: r.started,
                    },
                )
            })
            .collect()
    }

    fn quiescent(&self) -> bool {
        self.submitted == 2 && self.runners.is_empty() && !self.dirty
    }

    /// A's last attempt: A's first turn followed along `retried_as`.
    fn last_a(&self) -> TurnKey {
        let mut key = a(1);
        while let Some(next) = self.records.get(&key).and_then(|r| r.retried_as) {
            if next <= key.turn {
                break;
            }
            key = a(next);
        }
        key
    }
}

#[derive(Clone, Debug)]
pub struct DepsModel {
    pub cfg: DepsConfig,
}

impl DepsModel {
    pub fn new(cfg: DepsConfig) -> Self {
        DepsModel { cfg }
    }
}

impl Model for DepsModel {
    type State = DepsState;
    type Action = DepsAction;

    fn init_states(&self) -> Vec<DepsState> {
        vec![DepsState {
            queue: QueueState::default(),
            records: BTreeMap::new(),
            runners: Vec::new(),
            submitted: 0,
            crashes_left: self.cfg.crash_budget,
            tokens: 0,
            next_pid: 10,
            dirty: false,
            core_refused: false,
        }]
    }

    fn actions(&self, st: &DepsState, actions: &mut Vec<DepsAction>) {
        if st.core_refused {
            return;
        }
        match st.submitted {
            0 => actions.push(DepsAction::SubmitA),
            1 => actions.push(DepsAction::SubmitB),
            _ => {}
        }
        for (i, runner) in st.runners.iter().enumerate() {
            match runner.pc {
                RunnerPc::Spawned => actions.push(DepsAction::TakeOver(i)),
                RunnerPc::Running => {
                    actions.push(DepsAction::Finish(i, true));
                    actions.push(DepsAction::Finish(i, false));
                    if st.crashes_left > 0 {
                        actions.push(DepsAction::CrashInFinish(i, 1));
                        actions.push(DepsAction::CrashInFinish(i, 2));
                    }
                }
                RunnerPc::Requeue => actions.push(DepsAction::Requeue(i)),
            }
            if st.crashes_left > 0 {
                actions.push(DepsAction::Crash(i));
            }
        }
        if st.runners.is_empty() && st.dirty {
            actions.push(DepsAction::Reconcile);
        }
    }

    fn next_state(&self, last: &DepsState, action: DepsAction) -> Option<DepsState> {
        let mut st = last.clone();
        let variant = self.cfg.variant;
        st.dirty = true;
        match action {
            DepsAction::SubmitA => {
                st.submitted = 1;
                let rec = Rec {
                    outcome: None,
                    started: false,
                    plan: Some((1, self.cfg.attempts)),
                    retry_of: None,
                    retried_as: None,
                };
                st.submit(a(1), rec, Vec::new(), variant);
            }
            DepsAction::SubmitB => {
                st.submitted = 2;
                let on = st.latest_a().unwrap_or_else(|| a(1));
                let after = vec![Dependency {
                    key: on,
                    rule: AfterRule::Succeeded,
                }];
                let rec = Rec {
                    outcome: None,
                    started: false,
                    plan: None,
                    retry_of: None,
                    retried_as: None,
                };
                st.submit(b(), rec, after, variant);
            }
            DepsAction::TakeOver(i) => {
                let runner = st.runners[i].clone();
                let settled = st
                    .records
                    .get(&runner.key)
                    .is_some_and(|r| r.outcome.is_some());
                let live = st.live(None);
                match steps::runner_take_over(
                    &mut st.queue,
                    TakeOverInput {
                        key: &runner.key,
                        token: runner.token,
                        me: runner.id,
                        settled,
                        cgroup: None,
                        liveness: &live,
                    },
                ) {
                    Ok(TakeOverEffect::Run { .. }) => {
                        if let Some(r) = st.records.get_mut(&runner.key) {
                            r.started = true;
                        }
                        st.runners[i].pc = RunnerPc::Running;
                    }
                    Ok(TakeOverEffect::AlreadySettled) => {
                        st.depart(&runner.key, runner.id, variant);
                        st.runner_finish(i, variant);
                    }
                    Ok(TakeOverEffect::Refused { .. } | TakeOverEffect::Cancelled) => {
                        st.runners.remove(i);
                    }
                    Err(_) => st.core_refused = true,
                }
            }
            DepsAction::Finish(i, completed) => {
                let key = st.runners[i].key.clone();
                let me = st.runners[i].id;
                if let Some(r) = st.records.get_mut(&key) {
                    r.outcome = Some(if completed {
                        Outcome::Completed
                    } else {
                        Outcome::Failed
                    });
                }
                if variant == DepsVariant::RequeueAfterCommit {
                    // The finish commits without its retry; the retry comes in its own section.
                    let rec = st.records.get(&key).cloned();
                    let due = rec.and_then(|r| slots::retry_due(r.ended(), r.retry_plan()));
                    if due.is_none() {
                        st.depart(&key, me, variant);
                    }
                    if due.is_some() {
                        let runner = st.runners[i].clone();
                        st.runner_finish(i, variant);
                        st.runners.push(Runner {
                            pc: RunnerPc::Requeue,
                            ..runner
                        });
                    } else {
                        st.runner_finish(i, variant);
                    }
                } else {
                    st.depart(&key, me, variant);
                    st.runner_finish(i, variant);
                }
            }
            DepsAction::Requeue(i) => {
                let runner = st.runners.remove(i);
                // Its row already left: only the retry's half of the departure.
                let rec = st.records.get(&runner.key).cloned();
                if let Some(plan) = rec.and_then(|r| slots::retry_due(r.ended(), r.retry_plan())) {
                    let retry = st.retry_record(&runner.key, plan, variant);
                    if slots::enqueue(&mut st.queue, &retry, runner.id, NOW).is_err()
                        || slots::park(&mut st.queue, &retry).is_err()
                    {
                        st.core_refused = true;
                    }
                    if let Some(r) = st.records.get_mut(&runner.key) {
                        r.retried_as = Some(retry.turn);
                    }
                    if let Some(row) = st.queue.entries.iter_mut().find(|e| e.key == b()) {
                        for d in row.after.iter_mut() {
                            if d.key == runner.key {
                                d.key = retry.clone();
                            }
                        }
                    }
                }
            }
            DepsAction::CrashInFinish(i, writes) => {
                st.crashes_left -= 1;
                let runner = st.runners.remove(i);
                // The failed command's section, cut after `writes` record writes: the queue's
                // changes are lost, the files written stay.
                let rec = st.records.get(&runner.key).cloned();
                let mut failed = rec.unwrap_or(Rec {
                    outcome: None,
                    started: true,
                    plan: None,
                    retry_of: None,
                    retried_as: None,
                });
                failed.outcome = Some(Outcome::Failed);
                let due = slots::retry_due(failed.ended(), failed.retry_plan());
                let retry = due.map(|plan| st.retry_record(&runner.key, plan, variant));
                if writes >= 2 {
                    failed.retried_as = retry.map(|k| k.turn);
                    st.records.insert(runner.key.clone(), failed);
                }
            }
            DepsAction::Crash(i) => {
                st.crashes_left -= 1;
                st.runners.remove(i);
            }
            DepsAction::Reconcile => {
                st.dirty = false;
                let candidates = steps::orphan_candidates(&st.queue, &st.on_disk());
                for _ in 0..=slots::MAX_QUEUE_ROWS.min(32) {
                    let mut records = TurnRecords::new();
                    let on_disk = st.on_disk();
                    let live = st.live(Some(RECONCILER));
                    let needed: Vec<TurnKey> =
                        steps::records_needed(&st.queue, &candidates, CAP, &live)
                            .cloned()
                            .collect();
                    for key in needed {
                        if let Some(r) = on_disk.get(&key) {
                            records.insert(key, *r);
                        }
                    }
                    let token = st.fresh_token();
                    let strategies = BTreeMap::new();
                    let effect = steps::reconcile(
                        &mut st.queue,
                        ReconcileInput {
                            me: RECONCILER,
                            fresh_token: token,
                            now_millis: NOW,
                            cap: CAP,
                            strategies: &strategies,
                            records: &records,
                            liveness: &live,
                        },
                    );
                    match effect {
                        Ok(
                            ReconcileEffect::Removed { key } | ReconcileEffect::Forgotten { key },
                        ) => {
                            st.depart(&key, RECONCILER, variant);
                        }
                        Ok(ReconcileEffect::Spawn { handoff, .. }) => st.spawn(handoff),
                        Ok(effect) if effect.is_final() => break,
                        Ok(_) => {}
                        Err(_) => {
                            st.core_refused = true;
                            break;
                        }
                    }
                }
                // A pass that started a runner leaves work behind: not quiescent yet.
                if !st.runners.is_empty() {
                    st.dirty = true;
                }
            }
        }
        Some(st)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(names::R1, |_, st: &DepsState| {
                // B started ⇒ the attempt of A it waits for (A's retry chain followed) ended.
                let b_started = st.records.get(&b()).is_some_and(|r| r.started);
                !b_started
                    || st
                        .records
                        .get(&st.last_a())
                        .is_some_and(|r| r.outcome.is_some())
            }),
            Property::always(names::R2, |_, st: &DepsState| {
                let last = st.records.get(&st.last_a()).and_then(|r| r.outcome);
                let b_rec = st.records.get(&b());
                let b_started = b_rec.is_some_and(|r| r.started);
                let never_without_success = !b_started || last == Some(Outcome::Completed);
                // When all is done and A's last attempt did not succeed, B ended
                // dependency-failed.
                let settled = !st.quiescent()
                    || last == Some(Outcome::Completed)
                    || b_rec.is_some_and(|r| r.outcome == Some(Outcome::DependencyFailed));
                never_without_success && settled
            }),
            Property::always(names::R3, |model: &DepsModel, st: &DepsState| {
                // Never two retries of one turn; when all is done, every failed attempt with
                // attempts left has its one retry.
                let retries_of = |turn: u32| {
                    st.records
                        .iter()
                        .filter(|(k, r)| k.task == "a" && r.retry_of == Some(turn))
                        .count()
                };
                let never_doubled = st
                    .records
                    .keys()
                    .filter(|k| k.task == "a")
                    .all(|k| retries_of(k.turn) <= 1);
                let none_lost = !st.quiescent()
                    || st.records.iter().all(|(k, r)| {
                        k.task != "a"
                            || r.outcome != Some(Outcome::Failed)
                            || r.plan.is_some_and(|(n, _)| n >= model.cfg.attempts)
                            || retries_of(k.turn) == 1
                    });
                never_doubled && none_lost
            }),
            Property::always(names::CORE, |_, st: &DepsState| !st.core_refused),
            Property::sometimes(names::RETRIED_SUCCESS, |_, st: &DepsState| {
                st.records.iter().any(|(k, r)| {
                    k.task == "a" && r.retry_of.is_some() && r.outcome == Some(Outcome::Completed)
                }) && st
                    .records
                    .get(&b())
                    .is_some_and(|r| r.outcome.is_some() && r.started)
            }),
            Property::sometimes(names::DEPENDENCY_FAILED, |_, st: &DepsState| {
                st.records
                    .get(&b())
                    .is_some_and(|r| r.outcome == Some(Outcome::DependencyFailed))
            }),
        ]
    }
}
