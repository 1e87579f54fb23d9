//! The scheduling model (`model/src/slots/order.rs`) checked exhaustively against the production
//! core's steps (Q1-Q3, spec/invariants.md), and its teeth: every property has a broken variant
//! under which the checker must find it broken (an `always`) or never reach it (a `sometimes`
//! example), by name. The state count is pinned like the slot
//! model's (`TOLLGATE_MODEL_REPIN=1` reports without asserting).
#![cfg(feature = "model-check")]

#[path = "common/teeth.rs"]
mod teeth;
use stateright::{Checker, Expectation, Model};
use std::collections::BTreeSet;
use std::time::Instant;
use tollgate::model::slots::order::{names, OrderConfig, OrderModel, OrderVariant};

#[test]
fn q_small_configuration_on_production() {
    // 3_091 until the model's fresh tokens also avoided the tokens of recorded works (a work's
    // id is its take-over's token): a take-over reusing a live work's token had its work left
    // unrecorded by the core, states production cannot reach (its tokens are never reused).
    check(OrderConfig::small(), 3_067);
}

#[test]
fn q_two_slots_on_production() {
    check(OrderConfig::two_slots(), PINNED_TWO_SLOTS);
}

/// 142_767 before the fresh-token fix above (the same cause; there the core's postcondition in
/// `runner_take_over`, "the work is recorded before its command starts", caught it).
const PINNED_TWO_SLOTS: usize = 125_779;

/// Every configuration CI checks.
fn ci_configs() -> Vec<OrderConfig> {
    vec![OrderConfig::small(), OrderConfig::two_slots()]
}

fn check(cfg: OrderConfig, pinned_states: usize) {
    let started = Instant::now();
    let checker = OrderModel::new(cfg.clone()).checker().spawn_dfs().join();
    tollgate::model::report(&format!(
        "scheduling model {cfg}: {} unique states ({} generated), max depth {}, {:.1?}",
        checker.unique_state_count(),
        checker.state_count(),
        checker.max_depth(),
        started.elapsed()
    ));
    assert!(checker.is_done(), "the check of {cfg} did not complete");
    for property in checker.model().properties() {
        match (property.expectation, checker.discovery(property.name)) {
            (Expectation::Always, Some(path)) => panic!(
                "{cfg}: counterexample for \"{}\":\n{:#?}",
                property.name,
                path.into_actions()
            ),
            (Expectation::Sometimes, None) => {
                panic!("{cfg}: no example reached for \"{}\"", property.name)
            }
            _ => {}
        }
    }
    if std::env::var("TOLLGATE_MODEL_REPIN").is_ok_and(|v| v == "1") {
        return;
    }
    assert_eq!(
        checker.unique_state_count(),
        pinned_states,
        "{cfg}: the state space changed; if that is intended, pin the new count"
    );
}

// ---------------------------------------------------------------------------------------------
// Teeth.
// ---------------------------------------------------------------------------------------------

/// What a broken variant must do in the small configuration: the properties the checker must find
/// broken, and the examples it must never reach.
fn teeth(variant: OrderVariant) -> (&'static [&'static str], &'static [&'static str]) {
    match variant {
        OrderVariant::Production => (&[], &[]),
        OrderVariant::IgnoresPause => (&[names::Q1], &[]),
        OrderVariant::IgnoresNotBefore => (&[names::Q2], &[]),
        OrderVariant::FifoOnly => (&[names::Q3], &[names::OVERTAKES]),
        OrderVariant::ResumeStartsNothing => (&[], &[names::RESUMED]),
        OrderVariant::SubmitDropsNotBefore => (&[], &[names::DELAYED]),
    }
}

/// Runs the small configuration under `variant` to completion: every property it must break has
/// a counterexample (printed), and no example it rules out is reached.
fn bites(variant: OrderVariant) {
    let (breaks, unreached) = teeth(variant);
    let cfg = OrderConfig::small().with_variant(variant);
    let started = Instant::now();
    let model = OrderModel::new(cfg.clone());
    let listed: BTreeSet<&str> = model.properties().iter().map(|p| p.name).collect();
    for name in breaks.iter().chain(unreached) {
        assert!(
            listed.contains(name),
            "{cfg}: \"{name}\" is not a property of it"
        );
    }
    let checker = model.checker().spawn_bfs().join();
    assert!(checker.is_done(), "{cfg}: the check did not complete");
    for name in breaks {
        let path = checker.discovery(name).unwrap_or_else(|| {
            panic!(
                "{cfg}: the broken core was NOT caught: no counterexample for \"{name}\" in {} \
                 states",
                checker.unique_state_count()
            )
        });
        eprintln!("\"{name}\" broken: {:#?}", path.into_actions());
    }
    for name in unreached {
        if let Some(path) = checker.discovery(name) {
            panic!(
                "{cfg}: the example \"{name}\" was reached although the variant rules it out: \
                 {:#?}",
                path.into_actions()
            );
        }
    }
    tollgate::model::report(&format!(
        "scheduling teeth: {cfg}: caught: broken {breaks:?}, never reached {unreached:?} ({} \
         states, {:.1?})",
        checker.unique_state_count(),
        started.elapsed(),
    ));
}

/// One `#[test]` per broken variant, and the list of the variants they cover.
macro_rules! teeth_tests {
    ($($test:ident => $variant:ident,)*) => {
        $(
            #[test]
            fn $test() {
                bites(OrderVariant::$variant);
            }
        )*
        const TESTED: &[OrderVariant] = &[$(OrderVariant::$variant),*];
    };
}

teeth_tests! {
    teeth_ignoring_the_pause_breaks_q1 => IgnoresPause,
    teeth_ignoring_not_before_breaks_q2 => IgnoresNotBefore,
    teeth_fifo_only_breaks_q3 => FifoOnly,
    teeth_a_resume_that_starts_nothing => ResumeStartsNothing,
    teeth_a_submit_that_drops_its_delay => SubmitDropsNotBefore,
}

/// The guard: every property of the scheduling model has a tooth that names it, and every broken
/// variant has its test above.
#[test]
fn every_property_has_a_tooth() {
    let mut listed: BTreeSet<&'static str> = BTreeSet::new();
    for cfg in ci_configs() {
        listed.extend(OrderModel::new(cfg).properties().iter().map(|p| p.name));
    }
    teeth::assert_every_property_has_a_tooth(
        &OrderVariant::BROKEN,
        TESTED,
        |v| vec![teeth(v)],
        &listed,
    );
}
