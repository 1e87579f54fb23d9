//! The slot model: every interleaving of detached and attached submitters, spawned runners,
//! reconcilers and cancellers, with crashes, spawn faults and pid reuse, driven through the
//! production core's steps (`tollgate_core::slots::steps`) and nothing else.
//!
//! The model owns only what production gets from the world: a process table and a table of live
//! works (which answer the core's liveness questions, `observe` and `observe_work`), a counter of
//! fresh tokens, the turn records (written, ran, ended), and each process's program counter. Each
//! action of a role is one locked section, i.e. one call of a core step, or one effect performed
//! outside the lock (a spawn, a kill, a command that runs). What a role does next is decided by the
//! effect the step returned, as the shell's driver decides it; the model types no sequence of
//! primitives itself, so a changed step changes the model with it.
//!
//! Processes and their programs (mirroring the shell):
//! - a **detached submitter** submits its turns one after the other (or from concurrent threads):
//!   the turn's record and `submit` in one section (strategies `queue`, `drop`, `concurrent=N`,
//!   `debounce` on shared task names); on `Spawn` it spawns the runner outside the lock, then runs
//!   the two publishes of the `Handoff` (`handoff_publish_first`, `handoff_publish_second`), or
//!   `spawn_failed` when the spawn failed (or started a child it could not record, which lives on
//!   and tries its take-over).
//! - an **attached submitter** runs `attached_start` and then its turn's work itself; it finishes
//!   like a runner.
//! - a spawned **runner** runs `runner_take_over`; on `Run` it starts its turn's **work** (the
//!   command's process tree) and records it (`work_started`); the work exits, the result is
//!   written, and `runner_finish` leaves the queue and may hand off the next parked row.
//! - a **work** lives until its command exits or it is killed. A runner's (or attached
//!   submitter's) death does not end it: the model's works table keeps it, occupancy counts it
//!   (S1 over work), and reconcile's `Kill` effect makes the reconciler kill it, in a later step,
//!   before the turn may run again (S2 over work).
//! - a **reconciler** loops over `reconcile` (listing orphaned turns: a record, no row, not ended)
//!   and performs each effect: a spawn with its handoff, a kill. It can start at any time while
//!   others work (bounded by a budget), and once more whenever everything else has stopped and the
//!   queue changed since the last complete pass (that last pass is what the quiescent properties
//!   S6 and S9 speak about). With [`SlotConfig::runner_reconciles`], a runner whose work runs may
//!   also run a reconcile pass on the side (a reconciler that holds a slot itself).
//! - a **canceller** runs `cancel` of the first task (within a budget) and kills the works the
//!   effect lists, then cancels again.
//! - the **environment**: any model process may die at any step (crash budget), including a
//!   submitter inside its section after writing the turn's record (an orphan for reconcile); a
//!   dead pid may be taken by an unrelated process, or by a newly spawned child, with another
//!   start time (reuse budget); observations of the old identity on a reused pid then come back
//!   either `Gone` or `Ambiguous` (chosen once at reuse time; ambiguous counts as live).
//!
//! Time: the submissions of a run take turns between two clocks 100 ms apart (every second one
//! runs behind, for enqueue coalescing; [`SlotConfig::clock_millis`]), whichever submitter makes
//! them; runners, reconcilers and cancellers use [`config::LATE_MILLIS`], after every quiet
//! period, so a debounce waiter is due at every start after its submission (production's waker is
//! such a start).
//!
//! Bounds: the submissions (submitters × turns, each a new turn), the crash, reuse, reconcile and
//! cancel budgets. Spawns need no budget of their own: every spawn follows a reservation of a row
//! that needs a runner, and a row needs another runner only after a crash or a spawn fault.
//!
//! Reductions (all sound for the properties checked): the command's start and `work_started` are
//! one action (the model observes works by id, as production finds them by their environment
//! marker, so the unrecorded leader in between changes nothing it can see); a dead runner's work
//! ends only by a kill (its exiting on its own earlier is the same as the kill coming earlier); an
//! unrelated process reusing a pid is only modelled with ambiguous observations (observed `Gone`
//! it is indistinguishable from no reuse); after each step the state forgets finished roles, dead
//! processes nothing refers to, retired tokens no role holds ([`SlotModel`]'s `normalize`). A
//! state that already breaks a safety property ends its path, so reported trails stop at the first
//! violation.
//!
//! Symmetry reduction (checked with stateright's `symmetry()`; [`canonical`]): a state's
//! representative is its canonical encoding, in which process ids and tokens are renamed by
//! order of first appearance, the model's lists that are sets are sorted, and interchangeable
//! submitters (one task, at most one crash) are permuted to the least encoding. The checker keeps
//! one state per class; [`crate::reduction::classes`] shows on the CI configurations that every
//! class of the full state space is met and that every property answers alike within a class.
//!
//! Layout, one module per job: [`config`] (sizes, budgets, strategies, the variant), [`state`]
//! (processes, works, roles and their program counters, the tables the core observes), [`actors`]
//! (the programs of the processes: each action one core step or one effect), [`transitions`] (one
//! action applied: the environment's crashes and pid reuse, the transition checks, the state
//! reduction), [`actions`] (what can happen next: the stateright `Model`), [`properties`]
//! (S1-S12 over the state), [`broken`] (the deliberately broken variants), [`canonical`] (the
//! compact encoding and the representative of symmetry reduction), [`render`] (counterexample
//! trails) and [`walk`] (seeded random paths for conformance replays).

pub mod actions;
mod actors;
mod broken;
pub mod canonical;
pub mod config;
pub mod deps;
pub mod order;
pub mod properties;
pub mod render;
pub mod state;
pub mod store;
mod transitions;
pub mod walk;

pub use actions::SlotAction;
pub use config::{SlotConfig, Variant, TASK};
pub use properties::names;
pub use render::{describe_action, describe_queue, render_trail, short};
pub use state::{
    event, token_from_counter, token_number, violation, Pc, Proc, ProcKind, ProcTable, Role,
    SlotState, Then,
};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
pub use walk::{initial_state, random_walk};

/// The model: a configuration; the state is [`SlotState`].
#[derive(Clone, Debug)]
pub struct SlotModel {
    pub cfg: SlotConfig,
    /// The event bits of every state any transition of this model produced (shared by the
    /// checker's threads and by clones): which examples the explored transitions reach.
    events_generated: Arc<AtomicU32>,
}

impl SlotModel {
    pub fn new(cfg: SlotConfig) -> Self {
        SlotModel {
            cfg,
            events_generated: Arc::new(AtomicU32::new(0)),
        }
    }

    /// Whether a transition generated so far reached the example (`sometimes` property) named
    /// `name`. With the symmetry reduction this, not the checker's discoveries, says which
    /// examples were reached: the canonical encoding leaves the event bits out, so the state a
    /// new event first appears in may be merged into one without it, but the transition that
    /// produced the event was generated all the same.
    pub fn example_generated(&self, name: &str) -> bool {
        let generated = self.events_generated.load(Ordering::Relaxed);
        actions::example_event(name).is_some_and(|bit| generated & bit != 0)
    }
}
