//! The deliberately broken copies of core steps that some [`Variant`](super::Variant)s run instead
//! of production's (the teeth): they live here, never in `core/` or `src/`, so production cannot
//! call one by mistake and a test can check that the checker rejects each.

use super::config::DEDUPE_TTL_MILLIS;
use tollgate_core::admission::{Admission, Admit, Delivery};
use tollgate_core::slots::steps::{self, SubmitDecision, SubmitInput};
use tollgate_core::slots::{enqueue, park, set_ready_at, Liveness, QueueState, SlotError};

/// Broken copy of `admit_and_mark` (variant `MarkBeforeAdmit`): probes dedupe by marking, then
/// asks the ledger.
pub(super) fn mark_then_admit(
    admission: &mut Admission,
    delivery: &Delivery,
    now_millis: u64,
) -> Admit {
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
pub(super) fn submit_keeping_every_waiter<L: Liveness>(
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
