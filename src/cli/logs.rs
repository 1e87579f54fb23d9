//! `tollgate logs`: a turn's output, local or (on a fleet) from another host's table.

use super::common::{open, print_json};
use super::follow::{copy_new, follow_turn};
use super::{exit, CliError, LogsArgs};
use crate::protocol::slots::TurnKey;
use crate::runtime::Runtime;
use crate::status as status_shell;
use crate::tasks::{self, TurnRecord};
use crate::turn_state::TurnState;
use serde_json::json;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::PathBuf;

pub(super) fn latest_turn(rt: &Runtime, task: &str) -> Result<u32, CliError> {
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
    let Some(mut file) = crate::fsutil::open_log(path)? else {
        return Ok((String::new(), 0));
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
    let state = crate::fleet::observing(&rt.store, &rt.liveness, |live| {
        status_shell::state_of(&rt.home, &queue, &turn, live, tasks::now_millis())
    })?;
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
        "legacy_state": state.legacy_word(),
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

/// Why a turn has no output, in the words of `status` (its state's word).
fn why_no_output(rt: &Runtime, turn: &TurnRecord) -> Result<String, CliError> {
    if turn.outcome == Some(tasks::TurnOutcome::DependencyFailed) {
        let why = turn
            .error
            .clone()
            .unwrap_or_else(|| "a dependency failed".into());
        return Ok(format!(
            "it never ran ({}): {why}",
            TurnState::DependencyFailed
        ));
    }
    if let Some(error) = &turn.error {
        return Ok(format!(
            "it could not start ({}): {error}",
            TurnState::Unstartable
        ));
    }
    if turn.attached {
        return Ok(
            "it ran attached (--attach): its output went to the terminal that ran it".into(),
        );
    }
    let queue = rt.store.load()?;
    let state = crate::fleet::observing(&rt.store, &rt.liveness, |live| {
        status_shell::turn_state(&queue, turn, live, tasks::now_millis())
    })?;
    Ok(match state {
        TurnState::Queued => "it is queued: it waits for a free worker slot".to_string(),
        TurnState::Paused => "it is paused: it stays queued until `tollgate resume`".to_string(),
        TurnState::Delayed => "it is delayed: it waits for its --delay/--at time".to_string(),
        TurnState::Held => {
            let waiting: Vec<TurnKey> = queue
                .row(&turn.key)
                .map(|r| r.after.iter().map(|d| d.key.clone()).collect())
                .unwrap_or_default();
            format!(
                "it is held: it waits for {} (--after)",
                super::deps::waiting_on(rt, &waiting)
            )
        }
        TurnState::Waiting => "it is waiting its turn in its task's line (strategy)".to_string(),
        TurnState::Starting | TurnState::Running | TurnState::Recording => {
            format!("it is {state} and has printed nothing yet (`tollgate logs -f` follows it)")
        }
        TurnState::Orphaned => {
            format!("it is {state} (its submitter or runner died): `tollgate reconcile` repairs it")
        }
        TurnState::Dropped | TurnState::Superseded | TurnState::Cancelled => {
            format!("it never ran ({state})")
        }
        _ => format!("it ended ({state}) without printing anything"),
    })
}
