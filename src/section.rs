//! The one section runner (spec/steps.md): every locked section of the shell is a [`Section`], a
//! core step with its input, run here. The runner opens the store's transaction on the part of
//! the queue the section reads, calls the step with what the section has read, reading the
//! records the step asks for in the same transaction and calling it again (the core's [`decide`],
//! bounded by [`MAX_READ_ROUNDS`], which the models call too), rolls back and runs once more on the whole queue when the step says its
//! part did not suffice, applies the step's record and lease writes, and commits. The records are
//! read and written in the store's transaction, which the store hands the section as its
//! [`crate::queue::RecordTx`]. The effect is
//! returned to the caller, which hands it to [`crate::driver`]. No other code takes the lock.

use crate::dispatch::DispatchError;
pub use crate::protocol::section::Section;
use crate::protocol::section::{decide, Undecided, MAX_READ_ROUNDS};
use crate::protocol::slots::steps::Reads;
use crate::protocol::slots::{Liveness, SlotError};
use crate::queue::{Store, StoreError};
use crate::runtime::Runtime;
use std::io::Write as _;

/// How many times a section may run again on another part of the queue before it runs on the
/// whole queue: a submit with a generated task name learns the name in its first run, and a
/// concurrent submit may take the id the name came from once more.
pub const MAX_PART_RUNS: usize = 3;

/// The most times one section runs again because the store refused one of its write groups
/// (each refusal fails one group: serve's batches hold at most this many deliveries).
pub const MAX_GROUP_RERUNS: usize = crate::protocol::slots::sections::MAX_BATCH_DELIVERIES;

/// Why one run of a section published nothing.
enum Stop {
    /// The step needs more of the queue than the part: run again on what this names.
    Widen(Reads),
    /// The store refused write group `.0` of the step ([`Writes::groups`]): rolled back, the
    /// section runs again without it.
    ///
    /// [`Writes::groups`]: crate::protocol::section::Writes::groups
    Group(usize, DispatchError),
    Failed(DispatchError),
}

impl From<StoreError> for Stop {
    fn from(e: StoreError) -> Self {
        Stop::Failed(e.into())
    }
}

/// Runs `section` on `rt`'s store and returns its effect, committed.
pub fn run<L: Liveness, S: Store, X: Section>(
    rt: &Runtime<L, S>,
    section: &X,
) -> Result<X::Effect, DispatchError> {
    run_deciding(rt, section, None)
}

/// Where [`run_keeping`] keeps a copy of the decided effect until the commit's outcome is known.
struct Keep<E> {
    slot: std::cell::RefCell<Option<E>>,
    copy: fn(&E) -> E,
}

impl<E> Keep<E> {
    fn keep(&self, effect: &E) {
        *self.slot.borrow_mut() = Some((self.copy)(effect));
    }
}

/// Why [`run_keeping`] returned no committed effect.
#[derive(Debug)]
pub struct Failed<E> {
    pub error: DispatchError,
    /// The effect the step had decided when the commit's outcome is unknown
    /// ([`StoreError::Uncertain`]): it may be in the store, so a caller that promises something
    /// names it instead of saying nothing changed (spec/store.md, "An uncertain commit").
    pub decided: Option<E>,
}

/// [`run`], keeping the decided effect when the commit's outcome is unknown.
pub fn run_keeping<L: Liveness, S: Store, X: Section>(
    rt: &Runtime<L, S>,
    section: &X,
) -> Result<X::Effect, Failed<X::Effect>>
where
    X::Effect: Clone,
{
    let keep = Keep {
        slot: std::cell::RefCell::new(None),
        copy: X::Effect::clone,
    };
    let result = run_deciding(rt, section, Some(&keep));
    result.map_err(|error| {
        let decided = match &error {
            DispatchError::Store(StoreError::Uncertain { .. }) => keep.slot.into_inner(),
            _ => None,
        };
        Failed { error, decided }
    })
}

/// [`run`], keeping a copy of the decided effect in `decided` when given.
fn run_deciding<L: Liveness, S: Store, X: Section>(
    rt: &Runtime<L, S>,
    section: &X,
    decided: Option<&Keep<X::Effect>>,
) -> Result<X::Effect, DispatchError> {
    let mut reads = section.reads();
    // The section as told of its refused write groups (`None`: as given).
    let mut told: Option<X> = None;
    let mut group_reruns = 0;
    // At most MAX_PART_RUNS runs on parts, then one on the whole queue, which never widens.
    let mut runs = 0;
    while runs <= MAX_PART_RUNS {
        let current = told.as_ref().unwrap_or(section);
        match run_reading(rt, current, &reads, decided) {
            Ok((effect, warnings)) => {
                for warning in warnings {
                    // Best effort: an operator's line, after the commit that caused it.
                    let _ = writeln!(std::io::stderr(), "tollgate: warning: {warning}");
                }
                return Ok(effect);
            }
            Err(Stop::Failed(e)) => return Err(e),
            Err(Stop::Group(group, e)) => {
                group_reruns += 1;
                match current.without_group(group, e.to_string()) {
                    Some(next) if group_reruns <= MAX_GROUP_RERUNS => told = Some(next),
                    _ => return Err(e),
                }
            }
            Err(Stop::Widen(_)) if reads == Reads::Everything => {
                return Err(DispatchError::io(
                    "section",
                    std::io::Error::other("a step on the whole queue asked to read more of it"),
                ))
            }
            Err(Stop::Widen(next)) => {
                reads = if runs + 1 < MAX_PART_RUNS {
                    next
                } else {
                    Reads::Everything
                };
                runs += 1;
            }
        }
    }
    Err(DispatchError::io(
        "section",
        std::io::Error::other("a section kept asking for more of the queue"),
    ))
}

/// One transaction of [`run`] on what `reads` names.
fn run_reading<L: Liveness, S: Store, X: Section>(
    rt: &Runtime<L, S>,
    section: &X,
    reads: &Reads,
    decided: Option<&Keep<X::Effect>>,
) -> Result<(X::Effect, Vec<String>), Stop> {
    rt.store
        .transact_section(section.commit(), reads, |part, loaded, fleet, tx| {
            let decision = decide(
                section,
                part,
                loaded,
                &rt.liveness,
                fleet.as_ref(),
                |need, records| {
                    crate::tasks::read_records(&rt.home, tx, need, records)
                        .map_err(|e| (need.group, e))
                },
            );
            let (attempt, step) = match decision {
                Ok(decision) => decision,
                Err(Undecided::Widen(next)) => return Err(Stop::Widen(next)),
                Err(Undecided::Refused(e)) => return Err(Stop::Failed(refusal(&rt.home, e))),
                Err(Undecided::Fleet(e)) => return Err(Stop::Failed(e.into())),
                // A read a write group's decision asked for fails that group alone.
                Err(Undecided::Read((Some(group), e))) => return Err(Stop::Group(group, e.into())),
                Err(Undecided::Read((None, e))) => return Err(Stop::Failed(e.into())),
                Err(Undecided::TooManyReads) => {
                    return Err(Stop::Failed(DispatchError::io(
                        "section",
                        std::io::Error::other(format!(
                            "a step asked for records more than {MAX_READ_ROUNDS} times"
                        )),
                    )))
                }
            };
            apply(&rt.home, tx, &step.writes)?;
            if let (Some(leases), Some(view)) = (step.writes.leases, fleet.as_mut()) {
                view.leases = leases;
            }
            *part = attempt;
            if let Some(keep) = decided {
                keep.keep(&step.effect);
            }
            Ok((step.effect, step.writes.warnings))
        })
}

/// Applies a step's writes in `tx`: its own, then each write group in order (a refused one stops
/// here, naming it), then the tables' upkeep.
fn apply(
    home: &crate::home::Home,
    tx: &mut crate::queue::RecordTx<'_>,
    writes: &crate::protocol::section::Writes,
) -> Result<(), Stop> {
    crate::tasks::apply_writes(home, tx, writes).map_err(|e| Stop::Failed(e.into()))?;
    for (group, own) in writes.groups.iter().enumerate() {
        debug_assert!(own.groups.is_empty(), "write groups do not nest");
        crate::tasks::apply_writes(home, tx, own).map_err(|e| Stop::Group(group, e.into()))?;
    }
    crate::queue::serve_writes::upkeep(home, tx, writes).map_err(|e| Stop::Failed(e.into()))
}

/// A step's refusal as the shell reports it: one about a record names where that record lives
/// (the database and the record's place, or its file), as every error about a state file does.
fn refusal(home: &crate::home::Home, e: SlotError) -> DispatchError {
    let path = match &e {
        SlotError::TurnNumbersExhausted { task } => crate::tasks::task_record_location(home, task),
        SlotError::TurnPlaceTaken { key } => home.turn_dir(key),
        SlotError::RecordInvalid { key, .. } => {
            std::path::PathBuf::from(crate::tasks::turn_record_location(home, key))
        }
        _ => return e.into(),
    };
    crate::fsutil::FileError::Refused {
        path,
        detail: e.to_string(),
    }
    .into()
}
