//! The model's state: the real queue, the process table the core observes, each role's program
//! counter, and the bookkeeping the properties read (events, violations, retired tokens).

use std::collections::BTreeSet;
use tollgate_core::slots::{
    Liveness, Observation, ProcessIdentity, QueueEntry, QueueState, RowState, SlotToken, TurnKey,
};
use uuid::Uuid;

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

pub(super) fn turn_bit(key: &TurnKey) -> u8 {
    1u8.checked_shl(key.turn.saturating_sub(1)).unwrap_or(0)
}

pub(super) fn identities_of(entry: &QueueEntry) -> Vec<ProcessIdentity> {
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

    pub(super) fn settled_keys(&self) -> Vec<TurnKey> {
        self.queue
            .entries
            .iter()
            .filter(|e| self.settled.contains(&e.queue_id))
            .map(|e| e.key.clone())
            .collect()
    }

    /// The rows a handoff leaves in: the snapshot the reserver keeps for its fenced publish.
    pub(super) fn snapshot(&self, key: &TurnKey) -> Option<QueueEntry> {
        self.queue.row(key).cloned()
    }

    pub(super) fn finish_role(&mut self, role: usize, then: Then) {
        self.roles[role].pc = match then {
            Then::Submit(next) => Pc::Submit { next },
            Then::Exit => Pc::Done,
            Then::Reconcile => Pc::Reconcile,
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
