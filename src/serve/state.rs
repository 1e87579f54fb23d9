//! Where `serve` keeps its durable state: the dedupe marks, the refused deliveries and the
//! hand-off list. In a database home (`tollgate.db`, the default, or a PostgreSQL store) they
//! are tables of the home's database ([`crate::queue::serve_tables`]): a mark commits in the
//! same transaction as its turn, and in PostgreSQL every home of the queue shares the marks, so
//! dedupe is fleet-wide. Earlier versions kept them in files (`serve/dedupe.jsonl`,
//! `serve/refused.jsonl`, `serve/handed-off.json`), which are only imported.
//!
//! The first `serve` (or `tollgate deliveries`) on a home that still has those files
//! imports them in one transaction and then moves each aside (`*.imported`, never deleted); a
//! file that would not load is refused with its path and nothing is imported (spec/ingress.md,
//! "Durable state"). A PostgreSQL home's import is recorded by `(queue, home)`, so each home of
//! a shared queue imports its own files once.

use super::dedupe_log::{self, Mark};
use super::refused::{load_refused, RefusedDelivery};
use super::settings::ServePaths;
use crate::fsutil::{self, FileError};
use crate::home::Home;
use crate::queue::records::{self, Access};
use crate::queue::serve_tables;
use crate::tasks::DeliveryMeta;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A delivery recorded as handed off at shutdown, for the next instance.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandedOff {
    pub route: String,
    pub delivery: DeliveryMeta,
    pub task: String,
    pub turn: u32,
}

/// `serve`'s durable state for one home: tables of its database.
pub struct ServeState {
    home: Home,
    /// [`home_key`], computed once.
    home_key: String,
}

fn sql(home: &Home) -> impl Fn(records::DbError) -> FileError {
    let name = records::database_name(home);
    move |e| records::db_error(&name, e)
}

/// The home as the tables shared by several homes (PostgreSQL's hand-off list and imports) key
/// it: its canonical path, as `record_imports` does.
fn home_key(home: &Home) -> String {
    std::fs::canonicalize(home.root())
        .unwrap_or_else(|_| home.root().to_path_buf())
        .display()
        .to_string()
}

/// Whether something (a file, a FIFO, a dangling symlink) is at `path`.
fn present(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok()
}

/// The name under the home a file is recorded as imported under.
fn source_name(home: &Home, path: &Path) -> String {
    path.strip_prefix(home.root())
        .unwrap_or(path)
        .display()
        .to_string()
}

/// `path.imported`, or `path.imported.<millis>` when that exists.
fn aside_path(path: &Path) -> PathBuf {
    let mut aside = path.as_os_str().to_owned();
    aside.push(".imported");
    let aside = PathBuf::from(aside);
    if present(&aside) {
        let mut later = aside.into_os_string();
        later.push(format!(".{}", crate::clock::now_millis()));
        return PathBuf::from(later);
    }
    aside
}

/// Imports the old files of a home (see the module's doc). Every present file is read
/// first, with its loader's checks; any refusal returns before the database is written. Returns
/// how many files were imported.
pub fn import_old_files(
    home: &Home,
    paths: &ServePaths,
    ttl_millis: u64,
) -> Result<usize, FileError> {
    let files = [&paths.dedupe, &paths.refused, &paths.handed_off];
    if !files.iter().any(|p| present(p)) {
        return Ok(0);
    }
    let marks = if present(&paths.dedupe) {
        dedupe_log::read_marks(&paths.dedupe)?
    } else {
        Vec::new()
    };
    let refused = if present(&paths.refused) {
        load_refused(&paths.refused)?
    } else {
        Vec::new()
    };
    let handed: Vec<HandedOff> = if present(&paths.handed_off) {
        fsutil::load_json(&paths.handed_off)?.unwrap_or_default()
    } else {
        Vec::new()
    };
    let now = crate::clock::now_millis();
    let key = home_key(home);
    let imported = records::with_db(home, Access::Outcome, None, |conn| {
        let e = sql(home);
        let mut imported = 0;
        for path in files {
            if !present(path) {
                continue;
            }
            let source = source_name(home, path);
            if serve_tables::import_state(conn, &key, &source)
                .map_err(&e)?
                .is_some()
            {
                // Imported by an earlier start that died before moving it aside.
                continue;
            }
            if *path == paths.dedupe {
                for mark in &marks {
                    serve_tables::put_mark(conn, &mark.identity, mark.marked_at_millis, ttl_millis)
                        .map_err(&e)?;
                }
                serve_tables::prune_marks(conn, now).map_err(&e)?;
            } else if *path == paths.refused {
                for r in &refused {
                    serve_tables::add_refused(conn, &to_json(r)?).map_err(&e)?;
                }
            } else {
                let mut rows = serve_tables::handed_off(conn, &key)
                    .map_err(&e)?
                    .into_iter()
                    .filter_map(|body| serde_json::from_str::<HandedOff>(&body).ok())
                    .map(|h| (h.delivery.id.clone(), h))
                    .collect::<BTreeMap<_, _>>();
                for h in &handed {
                    rows.insert(h.delivery.id.clone(), h.clone());
                }
                let rows = rows
                    .into_iter()
                    .map(|(id, h)| Ok((id, to_json(&h)?)))
                    .collect::<Result<Vec<_>, FileError>>()?;
                serve_tables::replace_handed_off(conn, &key, &rows).map_err(&e)?;
            }
            serve_tables::record_import(conn, &key, &source, now).map_err(&e)?;
            imported += 1;
        }
        Ok(imported)
    })?;
    for path in files {
        if !present(path) {
            continue;
        }
        let aside = aside_path(path);
        std::fs::rename(path, &aside).map_err(|e| FileError::io(path, e))?;
        let source = source_name(home, path);
        records::with_db(home, Access::Write, None, |conn| {
            serve_tables::record_moved(conn, &key, &source).map_err(sql(home))
        })?;
    }
    if imported > 0 {
        tracing::info!(
            "imported {imported} serve file(s) of an earlier version into {}; the files were moved aside (*.imported)",
            home.db_path().display()
        );
    }
    Ok(imported)
}

fn to_json<T: serde::Serialize>(value: &T) -> Result<String, FileError> {
    serde_json::to_string(value).map_err(|e| FileError::Corrupt {
        path: PathBuf::from("<serve state>"),
        format: "JSON",
        detail: e.to_string(),
    })
}

fn from_json<T: serde::de::DeserializeOwned>(
    home: &Home,
    what: &str,
    body: &str,
) -> Result<T, FileError> {
    serde_json::from_str(body).map_err(|e| FileError::Corrupt {
        path: home.db_path(),
        format: "tollgate database",
        detail: format!("a row of {what}: {e}"),
    })
}

/// The refused deliveries `tollgate deliveries --refused` lists, oldest first: the table (after
/// importing an old list).
pub fn list_refused(
    home: &Home,
    paths: &ServePaths,
    ttl_millis: u64,
) -> Result<Vec<RefusedDelivery>, FileError> {
    import_old_files(home, paths, ttl_millis)?;
    let bodies = records::with_db(home, Access::Read, None, |conn| {
        serve_tables::refused(conn).map_err(sql(home))
    })?;
    bodies
        .iter()
        .map(|b| from_json(home, "serve_refused", b))
        .collect()
}

impl ServeState {
    /// Opens the state and returns the marks live at `now_millis` (for the gate), oldest first:
    /// those of the legacy key format (`adapter/installation/identity`) too, which the core's
    /// dedupe rule honours for a delivery's legacy identity. The old files are imported first.
    pub fn open(
        home: &Home,
        paths: &ServePaths,
        now_millis: u64,
        ttl_millis: u64,
    ) -> Result<(ServeState, Vec<Mark>), FileError> {
        import_old_files(home, paths, ttl_millis)?;
        let stored = records::with_db(home, Access::Write, None, |conn| {
            serve_tables::prune_marks(conn, now_millis).map_err(sql(home))?;
            serve_tables::live_marks(conn, now_millis).map_err(sql(home))
        })?;
        let state = ServeState {
            home: home.clone(),
            home_key: home_key(home),
        };
        let marks = stored
            .into_iter()
            .map(|m| Mark {
                identity: m.key,
                marked_at_millis: m.marked_at_millis,
            })
            .collect();
        Ok((state, marks))
    }

    /// Records a refusal durably (before the 503 is answered).
    pub fn record_refused(&self, refused: &RefusedDelivery) -> Result<(), FileError> {
        let body = to_json(refused)?;
        records::with_db(&self.home, Access::Outcome, None, |conn| {
            serve_tables::add_refused(conn, &body).map_err(sql(&self.home))
        })
    }

    /// The deliveries the previous instance handed off.
    pub fn handed_off(&self) -> Result<Vec<HandedOff>, FileError> {
        let bodies = records::with_db(&self.home, Access::Read, None, |conn| {
            serve_tables::handed_off(conn, &self.home_key).map_err(sql(&self.home))
        })?;
        bodies
            .iter()
            .map(|b| from_json(&self.home, "serve_handed_off", b))
            .collect()
    }

    /// Replaces the hand-off list durably.
    pub fn replace_handed_off(&self, handed: &[HandedOff]) -> Result<(), FileError> {
        let rows = handed
            .iter()
            .map(|h| Ok((h.delivery.id.clone(), to_json(h)?)))
            .collect::<Result<Vec<_>, FileError>>()?;
        records::with_db(&self.home, Access::Outcome, None, |conn| {
            serve_tables::replace_handed_off(conn, &self.home_key, &rows).map_err(sql(&self.home))
        })
    }
}
