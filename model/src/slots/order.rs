//! The scheduling model (spec/slots.md, "Scheduling"; Q1-Q3 in spec/invariants.md): pause and
//! resume of the home and of a task, not-before times on a discrete clock, and priorities, in
//! a small configuration driven through the production core's steps and nothing else:
//! `submit_scheduled`, `handoff_publish_first`/`_second` and `runner_take_over` (one action: the
//! spawn of a handed-off runner), `runner_finish`, a whole `reconcile` pass (the waker),
//! `slots::order::pause` and `steps::resume`.
//!
//! The slot model (the rest of `model/src/slots/`) checks what crashes, pid reuse and
//! interleaved sections do to occupancy; this one checks which row a start takes. Every process
//! here stays alive (a crash cannot make a step start a paused, early or lower-priority row: the
//! start decisions are the same functions with the same inputs), so the state is small enough to
//! check every interleaving of submits, ticks of the clock, pauses, resumes, spawns, finishes
//! and reconcile passes.
//!
//! Each transition that reserves a slot for a row (a start) is checked against the state the
//! step decided in: Q1 the row's task is not paused, Q2 the clock has reached its
//! `ready_at_millis`, Q3 (for a row that was parked) no row left parked that could start outranks
//! it (higher priority, or equal priority and older). A broken [`OrderVariant`] wraps the
//! production step and hides one input from it (the pause set, the not-before times, the
//! priorities), restoring it afterwards: the checker must then find the counterexample.

use super::state::token_from_counter;
use stateright::{Model, Property};
use std::collections::BTreeMap;
use tollgate_core::admission::{Strategy, MAX_CONCURRENT};
use tollgate_core::slots::order::{self, PauseScope};
use tollgate_core::slots::steps::{
    self, FinishInput, Handoff, ReconcileInput, ResumeInput, Schedule, SubmitEffect, SubmitInput,
    TakeOverEffect, TakeOverInput, TurnRecords,
};
use tollgate_core::slots::{Observation, ProcessIdentity, QueueState, RowState, TurnKey};

/// Names of the properties (also in spec/invariants.md and the tests).
pub mod names {
    pub const Q1: &str = "Q1 a paused row never starts";
    pub const Q2: &str = "Q2 no start before not-before";
    pub const Q3: &str = "Q3 highest priority first, FIFO among equals";
    pub const RESUMED: &str = "resume starts a held row";
    pub const OVERTAKES: &str = "a higher priority overtakes an older row";
    pub const DELAYED: &str = "a delayed row starts once due";
}

const Q1_BIT: u8 = 1;
const Q2_BIT: u8 = 2;
const Q3_BIT: u8 = 4;
const RESUMED_BIT: u8 = 1;
const OVERTAKES_BIT: u8 = 2;
const DELAYED_BIT: u8 = 4;

/// The production core, or one broken decision (the teeth).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OrderVariant {
    Production,
    /// Submit, finish and reconcile decide as if nothing were paused (breaks Q1).
    IgnoresPause,
    /// Finish, reconcile and resume decide as if every row were due (breaks Q2).
    IgnoresNotBefore,
    /// Finish, reconcile and resume decide as if every priority were 0: FIFO only (breaks Q3; no
    /// higher priority overtakes an older row).
    FifoOnly,
    /// Resume lifts the pause but starts nothing, as if no slot were free (a held row starts only
    /// later; "resume starts a held row" is never reached).
    ResumeStartsNothing,
    /// Submit drops `--delay` (no delayed row starts, as none is delayed).
    SubmitDropsNotBefore,
}

impl OrderVariant {
    pub const BROKEN: [OrderVariant; 5] = [
        OrderVariant::IgnoresPause,
        OrderVariant::IgnoresNotBefore,
        OrderVariant::FifoOnly,
        OrderVariant::ResumeStartsNothing,
        OrderVariant::SubmitDropsNotBefore,
    ];
}

/// One scripted submit: its task, `--priority`, and `--delay` in clock ticks (0: none).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScriptedSubmit {
    pub task: &'static str,
    pub priority: i32,
    pub delay_ticks: u64,
}

/// The size of one scheduling model instance.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OrderConfig {
    /// `workers`.
    pub cap: usize,
    /// The submits, in order (each may come at any point of the run).
    pub script: Vec<ScriptedSubmit>,
    /// The clock runs from 0 to this many ticks (each tick one `TICK_MILLIS`).
    pub max_ticks: u64,
    pub variant: OrderVariant,
}

/// Milliseconds per clock tick.
pub const TICK_MILLIS: u64 = 1_000;

impl OrderConfig {
    /// The CI configuration: one slot, three submits on two tasks (an immediate one, a delayed
    /// one, a high-priority one), a clock of two ticks.
    pub fn small() -> Self {
        OrderConfig {
            cap: 1,
            script: vec![
                ScriptedSubmit {
                    task: "a",
                    priority: 0,
                    delay_ticks: 0,
                },
                ScriptedSubmit {
                    task: "b",
                    priority: 0,
                    delay_ticks: 1,
                },
                ScriptedSubmit {
                    task: "a",
                    priority: 5,
                    delay_ticks: 0,
                },
            ],
            max_ticks: 2,
            variant: OrderVariant::Production,
        }
    }

    /// Two slots (resume starts two rows in one section), four submits on two tasks with
    /// priorities 0, 5 and -1 and one delayed submit, a clock of two ticks.
    pub fn two_slots() -> Self {
        let mut cfg = Self::small();
        cfg.cap = 2;
        cfg.script.push(ScriptedSubmit {
            task: "b",
            priority: -1,
            delay_ticks: 0,
        });
        cfg
    }

    pub fn with_variant(mut self, variant: OrderVariant) -> Self {
        self.variant = variant;
        self
    }
}

impl std::fmt::Display for OrderConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "order cap={} submits={} ticks={} variant={:?}",
            self.cap,
            self.script.len(),
            self.max_ticks,
            self.variant
        )
    }
}

/// The state: the queue, the clock, the handoffs not spawned yet, the running turns.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct OrderState {
    pub queue: QueueState,
    pub ticks: u64,
    pub next_submit: u8,
    pub handoffs: Vec<Handoff>,
    pub running: Vec<(TurnKey, ProcessIdentity)>,
    pub next_pid: u32,
    /// Bits of the Q properties a transition broke.
    pub violations: u8,
    /// Bits of the examples reached.
    pub events: u8,
}

/// One step of the scheduling model.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum OrderAction {
    Submit,
    Tick,
    PauseHome,
    PauseTask(&'static str),
    ResumeHome,
    ResumeTask(&'static str),
    /// Spawn the runner of handoff `i`: both publishes and its take-over.
    Spawn(u8),
    /// Running turn `i` ends and its runner finishes (start-next).
    Finish(u8),
    /// A reconcile pass (the waker, or `tollgate reconcile`).
    Reconcile,
}

#[derive(Clone, Debug)]
pub struct OrderModel {
    pub cfg: OrderConfig,
}

impl OrderModel {
    pub fn new(cfg: OrderConfig) -> Self {
        OrderModel { cfg }
    }

    fn strategies(&self) -> BTreeMap<String, Strategy> {
        self.cfg
            .script
            .iter()
            .map(|s| {
                (
                    s.task.to_string(),
                    Strategy::Concurrent {
                        max: MAX_CONCURRENT,
                    },
                )
            })
            .collect()
    }

    fn first_task(&self) -> &'static str {
        self.cfg.script.first().map_or("a", |s| s.task)
    }
}

/// Everyone is alive in this model (see the module's text).
fn all_live(_: &ProcessIdentity) -> Observation {
    Observation::Matching
}

const SUBMITTER: ProcessIdentity = ProcessIdentity {
    pid: 2,
    start_time_micros: 2,
};
const RECONCILER: ProcessIdentity = ProcessIdentity {
    pid: 3,
    start_time_micros: 3,
};
const RESUMER: ProcessIdentity = ProcessIdentity {
    pid: 4,
    start_time_micros: 4,
};

impl OrderState {
    fn now_millis(&self) -> u64 {
        self.ticks * TICK_MILLIS
    }

    /// The lowest token number no handoff, reservation or recorded work holds (so the state
    /// space stays finite: a counter would make every pass a new state). Fresh for every decision
    /// the core takes with it: it equals no token in use, and a work's id is its take-over's
    /// token, so a token a live work still carries is in use too.
    fn fresh_token(&self) -> tollgate_core::slots::SlotToken {
        self.fresh_tokens(1)[0]
    }

    fn fresh_tokens(&self, n: usize) -> Vec<tollgate_core::slots::SlotToken> {
        let used: std::collections::BTreeSet<_> = self
            .handoffs
            .iter()
            .map(Handoff::token)
            .chain(
                self.queue
                    .entries
                    .iter()
                    .filter_map(|e| e.slot_reservation.as_ref().map(|r| r.token)),
            )
            .collect();
        let worked = |t: &tollgate_core::slots::SlotToken| {
            let id = tollgate_core::slots::WorkId::from_token(*t);
            self.queue.works.iter().any(|w| w.id == id)
        };
        (1..)
            .map(token_from_counter)
            .filter(|t| !used.contains(t) && !worked(t))
            .take(n)
            .collect()
    }

    fn fresh_pid(&mut self) -> ProcessIdentity {
        self.next_pid += 1;
        ProcessIdentity {
            pid: self.next_pid,
            start_time_micros: u64::from(self.next_pid),
        }
    }
}

/// Runs `step` on `queue` with the input the broken variant hides taken away, and puts that
/// input back afterwards (on the rows that are still there), so only the decision is broken.
fn broken<R>(
    variant: OrderVariant,
    queue: &mut QueueState,
    step: impl FnOnce(&mut QueueState) -> R,
) -> R {
    match variant {
        OrderVariant::Production
        | OrderVariant::ResumeStartsNothing
        | OrderVariant::SubmitDropsNotBefore => step(queue),
        OrderVariant::IgnoresPause => {
            let paused = std::mem::take(&mut queue.paused);
            let out = step(queue);
            queue.paused = paused;
            out
        }
        OrderVariant::IgnoresNotBefore => {
            let kept: BTreeMap<TurnKey, u64> = queue
                .entries
                .iter_mut()
                .map(|e| (e.key.clone(), std::mem::take(&mut e.ready_at_millis)))
                .collect();
            let out = step(queue);
            for e in &mut queue.entries {
                if let Some(at) = kept.get(&e.key) {
                    e.ready_at_millis = *at;
                }
            }
            out
        }
        OrderVariant::FifoOnly => {
            let kept: BTreeMap<TurnKey, i32> = queue
                .entries
                .iter_mut()
                .map(|e| (e.key.clone(), std::mem::take(&mut e.priority)))
                .collect();
            let out = step(queue);
            for e in &mut queue.entries {
                if let Some(p) = kept.get(&e.key) {
                    e.priority = *p;
                }
            }
            out
        }
    }
}

/// Checks every start of the transition `before` → `after` (rows that got a slot reservation)
/// against Q1-Q3 and records the examples reached.
fn check_starts(before: &QueueState, after: &mut OrderState, resumed: bool) {
    let now = after.now_millis();
    let q = &after.queue;
    let rank = |e: &tollgate_core::slots::QueueEntry| (e.priority, std::cmp::Reverse(e.queue_id));
    let startable = |e: &tollgate_core::slots::QueueEntry| {
        matches!(e.state, RowState::Parked)
            && e.slot_reservation.is_none()
            && order::held_back(q, &e.key.task, e.ready_at_millis, now).is_none()
    };
    let mut violations = 0;
    let mut events = 0;
    for row in q.entries.iter().filter(|e| e.slot_reservation.is_some()) {
        let earlier = before.row(&row.key);
        if earlier.is_some_and(|e| e.slot_reservation.is_some()) {
            continue;
        }
        if q.paused.holds(&row.key.task) {
            violations |= Q1_BIT;
        }
        if row.ready_at_millis > now {
            violations |= Q2_BIT;
        }
        if row.ready_at_millis > 0 {
            events |= DELAYED_BIT;
        }
        if resumed {
            events |= RESUMED_BIT;
        }
        let was_parked = earlier.is_some_and(|e| matches!(e.state, RowState::Parked));
        if !was_parked {
            continue;
        }
        let left: Vec<_> = q.entries.iter().filter(|e| startable(e)).collect();
        if left.iter().any(|e| rank(e) > rank(row)) {
            violations |= Q3_BIT;
        }
        if left.iter().any(|e| e.queue_id < row.queue_id) {
            events |= OVERTAKES_BIT;
        }
    }
    after.violations |= violations;
    after.events |= events;
}

impl Model for OrderModel {
    type State = OrderState;
    type Action = OrderAction;

    fn init_states(&self) -> Vec<OrderState> {
        vec![OrderState {
            queue: QueueState::default(),
            ticks: 0,
            next_submit: 0,
            handoffs: Vec::new(),
            running: Vec::new(),
            next_pid: 10,
            violations: 0,
            events: 0,
        }]
    }

    fn actions(&self, st: &OrderState, actions: &mut Vec<OrderAction>) {
        if st.violations != 0 {
            return;
        }
        if usize::from(st.next_submit) < self.cfg.script.len() {
            actions.push(OrderAction::Submit);
        }
        if st.ticks < self.cfg.max_ticks {
            actions.push(OrderAction::Tick);
        }
        let task = self.first_task();
        if st.queue.paused.home {
            actions.push(OrderAction::ResumeHome);
        } else {
            actions.push(OrderAction::PauseHome);
        }
        if st.queue.paused.tasks.contains(task) {
            actions.push(OrderAction::ResumeTask(task));
        } else {
            actions.push(OrderAction::PauseTask(task));
        }
        for i in 0..st.handoffs.len() {
            actions.push(OrderAction::Spawn(i as u8));
        }
        for i in 0..st.running.len() {
            actions.push(OrderAction::Finish(i as u8));
        }
        actions.push(OrderAction::Reconcile);
    }

    fn next_state(&self, last: &OrderState, action: OrderAction) -> Option<OrderState> {
        let mut st = last.clone();
        let before = last.queue.clone();
        let now = st.now_millis();
        let variant = self.cfg.variant;
        let strategies = self.strategies();
        let mut resumed = false;
        let result: Result<(), tollgate_core::slots::SlotError> = (|| {
            match action {
                OrderAction::Submit => {
                    let script = &self.cfg.script[usize::from(st.next_submit)];
                    st.next_submit += 1;
                    let key = TurnKey::new(script.task, u32::from(st.next_submit));
                    let token = st.fresh_token();
                    let schedule = Schedule {
                        priority: script.priority,
                        // BUG (SubmitDropsNotBefore): the delay is not passed on.
                        not_before_millis: if script.delay_ticks > 0
                            && variant != OrderVariant::SubmitDropsNotBefore
                        {
                            now + script.delay_ticks * TICK_MILLIS
                        } else {
                            0
                        },
                    };
                    let decision = broken(variant, &mut st.queue, |q| {
                        steps::submit_scheduled(
                            q,
                            SubmitInput {
                                key: &key,
                                me: SUBMITTER,
                                fresh_token: token,
                                now_millis: now,
                                cap: self.cfg.cap,
                                strategy: Strategy::Concurrent {
                                    max: MAX_CONCURRENT,
                                },
                                liveness: &all_live,
                            },
                            schedule,
                        )
                    })?;
                    if let SubmitEffect::Spawn(handoff) = decision.effect {
                        st.handoffs.push(handoff);
                    }
                }
                OrderAction::Tick => st.ticks += 1,
                OrderAction::PauseHome => {
                    order::pause(&mut st.queue, PauseScope::Home)?;
                }
                OrderAction::PauseTask(task) => {
                    order::pause(&mut st.queue, PauseScope::Task(task))?;
                }
                OrderAction::ResumeHome | OrderAction::ResumeTask(_) => {
                    let scope = match action {
                        OrderAction::ResumeTask(task) => PauseScope::Task(task),
                        _ => PauseScope::Home,
                    };
                    let tokens = st.fresh_tokens(self.cfg.cap);
                    // The pause is lifted for real; the variant breaks the start decision only.
                    order::unpause(&mut st.queue, scope);
                    let effect = broken(variant, &mut st.queue, |q| {
                        steps::resume(
                            q,
                            ResumeInput {
                                scope,
                                me: RESUMER,
                                fresh_tokens: &tokens,
                                now_millis: now,
                                // BUG (ResumeStartsNothing): no slot is free for the resume.
                                cap: if variant == OrderVariant::ResumeStartsNothing {
                                    0
                                } else {
                                    self.cfg.cap
                                },
                                strategies: &strategies,
                                liveness: &all_live,
                            },
                        )
                    })?;
                    resumed = true;
                    st.handoffs.extend(effect.spawn);
                }
                OrderAction::Spawn(i) => {
                    let handoff = st.handoffs.remove(usize::from(i));
                    let key = handoff.key().clone();
                    let token = handoff.token();
                    let child = st.fresh_pid();
                    if let Ok(bound) = steps::handoff_publish_first(&mut st.queue, handoff, child) {
                        let _ = steps::handoff_publish_second(&mut st.queue, bound);
                    }
                    let effect = steps::runner_take_over(
                        &mut st.queue,
                        TakeOverInput {
                            key: &key,
                            token,
                            me: child,
                            settled: false,
                            cgroup: None,
                            liveness: &all_live,
                        },
                    )?;
                    if let TakeOverEffect::Run { .. } = effect {
                        st.running.push((key, child));
                    }
                }
                OrderAction::Finish(i) => {
                    let (key, me) = st.running.remove(usize::from(i));
                    let token = st.fresh_token();
                    let next = broken(variant, &mut st.queue, |q| {
                        steps::runner_finish(
                            q,
                            FinishInput {
                                key: &key,
                                me,
                                fresh_token: token,
                                now_millis: now,
                                cap: self.cfg.cap,
                                strategies: &strategies,
                                liveness: &all_live,
                            },
                        )
                    })?;
                    st.handoffs.extend(next);
                }
                OrderAction::Reconcile => {
                    let records = TurnRecords::new();
                    // Bounded: each step either starts a row or ends the pass.
                    for _ in 0..=self.cfg.script.len() {
                        let token = st.fresh_token();
                        let effect = broken(variant, &mut st.queue, |q| {
                            steps::reconcile(
                                q,
                                ReconcileInput {
                                    me: RECONCILER,
                                    fresh_token: token,
                                    now_millis: now,
                                    cap: self.cfg.cap,
                                    strategies: &strategies,
                                    records: &records,
                                    liveness: &all_live,
                                },
                            )
                        })?;
                        match effect {
                            steps::ReconcileEffect::Spawn { handoff, .. } => {
                                st.handoffs.push(handoff)
                            }
                            other if other.is_final() => break,
                            _ => {}
                        }
                    }
                }
            }
            Ok(())
        })();
        // The core refusing a call the model makes is a model bug: no successor.
        result.ok()?;
        check_starts(&before, &mut st, resumed);
        // Tokens and pids are fresh counters; they do not change what can happen next, except
        // that they make otherwise equal states differ: forget them once nothing holds them.
        if st.handoffs.is_empty() && st.running.is_empty() {
            st.next_pid = 10;
        }
        Some(st)
    }

    fn format_action(&self, action: &OrderAction) -> String {
        format!("{action:?}")
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(names::Q1, |_, st: &OrderState| st.violations & Q1_BIT == 0),
            Property::always(names::Q2, |_, st: &OrderState| st.violations & Q2_BIT == 0),
            Property::always(names::Q3, |_, st: &OrderState| st.violations & Q3_BIT == 0),
            Property::sometimes(names::RESUMED, |_, st: &OrderState| {
                st.events & RESUMED_BIT != 0
            }),
            Property::sometimes(names::OVERTAKES, |_, st: &OrderState| {
                st.events & OVERTAKES_BIT != 0
            }),
            Property::sometimes(names::DELAYED, |_, st: &OrderState| {
                st.events & DELAYED_BIT != 0
            }),
        ]
    }
}
