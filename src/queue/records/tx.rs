//! A section's transaction as the record layer gets it: the store lends the connection of its
//! open transaction ([`Section`] for SQLite, [`PgSection`] for PostgreSQL) and hands the
//! section's closure a [`RecordTx`] on it (`Store::transact_section`). A record read or write
//! given that handle runs on the section's connection: it commits with the step, in the step's
//! durability class, and reads see the step's own writes. Given [`RecordTx::outside`] (no
//! section), it runs in a short transaction of its own (`super::sqlite`, `super::postgres`).
//!
//! **Why a handle and not per-thread state**: what a record access runs in is then an argument
//! a reader sees in the signature ([`crate::tasks::read_records`], [`crate::tasks::apply_writes`]),
//! and a section cannot be reached by code it did not hand its transaction to.

use super::access::{signal_changed, Access};
use super::db::Db;
use super::home::{choice, RecordHome};
use super::postgres::PgConn;
use crate::fsutil::FileError;
use crate::home::Home;
use rusqlite::Connection;
use std::path::PathBuf;

/// What a section's record writes ask of its commit: the turn folders to signal after it, and
/// whether it must be synced.
#[derive(Default)]
struct Marks {
    changed_dirs: Vec<PathBuf>,
    /// A write in the section recorded a turn's outcome: its commit is synced whatever the
    /// section's own class (spec/store.md, "Records").
    outcome_recorded: bool,
}

impl Marks {
    fn note(&mut self, access: Access, changed: Option<PathBuf>) {
        self.outcome_recorded |= access == Access::Outcome;
        if let Some(dir) = changed {
            if !self.changed_dirs.contains(&dir) {
                self.changed_dirs.push(dir);
            }
        }
    }
}

/// A SQLite section's connection while its closure runs: the database it belongs to and the
/// connection (inside `BEGIN IMMEDIATE`).
pub(crate) struct Lent {
    db: PathBuf,
    conn: Connection,
    marks: Marks,
}

/// A PostgreSQL section's client while its closure runs, like [`Lent`] for SQLite.
pub(crate) struct PgLent {
    /// `(connect URL, queue)`: the record accesses this section serves.
    key: (String, String),
    conn: PgConn,
    marks: Marks,
}

/// The records of the section in progress: its open transaction, lent by the store for the
/// closure's duration. [`RecordTx::outside`] is no section (the memory store, or a caller
/// outside any section): each access then runs on its own.
pub struct RecordTx<'a> {
    lent: Option<LentRef<'a>>,
}

enum LentRef<'a> {
    Sqlite(&'a mut Lent),
    Postgres(&'a mut PgLent),
}

impl RecordTx<'static> {
    /// No section: every record access commits on its own.
    pub fn outside() -> Self {
        RecordTx { lent: None }
    }
}

impl RecordTx<'_> {
    /// The same transaction, borrowed for a shorter while (a nested section of serve's group
    /// commit runs in its batch's).
    pub fn reborrow(&mut self) -> RecordTx<'_> {
        RecordTx {
            lent: match &mut self.lent {
                None => None,
                Some(LentRef::Sqlite(lent)) => Some(LentRef::Sqlite(lent)),
                Some(LentRef::Postgres(lent)) => Some(LentRef::Postgres(lent)),
            },
        }
    }
}

/// A section lending its connection to the record layer; dropping it takes the connection back
/// (rolling back a transaction still open: an `Err` or a panic of the closure).
pub(crate) struct Section<'a> {
    slot: &'a mut Option<Connection>,
    lent: Option<Lent>,
}

impl<'a> Section<'a> {
    /// Takes the connection in `slot` for the section's duration.
    pub(crate) fn lend(slot: &'a mut Option<Connection>, db: PathBuf) -> Option<Self> {
        let conn = slot.take()?;
        let lent = Lent {
            db,
            conn,
            marks: Marks::default(),
        };
        Some(Section {
            slot,
            lent: Some(lent),
        })
    }

    fn lent(&self) -> &Lent {
        match &self.lent {
            Some(lent) => lent,
            None => unreachable!("a Section's connection is lent until it drops"),
        }
    }

    /// Runs `f` on the lent connection.
    pub(crate) fn with<T>(&self, f: impl FnOnce(&Connection) -> T) -> T {
        f(&self.lent().conn)
    }

    /// The section's records, for its closure.
    pub(crate) fn records(&mut self) -> RecordTx<'_> {
        RecordTx {
            lent: self.lent.as_mut().map(LentRef::Sqlite),
        }
    }

    /// Whether a write in the section recorded a turn's outcome (the store then syncs the
    /// commit: an outcome is what `wait` and `status` tell, and what reconcile trusts instead of
    /// running a turn again).
    pub(crate) fn outcome_recorded(&self) -> bool {
        self.lent().marks.outcome_recorded
    }

    /// Takes the connection back after its `COMMIT` and signals the turn folders it changed.
    pub(crate) fn committed(mut self) {
        let dirs = self
            .lent
            .as_mut()
            .map(|lent| std::mem::take(&mut lent.marks.changed_dirs))
            .unwrap_or_default();
        drop(self);
        signal_changed(&dirs);
    }
}

impl Drop for Section<'_> {
    fn drop(&mut self) {
        if let Some(lent) = self.lent.take() {
            if !lent.conn.is_autocommit() {
                let _ = lent.conn.execute_batch("ROLLBACK");
            }
            *self.slot = Some(lent.conn);
        }
    }
}

/// A PostgreSQL section lending its client to the record layer ([`Section`] for SQLite).
pub(crate) struct PgSection<'a> {
    slot: &'a mut Option<postgres::Client>,
    lent: Option<PgLent>,
    committed: bool,
}

impl<'a> PgSection<'a> {
    pub(crate) fn lend(
        slot: &'a mut Option<postgres::Client>,
        key: (String, String),
    ) -> Option<Self> {
        let client = slot.take()?;
        let lent = PgLent {
            key,
            conn: PgConn::new(client, true),
            marks: Marks::default(),
        };
        Some(PgSection {
            slot,
            lent: Some(lent),
            committed: false,
        })
    }

    fn lent(&mut self) -> &mut PgLent {
        match &mut self.lent {
            Some(lent) => lent,
            None => unreachable!("a PgSection's client is lent until it drops"),
        }
    }

    pub(crate) fn with<T>(&mut self, f: impl FnOnce(&mut postgres::Client) -> T) -> T {
        f(self.lent().conn.client())
    }

    /// The section's records, for its closure.
    pub(crate) fn records(&mut self) -> RecordTx<'_> {
        RecordTx {
            lent: self.lent.as_mut().map(LentRef::Postgres),
        }
    }

    /// The record writes the closure made, kept for the commit's message ([`PgConn`]).
    pub(crate) fn take_pending(&mut self) -> String {
        self.lent().conn.take_pending()
    }

    pub(crate) fn outcome_recorded(&mut self) -> bool {
        self.lent().marks.outcome_recorded
    }

    /// Takes the client back after its `COMMIT` and signals the turn folders it changed.
    pub(crate) fn committed(mut self) {
        self.committed = true;
        let dirs = std::mem::take(&mut self.lent().marks.changed_dirs);
        drop(self);
        signal_changed(&dirs);
    }
}

impl Drop for PgSection<'_> {
    fn drop(&mut self) {
        if let Some(lent) = self.lent.take() {
            let mut client = lent.conn.into_client();
            if !self.committed {
                let _ = client.batch_execute("ROLLBACK");
            }
            *self.slot = Some(client);
        }
    }
}

/// [`with_db_in`] outside any section.
pub(crate) fn with_db<T>(
    home: &Home,
    access: Access,
    changed: Option<PathBuf>,
    f: impl FnOnce(&mut Db<'_>) -> Result<T, FileError>,
) -> Result<T, FileError> {
    with_db_in(home, &mut RecordTx::outside(), access, changed, f)
}

/// Runs `f` on a connection to `home`'s database: `tx`'s when it is a section of this home (its
/// reads see the section's writes, its writes commit with it, and `changed`, a turn folder, is
/// signalled after that commit), else a connection of its own inside a short transaction
/// (`BEGIN IMMEDIATE` for a write, committed with `synchronous = NORMAL`, `FULL` for an
/// [`Access::Outcome`]; `changed` signalled after it). `Err` from `f` rolls the short
/// transaction back.
pub(crate) fn with_db_in<T>(
    home: &Home,
    tx: &mut RecordTx<'_>,
    access: Access,
    changed: Option<PathBuf>,
    f: impl FnOnce(&mut Db<'_>) -> Result<T, FileError>,
) -> Result<T, FileError> {
    match choice(home) {
        (
            RecordHome::Postgres {
                url,
                queue,
                durability,
            },
            timeout,
        ) => {
            if let Some(LentRef::Postgres(lent)) = &mut tx.lent {
                if lent.key.0 == url.connect && lent.key.1 == queue {
                    lent.marks.note(access, changed);
                    return f(&mut Db::Postgres(&mut lent.conn, &queue));
                }
            }
            let target = (url, queue, durability, timeout);
            super::postgres::on_its_own(home, target, access, changed, |conn, queue| {
                f(&mut Db::Postgres(conn, queue))
            })
        }
        (RecordHome::Misconfigured { setting, detail }, _) => Err(FileError::Refused {
            path: PathBuf::from(setting),
            detail: format!("the home's store is refused ({detail})"),
        }),
        (RecordHome::Sqlite, timeout) => {
            if let Some(LentRef::Sqlite(lent)) = &mut tx.lent {
                if lent.db == home.db_path() {
                    lent.marks.note(access, changed);
                    return f(&mut Db::Sqlite(&lent.conn));
                }
            }
            super::sqlite::on_its_own(home, timeout, access, changed, |conn| {
                f(&mut Db::Sqlite(conn))
            })
        }
    }
}
