//! `tollgate doctor`'s look at a home's database: SQLite's integrity check, the queue's structure
//! check and the record tables' bodies against their columns, changing nothing (no migration, no
//! import). Read-only, so it lives apart from the open path that migrates.

use super::errors::sql_error;
use super::open::{check_database_files, is_empty};
use super::read::read_queue;
use super::schema::{newer_schema, schema_version, SCHEMA_VERSION};
use crate::fsutil::FileError;
use crate::home::Home;
use crate::protocol::slots::TurnKey;
use crate::queue::earlier_state;
use crate::queue::records;
use crate::queue::store::StoreError;
use rusqlite::{Connection, OpenFlags};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// What `tollgate doctor` found in a home's database.
#[derive(Clone, Debug, Serialize)]
pub struct DoctorReport {
    pub database: PathBuf,
    /// False for a home that has no database yet (nothing to check).
    pub exists: bool,
    pub schema_version: u32,
    /// `PRAGMA integrity_check`'s findings; empty when it said "ok".
    pub integrity_problems: Vec<String>,
    /// The queue's structure check (or why the tables do not load as a queue).
    pub queue_problem: Option<String>,
    pub queue_rows: usize,
    /// Task and turn records in the database (schema version 4).
    pub task_records: usize,
    pub turn_records: usize,
    /// Records whose body would not load, or whose indexed columns disagree with it (at most
    /// [`MAX_INTEGRITY_FINDINGS`]), each naming the record.
    pub record_problems: Vec<String>,
    /// A `queue.json` in the home that the database does not read (not a problem of the
    /// database: imported already, or waiting for the first command to import it).
    pub unread_queue_json: Option<PathBuf>,
    /// The database is missing or holds no schema while the home shows it had one (what every
    /// command refuses, naming the signs; "A lost database").
    pub lost_database: Option<String>,
}

impl DoctorReport {
    pub fn healthy(&self) -> bool {
        self.integrity_problems.is_empty()
            && self.queue_problem.is_none()
            && self.record_problems.is_empty()
            && self.lost_database.is_none()
    }
}

/// The most findings `PRAGMA integrity_check` is asked for.
const MAX_INTEGRITY_FINDINGS: u32 = 100;

/// Runs SQLite's integrity check and the queue's structure check on the home's database,
/// changing nothing (no migration, no import). `Err` when it cannot be opened at all.
pub fn check_database(home: &Home) -> Result<DoctorReport, StoreError> {
    let path = home.db_path();
    let mut report = DoctorReport {
        database: path.clone(),
        exists: false,
        schema_version: 0,
        integrity_problems: Vec::new(),
        queue_problem: None,
        queue_rows: 0,
        task_records: 0,
        turn_records: 0,
        record_problems: Vec::new(),
        unread_queue_json: Some(home.queue_path()).filter(|p| p.exists()),
        lost_database: None,
    };
    let lost = |missing: bool, with_log: bool| -> Result<Option<String>, StoreError> {
        let signs = earlier_state::earlier_state(home, with_log)?;
        Ok((!signs.is_empty()).then(|| earlier_state::lost(home, missing, &signs).to_string()))
    };
    if !check_database_files(&path)? {
        report.lost_database = lost(true, true)?;
        return Ok(report);
    }
    report.exists = true;
    // Not opened: SQLite would take an empty file for a new database and delete its log.
    if is_empty(&path)? {
        report.queue_problem = Some("the database is empty (0 bytes)".to_string());
        report.lost_database = lost(false, true)?;
        return Ok(report);
    }
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let mut conn = Connection::open_with_flags(&path, flags).map_err(|e| sql_error(&path, e))?;
    conn.busy_timeout(Duration::from_secs(10))
        .map_err(|e| sql_error(&path, e))?;
    report.schema_version = schema_version(&conn, &path)?;
    if report.schema_version > SCHEMA_VERSION {
        return Err(newer_schema(&path, report.schema_version));
    }
    let findings: Vec<String> = {
        let mut check = conn
            .prepare(&format!("PRAGMA integrity_check({MAX_INTEGRITY_FINDINGS})"))
            .map_err(|e| sql_error(&path, e))?;
        let rows = check
            .query_map([], |row| row.get(0))
            .map_err(|e| sql_error(&path, e))?;
        rows.collect::<Result<_, _>>()
            .map_err(|e| sql_error(&path, e))?
    };
    if findings != ["ok"] {
        report.integrity_problems = findings;
    }
    if report.schema_version == 0 {
        report.queue_problem = Some("the database has no tollgate schema".to_string());
        report.lost_database = lost(false, false)?;
        return Ok(report);
    }
    let tx = conn.transaction().map_err(|e| sql_error(&path, e))?;
    match read_queue(&tx, &path) {
        Ok(state) => report.queue_rows = state.entries.len(),
        Err(StoreError::File(FileError::Corrupt { detail, .. })) => {
            report.queue_problem = Some(detail)
        }
        Err(e) => report.queue_problem = Some(e.to_string()),
    }
    if report.schema_version >= 4 {
        check_records(&tx, &path, &mut report)?;
    }
    Ok(report)
}

/// `doctor`'s check of the record tables: every body loads with the loader's checks (as the
/// record it is filed under) and the indexed columns agree with it.
fn check_records(
    conn: &Connection,
    path: &Path,
    report: &mut DoctorReport,
) -> Result<(), StoreError> {
    let sql = |e| sql_error(path, e);
    let limit = MAX_INTEGRITY_FINDINGS as usize;
    let mut problems = Vec::new();
    let mut tasks = conn
        .prepare("SELECT name, next_turn, body FROM tasks ORDER BY name")
        .map_err(sql)?;
    let mut rows = tasks.query([]).map_err(sql)?;
    while let Some(row) = rows.next().map_err(sql)? {
        report.task_records += 1;
        let name: String = row.get(0).map_err(sql)?;
        let next_turn: i64 = row.get(1).map_err(sql)?;
        let body: String = row.get(2).map_err(sql)?;
        let place = PathBuf::from(format!("tasks/{name}"));
        match records::parse_task(&place, body.as_bytes()) {
            Ok(task) if task.name != name || i64::from(task.next_turn) != next_turn => problems
                .push(format!(
                    "task record {name:?}: its columns (name, next_turn {next_turn}) disagree with its body"
                )),
            Ok(_) => {}
            Err(e) => problems.push(format!("task record {name:?}: {e}")),
        }
    }
    drop(rows);
    let mut turns = conn
        .prepare(
            "SELECT task, turn, short_id, settled, ended_at_millis, body FROM turns
             ORDER BY task, turn",
        )
        .map_err(sql)?;
    let mut rows = turns.query([]).map_err(sql)?;
    while let Some(row) = rows.next().map_err(sql)? {
        report.turn_records += 1;
        let key = TurnKey::new(
            row.get::<_, String>(0).map_err(sql)?,
            row.get(1).map_err(sql)?,
        );
        let short_id: Option<u64> = row.get::<_, Option<i64>>(2).map_err(sql)?.map(|v| v as u64);
        let settled: bool = row.get(3).map_err(sql)?;
        let ended: Option<u64> = row.get::<_, Option<i64>>(4).map_err(sql)?.map(|v| v as u64);
        let body: String = row.get(5).map_err(sql)?;
        let place = PathBuf::from(format!("turns/{}/{}", key.task, key.turn));
        match records::parse_turn(&place, body.as_bytes(), &key) {
            Ok(turn)
                if turn.id != short_id
                    || turn.is_settled() != settled
                    || turn.ended_at_millis != ended =>
            {
                problems.push(format!(
                    "turn record {key}: its columns (short_id, settled, ended_at_millis) disagree with its body"
                ))
            }
            Ok(_) => {}
            Err(e) => problems.push(format!("turn record {key}: {e}")),
        }
    }
    problems.truncate(limit);
    report.record_problems = problems;
    Ok(())
}
