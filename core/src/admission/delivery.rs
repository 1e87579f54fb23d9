//! The order of one delivery: admit first, then mark. A rejected delivery is never marked (so
//! the platform's retry is not deduped away) and never acknowledged; a duplicate gives its
//! capacity back at once.

use super::{Dedupe, DedupeKeys, DeliveryId, Dispatch, Ledger, RejectReason, Tenant};

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
    keys: DedupeKeys<'_>,
    dispatch: Dispatch,
    now_millis: u64,
    dedupe_ttl_millis: u64,
) -> DeliveryDecision {
    let id = match ledger.admit(tenant, dispatch) {
        Ok(id) => id,
        Err(reason) => return DeliveryDecision::Rejected { reason },
    };
    if dedupe.mark_keys_if_absent(keys, now_millis, dedupe_ttl_millis) {
        DeliveryDecision::Accepted { id }
    } else {
        // The id was admitted a moment ago in this same call, so settling it cannot fail.
        let released = ledger.settle(id);
        debug_assert!(released.is_ok());
        DeliveryDecision::Duplicate
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::{EventIdentity, Limits};

    const TTL: u64 = 60_000;

    fn deliver(
        ledger: &mut Ledger,
        dedupe: &mut Dedupe,
        tenant: u8,
        event: &str,
    ) -> DeliveryDecision {
        decide_delivery(
            ledger,
            dedupe,
            &Tenant::new("platform", format!("t{tenant}")),
            DedupeKeys::of(&EventIdentity(event.into())),
            Dispatch::Deferred,
            0,
            TTL,
        )
    }

    #[test]
    fn a_rejected_delivery_is_not_marked_so_its_retry_is_admitted() {
        let mut ledger = Ledger::new(Limits::new(1, 0).unwrap());
        let mut dedupe = Dedupe::new();
        let DeliveryDecision::Accepted { id } = deliver(&mut ledger, &mut dedupe, 0, "a") else {
            panic!("the first delivery is admitted");
        };
        assert!(matches!(
            deliver(&mut ledger, &mut dedupe, 1, "b"),
            DeliveryDecision::Rejected {
                reason: RejectReason::AtCapacity
            }
        ));
        assert!(!dedupe.contains(&EventIdentity("b".into()), 0));
        ledger.settle(id).unwrap();
        assert!(matches!(
            deliver(&mut ledger, &mut dedupe, 1, "b"),
            DeliveryDecision::Accepted { .. }
        ));
    }

    #[test]
    fn a_duplicate_at_the_cap_is_refused_then_answered_as_a_duplicate() {
        let mut ledger = Ledger::new(Limits::new(1, 0).unwrap());
        let mut dedupe = Dedupe::new();
        let DeliveryDecision::Accepted { id } = deliver(&mut ledger, &mut dedupe, 0, "a") else {
            panic!("the first delivery is admitted");
        };
        assert!(matches!(
            deliver(&mut ledger, &mut dedupe, 0, "a"),
            DeliveryDecision::Rejected { .. }
        ));
        ledger.settle(id).unwrap();
        assert_eq!(
            deliver(&mut ledger, &mut dedupe, 0, "a"),
            DeliveryDecision::Duplicate
        );
        // The duplicate's capacity came back at once.
        assert_eq!(ledger.retained(), 0);
        assert!(ledger.held().is_empty());
    }
}
