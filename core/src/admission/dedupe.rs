//! Event-identity dedupe: set-if-absent, with expiry. There is deliberately no read-only probe:
//! the only way to ask "seen?" is to mark, and only an admitted delivery may mark.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// The bound on remembered identities; past it the entry closest to expiry is forgotten first
/// (a later duplicate of it may then run again: extra work, never lost work).
pub const MAX_DEDUPE_ENTRIES: usize = 65_536;

#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct EventIdentity(pub String);

/// The identities one delivery is deduplicated on: its own, and the one an older version marked
/// the same event under (`legacy`: honoured while its mark lives, never marked anew).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DedupeKeys<'a> {
    pub identity: &'a EventIdentity,
    pub legacy: Option<&'a EventIdentity>,
}

impl<'a> From<&'a EventIdentity> for DedupeKeys<'a> {
    fn from(identity: &'a EventIdentity) -> Self {
        DedupeKeys::of(identity)
    }
}

impl<'a> DedupeKeys<'a> {
    /// A delivery with no legacy identity.
    pub fn of(identity: &'a EventIdentity) -> Self {
        DedupeKeys {
            identity,
            legacy: None,
        }
    }
}

/// Marked identities with their expiry, indexed both ways so that marking, expiring and evicting
/// cost O(log n) even at the bound.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Dedupe {
    /// identity → expiry time in millis.
    marked: BTreeMap<EventIdentity, u64>,
    /// (expiry, identity): the same entries in expiry order.
    by_expiry: BTreeSet<(u64, EventIdentity)>,
    evicted: u64,
}

impl Dedupe {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        debug_assert_eq!(self.marked.len(), self.by_expiry.len());
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
            if let Some((_, soonest)) = self.by_expiry.pop_first() {
                self.marked.remove(&soonest);
                self.evicted += 1;
            }
        }
        let expires = now_millis.saturating_add(ttl_millis);
        self.marked.insert(identity.clone(), expires);
        self.by_expiry.insert((expires, identity.clone()));
        debug_assert!(self.marked.len() <= MAX_DEDUPE_ENTRIES);
        true
    }

    /// The one dedupe rule (the gate's set and the durable table's marks both decide with it): a
    /// delivery is a duplicate when its identity or its legacy identity holds a live mark;
    /// otherwise its identity is marked until `now_millis + ttl_millis`. Returns `true` when this
    /// call marked it (a first delivery), `false` for a duplicate.
    pub fn mark_keys_if_absent(
        &mut self,
        keys: DedupeKeys<'_>,
        now_millis: u64,
        ttl_millis: u64,
    ) -> bool {
        if keys
            .legacy
            .is_some_and(|legacy| self.contains(legacy, now_millis))
        {
            return false;
        }
        let marked = self.mark_if_absent(keys.identity, now_millis, ttl_millis);
        debug_assert!(self.contains(keys.identity, now_millis) || ttl_millis == 0);
        marked
    }

    /// Holds `identity` marked until `expires_at_millis` (a mark read from the durable table,
    /// with the expiry it was written with), unless it is held longer already.
    pub fn hold_until(&mut self, identity: &EventIdentity, expires_at_millis: u64) {
        if let Some(&held) = self.marked.get(identity) {
            if held >= expires_at_millis {
                return;
            }
            self.by_expiry.remove(&(held, identity.clone()));
        } else if self.marked.len() >= MAX_DEDUPE_ENTRIES {
            if let Some((_, soonest)) = self.by_expiry.pop_first() {
                self.marked.remove(&soonest);
                self.evicted += 1;
            }
        }
        self.marked.insert(identity.clone(), expires_at_millis);
        self.by_expiry.insert((expires_at_millis, identity.clone()));
        debug_assert_eq!(self.marked.len(), self.by_expiry.len());
    }

    /// Forgets `identity`: only for a delivery that was marked but could not be dispatched and was
    /// never acknowledged, so that the sender's retry is judged afresh instead of deduped away.
    pub fn forget(&mut self, identity: &EventIdentity) {
        if let Some(expires) = self.marked.remove(identity) {
            self.by_expiry.remove(&(expires, identity.clone()));
        }
    }

    /// Forgets identities whose time has passed.
    pub fn expire(&mut self, now_millis: u64) {
        while let Some((expires, _)) = self.by_expiry.first() {
            if *expires > now_millis {
                break;
            }
            if let Some((_, identity)) = self.by_expiry.pop_first() {
                self.marked.remove(&identity);
            }
        }
    }

    /// Whether `identity` is marked (read by [`Dedupe::mark_keys_if_absent`] for a legacy
    /// identity; elsewhere for tests and status only).
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

    #[test]
    fn at_the_bound_the_entry_closest_to_expiry_is_forgotten_first() {
        let mut dedupe = Dedupe::new();
        for i in 0..MAX_DEDUPE_ENTRIES as u64 {
            // Later identities expire later: entry 0 is the closest to expiry.
            assert!(dedupe.mark_if_absent(&EventIdentity(format!("e{i}")), i, 1_000_000));
        }
        assert_eq!(dedupe.len(), MAX_DEDUPE_ENTRIES);
        let now = MAX_DEDUPE_ENTRIES as u64;
        assert!(dedupe.mark_if_absent(&EventIdentity("new".into()), now, 1_000_000));
        assert_eq!((dedupe.len(), dedupe.evicted()), (MAX_DEDUPE_ENTRIES, 1));
        assert!(!dedupe.contains(&EventIdentity("e0".into()), now));
        assert!(dedupe.contains(&EventIdentity("e1".into()), now));
        // The forgotten identity may mark again (extra work, never lost work).
        assert!(dedupe.mark_if_absent(&EventIdentity("e0".into()), now, 1_000_000));
        dedupe.forget(&EventIdentity("e0".into()));
        assert!(!dedupe.contains(&EventIdentity("e0".into()), now));
    }

    /// A live mark under the legacy identity makes a delivery a duplicate and marks nothing; an
    /// expired one does not count.
    #[test]
    fn a_live_legacy_mark_makes_a_duplicate_until_it_expires() {
        let mut dedupe = Dedupe::new();
        let legacy = EventIdentity("generic/default/d-1".into());
        let current = EventIdentity("[\"/r\",\"generic\",\"default\",\"d-1\"]".into());
        dedupe.hold_until(&legacy, 10);
        let keys = DedupeKeys {
            identity: &current,
            legacy: Some(&legacy),
        };
        assert!(!dedupe.mark_keys_if_absent(keys, 9, 100));
        assert!(!dedupe.contains(&current, 9), "a duplicate marks nothing");
        assert!(dedupe.mark_keys_if_absent(keys, 10, 100));
        assert!(!dedupe.mark_keys_if_absent(keys, 11, 100));
        assert!(!dedupe.mark_keys_if_absent(DedupeKeys::of(&current), 11, 100));
        // A held mark keeps the later of two expiries.
        dedupe.hold_until(&current, 50);
        assert!(dedupe.contains(&current, 105));
    }
}
