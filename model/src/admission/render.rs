//! Counterexample trails: a checker path as lines a reviewer reads (each state's clock, serve,
//! held ids, turns and answers, then the action taken).

use super::state::{current_ledger, AdmissionAction, AdmissionState, Answer};
use super::world::row_of;
use super::AdmissionModel;
use stateright::Model;
use tollgate_core::slots::TurnKey;

/// A readable trail of a checker path (as `Path::into_vec` gives it: each state with the action
/// taken from it): the state's ledger, scopes and answers, then the action.
pub fn describe(
    model: &AdmissionModel,
    path: &[(AdmissionState, Option<AdmissionAction>)],
) -> String {
    let mut out = String::new();
    for (state, action) in path {
        out.push_str(&format!("    {}\n", summarize(model, state)));
        if let Some(action) = action {
            out.push_str(&format!("  -> {}\n", model.format_action(action)));
        }
    }
    out
}

/// One line: clock, serve, held ids, turns (scope, row, ran, end), answers.
pub fn summarize(model: &AdmissionModel, st: &AdmissionState) -> String {
    let held: Vec<String> = current_ledger(st)
        .map(|l| l.held().iter().map(|id| id.to_string()).collect())
        .unwrap_or_default();
    let turns: Vec<String> = st
        .turns
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let end = t.end.map(|e| format!("={e:?}")).unwrap_or_default();
            let key = TurnKey::new(
                format!("s{}", model.cfg.events[t.event as usize].scope),
                i as u32 + 1,
            );
            format!(
                "T{i}:ev{}:{}:{:?}{}{end}",
                t.event,
                key.task,
                row_of(&st.queue, &key),
                if t.ran { "+ran" } else { "" }
            )
        })
        .collect();
    let answers: Vec<String> = st
        .attempts
        .iter()
        .map(|a| {
            let answer = match a.answer {
                Answer::Rejected(r) => format!("rejected({r:?})"),
                Answer::Accepted { hold } => {
                    let h = &st.holds[hold as usize];
                    let outcome = h.outcome.map(|o| format!("={o}")).unwrap_or_default();
                    format!("#{}/{}{outcome}", h.start, h.id)
                }
                Answer::Duplicate => "duplicate".to_string(),
                Answer::Withdrawn => "withdrawn".to_string(),
                Answer::InFlight => "in-flight".to_string(),
            };
            format!(
                "ev{}:{answer}{}{}",
                a.event,
                if a.acked { "+ack" } else { "" },
                if a.marked { "+mark" } else { "" }
            )
        })
        .collect();
    format!(
        "t={} serve#{} {:?} held [{}] | turns {} | {}",
        st.now,
        st.starts,
        st.phase,
        held.join(","),
        turns.join(" "),
        answers.join(" ")
    )
}
