//! The seam through which a checked model swaps one decision of the core for a broken one.
//!
//! A model that cannot fail proves nothing: `model/slots.rs` keeps deliberately broken variants of
//! the core and expects the checker to reject each with a counterexample. Two of those decisions sit
//! deep inside [`reserve_runner_slot`](super::reserve_runner_slot), [`start_next_parked`](super::start_next_parked)
//! and [`reconcile_step`](super::reconcile_step), so they are reached through this trait instead of
//! being copied along with every caller. Production uses [`ProductionRules`], whose methods are the
//! defaults below; nothing else in `src/` implements the trait.

use super::occupancy::{occupied_runner_slots, Reserving};
use super::{Liveness, ProcessIdentity, QueueState};

/// The decisions a model may replace. Every default is the production decision.
pub trait SlotRules {
    /// The occupancy the cap is compared against; see [`occupied_runner_slots`].
    fn occupied_runner_slots(
        &self,
        state: &QueueState,
        liveness: &impl Liveness,
        exclude_reserver: Option<ProcessIdentity>,
        reserving: Option<Reserving<'_>>,
    ) -> usize {
        occupied_runner_slots(state, liveness, exclude_reserver, reserving)
    }

    /// What reconcile passes as `exclude_reserver`. Always `None`: a reconciler that already holds
    /// a slot (a runner reconciling on the side) must keep counting it.
    fn reconcile_exclude_reserver(&self, reconciler: ProcessIdentity) -> Option<ProcessIdentity> {
        let _ = reconciler;
        None
    }
}

/// The rules production runs: exactly the defaults of [`SlotRules`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProductionRules;

impl SlotRules for ProductionRules {}
