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
//! - **Submit(delivery)**: the delivery's part of serve's group commit, one transaction under the
//!   queue lock: the mark step production's group commit calls ([`TableMarks::mark`] on the mark
//!   table's rows, judged at the delivery's arrival; a live stored mark answers it as a
//!   duplicate and queues nothing), then the slot step production's
//!   submit runs ([`steps::submit`] on the model's real [`QueueState`], with the scope's strategy):
//!   a start reserves the row for this serve, a superseded waiter's turn ends, a dropped turn ends;
//!   the mark the step returned is written with the turn.
//!   Then [`Admission::made_durable`]: until here a
//!   redelivery of the identity is told to retry (`InFlight`), never answered as a duplicate. **SubmitFails(delivery)** (when the configuration
//!   allows it): the turn could not be created, [`Admission::withdraw`], answered 503.
//! - **Spawn(delivery)**: serve's driver performs the submit's [`Handoff`]: the runner is spawned,
//!   the two publishes ([`steps::handoff_publish_first`], [`steps::handoff_publish_second`]) land,
//!   and the runner's take-over ([`steps::runner_take_over`]) starts the turn's work.
//! - **Ack(delivery)**: the 200; the delivery is watched (a `drop`
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
//!   turn records, the mark table and the hand-off file stay). **Restart**: a new serve:
//!   [`Admission::restore_mark`] for each live mark of the table, [`Admission::readopt`] for every turn still
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
//!
//! Layout, one module per job: [`config`] (sizes, strategies, faults, the variant), [`state`]
//! (answers, holds, turns, the queue, serve's memory, the actions), `world` (the identities of
//! events, tenants and processes, and who is alive), `accept` (the accept sequence's sections),
//! `runners` (handoff, reconcile, watcher, cancel and finish), `lifecycle` (drain, crash,
//! restart), `enabled` (which actions a state enables), `actions` (the stateright `Model`),
//! [`properties`] (A1-A6 and the examples), `broken` (the teeth's broken step copies) and
//! [`render`] (counterexample trails).

mod accept;
mod actions;
mod broken;
pub mod config;
mod enabled;
mod lifecycle;
pub mod properties;
pub mod render;
mod runners;
pub mod state;
mod world;

use crate::slots::state::token_from_counter;
pub use config::{
    AdmissionConfig, EventSpec, Variant, DEDUPE_TTL_MILLIS, DETACH_TIMEOUT_MILLIS, WORKERS,
};
pub use properties::names;
pub use render::{describe, summarize};
pub use state::{
    event, AdmissionAction, AdmissionState, Answer, Attempt, Hold, InFlight, Phase, Row, ServeMem,
    Turn, Watching,
};
use std::collections::BTreeMap;
use tollgate_core::admission::{Admission, Limits, Strategy};
use tollgate_core::slots::{QueueState, TurnKey};
use world::row_of;

/// The model: a configuration; the state is [`AdmissionState`].
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
            marks: Vec::new(),
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

    /// The row of `turn` as the properties see it.
    pub fn row(&self, st: &AdmissionState, turn: u8) -> Row {
        row_of(&st.queue, &self.key_of(st, turn))
    }

    fn inflight(st: &AdmissionState, attempt: u8) -> Option<InFlight> {
        st.serve
            .as_ref()?
            .inflight
            .iter()
            .find(|f| f.attempt == attempt)
            .cloned()
    }
}
