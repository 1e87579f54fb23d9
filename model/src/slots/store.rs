//! A model's store: the queue and the turn and task records as the core's own records, with a
//! section run on them as the shell's section runner runs it (spec/steps.md, "One section
//! runner"): the core's [`decide`] calls the step, reading what it asks for from these records,
//! and the caller commits the part and the writes, or (a crash inside the section) only some of
//! the writes. The model's queue is always whole, so a step never asks for more of it.

use std::collections::BTreeMap;
use std::convert::Infallible;
use tollgate_core::records::{TaskRecord, TurnRecord};
use tollgate_core::section::{
    decide, Need, RecordWrite, Records, Section, Step, TurnSlot, Undecided, Writes,
};
use tollgate_core::slots::steps::Loaded;
use tollgate_core::slots::{Liveness, QueueState, TurnKey};

/// The queue and the records a model's sections run on.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Store {
    pub queue: QueueState,
    pub turns: BTreeMap<TurnKey, TurnRecord>,
    pub tasks: BTreeMap<String, TaskRecord>,
}

/// A section's decision, not committed yet.
pub struct Decided<E> {
    /// The queue as the step left it.
    pub queue: QueueState,
    pub step: Step<E>,
}

/// Why a write the model applies was refused, as the shell's store refuses it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlaceTaken(pub TurnKey);

impl Store {
    /// Decides `section` on the whole queue with `liveness`, reading the records it asks for as
    /// `seen` shows them (a broken variant's wrapper may change what a step reads; production
    /// reads them as they are).
    pub fn decide<X: Section, L: Liveness>(
        &self,
        section: &X,
        liveness: &L,
        seen: impl Fn(TurnRecord) -> TurnRecord,
    ) -> Result<Decided<X::Effect>, Undecided<Infallible>> {
        let (queue, step) = decide(
            section,
            &self.queue,
            &Loaded::Whole,
            liveness,
            None,
            |need, records| {
                self.read(need, records, &seen);
                Ok(())
            },
        )?;
        Ok(Decided { queue, step })
    }

    /// What the records say of everything `need` names, into `records`. A turn or task without
    /// a record has nothing left at its place (the model never cuts a removal short).
    fn read(&self, need: &Need, records: &mut Records, seen: &impl Fn(TurnRecord) -> TurnRecord) {
        for key in &need.turns {
            let slot = match self.turns.get(key) {
                Some(record) => TurnSlot::Record(Box::new(seen(record.clone()))),
                None => TurnSlot::Free,
            };
            records.put_turn(key.clone(), slot);
        }
        for task in &need.tasks {
            let record = self.tasks.get(task).cloned();
            let dir_exists = record.is_some();
            records.put_task(task.clone(), record, dir_exists);
        }
        for task in &need.numbers {
            let numbers = self.turns.keys().filter(|k| &k.task == task);
            records.put_numbers(task.clone(), numbers.map(|k| k.turn).collect());
        }
    }

    /// Commits a decision: its queue and all its writes.
    pub fn commit<E>(&mut self, decided: Decided<E>) -> Result<E, PlaceTaken> {
        self.write(&decided.step.writes, usize::MAX)?;
        self.queue = decided.queue;
        Ok(decided.step.effect)
    }

    /// Applies the first `count` of `writes` in the order a store applies them
    /// ([`Writes::in_order`]), as a section cut short by a crash leaves its record files; the
    /// queue is not touched. A new turn whose place holds a record is refused, as the store
    /// refuses it.
    pub fn write(&mut self, writes: &Writes, count: usize) -> Result<(), PlaceTaken> {
        for write in writes.in_order().take(count) {
            match write {
                RecordWrite::Task(task) => {
                    self.tasks.insert(task.name.clone(), task.clone());
                }
                RecordWrite::Turn(write) => {
                    let key = &write.record.key;
                    if write.create && self.turns.contains_key(key) {
                        return Err(PlaceTaken(key.clone()));
                    }
                    self.turns.insert(key.clone(), write.record.clone());
                }
                RecordWrite::RemoveTurn(key) => {
                    self.turns.remove(key);
                }
                RecordWrite::RemoveTask(name) => {
                    self.tasks.remove(name);
                }
            }
        }
        Ok(())
    }
}
