//! Counterexample trails: a line per queue row, a sentence per action.

use super::actions::SlotAction;
use super::state::*;
use tollgate_core::slots::{ProcessIdentity, QueueState, RowState, SlotToken};

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
    if lines.is_empty() {
        lines.push("(queue empty)".to_string());
    }
    lines
}

/// `p3/1`: pid 3, first process on that pid.
pub fn short(id: &ProcessIdentity) -> String {
    format!("p{}/{}", id.pid, id.start_time_micros)
}

/// The counter value a model token was made from.
pub fn token_number(token: &SlotToken) -> u128 {
    token.as_uuid().as_u128() & 0xffff_ffff
}

/// Names the process and the critical section an action stands for, for counterexample trails.
pub fn describe_action(before: &SlotState, action: &SlotAction) -> String {
    let who = |role: u8| -> String {
        let r = &before.roles[role as usize];
        let p = &before.procs[r.proc as usize];
        let kind = match p.kind {
            ProcKind::Submitter(i) => format!("submitter {i}"),
            ProcKind::Runner => "runner".to_string(),
            ProcKind::Reconciler => "reconciler".to_string(),
            ProcKind::Unrelated => "unrelated".to_string(),
        };
        format!("{kind} {}", short(&p.id))
    };
    let what = |role: u8| -> String {
        match &before.roles[role as usize].pc {
            Pc::Submit { .. } | Pc::SubmitOne { .. } => {
                "L1: enqueue + reserve (+ park if saturated)".to_string()
            }
            Pc::Spawn { key, token, .. } => {
                format!(
                    "spawns a runner for {key} under token #{}",
                    token_number(token)
                )
            }
            Pc::Release { key, token, .. } => {
                format!("L: release_runner_slot({key}, #{})", token_number(token))
            }
            Pc::Bind {
                key, token, child, ..
            } => format!(
                "L2: complete_runner_spawn_first({key}, #{}, {})",
                token_number(token),
                short(child)
            ),
            Pc::Handoff {
                key, token, child, ..
            } => format!(
                "L3: complete_runner_spawn_second({key}, #{}, {})",
                token_number(token),
                short(child)
            ),
            Pc::TakeOver { key, token } => {
                format!("take_over_reserved_slot({key}, #{})", token_number(token))
            }
            Pc::Running { key, .. } => format!("runs {key} and writes its result"),
            Pc::Written { key } => format!("finish_turn({key}) + start_next_parked"),
            Pc::Reconcile => "reconcile_step".to_string(),
            Pc::Done => "nothing".to_string(),
        }
    };
    match action {
        SlotAction::Step { role } => format!("{}: {}", who(*role), what(*role)),
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
