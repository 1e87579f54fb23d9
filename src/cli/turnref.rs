//! How a user names a turn on the command line: `17` (the turn whose short id is 17), `TASK` (its
//! latest turn), `TASK:N` (turn N of TASK), `TASK:last` (its latest turn: how a task whose name is
//! all digits is named), or `last` (the turn submitted most recently in the home).

use super::CliError;
use crate::protocol::slots::TurnKey;
use crate::runtime::Runtime;
use crate::tasks;

/// The word that names the most recently submitted turn.
pub const LAST: &str = "last";

/// What every command taking a turn says it accepts (in errors and `--help`).
pub const FORMS: &str = "ID (a turn's short id, as in `status`), TASK (its latest turn), TASK:N, \
TASK:last or `last`";

/// Resolves one reference to an existing turn; an unknown id, task or turn is a usage error
/// naming it.
pub fn resolve(rt: &Runtime, reference: &str) -> Result<TurnKey, CliError> {
    if reference == LAST {
        return last(rt);
    }
    if !reference.is_empty() && reference.bytes().all(|b| b.is_ascii_digit()) {
        return by_id(rt, reference);
    }
    let (task, turn) = match reference.rsplit_once(':') {
        Some((task, LAST)) => (task, None),
        Some((task, n)) => {
            let turn = n.parse::<u32>().map_err(|_| {
                CliError::Usage(format!("{reference:?}: expected {FORMS} (N a turn number)"))
            })?;
            (task, Some(turn))
        }
        None => (reference, None),
    };
    resolve_task_turn(rt, task, turn)
}

/// Turn `turn` of `task` (its latest when `None`), checked to exist.
pub fn resolve_task_turn(rt: &Runtime, task: &str, turn: Option<u32>) -> Result<TurnKey, CliError> {
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

/// The turn whose short id is `text` (all digits), from the database's index of short ids.
fn by_id(rt: &Runtime, text: &str) -> Result<TurnKey, CliError> {
    let numeric_task = || {
        if matches!(tasks::load_task(&rt.home, text), Ok(Some(_))) {
            format!(" (for the task named {text:?}, write {text}:last or {text}:N)")
        } else {
            String::new()
        }
    };
    let id: u64 = text
        .parse()
        .map_err(|_| CliError::Usage(format!("{text:?}: no turn has this id{}", numeric_task())))?;
    let mut found = tasks::turns_with_id(&rt.home, id)?;
    match found.len() {
        1 => Ok(found.remove(0)),
        0 => Err(CliError::Usage(format!(
            "no turn has id {id} in {}{} (`tollgate status` shows the ids)",
            rt.home.root().display(),
            numeric_task()
        ))),
        // Only if the queue file was deleted and its counter started again.
        _ => Err(CliError::Usage(format!(
            "id {id} names {} turns ({}); name one as TASK:N",
            found.len(),
            found
                .iter()
                .map(|k| format!("{}:{}", k.task, k.turn))
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
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

/// What `cancel` acts on: a whole task, or one turn.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// A plain task name: every queued and running turn of it.
    Task(String),
    /// An id, `TASK:N`, `TASK:last` or `last`: that turn only.
    Turn(TurnKey),
}

/// Reads `cancel`'s argument: a plain task name is the task, any other form names one turn.
pub fn target(rt: &Runtime, reference: &str) -> Result<Target, CliError> {
    let plain_task = reference != LAST
        && !reference.contains(':')
        && !reference.bytes().all(|b| b.is_ascii_digit());
    if plain_task {
        Ok(Target::Task(reference.to_string()))
    } else {
        resolve(rt, reference).map(Target::Turn)
    }
}
