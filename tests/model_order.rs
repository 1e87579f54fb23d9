//! The scheduling model (`model/src/slots/order.rs`) checked exhaustively against the production
//! core's steps (Q1-Q3, spec/invariants.md), and its teeth: each broken variant must be rejected
//! with a counterexample for the property it breaks. The state count is pinned like the slot
//! model's (`TOLLGATE_MODEL_REPIN=1` reports without asserting).
#![cfg(feature = "model-check")]

use stateright::{Checker, Expectation, HasDiscoveries, Model};
use std::collections::BTreeSet;
use std::time::Instant;
use tollgate::model::slots::order::{names, OrderConfig, OrderModel, OrderVariant};

#[test]
fn q_small_configuration_on_production() {
    check(OrderConfig::small(), 3_091);
}

#[test]
fn q_two_slots_on_production() {
    check(OrderConfig::two_slots(), PINNED_TWO_SLOTS);
}

const PINNED_TWO_SLOTS: usize = 142_767;

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

fn expect_counterexample(variant: OrderVariant, property: &'static str) {
    let cfg = OrderConfig::small().with_variant(variant);
    let started = Instant::now();
    let checker = OrderModel::new(cfg.clone())
        .checker()
        .finish_when(HasDiscoveries::AnyOf(BTreeSet::from([property])))
        .spawn_bfs()
        .join();
    let path = checker.discovery(property).unwrap_or_else(|| {
        panic!(
            "{cfg}: the broken core was NOT caught: no counterexample for \"{property}\" in {} \
             states",
            checker.unique_state_count()
        )
    });
    tollgate::model::report(&format!(
        "scheduling teeth: {cfg}: caught, \"{property}\" broken after {} steps ({} states, {:.1?})",
        path.clone().into_actions().len(),
        checker.unique_state_count(),
        started.elapsed(),
    ));
    eprintln!("{:#?}", path.into_actions());
}

#[test]
fn teeth_ignoring_the_pause_breaks_q1() {
    expect_counterexample(OrderVariant::IgnoresPause, names::Q1);
}

#[test]
fn teeth_ignoring_not_before_breaks_q2() {
    expect_counterexample(OrderVariant::IgnoresNotBefore, names::Q2);
}

#[test]
fn teeth_fifo_only_breaks_q3() {
    expect_counterexample(OrderVariant::FifoOnly, names::Q3);
}
