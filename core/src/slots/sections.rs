//! The locked sections of the slot protocol as whole steps (spec/steps.md): each takes the part
//! of the queue its section loaded, a [`View`](crate::section::View) of what the section read
//! (records, liveness, the fleet's leases) and its own input, applies the primitive steps of
//! [`super::steps`] together with the rules around them (departure, record writes, lease
//! changes), and returns a [`Step`](crate::section::Step): the record writes and the effect. The
//! shell runs every one of them through its one section runner, and the models call them too.

mod accept;
mod attached;
mod cancel;
mod clean;
mod finish;
mod handoff;
mod pause;
mod reconcile;
mod submit;
mod take_over;
mod unrun;
mod work;

pub use accept::{accept_batch, AcceptBatch, Accepted, BatchDelivery, MAX_BATCH_DELIVERIES};
pub use attached::{attached, Attached, AttachedSection, AttachedStart};
pub use cancel::{cancel, CancelSection};
pub use clean::{clean, CleanEffect, CleanScope, CleanSection, Cleaned};
pub use finish::{finish, FinishEffect, FinishSection};
pub use handoff::{PublishFirst, PublishSecond, SpawnFailed};
pub use pause::{PauseSection, Paused, ResumeSection};
pub use reconcile::{on_disk, reconcile, ReconcileSection, Reconciled};
pub use submit::{submit, Placement, SubmitSection, Submitted, GENERATED_NAME_TRIES};
pub use take_over::{take_over, TakeOverSection};
pub use unrun::EndUnrun;
pub use work::WorkStarted;

use crate::admission::Strategy;
use crate::section::{Draft, Need, Unread};
use std::collections::BTreeMap;

/// The strategies of `tasks` from their records as `draft` has them (a task without a record has
/// the default strategy), read in one round.
pub fn strategies_of<'t>(
    draft: &Draft<'_>,
    tasks: impl IntoIterator<Item = &'t str>,
) -> Result<BTreeMap<String, Strategy>, Unread> {
    let tasks: Vec<&str> = tasks.into_iter().collect();
    draft.require(&Need {
        tasks: tasks.iter().map(|t| t.to_string()).collect(),
        ..Need::default()
    })?;
    let mut strategies = BTreeMap::new();
    for task in tasks {
        let strategy = draft.task(task)?.map(|t| t.strategy).unwrap_or_default();
        strategies.insert(task.to_string(), strategy);
    }
    Ok(strategies)
}
