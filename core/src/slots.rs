//! The runner slot protocol (spec/slots.md): occupancy tokens that keep concurrent submitters,
//! finishing runners and reconcilers from ever starting more detached runners than slots.
//!
//! The state is a [`QueueState`] value (the contents of `queue.json`); each operation takes it by
//! `&mut` and either changes it and reports what the caller must do (spawn, park, nothing), or
//! returns a [`SlotError`] and leaves it exactly as it was.

pub mod departure;
mod deps;
mod identity;
mod occupancy;
pub mod order;
mod queue;
mod reconcile;
mod reserve;
mod rules;
pub mod sections;
pub mod steps;
mod takeover;
mod token;
mod work;

pub use departure::{leave, Leave, Left};
pub use deps::{
    check_dependencies, depart, dependencies_met, retry_due, submit_after, AfterRule, AfterSubmit,
    DepartInput, Departure, Dependency, DependencyCheck, Ended, Requeued, RetryPlan, MAX_ATTEMPTS,
    MAX_BACKOFF_MILLIS, MAX_DEPENDENCIES,
};
pub use identity::{Liveness, Observation, ProcessIdentity};
pub use occupancy::{
    acting_queue_holder, counted_identities, live_runner_for_turn, occupied_runner_slots, Reserving,
};
pub use order::{
    held_back, start_candidates, waker_needed, HeldBack, PauseScope, PauseSet, MAX_PAUSED_TASKS,
};
pub use queue::{
    enqueue, next_queue_id, spend_queue_id, validate_task_name, EnqueueOutcome, QueueEntry,
    QueueLookup, QueueState, RowState, RunnerRecord, RunnerSlotReservation, TurnKey,
    MAX_QUEUE_ROWS, MAX_TASK_NAME_BYTES, QUEUE_FORMAT_VERSION,
};
pub use reconcile::{reconcile_step, reconcile_step_with, ReconcileStep};
pub use reserve::{
    adopt_row, bind_runner_slot_child, complete_runner_spawn_first, complete_runner_spawn_second,
    park, release_runner_slot, reserve_runner_slot, reserve_runner_slot_with, set_ready_at,
    start_next_parked, start_next_parked_with, token_fenced_row_after_bind, ReserveOutcome,
    StartNext,
};
pub use rules::{ProductionRules, SlotRules};
pub use takeover::{finish_turn, take_over_reserved_slot, TakeOver};
pub use token::SlotToken;
pub use work::{WorkId, WorkRecord};

/// Why a slot operation refused to change the queue. Each variant leaves the state untouched.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SlotError {
    #[error("QUEUE_SLOT_TOKEN_NIL: a slot token must be a non-nil UUID")]
    NilToken,
    #[error("QUEUE_SLOT_TOKEN_MALFORMED: {given:?} is not a hyphenated UUID")]
    MalformedToken { given: String },
    #[error("QUEUE_SLOT_TOKEN_MISMATCH: token {given} is not the current reservation of {key}")]
    TokenMismatch { key: TurnKey, given: String },
    #[error("QUEUE_SLOT_TOKEN_REUSED: token {token} was already used for {key}")]
    TokenReused { key: TurnKey, token: SlotToken },
    #[error("QUEUE_ROW_UNKNOWN: no queue row for {key}")]
    UnknownRow { key: TurnKey },
    #[error("QUEUE_FULL: the queue holds its limit of {limit} rows")]
    QueueFull { limit: usize },
    #[error("QUEUE_IDS_EXHAUSTED: next_queue_id has reached u64::MAX; no new row can get an id")]
    QueueIdsExhausted,
    #[error("QUEUE_HANDOFF_FENCED: the row of {key} changed since the spawn; the handoff stops")]
    HandoffFenced { key: TurnKey },
    #[error("QUEUE_NOT_OWNER: {key} is not dispatched by {identity}")]
    NotOwner {
        key: TurnKey,
        identity: ProcessIdentity,
    },
    #[error("TASK_NAME_INVALID: {reason}")]
    InvalidTaskName { reason: String },
    #[error("QUEUE_TURN_BUSY: another live process already starts or runs {key}")]
    TurnBusy { key: TurnKey },
    #[error("QUEUE_WORK_UNKNOWN: no recorded work {work} for {key}")]
    UnknownWork { key: TurnKey, work: String },
    #[error("QUEUE_TOO_MANY_PAUSED: at most {limit} tasks can be paused one by one; pause the home instead")]
    TooManyPaused { limit: usize },
    #[error("QUEUE_RETRY_KEY_MISSING: {key} is due a retry but no turn was created for it")]
    RetryKeyMissing { key: TurnKey },
    #[error("QUEUE_TOO_MANY_DEPENDENCIES: a turn may wait for at most {limit} turns")]
    TooManyDependencies { limit: usize },
    #[error("TASK_TURNS_EXHAUSTED: task {task:?} has used every turn number up to {}; submit to a new task", u32::MAX)]
    TurnNumbersExhausted { task: String },
    #[error("TURN_PLACE_TAKEN: the place of {key} holds a record or a folder although no higher turn is recorded")]
    TurnPlaceTaken { key: TurnKey },
    #[error("TURN_RECORD_INVALID: the record of {key} would not load ({detail})")]
    RecordInvalid { key: TurnKey, detail: String },
}

impl SlotError {
    /// The stable, documented code of the error (what scripts match on).
    pub fn code(&self) -> &'static str {
        match self {
            SlotError::NilToken => "QUEUE_SLOT_TOKEN_NIL",
            SlotError::MalformedToken { .. } => "QUEUE_SLOT_TOKEN_MALFORMED",
            SlotError::TokenMismatch { .. } => "QUEUE_SLOT_TOKEN_MISMATCH",
            SlotError::TokenReused { .. } => "QUEUE_SLOT_TOKEN_REUSED",
            SlotError::UnknownRow { .. } => "QUEUE_ROW_UNKNOWN",
            SlotError::QueueFull { .. } => "QUEUE_FULL",
            SlotError::QueueIdsExhausted => "QUEUE_IDS_EXHAUSTED",
            SlotError::HandoffFenced { .. } => "QUEUE_HANDOFF_FENCED",
            SlotError::NotOwner { .. } => "QUEUE_NOT_OWNER",
            SlotError::InvalidTaskName { .. } => "TASK_NAME_INVALID",
            SlotError::TurnBusy { .. } => "QUEUE_TURN_BUSY",
            SlotError::UnknownWork { .. } => "QUEUE_WORK_UNKNOWN",
            SlotError::TooManyPaused { .. } => "QUEUE_TOO_MANY_PAUSED",
            SlotError::RetryKeyMissing { .. } => "QUEUE_RETRY_KEY_MISSING",
            SlotError::TooManyDependencies { .. } => "QUEUE_TOO_MANY_DEPENDENCIES",
            SlotError::TurnNumbersExhausted { .. } => "TASK_TURNS_EXHAUSTED",
            SlotError::TurnPlaceTaken { .. } => "TURN_PLACE_TAKEN",
            SlotError::RecordInvalid { .. } => "TURN_RECORD_INVALID",
        }
    }
}
