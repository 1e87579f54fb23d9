//! Serve's admission, one pure step per locked section (spec/admission.md, "Steps").
//!
//! The shell (`src/gate.rs`, `src/serve/`) takes its lock, calls exactly one of these, and performs
//! the typed effect it returns; the admission model (`model/src/admission.rs`) calls the same
//! steps in the same order. Nothing here reads a clock, a file or `/proc`: "now" arrives as
//! `now_millis`, liveness through [`Liveness`], a turn's state as [`TurnNow`] / [`TurnAtStart`].
//!
//! | section | step | effect |
//! |---|---|---|
//! | a delivery at the gate | [`Admission::admit_and_mark`] | [`Admit`] |
//! | its turn is durable | [`Admission::made_durable`] | none |
//! | a mark from the durable dedupe log, at start | [`Admission::restore_mark`] | none |
//! | a delivery an earlier serve admitted, at start | [`Admission::readopt`] | [`Readopt`] |
//! | start-up, after every readopt | [`recovery`] | [`Recovery`] |
//! | the turn could not be created | [`Admission::withdraw`] | [`Settled`] |
//! | a permit settled or dropped | [`Admission::settle`] | [`Settled`] |
//! | the watcher's look at one delivery | [`watch_turn`] | [`WatchEffect`] |
//! | shutdown begins | [`Admission::begin_shutdown`] | how many are held |
//! | the drain's poll | [`drain`] | [`Drain`] |
//! | the drain is over | [`Admission::hand_off`] | the handed-off ids |

use super::{
    decide_delivery, Dedupe, DedupeKeys, DeliveryDecision, DeliveryId, Dispatch, EventIdentity,
    Ledger, Limits, Outcome, RejectReason, Tenant,
};
use crate::slots::{Liveness, ProcessIdentity, QueueEntry, RowState};
use std::collections::BTreeMap;

/// What serve's gate holds under its one mutex: the ledger and the dedupe set.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Admission {
    pub ledger: Ledger,
    pub dedupe: Dedupe,
    pub dedupe_ttl_millis: u64,
    /// Identities of admitted deliveries whose turn is not durable yet (admitted and marked, in
    /// the accept sequence). A redelivery of one is not answered as a duplicate: if this serve
    /// died before the turn became durable, that answer would have acknowledged lost work (A3).
    /// Bounded by the ledger: one entry per held delivery.
    pub in_flight: BTreeMap<EventIdentity, DeliveryId>,
}

/// One arrival at the gate.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Delivery {
    pub tenant: Tenant,
    pub identity: EventIdentity,
    /// The identity an older version marked the same event under: a live mark of it makes this
    /// delivery a duplicate ([`Dedupe::mark_keys_if_absent`]).
    pub legacy: Option<EventIdentity>,
    pub dispatch: Dispatch,
}

impl Delivery {
    /// The identities it is deduplicated on.
    pub fn keys(&self) -> DedupeKeys<'_> {
        DedupeKeys {
            identity: &self.identity,
            legacy: self.legacy.as_ref(),
        }
    }
}

/// The answer of [`Admission::admit_and_mark`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Admit {
    /// Admitted and marked: make the turn durable, then acknowledge; `id` holds capacity until
    /// its terminal outcome.
    Admitted { id: DeliveryId },
    /// Admitted, but the identity was already marked: answer as a duplicate (capacity returned).
    Duplicate,
    /// Refused before anything else: the overload answer; never marked, never acknowledged (A2).
    Refused { reason: RejectReason },
    /// The identity is marked by a delivery whose turn is not durable yet: answer "retry later"
    /// (not acknowledged; capacity returned). Its retry is a duplicate once that turn is durable,
    /// or admitted afresh if it was withdrawn.
    InFlight,
}

/// How a turn ended, as the delivery-outcome rule needs it (the shell's turn record outcome).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TurnEnd {
    Completed,
    Failed,
    Cancelled,
    /// The command could not be started.
    Unstartable,
    Dropped,
    Superseded,
}

/// The turn-outcome → delivery-outcome rule: a delivery whose deadline passed ends as timed-out
/// (its turn was cancelled for it); otherwise the turn's end names the delivery's.
pub fn delivery_outcome(turn: TurnEnd, timing_out: bool) -> Outcome {
    if timing_out {
        return Outcome::TimedOut;
    }
    match turn {
        TurnEnd::Completed => Outcome::Completed,
        TurnEnd::Failed | TurnEnd::Unstartable => Outcome::Failed,
        TurnEnd::Cancelled => Outcome::Cancelled,
        TurnEnd::Dropped => Outcome::Dropped,
        TurnEnd::Superseded => Outcome::Superseded,
    }
}

/// Whether a settle released capacity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Settled {
    /// Recorded `outcome` and released the delivery's capacity: log it.
    Released { outcome: Outcome },
    /// The delivery had already ended (handed off at shutdown): nothing changed.
    AlreadyEnded,
}

/// A retained delivery's turn, as serve finds it at start.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TurnAtStart {
    /// The turn has its outcome.
    Ended(TurnEnd),
    /// The turn is waiting for a slot, or a live process holds its row: it runs without help.
    Held,
    /// The row names only dead processes (reserved by a dead serve and never spawned, bound to a
    /// dead child but not recorded, a dead owner), or the turn has neither a row nor an outcome:
    /// nothing will run it unless recovery repairs it.
    Orphaned,
}

/// Classifies a delivery's turn at start from its outcome, its queue row and liveness. The
/// shell loads these under the queue lock; the decision is here.
pub fn turn_at_start<L: Liveness + ?Sized>(
    end: Option<TurnEnd>,
    row: Option<&QueueEntry>,
    liveness: &L,
) -> TurnAtStart {
    if let Some(end) = end {
        return TurnAtStart::Ended(end);
    }
    let Some(row) = row else {
        return TurnAtStart::Orphaned;
    };
    let live = |who: &ProcessIdentity| liveness.is_live(who);
    let held = match (&row.state, &row.slot_reservation) {
        (RowState::Parked, _) => true,
        // A reservation: its bound child runs the turn, or (never spawned) its reserver will.
        (_, Some(reservation)) => match &reservation.child {
            Some(child) => live(child),
            None => live(&reservation.reserver),
        },
        (RowState::Waiting { owner, .. }, None) => live(owner),
        (RowState::Dispatching { dispatch_owner }, None) => live(dispatch_owner),
    };
    if held {
        TurnAtStart::Held
    } else {
        TurnAtStart::Orphaned
    }
}

/// A delivery admitted by an earlier serve whose turn record has no outcome yet, or that the
/// earlier serve handed off at shutdown.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Retained {
    pub tenant: Tenant,
    pub identity: EventIdentity,
    pub admitted_at_millis: u64,
    /// Listed in the earlier serve's hand-off file.
    pub handed_off: bool,
    pub turn: TurnAtStart,
}

/// The effect of [`Admission::readopt`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Readopt {
    /// Counted against the limits again: watch `id` until its turn ends; it times out at
    /// `deadline_millis` (from the first admission, not from this start). `recover`: its row
    /// is orphaned and must be repaired ([`recovery`]).
    Watch {
        id: DeliveryId,
        deadline_millis: u64,
        recover: bool,
    },
    /// Handed off by the earlier serve, and its turn ended meanwhile: log `outcome` now.
    LogEnded { outcome: Outcome },
    /// Its turn ended and the earlier serve already logged its outcome: nothing to do.
    Ended,
    /// No room (the limits were lowered): its turn runs on unwatched; `recover` as for `Watch`.
    Unwatched { reason: RejectReason, recover: bool },
}

impl Readopt {
    fn recover(&self) -> bool {
        matches!(
            self,
            Readopt::Watch { recover: true, .. } | Readopt::Unwatched { recover: true, .. }
        )
    }
}

/// What serve's start-up must do once every retained delivery is readopted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Recovery {
    /// Some retained delivery's row is orphaned: run reconcile (it steals the dead reservation,
    /// or re-queues the row, and starts the turn), so every acknowledged delivery runs (A3).
    Reconcile,
    /// Every retained turn ended or is held by a live process.
    Nothing,
}

/// The recovery step of serve's start: over what [`Admission::readopt`] returned.
pub fn recovery(readopted: &[Readopt]) -> Recovery {
    if readopted.iter().any(Readopt::recover) {
        Recovery::Reconcile
    } else {
        Recovery::Nothing
    }
}

/// A watched delivery's turn as the watcher reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TurnNow {
    Ended(TurnEnd),
    /// Queued, starting or running.
    Live,
    /// The record is gone (its task's directory was removed): nothing will run.
    Missing,
}

/// The detach deadline of one watched delivery.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Deadline {
    pub deadline_millis: u64,
    /// The turn was cancelled for the deadline; the delivery ends as timed-out once it ended.
    pub timing_out: bool,
}

impl Deadline {
    pub fn new(admitted_at_millis: u64, detach_timeout_millis: u64) -> Self {
        Deadline {
            deadline_millis: admitted_at_millis.saturating_add(detach_timeout_millis),
            timing_out: false,
        }
    }
}

/// The effect of [`watch_turn`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WatchEffect {
    /// The turn ended: settle the permit with `outcome` (capacity back only now, A5).
    Settle { outcome: Outcome },
    /// The deadline passed: cancel the turn; the delivery keeps its capacity until the turn ends.
    Cancel,
    /// Nothing yet.
    Wait,
}

/// The watcher's step for one watched delivery: the turn-outcome rule and the detach-timeout rule.
pub fn watch_turn(deadline: &mut Deadline, turn: TurnNow, now_millis: u64) -> WatchEffect {
    match turn {
        TurnNow::Ended(end) => WatchEffect::Settle {
            outcome: delivery_outcome(end, deadline.timing_out),
        },
        TurnNow::Missing => WatchEffect::Settle {
            outcome: delivery_outcome(TurnEnd::Cancelled, deadline.timing_out),
        },
        TurnNow::Live if deadline.deadline_millis <= now_millis && !deadline.timing_out => {
            deadline.timing_out = true;
            WatchEffect::Cancel
        }
        TurnNow::Live => WatchEffect::Wait,
    }
}

/// What the drain's poll found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DrainInputs {
    /// Deliveries the watcher still watches.
    pub watched: usize,
    /// Admitted deliveries between the gate and the watcher (their submit is running).
    pub dispatching: usize,
    pub now_millis: u64,
    /// Shutdown's start plus `drain_timeout`.
    pub drain_until_millis: u64,
    /// The drain's end plus the queue lock timeout: how long a submit under way may still take.
    pub submit_until_millis: u64,
}

/// The effect of [`drain`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Drain {
    /// Poll again.
    Wait,
    /// Stop the watcher, take its last look, then [`Admission::hand_off`].
    HandOff,
}

/// The shutdown drain: wait while retained deliveries may still end within `drain_timeout`, and
/// while a delivery's submit is under way (so it is handed off with its turn), bounded by the
/// lock timeout after the drain.
pub fn drain(inputs: DrainInputs) -> Drain {
    let DrainInputs {
        watched,
        dispatching,
        now_millis,
        drain_until_millis,
        submit_until_millis,
    } = inputs;
    if watched == 0 && dispatching == 0 {
        return Drain::HandOff;
    }
    if now_millis < drain_until_millis {
        return Drain::Wait;
    }
    if dispatching > 0 && now_millis < submit_until_millis {
        return Drain::Wait;
    }
    Drain::HandOff
}

impl Admission {
    pub fn new(limits: Limits, dedupe_ttl_millis: u64) -> Self {
        Admission {
            ledger: Ledger::new(limits),
            dedupe: Dedupe::new(),
            dedupe_ttl_millis,
            in_flight: BTreeMap::new(),
        }
    }

    /// Admit, then mark ([`decide_delivery`]): a refused delivery is never marked (A2).
    pub fn admit_and_mark(&mut self, delivery: &Delivery, now_millis: u64) -> Admit {
        let marked_before = self.dedupe.contains(&delivery.identity, now_millis);
        let admit = self.admit_and_mark_unchecked(delivery, now_millis);
        let marked = self.dedupe.contains(&delivery.identity, now_millis);
        match admit {
            Admit::Admitted { id } => {
                debug_assert!(
                    self.ledger.is_held(id),
                    "an admitted delivery holds capacity"
                );
                debug_assert!(
                    marked || self.dedupe_ttl_millis == 0,
                    "an admitted delivery is marked"
                );
            }
            Admit::Refused { .. } => debug_assert_eq!(
                marked, marked_before,
                "a refused delivery is never marked (A2)"
            ),
            Admit::Duplicate | Admit::InFlight => {}
        }
        admit
    }

    /// [`Admission::admit_and_mark`] without its postconditions.
    fn admit_and_mark_unchecked(&mut self, delivery: &Delivery, now_millis: u64) -> Admit {
        let decision = decide_delivery(
            &mut self.ledger,
            &mut self.dedupe,
            &delivery.tenant,
            delivery.keys(),
            delivery.dispatch,
            now_millis,
            self.dedupe_ttl_millis,
        );
        match decision {
            DeliveryDecision::Accepted { id } => {
                self.in_flight.insert(delivery.identity.clone(), id);
                Admit::Admitted { id }
            }
            DeliveryDecision::Duplicate if self.in_flight.contains_key(&delivery.identity) => {
                Admit::InFlight
            }
            DeliveryDecision::Duplicate => Admit::Duplicate,
            DeliveryDecision::Rejected { reason } => Admit::Refused { reason },
        }
    }

    /// The delivery's turn is durable (its record, with the delivery, is in the queue): from now
    /// on a redelivery of its identity is a duplicate, here and after a restart.
    pub fn made_durable(&mut self, identity: &EventIdentity) {
        self.in_flight.remove(identity);
    }

    /// Restores a mark an earlier serve made at `marked_at_millis` (its durable dedupe log), so
    /// a redelivery after a restart is still answered as a duplicate.
    pub fn restore_mark(&mut self, identity: &EventIdentity, marked_at_millis: u64) {
        self.dedupe
            .mark_if_absent(identity, marked_at_millis, self.dedupe_ttl_millis);
    }

    /// Re-adopts a delivery an earlier serve admitted: restores its mark (from the turn record:
    /// the dedupe line may never have been written), and counts it against the limits again
    /// unless its turn ended. It is not marked afresh and not acknowledged again.
    pub fn readopt(&mut self, retained: &Retained, detach_timeout_millis: u64) -> Readopt {
        self.restore_mark(&retained.identity, retained.admitted_at_millis);
        let recover = match retained.turn {
            TurnAtStart::Ended(end) if retained.handed_off => {
                return Readopt::LogEnded {
                    outcome: delivery_outcome(end, false),
                }
            }
            TurnAtStart::Ended(_) => return Readopt::Ended,
            TurnAtStart::Held => false,
            TurnAtStart::Orphaned => true,
        };
        match self.ledger.admit(&retained.tenant, Dispatch::Deferred) {
            Ok(id) => Readopt::Watch {
                id,
                deadline_millis: Deadline::new(retained.admitted_at_millis, detach_timeout_millis)
                    .deadline_millis,
                recover,
            },
            Err(reason) => Readopt::Unwatched { reason, recover },
        }
    }

    /// Records `outcome` for `id` and releases its capacity, once (A5).
    pub fn settle(&mut self, id: DeliveryId, outcome: Outcome) -> Settled {
        self.in_flight.retain(|_, held| *held != id);
        let settled = match self.ledger.settle(id) {
            Ok(()) => Settled::Released { outcome },
            Err(_) => Settled::AlreadyEnded,
        };
        debug_assert!(
            !self.ledger.is_held(id),
            "a settled delivery holds no capacity"
        );
        debug_assert!(
            self.in_flight.values().all(|held| *held != id),
            "a settled delivery is no longer in flight"
        );
        settled
    }

    /// The turn of an admitted, marked, not yet acknowledged delivery could not be created. Both
    /// halves: forget its mark (so the sender's retry is judged afresh, never deduped away: A2),
    /// and release its capacity as failed.
    pub fn withdraw(&mut self, id: DeliveryId, identity: &EventIdentity) -> Settled {
        self.dedupe.forget(identity);
        debug_assert!(
            !self.dedupe.contains(identity, 0),
            "a withdrawn delivery's mark is forgotten, so its retry is judged afresh (A2)"
        );
        self.settle(id, Outcome::Failed)
    }

    /// Every later admit is refused (sync included). Returns how many deliveries are held.
    pub fn begin_shutdown(&mut self) -> usize {
        self.ledger.begin_shutdown().len()
    }

    /// After the drain: everything still held ends as handed-off-at-shutdown (A3). Returns the
    /// ids it settled; the shell records their turns for the next serve.
    pub fn hand_off(&mut self) -> Vec<DeliveryId> {
        let held = self.ledger.held();
        let settled: Vec<DeliveryId> = held
            .into_iter()
            .filter(|id| {
                matches!(
                    self.settle(*id, Outcome::HandedOffAtShutdown),
                    Settled::Released { .. }
                )
            })
            .collect();
        debug_assert!(
            self.ledger.held().is_empty(),
            "a hand-off leaves nothing held (A3)"
        );
        debug_assert_eq!(
            self.ledger.retained(),
            0,
            "a hand-off releases every capacity"
        );
        settled
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slots::{Observation, RunnerSlotReservation, SlotToken, TurnKey};

    const TTL: u64 = 60_000;

    fn delivery(tenant: &str, event: &str) -> Delivery {
        Delivery {
            tenant: Tenant::new("generic", tenant),
            identity: EventIdentity(event.into()),
            legacy: None,
            dispatch: Dispatch::Deferred,
        }
    }

    fn admission(max: usize) -> Admission {
        Admission::new(Limits::new(max, 0).unwrap(), TTL)
    }

    #[test]
    fn refused_is_never_marked_and_duplicates_give_capacity_back() {
        let mut adm = admission(1);
        let a = delivery("t", "a");
        let Admit::Admitted { id } = adm.admit_and_mark(&a, 0) else {
            panic!("admitted");
        };
        assert_eq!(
            adm.admit_and_mark(&delivery("t", "b"), 0),
            Admit::Refused {
                reason: RejectReason::AtCapacity
            }
        );
        assert!(!adm.dedupe.contains(&EventIdentity("b".into()), 0));
        assert_eq!(
            adm.settle(id, Outcome::Completed),
            Settled::Released {
                outcome: Outcome::Completed
            }
        );
        assert_eq!(adm.settle(id, Outcome::Completed), Settled::AlreadyEnded);
        assert_eq!(adm.admit_and_mark(&a, 1), Admit::Duplicate);
        assert_eq!(adm.ledger.retained(), 0);
    }

    #[test]
    fn withdraw_forgets_the_mark_and_releases_so_a_retry_is_admitted() {
        let mut adm = admission(1);
        let a = delivery("t", "a");
        let Admit::Admitted { id } = adm.admit_and_mark(&a, 0) else {
            panic!("admitted");
        };
        assert_eq!(
            adm.withdraw(id, &a.identity),
            Settled::Released {
                outcome: Outcome::Failed
            }
        );
        assert!(!adm.dedupe.contains(&a.identity, 0));
        assert_eq!(adm.ledger.retained(), 0);
        assert!(matches!(adm.admit_and_mark(&a, 1), Admit::Admitted { .. }));
    }

    #[test]
    fn a_redelivery_while_the_first_is_not_durable_is_told_to_retry_not_acknowledged() {
        let mut adm = admission(3);
        let a = delivery("t", "a");
        let Admit::Admitted { id } = adm.admit_and_mark(&a, 0) else {
            panic!("admitted");
        };
        assert_eq!(adm.admit_and_mark(&a, 0), Admit::InFlight);
        assert_eq!(adm.ledger.retained(), 1, "the retry's capacity came back");
        adm.made_durable(&a.identity);
        assert_eq!(adm.admit_and_mark(&a, 0), Admit::Duplicate);
        // A withdrawn first delivery: its retry is admitted afresh.
        let b = delivery("t", "b");
        let Admit::Admitted { id: b_id } = adm.admit_and_mark(&b, 0) else {
            panic!("admitted");
        };
        assert_eq!(adm.admit_and_mark(&b, 0), Admit::InFlight);
        adm.withdraw(b_id, &b.identity);
        assert!(matches!(adm.admit_and_mark(&b, 0), Admit::Admitted { .. }));
        adm.settle(id, Outcome::Completed);
        assert!(adm.in_flight.contains_key(&b.identity));
    }

    #[test]
    fn the_turn_outcome_names_the_delivery_outcome_unless_it_timed_out() {
        let pairs = [
            (TurnEnd::Completed, Outcome::Completed),
            (TurnEnd::Failed, Outcome::Failed),
            (TurnEnd::Unstartable, Outcome::Failed),
            (TurnEnd::Cancelled, Outcome::Cancelled),
            (TurnEnd::Dropped, Outcome::Dropped),
            (TurnEnd::Superseded, Outcome::Superseded),
        ];
        for (end, outcome) in pairs {
            assert_eq!(delivery_outcome(end, false), outcome);
            assert_eq!(delivery_outcome(end, true), Outcome::TimedOut);
        }
    }

    #[test]
    fn the_deadline_cancels_once_and_capacity_waits_for_the_turns_end() {
        let mut deadline = Deadline::new(100, 50);
        assert_eq!(deadline.deadline_millis, 150);
        assert_eq!(
            watch_turn(&mut deadline, TurnNow::Live, 149),
            WatchEffect::Wait
        );
        assert_eq!(
            watch_turn(&mut deadline, TurnNow::Live, 150),
            WatchEffect::Cancel
        );
        assert!(deadline.timing_out);
        assert_eq!(
            watch_turn(&mut deadline, TurnNow::Live, 500),
            WatchEffect::Wait
        );
        assert_eq!(
            watch_turn(&mut deadline, TurnNow::Ended(TurnEnd::Cancelled), 501),
            WatchEffect::Settle {
                outcome: Outcome::TimedOut
            }
        );
        let mut fresh = Deadline::new(0, 10);
        assert_eq!(
            watch_turn(&mut fresh, TurnNow::Missing, 0),
            WatchEffect::Settle {
                outcome: Outcome::Cancelled
            }
        );
        assert_eq!(
            watch_turn(&mut fresh, TurnNow::Ended(TurnEnd::Completed), 20),
            WatchEffect::Settle {
                outcome: Outcome::Completed
            }
        );
    }

    fn who(pid: u32) -> ProcessIdentity {
        ProcessIdentity {
            pid,
            start_time_micros: 1,
        }
    }

    /// Pids below 100 are dead, the rest live.
    fn liveness(identity: &ProcessIdentity) -> Observation {
        if identity.pid < 100 {
            Observation::Gone
        } else {
            Observation::Matching
        }
    }

    fn row(state: RowState, reservation: Option<RunnerSlotReservation>) -> QueueEntry {
        QueueEntry {
            queue_id: 1,
            key: TurnKey::new("job", 1),
            enqueued_at_millis: 0,
            state,
            slot_reservation: reservation,
            ready_at_millis: 0,
            cancel_requested: false,
            priority: 0,
            after: Vec::new(),
        }
    }

    #[test]
    fn rows_only_dead_processes_hold_are_orphaned() {
        let dispatching = |owner| RowState::Dispatching {
            dispatch_owner: who(owner),
        };
        let reserved = |reserver, child: Option<u32>| {
            let mut r = RunnerSlotReservation::new(who(reserver), SlotToken::generate());
            r.child = child.map(who);
            Some(r)
        };
        let at_start = |row: &QueueEntry| turn_at_start(None, Some(row), &liveness);
        // Reserved by a dead serve, never spawned.
        assert_eq!(
            at_start(&row(dispatching(1), reserved(1, None))),
            TurnAtStart::Orphaned
        );
        assert_eq!(
            at_start(&row(dispatching(101), reserved(101, None))),
            TurnAtStart::Held
        );
        // Bound but not recorded: the child decides, not the (dead) reserver.
        assert_eq!(
            at_start(&row(dispatching(1), reserved(1, Some(2)))),
            TurnAtStart::Orphaned
        );
        assert_eq!(
            at_start(&row(dispatching(1), reserved(1, Some(102)))),
            TurnAtStart::Held
        );
        assert_eq!(at_start(&row(dispatching(3), None)), TurnAtStart::Orphaned);
        assert_eq!(at_start(&row(dispatching(103), None)), TurnAtStart::Held);
        let waiting = |owner| RowState::Waiting {
            enqueue_owner: who(owner),
            owner: who(owner),
        };
        assert_eq!(at_start(&row(waiting(4), None)), TurnAtStart::Orphaned);
        assert_eq!(at_start(&row(waiting(104), None)), TurnAtStart::Held);
        assert_eq!(at_start(&row(RowState::Parked, None)), TurnAtStart::Held);
        assert_eq!(turn_at_start(None, None, &liveness), TurnAtStart::Orphaned);
        assert_eq!(
            turn_at_start(
                Some(TurnEnd::Failed),
                Some(&row(dispatching(1), None)),
                &liveness
            ),
            TurnAtStart::Ended(TurnEnd::Failed)
        );
    }

    fn retained(turn: TurnAtStart, handed_off: bool) -> Retained {
        Retained {
            tenant: Tenant::new("generic", "t"),
            identity: EventIdentity("r".into()),
            admitted_at_millis: 1_000,
            handed_off,
            turn,
        }
    }

    #[test]
    fn readopt_counts_live_turns_marks_them_and_asks_recovery_for_orphans() {
        let mut adm = admission(1);
        let watch = adm.readopt(&retained(TurnAtStart::Orphaned, false), 500);
        assert!(matches!(
            watch,
            Readopt::Watch {
                deadline_millis: 1_500,
                recover: true,
                ..
            }
        ));
        assert!(adm.dedupe.contains(&EventIdentity("r".into()), 1_000));
        assert_eq!(adm.ledger.retained(), 1);
        // No room left: unwatched, but its orphaned row is still recovered.
        let full = adm.readopt(&retained(TurnAtStart::Orphaned, false), 500);
        assert_eq!(
            full,
            Readopt::Unwatched {
                reason: RejectReason::AtCapacity,
                recover: true
            }
        );
        assert_eq!(recovery(&[watch]), Recovery::Reconcile);
        let held = adm.readopt(&retained(TurnAtStart::Held, false), 500);
        assert_eq!(recovery(&[held]), Recovery::Nothing);
        assert_eq!(
            adm.readopt(&retained(TurnAtStart::Ended(TurnEnd::Completed), true), 500),
            Readopt::LogEnded {
                outcome: Outcome::Completed
            }
        );
        assert_eq!(
            adm.readopt(
                &retained(TurnAtStart::Ended(TurnEnd::Completed), false),
                500
            ),
            Readopt::Ended
        );
        assert_eq!(adm.ledger.retained(), 1, "ended turns are not counted");
    }

    #[test]
    fn the_drain_waits_for_retained_work_then_for_submits_then_hands_off() {
        let at = |watched, dispatching, now_millis| {
            drain(DrainInputs {
                watched,
                dispatching,
                now_millis,
                drain_until_millis: 100,
                submit_until_millis: 200,
            })
        };
        assert_eq!(at(0, 0, 0), Drain::HandOff);
        assert_eq!(at(1, 0, 99), Drain::Wait);
        assert_eq!(at(1, 0, 100), Drain::HandOff);
        assert_eq!(at(0, 1, 150), Drain::Wait);
        assert_eq!(at(1, 1, 199), Drain::Wait);
        assert_eq!(at(0, 1, 200), Drain::HandOff);
    }

    #[test]
    fn shutdown_refuses_everything_and_hands_off_what_is_held_once() {
        let mut adm = admission(4);
        let Admit::Admitted { id: a } = adm.admit_and_mark(&delivery("t", "a"), 0) else {
            panic!("admitted");
        };
        let mut sync = delivery("t", "s");
        sync.dispatch = Dispatch::Sync;
        let Admit::Admitted { id: s } = adm.admit_and_mark(&sync, 0) else {
            panic!("admitted");
        };
        assert_eq!(adm.begin_shutdown(), 2);
        for d in [delivery("t", "b"), sync.clone()] {
            assert_eq!(
                adm.admit_and_mark(&d, 0),
                Admit::Refused {
                    reason: RejectReason::ShuttingDown
                }
            );
        }
        assert_eq!(adm.hand_off(), vec![a, s]);
        assert_eq!(adm.hand_off(), Vec::<DeliveryId>::new());
        assert_eq!(adm.settle(a, Outcome::Completed), Settled::AlreadyEnded);
        assert_eq!(adm.ledger.retained(), 0);
    }
}
