//! `tollgate cancel`: a task's or one turn's queued rows removed, running ones asked to stop.

use super::common::{me, open, print_json};
use super::{exit, CancelArgs, CliError};
use crate::cancel as cancel_shell;
use crate::protocol::slots::TurnKey;
use crate::tasks;
use serde_json::json;
use std::path::PathBuf;

pub fn cancel(home: Option<PathBuf>, args: CancelArgs) -> Result<i32, CliError> {
    let rt = open(home)?;
    // With `--turn`, the argument is a task's name as given (a numeric task name included).
    let target = match args.turn {
        Some(turn) => super::turnref::Target::Turn(TurnKey::new(args.task.clone(), turn)),
        None => super::turnref::target(&rt, &args.task)?,
    };
    let (report, task) = match target {
        super::turnref::Target::Task(task) => (cancel_shell::cancel(&rt, &task)?, task),
        super::turnref::Target::Turn(key) if args.turn.is_some() => {
            if tasks::load_task(&rt.home, &key.task)?.is_some()
                && tasks::load_turn(&rt.home, &key)?.is_none()
            {
                return Err(CliError::Usage(format!(
                    "--turn {turn}: task {task} has no turn {turn} (`tollgate status {task}` lists its turns)",
                    turn = key.turn,
                    task = key.task
                )));
            }
            (cancel_shell::cancel_one_turn(&rt, &key)?, key.task)
        }
        super::turnref::Target::Turn(key) => (cancel_shell::cancel_turn(&rt, &key)?, key.task),
    };
    if args.json {
        print_json(&json!({
            "task": task,
            "cancelled": report.removed.iter().map(|k| k.turn).collect::<Vec<_>>(),
            "signalled": report.signalled.iter().map(|(k, id)| json!({"turn": k.turn, "pid": id.pid})).collect::<Vec<_>>(),
            "recorded": report.recorded.iter().map(|k| k.turn).collect::<Vec<_>>(),
        }))?;
    } else {
        for key in &report.removed {
            println!("{key}: cancelled before it started");
        }
        for (key, identity) in &report.signalled {
            println!("{key}: asked its runner (pid {}) to stop", identity.pid);
        }
        for key in &report.recorded {
            println!("{key}: being started; the cancel is recorded and its runner will not run it");
        }
        if report.removed.is_empty() && report.signalled.is_empty() && report.recorded.is_empty() {
            println!("{}: nothing queued or running", args.task);
        }
    }
    // A waker started for a removed turn's time has nothing left to wake (Q4): stop it rather
    // than leave it sleeping until then.
    if !report.removed.is_empty() {
        if let Ok(queue) = rt.store.load() {
            crate::process::wakers::stop_unneeded(rt.home.root(), &queue, tasks::now_millis());
        }
    }
    crate::runner::repair::after_section(&rt, me()?);
    Ok(exit::OK)
}
