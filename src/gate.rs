//! The in-process admission gate the ingress uses: the admission core behind one mutex, with
//! permits that give capacity back at a terminal outcome, or when dropped unsettled.
//!
//! Synchronisation comes from `crate::sync`, so loom can race the very same code
//! (`loom-tests/tests/gate.rs`).

use crate::protocol::admission::{
    decide_delivery, Dedupe, DeliveryDecision, DeliveryId, Dispatch, EventIdentity, Ledger, Limits,
    Outcome, RejectReason, Tenant,
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
    ledger: Ledger,
    dedupe: Dedupe,
    dedupe_ttl_millis: u64,
    stats: GateStats,
    recent: VecDeque<(DeliveryId, Outcome)>,
}

impl GateState {
    fn record(&mut self, id: DeliveryId, outcome: Outcome) {
        *self.stats.outcomes.entry(outcome.to_string()).or_insert(0) += 1;
        if self.recent.len() == RECENT_OUTCOMES {
            self.recent.pop_front();
        }
        self.recent.push_back((id, outcome));
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
    Rejected(RejectReason),
}

fn reason_name(reason: RejectReason) -> &'static str {
    match reason {
        RejectReason::AtCapacity => "at_capacity",
        RejectReason::TenantAtCapacity => "tenant_at_capacity",
        RejectReason::ShuttingDown => "shutting_down",
    }
}

impl Gate {
    pub fn new(limits: Limits, dedupe_ttl_millis: u64) -> Gate {
        Gate {
            state: Arc::new(Mutex::new(GateState {
                ledger: Ledger::new(limits),
                dedupe: Dedupe::new(),
                dedupe_ttl_millis,
                stats: GateStats::default(),
                recent: VecDeque::with_capacity(RECENT_OUTCOMES),
            })),
        }
    }

    /// Admit, then mark, in one critical section (the core's [`decide_delivery`]).
    pub fn deliver(
        &self,
        tenant: &Tenant,
        identity: &EventIdentity,
        dispatch: Dispatch,
        now_millis: u64,
    ) -> GateDecision {
        let mut state = lock(&self.state);
        let ttl = state.dedupe_ttl_millis;
        let GateState { ledger, dedupe, .. } = &mut *state;
        let decision = decide_delivery(ledger, dedupe, tenant, identity, dispatch, now_millis, ttl);
        let limits = state.ledger.limits();
        debug_assert!(state.ledger.retained() <= limits.max_detached());
        match decision {
            DeliveryDecision::Accepted { id } => {
                state.stats.admitted += 1;
                drop(state);
                GateDecision::Accepted(Permit {
                    gate: self.clone(),
                    id,
                    settled: false,
                })
            }
            DeliveryDecision::Duplicate => {
                state.stats.duplicates += 1;
                GateDecision::Duplicate
            }
            DeliveryDecision::Rejected { reason } => {
                *state.stats.rejected.entry(reason_name(reason)).or_insert(0) += 1;
                GateDecision::Rejected(reason)
            }
        }
    }

    /// Restores a mark a previous instance made at `marked_at_millis` (from its durable dedupe
    /// log), so a redelivery after a restart is still answered as a duplicate.
    pub fn restore_mark(&self, identity: &EventIdentity, marked_at_millis: u64) {
        let mut state = lock(&self.state);
        let ttl = state.dedupe_ttl_millis;
        state.dedupe.mark_if_absent(identity, marked_at_millis, ttl);
    }

    /// Counts a deferred delivery a previous instance admitted and left retained (its turn is
    /// still in the queue) against the limits again, without marking anything: it was marked
    /// when it was first admitted. Refused like any admit when there is no room.
    pub fn readopt(&self, tenant: &Tenant) -> Result<Permit, RejectReason> {
        let id = lock(&self.state).ledger.admit(tenant, Dispatch::Deferred)?;
        Ok(Permit {
            gate: self.clone(),
            id,
            settled: false,
        })
    }

    /// Settles `id` with `outcome` unless it was already settled (e.g. handed off at shutdown).
    /// Returns whether this call settled it.
    fn settle(&self, id: DeliveryId, outcome: Outcome) -> bool {
        let mut state = lock(&self.state);
        if state.ledger.settle(id).is_ok() {
            state.record(id, outcome);
            true
        } else {
            false
        }
    }

    /// Refuses every later delivery; returns how many are still retained.
    pub fn begin_shutdown(&self) -> usize {
        lock(&self.state).ledger.begin_shutdown().len()
    }

    /// After the drain: every delivery still retained ends as handed off at shutdown.
    pub fn hand_off_remaining(&self) -> Vec<DeliveryId> {
        let mut state = lock(&self.state);
        let held = state.ledger.held();
        for id in &held {
            if state.ledger.settle(*id).is_ok() {
                state.record(*id, Outcome::HandedOffAtShutdown);
            }
        }
        held
    }

    pub fn retained(&self) -> usize {
        lock(&self.state).ledger.retained()
    }

    pub fn is_shutting_down(&self) -> bool {
        lock(&self.state).ledger.is_shutting_down()
    }

    pub fn stats(&self) -> GateStats {
        let state = lock(&self.state);
        let mut stats = state.stats.clone();
        stats.retained = state.ledger.retained();
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
    /// For a delivery that was admitted and marked but could not be dispatched, before anything
    /// was acknowledged: forgets its mark (so the sender's retry is judged afresh, never deduped
    /// away) and settles it as failed.
    pub fn withdraw(mut self, identity: &EventIdentity) -> bool {
        self.settled = true;
        let mut state = lock(&self.gate.state);
        state.dedupe.forget(identity);
        if state.ledger.settle(self.id).is_ok() {
            state.record(self.id, Outcome::Failed);
            true
        } else {
            false
        }
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if !self.settled {
            self.gate.settle(self.id, Outcome::Abandoned);
        }
    }
}
