//! The bounded repair a command that already took the queue lock (submit, status, cancel) runs
//! after its own section, so a user rarely has to run `tollgate reconcile`: a few sections of the
//! core's reconcile step ([`crate::reconcile::reconcile_once`]), their effects performed by the
//! driver, ending at the first final one and after at most one kill (a kill waits out the grace;
//! a full pass is `tollgate reconcile`'s job). None runs when the core, looking at the active
//! part of the queue, says a step would do nothing ([`crate::reconcile::repair_due`]). Orphaned turns (a record without a row) are left
//! to `reconcile`, which lists them. Last, the empty cgroups of owners that are gone (a runner
//! SIGKILLed while its work then ended by itself leaves its work's group behind) are removed.

use crate::dispatch::DispatchError;
use crate::driver;
use crate::protocol::slots::steps::ReconcileEffect;
use crate::protocol::slots::{Liveness, ProcessIdentity, ReconcileStep};
use crate::queue::Store;
use crate::runtime::Runtime;

/// Reconcile sections one repair runs at most.
pub const MAX_REPAIR_SECTIONS: usize = 3;

/// What one bounded repair did, in order.
#[derive(Debug, Default)]
pub struct Repair {
    pub steps: Vec<ReconcileStep>,
    /// Empty groups of dead owners removed.
    pub groups_removed: usize,
    /// Handoffs whose runner could not be started (their rows were parked again).
    pub spawn_failures: usize,
}

/// Runs up to [`MAX_REPAIR_SECTIONS`] reconcile sections as `me`, stopping after the first final
/// effect or the first kill.
pub fn bounded_repair<L: Liveness, S: Store>(
    rt: &Runtime<L, S>,
    me: ProcessIdentity,
) -> Result<Repair, DispatchError> {
    let mut repair = Repair::default();
    // A healthy queue (nothing to repair, no slot free for a parked row) takes no section: the
    // look reads the active rows only, so a parking submit's repair costs the same at any depth.
    let sections = if crate::reconcile::repair_due(rt, me)? {
        MAX_REPAIR_SECTIONS
    } else {
        0
    };
    for _ in 0..sections {
        let effect = crate::reconcile::reconcile_once(rt, me, &[])?;
        repair.steps.push(effect.step());
        match effect {
            ReconcileEffect::Spawn { handoff, .. } => {
                if let Err(e) = driver::hand_off(rt, rt.spawner.as_ref(), handoff) {
                    tracing::warn!("repair: {e}");
                    repair.spawn_failures += 1;
                }
            }
            ReconcileEffect::Kill { work, .. } => {
                driver::kill_work(rt.spawner.as_ref(), &work);
                break;
            }
            ReconcileEffect::Saturated | ReconcileEffect::Idle => break,
            ReconcileEffect::Requeued { .. }
            | ReconcileEffect::Forgotten { .. }
            | ReconcileEffect::CompletedHandoff { .. }
            | ReconcileEffect::Parked { .. }
            | ReconcileEffect::Removed { .. } => {}
        }
    }
    repair.groups_removed = crate::process::containment::cgroup::sweep_groups().len();
    Ok(repair)
}

/// [`bounded_repair`] as the caller's epilogue: its own work is done and reported, so a failure
/// here is logged, never the command's error.
pub fn after_section<L: Liveness, S: Store>(rt: &Runtime<L, S>, me: ProcessIdentity) {
    if let Err(e) = bounded_repair(rt, me) {
        tracing::warn!("the repair after this command's section failed: {e}");
    }
}
