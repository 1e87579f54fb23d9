//! The fleet model (spec/fleet.md): several hosts share one database that holds the queue and the
//! lease table and owns the only clock leases are measured by. Every database section calls the
//! production core: the slot steps (`tollgate_core::slots::steps`) with the fleet's liveness
//! (`tollgate_core::fleet::LeaseLiveness`: another host's process by its lease, this host's by its
//! own process table), and the lease steps (`fleet::acquire`, `fleet::renew`, `fleet::release`,
//! `fleet::sweep_expired`, the fence deadline `LeaseTiming::fence_at_local_millis`).
//!
//! What can happen (each one action):
//! - a **submitter** on the turn's host (turn `k` belongs to host `(k - 1) % hosts`) runs `submit`;
//!   on `Spawn` it spawns a runner on its host; later (its own action, `Publish`) it runs both
//!   handoff publishes, the first of which takes the child's lease (`acquire`, F4). The child may
//!   reach its take-over first: the dispatcher is alive on its host meanwhile, and it stays so
//!   until its publishes are done;
//! - a **runner** renews its lease and runs `runner_take_over` in one transaction. A take-over
//!   that finds no lease is retried, not taken as lost, while the runner's own clock is within
//!   `TAKE_OVER_RETRY_MILLIS` of its start (the shell's `take_over_retrying`: the first publish may
//!   not have taken the lease yet); a failed attempt changes nothing, so a retry is the same
//!   action again. After that a lost lease makes it exit; a refused take-over: it releases the
//!   lease and exits. Its work then runs until it
//!   exits (any time) or the runner kills it. Its renewal timer fires at every tick unless the
//!   last renewal is still on its way; the database processes a renewal with `renew` at its own
//!   clock whenever the host can reach it, and the reply comes back whenever the host can reach
//!   it: requests and replies are delayed without bound and lost while the host is cut off. A
//!   reply `Renewed` moves the runner's fence deadline to `fence_at_local_millis(send time of that
//!   renewal)` (before its take-over, its own start time is the base); any other reply makes it
//!   fence at once. Once its own clock reaches the deadline the runner **fences**: it kills its
//!   work and exits (urgent: time does not pass a due fence). A runner whose work exited runs
//!   `runner_finish` and `release` in one transaction (the result is recorded there) and hands the
//!   next row off;
//! - a **reconciler** on each host runs `reconcile` (offered only when it would change something)
//!   and performs its effect: a spawn with its handoff, a kill of a work of its own host; when the
//!   step has nothing more to do it steals the expired leases (`sweep_expired`);
//! - the **environment**: the clocks tick together (one tick is 1 s: the database clock and every
//!   live host's own clock, which may start at any offset; with a slow-tick budget one host's
//!   clock may miss a tick, the bounded rate drift), a host is cut off from the database and heals
//!   (partition budget), a host crashes with everything on it (crash budget), a **runner dies
//!   alone on a live, connected host** (runner-crash budget): its lease is never renewed again and
//!   expires on the database clock; its work dies only as the runner's guard kills it, at once,
//!   which stands for the guard's kill ending before the lease can expire (the timing argument,
//!   spec/fleet.md "The guard"); an **operator drains a host** (drain budget): a flag in the
//!   database that the host's sections read under the lock (`Liveness::may_start`).
//!
//! Properties: `S1` and `S2` over works fleet-wide, partitioned hosts included (a state breaking
//! them ends its path); `F1` a live work's runner holds an unexpired lease; `F2` a renewal changes
//! only the sender's own lease; `F3` no host's section takes a row from another host's process
//! whose lease has not expired on the database clock; `F5` a drained host spawns no runner (these
//! four checked on every state without ending the path, so a broken lease decision is followed to
//! the `S1`/`S2` trail it causes); `S9` in every quiescent state
//! (nothing can happen any more, so the partition healed) every submitted turn ended and the
//! queue is empty. States at the time horizon where time would still matter are not quiescent
//! (the bound cut them, not the protocol).
//!
//! Reductions: a handoff is two actions, the reservation with the spawn (inside the dispatcher's
//! section), then both publishes (`Publish`): the take-over may run between them, which is what
//! the take-over's retry is for. Nothing else happens between them (the gap is milliseconds, a
//! tick is a second): no other section, no fault, no tick, so the retry's bound never runs out
//! while its publish is pending, and another host's section never sees the reservation of a
//! live dispatcher that holds no lease (the slot model covers a reservation's interleavings on
//! one host; that one across hosts is not covered here); the other interleavings inside a handoff are the slot model's
//! subject (`model/src/slots/`), this model's are time, leases, partitions and host crashes. A kill is instantaneous (the margin of the real
//! timing pays for its duration). Renewals are sent only by runners whose command runs, once per
//! tick (the renew interval is one tick). Every spawned runner's pid collides with a runner's pid
//! on the other hosts (each host hands out pids from the same number; start times differ), which
//! is what a lease key must survive.

use stateright::{Model, Property};
use std::fmt;
use tollgate_core::admission::{Strategy, MAX_CONCURRENT};
use tollgate_core::fleet::{
    self, FleetIdentity, HostId, LeaseLiveness, LeaseTable, LeaseTiming, RenewOutcome,
};
use tollgate_core::slots::steps::{
    self, FinishInput, Handoff, ReconcileEffect, ReconcileInput, SubmitEffect, SubmitInput,
    TakeOverEffect, TakeOverInput, TurnOnDisk, TurnRecords,
};
use tollgate_core::slots::{
    Liveness, Observation, ProcessIdentity, QueueState, SlotToken, TurnKey, WorkId, WorkRecord,
};
use uuid::Uuid;

/// One tick of every clock, in milliseconds.
pub const TICK_MILLIS: u64 = 1_000;

/// The model's lease numbers, in ticks: a 4-tick lease, ρ = 25% (a host clock may miss a tick),
/// no margin and an instantaneous kill (a due fence is urgent instead): the fence deadline is 3
/// ticks after the send, the earliest expiry 4 ticks after it, a steal 5 ticks after it. As with
/// the defaults (27.7 s of 30 s), the deadline is more than half the lease after the send, so a
/// deadline measured from a late acknowledgement can pass the expiry.
pub const MODEL_TIMING: LeaseTiming = LeaseTiming {
    lease_duration_millis: 4 * TICK_MILLIS,
    renew_interval_millis: TICK_MILLIS,
    margin_millis: 0,
    kill_budget_millis: 0,
    drift_ppm: 250_000,
};

/// The task every turn belongs to: `concurrent` without a limit, so the cap is what bites.
pub const TASK: &str = "job";

/// How long a runner retries a take-over that finds no lease (the shell's
/// `TAKE_OVER_LEASE_WAIT_MILLIS`, 2 s): two ticks from its start, less than the 3 ticks to its
/// first fence deadline.
pub const TAKE_OVER_RETRY_MILLIS: u64 = 2 * TICK_MILLIS;

/// The first pid every host hands out: pids collide across hosts (start times do not).
const FIRST_PID: u32 = 10;

/// The production lease steps, or one deliberately broken decision (the teeth).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FleetVariant {
    Production,
    /// The runner measures its fence deadline from when the reply arrived instead of from when
    /// the renewal was sent (breaks F1, then S1/S2).
    FenceFromAck,
    /// Another host treats a lease as expired half a lease before its expiry (a steal before
    /// expiry; breaks S1/S2).
    StealBeforeExpiry,
    /// The renewal finds the lease by pid alone and extends whichever lease that names: another
    /// host's process with the same pid (breaks F2, then F1 and S1/S2).
    RenewOthersLease,
    /// The child's lease is taken only at its take-over, not by the first publish that records
    /// it: between the two, another host sees the recorded runner as gone and gives its slot to
    /// another turn (breaks S1; the counterexample that made the first publish take the lease).
    ChildLeaseAtTakeOver,
    /// No guard: a runner that dies alone on a live host leaves its work running (its
    /// grandchildren reparented away); only a repair on that host kills it, and another host,
    /// once the lease expired, runs the turn again beside it (breaks F1, then S1/S2).
    NoGuard,
    /// A host's liveness answers `may_start` with "yes" whether or not the host is drained
    /// (breaks F5: a drained host starts a turn).
    IgnoreDrain,
    /// A host's sections read the lease table by the host's own clock where the database's is
    /// meant: a host whose clock runs ahead takes another host's live executor for dead (breaks
    /// F3, then S1/S2).
    HostClockForExpiry,
    /// The lease table is read as if no lease ever expired: no host takes over a dead or cut-off
    /// host's turn (breaks S9; the steal examples are never reached).
    LeasesNeverExpire,
    /// A runner never fences: cut off, its work runs past its lease's expiry (breaks F1; the
    /// example "a cut-off runner fenced itself" is never reached).
    NeverFences,
    /// The dispatcher publishes in the section of its spawn, so no take-over can run ahead of the
    /// first publish (the example of the take-over's retry is never reached).
    PublishAtSpawn,
    /// A drain stops every host from starting turns, not just the drained one (breaks S9; the
    /// example "a turn submitted on a drained host ran on another" is never reached).
    DrainStopsEveryone,
    /// A cut-off host never reaches the database again (the example "drained after a partition
    /// healed" is never reached).
    PartitionNeverHeals,
    /// A finishing runner's transaction leaves the queue but records no result for its turn
    /// (breaks S9).
    FinishRecordsNothing,
}

impl FleetVariant {
    pub const BROKEN: [FleetVariant; 13] = [
        FleetVariant::FenceFromAck,
        FleetVariant::StealBeforeExpiry,
        FleetVariant::RenewOthersLease,
        FleetVariant::ChildLeaseAtTakeOver,
        FleetVariant::NoGuard,
        FleetVariant::IgnoreDrain,
        FleetVariant::HostClockForExpiry,
        FleetVariant::LeasesNeverExpire,
        FleetVariant::NeverFences,
        FleetVariant::PublishAtSpawn,
        FleetVariant::DrainStopsEveryone,
        FleetVariant::PartitionNeverHeals,
        FleetVariant::FinishRecordsNothing,
    ];
}

/// The size, the budgets and the variant of one fleet model instance.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FleetConfig {
    pub hosts: usize,
    /// Turns in all (at most 16), turn `k` submitted on host `(k - 1) % hosts`.
    pub turns: u32,
    /// The global cap (`workers`, fleet-wide).
    pub cap: usize,
    /// Times a host is cut off from the database (each heals later).
    pub partitions: u8,
    /// Host crashes (a crashed host stays down).
    pub crashes: u8,
    /// Runners that die alone (SIGKILL) on a host that stays up and connected.
    pub runner_crashes: u8,
    /// Ticks one host's clock may miss (bounded rate drift).
    pub slow_ticks: u8,
    /// Hosts an operator drains (`tollgate drain HOST`, at any moment; never undone here).
    pub drains: u8,
    /// The database clock stops here (ticks).
    pub horizon_ticks: u64,
    pub timing: LeaseTiming,
    pub variant: FleetVariant,
}

impl FleetConfig {
    pub fn new(hosts: usize, turns: u32, cap: usize) -> Self {
        FleetConfig {
            hosts,
            turns,
            cap,
            partitions: 1,
            crashes: 0,
            runner_crashes: 0,
            slow_ticks: 0,
            drains: 0,
            horizon_ticks: 7,
            timing: MODEL_TIMING,
            variant: FleetVariant::Production,
        }
    }

    pub fn with_variant(mut self, variant: FleetVariant) -> Self {
        self.variant = variant;
        self
    }

    /// The host turn `turn` (1-based) is submitted on.
    pub fn host_of_turn(&self, turn: u32) -> usize {
        (turn as usize - 1) % self.hosts.max(1)
    }

    pub fn key(turn: u32) -> TurnKey {
        TurnKey::new(TASK, turn)
    }

    pub fn host_name(host: usize) -> HostId {
        HostId::new(format!("host{host}")).expect("host<N> is a valid host name")
    }

    /// The host's clock when the model starts: the offsets differ wildly (a day between hosts),
    /// so a section that reads a host's clock where the database's is meant (the lease table's
    /// expiry, F3) goes wrong at once; read correctly, they never matter.
    pub fn clock_offset_millis(host: usize) -> u64 {
        host as u64 * 86_400_000 + 500
    }
}

impl fmt::Display for FleetConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} hosts x {} turns x cap {} (partitions {}, crashes {}, runner crashes {}, slow ticks {}, drains {}, horizon {} ticks, {:?})",
            self.hosts,
            self.turns,
            self.cap,
            self.partitions,
            self.crashes,
            self.runner_crashes,
            self.slow_ticks,
            self.drains,
            self.horizon_ticks,
            self.variant
        )
    }
}

/// A renewal on its way.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Message {
    /// Sent at the runner's clock `sent_local_millis`, not processed yet.
    Request { sent_local_millis: u64 },
    /// Processed by the database; the reply is on its way back.
    Reply {
        sent_local_millis: u64,
        outcome: RenewOutcome,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RunnerPc {
    /// Spawned, its take-over not done yet.
    Starting,
    /// Its command runs as `work`.
    Running { work: WorkId },
    /// Its command exited; it has to record the result and leave.
    Exited,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Runner {
    pub id: ProcessIdentity,
    pub key: TurnKey,
    pub token: SlotToken,
    pub pc: RunnerPc,
    /// The send time (own clock) of the last acknowledged renewal (the take-over counts as one).
    pub fence_base_local_millis: u64,
    pub message: Option<Message>,
}

/// A dispatcher between its spawn and its publishes: alive on its host (its own host's `/proc`
/// sees it; no other host does, it holds no lease), and the child it spawned for `handoff`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Dispatch {
    pub by: ProcessIdentity,
    pub child: ProcessIdentity,
    pub handoff: Handoff,
}

/// A live work: the process tree of a turn on one host.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LiveWork {
    pub id: WorkId,
    pub key: TurnKey,
    pub runner: ProcessIdentity,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct HostState {
    pub up: bool,
    /// Cut off from the database: nothing it sends arrives, nothing comes back.
    pub cut: bool,
    pub local_millis: u64,
    pub next_pid: u32,
    pub runners: Vec<Runner>,
    pub works: Vec<LiveWork>,
    /// Handoffs spawned but not published yet.
    pub dispatching: Vec<Dispatch>,
    /// Drained (`tollgate drain`): a flag in the database, which this host's sections read under
    /// the queue's lock (`Liveness::may_start`).
    pub drained: bool,
}

/// Flags of transitions that broke a property (checked by the properties).
pub mod violation {
    /// A renewal changed a lease other than its sender's (F2).
    pub const RENEWED_ANOTHERS_LEASE: u8 = 1;
    /// A drained host's section started a turn: it spawned a runner (F5).
    pub const STARTED_ON_DRAINED: u8 = 2;
    /// A host's section took a row from another host's process whose lease had not expired on
    /// the database clock (F3).
    pub const STOLE_FROM_LIVE_LEASE: u8 = 4;
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FleetState {
    pub queue: QueueState,
    pub leases: LeaseTable,
    pub now_db_millis: u64,
    pub hosts: Vec<HostState>,
    /// Bit `k - 1`: turn `k` was submitted (its record written).
    pub submitted: u32,
    /// Bit `k - 1`: turn `k`'s result is recorded.
    pub ended: u32,
    pub tokens: u32,
    pub partitions_left: u8,
    pub crashes_left: u8,
    pub runner_crashes_left: u8,
    pub slow_left: u8,
    pub drains_left: u8,
    pub violations: u8,
    /// A host replaced another host's executor after its lease expired.
    pub stolen: bool,
    /// A runner fenced itself while its host was cut off.
    pub fenced_cut_off: bool,
    /// The last runner that died alone on a live host (`RunnerDies`), by its fleet identity.
    pub died: Option<FleetIdentity>,
    /// Another host replaced that dead runner (after its lease expired).
    pub dead_runner_replaced: bool,
    /// A turn submitted on a drained host was started by another host.
    pub drained_turn_started_elsewhere: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum FleetAction {
    Submit {
        turn: u32,
    },
    TakeOver {
        host: usize,
        runner: usize,
    },
    Publish {
        host: usize,
        dispatch: usize,
    },
    WorkExits {
        host: usize,
        runner: usize,
    },
    Finish {
        host: usize,
        runner: usize,
    },
    DeliverRequest {
        host: usize,
        runner: usize,
    },
    DeliverReply {
        host: usize,
        runner: usize,
    },
    LoseMessage {
        host: usize,
        runner: usize,
    },
    Fence {
        host: usize,
        runner: usize,
    },
    Reconcile {
        host: usize,
    },
    Tick {
        slow: Option<usize>,
    },
    Cut {
        host: usize,
    },
    Heal {
        host: usize,
    },
    Crash {
        host: usize,
    },
    /// The runner alone is SIGKILLed; its host stays up and connected.
    RunnerDies {
        host: usize,
        runner: usize,
    },
    /// An operator drains the host (a write to the database: the host's next section reads it).
    Drain {
        host: usize,
    },
}

/// The model: a configuration; the state is [`FleetState`].
#[derive(Clone, Debug)]
pub struct FleetModel {
    pub cfg: FleetConfig,
}

/// This host's own process table, as `/proc` would answer on it.
struct HostView<'a> {
    host: &'a HostState,
    reconciler: ProcessIdentity,
    /// The teeth variant [`FleetVariant::IgnoreDrain`].
    ignore_drain: bool,
    /// The teeth variant [`FleetVariant::DrainStopsEveryone`]: some host is drained.
    any_drained: bool,
}

impl Liveness for HostView<'_> {
    /// The drain flag as the host's section reads it.
    fn may_start(&self) -> bool {
        self.ignore_drain || !(self.host.drained || self.any_drained)
    }

    fn observe(&self, identity: &ProcessIdentity) -> Observation {
        let live = self.host.up
            && (identity == &self.reconciler
                || self.host.runners.iter().any(|r| &r.id == identity)
                || self.host.dispatching.iter().any(|d| &d.by == identity));
        if live {
            Observation::Matching
        } else {
            Observation::Gone
        }
    }

    fn observe_work(&self, work: &WorkRecord) -> Observation {
        if self.host.works.iter().any(|w| w.id == work.id) {
            Observation::Matching
        } else {
            Observation::Gone
        }
    }
}

fn token(counter: u32) -> SlotToken {
    let uuid = Uuid::from_u128(0x0000_0000_0000_7000_8000_0000_0000_0000 | u128::from(counter));
    SlotToken::new(uuid).expect("version bits set: never nil")
}

fn bit(turn: u32) -> u32 {
    1 << (turn - 1)
}

impl FleetModel {
    pub fn new(cfg: FleetConfig) -> Self {
        assert!(
            cfg.turns >= 1 && cfg.turns <= 16,
            "1 to 16 turns (bit sets)"
        );
        assert!(cfg.hosts >= 1, "at least one host");
        cfg.timing
            .validate()
            .expect("the model's lease timing is valid");
        FleetModel { cfg }
    }

    pub fn initial_state(&self) -> FleetState {
        FleetState {
            queue: QueueState::default(),
            leases: LeaseTable::default(),
            now_db_millis: 0,
            hosts: (0..self.cfg.hosts)
                .map(|h| HostState {
                    up: true,
                    cut: false,
                    local_millis: FleetConfig::clock_offset_millis(h),
                    next_pid: FIRST_PID,
                    runners: Vec::new(),
                    works: Vec::new(),
                    dispatching: Vec::new(),
                    drained: false,
                })
                .collect(),
            submitted: 0,
            ended: 0,
            tokens: 0,
            partitions_left: self.cfg.partitions,
            crashes_left: self.cfg.crashes,
            runner_crashes_left: self.cfg.runner_crashes,
            slow_left: self.cfg.slow_ticks,
            drains_left: self.cfg.drains,
            violations: 0,
            stolen: false,
            fenced_cut_off: false,
            died: None,
            dead_runner_replaced: false,
            drained_turn_started_elsewhere: false,
        }
    }

    /// A process of host `host` (start times differ per host, pids do not).
    fn identity(host: usize, pid: u32) -> ProcessIdentity {
        ProcessIdentity {
            pid,
            start_time_micros: host as u64 + 1,
        }
    }

    fn reconciler(host: usize) -> ProcessIdentity {
        Self::identity(host, 1)
    }

    fn fleet_id(host: usize, process: ProcessIdentity) -> FleetIdentity {
        FleetIdentity {
            host: FleetConfig::host_name(host),
            process,
        }
    }

    fn fresh_token(st: &mut FleetState) -> SlotToken {
        st.tokens += 1;
        token(st.tokens)
    }

    fn fresh_pid(st: &mut FleetState, host: usize) -> ProcessIdentity {
        let pid = st.hosts[host].next_pid;
        st.hosts[host].next_pid += 1;
        Self::identity(host, pid)
    }

    fn strategies() -> std::collections::BTreeMap<String, Strategy> {
        [(
            TASK.to_string(),
            Strategy::Concurrent {
                max: MAX_CONCURRENT,
            },
        )]
        .into_iter()
        .collect()
    }

    /// Runs `f` with host `host`'s view of liveness inside a database section (the variant's
    /// steal rule in force), on a copy of the queue, and stores the queue back.
    fn with_liveness<R>(
        &self,
        st: &mut FleetState,
        host: usize,
        f: impl FnOnce(&mut QueueState, &LeaseLiveness<'_, HostView<'_>>) -> R,
    ) -> R {
        let name = FleetConfig::host_name(host);
        let view = HostView {
            host: &st.hosts[host],
            reconciler: Self::reconciler(host),
            ignore_drain: self.cfg.variant == FleetVariant::IgnoreDrain,
            any_drained: self.cfg.variant == FleetVariant::DrainStopsEveryone
                && st.hosts.iter().any(|h| h.drained),
        };
        let now = match self.cfg.variant {
            // The broken steal: the lease counts as expired half a lease early.
            FleetVariant::StealBeforeExpiry => {
                st.now_db_millis + self.cfg.timing.lease_duration_millis / 2 + 1
            }
            _ => self.lease_clock_millis(st, host),
        };
        let live = LeaseLiveness {
            host: &name,
            leases: &st.leases,
            now_db_millis: now,
            local: &view,
        };
        let mut queue = st.queue.clone();
        // The core's fleet liveness itself, every answer of it (`may_start` included), not a
        // re-typed wrapper of its observations.
        let result = f(&mut queue, &live);
        if Self::took_from_live_lease(st, host, &queue) {
            st.violations |= violation::STOLE_FROM_LIVE_LEASE;
        }
        st.queue = queue;
        result
    }

    /// The clock host `host`'s sections read the lease table by: the database's.
    fn lease_clock_millis(&self, st: &FleetState, host: usize) -> u64 {
        match self.cfg.variant {
            // BUG: the host's own clock where the database's is meant.
            FleetVariant::HostClockForExpiry => st.hosts[host].local_millis,
            // BUG: every lease is read as if it had just been taken.
            FleetVariant::LeasesNeverExpire => 0,
            _ => st.now_db_millis,
        }
    }

    /// F3, over one section of `host` that turned `st.queue` into `after`: some row named a
    /// process of another host whose lease has not expired on the database clock (on its
    /// reservation, as its owner or as its recorded runner), and no longer does. Only its own
    /// host's sections may take a row from a process with a live lease.
    fn took_from_live_lease(st: &FleetState, host: usize, after: &QueueState) -> bool {
        let here = FleetConfig::host_name(host);
        let names = |q: &QueueState, key: &TurnKey, id: &ProcessIdentity| {
            let on_row = q
                .row(key)
                .is_some_and(|row| crate::slots::state::identities_of(row).contains(id));
            on_row || q.runner(key).is_some_and(|r| r.identity == *id)
        };
        st.leases
            .leases
            .iter()
            .filter(|l| l.holder.host != here && !l.is_expired(st.now_db_millis))
            .any(|l| {
                let id = &l.holder.process;
                st.queue
                    .entries
                    .iter()
                    .any(|e| names(&st.queue, &e.key, id) && !names(after, &e.key, id))
            })
    }

    /// The spawn for `handoff` on `host` by the dispatcher `by`, in the dispatcher's section:
    /// the child starts, its publishes are left to [`FleetAction::Publish`].
    fn spawn_for(&self, st: &mut FleetState, host: usize, handoff: Handoff, by: ProcessIdentity) {
        if st.hosts[host].drained {
            st.violations |= violation::STARTED_ON_DRAINED;
        }
        // Turn `k` is submitted on host `(k - 1) % hosts`.
        let submitted_on = (handoff.key().turn as usize - 1) % st.hosts.len();
        if submitted_on != host && st.hosts[submitted_on].drained {
            st.drained_turn_started_elsewhere = true;
        }
        let child = Self::fresh_pid(st, host);
        let spawned_at = st.hosts[host].local_millis;
        st.hosts[host].runners.push(Runner {
            id: child,
            key: handoff.key().clone(),
            token: handoff.token(),
            pc: RunnerPc::Starting,
            fence_base_local_millis: spawned_at,
            message: None,
        });
        st.hosts[host]
            .dispatching
            .push(Dispatch { by, child, handoff });
        if self.cfg.variant == FleetVariant::PublishAtSpawn {
            let last = st.hosts[host].dispatching.len() - 1;
            self.publish(st, host, last);
        }
    }

    /// Both publishes of a dispatch (one action, see the module docs).
    ///
    /// The first publish records the child as the row's executor, so in the same transaction it
    /// takes the child's lease: from then on every host sees the child through it (F4). The child
    /// started before that transaction was sent, so its own start time is a safe fence base until
    /// its take-over renews the lease.
    fn publish(&self, st: &mut FleetState, host: usize, dispatch: usize) {
        let Dispatch { child, handoff, .. } = st.hosts[host].dispatching.remove(dispatch);
        let bound = if self.cfg.variant == FleetVariant::ChildLeaseAtTakeOver {
            steps::handoff_publish_first(&mut st.queue, handoff, child).ok()
        } else {
            // The production step (F4): the publish and the child's lease in one transaction. A
            // full table refuses the whole section in production (nothing published), which
            // the model's bounds never reach; a fenced publish takes no lease.
            let mut queue = st.queue.clone();
            let mut leases = st.leases.clone();
            match fleet::handoff_publish_first_leased(
                &mut queue,
                &mut leases,
                handoff,
                &Self::fleet_id(host, child),
                st.now_db_millis,
                &self.cfg.timing,
            ) {
                Ok(published) => {
                    st.queue = queue;
                    st.leases = leases;
                    published.ok()
                }
                Err(_) => None,
            }
        };
        if let Some(bound) = bound {
            // A fenced second publish leaves the decision to the child's take-over.
            let _ = steps::handoff_publish_second(&mut st.queue, bound);
        }
    }

    fn connected(st: &FleetState, host: usize) -> bool {
        st.hosts[host].up && !st.hosts[host].cut
    }

    fn fence_due(&self, st: &FleetState, host: usize, r: &Runner) -> bool {
        // BUG (NeverFences): the fence deadline is never checked.
        self.cfg.variant != FleetVariant::NeverFences
            && st.hosts[host].up
            && st.hosts[host].local_millis
                >= self
                    .cfg
                    .timing
                    .fence_at_local_millis(r.fence_base_local_millis)
    }

    /// Whether anything still waits for time: a lease to expire or a runner to fence or renew.
    fn time_matters(st: &FleetState) -> bool {
        !st.leases.leases.is_empty() || st.hosts.iter().any(|h| h.up && !h.runners.is_empty())
    }

    fn records(st: &FleetState) -> TurnRecords {
        st.queue
            .entries
            .iter()
            .map(|e| {
                let settled = st.ended & bit(e.key.turn) != 0;
                (
                    e.key.clone(),
                    TurnOnDisk::Record {
                        settled,
                        attached: false,
                        started: true,
                        runner: true,
                    },
                )
            })
            .collect()
    }

    /// The reconcile section of `host`, on a copy: the state after it, or `None` if it would
    /// change nothing.
    fn reconciled(&self, st: &FleetState, host: usize) -> Option<FleetState> {
        let mut next = st.clone();
        let me = Self::reconciler(host);
        let fresh = Self::fresh_token(&mut next);
        let records = Self::records(&next);
        let strategies = Self::strategies();
        let now = next.now_db_millis;
        let cap = self.cfg.cap;
        let effect = self.with_liveness(&mut next, host, |queue, live| {
            steps::reconcile(
                queue,
                ReconcileInput {
                    me,
                    fresh_token: fresh,
                    now_millis: now,
                    cap,
                    strategies: &strategies,
                    records: &records,
                    liveness: live,
                },
            )
        });
        match effect {
            Ok(ReconcileEffect::Spawn { handoff, replaced }) => {
                let here = FleetConfig::host_name(host);
                next.stolen |= replaced.is_some_and(|old| {
                    st.leases
                        .leases
                        .iter()
                        .any(|l| l.holder.process == old && l.holder.host != here)
                });
                next.dead_runner_replaced |= replaced.is_some_and(|old| {
                    st.died
                        .as_ref()
                        .is_some_and(|d| d.process == old && d.host != here)
                });
                // F3: the executor replaced was another host's process whose lease still runs.
                if replaced.is_some_and(|old| {
                    st.leases.leases.iter().any(|l| {
                        l.holder.process == old
                            && l.holder.host != here
                            && !l.is_expired(st.now_db_millis)
                    })
                }) {
                    next.violations |= violation::STOLE_FROM_LIVE_LEASE;
                }
                self.spawn_for(&mut next, host, handoff, me);
            }
            Ok(ReconcileEffect::Kill { work, .. }) => {
                next.hosts[host].works.retain(|w| w.id != work.id);
            }
            Ok(effect) if effect.is_final() => {
                let swept_at = self.lease_clock_millis(st, host);
                fleet::sweep_expired(&mut next.leases, swept_at);
            }
            Ok(_) => {}
            Err(_) => return None,
        }
        // The token counter is not a change by itself.
        let mut same = next.clone();
        same.tokens = st.tokens;
        (same != *st).then_some(next)
    }

    /// The renewal step at the database clock, flagging F2 if it changed another's lease.
    fn renew(&self, st: &mut FleetState, me: &FleetIdentity) -> RenewOutcome {
        let before = st.leases.clone();
        let outcome = self.renew_step(st, me);
        let others_changed = before
            .leases
            .iter()
            .filter(|l| &l.holder != me)
            .any(|l| st.leases.lease_of(&l.holder) != Some(l));
        if others_changed {
            st.violations |= violation::RENEWED_ANOTHERS_LEASE;
        }
        outcome
    }

    fn renew_step(&self, st: &mut FleetState, me: &FleetIdentity) -> RenewOutcome {
        let (now, timing) = (st.now_db_millis, &self.cfg.timing);
        match self.cfg.variant {
            FleetVariant::RenewOthersLease => {
                // The broken lookup: the lease is found by pid alone, and renewed as its own.
                let named = st
                    .leases
                    .leases
                    .iter()
                    .find(|l| l.holder.process.pid == me.process.pid)
                    .map(|l| l.holder.clone());
                match named {
                    Some(named) => fleet::renew(&mut st.leases, &named, &named, now, timing),
                    None => RenewOutcome::Lost,
                }
            }
            _ => fleet::renew(&mut st.leases, me, me, now, timing),
        }
    }

    fn kill_runner(st: &mut FleetState, host: usize, runner: usize) {
        let r = st.hosts[host].runners.remove(runner);
        st.hosts[host].works.retain(|w| w.runner != r.id);
    }

    fn apply(&self, last: &FleetState, action: &FleetAction) -> Option<FleetState> {
        let mut st = last.clone();
        let cap = self.cfg.cap;
        match *action {
            FleetAction::Submit { turn } => {
                let host = self.cfg.host_of_turn(turn);
                let key = FleetConfig::key(turn);
                let me = Self::fresh_pid(&mut st, host);
                let fresh = Self::fresh_token(&mut st);
                let now = st.now_db_millis;
                let decision = self.with_liveness(&mut st, host, |queue, live| {
                    steps::submit(
                        queue,
                        SubmitInput {
                            key: &key,
                            me,
                            fresh_token: fresh,
                            now_millis: now,
                            cap,
                            strategy: Strategy::Concurrent {
                                max: MAX_CONCURRENT,
                            },
                            liveness: live,
                        },
                    )
                });
                st.submitted |= bit(turn);
                if let Ok(decision) = decision {
                    if let SubmitEffect::Spawn(handoff) = decision.effect {
                        self.spawn_for(&mut st, host, handoff, me);
                    }
                }
            }
            FleetAction::TakeOver { host, runner } => {
                let r = st.hosts[host].runners[runner].clone();
                let me = Self::fleet_id(host, r.id);
                // The take-over's transaction renews the lease the first publish took for the
                // child; without it (expired, or never taken: the row moved on) the child exits.
                // A lease not there (yet): within its first `TAKE_OVER_RETRY_MILLIS` the runner
                // retries (the failed attempt changed nothing: no new state), then it exits.
                if self.cfg.variant != FleetVariant::ChildLeaseAtTakeOver
                    && !self.renew(&mut st, &me).is_renewed()
                {
                    let started = r.fence_base_local_millis;
                    if st.hosts[host].local_millis < started + TAKE_OVER_RETRY_MILLIS {
                        return None;
                    }
                    st.hosts[host].runners.remove(runner);
                    return Some(st);
                }
                let settled = st.ended & bit(r.key.turn) != 0;
                let effect = self.with_liveness(&mut st, host, |queue, live| {
                    steps::runner_take_over(
                        queue,
                        TakeOverInput {
                            key: &r.key,
                            token: r.token,
                            me: r.id,
                            settled,
                            cgroup: None,
                            liveness: live,
                        },
                    )
                });
                match effect {
                    Ok(TakeOverEffect::Run { work }) => {
                        if self.cfg.variant == FleetVariant::ChildLeaseAtTakeOver
                            && fleet::acquire(
                                &mut st.leases,
                                &me,
                                st.now_db_millis,
                                &self.cfg.timing,
                            )
                            .is_err()
                        {
                            return None;
                        }
                        let local = st.hosts[host].local_millis;
                        let h = &mut st.hosts[host];
                        h.works.push(LiveWork {
                            id: work,
                            key: r.key.clone(),
                            runner: r.id,
                        });
                        let runner = &mut h.runners[runner];
                        runner.pc = RunnerPc::Running { work };
                        runner.fence_base_local_millis = local;
                    }
                    Ok(TakeOverEffect::AlreadySettled) => {
                        st.hosts[host].runners[runner].pc = RunnerPc::Exited;
                    }
                    Ok(TakeOverEffect::Refused { .. } | TakeOverEffect::Cancelled) | Err(_) => {
                        // Nothing of the take-over is published; the child gives its lease back.
                        fleet::release(&mut st.leases, &me);
                        st.hosts[host].runners.remove(runner);
                    }
                }
            }
            FleetAction::Publish { host, dispatch } => self.publish(&mut st, host, dispatch),
            FleetAction::WorkExits { host, runner } => {
                let h = &mut st.hosts[host];
                let r = &mut h.runners[runner];
                if let RunnerPc::Running { work } = r.pc {
                    r.pc = RunnerPc::Exited;
                    h.works.retain(|w| w.id != work);
                }
            }
            FleetAction::Finish { host, runner } => {
                let r = st.hosts[host].runners[runner].clone();
                let fresh = Self::fresh_token(&mut st);
                let now = st.now_db_millis;
                let strategies = Self::strategies();
                let result = self.with_liveness(&mut st, host, |queue, live| {
                    let before = queue.clone();
                    let result = steps::runner_finish(
                        queue,
                        FinishInput {
                            key: &r.key,
                            me: r.id,
                            fresh_token: fresh,
                            now_millis: now,
                            cap,
                            strategies: &strategies,
                            liveness: live,
                        },
                    );
                    if result.is_err() {
                        // Nothing is published on an error.
                        *queue = before;
                    }
                    result
                });
                fleet::release(&mut st.leases, &Self::fleet_id(host, r.id));
                st.hosts[host].runners.remove(runner);
                // BUG (FinishRecordsNothing): the turn's result is not recorded.
                if let Ok(next) = result {
                    if self.cfg.variant != FleetVariant::FinishRecordsNothing {
                        st.ended |= bit(r.key.turn);
                    }
                    if let Some(handoff) = next {
                        self.spawn_for(&mut st, host, handoff, r.id);
                    }
                }
            }
            FleetAction::DeliverRequest { host, runner } => {
                let r = st.hosts[host].runners[runner].clone();
                let Some(Message::Request { sent_local_millis }) = r.message else {
                    return None;
                };
                let me = Self::fleet_id(host, r.id);
                let outcome = self.renew(&mut st, &me);
                st.hosts[host].runners[runner].message = Some(Message::Reply {
                    sent_local_millis,
                    outcome,
                });
            }
            FleetAction::DeliverReply { host, runner } => {
                let local = st.hosts[host].local_millis;
                let r = &mut st.hosts[host].runners[runner];
                let Some(Message::Reply {
                    sent_local_millis,
                    outcome,
                }) = r.message
                else {
                    return None;
                };
                r.message = None;
                if outcome.is_renewed() {
                    let base = match self.cfg.variant {
                        FleetVariant::FenceFromAck => local,
                        _ => sent_local_millis,
                    };
                    r.fence_base_local_millis = r.fence_base_local_millis.max(base);
                } else {
                    Self::kill_runner(&mut st, host, runner);
                }
            }
            FleetAction::LoseMessage { host, runner } => {
                st.hosts[host].runners[runner].message = None;
            }
            FleetAction::Fence { host, runner } => {
                st.fenced_cut_off |= st.hosts[host].cut;
                Self::kill_runner(&mut st, host, runner);
            }
            FleetAction::Reconcile { host } => return self.reconciled(last, host),
            FleetAction::Tick { slow } => {
                st.now_db_millis += TICK_MILLIS;
                for (i, h) in st.hosts.iter_mut().enumerate() {
                    if h.up && slow != Some(i) {
                        h.local_millis += TICK_MILLIS;
                    }
                }
                if slow.is_some() {
                    st.slow_left -= 1;
                }
                // Every running runner's renewal timer fires (one renew interval is one tick),
                // unless its last renewal is still on its way.
                for h in st.hosts.iter_mut().filter(|h| h.up) {
                    let local = h.local_millis;
                    for r in h.runners.iter_mut() {
                        if matches!(r.pc, RunnerPc::Running { .. }) && r.message.is_none() {
                            r.message = Some(Message::Request {
                                sent_local_millis: local,
                            });
                        }
                    }
                }
            }
            FleetAction::Cut { host } => {
                st.hosts[host].cut = true;
                st.partitions_left -= 1;
            }
            FleetAction::Heal { host } => st.hosts[host].cut = false,
            FleetAction::RunnerDies { host, runner } => {
                st.runner_crashes_left -= 1;
                st.died = Some(Self::fleet_id(host, st.hosts[host].runners[runner].id));
                if self.cfg.variant == FleetVariant::NoGuard {
                    // Its command died with it, what the command started did not.
                    st.hosts[host].runners.remove(runner);
                } else {
                    // The guard sees its runner's pipe close and kills the whole unit.
                    Self::kill_runner(&mut st, host, runner);
                }
            }
            FleetAction::Crash { host } => {
                let h = &mut st.hosts[host];
                h.up = false;
                h.cut = false;
                h.runners.clear();
                h.works.clear();
                h.dispatching.clear();
                st.crashes_left -= 1;
            }
            FleetAction::Drain { host } => {
                st.hosts[host].drained = true;
                st.drains_left -= 1;
            }
        }
        Some(st)
    }

    /// Live works fleet-wide (the ground truth, not what any host believes).
    pub fn live_works(st: &FleetState) -> impl Iterator<Item = (usize, &LiveWork)> {
        st.hosts
            .iter()
            .enumerate()
            .flat_map(|(h, host)| host.works.iter().map(move |w| (h, w)))
    }

    /// S1 and S2 fleet-wide hold. A state that breaks them ends its path (the trail stops at
    /// the first violation); F1 and F2 are checked on every state but do not end it, so a broken
    /// lease decision is followed to the S1 or S2 counterexample it leads to.
    pub fn safe(&self, st: &FleetState) -> bool {
        s1_fleet_cap(self, st) && s2_fleet_one_work_per_turn(self, st)
    }

    /// Nothing but a fault (a cut, a crash) can happen any more, and not because the time
    /// horizon cut it short. Faults left in the budget do not keep a state from being at rest:
    /// S9 is asserted on the paths that never use them too.
    pub fn quiescent(&self, st: &FleetState) -> bool {
        let mut actions = Vec::new();
        self.actions(st, &mut actions);
        actions.retain(|a| {
            !matches!(
                a,
                FleetAction::Cut { .. }
                    | FleetAction::Crash { .. }
                    | FleetAction::RunnerDies { .. }
                    | FleetAction::Drain { .. }
            )
        });
        self.safe(st)
            && actions.is_empty()
            && !(st.now_db_millis >= self.cfg.horizon_ticks * TICK_MILLIS && Self::time_matters(st))
    }
}

/// Property names, as spec/invariants.md names them.
pub mod names {
    pub const S1: &str = "S1 fleet-wide cap over work";
    pub const S2: &str = "S2 fleet-wide one live work per turn";
    pub const F1: &str = "F1 a live work's runner holds an unexpired lease";
    pub const F2: &str = "F2 a renewal changes only its sender's lease";
    pub const S9: &str = "S9 every turn ends once the partition healed";
    pub const STOLEN: &str = "a host replaced an expired executor of another host";
    pub const FENCED: &str = "a cut-off runner fenced itself";
    pub const DRAINED_AFTER_PARTITION: &str = "drained after a partition healed";
    pub const TAKE_OVER_AHEAD: &str = "a take-over ran ahead of its first publish (retried)";
    pub const RUNNER_DIED_STOLEN: &str =
        "a runner died on a live host and another host took its slot after the expiry";
    pub const F5: &str = "F5 a drained host starts no turn";
    pub const F3: &str = "F3 no host takes a row from a process whose lease has not expired";
    pub const DRAINED_ELSEWHERE: &str = "a turn submitted on a drained host ran on another";
}

fn s1_fleet_cap(model: &FleetModel, st: &FleetState) -> bool {
    FleetModel::live_works(st).count() <= model.cfg.cap
}

fn s2_fleet_one_work_per_turn(_: &FleetModel, st: &FleetState) -> bool {
    FleetModel::live_works(st).all(|(_, w)| {
        FleetModel::live_works(st)
            .filter(|(_, o)| o.key == w.key)
            .count()
            <= 1
    })
}

fn f1_live_work_holds_unexpired_lease(_: &FleetModel, st: &FleetState) -> bool {
    FleetModel::live_works(st).all(|(h, w)| {
        st.leases
            .lease_of(&FleetModel::fleet_id(h, w.runner))
            .is_some_and(|l| !l.is_expired(st.now_db_millis))
    })
}

fn f2_renewal_is_the_owners(_: &FleetModel, st: &FleetState) -> bool {
    st.violations & violation::RENEWED_ANOTHERS_LEASE == 0
}

fn f5_drained_host_starts_nothing(_: &FleetModel, st: &FleetState) -> bool {
    st.violations & violation::STARTED_ON_DRAINED == 0
}

fn f3_no_steal_before_expiry(_: &FleetModel, st: &FleetState) -> bool {
    st.violations & violation::STOLE_FROM_LIVE_LEASE == 0
}

/// A child can attempt its take-over (its host reaches the database) while its dispatcher has
/// not published yet and its retry window is open: the attempt finds no lease and is retried.
fn take_over_ahead_of_publish(_: &FleetModel, st: &FleetState) -> bool {
    st.hosts.iter().any(|h| {
        h.up && !h.cut
            && h.runners.iter().any(|r| {
                r.pc == RunnerPc::Starting
                    && h.local_millis < r.fence_base_local_millis + TAKE_OVER_RETRY_MILLIS
                    && h.dispatching.iter().any(|d| d.child == r.id)
            })
    })
}

fn s9_every_turn_ends(model: &FleetModel, st: &FleetState) -> bool {
    !model.quiescent(st) || (st.submitted == st.ended && st.queue.entries.is_empty())
}

impl Model for FleetModel {
    type State = FleetState;
    type Action = FleetAction;

    fn init_states(&self) -> Vec<FleetState> {
        vec![self.initial_state()]
    }

    fn actions(&self, st: &FleetState, actions: &mut Vec<FleetAction>) {
        // A state that already breaks a safety property ends its path.
        if !self.safe(st) {
            return;
        }
        // Between a dispatcher's spawn and its publishes (a gap of milliseconds) only the two
        // of them move: the publishes, and the child's take-over running ahead of them.
        if st.hosts.iter().any(|h| h.up && !h.dispatching.is_empty()) {
            for (host, h) in st.hosts.iter().enumerate().filter(|(_, h)| h.up && !h.cut) {
                for dispatch in 0..h.dispatching.len() {
                    actions.push(FleetAction::Publish { host, dispatch });
                }
                for (runner, r) in h.runners.iter().enumerate() {
                    let pending = h.dispatching.iter().any(|d| d.child == r.id);
                    if pending && r.pc == RunnerPc::Starting {
                        actions.push(FleetAction::TakeOver { host, runner });
                    }
                }
            }
            return;
        }
        for turn in 1..=self.cfg.turns {
            let host = self.cfg.host_of_turn(turn);
            if st.submitted & bit(turn) == 0 && FleetModel::connected(st, host) {
                actions.push(FleetAction::Submit { turn });
            }
        }
        let mut fence_due = false;
        for (host, h) in st.hosts.iter().enumerate() {
            if !h.up {
                continue;
            }
            let connected = !h.cut;
            for (runner, r) in h.runners.iter().enumerate() {
                if self.fence_due(st, host, r) {
                    fence_due = true;
                    actions.push(FleetAction::Fence { host, runner });
                }
                match r.pc {
                    RunnerPc::Starting if connected => {
                        actions.push(FleetAction::TakeOver { host, runner });
                    }
                    RunnerPc::Running { .. } => {
                        actions.push(FleetAction::WorkExits { host, runner });
                    }
                    RunnerPc::Exited if connected => {
                        actions.push(FleetAction::Finish { host, runner });
                    }
                    _ => {}
                }
                if connected && st.runner_crashes_left > 0 {
                    actions.push(FleetAction::RunnerDies { host, runner });
                }
                match r.message {
                    Some(Message::Request { .. }) if connected => {
                        actions.push(FleetAction::DeliverRequest { host, runner });
                    }
                    Some(Message::Reply { .. }) if connected => {
                        actions.push(FleetAction::DeliverReply { host, runner });
                    }
                    Some(_) if h.cut => actions.push(FleetAction::LoseMessage { host, runner }),
                    _ => {}
                }
            }
            if connected && self.reconciled(st, host).is_some() {
                actions.push(FleetAction::Reconcile { host });
            }
            if h.cut {
                if self.cfg.variant != FleetVariant::PartitionNeverHeals {
                    actions.push(FleetAction::Heal { host });
                }
            } else if st.partitions_left > 0 {
                actions.push(FleetAction::Cut { host });
            }
            if st.crashes_left > 0 {
                actions.push(FleetAction::Crash { host });
            }
            if st.drains_left > 0 && !h.drained {
                actions.push(FleetAction::Drain { host });
            }
        }
        // Time does not pass a due fence, nor the horizon, nor when nothing waits for it.
        if !fence_due
            && st.now_db_millis < self.cfg.horizon_ticks * TICK_MILLIS
            && FleetModel::time_matters(st)
        {
            actions.push(FleetAction::Tick { slow: None });
            if st.slow_left > 0 {
                for (host, h) in st.hosts.iter().enumerate() {
                    if h.up {
                        actions.push(FleetAction::Tick { slow: Some(host) });
                    }
                }
            }
        }
    }

    fn next_state(&self, last: &FleetState, action: FleetAction) -> Option<FleetState> {
        self.apply(last, &action)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(names::S1, s1_fleet_cap),
            Property::always(names::S2, s2_fleet_one_work_per_turn),
            Property::always(names::F1, f1_live_work_holds_unexpired_lease),
            Property::always(names::F2, f2_renewal_is_the_owners),
            Property::always(names::F3, f3_no_steal_before_expiry),
            Property::always(names::F5, f5_drained_host_starts_nothing),
            Property::always(names::S9, s9_every_turn_ends),
            Property::sometimes(names::STOLEN, |_, st: &FleetState| st.stolen),
            Property::sometimes(names::FENCED, |_, st: &FleetState| st.fenced_cut_off),
            Property::sometimes(names::TAKE_OVER_AHEAD, take_over_ahead_of_publish),
            Property::sometimes(names::RUNNER_DIED_STOLEN, |_, st: &FleetState| {
                st.dead_runner_replaced
            }),
            Property::sometimes(names::DRAINED_ELSEWHERE, |_, st: &FleetState| {
                st.drained_turn_started_elsewhere
            }),
            Property::sometimes(
                names::DRAINED_AFTER_PARTITION,
                |m: &FleetModel, st: &FleetState| {
                    st.partitions_left < m.cfg.partitions
                        && st.hosts.iter().all(|h| !h.cut)
                        && st.submitted != 0
                        && m.quiescent(st)
                        && st.submitted == st.ended
                },
            ),
        ]
    }
}

/// One line per action of a counterexample trail: the action, then the clocks, the leases and
/// the live works after it.
pub fn render_trail(
    model: &FleetModel,
    path: Vec<(FleetState, Option<FleetAction>)>,
) -> Vec<String> {
    let _ = model;
    path.iter()
        .enumerate()
        .map(|(i, (st, action))| {
            let leases: Vec<String> = st
                .leases
                .leases
                .iter()
                .map(|l| {
                    format!(
                        "{}/pid{} until {}",
                        l.holder.host,
                        l.holder.process.pid,
                        l.expires_at_db_millis / TICK_MILLIS
                    )
                })
                .collect();
            let works: Vec<String> = FleetModel::live_works(st)
                .map(|(h, w)| format!("host{h}:{} by pid{}", w.key, w.runner.pid))
                .collect();
            let clocks: Vec<String> = st
                .hosts
                .iter()
                .map(|h| {
                    format!(
                        "{}{}",
                        (h.local_millis % 86_400_000) / TICK_MILLIS,
                        if !h.up {
                            " down"
                        } else if h.cut {
                            " cut"
                        } else {
                            ""
                        }
                    )
                })
                .collect();
            format!(
                "{i:>3}. db {} hosts [{}] leases [{}] works [{}]{}",
                st.now_db_millis / TICK_MILLIS,
                clocks.join(", "),
                leases.join(", "),
                works.join(", "),
                action
                    .as_ref()
                    .map(|a| format!("  then {a:?}"))
                    .unwrap_or_default()
            )
        })
        .collect()
}
