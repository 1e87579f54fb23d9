//! The admission bound (spec/admission.md): bounded retention, honest rejection, no silent loss,
//! and per-scope strategies.
//!
//! Everything here is a value: a [`Ledger`] of admitted deliveries, a [`Dedupe`] set of event
//! identities, and a [`Scope`] per strategy scope. [`decide_delivery`] fixes the one order every
//! ingress follows: admit, then mark, and only an admitted delivery is ever marked. [`steps`] holds
//! serve's admission as one pure step per locked section, the sequence production and the model run.

mod dedupe;
mod delivery;
mod ledger;
pub mod marks;
mod outcome;
pub mod steps;
mod strategy;

pub use dedupe::{Dedupe, DedupeKeys, EventIdentity, MAX_DEDUPE_ENTRIES};
pub use delivery::{decide_delivery, DeliveryDecision};
pub use ledger::{
    DeliveryId, Dispatch, Ledger, Limits, RejectReason, Tenant, DEFAULT_MAX_DETACHED,
};
pub use marks::{MarkStep, MarkWrite, StoredMark, TableMarks};
pub use outcome::Outcome;
pub use steps::{
    delivery_outcome, drain, recovery, turn_at_start, watch_turn, Admission, Admit, Deadline,
    Delivery, Drain, DrainInputs, Readopt, Recovery, Retained, Settled, TurnAtStart, TurnEnd,
    TurnNow, WatchEffect,
};
pub use strategy::{Arrival, Scope, Strategy, StrategyParseError, MAX_CONCURRENT};

/// Why an admission operation refused; the ledger is unchanged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdmissionError {
    #[error("ADMISSION_LIMIT_INVALID: max_detached must be positive for deferred dispatch")]
    ZeroMaxDetached,
    #[error("ADMISSION_UNKNOWN_DELIVERY: delivery {0} is not retained (never admitted, or already settled)")]
    UnknownDelivery(DeliveryId),
}
