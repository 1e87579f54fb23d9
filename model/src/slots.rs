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
//!
//! Layout, one module per job: [`config`] (sizes, budgets, the variant), [`state`] (processes,
//! roles and their program counters, the process table the core observes), [`actors`] (the
//! programs of submitters, runners and reconcilers: each step one call sequence into the core),
//! [`transitions`] (one action applied: the environment's crashes and pid reuse, the transition
//! checks, the state reduction), [`actions`] (what can happen next: the stateright `Model`),
//! [`properties`] (S1-S9 over the state), [`broken`] (the deliberately broken variants),
//! [`render`] (counterexample trails) and [`walk`] (seeded random paths for conformance replays).

pub mod actions;
mod actors;
mod broken;
pub mod config;
pub mod properties;
pub mod render;
pub mod state;
mod transitions;
pub mod walk;

pub use actions::SlotAction;
pub use config::{SlotConfig, Variant, TASK};
pub use properties::names;
pub use render::{describe_action, describe_queue, render_trail, short, token_number};
pub use state::{
    event, token_from_counter, violation, Pc, Proc, ProcKind, ProcTable, Role, SlotState, Then,
};
pub use walk::{initial_state, random_walk};

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
