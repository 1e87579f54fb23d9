//! Serve's life around its deliveries: the shutdown drain and its hand-off, a crash (serve's
//! memory gone, the durable files kept), and a restart (marks restored, every surviving turn
//! re-adopted, then the recovery step). These are the moments the A3 property speaks about
//! across serves.

use super::config::{Variant, DETACH_TIMEOUT_MILLIS};
use super::state::{event, record_settle, AdmissionState, Hold, Phase, Row, ServeMem, Watching};
use super::world::{identity_of, serve_identity, tenant_of, Live};
use super::AdmissionModel;
use tollgate_core::admission::{
    drain, recovery, turn_at_start, Deadline, DeliveryId, Drain, DrainInputs, Outcome, Readopt,
    Recovery, Retained, Settled,
};

impl AdmissionModel {
    pub(super) fn drain(&self, st: &mut AdmissionState) {
        let Some(mut serve) = st.serve.take() else {
            return;
        };
        // The drain's time is over; what is still watched is handed off.
        let effect = drain(DrainInputs {
            watched: serve.watched.len(),
            dispatching: serve.inflight.len(),
            now_millis: 1,
            drain_until_millis: 1,
            submit_until_millis: 1,
        });
        debug_assert_eq!(effect, Drain::HandOff);
        let handed: Vec<DeliveryId> = match self.cfg.variant {
            // The broken hand-off: only deliveries whose turns run.
            Variant::DrainRunningOnly => {
                let running: Vec<DeliveryId> = serve
                    .watched
                    .iter()
                    .filter(|w| self.row(st, w.turn) == Row::Running)
                    .map(|w| w.id)
                    .collect();
                for id in &running {
                    let _ = serve.admission.settle(*id, Outcome::HandedOffAtShutdown);
                }
                running
            }
            // BUG: nothing is handed off.
            Variant::DrainHandsOffNothing => Vec::new(),
            _ => serve.admission.hand_off(),
        };
        for id in handed {
            if let Some(hold) = st
                .holds
                .iter()
                .position(|h| h.start == st.starts && h.id == id)
            {
                record_settle(
                    st,
                    hold as u8,
                    Settled::Released {
                        outcome: Outcome::HandedOffAtShutdown,
                    },
                    Outcome::HandedOffAtShutdown,
                );
            }
        }
        let mut handed_turns: Vec<u8> = serve.watched.iter().map(|w| w.turn).collect();
        handed_turns.sort_unstable();
        st.handed_off = handed_turns;
        st.phase = Phase::Down;
    }

    pub(super) fn crash(&self, st: &mut AdmissionState) {
        st.serve = None;
        st.phase = Phase::Down;
        let starts = st.starts;
        for h in st.holds.iter_mut() {
            if h.start == starts && h.outcome.is_none() {
                h.lost_in_crash = true;
            }
        }
    }

    /// Serve's start: the live marks of the mark table restored, readopt every turn in the queue
    /// or handed off, then the recovery step.
    pub(super) fn restart(&self, st: &mut AdmissionState) {
        st.starts += 1;
        let mut serve = self.fresh_serve();
        // The store's read of the table's live marks (`live_marks`: expiry after now), each
        // restored with the time it was marked, as serve's start does.
        for mark in st.marks.iter().filter(|m| m.expires_at_millis > st.now) {
            serve
                .admission
                .restore_mark(&mark.identity, mark.marked_at_millis);
        }
        let mut effects = Vec::new();
        let mut reserved_by_dead = Vec::new();
        let live_at_start = Live::of(st, &[serve_identity(st.starts)]);
        for turn in 0..st.turns.len() as u8 {
            let row = self.row(st, turn);
            let handed_off = st.handed_off.contains(&turn);
            if row == Row::Gone && !handed_off {
                continue;
            }
            if matches!(row, Row::Reserved { .. }) {
                reserved_by_dead.push(turn);
            }
            effects.push(self.readopt_turn(st, &mut serve, turn, handed_off, &live_at_start));
        }
        st.handed_off.clear();
        st.serve = Some(serve);
        st.phase = Phase::Open;
        let skip = self.cfg.variant == Variant::SkipRecovery;
        if recovery(&effects) == Recovery::Reconcile && !skip {
            // Reconcile parks the dead serve's reservations and starts their runners.
            let spawned = self.reconcile_pass(st, serve_identity(st.starts));
            if spawned.iter().any(|t| reserved_by_dead.contains(t)) {
                st.events |= event::RECOVERED;
            }
        }
    }

    /// Re-adopts turn `turn` into the new serve's ledger. The turn is classified as production's
    /// start classifies it, from the record, the row and who is alive (every earlier serve is
    /// dead); a turn the ledger says to watch gets a hold and a watcher entry.
    fn readopt_turn(
        &self,
        st: &mut AdmissionState,
        serve: &mut ServeMem,
        turn: u8,
        handed_off: bool,
        live_at_start: &Live,
    ) -> Readopt {
        let t = &st.turns[turn as usize];
        let at_start = turn_at_start(t.end, st.queue.row(&self.key_of(st, turn)), live_at_start);
        let spec = self.cfg.events[t.event as usize];
        let retained = Retained {
            tenant: tenant_of(spec.tenant),
            identity: identity_of(t.event),
            admitted_at_millis: 0,
            handed_off,
            turn: at_start,
        };
        let effect = serve.admission.readopt(&retained, DETACH_TIMEOUT_MILLIS);
        if let Readopt::Watch {
            id,
            deadline_millis,
            ..
        } = effect
        {
            let hold = st.holds.len() as u8;
            st.holds.push(Hold {
                start: st.starts,
                id,
                attempt: None,
                turn: Some(turn),
                outcome: None,
                releases: 0,
                refused_settles: 0,
                lost_in_crash: false,
            });
            serve.watched.push(Watching {
                hold,
                id,
                turn,
                deadline: Deadline {
                    deadline_millis,
                    timing_out: false,
                },
            });
        }
        effect
    }
}
