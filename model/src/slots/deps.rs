//! The dependencies-and-retries model (spec/slots.md, "Dependencies and retries"; R1..R3): turn
//! A (task `a`, `--retry`: a bounded number of attempts) and turn B (task `b`, `--after-success
//! A`), one worker slot, runners that may end their command completed or failed and may crash
//! anywhere, including inside the finish section after some of its record writes and before the
//! queue's commit; a reconciler that repairs whatever a crash left, when nothing else runs.
//!
//! Every locked section is the core's own section step, run as the shell's section runner runs
//! it ([`Store::decide`], the core's `section::decide`): `SubmitSection` (B with `--after`, A
//! with `--retry`), the handoff's `PublishFirst`/`PublishSecond`, `TakeOverSection`,
//! `FinishSection` with the turn's result record (the departure, the retry's record, the
//! dependents' ends are the core's `slots::leave`), and `ReconcileSection` (a removed row's
//! departure). The model holds the records as the core's records and applies each step's writes;
//! it types no sequence of primitives itself. Reductions: a spawn and its two publishes are one
//! action (the handoff's own interleavings are the slot model's subject); a work ends with its
//! runner (works outliving runners are the slot model's subject too); a reconcile pass runs
//! whole, only when no runner is alive. Retries have no backoff (time does not matter to
//! R1..R3). Records are files on a PostgreSQL home and the file store: a crash in a section keeps
//! the record writes done before it, in the order a store applies them (`Writes::in_order`), and
//! loses the queue's change.

use super::state::token_from_counter;
use super::store::{Decided, Store};
use stateright::{Model, Property};
use std::collections::BTreeSet;
use tollgate_core::records::{TurnOutcome, TurnRecord};
use tollgate_core::section::{Section, Step};
use tollgate_core::slots::sections::{
    on_disk, FinishEffect, FinishSection, Placement, PublishFirst, PublishSecond, ReconcileSection,
    SubmitSection, TakeOverSection,
};
use tollgate_core::slots::steps::{self, Handoff, TakeOverEffect, TurnRecords};
use tollgate_core::slots::{
    self as slots, AfterRule, Dependency, Liveness, Observation, ProcessIdentity, RetryPlan,
    SlotToken, TurnKey, WorkRecord,
};
use tollgate_core::turns::NewTurn;

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

/// Which of production's decisions the model breaks (teeth; never in the core). Each is a wrapper
/// around a production section that changes one thing of its input or of its output.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DepsVariant {
    Production,
    /// BUG: B is submitted as if it had no dependencies (its submit's `after` is empty; R1
    /// fails).
    IgnoreDependencies,
    /// BUG: the finish records the result without its retry plan and the retry is submitted in a
    /// section of its own after the finish committed; a crash in between loses it (R3 fails).
    RequeueAfterCommit,
    /// BUG: a section's writes that end a dependent dependency-failed are dropped (R2 fails: B
    /// has left the queue and never ends).
    NoSettleOnFailure,
    /// BUG: dependents read a failed dependency as a success: B is submitted with the rule of
    /// `--after` (any end) instead of `--after-success`, at its submit and at A's departure; B
    /// starts after A failed (R2 fails; B never ends dependency-failed).
    FailureCountsAsSuccess,
    /// BUG: a section reads the leaving turn's record without the retry a crashed finish already
    /// named in it (`retried_as`), so it creates a retry anew: a turn is retried twice (R3
    /// fails).
    RetryNotReused,
    /// BUG: A is submitted without its retry plan, so a failure is never retried (R3 fails; the
    /// example of a retry that succeeds is never reached).
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

    /// A turn record as this variant's sections read it.
    fn seen(self, mut record: TurnRecord) -> TurnRecord {
        if self == DepsVariant::RetryNotReused {
            record.retried_as = None;
        }
        record
    }

    /// A section's decision as this variant lets it stand.
    fn decided<E>(self, mut step: Step<E>) -> Step<E> {
        if self == DepsVariant::NoSettleOnFailure {
            step.writes
                .turns
                .retain(|_, w| w.create || w.record.outcome != Some(TurnOutcome::DependencyFailed));
        }
        step
    }
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

/// Where a runner is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RunnerPc {
    /// Spawned: its take-over is next.
    Spawned,
    /// Its command runs, on the record its take-over returned.
    Running,
    /// (RequeueAfterCommit only) the finish committed; the retry's own section is next, with
    /// the retry plan the finish did not record.
    Requeue(RetryPlan),
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Runner {
    pub id: ProcessIdentity,
    pub key: TurnKey,
    pub token: SlotToken,
    pub pc: RunnerPc,
    /// The turn's record as its take-over returned it: the runner records the result on it.
    pub turn: Option<Box<TurnRecord>>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DepsState {
    /// The queue and the records (the core's).
    pub store: Store,
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
    /// The command failed; the runner died in the finish section after the first `writes` of
    /// its record writes, before the queue's commit.
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
/// The most record writes of one finish in the model: A's task counter, A's result, its retry's
/// record (or B's dependency-failed end).
const MAX_FINISH_WRITES: u8 = 3;

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

/// The turn's record with the result of its command, as the runner records it.
fn with_result(mut turn: TurnRecord, completed: bool) -> TurnRecord {
    turn.ended_at_millis = Some(NOW);
    turn.exit_code = Some(if completed { 0 } else { 1 });
    turn.outcome = Some(if completed {
        TurnOutcome::Completed
    } else {
        TurnOutcome::Failed
    });
    turn
}

impl DepsState {
    fn live(&self, extra: Option<ProcessIdentity>) -> Live {
        Live(self.runners.iter().map(|r| r.id).chain(extra).collect())
    }

    fn fresh_token(&mut self) -> SlotToken {
        self.tokens += 1;
        token_from_counter(self.tokens)
    }

    fn record(&self, key: &TurnKey) -> Option<&TurnRecord> {
        self.store.turns.get(key)
    }

    /// Decides `section` with the runners and `me` (the process running it, when it is not a
    /// runner) alive, under `variant`'s wrappers; `None` when the core refused it.
    fn decide<X: Section>(
        &mut self,
        section: &X,
        me: Option<ProcessIdentity>,
        variant: DepsVariant,
    ) -> Option<Decided<X::Effect>> {
        let live = self.live(me);
        match self.store.decide(section, &live, |r| variant.seen(r)) {
            Ok(Decided { queue, step }) => Some(Decided {
                queue,
                step: variant.decided(step),
            }),
            Err(_) => {
                self.core_refused = true;
                None
            }
        }
    }

    /// Runs `section` whole: decided, then committed.
    fn run<X: Section>(
        &mut self,
        section: &X,
        me: Option<ProcessIdentity>,
        variant: DepsVariant,
    ) -> Option<X::Effect> {
        let decided = self.decide(section, me, variant)?;
        match self.store.commit(decided) {
            Ok(effect) => Some(effect),
            Err(_) => {
                self.core_refused = true;
                None
            }
        }
    }

    /// The spawn of `handoff`'s runner and its two publishes.
    fn spawn(&mut self, handoff: Handoff, variant: DepsVariant) {
        self.next_pid += 1;
        let child = ProcessIdentity {
            pid: self.next_pid,
            start_time_micros: u64::from(self.next_pid),
        };
        let key = handoff.key().clone();
        let token = handoff.token();
        let first = PublishFirst { handoff, child };
        let Some(published) = self.run(&first, Some(child), variant) else {
            return;
        };
        let second = published.map(|bound| PublishSecond { bound });
        let published = match second {
            Ok(second) => self.run(&second, Some(child), variant),
            Err(_) => None,
        };
        if !matches!(published, Some(Ok(_))) {
            self.core_refused = true;
            return;
        }
        self.runners.push(Runner {
            id: child,
            key,
            token,
            pc: RunnerPc::Spawned,
            turn: None,
        });
    }

    /// A detached submit of `new` to `task` by the submitter, and the spawn it asks for.
    fn submit(&mut self, task: &str, new: &NewTurn, variant: DepsVariant) {
        let fresh_token = self.fresh_token();
        let section = SubmitSection {
            task: Some(task),
            fallback_task: task,
            planned: Some(task),
            strategy: None,
            new,
            schedule: Default::default(),
            me: SUBMITTER,
            fresh_token,
            now_millis: NOW,
            cap: CAP,
        };
        if let Some(submitted) = self.run(&section, Some(SUBMITTER), variant) {
            if let Placement::Spawn(handoff) = submitted.placement {
                self.spawn(handoff, variant);
            }
        }
    }

    /// The finish section of runner `i` (`result`: the turn's record with its command's result,
    /// `None` after a take-over found it settled), not committed; the runner is gone from the
    /// model's processes once it returns.
    fn finish(
        &mut self,
        i: usize,
        result: Option<&TurnRecord>,
        variant: DepsVariant,
    ) -> Option<Decided<FinishEffect>> {
        let runner = self.runners.remove(i);
        let fresh_token = self.fresh_token();
        let me = match variant {
            DepsVariant::FinishesAsAnotherProcess => SUBMITTER,
            _ => runner.id,
        };
        let section = FinishSection {
            key: &runner.key,
            me,
            result,
            fresh_token,
            now_millis: NOW,
            cap: CAP,
        };
        self.decide(&section, Some(runner.id), variant)
    }

    /// Commits a finish and spawns the next row it started.
    fn commit_finish(&mut self, decided: Option<Decided<FinishEffect>>, variant: DepsVariant) {
        let Some(decided) = decided else {
            return;
        };
        match self.store.commit(decided) {
            Ok(effect) => {
                if let Some(next) = effect.next {
                    self.spawn(next, variant);
                }
            }
            Err(_) => self.core_refused = true,
        }
    }

    fn quiescent(&self) -> bool {
        self.submitted == 2 && self.runners.is_empty() && !self.dirty
    }

    /// A's last attempt: A's first turn followed along `retried_as`.
    fn last_a(&self) -> TurnKey {
        let mut key = a(1);
        while let Some(next) = self.record(&key).and_then(|r| r.retried_as) {
            if next <= key.turn {
                break;
            }
            key = a(next);
        }
        key
    }

    /// The latest turn of task `a` (what `--after-success a` names at submit).
    fn latest_a(&self) -> TurnKey {
        let keys = self.store.turns.keys().filter(|k| k.task == "a");
        keys.max().cloned().unwrap_or_else(|| a(1))
    }

    /// A reconcile pass by the reconciler, performing each effect, as `tollgate reconcile` runs.
    fn reconcile(&mut self, variant: DepsVariant) {
        let unfinished: TurnRecords = self
            .store
            .turns
            .values()
            .filter(|t| !t.is_settled())
            .map(|t| (t.key.clone(), on_disk(Some(t))))
            .collect();
        let candidates = steps::orphan_candidates(&self.store.queue, &unfinished);
        for _ in 0..=slots::MAX_QUEUE_ROWS.min(32) {
            let fresh_token = self.fresh_token();
            let section = ReconcileSection {
                me: RECONCILER,
                fresh_token,
                now_millis: NOW,
                cap: CAP,
                orphan_candidates: &candidates,
            };
            let Some(done) = self.run(&section, Some(RECONCILER), variant) else {
                return;
            };
            let go_on = done.effect.continues(true);
            if let steps::ReconcileEffect::Spawn { handoff, .. } = done.effect {
                self.spawn(handoff, variant);
            }
            if !go_on {
                return;
            }
        }
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

    /// A's first turn as submitted: `--retry attempts-1` (NoRetry: none).
    fn new_a(&self) -> NewTurn {
        let retries = self.cfg.attempts.saturating_sub(1);
        NewTurn {
            argv: vec!["a".into()],
            retry: Some(RetryPlan::first(retries, 0))
                .filter(|_| self.cfg.variant != DepsVariant::NoRetry),
            ..NewTurn::default()
        }
    }

    /// B as submitted: `--after-success` A's latest turn (FailureCountsAsSuccess: `--after`;
    /// IgnoreDependencies: none).
    fn new_b(&self, on: TurnKey) -> NewTurn {
        let rule = match self.cfg.variant {
            DepsVariant::FailureCountsAsSuccess => AfterRule::Ended,
            _ => AfterRule::Succeeded,
        };
        let after = vec![Dependency { key: on, rule }];
        NewTurn {
            argv: vec!["b".into()],
            after: match self.cfg.variant {
                DepsVariant::IgnoreDependencies => Vec::new(),
                _ => after,
            },
            ..NewTurn::default()
        }
    }
}

impl Model for DepsModel {
    type State = DepsState;
    type Action = DepsAction;

    fn init_states(&self) -> Vec<DepsState> {
        vec![DepsState {
            store: Store::default(),
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
                        for writes in 1..=MAX_FINISH_WRITES {
                            actions.push(DepsAction::CrashInFinish(i, writes));
                        }
                    }
                }
                RunnerPc::Requeue(_) => actions.push(DepsAction::Requeue(i)),
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
                st.submit("a", &self.new_a(), variant);
            }
            DepsAction::SubmitB => {
                st.submitted = 2;
                let new = self.new_b(st.latest_a());
                st.submit("b", &new, variant);
            }
            DepsAction::TakeOver(i) => {
                let runner = st.runners[i].clone();
                let section = TakeOverSection {
                    key: &runner.key,
                    token: runner.token,
                    me: runner.id,
                    cgroup: None,
                    record_started: true,
                    now_millis: NOW,
                };
                match st.run(&section, None, variant) {
                    Some((TakeOverEffect::Run { .. }, turn)) => {
                        st.runners[i].pc = RunnerPc::Running;
                        st.runners[i].turn = Some(Box::new(turn));
                    }
                    Some((TakeOverEffect::AlreadySettled, _)) => {
                        let decided = st.finish(i, None, variant);
                        st.commit_finish(decided, variant);
                    }
                    Some((TakeOverEffect::Cancelled, mut turn)) => {
                        // The cancel came first: the runner records it, and finishes.
                        turn.ended_at_millis = Some(NOW);
                        turn.outcome = Some(TurnOutcome::Cancelled);
                        let decided = st.finish(i, Some(&turn), variant);
                        st.commit_finish(decided, variant);
                    }
                    Some((TakeOverEffect::Refused { .. }, _)) => {
                        st.runners.remove(i);
                    }
                    None => {}
                }
            }
            DepsAction::Finish(i, completed) => {
                let turn = st.runners[i].turn.clone()?;
                let mut result = with_result(*turn, completed);
                // RequeueAfterCommit: the finish records no retry plan; the retry's own section
                // comes after the commit, if one is due.
                let due = match variant {
                    DepsVariant::RequeueAfterCommit => {
                        let ended = TurnOutcome::ended(result.outcome);
                        slots::retry_due(ended, result.retry.take())
                    }
                    _ => None,
                };
                let runner = st.runners[i].clone();
                let decided = st.finish(i, Some(&result), variant);
                st.commit_finish(decided, variant);
                if let Some(plan) = due {
                    st.runners.push(Runner {
                        pc: RunnerPc::Requeue(plan),
                        ..runner
                    });
                }
            }
            DepsAction::Requeue(i) => {
                let runner = st.runners.remove(i);
                let RunnerPc::Requeue(plan) = runner.pc else {
                    return None;
                };
                let new = NewTurn {
                    retry: Some(plan),
                    retry_of: Some(runner.key.turn),
                    ..self.new_a()
                };
                st.submit("a", &new, variant);
            }
            DepsAction::CrashInFinish(i, writes) => {
                st.crashes_left -= 1;
                let turn = st.runners[i].turn.clone()?;
                let result = with_result(*turn, false);
                let decided = st.finish(i, Some(&result), variant)?;
                // The section cut after `writes` record writes: the files written stay, the
                // queue's change is lost.
                if usize::from(writes) > decided.step.writes.in_order().count() {
                    return None;
                }
                if st
                    .store
                    .write(&decided.step.writes, usize::from(writes))
                    .is_err()
                {
                    st.core_refused = true;
                }
            }
            DepsAction::Crash(i) => {
                st.crashes_left -= 1;
                st.runners.remove(i);
            }
            DepsAction::Reconcile => {
                st.dirty = false;
                st.reconcile(variant);
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
                let b_started = st.record(&b()).is_some_and(started);
                !b_started || st.record(&st.last_a()).is_some_and(TurnRecord::is_settled)
            }),
            Property::always(names::R2, |_, st: &DepsState| {
                let last = st.record(&st.last_a()).and_then(|r| r.outcome);
                let b_rec = st.record(&b());
                let b_started = b_rec.is_some_and(started);
                let never_without_success = !b_started || last == Some(TurnOutcome::Completed);
                // When all is done and A's last attempt did not succeed, B ended
                // dependency-failed.
                let settled = !st.quiescent()
                    || last == Some(TurnOutcome::Completed)
                    || b_rec.is_some_and(|r| r.outcome == Some(TurnOutcome::DependencyFailed));
                never_without_success && settled
            }),
            Property::always(names::R3, |model: &DepsModel, st: &DepsState| {
                // Never two retries of one turn; when all is done, every failed attempt with
                // attempts left has its one retry.
                let retries_of = |turn: u32| {
                    st.store
                        .turns
                        .iter()
                        .filter(|(k, r)| k.task == "a" && r.retry_of == Some(turn))
                        .count()
                };
                let attempts_of_a = st.store.turns.iter().filter(|(k, _)| k.task == "a");
                let never_doubled = attempts_of_a.clone().all(|(k, _)| retries_of(k.turn) <= 1);
                let none_lost = !st.quiescent()
                    || attempts_of_a.clone().all(|(k, r)| {
                        r.outcome != Some(TurnOutcome::Failed)
                            || r.retry.is_some_and(|p| p.attempt >= model.cfg.attempts)
                            || retries_of(k.turn) == 1
                    });
                never_doubled && none_lost
            }),
            Property::always(names::CORE, |_, st: &DepsState| !st.core_refused),
            Property::sometimes(names::RETRIED_SUCCESS, |_, st: &DepsState| {
                st.store.turns.iter().any(|(k, r)| {
                    k.task == "a"
                        && r.retry_of.is_some()
                        && r.outcome == Some(TurnOutcome::Completed)
                }) && st
                    .record(&b())
                    .is_some_and(|r| r.is_settled() && started(r))
            }),
            Property::sometimes(names::DEPENDENCY_FAILED, |_, st: &DepsState| {
                st.record(&b())
                    .is_some_and(|r| r.outcome == Some(TurnOutcome::DependencyFailed))
            }),
        ]
    }
}

/// Whether the record says the turn started.
fn started(record: &TurnRecord) -> bool {
    record.started_at_millis.is_some()
}
