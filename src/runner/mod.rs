//! The executor of one turn: the hidden `worker runner`, and the foreground (`--attach`) path.
//!
//! Sections, each one core step: take the slot over ([`steps::runner_take_over`], which records
//! the work and its containment unit's cgroup before the command starts, or answers `Cancelled`
//! when a cancel was recorded on the row first), record the command's leader
//! ([`steps::work_started`]), and leave the queue starting the next parked row
//! ([`steps::runner_finish`]). Between them the command runs outside the lock, and whatever is
//! left of its work is killed before leaving, so the slot is freed only when the work is gone.

mod execute;
pub mod guard;
pub mod hooks;
pub mod lease;
pub mod log;
pub mod output_pg;
pub mod payload;
pub mod repair;

pub use execute::{
    execute_turn, truncation_line, Execution, LogDrains, RERUN_MARK, TIMED_OUT_EXIT_CODE,
};

use crate::dispatch::{DispatchError, Handoff};
use crate::driver;
use crate::process::{containment, work};
use crate::protocol::slots::sections::{FinishEffect, FinishSection, TakeOverSection, WorkStarted};
use crate::protocol::slots::steps::TakeOverEffect;
use crate::protocol::slots::{Liveness, ProcessIdentity, SlotToken, TurnKey, WorkId, WorkRecord};
use crate::queue::Store;
use crate::runtime::Runtime;
use crate::tasks::{self, TurnOutcome, TurnRecord};
use std::path::PathBuf;

/// What a detached runner did, for its exit code and its log line.
#[derive(Debug)]
pub enum WorkerOutcome {
    /// Took the slot over and ran the turn.
    Ran {
        outcome: TurnOutcome,
        next: Option<Handoff>,
    },
    /// Another live process holds the row; nothing ran.
    Refused { holder: ProcessIdentity },
    /// The turn already had a result (a previous runner died while leaving); nothing ran again.
    AlreadySettled,
}

/// The hidden `worker runner <task> <turn> --slot-token <uuid>`.
pub fn run_worker<L: Liveness, S: Store>(
    rt: &Runtime<L, S>,
    key: &TurnKey,
    token: SlotToken,
) -> Result<WorkerOutcome, DispatchError> {
    // A runner still starting up (SIGTERM not handled yet), held for a test that cancels it in
    // that window (`tests/failpoints_runner_startup.rs`).
    #[cfg(feature = "failpoints")]
    crate::failgate::hold("runner::before_signals");
    let me = crate::process::self_identity()
        .map_err(|e| DispatchError::io("reading this runner's identity", e))?;
    crate::process::signals::install()
        .map_err(|e| DispatchError::io("installing signal handlers", e.into()))?;
    // On a fleet, before this process becomes a subreaper (spec/fleet.md, "The guard").
    let mut guard = start_guard_if_fleet(rt);
    // Subreaper on both paths; the cgroup path where this runner can delegate a group.
    let (containment, reason) = containment::choose(containment::forced_off_by_env());
    tracing::debug!("{key}: containment {containment:?} ({reason:?})");
    let cgroup = work::cgroup_for(&containment, WorkId::from_token(token));
    let cgroup_text = cgroup.as_ref().map(|d| d.display().to_string());
    let take_over_sent = crate::fleet::boottime_millis();
    let (effect, turn) = take_over_to_run(rt, key, token, me, cgroup_text.as_deref())?;
    let work = match effect {
        TakeOverEffect::Refused { holder } => return Ok(WorkerOutcome::Refused { holder }),
        TakeOverEffect::AlreadySettled => {
            leave_and_start_next(rt, key, me)?;
            crate::process::settle::announce_settled();
            return Ok(WorkerOutcome::AlreadySettled);
        }
        TakeOverEffect::Cancelled => {
            // The cancel came first: nothing was spawned, and the record says so.
            let mut turn = turn;
            let next = finish_with(rt, &mut turn, &Execution::cancelled_before_start(), me)?;
            crate::process::settle::announce_settled();
            hooks::run_hooks(&rt.home, &rt.config.hooks, &turn);
            return Ok(WorkerOutcome::Ran {
                outcome: TurnOutcome::Cancelled,
                next,
            });
        }
        TakeOverEffect::Run { work } => work,
    };
    let mut turn = turn;
    // On a fleet: renewals, and self-fencing if they fail (spec/fleet.md, F1).
    let lease = lease::start_if_fleet(rt, key, me, work, cgroup.clone(), take_over_sent)?;
    let output = output_pg::start_if_fleet(rt, key); // for `logs` on other hosts
    let execution = run_work_guarded(rt, &turn, me, work, cgroup, guard.as_mut());
    if let Some(guard) = guard {
        guard.done(); // the work is dead: nothing for the guard to kill
    }
    drop(lease); // the work is dead: the renewals end, no fence any more
    lease::wait_out_a_fence(); // unless a fence killed it: then the fence ends this process
    if let Some(output) = output {
        output.finish(); // before the outcome: a reader that sees it ended has all the output
    }
    let outcome = execution.outcome;
    let next = finish_with(rt, &mut turn, &execution, me)?;
    // The outcome is committed: a `submit --wait` that started us may return now.
    crate::process::settle::announce_settled();
    // After the result is recorded and the slot freed (the next row may already run).
    hooks::run_hooks(&rt.home, &rt.config.hooks, &turn);
    Ok(WorkerOutcome::Ran { outcome, next })
}

/// On a fleet (a PostgreSQL home with leases), starts the runner's guard
/// ([`guard::Guard::start`]) with the fence's grace, so a runner that dies is killed as it would
/// fence itself. `None` on one host, where a repair on this host is the only one that can take
/// the slot and it kills the work first; and `None` (logged) if it cannot start: the runner then
/// runs unguarded, as before.
fn start_guard_if_fleet<L: Liveness, S: Store>(rt: &Runtime<L, S>) -> Option<guard::Guard> {
    let timing = rt.store.lease_renewer()?.fleet()?.timing;
    let grace_millis = lease::fence_grace_millis(&timing);
    let started = std::env::current_exe().and_then(|exe| guard::Guard::start(&exe, grace_millis));
    match started {
        Ok(guard) => Some(guard),
        Err(e) => {
            tracing::warn!("cannot start the runner's guard, the work runs unguarded: {e}");
            None
        }
    }
}

/// The take-over section ([`sections::take_over`]), recording `cgroup` (the work's group, not
/// created yet) on the work and the turn as started by `me` if the effect is `Run`: one internal
/// commit for both, so a power loss loses or keeps them together.
fn take_over_started<L: Liveness, S: Store>(
    rt: &Runtime<L, S>,
    key: &TurnKey,
    token: SlotToken,
    me: ProcessIdentity,
    cgroup: Option<&str>,
) -> Result<(TakeOverEffect, TurnRecord), DispatchError> {
    crate::section::run(
        rt,
        &TakeOverSection {
            key,
            token,
            me,
            cgroup,
            record_started: true,
            now_millis: tasks::now_millis(),
        },
    )
}

/// How long a runner on a fleet retries a take-over that found no lease of its own: the child can
/// reach its take-over before its dispatcher's first publish took the lease for it (F4), and the
/// publish follows within milliseconds. Past this, the take-over's error stands.
const TAKE_OVER_LEASE_WAIT_MILLIS: u64 = 2_000;

/// The detached runner's take-over of its reserved slot under `token` ([`take_over_started`]),
/// retried while the runner's lease is not there yet (see [`TAKE_OVER_LEASE_WAIT_MILLIS`]); each
/// attempt is its own section, so a failed one changed nothing. On one host the first attempt is
/// the answer. Returns the effect and the turn's record as the section left it.
pub fn take_over_to_run<L: Liveness, S: Store>(
    rt: &Runtime<L, S>,
    key: &TurnKey,
    token: SlotToken,
    me: ProcessIdentity,
    cgroup: Option<&str>,
) -> Result<(TakeOverEffect, TurnRecord), DispatchError> {
    let until =
        std::time::Instant::now() + std::time::Duration::from_millis(TAKE_OVER_LEASE_WAIT_MILLIS);
    loop {
        match take_over_started(rt, key, token, me, cgroup) {
            Err(DispatchError::Fleet(crate::protocol::fleet::FleetError::Unknown { .. }))
                if std::time::Instant::now() < until =>
            {
                // A test learns here that the take-over found no lease and is waiting for it.
                #[cfg(feature = "failpoints")]
                crate::failgate::hold("runner::take_over_lease_wait");
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            other => return other,
        }
    }
}

/// Runs the turn's command as `work`: records its leader right after the spawn (one section),
/// waits for it, then kills whatever of the work is left (children it left behind), so that the
/// slot this runner frees next holds no process any more.
pub fn run_work<L: Liveness, S: Store>(
    rt: &Runtime<L, S>,
    turn: &TurnRecord,
    me: ProcessIdentity,
    work: WorkId,
    attached: bool,
) -> Execution {
    run_work_in(rt, turn, me, work, None, attached)
}

/// [`run_work`] in the cgroup `cgroup` (recorded on the work by the take-over; created here, right
/// before the spawn), or on the process group + marker path when `None`.
pub fn run_work_in<L: Liveness, S: Store>(
    rt: &Runtime<L, S>,
    turn: &TurnRecord,
    me: ProcessIdentity,
    work: WorkId,
    cgroup: Option<PathBuf>,
    attached: bool,
) -> Execution {
    run_work_with(rt, turn, me, work, cgroup, attached, None)
}

/// The detached runner's [`run_work_in`], telling `guard` (on a fleet) the unit before and after
/// the spawn.
fn run_work_guarded<L: Liveness, S: Store>(
    rt: &Runtime<L, S>,
    turn: &TurnRecord,
    me: ProcessIdentity,
    work: WorkId,
    cgroup: Option<PathBuf>,
    guard: Option<&mut guard::Guard>,
) -> Execution {
    run_work_with(rt, turn, me, work, cgroup, false, guard)
}

fn run_work_with<L: Liveness, S: Store>(
    rt: &Runtime<L, S>,
    turn: &TurnRecord,
    me: ProcessIdentity,
    work: WorkId,
    cgroup: Option<PathBuf>,
    attached: bool,
    guard: Option<&mut guard::Guard>,
) -> Execution {
    if attached {
        // The turn's folder is made lazily (spec/turns.md, "The turn folder"); a detached runner's
        // spawn made it for `runner.log`, an attached turn writes its first file (`hooks.log`,
        // `result.pending`) from here on.
        if let Err(e) =
            crate::fsutil::create_private_dir_under(rt.home.root(), &rt.home.turn_dir(&turn.key))
        {
            return Execution::unstartable(format!("cannot make the turn's folder: {e}"));
        }
    }
    let turn = match payload::localised(&rt.home, turn) {
        Ok(turn) => turn,
        Err(e) => {
            return Execution::unstartable(format!(
                "cannot place the delivery's payload in this home: {e}"
            ))
        }
    };
    let turn = turn.as_ref();
    let mut leader = None;
    let mut unit = work::unit_from(work, None, cgroup.as_deref());
    let mut logs = LogDrains::new(rt.config.log_bytes, rt.config.log_tail_bytes);
    let execution = execute_turn(
        &rt.home,
        turn,
        attached,
        guard,
        &mut unit,
        &mut logs,
        |started| {
            leader = Some(started);
            if let Err(e) = record_leader(rt, &turn.key, work, started) {
                // The marker still finds the work; only the process-group half of a kill is lost.
                tracing::warn!("{}: cannot record the leader of work {work}: {e}", turn.key);
            }
        },
    );
    let record = WorkRecord {
        key: turn.key.clone(),
        id: work,
        runner: me,
        leader,
        cgroup: unit.cgroup.as_ref().map(|d| d.display().to_string()),
    };
    // Detached, this runner is a subreaper whose only children are its work's: having collected
    // the command and found no child left proves the work dead without a walk of /proc
    // (spec/containment.md, "The owner's proof at a unit's end"). Else the kill finds and ends
    // whatever is left.
    if attached || !work::owner_proves_gone(&unit) {
        driver::kill_work(rt.spawner.as_ref(), &record);
    }
    logs.finish();
    execution
}

/// The section right after the command was spawned: record its leader on the work
/// ([`WorkStarted`]).
pub fn record_leader<L: Liveness, S: Store>(
    rt: &Runtime<L, S>,
    key: &TurnKey,
    work: WorkId,
    leader: ProcessIdentity,
) -> Result<(), DispatchError> {
    crate::section::run(rt, &WorkStarted { key, work, leader })
}

/// Leaves the queue for `key` and starts the oldest parked row in the slot this process frees.
pub fn leave_and_start_next<L: Liveness, S: Store>(
    rt: &Runtime<L, S>,
    key: &TurnKey,
    me: ProcessIdentity,
) -> Result<Option<Handoff>, DispatchError> {
    let effect = finish_section(rt, key, me, None)?;
    perform_finish(rt, effect)
}

/// The detached runner's finish: `execution` written into `turn` (its record as the take-over
/// left it), then [`record_and_start_next`].
pub fn finish_with<L: Liveness, S: Store>(
    rt: &Runtime<L, S>,
    turn: &mut TurnRecord,
    execution: &Execution,
    me: ProcessIdentity,
) -> Result<Option<Handoff>, DispatchError> {
    execution.record(turn, tasks::now_millis());
    record_and_start_next(rt, turn, me)
}

/// Records the result of `turn` (whose command has run) and leaves the queue in one critical
/// section, so nobody sees the turn ended while its row still holds the task's scope (a `drop`
/// submit after `submit --wait` returned was refused with "turn N is running"). Retried while the
/// disk is full ([`tasks::retry_while_disk_full`]): the slot stays occupied, nothing runs again.
pub fn record_and_start_next<L: Liveness, S: Store>(
    rt: &Runtime<L, S>,
    turn: &TurnRecord,
    me: ProcessIdentity,
) -> Result<Option<Handoff>, DispatchError> {
    let effect = tasks::retry_while_disk_full(&rt.home, &turn.key, || {
        result_write_failpoint(&rt.home, &turn.key)?;
        finish_section(rt, &turn.key, me, Some(turn))
    })?;
    perform_finish(rt, effect)
}

/// The finishing runner's section ([`sections::finish`]): save `result` (the turn's ended record)
/// if given, the departure of the turn (a retry re-queued, failed dependents settled), then leave
/// and reserve the next parked row this slot may start; on the part of the queue
/// [`steps::finish_reads`] names, once more on the whole queue when the core says the part did
/// not suffice.
fn finish_section<L: Liveness, S: Store>(
    rt: &Runtime<L, S>,
    key: &TurnKey,
    me: ProcessIdentity,
    result: Option<&TurnRecord>,
) -> Result<FinishEffect, DispatchError> {
    crate::section::run(
        rt,
        &FinishSection {
            key,
            me,
            result,
            fresh_token: rt.spawner.fresh_token(),
            now_millis: rt.spawner.now_millis(),
            cap: rt.cap(),
        },
    )
}

/// What the finish asked for, after its commit: the retry's waker, the next row's handoff.
fn perform_finish<L: Liveness, S: Store>(
    rt: &Runtime<L, S>,
    effect: FinishEffect,
) -> Result<Option<Handoff>, DispatchError> {
    if let Some(at_millis) = effect.left.wake_at_millis {
        driver::start_waker(rt.spawner.as_ref(), at_millis);
    }
    effect
        .next
        .map(|handoff| driver::hand_off(rt, rt.spawner.as_ref(), handoff))
        .transpose()
}

/// With the `failpoints` feature, `tasks::save_result` fails the write of a turn's result with
/// ENOSPC (before its section: nothing is committed, as when the write inside it fails): always
/// when the failpoint has no argument, else while the file its argument names exists.
fn result_write_failpoint(home: &crate::home::Home, key: &TurnKey) -> Result<(), DispatchError> {
    #[cfg(feature = "failpoints")]
    {
        let fail = fail::eval("tasks::save_result", |arg| {
            arg.is_none_or(|gate| std::path::Path::new(&gate).exists())
        });
        if fail == Some(true) {
            return Err(crate::fsutil::FileError::io(
                &home.turn_file(key),
                std::io::Error::from_raw_os_error(libc::ENOSPC),
            )
            .into());
        }
    }
    let _ = (home, key);
    Ok(())
}
