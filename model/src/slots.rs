//! The slot model: every interleaving of submitters, spawned runners and reconcilers, with crashes
//! and pid reuse, driven through the production slot core (`core/src/slots`).
//!
//! The model owns only what production gets from the world: a process table (which answers the
//! core's liveness questions), a counter of fresh tokens, the turn result files (`is_settled`), and
//! each process's program counter. Every decision about the queue is a call into the core, in the
//! critical sections production makes (one action of the model = one section under the queue lock,
//! or one step outside it such as a spawn), so other processes interleave between them.
//!
//! Processes and their programs (mirroring the shell):
//! - a **submitter** submits its turns one after the other: `L1` enqueue + reserve (+ park when
//!   saturated), then, when it acquired a slot, spawns a child outside the lock, then the two
//!   publishes of the handoff `L2` (bind) and `L3` (fenced second publish). A spawn may fail (the
//!   reserver releases), or start a child whose identity the reserver cannot record (it releases
//!   all the same, while the child lives on and tries its take-over).
//! - a spawned **runner** takes its slot over, runs the command, writes the result, then in one
//!   section leaves the queue and starts the next parked row (as a reserver, with its own pid
//!   excluded), and finishes that handoff like a submitter.
//! - a **reconciler** loops over `reconcile_step` and finishes each spawn it asks for. It can start
//!   at any time while others work (bounded by a budget), and once more whenever everything else
//!   has stopped and the queue changed since the last complete pass (that last pass is what the
//!   quiescent properties S6 and S9 speak about). With [`SlotConfig::runner_reconciles`], a runner
//!   whose command is running may also run a reconcile pass on the side; that is how a reconciler
//!   that holds a slot itself is modelled (the case where excluding the reconciler's pid goes wrong).
//! - the **environment**: any model process may die at any step (crash budget); a dead pid may be
//!   taken by an unrelated process, or by a newly spawned child, with another start time (reuse
//!   budget); observations of the old identity on a reused pid then come back either `Gone` or
//!   `Ambiguous` (chosen once at reuse time; ambiguous counts as live).
//!
//! Submissions: every submitter submits every turn once, in rotated order, so submitters contend
//! on the same turns (duplicate enqueues, pending outcomes, steals). A duplicate of a turn that
//! already wrote its result is dropped before the queue, as the shell's dedupe drops a late retry
//! of an ended turn; without that a late duplicate would re-run a finished turn as a new row.
//!
//! Bounds: the submissions (submitters × turns), the crash, reuse and reconcile budgets. Spawns
//! need no budget of their own: every spawn follows a reservation of a row that needs a runner,
//! rows are created only by submissions, and a row needs another runner only after a crash or a
//! spawn fault, both of which spend the crash budget.
//!
//! Reductions (all sound for the properties checked): a submitter is not crashed between two
//! submissions (it holds nothing there; that only means fewer submissions, which smaller
//! configurations cover); an unrelated process reusing a pid is only modelled with ambiguous
//! observations (observed `Gone` it is indistinguishable from no reuse); after each step the state
//! forgets finished roles, dead processes nothing refers to, retired tokens no role holds and
//! results of rows that left ([`SlotModel`]'s `normalize`). A state that already breaks a safety
//! property ends its path, so reported trails stop at the first violation. No symmetry reduction:
//! submitters differ (clocks that run behind, rotated scripts), so the state has no cheap
//! permutation symmetry to exploit.

use stateright::{Model, Property};
use std::collections::BTreeSet;
use std::fmt;
use tollgate_core::slots::{
    complete_runner_spawn_first, complete_runner_spawn_second, enqueue, finish_turn,
    occupied_runner_slots, park, reconcile_step_with, release_runner_slot,
    reserve_runner_slot_with, start_next_parked_with, take_over_reserved_slot,
    token_fenced_row_after_bind, EnqueueOutcome, Liveness, Observation, ProcessIdentity,
    QueueEntry, QueueState, ReconcileStep, ReserveOutcome, Reserving, RowState, SlotError,
    SlotRules, SlotToken, StartNext, TakeOver, TurnKey,
};
use uuid::Uuid;

/// The one task all turns belong to (the protocol only cares about turn keys).
pub const TASK: &str = "job";

/// Which core the model drives: production, or one deliberately broken variant (the teeth).
///
/// The broken variants live here, never in `src/`; each test in `tests/model_slots.rs` expects the
/// checker to reject its variant with a counterexample for the property it breaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Variant {
    /// The production core, unchanged.
    Production,
    /// Occupancy counts reservations once per unique reserver pid instead of once each: several
    /// outstanding spawns of one process count as one slot (breaks S1).
    OccupancyPerReserverPid,
    /// `exclude_reserver` also drops the reservations whose reserver has that pid (breaks S1).
    ExcludeDropsReservations,
    /// Reconcile excludes its own pid, so a reconciler that holds a slot frees it (breaks S1).
    ReconcileExcludesItself,
    /// Release clears a reservation even after its child was bound (breaks S4).
    ReleaseAfterBind,
    /// Take-over adopts the row whatever the token and holders say (breaks S3, then S2).
    UnconditionalTakeOver,
}

impl Variant {
    pub const BROKEN: [Variant; 5] = [
        Variant::OccupancyPerReserverPid,
        Variant::ExcludeDropsReservations,
        Variant::ReconcileExcludesItself,
        Variant::ReleaseAfterBind,
        Variant::UnconditionalTakeOver,
    ];
}

/// The size and the budgets of one model instance.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlotConfig {
    /// Submitting processes.
    pub submitters: usize,
    /// Turns: each submitter submits every turn once (rotated, so submitters contend), which makes
    /// duplicate enqueues and the pending outcomes reachable. At most 8 (a bit set tracks them).
    pub turns: u32,
    /// Worker slots (`workers`).
    pub cap: usize,
    /// Deaths of model processes plus spawn faults, in total.
    pub crash_budget: u8,
    /// Pid reuses (by an unrelated process, or by a spawned child), in total.
    pub reuse_budget: u8,
    /// Reconciler runs started while other processes still work. The final pass after everything
    /// else stopped is not counted.
    pub reconcile_budget: u8,
    /// Children may be spawned on a reused pid (spends the reuse budget).
    pub children_reuse_pids: bool,
    /// A runner whose command runs may also run a reconcile pass (spends the reconcile budget).
    pub runner_reconciles: bool,
    /// A submitter submits its turns from concurrent threads (like a serving process) instead of
    /// one after the other; several outstanding spawns of one process become reachable.
    pub concurrent_submissions: bool,
    pub variant: Variant,
}

impl SlotConfig {
    /// The default instance: crashes and pid reuse on, one reconcile run while others work.
    pub fn new(submitters: usize, turns: u32, cap: usize) -> Self {
        SlotConfig {
            submitters,
            turns,
            cap,
            crash_budget: 1,
            reuse_budget: 1,
            reconcile_budget: 1,
            children_reuse_pids: false,
            runner_reconciles: false,
            concurrent_submissions: false,
            variant: Variant::Production,
        }
    }

    /// No crashes, no spawn faults and no pid reuse.
    pub fn without_faults(mut self) -> Self {
        self.crash_budget = 0;
        self.reuse_budget = 0;
        self
    }

    pub fn with_variant(mut self, variant: Variant) -> Self {
        self.variant = variant;
        self
    }

    /// The turn submitter `submitter` submits as its `index`-th submission.
    pub fn script(&self, submitter: usize, index: usize) -> TurnKey {
        let turns = self.turns.max(1) as usize;
        let turn = (submitter + index) % turns;
        TurnKey::new(TASK, turn as u32 + 1)
    }

    /// The submitter's clock: later submitters run behind, so enqueue coalescing is exercised.
    pub fn clock_millis(&self, submitter: usize) -> u64 {
        1_000 - 100 * submitter as u64
    }
}

impl fmt::Display for SlotConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} submitters x {} turns x cap {} (crashes {}, reuses {}, reconciles {}{}{}{}, {:?})",
            self.submitters,
            self.turns,
            self.cap,
            self.crash_budget,
            self.reuse_budget,
            self.reconcile_budget,
            if self.children_reuse_pids {
                ", children reuse pids"
            } else {
                ""
            },
            if self.runner_reconciles {
                ", runners reconcile"
            } else {
                ""
            },
            if self.concurrent_submissions {
                ", concurrent submissions"
            } else {
                ""
            },
            self.variant
        )
    }
}

/// What a process is, for reports and for the environment's choices.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProcKind {
    Submitter(u8),
    Runner,
    Reconciler,
    /// A process outside the system that happens to take a dead pid.
    Unrelated,
}

/// One entry of the model's process table.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Proc {
    pub id: ProcessIdentity,
    pub kind: ProcKind,
    pub alive: bool,
    /// Observations of older identities on this pid come back `Ambiguous` instead of `Gone`.
    pub masks_older: bool,
}

/// Where a role continues once a handoff it started is over.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Then {
    /// The submitter's next submission (index into its script).
    Submit(u8),
    Exit,
    Reconcile,
}

/// A role's program counter. A process has one role, or two for a runner that reconciles.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Pc {
    /// Submit script entry `next` (L1).
    Submit {
        next: u8,
    },
    /// A submitter thread that submits one turn (concurrent submissions).
    SubmitOne {
        turn: u32,
    },
    /// Holds the slot under `token`: spawn the child outside the lock.
    Spawn {
        key: TurnKey,
        token: SlotToken,
        snapshot: QueueEntry,
        then: Then,
    },
    /// The spawn failed from the reserver's point of view: give the slot back (a separate
    /// section, so a child that did start may take over first).
    Release {
        key: TurnKey,
        token: SlotToken,
        then: Then,
    },
    /// First publish of the handoff (L2).
    Bind {
        key: TurnKey,
        token: SlotToken,
        child: ProcessIdentity,
        snapshot: QueueEntry,
        then: Then,
    },
    /// Second, fenced publish of the handoff (L3).
    Handoff {
        key: TurnKey,
        token: SlotToken,
        child: ProcessIdentity,
        snapshot: QueueEntry,
        then: Then,
    },
    /// A spawned child: take the slot over.
    TakeOver {
        key: TurnKey,
        token: SlotToken,
    },
    /// The command of the row `queue_id` runs.
    Running {
        key: TurnKey,
        queue_id: u64,
    },
    /// The result is written; leave the queue and start the next parked row.
    Written {
        key: TurnKey,
    },
    /// The next reconcile step.
    Reconcile,
    Done,
}

/// One thread of control on a process.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Role {
    pub proc: u8,
    pub pc: Pc,
}

/// Things that happened, for the `sometimes` properties (a bit set).
pub mod event {
    pub const PENDING_LIVE_TOKEN: u16 = 1;
    pub const STEAL: u16 = 1 << 1;
    pub const PENDING_NIL: u16 = 1 << 2;
    pub const SATURATED: u16 = 1 << 3;
    pub const ACQUIRED: u16 = 1 << 4;
    /// A call with a retired token was refused while another token held the row.
    pub const STOLEN_TOKEN_REFUSED: u16 = 1 << 5;
    pub const TAKEOVER_DEAD_PARENT: u16 = 1 << 6;
    pub const CRASH_BETWEEN_PUBLISHES: u16 = 1 << 7;
}

/// Violations seen on a transition (a bit set); the `always` properties read them.
pub mod violation {
    /// A retired token changed the queue, or a refused call changed it anyway (S3).
    pub const RETIRED_TOKEN_ACTED: u8 = 1;
    /// A reservation with a live bound child vanished without its child becoming the runner, or a
    /// release after bind changed the queue (S4).
    pub const BOUND_CHILD_DROPPED: u8 = 1 << 1;
    /// A duplicate enqueue changed the queue, or `next_queue_id` fell (S7).
    pub const FIFO: u8 = 1 << 2;
    /// A token was installed twice or is not one the model handed out (S8).
    pub const TOKEN_REUSED: u8 = 1 << 3;
    /// The core refused a call the shell's sequence never makes wrongly (e.g. enqueue failed).
    pub const CORE_ERROR: u8 = 1 << 4;
    /// A row left the queue although its turn never wrote a result (S9).
    pub const TURN_LOST: u8 = 1 << 5;
}

/// The whole model state. `queue` is the real `QueueState`, so a replay can compare it with the
/// `queue.json` a real run publishes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SlotState {
    pub queue: QueueState,
    pub procs: Vec<Proc>,
    pub roles: Vec<Role>,
    /// The next fresh token is `token_from_counter(next_token)`.
    pub next_token: u32,
    /// Tokens that left the queue (stolen, released, parked away or cleared) and that some role
    /// still holds: the only ones that could try to act again (S3).
    pub retired: Vec<SlotToken>,
    /// Rows (`queue_id`, sorted) still queued whose turn wrote its result.
    pub settled: Vec<u64>,
    /// Handoffs whose reserver died between the two publishes: the row (`queue_id`), its token
    /// and the bound child (S5).
    pub orphaned_handoffs: Vec<(u64, SlotToken, ProcessIdentity)>,
    /// Turns (bit `turn - 1`) that wrote a result at least once: a later duplicate submission of
    /// such a turn is dropped before the queue (the shell's dedupe knows the turn has ended).
    pub finished_turns: u8,
    pub crashes_left: u8,
    pub reuses_left: u8,
    pub reconciles_left: u8,
    /// A reconcile pass ended (idle or saturated) and nothing happened since.
    pub reconciled_clean: bool,
    pub events: u16,
    pub violations: u8,
}

/// One step of the model.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum SlotAction {
    /// The role's next step; for a role holding a slot, a spawn that succeeds on a fresh pid.
    Step { role: u8 },
    /// The spawn fails; the reserver releases its slot.
    SpawnFails { role: u8 },
    /// The child starts but the reserver cannot record its identity and releases as on a failure.
    SpawnUnrecorded { role: u8 },
    /// The spawn succeeds on a reused pid.
    SpawnOnReusedPid { role: u8, pid: u32, ambiguous: bool },
    /// A model process dies (all its roles stop).
    Crash { proc: u8 },
    /// An unrelated process takes a dead pid.
    ReusePid { pid: u32, ambiguous: bool },
    /// An unrelated process exits.
    UnrelatedExits { proc: u8 },
    /// A `tollgate reconcile` process starts.
    StartReconciler,
    /// A runner whose command runs starts a reconcile pass on the side.
    RunnerReconciles { role: u8 },
}

/// Fresh tokens from the model's counter: distinct, non-nil UUIDs.
pub fn token_from_counter(counter: u32) -> SlotToken {
    let uuid = Uuid::from_u128(0x0000_0000_0000_7000_8000_0000_0000_0000 | u128::from(counter));
    SlotToken::new(uuid).expect("the counter's UUIDs have version bits set, never nil")
}

/// The model's process table as the core sees it.
pub struct ProcTable<'a>(pub &'a [Proc]);

impl Liveness for ProcTable<'_> {
    fn observe(&self, identity: &ProcessIdentity) -> Observation {
        match self.0.iter().find(|p| p.alive && p.id.pid == identity.pid) {
            None => Observation::Gone,
            Some(p) if p.id == *identity => Observation::Matching,
            Some(p) if p.masks_older => Observation::Ambiguous,
            Some(_) => Observation::Gone,
        }
    }
}

/// The model: a configuration; the state is [`SlotState`].
#[derive(Clone, Debug)]
pub struct SlotModel {
    pub cfg: SlotConfig,
}

impl SlotModel {
    pub fn new(cfg: SlotConfig) -> Self {
        SlotModel { cfg }
    }
}

// ---------------------------------------------------------------------------------------------
// The broken variants (teeth). Each replaces exactly one decision of the core.
// ---------------------------------------------------------------------------------------------

/// The rules the model passes to the core's `_with` entry points.
struct VariantRules(Variant);

impl SlotRules for VariantRules {
    fn occupied_runner_slots(
        &self,
        state: &QueueState,
        liveness: &impl Liveness,
        exclude_reserver: Option<u32>,
        reserving: Option<Reserving<'_>>,
    ) -> usize {
        match self.0 {
            Variant::OccupancyPerReserverPid | Variant::ExcludeDropsReservations => {
                broken_occupied_runner_slots(self.0, state, liveness, exclude_reserver, reserving)
            }
            _ => occupied_runner_slots(state, liveness, exclude_reserver, reserving),
        }
    }

    fn reconcile_exclude_reserver(&self, reconciler: ProcessIdentity) -> Option<u32> {
        match self.0 {
            Variant::ReconcileExcludesItself => Some(reconciler.pid),
            _ => None,
        }
    }
}

/// A copy of `occupied_runner_slots` with one of two bugs, chosen by `variant`.
fn broken_occupied_runner_slots(
    variant: Variant,
    state: &QueueState,
    liveness: &impl Liveness,
    exclude_reserver: Option<u32>,
    reserving: Option<Reserving<'_>>,
) -> usize {
    // The identity half is production's; only the reservation count is broken.
    let identities =
        tollgate_core::slots::counted_identities(state, liveness, exclude_reserver, reserving);
    let excluded = |id: &ProcessIdentity| exclude_reserver == Some(id.pid);
    let reservations = state
        .entries
        .iter()
        .filter_map(|e| e.slot_reservation.as_ref());
    let counted = match variant {
        // BUG: one count per reserver pid, not per reservation.
        Variant::OccupancyPerReserverPid => reservations
            .map(|r| r.reserver.pid)
            .collect::<BTreeSet<_>>()
            .len(),
        // BUG: the excluded pid's reservations are dropped too.
        _ => reservations.filter(|r| !excluded(&r.reserver)).count(),
    };
    identities + counted
}

/// A copy of `release_runner_slot` without the "no child bound" condition.
fn release_even_after_bind(
    state: &mut QueueState,
    key: &TurnKey,
    token: SlotToken,
    reserver: ProcessIdentity,
) -> bool {
    let Ok(row) = state.row_mut(key) else {
        return false;
    };
    // BUG: `r.child.is_none()` is missing.
    let releasable = row
        .slot_reservation
        .as_ref()
        .is_some_and(|r| r.token == token && r.reserver == reserver);
    if releasable {
        row.slot_reservation = None;
        row.state = RowState::Parked;
    }
    releasable
}

/// A copy of `take_over_reserved_slot` that adopts the row whatever it finds.
fn take_over_unconditionally(
    state: &mut QueueState,
    key: &TurnKey,
    me: ProcessIdentity,
    liveness: &impl Liveness,
) -> Result<TakeOver, SlotError> {
    // BUG: no token check, no bound-child check, no live-holder check.
    let reserver_dead = state
        .row(key)
        .ok_or_else(|| SlotError::UnknownRow { key: key.clone() })?
        .slot_reservation
        .as_ref()
        .is_none_or(|r| !liveness.is_live(&r.reserver));
    let row = state.row_mut(key)?;
    row.state = RowState::Dispatching { dispatch_owner: me };
    if reserver_dead {
        row.slot_reservation = None;
    } else if let Some(r) = row.slot_reservation.as_mut() {
        r.child = Some(me);
    }
    state.set_runner(key, me, false);
    Ok(TakeOver::Running {
        adopted_dead_parent: reserver_dead,
    })
}

// ---------------------------------------------------------------------------------------------
// Transitions.
// ---------------------------------------------------------------------------------------------

fn turn_bit(key: &TurnKey) -> u8 {
    1u8.checked_shl(key.turn.saturating_sub(1)).unwrap_or(0)
}

fn identities_of(entry: &QueueEntry) -> Vec<ProcessIdentity> {
    let mut ids = match entry.state {
        RowState::Waiting {
            enqueue_owner,
            owner,
        } => vec![enqueue_owner, owner],
        RowState::Dispatching { dispatch_owner } => vec![dispatch_owner],
        RowState::Parked => Vec::new(),
    };
    if let Some(r) = &entry.slot_reservation {
        ids.push(r.reserver);
        ids.extend(r.child);
    }
    ids
}

fn tokens_of(queue: &QueueState) -> impl Iterator<Item = SlotToken> + '_ {
    queue
        .entries
        .iter()
        .filter_map(|e| e.slot_reservation.as_ref().map(|r| r.token))
}

impl SlotState {
    fn proc_of(&self, role: usize) -> &Proc {
        &self.procs[self.roles[role].proc as usize]
    }

    fn me(&self, role: usize) -> ProcessIdentity {
        self.proc_of(role).id
    }

    fn role_live(&self, role: usize) -> bool {
        self.proc_of(role).alive && self.roles[role].pc != Pc::Done
    }

    /// Some live role that is not a reconciler process's (a runner's side pass counts: it runs
    /// on a working runner).
    fn others_active(&self) -> bool {
        self.roles.iter().any(|r| {
            let p = &self.procs[r.proc as usize];
            p.alive && r.pc != Pc::Done && p.kind != ProcKind::Reconciler
        })
    }

    fn reconciler_running(&self) -> bool {
        self.procs
            .iter()
            .any(|p| p.alive && p.kind == ProcKind::Reconciler)
    }

    /// Pids whose every occupant is dead: the ones a new process may be given again.
    fn free_pids(&self) -> Vec<u32> {
        let pids: BTreeSet<u32> = self.procs.iter().map(|p| p.id.pid).collect();
        pids.into_iter()
            .filter(|pid| !self.procs.iter().any(|p| p.alive && p.id.pid == *pid))
            .collect()
    }

    /// A new process on `pid` (or a fresh pid), with a start time no earlier occupant had.
    fn new_proc(&mut self, kind: ProcKind, pid: Option<u32>, masks_older: bool) -> u8 {
        let pid = pid.unwrap_or_else(|| self.procs.iter().map(|p| p.id.pid).max().unwrap_or(0) + 1);
        let start = self
            .procs
            .iter()
            .filter(|p| p.id.pid == pid)
            .map(|p| p.id.start_time_micros)
            .max()
            .unwrap_or(0)
            + 1;
        self.procs.push(Proc {
            id: ProcessIdentity {
                pid,
                start_time_micros: start,
            },
            kind,
            alive: true,
            masks_older,
        });
        (self.procs.len() - 1) as u8
    }

    fn fresh_token(&self) -> SlotToken {
        token_from_counter(self.next_token)
    }

    /// Records an installed token: it must be the fresh one handed in, which no earlier call got
    /// (the counter only moves on), so it was never installed before (S8).
    fn note_installed(&mut self, token: SlotToken) {
        if token == self.fresh_token() {
            self.next_token += 1;
        } else {
            self.violations |= violation::TOKEN_REUSED;
        }
    }

    fn settled_keys(&self) -> Vec<TurnKey> {
        self.queue
            .entries
            .iter()
            .filter(|e| self.settled.contains(&e.queue_id))
            .map(|e| e.key.clone())
            .collect()
    }

    /// The rows a handoff leaves in: the snapshot the reserver keeps for its fenced publish.
    fn snapshot(&self, key: &TurnKey) -> Option<QueueEntry> {
        self.queue.row(key).cloned()
    }

    fn finish_role(&mut self, role: usize, then: Then) {
        self.roles[role].pc = match then {
            Then::Submit(next) => Pc::Submit { next },
            Then::Exit => Pc::Done,
            Then::Reconcile => Pc::Reconcile,
        };
    }

    /// A process whose roles are all done exits normally.
    fn reap(&mut self, proc: u8) {
        let all_done = self
            .roles
            .iter()
            .filter(|r| r.proc == proc)
            .all(|r| r.pc == Pc::Done);
        if all_done {
            self.procs[proc as usize].alive = false;
        }
    }

    /// A token-bearing call: flags S3 if a retired token changed the queue or a refusal changed it.
    fn check_token_call(
        &mut self,
        key: &TurnKey,
        token: SlotToken,
        before: &QueueState,
        succeeded: bool,
    ) {
        let changed = self.queue != *before;
        let retired = self.retired.contains(&token);
        if changed && (retired || !succeeded) {
            self.violations |= violation::RETIRED_TOKEN_ACTED;
        }
        let superseded = before
            .row(key)
            .and_then(|r| r.slot_reservation.as_ref())
            .is_some_and(|r| r.token != token);
        if retired && !succeeded && superseded {
            self.events |= event::STOLEN_TOKEN_REFUSED;
        }
    }
}

impl SlotModel {
    fn rules(&self) -> VariantRules {
        VariantRules(self.cfg.variant)
    }

    fn release(
        &self,
        st: &mut SlotState,
        key: &TurnKey,
        token: SlotToken,
        me: ProcessIdentity,
    ) -> bool {
        let before = st.queue.clone();
        let bound_live_child = before
            .row(key)
            .and_then(|r| r.slot_reservation.as_ref())
            .and_then(|r| r.child)
            .is_some_and(|c| st.procs.iter().any(|p| p.alive && p.id == c));
        let released = match self.cfg.variant {
            Variant::ReleaseAfterBind => release_even_after_bind(&mut st.queue, key, token, me),
            _ => release_runner_slot(&mut st.queue, key, token, me),
        };
        if bound_live_child && st.queue != before {
            st.violations |= violation::BOUND_CHILD_DROPPED;
        }
        st.check_token_call(key, token, &before, released);
        released
    }

    /// L1 of a detached submit.
    fn submit(&self, st: &mut SlotState, role: usize, submitter: usize, key: TurnKey, then: Then) {
        let me = st.me(role);
        if st.finished_turns & turn_bit(&key) != 0 {
            st.finish_role(role, then);
            return;
        }
        let before = st.queue.clone();
        match enqueue(&mut st.queue, &key, me, self.cfg.clock_millis(submitter)) {
            Ok(EnqueueOutcome::AlreadyQueued { .. }) if st.queue != before => {
                st.violations |= violation::FIFO;
            }
            Ok(_) => {}
            Err(_) => {
                st.violations |= violation::CORE_ERROR;
                st.finish_role(role, then);
                return;
            }
        }
        let fresh = st.fresh_token();
        let outcome = {
            let SlotState { queue, procs, .. } = &mut *st;
            reserve_runner_slot_with(
                &self.rules(),
                queue,
                &key,
                me,
                None,
                self.cfg.cap,
                fresh,
                &ProcTable(procs),
            )
        };
        match outcome {
            Ok(ReserveOutcome::Acquired { token, stolen }) => {
                st.events |= if stolen.is_some() {
                    event::STEAL
                } else {
                    event::ACQUIRED
                };
                st.note_installed(token);
                match st.snapshot(&key) {
                    Some(snapshot) => {
                        st.roles[role].pc = Pc::Spawn {
                            key,
                            token,
                            snapshot,
                            then,
                        }
                    }
                    None => {
                        st.violations |= violation::CORE_ERROR;
                        st.finish_role(role, then);
                    }
                }
            }
            Ok(ReserveOutcome::Saturated) => {
                st.events |= event::SATURATED;
                if park(&mut st.queue, &key).is_err() {
                    st.violations |= violation::CORE_ERROR;
                }
                st.finish_role(role, then);
            }
            Ok(ReserveOutcome::Pending { token }) => {
                st.events |= if token.is_some() {
                    event::PENDING_LIVE_TOKEN
                } else {
                    event::PENDING_NIL
                };
                st.finish_role(role, then);
            }
            Err(_) => {
                st.violations |= violation::CORE_ERROR;
                st.finish_role(role, then);
            }
        }
    }

    fn take_over(&self, st: &mut SlotState, role: usize, key: TurnKey, token: SlotToken) {
        let me = st.me(role);
        let before = st.queue.clone();
        let outcome = {
            let SlotState { queue, procs, .. } = &mut *st;
            match self.cfg.variant {
                Variant::UnconditionalTakeOver => {
                    take_over_unconditionally(queue, &key, me, &ProcTable(procs))
                }
                _ => take_over_reserved_slot(queue, &key, token, me, &ProcTable(procs)),
            }
        };
        let running = matches!(outcome, Ok(TakeOver::Running { .. }));
        st.check_token_call(&key, token, &before, running);
        match outcome {
            Ok(TakeOver::Running {
                adopted_dead_parent,
            }) => {
                if adopted_dead_parent {
                    st.events |= event::TAKEOVER_DEAD_PARENT;
                }
                match st.queue.row(&key) {
                    Some(row) => {
                        let queue_id = row.queue_id;
                        st.roles[role].pc = Pc::Running { key, queue_id };
                    }
                    None => {
                        st.violations |= violation::CORE_ERROR;
                        st.roles[role].pc = Pc::Done;
                    }
                }
            }
            Ok(TakeOver::Refused { .. }) | Err(_) => st.roles[role].pc = Pc::Done,
        }
    }

    fn spawn_child(
        &self,
        st: &mut SlotState,
        role: usize,
        pid: Option<u32>,
        masks_older: bool,
    ) -> ProcessIdentity {
        let Pc::Spawn { key, token, .. } = st.roles[role].pc.clone() else {
            unreachable!("spawn_child is only called for a role holding a slot");
        };
        let proc = st.new_proc(ProcKind::Runner, pid, masks_older);
        st.roles.push(Role {
            proc,
            pc: Pc::TakeOver { key, token },
        });
        st.procs[proc as usize].id
    }

    fn step(&self, st: &mut SlotState, role: usize) {
        let pc = st.roles[role].pc.clone();
        let me = st.me(role);
        match pc {
            Pc::Submit { next } => {
                let ProcKind::Submitter(submitter) = st.proc_of(role).kind else {
                    unreachable!("only submitters submit");
                };
                let submitter = submitter as usize;
                let key = self.cfg.script(submitter, next as usize);
                let then = if (next as u32) + 1 < self.cfg.turns {
                    Then::Submit(next + 1)
                } else {
                    Then::Exit
                };
                self.submit(st, role, submitter, key, then);
            }
            Pc::SubmitOne { turn } => {
                let ProcKind::Submitter(submitter) = st.proc_of(role).kind else {
                    unreachable!("only submitters submit");
                };
                self.submit(
                    st,
                    role,
                    submitter as usize,
                    TurnKey::new(TASK, turn),
                    Then::Exit,
                );
            }
            Pc::Spawn {
                key,
                token,
                snapshot,
                then,
            } => {
                let child = self.spawn_child(st, role, None, false);
                st.roles[role].pc = Pc::Bind {
                    key,
                    token,
                    child,
                    snapshot,
                    then,
                };
            }
            Pc::Release { key, token, then } => {
                self.release(st, &key, token, me);
                st.finish_role(role, then);
            }
            Pc::Bind {
                key,
                token,
                child,
                snapshot,
                then,
            } => {
                let before = st.queue.clone();
                let result = complete_runner_spawn_first(&mut st.queue, &key, token, child);
                st.check_token_call(&key, token, &before, result.is_ok());
                if result.is_ok() {
                    st.roles[role].pc = Pc::Handoff {
                        key,
                        token,
                        child,
                        snapshot,
                        then,
                    };
                } else {
                    st.finish_role(role, then);
                }
            }
            Pc::Handoff {
                key,
                token,
                child,
                snapshot,
                then,
            } => {
                let before = st.queue.clone();
                let result =
                    token_fenced_row_after_bind(&snapshot, token, child).and_then(|expected| {
                        complete_runner_spawn_second(&mut st.queue, &expected, child, false)
                    });
                st.check_token_call(&key, token, &before, result.is_ok());
                st.finish_role(role, then);
            }
            Pc::TakeOver { key, token } => self.take_over(st, role, key, token),
            Pc::Running { key, queue_id } => {
                if let Err(at) = st.settled.binary_search(&queue_id) {
                    st.settled.insert(at, queue_id);
                }
                st.finished_turns |= turn_bit(&key);
                st.roles[role].pc = Pc::Written { key };
            }
            Pc::Written { key } => {
                if finish_turn(&mut st.queue, &key, me).is_err() {
                    st.roles[role].pc = Pc::Done;
                    return;
                }
                let fresh = st.fresh_token();
                let outcome = {
                    let SlotState { queue, procs, .. } = &mut *st;
                    start_next_parked_with(
                        &self.rules(),
                        queue,
                        me,
                        Some(me.pid),
                        self.cfg.cap,
                        fresh,
                        &ProcTable(procs),
                    )
                };
                match outcome {
                    Ok(StartNext::Acquired { key, token }) => {
                        st.note_installed(token);
                        match st.snapshot(&key) {
                            Some(snapshot) => {
                                st.roles[role].pc = Pc::Spawn {
                                    key,
                                    token,
                                    snapshot,
                                    then: Then::Exit,
                                }
                            }
                            None => {
                                st.violations |= violation::CORE_ERROR;
                                st.roles[role].pc = Pc::Done;
                            }
                        }
                    }
                    Ok(_) => st.roles[role].pc = Pc::Done,
                    Err(_) => {
                        st.violations |= violation::CORE_ERROR;
                        st.roles[role].pc = Pc::Done;
                    }
                }
            }
            Pc::Reconcile => {
                let fresh = st.fresh_token();
                let settled = st.settled_keys();
                let outcome = {
                    let SlotState { queue, procs, .. } = &mut *st;
                    reconcile_step_with(
                        &self.rules(),
                        queue,
                        me,
                        self.cfg.cap,
                        fresh,
                        &ProcTable(procs),
                        &|key: &TurnKey| settled.contains(key),
                    )
                };
                match outcome {
                    Ok(ReconcileStep::Spawn { key, token, .. }) => {
                        st.note_installed(token);
                        match st.snapshot(&key) {
                            Some(snapshot) => {
                                st.roles[role].pc = Pc::Spawn {
                                    key,
                                    token,
                                    snapshot,
                                    then: Then::Reconcile,
                                }
                            }
                            None => {
                                st.violations |= violation::CORE_ERROR;
                                st.roles[role].pc = Pc::Done;
                            }
                        }
                    }
                    Ok(ReconcileStep::Idle) | Ok(ReconcileStep::Saturated) => {
                        st.roles[role].pc = Pc::Done;
                    }
                    Ok(_) => {}
                    Err(_) => {
                        st.violations |= violation::CORE_ERROR;
                        st.roles[role].pc = Pc::Done;
                    }
                }
            }
            Pc::Done => {}
        }
    }

    /// Applies `action` to a copy of `last`, then runs the transition checks.
    fn apply(&self, last: &SlotState, action: &SlotAction) -> SlotState {
        let mut st = last.clone();
        let mut clean_pass = false;
        match *action {
            SlotAction::Step { role } => {
                let role = role as usize;
                let was_reconcile = st.roles[role].pc == Pc::Reconcile;
                self.step(&mut st, role);
                clean_pass = was_reconcile && st.roles[role].pc == Pc::Done;
                let proc = st.roles[role].proc;
                st.reap(proc);
            }
            SlotAction::SpawnFails { role } | SlotAction::SpawnUnrecorded { role } => {
                let role = role as usize;
                st.crashes_left -= 1;
                if matches!(action, SlotAction::SpawnUnrecorded { .. }) {
                    self.spawn_child(&mut st, role, None, false);
                }
                let Pc::Spawn {
                    key, token, then, ..
                } = st.roles[role].pc.clone()
                else {
                    unreachable!("spawn faults are only offered to roles holding a slot");
                };
                st.roles[role].pc = Pc::Release { key, token, then };
            }
            SlotAction::SpawnOnReusedPid {
                role,
                pid,
                ambiguous,
            } => {
                let role = role as usize;
                st.reuses_left -= 1;
                let Pc::Spawn {
                    key,
                    token,
                    snapshot,
                    then,
                } = st.roles[role].pc.clone()
                else {
                    unreachable!("spawns are only offered to roles holding a slot");
                };
                let child = self.spawn_child(&mut st, role, Some(pid), ambiguous);
                st.roles[role].pc = Pc::Bind {
                    key,
                    token,
                    child,
                    snapshot,
                    then,
                };
            }
            SlotAction::Crash { proc } => {
                st.crashes_left -= 1;
                st.procs[proc as usize].alive = false;
                for role in st.roles.iter_mut().filter(|r| r.proc == proc) {
                    if let Pc::Handoff {
                        token,
                        child,
                        snapshot,
                        ..
                    } = &role.pc
                    {
                        st.events |= event::CRASH_BETWEEN_PUBLISHES;
                        st.orphaned_handoffs
                            .push((snapshot.queue_id, *token, *child));
                    }
                    role.pc = Pc::Done;
                }
            }
            SlotAction::ReusePid { pid, ambiguous } => {
                st.reuses_left -= 1;
                st.new_proc(ProcKind::Unrelated, Some(pid), ambiguous);
            }
            SlotAction::UnrelatedExits { proc } => {
                st.procs[proc as usize].alive = false;
            }
            SlotAction::StartReconciler => {
                if st.others_active() {
                    st.reconciles_left -= 1;
                }
                let proc = st.new_proc(ProcKind::Reconciler, None, false);
                st.roles.push(Role {
                    proc,
                    pc: Pc::Reconcile,
                });
            }
            SlotAction::RunnerReconciles { role } => {
                st.reconciles_left -= 1;
                let proc = st.roles[role as usize].proc;
                st.roles.push(Role {
                    proc,
                    pc: Pc::Reconcile,
                });
            }
        }
        self.check_transition(last, &mut st);
        st.reconciled_clean = clean_pass;
        Self::normalize(&mut st);
        st
    }

    /// Checks that compare the state before and after one step.
    fn check_transition(&self, before: &SlotState, st: &mut SlotState) {
        // S3: tokens that left the queue are retired for good.
        let after: BTreeSet<SlotToken> = tokens_of(&st.queue).collect();
        for token in tokens_of(&before.queue) {
            if !after.contains(&token) && !st.retired.contains(&token) {
                st.retired.push(token);
            }
        }
        // S4: a reservation with a live bound child only goes when that child is the runner.
        for entry in &before.queue.entries {
            let Some(child) = entry.slot_reservation.as_ref().and_then(|r| r.child) else {
                continue;
            };
            if !st.procs.iter().any(|p| p.alive && p.id == child) {
                continue;
            }
            let Some(row) = st.queue.row(&entry.key) else {
                continue;
            };
            let still_bound = row
                .slot_reservation
                .as_ref()
                .is_some_and(|r| r.child == Some(child));
            let is_runner = st.queue.runner(&entry.key).map(|r| r.identity) == Some(child);
            if !still_bound && !is_runner {
                st.violations |= violation::BOUND_CHILD_DROPPED;
            }
        }
        // S7: queue ids are never handed out twice.
        if st.queue.next_queue_id < before.queue.next_queue_id {
            st.violations |= violation::FIFO;
        }
        // S9: a row only leaves once its turn wrote its result.
        for entry in &before.queue.entries {
            if st.queue.row(&entry.key).map(|r| r.queue_id) != Some(entry.queue_id)
                && st.settled.binary_search(&entry.queue_id).is_err()
            {
                st.violations |= violation::TURN_LOST;
            }
        }
    }

    /// Forgets what can no longer matter, so histories that differ only there meet in one state:
    /// finished roles, dead processes nothing refers to, results of rows that left, retired
    /// tokens no role holds, and handoffs whose child died or whose row left.
    ///
    /// Sound because a forgotten identity is never observed again (the core only observes
    /// identities found in the queue or passed in by a role), a forgotten token is never passed to
    /// the core again, and new processes get start times above any kept one on the same pid.
    fn normalize(st: &mut SlotState) {
        st.roles.retain(|r| r.pc != Pc::Done);
        let mut referenced: BTreeSet<ProcessIdentity> = BTreeSet::new();
        let mut held: BTreeSet<SlotToken> = BTreeSet::new();
        for e in &st.queue.entries {
            match e.state {
                RowState::Waiting {
                    enqueue_owner,
                    owner,
                } => {
                    referenced.insert(enqueue_owner);
                    referenced.insert(owner);
                }
                RowState::Dispatching { dispatch_owner } => {
                    referenced.insert(dispatch_owner);
                }
                RowState::Parked => {}
            }
            if let Some(r) = &e.slot_reservation {
                referenced.insert(r.reserver);
                referenced.extend(r.child);
            }
        }
        referenced.extend(st.queue.runners.iter().map(|r| r.identity));
        for role in &st.roles {
            match &role.pc {
                Pc::Spawn {
                    token, snapshot, ..
                } => {
                    held.insert(*token);
                    referenced.extend(identities_of(snapshot));
                }
                Pc::Bind {
                    token,
                    child,
                    snapshot,
                    ..
                }
                | Pc::Handoff {
                    token,
                    child,
                    snapshot,
                    ..
                } => {
                    held.insert(*token);
                    referenced.insert(*child);
                    referenced.extend(identities_of(snapshot));
                }
                Pc::TakeOver { token, .. } | Pc::Release { token, .. } => {
                    held.insert(*token);
                }
                _ => {}
            }
        }
        let table = ProcTable(&st.procs);
        let queue = &st.queue;
        st.orphaned_handoffs.retain(|(queue_id, _, child)| {
            table.observe(child) == Observation::Matching
                && queue.entries.iter().any(|e| e.queue_id == *queue_id)
        });
        referenced.extend(st.orphaned_handoffs.iter().map(|(_, _, c)| *c));
        st.retired.retain(|t| held.contains(t));
        let queued: BTreeSet<u64> = st.queue.entries.iter().map(|e| e.queue_id).collect();
        st.settled.retain(|id| queued.contains(id));
        // Drop unreferenced dead processes and renumber the roles' process indices.
        let mut remap = vec![u8::MAX; st.procs.len()];
        let mut kept = Vec::with_capacity(st.procs.len());
        for (index, p) in st.procs.iter().enumerate() {
            if p.alive || referenced.contains(&p.id) {
                remap[index] = kept.len() as u8;
                kept.push(p.clone());
            }
        }
        st.procs = kept;
        for role in &mut st.roles {
            role.proc = remap[role.proc as usize];
        }
    }

    fn initial_state(&self) -> SlotState {
        let mut st = SlotState {
            queue: QueueState::default(),
            procs: Vec::new(),
            roles: Vec::new(),
            next_token: 1,
            retired: Vec::new(),
            settled: Vec::new(),
            orphaned_handoffs: Vec::new(),
            finished_turns: 0,
            crashes_left: self.cfg.crash_budget,
            reuses_left: self.cfg.reuse_budget,
            reconciles_left: self.cfg.reconcile_budget,
            reconciled_clean: false,
            events: 0,
            violations: 0,
        };
        for submitter in 0..self.cfg.submitters {
            let proc = st.new_proc(ProcKind::Submitter(submitter as u8), None, false);
            if self.cfg.concurrent_submissions {
                for index in 0..self.cfg.turns as usize {
                    let turn = self.cfg.script(submitter, index).turn;
                    st.roles.push(Role {
                        proc,
                        pc: Pc::SubmitOne { turn },
                    });
                }
            } else {
                st.roles.push(Role {
                    proc,
                    pc: Pc::Submit { next: 0 },
                });
            }
        }
        st
    }
}

// ---------------------------------------------------------------------------------------------
// Ground truth the properties compare the core against.
// ---------------------------------------------------------------------------------------------

impl SlotState {
    /// Live spawned children that took their slot over and have not left the queue.
    pub fn live_runners(&self) -> usize {
        self.roles
            .iter()
            .filter(|r| self.procs[r.proc as usize].alive)
            .filter(|r| matches!(r.pc, Pc::Running { .. } | Pc::Written { .. }))
            .count()
    }

    /// Live processes running `key`'s command right now.
    pub fn executors_of(&self, key: &TurnKey) -> usize {
        self.roles
            .iter()
            .filter(|r| self.procs[r.proc as usize].alive)
            .filter(|r| matches!(&r.pc, Pc::Running { key: k, .. } if k == key))
            .count()
    }

    /// No process can act: every model and unrelated process has stopped and the last reconcile
    /// pass ended with nothing happening since.
    pub fn quiescent(&self) -> bool {
        self.reconciled_clean && self.procs.iter().all(|p| !p.alive)
    }
}

fn s1_cap(model: &SlotModel, st: &SlotState) -> bool {
    st.live_runners() <= model.cfg.cap
}

fn s2_one_executor(_: &SlotModel, st: &SlotState) -> bool {
    st.queue
        .entries
        .iter()
        .map(|e| &e.key)
        .chain(st.queue.runners.iter().map(|r| &r.key))
        .all(|key| st.executors_of(key) <= 1)
        && st.roles.iter().all(|r| match &r.pc {
            Pc::Running { key, .. } => st.executors_of(key) <= 1,
            _ => true,
        })
}

fn s3_retired_token(_: &SlotModel, st: &SlotState) -> bool {
    st.violations & violation::RETIRED_TOKEN_ACTED == 0
}

fn s4_bound_child(model: &SlotModel, st: &SlotState) -> bool {
    if st.violations & violation::BOUND_CHILD_DROPPED != 0 {
        return false;
    }
    // Reservations whose bound child lives are counted, one each, under every exclusion the shell
    // passes (none, or a runner's own pid): the occupancy never falls below their number. (An
    // identity seen only on reserved rows is represented by those reservations, so the count
    // cannot be split per reservation; the bound still catches any exclusion that drops one.)
    let rules = model.rules();
    let table = ProcTable(&st.procs);
    let excludes: Vec<Option<u32>> = std::iter::once(None)
        .chain(
            st.procs
                .iter()
                .filter(|p| p.alive && p.kind == ProcKind::Runner)
                .map(|p| Some(p.id.pid)),
        )
        .collect();
    let bound_live = st
        .queue
        .entries
        .iter()
        .filter(|e| {
            e.slot_reservation
                .as_ref()
                .and_then(|r| r.child)
                .is_some_and(|c| table.observe(&c) == Observation::Matching)
        })
        .count();
    bound_live == 0
        || excludes.iter().all(|&exclude| {
            rules.occupied_runner_slots(&st.queue, &table, exclude, None) >= bound_live
        })
}

fn s5_crash_between_publishes(_: &SlotModel, st: &SlotState) -> bool {
    let table = ProcTable(&st.procs);
    st.orphaned_handoffs.iter().all(|(queue_id, token, child)| {
        if table.observe(child) != Observation::Matching {
            return true;
        }
        let Some(row) = st.queue.entries.iter().find(|e| e.queue_id == *queue_id) else {
            return true;
        };
        let key = &row.key;
        let still_reserved = row
            .slot_reservation
            .as_ref()
            .is_some_and(|r| r.token == *token && r.child == Some(*child));
        let handed_over = st.queue.runner(key).map(|r| r.identity) == Some(*child);
        (still_reserved || handed_over) && occupied_runner_slots(&st.queue, &table, None, None) >= 1
    })
}

fn s6_no_parked_with_free_slot(model: &SlotModel, st: &SlotState) -> bool {
    if !st.quiescent() {
        return true;
    }
    let parked = st
        .queue
        .entries
        .iter()
        .any(|e| matches!(e.state, RowState::Parked));
    !parked || st.live_runners() >= model.cfg.cap
}

fn s7_fifo(_: &SlotModel, st: &SlotState) -> bool {
    st.violations & violation::FIFO == 0 && st.queue.check_structure().is_ok()
}

fn s8_tokens_fresh(_: &SlotModel, st: &SlotState) -> bool {
    st.violations & violation::TOKEN_REUSED == 0
        && tokens_of(&st.queue).all(|t| {
            let n = token_number(&t);
            !t.as_uuid().is_nil() && n >= 1 && n < u128::from(st.next_token)
        })
}

fn s9_every_turn_runs(_: &SlotModel, st: &SlotState) -> bool {
    if !st.quiescent() {
        return true;
    }
    st.queue.entries.is_empty() && st.violations & violation::TURN_LOST == 0
}

fn core_accepts_shell_calls(_: &SlotModel, st: &SlotState) -> bool {
    st.violations & violation::CORE_ERROR == 0
}

/// Property names, as `spec/invariants.md` names them (grep for the invariant id).
pub mod names {
    pub const S1: &str = "S1 cap";
    pub const S2: &str = "S2 one executor per turn";
    pub const S3: &str = "S3 retired token never acts";
    pub const S4: &str = "S4 bound child occupies";
    pub const S5: &str = "S5 crash between publishes occupies";
    pub const S6: &str = "S6 no parked row with a free slot";
    pub const S7: &str = "S7 fifo";
    pub const S8: &str = "S8 tokens fresh";
    pub const S9: &str = "S9 every turn runs";
    pub const CORE: &str = "core accepts every call the shell makes";
    pub const PENDING_LIVE: &str = "reserve: pending on a live token";
    pub const STEAL_OUTCOME: &str = "reserve: steal";
    pub const PENDING_NIL: &str = "reserve: pending nil";
    pub const SATURATED: &str = "reserve: saturated";
    pub const ACQUIRED: &str = "reserve: acquired";
    pub const STOLEN_TOKEN_REFUSED: &str = "a steal: the old token is refused";
    pub const TAKEOVER_DEAD_PARENT: &str = "take-over of a dead parent";
    pub const CRASH_BETWEEN: &str = "crash between the two publishes";

    /// The `sometimes` properties that need crashes (absent with `--no-crashes`).
    pub const NEED_FAULTS: [&str; 4] = [
        STEAL_OUTCOME,
        STOLEN_TOKEN_REFUSED,
        TAKEOVER_DEAD_PARENT,
        CRASH_BETWEEN,
    ];
}

macro_rules! event_property {
    ($name:expr, $bit:expr) => {
        Property::<SlotModel>::sometimes($name, |_, st: &SlotState| st.events & $bit != 0)
    };
}

impl Model for SlotModel {
    type State = SlotState;
    type Action = SlotAction;

    fn init_states(&self) -> Vec<SlotState> {
        vec![self.initial_state()]
    }

    fn actions(&self, st: &SlotState, actions: &mut Vec<SlotAction>) {
        // A state that already breaks a safety property ends its path, so the trail the checker
        // reports stops at the first violation instead of running on past it.
        if st.violations != 0 || !s1_cap(self, st) || !s2_one_executor(self, st) {
            return;
        }
        let free_pids = st.free_pids();
        for (index, role) in st.roles.iter().enumerate() {
            if !st.role_live(index) {
                continue;
            }
            let index = index as u8;
            actions.push(SlotAction::Step { role: index });
            if matches!(role.pc, Pc::Spawn { .. }) {
                if st.crashes_left > 0 {
                    actions.push(SlotAction::SpawnFails { role: index });
                    actions.push(SlotAction::SpawnUnrecorded { role: index });
                }
                if self.cfg.children_reuse_pids && st.reuses_left > 0 {
                    for &pid in &free_pids {
                        for ambiguous in [false, true] {
                            actions.push(SlotAction::SpawnOnReusedPid {
                                role: index,
                                pid,
                                ambiguous,
                            });
                        }
                    }
                }
            }
            if self.cfg.runner_reconciles
                && st.reconciles_left > 0
                && matches!(role.pc, Pc::Running { .. })
                && !st
                    .roles
                    .iter()
                    .any(|r| r.proc == role.proc && r.pc == Pc::Reconcile)
                && !st.reconciler_running()
            {
                actions.push(SlotAction::RunnerReconciles { role: index });
            }
        }
        if st.crashes_left > 0 {
            for (index, p) in st.procs.iter().enumerate() {
                // A submitter between two submissions holds nothing: its death there only means
                // fewer submissions, which smaller configurations already cover.
                let holds_something = st.roles.iter().any(|r| {
                    r.proc as usize == index
                        && !matches!(r.pc, Pc::Done | Pc::Submit { .. } | Pc::SubmitOne { .. })
                });
                if p.alive && p.kind != ProcKind::Unrelated && holds_something {
                    actions.push(SlotAction::Crash { proc: index as u8 });
                }
            }
        }
        let others_active = st.others_active();
        // An unrelated process on a dead pid only matters when observations of the old identity
        // come back ambiguous: observed `Gone`, it is indistinguishable from no reuse at all.
        if others_active && st.reuses_left > 0 {
            for &pid in &free_pids {
                actions.push(SlotAction::ReusePid {
                    pid,
                    ambiguous: true,
                });
            }
        }
        for (index, p) in st.procs.iter().enumerate() {
            if p.alive && p.kind == ProcKind::Unrelated {
                actions.push(SlotAction::UnrelatedExits { proc: index as u8 });
            }
        }
        let side_reconcile = st
            .roles
            .iter()
            .any(|r| r.pc == Pc::Reconcile && st.procs[r.proc as usize].alive);
        if !st.reconciler_running() && !side_reconcile {
            let unrelated_alive = st
                .procs
                .iter()
                .any(|p| p.alive && p.kind == ProcKind::Unrelated);
            let budgeted = others_active && st.reconciles_left > 0;
            let final_pass = !others_active && !unrelated_alive && !st.reconciled_clean;
            if budgeted || final_pass {
                actions.push(SlotAction::StartReconciler);
            }
        }
    }

    fn next_state(&self, last: &SlotState, action: SlotAction) -> Option<SlotState> {
        Some(self.apply(last, &action))
    }

    fn format_action(&self, action: &SlotAction) -> String {
        format!("{action:?}")
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(names::S1, s1_cap),
            Property::always(names::S2, s2_one_executor),
            Property::always(names::S3, s3_retired_token),
            Property::always(names::S4, s4_bound_child),
            Property::always(names::S5, s5_crash_between_publishes),
            Property::always(names::S6, s6_no_parked_with_free_slot),
            Property::always(names::S7, s7_fifo),
            Property::always(names::S8, s8_tokens_fresh),
            Property::always(names::S9, s9_every_turn_runs),
            Property::always(names::CORE, core_accepts_shell_calls),
            event_property!(names::PENDING_LIVE, event::PENDING_LIVE_TOKEN),
            event_property!(names::STEAL_OUTCOME, event::STEAL),
            event_property!(names::PENDING_NIL, event::PENDING_NIL),
            event_property!(names::SATURATED, event::SATURATED),
            event_property!(names::ACQUIRED, event::ACQUIRED),
            event_property!(names::STOLEN_TOKEN_REFUSED, event::STOLEN_TOKEN_REFUSED),
            event_property!(names::TAKEOVER_DEAD_PARENT, event::TAKEOVER_DEAD_PARENT),
            event_property!(names::CRASH_BETWEEN, event::CRASH_BETWEEN_PUBLISHES),
        ]
    }
}

// ---------------------------------------------------------------------------------------------
// Reports and replays.
// ---------------------------------------------------------------------------------------------

/// A short, line-per-row rendering of a queue, for counterexample trails.
pub fn describe_queue(queue: &QueueState) -> Vec<String> {
    let mut lines: Vec<String> = queue
        .entries
        .iter()
        .map(|e| {
            let state = match e.state {
                RowState::Waiting {
                    enqueue_owner,
                    owner,
                } if enqueue_owner == owner => format!("waiting(owner {})", short(&owner)),
                RowState::Waiting {
                    enqueue_owner,
                    owner,
                } => format!(
                    "waiting(enqueued by {}, adopted by {})",
                    short(&enqueue_owner),
                    short(&owner)
                ),
                RowState::Dispatching { dispatch_owner } => {
                    format!("dispatching({})", short(&dispatch_owner))
                }
                RowState::Parked => "parked".to_string(),
            };
            let reservation = match &e.slot_reservation {
                None => String::new(),
                Some(r) => format!(
                    " reservation{{reserver {}, token #{}{}}}",
                    short(&r.reserver),
                    token_number(&r.token),
                    r.child
                        .map(|c| format!(", child {}", short(&c)))
                        .unwrap_or_default()
                ),
            };
            format!("row q{} {}: {}{}", e.queue_id, e.key, state, reservation)
        })
        .collect();
    for r in &queue.runners {
        lines.push(format!("runner of {}: {}", r.key, short(&r.identity)));
    }
    if lines.is_empty() {
        lines.push("(queue empty)".to_string());
    }
    lines
}

/// `p3/1`: pid 3, first process on that pid.
pub fn short(id: &ProcessIdentity) -> String {
    format!("p{}/{}", id.pid, id.start_time_micros)
}

/// The counter value a model token was made from.
pub fn token_number(token: &SlotToken) -> u128 {
    token.as_uuid().as_u128() & 0xffff_ffff
}

/// A small deterministic generator for [`random_walk`] (no global randomness in the model).
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// A seeded random path through the model: the actions taken and the state after each, at most
/// `max_steps` long, ending early in a state where nothing can act. A conformance replay drives
/// the real shell with the same actions and compares each published `queue.json` with the
/// state's `queue`.
pub fn random_walk(cfg: SlotConfig, seed: u64, max_steps: usize) -> Vec<(SlotAction, SlotState)> {
    let model = SlotModel::new(cfg);
    let mut rng = SplitMix64(seed);
    let mut state = model.initial_state();
    let mut path = Vec::new();
    let mut actions = Vec::new();
    for _ in 0..max_steps {
        actions.clear();
        model.actions(&state, &mut actions);
        if actions.is_empty() {
            break;
        }
        let pick = (rng.next() % actions.len() as u64) as usize;
        let action = actions.swap_remove(pick);
        state = model.apply(&state, &action);
        path.push((action, state.clone()));
    }
    path
}

/// The initial state of `cfg`'s model (the state a replay starts from).
pub fn initial_state(cfg: &SlotConfig) -> SlotState {
    SlotModel::new(cfg.clone()).initial_state()
}

/// Names the process and the critical section an action stands for, for counterexample trails.
pub fn describe_action(before: &SlotState, action: &SlotAction) -> String {
    let who = |role: u8| -> String {
        let r = &before.roles[role as usize];
        let p = &before.procs[r.proc as usize];
        let kind = match p.kind {
            ProcKind::Submitter(i) => format!("submitter {i}"),
            ProcKind::Runner => "runner".to_string(),
            ProcKind::Reconciler => "reconciler".to_string(),
            ProcKind::Unrelated => "unrelated".to_string(),
        };
        format!("{kind} {}", short(&p.id))
    };
    let what = |role: u8| -> String {
        match &before.roles[role as usize].pc {
            Pc::Submit { .. } | Pc::SubmitOne { .. } => {
                "L1: enqueue + reserve (+ park if saturated)".to_string()
            }
            Pc::Spawn { key, token, .. } => {
                format!(
                    "spawns a runner for {key} under token #{}",
                    token_number(token)
                )
            }
            Pc::Release { key, token, .. } => {
                format!("L: release_runner_slot({key}, #{})", token_number(token))
            }
            Pc::Bind {
                key, token, child, ..
            } => format!(
                "L2: complete_runner_spawn_first({key}, #{}, {})",
                token_number(token),
                short(child)
            ),
            Pc::Handoff {
                key, token, child, ..
            } => format!(
                "L3: complete_runner_spawn_second({key}, #{}, {})",
                token_number(token),
                short(child)
            ),
            Pc::TakeOver { key, token } => {
                format!("take_over_reserved_slot({key}, #{})", token_number(token))
            }
            Pc::Running { key, .. } => format!("runs {key} and writes its result"),
            Pc::Written { key } => format!("finish_turn({key}) + start_next_parked"),
            Pc::Reconcile => "reconcile_step".to_string(),
            Pc::Done => "nothing".to_string(),
        }
    };
    match action {
        SlotAction::Step { role } => format!("{}: {}", who(*role), what(*role)),
        SlotAction::SpawnFails { role } => {
            format!("{}: {} -> spawn fails, releases", who(*role), what(*role))
        }
        SlotAction::SpawnUnrecorded { role } => format!(
            "{}: {} -> child starts but is not recorded, releases",
            who(*role),
            what(*role)
        ),
        SlotAction::SpawnOnReusedPid {
            role,
            pid,
            ambiguous,
        } => format!(
            "{}: {} on reused pid {pid}{}",
            who(*role),
            what(*role),
            if *ambiguous {
                " (old identity now ambiguous)"
            } else {
                ""
            }
        ),
        SlotAction::Crash { proc } => {
            let p = &before.procs[*proc as usize];
            format!("{:?} {} crashes", p.kind, short(&p.id))
        }
        SlotAction::ReusePid { pid, ambiguous } => format!(
            "an unrelated process takes pid {pid}{}",
            if *ambiguous {
                " (old identity now ambiguous)"
            } else {
                ""
            }
        ),
        SlotAction::UnrelatedExits { proc } => {
            format!(
                "unrelated {} exits",
                short(&before.procs[*proc as usize].id)
            )
        }
        SlotAction::StartReconciler => "a reconciler starts".to_string(),
        SlotAction::RunnerReconciles { role } => {
            format!("{}: starts a reconcile pass on the side", who(*role))
        }
    }
}

/// Renders a path as a numbered trail: each step's action and the queue rows after it.
pub fn render_trail(path: Vec<(SlotState, Option<SlotAction>)>) -> Vec<String> {
    let mut lines = Vec::new();
    let mut previous: Option<(SlotState, SlotAction)> = None;
    let mut step = 0;
    for (state, action) in path {
        match previous.take() {
            None => lines.push("  0. initial state".to_string()),
            Some((before, taken)) => {
                step += 1;
                lines.push(format!("  {step}. {}", describe_action(&before, &taken)));
            }
        }
        for row in describe_queue(&state.queue) {
            lines.push(format!("       {row}"));
        }
        if state.violations != 0 {
            lines.push(format!("       violations seen: {:#b}", state.violations));
        }
        if let Some(action) = action {
            previous = Some((state, action));
        }
    }
    lines
}
