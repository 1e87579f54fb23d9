//! The fleet dedupe model (spec/admission.md, "Across instances"): several `serve` instances of
//! one PostgreSQL queue, each with its own gate (ledger, in-memory marks, in-flight set) and its
//! own crashes and restarts, share one durable mark table (`serve_dedupe`) and one queue. The
//! platform delivers each event a bounded number of times, to any serve, in any interleaving
//! (concurrently, redelivered after an answer, after a serve crashed); a model clock lets marks
//! expire.
//!
//! Each action is one section production runs, calling the core's own steps:
//!
//! - **Deliver(serve, event)**: the gate, [`Admission::admit_and_mark`] (which is the core's
//!   `decide_delivery`: admit, then the in-memory mark-if-absent). `Refused` and `InFlight` are
//!   answered 503; `Duplicate` is answered 200 (acknowledged); `Admitted` joins the serve's next
//!   group commit (nothing answered yet).
//! - **Commit(serve, delivery)**: one delivery's savepoint of the group commit's transaction,
//!   committed (a batch of one: a batch is several such savepoints in one commit, which a crash
//!   loses or keeps together). Inside it, the durable mark's insert-if-absent on the shared
//!   table, judged at the delivery's arrival time: the table's rows of the identity read, and the
//!   core's step [`TableMarks::mark`] (the gate's dedupe rule) deciding, exactly as serve's group
//!   commit does (`src/serve/accept.rs`); the mark it returns is the row written. A live mark: `Duplicate`, the savepoint rolled back (no turn). Absent: the
//!   mark, the turn record and the core's submit step ([`steps::submit`], on the shared
//!   [`QueueState`]) commit together. Two serves' transactions are serialised by the queue's
//!   advisory lock and the unique key, so a commit is one atomic action.
//!   **CommitFails(serve, delivery)** (when allowed): the transaction is rolled back (nothing of
//!   it is left), then [`Admission::withdraw`] and the 503.
//! - **Answer(serve, delivery)**: after its commit, the handler: `Queued`:
//!   [`Admission::made_durable`], then the 200 `accepted`. `Duplicate`:
//!   [`Admission::made_durable`], the permit dropped ([`Admission::settle`] as abandoned), the
//!   200 `duplicate`.
//! - **Crash(serve)**: its memory is gone (gate, accept queue, unanswered deliveries); the table
//!   and the queue stay. **Restart(serve)**: a fresh gate, [`Admission::restore_mark`] for every
//!   live mark of the table (`live_marks`).
//! - **Tick**: the clock moves one millisecond (up to the configuration's horizon).
//!
//! The model owns only what production gets from the world: which deliveries the platform still
//! sends, which serve is up, the clock, and a record of every answer.
//!
//! Not modelled (other models' subject): turns running and ending (a durable turn here is its
//! record and its queue row; the admission model checks that an acknowledged delivery's turn runs
//! to an outcome across serve crashes, readopt and recovery included, and the fleet model the
//! queue across hosts), the watcher and capacity release (the ledger's limit is above the
//! deliveries), shutdown, the mark table's bound (trimmed oldest first: extra work, never lost
//! work), hosts' clock skew (one clock; spec/admission.md says why skew is milliseconds against
//! a TTL of hours), and the file-backed marks of SQLite homes (one serve per home; the admission
//! model's dedupe log).
//!
//! Properties: `A6` (at most one durable turn per identity within a mark's lifetime, fleet-wide),
//! `A3` fleet-wide (every acknowledged delivery, `accepted` or `duplicate`, from any serve, has
//! its durable turn), `A2` fleet-wide (a live mark stands for a durable turn of its identity, so
//! after a crash at any step no redelivery is deduped into loss); all checked in every state,
//! those after every crash included.

use crate::slots::state::token_from_counter;
use stateright::{Model, Property};
use std::fmt;
use tollgate_core::admission::{
    Admission, Admit, DedupeKeys, Delivery, DeliveryId, Dispatch, EventIdentity, Limits, MarkStep,
    Outcome, StoredMark, Strategy, TableMarks, Tenant,
};
use tollgate_core::slots::steps::{self, SubmitEffect, SubmitInput};
use tollgate_core::slots::{Observation, ProcessIdentity, QueueState, TurnKey};

/// Serve's `workers`: above any configuration's turns (the cap is the slot model's subject).
pub const WORKERS: usize = 16;

/// Which serves the model drives: production, or one deliberately broken variant (the teeth,
/// kept here, never in `core/` or `src/`). `tests/model_fleet_dedupe.rs` names, per variant, the
/// properties the checker must find broken and the examples it must never reach.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Variant {
    /// The production sections, unchanged.
    Production,
    /// The durable mark is a read, then an insert in a later section: two serves can both read
    /// "absent" and both queue a turn (breaks A6).
    CheckThenInsert,
    /// The commit queues the turn when no mark is found but inserts the mark only with the
    /// acknowledgement: another serve's commit between the two finds no mark (breaks A6).
    MarkAfterAck,
    /// The mark is committed in a transaction of its own before the turn's: a serve that dies
    /// between them leaves a mark without a turn, and a redelivery is answered `duplicate` for an
    /// event nothing will run (breaks A2 and A3 fleet-wide).
    MarkInOwnTransaction,
    /// A failed delivery's savepoint is released instead of rolled back: its mark stays in the
    /// table without a turn, and the retry is answered `duplicate` (breaks A2; a withdrawn
    /// delivery's retry is never accepted).
    SavepointReleasedOnFailure,
    /// The platform delivers only to the first serve (no two serves acknowledge one identity, and
    /// no commit finds another serve's mark).
    OneServeOnly,
    /// A serve crashes only while it holds no delivery (none is lost before or after its commit).
    CrashesOnlyWhenIdle,
    /// Marks never expire (no redelivery is accepted again after its mark's lifetime).
    MarksNeverExpire,
}

impl Variant {
    pub const BROKEN: [Variant; 7] = [
        Variant::CheckThenInsert,
        Variant::MarkAfterAck,
        Variant::MarkInOwnTransaction,
        Variant::SavepointReleasedOnFailure,
        Variant::OneServeOnly,
        Variant::CrashesOnlyWhenIdle,
        Variant::MarksNeverExpire,
    ];
}

/// The size of one model instance.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FleetDedupeConfig {
    /// How many serves share the table and the queue (at least two).
    pub serves: usize,
    /// Per event, how many times the platform delivers it in all (first delivery, retries,
    /// redeliveries), each to any serve.
    pub deliveries: Vec<u8>,
    /// How many serve crashes may happen in all (a crashed serve may restart).
    pub crashes: u8,
    /// Whether a delivery's transaction may fail (rolled back: the withdraw path).
    pub commit_failures: bool,
    /// The marks' lifetime (`dedupe_ttl`), in model milliseconds.
    pub ttl_millis: u64,
    /// How far the clock may run (0: it never moves, marks never expire).
    pub horizon_millis: u64,
    pub variant: Variant,
}

impl FleetDedupeConfig {
    /// `serves` serves, events delivered `deliveries[i]` times, no crash, no clock.
    pub fn new(serves: usize, deliveries: Vec<u8>) -> Self {
        FleetDedupeConfig {
            serves,
            deliveries,
            crashes: 0,
            commit_failures: false,
            ttl_millis: 2,
            horizon_millis: 0,
            variant: Variant::Production,
        }
    }

    pub fn with_crashes(mut self, crashes: u8) -> Self {
        self.crashes = crashes;
        self
    }

    pub fn with_commit_failures(mut self) -> Self {
        self.commit_failures = true;
        self
    }

    /// Marks last `ttl_millis`; the clock runs to `horizon_millis`.
    pub fn with_expiry(mut self, ttl_millis: u64, horizon_millis: u64) -> Self {
        self.ttl_millis = ttl_millis;
        self.horizon_millis = horizon_millis;
        self
    }

    pub fn with_variant(mut self, variant: Variant) -> Self {
        self.variant = variant;
        self
    }

    fn limits(&self) -> Limits {
        let total: usize = self.deliveries.iter().map(|d| usize::from(*d)).sum();
        // Above every delivery the configuration makes: the bound is the admission model's.
        Limits::new(total.max(1), 0).expect("a positive max_detached")
    }
}

impl fmt::Display for FleetDedupeConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let events: Vec<String> = self
            .deliveries
            .iter()
            .enumerate()
            .map(|(i, d)| format!("ev{i}x{d}"))
            .collect();
        write!(f, "{} serves, events [{}]", self.serves, events.join(" "))?;
        if self.crashes > 0 {
            write!(f, " +crashes x{}", self.crashes)?;
        }
        if self.commit_failures {
            write!(f, " +commit-failures")?;
        }
        if self.horizon_millis > 0 {
            write!(
                f,
                " +expiry ttl {} horizon {}",
                self.ttl_millis, self.horizon_millis
            )?;
        }
        write!(f, " {:?}", self.variant)
    }
}

/// What a serve answered one delivery.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Answer {
    /// 503: refused at the gate (never in these configurations: the limit is above them).
    Refused,
    /// 503 `in_flight`: this serve's own earlier delivery of the identity is not durable yet.
    InFlight,
    /// 200 `duplicate`.
    Duplicate,
    /// 200 `accepted`, with its turn.
    Accepted { turn: u8 },
    /// 503 `withdrawn`: its transaction failed.
    Withdrawn,
}

impl Answer {
    /// The platform was told the delivery was handled.
    pub fn acked(self) -> bool {
        matches!(self, Answer::Duplicate | Answer::Accepted { .. })
    }
}

/// One arrival of an event at a serve.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Attempt {
    pub event: u8,
    pub serve: u8,
    pub at_millis: u64,
    /// None until answered (and for ever if its serve crashed first).
    pub answer: Option<Answer>,
    /// Its serve crashed before answering it: `Some(true)` after its transaction committed.
    pub lost_committed: Option<bool>,
}

/// What one delivery's transaction made of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Committed {
    Queued {
        turn: u8,
    },
    /// A live mark was in the table: nothing queued.
    Duplicate,
}

/// Where an admitted delivery is in its serve's accept sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Stage {
    /// In the accept queue, waiting for its group commit.
    Admitted,
    /// (`CheckThenInsert`) the table was read and held no live mark.
    CheckedAbsent,
    /// (`MarkInOwnTransaction`) the mark's transaction committed; the turn's has not.
    MarkCommitted,
    /// Its transaction committed; not answered yet.
    Committed(Committed),
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Pending {
    pub attempt: u8,
    pub id: DeliveryId,
    pub stage: Stage,
}

/// A live serve's memory: lost when it crashes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ServeMem {
    pub admission: Admission,
    pub pending: Vec<Pending>,
}

/// A durable turn: its record (with the delivery) and its queue row.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Turn {
    pub event: u8,
    /// The time its mark was judged at (the delivery's arrival).
    pub marked_at_millis: u64,
    pub serve: u8,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FleetDedupeState {
    pub serves: Vec<Option<ServeMem>>,
    pub crashes: u8,
    pub now: u64,
    /// The shared mark table (`serve_dedupe`, unique key): per event, the time of its newest mark
    /// (it expires `dedupe_ttl` later).
    pub mark_rows: Vec<Option<u64>>,
    /// The shared queue; every change to it is a core step.
    pub queue: QueueState,
    pub turns: Vec<Turn>,
    pub next_token: u32,
    pub attempts: Vec<Attempt>,
    /// Per event, how many times it was delivered so far.
    pub delivered: Vec<u8>,
    /// A commit found another serve's live mark (dedupe through the table).
    pub table_duplicate: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FleetDedupeAction {
    Deliver {
        serve: u8,
        event: u8,
    },
    Commit {
        serve: u8,
        attempt: u8,
    },
    /// The second section of a broken variant's split commit.
    CommitRest {
        serve: u8,
        attempt: u8,
    },
    CommitFails {
        serve: u8,
        attempt: u8,
    },
    Answer {
        serve: u8,
        attempt: u8,
    },
    Crash {
        serve: u8,
    },
    Restart {
        serve: u8,
    },
    Tick,
}

pub struct FleetDedupeModel {
    pub cfg: FleetDedupeConfig,
}

pub fn identity_of(event: u8) -> EventIdentity {
    EventIdentity(format!("ev{event}"))
}

fn tenant() -> Tenant {
    Tenant::new("platform", "t0")
}

/// Serve `serve`'s process (its reservations in the queue name it).
fn serve_identity(serve: u8) -> ProcessIdentity {
    ProcessIdentity {
        pid: 100 + u32::from(serve),
        start_time_micros: 1,
    }
}

impl FleetDedupeModel {
    pub fn new(cfg: FleetDedupeConfig) -> Self {
        assert!(cfg.serves >= 2, "the fleet dedupe model needs two serves");
        FleetDedupeModel { cfg }
    }

    /// How long marks live, in the table and in every gate: the configuration's lifetime.
    fn mark_ttl_millis(&self) -> u64 {
        match self.cfg.variant {
            // BUG: a mark outlives every model run.
            Variant::MarksNeverExpire => u64::MAX / 4,
            _ => self.cfg.ttl_millis,
        }
    }

    fn fresh_serve(&self) -> ServeMem {
        ServeMem {
            admission: Admission::new(self.cfg.limits(), self.mark_ttl_millis()),
            pending: Vec::new(),
        }
    }

    pub fn initial_state(&self) -> FleetDedupeState {
        FleetDedupeState {
            serves: (0..self.cfg.serves)
                .map(|_| Some(self.fresh_serve()))
                .collect(),
            crashes: 0,
            now: 0,
            mark_rows: vec![None; self.cfg.deliveries.len()],
            queue: QueueState::default(),
            turns: Vec::new(),
            next_token: 1,
            attempts: Vec::new(),
            delivered: vec![0; self.cfg.deliveries.len()],
            table_duplicate: false,
        }
    }

    fn pending(st: &FleetDedupeState, serve: u8, attempt: u8) -> Option<&Pending> {
        st.serves[serve as usize]
            .as_ref()?
            .pending
            .iter()
            .find(|p| p.attempt == attempt)
    }

    fn set_stage(st: &mut FleetDedupeState, serve: u8, attempt: u8, stage: Stage) {
        if let Some(mem) = st.serves[serve as usize].as_mut() {
            for p in mem.pending.iter_mut().filter(|p| p.attempt == attempt) {
                p.stage = stage;
            }
        }
    }

    fn deliver(&self, st: &mut FleetDedupeState, serve: u8, event: u8) {
        st.delivered[event as usize] += 1;
        let attempt = st.attempts.len() as u8;
        let now = st.now;
        let Some(mem) = st.serves[serve as usize].as_mut() else {
            return;
        };
        let delivery = Delivery {
            tenant: tenant(),
            identity: identity_of(event),
            legacy: None,
            dispatch: Dispatch::Deferred,
        };
        let answer = match mem.admission.admit_and_mark(&delivery, now) {
            Admit::Refused { .. } => Some(Answer::Refused),
            Admit::InFlight => Some(Answer::InFlight),
            Admit::Duplicate => Some(Answer::Duplicate),
            Admit::Admitted { id } => {
                mem.pending.push(Pending {
                    attempt,
                    id,
                    stage: Stage::Admitted,
                });
                None
            }
        };
        st.attempts.push(Attempt {
            event,
            serve,
            at_millis: now,
            answer,
            lost_committed: None,
        });
    }

    /// The group commit's mark step at `at_millis`: the table's row of the event read, the
    /// core's [`TableMarks::mark`] deciding (what serve's group commit calls).
    fn mark_step(st: &FleetDedupeState, ttl: u64, event: u8, at_millis: u64) -> MarkStep {
        let rows = st.mark_rows[event as usize].map(|at| StoredMark {
            identity: identity_of(event),
            expires_at_millis: at.saturating_add(ttl),
        });
        TableMarks::read(rows, ttl).mark(DedupeKeys::of(&identity_of(event)), at_millis)
    }

    /// The mark step, and the row it returns written (the row a restart reads); whether it wrote.
    fn insert_mark(st: &mut FleetDedupeState, ttl: u64, event: u8, at_millis: u64) -> bool {
        match Self::mark_step(st, ttl, event, at_millis) {
            MarkStep::Write(write) => {
                st.mark_rows[event as usize] = Some(write.marked_at_millis);
                true
            }
            MarkStep::Duplicate => false,
        }
    }

    /// The turn's record and the core's submit step on the shared queue, in the transaction.
    fn queue_turn(&self, st: &mut FleetDedupeState, serve: u8, event: u8, at_millis: u64) -> u8 {
        let turn = st.turns.len() as u8;
        st.turns.push(Turn {
            event,
            marked_at_millis: at_millis,
            serve,
        });
        let key = key_of(event, turn);
        // Every serve is taken as live: no step here depends on a dead holder (recovery is the
        // admission model's subject).
        let live = |_: &ProcessIdentity| Observation::Matching;
        let before = st.queue.clone();
        let decided = steps::submit(
            &mut st.queue,
            SubmitInput {
                key: &key,
                me: serve_identity(serve),
                fresh_token: token_from_counter(st.next_token),
                now_millis: st.now,
                cap: WORKERS,
                strategy: Strategy::Concurrent { max: 1 },
                liveness: &live,
            },
        );
        match decided {
            Ok(decision) => {
                if matches!(decision.effect, SubmitEffect::Spawn(_)) {
                    st.next_token += 1;
                }
            }
            // No configuration makes the step refuse; the shell would roll the section back.
            Err(_) => st.queue = before,
        }
        turn
    }

    fn commit(&self, st: &mut FleetDedupeState, serve: u8, attempt: u8) {
        let Some(p) = Self::pending(st, serve, attempt).cloned() else {
            return;
        };
        let Attempt {
            event, at_millis, ..
        } = st.attempts[attempt as usize].clone();
        let ttl = self.mark_ttl_millis();
        let stage = match (self.cfg.variant, p.stage) {
            (Variant::Production, Stage::Admitted) => {
                if Self::insert_mark(st, ttl, event, at_millis) {
                    let turn = self.queue_turn(st, serve, event, at_millis);
                    Stage::Committed(Committed::Queued { turn })
                } else {
                    Stage::Committed(Committed::Duplicate)
                }
            }
            (Variant::CheckThenInsert | Variant::MarkAfterAck, Stage::Admitted)
                if Self::mark_step(st, ttl, event, at_millis) == MarkStep::Duplicate =>
            {
                Stage::Committed(Committed::Duplicate)
            }
            (Variant::CheckThenInsert, Stage::Admitted) => Stage::CheckedAbsent,
            (Variant::MarkAfterAck, Stage::Admitted) => {
                let turn = self.queue_turn(st, serve, event, at_millis);
                Stage::Committed(Committed::Queued { turn })
            }
            (Variant::MarkInOwnTransaction, Stage::Admitted) => {
                if Self::insert_mark(st, ttl, event, at_millis) {
                    Stage::MarkCommitted
                } else {
                    Stage::Committed(Committed::Duplicate)
                }
            }
            _ => return,
        };
        if stage == Stage::Committed(Committed::Duplicate) {
            st.table_duplicate = true;
        }
        Self::set_stage(st, serve, attempt, stage);
    }

    /// The second section of a split commit (broken variants only).
    fn commit_rest(&self, st: &mut FleetDedupeState, serve: u8, attempt: u8) {
        let Some(p) = Self::pending(st, serve, attempt).cloned() else {
            return;
        };
        let Attempt {
            event, at_millis, ..
        } = st.attempts[attempt as usize].clone();
        match p.stage {
            Stage::CheckedAbsent => {
                // The insert after the read: whatever it finds, the turn is queued.
                Self::insert_mark(st, self.mark_ttl_millis(), event, at_millis);
            }
            Stage::MarkCommitted => {}
            _ => return,
        }
        let turn = self.queue_turn(st, serve, event, at_millis);
        Self::set_stage(
            st,
            serve,
            attempt,
            Stage::Committed(Committed::Queued { turn }),
        );
    }

    /// The transaction failed and was rolled back: withdraw, then the 503.
    fn commit_fails(&self, st: &mut FleetDedupeState, serve: u8, attempt: u8) {
        let event = st.attempts[attempt as usize].event;
        let Some(mem) = st.serves[serve as usize].as_mut() else {
            return;
        };
        let Some(pos) = mem.pending.iter().position(|p| p.attempt == attempt) else {
            return;
        };
        let p = mem.pending.remove(pos);
        mem.admission.withdraw(p.id, &identity_of(event));
        st.attempts[attempt as usize].answer = Some(Answer::Withdrawn);
        if self.cfg.variant == Variant::SavepointReleasedOnFailure {
            // BUG: the savepoint's mark insert outlives the failed transaction.
            let at_millis = st.attempts[attempt as usize].at_millis;
            Self::insert_mark(st, self.mark_ttl_millis(), event, at_millis);
        }
    }

    fn answer(&self, st: &mut FleetDedupeState, serve: u8, attempt: u8) {
        let event = st.attempts[attempt as usize].event;
        let at_millis = st.attempts[attempt as usize].at_millis;
        let identity = identity_of(event);
        let Some(mem) = st.serves[serve as usize].as_mut() else {
            return;
        };
        let Some(pos) = mem.pending.iter().position(|p| p.attempt == attempt) else {
            return;
        };
        let Stage::Committed(committed) = mem.pending[pos].stage else {
            return;
        };
        let p = mem.pending.remove(pos);
        mem.admission.made_durable(&identity);
        let answer = match committed {
            Committed::Queued { turn } => Answer::Accepted { turn },
            Committed::Duplicate => {
                // The handler drops the permit: settled as abandoned.
                mem.admission.settle(p.id, Outcome::Abandoned);
                Answer::Duplicate
            }
        };
        st.attempts[attempt as usize].answer = Some(answer);
        if self.cfg.variant == Variant::MarkAfterAck && matches!(answer, Answer::Accepted { .. }) {
            // The broken order: the durable mark only now, with the 200.
            Self::insert_mark(st, self.mark_ttl_millis(), event, at_millis);
        }
    }

    fn crash(&self, st: &mut FleetDedupeState, serve: u8) {
        st.crashes += 1;
        if let Some(mem) = st.serves[serve as usize].take() {
            for p in mem.pending {
                let committed = matches!(p.stage, Stage::Committed(Committed::Queued { .. }));
                st.attempts[p.attempt as usize].lost_committed = Some(committed);
            }
        }
    }

    /// A fresh serve: the table's live marks restored into its gate.
    fn restart(&self, st: &mut FleetDedupeState, serve: u8) {
        let mut mem = self.fresh_serve();
        for (event, row) in st.mark_rows.iter().enumerate() {
            if let Some(at) = *row {
                if at + self.mark_ttl_millis() > st.now {
                    mem.admission.restore_mark(&identity_of(event as u8), at);
                }
            }
        }
        st.serves[serve as usize] = Some(mem);
    }

    pub fn format_action(&self, action: &FleetDedupeAction) -> String {
        format!("{action:?}")
    }
}

/// Turn `turn` of event `event` is turn `turn + 1` of task `e<event>` (one task per event).
fn key_of(event: u8, turn: u8) -> TurnKey {
    TurnKey::new(format!("e{event}"), u32::from(turn) + 1)
}

pub mod names {
    pub const A6: &str = "A6 one turn per identity per mark lifetime";
    pub const A3: &str = "A3 fleet-wide: every acknowledged delivery has its durable turn";
    pub const A2: &str = "A2 fleet-wide: a live mark stands for a durable turn";

    pub const BOTH_ANSWER: &str = "two serves acknowledge one identity";
    pub const TABLE_DUPLICATE: &str = "a serve's commit finds another serve's mark";
    pub const CRASH_AFTER_COMMIT: &str =
        "a serve dies after its commit, another answers the redelivery duplicate";
    pub const CRASH_BEFORE_COMMIT: &str =
        "a serve dies before its commit, another accepts the redelivery";
    pub const EXPIRED_AGAIN: &str = "a redelivery after the mark expired is accepted again";
    pub const WITHDRAWN_RETRY: &str = "a withdrawn delivery's retry is accepted";
}

fn a6_one_turn_per_lifetime(model: &FleetDedupeModel, st: &FleetDedupeState) -> bool {
    let ttl = model.cfg.ttl_millis;
    st.turns.iter().enumerate().all(|(i, a)| {
        st.turns[i + 1..]
            .iter()
            .filter(|b| b.event == a.event)
            .all(|b| a.marked_at_millis.abs_diff(b.marked_at_millis) >= ttl)
    })
}

/// A durable turn of `event`: its record and its row in the queue.
fn has_durable_turn(st: &FleetDedupeState, event: u8) -> bool {
    st.turns.iter().enumerate().any(|(t, turn)| {
        turn.event == event
            && st
                .queue
                .entries
                .iter()
                .any(|e| e.key == key_of(event, t as u8))
    })
}

fn a3_acked_is_durable(_: &FleetDedupeModel, st: &FleetDedupeState) -> bool {
    st.attempts
        .iter()
        .filter(|a| a.answer.is_some_and(Answer::acked))
        .all(|a| has_durable_turn(st, a.event))
}

fn a2_marks_are_durable_turns(model: &FleetDedupeModel, st: &FleetDedupeState) -> bool {
    st.mark_rows
        .iter()
        .enumerate()
        .all(|(event, row)| match row {
            Some(at) if at + model.cfg.ttl_millis > st.now => st
                .turns
                .iter()
                .any(|t| usize::from(t.event) == event && t.marked_at_millis == *at),
            _ => true,
        })
}

fn acked_by(st: &FleetDedupeState, event: u8) -> impl Iterator<Item = &Attempt> {
    st.attempts
        .iter()
        .filter(move |a| a.event == event && a.answer.is_some_and(Answer::acked))
}

fn both_answer(_: &FleetDedupeModel, st: &FleetDedupeState) -> bool {
    (0..st.delivered.len() as u8).any(|e| {
        let mut serves = acked_by(st, e).map(|a| a.serve);
        serves
            .next()
            .is_some_and(|first| serves.any(|other| other != first))
    })
}

fn table_duplicate(_: &FleetDedupeModel, st: &FleetDedupeState) -> bool {
    st.table_duplicate
}

fn crash_after_commit(_: &FleetDedupeModel, st: &FleetDedupeState) -> bool {
    st.attempts.iter().any(|lost| {
        lost.lost_committed == Some(true)
            && st.attempts.iter().any(|a| {
                a.event == lost.event
                    && a.serve != lost.serve
                    && a.answer == Some(Answer::Duplicate)
            })
    })
}

fn crash_before_commit(_: &FleetDedupeModel, st: &FleetDedupeState) -> bool {
    st.attempts.iter().any(|lost| {
        lost.lost_committed == Some(false)
            && st.attempts.iter().any(|a| {
                a.event == lost.event
                    && a.serve != lost.serve
                    && matches!(a.answer, Some(Answer::Accepted { .. }))
            })
    })
}

fn expired_again(_: &FleetDedupeModel, st: &FleetDedupeState) -> bool {
    (0..st.delivered.len() as u8).any(|e| {
        st.attempts
            .iter()
            .filter(|a| a.event == e && matches!(a.answer, Some(Answer::Accepted { .. })))
            .count()
            >= 2
    })
}

fn withdrawn_retry(_: &FleetDedupeModel, st: &FleetDedupeState) -> bool {
    st.attempts.iter().enumerate().any(|(i, w)| {
        w.answer == Some(Answer::Withdrawn)
            && st.attempts[i + 1..]
                .iter()
                .any(|a| a.event == w.event && matches!(a.answer, Some(Answer::Accepted { .. })))
    })
}

impl Model for FleetDedupeModel {
    type State = FleetDedupeState;
    type Action = FleetDedupeAction;

    fn init_states(&self) -> Vec<FleetDedupeState> {
        vec![self.initial_state()]
    }

    fn actions(&self, st: &FleetDedupeState, actions: &mut Vec<FleetDedupeAction>) {
        for (s, mem) in st.serves.iter().enumerate() {
            let serve = s as u8;
            let Some(mem) = mem else {
                actions.push(FleetDedupeAction::Restart { serve });
                continue;
            };
            for (e, &n) in self.cfg.deliveries.iter().enumerate() {
                // BUG (OneServeOnly): only the first serve is delivered to.
                let delivered_to = self.cfg.variant != Variant::OneServeOnly || serve == 0;
                if delivered_to && st.delivered[e] < n {
                    actions.push(FleetDedupeAction::Deliver {
                        serve,
                        event: e as u8,
                    });
                }
            }
            for p in &mem.pending {
                let attempt = p.attempt;
                match p.stage {
                    Stage::Admitted => {
                        actions.push(FleetDedupeAction::Commit { serve, attempt });
                        if self.cfg.commit_failures {
                            actions.push(FleetDedupeAction::CommitFails { serve, attempt });
                        }
                    }
                    Stage::CheckedAbsent | Stage::MarkCommitted => {
                        actions.push(FleetDedupeAction::CommitRest { serve, attempt })
                    }
                    Stage::Committed(_) => {
                        actions.push(FleetDedupeAction::Answer { serve, attempt })
                    }
                }
            }
            // BUG (CrashesOnlyWhenIdle): no crash while a delivery is held.
            let may_crash =
                self.cfg.variant != Variant::CrashesOnlyWhenIdle || mem.pending.is_empty();
            if st.crashes < self.cfg.crashes && may_crash {
                actions.push(FleetDedupeAction::Crash { serve });
            }
        }
        if st.now < self.cfg.horizon_millis {
            actions.push(FleetDedupeAction::Tick);
        }
    }

    fn next_state(
        &self,
        last: &FleetDedupeState,
        action: FleetDedupeAction,
    ) -> Option<FleetDedupeState> {
        let mut st = last.clone();
        match action {
            FleetDedupeAction::Deliver { serve, event } => self.deliver(&mut st, serve, event),
            FleetDedupeAction::Commit { serve, attempt } => self.commit(&mut st, serve, attempt),
            FleetDedupeAction::CommitRest { serve, attempt } => {
                self.commit_rest(&mut st, serve, attempt)
            }
            FleetDedupeAction::CommitFails { serve, attempt } => {
                self.commit_fails(&mut st, serve, attempt)
            }
            FleetDedupeAction::Answer { serve, attempt } => self.answer(&mut st, serve, attempt),
            FleetDedupeAction::Crash { serve } => self.crash(&mut st, serve),
            FleetDedupeAction::Restart { serve } => self.restart(&mut st, serve),
            FleetDedupeAction::Tick => st.now += 1,
        }
        Some(st)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let mut props = vec![
            Property::always(names::A6, a6_one_turn_per_lifetime),
            Property::always(names::A3, a3_acked_is_durable),
            Property::always(names::A2, a2_marks_are_durable_turns),
            Property::sometimes(names::BOTH_ANSWER, both_answer),
            Property::sometimes(names::TABLE_DUPLICATE, table_duplicate),
        ];
        let redelivered = self.cfg.deliveries.iter().any(|d| *d >= 2);
        if self.cfg.crashes > 0 && redelivered {
            props.push(Property::sometimes(
                names::CRASH_AFTER_COMMIT,
                crash_after_commit,
            ));
            props.push(Property::sometimes(
                names::CRASH_BEFORE_COMMIT,
                crash_before_commit,
            ));
        }
        if self.cfg.horizon_millis >= self.cfg.ttl_millis && redelivered {
            props.push(Property::sometimes(names::EXPIRED_AGAIN, expired_again));
        }
        if self.cfg.commit_failures && redelivered {
            props.push(Property::sometimes(names::WITHDRAWN_RETRY, withdrawn_retry));
        }
        props
    }
}

/// A readable trail of a checker path: each state's answers, marks and turns, then the action.
pub fn describe(
    model: &FleetDedupeModel,
    path: &[(FleetDedupeState, Option<FleetDedupeAction>)],
) -> String {
    let mut out = String::new();
    for (st, action) in path {
        let answers: Vec<String> = st
            .attempts
            .iter()
            .map(|a| format!("ev{}@serve{}:{:?}", a.event, a.serve, a.answer))
            .collect();
        let turns: Vec<String> = st
            .turns
            .iter()
            .map(|t| format!("ev{}@{}", t.event, t.marked_at_millis))
            .collect();
        let up: Vec<bool> = st.serves.iter().map(Option::is_some).collect();
        out.push_str(&format!(
            "    now {} up {:?} marks {:?} turns [{}] answers [{}]\n",
            st.now,
            up,
            st.mark_rows,
            turns.join(" "),
            answers.join(" ")
        ));
        if let Some(action) = action {
            out.push_str(&format!("  -> {}\n", model.format_action(action)));
        }
    }
    out
}
