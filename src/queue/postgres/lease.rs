//! The fleet's leases in the PostgreSQL store (spec/fleet.md): one row per live executor, shared
//! by every queue of the database (a process identity is fleet-wide, not per queue).
//!
//! Each lease step is one transaction: it takes the fleet's lease lock
//! (`pg_advisory_xact_lock(LOCK_NAMESPACE, LEASE_LOCK)`), reads the database clock *after* the
//! lock (`clock_timestamp()`, not `now()`, which is the transaction's start and could be earlier
//! than a renewal committed while this one waited), applies the pure step of
//! `tollgate_core::fleet` to the table and writes back what it changed. No host's wall clock is
//! ever compared with another's: every expiry is the database clock plus a lease duration.

use super::{PostgresStore, LOCK_NAMESPACE};
use crate::fleet::FleetView;
use crate::protocol::fleet::{
    self, FleetError, FleetIdentity, HostId, Lease, LeaseTable, LeaseTiming, RenewOutcome,
    MAX_LEASES,
};
use crate::protocol::slots::ProcessIdentity;
use crate::queue::StoreError;
use postgres::GenericClient;
use std::time::Instant;

/// The second key of the fleet's lease lock (the migration lock is 0; a queue's lock is
/// `hashtext(queue)`, which may collide with it: that only serialises the two, never breaks one).
pub const LEASE_LOCK: i32 = 1;

/// Version 4: the fleet's leases, keyed by host and process identity.
pub(super) const SCHEMA_V4_LEASES: &str = "
CREATE TABLE leases (
    host TEXT NOT NULL,
    pid BIGINT NOT NULL,
    start_micros BIGINT NOT NULL,
    expires_at_db_millis BIGINT NOT NULL,
    PRIMARY KEY (host, pid, start_micros)
);
";

/// The lease table as one step saw it, with the database clock it was read at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseSnapshot {
    pub table: LeaseTable,
    pub now_db_millis: u64,
}

impl LeaseSnapshot {
    /// Whether `identity`'s lease (on a host other than `observer`) has not expired.
    pub fn remote_live(&self, observer: &HostId, identity: &ProcessIdentity) -> bool {
        self.table
            .remote_live(observer, identity, self.now_db_millis)
    }
}

/// A home's store on a fleet: this host and its lease numbers. With it, every queue section
/// reads the leases in its own transaction ([`crate::fleet`], "The section's view").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FleetContext {
    pub host: HostId,
    pub timing: LeaseTiming,
}

/// The lease table a queue section read, and the view it hands to the section (expired leases
/// already swept).
pub(super) struct FleetSection {
    original: LeaseTable,
    pub(super) view: FleetView,
}

impl PostgresStore {
    /// The same store on a fleet: each section takes the lease lock after the queue's and sees
    /// the leases ([`crate::fleet::FleetView`]).
    pub fn with_fleet(mut self, fleet: FleetContext) -> Self {
        self.fleet = Some(fleet);
        self
    }

    /// This store's host and lease numbers, if it is a home's store on a fleet.
    pub fn fleet(&self) -> Option<&FleetContext> {
        self.fleet.as_ref()
    }

    /// The same store on a connection of its own (opened on first use): the runner's lease
    /// renewer, which must not wait behind the runner's own sections, nor they behind it.
    pub fn on_own_connection(&self) -> PostgresStore {
        PostgresStore {
            url: self.url.clone(),
            queue: self.queue.clone(),
            lock_timeout: self.lock_timeout,
            durability: self.durability,
            lock: self.lock,
            // Leases only: no records to import or lend on this connection.
            home: None,
            client: std::sync::Mutex::new(None),
            fleet: self.fleet.clone(),
        }
    }

    /// In a queue section, right after the queue's lock: takes the lease lock (always after a
    /// queue's, never before, so the two cannot deadlock), reads the database clock after it and
    /// the lease table, and sweeps the expired leases (`fleet::sweep_expired`, F3). `None` when
    /// this store is not on a fleet.
    pub(super) fn fleet_begin(
        &self,
        tx: &mut impl GenericClient,
    ) -> Result<Option<FleetSection>, StoreError> {
        let Some(fleet) = &self.fleet else {
            return Ok(None);
        };
        let started = Instant::now();
        tx.execute(
            "SELECT pg_advisory_xact_lock($1, $2)",
            &[&LOCK_NAMESPACE, &LEASE_LOCK],
        )
        .map_err(|e| self.busy_or(started, e))?;
        let (now_db_millis, drained) = self.now_and_drained(tx, &fleet.host)?;
        let original = self.read_leases(tx)?;
        let mut leases = original.clone();
        fleet::sweep_expired(&mut leases, now_db_millis);
        Ok(Some(FleetSection {
            original,
            view: FleetView {
                host: fleet.host.clone(),
                timing: fleet.timing,
                leases,
                now_db_millis,
                may_start: !drained,
            },
        }))
    }

    /// Before a queue section commits: writes the leases it changed (the sweep, an acquisition,
    /// a renewal, a release), with a synchronous commit: a lost lease commit could let another
    /// host think a live process dead.
    pub(super) fn fleet_end(
        &self,
        tx: &mut impl GenericClient,
        section: Option<FleetSection>,
        after: Option<FleetView>,
    ) -> Result<(), StoreError> {
        let (Some(section), Some(after)) = (section, after) else {
            return Ok(());
        };
        if after.leases != section.original {
            tx.batch_execute("SET LOCAL synchronous_commit = on")
                .map_err(|e| self.error(e))?;
            write_leases(tx, &section.original, &after.leases).map_err(|e| self.error(e))?;
        }
        Ok(())
    }

    /// Runs `step` on the lease table in one transaction under the fleet's lease lock, with the
    /// database clock read after the lock; writes back only the rows `step` changed. An `Err`
    /// from `step` rolls everything back.
    pub fn lease_step<R>(
        &self,
        step: impl FnOnce(&mut LeaseTable, u64) -> Result<R, FleetError>,
    ) -> Result<Result<R, FleetError>, StoreError> {
        let mut guard = self.client()?;
        let Some(client) = guard.as_mut() else {
            unreachable!("client() connected");
        };
        let started = Instant::now();
        let mut tx = client.transaction().map_err(|e| self.error(e))?;
        self.set_lock_timeout(&mut tx)?;
        // A lost lease commit would let another host think a live process dead (F3).
        tx.batch_execute("SET LOCAL synchronous_commit = on")
            .map_err(|e| self.error(e))?;
        tx.execute(
            "SELECT pg_advisory_xact_lock($1, $2)",
            &[&LOCK_NAMESPACE, &LEASE_LOCK],
        )
        .map_err(|e| self.busy_or(started, e))?;
        let now_db_millis = db_now_millis(&mut tx).map_err(|e| self.error(e))?;
        let original = self.read_leases(&mut tx)?;
        let mut table = original.clone();
        let result = match step(&mut table, now_db_millis) {
            Ok(result) => result,
            Err(refused) => return Ok(Err(refused)),
        };
        if table != original {
            fail::fail_point!("lease::before_publish");
            write_leases(&mut tx, &original, &table).map_err(|e| self.error(e))?;
        }
        tx.commit().map_err(|e| self.error(e))?;
        Ok(Ok(result))
    }

    /// [`fleet::acquire`]: `me`'s lease until the database clock plus the lease duration.
    pub fn acquire_lease(
        &self,
        me: &FleetIdentity,
        timing: &LeaseTiming,
    ) -> Result<Result<Lease, FleetError>, StoreError> {
        self.lease_step(|table, now| fleet::acquire(table, me, now, timing))
    }

    /// [`fleet::renew`] of `me`'s own lease. `Err` means the renewal was not confirmed: the
    /// caller must fence as if it was lost.
    pub fn renew_lease(
        &self,
        me: &FleetIdentity,
        timing: &LeaseTiming,
    ) -> Result<RenewOutcome, StoreError> {
        fail::fail_point!("lease::renew", |_| Err(StoreError::Database {
            path: self.name(),
            detail: "failpoint lease::renew".to_string(),
        }));
        self.lease_step(|table, now| Ok(fleet::renew(table, me, me, now, timing)))
            .map(|r| r.unwrap_or(RenewOutcome::Lost))
    }

    /// [`fleet::release`]: `me`'s lease is gone (its work ended); whether there was one.
    pub fn release_lease(&self, me: &FleetIdentity) -> Result<bool, StoreError> {
        self.lease_step(|table, _| Ok(fleet::release(table, me)))
            .map(|r| r.unwrap_or(false))
    }

    /// [`fleet::steal`]: removes `holder`'s lease, refused until it has expired on the database
    /// clock.
    pub fn steal_lease(
        &self,
        holder: &FleetIdentity,
    ) -> Result<Result<Lease, FleetError>, StoreError> {
        self.lease_step(|table, now| fleet::steal(table, holder, now))
    }

    /// The lease table and the database clock, read under the lease lock (what
    /// [`fleet::LeaseLiveness`] takes).
    pub fn leases(&self) -> Result<LeaseSnapshot, StoreError> {
        self.lease_step(|table, now| {
            Ok(LeaseSnapshot {
                table: table.clone(),
                now_db_millis: now,
            })
        })
        .map(|r| r.unwrap_or_else(|_| unreachable!("reading refuses nothing")))
    }

    fn read_leases(&self, tx: &mut impl GenericClient) -> Result<LeaseTable, StoreError> {
        // One more than the limit: a table over it is refused rather than read in part.
        let rows = tx
            .query(
                "SELECT host, pid, start_micros, expires_at_db_millis FROM leases
                 ORDER BY host, pid, start_micros LIMIT $1",
                &[&(MAX_LEASES as i64 + 1)],
            )
            .map_err(|e| self.error(e))?;
        if rows.len() > MAX_LEASES {
            return Err(self.corrupt(format!(
                "the leases table holds more than {MAX_LEASES} rows"
            )));
        }
        let mut table = LeaseTable::default();
        for row in rows {
            let host: String = row.try_get(0).map_err(|e| self.error(e))?;
            let pid: i64 = row.try_get(1).map_err(|e| self.error(e))?;
            let start: i64 = row.try_get(2).map_err(|e| self.error(e))?;
            let expires: i64 = row.try_get(3).map_err(|e| self.error(e))?;
            let host = HostId::new(host).map_err(|e| self.corrupt(format!("leases: {e}")))?;
            let pid = u32::try_from(pid)
                .map_err(|_| self.corrupt(format!("leases: pid {pid} is out of range")))?;
            table.leases.push(Lease {
                holder: FleetIdentity {
                    host,
                    process: ProcessIdentity {
                        pid,
                        start_time_micros: start as u64,
                    },
                },
                expires_at_db_millis: expires.max(0) as u64,
            });
        }
        Ok(table)
    }

    fn corrupt(&self, detail: String) -> StoreError {
        StoreError::Database {
            path: self.name(),
            detail,
        }
    }
}

/// The database clock, in milliseconds since the epoch, at this statement (not the
/// transaction's start).
fn db_now_millis(tx: &mut impl GenericClient) -> Result<u64, postgres::Error> {
    let millis: i64 = tx
        .query_one(
            "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint",
            &[],
        )?
        .try_get(0)?;
    Ok(millis.max(0) as u64)
}

fn write_leases(
    tx: &mut impl GenericClient,
    original: &LeaseTable,
    table: &LeaseTable,
) -> Result<(), postgres::Error> {
    let key = |l: &Lease| {
        (
            l.holder.host.as_str().to_string(),
            i64::from(l.holder.process.pid),
            l.holder.process.start_time_micros as i64,
        )
    };
    for gone in original
        .leases
        .iter()
        .filter(|l| table.lease_of(&l.holder).is_none())
    {
        let (host, pid, start) = key(gone);
        tx.execute(
            "DELETE FROM leases WHERE host = $1 AND pid = $2 AND start_micros = $3",
            &[&host, &pid, &start],
        )?;
    }
    for lease in table
        .leases
        .iter()
        .filter(|l| original.lease_of(&l.holder) != Some(*l))
    {
        let (host, pid, start) = key(lease);
        tx.execute(
            "INSERT INTO leases (host, pid, start_micros, expires_at_db_millis)
             VALUES ($1, $2, $3, $4)
             ON CONFLICT (host, pid, start_micros)
             DO UPDATE SET expires_at_db_millis = EXCLUDED.expires_at_db_millis",
            &[&host, &pid, &start, &(lease.expires_at_db_millis as i64)],
        )?;
    }
    Ok(())
}
