//! The stateright [`Model`]: an action applied to a state (each one serve section, or one of the
//! environment's: shutdown, crash, restart, the clock), and the model's properties for its
//! configuration.

use super::config::{Variant, DETACH_TIMEOUT_MILLIS};
use super::properties;
use super::state::{AdmissionAction, AdmissionState, Phase};
use super::AdmissionModel;
use stateright::{Model, Property};
use tollgate_core::admission::TurnEnd;

impl AdmissionModel {
    pub(super) fn apply(&self, last: &AdmissionState, action: AdmissionAction) -> AdmissionState {
        let mut st = last.clone();
        match action {
            AdmissionAction::Deliver { event } => {
                let attempt = st.attempts.len() as u8;
                self.deliver(&mut st, event);
                if !self.cfg.step_by_step() {
                    // Without crashes or failing submits, the accept sequence's sections run
                    // back to back (the same steps, in the same order).
                    self.submit(&mut st, attempt);
                    self.spawn(&mut st, attempt);
                    self.ack(&mut st, attempt);
                }
            }
            AdmissionAction::Submit { attempt } => self.submit(&mut st, attempt),
            AdmissionAction::SubmitFails { attempt } => self.submit_fails(&mut st, attempt),
            AdmissionAction::Spawn { attempt } => self.spawn(&mut st, attempt),
            AdmissionAction::Ack { attempt } => self.ack(&mut st, attempt),
            AdmissionAction::Watch { hold } => {
                let now = st.now;
                self.watch(&mut st, hold, now)
            }
            AdmissionAction::Timeout { hold } => {
                let at = match self.cfg.variant {
                    // BUG: the deadline is read at the present, never past it.
                    Variant::DeadlineNeverPasses => st.now,
                    _ => DETACH_TIMEOUT_MILLIS,
                };
                self.watch(&mut st, hold, at)
            }
            AdmissionAction::Finish { turn } => self.end_turn(&mut st, turn, TurnEnd::Completed),
            AdmissionAction::Tick => self.tick(&mut st),
            AdmissionAction::Shutdown => {
                if let Some(serve) = st.serve.as_mut() {
                    serve.admission.begin_shutdown();
                }
                st.phase = Phase::ShuttingDown;
            }
            AdmissionAction::Drain => self.drain(&mut st),
            AdmissionAction::Crash => self.crash(&mut st),
            AdmissionAction::Restart => self.restart(&mut st),
        }
        st
    }
}

impl Model for AdmissionModel {
    type State = AdmissionState;
    type Action = AdmissionAction;

    fn init_states(&self) -> Vec<AdmissionState> {
        vec![self.initial_state()]
    }

    fn actions(&self, st: &AdmissionState, actions: &mut Vec<AdmissionAction>) {
        self.work_actions(st, actions);
        if self.cfg.shutdown && st.phase == Phase::Open {
            actions.push(AdmissionAction::Shutdown);
        }
        if st.serve.is_some() && self.may_restart(st) {
            actions.push(AdmissionAction::Crash);
        }
    }

    fn next_state(&self, last: &AdmissionState, action: AdmissionAction) -> Option<AdmissionState> {
        Some(self.apply(last, action))
    }

    fn format_action(&self, action: &AdmissionAction) -> String {
        match action {
            AdmissionAction::Deliver { event } => {
                let e = self.cfg.events[*event as usize];
                format!(
                    "Deliver(ev{event}, tenant t{}, scope s{})",
                    e.tenant, e.scope
                )
            }
            other => format!("{other:?}"),
        }
    }

    /// The `A` invariants always; the `sometimes` examples this configuration can reach
    /// ([`properties::of`]).
    fn properties(&self) -> Vec<Property<Self>> {
        properties::of(self)
    }
}
