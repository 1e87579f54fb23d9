//! The importer of an earlier version's file store, run once at open: `queue.json` and the task
//! and turn record files are read as strictly as the file loader read them, written into the
//! tables inside the migration's transaction, and moved aside (kept) after the commit.

use super::errors::sql_error;
use crate::clock;
use crate::fsutil::{self, FileError};
use crate::home::Home;
use crate::protocol::slots::{QueueState, TurnKey};
use crate::queue::records;
use crate::queue::store::{parse_queue, StoreError};
use rusqlite::{Connection, OptionalExtension};
use std::io;
use std::path::{Path, PathBuf};

/// The record files of an earlier version's home (or of a home whose database predates schema
/// version 4): every `tasks/<task>/task.json` and `tasks/<task>/turns/<n>/turn.json`, checked as
/// strictly as the file loader checks them. The first file that would not load is an error
/// naming it (nothing is imported).
pub(in crate::queue) struct OldRecords {
    pub(in crate::queue) tasks: Vec<crate::protocol::records::TaskRecord>,
    pub(in crate::queue) turns: Vec<crate::protocol::records::TurnRecord>,
}

pub(in crate::queue) fn read_old_records(home: &Home) -> Result<OldRecords, StoreError> {
    let mut old = OldRecords {
        tasks: Vec::new(),
        turns: Vec::new(),
    };
    let tasks_dir = home.tasks_dir();
    for task in fsutil::sorted_names(&tasks_dir)? {
        let task_file = home.task_file(&task);
        if let Some(bytes) =
            fsutil::read_state_file(&task_file, "task record", fsutil::limits::TASK_BYTES)?
        {
            old.tasks.push(records::parse_task(&task_file, &bytes)?);
        }
        let turns_dir = home.task_dir(&task).join("turns");
        for name in fsutil::sorted_names(&turns_dir)? {
            let Ok(turn) = name.parse::<u32>() else {
                continue;
            };
            let key = TurnKey::new(task.clone(), turn);
            let file = home.turn_file(&key);
            if let Some(bytes) =
                fsutil::read_state_file(&file, "turn record", fsutil::limits::TURN_BYTES)?
            {
                old.turns.push(records::parse_turn(&file, &bytes, &key)?);
            }
        }
    }
    Ok(old)
}

/// Writes the home's record files into the version 4 tables (inside the migration's
/// transaction) and records the import; the files are moved aside after the commit.
pub(super) fn import_records(home: &Home, tx: &Connection, path: &Path) -> Result<(), StoreError> {
    let old = read_old_records(home)?;
    if old.tasks.is_empty() && old.turns.is_empty() {
        return Ok(());
    }
    let sql = |e| sql_error(path, e);
    let json = |e: serde_json::Error| StoreError::Database {
        path: path.to_path_buf(),
        detail: format!("cannot render a record: {e}"),
    };
    for task in &old.tasks {
        let body = serde_json::to_string(task).map_err(json)?;
        records::put_task(tx, &task.name, task.next_turn, &body).map_err(sql)?;
    }
    for turn in &old.turns {
        let body = serde_json::to_string(turn).map_err(json)?;
        records::put_turn(
            tx,
            &records::TurnRow {
                task: &turn.key.task,
                turn: turn.key.turn,
                short_id: turn.id,
                settled: turn.is_settled(),
                ended_at_millis: turn.ended_at_millis,
                body: &body,
            },
            true,
        )
        .map_err(sql)?;
    }
    tx.execute(
        "INSERT OR REPLACE INTO imports (source, imported_at_millis) VALUES ('records', ?1)",
        [clock::now_millis()],
    )
    .map_err(sql)?;
    Ok(())
}

/// After the record files were imported, renames each `task.json` and `turn.json` to
/// `*.imported` (kept, never deleted) and records that; finished by a later open if a crash came
/// in between.
pub(super) fn move_records_aside(
    home: &Home,
    conn: &Connection,
    path: &Path,
) -> Result<(), StoreError> {
    let pending: Option<bool> = conn
        .query_row(
            "SELECT moved_aside = 0 FROM imports WHERE source = 'records'",
            [],
            |row| row.get(0),
        )
        .optional()
        .map_err(|e| sql_error(path, e))?;
    if pending != Some(true) {
        return Ok(());
    }
    move_record_files_aside(home)?;
    conn.execute(
        "UPDATE imports SET moved_aside = 1 WHERE source = 'records'",
        [],
    )
    .map_err(|e| sql_error(path, e))?;
    Ok(())
}

/// Renames every `task.json` and `turn.json` of `home` to `*.imported` (kept, never deleted);
/// also used by the PostgreSQL store's import of a home's record files.
pub(in crate::queue) fn move_record_files_aside(home: &Home) -> Result<(), StoreError> {
    let aside = |file: PathBuf| -> Result<(), StoreError> {
        if file.is_file() {
            let mut to = file.as_os_str().to_owned();
            to.push(".imported");
            match std::fs::rename(&file, &to) {
                // Another command opening the home at the same moment moved it first.
                Err(e) if e.kind() != io::ErrorKind::NotFound => {
                    return Err(FileError::io(&file, e).into())
                }
                _ => {}
            }
        }
        Ok(())
    };
    for task in fsutil::sorted_names(&home.tasks_dir())? {
        aside(home.task_file(&task))?;
        for name in fsutil::sorted_names(&home.task_dir(&task).join("turns"))? {
            if let Ok(turn) = name.parse::<u32>() {
                aside(home.turn_file(&TurnKey::new(task.clone(), turn)))?;
            }
        }
    }
    Ok(())
}

/// The home's `queue.json` of an earlier version, checked as strictly as the file store loaded
/// it: `Ok(None)` when there is none, an error naming it when it would not load.
pub(super) fn read_old_queue(home: &Home) -> Result<Option<QueueState>, StoreError> {
    let old = home.queue_path();
    match fsutil::read_state_file(&old, "queue", fsutil::limits::QUEUE_BYTES)? {
        Some(bytes) => Ok(Some(parse_queue(&old, &bytes)?)),
        None => Ok(None),
    }
}

/// After `queue.json` was imported (recorded in `imports`), moves it to
/// [`Home::imported_queue_path`] and records that; done on a later open if a crash came between
/// the import's commit and the move. A `queue.json` that appears after that (an old tollgate run
/// on this home, a restored backup) is neither imported nor moved: `doctor` names it.
pub(super) fn move_imported_aside(
    home: &Home,
    conn: &Connection,
    path: &Path,
) -> Result<(), StoreError> {
    let old = home.queue_path();
    if !old.exists() {
        return Ok(());
    }
    let pending: Option<bool> = conn
        .query_row(
            "SELECT moved_aside = 0 FROM imports WHERE source = 'queue.json'",
            [],
            |row| row.get(0),
        )
        .optional()
        .map_err(|e| sql_error(path, e))?;
    if pending != Some(true) {
        return Ok(());
    }
    let mut aside = home.imported_queue_path();
    if aside.exists() {
        aside = aside.with_extension(format!("imported.{}", clock::now_millis()));
    }
    std::fs::rename(&old, &aside).map_err(|e| FileError::io(&old, e))?;
    conn.execute(
        "UPDATE imports SET moved_aside = 1 WHERE source = 'queue.json'",
        [],
    )
    .map_err(|e| sql_error(path, e))?;
    Ok(())
}
