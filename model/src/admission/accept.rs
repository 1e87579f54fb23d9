//! Serve's accept sequence for one delivery, section by section: the gate (admit and mark), the
//! submit of its durable turn (or the withdraw when that fails), the spawn of its runner, and the
//! acknowledgement that hands it to the watcher. Split from the turn's later life because a crash
//! or a failing submit may fall between any two of these sections.

use super::broken::{mark_then_admit, submit_keeping_every_waiter};
use super::config::{Variant, DEDUPE_TTL_MILLIS, DETACH_TIMEOUT_MILLIS, WORKERS};
use super::state::{
    count_release, record_settle, stored_marks, AdmissionState, Answer, Attempt, Hold, InFlight,
    Turn, Watching,
};
use super::world::{identity_of, serve_identity, tenant_of, turn_of, Live};
use super::AdmissionModel;
use tollgate_core::admission::{
    delivery_outcome, Admit, Deadline, DedupeKeys, Delivery, MarkStep, MarkWrite, Outcome,
    RejectReason, Strategy, TableMarks, TurnEnd,
};
use tollgate_core::slots::steps::{self, SubmitEffect, SubmitInput};

impl AdmissionModel {
    pub(super) fn deliver(&self, st: &mut AdmissionState, event: u8) {
        let spec = self.cfg.events[event as usize];
        let delivery = Delivery {
            tenant: tenant_of(spec.tenant),
            identity: identity_of(event),
            legacy: None,
            dispatch: spec.dispatch,
        };
        let now = st.now;
        let starts = st.starts;
        let Some(serve) = st.serve.as_mut() else {
            return;
        };
        let marked_before = serve.admission.dedupe.contains(&delivery.identity, now);
        let admit = match self.cfg.variant {
            Variant::MarkBeforeAdmit => mark_then_admit(&mut serve.admission, &delivery, now),
            // BUG: every delivery is refused.
            Variant::RefusesEverything => Admit::Refused {
                reason: RejectReason::AtCapacity,
            },
            _ => serve.admission.admit_and_mark(&delivery, now),
        };
        let marked = !marked_before && serve.admission.dedupe.contains(&delivery.identity, now);
        let attempt_index = st.attempts.len() as u8;
        let mut attempt = Attempt {
            event,
            answer: Answer::Duplicate,
            acked: false,
            marked,
            outcome: None,
        };
        match admit {
            Admit::Refused { reason } => {
                attempt.answer = Answer::Rejected(reason);
                if self.cfg.variant == Variant::AckAndDropAtCap
                    && reason != RejectReason::ShuttingDown
                {
                    // The broken ingress: a 2xx for work it then throws away.
                    attempt.acked = true;
                    attempt.outcome = Some(Outcome::Dropped);
                } else {
                    attempt.outcome = Some(Outcome::AdmissionRejected);
                }
            }
            Admit::Duplicate => attempt.acked = true,
            Admit::InFlight => attempt.answer = Answer::InFlight,
            Admit::Admitted { id } => {
                let hold = st.holds.len() as u8;
                attempt.answer = Answer::Accepted { hold };
                st.holds.push(Hold {
                    start: starts,
                    id,
                    attempt: Some(attempt_index),
                    turn: None,
                    outcome: None,
                    releases: 0,
                    refused_settles: 0,
                    lost_in_crash: false,
                });
                serve.inflight.push(InFlight {
                    attempt: attempt_index,
                    hold,
                    id,
                    arrived_at_millis: now,
                    turn: None,
                    handoff: None,
                });
            }
        }
        st.attempts.push(attempt);
    }

    /// The delivery's part of serve's group commit, one transaction: the core's mark step on the
    /// stored marks, then the submit step; the mark it returns is written with the turn (both or
    /// neither), then the turn is durable ([`Admission::made_durable`]).
    ///
    /// [`Admission::made_durable`]: tollgate_core::admission::Admission::made_durable
    pub(super) fn submit(&self, st: &mut AdmissionState, attempt: u8) {
        let Some(flight) = Self::inflight(st, attempt) else {
            return;
        };
        let event = st.attempts[attempt as usize].event;
        let Some(mark) = Self::mark_step(st, event, flight.arrived_at_millis) else {
            Self::duplicate_in_commit(st, flight);
            return;
        };
        let scope = self.cfg.events[event as usize].scope as usize;
        let strategy = match (self.cfg.variant, self.cfg.scopes[scope]) {
            // BUG: a drop scope submits as a queue scope.
            (Variant::DropQueues, Strategy::Drop) => Strategy::Queue,
            (_, strategy) => strategy,
        };
        let turn = st.turns.len() as u8;
        st.turns.push(Turn {
            event,
            end: None,
            ran: false,
        });
        let key = self.key_of(st, turn);
        let me = serve_identity(st.starts);
        let token = Self::fresh_token(st);
        let live = Live::of(st, &[]);
        let input = SubmitInput {
            key: &key,
            me,
            fresh_token: token,
            now_millis: st.now,
            cap: WORKERS,
            strategy,
            liveness: &live,
        };
        let before = st.queue.clone();
        let decided = match (self.cfg.variant, strategy) {
            (Variant::UnboundedDebounce, Strategy::Debounce { .. }) => {
                submit_keeping_every_waiter(&mut st.queue, input)
            }
            _ => steps::submit(&mut st.queue, input),
        };
        let decision = match decided {
            Ok(decision) => decision,
            Err(_) => {
                // No model configuration makes the step refuse; the shell would publish nothing.
                st.queue = before;
                return;
            }
        };
        if self.cfg.variant != Variant::MarkWithTheAck {
            Self::write_mark(st, mark);
        }
        for old in &decision.superseded {
            st.turns[turn_of(old) as usize].end = Some(TurnEnd::Superseded);
        }
        let handoff = match decision.effect {
            SubmitEffect::Spawn(handoff) => {
                Self::spend_token(st);
                Some(handoff)
            }
            SubmitEffect::Dropped { .. } => {
                st.turns[turn as usize].end = Some(TurnEnd::Dropped);
                None
            }
            SubmitEffect::Park | SubmitEffect::Pending | SubmitEffect::Wait { .. } => None,
        };
        st.holds[flight.hold as usize].turn = Some(turn);
        if let Some(serve) = st.serve.as_mut() {
            serve.admission.made_durable(&identity_of(event));
        }
        if let Some(serve) = st.serve.as_mut() {
            for f in serve.inflight.iter_mut().filter(|f| f.attempt == attempt) {
                f.turn = Some(turn);
                f.handoff = handoff.clone();
            }
        }
    }

    /// The group commit's mark step, what serve's `accept::one` calls: the table's rows read,
    /// [`TableMarks::mark`] judging the delivery at its arrival time (as the gate judged it). The
    /// mark to write with the turn, or none when a live stored mark makes it a duplicate.
    fn mark_step(st: &AdmissionState, event: u8, arrived_at_millis: u64) -> Option<MarkWrite> {
        let identity = identity_of(event);
        let mut table = TableMarks::read(stored_marks(st), DEDUPE_TTL_MILLIS);
        match table.mark(DedupeKeys::of(&identity), arrived_at_millis) {
            MarkStep::Write(write) => Some(write),
            MarkStep::Duplicate => None,
        }
    }

    /// A row of the mark table written: the step found no live row of its identity, and an
    /// expired one is replaced.
    fn write_mark(st: &mut AdmissionState, mark: MarkWrite) {
        st.marks.retain(|row| row.identity != mark.identity);
        st.marks.push(mark);
        st.marks.sort_by(|a, b| a.identity.cmp(&b.identity));
    }

    /// The group commit found a live stored mark of the delivery's identity: nothing is queued
    /// (its savepoint rolled back); as serve's handler answers it, the permit is made durable and
    /// dropped (settled abandoned), and the delivery is answered as a duplicate. Unreachable while
    /// the gate holds every live stored mark (one serve restores them all at its start): a
    /// changed mark step shows here.
    fn duplicate_in_commit(st: &mut AdmissionState, flight: InFlight) {
        let identity = identity_of(st.attempts[flight.attempt as usize].event);
        let Some(serve) = st.serve.as_mut() else {
            return;
        };
        serve.inflight.retain(|f| f.attempt != flight.attempt);
        serve.admission.made_durable(&identity);
        let settled = serve.admission.settle(flight.id, Outcome::Abandoned);
        record_settle(st, flight.hold, settled, Outcome::Abandoned);
        let answered = &mut st.attempts[flight.attempt as usize];
        answered.answer = Answer::Duplicate;
        answered.acked = true;
    }

    /// The turn could not be created: the withdraw step, then the 503.
    pub(super) fn submit_fails(&self, st: &mut AdmissionState, attempt: u8) {
        let Some(flight) = Self::inflight(st, attempt) else {
            return;
        };
        let identity = identity_of(st.attempts[attempt as usize].event);
        let Some(serve) = st.serve.as_mut() else {
            return;
        };
        serve.inflight.retain(|f| f.attempt != attempt);
        let settled = match self.cfg.variant {
            // The broken withdraw: only the first half.
            Variant::WithdrawKeepsMark => serve.admission.settle(flight.id, Outcome::Failed),
            _ => serve.admission.withdraw(flight.id, &identity),
        };
        record_settle(st, flight.hold, settled, Outcome::Failed);
        st.attempts[attempt as usize].answer = Answer::Withdrawn;
    }

    pub(super) fn spawn(&self, st: &mut AdmissionState, attempt: u8) {
        let Some(serve) = st.serve.as_mut() else {
            return;
        };
        let Some(handoff) = serve
            .inflight
            .iter_mut()
            .find(|f| f.attempt == attempt)
            .and_then(|f| f.handoff.take())
        else {
            return;
        };
        self.perform_handoff(st, handoff, false);
    }

    /// The 200 (the mark is durable with the turn already), and the watcher (a dropped turn
    /// settles at once).
    pub(super) fn ack(&self, st: &mut AdmissionState, attempt: u8) {
        let Some(InFlight {
            hold,
            id,
            arrived_at_millis,
            turn: Some(turn),
            ..
        }) = Self::inflight(st, attempt)
        else {
            return;
        };
        if self.cfg.variant == Variant::MarkWithTheAck {
            // The broken group commit: the mark written after the turn's commit, with the 200.
            let event = st.attempts[attempt as usize].event;
            if let Some(mark) = Self::mark_step(st, event, arrived_at_millis) {
                Self::write_mark(st, mark);
            }
        }
        st.attempts[attempt as usize].acked = true;
        let dropped = st.turns[turn as usize].end == Some(TurnEnd::Dropped);
        let Some(serve) = st.serve.as_mut() else {
            return;
        };
        serve.inflight.retain(|f| f.attempt != attempt);
        if self.cfg.variant == Variant::ReleaseAtAck {
            // The broken acknowledgement: capacity back while the work is still to be done.
            let settled = serve.admission.settle(id, Outcome::Completed);
            count_release(st, hold, settled);
        }
        let Some(serve) = st.serve.as_mut() else {
            return;
        };
        if dropped {
            let outcome = delivery_outcome(TurnEnd::Dropped, false);
            let settled = serve.admission.settle(id, outcome);
            record_settle(st, hold, settled, outcome);
        } else {
            serve.watched.push(Watching {
                hold,
                id,
                turn,
                deadline: Deadline::new(0, DETACH_TIMEOUT_MILLIS),
            });
        }
    }
}
