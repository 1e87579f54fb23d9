//! The queue document and enqueue: FIFO by `queue_id`, with coalesced enqueue times.

use super::order::PauseSet;
use super::{ProcessIdentity, SlotError, SlotToken, WorkRecord};
use serde::{Deserialize, Serialize};
use std::cell::OnceCell;
use std::collections::{HashMap, HashSet};
use std::fmt;

/// Version written into `queue.json`; older documents (missing fields) still load.
pub const QUEUE_FORMAT_VERSION: u32 = 1;
/// The queue's explicit bound. Beyond it an enqueue is refused rather than growing without end.
pub const MAX_QUEUE_ROWS: usize = 100_000;
/// Task names are path components on disk; keep them short and plain.
pub const MAX_TASK_NAME_BYTES: usize = 64;

/// Names one turn of one task.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct TurnKey {
    pub task: String,
    pub turn: u32,
}

impl TurnKey {
    pub fn new(task: impl Into<String>, turn: u32) -> Self {
        TurnKey {
            task: task.into(),
            turn,
        }
    }
}

impl fmt::Display for TurnKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} turn {}", self.task, self.turn)
    }
}

/// Task names become directory names: ASCII letters, digits, `.`, `_`, `-`, not starting with `.`.
pub fn validate_task_name(name: &str) -> Result<(), SlotError> {
    let bad_char = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')));
    let reason = if name.is_empty() {
        Some("the name is empty".to_string())
    } else if name.len() > MAX_TASK_NAME_BYTES {
        Some(format!(
            "{name:?} is longer than {MAX_TASK_NAME_BYTES} bytes"
        ))
    } else if name.starts_with('.') {
        Some(format!("{name:?} starts with '.'"))
    } else {
        bad_char
            .map(|bad| format!("{name:?} contains {bad:?}; use letters, digits, '.', '_' or '-'"))
    };
    match reason {
        Some(reason) => Err(SlotError::InvalidTaskName { reason }),
        None => Ok(()),
    }
}

/// An occupancy token on a queue row: who reserved the slot, with which token, and (once bound)
/// which child process was spawned for it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RunnerSlotReservation {
    pub reserver: ProcessIdentity,
    pub token: SlotToken,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub child: Option<ProcessIdentity>,
}

impl RunnerSlotReservation {
    /// A fresh, unbound reservation. The token type already refuses nil.
    pub fn new(reserver: ProcessIdentity, token: SlotToken) -> Self {
        RunnerSlotReservation {
            reserver,
            token,
            child: None,
        }
    }
}

/// Where a queue row stands.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum RowState {
    /// Enqueued by `enqueue_owner`; `owner` differs from it only when another controller adopted
    /// the row (an adopted waiter, which occupies).
    Waiting {
        enqueue_owner: ProcessIdentity,
        owner: ProcessIdentity,
    },
    /// Being started or run by `dispatch_owner` (a runner, an attached submitter, or a controller
    /// that adopted the row before spawning).
    Dispatching { dispatch_owner: ProcessIdentity },
    /// No owner: waits for a slot.
    Parked,
}

/// One pending or active turn (the seed's "job").
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct QueueEntry {
    pub queue_id: u64,
    #[serde(flatten)]
    pub key: TurnKey,
    pub enqueued_at_millis: u64,
    #[serde(flatten)]
    pub state: RowState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slot_reservation: Option<RunnerSlotReservation>,
    /// Earliest time the row may start (a debounce deadline); 0 when it may start at once.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub ready_at_millis: u64,
    /// `tollgate cancel` asked for this turn while a runner starts or runs it: the runner honours
    /// it at its take-over, before it spawns anything. Absent in older queue files (false).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cancel_requested: bool,
    /// `submit --priority`: among parked rows that may start, the highest starts first (FIFO by
    /// `queue_id` among equals; spec/slots.md, "Scheduling"). Absent in older queue files (0).
    #[serde(default, skip_serializing_if = "is_zero_i32")]
    pub priority: i32,
    /// The turns this row waits for (`submit --after`/`--after-success`): it may start only when
    /// none of them has a row any more (R1). At most [`super::MAX_DEPENDENCIES`]; absent in older
    /// queue files (none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<super::Dependency>,
}

fn is_zero(value: &u64) -> bool {
    *value == 0
}

fn is_zero_i32(value: &i32) -> bool {
    *value == 0
}

/// The identity recorded as the executor of a turn once it has taken its slot over.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RunnerRecord {
    #[serde(flatten)]
    pub key: TurnKey,
    pub identity: ProcessIdentity,
    /// A foreground (`--attach`) executor: occupies, but is not a detached runner.
    #[serde(default)]
    pub attached: bool,
}

fn default_version() -> u32 {
    QUEUE_FORMAT_VERSION
}

/// The whole of `queue.json`: rows in FIFO order and the recorded runners.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct QueueState {
    #[serde(default = "default_version")]
    pub version: u32,
    /// The next `queue_id` to hand out; ids are never reused, even after rows leave.
    #[serde(default)]
    pub next_queue_id: u64,
    #[serde(default)]
    pub entries: Vec<QueueEntry>,
    #[serde(default)]
    pub runners: Vec<RunnerRecord>,
    /// The recorded works of turns (spec/slots.md, "Work"): added when a runner takes its slot
    /// over, removed when its runner leaves, or when reconcile or cancel saw it gone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub works: Vec<WorkRecord>,
    /// What `tollgate pause` holds (spec/slots.md, "Scheduling"). Absent in older files (nothing).
    #[serde(default, skip_serializing_if = "PauseSet::is_empty")]
    pub paused: PauseSet,
}

impl Default for QueueState {
    fn default() -> Self {
        QueueState {
            version: QUEUE_FORMAT_VERSION,
            next_queue_id: 1,
            entries: Vec::new(),
            runners: Vec::new(),
            works: Vec::new(),
            paused: PauseSet::default(),
        }
    }
}

impl QueueState {
    pub fn row_index(&self, key: &TurnKey) -> Option<usize> {
        self.entries.iter().position(|e| &e.key == key)
    }

    pub fn row(&self, key: &TurnKey) -> Option<&QueueEntry> {
        self.entries.iter().find(|e| &e.key == key)
    }

    /// The row of `key` for changing; what broken model variants use to re-type a decision.
    pub fn row_mut(&mut self, key: &TurnKey) -> Result<&mut QueueEntry, SlotError> {
        self.entries
            .iter_mut()
            .find(|e| &e.key == key)
            .ok_or_else(|| SlotError::UnknownRow { key: key.clone() })
    }

    /// The recorded runner of a turn, alive or not.
    pub fn runner(&self, key: &TurnKey) -> Option<&RunnerRecord> {
        self.runners.iter().find(|r| &r.key == key)
    }

    /// Records `identity` as the runner of `key`, replacing any earlier record.
    pub fn set_runner(&mut self, key: &TurnKey, identity: ProcessIdentity, attached: bool) {
        match self.runners.iter_mut().find(|r| &r.key == key) {
            Some(record) => {
                record.identity = identity;
                record.attached = attached;
            }
            None => self.runners.push(RunnerRecord {
                key: key.clone(),
                identity,
                attached,
            }),
        }
    }

    pub(crate) fn clear_runner(&mut self, key: &TurnKey) {
        self.runners.retain(|r| &r.key != key);
    }

    /// The recorded works of `key`.
    pub fn works_of<'a>(&'a self, key: &'a TurnKey) -> impl Iterator<Item = &'a WorkRecord> + 'a {
        self.works.iter().filter(move |w| &w.key == key)
    }

    /// Checks the structural invariants every published queue keeps (queue ids strictly rising,
    /// enqueue times not falling, one row per turn, ids below `next_queue_id`).
    pub fn check_structure(&self) -> Result<(), String> {
        let mut previous: Option<&QueueEntry> = None;
        let mut seen = std::collections::HashSet::with_capacity(self.entries.len());
        for entry in &self.entries {
            if entry.queue_id >= self.next_queue_id {
                return Err(format!(
                    "row {} has queue_id {} not below next_queue_id {}",
                    entry.key, entry.queue_id, self.next_queue_id
                ));
            }
            if let Some(prev) = previous {
                if entry.queue_id <= prev.queue_id {
                    return Err(format!(
                        "queue_id {} follows {}",
                        entry.queue_id, prev.queue_id
                    ));
                }
                if entry.enqueued_at_millis < prev.enqueued_at_millis {
                    return Err(format!(
                        "enqueued_at_millis falls from {} to {} at queue_id {}",
                        prev.enqueued_at_millis, entry.enqueued_at_millis, entry.queue_id
                    ));
                }
            }
            if !seen.insert(&entry.key) {
                return Err(format!("{} has more than one row", entry.key));
            }
            previous = Some(entry);
        }
        if self.paused.tasks.len() > super::order::MAX_PAUSED_TASKS {
            return Err(format!(
                "{} tasks are paused, more than the limit of {}",
                self.paused.tasks.len(),
                super::order::MAX_PAUSED_TASKS
            ));
        }
        Ok(())
    }
}

/// A read-only view of a queue for one start decision, whose per-row questions are answered
/// from indexes built once for the whole decision (issue 12: a start-next asks "how many rows of
/// this task are active?" and "is this dependency still queued?" for every parked row, which as
/// scans made a decision quadratic in the queue's rows).
///
/// The indexes are derived from the state it borrows, which cannot change while the view lives,
/// so they can never go stale; the state itself (its equality, hash and serialisation) carries
/// nothing new, and the models' state counts are unchanged. Dereferences to the [`QueueState`].
#[derive(Debug)]
pub struct QueueLookup<'a> {
    state: &'a QueueState,
    /// Task → its rows that are not parked (running or being started): one pass over the rows,
    /// holding only the active ones (bounded by the slots in use, not by the queue).
    active_by_task: HashMap<&'a str, usize>,
    /// Every row's turn, built on the first dependency question only (most rows have none).
    keys: OnceCell<HashSet<&'a TurnKey>>,
}

impl<'a> QueueLookup<'a> {
    /// Indexes `state` for one decision: O(rows), once.
    pub fn new(state: &'a QueueState) -> Self {
        let mut active_by_task: HashMap<&'a str, usize> = HashMap::new();
        for entry in &state.entries {
            if !matches!(entry.state, RowState::Parked) {
                *active_by_task.entry(entry.key.task.as_str()).or_insert(0) += 1;
            }
        }
        QueueLookup {
            state,
            active_by_task,
            keys: OnceCell::new(),
        }
    }

    /// The state this view indexes.
    pub fn state(&self) -> &'a QueueState {
        self.state
    }

    /// Rows of `task` that are running or being started: what
    /// [`crate::scopes::running_in_scope`] scans for, in O(1).
    pub fn running_in_scope(&self, task: &str) -> usize {
        self.active_by_task.get(task).copied().unwrap_or(0)
    }

    /// Whether `key` has a row ([`QueueState::row`]`(key).is_some()`), in O(1) after the first
    /// call's O(rows).
    pub fn has_row(&self, key: &TurnKey) -> bool {
        self.keys
            .get_or_init(|| self.state.entries.iter().map(|e| &e.key).collect())
            .contains(key)
    }
}

impl std::ops::Deref for QueueLookup<'_> {
    type Target = QueueState;

    fn deref(&self) -> &QueueState {
        self.state
    }
}

/// What [`enqueue`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EnqueueOutcome {
    Enqueued {
        queue_id: u64,
    },
    /// The turn already had a row; nothing changed.
    AlreadyQueued {
        queue_id: u64,
    },
}

impl EnqueueOutcome {
    pub fn queue_id(&self) -> u64 {
        match self {
            EnqueueOutcome::Enqueued { queue_id } | EnqueueOutcome::AlreadyQueued { queue_id } => {
                *queue_id
            }
        }
    }
}

/// The id the next enqueue hands out, of a queue whose counter is `next_queue_id` and whose
/// highest row id is `last_queue_id`: never below an existing row's (a document whose counter is
/// behind its rows), never 0. A store's unlocked hint computes it from those two values alone.
pub fn next_queue_id(next_queue_id: u64, last_queue_id: Option<u64>) -> u64 {
    let floor = last_queue_id.map_or(0, |id| id.saturating_add(1));
    next_queue_id.max(floor).max(1)
}

impl QueueState {
    /// The id the next [`enqueue`] hands out ([`next_queue_id`]).
    pub fn id_of_next_enqueue(&self) -> u64 {
        next_queue_id(self.next_queue_id, self.entries.last().map(|e| e.queue_id))
    }
}

/// Hands out the next id (`next_queue_id`, never below an existing row's) and moves the counter
/// past it: the id of a new row, or of a new turn that gets none (an `--after-success` turn whose
/// dependency had already failed), so that the id its record and its generated task name carry
/// is never handed to another turn. Ids are never reused: a counter at its end refuses instead of
/// wrapping.
pub fn spend_queue_id(state: &mut QueueState) -> Result<u64, SlotError> {
    let queue_id = state.id_of_next_enqueue();
    state.next_queue_id = queue_id
        .checked_add(1)
        .ok_or(SlotError::QueueIdsExhausted)?;
    Ok(queue_id)
}

/// Appends a waiting row for `key`, owned by `owner`.
///
/// FIFO is `queue_id`; the row's time is `max(now_millis, last row's time)`, so a caller whose clock
/// runs behind cannot make the times fall. A second enqueue of the same turn changes nothing.
pub fn enqueue(
    state: &mut QueueState,
    key: &TurnKey,
    owner: ProcessIdentity,
    now_millis: u64,
) -> Result<EnqueueOutcome, SlotError> {
    validate_task_name(&key.task)?;
    if let Some(existing) = state.row(key) {
        return Ok(EnqueueOutcome::AlreadyQueued {
            queue_id: existing.queue_id,
        });
    }
    if state.entries.len() >= MAX_QUEUE_ROWS {
        return Err(SlotError::QueueFull {
            limit: MAX_QUEUE_ROWS,
        });
    }
    let last_millis = state.entries.last().map_or(0, |e| e.enqueued_at_millis);
    let queue_id = spend_queue_id(state)?;
    state.entries.push(QueueEntry {
        queue_id,
        key: key.clone(),
        enqueued_at_millis: now_millis.max(last_millis),
        state: RowState::Waiting {
            enqueue_owner: owner,
            owner,
        },
        slot_reservation: None,
        ready_at_millis: 0,
        cancel_requested: false,
        priority: 0,
        after: Vec::new(),
    });
    debug_assert!(state.check_structure().is_ok());
    debug_assert!(
        state.entries.iter().all(|e| e.queue_id <= queue_id),
        "a new row's id is the highest of the queue (FIFO is the id)"
    );
    debug_assert!(
        state.next_queue_id > queue_id,
        "an id is never handed out twice"
    );
    Ok(EnqueueOutcome::Enqueued { queue_id })
}
