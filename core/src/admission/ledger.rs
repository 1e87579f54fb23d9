//! The ledger: what admitted deliveries retain, counted against `max_detached` and per tenant.

use super::AdmissionError;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

pub const DEFAULT_MAX_DETACHED: usize = 1024;

/// `(adapter, installation)`: whose delivery it is.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Tenant {
    pub adapter: String,
    pub installation: String,
}

impl Tenant {
    pub fn new(adapter: impl Into<String>, installation: impl Into<String>) -> Self {
        Tenant {
            adapter: adapter.into(),
            installation: installation.into(),
        }
    }
}

impl fmt::Display for Tenant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.adapter, self.installation)
    }
}

/// Acknowledge then work (deferred: retained, capped) or answer when the work ends (sync: the
/// request holds the work; never capped, but refused once shutdown has begun).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Dispatch {
    Deferred,
    Sync,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct DeliveryId(pub u64);

impl fmt::Display for DeliveryId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "d{}", self.0)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RejectReason {
    AtCapacity,
    TenantAtCapacity,
    ShuttingDown,
}

/// A count, not bytes: `max_detached` deliveries retained at once, and optionally at most
/// `max_detached_per_tenant` of them for any one tenant (0 = no per-tenant ceiling).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Limits {
    max_detached: usize,
    max_detached_per_tenant: usize,
}

impl Limits {
    pub fn new(
        max_detached: usize,
        max_detached_per_tenant: usize,
    ) -> Result<Self, AdmissionError> {
        if max_detached == 0 {
            return Err(AdmissionError::ZeroMaxDetached);
        }
        Ok(Limits {
            max_detached,
            max_detached_per_tenant,
        })
    }
    pub fn max_detached(&self) -> usize {
        self.max_detached
    }
    pub fn max_detached_per_tenant(&self) -> usize {
        self.max_detached_per_tenant
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_detached: DEFAULT_MAX_DETACHED,
            max_detached_per_tenant: 0,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Held {
    tenant: Tenant,
    dispatch: Dispatch,
}

/// Admitted deliveries not yet settled. Capacity is released only by [`Ledger::settle`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Ledger {
    limits: Limits,
    held: BTreeMap<DeliveryId, Held>,
    per_tenant: BTreeMap<Tenant, usize>,
    deferred: usize,
    shutting_down: bool,
    next_id: u64,
}

impl Ledger {
    pub fn new(limits: Limits) -> Self {
        Ledger {
            limits,
            held: BTreeMap::new(),
            per_tenant: BTreeMap::new(),
            deferred: 0,
            shutting_down: false,
            next_id: 1,
        }
    }

    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Deferred deliveries retained now (what the cap is compared with).
    pub fn retained(&self) -> usize {
        self.deferred
    }

    pub fn retained_by(&self, tenant: &Tenant) -> usize {
        self.per_tenant.get(tenant).copied().unwrap_or(0)
    }

    pub fn is_shutting_down(&self) -> bool {
        self.shutting_down
    }

    pub fn is_held(&self, id: DeliveryId) -> bool {
        self.held.contains_key(&id)
    }

    /// Every delivery still held, in admission order.
    pub fn held(&self) -> Vec<DeliveryId> {
        self.held.keys().copied().collect()
    }

    /// Admits a delivery or says why not. Deferred deliveries count against the cap and their
    /// tenant's ceiling; sync ones are only refused once shutdown has begun.
    pub fn admit(
        &mut self,
        tenant: &Tenant,
        dispatch: Dispatch,
    ) -> Result<DeliveryId, RejectReason> {
        if self.shutting_down {
            return Err(RejectReason::ShuttingDown);
        }
        if dispatch == Dispatch::Deferred {
            if self.deferred >= self.limits.max_detached {
                return Err(RejectReason::AtCapacity);
            }
            let ceiling = self.limits.max_detached_per_tenant;
            if ceiling > 0 && self.retained_by(tenant) >= ceiling {
                return Err(RejectReason::TenantAtCapacity);
            }
            self.deferred += 1;
            *self.per_tenant.entry(tenant.clone()).or_insert(0) += 1;
        }
        let id = DeliveryId(self.next_id);
        self.next_id += 1;
        self.held.insert(
            id,
            Held {
                tenant: tenant.clone(),
                dispatch,
            },
        );
        debug_assert!(self.deferred <= self.limits.max_detached);
        debug_assert!(
            dispatch != Dispatch::Deferred
                || self.limits.max_detached_per_tenant == 0
                || self.retained_by(tenant) <= self.limits.max_detached_per_tenant,
            "a tenant never holds more than its ceiling"
        );
        Ok(id)
    }

    /// Releases what `id` retained; exactly once per admitted delivery.
    pub fn settle(&mut self, id: DeliveryId) -> Result<(), AdmissionError> {
        let held = self
            .held
            .remove(&id)
            .ok_or(AdmissionError::UnknownDelivery(id))?;
        if held.dispatch == Dispatch::Deferred {
            self.deferred -= 1;
            if let Some(count) = self.per_tenant.get_mut(&held.tenant) {
                *count -= 1;
                if *count == 0 {
                    self.per_tenant.remove(&held.tenant);
                }
            }
        }
        debug_assert!(!self.held.contains_key(&id), "a delivery is settled once");
        debug_assert_eq!(
            self.per_tenant.values().sum::<usize>(),
            self.deferred,
            "the tenants' counts add up to the deferred deliveries"
        );
        Ok(())
    }

    /// From now on every admit is refused. Returns what is still held (to drain, then hand off).
    pub fn begin_shutdown(&mut self) -> Vec<DeliveryId> {
        self.shutting_down = true;
        self.held()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tenant(n: u8) -> Tenant {
        Tenant::new("platform", format!("t{n}"))
    }

    #[test]
    fn a_zero_cap_is_refused() {
        assert_eq!(Limits::new(0, 0), Err(AdmissionError::ZeroMaxDetached));
    }

    #[test]
    fn the_cap_and_the_tenant_ceiling_refuse_until_capacity_is_settled() {
        let mut ledger = Ledger::new(Limits::new(2, 1).unwrap());
        let a = ledger.admit(&tenant(0), Dispatch::Deferred).unwrap();
        assert_eq!(
            ledger.admit(&tenant(0), Dispatch::Deferred),
            Err(RejectReason::TenantAtCapacity)
        );
        let b = ledger.admit(&tenant(1), Dispatch::Deferred).unwrap();
        assert_eq!(
            ledger.admit(&tenant(2), Dispatch::Deferred),
            Err(RejectReason::AtCapacity)
        );
        // Sync work is held but not capped.
        let s = ledger.admit(&tenant(0), Dispatch::Sync).unwrap();
        assert_eq!((ledger.retained(), ledger.retained_by(&tenant(0))), (2, 1));
        assert_eq!(ledger.settle(a), Ok(()));
        assert_eq!(ledger.settle(a), Err(AdmissionError::UnknownDelivery(a)));
        assert_eq!((ledger.retained(), ledger.retained_by(&tenant(0))), (1, 0));
        assert!(ledger.admit(&tenant(0), Dispatch::Deferred).is_ok());
        assert_eq!(ledger.settle(s), Ok(()));
        assert!(ledger.is_held(b));
    }

    #[test]
    fn shutdown_refuses_every_dispatch_and_lists_what_is_held() {
        let mut ledger = Ledger::new(Limits::default());
        let a = ledger.admit(&tenant(0), Dispatch::Deferred).unwrap();
        let s = ledger.admit(&tenant(0), Dispatch::Sync).unwrap();
        assert_eq!(ledger.begin_shutdown(), vec![a, s]);
        for dispatch in [Dispatch::Deferred, Dispatch::Sync] {
            assert_eq!(
                ledger.admit(&tenant(1), dispatch),
                Err(RejectReason::ShuttingDown)
            );
        }
        assert_eq!(ledger.settle(a), Ok(()));
        assert_eq!(ledger.settle(s), Ok(()));
        assert_eq!(ledger.retained(), 0);
    }
}
