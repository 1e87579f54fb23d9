//! The durable marks' step of serve's group commit (spec/ingress.md, "Group commit"): the
//! section reads the marks the batch's deliveries are deduplicated on (their identities and
//! legacy identities) from the store's mark table, and this step decides each delivery in turn
//! with the one dedupe rule ([`Dedupe::mark_keys_if_absent`], the gate's own), returning the mark
//! the shell writes in the delivery's savepoint. A delivery of the batch sees the marks the
//! earlier ones wrote, so two deliveries of one identity in one batch queue one turn.
//!
//! The step decides; the store's unique key on the table stays the enforcement: the shell writes
//! a mark with a plain insert, so a mark the section's read could not have seen (none can, under
//! the queue's lock) fails the delivery instead of being overwritten.

use super::{Dedupe, DedupeKeys, EventIdentity};

/// One row of the mark table as the section read it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct StoredMark {
    pub identity: EventIdentity,
    pub expires_at_millis: u64,
}

/// A mark the shell writes for one delivery: any expired row of `identity` (expired at
/// `marked_at_millis`) is replaced.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct MarkWrite {
    pub identity: EventIdentity,
    pub marked_at_millis: u64,
    pub expires_at_millis: u64,
}

/// The step's answer for one delivery.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum MarkStep {
    /// No live mark: write this one, then queue the turn in the same savepoint.
    Write(MarkWrite),
    /// A live mark (its identity's or its legacy identity's): nothing is queued.
    Duplicate,
}

/// The marks one group commit read, with the writes of its deliveries so far. Clone it before a
/// delivery and put the clone back when the delivery's savepoint is rolled back.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TableMarks {
    marks: Dedupe,
    ttl_millis: u64,
}

impl TableMarks {
    /// The marks read for the batch (rows of other identities do not change any decision).
    pub fn read(rows: impl IntoIterator<Item = StoredMark>, ttl_millis: u64) -> Self {
        let mut marks = Dedupe::new();
        for row in rows {
            marks.hold_until(&row.identity, row.expires_at_millis);
        }
        TableMarks { marks, ttl_millis }
    }

    /// One delivery's decision, judged at its arrival time `now_millis` (as the gate judged it).
    pub fn mark(&mut self, keys: DedupeKeys<'_>, now_millis: u64) -> MarkStep {
        if !self
            .marks
            .mark_keys_if_absent(keys, now_millis, self.ttl_millis)
        {
            return MarkStep::Duplicate;
        }
        let write = MarkWrite {
            identity: keys.identity.clone(),
            marked_at_millis: now_millis,
            expires_at_millis: now_millis.saturating_add(self.ttl_millis),
        };
        debug_assert!(write.expires_at_millis >= write.marked_at_millis);
        debug_assert!(self.ttl_millis == 0 || self.marks.contains(keys.identity, now_millis));
        MarkStep::Write(write)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(s: &str) -> EventIdentity {
        EventIdentity(s.into())
    }

    #[test]
    fn a_live_row_is_a_duplicate_an_expired_one_is_replaced() {
        let rows = [
            StoredMark {
                identity: id("live"),
                expires_at_millis: 20,
            },
            StoredMark {
                identity: id("old"),
                expires_at_millis: 5,
            },
        ];
        let mut marks = TableMarks::read(rows, 100);
        assert_eq!(
            marks.mark(DedupeKeys::of(&id("live")), 10),
            MarkStep::Duplicate
        );
        assert_eq!(
            marks.mark(DedupeKeys::of(&id("old")), 10),
            MarkStep::Write(MarkWrite {
                identity: id("old"),
                marked_at_millis: 10,
                expires_at_millis: 110,
            })
        );
    }

    /// Two deliveries of one identity in one batch: the second sees the first's write; a rolled
    /// back first delivery (its clone put back) leaves the second to mark.
    #[test]
    fn a_batch_sees_its_own_writes_and_a_rollback_forgets_them() {
        let mut marks = TableMarks::read([], 100);
        let before = marks.clone();
        assert!(matches!(
            marks.mark(DedupeKeys::of(&id("a")), 0),
            MarkStep::Write(_)
        ));
        assert_eq!(marks.mark(DedupeKeys::of(&id("a")), 0), MarkStep::Duplicate);
        marks = before;
        assert!(matches!(
            marks.mark(DedupeKeys::of(&id("a")), 0),
            MarkStep::Write(_)
        ));
    }

    #[test]
    fn a_live_legacy_row_makes_a_duplicate() {
        let rows = [StoredMark {
            identity: id("generic/default/d"),
            expires_at_millis: 50,
        }];
        let mut marks = TableMarks::read(rows, 100);
        let legacy = id("generic/default/d");
        let keys = DedupeKeys {
            identity: &id("[\"/r\",\"generic\",\"default\",\"d\"]"),
            legacy: Some(&legacy),
        };
        assert_eq!(marks.mark(keys, 49), MarkStep::Duplicate);
        assert!(matches!(marks.mark(keys, 50), MarkStep::Write(_)));
    }
}
