//! Following a turn's retry chain (spec/slots.md, "Dependencies and retries"): where `wait` and
//! `--after` go on from a failed attempt that was retried. Every decision about dependencies and
//! retries is the core's ([`crate::protocol::slots::departure`]); this only reads records.

use crate::dispatch::DispatchError;
use crate::protocol::slots::{self, TurnKey};
use crate::tasks;

/// The most attempts `wait` and `--after` follow along a retry chain (`retried_as`).
const MAX_CHAIN: u32 = slots::MAX_ATTEMPTS;

/// The last attempt of the retry chain starting at `key` (itself when never retried).
pub fn last_attempt(home: &crate::home::Home, key: &TurnKey) -> Result<TurnKey, DispatchError> {
    let mut key = key.clone();
    for _ in 0..MAX_CHAIN {
        match tasks::load_turn(home, &key)?.and_then(|t| t.retried_as) {
            Some(next) => key = TurnKey::new(key.task.clone(), next),
            None => break,
        }
    }
    Ok(key)
}
