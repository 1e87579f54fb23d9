//! On-finish hooks (`[[hook]]` in tollgate.toml, spec/turns.md "Hooks"): run by the turn's runner
//! after the turn's result is recorded and its slot freed (outside the queue lock, never in a
//! worker slot), each in a containment unit of its own that is killed at the hook's timeout and
//! once it exits (nothing it forked outlives it). A hook's failure is reported on the runner's
//! stderr (a detached runner's `runner.log`) and never changes the turn's record.

use crate::config::hooks::{HookTable, MAX_HOOKS_PER_TURN};
use crate::home::Home;
use crate::process::containment::{self, cgroup, Containment, Marker, UnitIdentity};
use crate::protocol::slots::SlotToken;
use crate::tasks::{TurnOutcome, TurnRecord};
use std::fs::OpenOptions;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// The marker variable of a hook's unit (`TOLLGATE_HOOK=<uuid>`).
pub const HOOK_ENV: &str = "TOLLGATE_HOOK";
/// The file in the turn's directory that the hooks' stdout and stderr are appended to.
pub const HOOKS_LOG: &str = "hooks.log";
/// How often a hook's exit and deadline are checked.
const HOOK_POLL_MILLIS: u64 = 10;

/// How one hook ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HookEnd {
    Exited(ExitStatus),
    /// Killed (its whole unit) at its timeout.
    TimedOut,
    /// Could not be started (its error).
    Unstartable(String),
}

/// Runs the hooks of `hooks` that match `turn` (ended), in file order, at most
/// [`MAX_HOOKS_PER_TURN`]; returns what each did with its table index, for the caller's log.
pub fn run_hooks(home: &Home, hooks: &[HookTable], turn: &TurnRecord) -> Vec<(usize, HookEnd)> {
    let Some(outcome) = turn.outcome else {
        return Vec::new();
    };
    let succeeded = outcome == TurnOutcome::Completed;
    let matching: Vec<(usize, &HookTable)> = hooks
        .iter()
        .enumerate()
        .filter(|(_, h)| h.matches(&turn.key.task, succeeded))
        .collect();
    if matching.is_empty() {
        return Vec::new();
    }
    if matching.len() > MAX_HOOKS_PER_TURN {
        log(&format!(
            "{}: {} hooks match; only the first {MAX_HOOKS_PER_TURN} run",
            turn.key,
            matching.len()
        ));
    }
    let (containment, _) = containment::choose(containment::forced_off_by_env());
    let mut ends = Vec::new();
    for (index, hook) in matching.into_iter().take(MAX_HOOKS_PER_TURN) {
        let end = run_one(home, hook, turn, outcome, &containment);
        let what = format!("{}: hook[{index}] {:?}", turn.key, hook.command);
        match &end {
            HookEnd::Exited(status) if status.success() => log(&format!("{what}: exited 0")),
            HookEnd::Exited(status) => log(&format!("{what}: FAILED, {status}")),
            HookEnd::TimedOut => log(&format!(
                "{what}: FAILED, killed at its timeout of {}",
                humantime::format_duration(hook.timeout())
            )),
            HookEnd::Unstartable(e) => log(&format!("{what}: FAILED, cannot start: {e}")),
        }
        ends.push((index, end));
    }
    ends
}

fn log(line: &str) {
    let stamp = humantime::format_rfc3339_millis(std::time::SystemTime::now());
    eprintln!("[{stamp}] {line}");
}

/// The outcome word a hook sees in `TOLLGATE_OUTCOME` (the `--json` state word).
fn outcome_word(outcome: TurnOutcome) -> &'static str {
    match outcome {
        TurnOutcome::Completed => "completed",
        TurnOutcome::Failed => "failed",
        TurnOutcome::Cancelled => "cancelled",
        TurnOutcome::Unstartable => "unstartable",
        TurnOutcome::Dropped => "dropped",
        TurnOutcome::Superseded => "superseded",
        TurnOutcome::TimedOut => "timed_out",
        TurnOutcome::DependencyFailed => "dependency_failed",
    }
}

fn run_one(
    home: &Home,
    hook: &HookTable,
    turn: &TurnRecord,
    outcome: TurnOutcome,
    containment: &Containment,
) -> HookEnd {
    let Some((program, args)) = hook.command.split_first() else {
        return HookEnd::Unstartable("empty command".to_string());
    };
    let id = SlotToken::generate().as_uuid().simple().to_string();
    let parent = match containment {
        Containment::Cgroup { base } => Some(base.as_path()),
        Containment::Subreaper => None,
    };
    // The owner's pid leads the name, so `cgroup::owner_of` sweeps a group a dead runner left.
    let name = format!("{}{}-hook-{id}", cgroup::GROUP_PREFIX, std::process::id());
    let mut unit = UnitIdentity::prepare(parent, &name, Marker::exact(HOOK_ENV, id));
    let open_log = || {
        OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(home.turn_dir(&turn.key).join(HOOKS_LOG))
    };
    let (out, err) = match (open_log(), open_log()) {
        (Ok(out), Ok(err)) => (out, err),
        (Err(e), _) | (_, Err(e)) => {
            remove_group(&unit);
            return HookEnd::Unstartable(format!("cannot open {HOOKS_LOG}: {e}"));
        }
    };
    let mut command = Command::new(program);
    command
        .args(args)
        .env_clear()
        .envs(&turn.env)
        // The turn's own marker must never reach the hook (it is not the turn's work).
        .env_remove(crate::protocol::slots::WorkId::ENV)
        .env("TOLLGATE_TASK", &turn.key.task)
        .env("TOLLGATE_TURN", turn.key.turn.to_string())
        .env(
            "TOLLGATE_ID",
            turn.id.map(|id| id.to_string()).unwrap_or_default(),
        )
        .env("TOLLGATE_OUTCOME", outcome_word(outcome))
        .env(
            "TOLLGATE_EXIT_CODE",
            turn.exit_code.map(|c| c.to_string()).unwrap_or_default(),
        )
        .env("TOLLGATE_LOG", home.stdout_log(&turn.key))
        .env("TOLLGATE_STDERR_LOG", home.stderr_log(&turn.key))
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err);
    if let Some(cwd) = &turn.cwd {
        command.current_dir(cwd);
    }
    unit.configure(&mut command);
    let me = nix::unistd::getpid();
    // SAFETY: runs in the forked child before exec; prctl(PR_SET_PDEATHSIG) and getppid are plain
    // syscalls that allocate nothing, so they are safe there.
    unsafe {
        command.pre_exec(move || crate::process::die_with_parent(me));
    }
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            remove_group(&unit);
            return HookEnd::Unstartable(format!("{program:?}: {e}"));
        }
    };
    if let Err(e) = unit.started(child.id()) {
        log(&format!("cannot move hook {program:?} into its group: {e}"));
    }
    let deadline = Instant::now() + hook.timeout();
    let grace = Duration::from_millis(crate::process::work::WORK_TERM_GRACE_MILLIS);
    let end = loop {
        match child.try_wait() {
            Ok(Some(status)) => break HookEnd::Exited(status),
            Ok(None) => {}
            Err(e) => break HookEnd::Unstartable(format!("waiting for {program:?}: {e}")),
        }
        if Instant::now() >= deadline {
            containment::kill_unit(&unit, grace);
            // Reaped so it leaves no zombie; its status no longer matters.
            let _ = child.wait();
            break HookEnd::TimedOut;
        }
        std::thread::sleep(Duration::from_millis(HOOK_POLL_MILLIS));
    };
    // Whatever it left running (a background child) goes with it; removes the group.
    containment::kill_unit(&unit, grace);
    end
}

fn remove_group(unit: &UnitIdentity) {
    if let Some(dir) = &unit.cgroup {
        cgroup::remove_tree(dir);
    }
}
