//! Many hosts, one queue: hosts, leases and the runner's self-fencing rule (spec/fleet.md).
//!
//! A process on another host cannot be looked up in this host's `/proc`. It is observed through
//! its **lease** instead: a row in the shared database that the process renews itself, whose
//! expiry is computed by the database's clock (`now_db_millis` is always an input, never a host's
//! wall clock; two hosts' clocks are never compared). Another host may treat the process as dead
//! only once the database clock has passed the expiry ([`Lease::is_expired`]). A runner that
//! cannot renew kills its work and stops before its last renewal, measured from when it was *sent*
//! on the runner's own clock, can have expired ([`LeaseTiming::fence_at_local_millis`]), so by the
//! time another host may take its slot its work is dead (`F1`).
//!
//! Every function here is pure: the shell (one database transaction per step) and the fleet model
//! (`model/src/fleet.rs`) drive the same code.

use crate::slots::steps::{self, BoundHandoff, Fenced, Handoff};
use crate::slots::{Liveness, Observation, ProcessIdentity, QueueState, WorkRecord};
use serde::{Deserialize, Serialize};
use std::fmt;

/// The longest host name accepted, in bytes.
pub const MAX_HOST_BYTES: usize = 64;

/// The most leases the table holds: one per live executor, so this bounds the fleet's executors.
pub const MAX_LEASES: usize = 4_096;

/// One part per million: the unit of [`LeaseTiming::drift_ppm`].
pub const PPM: u64 = 1_000_000;

/// Why a lease operation refused; each variant leaves the table as it was.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FleetError {
    #[error("HOST_INVALID: {given:?} is not a host name ({reason})")]
    InvalidHost { given: String, reason: &'static str },
    #[error("LEASE_TIMING_INVALID: {reason}")]
    InvalidTiming { reason: String },
    #[error("LEASES_FULL: the lease table holds its limit of {limit} leases")]
    LeasesFull { limit: usize },
    #[error("LEASE_HELD: {holder} already holds a lease")]
    AlreadyHeld { holder: FleetIdentity },
    #[error("LEASE_UNKNOWN: {holder} holds no lease")]
    Unknown { holder: FleetIdentity },
    #[error("LEASE_NOT_EXPIRED: the lease of {holder} runs until {expires_at_db_millis} ms (database clock), now is {now_db_millis} ms")]
    NotExpired {
        holder: FleetIdentity,
        expires_at_db_millis: u64,
        now_db_millis: u64,
    },
}

impl FleetError {
    /// The stable, documented code of the error (what scripts match on).
    pub fn code(&self) -> &'static str {
        match self {
            FleetError::InvalidHost { .. } => "HOST_INVALID",
            FleetError::InvalidTiming { .. } => "LEASE_TIMING_INVALID",
            FleetError::LeasesFull { .. } => "LEASES_FULL",
            FleetError::AlreadyHeld { .. } => "LEASE_HELD",
            FleetError::Unknown { .. } => "LEASE_UNKNOWN",
            FleetError::NotExpired { .. } => "LEASE_NOT_EXPIRED",
        }
    }
}

/// A host's name in the fleet (the `host` setting): 1 to [`MAX_HOST_BYTES`] bytes of ASCII
/// letters, digits, `.`, `_` and `-`, so it can appear in logs, paths and SQL keys unquoted.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct HostId(String);

impl HostId {
    pub fn new(name: impl Into<String>) -> Result<Self, FleetError> {
        let name = name.into();
        let reason = if name.is_empty() {
            Some("empty")
        } else if name.len() > MAX_HOST_BYTES {
            Some("longer than 64 bytes")
        } else if !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        {
            Some("only ASCII letters, digits, '.', '_' and '-' are allowed")
        } else {
            None
        };
        match reason {
            Some(reason) => Err(FleetError::InvalidHost {
                given: name,
                reason,
            }),
            None => Ok(HostId(name)),
        }
    }

    /// The default host name: `<12 hex digits of the machine id>-<8 hex digits of the boot id>`
    /// (`/etc/machine-id`, `/proc/sys/kernel/random/boot_id`; the shell reads them). The boot id
    /// is part of it because start times count from boot: after a reboot a new process can have
    /// a previous boot's pid and start time, and a lease of the old boot must never name it. A
    /// rebooted machine is a new host, and every process of the old one is dead.
    pub fn derived(machine_id: &str, boot_id: &str) -> Result<Self, FleetError> {
        fn hex_prefix(text: &str, digits: usize, what: &'static str) -> Result<String, FleetError> {
            let hex: String = text.trim().chars().filter(|c| *c != '-').collect();
            if hex.len() < digits || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
                return Err(FleetError::InvalidHost {
                    given: text.trim().to_string(),
                    reason: what,
                });
            }
            Ok(hex[..digits].to_ascii_lowercase())
        }
        let machine = hex_prefix(
            machine_id,
            12,
            "a machine id is at least 12 hexadecimal digits",
        )?;
        let boot = hex_prefix(boot_id, 8, "a boot id is a hexadecimal UUID")?;
        HostId::new(format!("{machine}-{boot}"))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for HostId {
    type Error = FleetError;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        HostId::new(value)
    }
}

impl From<HostId> for String {
    fn from(value: HostId) -> Self {
        value.0
    }
}

impl fmt::Display for HostId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A process fleet-wide: its host and its identity there. Pids and boot-relative start times are
/// only unique per host, so a lease is always keyed by both.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct FleetIdentity {
    pub host: HostId,
    #[serde(flatten)]
    pub process: ProcessIdentity,
}

impl fmt::Display for FleetIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} on host {}", self.process, self.host)
    }
}

/// The numbers of the lease protocol (spec/fleet.md, "Timing"). Durations on the database clock
/// (`lease_duration_millis`) and on the runner's own monotonic clock (the rest) are never mixed
/// except through [`LeaseTiming::fence_at_local_millis`], which converts with the drift bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LeaseTiming {
    /// How long a renewal keeps a lease alive, on the database clock.
    pub lease_duration_millis: u64,
    /// How often a runner sends a renewal, on its own clock.
    pub renew_interval_millis: u64,
    /// Slack left between the fence deadline and the earliest expiry (scheduling, clock reads).
    pub margin_millis: u64,
    /// The longest a work's kill takes (TERM, grace, KILL, the bounded wait until none is left):
    /// the runner starts killing this long before the fence deadline.
    pub kill_budget_millis: u64,
    /// ρ, the bound on clock *rate* drift, in parts per million: over any interval, the runner's
    /// clock advances at least `(1 - ρ)` times as much as the database's. Nothing is assumed about
    /// clock offsets.
    pub drift_ppm: u64,
}

impl LeaseTiming {
    /// The defaults (spec/fleet.md): a 30 s lease renewed every 5 s, ρ = 1% (NTP keeps real
    /// clocks within 500 ppm), a 3 s kill budget (2 s TERM grace, KILL, the wait) and 2 s of slack:
    /// the kill starts 24.7 s after the last acknowledged renewal was sent, so four renewals in a
    /// row may be lost before a runner fences.
    pub const DEFAULT: LeaseTiming = LeaseTiming {
        lease_duration_millis: 30_000,
        renew_interval_millis: 5_000,
        margin_millis: 2_000,
        kill_budget_millis: 3_000,
        drift_ppm: 10_000,
    };

    /// Refuses numbers under which the fence could come too late or never leave time to renew.
    pub fn validate(&self) -> Result<(), FleetError> {
        let bad = |reason: String| Err(FleetError::InvalidTiming { reason });
        if self.drift_ppm >= PPM {
            return bad(format!(
                "drift_ppm {} must be below {PPM} (a clock that may stop bounds nothing)",
                self.drift_ppm
            ));
        }
        if self.lease_duration_millis == 0 || self.lease_duration_millis > u64::from(u32::MAX) {
            return bad(format!(
                "lease_duration_millis {} must be between 1 and {}",
                self.lease_duration_millis,
                u32::MAX
            ));
        }
        if self.renew_interval_millis == 0 {
            return bad("renew_interval_millis must be positive".to_string());
        }
        let window = self.fence_window_millis();
        let needed = self
            .margin_millis
            .saturating_add(self.kill_budget_millis)
            .saturating_add(self.renew_interval_millis);
        if window < needed {
            return bad(format!(
                "lease_duration_millis {} leaves {window} ms after the drift bound, less than \
                 margin + kill budget + one renew interval ({needed} ms)",
                self.lease_duration_millis
            ));
        }
        Ok(())
    }

    /// `lease_duration · (1 - ρ)`, rounded down: the least the runner's clock advances while the
    /// database clock advances a whole lease.
    pub fn fence_window_millis(&self) -> u64 {
        let kept = PPM.saturating_sub(self.drift_ppm);
        // u128: lease_duration_millis ≤ u32::MAX (validate), but this must not overflow anyway.
        (u128::from(self.lease_duration_millis) * u128::from(kept) / u128::from(PPM)) as u64
    }

    /// The instant, on the runner's own clock, by which its work must be dead if the renewal sent
    /// at `sent_at_local_millis` is the last one acknowledged: `sent + duration·(1-ρ) - margin`.
    /// Measured from the *send*: the database computed the expiry at a moment after the send, so
    /// the expiry is at least a whole lease (on the database clock) after it. An acknowledgement
    /// can arrive arbitrarily late; measuring from it could put the deadline after the expiry.
    pub fn fence_at_local_millis(&self, sent_at_local_millis: u64) -> u64 {
        sent_at_local_millis
            .saturating_add(self.fence_window_millis())
            .saturating_sub(self.margin_millis)
    }

    /// When the runner starts killing its work: the fence deadline less the kill budget.
    pub fn kill_at_local_millis(&self, sent_at_local_millis: u64) -> u64 {
        self.fence_at_local_millis(sent_at_local_millis)
            .saturating_sub(self.kill_budget_millis)
    }
}

impl Default for LeaseTiming {
    fn default() -> Self {
        LeaseTiming::DEFAULT
    }
}

/// One live executor's lease: who holds it and until when, on the database clock.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Lease {
    pub holder: FleetIdentity,
    pub expires_at_db_millis: u64,
}

impl Lease {
    /// Whether another host may treat the holder as dead: only once the database clock has passed
    /// the expiry (`F3`). At the expiry instant itself the holder still counts as live.
    pub fn is_expired(&self, now_db_millis: u64) -> bool {
        now_db_millis > self.expires_at_db_millis
    }
}

/// The lease table: at most one lease per holder, at most [`MAX_LEASES`] in all.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LeaseTable {
    #[serde(default)]
    pub leases: Vec<Lease>,
}

impl LeaseTable {
    pub fn lease_of(&self, holder: &FleetIdentity) -> Option<&Lease> {
        self.leases.iter().find(|l| &l.holder == holder)
    }

    /// Whether a lease of a process on a host other than `observer` names `identity` and has not
    /// expired: then `identity` may be alive over there.
    pub fn remote_live(
        &self,
        observer: &HostId,
        identity: &ProcessIdentity,
        now_db_millis: u64,
    ) -> bool {
        self.leases.iter().any(|l| {
            &l.holder.host != observer
                && &l.holder.process == identity
                && !l.is_expired(now_db_millis)
        })
    }
}

/// An executor takes its lease, in the same transaction as its take-over (or attached start):
/// expiry `now_db + lease_duration`. Refused if `me` already holds one (a process takes over one
/// turn) or the table is full.
pub fn acquire(
    table: &mut LeaseTable,
    me: &FleetIdentity,
    now_db_millis: u64,
    timing: &LeaseTiming,
) -> Result<Lease, FleetError> {
    if table.lease_of(me).is_some() {
        return Err(FleetError::AlreadyHeld { holder: me.clone() });
    }
    if table.leases.len() >= MAX_LEASES {
        return Err(FleetError::LeasesFull { limit: MAX_LEASES });
    }
    let lease = Lease {
        holder: me.clone(),
        expires_at_db_millis: now_db_millis.saturating_add(timing.lease_duration_millis),
    };
    table.leases.push(lease.clone());
    debug_assert_eq!(
        table.leases.iter().filter(|l| &l.holder == me).count(),
        1,
        "a process holds one lease"
    );
    debug_assert!(
        timing.lease_duration_millis == 0 || !lease.is_expired(now_db_millis),
        "a lease just taken has not expired"
    );
    Ok(lease)
}

/// What a renewal did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RenewOutcome {
    /// The sender's own lease now runs until `expires_at_db_millis`. The sender may move its
    /// fence deadline to [`LeaseTiming::fence_at_local_millis`] of this renewal's send time.
    Renewed { expires_at_db_millis: u64 },
    /// The renewal named a lease that is not the sender's: nothing changed. The sender learned
    /// nothing about its own lease and must fence as if the renewal was lost.
    NotOwner,
    /// The sender's lease expired or was taken: another host may already have replaced it, so it
    /// is not revived. The sender fences now.
    Lost,
}

impl RenewOutcome {
    pub fn is_renewed(&self) -> bool {
        matches!(self, RenewOutcome::Renewed { .. })
    }
}

/// The renewal step, in its own transaction: only the lease's owner renews, and only its own
/// lease. `named` is the lease the request addresses (the row key the shell sends), `me` the
/// process that sent it; when they differ nothing changes (`F2`). An expired lease stays expired:
/// a renewal delayed past the expiry must not revive a lease whose slot another host may already
/// have given away.
pub fn renew(
    table: &mut LeaseTable,
    me: &FleetIdentity,
    named: &FleetIdentity,
    now_db_millis: u64,
    timing: &LeaseTiming,
) -> RenewOutcome {
    if me != named {
        return RenewOutcome::NotOwner;
    }
    match table.leases.iter_mut().find(|l| &l.holder == me) {
        Some(lease) if !lease.is_expired(now_db_millis) => {
            let before = lease.expires_at_db_millis;
            // Never shortened: a renewal overtaken by a later one changes nothing.
            lease.expires_at_db_millis = lease
                .expires_at_db_millis
                .max(now_db_millis.saturating_add(timing.lease_duration_millis));
            debug_assert!(
                lease.expires_at_db_millis >= before,
                "a renewal never shortens"
            );
            debug_assert!(!lease.is_expired(now_db_millis), "a renewed lease is live");
            RenewOutcome::Renewed {
                expires_at_db_millis: lease.expires_at_db_millis,
            }
        }
        Some(_) | None => RenewOutcome::Lost,
    }
}

/// The executor leaves (its finishing section): its lease goes. Returns whether it held one.
pub fn release(table: &mut LeaseTable, me: &FleetIdentity) -> bool {
    let before = table.leases.len();
    table.leases.retain(|l| &l.holder != me);
    debug_assert!(table.lease_of(me).is_none(), "a released lease is gone");
    debug_assert!(
        before - table.leases.len() <= 1,
        "a process held one lease at most"
    );
    table.leases.len() != before
}

/// Another host takes an expired lease away (the steal): refused, changing nothing, while
/// `now_db` has not passed the expiry (`F3`).
pub fn steal(
    table: &mut LeaseTable,
    holder: &FleetIdentity,
    now_db_millis: u64,
) -> Result<Lease, FleetError> {
    let index = table
        .leases
        .iter()
        .position(|l| &l.holder == holder)
        .ok_or_else(|| FleetError::Unknown {
            holder: holder.clone(),
        })?;
    let lease = &table.leases[index];
    if !lease.is_expired(now_db_millis) {
        return Err(FleetError::NotExpired {
            holder: holder.clone(),
            expires_at_db_millis: lease.expires_at_db_millis,
            now_db_millis,
        });
    }
    let stolen = table.leases.remove(index);
    debug_assert!(
        stolen.is_expired(now_db_millis),
        "only an expired lease is stolen (F3)"
    );
    debug_assert!(table.lease_of(holder).is_none(), "a stolen lease is gone");
    Ok(stolen)
}

/// Steals every expired lease (the reconcile section does this first); returns their holders.
pub fn sweep_expired(table: &mut LeaseTable, now_db_millis: u64) -> Vec<FleetIdentity> {
    let expired: Vec<FleetIdentity> = table
        .leases
        .iter()
        .filter(|l| l.is_expired(now_db_millis))
        .map(|l| l.holder.clone())
        .collect();
    table.leases.retain(|l| !l.is_expired(now_db_millis));
    debug_assert!(
        table.leases.iter().all(|l| !l.is_expired(now_db_millis)),
        "a sweep leaves no expired lease"
    );
    expired
}

/// The handoff's first publish on a fleet (`F4`): [`steps::handoff_publish_first`] and, in the
/// same transaction, the child's lease ([`acquire`]). From this publish on the slot protocol
/// counts the child as the row's executor, so every other host must see it live through its
/// lease before it has even started; a lease taken only at the take-over leaves a window in which
/// another host counts the slot free (the model's tooth `ChildLeaseAtTakeOver`). A fenced publish
/// takes no lease. `Err` (the table is full, or a stale lease of a process with the child's
/// identity is left): the caller must roll the whole section back, so nothing is published.
/// The shell (`src/fleet.rs`) and the fleet model both call this.
pub fn handoff_publish_first_leased(
    queue: &mut QueueState,
    leases: &mut LeaseTable,
    handoff: Handoff,
    child: &FleetIdentity,
    now_db_millis: u64,
    timing: &LeaseTiming,
) -> Result<Result<BoundHandoff, Fenced>, FleetError> {
    let bound = match steps::handoff_publish_first(queue, handoff, child.process) {
        Ok(bound) => bound,
        Err(fenced) => return Ok(Err(fenced)),
    };
    acquire(leases, child, now_db_millis, timing)?;
    Ok(Ok(bound))
}

/// Liveness fleet-wide, as seen from host `host` inside one database transaction at
/// `now_db_millis`: a process (or a work's runner) named by an unexpired lease of another host is
/// live (matching); everything else is asked of this host's own observer (`/proc` in production),
/// as on one machine. A process of another host without an unexpired lease is not in this host's
/// `/proc` and so observes gone. Every doubt errs towards live: an identity that both an unexpired
/// remote lease and the local table could answer for is live if either says so.
pub struct LeaseLiveness<'a, L: Liveness> {
    pub host: &'a HostId,
    pub leases: &'a LeaseTable,
    pub now_db_millis: u64,
    pub local: &'a L,
}

impl<L: Liveness> Liveness for LeaseLiveness<'_, L> {
    /// Draining is this host's own state: its local observer says.
    fn may_start(&self) -> bool {
        self.local.may_start()
    }

    fn observe(&self, identity: &ProcessIdentity) -> Observation {
        if self
            .leases
            .remote_live(self.host, identity, self.now_db_millis)
        {
            Observation::Matching
        } else {
            self.local.observe(identity)
        }
    }

    /// A work runs on its runner's host: while the runner's remote lease is unexpired the work
    /// may be alive; once it expired, self-fencing (`F1`) says it is dead, and only this host's
    /// own observer can still see it (a work of this host).
    fn observe_work(&self, work: &WorkRecord) -> Observation {
        if self
            .leases
            .remote_live(self.host, &work.runner, self.now_db_millis)
        {
            Observation::Matching
        } else {
            self.local.observe_work(work)
        }
    }
}

/// What a queue section of a PostgreSQL home knows of the fleet: this host, the lease numbers,
/// and the lease table with the database clock, read under the lease lock in the section's own
/// transaction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FleetView {
    pub host: HostId,
    pub timing: LeaseTiming,
    pub leases: LeaseTable,
    pub now_db_millis: u64,
    /// Whether this host may start a turn: false while it is drained (`tollgate drain`, read
    /// in the section's transaction). The slot steps refuse to
    /// start a turn on this host then.
    pub may_start: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(name: &str) -> HostId {
        HostId::new(name).unwrap()
    }

    fn who(h: &str, pid: u32) -> FleetIdentity {
        FleetIdentity {
            host: host(h),
            process: ProcessIdentity {
                pid,
                start_time_micros: 7,
            },
        }
    }

    const T: LeaseTiming = LeaseTiming::DEFAULT;

    #[test]
    fn host_names_are_validated() {
        assert!(HostId::new("ci-box.1_a").is_ok());
        for bad in ["", "a b", "a/b", "é", &"x".repeat(65)] {
            let err = HostId::new(bad).unwrap_err();
            assert_eq!(err.code(), "HOST_INVALID", "{bad:?}");
        }
        let parsed: Result<HostId, _> = serde_json::from_str("\"a;b\"");
        assert!(parsed.is_err());
    }

    #[test]
    fn the_default_host_name_joins_machine_and_boot_ids() {
        let host = HostId::derived(
            "3d1219c7a0b14c2e9f00112233445566\n",
            "51165a30-1234-4abc-8def-001122334455\n",
        )
        .unwrap();
        assert_eq!(host.as_str(), "3d1219c7a0b1-51165a30");
        for (machine, boot) in [
            ("", "51165a30-1234"),
            ("xyz", "51165a30"),
            ("3d1219c7a0b14c2e", ""),
        ] {
            let err = HostId::derived(machine, boot).unwrap_err();
            assert_eq!(err.code(), "HOST_INVALID", "{machine:?} {boot:?}");
        }
    }

    #[test]
    fn default_timing_is_valid_and_fences_before_the_earliest_expiry() {
        T.validate().unwrap();
        // 30 s · 0.99 - 2 s after the send.
        assert_eq!(T.fence_at_local_millis(1_000), 1_000 + 29_700 - 2_000);
        assert_eq!(
            T.kill_at_local_millis(1_000),
            1_000 + 29_700 - 2_000 - 3_000
        );
        // A runner clock running (1-ρ) as fast as the database's has advanced this much when the
        // database clock passed a whole lease after the send: strictly later than the deadline.
        let local_at_expiry = T.lease_duration_millis * (PPM - T.drift_ppm) / PPM;
        assert!(T.fence_at_local_millis(0) < local_at_expiry);
    }

    #[test]
    fn timing_that_leaves_no_room_is_refused() {
        let mut t = T;
        t.drift_ppm = PPM;
        assert_eq!(t.validate().unwrap_err().code(), "LEASE_TIMING_INVALID");
        let mut t = T;
        t.lease_duration_millis = 8_000;
        assert!(t.validate().is_err());
        let mut t = T;
        t.renew_interval_millis = 0;
        assert!(t.validate().is_err());
    }

    #[test]
    fn a_renewal_extends_only_the_senders_own_unexpired_lease() {
        let mut table = LeaseTable::default();
        let a = who("a", 10);
        let b = who("b", 10);
        acquire(&mut table, &a, 0, &T).unwrap();
        acquire(&mut table, &b, 0, &T).unwrap();
        let before = table.clone();
        // b names a's lease (same pid, other host): nothing changes.
        assert_eq!(renew(&mut table, &b, &a, 5_000, &T), RenewOutcome::NotOwner);
        assert_eq!(table, before);
        assert_eq!(
            renew(&mut table, &a, &a, 5_000, &T),
            RenewOutcome::Renewed {
                expires_at_db_millis: 35_000
            }
        );
        assert_eq!(table.lease_of(&b).unwrap().expires_at_db_millis, 30_000);
        // A late renewal (processed at an earlier database time) never shortens.
        assert!(renew(&mut table, &a, &a, 1_000, &T).is_renewed());
        assert_eq!(table.lease_of(&a).unwrap().expires_at_db_millis, 35_000);
    }

    #[test]
    fn an_expired_lease_is_not_revived_and_a_steal_waits_for_the_expiry() {
        let mut table = LeaseTable::default();
        let a = who("a", 10);
        acquire(&mut table, &a, 0, &T).unwrap();
        assert_eq!(
            acquire(&mut table, &a, 0, &T).unwrap_err().code(),
            "LEASE_HELD"
        );
        let before = table.clone();
        let err = steal(&mut table, &a, 30_000).unwrap_err();
        assert_eq!(err.code(), "LEASE_NOT_EXPIRED");
        assert_eq!(table, before);
        assert!(sweep_expired(&mut table, 30_000).is_empty());
        assert_eq!(renew(&mut table, &a, &a, 30_001, &T), RenewOutcome::Lost);
        assert_eq!(table, before, "a lost renewal changes nothing");
        assert_eq!(sweep_expired(&mut table, 30_001), vec![a.clone()]);
        assert_eq!(renew(&mut table, &a, &a, 30_002, &T), RenewOutcome::Lost);
        assert_eq!(
            steal(&mut table, &a, 40_000).unwrap_err().code(),
            "LEASE_UNKNOWN"
        );
    }

    #[test]
    fn release_removes_only_the_senders_lease() {
        let mut table = LeaseTable::default();
        acquire(&mut table, &who("a", 1), 0, &T).unwrap();
        acquire(&mut table, &who("b", 1), 0, &T).unwrap();
        assert!(release(&mut table, &who("a", 1)));
        assert!(!release(&mut table, &who("a", 1)));
        assert!(table.lease_of(&who("b", 1)).is_some());
    }

    #[test]
    fn remote_processes_are_live_exactly_while_their_lease_is_unexpired() {
        let mut table = LeaseTable::default();
        let remote = who("b", 42);
        acquire(&mut table, &remote, 0, &T).unwrap();
        let nothing_local = |_: &ProcessIdentity| Observation::Gone;
        let here = host("a");
        let view = |now| LeaseLiveness {
            host: &here,
            leases: &table,
            now_db_millis: now,
            local: &nothing_local,
        };
        let work = WorkRecord {
            key: crate::slots::TurnKey::new("job", 1),
            id: crate::slots::WorkId::from_token(crate::slots::SlotToken::generate()),
            runner: remote.process,
            leader: None,
            cgroup: None,
        };
        assert_eq!(view(30_000).observe(&remote.process), Observation::Matching);
        assert_eq!(view(30_000).observe_work(&work), Observation::Matching);
        assert_eq!(view(30_001).observe(&remote.process), Observation::Gone);
        // The default observer cannot see works: it errs towards live.
        assert_eq!(view(30_001).observe_work(&work), Observation::Ambiguous);
        // On the lease holder's own host, /proc decides, not the lease.
        let there = host("b");
        let local_live = |_: &ProcessIdentity| Observation::Matching;
        let own = LeaseLiveness {
            host: &there,
            leases: &table,
            now_db_millis: 90_000,
            local: &local_live,
        };
        assert_eq!(own.observe(&remote.process), Observation::Matching);
    }
}
