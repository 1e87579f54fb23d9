//! The guard every model's teeth tests share: every broken variant has its test and at least one
//! tooth, and every property of the model (as the caller lists them from its CI and tooth
//! configurations) is named by some tooth, so a property added, renamed or weakened without a
//! tooth fails here. Included by path (`#[path = "common/teeth.rs"]`) into each model's test.

use std::collections::BTreeSet;
use std::fmt::Debug;

/// One tooth as the guard reads it: the properties it must break and the examples it must never
/// reach.
pub type Named = (&'static [&'static str], &'static [&'static str]);

/// Asserts the guard over `broken` (the model's broken variants), `tested` (those with a teeth
/// test), `teeth_of` (each variant's teeth) and `listed` (the model's property names).
pub fn assert_every_property_has_a_tooth<V: Copy + Debug + PartialEq>(
    broken: &[V],
    tested: &[V],
    teeth_of: impl Fn(V) -> Vec<Named>,
    listed: &BTreeSet<&'static str>,
) {
    let mut bitten: BTreeSet<&'static str> = BTreeSet::new();
    for &variant in broken {
        assert!(tested.contains(&variant), "{variant:?} has no teeth test");
        let teeth = teeth_of(variant);
        assert!(
            teeth.iter().any(|(b, u)| !b.is_empty() || !u.is_empty()),
            "{variant:?} has no tooth"
        );
        for (breaks, unreached) in teeth {
            bitten.extend(breaks.iter().chain(unreached).copied());
        }
    }
    let toothless: Vec<&str> = listed.difference(&bitten).copied().collect();
    assert!(
        toothless.is_empty(),
        "properties without a tooth: {toothless:?}"
    );
}

/// The most states a tooth that must break properties explores before it fails. A tooth stops at
/// its first counterexamples, a few thousand states in; one that no longer bites (its property
/// weakened to always hold) would otherwise explore the broken variant's whole space, which for
/// the fleet model ran past 20 GB of memory before it was stopped. Models whose teeth explore a
/// configuration to its end (deps, execution, order) do not use it.
#[allow(dead_code)]
pub const STATE_BOUND: usize = 1_000_000;
