//! The one section runner (spec/steps.md): every locked section of the shell is a [`Section`], a
//! core step with its input, run here. The runner opens the store's transaction on the part of
//! the queue the section reads, calls the step with a [`View`] of what the section has read,
//! reads the records the step asks for in the same transaction and calls it again (bounded by
//! [`MAX_READ_ROUNDS`]), rolls back and runs once more on the whole queue when the step says its
//! part did not suffice, applies the step's record and lease writes, and commits. The effect is
//! returned to the caller, which hands it to [`crate::driver`]. No other code takes the lock.

use crate::dispatch::DispatchError;
pub use crate::protocol::section::Section;
use crate::protocol::section::{Halt, Records, Unread, View, MAX_READ_ROUNDS};
use crate::protocol::slots::steps::Reads;
use crate::protocol::slots::Liveness;
use crate::queue::{Store, StoreError};
use crate::runtime::Runtime;
use std::io::Write as _;

/// Why one run of a section published nothing.
enum Stop {
    /// The step needs more of the queue than the part: run again on the whole queue.
    Widen,
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
    let first = section.reads();
    let (effect, warnings) = match run_reading(rt, section, &first) {
        Err(Stop::Widen) if first != Reads::Everything => {
            match run_reading(rt, section, &Reads::Everything) {
                Err(Stop::Widen) => return Err(whole_queue_widened()),
                Err(Stop::Failed(e)) => return Err(e),
                Ok(done) => done,
            }
        }
        Err(Stop::Widen) => return Err(whole_queue_widened()),
        Err(Stop::Failed(e)) => return Err(e),
        Ok(done) => done,
    };
    for warning in warnings {
        // Best effort: an operator's line, after the commit that caused it.
        let _ = writeln!(std::io::stderr(), "tollgate: warning: {warning}");
    }
    Ok(effect)
}

/// A step that asked for more of the queue than the whole queue: a bug, reported.
fn whole_queue_widened() -> DispatchError {
    DispatchError::io(
        "section",
        std::io::Error::other("a step on the whole queue asked to read more of it"),
    )
}

/// One transaction of [`run`] on what `reads` names.
fn run_reading<L: Liveness, S: Store, X: Section>(
    rt: &Runtime<L, S>,
    section: &X,
    reads: &Reads,
) -> Result<(X::Effect, Vec<String>), Stop> {
    rt.store
        .transact_reading(section.commit(), reads, |part, loaded| {
            let fleet = crate::fleet::current_view();
            let mut records = Records::default();
            for _ in 0..MAX_READ_ROUNDS {
                let mut attempt = part.clone();
                let view = View {
                    loaded,
                    records: &records,
                    liveness: &rt.liveness,
                    fleet: fleet.as_ref(),
                };
                match section.step(&mut attempt, &view) {
                    Ok(step) => {
                        crate::tasks::apply_writes(&rt.home, &step.writes)
                            .map_err(|e| Stop::Failed(e.into()))?;
                        if let Some(leases) = step.writes.leases {
                            crate::fleet::write_back_leases(leases);
                        }
                        *part = attempt;
                        return Ok((step.effect, step.writes.warnings));
                    }
                    Err(Halt::Unread(Unread::Records(need))) => {
                        debug_assert!(!records.missing(&need).is_empty(), "asked again for what it read");
                        crate::tasks::read_records(&rt.home, &need, &mut records)
                            .map_err(|e| Stop::Failed(e.into()))?;
                    }
                    Err(Halt::Unread(Unread::Queue)) => return Err(Stop::Widen),
                    Err(Halt::Refused(e)) => return Err(Stop::Failed(e.into())),
                    Err(Halt::Fleet(e)) => return Err(Stop::Failed(e.into())),
                }
            }
            Err(Stop::Failed(DispatchError::io(
                "section",
                std::io::Error::other(format!(
                    "a step asked for records more than {MAX_READ_ROUNDS} times"
                )),
            )))
        })
}
