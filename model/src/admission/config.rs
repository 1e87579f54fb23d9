//! The size of one model instance and which serve it drives: the scopes and their strategies,
//! the events the platform delivers, which faults the environment may inject (shutdown, crashes
//! and restarts, failing submits, timeouts), and the [`Variant`] (production or one broken
//! tooth). Kept apart so a test reads a configuration without the machinery that explores it.

use std::fmt;
use tollgate_core::admission::{Dispatch, Limits, Strategy};

/// How long a mark lasts: longer than any model run, so expiry never plays a part.
pub const DEDUPE_TTL_MILLIS: u64 = 1_000_000;
/// The detach timeout: longer than any model run; only `Timeout` makes a deadline pass.
pub const DETACH_TIMEOUT_MILLIS: u64 = 1_000_000;
/// Serve's `workers` (the slot cap of detached starts): more than any configuration's turns.
pub const WORKERS: usize = 16;

/// Which serve the model drives: production, or one deliberately broken variant (the teeth).
///
/// Each variant replaces exactly one step (or skips one effect) with a model-local copy; the
/// broken copies live in the model (`broken.rs` and the sections), never in `core/` or `src/`. `tests/model_admission.rs` expects the
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
    /// The durable mark is written with the acknowledgement, after the turn's commit, instead of
    /// in its transaction: a serve that dies between the two leaves a turn without its mark;
    /// once that turn ended, a restarted serve admits a redelivery afresh and queues the event
    /// again (breaks A6).
    MarkWithTheAck,
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
    pub const BROKEN: [Variant; 14] = [
        Variant::MarkBeforeAdmit,
        Variant::ReleaseAtAck,
        Variant::AckAndDropAtCap,
        Variant::UnboundedDebounce,
        Variant::DrainRunningOnly,
        Variant::SkipRecovery,
        Variant::WithdrawKeepsMark,
        Variant::MarkWithTheAck,
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

    pub(super) fn limits(&self) -> Limits {
        // A zero cap is refused by the core; the model's configurations are chosen by tests.
        Limits::new(self.max_detached, self.max_detached_per_tenant)
            .expect("model configurations have a positive max_detached")
    }

    pub(super) fn has_strategy(&self, pred: fn(&Strategy) -> bool) -> bool {
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
