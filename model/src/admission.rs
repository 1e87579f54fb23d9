//! The admission model: every interleaving of platform deliveries (first deliveries, retries of
//! rejected ones, redeliveries of accepted ones), completions of running work, a model clock for
//! debounce, and shutdown with its drain, driven through the production admission core
//! (`core/src/admission`).
//!
//! The model owns only what production gets from the world: which events the platform still
//! delivers, a clock, and a record of what the ingress answered each delivery (acknowledged or
//! not, marked as seen or not, its terminal outcome, how often its capacity was released). Every
//! decision (admit or refuse, mark, what a scope does with an arrival, what starts when work ends)
//! is a call into the core. One action of the model is one critical section of the ingress:
//!
//! - **Deliver(event)**: the platform delivers `event` once more (its first delivery, a retry after
//!   a rejection, or a redelivery of an accepted event). The ingress calls [`decide_delivery`]
//!   (admit, then mark). `Rejected` is answered with the overload signal: no ack, no mark, outcome
//!   admission-rejected. `Duplicate` is answered as a duplicate. `Accepted` is acknowledged, then
//!   handed to its scope with [`Scope::arrive`]: `Start` runs it, `Park`/`LineUp` retain it, a
//!   superseded waiter and a dropped arrival settle at once ([`Ledger::settle`]).
//! - **Complete(scope, id)**: a running item ends: outcome completed, settle, then
//!   [`Scope::finish`] starts what may start.
//! - **Tick**: the clock advances by one millisecond (only while some waiter's deadline lies
//!   ahead, which bounds the clock), then [`Scope::start_due`] on every scope.
//! - **Shutdown**: [`Ledger::begin_shutdown`]; later deliveries are refused. Work still runs.
//! - **Drain**: everything still held settles as handed-off-at-shutdown and the scopes are emptied
//!   (the shell records those turns for the next instance).
//!
//! Not modelled: dedupe expiry and eviction (the TTL outlives the model), failures and timeouts
//! of running work (they settle through the same path as completion), byte sizes.

use stateright::{Model, Property};
use std::fmt;
use tollgate_core::admission::{
    decide_delivery, Arrival, Dedupe, DeliveryDecision, DeliveryId, Dispatch, EventIdentity,
    Ledger, Limits, Outcome, RejectReason, Scope, Strategy, Tenant,
};

/// How long a mark lasts: longer than any model run, so expiry never plays a part.
pub const DEDUPE_TTL_MILLIS: u64 = 1_000_000;

/// Which ingress the model drives: production, or one deliberately broken variant (the teeth).
///
/// Each variant replaces exactly one function of the ingress with a model-local copy; the broken
/// copies live here, never in `src/`. `tests/model_admission.rs` expects the checker to reject
/// each with a counterexample for the property it breaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Variant {
    /// The production core, unchanged.
    Production,
    /// The delivery decision marks the identity first and admits second: a rejected delivery is
    /// marked, so its retry is deduped away (breaks A2).
    MarkBeforeAdmit,
    /// The acknowledgement releases the delivery's capacity while its work is still retained
    /// (breaks A5, and A1's "a scope retains only held work").
    ReleaseAtAck,
    /// At the cap the ingress acknowledges the delivery and drops it instead of refusing it
    /// honestly (breaks A2).
    AckAndDropAtCap,
    /// Debounce keeps every waiter instead of superseding the parked one (breaks A4).
    UnboundedDebounce,
    /// The shutdown drain hands off only running work and forgets the waiters it empties out
    /// of the scopes (breaks A3).
    DrainRunningOnly,
}

impl Variant {
    pub const BROKEN: [Variant; 5] = [
        Variant::MarkBeforeAdmit,
        Variant::ReleaseAtAck,
        Variant::AckAndDropAtCap,
        Variant::UnboundedDebounce,
        Variant::DrainRunningOnly,
    ];

    /// The properties the checker must find violated for this variant (empty for production).
    pub fn breaks(self) -> &'static [&'static str] {
        match self {
            Variant::Production => &[],
            Variant::MarkBeforeAdmit | Variant::AckAndDropAtCap => &[names::A2],
            // The released work is still retained by its scope, so A1 falls with A5.
            Variant::ReleaseAtAck => &[names::A5, names::A1],
            Variant::UnboundedDebounce => &[names::A4],
            Variant::DrainRunningOnly => &[names::A3],
        }
    }
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
            "max {} per-tenant {} scopes [{}] events [{}]{} {:?}",
            self.max_detached,
            self.max_detached_per_tenant,
            scopes.join(", "),
            events.join(" "),
            if self.shutdown { " +shutdown" } else { "" },
            self.variant
        )
    }
}

/// What the ingress answered one delivery.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Answer {
    Rejected(RejectReason),
    Accepted(DeliveryId),
    Duplicate,
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
    /// The terminal outcome recorded for it.
    pub outcome: Option<Outcome>,
    /// Successful `Ledger::settle` calls for its id.
    pub releases: u8,
    /// `Ledger::settle` calls for its id that the core refused (already released).
    pub refused_settles: u8,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    Open,
    /// `begin_shutdown` ran; the drain has not.
    ShuttingDown,
    Drained,
}

/// Things that happened along the path, for the `sometimes` properties that a state's records
/// cannot show.
pub mod event {
    pub const DEBOUNCE_START: u8 = 1;
    pub const LINE_START: u8 = 2;
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct AdmissionState {
    pub ledger: Ledger,
    pub dedupe: Dedupe,
    pub scopes: Vec<Scope<DeliveryId>>,
    pub now: u64,
    pub phase: Phase,
    pub attempts: Vec<Attempt>,
    pub events: u8,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AdmissionAction {
    Deliver { event: u8 },
    Complete { scope: u8, id: DeliveryId },
    Tick,
    Shutdown,
    Drain,
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
            ledger: Ledger::new(self.cfg.limits()),
            dedupe: Dedupe::new(),
            scopes: vec![Scope::default(); self.cfg.scopes.len()],
            now: 0,
            phase: Phase::Open,
            attempts: Vec::new(),
            events: 0,
        }
    }

    fn deliver(&self, st: &mut AdmissionState, event: u8) {
        let spec = self.cfg.events[event as usize];
        let identity = identity_of(event);
        let tenant = tenant_of(spec.tenant);
        let marked_before = st.dedupe.contains(&identity, st.now);
        let decision = match self.cfg.variant {
            Variant::MarkBeforeAdmit => mark_then_admit(
                &mut st.ledger,
                &mut st.dedupe,
                &tenant,
                &identity,
                spec.dispatch,
                st.now,
                DEDUPE_TTL_MILLIS,
            ),
            _ => decide_delivery(
                &mut st.ledger,
                &mut st.dedupe,
                &tenant,
                &identity,
                spec.dispatch,
                st.now,
                DEDUPE_TTL_MILLIS,
            ),
        };
        let marked = !marked_before && st.dedupe.contains(&identity, st.now);
        let mut attempt = Attempt {
            event,
            answer: Answer::Duplicate,
            acked: false,
            marked,
            outcome: None,
            releases: 0,
            refused_settles: 0,
        };
        match decision {
            DeliveryDecision::Rejected { reason } => {
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
                st.attempts.push(attempt);
            }
            DeliveryDecision::Duplicate => {
                attempt.acked = true;
                st.attempts.push(attempt);
            }
            DeliveryDecision::Accepted { id } => {
                attempt.answer = Answer::Accepted(id);
                st.attempts.push(attempt);
                self.acknowledge(st, id);
                let scope = spec.scope as usize;
                let strategy = self.cfg.scopes[scope];
                let arrival = match (self.cfg.variant, strategy) {
                    (Variant::UnboundedDebounce, Strategy::Debounce { quiet_millis }) => {
                        debounce_keeping_every_waiter(
                            &mut st.scopes[scope],
                            quiet_millis,
                            id,
                            st.now,
                        )
                    }
                    _ => st.scopes[scope].arrive(strategy, id, st.now),
                };
                match arrival {
                    Arrival::Start(_) | Arrival::LineUp(_) => {}
                    Arrival::Park { superseded, .. } => {
                        if let Some(old) = superseded {
                            self.settle(st, old, Outcome::Superseded);
                        }
                    }
                    Arrival::Dropped { dropped, .. } => self.settle(st, dropped, Outcome::Dropped),
                }
            }
        }
    }

    /// The acknowledgement of an accepted delivery (the platform's 2xx).
    fn acknowledge(&self, st: &mut AdmissionState, id: DeliveryId) {
        if let Some(a) = attempt_mut(st, id) {
            a.acked = true;
        }
        if self.cfg.variant == Variant::ReleaseAtAck {
            // The broken acknowledgement: capacity back while the work is still to be done.
            release(st, id);
        }
    }

    /// Records `outcome` as the terminal outcome of `id`, then releases its capacity.
    fn settle(&self, st: &mut AdmissionState, id: DeliveryId, outcome: Outcome) {
        if let Some(a) = attempt_mut(st, id) {
            a.outcome = Some(outcome);
        }
        release(st, id);
    }

    fn complete(&self, st: &mut AdmissionState, scope: usize, id: DeliveryId) {
        self.settle(st, id, Outcome::Completed);
        let strategy = self.cfg.scopes[scope];
        let had_line = !st.scopes[scope].line.is_empty();
        let started = st.scopes[scope].finish(strategy, &id, st.now);
        note_starts(st, strategy, &started, had_line);
    }

    fn tick(&self, st: &mut AdmissionState) {
        st.now += 1;
        for (scope, strategy) in self.cfg.scopes.iter().enumerate() {
            let had_line = !st.scopes[scope].line.is_empty();
            let started = st.scopes[scope].start_due(*strategy, st.now);
            note_starts(st, *strategy, &started, had_line);
        }
    }

    fn drain(&self, st: &mut AdmissionState) {
        let held = match self.cfg.variant {
            // The broken drain: only what runs is handed off.
            Variant::DrainRunningOnly => st.scopes.iter().flat_map(|s| s.running.clone()).collect(),
            _ => st.ledger.held(),
        };
        for id in held {
            self.settle(st, id, Outcome::HandedOffAtShutdown);
        }
        for scope in st.scopes.iter_mut() {
            *scope = Scope::default();
        }
        st.phase = Phase::Drained;
    }

    fn apply(&self, last: &AdmissionState, action: AdmissionAction) -> AdmissionState {
        let mut st = last.clone();
        match action {
            AdmissionAction::Deliver { event } => self.deliver(&mut st, event),
            AdmissionAction::Complete { scope, id } => self.complete(&mut st, scope as usize, id),
            AdmissionAction::Tick => self.tick(&mut st),
            AdmissionAction::Shutdown => {
                st.ledger.begin_shutdown();
                st.phase = Phase::ShuttingDown;
            }
            AdmissionAction::Drain => self.drain(&mut st),
        }
        st
    }

    /// Every action enabled in `st` except `Shutdown` (which the environment may always choose
    /// while the runtime is open; an idle runtime that is not shut down is at rest).
    fn work_actions(&self, st: &AdmissionState, actions: &mut Vec<AdmissionAction>) {
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
        for (scope, s) in st.scopes.iter().enumerate() {
            for id in &s.running {
                actions.push(AdmissionAction::Complete {
                    scope: scope as u8,
                    id: *id,
                });
            }
        }
        let waiting_on_clock = st
            .scopes
            .iter()
            .any(|s| s.parked.as_ref().is_some_and(|(_, at)| *at > st.now));
        if waiting_on_clock {
            actions.push(AdmissionAction::Tick);
        }
        if st.phase == Phase::ShuttingDown {
            actions.push(AdmissionAction::Drain);
        }
    }

    /// No action can happen any more except beginning shutdown (the runtime is at rest).
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

fn attempt_mut(st: &mut AdmissionState, id: DeliveryId) -> Option<&mut Attempt> {
    st.attempts
        .iter_mut()
        .find(|a| a.answer == Answer::Accepted(id))
}

/// `Ledger::settle`, counted per delivery (a refused settle is counted too: the ingress asked to
/// release twice).
fn release(st: &mut AdmissionState, id: DeliveryId) {
    let released = st.ledger.settle(id).is_ok();
    if let Some(a) = attempt_mut(st, id) {
        if released {
            a.releases += 1;
        } else {
            a.refused_settles += 1;
        }
    }
}

fn note_starts(
    st: &mut AdmissionState,
    strategy: Strategy,
    started: &[DeliveryId],
    had_line: bool,
) {
    if started.is_empty() {
        return;
    }
    match strategy {
        Strategy::Debounce { .. } => st.events |= event::DEBOUNCE_START,
        Strategy::Concurrent { .. } if had_line => st.events |= event::LINE_START,
        _ => {}
    }
}

/// Broken copy of `decide_delivery` (variant `MarkBeforeAdmit`): probes dedupe by marking, then
/// asks the ledger.
fn mark_then_admit(
    ledger: &mut Ledger,
    dedupe: &mut Dedupe,
    tenant: &Tenant,
    identity: &EventIdentity,
    dispatch: Dispatch,
    now_millis: u64,
    ttl_millis: u64,
) -> DeliveryDecision {
    if !dedupe.mark_if_absent(identity, now_millis, ttl_millis) {
        return DeliveryDecision::Duplicate;
    }
    match ledger.admit(tenant, dispatch) {
        Ok(id) => DeliveryDecision::Accepted { id },
        Err(reason) => DeliveryDecision::Rejected { reason },
    }
}

/// Broken copy of `Scope::arrive` for debounce (variant `UnboundedDebounce`): the newest arrival
/// becomes the parked waiter, and the one it replaces is kept waiting instead of superseded.
fn debounce_keeping_every_waiter(
    scope: &mut Scope<DeliveryId>,
    quiet_millis: u64,
    item: DeliveryId,
    now_millis: u64,
) -> Arrival<DeliveryId> {
    let ready_at_millis = now_millis.saturating_add(quiet_millis);
    if let Some((old, _)) = scope.parked.replace((item, ready_at_millis)) {
        scope.line.push_back(old);
    }
    Arrival::Park {
        waiter: item,
        ready_at_millis,
        superseded: None,
    }
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
}

fn a1_bounded_retention(model: &AdmissionModel, st: &AdmissionState) -> bool {
    if st.ledger.retained() > model.cfg.max_detached {
        return false;
    }
    let ceiling = model.cfg.max_detached_per_tenant;
    if ceiling > 0
        && model
            .cfg
            .events
            .iter()
            .any(|e| st.ledger.retained_by(&tenant_of(e.tenant)) > ceiling)
    {
        return false;
    }
    st.scopes.iter().all(|s| {
        s.running
            .iter()
            .chain(s.parked.as_ref().map(|(id, _)| id))
            .chain(s.line.iter())
            .all(|id| st.ledger.is_held(*id))
    })
}

fn a2_honest_rejection(_: &AdmissionModel, st: &AdmissionState) -> bool {
    st.attempts.iter().all(|a| match a.answer {
        Answer::Rejected(_) => {
            !a.acked && !a.marked && a.outcome == Some(Outcome::AdmissionRejected)
        }
        Answer::Accepted(_) | Answer::Duplicate => true,
    })
}

fn a3_no_silent_loss(model: &AdmissionModel, st: &AdmissionState) -> bool {
    !model.quiescent(st)
        || st.attempts.iter().all(|a| match a.answer {
            Answer::Accepted(id) => a.outcome.is_some() && !st.ledger.is_held(id),
            Answer::Rejected(_) | Answer::Duplicate => true,
        })
}

fn a4_one_parked_waiter(model: &AdmissionModel, st: &AdmissionState) -> bool {
    st.scopes
        .iter()
        .zip(&model.cfg.scopes)
        .all(|(s, strategy)| {
            !matches!(strategy, Strategy::Queue | Strategy::Debounce { .. })
                || usize::from(s.parked.is_some()) + s.line.len() <= 1
        })
}

fn a5_capacity_at_outcome(_: &AdmissionModel, st: &AdmissionState) -> bool {
    st.attempts.iter().all(|a| match a.answer {
        Answer::Accepted(id) => {
            let settled = a.outcome.is_some();
            a.refused_settles == 0
                && a.releases == u8::from(settled)
                && st.ledger.is_held(id) != settled
        }
        Answer::Rejected(_) | Answer::Duplicate => a.releases == 0 && a.refused_settles == 0,
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
    st.attempts
        .iter()
        .any(|a| matches!(a.answer, Answer::Accepted(_)))
        && model.quiescent(st)
}

fn is_rejected(a: &Answer) -> bool {
    matches!(a, Answer::Rejected(_))
}
fn is_accepted(a: &Answer) -> bool {
    matches!(a, Answer::Accepted(_))
}
fn is_duplicate(a: &Answer) -> bool {
    matches!(a, Answer::Duplicate)
}

fn retry_admitted(_: &AdmissionModel, st: &AdmissionState) -> bool {
    event_saw(st, &[is_rejected, is_accepted])
}

fn duplicate_converges(_: &AdmissionModel, st: &AdmissionState) -> bool {
    event_saw(st, &[is_accepted, is_rejected, is_duplicate])
}

fn tenant_ceiling(_: &AdmissionModel, st: &AdmissionState) -> bool {
    st.attempts
        .iter()
        .any(|a| a.answer == Answer::Rejected(RejectReason::TenantAtCapacity))
}

fn outcome_seen(st: &AdmissionState, outcome: Outcome) -> bool {
    st.attempts.iter().any(|a| a.outcome == Some(outcome))
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

fn debounce_start(_: &AdmissionModel, st: &AdmissionState) -> bool {
    st.events & event::DEBOUNCE_START != 0
}

fn line_start(_: &AdmissionModel, st: &AdmissionState) -> bool {
    st.events & event::LINE_START != 0
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
            AdmissionAction::Complete { scope, id } => format!("Complete(s{scope}, {id})"),
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
            Property::sometimes(names::RETRY_ADMITTED, retry_admitted),
        ];
        if self.cfg.events.iter().any(|e| e.deliveries >= 3) {
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
        if self
            .cfg
            .has_strategy(|s| matches!(s, Strategy::Queue | Strategy::Debounce { .. }))
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
        if self
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
        out.push_str(&format!("    {}\n", summarize(state)));
        if let Some(action) = action {
            out.push_str(&format!("  -> {}\n", model.format_action(action)));
        }
    }
    out
}

/// One line: clock, phase, held ids, each scope's running/parked/line, each delivery's answer.
pub fn summarize(st: &AdmissionState) -> String {
    let held: Vec<String> = st.ledger.held().iter().map(|id| id.to_string()).collect();
    let scopes: Vec<String> = st
        .scopes
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let ids = |v: &mut dyn Iterator<Item = &DeliveryId>| {
                v.map(|id| id.to_string()).collect::<Vec<_>>().join(",")
            };
            format!(
                "s{i}[run {} park {} line {}]",
                ids(&mut s.running.iter()),
                ids(&mut s.parked.iter().map(|(id, _)| id)),
                ids(&mut s.line.iter())
            )
        })
        .collect();
    let answers: Vec<String> = st
        .attempts
        .iter()
        .map(|a| {
            let answer = match a.answer {
                Answer::Rejected(r) => format!("rejected({r:?})"),
                Answer::Accepted(id) => format!("{id}"),
                Answer::Duplicate => "duplicate".to_string(),
            };
            let outcome = a.outcome.map(|o| format!("={o}")).unwrap_or_default();
            format!(
                "ev{}:{answer}{}{}{outcome}",
                a.event,
                if a.acked { "+ack" } else { "" },
                if a.marked { "+mark" } else { "" }
            )
        })
        .collect();
    format!(
        "t={} {:?} held [{}] {} | {}",
        st.now,
        st.phase,
        held.join(","),
        scopes.join(" "),
        answers.join(" ")
    )
}
