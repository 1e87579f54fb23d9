//! Task and turn records: rows of the home's database (`tasks` and `turns`, schema version 4,
//! spec/store.md "Records") when its store is `tollgate.db`; files on disk otherwise (the file
//! store and PostgreSQL homes): `tasks/<task>/task.json` and `tasks/<task>/turns/<n>/turn.json`.
//! The turn's folder `tasks/<task>/turns/<n>/` holds the turn's logs (and, on files, its
//! record). With the records in a database it is made lazily, by whoever first writes into it
//! (the runner's spawn, an attached run, a watcher), never by the step that creates the turn: a
//! queued turn may have no folder, and every reader treats a missing folder as an empty one
//! (spec/turns.md, "The turn folder").
//!
//! The queue lock guards the records too: a turn number is handed out, its record written and its
//! row enqueued in one critical section. In the database that section is one transaction: a
//! record written inside `Store::transact` commits with the step (the store lends its open
//! transaction to [`crate::queue::records`] for the closure's duration, so these functions keep
//! their `&Home` signatures), and one written outside a section commits on its own.
//!
//! Records are never overwritten by a new turn: a turn's directory is created exclusively (with
//! the records in a database: its record is inserted only where none exists and no folder is
//! left at its place), and when the number `next_turn` names is taken (a deleted `task.json`, a rewound counter) the turn gets the
//! first number after the highest recorded one instead, with a warning. Counters are checked: a task
//! whose numbers are used up refuses new turns. Nothing is published that the loader would refuse.

use crate::argv::{Argv, Env};
use crate::fsutil::{self, FileError};
use crate::home::Home;
use crate::protocol::admission::Strategy;
use crate::protocol::slots::{Dependency, ProcessIdentity, RetryPlan, TurnKey};
use crate::queue::records;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub const TASK_FORMAT_VERSION: u32 = 1;
/// Arguments of one command (defined in [`crate::config::limits`], which the config checks too).
pub use crate::config::limits::MAX_ARGV;

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
    /// It ran longer than its `submit --timeout`; the runner killed its whole unit.
    TimedOut,
    /// Never ran: a turn it waited for with `submit --after-success` ended other than completed
    /// with exit 0 ([`TurnRecord::failed_dependency`] names it).
    DependencyFailed,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnRecord {
    #[serde(default = "default_task_version")]
    pub version: u32,
    #[serde(flatten)]
    pub key: TurnKey,
    /// The command and its arguments, as bytes (spec/turns.md: UTF-8 ones as plain strings).
    #[serde(with = "crate::argv::words")]
    pub argv: Argv,
    #[serde(default)]
    pub cwd: Option<PathBuf>,
    /// The environment the command runs with (the submitter's, plus `--env` overrides), as bytes.
    #[serde(default, with = "crate::argv::env")]
    pub env: Env,
    #[serde(default)]
    pub attached: bool,
    #[serde(default)]
    pub submitted_at_millis: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at_millis: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runner: Option<ProcessIdentity>,
    /// The host whose runner (or attached submitter) took the turn over: written in the
    /// take-over's record on a PostgreSQL home (spec/fleet.md, "Operations"); `None` on a SQLite
    /// home and in records written before hosts were recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<crate::protocol::fleet::HostId>,
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
    /// The turn's short id (`tollgate logs 17`): the `queue_id` of the row it got when it was
    /// submitted, so unique in the home and never reused. `None` for a turn that never got a row
    /// (dropped at submit) and for records written before ids existed; those are named `TASK:N`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<u64>,
    /// Free-form labels given at submit (`--label`), in the order given, without duplicates.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub labels: Vec<String>,
    /// How long the command may run (`submit --timeout`) before the runner kills its unit and
    /// the turn ends `timed_out`; `None`: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_millis: Option<u64>,
    /// The turns it waits for (`submit --after`/`--after-success`), as given at submit.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<Dependency>,
    /// `submit --retry`: which attempt this turn is, of how many, and the backoff.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetryPlan>,
    /// The turn (of the same task) whose failure this attempt retries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_of: Option<u32>,
    /// The turn (of the same task) that retries this failed one: where `wait` goes on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retried_as: Option<u32>,
    /// For a `dependency_failed` turn: the dependency whose end settled it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_dependency: Option<TurnKey>,
}

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

/// The `queue_id` the next enqueue hands out (the same rule as the core's `enqueue`): the short id
/// a new turn is recorded with before its row exists. [`settle_turn_id`] corrects the record if
/// the row got another id, or none.
pub fn predicted_turn_id(state: &crate::protocol::slots::QueueState) -> u64 {
    predicted_id(
        state.next_queue_id,
        state.entries.last().map(|e| e.queue_id),
    )
}

/// [`predicted_turn_id`] of a queue whose counter is `next_queue_id` and whose highest row id
/// (in the core's `u64` order) is `last_queue_id`: what a store's unlocked hint computes from the
/// two values alone ([`crate::queue::Store::next_turn_id_hint`]).
pub fn predicted_id(next_queue_id: u64, last_queue_id: Option<u64>) -> u64 {
    let floor = last_queue_id.map_or(0, |id| id.saturating_add(1));
    next_queue_id.max(floor).max(1)
}

/// Longest program part of a generated task name (the id suffix comes on top).
const GENERATED_NAME_BASE_BYTES: usize = 32;
/// Numbered variants tried when a generated name is taken (only after the queue's id counter
/// started again); then the name falls back to random hex.
const GENERATED_NAME_TRIES: u32 = 100;

/// The task a new turn belongs to: `given` if the user named one, else a fresh, readable name from
/// the command: the program's basename (for `sh -c SCRIPT`, the script's first word) and the short
/// id the turn gets, e.g. `make-17`. Always a valid name, never all digits (so never read as an
/// id) and never an existing task. Call under the queue lock (`state` is the queue).
pub fn fresh_task_for(
    home: &Home,
    given: Option<&str>,
    argv: &[OsString],
    state: &crate::protocol::slots::QueueState,
) -> Result<String, FileError> {
    if let Some(task) = given {
        return Ok(task.to_string());
    }
    // With the records in a database a task's folder is made with its first turn's folder, so the
    // record is asked too (an error counts as taken).
    let database = records::in_database(home);
    let free = |name: &str| {
        !home.task_dir(name).exists()
            && (!database || load_task(home, name).is_ok_and(|task| task.is_none()))
    };
    let first = first_generated_name(argv, predicted_turn_id(state));
    if free(&first) {
        return Ok(first);
    }
    for n in 2..=GENERATED_NAME_TRIES {
        let name = format!("{first}-{n}");
        if free(&name) {
            return Ok(name);
        }
    }
    Ok(crate::submit::fresh_task_name())
}

/// The first name [`fresh_task_for`] tries for a turn of `argv` whose short id is `id`:
/// `<base>-<id>`, which it takes unless that task exists (only after the queue's id counter
/// started again). A submit guesses its generated name with it before its section, from the
/// store's hint for `id` ([`crate::queue::Store::next_turn_id_hint`]).
pub fn first_generated_name(argv: &[OsString], id: u64) -> String {
    format!("{}-{id}", readable_base(argv))
}

/// The program part of a generated task name: letters, digits, '.', '_' and '-' of the program's
/// basename (or of a shell script's first word), at most [`GENERATED_NAME_BASE_BYTES`], `t` if
/// nothing is left.
pub fn readable_base(argv: &[OsString]) -> String {
    let text = |i: usize| argv.get(i).map(|w| w.to_string_lossy());
    let program = text(0).unwrap_or_default();
    let basename = |word: &str| word.rsplit('/').next().unwrap_or("").to_string();
    let mut word = basename(&program);
    let shells = ["sh", "bash", "dash", "zsh", "ksh", "fish"];
    if shells.contains(&word.as_str()) && text(1).as_deref() == Some("-c") {
        if let Some(script) = text(2) {
            if let Some(first) = script.split_whitespace().next() {
                word = basename(first);
            }
        }
    }
    let cleaned: String = word
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '-'
            }
        })
        .collect();
    let trimmed = cleaned.trim_start_matches(['.', '-']);
    let mut base: String = trimmed.chars().take(GENERATED_NAME_BASE_BYTES).collect();
    while base.ends_with('-') {
        base.pop();
    }
    if base.is_empty() {
        "t".to_string()
    } else {
        base
    }
}

#[cfg(test)]
mod id_tests {
    use super::predicted_turn_id;
    use crate::protocol::slots::{enqueue, ProcessIdentity, QueueState, TurnKey};

    /// The id a turn is recorded with before its row exists is the one `enqueue` then hands out:
    /// from a fresh queue, after rows left, and from a document whose counter is behind its rows.
    #[test]
    fn the_predicted_id_is_the_one_enqueue_hands_out() {
        let me = ProcessIdentity {
            pid: 1,
            start_time_micros: 1,
        };
        let mut state = QueueState::default();
        for n in 1..=5u32 {
            let predicted = predicted_turn_id(&state);
            let got = enqueue(&mut state, &TurnKey::new("a", n), me, 0)
                .expect("enqueue")
                .queue_id();
            assert_eq!(predicted, got, "turn {n}");
            if n % 2 == 0 {
                state.entries.remove(0);
            }
        }
        let mut behind = state.clone();
        behind.next_queue_id = 0;
        let predicted = predicted_turn_id(&behind);
        let got = enqueue(&mut behind, &TurnKey::new("b", 1), me, 0)
            .expect("enqueue")
            .queue_id();
        assert_eq!(predicted, got, "a counter behind its rows");
        let mut empty = QueueState {
            next_queue_id: 0,
            ..QueueState::default()
        };
        let predicted = predicted_turn_id(&empty);
        let got = enqueue(&mut empty, &TurnKey::new("c", 1), me, 0)
            .expect("enqueue")
            .queue_id();
        assert_eq!((predicted, got), (1, 1), "ids start at 1");
    }
}

#[cfg(test)]
mod name_tests {
    use super::readable_base;

    fn base(argv: &[&str]) -> String {
        readable_base(
            &argv
                .iter()
                .map(std::ffi::OsString::from)
                .collect::<Vec<_>>(),
        )
    }

    #[test]
    fn generated_names_come_from_the_program_and_stay_valid() {
        assert_eq!(base(&["/usr/bin/make", "test"]), "make");
        assert_eq!(base(&["sh", "-c", "./backup.sh --all; echo"]), "backup.sh");
        assert_eq!(base(&["bash", "-c", ""]), "bash");
        assert_eq!(base(&["./.hidden"]), "hidden");
        assert_eq!(base(&["wéird prog"]), "w-ird-prog");
        assert_eq!(base(&["///"]), "t");
        assert_eq!(base(&[&"x".repeat(100)]).len(), 32);
        for argv in [&["..."][..], &["-"], &["a b"], &["/usr/bin/python3.12"]] {
            let name = format!("{}-17", base(argv));
            assert!(
                crate::protocol::slots::validate_task_name(&name).is_ok(),
                "{name}"
            );
        }
    }
}

/// After the submit step: makes `key`'s record, written with the id `recorded`, carry the id of
/// its row (`queue_id`, 0 when it got none). Reads and rewrites the record only when the two
/// differ (a dropped turn; a queue whose counter was off). Call under the queue lock.
pub fn settle_turn_id(
    home: &Home,
    key: &TurnKey,
    recorded: Option<u64>,
    queue_id: u64,
) -> Result<(), FileError> {
    let id = (queue_id != 0).then_some(queue_id);
    if id == recorded {
        return Ok(());
    }
    if let Some(mut turn) = load_turn(home, key)? {
        if turn.id != id {
            turn.id = id;
            save_turn(home, &turn)?;
        }
    }
    Ok(())
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

fn corrupt(path: &Path, format: &'static str, detail: String) -> FileError {
    FileError::Corrupt {
        path: path.to_path_buf(),
        format,
        detail,
    }
}

/// The loader's checks on a task record.
fn check_task(record: &TaskRecord) -> Result<(), String> {
    if record.version > TASK_FORMAT_VERSION {
        return Err(format!(
            "format version {} is newer than this tollgate understands ({TASK_FORMAT_VERSION})",
            record.version
        ));
    }
    if record.next_turn == 0 {
        return Err("next_turn is 0; turns are numbered from 1".to_string());
    }
    Ok(())
}

/// The loader's checks on a turn record; `expected` is the turn its location names (a record that
/// names another turn would make the runner write over that turn's record).
fn check_turn(turn: &TurnRecord, expected: &TurnKey) -> Result<(), String> {
    if turn.version > TASK_FORMAT_VERSION {
        return Err(format!(
            "format version {} is newer than this tollgate understands ({TASK_FORMAT_VERSION})",
            turn.version
        ));
    }
    if &turn.key != expected {
        return Err(format!(
            "it names {} but lies where {expected} belongs",
            turn.key
        ));
    }
    if turn.key.turn == 0 {
        return Err("turn 0; turns are numbered from 1".to_string());
    }
    if turn.argv.len() > MAX_ARGV {
        return Err(format!("more than {MAX_ARGV} arguments"));
    }
    Ok(())
}

/// Parses and checks a `task.json` read from `path` (named in errors).
pub fn parse_task(path: &Path, bytes: &[u8]) -> Result<TaskRecord, FileError> {
    let record: TaskRecord = fsutil::parse_json(path, bytes)?;
    check_task(&record).map_err(|detail| corrupt(path, "tollgate task record", detail))?;
    Ok(record)
}

/// Parses and checks a `turn.json` read from `path`, the record of `expected`.
pub fn parse_turn(path: &Path, bytes: &[u8], expected: &TurnKey) -> Result<TurnRecord, FileError> {
    let turn: TurnRecord = fsutil::parse_json(path, bytes)?;
    check_turn(&turn, expected).map_err(|detail| corrupt(path, "tollgate turn record", detail))?;
    Ok(turn)
}

/// Where a record in the database is named in errors: the database and the record's place.
fn db_record_path(home: &Home, place: String) -> PathBuf {
    PathBuf::from(format!(
        "{} (record {place})",
        records::database_name(home).display()
    ))
}

/// Runs `f` on `home`'s database ([`records::with_db`]), SQLite's errors naming the database.
fn db<T>(
    home: &Home,
    access: records::Access,
    changed: Option<PathBuf>,
    f: impl FnOnce(&mut records::Db<'_>) -> Result<T, records::DbError>,
) -> Result<T, FileError> {
    let path = records::database_name(home);
    records::with_db(home, access, changed, |conn| {
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
    if records::in_database(home) {
        let path = db_record_path(home, format!("tasks/{task}"));
        return db(home, records::Access::Read, None, |c| c.task_body(task))?
            .map(|text| parse_task(&path, text.as_bytes()))
            .transpose();
    }
    let path = home.task_file(task);
    match fsutil::read_state_file(&path, "task record", fsutil::limits::TASK_BYTES)? {
        Some(bytes) => parse_task(&path, &bytes).map(Some),
        None => Ok(None),
    }
}

/// Where the record of `key` lives, for a message: `tollgate.db (record turns/T/N)` in a
/// database home, else the `turn.json` path.
pub fn turn_record_location(home: &Home, key: &TurnKey) -> String {
    if records::in_database(home) {
        format!(
            "{} (record turns/{}/{})",
            records::database_name(home).display(),
            key.task,
            key.turn
        )
    } else {
        home.turn_file(key).display().to_string()
    }
}

pub fn load_turn(home: &Home, key: &TurnKey) -> Result<Option<TurnRecord>, FileError> {
    if records::in_database(home) {
        let path = db_record_path(home, format!("turns/{}/{}", key.task, key.turn));
        return db(home, records::Access::Read, None, |c| {
            c.turn_body(&key.task, key.turn)
        })?
        .map(|text| parse_turn(&path, text.as_bytes(), key))
        .transpose();
    }
    let path = home.turn_file(key);
    match fsutil::read_state_file(&path, "turn record", fsutil::limits::TURN_BYTES)? {
        Some(bytes) => parse_turn(&path, &bytes, key).map(Some),
        None => Ok(None),
    }
}

fn save_task(home: &Home, record: &TaskRecord) -> Result<(), FileError> {
    let path = home.task_file(&record.name);
    check_task(record).map_err(|detail| FileError::Refused {
        path: path.clone(),
        detail: format!("the task record would not load ({detail})"),
    })?;
    if records::in_database(home) {
        let text = body(&path, record)?;
        return db(home, records::Access::Write, None, |c| {
            c.put_task(&record.name, record.next_turn, &text)
        });
    }
    fsutil::publish_json(&path, record)
}

pub fn save_turn(home: &Home, turn: &TurnRecord) -> Result<(), FileError> {
    write_turn(home, turn, false)
}

/// Writes `turn`'s record; `create`: a new turn, refused when its number already has a record
/// (the database's primary key; on files the exclusive `mkdir` of [`claim_turn_dir`] is that
/// guard), so a record is never overwritten by a new turn.
fn write_turn(home: &Home, turn: &TurnRecord, create: bool) -> Result<(), FileError> {
    let path = home.turn_file(&turn.key);
    check_turn(turn, &turn.key).map_err(|detail| FileError::Refused {
        path: path.clone(),
        detail: format!("the turn record would not load ({detail})"),
    })?;
    if records::in_database(home) {
        let text = body(&path, turn)?;
        let row = records::TurnRow {
            task: &turn.key.task,
            turn: turn.key.turn,
            short_id: turn.id,
            settled: turn.is_settled(),
            ended_at_millis: turn.ended_at_millis,
            body: &text,
        };
        // Recording an outcome is a promise (`wait` and `status` tell it, and reconcile trusts
        // it instead of running the turn again): its commit is synced.
        let access = if turn.is_settled() {
            records::Access::Outcome
        } else {
            records::Access::Write
        };
        // A new turn's record signals no folder: nobody watches a turn before it exists, and its
        // folder is made later (a `utimensat` of a missing folder is a wasted syscall).
        let changed = (!create).then(|| home.turn_dir(&turn.key));
        let written = db(home, access, changed, |c| c.put_turn(&row, create))?;
        if !written {
            return Err(FileError::Refused {
                path: db_record_path(home, format!("turns/{}/{}", turn.key.task, turn.key.turn)),
                detail: "a record of this turn exists already".to_string(),
            });
        }
        return Ok(());
    }
    fsutil::publish_json(&path, turn)
}

/// Saves the result of a turn whose command ran (the write [`retry_while_disk_full`] retries).
/// With the `failpoints` feature, `tasks::save_result` fails it with ENOSPC: always when the
/// failpoint has no argument, else while the file its argument names exists.
pub fn save_result(home: &Home, turn: &TurnRecord) -> Result<(), FileError> {
    #[cfg(feature = "failpoints")]
    {
        let path = home.turn_file(&turn.key);
        let fail = fail::eval("tasks::save_result", |arg| {
            arg.is_none_or(|gate| Path::new(&gate).exists())
        });
        if fail == Some(true) {
            return Err(FileError::io(
                &path,
                io::Error::from_raw_os_error(libc::ENOSPC),
            ));
        }
    }
    save_turn(home, turn)
}

/// Hands out the next turn number of `task` (creating the task) and writes the turn's record.
/// Call under the queue lock.
#[allow(clippy::too_many_arguments)]
pub fn create_turn(
    home: &Home,
    task: &str,
    argv: Argv,
    cwd: Option<PathBuf>,
    env: Env,
    attached: bool,
    now_millis: u64,
) -> Result<TurnRecord, FileError> {
    create_turn_with(
        home,
        task,
        None,
        argv,
        cwd,
        env,
        attached,
        now_millis,
        TurnMeta::default(),
    )
    .map(|(turn, _)| turn)
}

/// [`create_turn`], also setting the task's strategy when `strategy` is given; returns the
/// strategy in force for this turn.
#[allow(clippy::too_many_arguments)]
pub fn create_turn_with(
    home: &Home,
    task: &str,
    strategy: Option<Strategy>,
    argv: Argv,
    cwd: Option<PathBuf>,
    env: Env,
    attached: bool,
    now_millis: u64,
    meta: TurnMeta,
) -> Result<(TurnRecord, Strategy), FileError> {
    if !records::in_database(home) {
        // On files the folders hold the records; in a database they are made lazily.
        fsutil::create_private_dir(&home.task_dir(task))?;
    }
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
    let key = claim_turn_dir(home, task, record.next_turn)?;
    record.next_turn = next_turn_after(home, task, key.turn)?;
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
        host: None,
        ended_at_millis: None,
        exit_code: None,
        signal: None,
        outcome: None,
        error: None,
        delivery: None,
        id: meta.id,
        labels: meta.labels,
        timeout_millis: meta.timeout_millis,
        after: meta.after,
        retry: meta.retry,
        retry_of: meta.retry_of,
        retried_as: None,
        failed_dependency: None,
    };
    // The task's counter first: a crash between the two writes then skips a turn number instead
    // of leaving a turn record its task does not list.
    save_task(home, &record)?;
    write_turn(home, &turn, true)?;
    Ok((turn, record.strategy))
}

/// The counter value after `turn`, or a refusal naming the task file when `turn` is the last
/// number there is.
fn next_turn_after(home: &Home, task: &str, turn: u32) -> Result<u32, FileError> {
    turn.checked_add(1).ok_or_else(|| FileError::Refused {
        path: if records::in_database(home) {
            db_record_path(home, format!("tasks/{task}"))
        } else {
            home.task_file(task)
        },
        detail: format!(
            "task {task:?} has used every turn number up to {}; submit to a new task",
            u32::MAX
        ),
    })
}

/// Creates the directory of a new turn of `task` exclusively, numbered `wanted` if that is free,
/// else the first number after the highest recorded turn (a deleted `task.json` or a rewound
/// `next_turn`: the existing records stay as they are). Call under the queue lock.
///
/// With the records in a database nothing is created: the claim is the record inserted where none
/// exists ([`write_turn`]), and a number whose folder is still there (a removal cut short) is
/// taken too, so a new turn never shows an older turn's logs. The folder is made when it is first
/// written into (spec/turns.md, "The turn folder").
fn claim_turn_dir(home: &Home, task: &str, wanted: u32) -> Result<TurnKey, FileError> {
    if !records::in_database(home) {
        fsutil::create_private_dir(&home.task_dir(task).join("turns"))?;
    }
    // Refuse a last number before creating anything for it.
    next_turn_after(home, task, wanted)?;
    let key = TurnKey::new(task, wanted);
    if claim(home, &key)? {
        return Ok(key);
    }
    let mut highest = dir_turns(home, task)?.last().copied().unwrap_or(0);
    if records::in_database(home) {
        let recorded = db(home, records::Access::Read, None, |c| c.turn_numbers(task))?;
        highest = highest.max(recorded.last().copied().unwrap_or(0));
    }
    let free = next_turn_after(home, task, highest.max(wanted))?;
    next_turn_after(home, task, free)?;
    let key = TurnKey::new(task, free);
    let _ = writeln!(
        io::stderr(),
        "tollgate: warning: {} already holds turn {wanted} of task {task:?} (its task record was \
         deleted or its next_turn rewound); the new turn is {free} and the existing records are kept",
        home.turn_dir(&TurnKey::new(task, wanted)).display()
    );
    if claim(home, &key)? {
        Ok(key)
    } else {
        Err(FileError::Refused {
            path: home.turn_dir(&key),
            detail: "the turn directory exists although no higher turn is recorded".to_string(),
        })
    }
}

/// Claims `key`'s number for a new turn: on files, its folder created exclusively; in a database,
/// no record of it and nothing at its folder's place (one `stat`, no inode made).
fn claim(home: &Home, key: &TurnKey) -> Result<bool, FileError> {
    let dir = home.turn_dir(key);
    if !records::in_database(home) {
        return create_exclusive_dir(&dir);
    }
    if has_db_record(home, key)? {
        return Ok(false);
    }
    match std::fs::symlink_metadata(&dir) {
        Ok(_) => Ok(false),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(true),
        Err(e) => Err(FileError::io(&dir, e)),
    }
}

/// Whether the database holds a record of `key` (false for a home whose records are files: there
/// the turn's folder is the claim).
fn has_db_record(home: &Home, key: &TurnKey) -> Result<bool, FileError> {
    if !records::in_database(home) {
        return Ok(false);
    }
    Ok(db(home, records::Access::Read, None, |c| {
        c.turn_body(&key.task, key.turn)
    })?
    .is_some())
}

/// `mkdir` with mode 0700 that never reuses a directory: `Ok(false)` when `dir` exists.
fn create_exclusive_dir(dir: &Path) -> Result<bool, FileError> {
    use std::os::unix::fs::DirBuilderExt;
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(FileError::io(dir, e)),
    }
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

/// `state` (a turn's state word in `status`), or `recording` when the turn shows as running but
/// its command has ended and its runner waits for disk space to record the result.
pub fn recording_or(home: &Home, key: &TurnKey, state: String) -> String {
    if state == "running" && result_pending(home, key) {
        "recording".to_string()
    } else {
        state
    }
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
    if records::in_database(home) {
        return db(home, records::Access::Read, None, |c| c.task_names());
    }
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
    if records::in_database(home) {
        return db(home, records::Access::Read, None, |c| c.turn_numbers(task));
    }
    dir_turns(home, task)
}

/// Every turn without an outcome, with its record: reconcile's orphan candidates. In the
/// database they come from the index of unfinished turns (the cost follows the turns in flight,
/// not every turn ever recorded); on files every record is read.
pub fn unfinished_turns(home: &Home) -> Result<Vec<TurnRecord>, FileError> {
    if records::in_database(home) {
        let rows = db(home, records::Access::Read, None, |c| c.unfinished())?;
        return rows
            .into_iter()
            .map(|(task, turn, text)| {
                let key = TurnKey::new(task, turn);
                let path = db_record_path(home, format!("turns/{}/{}", key.task, key.turn));
                parse_turn(&path, text.as_bytes(), &key)
            })
            .collect();
    }
    let mut unfinished = Vec::new();
    for task in list_tasks(home)? {
        for turn in list_turns(home, &task)? {
            if let Some(record) = load_turn(home, &TurnKey::new(task.clone(), turn))? {
                if !record.is_settled() {
                    unfinished.push(record);
                }
            }
        }
    }
    Ok(unfinished)
}

/// The keys of every turn without an outcome, from the database's index of unfinished turns
/// without reading a record's body (serve's fallback re-read: a watched turn found here is still
/// live, since a row's `settled` is written with its outcome); `None` for a home whose records
/// are files (the caller reads the records).
pub fn unfinished_turn_keys(home: &Home) -> Result<Option<BTreeSet<TurnKey>>, FileError> {
    if !records::in_database(home) {
        return Ok(None);
    }
    let rows = db(home, records::Access::Read, None, |c| c.unfinished_keys())?;
    Ok(Some(
        rows.into_iter()
            .map(|(task, turn)| TurnKey::new(task, turn))
            .collect(),
    ))
}

/// The turns whose short id is `id`, from the database's index; `None` for a home whose records
/// are files (the caller searches them).
pub fn turns_with_id(home: &Home, id: u64) -> Result<Option<Vec<TurnKey>>, FileError> {
    if !records::in_database(home) {
        return Ok(None);
    }
    let rows = db(home, records::Access::Read, None, |c| {
        c.turns_with_short_id(id)
    })?;
    Ok(Some(
        rows.into_iter()
            .map(|(task, turn)| TurnKey::new(task, turn))
            .collect(),
    ))
}

/// Removes a settled turn: its record and its folder (logs). Call under the queue lock.
pub fn remove_turn(home: &Home, key: &TurnKey) -> Result<(), FileError> {
    if records::in_database(home) {
        db(home, records::Access::Write, None, |c| {
            c.delete_turn(&key.task, key.turn)
        })?;
    }
    let dir = home.turn_dir(key);
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
