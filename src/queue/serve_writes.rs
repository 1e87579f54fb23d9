//! What a section reads and writes of serve's tables, in the section's transaction: the dedupe
//! marks a step asks for ([`Need::marks`]), and the marks, kept payloads and the tables' upkeep a
//! step returns ([`Writes`]). Only serve's group commit (`AcceptBatch`) asks for or writes them.

use crate::fsutil::FileError;
use crate::home::Home;
use crate::protocol::admission::EventIdentity;
use crate::protocol::section::{Records, Writes};
use crate::queue::records::{self, Access, RecordTx};
use std::collections::BTreeSet;

#[cfg(doc)]
use crate::protocol::section::Need;

/// Reads the stored marks of `identities` into `records` (an identity with no row: `None`).
#[cfg(feature = "serve")]
pub fn read_marks(
    home: &Home,
    tx: &mut RecordTx<'_>,
    identities: &BTreeSet<EventIdentity>,
    records: &mut Records,
) -> Result<(), FileError> {
    let keys: Vec<&str> = identities.iter().map(|m| m.0.as_str()).collect();
    let name = records::database_name(home);
    let stored = records::with_db_in(home, tx, Access::Read, None, |db| {
        super::serve_tables::marks_of(db, &keys).map_err(|e| records::db_error(&name, e))
    })?;
    let stored: std::collections::BTreeMap<String, u64> = stored.into_iter().collect();
    for identity in identities {
        records.put_mark(identity.clone(), stored.get(&identity.0).copied());
    }
    Ok(())
}

/// Writes the marks (a plain insert: a live row refuses it) and the kept payloads of `writes`.
#[cfg(feature = "serve")]
pub fn apply(home: &Home, tx: &mut RecordTx<'_>, writes: &Writes) -> Result<(), FileError> {
    if writes.marks.is_empty() && writes.payloads.is_empty() {
        return Ok(());
    }
    let name = records::database_name(home);
    records::with_db_in(home, tx, Access::Write, None, |db| {
        let written = (|| {
            for mark in &writes.marks {
                super::serve_tables::insert_mark(
                    db,
                    &mark.identity.0,
                    mark.marked_at_millis,
                    mark.expires_at_millis,
                )?;
            }
            for payload in &writes.payloads {
                super::serve_tables::put_payload(
                    db,
                    &payload.delivery,
                    &payload.key.task,
                    payload.key.turn,
                    &payload.body,
                )?;
            }
            Ok(())
        })();
        written.map_err(|e| records::db_error(&name, e))
    })
}

/// The tables' upkeep `writes` asks for, after every other write of the section: the mark table
/// trimmed to its bound (an error fails the section: the bound is kept by every commit), then at
/// most `prune_payloads` kept payloads of ended turns dropped (best effort: logged).
#[cfg(feature = "serve")]
pub fn upkeep(home: &Home, tx: &mut RecordTx<'_>, writes: &Writes) -> Result<(), FileError> {
    let name = records::database_name(home);
    if writes.trim_marks {
        records::with_db_in(home, tx, Access::Write, None, |db| {
            super::serve_tables::trim_marks(db)
                .map(|_| ())
                .map_err(|e| records::db_error(&name, e))
        })?;
    }
    if let Some(most) = writes.prune_payloads {
        let pruned = records::with_db_in(home, tx, Access::Write, None, |db| {
            super::serve_tables::prune_payloads(db, most).map_err(|e| records::db_error(&name, e))
        });
        if let Err(e) = pruned {
            tracing::warn!("cannot prune kept payloads: {e}");
        }
    }
    // A crash here (the batch is written, not committed, nobody was answered) is what
    // `tests/failpoints_serve_group_commit.rs` injects; only serve's batch trims the marks.
    if writes.trim_marks {
        fail::fail_point!("serve::before_group_commit", |_| std::process::abort());
    }
    Ok(())
}

/// Without serve, no section asks for marks or writes serve's tables: one that did is refused.
#[cfg(not(feature = "serve"))]
pub fn read_marks(
    home: &Home,
    _tx: &mut RecordTx<'_>,
    _identities: &BTreeSet<EventIdentity>,
    _records: &mut Records,
) -> Result<(), FileError> {
    Err(without_serve(home))
}

#[cfg(not(feature = "serve"))]
pub fn apply(home: &Home, _tx: &mut RecordTx<'_>, writes: &Writes) -> Result<(), FileError> {
    if writes.marks.is_empty() && writes.payloads.is_empty() {
        return Ok(());
    }
    Err(without_serve(home))
}

#[cfg(not(feature = "serve"))]
pub fn upkeep(home: &Home, _tx: &mut RecordTx<'_>, writes: &Writes) -> Result<(), FileError> {
    if !writes.trim_marks && writes.prune_payloads.is_none() {
        return Ok(());
    }
    Err(without_serve(home))
}

#[cfg(not(feature = "serve"))]
fn without_serve(home: &Home) -> FileError {
    FileError::Refused {
        path: records::database_name(home),
        detail: "serve's tables are not built into this tollgate".into(),
    }
}
