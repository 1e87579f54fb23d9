//! `tollgate doctor`: SQLite's integrity check and the queue's structure check on the home's
//! database (spec/store.md, "Doctor"), and the structure checks of serve's tables and the sweep
//! list ([`TABLE_CHECKS`]). It changes nothing: no home, database or migration is created, and an
//! old `queue.json` is not imported.

use super::CliError;
use crate::home::Home;
use crate::queue::{check_database, DoctorReport};
use clap::Args;
use rusqlite::{Connection, OpenFlags};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// `doctor`'s own exit codes (documented in its `--help`).
pub mod exit {
    /// The database passed both checks (or the home has none yet).
    pub const HEALTHY: i32 = 0;
    /// A check found a problem; the report names it.
    pub const PROBLEMS: i32 = 1;
    /// The database could not be opened at all (not a regular file, not SQLite, unreadable).
    pub const CANNOT_OPEN: i32 = 2;
}

#[derive(Debug, Args)]
#[command(after_help = "Exit codes:
  0  healthy (or no database yet)
  1  problems found (listed)
  2  the database cannot be opened (the error names it)")]
pub struct DoctorArgs {
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn doctor(home: Option<PathBuf>, args: DoctorArgs) -> Result<i32, CliError> {
    let home = Home::resolve(home)?;
    let mut report = match check_database(&home) {
        Ok(report) => report,
        Err(error) => {
            return Ok(cannot_open(
                args.json,
                &home.db_path(),
                "open the database",
                &error,
            ))
        }
    };
    let tables = match check_tables(&home, &report) {
        Ok(tables) => tables,
        Err(error) => {
            return Ok(cannot_open(
                args.json,
                &error.database,
                "check the tables",
                &error,
            ))
        }
    };
    let postgres = match check_postgres(&home) {
        Ok(postgres) => postgres,
        Err(error) => {
            return Ok(cannot_open(
                args.json,
                &error.database,
                "check the PostgreSQL store",
                &error,
            ))
        }
    };
    if postgres.is_some() {
        // The home's store is PostgreSQL: it has no tollgate.db to lose (its turn folders are
        // the records' of that database).
        report.lost_database = None;
    }
    let healthy = report.healthy()
        && tables.problems.is_empty()
        && tables.row_count_problem.is_none()
        && postgres.as_ref().is_none_or(|pg| pg.healthy());
    if args.json {
        let mut value = serde_json::to_value(&report)
            .map_err(|e| CliError::Environment(format!("cannot render the report: {e}")))?;
        value["tables_checked"] = tables.checked.into();
        value["table_problems"] = tables.problems.clone().into();
        if let Some((kept, counted)) = tables.row_count {
            value["queue_row_count"] = serde_json::json!({ "kept": kept, "counted": counted });
        }
        value["queue_row_count_problem"] = tables.row_count_problem.clone().into();
        if let Some(pg) = &postgres {
            value["postgres"] = serde_json::to_value(pg)
                .map_err(|e| CliError::Environment(format!("cannot render the report: {e}")))?;
        }
        value["healthy"] = healthy.into();
        println!("{value}");
    } else {
        print_report(&report, &tables, healthy);
        if let Some(pg) = &postgres {
            print_postgres(pg);
        }
    }
    Ok(if healthy {
        exit::HEALTHY
    } else {
        exit::PROBLEMS
    })
}

/// The most problems one table check reports (the first ones by the table's key).
const MAX_TABLE_FINDINGS: i64 = 100;

/// One structure check of a table. Its query selects one text per row that breaks the table's
/// rules, naming the table and the row's key; `?1` is [`MAX_TABLE_FINDINGS`].
struct TableCheck {
    table: &'static str,
    /// The schema version of `tollgate.db` that made the table.
    since_version: u32,
    /// Whether the table is part of the sweep list (also kept in `sweep.db` on a home whose
    /// store is not `tollgate.db`).
    sweep: bool,
    sql: &'static str,
}

/// What is checked beyond the queue and the records: rows each table's writer never writes.
/// A mark must expire after it was made (the dedupe window is positive), the JSON bodies of
/// refusals, hand-offs and the sweep list load as objects, and a sweep row's key columns say what
/// its body says (they make its additions idempotent). `serve_payloads` is not checked: a payload
/// whose turn record is gone is a normal state (retention removed the turn while no serve ran),
/// which the next serve's prune removes, not damage.
const TABLE_CHECKS: &[TableCheck] = &[
    TableCheck {
        table: "serve_dedupe",
        since_version: 5,
        sweep: false,
        sql: "SELECT 'serve_dedupe key ' || quote(key) || ': expires at ' || expires_at_millis
                  || ' ms, not after it was marked at ' || marked_at_millis || ' ms'
              FROM serve_dedupe
              WHERE expires_at_millis <= marked_at_millis OR marked_at_millis < 0
              ORDER BY key LIMIT ?1",
    },
    TableCheck {
        table: "serve_refused",
        since_version: 5,
        sweep: false,
        sql: "SELECT 'serve_refused id ' || id || ': its body is not a JSON object'
              FROM serve_refused
              WHERE NOT json_valid(body) OR json_type(body) IS NOT 'object'
              ORDER BY id LIMIT ?1",
    },
    TableCheck {
        table: "serve_handed_off",
        since_version: 5,
        sweep: false,
        sql: "SELECT 'serve_handed_off delivery ' || quote(delivery)
                  || ': its body is not a JSON object'
              FROM serve_handed_off
              WHERE NOT json_valid(body) OR json_type(body) IS NOT 'object'
              ORDER BY delivery LIMIT ?1",
    },
    TableCheck {
        table: "sweep_runs",
        since_version: 6,
        sweep: true,
        sql: "SELECT 'sweep_runs run ' || quote(run_id) || CASE
                  WHEN NOT json_valid(body) OR json_type(body) IS NOT 'object'
                      THEN ': its body is not a JSON object'
                  ELSE ': its body names run ' || quote(json_extract(body, '$.run_id')) END
              FROM sweep_runs
              WHERE NOT json_valid(body) OR json_type(body) IS NOT 'object'
                  OR json_extract(body, '$.run_id') IS NOT run_id
              ORDER BY run_id LIMIT ?1",
    },
    TableCheck {
        table: "sweep_entries",
        since_version: 6,
        sweep: true,
        sql: "SELECT 'sweep_entries path ' || quote(path) || CASE
                  WHEN NOT json_valid(body) OR json_type(body) IS NOT 'object'
                      THEN ': its body is not a JSON object'
                  ELSE ': its body names path ' || quote(json_extract(body, '$.path'))
                      || ' of run ' || quote(json_extract(body, '$.run_id'))
                      || ', its columns run ' || quote(run_id) END
              FROM sweep_entries
              WHERE NOT json_valid(body) OR json_type(body) IS NOT 'object'
                  OR json_extract(body, '$.path') IS NOT path
                  OR json_extract(body, '$.run_id') IS NOT run_id
              ORDER BY path LIMIT ?1",
    },
];

/// What the table checks found: the tables read (`<database>: <table>`) and the problems; and
/// the queue's kept row count against the rows counted ([`check_row_count`]).
#[derive(Clone, Debug, Default)]
struct TableReport {
    checked: Vec<String>,
    problems: Vec<String>,
    /// `queue_meta.row_count` (`None`: its row is missing) and `count(*)` of the queue's rows,
    /// where the schema keeps the count (version 8 on).
    row_count: Option<(Option<i64>, i64)>,
    row_count_problem: Option<String>,
}

/// The schema version from which `queue_meta.row_count` is kept by triggers.
const ROW_COUNT_SINCE_VERSION: u32 = 8;

/// A database the table checks could not read.
#[derive(Debug, thiserror::Error)]
#[error("{}: {detail}", database.display())]
struct TableCheckError {
    database: PathBuf,
    detail: String,
}

/// Runs [`TABLE_CHECKS`] on `tollgate.db` (the tables its schema version has) and on the home's
/// `sweep.db` if there is one (the sweep list of a home whose store is elsewhere). Opens
/// without creating anything and only reads.
fn check_tables(home: &Home, report: &DoctorReport) -> Result<TableReport, TableCheckError> {
    let mut out = TableReport::default();
    // A database with no schema (an empty file is not even opened: SQLite would delete its log)
    // has no tables to check.
    if report.exists && report.schema_version > 0 && report.integrity_problems.is_empty() {
        let checks: Vec<&TableCheck> = TABLE_CHECKS
            .iter()
            .filter(|c| report.schema_version >= c.since_version)
            .collect();
        run_checks(&report.database, &checks, &mut out)?;
        if report.schema_version >= ROW_COUNT_SINCE_VERSION {
            check_row_count(&report.database, &mut out)?;
        }
    }
    let sweep_db = home.root().join(crate::exec::sweep::SWEEP_DB);
    if sweep_db.is_file() {
        let checks: Vec<&TableCheck> = TABLE_CHECKS.iter().filter(|c| c.sweep).collect();
        run_checks(&sweep_db, &checks, &mut out)?;
    }
    Ok(out)
}

fn run_checks(
    database: &Path,
    checks: &[&TableCheck],
    out: &mut TableReport,
) -> Result<(), TableCheckError> {
    let fail = |e: rusqlite::Error| TableCheckError {
        database: database.to_path_buf(),
        detail: e.to_string(),
    };
    // Read-write as `check_database` opens it (a read-only open of a WAL database needs its
    // `-shm` file to exist); nothing here writes.
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(database, flags).map_err(fail)?;
    conn.busy_timeout(Duration::from_secs(10)).map_err(fail)?;
    for check in checks {
        let present: bool = conn
            .query_row(
                "SELECT count(*) = 1 FROM sqlite_schema WHERE type = 'table' AND name = ?1",
                [check.table],
                |row| row.get(0),
            )
            .map_err(fail)?;
        if !present {
            // `sweep.db` gets its tables on its first use; `tollgate.db` by its migration.
            if !check.sweep {
                out.problems.push(format!(
                    "{}: table {} is missing",
                    database.display(),
                    check.table
                ));
            }
            continue;
        }
        out.checked
            .push(format!("{}: {}", database.display(), check.table));
        let mut statement = conn.prepare(check.sql).map_err(fail)?;
        let rows = statement
            .query_map([MAX_TABLE_FINDINGS], |row| row.get::<_, String>(0))
            .map_err(fail)?;
        for problem in rows {
            out.problems.push(problem.map_err(fail)?);
        }
    }
    Ok(())
}

/// Compares the queue's kept row count (`queue_meta.row_count`, which a section's bound check
/// reads instead of counting: spec/store.md) with the rows counted. A row inserted or deleted by
/// hand is counted by the triggers; a count changed by hand, or triggers dropped, are not: the
/// bound check would then admit more rows than `MAX_QUEUE_ROWS`, or refuse too early.
fn check_row_count(database: &Path, out: &mut TableReport) -> Result<(), TableCheckError> {
    let fail = |e: rusqlite::Error| TableCheckError {
        database: database.to_path_buf(),
        detail: e.to_string(),
    };
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(database, flags).map_err(fail)?;
    conn.busy_timeout(Duration::from_secs(10)).map_err(fail)?;
    // One read transaction, so both numbers are of the same state.
    let (kept, counted): (Option<i64>, i64) = conn
        .query_row(
            "SELECT (SELECT row_count FROM queue_meta WHERE id = 1), (SELECT count(*) FROM entries)",
            [],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .map_err(fail)?;
    out.row_count = Some((kept, counted));
    out.row_count_problem = match kept {
        None => Some(format!(
            "{}: queue_meta has no row for the queue (id 1), so no row count",
            database.display()
        )),
        Some(kept) if kept != counted => Some(format!(
            "{}: queue_meta.row_count is {kept}, but the queue has {counted} row(s)",
            database.display()
        )),
        Some(_) => None,
    };
    Ok(())
}

/// Says that `database` could not be checked (`doing` it), as JSON or on stderr: exit 2.
fn cannot_open(json: bool, database: &Path, doing: &str, error: &dyn std::fmt::Display) -> i32 {
    if json {
        let value = serde_json::json!({
            "database": database,
            "healthy": false,
            "error": error.to_string(),
        });
        println!("{value}");
    } else {
        eprintln!("tollgate: cannot {doing}: {error}");
    }
    exit::CANNOT_OPEN
}

fn print_report(report: &DoctorReport, tables: &TableReport, healthy: bool) {
    let path = report.database.display();
    if let Some(lost) = &report.lost_database {
        println!("{lost}");
    }
    if !report.exists {
        if report.lost_database.is_none() {
            println!("{path}: no database yet (created on first use)");
        }
        if !tables.checked.is_empty() || !tables.problems.is_empty() {
            print_tables(tables);
        }
        println!("{}", if healthy { "healthy" } else { "problems found" });
        return;
    }
    println!("{path}: schema version {}", report.schema_version);
    if report.integrity_problems.is_empty() {
        println!("integrity check: ok");
    } else {
        println!(
            "integrity check: {} problem(s):",
            report.integrity_problems.len()
        );
        for problem in &report.integrity_problems {
            println!("  {problem}");
        }
    }
    match &report.queue_problem {
        None => println!("queue structure: ok ({} row(s))", report.queue_rows),
        Some(problem) => println!("queue structure: {problem}"),
    }
    match (&tables.row_count_problem, tables.row_count) {
        (Some(problem), _) => println!("queue row count: {problem}"),
        (None, Some((_, counted))) => println!("queue row count: ok ({counted})"),
        (None, None) => {}
    }
    if report.record_problems.is_empty() {
        println!(
            "records: ok ({} task(s), {} turn(s))",
            report.task_records, report.turn_records
        );
    } else {
        println!("records: {} problem(s):", report.record_problems.len());
        for problem in &report.record_problems {
            println!("  {problem}");
        }
    }
    print_tables(tables);
    if let Some(old) = &report.unread_queue_json {
        println!(
            "note: {} is not read by the database (imported once on first use, never again)",
            old.display()
        );
    }
    println!("{}", if healthy { "healthy" } else { "problems found" });
}

fn print_tables(tables: &TableReport) {
    if tables.problems.is_empty() {
        println!(
            "serve and sweep tables: ok ({} table(s))",
            tables.checked.len()
        );
    } else {
        println!(
            "serve and sweep tables: {} problem(s):",
            tables.problems.len()
        );
        for problem in &tables.problems {
            println!("  {problem}");
        }
    }
}

/// What `doctor` found in a PostgreSQL store: its schema version, this home's queue (by the same
/// reader every command uses, when the schema is current) and the structure checks of serve's
/// tables for the queue.
#[derive(Clone, Debug, Default, serde::Serialize)]
struct PostgresReport {
    /// The URL with its password replaced.
    database: String,
    queue: String,
    schema_version: i32,
    /// The newest schema this tollgate knows: an older database is migrated by the next command.
    newest_schema_version: i32,
    /// Whether the queue's rows were read (only on the current schema with this queue's meta
    /// row: reading otherwise would create or migrate, and doctor changes nothing).
    queue_checked: bool,
    queue_rows: usize,
    queue_problem: Option<String>,
    tables_checked: Vec<String>,
    table_problems: Vec<String>,
}

impl PostgresReport {
    fn healthy(&self) -> bool {
        self.queue_problem.is_none() && self.table_problems.is_empty()
    }
}

/// The most refusals and hand-offs whose bodies are parsed here (both tables are kept bounded
/// by serve, far below this).
const MAX_PG_BODIES_READ: i64 = 10_000;

/// The PostgreSQL checks, for a home whose `store` (or `TOLLGATE_STORE`) names PostgreSQL:
/// `None` for any other home. Connects without migrating; a newer schema than this tollgate's is
/// an error naming the database and both versions.
fn check_postgres(home: &Home) -> Result<Option<PostgresReport>, TableCheckError> {
    use crate::queue::{HomeStore, PostgresUrl, POSTGRES_SCHEMA_VERSION};
    let config_path = home.config_path();
    let config = crate::config::Config::load(&config_path)
        .map_err(|e| TableCheckError {
            database: config_path.clone(),
            detail: e.to_string(),
        })?
        .unwrap_or_default();
    let HomeStore::Postgres(store) = HomeStore::for_home(home, &config) else {
        return Ok(None);
    };
    let setting = std::env::var(crate::queue::STORE_ENV)
        .ok()
        .filter(|v| !v.is_empty())
        .or(config.store.clone())
        .unwrap_or_default();
    let url = PostgresUrl::parse(&setting).map_err(|detail| TableCheckError {
        database: config_path.clone(),
        detail,
    })?;
    let name = PathBuf::from(&url.redacted);
    let fail = |e: postgres::Error| TableCheckError {
        database: name.clone(),
        detail: e
            .as_db_error()
            .map(|db| db.message().to_string())
            .unwrap_or_else(|| e.to_string()),
    };
    let mut client_config: postgres::Config = url.connect.parse().map_err(fail)?;
    if client_config.get_connect_timeout().is_none() {
        client_config.connect_timeout(config.lock_timeout().max(Duration::from_secs(1)));
    }
    let mut client = client_config.connect(postgres::NoTls).map_err(fail)?;
    let mut out = PostgresReport {
        database: url.redacted.clone(),
        queue: store.queue().to_string(),
        newest_schema_version: POSTGRES_SCHEMA_VERSION,
        ..PostgresReport::default()
    };
    let has = |client: &mut postgres::Client, table: &str| -> Result<bool, TableCheckError> {
        client
            .query_one("SELECT to_regclass($1) IS NOT NULL", &[&table])
            .and_then(|row| row.try_get(0))
            .map_err(fail)
    };
    if !has(&mut client, "schema_migrations")? {
        // A database no tollgate used yet: the first command creates the tables.
        return Ok(Some(out));
    }
    out.schema_version = client
        .query_one(
            "SELECT coalesce(max(version), 0) FROM schema_migrations",
            &[],
        )
        .and_then(|row| row.try_get(0))
        .map_err(fail)?;
    if out.schema_version > POSTGRES_SCHEMA_VERSION {
        return Err(TableCheckError {
            database: name.clone(),
            detail: format!(
                "schema version {} is newer than this tollgate understands ({POSTGRES_SCHEMA_VERSION})",
                out.schema_version
            ),
        });
    }
    let queue = out.queue.clone();
    if out.schema_version == POSTGRES_SCHEMA_VERSION {
        let has_meta: bool = client
            .query_one(
                "SELECT count(*) = 1 FROM queue_meta WHERE queue = $1",
                &[&queue],
            )
            .and_then(|row| row.try_get(0))
            .map_err(fail)?;
        if has_meta {
            out.queue_checked = true;
            match store.load() {
                Ok(state) => out.queue_rows = state.entries.len(),
                Err(crate::queue::StoreError::File(crate::fsutil::FileError::Corrupt {
                    detail,
                    ..
                })) => out.queue_problem = Some(detail),
                Err(e) => out.queue_problem = Some(e.to_string()),
            }
        }
    }
    // The same rules as [`TABLE_CHECKS`], on this queue's rows.
    let checks: [(&str, &str); 1] = [(
        "serve_dedupe",
        "SELECT 'serve_dedupe key ' || quote_literal(key) || ': expires at '
                 || expires_at_millis || ' ms, not after it was marked at '
                 || marked_at_millis || ' ms'
             FROM serve_dedupe
             WHERE queue = $1 AND (expires_at_millis <= marked_at_millis OR marked_at_millis < 0)
             ORDER BY key LIMIT $2",
    )];
    for (table, sql) in checks {
        if !has(&mut client, table)? {
            continue;
        }
        out.tables_checked.push(table.to_string());
        for row in client
            .query(sql, &[&queue, &MAX_TABLE_FINDINGS])
            .map_err(fail)?
        {
            out.table_problems.push(row.try_get(0).map_err(fail)?);
        }
    }
    // PostgreSQL 15 cannot test text for JSON without failing the query: the bodies are read.
    let bodies: [(&str, &str, &str); 2] = [
        (
            "serve_refused",
            "id",
            "SELECT id::text, body FROM serve_refused WHERE queue = $1 ORDER BY id LIMIT $2",
        ),
        (
            "serve_handed_off",
            "delivery",
            "SELECT quote_literal(delivery), body FROM serve_handed_off WHERE queue = $1
             ORDER BY home, delivery LIMIT $2",
        ),
    ];
    for (table, key, sql) in bodies {
        if !has(&mut client, table)? {
            continue;
        }
        out.tables_checked.push(table.to_string());
        let mut found = 0;
        for row in client
            .query(sql, &[&queue, &MAX_PG_BODIES_READ])
            .map_err(fail)?
        {
            let id: String = row.try_get(0).map_err(fail)?;
            let body: String = row.try_get(1).map_err(fail)?;
            if serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(&body).is_err()
                && found < MAX_TABLE_FINDINGS
            {
                found += 1;
                out.table_problems
                    .push(format!("{table} {key} {id}: its body is not a JSON object"));
            }
        }
    }
    Ok(Some(out))
}

fn print_postgres(pg: &PostgresReport) {
    println!(
        "{} (queue {:?}): schema version {} (this tollgate's: {})",
        pg.database, pg.queue, pg.schema_version, pg.newest_schema_version
    );
    if pg.queue_checked {
        match &pg.queue_problem {
            None => println!("queue structure: ok ({} row(s))", pg.queue_rows),
            Some(problem) => println!("queue structure: {problem}"),
        }
    } else {
        println!("queue structure: not read (no current schema or no rows for this queue yet)");
    }
    if pg.table_problems.is_empty() {
        println!("serve tables: ok ({} table(s))", pg.tables_checked.len());
    } else {
        println!("serve tables: {} problem(s):", pg.table_problems.len());
        for problem in &pg.table_problems {
            println!("  {problem}");
        }
    }
    println!(
        "{}",
        if pg.healthy() {
            "healthy"
        } else {
            "problems found"
        }
    );
}
