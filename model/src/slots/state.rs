//! The model's state: the real queue, the process table the core observes, each role's program
//! counter, and the bookkeeping the properties read (events, violations, retired tokens).

use std::collections::BTreeSet;
use tollgate_core::slots::steps::{BoundHandoff, Handoff, TurnOnDisk, TurnRecords};
use tollgate_core::slots::{
    Liveness, Observation, ProcessIdentity, QueueEntry, QueueState, RowState, SlotToken, TurnKey,
    WorkId, WorkRecord,
};
use uuid::Uuid;

/// What a process is, for reports and for the environment's choices.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProcKind {
    /// A detached submitter (its index in the configuration).
    Submitter(u8),
    /// An attached (foreground) submitter, which runs its turns' work itself.
    Attached(u8),
    Runner,
    Reconciler,
    Canceller,
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

/// A live work: the process tree a runner (or an attached submitter) started for a turn. It lives
/// until its command exits or it is killed; its runner's death does not end it. The model finds
/// it by its id, as production finds a work's processes by their environment marker.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Work {
    pub id: WorkId,
    pub key: TurnKey,
    /// Started by a detached runner (capped); `false` for an attached submitter's own work.
    pub detached: bool,
}

/// Where a role continues once a handoff it started is over.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Then {
    /// The submitter's next submission (index into its script).
    Submit(u8),
    /// The attached submitter's next submission.
    Attach(u8),
    Exit,
    Reconcile,
    Cancel,
}

/// A role's program counter. A process has one role, or two for a runner that reconciles.
/// Each step of a role is one locked section (one core step) or one step outside the lock (a
/// spawn, a kill), as the shell's driver performs them.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Pc {
    /// Detached submit of script entry `next`: the turn's record and `steps::submit`, one section.
    Submit {
        next: u8,
    },
    /// A submitter thread that submits one script entry (concurrent submissions).
    SubmitOne {
        index: u8,
    },
    /// Attached start of script entry `next` (`steps::attached_start`).
    Attach {
        next: u8,
    },
    /// Holds the slot of a handoff: spawn the runner outside the lock.
    Spawn {
        handoff: Handoff,
        then: Then,
    },
    /// The spawn failed from the reserver's point of view: `steps::spawn_failed` (a separate
    /// section, so a child that did start may take over first).
    Release {
        handoff: Handoff,
        then: Then,
    },
    /// First publish of the handoff (`steps::handoff_publish_first`).
    Bind {
        handoff: Handoff,
        child: ProcessIdentity,
        then: Then,
    },
    /// Second, fenced publish (`steps::handoff_publish_second`). `snapshot` and `reserver`: the
    /// reserving snapshot and its reserver, which the bound handoff carries but does not show,
    /// kept so the state reduction never forgets an identity they name and the state's encoding
    /// (`canonical`) covers everything the fenced publish compares.
    Handoff {
        bound: BoundHandoff,
        snapshot: QueueEntry,
        reserver: ProcessIdentity,
        then: Then,
    },
    /// A spawned runner: `steps::runner_take_over`.
    TakeOver {
        key: TurnKey,
        token: SlotToken,
    },
    /// Starts the work's command outside the lock, then `steps::work_started` (the model does not
    /// separate the two: the leader is not observed, works are found by their id).
    StartWork {
        key: TurnKey,
        work: WorkId,
        detached: bool,
        then: Then,
    },
    /// The work runs; its command exits and the result is written.
    Running {
        key: TurnKey,
        work: WorkId,
        then: Then,
    },
    /// The result is written: `steps::runner_finish` (leave the queue, start the next parked row).
    Written {
        key: TurnKey,
        then: Then,
    },
    /// The next `steps::reconcile`.
    Reconcile,
    /// The driver kills these works (outside the lock) and goes on.
    Kill {
        works: Vec<WorkId>,
        then: Then,
    },
    /// The next `steps::cancel` of the first task.
    Cancel,
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
    pub const ACQUIRED: u32 = 1;
    pub const SATURATED: u32 = 1 << 1;
    pub const PENDING: u32 = 1 << 2;
    /// A queue/debounce/concurrent turn waits in its task's scope.
    pub const WAIT: u32 = 1 << 3;
    pub const SUPERSEDED: u32 = 1 << 4;
    pub const DROPPED: u32 = 1 << 5;
    /// A call with a retired token was refused while another token held the row.
    pub const STOLEN_TOKEN_REFUSED: u32 = 1 << 6;
    pub const CRASH_BETWEEN_PUBLISHES: u32 = 1 << 7;
    /// Reconcile asked for a dead runner's work to be killed.
    pub const KILL: u32 = 1 << 8;
    /// Reconcile replaced a dead executor.
    pub const REPLACED: u32 = 1 << 9;
    /// Reconcile requeued an orphaned turn (S9).
    pub const REQUEUED: u32 = 1 << 10;
    pub const ATTACHED_RUN: u32 = 1 << 11;
    pub const CANCEL_REMOVED: u32 = 1 << 12;
    /// A cancel found a dead runner's live work and had it killed.
    pub const CANCEL_KILL: u32 = 1 << 13;
    /// A runner took over a turn that had already ended, and ran nothing.
    pub const ALREADY_SETTLED: u32 = 1 << 14;
    /// A runner found a cancel recorded on its row at its take-over and spawned nothing.
    pub const CANCEL_HONOURED: u32 = 1 << 15;
    /// A signalled runner killed its running work and recorded the turn cancelled.
    pub const CANCEL_STOPPED: u32 = 1 << 16;
    /// An attached start found its task's running limit reached and waited.
    pub const ATTACHED_WAIT: u32 = 1 << 17;
}

/// Violations seen on a transition (a bit set); the `always` properties read them.
pub mod violation {
    /// A retired token changed the queue, or a refused call changed it anyway (S3).
    pub const RETIRED_TOKEN_ACTED: u16 = 1;
    /// A reservation with a live bound child vanished without its child becoming the runner, or a
    /// release after bind changed the queue (S4).
    pub const BOUND_CHILD_DROPPED: u16 = 1 << 1;
    /// `next_queue_id` fell (S7).
    pub const FIFO: u16 = 1 << 2;
    /// A token was installed twice or is not one the model handed out (S8).
    pub const TOKEN_REUSED: u16 = 1 << 3;
    /// The core refused a call the shell's sequence never makes wrongly (e.g. enqueue failed).
    pub const CORE_ERROR: u16 = 1 << 4;
    /// A row left the queue although its turn had not ended (S9).
    pub const TURN_LOST: u16 = 1 << 5;
    /// A submit kept a second waiter under `queue`/`debounce`, or enqueued under `drop` while its
    /// task was busy (S10).
    pub const STRATEGY: u16 = 1 << 6;
    /// A turn that had ended (ran, superseded, dropped, cancelled) started a work again, or got a
    /// slot reserved for a runner (S11).
    pub const ENDED_RAN: u16 = 1 << 7;
    /// A cancel signalled a live process that is not the executor of the turn it cancels: a
    /// dispatcher handing the row off (S13).
    pub const SIGNALLED_DISPATCHER: u16 = 1 << 8;
}

/// The whole model state. `queue` is the real `QueueState`, so a replay can compare it with the
/// `queue.json` a real run publishes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SlotState {
    pub queue: QueueState,
    pub procs: Vec<Proc>,
    /// The live works (a work leaves this table when it exits or is killed).
    pub works: Vec<Work>,
    pub roles: Vec<Role>,
    /// The next fresh token is `token_from_counter(next_token)`.
    pub next_token: u32,
    /// Tokens that left the queue (stolen, released, parked away or cleared) and that some role
    /// still holds: the only ones that could try to act again (S3).
    pub retired: Vec<SlotToken>,
    /// Handoffs whose reserver died between the two publishes: the row (`queue_id`), its token
    /// and the bound child (S5).
    pub orphaned_handoffs: Vec<(u64, SlotToken, ProcessIdentity)>,
    /// Turns (bit `turn - 1`) whose record exists (the submitter wrote it).
    pub recorded: u16,
    /// Turns whose work ran to its end and wrote the result.
    pub ran: u16,
    /// Turns that ended: ran, superseded, dropped or cancelled.
    pub ended: u16,
    /// Turns whose record says `cancelled` (S12: never one whose work ran to its end).
    pub cancelled: u16,
    pub crashes_left: u8,
    pub reuses_left: u8,
    pub reconciles_left: u8,
    pub cancels_left: u8,
    /// A reconcile pass ended (idle or saturated) and nothing happened since.
    pub reconciled_clean: bool,
    pub events: u32,
    pub violations: u16,
    /// The submitters when they are interchangeable (a constant of the configuration, kept here
    /// because a representative is computed from the state alone).
    pub submitters: Option<SubmitterShape>,
    /// Set on a representative only (symmetry reduction): the canonical encoding of the states
    /// it stands for ([`super::canonical`]); every other field of a representative is empty.
    pub canonical: Option<Box<[u8]>>,
}

/// Fresh tokens from the model's counter: distinct, non-nil UUIDs.
pub fn token_from_counter(counter: u32) -> SlotToken {
    let uuid = Uuid::from_u128(0x0000_0000_0000_7000_8000_0000_0000_0000 | u128::from(counter));
    SlotToken::new(uuid).expect("the counter's UUIDs have version bits set, never nil")
}

/// The counter value a model token was made from.
pub fn token_number(token: &SlotToken) -> u128 {
    token.as_uuid().as_u128() & 0xffff_ffff
}

/// The submitters of a symmetric configuration: how many, and the turns each submits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SubmitterShape {
    pub count: u8,
    pub turns: u8,
}

/// The model's process and work tables as the core sees them.
pub struct ProcTable<'a> {
    pub procs: &'a [Proc],
    pub works: &'a [Work],
}

impl<'a> ProcTable<'a> {
    pub fn of(st: &'a SlotState) -> Self {
        ProcTable {
            procs: &st.procs,
            works: &st.works,
        }
    }
}

impl Liveness for ProcTable<'_> {
    /// A recorded work is alive while the model's table holds it (its command has not exited and
    /// it was not killed), whatever became of its runner.
    fn observe_work(&self, work: &WorkRecord) -> Observation {
        if self.works.iter().any(|w| w.id == work.id) {
            Observation::Matching
        } else {
            Observation::Gone
        }
    }

    fn observe(&self, identity: &ProcessIdentity) -> Observation {
        match self
            .procs
            .iter()
            .find(|p| p.alive && p.id.pid == identity.pid)
        {
            None => Observation::Gone,
            Some(p) if p.id == *identity => Observation::Matching,
            Some(p) if p.masks_older => Observation::Ambiguous,
            Some(_) => Observation::Gone,
        }
    }
}

pub(super) fn turn_bit(key: &TurnKey) -> u16 {
    1u16.checked_shl(key.turn.saturating_sub(1)).unwrap_or(0)
}

/// Every process identity a row names: its owners and its reservation's reserver and child.
pub fn identities_of(entry: &QueueEntry) -> Vec<ProcessIdentity> {
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

pub(super) fn tokens_of(queue: &QueueState) -> impl Iterator<Item = SlotToken> + '_ {
    queue
        .entries
        .iter()
        .filter_map(|e| e.slot_reservation.as_ref().map(|r| r.token))
}

impl SlotState {
    pub(super) fn proc_of(&self, role: usize) -> &Proc {
        &self.procs[self.roles[role].proc as usize]
    }

    pub(super) fn me(&self, role: usize) -> ProcessIdentity {
        self.proc_of(role).id
    }

    pub(super) fn role_live(&self, role: usize) -> bool {
        self.proc_of(role).alive && self.roles[role].pc != Pc::Done
    }

    /// Some live role that is not a reconciler process's (a runner's side pass counts: it runs
    /// on a working runner).
    pub(super) fn others_active(&self) -> bool {
        self.roles.iter().any(|r| {
            let p = &self.procs[r.proc as usize];
            p.alive && r.pc != Pc::Done && p.kind != ProcKind::Reconciler
        })
    }

    pub(super) fn reconciler_running(&self) -> bool {
        self.procs
            .iter()
            .any(|p| p.alive && p.kind == ProcKind::Reconciler)
    }

    /// Pids whose every occupant is dead: the ones a new process may be given again.
    pub(super) fn free_pids(&self) -> Vec<u32> {
        let pids: BTreeSet<u32> = self.procs.iter().map(|p| p.id.pid).collect();
        pids.into_iter()
            .filter(|pid| !self.procs.iter().any(|p| p.alive && p.id.pid == *pid))
            .collect()
    }

    /// A new process on `pid` (or a fresh pid), with a start time no earlier occupant had.
    pub(super) fn new_proc(&mut self, kind: ProcKind, pid: Option<u32>, masks_older: bool) -> u8 {
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

    pub(super) fn fresh_token(&self) -> SlotToken {
        token_from_counter(self.next_token)
    }

    /// Records an installed token: it must be the fresh one handed in, which no earlier call got
    /// (the counter only moves on), so it was never installed before (S8).
    pub(super) fn note_installed(&mut self, token: SlotToken) {
        if token == self.fresh_token() {
            self.next_token += 1;
        } else {
            self.violations |= violation::TOKEN_REUSED;
        }
    }

    /// What the turn records say, as the shell reads them for reconcile: every scripted turn
    /// whose record exists (settled once it ended: ran, superseded, dropped or cancelled; the
    /// model's turns record no start time, and a turn with a row is never taken for an orphan),
    /// and a row whose turn has no record as `NoRecord`.
    pub(super) fn turn_records(&self, cfg: &super::SlotConfig) -> TurnRecords {
        let mut records: TurnRecords = (0..cfg.all_submitters())
            .flat_map(|s| (0..cfg.turns as usize).map(move |k| (s, k)))
            .map(|(s, k)| (s >= cfg.submitters, cfg.script(s, k)))
            .filter(|(_, key)| self.recorded & turn_bit(key) != 0)
            .map(|(attached, key)| {
                let turn = TurnOnDisk::Record {
                    settled: self.ended & turn_bit(&key) != 0,
                    attached,
                    started: false,
                    runner: false,
                };
                (key, turn)
            })
            .collect();
        for entry in &self.queue.entries {
            records
                .entry(entry.key.clone())
                .or_insert(TurnOnDisk::NoRecord);
        }
        records
    }

    pub(super) fn finish_role(&mut self, role: usize, then: Then) {
        self.roles[role].pc = match then {
            Then::Submit(next) => Pc::Submit { next },
            Then::Attach(next) => Pc::Attach { next },
            Then::Exit => Pc::Done,
            Then::Reconcile => Pc::Reconcile,
            Then::Cancel => Pc::Cancel,
        };
    }

    /// A process whose roles are all done exits normally.
    pub(super) fn reap(&mut self, proc: u8) {
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
    pub(super) fn check_token_call(
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
