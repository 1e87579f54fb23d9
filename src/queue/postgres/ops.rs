//! Operations on a fleet in the PostgreSQL store (spec/fleet.md, "Operations"): drained hosts
//! and the turns' output stored for other hosts (schema version 6).
//!
//! **Drained hosts** (`drained_hosts`, shared by every queue of the database like the leases: a
//! host is fleet-wide). A drain or undrain is one transaction under the fleet's lease lock, the
//! lock every queue section takes after its queue's, so a section either sees the row or ran
//! before it was written. Each section reads whether its own host is drained in the same
//! statement that reads the database clock ([`PostgresStore::fleet_begin`]): one round trip, not
//! two.
//!
//! **Turn output** (`turn_output`): the runner of a PostgreSQL home copies what its turn's
//! command writes into its local log files to this table as well, in chunks of at most
//! [`TURN_OUTPUT_CHUNK_BYTES`], keyed by their byte offset in the stream, on a connection of its
//! own and outside the queue's sections (`src/runner/output_pg.rs`). At most
//! [`TURN_OUTPUT_MAX_CHUNKS`] chunks are kept per stream: older ones are deleted in the same
//! transaction, so the table keeps each stream's tail, and a reader sees the gap (the first kept
//! offset is above where it wanted to start) and says the output was truncated. `tollgate logs`
//! on another host reads it.

use super::{PostgresStore, LOCK_NAMESPACE};
use crate::protocol::fleet::HostId;
use crate::queue::StoreError;
use std::time::Instant;

/// Version 6: drained hosts, and the turns' output for the other hosts.
pub(super) const SCHEMA_V6_OPS: &str = "
CREATE TABLE IF NOT EXISTS drained_hosts (
    host TEXT PRIMARY KEY,
    drained_at_db_millis BIGINT NOT NULL
);
CREATE TABLE IF NOT EXISTS turn_output (
    queue TEXT NOT NULL,
    task TEXT NOT NULL,
    turn BIGINT NOT NULL,
    stream TEXT NOT NULL CHECK (stream IN ('stdout', 'stderr')),
    offset_bytes BIGINT NOT NULL CHECK (offset_bytes >= 0),
    data BYTEA NOT NULL,
    PRIMARY KEY (queue, task, turn, stream, offset_bytes)
);
";

/// The largest chunk of a turn's output one row holds.
pub const TURN_OUTPUT_CHUNK_BYTES: usize = 64 * 1024;
/// The most chunks kept per stream of a turn (so at most 1 MiB of each stream's tail).
pub const TURN_OUTPUT_MAX_CHUNKS: usize = 16;
/// The most bytes of one stream of a turn the table keeps.
pub const TURN_OUTPUT_MAX_BYTES: u64 = (TURN_OUTPUT_CHUNK_BYTES * TURN_OUTPUT_MAX_CHUNKS) as u64;
/// The most drained hosts listed (a drain is a deliberate act per host; more is refused).
pub const MAX_DRAINED_HOSTS: usize = 4096;

/// One of a turn's two streams.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputStream {
    Stdout,
    Stderr,
}

impl OutputStream {
    pub fn as_str(self) -> &'static str {
        match self {
            OutputStream::Stdout => "stdout",
            OutputStream::Stderr => "stderr",
        }
    }
}

/// What [`PostgresStore::read_output`] found of a stream from an offset on.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StoredOutput {
    /// The bytes from `from_offset + dropped_bytes` on, as stored.
    pub bytes: Vec<u8>,
    /// Bytes after the requested offset that the table no longer keeps (its bound).
    pub dropped_bytes: u64,
    /// The offset after the last byte returned: where the next read starts.
    pub next_offset: u64,
}

/// A drained host as `tollgate hosts` lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DrainedHost {
    pub host: String,
    pub drained_at_db_millis: u64,
}

/// What a drain or undrain did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DrainChange {
    /// Whether the host's state changed (false: it was already drained, or not drained).
    pub changed: bool,
    /// How many leases the host holds now (its live or not yet swept executors).
    pub leases: u64,
    /// The database clock when it was written.
    pub now_db_millis: u64,
}

fn int(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

impl PostgresStore {
    /// Marks `host` drained (`drain = true`) or not, in one transaction under the lease lock.
    pub fn set_drained(&self, host: &HostId, drain: bool) -> Result<DrainChange, StoreError> {
        let mut guard = self.client()?;
        let Some(client) = guard.as_mut() else {
            unreachable!("client() connected");
        };
        let started = Instant::now();
        let mut tx = client.transaction().map_err(|e| self.error(e))?;
        self.set_lock_timeout(&mut tx)?;
        tx.batch_execute("SET LOCAL synchronous_commit = on")
            .map_err(|e| self.error(e))?;
        tx.execute(
            "SELECT pg_advisory_xact_lock($1, $2)",
            &[&LOCK_NAMESPACE, &super::LEASE_LOCK],
        )
        .map_err(|e| self.busy_or(started, e))?;
        let now: i64 = tx
            .query_one(
                "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint",
                &[],
            )
            .and_then(|r| r.try_get(0))
            .map_err(|e| self.error(e))?;
        let changed = if drain {
            let count: i64 = tx
                .query_one("SELECT count(*) FROM drained_hosts", &[])
                .and_then(|r| r.try_get(0))
                .map_err(|e| self.error(e))?;
            if count as u64 >= MAX_DRAINED_HOSTS as u64 {
                return Err(StoreError::Database {
                    path: self.name(),
                    detail: format!(
                        "{MAX_DRAINED_HOSTS} hosts are drained already: undrain one first"
                    ),
                });
            }
            tx.execute(
                "INSERT INTO drained_hosts (host, drained_at_db_millis) VALUES ($1, $2)
                 ON CONFLICT (host) DO NOTHING",
                &[&host.as_str(), &now],
            )
            .map_err(|e| self.error(e))?
        } else {
            tx.execute(
                "DELETE FROM drained_hosts WHERE host = $1",
                &[&host.as_str()],
            )
            .map_err(|e| self.error(e))?
        };
        let leases: i64 = tx
            .query_one(
                "SELECT count(*) FROM leases WHERE host = $1",
                &[&host.as_str()],
            )
            .and_then(|r| r.try_get(0))
            .map_err(|e| self.error(e))?;
        tx.commit().map_err(|e| self.error(e))?;
        Ok(DrainChange {
            changed: changed > 0,
            leases: leases.max(0) as u64,
            now_db_millis: now.max(0) as u64,
        })
    }

    /// The drained hosts, by name.
    pub fn drained_hosts(&self) -> Result<Vec<DrainedHost>, StoreError> {
        let mut guard = self.client()?;
        let Some(client) = guard.as_mut() else {
            unreachable!("client() connected");
        };
        let rows = client
            .query(
                "SELECT host, drained_at_db_millis FROM drained_hosts ORDER BY host LIMIT $1",
                &[&(MAX_DRAINED_HOSTS as i64)],
            )
            .map_err(|e| self.error(e))?;
        rows.iter()
            .map(|row| {
                let host: String = row.try_get(0).map_err(|e| self.error(e))?;
                let at: i64 = row.try_get(1).map_err(|e| self.error(e))?;
                Ok(DrainedHost {
                    host,
                    drained_at_db_millis: at.max(0) as u64,
                })
            })
            .collect()
    }

    /// Appends `bytes`, the stream's output from `offset` on, in chunks; re-sending the same
    /// offset (a commit whose acknowledgement was lost) replaces the chunk there. Keeps the
    /// newest [`TURN_OUTPUT_MAX_CHUNKS`] chunks of the stream. One transaction.
    pub fn append_output(
        &self,
        task: &str,
        turn: u32,
        stream: OutputStream,
        offset: u64,
        bytes: &[u8],
    ) -> Result<(), StoreError> {
        if bytes.is_empty() {
            return Ok(());
        }
        let mut guard = self.client()?;
        let Some(client) = guard.as_mut() else {
            unreachable!("client() connected");
        };
        let mut tx = client.transaction().map_err(|e| self.error(e))?;
        // Output is a convenience copy: a lost commit costs a re-send, never a decision.
        tx.batch_execute("SET LOCAL synchronous_commit = off")
            .map_err(|e| self.error(e))?;
        let (queue, turn, name) = (&self.queue, i64::from(turn), stream.as_str());
        // Only the tail the table keeps is worth sending.
        let skip = bytes.len().saturating_sub(TURN_OUTPUT_MAX_BYTES as usize);
        let mut at = offset.saturating_add(skip as u64);
        for chunk in bytes[skip..].chunks(TURN_OUTPUT_CHUNK_BYTES) {
            tx.execute(
                "INSERT INTO turn_output (queue, task, turn, stream, offset_bytes, data)
                 VALUES ($1, $2, $3, $4, $5, $6)
                 ON CONFLICT (queue, task, turn, stream, offset_bytes)
                 DO UPDATE SET data = EXCLUDED.data",
                &[queue, &task, &turn, &name, &int(at), &chunk],
            )
            .map_err(|e| self.error(e))?;
            at = at.saturating_add(chunk.len() as u64);
        }
        tx.execute(
            "DELETE FROM turn_output WHERE queue = $1 AND task = $2 AND turn = $3 AND stream = $4
               AND offset_bytes < (SELECT min(offset_bytes) FROM (
                   SELECT offset_bytes FROM turn_output
                   WHERE queue = $1 AND task = $2 AND turn = $3 AND stream = $4
                   ORDER BY offset_bytes DESC LIMIT $5) AS kept)",
            &[queue, &task, &turn, &name, &(TURN_OUTPUT_MAX_CHUNKS as i64)],
        )
        .map_err(|e| self.error(e))?;
        tx.commit().map_err(|e| self.error(e))
    }

    /// The stored output of a stream from `from_offset` on (at most the table's bound).
    pub fn read_output(
        &self,
        task: &str,
        turn: u32,
        stream: OutputStream,
        from_offset: u64,
    ) -> Result<StoredOutput, StoreError> {
        let mut guard = self.client()?;
        let Some(client) = guard.as_mut() else {
            unreachable!("client() connected");
        };
        let rows = client
            .query(
                "SELECT offset_bytes, data FROM turn_output
                 WHERE queue = $1 AND task = $2 AND turn = $3 AND stream = $4
                   AND offset_bytes + length(data) > $5
                 ORDER BY offset_bytes LIMIT $6",
                &[
                    &self.queue,
                    &task,
                    &i64::from(turn),
                    &stream.as_str(),
                    &int(from_offset),
                    // One more than kept: a concurrent append may have added one.
                    &(TURN_OUTPUT_MAX_CHUNKS as i64 + 1),
                ],
            )
            .map_err(|e| self.error(e))?;
        let mut out = StoredOutput {
            next_offset: from_offset,
            ..StoredOutput::default()
        };
        for row in rows {
            let at: i64 = row.try_get(0).map_err(|e| self.error(e))?;
            let data: Vec<u8> = row.try_get(1).map_err(|e| self.error(e))?;
            let at = at.max(0) as u64;
            if at > out.next_offset {
                // A gap: the bound dropped these (or a chunk is not there yet: stop before it).
                if out.bytes.is_empty() {
                    out.dropped_bytes = at - out.next_offset;
                    out.next_offset = at;
                } else {
                    break;
                }
            }
            let skip = usize::try_from(out.next_offset - at).unwrap_or(usize::MAX);
            if let Some(rest) = data.get(skip..) {
                out.bytes.extend_from_slice(rest);
                out.next_offset += rest.len() as u64;
            }
        }
        Ok(out)
    }
}
