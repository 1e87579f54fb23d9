//! The admission model: every interleaving of platform deliveries (first deliveries, retries,
//! redeliveries), serve's accept sequence step by step, its watcher, runners finishing turns, a
//! model clock for debounce, shutdown with its drain and hand-off, and a serve that crashes at
//! any step and restarts, driven through the core's admission steps
//! (`core/src/admission/steps.rs`) and nothing else.
//!
//! One action is one locked section of serve, calling the step production calls there:
//!
//! Configurations with crashes or failing submits run each section of the accept sequence as its
//! own action; the others run a delivery's sections back to back in one `Deliver`.
//!
//! - **Deliver(event)**: the gate, [`Admission::admit_and_mark`]. `Refused`: the overload answer
//!   (no ack, no mark, admission-rejected). `Duplicate`: the duplicate answer. `Admitted`: the
//!   accept sequence begins (nothing answered yet).
//! - **Submit(delivery)**: the durable turn, under the queue lock: the slot step production's
//!   submit runs ([`steps::submit`] on the model's real [`QueueState`], with the scope's strategy):
//!   a start reserves the row for this serve, a superseded waiter's turn ends, a dropped turn ends.
//!   Then [`Admission::made_durable`]: until here a
//!   redelivery of the identity is told to retry (`InFlight`), never answered as a duplicate. **SubmitFails(delivery)** (when the configuration
//!   allows it): the turn could not be created, [`Admission::withdraw`], answered 503.
//! - **Spawn(delivery)**: serve's driver performs the submit's [`Handoff`]: the runner is spawned,
//!   the two publishes ([`steps::handoff_publish_first`], [`steps::handoff_publish_second`]) land,
//!   and the runner's take-over ([`steps::runner_take_over`]) starts the turn's work.
//! - **Ack(delivery)**: the durable dedupe line, then the 200; the delivery is watched (a `drop`
//!   turn settles at once through [`delivery_outcome`]).
//! - **Watch(delivery)**: the watcher's [`watch_turn`] for a delivery whose turn ended: settle.
//!   **Timeout(delivery)** (when allowed): the detach deadline passes while the turn's work runs:
//!   [`watch_turn`] says cancel; the turn ends cancelled, the delivery later timed-out.
//! - **Finish(turn)**: a running turn's runner ends it: [`steps::runner_finish`], which starts
//!   the next parked row its strategy allows (its handoff is performed in the same action).
//!   **Tick**: the clock passes a debounce deadline, and the waker the submit asked for runs
//!   production's waker step, reconcile ([`steps::reconcile`], until it is final).
//!   A timeout's cancel is [`steps::cancel`]; the signalled runner finishes the turn cancelled.
//! - **Shutdown**: [`Admission::begin_shutdown`]. **Drain**: once no submit is under way
//!   ([`drain`] says hand off), [`Admission::hand_off`]; the handed-off turns are recorded for the
//!   next serve, and this serve exits. Its turns run on.
//! - **Crash**: serve dies (its ledger, dedupe set, watcher and accept sequences are gone; rows,
//!   turn records, the dedupe log and the hand-off file stay). **Restart**: a new serve:
//!   [`Admission::restore_mark`] for the dedupe log, [`Admission::readopt`] for every turn still
//!   in the queue or handed off ([`TurnAtStart`] from the row and who is alive), then
//!   [`recovery`]: when it says reconcile, serve runs [`steps::reconcile`] until it is final, which
//!   parks the rows only a dead serve reserved and starts them.
//!
//! Serve's `workers` cap ([`WORKERS`]) is larger than any configuration's number of turns: the
//! global cap is the slot model's subject; here the strategies and the admission ledger decide.
//!
//! The model owns only what production gets from the world: which events the platform still
//! delivers, the queue's rows and the turns' work, a clock, which serve is alive, and a record of
//! what serve answered each delivery and how often each admitted delivery's capacity was released.
//!
//! Not modelled: dedupe expiry and eviction (the TTL outlives the model), byte sizes, failed
//! turns (they settle through the same rule as completed ones), a submit still under way when the
//! drain's lock-timeout bound runs out, and the detach deadline of a turn that has not started
//! (the model's detach timeout is longer than any wait it has).

use crate::slots::state::token_from_counter;
use stateright::{Model, Property};
use std::collections::BTreeMap;
use std::fmt;
use tollgate_core::admission::{
    delivery_outcome, drain, recovery, turn_at_start, watch_turn, Admission, Admit, Deadline,
    Delivery, DeliveryId, Dispatch, Drain, DrainInputs, EventIdentity, Limits, Outcome, Readopt,
    RejectReason, Retained, Settled, Strategy, Tenant, TurnEnd, TurnNow, WatchEffect,
};
use tollgate_core::slots::steps::{
    self, CancelSelection, FinishInput, Handoff, ReconcileEffect, ReconcileInput, SubmitDecision,
    SubmitEffect, SubmitInput, TakeOverEffect, TakeOverInput, TurnOnDisk, TurnRecords,
};
use tollgate_core::slots::{
    enqueue, park, set_ready_at, Liveness, Observation, ProcessIdentity, QueueState, RowState,
    SlotError, TurnKey, WorkRecord,
};

/// How long a mark lasts: longer than any model run, so expiry never plays a part.
pub const DEDUPE_TTL_MILLIS: u64 = 1_000_000;
/// The detach timeout: longer than any model run; only `Timeout` makes a deadline pass.
pub const DETACH_TIMEOUT_MILLIS: u64 = 1_000_000;
/// Serve's `workers` (the slot cap of detached starts): more than any configuration's turns.
pub const WORKERS: usize = 16;
/// The most sections one reconcile pass runs (production's loop has a bound too).
const MAX_RECONCILE_STEPS: usize = 32;

/// Which serve the model drives: production, or one deliberately broken variant (the teeth).
///
/// Each variant replaces exactly one step (or skips one effect) with a model-local copy; the
/// broken copies live here, never in `core/` or `src/`. `tests/model_admission.rs` expects the
/// checker to reject each with a counterexample for the property it breaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Variant {
    /// The production steps, unchanged.
    Production,
    /// The gate marks the identity first and admits second: a rejected delivery is marked, so
    /// its retry is deduped away (breaks A2).
    MarkBeforeAdmit,
    /// The acknowledgement releases the delivery's capacity while its work is still retained
    /// (breaks A5, and A1's "a scope retains only held work").
    ReleaseAtAck,
    /// At the cap the ingress acknowledges the delivery and drops it instead of refusing it
    /// honestly (breaks A2).
    AckAndDropAtCap,
    /// Debounce keeps every waiter instead of superseding the parked one: the submit step's
    /// superseded rows are put back, parked (breaks A4).
    UnboundedDebounce,
    /// The shutdown drain hands off only deliveries whose turns run, and forgets the others
    /// (breaks A3).
    DrainRunningOnly,
    /// Serve's start skips the recovery step's effect: a row reserved by a dead serve is never
    /// started, and its acknowledged delivery never runs (breaks A3 across serve crashes).
    SkipRecovery,
    /// Withdraw releases the capacity but keeps the mark: the sender's retry of a delivery that
    /// was never acknowledged is answered as a duplicate and never runs (breaks A2).
    WithdrawKeepsMark,
    /// The gate refuses every delivery as if at capacity: nothing is ever admitted (the example
    /// "at rest after admitting work" is never reached).
    RefusesEverything,
    /// The ledger is built without the tenant ceiling (breaks A1; no delivery is refused at its
    /// tenant's ceiling).
    NoTenantCeiling,
    /// The shutdown drain hands off nothing: what is held never gets an outcome (breaks A3; no
    /// delivery is handed off).
    DrainHandsOffNothing,
    /// A `drop` scope's submit is given the `queue` strategy (no arrival is dropped).
    DropQueues,
    /// A finishing runner and the waker are given no free slot, so a parked row never starts (no
    /// debounce waiter starts, no head of a line).
    ParkedNeverStart,
    /// The detach deadline is read at the present instead of past it (no delivery times out).
    DeadlineNeverPasses,
}

impl Variant {
    pub const BROKEN: [Variant; 13] = [
        Variant::MarkBeforeAdmit,
        Variant::ReleaseAtAck,
        Variant::AckAndDropAtCap,
        Variant::UnboundedDebounce,
        Variant::DrainRunningOnly,
        Variant::SkipRecovery,
        Variant::WithdrawKeepsMark,
        Variant::RefusesEverything,
        Variant::NoTenantCeiling,
        Variant::DrainHandsOffNothing,
        Variant::DropQueues,
        Variant::ParkedNeverStart,
        Variant::DeadlineNeverPasses,
    ];
}

/// One event the platform delivers: whose it is, which scope it lands in, how it is dispatched,
/// and how many times the platform delivers it in total (the first delivery plus retries or
/// redeliveries).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EventSpec {
    pub tenant: u8,
    pub scope: u8,
    pub dispatch: Dispatch,
    pub deliveries: u8,
}

impl EventSpec {
    /// A deferred event delivered `deliveries` times.
    pub fn deferred(tenant: u8, scope: u8, deliveries: u8) -> Self {
        EventSpec {
            tenant,
            scope,
            dispatch: Dispatch::Deferred,
            deliveries,
        }
    }

    pub fn sync(mut self) -> Self {
        self.dispatch = Dispatch::Sync;
        self
    }
}

/// The size of one model instance.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdmissionConfig {
    pub max_detached: usize,
    /// 0 = no per-tenant ceiling.
    pub max_detached_per_tenant: usize,
    /// The strategy of each scope (scope `i` is `scopes[i]`).
    pub scopes: Vec<Strategy>,
    pub events: Vec<EventSpec>,
    /// Whether shutdown may begin (at any point).
    pub shutdown: bool,
    /// How many times serve may start again after it stopped (crashed or shut down); a crash is
    /// possible at any step while a restart remains.
    pub restarts: u8,
    /// Whether a delivery's turn may fail to be created (the withdraw path).
    pub submit_failures: bool,
    /// Whether the detach deadline may pass while a turn's work runs.
    pub timeouts: bool,
    pub variant: Variant,
}

impl AdmissionConfig {
    pub fn new(max_detached: usize, max_detached_per_tenant: usize, scopes: Vec<Strategy>) -> Self {
        AdmissionConfig {
            max_detached,
            max_detached_per_tenant,
            scopes,
            events: Vec::new(),
            shutdown: true,
            restarts: 0,
            submit_failures: false,
            timeouts: false,
            variant: Variant::Production,
        }
    }

    pub fn event(mut self, event: EventSpec) -> Self {
        self.events.push(event);
        self
    }

    pub fn with_variant(mut self, variant: Variant) -> Self {
        self.variant = variant;
        self
    }

    pub fn without_shutdown(mut self) -> Self {
        self.shutdown = false;
        self
    }

    pub fn with_restarts(mut self, restarts: u8) -> Self {
        self.restarts = restarts;
        self
    }

    pub fn with_submit_failures(mut self) -> Self {
        self.submit_failures = true;
        self
    }

    pub fn with_timeouts(mut self) -> Self {
        self.timeouts = true;
        self
    }

    /// Whether the accept sequence's sections (gate, submit, spawn, ack) are separate actions,
    /// so that serve can crash, or a submit fail, between them. Otherwise one `Deliver` runs
    /// them back to back, which keeps the strategy configurations small.
    pub fn step_by_step(&self) -> bool {
        self.restarts > 0 || self.submit_failures
    }

    fn limits(&self) -> Limits {
        // A zero cap is refused by the core; the model's configurations are chosen by tests.
        Limits::new(self.max_detached, self.max_detached_per_tenant)
            .expect("model configurations have a positive max_detached")
    }

    fn has_strategy(&self, pred: fn(&Strategy) -> bool) -> bool {
        self.scopes.iter().any(pred)
    }
}

impl fmt::Display for AdmissionConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scopes: Vec<String> = self.scopes.iter().map(|s| s.to_string()).collect();
        let events: Vec<String> = self
            .events
            .iter()
            .map(|e| {
                format!(
                    "t{}/s{}{}x{}",
                    e.tenant,
                    e.scope,
                    if e.dispatch == Dispatch::Sync {
                        "/sync"
                    } else {
                        ""
                    },
                    e.deliveries
                )
            })
            .collect();
        write!(
            f,
            "max {} per-tenant {} scopes [{}] events [{}]{}{}{}{} {:?}",
            self.max_detached,
            self.max_detached_per_tenant,
            scopes.join(", "),
            events.join(" "),
            if self.shutdown { " +shutdown" } else { "" },
            if self.restarts > 0 {
                format!(" +crash/restart x{}", self.restarts)
            } else {
                String::new()
            },
            if self.submit_failures {
                " +submit-failures"
            } else {
                ""
            },
            if self.timeouts { " +timeouts" } else { "" },
            self.variant
        )
    }
}

/// What serve answered one delivery.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Answer {
    Rejected(RejectReason),
    /// Admitted as hold `hold` (acknowledged once `acked`; a crash before that answers nothing).
    Accepted {
        hold: u8,
    },
    Duplicate,
    /// Its identity's first delivery was not durable yet: "retry later", not acknowledged.
    InFlight,
    /// Admitted, but its turn could not be created: withdrawn and answered 503.
    Withdrawn,
}

/// The model's record of one delivery (one arrival of an event).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Attempt {
    pub event: u8,
    pub answer: Answer,
    /// The platform was told the delivery was handled (an ack, or the duplicate answer).
    pub acked: bool,
    /// This delivery's call set the event identity's mark (it was unmarked before).
    pub marked: bool,
    /// The terminal outcome answered for a refused delivery.
    pub outcome: Option<Outcome>,
}

/// One admission in some serve's ledger (a first admission, or a re-adoption after a start).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Hold {
    /// Which serve start admitted it (ids are per ledger).
    pub start: u8,
    pub id: DeliveryId,
    /// The delivery that was admitted (none for a re-adoption).
    pub attempt: Option<u8>,
    pub turn: Option<u8>,
    pub outcome: Option<Outcome>,
    /// Successful settles of this id.
    pub releases: u8,
    /// Settles of this id the core refused (already released).
    pub refused_settles: u8,
    /// Its serve crashed while it was held: it ended with its ledger, the turn lives on.
    pub lost_in_crash: bool,
}

/// A turn's queue row as the properties see it, read from the model's [`QueueState`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Row {
    /// Reserved by serve start `by`, its runner not started.
    Reserved { by: u8 },
    /// Parked (a waiter, or in the scope's line): a finishing runner or the waker starts it.
    Waiting,
    /// Its runner runs the turn's work.
    Running,
    /// Dispatching but neither reserved by a serve nor run by a recorded runner (a handoff
    /// between its publishes; never left so by a model action).
    Starting,
    /// Not in the queue (ended, or never enqueued).
    Gone,
}

/// A delivery's durable turn: its record and row.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Turn {
    pub event: u8,
    pub end: Option<TurnEnd>,
    /// Its work started.
    pub ran: bool,
}

/// One admitted delivery in serve's accept sequence, not yet acknowledged.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct InFlight {
    pub attempt: u8,
    pub hold: u8,
    pub id: DeliveryId,
    /// Set by the submit.
    pub turn: Option<u8>,
    /// The submit's reservation, for serve's driver to perform (lost if serve crashes first).
    pub handoff: Option<Handoff>,
}

/// One delivery the watcher watches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Watching {
    pub hold: u8,
    pub id: DeliveryId,
    pub turn: u8,
    pub deadline: Deadline,
}

/// A live serve's memory: lost when it crashes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ServeMem {
    pub admission: Admission,
    pub inflight: Vec<InFlight>,
    pub watched: Vec<Watching>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    Open,
    /// `begin_shutdown` ran; the drain has not.
    ShuttingDown,
    /// Serve is not running (it crashed, or exited after its hand-off).
    Down,
}

/// Things that happened along the path, for the `sometimes` properties that a state's records
/// cannot show.
pub mod event {
    pub const DEBOUNCE_START: u8 = 1;
    pub const LINE_START: u8 = 2;
    pub const RECOVERED: u8 = 4;
    pub const TIMED_OUT_CANCEL: u8 = 8;
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct AdmissionState {
    pub serve: Option<ServeMem>,
    pub phase: Phase,
    /// How many serves have started (the first is start 1).
    pub starts: u8,
    pub turns: Vec<Turn>,
    /// The queue (`queue.json`): scope `i`'s turns are the rows of task `s<i>`, turn `t` is
    /// [`key_of`]`(t)`; every change to it is a core step.
    pub queue: QueueState,
    /// The next fresh slot token is `token_from_counter(next_token)`.
    pub next_token: u32,
    /// Events with a durable dedupe line.
    pub dedupe_log: Vec<u8>,
    /// Turns listed in the hand-off file.
    pub handed_off: Vec<u8>,
    pub now: u64,
    pub attempts: Vec<Attempt>,
    pub holds: Vec<Hold>,
    pub events: u8,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AdmissionAction {
    Deliver { event: u8 },
    Submit { attempt: u8 },
    SubmitFails { attempt: u8 },
    Spawn { attempt: u8 },
    Ack { attempt: u8 },
    Watch { hold: u8 },
    Timeout { hold: u8 },
    Finish { turn: u8 },
    Tick,
    Shutdown,
    Drain,
    Crash,
    Restart,
}

pub struct AdmissionModel {
    pub cfg: AdmissionConfig,
}

impl AdmissionModel {
    pub fn new(cfg: AdmissionConfig) -> Self {
        AdmissionModel { cfg }
    }

    pub fn initial_state(&self) -> AdmissionState {
        AdmissionState {
            serve: Some(self.fresh_serve()),
            phase: Phase::Open,
            starts: 1,
            turns: Vec::new(),
            queue: QueueState::default(),
            next_token: 1,
            dedupe_log: Vec::new(),
            handed_off: Vec::new(),
            now: 0,
            attempts: Vec::new(),
            holds: Vec::new(),
            events: 0,
        }
    }

    /// The cap a finishing runner and a reconcile pass are given, when either may start a parked
    /// row.
    fn start_cap(&self) -> usize {
        match self.cfg.variant {
            // BUG: a parked row never starts.
            Variant::ParkedNeverStart => 0,
            _ => WORKERS,
        }
    }

    fn fresh_serve(&self) -> ServeMem {
        let limits = match self.cfg.variant {
            // BUG: no tenant ceiling.
            Variant::NoTenantCeiling => Limits::new(self.cfg.max_detached, 0)
                .expect("model configurations have a positive max_detached"),
            _ => self.cfg.limits(),
        };
        ServeMem {
            admission: Admission::new(limits, DEDUPE_TTL_MILLIS),
            inflight: Vec::new(),
            watched: Vec::new(),
        }
    }

    fn strategy_of_turn(&self, st: &AdmissionState, turn: u8) -> Strategy {
        self.cfg.scopes[self.cfg.events[st.turns[turn as usize].event as usize].scope as usize]
    }

    /// The queue key of turn `turn`: task `s<scope>`, turn number `turn + 1`.
    fn key_of(&self, st: &AdmissionState, turn: u8) -> TurnKey {
        let scope = self.cfg.events[st.turns[turn as usize].event as usize].scope;
        TurnKey::new(format!("s{scope}"), u32::from(turn) + 1)
    }

    /// The strategy of every scope's task, as serve reads them from the task records.
    fn strategies(&self) -> BTreeMap<String, Strategy> {
        self.cfg
            .scopes
            .iter()
            .enumerate()
            .map(|(i, s)| (format!("s{i}"), *s))
            .collect()
    }

    /// A fresh token for a step; [`Self::spend_token`] once a reservation took it (so that an
    /// unused token does not tell apart states that are the same).
    fn fresh_token(st: &AdmissionState) -> tollgate_core::slots::SlotToken {
        token_from_counter(st.next_token)
    }

    fn spend_token(st: &mut AdmissionState) {
        st.next_token += 1;
    }

    /// Performs a handoff as production's driver does: spawn the turn's runner, the first and
    /// the second publish, then the runner's own take-over (it runs whether or not a publish was
    /// fenced). `from_parked`: the row started from its scope's waiters or line.
    fn perform_handoff(&self, st: &mut AdmissionState, handoff: Handoff, from_parked: bool) {
        let turn = turn_of(handoff.key());
        let child = runner_identity(turn);
        if let Ok(bound) = steps::handoff_publish_first(&mut st.queue, handoff.clone(), child) {
            let _ = steps::handoff_publish_second(&mut st.queue, bound);
        }
        let key = handoff.key().clone();
        let settled = st.turns[turn as usize].end.is_some();
        let live = Live::of(st, &[child]);
        let taken = steps::runner_take_over(
            &mut st.queue,
            TakeOverInput {
                key: &key,
                token: handoff.token(),
                me: child,
                settled,
                cgroup: None,
                liveness: &live,
            },
        );
        if let Ok(TakeOverEffect::Run { work }) = taken {
            let _ = steps::work_started(&mut st.queue, &key, work, leader_identity(turn));
            st.turns[turn as usize].ran = true;
            match self.strategy_of_turn(st, turn) {
                Strategy::Debounce { .. } => st.events |= event::DEBOUNCE_START,
                Strategy::Concurrent { .. } if from_parked => st.events |= event::LINE_START,
                _ => {}
            }
        }
    }

    /// One reconcile pass by `me` (serve at its start, or a debounce waker): the step until it
    /// is final, each effect performed. Returns the turns it spawned runners for.
    fn reconcile_pass(&self, st: &mut AdmissionState, me: ProcessIdentity) -> Vec<u8> {
        let strategies = self.strategies();
        let mut spawned = Vec::new();
        for _ in 0..MAX_RECONCILE_STEPS {
            // Every turn has its record (serve writes it in the submit's section).
            let records: TurnRecords = (0..st.turns.len() as u8)
                .map(|t| {
                    let turn = &st.turns[t as usize];
                    let on_disk = TurnOnDisk::Record {
                        settled: turn.end.is_some(),
                        attached: false,
                        started: turn.ran,
                        runner: turn.ran,
                    };
                    (self.key_of(st, t), on_disk)
                })
                .collect();
            let token = Self::fresh_token(st);
            let live = Live::of(st, &[me]);
            let before = st.queue.clone();
            let effect = steps::reconcile(
                &mut st.queue,
                ReconcileInput {
                    me,
                    fresh_token: token,
                    now_millis: st.now,
                    cap: self.start_cap(),
                    strategies: &strategies,
                    records: &records,
                    liveness: &live,
                },
            );
            match effect {
                Err(_) => {
                    // The shell publishes nothing on an error and ends the pass.
                    st.queue = before;
                    break;
                }
                Ok(effect) if effect.is_final() => break,
                Ok(ReconcileEffect::Spawn { handoff, .. }) => {
                    Self::spend_token(st);
                    spawned.push(turn_of(handoff.key()));
                    self.perform_handoff(st, handoff, true);
                }
                // Runners never die in this model, so no work is left to kill; the driver's
                // kill would come here.
                Ok(ReconcileEffect::Kill { .. }) => break,
                Ok(_) => {}
            }
        }
        spawned
    }

    /// The row of `turn` as the properties see it.
    pub fn row(&self, st: &AdmissionState, turn: u8) -> Row {
        row_of(&st.queue, &self.key_of(st, turn))
    }

    fn deliver(&self, st: &mut AdmissionState, event: u8) {
        let spec = self.cfg.events[event as usize];
        let delivery = Delivery {
            tenant: tenant_of(spec.tenant),
            identity: identity_of(event),
            dispatch: spec.dispatch,
        };
        let now = st.now;
        let starts = st.starts;
        let Some(serve) = st.serve.as_mut() else {
            return;
        };
        let marked_before = serve.admission.dedupe.contains(&delivery.identity, now);
        let admit = match self.cfg.variant {
            Variant::MarkBeforeAdmit => mark_then_admit(&mut serve.admission, &delivery, now),
            // BUG: every delivery is refused.
            Variant::RefusesEverything => Admit::Refused {
                reason: RejectReason::AtCapacity,
            },
            _ => serve.admission.admit_and_mark(&delivery, now),
        };
        let marked = !marked_before && serve.admission.dedupe.contains(&delivery.identity, now);
        let attempt_index = st.attempts.len() as u8;
        let mut attempt = Attempt {
            event,
            answer: Answer::Duplicate,
            acked: false,
            marked,
            outcome: None,
        };
        match admit {
            Admit::Refused { reason } => {
                attempt.answer = Answer::Rejected(reason);
                if self.cfg.variant == Variant::AckAndDropAtCap
                    && reason != RejectReason::ShuttingDown
                {
                    // The broken ingress: a 2xx for work it then throws away.
                    attempt.acked = true;
                    attempt.outcome = Some(Outcome::Dropped);
                } else {
                    attempt.outcome = Some(Outcome::AdmissionRejected);
                }
            }
            Admit::Duplicate => attempt.acked = true,
            Admit::InFlight => attempt.answer = Answer::InFlight,
            Admit::Admitted { id } => {
                let hold = st.holds.len() as u8;
                attempt.answer = Answer::Accepted { hold };
                st.holds.push(Hold {
                    start: starts,
                    id,
                    attempt: Some(attempt_index),
                    turn: None,
                    outcome: None,
                    releases: 0,
                    refused_settles: 0,
                    lost_in_crash: false,
                });
                serve.inflight.push(InFlight {
                    attempt: attempt_index,
                    hold,
                    id,
                    turn: None,
                    handoff: None,
                });
            }
        }
        st.attempts.push(attempt);
    }

    fn inflight(st: &AdmissionState, attempt: u8) -> Option<InFlight> {
        st.serve
            .as_ref()?
            .inflight
            .iter()
            .find(|f| f.attempt == attempt)
            .cloned()
    }

    /// The submit section: the durable turn, the strategy's decision, a reservation by this serve.
    fn submit(&self, st: &mut AdmissionState, attempt: u8) {
        let Some(flight) = Self::inflight(st, attempt) else {
            return;
        };
        let event = st.attempts[attempt as usize].event;
        let scope = self.cfg.events[event as usize].scope as usize;
        let strategy = match (self.cfg.variant, self.cfg.scopes[scope]) {
            // BUG: a drop scope submits as a queue scope.
            (Variant::DropQueues, Strategy::Drop) => Strategy::Queue,
            (_, strategy) => strategy,
        };
        let turn = st.turns.len() as u8;
        st.turns.push(Turn {
            event,
            end: None,
            ran: false,
        });
        let key = self.key_of(st, turn);
        let me = serve_identity(st.starts);
        let token = Self::fresh_token(st);
        let live = Live::of(st, &[]);
        let input = SubmitInput {
            key: &key,
            me,
            fresh_token: token,
            now_millis: st.now,
            cap: WORKERS,
            strategy,
            liveness: &live,
        };
        let before = st.queue.clone();
        let decided = match (self.cfg.variant, strategy) {
            (Variant::UnboundedDebounce, Strategy::Debounce { .. }) => {
                submit_keeping_every_waiter(&mut st.queue, input)
            }
            _ => steps::submit(&mut st.queue, input),
        };
        let decision = match decided {
            Ok(decision) => decision,
            Err(_) => {
                // No model configuration makes the step refuse; the shell would publish nothing.
                st.queue = before;
                return;
            }
        };
        for old in &decision.superseded {
            st.turns[turn_of(old) as usize].end = Some(TurnEnd::Superseded);
        }
        let handoff = match decision.effect {
            SubmitEffect::Spawn(handoff) => {
                Self::spend_token(st);
                Some(handoff)
            }
            SubmitEffect::Dropped { .. } => {
                st.turns[turn as usize].end = Some(TurnEnd::Dropped);
                None
            }
            SubmitEffect::Park | SubmitEffect::Pending | SubmitEffect::Wait { .. } => None,
        };
        st.holds[flight.hold as usize].turn = Some(turn);
        if let Some(serve) = st.serve.as_mut() {
            serve.admission.made_durable(&identity_of(event));
        }
        if let Some(serve) = st.serve.as_mut() {
            for f in serve.inflight.iter_mut().filter(|f| f.attempt == attempt) {
                f.turn = Some(turn);
                f.handoff = handoff.clone();
            }
        }
    }

    /// The turn could not be created: the withdraw step, then the 503.
    fn submit_fails(&self, st: &mut AdmissionState, attempt: u8) {
        let Some(flight) = Self::inflight(st, attempt) else {
            return;
        };
        let identity = identity_of(st.attempts[attempt as usize].event);
        let Some(serve) = st.serve.as_mut() else {
            return;
        };
        serve.inflight.retain(|f| f.attempt != attempt);
        let settled = match self.cfg.variant {
            // The broken withdraw: only the first half.
            Variant::WithdrawKeepsMark => serve.admission.settle(flight.id, Outcome::Failed),
            _ => serve.admission.withdraw(flight.id, &identity),
        };
        record_settle(st, flight.hold, settled, Outcome::Failed);
        st.attempts[attempt as usize].answer = Answer::Withdrawn;
    }

    fn spawn(&self, st: &mut AdmissionState, attempt: u8) {
        let Some(serve) = st.serve.as_mut() else {
            return;
        };
        let Some(handoff) = serve
            .inflight
            .iter_mut()
            .find(|f| f.attempt == attempt)
            .and_then(|f| f.handoff.take())
        else {
            return;
        };
        self.perform_handoff(st, handoff, false);
    }

    /// The durable dedupe line, the 200, and the watcher (a dropped turn settles at once).
    fn ack(&self, st: &mut AdmissionState, attempt: u8) {
        let Some(InFlight {
            hold,
            id,
            turn: Some(turn),
            ..
        }) = Self::inflight(st, attempt)
        else {
            return;
        };
        let event = st.attempts[attempt as usize].event;
        if !st.dedupe_log.contains(&event) {
            st.dedupe_log.push(event);
            st.dedupe_log.sort_unstable();
        }
        st.attempts[attempt as usize].acked = true;
        let dropped = st.turns[turn as usize].end == Some(TurnEnd::Dropped);
        let Some(serve) = st.serve.as_mut() else {
            return;
        };
        serve.inflight.retain(|f| f.attempt != attempt);
        if self.cfg.variant == Variant::ReleaseAtAck {
            // The broken acknowledgement: capacity back while the work is still to be done.
            let settled = serve.admission.settle(id, Outcome::Completed);
            count_release(st, hold, settled);
        }
        let Some(serve) = st.serve.as_mut() else {
            return;
        };
        if dropped {
            let outcome = delivery_outcome(TurnEnd::Dropped, false);
            let settled = serve.admission.settle(id, outcome);
            record_settle(st, hold, settled, outcome);
        } else {
            serve.watched.push(Watching {
                hold,
                id,
                turn,
                deadline: Deadline::new(0, DETACH_TIMEOUT_MILLIS),
            });
        }
    }

    /// The watcher's step for one delivery, at `now_millis`; performs its effect.
    fn watch(&self, st: &mut AdmissionState, hold: u8, now_millis: u64) {
        let Some(serve) = st.serve.as_mut() else {
            return;
        };
        let Some(pos) = serve.watched.iter().position(|w| w.hold == hold) else {
            return;
        };
        let turn = serve.watched[pos].turn;
        let turn_now = Self::turn_now_of(&st.turns, turn);
        let Some(serve) = st.serve.as_mut() else {
            return;
        };
        match watch_turn(&mut serve.watched[pos].deadline, turn_now, now_millis) {
            WatchEffect::Wait => {}
            WatchEffect::Settle { outcome } => {
                let w = serve.watched.remove(pos);
                let settled = serve.admission.settle(w.id, outcome);
                record_settle(st, hold, settled, outcome);
            }
            WatchEffect::Cancel => {
                st.events |= event::TIMED_OUT_CANCEL;
                self.cancel_turn(st, turn);
            }
        }
    }

    fn turn_now_of(turns: &[Turn], turn: u8) -> TurnNow {
        match turns[turn as usize].end {
            Some(end) => TurnNow::Ended(end),
            None => TurnNow::Live,
        }
    }

    /// The cancel section for one turn (serve's `cancel_turn`): a live runner is signalled and
    /// finishes the turn cancelled; a row nobody runs leaves and its turn ends cancelled.
    fn cancel_turn(&self, st: &mut AdmissionState, turn: u8) {
        let key = self.key_of(st, turn);
        let live = Live::of(st, &[]);
        let effect = steps::cancel(&mut st.queue, CancelSelection::Turn(&key), &live);
        for removed in &effect.removed {
            st.turns[turn_of(removed) as usize].end = Some(TurnEnd::Cancelled);
        }
        for (signalled, _) in &effect.signal {
            self.end_turn(st, turn_of(signalled), TurnEnd::Cancelled);
        }
    }

    /// A running turn's runner ends it (its command ended, or it was signalled): the finish
    /// step, then the handoff of the next row it started, in the same runner.
    fn end_turn(&self, st: &mut AdmissionState, turn: u8, end: TurnEnd) {
        let key = self.key_of(st, turn);
        let me = runner_identity(turn);
        let strategies = self.strategies();
        let token = Self::fresh_token(st);
        let live = Live::of(st, &[me]);
        let before = st.queue.clone();
        let finished = steps::runner_finish(
            &mut st.queue,
            FinishInput {
                key: &key,
                me,
                fresh_token: token,
                now_millis: st.now,
                cap: self.start_cap(),
                strategies: &strategies,
                liveness: &live,
            },
        );
        match finished {
            Ok(next) => {
                st.turns[turn as usize].end = Some(end);
                if let Some(handoff) = next {
                    Self::spend_token(st);
                    self.perform_handoff(st, handoff, true);
                }
            }
            // The shell publishes nothing on an error: the turn stays (and A3 sees it).
            Err(_) => st.queue = before,
        }
    }

    /// The clock passes the next debounce deadline; the waker the submit asked for runs its step.
    fn tick(&self, st: &mut AdmissionState) {
        st.now += 1;
        self.reconcile_pass(st, WAKER);
    }

    fn drain(&self, st: &mut AdmissionState) {
        let Some(mut serve) = st.serve.take() else {
            return;
        };
        // The drain's time is over; what is still watched is handed off.
        let effect = drain(DrainInputs {
            watched: serve.watched.len(),
            dispatching: serve.inflight.len(),
            now_millis: 1,
            drain_until_millis: 1,
            submit_until_millis: 1,
        });
        debug_assert_eq!(effect, Drain::HandOff);
        let handed: Vec<DeliveryId> = match self.cfg.variant {
            // The broken hand-off: only deliveries whose turns run.
            Variant::DrainRunningOnly => {
                let running: Vec<DeliveryId> = serve
                    .watched
                    .iter()
                    .filter(|w| self.row(st, w.turn) == Row::Running)
                    .map(|w| w.id)
                    .collect();
                for id in &running {
                    let _ = serve.admission.settle(*id, Outcome::HandedOffAtShutdown);
                }
                running
            }
            // BUG: nothing is handed off.
            Variant::DrainHandsOffNothing => Vec::new(),
            _ => serve.admission.hand_off(),
        };
        for id in handed {
            if let Some(hold) = st
                .holds
                .iter()
                .position(|h| h.start == st.starts && h.id == id)
            {
                record_settle(
                    st,
                    hold as u8,
                    Settled::Released {
                        outcome: Outcome::HandedOffAtShutdown,
                    },
                    Outcome::HandedOffAtShutdown,
                );
            }
        }
        let mut handed_turns: Vec<u8> = serve.watched.iter().map(|w| w.turn).collect();
        handed_turns.sort_unstable();
        st.handed_off = handed_turns;
        st.phase = Phase::Down;
    }

    fn crash(&self, st: &mut AdmissionState) {
        st.serve = None;
        st.phase = Phase::Down;
        let starts = st.starts;
        for h in st.holds.iter_mut() {
            if h.start == starts && h.outcome.is_none() {
                h.lost_in_crash = true;
            }
        }
    }

    /// Serve's start: marks from the dedupe log, readopt every turn in the queue or handed off,
    /// then the recovery step.
    fn restart(&self, st: &mut AdmissionState) {
        st.starts += 1;
        let mut serve = self.fresh_serve();
        for &event in &st.dedupe_log {
            serve.admission.restore_mark(&identity_of(event), 0);
        }
        let mut effects = Vec::new();
        let mut reserved_by_dead = Vec::new();
        let live_at_start = Live::of(st, &[serve_identity(st.starts)]);
        for turn in 0..st.turns.len() as u8 {
            let row = self.row(st, turn);
            let t = &st.turns[turn as usize];
            let handed_off = st.handed_off.contains(&turn);
            if row == Row::Gone && !handed_off {
                continue;
            }
            if matches!(row, Row::Reserved { .. }) {
                reserved_by_dead.push(turn);
            }
            // Production's classification, from the record, the row and who is alive (every
            // earlier serve is dead).
            let at_start =
                turn_at_start(t.end, st.queue.row(&self.key_of(st, turn)), &live_at_start);
            let spec = self.cfg.events[t.event as usize];
            let retained = Retained {
                tenant: tenant_of(spec.tenant),
                identity: identity_of(t.event),
                admitted_at_millis: 0,
                handed_off,
                turn: at_start,
            };
            let effect = serve.admission.readopt(&retained, DETACH_TIMEOUT_MILLIS);
            if let Readopt::Watch {
                id,
                deadline_millis,
                ..
            } = effect
            {
                let hold = st.holds.len() as u8;
                st.holds.push(Hold {
                    start: st.starts,
                    id,
                    attempt: None,
                    turn: Some(turn),
                    outcome: None,
                    releases: 0,
                    refused_settles: 0,
                    lost_in_crash: false,
                });
                serve.watched.push(Watching {
                    hold,
                    id,
                    turn,
                    deadline: Deadline {
                        deadline_millis,
                        timing_out: false,
                    },
                });
            }
            effects.push(effect);
        }
        st.handed_off.clear();
        st.serve = Some(serve);
        st.phase = Phase::Open;
        let skip = self.cfg.variant == Variant::SkipRecovery;
        if recovery(&effects) == tollgate_core::admission::Recovery::Reconcile && !skip {
            // Reconcile parks the dead serve's reservations and starts their runners.
            let spawned = self.reconcile_pass(st, serve_identity(st.starts));
            if spawned.iter().any(|t| reserved_by_dead.contains(t)) {
                st.events |= event::RECOVERED;
            }
        }
    }

    fn apply(&self, last: &AdmissionState, action: AdmissionAction) -> AdmissionState {
        let mut st = last.clone();
        match action {
            AdmissionAction::Deliver { event } => {
                let attempt = st.attempts.len() as u8;
                self.deliver(&mut st, event);
                if !self.cfg.step_by_step() {
                    // Without crashes or failing submits, the accept sequence's sections run
                    // back to back (the same steps, in the same order).
                    self.submit(&mut st, attempt);
                    self.spawn(&mut st, attempt);
                    self.ack(&mut st, attempt);
                }
            }
            AdmissionAction::Submit { attempt } => self.submit(&mut st, attempt),
            AdmissionAction::SubmitFails { attempt } => self.submit_fails(&mut st, attempt),
            AdmissionAction::Spawn { attempt } => self.spawn(&mut st, attempt),
            AdmissionAction::Ack { attempt } => self.ack(&mut st, attempt),
            AdmissionAction::Watch { hold } => {
                let now = st.now;
                self.watch(&mut st, hold, now)
            }
            AdmissionAction::Timeout { hold } => {
                let at = match self.cfg.variant {
                    // BUG: the deadline is read at the present, never past it.
                    Variant::DeadlineNeverPasses => st.now,
                    _ => DETACH_TIMEOUT_MILLIS,
                };
                self.watch(&mut st, hold, at)
            }
            AdmissionAction::Finish { turn } => self.end_turn(&mut st, turn, TurnEnd::Completed),
            AdmissionAction::Tick => self.tick(&mut st),
            AdmissionAction::Shutdown => {
                if let Some(serve) = st.serve.as_mut() {
                    serve.admission.begin_shutdown();
                }
                st.phase = Phase::ShuttingDown;
            }
            AdmissionAction::Drain => self.drain(&mut st),
            AdmissionAction::Crash => self.crash(&mut st),
            AdmissionAction::Restart => self.restart(&mut st),
        }
        st
    }

    fn may_restart(&self, st: &AdmissionState) -> bool {
        st.starts <= self.cfg.restarts
    }

    /// Every action enabled in `st` except the environment's `Shutdown` and `Crash` (a runtime
    /// where only those remain is at rest).
    fn work_actions(&self, st: &AdmissionState, actions: &mut Vec<AdmissionAction>) {
        if let Some(serve) = &st.serve {
            for (event, spec) in self.cfg.events.iter().enumerate() {
                let delivered = st
                    .attempts
                    .iter()
                    .filter(|a| a.event as usize == event)
                    .count();
                if delivered < spec.deliveries as usize {
                    actions.push(AdmissionAction::Deliver { event: event as u8 });
                }
            }
            for f in &serve.inflight {
                let attempt = f.attempt;
                match (f.turn, &f.handoff) {
                    (None, _) => {
                        actions.push(AdmissionAction::Submit { attempt });
                        if self.cfg.submit_failures {
                            actions.push(AdmissionAction::SubmitFails { attempt });
                        }
                    }
                    (Some(_), Some(_)) => actions.push(AdmissionAction::Spawn { attempt }),
                    (Some(_), None) => actions.push(AdmissionAction::Ack { attempt }),
                }
            }
            for w in &serve.watched {
                let t = &st.turns[w.turn as usize];
                if t.end.is_some() {
                    actions.push(AdmissionAction::Watch { hold: w.hold });
                } else if self.cfg.timeouts
                    && self.row(st, w.turn) == Row::Running
                    && !w.deadline.timing_out
                {
                    actions.push(AdmissionAction::Timeout { hold: w.hold });
                }
            }
            if st.phase == Phase::ShuttingDown && serve.inflight.is_empty() {
                actions.push(AdmissionAction::Drain);
            }
        } else if self.may_restart(st) {
            actions.push(AdmissionAction::Restart);
        }
        for turn in 0..st.turns.len() as u8 {
            if st.turns[turn as usize].end.is_none() && self.row(st, turn) == Row::Running {
                actions.push(AdmissionAction::Finish { turn });
            }
        }
        let waiting_on_clock = st
            .queue
            .entries
            .iter()
            .any(|e| matches!(e.state, RowState::Parked) && e.ready_at_millis > st.now);
        if waiting_on_clock {
            actions.push(AdmissionAction::Tick);
        }
    }

    /// No action can happen any more except beginning shutdown or a crash (at rest).
    pub fn quiescent(&self, st: &AdmissionState) -> bool {
        let mut actions = Vec::new();
        self.work_actions(st, &mut actions);
        actions.is_empty()
    }
}

fn identity_of(event: u8) -> EventIdentity {
    EventIdentity(format!("ev{event}"))
}

fn tenant_of(tenant: u8) -> Tenant {
    Tenant::new("platform", format!("t{tenant}"))
}

/// Serve start `start`'s process.
fn serve_identity(start: u8) -> ProcessIdentity {
    ProcessIdentity {
        pid: 100 + u32::from(start),
        start_time_micros: 1,
    }
}

/// The runner of turn `turn` (a turn gets one runner: runners do not die in this model).
fn runner_identity(turn: u8) -> ProcessIdentity {
    ProcessIdentity {
        pid: 1000 + u32::from(turn),
        start_time_micros: 1,
    }
}

/// The process group leader of turn `turn`'s work.
fn leader_identity(turn: u8) -> ProcessIdentity {
    ProcessIdentity {
        pid: 2000 + u32::from(turn),
        start_time_micros: 1,
    }
}

/// The debounce waker (`tollgate worker wake`), a process of its own.
const WAKER: ProcessIdentity = ProcessIdentity {
    pid: 50,
    start_time_micros: 1,
};

/// The model turn index of a queue key (see [`AdmissionModel::key_of`]).
fn turn_of(key: &TurnKey) -> u8 {
    u8::try_from(key.turn.saturating_sub(1)).unwrap_or(u8::MAX)
}

fn serve_start_of(identity: &ProcessIdentity) -> Option<u8> {
    identity
        .pid
        .checked_sub(100)
        .and_then(|s| u8::try_from(s).ok())
        .filter(|_| identity.pid < 1000)
}

/// The row of `key` as the properties see it.
fn row_of(queue: &QueueState, key: &TurnKey) -> Row {
    let Some(entry) = queue.row(key) else {
        return Row::Gone;
    };
    if queue.runners.iter().any(|r| &r.key == key) {
        return Row::Running;
    }
    match (&entry.state, &entry.slot_reservation) {
        (_, Some(r)) if r.child.is_none() => match serve_start_of(&r.reserver) {
            Some(by) => Row::Reserved { by },
            None => Row::Starting,
        },
        (_, Some(_)) => Row::Starting,
        (RowState::Parked | RowState::Waiting { .. }, None) => Row::Waiting,
        (RowState::Dispatching { .. }, None) => Row::Starting,
    }
}

/// Who is alive, as the core's steps ask: the running serve, the runners of turns whose work
/// started and has not ended, and the acting process itself.
struct Live {
    live: Vec<ProcessIdentity>,
}

impl Live {
    fn of(st: &AdmissionState, acting: &[ProcessIdentity]) -> Self {
        let mut live: Vec<ProcessIdentity> = acting.to_vec();
        if st.serve.is_some() {
            live.push(serve_identity(st.starts));
        }
        live.extend(
            st.turns
                .iter()
                .enumerate()
                .filter(|(_, t)| t.ran && t.end.is_none())
                .map(|(i, _)| runner_identity(i as u8)),
        );
        Live { live }
    }
}

impl Liveness for Live {
    fn observe(&self, identity: &ProcessIdentity) -> Observation {
        if self.live.contains(identity) {
            Observation::Matching
        } else {
            Observation::Gone
        }
    }

    /// A work lives exactly as long as its runner here (runners do not die in this model).
    fn observe_work(&self, work: &WorkRecord) -> Observation {
        self.observe(&work.runner)
    }
}

/// Counts a settle's effect on hold `hold` (a refused settle is counted too: serve asked to
/// release twice).
fn count_release(st: &mut AdmissionState, hold: u8, settled: Settled) {
    let h = &mut st.holds[hold as usize];
    match settled {
        Settled::Released { .. } => h.releases += 1,
        Settled::AlreadyEnded => h.refused_settles += 1,
    }
}

/// Performs a settle's effect: the outcome recorded with the release.
fn record_settle(st: &mut AdmissionState, hold: u8, settled: Settled, outcome: Outcome) {
    count_release(st, hold, settled);
    if let Settled::Released { .. } = settled {
        st.holds[hold as usize].outcome = Some(outcome);
    }
}

/// Broken copy of `admit_and_mark` (variant `MarkBeforeAdmit`): probes dedupe by marking, then
/// asks the ledger.
fn mark_then_admit(admission: &mut Admission, delivery: &Delivery, now_millis: u64) -> Admit {
    if !admission
        .dedupe
        .mark_if_absent(&delivery.identity, now_millis, DEDUPE_TTL_MILLIS)
    {
        return Admit::Duplicate;
    }
    match admission.ledger.admit(&delivery.tenant, delivery.dispatch) {
        Ok(id) => Admit::Admitted { id },
        Err(reason) => Admit::Refused { reason },
    }
}

/// Broken submit for debounce (variant `UnboundedDebounce`): production's submit step, after
/// which the waiters it superseded are put back in the queue, parked, instead of ending.
fn submit_keeping_every_waiter<L: Liveness>(
    queue: &mut QueueState,
    input: SubmitInput<'_, L>,
) -> Result<SubmitDecision, SlotError> {
    let (key, me, now_millis) = (input.key, input.me, input.now_millis);
    let mut decision = steps::submit(queue, input)?;
    let ready_at_millis = queue.row(key).map_or(0, |e| e.ready_at_millis);
    for old in decision.superseded.drain(..) {
        enqueue(queue, &old, me, now_millis)?;
        park(queue, &old)?;
        set_ready_at(queue, &old, ready_at_millis)?;
    }
    Ok(decision)
}

// ---------------------------------------------------------------------------------------------
// Properties. Names match spec/invariants.md (the A table).
// ---------------------------------------------------------------------------------------------

pub mod names {
    pub const A1: &str = "A1 bounded retention";
    pub const A2: &str = "A2 honest rejection";
    pub const A3: &str = "A3 no silent loss";
    pub const A4: &str = "A4 one parked waiter";
    pub const A5: &str = "A5 capacity only at terminal outcome";

    pub const AT_REST: &str = "at rest after admitting work";
    pub const RETRY_ADMITTED: &str = "a rejected delivery's retry is admitted";
    pub const DUPLICATE_CONVERGES: &str = "a rejected duplicate converges to the duplicate answer";
    pub const TENANT_CEILING: &str = "a delivery is refused at its tenant's ceiling";
    pub const HANDED_OFF: &str = "shutdown hands off retained work";
    pub const SUPERSEDED: &str = "a parked waiter is superseded";
    pub const DROPPED: &str = "drop: an arrival at a busy scope is dropped";
    pub const DEBOUNCE_START: &str = "debounce: a waiter starts after the quiet period";
    pub const LINE_START: &str = "concurrent: the head of the line starts";
    pub const RECOVERED: &str = "a restarted serve recovers a row a dead serve reserved";
    pub const WITHDRAWN_RETRY: &str = "a withdrawn delivery's retry is admitted";
    pub const TIMED_OUT: &str = "a delivery past its deadline ends timed-out";
}

fn current_ledger(st: &AdmissionState) -> Option<&tollgate_core::admission::Ledger> {
    st.serve.as_ref().map(|s| &s.admission.ledger)
}

fn a1_bounded_retention(model: &AdmissionModel, st: &AdmissionState) -> bool {
    let Some(ledger) = current_ledger(st) else {
        return true;
    };
    if ledger.retained() > model.cfg.max_detached {
        return false;
    }
    let ceiling = model.cfg.max_detached_per_tenant;
    if ceiling > 0
        && model
            .cfg
            .events
            .iter()
            .any(|e| ledger.retained_by(&tenant_of(e.tenant)) > ceiling)
    {
        return false;
    }
    // Every queue row (what the scopes retain) is a turn held by this serve's ledger.
    st.queue.entries.iter().all(|e| {
        let turn = Some(turn_of(&e.key));
        st.holds
            .iter()
            .any(|h| h.start == st.starts && h.turn == turn && ledger.is_held(h.id))
    })
}

fn a2_honest_rejection(_: &AdmissionModel, st: &AdmissionState) -> bool {
    st.attempts.iter().enumerate().all(|(i, a)| match a.answer {
        Answer::Rejected(_) => {
            !a.acked && !a.marked && a.outcome == Some(Outcome::AdmissionRejected)
        }
        Answer::Withdrawn | Answer::InFlight => !a.acked,
        // Only an identity an admitted, not withdrawn delivery marked answers as a duplicate:
        // a retry is never deduped away by a delivery that was refused or withdrawn.
        Answer::Duplicate => st.attempts[..i]
            .iter()
            .any(|b| b.event == a.event && matches!(b.answer, Answer::Accepted { .. })),
        Answer::Accepted { .. } => true,
    })
}

/// Whether an acknowledged event's work is accounted for: its turn ran and ended, or its
/// strategy ended it without running (dropped, superseded).
fn event_done(st: &AdmissionState, event: u8) -> bool {
    st.turns.iter().any(|t| {
        t.event == event
            && match t.end {
                Some(TurnEnd::Dropped) | Some(TurnEnd::Superseded) => true,
                Some(_) => t.ran,
                None => false,
            }
    })
}

fn a3_no_silent_loss(model: &AdmissionModel, st: &AdmissionState) -> bool {
    if !model.quiescent(st) {
        return true;
    }
    // Every admission of a serve that did not crash has its outcome, and the ledger is empty.
    let settled = st
        .holds
        .iter()
        .all(|h| h.lost_in_crash || h.outcome.is_some())
        && current_ledger(st).is_none_or_empty();
    // Across serve crashes: every acknowledged delivery ran (or its strategy ended it).
    let ran = st
        .attempts
        .iter()
        .filter(|a| a.acked && !matches!(a.answer, Answer::Rejected(_)))
        .all(|a| event_done(st, a.event));
    settled && ran
}

trait LedgerEmpty {
    fn is_none_or_empty(&self) -> bool;
}

impl LedgerEmpty for Option<&tollgate_core::admission::Ledger> {
    fn is_none_or_empty(&self) -> bool {
        match self {
            Some(ledger) => ledger.held().is_empty(),
            None => true,
        }
    }
}

fn a4_one_parked_waiter(model: &AdmissionModel, st: &AdmissionState) -> bool {
    model.cfg.scopes.iter().enumerate().all(|(i, strategy)| {
        let task = format!("s{i}");
        let waiting = st
            .queue
            .entries
            .iter()
            .filter(|e| e.key.task == task && matches!(e.state, RowState::Parked))
            .count();
        !matches!(strategy, Strategy::Queue | Strategy::Debounce { .. }) || waiting <= 1
    })
}

fn a5_capacity_at_outcome(_: &AdmissionModel, st: &AdmissionState) -> bool {
    let ledger = current_ledger(st);
    st.holds.iter().all(|h| {
        let settled = h.outcome.is_some();
        let held_now = match ledger {
            Some(ledger) if h.start == st.starts => ledger.is_held(h.id),
            _ => false,
        };
        let live = h.start == st.starts && st.serve.is_some();
        h.refused_settles == 0 && h.releases == u8::from(settled) && (!live || held_now != settled)
    })
}

/// For some event: an answer matching `first`, later one matching `second`, later (when given)
/// one matching `third`.
fn event_saw(st: &AdmissionState, steps: &[fn(&Answer) -> bool]) -> bool {
    let events = st
        .attempts
        .iter()
        .map(|a| a.event)
        .max()
        .map_or(0, |m| m + 1);
    (0..events).any(|event| {
        let mut want = steps.iter();
        let mut next = want.next();
        for a in st.attempts.iter().filter(|a| a.event == event) {
            if let Some(step) = next {
                if step(&a.answer) {
                    next = want.next();
                }
            }
        }
        next.is_none()
    })
}

/// A3 is not vacuous: some quiescent state follows admitted work.
fn at_rest(model: &AdmissionModel, st: &AdmissionState) -> bool {
    !st.holds.is_empty() && model.quiescent(st)
}

fn is_rejected(a: &Answer) -> bool {
    matches!(a, Answer::Rejected(_))
}
fn is_accepted(a: &Answer) -> bool {
    matches!(a, Answer::Accepted { .. })
}
fn is_duplicate(a: &Answer) -> bool {
    matches!(a, Answer::Duplicate)
}
fn is_withdrawn(a: &Answer) -> bool {
    matches!(a, Answer::Withdrawn)
}

fn retry_admitted(_: &AdmissionModel, st: &AdmissionState) -> bool {
    event_saw(st, &[is_rejected, is_accepted])
}

fn duplicate_converges(_: &AdmissionModel, st: &AdmissionState) -> bool {
    event_saw(st, &[is_accepted, is_rejected, is_duplicate])
}

fn withdrawn_retry(_: &AdmissionModel, st: &AdmissionState) -> bool {
    event_saw(st, &[is_withdrawn, is_accepted])
}

fn tenant_ceiling(_: &AdmissionModel, st: &AdmissionState) -> bool {
    st.attempts
        .iter()
        .any(|a| a.answer == Answer::Rejected(RejectReason::TenantAtCapacity))
}

fn outcome_seen(st: &AdmissionState, outcome: Outcome) -> bool {
    st.holds.iter().any(|h| h.outcome == Some(outcome))
}

fn handed_off(_: &AdmissionModel, st: &AdmissionState) -> bool {
    outcome_seen(st, Outcome::HandedOffAtShutdown)
}

fn superseded(_: &AdmissionModel, st: &AdmissionState) -> bool {
    outcome_seen(st, Outcome::Superseded)
}

fn dropped(_: &AdmissionModel, st: &AdmissionState) -> bool {
    outcome_seen(st, Outcome::Dropped)
}

fn timed_out(_: &AdmissionModel, st: &AdmissionState) -> bool {
    outcome_seen(st, Outcome::TimedOut)
}

fn debounce_start(_: &AdmissionModel, st: &AdmissionState) -> bool {
    st.events & event::DEBOUNCE_START != 0
}

fn line_start(_: &AdmissionModel, st: &AdmissionState) -> bool {
    st.events & event::LINE_START != 0
}

fn recovered(_: &AdmissionModel, st: &AdmissionState) -> bool {
    st.events & event::RECOVERED != 0
}

impl Model for AdmissionModel {
    type State = AdmissionState;
    type Action = AdmissionAction;

    fn init_states(&self) -> Vec<AdmissionState> {
        vec![self.initial_state()]
    }

    fn actions(&self, st: &AdmissionState, actions: &mut Vec<AdmissionAction>) {
        self.work_actions(st, actions);
        if self.cfg.shutdown && st.phase == Phase::Open {
            actions.push(AdmissionAction::Shutdown);
        }
        if st.serve.is_some() && self.may_restart(st) {
            actions.push(AdmissionAction::Crash);
        }
    }

    fn next_state(&self, last: &AdmissionState, action: AdmissionAction) -> Option<AdmissionState> {
        Some(self.apply(last, action))
    }

    fn format_action(&self, action: &AdmissionAction) -> String {
        match action {
            AdmissionAction::Deliver { event } => {
                let e = self.cfg.events[*event as usize];
                format!(
                    "Deliver(ev{event}, tenant t{}, scope s{})",
                    e.tenant, e.scope
                )
            }
            other => format!("{other:?}"),
        }
    }

    /// The `A` invariants always; the `sometimes` properties that this configuration can reach
    /// (a strategy's distinctive outcome only where a scope has that strategy).
    fn properties(&self) -> Vec<Property<Self>> {
        let mut props = vec![
            Property::always(names::A1, a1_bounded_retention),
            Property::always(names::A2, a2_honest_rejection),
            Property::always(names::A3, a3_no_silent_loss),
            Property::always(names::A4, a4_one_parked_waiter),
            Property::always(names::A5, a5_capacity_at_outcome),
            Property::sometimes(names::AT_REST, at_rest),
        ];
        let cap_bites =
            self.cfg.events.len() > self.cfg.max_detached || self.cfg.max_detached_per_tenant > 0;
        if cap_bites {
            props.push(Property::sometimes(names::RETRY_ADMITTED, retry_admitted));
        }
        if cap_bites && self.cfg.events.iter().any(|e| e.deliveries >= 3) {
            props.push(Property::sometimes(
                names::DUPLICATE_CONVERGES,
                duplicate_converges,
            ));
        }
        if self.cfg.max_detached_per_tenant > 0 {
            props.push(Property::sometimes(names::TENANT_CEILING, tenant_ceiling));
        }
        if self.cfg.shutdown {
            props.push(Property::sometimes(names::HANDED_OFF, handed_off));
        }
        // Debounce never starts a turn on arrival (its waker does), so only another strategy
        // leaves a row reserved by serve.
        if self.cfg.restarts > 0
            && self
                .cfg
                .has_strategy(|s| !matches!(s, Strategy::Debounce { .. }))
        {
            props.push(Property::sometimes(names::RECOVERED, recovered));
        }
        if self.cfg.submit_failures && self.cfg.events.iter().any(|e| e.deliveries >= 2) {
            props.push(Property::sometimes(names::WITHDRAWN_RETRY, withdrawn_retry));
        }
        if self.cfg.timeouts {
            props.push(Property::sometimes(names::TIMED_OUT, timed_out));
        }
        // Debounce supersedes a parked waiter with two retained; queue parks only behind running
        // work, so it needs three (or an uncapped sync delivery).
        let queue_supersedes = self.cfg.max_detached >= 3
            || self.cfg.events.iter().any(|e| e.dispatch == Dispatch::Sync);
        if self
            .cfg
            .has_strategy(|s| matches!(s, Strategy::Debounce { .. }))
            || (queue_supersedes && self.cfg.has_strategy(|s| matches!(s, Strategy::Queue)))
        {
            props.push(Property::sometimes(names::SUPERSEDED, superseded));
        }
        if self.cfg.has_strategy(|s| matches!(s, Strategy::Drop)) {
            props.push(Property::sometimes(names::DROPPED, dropped));
        }
        if self
            .cfg
            .has_strategy(|s| matches!(s, Strategy::Debounce { .. }))
        {
            props.push(Property::sometimes(names::DEBOUNCE_START, debounce_start));
        }
        // A line needs two retained deliveries in one scope.
        if self.cfg.max_detached >= 2
            && self
                .cfg
                .has_strategy(|s| matches!(s, Strategy::Concurrent { .. }))
        {
            props.push(Property::sometimes(names::LINE_START, line_start));
        }
        props
    }
}

/// A readable trail of a checker path (as `Path::into_vec` gives it: each state with the action
/// taken from it): the state's ledger, scopes and answers, then the action.
pub fn describe(
    model: &AdmissionModel,
    path: &[(AdmissionState, Option<AdmissionAction>)],
) -> String {
    let mut out = String::new();
    for (state, action) in path {
        out.push_str(&format!("    {}\n", summarize(model, state)));
        if let Some(action) = action {
            out.push_str(&format!("  -> {}\n", model.format_action(action)));
        }
    }
    out
}

/// One line: clock, serve, held ids, turns (scope, row, ran, end), answers.
pub fn summarize(model: &AdmissionModel, st: &AdmissionState) -> String {
    let held: Vec<String> = current_ledger(st)
        .map(|l| l.held().iter().map(|id| id.to_string()).collect())
        .unwrap_or_default();
    let turns: Vec<String> = st
        .turns
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let end = t.end.map(|e| format!("={e:?}")).unwrap_or_default();
            let key = TurnKey::new(
                format!("s{}", model.cfg.events[t.event as usize].scope),
                i as u32 + 1,
            );
            format!(
                "T{i}:ev{}:{}:{:?}{}{end}",
                t.event,
                key.task,
                row_of(&st.queue, &key),
                if t.ran { "+ran" } else { "" }
            )
        })
        .collect();
    let answers: Vec<String> = st
        .attempts
        .iter()
        .map(|a| {
            let answer = match a.answer {
                Answer::Rejected(r) => format!("rejected({r:?})"),
                Answer::Accepted { hold } => {
                    let h = &st.holds[hold as usize];
                    let outcome = h.outcome.map(|o| format!("={o}")).unwrap_or_default();
                    format!("#{}/{}{outcome}", h.start, h.id)
                }
                Answer::Duplicate => "duplicate".to_string(),
                Answer::Withdrawn => "withdrawn".to_string(),
                Answer::InFlight => "in-flight".to_string(),
            };
            format!(
                "ev{}:{answer}{}{}",
                a.event,
                if a.acked { "+ack" } else { "" },
                if a.marked { "+mark" } else { "" }
            )
        })
        .collect();
    format!(
        "t={} serve#{} {:?} held [{}] | turns {} | {}",
        st.now,
        st.starts,
        st.phase,
        held.join(","),
        turns.join(" "),
        answers.join(" ")
    )
}
