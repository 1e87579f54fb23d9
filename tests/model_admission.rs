//! Exhaustive checks of the admission model (`model/src/admission.rs`), which drives the core's
//! admission steps (`core/src/admission/steps.rs`) in serve's order: one small configuration per
//! strategy, serve crashing at every step of the accept sequence and restarting, the withdraw
//! path and the detach timeout; and the teeth: every property has a deliberately broken variant
//! under which the checker must find that property broken (an `always`, A1-A6) or never reach it
//! (a `sometimes` example), by name. Each configuration's unique state count is
//! pinned (a changed state space shows up in review as a changed number). Larger configurations
//! run with `TOLLGATE_MODEL_FULL=1`.
#![cfg(feature = "model-check")]

#[path = "common/teeth.rs"]
mod teeth;
use stateright::{Checker, HasDiscoveries, Model};
use std::collections::BTreeSet;
use std::time::Instant;
use tollgate::model::admission::{
    describe, names, AdmissionConfig, AdmissionModel, EventSpec, Variant,
};
use tollgate::protocol::admission::Strategy;

/// Checks `cfg` exhaustively and pins its unique state count (CI configurations).
fn check(cfg: AdmissionConfig, expected_states: usize) {
    let states = check_unpinned(cfg.clone());
    assert_eq!(states, expected_states, "the state space of {cfg} changed");
}

/// Checks `cfg` exhaustively; returns its unique state count.
fn check_unpinned(cfg: AdmissionConfig) -> usize {
    let started = Instant::now();
    let checker = AdmissionModel::new(cfg.clone())
        .checker()
        .spawn_dfs()
        .join();
    tollgate::model::report(&format!(
        "admission {cfg}: {} unique states, depth {}, {:.1?}",
        checker.unique_state_count(),
        checker.max_depth(),
        started.elapsed()
    ));
    checker.assert_properties();
    checker.unique_state_count()
}

/// Three events over two tenants: `ev0` (tenant 0) is delivered three times, so a redelivery of
/// it can be refused at the cap and later answered as a duplicate; `ev2` shares tenant 0 with
/// `ev0`, so the tenant ceiling bites, and is delivered twice (a refused delivery's retry);
/// `ev1` once.
fn small(max_detached: usize, per_tenant: usize, strategy: Strategy) -> AdmissionConfig {
    AdmissionConfig::new(max_detached, per_tenant, vec![strategy])
        .event(EventSpec::deferred(0, 0, 3))
        .event(EventSpec::deferred(1, 0, 1))
        .event(EventSpec::deferred(0, 0, 2))
}

fn full_run() -> bool {
    std::env::var("TOLLGATE_MODEL_FULL").is_ok_and(|v| v == "1")
}

#[test]
fn drop_max2_tenant1() {
    check(small(2, 1, Strategy::Drop), 49_021);
}

/// The configurations CI checks (the tests above), for the teeth guard's property lists.
fn ci_configs() -> Vec<AdmissionConfig> {
    vec![
        small(2, 1, Strategy::Drop),
        queue_with_a_sync_delivery(),
        small(2, 1, Strategy::Debounce { quiet_millis: 2 }),
        small(2, 1, Strategy::Concurrent { max: 1 }),
        two_scopes_with_a_sync(),
        crash_and_restart_queue(),
        crash_and_restart_concurrent1(),
        withdraw_and_timeout(),
    ]
}

/// Supersession under queue needs three admitted at once (running, parked, the newcomer), and a
/// queue scope retains at most two deferred deliveries, so the cap alone never bites there: the
/// third is a sync delivery (uncapped), while the tenant ceiling refuses ev2 until ev0 ends. (The
/// duplicate refused at the cap is covered by the other strategies; here every event is delivered
/// at most twice to keep the run short.)
fn queue_with_a_sync_delivery() -> AdmissionConfig {
    AdmissionConfig::new(2, 1, vec![Strategy::Queue])
        .event(EventSpec::deferred(0, 0, 2))
        .event(EventSpec::deferred(1, 0, 1))
        .event(EventSpec::deferred(0, 0, 2))
        .event(EventSpec::deferred(0, 0, 1).sync())
}

#[test]
fn queue_max2_tenant1_with_a_sync_delivery() {
    check(queue_with_a_sync_delivery(), 242_123);
}

/// The mark table's rows carry the model clock they were marked at (the group commit's
/// `MarkWrite`), so deliveries marked before and after a debounce tick are distinct states: with
/// every mark judged at time 0 the count is the 209 435 of a table that held events only.
#[test]
fn debounce_max2_tenant1() {
    check(small(2, 1, Strategy::Debounce { quiet_millis: 2 }), 212_951);
}

#[test]
fn concurrent1_max2_tenant1() {
    check(small(2, 1, Strategy::Concurrent { max: 1 }), 68_715);
}

/// A sync delivery is not capped but is refused after shutdown; it shares the drop scope with
/// deferred work (and can be dropped there), while tenant 0 spreads over both scopes.
fn two_scopes_with_a_sync() -> AdmissionConfig {
    AdmissionConfig::new(2, 1, vec![Strategy::Drop, Strategy::Concurrent { max: 1 }])
        .event(EventSpec::deferred(0, 0, 2))
        .event(EventSpec::deferred(1, 1, 1))
        .event(EventSpec::deferred(0, 1, 2))
        .event(EventSpec::deferred(1, 0, 1).sync())
}

#[test]
fn two_scopes_with_a_sync_delivery() {
    check(two_scopes_with_a_sync(), 332_868);
}

/// Serve crashes at any step of the accept sequence (after the gate, after the durable turn,
/// after the spawn) and restarts once: marks come back from the mark table and the turn records,
/// every turn still in the queue is re-adopted, and a row a dead serve reserved is recovered.
/// A3 across crashes: no acknowledged delivery ends without having run.
fn crash_and_restart_queue() -> AdmissionConfig {
    AdmissionConfig::new(2, 0, vec![Strategy::Queue])
        .event(EventSpec::deferred(0, 0, 2))
        .event(EventSpec::deferred(1, 0, 2))
        .with_restarts(1)
}

fn crash_and_restart_concurrent1() -> AdmissionConfig {
    AdmissionConfig::new(1, 0, vec![Strategy::Concurrent { max: 1 }])
        .event(EventSpec::deferred(0, 0, 2))
        .event(EventSpec::deferred(1, 0, 2))
        .with_restarts(1)
}

/// The mark is durable with its turn (the group commit's transaction), not with the 200: a serve
/// that dies between the two no longer leaves a turn without its mark, so the paths where the
/// restarted serve admitted a redelivery of an ended turn's event and queued it again are gone
/// (87 134 and 23 832 states with the mark written at the ack, `Variant::MarkWithTheAck`).
#[test]
fn crash_and_restart_queue_max2() {
    check(crash_and_restart_queue(), 77_516);
}

#[test]
fn crash_and_restart_concurrent1_max1() {
    check(crash_and_restart_concurrent1(), 23_002);
}

/// The withdraw path (a turn that cannot be created) and the detach timeout (a running turn
/// cancelled for its deadline, the delivery timed-out only once the turn ended).
fn withdraw_and_timeout() -> AdmissionConfig {
    AdmissionConfig::new(2, 0, vec![Strategy::Drop])
        .event(EventSpec::deferred(0, 0, 2))
        .event(EventSpec::deferred(1, 0, 1))
        .with_submit_failures()
        .with_timeouts()
}

#[test]
fn withdraw_and_timeout_drop_max2() {
    check(withdraw_and_timeout(), 4_385);
}

/// The larger configurations: two scopes, so the cap bites across scopes (a `queue` or `drop`
/// scope alone never retains more than two), three retained at once, and more events.
#[test]
fn full_queue_and_debounce_max3_tenant2() {
    if !full_run() {
        eprintln!("larger admission configurations skipped (set TOLLGATE_MODEL_FULL=1)");
        return;
    }
    check_unpinned(
        AdmissionConfig::new(
            3,
            2,
            vec![Strategy::Queue, Strategy::Debounce { quiet_millis: 1 }],
        )
        .event(EventSpec::deferred(0, 0, 3))
        .event(EventSpec::deferred(1, 0, 1))
        .event(EventSpec::deferred(0, 1, 2))
        .event(EventSpec::deferred(1, 1, 1)),
    );
}

#[test]
fn full_drop_and_concurrent2_max3_tenant2() {
    if !full_run() {
        eprintln!("larger admission configurations skipped (set TOLLGATE_MODEL_FULL=1)");
        return;
    }
    check_unpinned(
        AdmissionConfig::new(3, 2, vec![Strategy::Drop, Strategy::Concurrent { max: 2 }])
            .event(EventSpec::deferred(0, 0, 2))
            .event(EventSpec::deferred(1, 1, 1))
            .event(EventSpec::deferred(0, 1, 2))
            .event(EventSpec::deferred(1, 1, 1))
            .event(EventSpec::deferred(1, 0, 1).sync()),
    );
}

/// Crashes at every step of the accept sequence with a debounce scope (supersession, the quiet
/// period, re-adopted waiters), and a submit that may fail (withdraw).
#[test]
fn full_crash_and_restart_debounce_max2() {
    if !full_run() {
        eprintln!("larger admission configurations skipped (set TOLLGATE_MODEL_FULL=1)");
        return;
    }
    check_unpinned(
        AdmissionConfig::new(2, 0, vec![Strategy::Debounce { quiet_millis: 1 }])
            .event(EventSpec::deferred(0, 0, 2))
            .event(EventSpec::deferred(1, 0, 1))
            .event(EventSpec::deferred(0, 0, 2))
            .with_restarts(1)
            .with_submit_failures(),
    );
}

// ---------------------------------------------------------------------------------------------
// Teeth.
// ---------------------------------------------------------------------------------------------

/// One tooth: a broken variant in a configuration the production core passes above, the
/// properties the checker must find broken, and the examples it must never reach.
struct Tooth {
    cfg: AdmissionConfig,
    breaks: &'static [&'static str],
    unreached: &'static [&'static str],
}

/// The teeth of `variant` (no wildcard: a new variant does not build without its teeth).
fn teeth(variant: Variant) -> Vec<Tooth> {
    let tooth = |cfg: AdmissionConfig, breaks, unreached| Tooth {
        cfg: cfg.with_variant(variant),
        breaks,
        unreached,
    };
    match variant {
        Variant::Production => Vec::new(),
        // A rejected delivery is marked, so its retry is deduped away: never admitted; and a
        // redelivery of an admitted one is a duplicate at once, never refused at the cap first.
        Variant::MarkBeforeAdmit => vec![tooth(
            small(2, 1, Strategy::Drop),
            &[names::A2],
            &[names::RETRY_ADMITTED, names::DUPLICATE_CONVERGES],
        )],
        // The released work is still retained by its scope, so A1 falls with A5.
        Variant::ReleaseAtAck => vec![tooth(
            small(2, 1, Strategy::Concurrent { max: 1 }),
            &[names::A5, names::A1],
            &[],
        )],
        Variant::AckAndDropAtCap => vec![tooth(small(2, 1, Strategy::Drop), &[names::A2], &[])],
        Variant::UnboundedDebounce => vec![tooth(
            small(2, 1, Strategy::Debounce { quiet_millis: 2 }),
            &[names::A4],
            &[names::SUPERSEDED],
        )],
        Variant::DrainRunningOnly => vec![tooth(small(2, 1, Strategy::Queue), &[names::A3], &[])],
        Variant::SkipRecovery => vec![tooth(
            crash_and_restart_queue(),
            &[names::A3],
            &[names::RECOVERED],
        )],
        Variant::WithdrawKeepsMark => vec![tooth(
            withdraw_and_timeout(),
            &[names::A2],
            &[names::WITHDRAWN_RETRY],
        )],
        // Serve dies between the turn's commit and the 200, the turn ends, and the restarted
        // serve has no mark of it: the redelivery is admitted and queued again.
        Variant::MarkWithTheAck => vec![tooth(crash_and_restart_queue(), &[names::A6], &[])],
        Variant::RefusesEverything => {
            vec![tooth(small(2, 1, Strategy::Drop), &[], &[names::AT_REST])]
        }
        // ev0 and ev2 share tenant 0, whose ceiling is 1.
        Variant::NoTenantCeiling => vec![tooth(
            small(2, 1, Strategy::Concurrent { max: 1 }),
            &[names::A1],
            &[names::TENANT_CEILING],
        )],
        Variant::DrainHandsOffNothing => vec![tooth(
            small(2, 1, Strategy::Queue),
            &[names::A3],
            &[names::HANDED_OFF],
        )],
        Variant::DropQueues => vec![tooth(small(2, 1, Strategy::Drop), &[], &[names::DROPPED])],
        Variant::ParkedNeverStart => vec![
            tooth(
                small(2, 1, Strategy::Debounce { quiet_millis: 2 }),
                &[],
                &[names::DEBOUNCE_START],
            ),
            tooth(
                small(2, 1, Strategy::Concurrent { max: 1 }),
                &[],
                &[names::LINE_START],
            ),
        ],
        Variant::DeadlineNeverPasses => {
            vec![tooth(withdraw_and_timeout(), &[], &[names::TIMED_OUT])]
        }
    }
}

/// Runs each tooth of `variant`: until every property in `breaks` has a counterexample (printing
/// the trail up to its first violating state), and, if the tooth names examples, to completion,
/// which must reach none of them.
fn bites(variant: Variant) {
    for Tooth {
        cfg,
        breaks,
        unreached,
    } in teeth(variant)
    {
        let started = Instant::now();
        let model = AdmissionModel::new(cfg.clone());
        let listed: BTreeSet<&str> = model.properties().iter().map(|p| p.name).collect();
        for name in breaks.iter().chain(unreached) {
            assert!(
                listed.contains(name),
                "{cfg}: \"{name}\" is not a property of it"
            );
        }
        let builder = AdmissionModel::new(cfg.clone()).checker();
        let checker = if unreached.is_empty() {
            builder
                .finish_when(HasDiscoveries::AllOf(breaks.iter().copied().collect()))
                .target_state_count(teeth::STATE_BOUND)
                .spawn_dfs()
                .join()
        } else {
            builder.spawn_dfs().join()
        };
        for &property in breaks {
            let path = checker.discovery(property).unwrap_or_else(|| {
                panic!("{variant:?}: the checker found no counterexample for {property:?} in {cfg}")
            });
            // The trail up to the first state that breaks the property (the checker reports the
            // last violating state it reached, further along the same path).
            let condition = model.property(property).condition;
            let mut trail = path.into_vec();
            let first_bad = trail
                .iter()
                .position(|(state, _)| !condition(&model, state))
                .expect("a counterexample trail holds a violating state");
            trail.truncate(first_bad + 1);
            trail[first_bad].1 = None;
            eprintln!("{property:?} broken:\n{}", describe(&model, &trail));
        }
        if !unreached.is_empty() {
            assert!(checker.is_done(), "{cfg}: the check did not complete");
        }
        for &name in unreached {
            if let Some(path) = checker.discovery(name) {
                panic!(
                    "{cfg}: the example {name:?} was reached although the variant rules it out:\n{}",
                    describe(&model, &path.into_vec())
                );
            }
        }
        tollgate::model::report(&format!(
            "admission teeth: {variant:?} caught: broken {breaks:?}, never reached {unreached:?} \
             ({} unique states, {:.1?})",
            checker.unique_state_count(),
            started.elapsed(),
        ));
    }
}

/// One `#[test]` per broken variant, and the list of the variants they cover.
macro_rules! teeth_tests {
    ($($test:ident => $variant:ident,)*) => {
        $(
            #[test]
            fn $test() {
                bites(Variant::$variant);
            }
        )*
        const TESTED: &[Variant] = &[$(Variant::$variant),*];
    };
}

teeth_tests! {
    teeth_mark_before_admit_breaks_a2 => MarkBeforeAdmit,
    teeth_release_at_ack_breaks_a5_and_a1 => ReleaseAtAck,
    teeth_ack_and_drop_at_cap_breaks_a2 => AckAndDropAtCap,
    teeth_unbounded_debounce_waiter_breaks_a4 => UnboundedDebounce,
    teeth_drain_of_running_work_only_breaks_a3 => DrainRunningOnly,
    teeth_serve_recovery_skipped_breaks_a3 => SkipRecovery,
    teeth_withdraw_that_keeps_the_mark_breaks_a2 => WithdrawKeepsMark,
    teeth_a_mark_written_with_the_ack_breaks_a6 => MarkWithTheAck,
    teeth_a_gate_refusing_everything_never_rests_after_work => RefusesEverything,
    teeth_no_tenant_ceiling_breaks_a1 => NoTenantCeiling,
    teeth_a_drain_handing_off_nothing_breaks_a3 => DrainHandsOffNothing,
    teeth_a_drop_scope_that_queues_drops_nothing => DropQueues,
    teeth_parked_rows_that_never_start => ParkedNeverStart,
    teeth_a_deadline_that_never_passes_times_nothing_out => DeadlineNeverPasses,
}

/// The guard: every property of the admission model (the union of the property lists of the CI
/// configurations and of the teeth) has a tooth that names it, and every broken variant has its
/// test above.
#[test]
fn every_property_has_a_tooth() {
    let mut listed: BTreeSet<&'static str> = BTreeSet::new();
    let configs = ci_configs().into_iter().chain(
        Variant::BROKEN
            .into_iter()
            .flat_map(|v| teeth(v).into_iter().map(|t| t.cfg)),
    );
    for cfg in configs {
        listed.extend(AdmissionModel::new(cfg).properties().iter().map(|p| p.name));
    }
    teeth::assert_every_property_has_a_tooth(
        &Variant::BROKEN,
        TESTED,
        |v| {
            teeth(v)
                .into_iter()
                .map(|t| (t.breaks, t.unreached))
                .collect()
        },
        &listed,
    );
}
