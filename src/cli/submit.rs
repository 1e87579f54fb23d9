//! `tollgate submit` (and what `restart` shares): the request from the arguments, the submit, the report.

use super::common::{interactive, me, open, print_json};
use super::follow::follow_attempts;
use super::{exit, CliError, SubmitArgs};
use crate::argv::Env;
use crate::home::Home;
use crate::protocol::slots::steps::Busy;
use crate::protocol::slots::{HeldBack, TurnKey};
use crate::runtime::Runtime;
use crate::submit::{submit_attached, submit_detached, Attached, Placement, SubmitRequest};
use crate::tasks;
use serde_json::json;
use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

/// This command's environment (every variable, whatever its bytes) with the `--env` pairs over it.
fn parse_env(pairs: &[OsString]) -> Result<Env, CliError> {
    let mut env: Env = std::env::vars_os().collect();
    for pair in pairs {
        match crate::argv::split_assignment(pair) {
            Some((key, value)) => {
                env.insert(key, value);
            }
            None => {
                return Err(CliError::Usage(format!(
                    "--env {pair:?}: expected KEY=VALUE"
                )))
            }
        }
    }
    Ok(env)
}

/// The environment a submitted turn stores: the variables `env_keep` names and every `--env`,
/// or all of them with `--env-all`.
fn stored_env(home: Option<PathBuf>, pairs: &[OsString], all: bool) -> Result<Env, CliError> {
    let env = parse_env(pairs)?;
    if all {
        return Ok(env);
    }
    let config = Home::resolve(home)?.ensure()?;
    let given: Vec<OsString> = pairs
        .iter()
        .filter_map(|p| crate::argv::split_assignment(p))
        .map(|(k, _)| k)
        .collect();
    Ok(crate::config::env::kept(env, &config.env_keep, &given))
}

/// Most labels one turn carries.
const MAX_LABELS: usize = 16;
/// Longest label, in characters.
const MAX_LABEL_CHARS: usize = 64;

/// Checks `--label` values (non-empty, bounded, no spaces or commas: `status` joins them with
/// commas) and drops repeats, keeping the order given.
fn parse_labels(labels: Vec<String>) -> Result<Vec<String>, CliError> {
    let mut kept: Vec<String> = Vec::new();
    for label in labels {
        let bad = label.is_empty()
            || label.chars().count() > MAX_LABEL_CHARS
            || label
                .chars()
                .any(|c| c == ',' || c.is_whitespace() || c.is_control());
        if bad {
            return Err(CliError::Usage(format!(
                "--label {label:?}: expected 1..={MAX_LABEL_CHARS} characters without spaces, \
                 commas or control characters"
            )));
        }
        if !kept.contains(&label) {
            kept.push(label);
        }
    }
    if kept.len() > MAX_LABELS {
        return Err(CliError::Usage(format!(
            "--label given {} times: a turn carries at most {MAX_LABELS} labels",
            kept.len()
        )));
    }
    Ok(kept)
}

fn resolve_cwd(cwd: Option<PathBuf>) -> Result<PathBuf, CliError> {
    match cwd {
        Some(dir) => {
            if !dir.is_dir() {
                return Err(CliError::Usage(format!(
                    "--cwd {}: not a directory",
                    dir.display()
                )));
            }
            std::fs::canonicalize(&dir)
                .map_err(|e| CliError::Usage(format!("--cwd {}: {e}", dir.display())))
        }
        None => std::env::current_dir()
            .map_err(|e| CliError::Environment(format!("cannot read the current directory: {e}"))),
    }
}

pub fn submit(home: Option<PathBuf>, mut args: SubmitArgs) -> Result<i32, CliError> {
    let sequencing = super::deps::SequencingArgs::from_args(&mut args)?;
    let strategy = match &args.strategy {
        Some(text) => Some(
            text.parse::<crate::protocol::admission::Strategy>()
                .map_err(|e| CliError::Usage(format!("--strategy: {e}")))?,
        ),
        None => None,
    };
    let request = SubmitRequest {
        task: args.task,
        strategy,
        argv: args.command,
        cwd: Some(resolve_cwd(args.cwd)?),
        env: stored_env(home.clone(), &args.env, args.env_all)?,
        labels: parse_labels(args.labels)?,
        timeout_millis: args
            .timeout
            .as_deref()
            .map(crate::config::limits::parse_turn_timeout)
            .transpose()
            .map_err(|e| CliError::Usage(format!("--timeout: {e}")))?,
        schedule: schedule_of(args.delay.as_deref(), args.at.as_deref(), args.priority)?,
        delivery: None,
    };
    if let (false, Some(cwd)) = (args.no_check, &request.cwd) {
        super::program::check(&request.argv, cwd, &request.env)?;
    }
    let how = How {
        attach: args.attach,
        wait: args.wait,
        json: args.json,
        quiet: args.quiet,
    };
    submit_request_with(home, request, how, sequencing)
}

/// The [`Schedule`](crate::protocol::slots::steps::Schedule) of `--delay`/`--at`/`--priority`.
fn schedule_of(
    delay: Option<&str>,
    at: Option<&str>,
    priority: i32,
) -> Result<crate::protocol::slots::steps::Schedule, CliError> {
    let now = tasks::now_millis();
    let not_before_millis = match (delay, at) {
        (Some(delay), _) => super::sched::parse_delay(delay, now)?,
        (None, Some(at)) => super::sched::parse_at(at, now)?,
        (None, None) => 0,
    };
    Ok(crate::protocol::slots::steps::Schedule {
        priority,
        not_before_millis,
    })
}

/// How a submit (or a restart) reports and waits.
#[derive(Clone, Copy, Debug)]
pub(super) struct How {
    pub attach: bool,
    pub wait: bool,
    pub json: bool,
    /// `submit -q`: print the turn's id alone on stdout (for scripts), nothing else of our own.
    pub quiet: bool,
}

/// Queues `request` (or runs it attached) and reports it: what `submit` and `restart` share.
pub(super) fn submit_request(
    home: Option<PathBuf>,
    request: SubmitRequest,
    how: How,
) -> Result<i32, CliError> {
    submit_request_with(home, request, how, super::deps::SequencingArgs::default())
}

/// [`submit_request`] with `--after`/`--after-success`/`--retry` (detached only).
fn submit_request_with(
    home: Option<PathBuf>,
    request: SubmitRequest,
    how: How,
    sequencing: super::deps::SequencingArgs,
) -> Result<i32, CliError> {
    let mut rt = open(home)?;
    if how.wait && !how.attach {
        // The runners this submit starts close a pipe once their turn's outcome is committed
        // (`process::settle`): the wait ends then, without an inotify instance to tear down.
        rt.spawner = Box::new(crate::process::DetachedSpawner {
            home: rt.home.clone(),
            executable: None,
            settle: Some(std::sync::Arc::default()),
        });
    }
    let rt = rt;
    let me = me()?;
    if how.attach {
        let (key, execution) = match submit_attached(&rt, me, request)? {
            Attached::Ran { key, execution } => (key, execution),
            Attached::Dropped { key, running, busy } => {
                return dropped(&key, &running, busy, how.json)
            }
        };
        if how.quiet {
            if let Some(id) = tasks::load_turn(&rt.home, &key)?.and_then(|t| t.id) {
                println!("{id}");
            }
        } else if how.json {
            let id = tasks::load_turn(&rt.home, &key)?.and_then(|t| t.id);
            print_json(&json!({
                "task": key.task, "turn": key.turn, "id": id, "placement": "attached",
                "outcome": execution.outcome, "exit_code": execution.exit_code,
                "signal": execution.signal, "error": execution.error,
            }))?;
        } else if let Some(error) = &execution.error {
            eprintln!("tollgate: task {} turn {}: {error}", key.task, key.turn);
        } else if execution.outcome == tasks::TurnOutcome::TimedOut {
            eprintln!("tollgate: {key} timed out: its processes were killed");
        }
        return Ok(execution.shell_exit_code());
    }
    let labels = request.labels.clone();
    let submitted = if sequencing.is_empty() {
        submit_detached(&rt, me, request)?
    } else {
        let sequencing = sequencing.resolve(&rt)?;
        crate::submit::submit_detached_sequenced(&rt, me, request, sequencing)?
    };
    // Id 0: never queued (dropped, or dependency-failed at the submit).
    let (key, id) = (submitted.key.clone(), submitted.queue_id);
    report_detached(rt, me, submitted, labels, how).map_err(|e| match id {
        0 => e,
        id => e.after_queued(&key, id),
    })
}

/// Reports a detached submit whose turn is decided (and, unless dropped, queued), and waits for
/// it with `--wait`: whatever fails from here on is "state unknown" (exit 6), not a failure.
fn report_detached(
    rt: Runtime,
    me: crate::protocol::slots::ProcessIdentity,
    submitted: crate::submit::Submitted,
    labels: Vec<String>,
    how: How,
) -> Result<i32, CliError> {
    crate::runner::repair::after_section(&rt, me);
    let key = &submitted.key;
    if let Placement::Dropped { running, busy } = &submitted.placement {
        return dropped(key, running, *busy, how.json);
    }
    if let Placement::DependencyFailed { cause } = &submitted.placement {
        return dependency_failed(&rt, key, cause, how.json);
    }
    for old in &submitted.superseded {
        if !how.json {
            eprintln!(
                "{old}: superseded by turn {} (strategy {})",
                key.turn, submitted.strategy
            );
        }
    }
    let (placement, runner) = match &submitted.placement {
        Placement::Started(handoff) => ("started", Some(handoff.child())),
        Placement::Parked => ("parked", None),
        Placement::Waiting { .. } => ("waiting", None),
        Placement::Held { .. } => ("held", None),
        Placement::Pending | Placement::Dropped { .. } | Placement::DependencyFailed { .. } => {
            ("pending", None)
        }
    };
    // A pause or a not-before time (not a debounce's quiet period) holds the new turn.
    let held = submitted.held.filter(|h| match h {
        HeldBack::Paused => true,
        HeldBack::NotBefore { .. } => !matches!(
            submitted.strategy,
            crate::protocol::admission::Strategy::Debounce { .. }
        ),
    });
    let held_json = match held {
        Some(HeldBack::Paused) => json!("paused"),
        Some(HeldBack::NotBefore { .. }) => json!("delayed"),
        None => serde_json::Value::Null,
    };
    let not_before = match held.or(submitted.held) {
        Some(HeldBack::NotBefore { ready_at_millis }) => Some(ready_at_millis),
        _ => None,
    };
    if how.quiet {
        println!("{}", submitted.queue_id);
    } else if how.json && !how.wait {
        print_json(&json!({
            "task": key.task, "turn": key.turn, "id": submitted.queue_id,
            "queue_id": submitted.queue_id,
            "placement": placement, "runner": runner, "strategy": submitted.strategy.to_string(),
            "labels": labels,
            "superseded": submitted.superseded.iter().map(|k| k.turn).collect::<Vec<_>>(),
            "held": held_json, "not_before_millis": not_before,
        }))?;
    } else if !how.json {
        // The short id is what later commands take (`tollgate logs 17`).
        let named = format!(
            "task {} turn {} (id {})",
            key.task, key.turn, submitted.queue_id
        );
        // A row parked on a drained host waits for another host, not for a slot here.
        let drained = (runner.is_none() && placement == "parked")
            .then(|| drained_host(&rt))
            .flatten();
        let line = match (runner, held) {
            // Held for its dependencies first: that is what it waits for before any pause or time.
            _ if placement == "held" => match &submitted.placement {
                Placement::Held { waiting_on } => format!(
                    "{named} waits for {}",
                    super::deps::waiting_on(&rt, waiting_on)
                ),
                _ => format!("{named} is held"),
            },
            (_, Some(HeldBack::Paused)) => format!(
                "{named} queued, paused: it starts after `tollgate resume{}`",
                if rt.store.load()?.paused.home {
                    String::new()
                } else {
                    format!(" {}", key.task)
                }
            ),
            (_, Some(HeldBack::NotBefore { ready_at_millis })) => format!(
                "{named} queued, delayed until {}",
                super::sched::local_clock(ready_at_millis, tasks::now_millis())
            ),
            (runner, None) => match runner {
                Some(runner) => format!("{named} started (runner pid {})", runner.pid),
                None if placement == "parked" && drained.is_some() => format!(
                    "{named} queued: this host ({}) is drained, so another host starts it \
                     (`tollgate drain --undo` lets this one start turns again)",
                    drained.as_deref().unwrap_or_default()
                ),
                None if placement == "parked" => format!(
                    "{named} queued: all {} worker slot(s) are busy; it starts when one frees",
                    rt.cap()
                ),
                None if placement == "waiting" => {
                    format!("{named} waits its turn (strategy {})", submitted.strategy)
                }
                None => format!("{named} is {placement}"),
            },
        };
        // With --wait, stdout carries the turn's own output; our line goes to stderr.
        if how.wait {
            eprintln!("{line}");
        } else {
            println!("{line}");
        }
    }
    if !how.wait {
        return Ok(exit::OK);
    }
    if interactive() && !how.json && !how.quiet {
        eprintln!("following {key} until it ends (Ctrl-C stops following; the turn keeps running)");
    }
    let turn = follow_attempts(&rt, key, !how.json)?;
    let key = &turn.key;
    if turn.outcome == Some(tasks::TurnOutcome::DependencyFailed) {
        if let (Some(cause), false) = (&turn.failed_dependency, how.json) {
            dependency_failed(&rt, key, cause, false)?;
        } else if how.json {
            print_json(&json!({
                "task": key.task, "turn": key.turn, "id": turn.id, "placement": placement,
                "outcome": turn.outcome, "failed_dependency": turn.failed_dependency,
            }))?;
        }
        return Ok(exit::DEPENDENCY_FAILED);
    }
    if let (Some(error), false) = (&turn.error, how.json) {
        eprintln!("tollgate: {key} could not start: {error}");
    }
    if how.json {
        print_json(&json!({
            "task": key.task, "turn": key.turn, "id": submitted.queue_id,
            "queue_id": submitted.queue_id,
            "placement": placement, "runner": runner, "outcome": turn.outcome,
            "exit_code": turn.exit_code, "signal": turn.signal,
        }))?;
    }
    if turn.outcome == Some(tasks::TurnOutcome::TimedOut) {
        if !how.json {
            let limit = turn.timeout_millis.map_or_else(String::new, |millis| {
                format!(
                    " after {}",
                    humantime::format_duration(Duration::from_millis(millis))
                )
            });
            eprintln!("tollgate: {key} timed out{limit}: its processes were killed");
        }
        return Ok(crate::runner::TIMED_OUT_EXIT_CODE);
    }
    Ok(match (turn.exit_code, turn.signal) {
        (Some(code), _) => code,
        (None, Some(signal)) => 128 + signal,
        (None, None) => exit::FAILED,
    })
}

/// Reports a turn that will never run because its `--after-success` dependency `cause` did not
/// succeed, with its own exit code.
fn dependency_failed(
    rt: &Runtime,
    key: &TurnKey,
    cause: &TurnKey,
    json: bool,
) -> Result<i32, CliError> {
    let turn = tasks::load_turn(&rt.home, key)?;
    if json {
        print_json(&json!({
            "task": key.task, "turn": key.turn, "id": turn.as_ref().and_then(|t| t.id),
            "placement": "dependency_failed", "outcome": "dependency_failed",
            "failed_dependency": cause,
        }))?;
    } else {
        let why = turn
            .and_then(|t| t.error)
            .unwrap_or_else(|| format!("its dependency {cause} did not succeed"));
        eprintln!("tollgate: {}: {why}", super::deps::named(rt, key));
    }
    Ok(exit::DEPENDENCY_FAILED)
}

/// Reports a turn refused by the `drop` strategy, with its own exit code.
fn dropped(key: &TurnKey, running: &TurnKey, busy: Busy, json: bool) -> Result<i32, CliError> {
    if json {
        let busy_word = match busy {
            Busy::Running => "running",
            Busy::Starting => "starting",
            Busy::WaitingForSlot => "waiting_for_slot",
        };
        print_json(&json!({
            "task": key.task, "turn": key.turn, "placement": "dropped",
            "outcome": "dropped", "running_turn": running.turn, "busy": busy_word,
        }))?;
    } else {
        eprintln!(
            "tollgate: task {} turn {} dropped: turn {} {busy} and the task's strategy is drop",
            key.task, key.turn, running.turn
        );
    }
    Ok(exit::DROPPED)
}

/// On a fleet: this host's name if it is drained (`tollgate drain`); `None` when it is not, or on
/// one host.
fn drained_host(rt: &Runtime) -> Option<String> {
    match crate::status::this_host_report(&rt.store) {
        (Some(host), true) => Some(host),
        _ => None,
    }
}
