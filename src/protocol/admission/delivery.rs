//! The order of one delivery: admit first, then mark. A rejected delivery is never marked (so
//! the platform's retry is not deduped away) and never acknowledged; a duplicate gives its
//! capacity back at once.

use super::{Dedupe, DeliveryId, Dispatch, EventIdentity, Ledger, RejectReason, Tenant};

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum DeliveryDecision {
    /// Admitted and marked: acknowledge, then dispatch; settle `id` at its terminal outcome.
    Accepted { id: DeliveryId },
    /// Admitted, but its identity was already marked: answered as a duplicate, capacity returned.
    Duplicate,
    /// Refused before anything else: answer with the overload signal; not marked, not acked.
    Rejected { reason: RejectReason },
}

pub fn decide_delivery(
    ledger: &mut Ledger,
    dedupe: &mut Dedupe,
    tenant: &Tenant,
    identity: &EventIdentity,
    dispatch: Dispatch,
    now_millis: u64,
    dedupe_ttl_millis: u64,
) -> DeliveryDecision {
    let id = match ledger.admit(tenant, dispatch) {
        Ok(id) => id,
        Err(reason) => return DeliveryDecision::Rejected { reason },
    };
    if dedupe.mark_if_absent(identity, now_millis, dedupe_ttl_millis) {
        DeliveryDecision::Accepted { id }
    } else {
        // The id was admitted a moment ago in this same call, so settling it cannot fail.
        let released = ledger.settle(id);
        debug_assert!(released.is_ok());
        DeliveryDecision::Duplicate
    }
}
