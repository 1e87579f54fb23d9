//! serve's group commit as one section (spec/ingress.md, "Group commit"; spec/steps.md): every
//! delivery the gate admitted while the previous batch was committed, decided in one step on one
//! part of the queue. For each delivery in arrival order: the dedupe rule on the stored marks of
//! its identities and the marks the batch's earlier deliveries wrote ([`TableMarks::mark`]: a live
//! mark makes it a duplicate), then the detached submit's own step ([`SubmitSection`]) on the part
//! as the earlier deliveries left it, seeing their records as if read. A delivery's writes (its
//! mark, its turn's records, its payload) are its own write group ([`Writes::groups`]): a group the
//! store refuses runs the batch again with that delivery failed, so its mark is never kept without
//! its turn (its redelivery is tried again, not answered duplicate) and the others commit.

use super::submit::{SubmitSection, Submitted};
use crate::admission::{DedupeKeys, EventIdentity, MarkStep, TableMarks};
use crate::section::{
    Commit, Halt, Need, PayloadWrite, Section, Step, Unread, View, Writes, MAX_READ_ROUNDS,
};
use crate::slots::steps::{Loaded, QueueReads, Reads};
use crate::slots::{Liveness, QueueState};
use std::collections::BTreeMap;

/// The most deliveries one batch decides (serve's batches are bounded by its queue of admitted
/// deliveries well below this).
pub const MAX_BATCH_DELIVERIES: usize = 4_096;

/// One admitted delivery of a batch.
#[derive(Clone, Copy, Debug)]
pub struct BatchDelivery<'a> {
    pub identity: &'a EventIdentity,
    /// Its identity as an earlier version keyed it (a live mark of either makes it a duplicate).
    pub legacy: &'a EventIdentity,
    /// When the gate admitted it: the time its dedupe is judged at, as the gate judged it.
    pub arrived_millis: u64,
    /// The delivery's id, which its kept payload is stored under.
    pub id: &'a str,
    pub body: &'a [u8],
    /// Its turn's detached submit (a fresh token of its own).
    pub submit: SubmitSection<'a>,
}

/// The batch's section input.
#[derive(Clone, Debug)]
pub struct AcceptBatch<'a> {
    pub deliveries: &'a [BatchDelivery<'a>],
    /// How long a mark lives.
    pub ttl_millis: u64,
    /// Deliveries that fail without being decided, by index, with why: refused before the batch
    /// (a request the shell could not prepare) or whose write group the store refused in an
    /// earlier run of this batch.
    pub failed: BTreeMap<usize, String>,
    /// Drop at most this many kept payloads of ended turns after the deliveries' writes.
    pub prune_payloads: Option<usize>,
}

/// What became of one delivery of a batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Accepted {
    /// Its turn is queued (the submit's decision); its mark and payload are written with it.
    Queued(Box<Submitted>),
    /// A live mark of its identity: nothing is written for it.
    Duplicate,
    /// Nothing is written for it; why.
    Failed(String),
}

impl Section for AcceptBatch<'_> {
    /// One answer per delivery, in order.
    type Effect = Vec<Accepted>;

    /// serve answers 200 on the strength of this commit: a promise.
    fn commit(&self) -> Commit {
        Commit::Promise
    }

    /// What every delivery's submit reads, together.
    fn reads(&self) -> Reads {
        let mut all = QueueReads::default();
        for delivery in self.deliveries {
            match delivery.submit.reads() {
                Reads::Part(part) => {
                    all.tasks.extend(part.tasks);
                    all.turns.extend(part.turns);
                    all.lines.extend(part.lines);
                    all.heads = all.heads.max(part.heads);
                }
                Reads::Everything => return Reads::Everything,
            }
        }
        Reads::Part(all)
    }

    fn step<L: Liveness>(
        &self,
        part: &mut QueueState,
        view: &View<'_, L>,
    ) -> Result<Step<Vec<Accepted>>, Halt> {
        accept_batch(part, view, self)
    }

    /// Each delivery's submit may read in rounds of its own, one after the other.
    fn max_read_rounds(&self) -> usize {
        MAX_READ_ROUNDS.saturating_mul(self.deliveries.len().max(1))
    }

    fn without_group(&self, group: usize, error: String) -> Option<Self> {
        if group >= self.deliveries.len() || self.failed.contains_key(&group) {
            return None;
        }
        let mut next = self.clone();
        next.failed.insert(group, error);
        Some(next)
    }
}

/// The batch's step ([`AcceptBatch`]): the stored marks of every delivery's identities are read
/// first (one round), then each delivery is decided in order.
pub fn accept_batch<L: Liveness>(
    part: &mut QueueState,
    view: &View<'_, L>,
    batch: &AcceptBatch<'_>,
) -> Result<Step<Vec<Accepted>>, Halt> {
    assert!(batch.deliveries.len() <= MAX_BATCH_DELIVERIES);
    let identities = batch.deliveries.iter().flat_map(|d| [d.identity, d.legacy]);
    let mut marks = TableMarks::read(view.records.marks(identities)?, batch.ttl_millis);
    let rows_at_load = part.entries.len();
    // The records as the earlier deliveries left them.
    let mut seen = view.records.clone();
    let mut groups = Vec::with_capacity(batch.deliveries.len());
    let mut answers = Vec::with_capacity(batch.deliveries.len());
    for (index, delivery) in batch.deliveries.iter().enumerate() {
        let (answer, group) = match batch.failed.get(&index) {
            Some(error) => (Accepted::Failed(error.clone()), Writes::default()),
            None => {
                let loaded = grown(view.loaded, part.entries.len(), rows_at_load);
                let inner = View {
                    loaded: &loaded,
                    records: &seen,
                    liveness: view.liveness,
                    fleet: view.fleet,
                };
                one(part, &inner, (index, delivery), &mut marks)?
            }
        };
        seen.take_in(&group);
        groups.push(group);
        answers.push(answer);
    }
    debug_assert_eq!(answers.len(), batch.deliveries.len());
    debug_assert!(answers
        .iter()
        .zip(&groups)
        .all(|(answer, group)| matches!(answer, Accepted::Queued(_)) || group.is_empty()));
    let writes = Writes {
        groups,
        trim_marks: true,
        prune_payloads: batch.prune_payloads,
        ..Writes::default()
    };
    Ok(Step {
        writes,
        effect: answers,
    })
}

/// What the batch loaded, as a delivery's step sees it: the rows the earlier deliveries added
/// count toward the queue's size (its bound), the part is the same.
fn grown(loaded: &Loaded, rows_now: usize, rows_at_load: usize) -> Loaded {
    match loaded {
        Loaded::Whole => Loaded::Whole,
        Loaded::Part { reads, queue_rows } => Loaded::Part {
            reads: reads.clone(),
            queue_rows: (queue_rows + rows_now).saturating_sub(rows_at_load),
        },
    }
}

/// One delivery on the part as the earlier ones left it: its answer and its write group. A
/// duplicate or a refused submit changes nothing (the part and the marks stay as they were).
fn one<L: Liveness>(
    part: &mut QueueState,
    view: &View<'_, L>,
    (index, delivery): (usize, &BatchDelivery<'_>),
    marks: &mut TableMarks,
) -> Result<(Accepted, Writes), Halt> {
    let keys = DedupeKeys {
        identity: delivery.identity,
        legacy: Some(delivery.legacy),
    };
    let marks_before = marks.clone();
    let mark = match marks.mark(keys, delivery.arrived_millis) {
        MarkStep::Duplicate => return Ok((Accepted::Duplicate, Writes::default())),
        MarkStep::Write(mark) => mark,
    };
    let mut attempt = part.clone();
    match delivery.submit.step(&mut attempt, view) {
        Ok(step) => {
            *part = attempt;
            let mut group = step.writes;
            group.marks.push(mark);
            group.payloads.push(PayloadWrite {
                delivery: delivery.id.to_string(),
                key: step.effect.key.clone(),
                body: delivery.body.to_vec(),
            });
            Ok((Accepted::Queued(Box::new(step.effect)), group))
        }
        Err(Halt::Refused(e)) => {
            *marks = marks_before;
            Ok((Accepted::Failed(e.to_string()), Writes::default()))
        }
        Err(Halt::Fleet(e)) => {
            *marks = marks_before;
            Ok((Accepted::Failed(e.to_string()), Writes::default()))
        }
        // Records not read yet: the batch is decided again from its start once they are; a
        // read that fails fails this delivery alone.
        Err(Halt::Unread(Unread::Records(need))) => Err(Halt::Unread(Unread::Records(Need {
            group: Some(index),
            ..need
        }))),
        // More of the queue than the batch loaded: the whole batch runs on the whole queue.
        Err(Halt::Unread(Unread::Queue(_))) => Err(Halt::Unread(Unread::Queue(Reads::Everything))),
    }
}
