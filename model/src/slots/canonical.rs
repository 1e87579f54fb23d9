//! The compact encoding of a slot state, and its canonical form for symmetry reduction.
//!
//! [`encode`] writes every field of a [`SlotState`] into a short byte string. Each struct is
//! destructured field by field, so a field added to the state or to a core type it holds breaks
//! this build until the encoding says how to write it: a field left out would let the checker take
//! two different states for one.
//!
//! With `rename`, two fields are left out, as nothing that decides what happens next and no
//! `always` property reads them: the token counter (a fresh token is above every token in the
//! state either way; one bit says the state's tokens all lie below it, which S8 reads), and the
//! event bits (which examples the path to the state reached, read only by the `sometimes`
//! properties). Without the events the classes are far fewer (two to three times on the CI
//! configurations); the examples a reduced check reaches are read from the events every generated
//! transition produced instead (`SlotModel::example_generated`).
//!
//! With `rename`, the encoding is canonical under the model's symmetries (spec/slots.md, "What the
//! slot model covers"):
//! - **process identities**: the model and the core only ever compare pids for equality (and a
//!   new process takes a pid no live or remembered process has), so pids are written as labels
//!   1, 2, … in the order they first appear, start times as they are;
//! - **tokens** (and the work ids made from them): compared for equality only, each fresh one
//!   new, so they are labels too, with one bit that says whether every token lies below the
//!   counter (S8 reads the numbers);
//! - **the order of the roles, processes, works and retired tokens**: every use of those lists
//!   asks "is there one that …", never "the first that …", so each is written sorted;
//! - **submitters** ([`SlotState::submitters`]): interchangeable when the configuration says so
//!   (one task; every submission's clock from the state, not from the submitter): the encoding is
//!   the least over every permutation of them, which renames their processes (by their kind) and
//!   their turns (turn `s·turns + k + 1` of submitter `s`) everywhere a turn is named.
//!
//! The queue's rows keep their order (FIFO is the protocol) and their queue ids. Two states with
//! one canonical encoding are one state under a renaming of pids, tokens and submitters and a
//! reordering of those lists; `tests/model_slots.rs` checks on the CI configurations that the
//! reduced exploration reaches exactly one state of every class the full one reaches, and that
//! every property gives one answer on a class.

use super::state::{token_number, Pc, ProcKind, Role, SlotState, SubmitterShape, Then};
use tollgate_core::slots::steps::Handoff;
use tollgate_core::slots::{
    AfterRule, Dependency, PauseSet, ProcessIdentity, QueueEntry, QueueState, RowState,
    RunnerRecord, RunnerSlotReservation, SlotToken, TurnKey, WorkId, WorkRecord,
};

/// The largest number of submitters whose permutations the canonical form tries (4! = 24).
pub const MAX_SYMMETRIC_SUBMITTERS: u8 = 4;

/// Writes `st` as bytes; with `rename`, in its canonical form (see the module documentation).
pub fn encode(st: &SlotState, rename: bool) -> Vec<u8> {
    let symmetric = match st.submitters {
        Some(shape) if rename && shape.count > 1 => shape,
        _ => return Encoder::new(st, rename, None).state(st),
    };
    let mut best: Option<Vec<u8>> = None;
    let mut order: Vec<u8> = (0..symmetric.count).collect();
    loop {
        let bytes = Encoder::new(st, rename, Some((symmetric, &order))).state(st);
        if best.as_ref().is_none_or(|b| bytes < *b) {
            best = Some(bytes);
        }
        if !next_permutation(&mut order) {
            break;
        }
    }
    best.expect("at least the identity permutation was encoded")
}

/// The next permutation in lexicographic order; `false` after the last.
fn next_permutation(order: &mut [u8]) -> bool {
    let Some(i) = (1..order.len()).rev().find(|&i| order[i - 1] < order[i]) else {
        return false;
    };
    let j = (i..order.len())
        .rev()
        .find(|&j| order[j] > order[i - 1])
        .expect("order[i] is greater");
    order.swap(i - 1, j);
    order[i..].reverse();
    true
}

struct Encoder<'a> {
    out: Vec<u8>,
    rename: bool,
    /// Submitter `s` is written as `order[s]`.
    submitters: Option<(SubmitterShape, &'a [u8])>,
    pids: Vec<u32>,
    tokens: Vec<SlotToken>,
    next_token: u32,
    tokens_below_counter: bool,
}

impl<'a> Encoder<'a> {
    fn new(st: &SlotState, rename: bool, submitters: Option<(SubmitterShape, &'a [u8])>) -> Self {
        Encoder {
            out: Vec::with_capacity(256),
            rename,
            submitters,
            pids: Vec::with_capacity(16),
            tokens: Vec::with_capacity(16),
            next_token: st.next_token,
            tokens_below_counter: true,
        }
    }

    fn n(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.out.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.out.push(v as u8);
    }

    fn flag(&mut self, b: bool) {
        self.out.push(u8::from(b));
    }

    fn text(&mut self, s: &str) {
        self.n(s.len() as u64);
        self.out.extend_from_slice(s.as_bytes());
    }

    fn pid_label(&mut self, pid: u32) -> u64 {
        if !self.rename {
            return u64::from(pid);
        }
        match self.pids.iter().position(|p| *p == pid) {
            Some(i) => i as u64 + 1,
            None => {
                self.pids.push(pid);
                self.pids.len() as u64
            }
        }
    }

    fn id(&mut self, id: &ProcessIdentity) {
        let ProcessIdentity {
            pid,
            start_time_micros,
        } = *id;
        let label = self.pid_label(pid);
        self.n(label);
        self.n(start_time_micros);
    }

    fn token_label(&mut self, token: SlotToken) -> u128 {
        if u128::from(self.next_token) <= token_number(&token) {
            self.tokens_below_counter = false;
        }
        if !self.rename {
            return token.as_uuid().as_u128();
        }
        match self.tokens.iter().position(|t| *t == token) {
            Some(i) => i as u128 + 1,
            None => {
                self.tokens.push(token);
                self.tokens.len() as u128
            }
        }
    }

    fn token(&mut self, token: SlotToken) {
        let label = self.token_label(token);
        self.n(label as u64);
        self.n((label >> 64) as u64);
    }

    fn work(&mut self, work: WorkId) {
        self.token(work.token());
    }

    /// The turn as the permutation of submitters names it.
    fn turn(&self, turn: u32) -> u32 {
        let Some((shape, order)) = self.submitters else {
            return turn;
        };
        let turns = u32::from(shape.turns);
        let submitter = (turn.saturating_sub(1)) / turns;
        if turn == 0 || submitter >= u32::from(shape.count) {
            return turn;
        }
        u32::from(order[submitter as usize]) * turns + (turn - 1) % turns + 1
    }

    fn submitter(&self, s: u8) -> u8 {
        match self.submitters {
            Some((shape, order)) if s < shape.count => order[s as usize],
            _ => s,
        }
    }

    fn key(&mut self, key: &TurnKey) {
        let TurnKey { task, turn } = key;
        self.text(task);
        let turn = self.turn(*turn);
        self.n(u64::from(turn));
    }

    /// A set of turns (bit `turn - 1`), renamed.
    fn turn_bits(&mut self, bits: u16) {
        let mut renamed = 0u16;
        for bit in 0..16u32 {
            if bits & (1 << bit) != 0 {
                let to = self.turn(bit + 1) - 1;
                renamed |= 1u16.checked_shl(to).unwrap_or(0);
            }
        }
        self.n(u64::from(renamed));
    }

    fn reservation(&mut self, r: Option<&RunnerSlotReservation>) {
        let Some(RunnerSlotReservation {
            reserver,
            token,
            child,
        }) = r
        else {
            self.flag(false);
            return;
        };
        self.flag(true);
        self.id(reserver);
        self.token(*token);
        self.opt_id(child.as_ref());
    }

    fn opt_id(&mut self, id: Option<&ProcessIdentity>) {
        match id {
            None => self.flag(false),
            Some(id) => {
                self.flag(true);
                self.id(id);
            }
        }
    }

    fn entry(&mut self, e: &QueueEntry) {
        let QueueEntry {
            queue_id,
            key,
            enqueued_at_millis,
            state,
            slot_reservation,
            ready_at_millis,
            cancel_requested,
            priority,
            after,
        } = e;
        self.n(*queue_id);
        self.key(key);
        self.n(*enqueued_at_millis);
        match state {
            RowState::Waiting {
                enqueue_owner,
                owner,
            } => {
                self.n(0);
                self.id(enqueue_owner);
                self.id(owner);
            }
            RowState::Dispatching { dispatch_owner } => {
                self.n(1);
                self.id(dispatch_owner);
            }
            RowState::Parked => self.n(2),
        }
        self.reservation(slot_reservation.as_ref());
        self.n(*ready_at_millis);
        self.flag(*cancel_requested);
        self.n(u64::from(priority.unsigned_abs()) << 1 | u64::from(*priority < 0));
        self.n(after.len() as u64);
        for Dependency { key, rule } in after {
            self.key(key);
            self.n(match rule {
                AfterRule::Ended => 0,
                AfterRule::Succeeded => 1,
            });
        }
    }

    fn queue(&mut self, q: &QueueState) {
        let QueueState {
            version,
            next_queue_id,
            entries,
            runners,
            works,
            paused,
        } = q;
        self.n(u64::from(*version));
        self.n(*next_queue_id);
        self.n(entries.len() as u64);
        for e in entries {
            self.entry(e);
        }
        self.n(runners.len() as u64);
        for RunnerRecord {
            key,
            identity,
            attached,
        } in runners
        {
            self.key(key);
            self.id(identity);
            self.flag(*attached);
        }
        self.n(works.len() as u64);
        for WorkRecord {
            key,
            id,
            runner,
            leader,
            cgroup,
        } in works
        {
            self.key(key);
            self.work(*id);
            self.id(runner);
            self.opt_id(leader.as_ref());
            match cgroup {
                None => self.flag(false),
                Some(path) => {
                    self.flag(true);
                    self.text(path);
                }
            }
        }
        let PauseSet { home, tasks } = paused;
        self.flag(*home);
        self.n(tasks.len() as u64);
        for task in tasks {
            self.text(task);
        }
    }

    fn then(&mut self, then: Then) {
        match then {
            Then::Submit(next) => {
                self.n(0);
                self.n(u64::from(next));
            }
            Then::Attach(next) => {
                self.n(1);
                self.n(u64::from(next));
            }
            Then::Exit => self.n(2),
            Then::Reconcile => self.n(3),
            Then::Cancel => self.n(4),
        }
    }

    fn handoff(&mut self, h: &Handoff) {
        self.entry(h.snapshot());
        self.token(h.token());
        self.id(&h.reserver());
    }

    fn pc(&mut self, pc: &Pc) {
        match pc {
            Pc::Submit { next } => {
                self.n(0);
                self.n(u64::from(*next));
            }
            Pc::SubmitOne { index } => {
                self.n(1);
                self.n(u64::from(*index));
            }
            Pc::Attach { next } => {
                self.n(2);
                self.n(u64::from(*next));
            }
            Pc::Spawn { handoff, then } => {
                self.n(3);
                self.handoff(handoff);
                self.then(*then);
            }
            Pc::Release { handoff, then } => {
                self.n(4);
                self.handoff(handoff);
                self.then(*then);
            }
            Pc::Bind {
                handoff,
                child,
                then,
            } => {
                self.n(5);
                self.handoff(handoff);
                self.id(child);
                self.then(*then);
            }
            Pc::Handoff {
                bound,
                snapshot,
                reserver,
                then,
            } => {
                // The bound handoff is its snapshot, token and reserver (kept beside it, since it
                // does not show them) and its child.
                self.n(6);
                self.entry(snapshot);
                self.token(bound.token());
                self.id(reserver);
                self.id(&bound.child());
                self.then(*then);
            }
            Pc::TakeOver { key, token } => {
                self.n(7);
                self.key(key);
                self.token(*token);
            }
            Pc::StartWork {
                key,
                work,
                detached,
                then,
            } => {
                self.n(8);
                self.key(key);
                self.work(*work);
                self.flag(*detached);
                self.then(*then);
            }
            Pc::Running { key, work, then } => {
                self.n(9);
                self.key(key);
                self.work(*work);
                self.then(*then);
            }
            Pc::Written { key, then } => {
                self.n(10);
                self.key(key);
                self.then(*then);
            }
            Pc::Reconcile => self.n(11),
            Pc::Kill { works, then } => {
                self.n(12);
                self.n(works.len() as u64);
                for w in works {
                    self.work(*w);
                }
                self.then(*then);
            }
            Pc::Cancel => self.n(13),
            Pc::Done => self.n(14),
        }
    }

    fn kind(&mut self, kind: ProcKind) {
        match kind {
            ProcKind::Submitter(s) => {
                let s = self.submitter(s);
                self.n(0);
                self.n(u64::from(s));
            }
            ProcKind::Attached(a) => {
                self.n(1);
                self.n(u64::from(a));
            }
            ProcKind::Runner => self.n(2),
            ProcKind::Reconciler => self.n(3),
            ProcKind::Canceller => self.n(4),
            ProcKind::Unrelated => self.n(5),
        }
    }

    /// Writes `items` in the order of their encodings with the labels assigned so far (labels
    /// first given out while sorting are taken back), then writes them for real in that order.
    fn sorted<T>(&mut self, items: &[T], write: impl Fn(&mut Self, &T)) {
        if !self.rename || items.len() < 2 {
            self.n(items.len() as u64);
            for item in items {
                write(self, item);
            }
            return;
        }
        let (pids, tokens, below) = (
            self.pids.len(),
            self.tokens.len(),
            self.tokens_below_counter,
        );
        let mut keyed: Vec<(Vec<u8>, usize)> = Vec::with_capacity(items.len());
        for (index, item) in items.iter().enumerate() {
            let start = self.out.len();
            write(self, item);
            keyed.push((self.out[start..].to_vec(), index));
            self.out.truncate(start);
            self.pids.truncate(pids);
            self.tokens.truncate(tokens);
        }
        self.tokens_below_counter = below;
        keyed.sort();
        self.n(items.len() as u64);
        for (_, index) in keyed {
            write(self, &items[index]);
        }
    }

    fn state(mut self, st: &SlotState) -> Vec<u8> {
        let SlotState {
            queue,
            procs,
            works,
            roles,
            next_token,
            retired,
            orphaned_handoffs,
            recorded,
            ran,
            ended,
            cancelled,
            crashes_left,
            reuses_left,
            reconciles_left,
            cancels_left,
            reconciled_clean,
            events,
            violations,
            submitters: _,
            canonical: _,
        } = st;
        self.queue(queue);
        self.sorted(roles, |e, Role { proc, pc }| {
            let p = &procs[*proc as usize];
            e.kind(p.kind);
            e.id(&p.id);
            e.pc(pc);
        });
        self.sorted(procs, |e, p| {
            let super::state::Proc {
                id,
                kind,
                alive,
                masks_older,
            } = p;
            e.id(id);
            e.kind(*kind);
            e.flag(*alive);
            e.flag(*masks_older);
        });
        self.sorted(works, |e, super::state::Work { id, key, detached }| {
            e.work(*id);
            e.key(key);
            e.flag(*detached);
        });
        self.sorted(retired, |e, token| e.token(*token));
        self.sorted(orphaned_handoffs, |e, (queue_id, token, child)| {
            e.n(*queue_id);
            e.token(*token);
            e.id(child);
        });
        if !self.rename {
            self.n(u64::from(*next_token));
            self.n(u64::from(*events));
        }
        for bits in [*recorded, *ran, *ended, *cancelled] {
            self.turn_bits(bits);
        }
        for budget in [*crashes_left, *reuses_left, *reconciles_left, *cancels_left] {
            self.n(u64::from(budget));
        }
        self.flag(*reconciled_clean);
        self.n(u64::from(*violations));
        let below = self.tokens_below_counter;
        self.flag(below);
        self.out
    }
}

/// The representative of `st`'s class: a state that holds only the canonical encoding, which is
/// all the checker hashes of it.
impl stateright::Representative for SlotState {
    fn representative(&self) -> Self {
        SlotState {
            queue: QueueState::default(),
            procs: Vec::new(),
            works: Vec::new(),
            roles: Vec::new(),
            next_token: 0,
            retired: Vec::new(),
            orphaned_handoffs: Vec::new(),
            recorded: 0,
            ran: 0,
            ended: 0,
            cancelled: 0,
            crashes_left: 0,
            reuses_left: 0,
            reconciles_left: 0,
            cancels_left: 0,
            reconciled_clean: false,
            events: 0,
            violations: 0,
            submitters: None,
            canonical: Some(encode(self, true).into_boxed_slice()),
        }
    }
}
