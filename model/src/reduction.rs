//! The check that a symmetry reduction loses nothing: every state a model reaches, explored
//! without the reduction, put into the class its representative names.
//!
//! The checker run with `symmetry()` visits one state per class it meets and goes on from it
//! alone. That is sound when the states of a class are interchangeable: each `always` property
//! says the same of all of them, and from each the same classes are reachable. On one
//! configuration, [`classes`] shows both: it reaches every state the model can reach and counts
//! their classes, which the reduced run must meet every one of (its unique state count equals
//! [`Classes::classes`]), and it evaluates every `always` property on every state, which must give
//! one answer per class. (A representative may leave out what only the `sometimes` properties
//! read; the examples are then judged by the transitions the model generated.)

use stateright::{Expectation, Model, Representative};
use std::collections::hash_map::DefaultHasher;
use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};

/// What [`classes`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Classes {
    /// Unique states reachable without the reduction.
    pub states: usize,
    /// Their classes (distinct representatives).
    pub classes: usize,
    /// An `always` property that says one thing of one state of a class and another of another,
    /// if any.
    pub split_by: Option<&'static str>,
}

fn digest<T: Hash>(value: &T) -> u64 {
    let mut hasher = DefaultHasher::new();
    value.hash(&mut hasher);
    hasher.finish()
}

/// Explores every state of `model` (depth first, without reduction, at most `max_states`) and
/// sorts them into the classes of their representatives, evaluating every `always` property. Panics past `max_states`: the bound
/// keeps a configuration too large for this check from eating the machine.
pub fn classes<M>(model: &M, max_states: usize) -> Classes
where
    M: Model,
    M::State: Hash + Representative,
{
    let properties: Vec<_> = model
        .properties()
        .into_iter()
        .filter(|p| p.expectation == Expectation::Always)
        .collect();
    let mut seen: HashSet<u64> = HashSet::new();
    let mut answers: HashMap<u64, Vec<bool>> = HashMap::new();
    let mut split_by = None;
    let mut pending: Vec<M::State> = Vec::new();
    for state in model.init_states() {
        if seen.insert(digest(&state)) {
            pending.push(state);
        }
    }
    let mut actions = Vec::new();
    while let Some(state) = pending.pop() {
        assert!(
            seen.len() <= max_states,
            "more than {max_states} states: too large for the reduction check"
        );
        let said: Vec<bool> = properties
            .iter()
            .map(|p| (p.condition)(model, &state))
            .collect();
        match answers.entry(digest(&state.representative())) {
            std::collections::hash_map::Entry::Occupied(class) => {
                if split_by.is_none() {
                    split_by = properties
                        .iter()
                        .zip(class.get().iter().zip(&said))
                        .find(|(_, (a, b))| a != b)
                        .map(|(p, _)| p.name);
                }
            }
            std::collections::hash_map::Entry::Vacant(class) => {
                class.insert(said);
            }
        }
        actions.clear();
        model.actions(&state, &mut actions);
        for action in actions.drain(..) {
            if let Some(next) = model.next_state(&state, action) {
                if seen.insert(digest(&next)) {
                    pending.push(next);
                }
            }
        }
    }
    Classes {
        states: seen.len(),
        classes: answers.len(),
        split_by,
    }
}
