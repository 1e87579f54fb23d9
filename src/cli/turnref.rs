//! How a user names a turn on the command line: `TASK` (its latest turn), `TASK:N` (turn N of
//! TASK), or `last` (the turn submitted most recently in the home).

use super::CliError;
use crate::protocol::slots::TurnKey;
use crate::runtime::Runtime;
use crate::tasks;

/// The word that names the most recently submitted turn.
pub const LAST: &str = "last";

/// Resolves one reference to an existing turn; an unknown task or turn is a usage error naming it.
pub fn resolve(rt: &Runtime, reference: &str) -> Result<TurnKey, CliError> {
    if reference == LAST {
        return last(rt);
    }
    let (task, turn) = match reference.rsplit_once(':') {
        Some((task, n)) => {
            let turn = n.parse::<u32>().map_err(|_| {
                CliError::Usage(format!(
                    "{reference:?}: expected TASK, TASK:N (N a turn number) or `last`"
                ))
            })?;
            (task, Some(turn))
        }
        None => (reference, None),
    };
    if tasks::load_task(&rt.home, task)?.is_none() {
        return Err(CliError::Usage(format!(
            "unknown task {task:?}: no such task in {} (`tollgate status` lists the tasks)",
            rt.home.root().display()
        )));
    }
    let turns = tasks::list_turns(&rt.home, task)?;
    let turn = match turn {
        Some(n) if turns.contains(&n) => n,
        Some(n) => {
            return Err(CliError::Usage(format!(
                "task {task:?} has no turn {n} (it has {})",
                describe_turns(&turns)
            )))
        }
        None => *turns
            .last()
            .ok_or_else(|| CliError::Usage(format!("task {task:?} has no turns yet")))?,
    };
    Ok(TurnKey::new(task, turn))
}

fn describe_turns(turns: &[u32]) -> String {
    match (turns.first(), turns.last()) {
        (Some(first), Some(last)) if first == last => format!("turn {first}"),
        (Some(first), Some(last)) => format!("turns {first}..{last}"),
        _ => "no turns".to_string(),
    }
}

/// The turn submitted last in the whole home (ties: the later task name, then turn number).
fn last(rt: &Runtime) -> Result<TurnKey, CliError> {
    let mut best: Option<(u64, TurnKey)> = None;
    for task in tasks::list_tasks(&rt.home)? {
        // Turn numbers grow with time within a task, so only each task's latest can be last.
        let Some(&turn) = tasks::list_turns(&rt.home, &task)?.last() else {
            continue;
        };
        let key = TurnKey::new(task, turn);
        let Some(record) = tasks::load_turn(&rt.home, &key)? else {
            continue;
        };
        let candidate = (record.submitted_at_millis, key);
        if best.as_ref().is_none_or(|b| {
            (candidate.0, &candidate.1.task, candidate.1.turn) > (b.0, &b.1.task, b.1.turn)
        }) {
            best = Some(candidate);
        }
    }
    best.map(|(_, key)| key)
        .ok_or_else(|| CliError::Usage("`last`: no turn has been submitted in this home".into()))
}
