//! Following a turn until it ends (`submit --wait`, `wait`, `logs --follow`), along its retry chain.

use super::CliError;
use crate::protocol::slots::TurnKey;
use crate::runtime::Runtime;
use crate::status as status_shell;
use crate::tasks::{self, TurnRecord};
use crate::turn_state::TurnState;
use std::io::{Read, Seek, SeekFrom, Write};
use std::time::Duration;

/// [`follow_turn`] along the turn's retry chain: a failed attempt that was retried is followed
/// by its retry (`retried_as`), up to the last attempt, whose record is returned.
pub(super) fn follow_attempts(
    rt: &Runtime,
    key: &TurnKey,
    stream: bool,
) -> Result<TurnRecord, CliError> {
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

/// Waits for the turn's record to have an outcome (another process writes it), copying the
/// turn's output to ours as it grows when `stream` is set. A runner this process started says
/// both on its settle signal ([`crate::process::settle`]); otherwise, or once that closed with no
/// outcome, it sleeps on the turn folder's events and the runner's pidfd ([`crate::watch`]), and
/// the runner's liveness is read when it ended, when the fallback period passed, or while no pidfd
/// follows it yet.
pub(super) fn follow_turn(
    rt: &Runtime,
    key: &TurnKey,
    stream: bool,
) -> Result<TurnRecord, CliError> {
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
        crate::fleet::observing(&rt.store, &rt.liveness, |live| {
            status_shell::turn_state(queue, turn, live, tasks::now_millis())
        })
    };
    if state(&queue)? == TurnState::Orphaned {
        // The row was read before the liveness check: a runner that recorded the turn's end
        // and exited in between looks orphaned. Read both again now that it was seen dead: a
        // commit it made before dying is visible.
        let again = tasks::load_turn(&rt.home, key)?;
        if again.as_ref().is_none_or(|t| t.is_settled())
            || state(&rt.store.load()?)? != TurnState::Orphaned
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

/// Copies what was appended to `path` since `offset` into `out`; returns the new offset.
pub(super) fn copy_new(
    path: &std::path::Path,
    offset: u64,
    out: &mut dyn Write,
) -> Result<u64, CliError> {
    let Some(mut file) = crate::fsutil::open_log(path)? else {
        return Ok(offset);
    };
    let io = |e: std::io::Error| CliError::Environment(format!("{}: {e}", path.display()));
    file.seek(SeekFrom::Start(offset)).map_err(io)?;
    let mut buffer = Vec::new();
    file.read_to_end(&mut buffer).map_err(io)?;
    out.write_all(&buffer).map_err(io)?;
    out.flush().map_err(io)?;
    Ok(offset + buffer.len() as u64)
}
