//! The runner's take-over section (spec/slots.md, "Take-over"): on a fleet it first renews the
//! lease its handoff took for it; then it takes the reserved slot over under its token, records
//! the work it is about to start (with its cgroup, before the command exists), and records the
//! turn as started by it. A refused take-over gives its lease back.

use crate::fleet::{self, FleetError, FleetIdentity, RenewOutcome};
use crate::records::TurnRecord;
use crate::section::{Commit, Draft, Halt, Section, Step, View};
use crate::slots::steps::{self, row_reads, Reads, TakeOverEffect, TakeOverInput};
use crate::slots::{Liveness, ProcessIdentity, QueueState, SlotError, SlotToken, TurnKey};

/// The runner's input.
#[derive(Clone, Copy, Debug)]
pub struct TakeOverSection<'a> {
    pub key: &'a TurnKey,
    /// The token the runner was started with.
    pub token: SlotToken,
    pub me: ProcessIdentity,
    /// The cgroup the work will run in (`None`: process group and marker only).
    pub cgroup: Option<&'a str>,
    /// Whether a `Run` also records the turn as started by `me` (the detached runner's one
    /// internal commit for both).
    pub record_started: bool,
    pub now_millis: u64,
}

impl Section for TakeOverSection<'_> {
    /// The effect and the turn's record as the section left it (what the runner runs).
    type Effect = (TakeOverEffect, TurnRecord);

    fn commit(&self) -> Commit {
        Commit::Internal
    }

    /// The row, the runner and work records and the active rows ([`steps::row_reads`]).
    fn reads(&self) -> Reads {
        Reads::Part(row_reads(self.key))
    }

    fn step<L: Liveness>(
        &self,
        part: &mut QueueState,
        view: &View<'_, L>,
    ) -> Result<Step<Self::Effect>, Halt> {
        take_over(part, view, *self)
    }
}

/// The take-over section on `state`.
pub fn take_over<L: Liveness>(
    state: &mut QueueState,
    view: &View<'_, L>,
    input: TakeOverSection<'_>,
) -> Result<Step<(TakeOverEffect, TurnRecord)>, Halt> {
    let mut draft = Draft::new(view.records);
    renew_own_lease(&mut draft, view, input.me)?;
    let mut turn = draft
        .turn(input.key)?
        .cloned()
        .ok_or_else(|| SlotError::UnknownRow {
            key: input.key.clone(),
        })?;
    let effect = steps::runner_take_over(
        state,
        TakeOverInput {
            key: input.key,
            token: input.token,
            me: input.me,
            settled: turn.is_settled(),
            cgroup: input.cgroup,
            liveness: &view.liveness(),
        },
    )?;
    match effect {
        TakeOverEffect::Run { .. } if input.record_started => {
            turn.started_at_millis = Some(input.now_millis);
            turn.runner = Some(input.me);
            turn.host = view.fleet.map(|f| f.host.clone());
            draft.write_turn(turn.clone(), false);
        }
        TakeOverEffect::Refused { .. } => release_own_lease(&mut draft, view, input.me),
        _ => {}
    }
    debug_assert!(
        !matches!(effect, TakeOverEffect::Run { .. })
            || state
                .works
                .iter()
                .any(|w| &w.key == input.key && w.runner == input.me),
        "a take-over that runs has recorded its work"
    );
    Ok(draft.finish((effect, turn)))
}

/// On a fleet, the take-over first renews the lease the handoff's first publish took for this
/// runner (`F4`); a lease that is gone or expired (another host stole it) refuses the section.
fn renew_own_lease<L: Liveness>(
    draft: &mut Draft<'_>,
    view: &View<'_, L>,
    me: ProcessIdentity,
) -> Result<(), Halt> {
    let Some(fleet_view) = view.fleet else {
        return Ok(());
    };
    let mut leases = draft.leases(fleet_view).clone();
    let me = FleetIdentity {
        host: fleet_view.host.clone(),
        process: me,
    };
    match fleet::renew(
        &mut leases,
        &me,
        &me,
        fleet_view.now_db_millis,
        &fleet_view.timing,
    ) {
        RenewOutcome::Renewed { .. } => {
            draft.write_leases(leases);
            Ok(())
        }
        RenewOutcome::Lost | RenewOutcome::NotOwner => {
            Err(FleetError::Unknown { holder: me }.into())
        }
    }
}

/// On a fleet, gives `me`'s lease back (a refused take-over, a finish).
pub(super) fn release_own_lease<L: Liveness>(
    draft: &mut Draft<'_>,
    view: &View<'_, L>,
    me: ProcessIdentity,
) {
    let Some(fleet_view) = view.fleet else {
        return;
    };
    let mut leases = draft.leases(fleet_view).clone();
    let me = FleetIdentity {
        host: fleet_view.host.clone(),
        process: me,
    };
    if fleet::release(&mut leases, &me) {
        draft.write_leases(leases);
    }
}
