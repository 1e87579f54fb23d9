//! Which actions a state enables: the deliveries the platform still makes, the next section of
//! each accept sequence, the watcher's and the runners' steps, the clock, a restart. Apart from
//! the actions' effects because "at rest" (no work action enabled) is what the quiescent
//! properties read.

use super::state::{AdmissionAction, AdmissionState, Phase, Row};
use super::AdmissionModel;
use tollgate_core::slots::RowState;

impl AdmissionModel {
    pub(super) fn may_restart(&self, st: &AdmissionState) -> bool {
        st.starts <= self.cfg.restarts
    }

    /// Every action enabled in `st` except the environment's `Shutdown` and `Crash` (a runtime
    /// where only those remain is at rest).
    pub(super) fn work_actions(&self, st: &AdmissionState, actions: &mut Vec<AdmissionAction>) {
        if let Some(serve) = &st.serve {
            for (event, spec) in self.cfg.events.iter().enumerate() {
                let delivered = st
                    .attempts
                    .iter()
                    .filter(|a| a.event as usize == event)
                    .count();
                if delivered < spec.deliveries as usize {
                    actions.push(AdmissionAction::Deliver { event: event as u8 });
                }
            }
            for f in &serve.inflight {
                let attempt = f.attempt;
                match (f.turn, &f.handoff) {
                    (None, _) => {
                        actions.push(AdmissionAction::Submit { attempt });
                        if self.cfg.submit_failures {
                            actions.push(AdmissionAction::SubmitFails { attempt });
                        }
                    }
                    (Some(_), Some(_)) => actions.push(AdmissionAction::Spawn { attempt }),
                    (Some(_), None) => actions.push(AdmissionAction::Ack { attempt }),
                }
            }
            for w in &serve.watched {
                let t = &st.turns[w.turn as usize];
                if t.end.is_some() {
                    actions.push(AdmissionAction::Watch { hold: w.hold });
                } else if self.cfg.timeouts
                    && self.row(st, w.turn) == Row::Running
                    && !w.deadline.timing_out
                {
                    actions.push(AdmissionAction::Timeout { hold: w.hold });
                }
            }
            if st.phase == Phase::ShuttingDown && serve.inflight.is_empty() {
                actions.push(AdmissionAction::Drain);
            }
        } else if self.may_restart(st) {
            actions.push(AdmissionAction::Restart);
        }
        for turn in 0..st.turns.len() as u8 {
            if st.turns[turn as usize].end.is_none() && self.row(st, turn) == Row::Running {
                actions.push(AdmissionAction::Finish { turn });
            }
        }
        let waiting_on_clock = st
            .queue
            .entries
            .iter()
            .any(|e| matches!(e.state, RowState::Parked) && e.ready_at_millis > st.now);
        if waiting_on_clock {
            actions.push(AdmissionAction::Tick);
        }
    }

    /// No action can happen any more except beginning shutdown or a crash (at rest).
    pub fn quiescent(&self, st: &AdmissionState) -> bool {
        let mut actions = Vec::new();
        self.work_actions(st, &mut actions);
        actions.is_empty()
    }
}
