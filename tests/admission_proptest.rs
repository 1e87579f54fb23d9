//! proptest over random interleavings of the admission core's steps: deliveries (tenant, event
//! identity, scope, deferred or sync), platform retries of rejected deliveries, redeliveries of
//! accepted ones, completions, clock ticks, shutdown and its drain. The ingress calls the core's
//! admission steps as serve does (`Admission::admit_and_mark`, `made_durable` and the ack,
//! `Scope::arrive`; `Admission::settle` at each terminal outcome, `begin_shutdown`, `hand_off`)
//! and a shadow of what the test retains is compared with the ledger after every step: A1-A5 of
//! spec/invariants.md.

use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};
use tollgate::protocol::admission::{
    Admission, Admit, Arrival, Delivery as GateDelivery, DeliveryId, Dispatch, EventIdentity,
    Limits, Outcome, RejectReason, Scope, Settled, Strategy as ScopeStrategy, Tenant,
};

const TTL: u64 = 1_000_000;

/// The test's own bookkeeping of starts in a scope (the core's `Scope` only decides arrivals;
/// production starts rows through the queue's start filter): what the strategy's
/// `may_start` lets start at `now_millis` moves to `running`.
fn start_due(scope: &mut Scope<DeliveryId>, strategy: ScopeStrategy, now_millis: u64) {
    if let Some((_, ready_at)) = scope.parked {
        if strategy.may_start(scope.running.len(), ready_at, now_millis) {
            if let Some((waiter, _)) = scope.parked.take() {
                scope.running.push(waiter);
            }
        }
    }
    while strategy.may_start(scope.running.len(), 0, now_millis) {
        match scope.line.pop_front() {
            Some(next) => scope.running.push(next),
            None => break,
        }
    }
}
const STRATEGIES: [ScopeStrategy; 4] = [
    ScopeStrategy::Drop,
    ScopeStrategy::Queue,
    ScopeStrategy::Debounce { quiet_millis: 3 },
    ScopeStrategy::Concurrent { max: 2 },
];

#[derive(Clone, Debug)]
enum Op {
    /// A first delivery of event `identity` (it may already have been delivered: then it is a
    /// redelivery).
    Deliver {
        tenant: u8,
        identity: u8,
        scope: u8,
        sync: bool,
    },
    /// The platform retries the `n`-th rejected delivery.
    Retry(u8),
    /// The platform redelivers the `n`-th accepted delivery (a duplicate).
    Redeliver(u8),
    /// The `n`-th running item ends.
    Complete(u8),
    /// The clock advances.
    Tick(u8),
    /// Settle an already settled delivery again (must be refused and change nothing).
    SettleAgain(u8),
    Shutdown,
    Drain,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        30 => (0u8..2, 0u8..20, 0u8..4, prop::bool::weighted(0.15)).prop_map(
            |(tenant, identity, scope, sync)| Op::Deliver { tenant, identity, scope, sync }
        ),
        15 => any::<u8>().prop_map(Op::Retry),
        10 => any::<u8>().prop_map(Op::Redeliver),
        25 => any::<u8>().prop_map(Op::Complete),
        10 => (1u8..5).prop_map(Op::Tick),
        5 => any::<u8>().prop_map(Op::SettleAgain),
        // Rare, so that most runs do plenty of work before (or without) shutting down.
        2 => Just(Op::Shutdown),
        2 => Just(Op::Drain),
    ]
}

/// The delivery as the platform sends it (what a retry repeats).
#[derive(Clone, Debug)]
struct Delivery {
    tenant: Tenant,
    identity: EventIdentity,
    scope: usize,
    dispatch: Dispatch,
}

/// The shadow record of one accepted delivery.
#[derive(Clone, Debug)]
struct Accepted {
    delivery: Delivery,
    acked: bool,
    outcome: Option<Outcome>,
    settles: u32,
}

struct World {
    limits: Limits,
    /// The gate's state; every change goes through one of its steps.
    adm: Admission,
    scopes: Vec<Scope<DeliveryId>>,
    now: u64,
    rejected: Vec<Delivery>,
    accepted: BTreeMap<DeliveryId, Accepted>,
    /// Identities some accepted delivery marked (the only way an identity may become marked).
    marked_by_accepted: BTreeSet<EventIdentity>,
    drained: bool,
}

impl World {
    fn new(limits: Limits) -> Self {
        World {
            limits,
            adm: Admission::new(limits, TTL),
            scopes: vec![Scope::default(); STRATEGIES.len()],
            now: 0,
            rejected: Vec::new(),
            accepted: BTreeMap::new(),
            marked_by_accepted: BTreeSet::new(),
            drained: false,
        }
    }

    fn deliver(&mut self, d: Delivery) {
        let was_marked = self.adm.dedupe.contains(&d.identity, self.now);
        let retained_before = self.adm.ledger.retained();
        let gate_delivery = GateDelivery {
            tenant: d.tenant.clone(),
            identity: d.identity.clone(),
            legacy: None,
            dispatch: d.dispatch,
        };
        let decision = self.adm.admit_and_mark(&gate_delivery, self.now);
        let marked_now = self.adm.dedupe.contains(&d.identity, self.now);
        match decision {
            Admit::InFlight => panic!("every accepted turn is made durable before the next step"),
            Admit::Refused { reason } => {
                // A2: never marked (the mark state is exactly what it was), never acknowledged
                // (this ingress only acks `Accepted`).
                assert_eq!(
                    marked_now, was_marked,
                    "a rejected delivery changed its mark"
                );
                assert_eq!(self.adm.ledger.retained(), retained_before);
                match reason {
                    RejectReason::ShuttingDown => assert!(self.adm.ledger.is_shutting_down()),
                    RejectReason::AtCapacity => {
                        assert_eq!(d.dispatch, Dispatch::Deferred);
                        assert_eq!(self.adm.ledger.retained(), self.limits.max_detached());
                    }
                    RejectReason::TenantAtCapacity => {
                        assert_eq!(d.dispatch, Dispatch::Deferred);
                        assert_eq!(
                            self.adm.ledger.retained_by(&d.tenant),
                            self.limits.max_detached_per_tenant()
                        );
                    }
                }
                self.rejected.push(d);
            }
            Admit::Duplicate => {
                // Only an identity an accepted delivery marked answers as a duplicate: a
                // rejected first delivery's retry is never deduped away.
                assert!(was_marked && self.marked_by_accepted.contains(&d.identity));
                assert_eq!(self.adm.ledger.retained(), retained_before);
            }
            Admit::Admitted { id } => {
                // The turn is durable, then the ack.
                self.adm.made_durable(&d.identity);
                assert!(!was_marked && marked_now);
                assert!(self.adm.ledger.is_held(id));
                assert!(!self.accepted.contains_key(&id), "a delivery id was reused");
                self.marked_by_accepted.insert(d.identity.clone());
                let scope = d.scope;
                self.accepted.insert(
                    id,
                    Accepted {
                        delivery: d,
                        acked: true,
                        outcome: None,
                        settles: 0,
                    },
                );
                match self.scopes[scope].arrive(STRATEGIES[scope], id, self.now) {
                    Arrival::Start(started) | Arrival::LineUp(started) => assert_eq!(started, id),
                    Arrival::Park {
                        waiter, superseded, ..
                    } => {
                        assert_eq!(waiter, id);
                        if let Some(old) = superseded {
                            self.settle(old, Outcome::Superseded);
                        }
                    }
                    Arrival::Dropped { dropped, running } => {
                        assert_eq!(dropped, id);
                        assert!(self.scopes[scope].running.contains(&running));
                        self.settle(dropped, Outcome::Dropped);
                    }
                }
            }
        }
    }

    /// Records the terminal outcome, then releases the capacity (exactly once: A5).
    fn settle(&mut self, id: DeliveryId, outcome: Outcome) {
        let record = self.accepted.get_mut(&id).expect("settling an accepted id");
        assert!(record.outcome.is_none(), "{id} settled twice");
        record.outcome = Some(outcome);
        record.settles += 1;
        assert_eq!(self.adm.settle(id, outcome), Settled::Released { outcome });
    }

    fn running(&self) -> Vec<(usize, DeliveryId)> {
        self.scopes
            .iter()
            .enumerate()
            .flat_map(|(scope, s)| s.running.iter().map(move |id| (scope, *id)))
            .collect()
    }

    fn apply(&mut self, op: Op) {
        match op {
            Op::Deliver {
                tenant,
                identity,
                scope,
                sync,
            } => {
                let d = Delivery {
                    tenant: Tenant::new("platform", format!("t{tenant}")),
                    identity: EventIdentity(format!("ev{identity}")),
                    scope: scope as usize,
                    dispatch: if sync {
                        Dispatch::Sync
                    } else {
                        Dispatch::Deferred
                    },
                };
                self.deliver(d);
            }
            Op::Retry(n) => {
                if !self.rejected.is_empty() {
                    let d = self.rejected.remove(n as usize % self.rejected.len());
                    self.deliver(d);
                }
            }
            Op::Redeliver(n) => {
                let ids: Vec<DeliveryId> = self.accepted.keys().copied().collect();
                if !ids.is_empty() {
                    let d = self.accepted[&ids[n as usize % ids.len()]].delivery.clone();
                    self.deliver(d);
                }
            }
            Op::Complete(n) => {
                let running = self.running();
                if !running.is_empty() {
                    let (scope, id) = running[n as usize % running.len()];
                    self.settle(id, Outcome::Completed);
                    self.scopes[scope].running.retain(|r| *r != id);
                    start_due(&mut self.scopes[scope], STRATEGIES[scope], self.now);
                }
            }
            Op::Tick(millis) => {
                self.now += u64::from(millis);
                for (scope, strategy) in STRATEGIES.iter().enumerate() {
                    start_due(&mut self.scopes[scope], *strategy, self.now);
                }
            }
            Op::SettleAgain(n) => {
                let settled: Vec<DeliveryId> = self
                    .accepted
                    .iter()
                    .filter(|(_, a)| a.outcome.is_some())
                    .map(|(id, _)| *id)
                    .collect();
                if !settled.is_empty() {
                    let id = settled[n as usize % settled.len()];
                    let before = self.adm.clone();
                    assert_eq!(
                        self.adm.settle(id, Outcome::Completed),
                        Settled::AlreadyEnded
                    );
                    assert_eq!(self.adm, before);
                }
            }
            Op::Shutdown => {
                assert_eq!(self.adm.begin_shutdown(), self.unsettled().len());
            }
            Op::Drain => {
                if self.adm.ledger.is_shutting_down() && !self.drained {
                    let expected = self.unsettled();
                    let handed: BTreeSet<DeliveryId> = self.adm.hand_off().into_iter().collect();
                    assert_eq!(
                        handed, expected,
                        "the hand-off settles exactly what is held"
                    );
                    for id in handed {
                        let record = self.accepted.get_mut(&id).expect("an accepted id");
                        record.outcome = Some(Outcome::HandedOffAtShutdown);
                        record.settles += 1;
                    }
                    for scope in self.scopes.iter_mut() {
                        *scope = Scope::default();
                    }
                    self.drained = true;
                    // A3 at shutdown: nothing admitted is left without an outcome.
                    assert!(self.unsettled().is_empty());
                    assert_eq!(self.adm.ledger.retained(), 0);
                }
            }
        }
    }

    fn unsettled(&self) -> BTreeSet<DeliveryId> {
        self.accepted
            .iter()
            .filter(|(_, a)| a.outcome.is_none())
            .map(|(id, _)| *id)
            .collect()
    }

    /// A1-A5 against the shadow, after every step.
    fn check(&self) {
        // A1: the cap and the tenant ceilings hold, the ledger's counts are what the shadow
        // retains, and every item a scope retains is held.
        let max = self.limits.max_detached();
        assert!(self.adm.ledger.retained() <= max);
        let unsettled = self.unsettled();
        let deferred = |id: &DeliveryId| self.accepted[id].delivery.dispatch == Dispatch::Deferred;
        assert_eq!(
            self.adm.ledger.retained(),
            unsettled.iter().filter(|id| deferred(id)).count()
        );
        for tenant in ["t0", "t1"] {
            let tenant = Tenant::new("platform", tenant);
            let shadow = unsettled
                .iter()
                .filter(|id| deferred(id) && self.accepted[*id].delivery.tenant == tenant)
                .count();
            assert_eq!(self.adm.ledger.retained_by(&tenant), shadow);
            let ceiling = self.limits.max_detached_per_tenant();
            assert!(ceiling == 0 || shadow <= ceiling);
        }
        let held: BTreeSet<DeliveryId> = self.adm.ledger.held().into_iter().collect();
        assert_eq!(held, unsettled);
        let mut in_scopes = BTreeSet::new();
        for (scope, s) in self.scopes.iter().enumerate() {
            for id in s
                .running
                .iter()
                .chain(s.parked.as_ref().map(|(id, _)| id))
                .chain(s.line.iter())
            {
                assert!(held.contains(id), "scope {scope} retains settled {id}");
                assert_eq!(self.accepted[id].delivery.scope, scope);
                assert!(in_scopes.insert(*id), "{id} retained twice");
            }
            assert!(s.running.len() <= STRATEGIES[scope].max_running());
            // A4: one parked waiter at most under queue and debounce, and no line.
            if matches!(
                STRATEGIES[scope],
                ScopeStrategy::Queue | ScopeStrategy::Debounce { .. }
            ) {
                assert!(s.line.is_empty());
            }
            if STRATEGIES[scope] == ScopeStrategy::Queue && s.parked.is_some() {
                // A queue waiter waits only behind running work.
                assert!(!s.running.is_empty());
            }
            if matches!(STRATEGIES[scope], ScopeStrategy::Drop) {
                assert!(s.parked.is_none() && s.line.is_empty());
            }
        }
        // Every admitted delivery is either retained by its scope or settled (no silent loss
        // while running: A3's safety half).
        assert_eq!(in_scopes, unsettled);
        // A5: every settled delivery was settled once, with an outcome; acked ones only.
        for (id, a) in &self.accepted {
            assert!(a.acked);
            assert_eq!(a.settles, u32::from(a.outcome.is_some()), "{id}");
        }
    }

    /// Lets everything run to its end (completions and ticks) and checks A3 in that quiescent
    /// state.
    fn settle_everything(&mut self) {
        for _ in 0..1_000 {
            if !self.running().is_empty() {
                self.apply(Op::Complete(0));
            } else if self
                .scopes
                .iter()
                .any(|s| s.parked.is_some() || !s.line.is_empty())
            {
                self.apply(Op::Tick(1));
            } else {
                break;
            }
            self.check();
        }
        assert!(self.unsettled().is_empty(), "admitted work left unsettled");
        assert_eq!(self.adm.ledger.retained(), 0);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn a_invariants_hold_after_every_step(
        max_detached in 1usize..5,
        per_tenant in 0usize..3,
        ops in prop::collection::vec(op(), 1..80),
    ) {
        let limits = Limits::new(max_detached, per_tenant).unwrap();
        let mut world = World::new(limits);
        for op in ops {
            world.apply(op);
            world.check();
        }
        world.settle_everything();
    }
}
