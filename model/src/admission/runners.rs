//! What happens to a turn after its submit, as serve's driver and the runners do it: the
//! handoff (spawn, both publishes, the runner's take-over), a reconcile pass (at serve's start and
//! by the debounce waker), the watcher's step, a timeout's cancel and a runner's finish. Each is
//! the core step production calls there, with its effect performed.

use super::state::{event, record_settle, AdmissionState, Turn};
use super::world::{leader_identity, runner_identity, turn_of, Live, WAKER};
use super::AdmissionModel;
use tollgate_core::admission::{watch_turn, Strategy, TurnEnd, TurnNow, WatchEffect};
use tollgate_core::slots::steps::{
    self, CancelSelection, FinishInput, Handoff, ReconcileEffect, ReconcileInput, TakeOverEffect,
    TakeOverInput, TurnOnDisk, TurnRecords,
};
use tollgate_core::slots::ProcessIdentity;

/// The most sections one reconcile pass runs (production's loop has a bound too).
const MAX_RECONCILE_STEPS: usize = 32;

impl AdmissionModel {
    /// Performs a handoff as production's driver does: spawn the turn's runner, the first and
    /// the second publish, then the runner's own take-over (it runs whether or not a publish was
    /// fenced). `from_parked`: the row started from its scope's waiters or line.
    pub(super) fn perform_handoff(
        &self,
        st: &mut AdmissionState,
        handoff: Handoff,
        from_parked: bool,
    ) {
        let turn = turn_of(handoff.key());
        let child = runner_identity(turn);
        if let Ok(bound) = steps::handoff_publish_first(&mut st.queue, handoff.clone(), child) {
            let _ = steps::handoff_publish_second(&mut st.queue, bound);
        }
        let key = handoff.key().clone();
        let settled = st.turns[turn as usize].end.is_some();
        let live = Live::of(st, &[child]);
        let taken = steps::runner_take_over(
            &mut st.queue,
            TakeOverInput {
                key: &key,
                token: handoff.token(),
                me: child,
                settled,
                cgroup: None,
                liveness: &live,
            },
        );
        if let Ok(TakeOverEffect::Run { work }) = taken {
            let _ = steps::work_started(&mut st.queue, &key, work, leader_identity(turn));
            st.turns[turn as usize].ran = true;
            match self.strategy_of_turn(st, turn) {
                Strategy::Debounce { .. } => st.events |= event::DEBOUNCE_START,
                Strategy::Concurrent { .. } if from_parked => st.events |= event::LINE_START,
                _ => {}
            }
        }
    }

    /// One reconcile pass by `me` (serve at its start, or a debounce waker): the step until it
    /// is final, each effect performed. Returns the turns it spawned runners for.
    pub(super) fn reconcile_pass(&self, st: &mut AdmissionState, me: ProcessIdentity) -> Vec<u8> {
        let strategies = self.strategies();
        let mut spawned = Vec::new();
        for _ in 0..MAX_RECONCILE_STEPS {
            // Every turn has its record (serve writes it in the submit's section).
            let records: TurnRecords = (0..st.turns.len() as u8)
                .map(|t| {
                    let turn = &st.turns[t as usize];
                    let on_disk = TurnOnDisk::Record {
                        settled: turn.end.is_some(),
                        attached: false,
                        started: turn.ran,
                        runner: turn.ran,
                    };
                    (self.key_of(st, t), on_disk)
                })
                .collect();
            let token = Self::fresh_token(st);
            let live = Live::of(st, &[me]);
            let before = st.queue.clone();
            let effect = steps::reconcile(
                &mut st.queue,
                ReconcileInput {
                    me,
                    fresh_token: token,
                    now_millis: st.now,
                    cap: self.start_cap(),
                    strategies: &strategies,
                    records: &records,
                    liveness: &live,
                },
            );
            match effect {
                Err(_) => {
                    // The shell publishes nothing on an error and ends the pass.
                    st.queue = before;
                    break;
                }
                Ok(effect) if effect.is_final() => break,
                Ok(ReconcileEffect::Spawn { handoff, .. }) => {
                    Self::spend_token(st);
                    spawned.push(turn_of(handoff.key()));
                    self.perform_handoff(st, handoff, true);
                }
                // Runners never die in this model, so no work is left to kill; the driver's
                // kill would come here.
                Ok(ReconcileEffect::Kill { .. }) => break,
                Ok(_) => {}
            }
        }
        spawned
    }

    /// The watcher's step for one delivery, at `now_millis`; performs its effect.
    pub(super) fn watch(&self, st: &mut AdmissionState, hold: u8, now_millis: u64) {
        let Some(serve) = st.serve.as_mut() else {
            return;
        };
        let Some(pos) = serve.watched.iter().position(|w| w.hold == hold) else {
            return;
        };
        let turn = serve.watched[pos].turn;
        let turn_now = Self::turn_now_of(&st.turns, turn);
        let Some(serve) = st.serve.as_mut() else {
            return;
        };
        match watch_turn(&mut serve.watched[pos].deadline, turn_now, now_millis) {
            WatchEffect::Wait => {}
            WatchEffect::Settle { outcome } => {
                let w = serve.watched.remove(pos);
                let settled = serve.admission.settle(w.id, outcome);
                record_settle(st, hold, settled, outcome);
            }
            WatchEffect::Cancel => {
                st.events |= event::TIMED_OUT_CANCEL;
                self.cancel_turn(st, turn);
            }
        }
    }

    pub(super) fn turn_now_of(turns: &[Turn], turn: u8) -> TurnNow {
        match turns[turn as usize].end {
            Some(end) => TurnNow::Ended(end),
            None => TurnNow::Live,
        }
    }

    /// The cancel section for one turn (serve's `cancel_turn`): a live runner is signalled and
    /// finishes the turn cancelled; a row nobody runs leaves and its turn ends cancelled.
    pub(super) fn cancel_turn(&self, st: &mut AdmissionState, turn: u8) {
        let key = self.key_of(st, turn);
        let live = Live::of(st, &[]);
        let effect = steps::cancel(&mut st.queue, CancelSelection::Turn(&key), &live);
        for removed in &effect.removed {
            st.turns[turn_of(removed) as usize].end = Some(TurnEnd::Cancelled);
        }
        for (signalled, _) in &effect.signal {
            self.end_turn(st, turn_of(signalled), TurnEnd::Cancelled);
        }
    }

    /// A running turn's runner ends it (its command ended, or it was signalled): the finish
    /// step, then the handoff of the next row it started, in the same runner.
    pub(super) fn end_turn(&self, st: &mut AdmissionState, turn: u8, end: TurnEnd) {
        let key = self.key_of(st, turn);
        let me = runner_identity(turn);
        let strategies = self.strategies();
        let token = Self::fresh_token(st);
        let live = Live::of(st, &[me]);
        let before = st.queue.clone();
        let finished = steps::runner_finish(
            &mut st.queue,
            FinishInput {
                key: &key,
                me,
                fresh_token: token,
                now_millis: st.now,
                cap: self.start_cap(),
                strategies: &strategies,
                liveness: &live,
            },
        );
        match finished {
            Ok(next) => {
                st.turns[turn as usize].end = Some(end);
                if let Some(handoff) = next {
                    Self::spend_token(st);
                    self.perform_handoff(st, handoff, true);
                }
            }
            // The shell publishes nothing on an error: the turn stays (and A3 sees it).
            Err(_) => st.queue = before,
        }
    }

    /// The clock passes the next debounce deadline; the waker the submit asked for runs its step.
    pub(super) fn tick(&self, st: &mut AdmissionState) {
        st.now += 1;
        self.reconcile_pass(st, WAKER);
    }
}
