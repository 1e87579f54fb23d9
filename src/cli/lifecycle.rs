//! The everyday verbs around turns that already exist: `wait`, `restart`, `clean`.

use super::submit::{submit_request, How};
use super::turnref;
use super::{exit, CliError};
use crate::home::Home;
use crate::protocol::slots::sections::{CleanEffect, CleanScope, CleanSection, Cleaned};
use crate::protocol::slots::TurnKey;
use crate::runtime::Runtime;
use crate::submit::SubmitRequest;
use crate::tasks::{self, TurnOutcome, TurnRecord};
use crate::turn_state::TurnState;
use serde_json::json;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, clap::Args)]
#[command(
    after_help = "TURN is ID (a turn's short id, as `submit` and `status` show it), TASK (its \
latest turn), TASK:N (turn N), TASK:last (for a task named with digits) or `last` (the turn \
submitted last in the home).

Exit code: with one TURN, its own exit code (128+signal if a signal ended it; 1 if it never ran: \
cancelled, dropped, superseded; 5 if it never ran because a turn it waited for with \
--after-success did not succeed; 127 if it could not start); with several, the highest of theirs. \
A turn retried by `submit --retry` is followed to its last attempt, whose exit code counts.

Examples:
  tollgate wait 17               the turn whose id is 17
  tollgate wait build            the latest turn of task build
  tollgate wait build:3 deploy   turn 3 of build and the latest of deploy
  tollgate wait last"
)]
pub struct WaitArgs {
    /// The turns to wait for.
    #[arg(required = true, value_name = "TURN")]
    pub turns: Vec<String>,
    /// Print each turn's outcome as JSON when all have ended.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
#[command(
    after_help = "TURN is ID, TASK (its latest turn), TASK:N, TASK:last or `last`. The new turn belongs to \
the same task and runs the same command in the same directory with the same environment; the \
old turn is kept as it is."
)]
pub struct RestartArgs {
    /// The turn whose command runs again.
    #[arg(value_name = "TURN")]
    pub turn: String,
    /// Wait for the new turn to end and exit with its exit code.
    #[arg(long)]
    pub wait: bool,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Only ended turns are removed (completed, failed, timed_out, cancelled, \
unstartable, dropped, superseded, dependency_failed), never a queued, waiting or running one. \
--keep counts the ended turns of the whole home (of TASK with --task), newest by id, so one-off \
submits (each a task of its own) are cleaned like the turns of a long-lived task. A task left \
with no turns is removed too (its record and folder), unless it holds a setting: a strategy other \
than concurrent=1, or a pause. One line says what was removed; --json lists it.

Examples:
  tollgate clean                       remove every ended turn
  tollgate clean --keep 3              keep the 3 newest ended turns of the home
  tollgate clean --task build --keep 3 keep the 3 newest ended turns of task build
  tollgate clean --older-than 7d       remove ended turns that ended over a week ago"
)]
pub struct CleanArgs {
    /// Keep this many of the newest ended turns of the home (of the task with --task).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub keep: usize,
    /// Remove only turns that ended longer ago than this (e.g. 2h, 7d).
    #[arg(long, value_name = "DUR", value_parser = humantime::parse_duration)]
    pub older_than: Option<Duration>,
    /// Only this task.
    #[arg(long, value_name = "TASK")]
    pub task: Option<String>,
    /// Print what would be removed, remove nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

fn open(home: Option<PathBuf>) -> Result<Runtime, CliError> {
    Ok(Runtime::open(Home::resolve(home)?)?)
}

/// The exit code a settled turn stands for (as `submit --wait` reports it).
fn exit_code_of(turn: &TurnRecord) -> i32 {
    match (turn.exit_code, turn.signal, turn.outcome) {
        (Some(code), _, _) => code,
        (None, Some(signal), _) => 128 + signal,
        (None, None, Some(TurnOutcome::Completed)) => exit::OK,
        (None, None, Some(TurnOutcome::DependencyFailed)) => exit::DEPENDENCY_FAILED,
        _ => exit::FAILED,
    }
}

pub fn wait(home: Option<PathBuf>, args: WaitArgs) -> Result<i32, CliError> {
    let rt = open(home)?;
    let mut keys = args
        .turns
        .iter()
        .map(|r| turnref::resolve(&rt, r))
        .collect::<Result<Vec<TurnKey>, CliError>>()?;
    let mut ended: Vec<Option<TurnRecord>> = vec![None; keys.len()];
    // The turns' records are written by other processes: sleep on their folders' events (watched
    // before the first read, so no change is missed), re-reading on each wake.
    let watch_of = |keys: &[TurnKey]| {
        let dirs: Vec<PathBuf> = keys.iter().map(|k| rt.home.turn_dir(k)).collect();
        crate::watch::TurnWatch::new(&dirs, false)
    };
    let mut watch = watch_of(&keys);
    let mut check_runner = true;
    loop {
        // A retried turn is waited for along its retry chain, to its last attempt.
        let mut followed = false;
        for key in keys.iter_mut() {
            let retried = tasks::load_turn(&rt.home, key)?.and_then(|t| t.retried_as);
            if let Some(next) = retried {
                let next = TurnKey::new(key.task.clone(), next);
                if !args.json {
                    eprintln!("{key}: failed; retried as turn {}", next.turn);
                }
                *key = next;
                followed = true;
            }
        }
        if followed {
            watch = watch_of(&keys);
            continue;
        }
        for (key, slot) in keys.iter().zip(ended.iter_mut()) {
            if slot.is_none() {
                let turn = tasks::load_turn(&rt.home, key)?.ok_or_else(|| {
                    CliError::Environment(format!(
                        "the record of {key} disappeared from {}",
                        tasks::turn_record_location(&rt.home, key)
                    ))
                })?;
                if turn.is_settled() && turn.retried_as.is_some() {
                    // Retried since the check above: followed at once.
                    followed = true;
                    continue;
                }
                if turn.is_settled() {
                    if !args.json {
                        let why = match (&turn.outcome, &turn.error) {
                            (Some(TurnOutcome::DependencyFailed), Some(error)) => {
                                format!(": {error}")
                            }
                            _ => String::new(),
                        };
                        eprintln!(
                            "{key}: {} (exit {}){why}",
                            turn.outcome
                                .map_or("ended", |o| TurnState::of_outcome(o).word()),
                            exit_code_of(&turn)
                        );
                    }
                    *slot = Some(turn);
                } else if check_runner {
                    // A turn whose runner died never ends: say so (exit 3) instead of hanging.
                    super::follow::runner_alive(&rt, key, &turn, &mut watch)?;
                }
            }
        }
        if ended.iter().all(Option::is_some) {
            break;
        }
        if followed {
            continue;
        }
        let wake = watch.wait();
        check_runner = wake != crate::watch::Wake::Changed || !watch.has_events();
    }
    let turns: Vec<TurnRecord> = ended.into_iter().flatten().collect();
    let worst = turns.iter().map(exit_code_of).max().unwrap_or(exit::OK);
    if args.json {
        let list: Vec<_> = turns
            .iter()
            .map(|t| {
                json!({"task": t.key.task, "turn": t.key.turn, "outcome": t.outcome,
                       "exit_code": t.exit_code, "signal": t.signal})
            })
            .collect();
        let text = serde_json::to_string_pretty(&json!({ "turns": list, "exit_code": worst }))
            .map_err(|e| CliError::Environment(format!("cannot render JSON: {e}")))?;
        println!("{text}");
    }
    Ok(worst)
}

pub fn restart(home: Option<PathBuf>, args: RestartArgs) -> Result<i32, CliError> {
    let rt = open(home.clone())?;
    let key = turnref::resolve(&rt, &args.turn)?;
    let old = tasks::load_turn(&rt.home, &key)?.ok_or_else(|| {
        CliError::Usage(format!(
            "{key} has no record in {}",
            tasks::turn_record_location(&rt.home, &key)
        ))
    })?;
    if !args.json {
        eprintln!("restarting {key}: {}", crate::argv::display(&old.argv));
    }
    let request = SubmitRequest {
        task: Some(key.task.clone()),
        strategy: None,
        argv: old.argv,
        cwd: old.cwd,
        env: old.env,
        labels: old.labels,
        timeout_millis: old.timeout_millis,
        schedule: Default::default(),
        delivery: None,
    };
    submit_request(
        home,
        request,
        How {
            attach: false,
            wait: args.wait,
            json: args.json,
            quiet: false,
        },
    )
}

pub fn clean(home: Option<PathBuf>, args: CleanArgs) -> Result<i32, CliError> {
    let rt = open(home)?;
    let now = tasks::now_millis();
    let cutoff = args
        .older_than
        .map(|d| now.saturating_sub(u64::try_from(d.as_millis()).unwrap_or(u64::MAX)));
    let listed;
    let scope = match &args.task {
        Some(task) => CleanScope::Task(task),
        None => {
            listed = tasks::list_tasks(&rt.home)?;
            CleanScope::Tasks(&listed)
        }
    };
    let section = CleanSection {
        scope,
        keep: args.keep,
        ended_before_millis: cutoff,
        dry_run: args.dry_run,
    };
    let Cleaned {
        turns: removed,
        tasks: removed_tasks,
    } = match crate::section::run(&rt, &section)? {
        CleanEffect::Cleaned(cleaned) => cleaned,
        CleanEffect::UnknownTask(task) => {
            return Err(CliError::Usage(format!(
                "unknown task {task:?}: no such task in {}",
                rt.home.root().display()
            )))
        }
    };
    if args.json {
        let list: Vec<_> = removed
            .iter()
            .map(|k| json!({"task": k.task, "turn": k.turn}))
            .collect();
        let text = serde_json::to_string_pretty(&json!({
            "removed": list, "removed_tasks": removed_tasks, "dry_run": args.dry_run,
        }))
        .map_err(|e| CliError::Environment(format!("cannot render JSON: {e}")))?;
        println!("{text}");
    } else {
        let verb = if args.dry_run {
            "would remove"
        } else {
            "removed"
        };
        let tasks_part = match removed_tasks.len() {
            0 => String::new(),
            n => format!(" and {n} task(s) left without turns"),
        };
        println!(
            "{verb} {} ended turn(s) with their logs{tasks_part}{}",
            removed.len(),
            if args.keep > 0 {
                format!(" (kept the {} newest ended)", args.keep)
            } else {
                String::new()
            }
        );
    }
    Ok(exit::OK)
}
