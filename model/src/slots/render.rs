//! Counterexample trails: a line per queue row, a sentence per action.

use super::actions::SlotAction;
use super::state::*;
use tollgate_core::slots::{ProcessIdentity, QueueState, RowState};

/// A short, line-per-row rendering of a queue, for counterexample trails.
pub fn describe_queue(queue: &QueueState) -> Vec<String> {
    let mut lines: Vec<String> = queue
        .entries
        .iter()
        .map(|e| {
            let state = match e.state {
                RowState::Waiting {
                    enqueue_owner,
                    owner,
                } if enqueue_owner == owner => format!("waiting(owner {})", short(&owner)),
                RowState::Waiting {
                    enqueue_owner,
                    owner,
                } => format!(
                    "waiting(enqueued by {}, adopted by {})",
                    short(&enqueue_owner),
                    short(&owner)
                ),
                RowState::Dispatching { dispatch_owner } => {
                    format!("dispatching({})", short(&dispatch_owner))
                }
                RowState::Parked => "parked".to_string(),
            };
            let reservation = match &e.slot_reservation {
                None => String::new(),
                Some(r) => format!(
                    " reservation{{reserver {}, token #{}{}}}",
                    short(&r.reserver),
                    token_number(&r.token),
                    r.child
                        .map(|c| format!(", child {}", short(&c)))
                        .unwrap_or_default()
                ),
            };
            format!("row q{} {}: {}{}", e.queue_id, e.key, state, reservation)
        })
        .collect();
    for r in &queue.runners {
        lines.push(format!("runner of {}: {}", r.key, short(&r.identity)));
    }
    for w in &queue.works {
        lines.push(format!(
            "work #{} of {}: runner {}",
            token_number(&w.id.token()),
            w.key,
            short(&w.runner)
        ));
    }
    if lines.is_empty() {
        lines.push("(queue empty)".to_string());
    }
    lines
}

/// `p3/1`: pid 3, first process on that pid.
pub fn short(id: &ProcessIdentity) -> String {
    format!("p{}/{}", id.pid, id.start_time_micros)
}

/// Names the process and the critical section an action stands for, for counterexample trails.
pub fn describe_action(before: &SlotState, action: &SlotAction) -> String {
    let who = |role: u8| -> String {
        let r = &before.roles[role as usize];
        let p = &before.procs[r.proc as usize];
        let kind = match p.kind {
            ProcKind::Submitter(i) => format!("submitter {i}"),
            ProcKind::Attached(i) => format!("attached submitter {i}"),
            ProcKind::Runner => "runner".to_string(),
            ProcKind::Reconciler => "reconciler".to_string(),
            ProcKind::Canceller => "canceller".to_string(),
            ProcKind::Unrelated => "unrelated".to_string(),
        };
        format!("{kind} {}", short(&p.id))
    };
    let what = |role: u8| -> String {
        let r = &before.roles[role as usize];
        match &r.pc {
            Pc::Submit { next } => format!("steps::submit (script entry {next})"),
            Pc::SubmitOne { index } => format!("steps::submit (script entry {index})"),
            Pc::Attach { next } => format!("steps::attached_start (script entry {next})"),
            Pc::Spawn { handoff, .. } => format!(
                "spawns a runner for {} under token #{}",
                handoff.key(),
                token_number(&handoff.token())
            ),
            Pc::Release { handoff, .. } => format!(
                "steps::spawn_failed({}, #{})",
                handoff.key(),
                token_number(&handoff.token())
            ),
            Pc::Bind { handoff, child, .. } => format!(
                "steps::handoff_publish_first({}, #{}, {})",
                handoff.key(),
                token_number(&handoff.token()),
                short(child)
            ),
            Pc::Handoff { bound, .. } => format!(
                "steps::handoff_publish_second({}, #{}, {})",
                bound.key(),
                token_number(&bound.token()),
                short(&bound.child())
            ),
            Pc::TakeOver { key, token } => {
                format!("steps::runner_take_over({key}, #{})", token_number(token))
            }
            Pc::StartWork { key, work, .. } => format!(
                "starts work #{} of {key} + steps::work_started",
                token_number(&work.token())
            ),
            Pc::Running { key, work, .. } => format!(
                "work #{} of {key} exits; the result is written",
                token_number(&work.token())
            ),
            Pc::Written { key, .. } => format!("steps::runner_finish({key})"),
            Pc::Reconcile => "steps::reconcile".to_string(),
            Pc::Kill { works, .. } => {
                let ids: Vec<String> = works
                    .iter()
                    .map(|w| format!("#{}", token_number(&w.token())))
                    .collect();
                format!("kills work {}", ids.join(", "))
            }
            Pc::Cancel => "steps::cancel(job)".to_string(),
            Pc::Done => "nothing".to_string(),
        }
    };
    match action {
        SlotAction::Step { role } => format!("{}: {}", who(*role), what(*role)),
        SlotAction::CommandUnstartable { role } => {
            format!(
                "{}: {} -> the command cannot start",
                who(*role),
                what(*role)
            )
        }
        SlotAction::LeaderUnread { role } => format!(
            "{}: {} -> the command starts, its leader unread",
            who(*role),
            what(*role)
        ),
        SlotAction::SpawnFails { role } => {
            format!("{}: {} -> spawn fails, releases", who(*role), what(*role))
        }
        SlotAction::SpawnUnrecorded { role } => format!(
            "{}: {} -> child starts but is not recorded, releases",
            who(*role),
            what(*role)
        ),
        SlotAction::SpawnOnReusedPid {
            role,
            pid,
            ambiguous,
        } => format!(
            "{}: {} on reused pid {pid}{}",
            who(*role),
            what(*role),
            if *ambiguous {
                " (old identity now ambiguous)"
            } else {
                ""
            }
        ),
        SlotAction::Crash { proc } => {
            let p = &before.procs[*proc as usize];
            format!("{:?} {} crashes", p.kind, short(&p.id))
        }
        SlotAction::ReusePid { pid, ambiguous } => format!(
            "an unrelated process takes pid {pid}{}",
            if *ambiguous {
                " (old identity now ambiguous)"
            } else {
                ""
            }
        ),
        SlotAction::UnrelatedExits { proc } => {
            format!(
                "unrelated {} exits",
                short(&before.procs[*proc as usize].id)
            )
        }
        SlotAction::StartReconciler => "a reconciler starts".to_string(),
        SlotAction::StartCanceller => "a canceller starts".to_string(),
        SlotAction::RunnerReconciles { role } => {
            format!("{}: starts a reconcile pass on the side", who(*role))
        }
    }
}

/// Renders a path as a numbered trail: each step's action and the queue rows after it.
pub fn render_trail(path: Vec<(SlotState, Option<SlotAction>)>) -> Vec<String> {
    let mut lines = Vec::new();
    let mut previous: Option<(SlotState, SlotAction)> = None;
    let mut step = 0;
    for (state, action) in path {
        match previous.take() {
            None => lines.push("  0. initial state".to_string()),
            Some((before, taken)) => {
                step += 1;
                lines.push(format!("  {step}. {}", describe_action(&before, &taken)));
            }
        }
        for row in describe_queue(&state.queue) {
            lines.push(format!("       {row}"));
        }
        if state.violations != 0 {
            lines.push(format!("       violations seen: {:#b}", state.violations));
        }
        if let Some(action) = action {
            previous = Some((state, action));
        }
    }
    lines
}
