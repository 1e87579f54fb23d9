//! Task and turn records on disk: `tasks/<task>/task.json` and `tasks/<task>/turns/<n>/turn.json`.
//!
//! The queue lock guards these files too: a turn number is handed out, its record written and its
//! row enqueued in one critical section.

use crate::fsutil::{self, FileError};
use crate::home::Home;
use crate::protocol::admission::Strategy;
use crate::protocol::slots::{ProcessIdentity, TurnKey};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;

pub const TASK_FORMAT_VERSION: u32 = 1;
/// Arguments of one command, bounded so a turn record stays small.
pub const MAX_ARGV: usize = 4096;

fn default_task_version() -> u32 {
    TASK_FORMAT_VERSION
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskRecord {
    #[serde(default = "default_task_version")]
    pub version: u32,
    pub name: String,
    #[serde(default)]
    pub created_at_millis: u64,
    /// The number the next turn gets; turns are numbered 1, 2, …
    #[serde(default = "one")]
    pub next_turn: u32,
    /// What a new turn does while the task is busy (`submit --strategy` sets it).
    #[serde(default)]
    pub strategy: Strategy,
}

fn one() -> u32 {
    1
}

/// How a turn ended (or where it stands).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TurnOutcome {
    /// The command exited 0.
    Completed,
    /// The command exited non-zero or was killed by a signal.
    Failed,
    /// `tollgate cancel` ended it.
    Cancelled,
    /// The command could not be started at all (bad cwd, missing program).
    Unstartable,
    /// Refused at submit: the task's strategy is `drop` and a turn was running.
    Dropped,
    /// A newer turn replaced it while it waited (strategy `queue` or `debounce`).
    Superseded,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnRecord {
    #[serde(default = "default_task_version")]
    pub version: u32,
    #[serde(flatten)]
    pub key: TurnKey,
    pub argv: Vec<String>,
    #[serde(default)]
    pub cwd: Option<PathBuf>,
    /// The environment the command runs with (the submitter's, plus `--env` overrides).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default)]
    pub attached: bool,
    #[serde(default)]
    pub submitted_at_millis: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at_millis: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runner: Option<ProcessIdentity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at_millis: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<TurnOutcome>,
    /// Why the command could not start, when it could not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The webhook delivery this turn serves (`tollgate serve`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery: Option<DeliveryMeta>,
}

/// Which delivery a turn serves: what a restarted `serve` needs to re-adopt it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeliveryMeta {
    /// The serving instance's delivery id (unique per home: a v7 UUID).
    pub id: String,
    pub adapter: String,
    /// The tenant's installation (the adapter is the other half of the tenant).
    pub tenant: String,
    /// The event identity it was deduplicated on.
    pub identity: String,
    /// When it was admitted (ms since the epoch).
    #[serde(default)]
    pub admitted_at_millis: u64,
    /// The route it came in on (part of its dedupe key); empty in records that predate it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub route: String,
}

impl TurnRecord {
    pub fn is_settled(&self) -> bool {
        self.outcome.is_some()
    }
}

pub fn load_task(home: &Home, task: &str) -> Result<Option<TaskRecord>, FileError> {
    fsutil::load_json(&home.task_file(task))
}

pub fn load_turn(home: &Home, key: &TurnKey) -> Result<Option<TurnRecord>, FileError> {
    fsutil::load_json(&home.turn_file(key))
}

pub fn save_turn(home: &Home, turn: &TurnRecord) -> Result<(), FileError> {
    fsutil::publish_json(&home.turn_file(&turn.key), turn)
}

/// Hands out the next turn number of `task` (creating the task) and writes the turn's record.
/// Call under the queue lock.
#[allow(clippy::too_many_arguments)]
pub fn create_turn(
    home: &Home,
    task: &str,
    argv: Vec<String>,
    cwd: Option<PathBuf>,
    env: BTreeMap<String, String>,
    attached: bool,
    now_millis: u64,
) -> Result<TurnRecord, FileError> {
    create_turn_with(home, task, None, argv, cwd, env, attached, now_millis).map(|(turn, _)| turn)
}

/// [`create_turn`], also setting the task's strategy when `strategy` is given; returns the
/// strategy in force for this turn.
#[allow(clippy::too_many_arguments)]
pub fn create_turn_with(
    home: &Home,
    task: &str,
    strategy: Option<Strategy>,
    argv: Vec<String>,
    cwd: Option<PathBuf>,
    env: BTreeMap<String, String>,
    attached: bool,
    now_millis: u64,
) -> Result<(TurnRecord, Strategy), FileError> {
    fsutil::create_private_dir(&home.task_dir(task))?;
    let mut record = load_task(home, task)?.unwrap_or(TaskRecord {
        version: TASK_FORMAT_VERSION,
        name: task.to_string(),
        created_at_millis: now_millis,
        next_turn: 1,
        strategy: Strategy::default(),
    });
    if let Some(strategy) = strategy {
        record.strategy = strategy;
    }
    let key = TurnKey::new(task, record.next_turn);
    record.next_turn = record.next_turn.saturating_add(1);
    fsutil::create_private_dir(&home.turn_dir(&key))?;
    let turn = TurnRecord {
        version: TASK_FORMAT_VERSION,
        key,
        argv,
        cwd,
        env,
        attached,
        submitted_at_millis: now_millis,
        started_at_millis: None,
        runner: None,
        ended_at_millis: None,
        exit_code: None,
        signal: None,
        outcome: None,
        error: None,
        delivery: None,
    };
    // The task's counter first: a crash between the two writes then skips a turn number instead
    // of leaving a turn record its task does not list (which the next turn would overwrite).
    fsutil::publish_json(&home.task_file(task), &record)?;
    save_turn(home, &turn)?;
    Ok((turn, record.strategy))
}

/// Ends a turn that never ran with `outcome` (dropped, superseded, cancelled).
pub fn end_unrun(
    home: &Home,
    key: &TurnKey,
    outcome: TurnOutcome,
    now_millis: u64,
) -> Result<(), FileError> {
    if let Some(mut turn) = load_turn(home, key)? {
        if !turn.is_settled() {
            turn.outcome = Some(outcome);
            turn.ended_at_millis = Some(now_millis);
            save_turn(home, &turn)?;
        }
    }
    Ok(())
}

/// The strategies of the tasks that have parked rows in `state` (what deciding a start needs).
pub fn parked_strategies(
    home: &Home,
    state: &crate::protocol::slots::QueueState,
) -> Result<BTreeMap<String, Strategy>, FileError> {
    let mut strategies = BTreeMap::new();
    for entry in &state.entries {
        if matches!(entry.state, crate::protocol::slots::RowState::Parked)
            && !strategies.contains_key(&entry.key.task)
        {
            let strategy = load_task(home, &entry.key.task)?
                .map(|t| t.strategy)
                .unwrap_or_default();
            strategies.insert(entry.key.task.clone(), strategy);
        }
    }
    Ok(strategies)
}

/// Names of every task in the home, sorted.
pub fn list_tasks(home: &Home) -> Result<Vec<String>, FileError> {
    let dir = home.tasks_dir();
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(FileError::io(&dir, e)),
    };
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| FileError::io(&dir, e))?;
        if entry.path().join("task.json").is_file() {
            names.push(entry.file_name().to_string_lossy().into_owned());
        }
    }
    names.sort();
    Ok(names)
}

/// Turn numbers recorded for `task`, ascending.
pub fn list_turns(home: &Home, task: &str) -> Result<Vec<u32>, FileError> {
    let dir = home.task_dir(task).join("turns");
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(FileError::io(&dir, e)),
    };
    let mut turns = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| FileError::io(&dir, e))?;
        if let Ok(n) = entry.file_name().to_string_lossy().parse::<u32>() {
            turns.push(n);
        }
    }
    turns.sort_unstable();
    Ok(turns)
}

pub fn now_millis() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
