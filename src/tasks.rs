//! Task and turn records: rows of the home's database (`tasks` and `turns`; SQLite schema
//! version 4 in `tollgate.db`, or PostgreSQL; spec/store.md "Records"). An earlier version kept
//! them as files (`tasks/<task>/task.json`, `tasks/<task>/turns/<n>/turn.json`): those are only
//! imported, once, when the database is opened. The turn's folder `tasks/<task>/turns/<n>/`
//! holds the turn's logs. It is made lazily, by whoever first writes into it (the runner's spawn,
//! an attached run, a watcher), never by the step that creates the turn: a queued turn may have
//! no folder, and every reader treats a missing folder as an empty one (spec/turns.md, "The turn
//! folder").
//!
//! A turn number is handed out, its record written and its row enqueued in one section, one
//! transaction: the section runner hands the store's [`RecordTx`] (`Store::transact_section`)
//! to [`read_records`] and [`apply_writes`], so the records a step reads and writes are read and
//! written in its transaction and commit with it. The `&Home` functions here are record accesses
//! outside any section: each commits on its own.
//!
//! Records are never overwritten by a new turn: its record is inserted only where none exists
//! and no folder is left at its place, and when the number `next_turn` names is taken (a deleted
//! task record, a rewound counter) the turn gets the first number after the highest recorded one
//! instead, with a warning. Counters are checked: a task whose numbers are used up refuses new
//! turns. Nothing is published that the loader would refuse.

use crate::argv::{Argv, Env};
use crate::fsutil::FileError;
use crate::home::Home;
use crate::protocol::admission::Strategy;
use crate::protocol::section::{Draft, Halt, Records, Unread};
use crate::protocol::slots::{Dependency, RetryPlan, TurnKey};
use crate::protocol::turns;
use crate::queue::records::{self, RecordTx};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub use crate::protocol::records::{
    check_task, check_turn, first_generated_name, readable_base, DeliveryMeta, TaskRecord,
    TurnOutcome, TurnRecord, MAX_ARGV, TASK_FORMAT_VERSION,
};
pub use crate::queue::records::{parse_task, parse_turn};

/// What a new turn's record carries besides its command: its short id and labels.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TurnMeta {
    /// The short id the turn is given (see [`TurnRecord::id`]).
    pub id: Option<u64>,
    pub labels: Vec<String>,
    /// See [`TurnRecord::timeout_millis`].
    pub timeout_millis: Option<u64>,
    /// See [`TurnRecord::after`].
    pub after: Vec<Dependency>,
    /// See [`TurnRecord::retry`].
    pub retry: Option<RetryPlan>,
    /// See [`TurnRecord::retry_of`].
    pub retry_of: Option<u32>,
}

/// The `queue_id` the next enqueue hands out (the core's rule,
/// [`QueueState::id_of_next_enqueue`](crate::protocol::slots::QueueState::id_of_next_enqueue)).
pub fn predicted_turn_id(state: &crate::protocol::slots::QueueState) -> u64 {
    state.id_of_next_enqueue()
}

/// Where a record in the database is named in errors: the database and the record's place.
fn db_record_path(home: &Home, place: String) -> PathBuf {
    PathBuf::from(format!(
        "{} (record {place})",
        records::database_name(home).display()
    ))
}

/// Runs `f` on `home`'s database in `tx` ([`records::with_db_in`]), SQLite's errors naming the
/// database.
fn db<T>(
    home: &Home,
    tx: &mut RecordTx<'_>,
    access: records::Access,
    changed: Option<PathBuf>,
    f: impl FnOnce(&mut records::Db<'_>) -> Result<T, records::DbError>,
) -> Result<T, FileError> {
    let path = records::database_name(home);
    records::with_db_in(home, tx, access, changed, |conn| {
        f(conn).map_err(|e| records::db_error(&path, e))
    })
}

/// A record as the JSON body of its row (refused, naming `path`, if it cannot be rendered).
fn body<T: Serialize>(path: &Path, record: &T) -> Result<String, FileError> {
    serde_json::to_string(record).map_err(|e| FileError::Refused {
        path: path.to_path_buf(),
        detail: format!("cannot render the record: {e}"),
    })
}

pub fn load_task(home: &Home, task: &str) -> Result<Option<TaskRecord>, FileError> {
    load_task_in(home, &mut RecordTx::outside(), task)
}

/// [`load_task`] in `tx`.
fn load_task_in(
    home: &Home,
    tx: &mut RecordTx<'_>,
    task: &str,
) -> Result<Option<TaskRecord>, FileError> {
    let path = db_record_path(home, format!("tasks/{task}"));
    db(home, tx, records::Access::Read, None, |c| c.task_body(task))?
        .map(|text| parse_task(&path, text.as_bytes()))
        .transpose()
}

/// Where the record of task `task` lives, for a message (as [`turn_record_location`]).
pub fn task_record_location(home: &Home, task: &str) -> PathBuf {
    db_record_path(home, format!("tasks/{task}"))
}

/// Where the record of `key` lives, for a message: `tollgate.db (record turns/T/N)` (or the
/// PostgreSQL database and queue).
pub fn turn_record_location(home: &Home, key: &TurnKey) -> String {
    format!(
        "{} (record turns/{}/{})",
        records::database_name(home).display(),
        key.task,
        key.turn
    )
}

pub fn load_turn(home: &Home, key: &TurnKey) -> Result<Option<TurnRecord>, FileError> {
    load_turn_in(home, &mut RecordTx::outside(), key)
}

/// [`load_turn`] in `tx`.
pub fn load_turn_in(
    home: &Home,
    tx: &mut RecordTx<'_>,
    key: &TurnKey,
) -> Result<Option<TurnRecord>, FileError> {
    let path = db_record_path(home, format!("turns/{}/{}", key.task, key.turn));
    db(home, tx, records::Access::Read, None, |c| {
        c.turn_body(&key.task, key.turn)
    })?
    .map(|text| parse_turn(&path, text.as_bytes(), key))
    .transpose()
}

fn save_task(home: &Home, tx: &mut RecordTx<'_>, record: &TaskRecord) -> Result<(), FileError> {
    let path = home.task_file(&record.name);
    check_task(record).map_err(|detail| FileError::Refused {
        path: path.clone(),
        detail: format!("the task record would not load ({detail})"),
    })?;
    let text = body(&path, record)?;
    db(home, tx, records::Access::Write, None, |c| {
        c.put_task(&record.name, record.next_turn, &text)
    })
}

pub fn save_turn(home: &Home, turn: &TurnRecord) -> Result<(), FileError> {
    save_turn_in(home, &mut RecordTx::outside(), turn)
}

/// [`save_turn`] in `tx`.
pub fn save_turn_in(
    home: &Home,
    tx: &mut RecordTx<'_>,
    turn: &TurnRecord,
) -> Result<(), FileError> {
    write_turn(home, tx, turn, false)
}

/// Writes `turn`'s record; `create`: a new turn, refused when its number already has a record
/// (the database's primary key), so a record is never overwritten by a new turn.
fn write_turn(
    home: &Home,
    tx: &mut RecordTx<'_>,
    turn: &TurnRecord,
    create: bool,
) -> Result<(), FileError> {
    let path = home.turn_file(&turn.key);
    check_turn(turn, &turn.key).map_err(|detail| FileError::Refused {
        path: path.clone(),
        detail: format!("the turn record would not load ({detail})"),
    })?;
    let text = body(&path, turn)?;
    let row = records::TurnRow {
        task: &turn.key.task,
        turn: turn.key.turn,
        short_id: turn.id,
        settled: turn.is_settled(),
        ended_at_millis: turn.ended_at_millis,
        body: &text,
    };
    // Recording an outcome is a promise (`wait` and `status` tell it, and reconcile trusts it
    // instead of running the turn again): its commit is synced.
    let access = if turn.is_settled() {
        records::Access::Outcome
    } else {
        records::Access::Write
    };
    // A new turn's record signals no folder: nobody watches a turn before it exists, and its
    // folder is made later (a `utimensat` of a missing folder is a wasted syscall).
    let changed = (!create).then(|| home.turn_dir(&turn.key));
    let written = db(home, tx, access, changed, |c| c.put_turn(&row, create))?;
    if !written {
        return Err(FileError::Refused {
            path: db_record_path(home, format!("turns/{}/{}", turn.key.task, turn.key.turn)),
            detail: "a record of this turn exists already".to_string(),
        });
    }
    Ok(())
}

/// Hands out the next turn number of `task` (creating the task) and writes the turn's record,
/// outside any section (tests, fixtures): the core's rules ([`turns::claim_turn`],
/// [`turns::create_turn`]) on the records read here.
pub fn create_turn(
    home: &Home,
    task: &str,
    argv: Argv,
    cwd: Option<PathBuf>,
    env: Env,
    attached: bool,
    now_millis: u64,
) -> Result<TurnRecord, FileError> {
    let at = (home, &mut RecordTx::outside());
    create_turn_in(at, task, argv, cwd, env, attached, now_millis)
}

/// [`create_turn`] in `tx` (a test's section).
pub fn create_turn_in(
    (home, tx): (&Home, &mut RecordTx<'_>),
    task: &str,
    argv: Argv,
    cwd: Option<PathBuf>,
    env: Env,
    attached: bool,
    now_millis: u64,
) -> Result<TurnRecord, FileError> {
    let new = turns::NewTurn {
        argv,
        cwd,
        env,
        attached,
        ..turns::NewTurn::default()
    };
    with_records(home, tx, task, |draft| {
        let (key, _) = turns::claim_turn(draft, task, None, now_millis)?;
        turns::create_turn(draft, key, new.clone(), None, now_millis)
    })
}

/// Runs `rule` on the records it asks for, read here (bounded rounds), and applies what it
/// wrote: the core's record rules outside a section, for tests and fixtures. A refusal is an
/// error naming `task`'s record.
fn with_records<T>(
    home: &Home,
    tx: &mut RecordTx<'_>,
    task: &str,
    rule: impl Fn(&mut Draft<'_>) -> Result<T, Halt>,
) -> Result<T, FileError> {
    let mut records = Records::default();
    for _ in 0..crate::protocol::section::MAX_READ_ROUNDS {
        let mut draft = Draft::new(&records);
        match rule(&mut draft) {
            Ok(value) => {
                apply_writes(home, tx, &draft.into_writes())?;
                return Ok(value);
            }
            Err(Halt::Unread(Unread::Records(need))) => {
                read_records(home, tx, &need, &mut records)?
            }
            Err(Halt::Unread(Unread::Queue(_))) => unreachable!("record rules read no queue"),
            Err(Halt::Refused(e)) => {
                return Err(FileError::Refused {
                    path: home.task_file(task),
                    detail: e.to_string(),
                })
            }
            Err(Halt::Fleet(e)) => {
                return Err(FileError::Refused {
                    path: home.task_file(task),
                    detail: e.to_string(),
                })
            }
        }
    }
    Err(FileError::Refused {
        path: home.task_file(task),
        detail: "a record rule kept asking for more records".to_string(),
    })
}

/// First pause between two tries of recording a turn's result on a full disk.
pub const RECORD_RETRY_FIRST_MILLIS: u64 = 50;
/// Longest pause between two tries (the pause doubles up to it).
pub const RECORD_RETRY_MAX_MILLIS: u64 = 2_000;
/// How long a runner keeps trying to record a result on a full disk before it gives up: a day,
/// so an operator has time to free space; meanwhile the turn keeps its slot.
pub const RECORD_RETRY_LIMIT_MILLIS: u64 = 24 * 60 * 60 * 1000;

/// Whether `error`, or anything in its chain of sources, is ENOSPC or EDQUOT.
pub fn is_disk_full(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(error);
    while let Some(e) = next {
        let io = e
            .downcast_ref::<io::Error>()
            .or(match e.downcast_ref::<FileError>() {
                Some(FileError::Io { source, .. }) => Some(source),
                _ => None,
            });
        if io
            .and_then(io::Error::raw_os_error)
            .is_some_and(|code| code == libc::ENOSPC || code == libc::EDQUOT)
        {
            return true;
        }
        next = e.source();
    }
    false
}

/// Runs `attempt` (the write that records the result of `key`'s command, which has already run)
/// until it succeeds, retrying with doubling pauses while it fails because the disk is full, for at
/// most [`RECORD_RETRY_LIMIT_MILLIS`]. The result of a command that ran is never dropped for want
/// of space, and the command never runs again: the runner stays alive, so its row keeps its slot
/// and reconcile leaves it alone. While it waits, the turn's `result.pending` marker (an empty
/// file, which a full disk usually still allows) makes `status` show the turn as `recording`.
/// Any other error is returned at once.
pub fn retry_while_disk_full<T, E>(
    home: &Home,
    key: &TurnKey,
    mut attempt: impl FnMut() -> Result<T, E>,
) -> Result<T, E>
where
    E: std::error::Error + 'static,
{
    let start = Instant::now();
    let limit = Duration::from_millis(RECORD_RETRY_LIMIT_MILLIS);
    let mut pause_millis = RECORD_RETRY_FIRST_MILLIS;
    let mut failures: u64 = 0;
    let marker = home.result_pending_marker(key);
    loop {
        match attempt() {
            Ok(value) => {
                if failures > 0 {
                    let _ = std::fs::remove_file(&marker);
                    // Best effort: stderr is the runner's log, on the disk that was full.
                    let _ = writeln!(
                        io::stderr(),
                        "tollgate: {key}: result recorded after {failures} attempt(s) failed for want of disk space"
                    );
                }
                return Ok(value);
            }
            Err(e) if is_disk_full(&e) && start.elapsed() < limit => {
                if failures == 0 {
                    use std::os::unix::fs::OpenOptionsExt;
                    let _ = std::fs::OpenOptions::new()
                        .write(true)
                        .create(true)
                        .truncate(false)
                        .mode(0o600)
                        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW)
                        .open(&marker);
                    let _ = writeln!(
                        io::stderr(),
                        "tollgate: {key}: the disk is full, recording the result failed ({e}); \
                         retrying for up to {} h, the slot stays occupied",
                        RECORD_RETRY_LIMIT_MILLIS / 3_600_000
                    );
                }
                failures += 1;
                std::thread::sleep(Duration::from_millis(pause_millis));
                pause_millis = (pause_millis * 2).min(RECORD_RETRY_MAX_MILLIS);
            }
            Err(e) => return Err(e),
        }
    }
}

/// Whether `key`'s command has ended and its runner is waiting for disk space to record the
/// result (see [`retry_while_disk_full`]).
pub fn result_pending(home: &Home, key: &TurnKey) -> bool {
    home.result_pending_marker(key).is_file()
}

/// Ends a turn that never ran with `outcome` (dropped, superseded, cancelled), outside any
/// section (tests, fixtures): the core's [`turns::end_unrun`].
pub fn end_unrun(
    home: &Home,
    key: &TurnKey,
    outcome: TurnOutcome,
    now_millis: u64,
) -> Result<(), FileError> {
    end_unrun_in(home, &mut RecordTx::outside(), key, outcome, now_millis)
}

/// [`end_unrun`] in `tx` (a test's section).
pub fn end_unrun_in(
    home: &Home,
    tx: &mut RecordTx<'_>,
    key: &TurnKey,
    outcome: TurnOutcome,
    now_millis: u64,
) -> Result<(), FileError> {
    with_records(home, tx, &key.task, |draft| {
        turns::end_unrun(draft, key, outcome, now_millis)
    })
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
    db(
        home,
        &mut RecordTx::outside(),
        records::Access::Read,
        None,
        |c| c.task_names(),
    )
}

/// Turn numbers recorded for `task`, ascending.
pub fn list_turns(home: &Home, task: &str) -> Result<Vec<u32>, FileError> {
    list_turns_in(home, &mut RecordTx::outside(), task)
}

/// [`list_turns`] in `tx`.
fn list_turns_in(home: &Home, tx: &mut RecordTx<'_>, task: &str) -> Result<Vec<u32>, FileError> {
    db(home, tx, records::Access::Read, None, |c| {
        c.turn_numbers(task)
    })
}

/// Every turn without an outcome, with its record: reconcile's orphan candidates. They come from
/// the database's index of unfinished turns (the cost follows the turns in flight, not every
/// turn ever recorded).
pub fn unfinished_turns(home: &Home) -> Result<Vec<TurnRecord>, FileError> {
    let outside = &mut RecordTx::outside();
    let rows = db(home, outside, records::Access::Read, None, |c| {
        c.unfinished()
    })?;
    rows.into_iter()
        .map(|(task, turn, text)| {
            let key = TurnKey::new(task, turn);
            let path = db_record_path(home, format!("turns/{}/{}", key.task, key.turn));
            parse_turn(&path, text.as_bytes(), &key)
        })
        .collect()
}

/// The keys of every turn without an outcome, from the database's index of unfinished turns
/// without reading a record's body (serve's fallback re-read: a watched turn found here is still
/// live, since a row's `settled` is written with its outcome).
pub fn unfinished_turn_keys(home: &Home) -> Result<BTreeSet<TurnKey>, FileError> {
    let outside = &mut RecordTx::outside();
    let rows = db(home, outside, records::Access::Read, None, |c| {
        c.unfinished_keys()
    })?;
    Ok(rows
        .into_iter()
        .map(|(task, turn)| TurnKey::new(task, turn))
        .collect())
}

/// The turns whose short id is `id`, from the database's index.
pub fn turns_with_id(home: &Home, id: u64) -> Result<Vec<TurnKey>, FileError> {
    let rows = db(
        home,
        &mut RecordTx::outside(),
        records::Access::Read,
        None,
        |c| c.turns_with_short_id(id),
    )?;
    Ok(rows
        .into_iter()
        .map(|(task, turn)| TurnKey::new(task, turn))
        .collect())
}

/// Removes a settled turn: its record and its folder (logs). Call under the queue lock.
pub fn remove_turn(home: &Home, key: &TurnKey) -> Result<(), FileError> {
    remove_turn_in(home, &mut RecordTx::outside(), key)
}

/// [`remove_turn`] in `tx`.
fn remove_turn_in(home: &Home, tx: &mut RecordTx<'_>, key: &TurnKey) -> Result<(), FileError> {
    db(home, tx, records::Access::Write, None, |c| {
        c.delete_turn(&key.task, key.turn)
    })?;
    let dir = home.turn_dir(key);
    match std::fs::remove_dir_all(&dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(FileError::io(&dir, e)),
    }
}

/// Removes a task that has no turns left: its record and its folder. Call under the queue lock,
/// after its last turn was removed and with no queue row of it.
pub fn remove_task(home: &Home, name: &str) -> Result<(), FileError> {
    remove_task_in(home, &mut RecordTx::outside(), name)
}

/// [`remove_task`] in `tx`.
fn remove_task_in(home: &Home, tx: &mut RecordTx<'_>, name: &str) -> Result<(), FileError> {
    db(home, tx, records::Access::Write, None, |c| {
        c.delete_task(name)
    })?;
    let dir = home.task_dir(name);
    match std::fs::remove_dir_all(&dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(FileError::io(&dir, e)),
    }
}

/// The numbered folders under `tasks/<task>/turns/`, ascending.
fn dir_turns(home: &Home, task: &str) -> Result<Vec<u32>, FileError> {
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

/// The millisecond clock lives in [`crate::clock`]; this path is kept for existing callers.
pub use crate::clock::now_millis;

/// Reads what `need` names into `records`: each turn's record, or whether its place is free (no
/// record and no folder left there) or holds a leftover folder; each task's record; each task's
/// recorded turn numbers (with the numbered folders left on disk, which are taken too). A
/// section's records are read in its transaction (`tx`), so they are as the step's own writes
/// left them.
pub fn read_records(
    home: &Home,
    tx: &mut RecordTx<'_>,
    need: &crate::protocol::section::Need,
    records: &mut crate::protocol::section::Records,
) -> Result<(), FileError> {
    use crate::protocol::section::TurnSlot;
    for key in &need.turns {
        let slot = match load_turn_in(home, tx, key)? {
            Some(record) => TurnSlot::Record(Box::new(record)),
            None => match std::fs::symlink_metadata(home.turn_dir(key)) {
                Ok(_) => TurnSlot::Leftover,
                Err(e) if e.kind() == io::ErrorKind::NotFound => TurnSlot::Free,
                Err(e) => return Err(FileError::io(&home.turn_dir(key), e)),
            },
        };
        records.put_turn(key.clone(), slot);
    }
    for task in &need.tasks {
        let dir_exists = match std::fs::symlink_metadata(home.task_dir(task)) {
            Ok(_) => true,
            Err(e) if e.kind() == io::ErrorKind::NotFound => false,
            Err(e) => return Err(FileError::io(&home.task_dir(task), e)),
        };
        records.put_task(task.clone(), load_task_in(home, tx, task)?, dir_exists);
    }
    for task in &need.numbers {
        let mut numbers = list_turns_in(home, tx, task)?;
        numbers.extend(dir_turns(home, task)?);
        records.put_numbers(task.clone(), numbers);
    }
    if !need.marks.is_empty() {
        crate::queue::serve_writes::read_marks(home, tx, &need.marks, records)?;
    }
    Ok(())
}

/// Applies a step's record writes in the core's order ([`Writes::in_order`]: the task records, then
/// the turn records by key; a new turn refused where its place holds one), then its dedupe marks
/// and kept payloads, in `tx`: a section's writes commit with its queue change, or not at all.
/// Not its groups nor the tables' upkeep: the section runner applies those after.
///
/// [`Writes::in_order`]: crate::protocol::section::Writes::in_order
pub fn apply_writes(
    home: &Home,
    tx: &mut RecordTx<'_>,
    writes: &crate::protocol::section::Writes,
) -> Result<(), FileError> {
    use crate::protocol::section::RecordWrite;
    for write in writes.in_order() {
        match write {
            RecordWrite::Task(task) => save_task(home, tx, task)?,
            RecordWrite::Turn(write) => write_turn(home, tx, &write.record, write.create)?,
            RecordWrite::RemoveTurn(key) => remove_turn_in(home, tx, key)?,
            RecordWrite::RemoveTask(name) => remove_task_in(home, tx, name)?,
        }
    }
    crate::queue::serve_writes::apply(home, tx, writes)
}
