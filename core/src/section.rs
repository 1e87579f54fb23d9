//! A locked section as data (spec/steps.md): what a step read of the records, what it asks to
//! read more, and what it writes.
//!
//! A step of the shell's locked sections is a pure function of the part of the queue the store
//! loaded, the records it read ([`Records`]) and the section's inputs (who runs it, now, fresh
//! tokens, liveness). It changes the part in place and returns a [`Step`]: the record writes and a
//! typed effect for the driver. When it needs a record that was not read it returns
//! [`Unread::Records`] naming every record it is missing; the shell's one section runner reads
//! them in the same transaction and calls the step again on the part as loaded. A step that needs
//! more of the queue than the part returns [`Unread::Queue`]: the runner rolls back and runs it
//! once more on the whole queue. Nothing a step depends on reaches it any other way, so the
//! models, which call the same steps with their own records, check what production runs.
//! [`decide`] is that call-read-call loop, shared by the shell's runner and the models, each with
//! its own way to read a record.

use crate::admission::{EventIdentity, MarkWrite, StoredMark};
use crate::fleet::{FleetError, FleetView, LeaseTable};
use crate::records::{TaskRecord, TurnRecord};
use crate::slots::steps::{Loaded, Reads};
use crate::slots::{
    Liveness, Observation, ProcessIdentity, QueueState, SlotError, TurnKey, WorkRecord,
};
use std::collections::{BTreeMap, BTreeSet};

/// The most rounds of record reads one section may take before its step must decide: each round
/// reads everything the step named at once, and no step needs more than a few (the departure of
/// a turn reads its record, then its dependents' and its task's).
pub const MAX_READ_ROUNDS: usize = 8;

/// What a commit stands for, and so whether it must reach the disk before the section returns
/// (spec/store.md, "Durability"). The store makes it so;
/// which class a section is belongs to the section.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Commit {
    /// The caller is about to promise something on the strength of this commit (`submit`
    /// printing that a turn is queued or started, `serve` answering 200): it is synced before
    /// `transact` returns (unless the home's `durability` is `os`). The default.
    Promise,
    /// An internal transition (take-over, handoff publishes, finish, reconcile): a power loss
    /// may undo it, since it kills every process and reconcile repairs from the last synced
    /// commit. It still reaches the disk before any later promise commit does.
    Internal,
    /// A section known beforehand to record a turn's outcome (the runner's finish): synced like
    /// a promise (an outcome is what `wait` reports and what reconcile trusts), so it needs no
    /// separate synced commit after it; `durability = "os"` relaxes it only where it relaxes an
    /// internal commit.
    Outcome,
}

/// One locked section: which commit class it is, what it reads of the queue first, and its step.
/// The shell's one section runner runs every section through this; the models call the steps.
pub trait Section {
    type Effect;

    fn commit(&self) -> Commit;

    /// The part of the queue loaded first.
    fn reads(&self) -> Reads;

    /// Decides on `part` (changed in place; left as loaded on a [`Halt`]) and `view`.
    fn step<L: Liveness>(
        &self,
        part: &mut QueueState,
        view: &View<'_, L>,
    ) -> Result<Step<Self::Effect>, Halt>;

    /// The most rounds of record reads this section's step may take ([`MAX_READ_ROUNDS`]; a
    /// section composing several steps, each reading in turn, more).
    fn max_read_rounds(&self) -> usize {
        MAX_READ_ROUNDS
    }

    /// The section to run again when the store refused its step's write group `group`
    /// ([`Writes::groups`]) with `error`: `None` (the default, a section without groups) makes
    /// the refusal the section's error.
    fn without_group(&self, group: usize, error: String) -> Option<Self>
    where
        Self: Sized,
    {
        let _ = (group, error);
        None
    }
}

/// Why [`decide`] returned no decision; the section publishes nothing.
#[derive(Debug, PartialEq, Eq)]
pub enum Undecided<E> {
    /// The step needs more of the queue than the part: run again on what this names.
    Widen(Reads),
    Refused(SlotError),
    Fleet(FleetError),
    /// Reading the records the step asked for failed.
    Read(E),
    /// The step still asked for records after [`MAX_READ_ROUNDS`] rounds.
    TooManyReads,
}

/// Decides `section` on `part` as loaded: calls its step on a fresh copy of the part, and while
/// the step asks for records it has not read ([`Unread::Records`]), reads them with `read` into
/// the section's [`Records`] and calls it again on the part as loaded, at most
/// [`MAX_READ_ROUNDS`] times. Returns the part as the step changed it with the step's decision;
/// applying the writes and committing is the caller's.
pub fn decide<X: Section, L: Liveness, E>(
    section: &X,
    part: &QueueState,
    loaded: &Loaded,
    liveness: &L,
    fleet: Option<&FleetView>,
    mut read: impl FnMut(&Need, &mut Records) -> Result<(), E>,
) -> Result<(QueueState, Step<X::Effect>), Undecided<E>> {
    let mut records = Records::default();
    for _ in 0..section.max_read_rounds() {
        let mut attempt = part.clone();
        let view = View {
            loaded,
            records: &records,
            liveness,
            fleet,
        };
        match section.step(&mut attempt, &view) {
            Ok(step) => return Ok((attempt, step)),
            Err(Halt::Unread(Unread::Records(need))) => {
                debug_assert!(
                    !records.missing(&need).is_empty(),
                    "asked again for what it read"
                );
                read(&need, &mut records).map_err(Undecided::Read)?;
            }
            Err(Halt::Unread(Unread::Queue(next))) => return Err(Undecided::Widen(next)),
            Err(Halt::Refused(e)) => return Err(Undecided::Refused(e)),
            Err(Halt::Fleet(e)) => return Err(Undecided::Fleet(e)),
        }
    }
    Err(Undecided::TooManyReads)
}

/// What the store holds at a turn's place.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum TurnSlot {
    /// The turn's record (boxed: a record is large, and most slots read are records).
    Record(Box<TurnRecord>),
    /// No record and nothing left at its place: the number is free for a new turn.
    Free,
    /// No record, but the turn's folder is still there (a removal cut short): not free for a new
    /// turn, whose logs would otherwise be mixed with an older turn's.
    Leftover,
}

/// Records a step asks for that its section has not read yet.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Need {
    pub turns: BTreeSet<TurnKey>,
    pub tasks: BTreeSet<String>,
    /// Tasks whose recorded turn numbers are asked for.
    pub numbers: BTreeSet<String>,
    /// Identities whose dedupe marks (serve's mark table) are asked for.
    pub marks: BTreeSet<EventIdentity>,
    /// The write group whose decision asked (a batch's delivery, [`Writes::groups`]): a read that
    /// fails fails that group alone, and the section runs again without it
    /// ([`Section::without_group`]). `None`: the section's own read, whose failure is the
    /// section's.
    pub group: Option<usize>,
}

impl Need {
    pub fn is_empty(&self) -> bool {
        self.turns.is_empty()
            && self.tasks.is_empty()
            && self.numbers.is_empty()
            && self.marks.is_empty()
    }

    /// Adds what `other` needs.
    pub fn merge(&mut self, other: Need) {
        self.turns.extend(other.turns);
        self.tasks.extend(other.tasks);
        self.numbers.extend(other.numbers);
        self.marks.extend(other.marks);
        self.group = self.group.or(other.group);
    }
}

/// Why a step could not decide on what its section read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unread {
    /// These records: read them in the same transaction and call the step again.
    Records(Need),
    /// More of the queue than the part loaded: roll back and run again on what this names (the
    /// whole queue, or a part the step can now name, e.g. a task whose name it generated).
    Queue(Reads),
}

/// Why a step stopped without a decision: more to read, or a refusal that leaves everything as it
/// was (the section publishes nothing).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Halt {
    Unread(Unread),
    Refused(SlotError),
    /// A lease step refused the section (spec/fleet.md).
    Fleet(FleetError),
}

impl From<FleetError> for Halt {
    fn from(refused: FleetError) -> Self {
        Halt::Fleet(refused)
    }
}

impl From<Unread> for Halt {
    fn from(unread: Unread) -> Self {
        Halt::Unread(unread)
    }
}

impl From<SlotError> for Halt {
    fn from(refused: SlotError) -> Self {
        Halt::Refused(refused)
    }
}

/// The records a section has read so far, by key; a key absent here was not read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Records {
    turns: BTreeMap<TurnKey, TurnSlot>,
    tasks: BTreeMap<String, Option<TaskRecord>>,
    /// Of each task read: whether its folder is on disk (a task without a record may still have
    /// one, left by a removal cut short: its name is not free for a generated task).
    task_dirs: BTreeMap<String, bool>,
    numbers: BTreeMap<String, Vec<u32>>,
    /// Of each identity read: when its stored mark expires (`None`: no mark is stored).
    marks: BTreeMap<EventIdentity, Option<u64>>,
}

impl Records {
    /// The part of `need` not read yet.
    pub fn missing(&self, need: &Need) -> Need {
        Need {
            turns: need
                .turns
                .iter()
                .filter(|k| !self.turns.contains_key(*k))
                .cloned()
                .collect(),
            tasks: need
                .tasks
                .iter()
                .filter(|t| !self.tasks.contains_key(*t))
                .cloned()
                .collect(),
            numbers: need
                .numbers
                .iter()
                .filter(|t| !self.numbers.contains_key(*t))
                .cloned()
                .collect(),
            marks: need
                .marks
                .iter()
                .filter(|m| !self.marks.contains_key(*m))
                .cloned()
                .collect(),
            group: need.group,
        }
    }

    /// `Ok` when everything `need` names was read, else the [`Unread`] naming what was not.
    pub fn require(&self, need: &Need) -> Result<(), Unread> {
        let missing = self.missing(need);
        if missing.is_empty() {
            Ok(())
        } else {
            Err(Unread::Records(missing))
        }
    }

    /// What was read at `key`'s place, or the [`Unread`] asking for it.
    pub fn slot(&self, key: &TurnKey) -> Result<&TurnSlot, Unread> {
        self.turns.get(key).ok_or_else(|| {
            Unread::Records(Need {
                turns: std::iter::once(key.clone()).collect(),
                ..Need::default()
            })
        })
    }

    /// The record of `key` (`None`: it has none), or the [`Unread`] asking for it.
    pub fn turn(&self, key: &TurnKey) -> Result<Option<&TurnRecord>, Unread> {
        Ok(match self.slot(key)? {
            TurnSlot::Record(record) => Some(record.as_ref()),
            TurnSlot::Free | TurnSlot::Leftover => None,
        })
    }

    /// The record of task `name` (`None`: it has none), or the [`Unread`] asking for it.
    pub fn task(&self, name: &str) -> Result<Option<&TaskRecord>, Unread> {
        match self.tasks.get(name) {
            Some(record) => Ok(record.as_ref()),
            None => Err(Unread::Records(Need {
                tasks: std::iter::once(name.to_string()).collect(),
                ..Need::default()
            })),
        }
    }

    /// The turn numbers recorded for `task`, ascending, or the [`Unread`] asking for them.
    pub fn numbers(&self, task: &str) -> Result<&[u32], Unread> {
        match self.numbers.get(task) {
            Some(numbers) => Ok(numbers),
            None => Err(Unread::Records(Need {
                numbers: std::iter::once(task.to_string()).collect(),
                ..Need::default()
            })),
        }
    }

    /// Takes in what the store read at `key`'s place.
    pub fn put_turn(&mut self, key: TurnKey, slot: TurnSlot) {
        if let TurnSlot::Record(record) = &slot {
            debug_assert_eq!(record.key, key, "a record read at another turn's place");
        }
        self.turns.insert(key, slot);
    }

    /// Whether task `name` is taken: it has a record, or its folder is on disk.
    pub fn task_taken(&self, name: &str) -> Result<bool, Unread> {
        let record = self.task(name)?;
        Ok(record.is_some() || self.task_dirs.get(name).copied().unwrap_or(false))
    }

    /// Takes in what the store read of task `name`: its record, and whether its folder exists.
    pub fn put_task(&mut self, name: String, record: Option<TaskRecord>, dir_exists: bool) {
        debug_assert!(record.as_ref().is_none_or(|r| r.name == name));
        self.task_dirs.insert(name.clone(), dir_exists);
        self.tasks.insert(name, record);
    }

    /// Takes in the turn numbers recorded for `task`.
    pub fn put_numbers(&mut self, task: String, mut numbers: Vec<u32>) {
        numbers.sort_unstable();
        numbers.dedup();
        self.numbers.insert(task, numbers);
    }

    /// The stored marks of `identities` (those that have one), or the [`Unread`] asking for the
    /// identities not read yet.
    pub fn marks<'i>(
        &self,
        identities: impl IntoIterator<Item = &'i EventIdentity>,
    ) -> Result<Vec<StoredMark>, Unread> {
        let mut found = Vec::new();
        let mut missing = BTreeSet::new();
        for identity in identities {
            match self.marks.get(identity) {
                Some(Some(expires_at_millis)) => found.push(StoredMark {
                    identity: identity.clone(),
                    expires_at_millis: *expires_at_millis,
                }),
                Some(None) => {}
                None => {
                    missing.insert(identity.clone());
                }
            }
        }
        if missing.is_empty() {
            Ok(found)
        } else {
            Err(Unread::Records(Need {
                marks: missing,
                ..Need::default()
            }))
        }
    }

    /// Takes in what the store holds of `identity`'s mark: when it expires, or `None` for none.
    pub fn put_mark(&mut self, identity: EventIdentity, expires_at_millis: Option<u64>) {
        self.marks.insert(identity, expires_at_millis);
    }

    /// Takes in the record writes of a step composed before the next one (a batch's earlier
    /// delivery), so the next sees them as if read: the records written, the turn numbers they
    /// use, the removals as free places.
    pub fn take_in(&mut self, writes: &Writes) {
        for (key, write) in &writes.turns {
            if let Some(numbers) = self.numbers.get_mut(&key.task) {
                if let Err(at) = numbers.binary_search(&key.turn) {
                    numbers.insert(at, key.turn);
                }
            }
            self.turns.insert(
                key.clone(),
                TurnSlot::Record(Box::new(write.record.clone())),
            );
        }
        for (name, record) in &writes.tasks {
            let dir = self.task_dirs.get(name).copied().unwrap_or(false);
            self.put_task(name.clone(), Some(record.clone()), dir);
        }
        for key in &writes.removed_turns {
            self.turns.insert(key.clone(), TurnSlot::Free);
        }
        for name in &writes.removed_tasks {
            self.put_task(name.clone(), None, false);
        }
        for mark in &writes.marks {
            self.put_mark(mark.identity.clone(), Some(mark.expires_at_millis));
        }
    }
}

/// A turn record a step writes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TurnWrite {
    pub record: TurnRecord,
    /// A new turn: the store refuses it when its place holds a record already, so a record is
    /// never overwritten by a new turn.
    pub create: bool,
}

/// What a step writes besides the queue's rows, applied by the store in the step's transaction.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Writes {
    pub turns: BTreeMap<TurnKey, TurnWrite>,
    pub tasks: BTreeMap<String, TaskRecord>,
    /// The fleet's lease table as the step left it, when it changed a lease (a handoff's child
    /// leased, a runner's own lease renewed or released): written back in the same transaction.
    pub leases: Option<LeaseTable>,
    /// Lines for the operator (a rewound task counter, say): the runner logs them after the
    /// commit. Bounded by the writes that cause them.
    pub warnings: Vec<String>,
    /// Turns removed with their logs (`clean`), after the writes above.
    pub removed_turns: BTreeSet<TurnKey>,
    /// Tasks removed with their folders (`clean`), after their turns.
    pub removed_tasks: BTreeSet<String>,
    /// Dedupe marks written to serve's mark table (a plain insert: a live row there refuses the
    /// write, never overwritten).
    pub marks: Vec<MarkWrite>,
    /// Delivery payloads kept with their turns (serve's payload table).
    pub payloads: Vec<PayloadWrite>,
    /// Whether the mark table is trimmed to its bound after the writes above.
    pub trim_marks: bool,
    /// Kept payloads of ended turns dropped, at most this many, after the writes above.
    pub prune_payloads: Option<usize>,
    /// Writes applied after the ones above, each group on its own: when the store refuses one
    /// (a full disk, a value the database refuses), the transaction is rolled back and the section
    /// runs again told that group failed ([`Section::without_group`]), so one group's error never
    /// fails the others. Empty for every section but serve's group commit (one per delivery).
    pub groups: Vec<Writes>,
}

/// A delivery's payload kept in the same transaction as its turn.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PayloadWrite {
    /// The delivery's id.
    pub delivery: String,
    pub key: TurnKey,
    pub body: Vec<u8>,
}

impl Writes {
    pub fn is_empty(&self) -> bool {
        self.turns.is_empty()
            && self.tasks.is_empty()
            && self.leases.is_none()
            && self.removed_turns.is_empty()
            && self.removed_tasks.is_empty()
            && self.marks.is_empty()
            && self.payloads.is_empty()
            && !self.trim_marks
            && self.prune_payloads.is_none()
            && self.groups.iter().all(Writes::is_empty)
    }

    /// Whether a write records a turn's outcome: the store syncs such a commit (an outcome is
    /// what `wait` reports and what reconcile trusts).
    pub fn records_an_outcome(&self) -> bool {
        self.turns.values().any(|w| w.record.is_settled())
            || self.groups.iter().any(Writes::records_an_outcome)
    }

    /// The record writes in the order a store applies them, which is what a crash between two
    /// of them on record files leaves (spec/slots.md, "Dependencies and retries"): the task
    /// records first (a counter moved on before the turn it numbers, so a crash skips a number
    /// instead of leaving a turn its task does not list), then the turn records by key (a
    /// leaving turn before its retry, a later turn of its task), then the removals (`clean`): the
    /// turns before their tasks, so a crash never leaves a turn without its task.
    pub fn in_order(&self) -> impl Iterator<Item = RecordWrite<'_>> {
        let tasks = self.tasks.values().map(RecordWrite::Task);
        tasks
            .chain(self.turns.values().map(RecordWrite::Turn))
            .chain(self.removed_turns.iter().map(RecordWrite::RemoveTurn))
            .chain(
                self.removed_tasks
                    .iter()
                    .map(|t| RecordWrite::RemoveTask(t)),
            )
    }
}

/// One record write of a step ([`Writes::in_order`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordWrite<'a> {
    Task(&'a TaskRecord),
    Turn(&'a TurnWrite),
    /// The turn's record and its logs go.
    RemoveTurn(&'a TurnKey),
    /// The task's record and its folder go.
    RemoveTask(&'a str),
}

/// What a step decided: its record writes (the queue's change is the part it changed in place)
/// and the effect the driver performs after the commit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step<E> {
    pub writes: Writes,
    pub effect: E,
}

impl<E> Step<E> {
    pub fn map<F>(self, f: impl FnOnce(E) -> F) -> Step<F> {
        Step {
            writes: self.writes,
            effect: f(self.effect),
        }
    }
}

/// The records as a step sees them while it decides: what was read, overlaid by what the step
/// has written so far, so that a rule applied after a write (a dependent settled, then its own
/// dependents) sees the written record.
#[derive(Debug)]
pub struct Draft<'a> {
    read: &'a Records,
    writes: Writes,
}

impl<'a> Draft<'a> {
    pub fn new(read: &'a Records) -> Self {
        Draft {
            read,
            writes: Writes::default(),
        }
    }

    /// The record of `key` as written by this step, else as read.
    pub fn turn(&self, key: &TurnKey) -> Result<Option<&TurnRecord>, Unread> {
        match self.writes.turns.get(key) {
            Some(write) => Ok(Some(&write.record)),
            None => self.read.turn(key),
        }
    }

    /// What lies at `key`'s place: the record this step wrote there, else what was read.
    pub fn slot(&self, key: &TurnKey) -> Result<TurnSlotRef<'_>, Unread> {
        if let Some(write) = self.writes.turns.get(key) {
            return Ok(TurnSlotRef::Record(&write.record));
        }
        Ok(match self.read.slot(key)? {
            TurnSlot::Record(record) => TurnSlotRef::Record(record.as_ref()),
            TurnSlot::Free => TurnSlotRef::Free,
            TurnSlot::Leftover => TurnSlotRef::Leftover,
        })
    }

    /// The record of task `name` as written by this step, else as read.
    pub fn task(&self, name: &str) -> Result<Option<&TaskRecord>, Unread> {
        match self.writes.tasks.get(name) {
            Some(record) => Ok(Some(record)),
            None => self.read.task(name),
        }
    }

    /// Whether task `name` is taken: written by this step, or taken as read.
    pub fn task_taken(&self, name: &str) -> Result<bool, Unread> {
        Ok(self.writes.tasks.contains_key(name) || self.read.task_taken(name)?)
    }

    /// The turn numbers recorded for `task`, with the ones this step created.
    pub fn numbers(&self, task: &str) -> Result<Vec<u32>, Unread> {
        let mut numbers = self.read.numbers(task)?.to_vec();
        numbers.extend(
            self.writes
                .turns
                .keys()
                .filter(|k| k.task == task)
                .map(|k| k.turn),
        );
        numbers.sort_unstable();
        numbers.dedup();
        Ok(numbers)
    }

    /// `Ok` when everything `need` names was read, else the [`Unread`] naming what was not.
    pub fn require(&self, need: &Need) -> Result<(), Unread> {
        self.read.require(need)
    }

    /// Writes `record` over the turn's existing record (or as its first record when `create`).
    pub fn write_turn(&mut self, record: TurnRecord, create: bool) {
        let key = record.key.clone();
        let create = create || self.writes.turns.get(&key).is_some_and(|w| w.create);
        self.writes.turns.insert(key, TurnWrite { record, create });
    }

    pub fn write_task(&mut self, record: TaskRecord) {
        self.writes.tasks.insert(record.name.clone(), record);
    }

    /// Writes the fleet's lease table back as `leases` (the step changed a lease).
    pub fn write_leases(&mut self, leases: LeaseTable) {
        self.writes.leases = Some(leases);
    }

    /// The lease table as this step left it so far: `view`'s, or the one the step wrote.
    pub fn leases<'v>(&'v self, view: &'v FleetView) -> &'v LeaseTable {
        self.writes.leases.as_ref().unwrap_or(&view.leases)
    }

    /// Removes the turn's record and its logs. A step never writes and removes one turn.
    pub fn remove_turn(&mut self, key: TurnKey) {
        debug_assert!(
            !self.writes.turns.contains_key(&key),
            "a turn written and removed"
        );
        self.writes.removed_turns.insert(key);
    }

    /// Removes the task's record and its folder. A step never writes and removes one task.
    pub fn remove_task(&mut self, name: String) {
        debug_assert!(
            !self.writes.tasks.contains_key(&name),
            "a task written and removed"
        );
        self.writes.removed_tasks.insert(name);
    }

    pub fn warn(&mut self, line: String) {
        self.writes.warnings.push(line);
    }

    /// The step's decision with the writes made so far.
    pub fn finish<E>(self, effect: E) -> Step<E> {
        Step {
            writes: self.writes,
            effect,
        }
    }

    /// The writes made so far (for a step that composes another's).
    pub fn into_writes(self) -> Writes {
        self.writes
    }

    /// Takes in the writes of a step this one composes.
    pub fn absorb(&mut self, writes: Writes) {
        for (_, write) in writes.turns {
            self.write_turn(write.record, write.create);
        }
        self.writes.tasks.extend(writes.tasks);
        self.writes.warnings.extend(writes.warnings);
        self.writes.removed_turns.extend(writes.removed_turns);
        self.writes.removed_tasks.extend(writes.removed_tasks);
        if writes.leases.is_some() {
            self.writes.leases = writes.leases;
        }
    }
}

/// What a step sees of the world inside its section besides the part of the queue: what the store
/// loaded, the records read so far, how processes are observed, and on a fleet the lease table with
/// the database's clock. The section's own inputs (who runs it, now, fresh tokens) are the step's
/// input struct.
#[derive(Debug)]
pub struct View<'a, L: Liveness> {
    pub loaded: &'a Loaded,
    pub records: &'a Records,
    pub liveness: &'a L,
    /// `None` on one host: no leases, and this host may always start turns.
    pub fleet: Option<&'a FleetView>,
}

impl<L: Liveness> View<'_, L> {
    /// How the step observes processes in this section: [`SectionLiveness`].
    pub fn liveness(&self) -> SectionLiveness<'_, L> {
        SectionLiveness {
            local: self.liveness,
            fleet: self.fleet,
        }
    }
}

/// Liveness inside a section: on a fleet, a process of another host (or a work of such a runner)
/// is live while a lease names it unexpired on the database's clock, everything else is asked of
/// this host's own observer, and this host starts turns only while it is not drained; on one
/// host, the observer alone.
#[derive(Clone, Copy, Debug)]
pub struct SectionLiveness<'a, L: Liveness> {
    local: &'a L,
    fleet: Option<&'a FleetView>,
}

impl<'a, L: Liveness> SectionLiveness<'a, L> {
    /// `local` over `fleet`'s leases: what a reader outside any section uses with a snapshot of
    /// the lease table, as a section's step does with its own.
    pub fn new(local: &'a L, fleet: Option<&'a FleetView>) -> Self {
        SectionLiveness { local, fleet }
    }
}

impl<L: Liveness> Liveness for SectionLiveness<'_, L> {
    fn observe(&self, identity: &ProcessIdentity) -> Observation {
        match self.fleet {
            Some(f) if f.leases.remote_live(&f.host, identity, f.now_db_millis) => {
                Observation::Matching
            }
            _ => self.local.observe(identity),
        }
    }

    fn observe_work(&self, work: &WorkRecord) -> Observation {
        match self.fleet {
            Some(f) if f.leases.remote_live(&f.host, &work.runner, f.now_db_millis) => {
                Observation::Matching
            }
            _ => self.local.observe_work(work),
        }
    }

    fn may_start(&self) -> bool {
        self.fleet.is_none_or(|f| f.may_start) && self.local.may_start()
    }
}

/// [`TurnSlot`] borrowed from a [`Draft`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TurnSlotRef<'a> {
    Record(&'a TurnRecord),
    Free,
    Leftover,
}
