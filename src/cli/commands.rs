//! One function per subcommand: parse what the user gave, call the shell, print the answer.

use super::{
    exit, CancelArgs, CliError, InitArgs, LogsArgs, ReconcileArgs, StatusArgs, SubmitArgs,
};
use crate::home::Home;
use crate::process::self_identity;
use crate::protocol::slots::steps::Busy;
use crate::protocol::slots::{HeldBack, ReconcileStep, SlotToken, TurnKey};
use crate::runner::{run_worker, WorkerOutcome};
use crate::runtime::Runtime;
use crate::submit::{submit_attached, submit_detached, Attached, Placement, SubmitRequest};
use crate::tasks::{self, TurnRecord};
use crate::{cancel as cancel_shell, reconcile as reconcile_shell, status as status_shell};
use serde_json::json;
use std::collections::BTreeMap;
use std::io::{IsTerminal, Read, Seek, SeekFrom, Write};
use std::path::PathBuf;
use std::time::Duration;

fn open(home: Option<PathBuf>) -> Result<Runtime, CliError> {
    Ok(Runtime::open(Home::resolve(home)?)?)
}

fn me() -> Result<crate::protocol::slots::ProcessIdentity, CliError> {
    self_identity().map_err(|e| CliError::Environment(e.to_string()))
}

fn print_json(value: &serde_json::Value) -> Result<(), CliError> {
    let text = serde_json::to_string_pretty(value)
        .map_err(|e| CliError::Environment(format!("cannot render JSON: {e}")))?;
    println!("{text}");
    Ok(())
}

pub fn init(home: Option<PathBuf>, args: InitArgs) -> Result<i32, CliError> {
    let home = Home::resolve(home)?;
    let config = if home.config_path().exists() {
        // An existing config is edited in place, so the user's comments and layout stay.
        home.ensure()?;
        match args.workers {
            Some(workers) => {
                crate::config::edit::set_key(&home.config_path(), "workers", &workers.to_string())?
            }
            None => home.ensure()?,
        }
    } else {
        home.init(args.workers)?
    };
    if args.json {
        print_json(&json!({
            "home": home.root(),
            "config": home.config_path(),
            "workers": config.workers,
            "lock_timeout": config.lock_timeout,
        }))?;
    } else {
        println!(
            "home {} ready: {} worker slot(s); config in {}",
            home.root().display(),
            config.workers,
            home.config_path().display()
        );
    }
    Ok(exit::OK)
}

fn parse_env(pairs: &[String]) -> Result<BTreeMap<String, String>, CliError> {
    let mut env: BTreeMap<String, String> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect();
    for pair in pairs {
        match pair.split_once('=') {
            Some((key, value)) if !key.is_empty() => {
                env.insert(key.to_string(), value.to_string());
            }
            _ => {
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
fn stored_env(
    home: Option<PathBuf>,
    pairs: &[String],
    all: bool,
) -> Result<BTreeMap<String, String>, CliError> {
    let env = parse_env(pairs)?;
    if all {
        return Ok(env);
    }
    let config = Home::resolve(home)?.ensure()?;
    let given: Vec<&str> = pairs
        .iter()
        .filter_map(|p| p.split_once('='))
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

/// Keeps only the turns carrying `label` (and the queue rows and works of those turns); a task
/// left without turns is left out.
fn only_label(mut view: status_shell::StatusView, label: &str) -> status_shell::StatusView {
    let mut keys = std::collections::BTreeSet::new();
    for task in &mut view.tasks {
        task.turns.retain(|t| t.labels.iter().any(|l| l == label));
        task.hidden_turns = 0;
        for turn in &task.turns {
            keys.insert((task.name.clone(), turn.turn));
        }
    }
    view.tasks.retain(|t| !t.turns.is_empty());
    view.rows
        .retain(|r| keys.contains(&(r.task.clone(), r.turn)));
    view.works
        .retain(|w| keys.contains(&(w.task.clone(), w.turn)));
    view.runners
        .retain(|r| keys.contains(&(r.task.clone(), r.turn)));
    view
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
    };
    let how = How {
        attach: args.attach,
        wait: args.wait,
        json: args.json,
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
        if how.json {
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
        crate::submit::submit_detached_sequenced(&rt, me, request, sequencing, |_, _| Ok(()))?
    };
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
    if how.json && !how.wait {
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
                    "{named} parked: all {} worker slot(s) are busy; it starts when one frees",
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
    if interactive() && !how.json {
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

/// [`follow_turn`] along the turn's retry chain: a failed attempt that was retried is followed
/// by its retry (`retried_as`), up to the last attempt, whose record is returned.
fn follow_attempts(rt: &Runtime, key: &TurnKey, stream: bool) -> Result<TurnRecord, CliError> {
    let mut key = key.clone();
    for _ in 0..crate::protocol::slots::MAX_ATTEMPTS {
        let turn = follow_turn(rt, &key, stream)?;
        match turn.retried_as {
            Some(next) => {
                let next = TurnKey::new(key.task.clone(), next);
                if stream {
                    eprintln!("tollgate: {key} failed; retried as turn {}", next.turn);
                }
                key = next;
            }
            None => return Ok(turn),
        }
    }
    follow_turn(rt, &key, stream)
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

/// Waits for the turn's record to have an outcome (another process writes it), copying the
/// turn's output to ours as it grows when `stream` is set. A runner this process started says
/// both on its settle signal ([`crate::process::settle`]); otherwise, or once that closed with no
/// outcome, it sleeps on the turn folder's events and the runner's pidfd ([`crate::watch`]), and
/// the runner's liveness is read when it ended, when the fallback period passed, or while no pidfd
/// follows it yet.
fn follow_turn(rt: &Runtime, key: &TurnKey, stream: bool) -> Result<TurnRecord, CliError> {
    let (mut out_offset, mut err_offset) = (0u64, 0u64);
    let (mut stdout, mut stderr) = (std::io::stdout(), std::io::stderr());
    if let Some(read_end) = rt.spawner.settle_signal(key) {
        use crate::process::settle::{wait, Seen};
        loop {
            let seen = wait(&read_end, SETTLE_RECHECK);
            if stream {
                out_offset = copy_new(&rt.home.stdout_log(key), out_offset, &mut stdout)?;
                err_offset = copy_new(&rt.home.stderr_log(key), err_offset, &mut stderr)?;
            }
            // The record is the truth; the pipe only says when to look.
            let turn = tasks::load_turn(&rt.home, key)?;
            if let Some(turn) = turn.filter(|t| t.is_settled()) {
                return Ok(turn);
            }
            if seen == Seen::Closed {
                // Closed with no outcome: the runner died or was refused. The general watch
                // below tells those apart.
                break;
            }
        }
    }
    // Watch before the first read, so a change after it wakes us.
    let mut watch = crate::watch::TurnWatch::new(&[rt.home.turn_dir(key)], stream);
    let mut check_runner = true;
    loop {
        let turn = tasks::load_turn(&rt.home, key)?.ok_or_else(|| {
            CliError::Environment(format!(
                "the record of {key} disappeared from {}",
                tasks::turn_record_location(&rt.home, key)
            ))
        })?;
        if stream {
            out_offset = copy_new(&rt.home.stdout_log(key), out_offset, &mut stdout)?;
            err_offset = copy_new(&rt.home.stderr_log(key), err_offset, &mut stderr)?;
        }
        if turn.is_settled() {
            return Ok(turn);
        }
        if check_runner {
            runner_alive(rt, key, &turn, &mut watch)?;
        }
        let wake = watch.wait();
        check_runner = wake != crate::watch::Wake::Changed || !watch.has_events();
    }
}

/// The bound on one sleep on a settle signal ([`crate::process::settle`]), after which the record
/// is read anyway. Only a live runner records its turn's outcome (a cancel asks it; a repair acts
/// on a dead runner, whose end is closed), so this bound only matters if that ever stops holding.
const SETTLE_RECHECK: Duration = Duration::from_secs(60);

/// Fails when the turn's runner died: such a turn never ends by itself, so say so instead of
/// waiting forever. A live runner is followed by `watch` (its death wakes the next wait).
pub(super) fn runner_alive(
    rt: &Runtime,
    key: &TurnKey,
    turn: &TurnRecord,
    watch: &mut crate::watch::TurnWatch,
) -> Result<(), CliError> {
    let queue = rt.store.load()?;
    let state = |queue: &crate::protocol::slots::QueueState| {
        crate::fleet::observing(&rt.store, || {
            status_shell::turn_state(queue, turn, &rt.liveness)
        })
    };
    if state(&queue)? == "orphaned" {
        // The row was read before the liveness check: a runner that recorded the turn's end
        // and exited in between looks orphaned. Read both again now that it was seen dead: a
        // commit it made before dying is visible.
        let again = tasks::load_turn(&rt.home, key)?;
        if again.as_ref().is_none_or(|t| t.is_settled()) || state(&rt.store.load()?)? != "orphaned"
        {
            return Ok(());
        }
        let runner = queue
            .runner(key)
            .map(|r| format!(" (pid {})", r.identity.pid))
            .unwrap_or_default();
        return Err(CliError::Environment(format!(
            "{key}: its runner{runner} is gone, so it cannot end by itself; \
             `tollgate reconcile` repairs it"
        )));
    }
    if let Some(runner) = queue.runner(key) {
        watch.follow_runner(runner.identity.pid);
    }
    Ok(())
}

/// The status `args` ask for: one task or all, every turn or the recent ones, one label or all.
fn view_of(rt: &Runtime, args: &StatusArgs) -> Result<status_shell::StatusView, CliError> {
    // A label filter looks at turns of every age, so nothing it matches is hidden.
    let all = args.all || args.label.is_some();
    let view = status_shell::status_with(rt, args.task.as_deref(), all)?;
    Ok(match &args.label {
        Some(label) => only_label(view, label),
        None => view,
    })
}

pub fn status(home: Option<PathBuf>, args: StatusArgs) -> Result<i32, CliError> {
    let rt = open(home)?;
    if args.json {
        let view = view_of(&rt, &args)?;
        let value = serde_json::to_value(&view)
            .map_err(|e| CliError::Environment(format!("cannot render JSON: {e}")))?;
        print_json(&value)?;
        crate::runner::repair::after_section(&rt, me()?);
        return Ok(exit::OK);
    }
    let style = super::status_table::TableStyle::detect();
    if !args.watch {
        let view = view_of(&rt, &args)?;
        print!(
            "{}",
            super::status_table::render(&view, tasks::now_millis(), &style)
        );
        crate::runner::repair::after_section(&rt, me()?);
        return Ok(exit::OK);
    }
    let interval = humantime::parse_duration(&args.interval)
        .ok()
        .filter(|d| *d >= Duration::from_millis(100) && *d <= Duration::from_secs(3600))
        .ok_or_else(|| {
            CliError::Usage(format!(
                "--interval {:?}: expected a duration from 100ms to 1h (e.g. 500ms, 2s)",
                args.interval
            ))
        })?;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, std::sync::Arc::clone(&stop))
            .map_err(|e| CliError::Environment(format!("installing signal handlers: {e}")))?;
    }
    let mut stdout = std::io::stdout();
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let view = view_of(&rt, &args)?;
        let table = super::status_table::render(&view, tasks::now_millis(), &style);
        // Home the cursor and clear the screen, then draw: the table refreshes in place.
        let _ = write!(stdout, "\x1b[H\x1b[2J{table}");
        let _ = stdout.flush();
        let deadline = std::time::Instant::now() + interval;
        while !stop.load(std::sync::atomic::Ordering::Relaxed)
            && std::time::Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(50).min(interval));
        }
    }
    Ok(exit::OK)
}

fn latest_turn(rt: &Runtime, task: &str) -> Result<u32, CliError> {
    if tasks::load_task(&rt.home, task)?.is_none() {
        return Err(CliError::Usage(format!(
            "unknown task {task:?}: no such task in {} (`tollgate status` lists the tasks)",
            rt.home.root().display()
        )));
    }
    tasks::list_turns(&rt.home, task)?
        .last()
        .copied()
        .ok_or_else(|| CliError::Usage(format!("task {task:?} has no turns yet")))
}

/// Copies what was appended to `path` since `offset` into `out`; returns the new offset.
fn copy_new(path: &std::path::Path, offset: u64, out: &mut dyn Write) -> Result<u64, CliError> {
    let mut file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(offset),
        Err(e) => return Err(CliError::Environment(format!("{}: {e}", path.display()))),
    };
    let io = |e: std::io::Error| CliError::Environment(format!("{}: {e}", path.display()));
    file.seek(SeekFrom::Start(offset)).map_err(io)?;
    let mut buffer = Vec::new();
    file.read_to_end(&mut buffer).map_err(io)?;
    out.write_all(&buffer).map_err(io)?;
    out.flush().map_err(io)?;
    Ok(offset + buffer.len() as u64)
}

pub fn logs(home: Option<PathBuf>, args: LogsArgs) -> Result<i32, CliError> {
    let rt = open(home)?;
    let key = match args.turn {
        Some(turn) => {
            latest_turn(&rt, &args.task)?;
            TurnKey::new(args.task.clone(), turn)
        }
        // TASK, TASK:N or `last`.
        None => super::turnref::resolve(&rt, &args.task)?,
    };
    let turn = key.turn;
    if tasks::load_turn(&rt.home, &key)?.is_none() {
        return Err(CliError::Usage(format!(
            "task {:?} has no turn {turn}",
            args.task
        )));
    }
    if let Some(remote) = remote_output(&rt, &key)? {
        return remote_logs(&rt, &key, &remote, &args);
    }
    if args.json {
        if args.follow {
            follow_turn(&rt, &key, false)?;
        }
        return logs_json(&rt, &key);
    }
    let printed = if args.follow {
        follow_turn(&rt, &key, true)?;
        log_bytes(&rt, &key) > 0
    } else {
        let out = copy_new(&rt.home.stdout_log(&key), 0, &mut std::io::stdout())?;
        let err = copy_new(&rt.home.stderr_log(&key), 0, &mut std::io::stderr())?;
        out + err > 0
    };
    if !printed {
        // An empty answer with exit 0 looks like a turn that printed nothing: say what it is.
        if let Some(turn) = tasks::load_turn(&rt.home, &key)? {
            eprintln!(
                "tollgate: {key} has no output: {}",
                why_no_output(&rt, &turn)?
            );
        }
    }
    Ok(exit::OK)
}

/// Where `logs` reads a turn's output on a fleet when the turn ran on another host: the store's
/// `turn_output` table (spec/fleet.md, "Logs across hosts"). `None`: the local files (one host, a
/// turn of this host, or a turn whose record names no host).
struct RemoteOutput {
    store: crate::queue::PostgresStore,
    host: String,
}

fn remote_output(rt: &Runtime, key: &TurnKey) -> Result<Option<RemoteOutput>, CliError> {
    let Some(store) = crate::queue::Store::lease_renewer(&rt.store) else {
        return Ok(None);
    };
    let here = store.fleet().map(|f| f.host.clone());
    let turn = tasks::load_turn(&rt.home, key)?;
    Ok(match turn.and_then(|t| t.host) {
        Some(host) if Some(&host) != here.as_ref() => Some(RemoteOutput {
            store,
            host: host.to_string(),
        }),
        _ => None,
    })
}

/// How often `logs --follow` of a turn running on another host reads the table again.
const REMOTE_FOLLOW_POLL_MILLIS: u64 = 500;

/// The line printed before a stream whose head the table no longer keeps.
fn stored_truncation_line(dropped: u64, host: &str) -> String {
    format!(
        "[tollgate: output truncated: the database keeps the last {} bytes of each stream of a \
         turn; {dropped} bytes before them dropped (the whole log is on host {host})]\n",
        crate::queue::TURN_OUTPUT_MAX_BYTES
    )
}

/// Prints what the table holds of both streams past `offsets`, moving them on; the bytes printed.
fn print_stored(
    remote: &RemoteOutput,
    key: &TurnKey,
    offsets: &mut [u64; 2],
) -> Result<u64, CliError> {
    use crate::queue::OutputStream;
    let mut printed = 0;
    for (stream, offset) in [OutputStream::Stdout, OutputStream::Stderr]
        .into_iter()
        .zip(offsets.iter_mut())
    {
        let stored = remote
            .store
            .read_output(&key.task, key.turn, stream, *offset)?;
        let mut out: Box<dyn Write> = match stream {
            OutputStream::Stdout => Box::new(std::io::stdout()),
            OutputStream::Stderr => Box::new(std::io::stderr()),
        };
        let io = |e: std::io::Error| CliError::Environment(format!("writing the output: {e}"));
        if stored.dropped_bytes > 0 {
            out.write_all(stored_truncation_line(stored.dropped_bytes, &remote.host).as_bytes())
                .map_err(io)?;
        }
        out.write_all(&stored.bytes).map_err(io)?;
        out.flush().map_err(io)?;
        printed += stored.bytes.len() as u64;
        *offset = stored.next_offset;
    }
    Ok(printed)
}

/// Waits until the turn's record has an outcome, reading it every
/// [`REMOTE_FOLLOW_POLL_MILLIS`] (its runner is on another host: no local event nor pidfd
/// follows it), and prints the new output after each read when `stream` is set. The record is
/// read before the output: its runner copies the last output before it records the outcome, so
/// the output read after a settled record is complete.
fn follow_remote(
    rt: &Runtime,
    key: &TurnKey,
    remote: &RemoteOutput,
    stream: bool,
    offsets: &mut [u64; 2],
) -> Result<(TurnRecord, u64), CliError> {
    let mut printed = 0;
    loop {
        let turn = tasks::load_turn(&rt.home, key)?.ok_or_else(|| {
            CliError::Environment(format!(
                "the record of {key} disappeared from {}",
                tasks::turn_record_location(&rt.home, key)
            ))
        })?;
        if stream {
            printed += print_stored(remote, key, offsets)?;
        }
        if turn.is_settled() {
            return Ok((turn, printed));
        }
        std::thread::sleep(std::time::Duration::from_millis(REMOTE_FOLLOW_POLL_MILLIS));
    }
}

/// `logs` of a turn that ran on another host of the fleet: its output from the table.
fn remote_logs(
    rt: &Runtime,
    key: &TurnKey,
    remote: &RemoteOutput,
    args: &LogsArgs,
) -> Result<i32, CliError> {
    let mut offsets = [0u64; 2];
    if args.json {
        if args.follow {
            follow_remote(rt, key, remote, false, &mut offsets)?;
        }
        return logs_json_from(rt, key, Some(remote));
    }
    let printed = if args.follow {
        follow_remote(rt, key, remote, true, &mut offsets)?.1
    } else {
        print_stored(remote, key, &mut offsets)?
    };
    if printed == 0 {
        if let Some(turn) = tasks::load_turn(&rt.home, key)? {
            eprintln!(
                "tollgate: {key} has no output: {} (it ran on host {})",
                why_no_output(rt, &turn)?,
                remote.host
            );
        }
    }
    Ok(exit::OK)
}

/// The most of one stream `logs --json` carries (its tail; the head is counted as dropped).
const LOGS_JSON_MAX_BYTES: u64 = 16 * 1024 * 1024;

/// The last [`LOGS_JSON_MAX_BYTES`] of `path` as text (invalid UTF-8 replaced), and how many
/// bytes before them were left out.
fn log_tail(path: &std::path::Path) -> Result<(String, u64), CliError> {
    let io = |e: std::io::Error| CliError::Environment(format!("{}: {e}", path.display()));
    let mut file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((String::new(), 0)),
        Err(e) => return Err(io(e)),
    };
    let len = file.metadata().map_err(io)?.len();
    let skipped = len.saturating_sub(LOGS_JSON_MAX_BYTES);
    file.seek(SeekFrom::Start(skipped)).map_err(io)?;
    let mut buffer = Vec::new();
    file.take(LOGS_JSON_MAX_BYTES)
        .read_to_end(&mut buffer)
        .map_err(io)?;
    Ok((String::from_utf8_lossy(&buffer).into_owned(), skipped))
}

/// `logs --json`: the turn and both of its streams in one document.
fn logs_json(rt: &Runtime, key: &TurnKey) -> Result<i32, CliError> {
    logs_json_from(rt, key, None)
}

/// [`logs_json`] with the streams read from the local files, or from the table when the turn
/// ran on another host (`remote`).
fn logs_json_from(
    rt: &Runtime,
    key: &TurnKey,
    remote: Option<&RemoteOutput>,
) -> Result<i32, CliError> {
    let turn = tasks::load_turn(&rt.home, key)?.ok_or_else(|| {
        CliError::Environment(format!(
            "the record of {key} disappeared from {}",
            tasks::turn_record_location(&rt.home, key)
        ))
    })?;
    let queue = rt.store.load()?;
    let state = tasks::recording_or(
        &rt.home,
        key,
        crate::fleet::observing(&rt.store, || {
            status_shell::turn_state(&queue, &turn, &rt.liveness)
        })?,
    );
    let ((stdout, stdout_skipped), (stderr, stderr_skipped)) = match remote {
        None => (
            log_tail(&rt.home.stdout_log(key))?,
            log_tail(&rt.home.stderr_log(key))?,
        ),
        Some(remote) => {
            use crate::queue::OutputStream;
            let read = |stream| -> Result<(String, u64), CliError> {
                let stored = remote.store.read_output(&key.task, key.turn, stream, 0)?;
                Ok((
                    String::from_utf8_lossy(&stored.bytes).into_owned(),
                    stored.dropped_bytes,
                ))
            };
            (read(OutputStream::Stdout)?, read(OutputStream::Stderr)?)
        }
    };
    let note = if stdout.is_empty() && stderr.is_empty() {
        Some(why_no_output(rt, &turn)?)
    } else {
        None
    };
    print_json(&json!({
        "task": key.task, "turn": key.turn, "id": turn.id, "state": state,
        "outcome": turn.outcome, "exit_code": turn.exit_code, "signal": turn.signal,
        "error": turn.error, "host": turn.host,
        "stdout": stdout, "stderr": stderr,
        "stdout_skipped_bytes": stdout_skipped, "stderr_skipped_bytes": stderr_skipped,
        "no_output": note,
    }))?;
    Ok(exit::OK)
}

fn log_bytes(rt: &Runtime, key: &TurnKey) -> u64 {
    [rt.home.stdout_log(key), rt.home.stderr_log(key)]
        .iter()
        .filter_map(|p| std::fs::metadata(p).ok())
        .map(|m| m.len())
        .sum()
}

/// Why a turn has no output, in the words of `status`.
fn why_no_output(rt: &Runtime, turn: &TurnRecord) -> Result<String, CliError> {
    if turn.outcome == Some(tasks::TurnOutcome::DependencyFailed) {
        let why = turn
            .error
            .clone()
            .unwrap_or_else(|| "a dependency failed".into());
        return Ok(format!("it never ran (dependency-failed): {why}"));
    }
    if let Some(error) = &turn.error {
        return Ok(format!("it could not start: {error}"));
    }
    if turn.attached {
        return Ok(
            "it ran attached (--attach): its output went to the terminal that ran it".into(),
        );
    }
    let queue = rt.store.load()?;
    let state = crate::fleet::observing(&rt.store, || {
        status_shell::turn_state(&queue, turn, &rt.liveness)
    })?;
    Ok(match state.as_str() {
        "parked" => "it is queued: it waits for a free worker slot".to_string(),
        "held" => {
            let waiting: Vec<TurnKey> = queue
                .row(&turn.key)
                .map(|r| r.after.iter().map(|d| d.key.clone()).collect())
                .unwrap_or_default();
            format!(
                "it is held: it waits for {} (--after)",
                super::deps::waiting_on(rt, &waiting)
            )
        }
        "waiting" => "it waits its turn in its task's line (strategy)".to_string(),
        "starting" | "running" => format!("it is {state} and has printed nothing yet"),
        "unqueued" => {
            "it is orphaned (its submitter died before queueing it): `tollgate reconcile` starts it"
                .to_string()
        }
        "dropped" | "superseded" | "cancelled" => format!("it never ran ({state})"),
        _ => format!("it ended ({state}) without printing anything"),
    })
}

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
        }))?;
    } else {
        for key in &report.removed {
            println!("{key}: cancelled before it started");
        }
        for (key, identity) in &report.signalled {
            println!("{key}: asked its runner (pid {}) to stop", identity.pid);
        }
        if report.removed.is_empty() && report.signalled.is_empty() {
            println!("{}: nothing queued or running", args.task);
        }
    }
    crate::runner::repair::after_section(&rt, me()?);
    Ok(exit::OK)
}

fn describe(step: &ReconcileStep) -> String {
    match step {
        ReconcileStep::CompletedHandoff { key } => {
            format!("{key}: finished a dead submitter's handoff")
        }
        ReconcileStep::Parked { key } => format!("{key}: owner gone, parked"),
        ReconcileStep::Removed { key } => {
            format!("{key}: had already ended, removed from the queue")
        }
        ReconcileStep::Spawn {
            key,
            replaced: Some(dead),
            ..
        } => {
            format!(
                "{key}: runner pid {} is gone, started a replacement",
                dead.pid
            )
        }
        ReconcileStep::Spawn {
            key,
            replaced: None,
            ..
        } => format!("{key}: started on a free slot"),
        ReconcileStep::Kill { key, work } => {
            format!(
                "{key}: runner pid {} is gone, killing its work {}",
                work.runner.pid, work.id
            )
        }
        ReconcileStep::Forgotten { key } => {
            format!("{key}: no turn record, removed its queue row")
        }
        ReconcileStep::Requeued { key } => {
            format!("{key}: owner gone, parked (its row was never queued)")
        }
        ReconcileStep::Saturated => "every worker slot is busy; parked rows wait".to_string(),
        ReconcileStep::Idle => "nothing left to repair".to_string(),
    }
}

pub fn reconcile(home: Option<PathBuf>, args: ReconcileArgs) -> Result<i32, CliError> {
    let rt = open(home)?;
    let report = reconcile_shell::reconcile(&rt, me()?)?;
    // What a SIGKILLed `tollgate run` left on this home is killed too (spec/execution.md, D8).
    // Only when a run ever recorded itself here: a home without a sweep list gains no file.
    let dead_runs = if crate::exec::sweep::has_list(rt.home.root()) {
        crate::exec::sweep::sweep_dead_runs(rt.home.root()).map_err(|e| match e {
            e @ crate::exec::sweep::SweepError::Unreadable { .. } => CliError::Usage(e.to_string()),
            e => CliError::Environment(e.to_string()),
        })?
    } else {
        Vec::new()
    };
    let failed: Vec<String> = report
        .handoffs
        .iter()
        .filter_map(|(key, r)| r.as_ref().err().map(|e| format!("{key}: {e}")))
        .collect();
    let runs: Vec<String> = dead_runs
        .iter()
        .map(|d| {
            let mut line = format!(
                "run {} (pid {} is gone): killed {} process(es) it left",
                d.run_id, d.run_pid, d.killed
            );
            if !d.survivors.is_empty() {
                line.push_str(&format!(
                    ", {} survived SIGKILL: {:?}",
                    d.survivors.len(),
                    d.survivors
                ));
            }
            line
        })
        .collect();
    if args.json {
        print_json(&json!({
            "steps": report.steps.iter().map(describe).collect::<Vec<_>>(),
            "spawn_failures": failed,
            "dead_runs": runs,
        }))?;
    } else {
        for line in &runs {
            println!("{line}");
        }
        for step in &report.steps {
            println!("{}", describe(step));
        }
        for failure in &failed {
            eprintln!("tollgate: could not start {failure}");
        }
    }
    Ok(if failed.is_empty() {
        exit::OK
    } else {
        exit::ENVIRONMENT
    })
}

pub fn worker_runner(
    home: Option<PathBuf>,
    task: &str,
    turn: u32,
    slot_token: &str,
    log_to_turn_folder: bool,
) -> Result<i32, CliError> {
    let token: SlotToken = slot_token
        .parse()
        .map_err(|e| CliError::Usage(format!("--slot-token: {e}")))?;
    let home = Home::resolve(home)?;
    let key = TurnKey::new(task, turn);
    if log_to_turn_folder {
        crate::runner::log::to_turn_folder(&home, &key);
    }
    let rt = Runtime::open(home)?;
    let stamp = || humantime::format_rfc3339_millis(std::time::SystemTime::now());
    match run_worker(&rt, &key, token)? {
        WorkerOutcome::Ran { outcome, next } => {
            eprintln!("[{}] {key}: ran, outcome {outcome:?}", stamp());
            if let Some(next) = next {
                eprintln!("[{}] started the next parked row: {next:?}", stamp());
            }
            Ok(exit::OK)
        }
        WorkerOutcome::Refused { holder } => {
            eprintln!("[{}] {key}: refused, held by {holder}", stamp());
            Ok(exit::FAILED)
        }
        WorkerOutcome::AlreadySettled => {
            eprintln!("[{}] {key}: already ended, left the queue", stamp());
            Ok(exit::OK)
        }
    }
}

/// Whether stderr is a terminal (progress lines are shown only there).
fn interactive() -> bool {
    std::io::stderr().is_terminal()
}

/// The longest a waker sleeps; a debounce period beyond it starts at the next finish or reconcile.
const MAX_WAKE_SLEEP_MILLIS: u64 = 7 * 24 * 3600 * 1000;

pub fn worker_wake(home: Option<PathBuf>, at_millis: u64) -> Result<i32, CliError> {
    let wait_millis = at_millis
        .saturating_sub(tasks::now_millis())
        .min(MAX_WAKE_SLEEP_MILLIS);
    // Watch the home before opening it: opening creates what is missing, and a waker started
    // just before its home was deleted would make the home again and sleep on for it.
    let home = Home::resolve(home)?;
    if !crate::watch::sleep_unless_removed(home.root(), Duration::from_millis(wait_millis)) {
        // The home is gone (deleted or moved): nothing is left to wake.
        return Ok(exit::OK);
    }
    let rt = Runtime::open(home)?;
    reconcile_shell::reconcile(&rt, me()?)?;
    Ok(exit::OK)
}
