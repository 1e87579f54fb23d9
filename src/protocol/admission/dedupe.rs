//! Event-identity dedupe: set-if-absent, with expiry. There is deliberately no read-only probe:
//! the only way to ask "seen?" is to mark, and only an admitted delivery may mark.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The bound on remembered identities; past it the entry closest to expiry is forgotten first
/// (a later duplicate of it may then run again: extra work, never lost work).
pub const MAX_DEDUPE_ENTRIES: usize = 65_536;

#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct EventIdentity(pub String);

#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Dedupe {
    /// identity → expiry time in millis.
    marked: BTreeMap<EventIdentity, u64>,
    #[serde(default)]
    evicted: u64,
}

impl Dedupe {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        self.marked.len()
    }

    pub fn is_empty(&self) -> bool {
        self.marked.is_empty()
    }

    /// How many identities were forgotten early because the set was full.
    pub fn evicted(&self) -> u64 {
        self.evicted
    }

    /// Marks `identity` until `now_millis + ttl_millis` unless it is already marked and unexpired.
    /// Returns `true` when this call marked it (a first delivery), `false` for a duplicate.
    pub fn mark_if_absent(
        &mut self,
        identity: &EventIdentity,
        now_millis: u64,
        ttl_millis: u64,
    ) -> bool {
        if let Some(&expires) = self.marked.get(identity) {
            if expires > now_millis {
                return false;
            }
        }
        self.expire(now_millis);
        if self.marked.len() >= MAX_DEDUPE_ENTRIES {
            let soonest = self
                .marked
                .iter()
                .min_by_key(|(_, expires)| **expires)
                .map(|(id, _)| id.clone());
            if let Some(id) = soonest {
                self.marked.remove(&id);
                self.evicted += 1;
            }
        }
        self.marked
            .insert(identity.clone(), now_millis.saturating_add(ttl_millis));
        true
    }

    /// Forgets `identity`: only for a delivery that was marked but could not be dispatched and was
    /// never acknowledged, so that the sender's retry is judged afresh instead of deduped away.
    pub fn forget(&mut self, identity: &EventIdentity) {
        self.marked.remove(identity);
    }

    /// Forgets identities whose time has passed.
    pub fn expire(&mut self, now_millis: u64) {
        self.marked.retain(|_, expires| *expires > now_millis);
    }

    /// Whether `identity` is marked (for tests and status only; never part of a decision).
    pub fn contains(&self, identity: &EventIdentity, now_millis: u64) -> bool {
        self.marked.get(identity).is_some_and(|e| *e > now_millis)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mark_expires_and_then_marks_again() {
        let mut dedupe = Dedupe::new();
        let a = EventIdentity("a".into());
        assert!(dedupe.mark_if_absent(&a, 0, 10));
        assert!(!dedupe.mark_if_absent(&a, 9, 10));
        assert!(dedupe.contains(&a, 9));
        assert!(!dedupe.contains(&a, 10));
        assert!(dedupe.mark_if_absent(&a, 10, 10));
        assert_eq!((dedupe.len(), dedupe.evicted()), (1, 0));
    }
}
