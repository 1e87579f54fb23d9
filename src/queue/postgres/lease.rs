//! The fleet's leases in the PostgreSQL store (spec/fleet.md): one row per live executor, shared
//! by every queue of the database (a process identity is fleet-wide, not per queue).
//!
//! Each lease step is one transaction: it takes the fleet's lease lock
//! (`pg_advisory_xact_lock(LOCK_NAMESPACE, LEASE_LOCK)`), reads the database clock *after* the
//! lock (`clock_timestamp()`, not `now()`, which is the transaction's start and could be earlier
//! than a renewal committed while this one waited), applies the pure step of
//! `tollgate_core::fleet` to the table and writes back what it changed. No host's wall clock is
//! ever compared with another's: every expiry is the database clock plus a lease duration.

use super::{batch, PostgresStore};
use crate::protocol::fleet::FleetView;
use crate::protocol::fleet::{
    self, FleetError, FleetIdentity, HostId, Lease, LeaseTable, LeaseTiming, RenewOutcome,
};
use crate::protocol::slots::ProcessIdentity;
use crate::queue::StoreError;
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
    /// the leases ([`FleetView`]).
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
            client: std::sync::Arc::new(std::sync::Mutex::new(None)),
            fleet: self.fleet.clone(),
            rows_loaded: Default::default(),
            prepared: Default::default(),
        }
    }

    /// In a queue section, from its reads (taken after the queue's lock and the lease lock,
    /// [`super::batch`]): the database clock read after the locks, whether this host is drained,
    /// and the lease table with the expired leases swept (`fleet::sweep_expired`, F3). `None`
    /// when this store is not on a fleet.
    pub(super) fn fleet_begin(
        &self,
        document: &batch::Document,
    ) -> Result<Option<FleetSection>, StoreError> {
        let Some(fleet) = &self.fleet else {
            return Ok(None);
        };
        let (original, now_db_millis) = document.lease_table(self)?;
        let drained = document.drained.unwrap_or(false);
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

    /// Before a queue section commits: appends the writes of the leases it changed (the sweep,
    /// an acquisition, a renewal, a release) to `sql`, and says whether there were any: the
    /// section is then flushed whatever its class, since a lost lease commit could let another
    /// host think a live process dead.
    pub(super) fn fleet_end(
        &self,
        sql: &mut String,
        section: Option<FleetSection>,
        after: Option<FleetView>,
    ) -> bool {
        let (Some(section), Some(after)) = (section, after) else {
            return false;
        };
        if after.leases == section.original {
            return false;
        }
        batch::push_leases(sql, &section.original, &after.leases);
        true
    }

    /// Runs `step` on the lease table in one transaction under the fleet's lease lock, with the
    /// database clock read after the lock; writes back only the rows `step` changed. An `Err`
    /// from `step` rolls everything back. Two round trips: `BEGIN`, the lock and the reads as
    /// one message, the writes and the `COMMIT` as another ([`super::batch`]).
    pub fn lease_step<R>(
        &self,
        step: impl FnOnce(&mut LeaseTable, u64) -> Result<R, FleetError>,
    ) -> Result<Result<R, FleetError>, StoreError> {
        let mut guard = self.client()?;
        let Some(client) = guard.as_mut() else {
            unreachable!("client() connected");
        };
        let started = Instant::now();
        // A lost lease commit would let another host think a live process dead (F3): committed
        // under the lock without waiting for the disk, and flushed after it, before the step's
        // result is used ([`batch::FLUSH_SQL`]).
        let mut sql = batch::begin_sql(
            self.lock_timeout_millis(),
            false,
            &[batch::advisory_lock(&LEASE_LOCK.to_string())],
        );
        sql.push_str(&batch::lease_read_sql());
        // Dropped before its `COMMIT` ran (a refusal, an error, a panic): rolled back.
        let mut open = batch::Open::new(client);
        let messages = open
            .client()
            .simple_query(&sql)
            .map_err(|e| self.busy_or(started, e))?;
        let document = batch::parse_document(self, &batch::last_value(self, &messages)?)?;
        let (original, now_db_millis) = document.lease_table(self)?;
        let mut table = original.clone();
        let result = match step(&mut table, now_db_millis) {
            Ok(result) => result,
            Err(refused) => return Ok(Err(refused)),
        };
        let mut sql = String::new();
        let changed = table != original;
        if changed {
            fail::fail_point!("lease::before_publish");
            batch::push_leases(&mut sql, &original, &table);
        }
        sql.push_str("COMMIT");
        let sql = batch::checked(self, sql)?;
        open.commit(&sql).map_err(|e| self.error(e))?;
        if changed {
            client
                .batch_execute(batch::FLUSH_SQL)
                .map_err(|e| self.error(e))?;
        }
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
}
