//! The in-process admission gate the ingress uses: the admission core behind one mutex, with
//! permits that give capacity back at a terminal outcome, or when dropped unsettled.
//!
//! Synchronisation comes from `crate::sync`, so loom can race the very same code
//! (`loom-tests/tests/gate.rs`).

use crate::protocol::admission::{
    Admission, Admit, DedupeKeys, Delivery, DeliveryId, Dispatch, EventIdentity, Limits, Outcome,
    Readopt, RejectReason, Retained, Settled, Tenant,
};
use crate::sync::{lock, Arc, Mutex};
use std::collections::{BTreeMap, VecDeque};

/// How many recent terminal outcomes the gate remembers for `/metrics` and tests.
pub const RECENT_OUTCOMES: usize = 1024;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GateStats {
    pub retained: usize,
    pub admitted: u64,
    pub duplicates: u64,
    pub rejected: BTreeMap<&'static str, u64>,
    pub outcomes: BTreeMap<String, u64>,
}

struct GateState {
    /// The core's admission state: every decision on it is one step of `protocol::admission`.
    admission: Admission,
    stats: GateStats,
    recent: VecDeque<(DeliveryId, Outcome)>,
}

impl GateState {
    /// Performs a settle's effect: counts and remembers a released delivery's outcome.
    fn record(&mut self, id: DeliveryId, settled: Settled) -> bool {
        let Settled::Released { outcome } = settled else {
            return false;
        };
        *self.stats.outcomes.entry(outcome.to_string()).or_insert(0) += 1;
        if self.recent.len() == RECENT_OUTCOMES {
            self.recent.pop_front();
        }
        self.recent.push_back((id, outcome));
        true
    }
}

/// A cheap handle: clones share one gate.
#[derive(Clone)]
pub struct Gate {
    state: Arc<Mutex<GateState>>,
}

/// The answer to one delivery.
pub enum GateDecision {
    Accepted(Permit),
    Duplicate,
    /// A delivery of this identity is still being made durable: "retry later", not acknowledged.
    InFlight,
    Rejected(RejectReason),
}

fn reason_name(reason: RejectReason) -> &'static str {
    match reason {
        RejectReason::AtCapacity => "at_capacity",
        RejectReason::TenantAtCapacity => "tenant_at_capacity",
        RejectReason::ShuttingDown => "shutting_down",
    }
}

/// What re-adopting one delivery did: the core's effect, and the permit when it is watched.
pub struct Readopted {
    pub effect: Readopt,
    pub permit: Option<Permit>,
}

impl Gate {
    pub fn new(limits: Limits, dedupe_ttl_millis: u64) -> Gate {
        Gate {
            state: Arc::new(Mutex::new(GateState {
                admission: Admission::new(limits, dedupe_ttl_millis),
                stats: GateStats::default(),
                recent: VecDeque::with_capacity(RECENT_OUTCOMES),
            })),
        }
    }

    fn permit(&self, id: DeliveryId) -> Permit {
        Permit {
            gate: self.clone(),
            id,
            settled: false,
        }
    }

    /// Admit, then mark, in one critical section (the core's `admit_and_mark` step). `keys`: the
    /// delivery's identity, with the legacy one an older version marked the event under.
    pub fn deliver<'k>(
        &self,
        tenant: &Tenant,
        keys: impl Into<DedupeKeys<'k>>,
        dispatch: Dispatch,
        now_millis: u64,
    ) -> GateDecision {
        let keys = keys.into();
        let delivery = Delivery {
            tenant: tenant.clone(),
            identity: keys.identity.clone(),
            legacy: keys.legacy.cloned(),
            dispatch,
        };
        let mut state = lock(&self.state);
        match state.admission.admit_and_mark(&delivery, now_millis) {
            Admit::Admitted { id } => {
                state.stats.admitted += 1;
                drop(state);
                GateDecision::Accepted(self.permit(id))
            }
            Admit::Duplicate => {
                state.stats.duplicates += 1;
                GateDecision::Duplicate
            }
            Admit::InFlight => {
                *state.stats.rejected.entry("in_flight").or_insert(0) += 1;
                GateDecision::InFlight
            }
            Admit::Refused { reason } => {
                *state.stats.rejected.entry(reason_name(reason)).or_insert(0) += 1;
                GateDecision::Rejected(reason)
            }
        }
    }

    /// Restores a mark a previous instance made at `marked_at_millis` (from its durable dedupe
    /// log), so a redelivery after a restart is still answered as a duplicate.
    pub fn restore_mark(&self, identity: &EventIdentity, marked_at_millis: u64) {
        lock(&self.state)
            .admission
            .restore_mark(identity, marked_at_millis);
    }

    /// The core's `readopt` step for a delivery a previous instance admitted: its mark restored,
    /// and, unless its turn ended, counted against the limits again (a permit to watch it).
    pub fn readopt(&self, retained: &Retained, detach_timeout_millis: u64) -> Readopted {
        let effect = lock(&self.state)
            .admission
            .readopt(retained, detach_timeout_millis);
        let permit = match effect {
            Readopt::Watch { id, .. } => Some(self.permit(id)),
            Readopt::LogEnded { .. } | Readopt::Ended | Readopt::Unwatched { .. } => None,
        };
        Readopted { effect, permit }
    }

    /// Settles `id` with `outcome` unless it was already settled (e.g. handed off at shutdown).
    /// Returns whether this call settled it.
    fn settle(&self, id: DeliveryId, outcome: Outcome) -> bool {
        let mut state = lock(&self.state);
        let settled = state.admission.settle(id, outcome);
        state.record(id, settled)
    }

    /// Refuses every later delivery; returns how many are still retained.
    pub fn begin_shutdown(&self) -> usize {
        lock(&self.state).admission.begin_shutdown()
    }

    /// After the drain: every delivery still retained ends as handed off at shutdown.
    pub fn hand_off_remaining(&self) -> Vec<DeliveryId> {
        let mut state = lock(&self.state);
        let handed = state.admission.hand_off();
        for id in &handed {
            state.record(
                *id,
                Settled::Released {
                    outcome: Outcome::HandedOffAtShutdown,
                },
            );
        }
        handed
    }

    pub fn retained(&self) -> usize {
        lock(&self.state).admission.ledger.retained()
    }

    pub fn is_shutting_down(&self) -> bool {
        lock(&self.state).admission.ledger.is_shutting_down()
    }

    pub fn stats(&self) -> GateStats {
        let state = lock(&self.state);
        let mut stats = state.stats.clone();
        stats.retained = state.admission.ledger.retained();
        stats
    }

    /// The most recent terminal outcomes, oldest first.
    pub fn recent_outcomes(&self) -> Vec<(DeliveryId, Outcome)> {
        lock(&self.state).recent.iter().copied().collect()
    }
}

/// Capacity held by one admitted delivery. Settle it with its terminal outcome; dropping it
/// unsettled settles it as abandoned, so capacity can never leak.
pub struct Permit {
    gate: Gate,
    id: DeliveryId,
    settled: bool,
}

impl Permit {
    pub fn id(&self) -> DeliveryId {
        self.id
    }

    /// Records the terminal outcome and releases the capacity. Returns `false` when the delivery
    /// had already ended (handed off at shutdown), in which case nothing changes.
    pub fn settle(mut self, outcome: Outcome) -> bool {
        self.settled = true;
        self.gate.settle(self.id, outcome)
    }
}

impl Permit {
    /// The delivery's turn is durable: a redelivery is a duplicate from now on (the core's
    /// `made_durable` step).
    pub fn made_durable(&self, identity: &EventIdentity) {
        lock(&self.gate.state).admission.made_durable(identity);
    }

    /// For a delivery that was admitted and marked but could not be dispatched, before anything
    /// was acknowledged: forgets its mark (so the sender's retry is judged afresh, never deduped
    /// away) and settles it as failed: the core's `withdraw` step, both halves in one section.
    pub fn withdraw(mut self, identity: &EventIdentity) -> bool {
        self.settled = true;
        let mut state = lock(&self.gate.state);
        let settled = state.admission.withdraw(self.id, identity);
        state.record(self.id, settled)
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if !self.settled {
            self.gate.settle(self.id, Outcome::Abandoned);
        }
    }
}
