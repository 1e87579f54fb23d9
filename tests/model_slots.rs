//! The slot model (`model/src/slots/`) checked exhaustively against the production core's steps,
//! and its teeth: every property has a deliberately broken variant under which the checker must
//! find that property broken (an `always`) or never reach it (a `sometimes` example), by name.
//!
//! The `s_*` configurations run in CI (crashes on; pid reuse and a reconcile run while others work
//! where the size allows; every strategy on shared task names; attached starts; cancel), checked
//! with the symmetry reduction (`model/src/slots/canonical.rs`: pids, tokens and interchangeable
//! submitters renamed). Each pins two counts: the unique states of the reduced check, and the
//! unique states of the same configuration explored without the reduction, which
//! `tollgate::model::reduction::classes` explores to show that the reduction loses nothing (the
//! reduced check meets every class of the full space, and every property answers alike on all
//! states of a class). `TOLLGATE_MODEL_FULL=1` adds larger budgets (reduced check only); those
//! take minutes. `TOLLGATE_MODEL_REPIN=1` reports every count without asserting it.
#![cfg(feature = "model-check")]

#[path = "common/teeth.rs"]
mod teeth;
use stateright::{Checker, Expectation, HasDiscoveries, Model};
use std::collections::BTreeSet;
use std::time::Instant;
use tollgate::model::reduction::classes;
use tollgate::model::slots::{
    initial_state, names, random_walk, render_trail, SlotConfig, SlotModel, Variant,
};
use tollgate::protocol::admission::{Strategy, MAX_CONCURRENT};

/// The most states the reduction check explores for one configuration (the largest CI one has
/// about 1.5 million).
const MAX_FULL_STATES: usize = 4_000_000;

/// The pinned counts of one configuration: the reduced check's unique states (one per class), and
/// the unique states without the reduction. `None`: report only (the larger budgets, whose full
/// state space is not explored at all).
#[derive(Clone, Copy, Debug)]
struct Pins {
    reduced: Option<usize>,
    full: Option<usize>,
}

fn repin() -> bool {
    std::env::var("TOLLGATE_MODEL_REPIN").is_ok_and(|v| v == "1")
}

/// Checks `cfg` to completion with the symmetry reduction (no timeout, no depth cut) and asserts
/// every property: no counterexample for any `always`, and with `require_examples` an example for
/// every `sometimes`; then the pinned counts, as stateright's own examples pin theirs, so a change
/// to the state space (a new action, a step that decides differently, a lost reduction) shows up
/// in review as a changed number. With `pins.full`, also explores the configuration without the
/// reduction and asserts that the reduced check met every class of it.
fn check(cfg: SlotConfig, require_examples: bool, pins: Pins) {
    let started = Instant::now();
    let checker = SlotModel::new(cfg.clone())
        .checker()
        .symmetry()
        .spawn_dfs()
        .join();
    tollgate::model::report(&format!(
        "slot model {cfg}: {} unique states with symmetry ({} generated), max depth {}, {:.1?}",
        checker.unique_state_count(),
        checker.state_count(),
        checker.max_depth(),
        started.elapsed()
    ));
    assert!(checker.is_done(), "the check of {cfg} did not complete");
    let model = checker.model();
    for property in model.properties() {
        let found = checker.discovery(property.name);
        match (property.expectation, found) {
            // The reduction leaves the event bits out of a state's class, so the examples are
            // the events the generated transitions produced.
            (Expectation::Sometimes, _)
                if require_examples && !model.example_generated(property.name) =>
            {
                panic!("{cfg}: no example reached for \"{}\"", property.name)
            }
            (Expectation::Always, Some(path)) => panic!(
                "{cfg}: counterexample for \"{}\":\n{}",
                property.name,
                render_trail(path.into_vec()).join("\n")
            ),
            _ => {}
        }
    }
    let reduced = checker.unique_state_count();
    if let Some(full) = pins.full {
        let started = Instant::now();
        let found = classes(&SlotModel::new(cfg.clone()), MAX_FULL_STATES);
        tollgate::model::report(&format!(
            "slot model {cfg}: {} unique states without symmetry in {} classes, {:.1?}",
            found.states,
            found.classes,
            started.elapsed()
        ));
        assert_eq!(
            found.split_by, None,
            "{cfg}: a property answers differently on two states of one class"
        );
        assert_eq!(
            found.classes, reduced,
            "{cfg}: the reduced check met {reduced} of the {} classes of the full state space",
            found.classes
        );
        if !repin() {
            assert_eq!(
                found.states, full,
                "{cfg}: the full state space changed; if that is intended, pin the new count"
            );
        }
    }
    if let Some(pinned) = pins.reduced.filter(|_| !repin()) {
        assert_eq!(
            reduced, pinned,
            "{cfg}: the state space changed; if that is intended, pin the new count"
        );
    }
}

fn full() -> bool {
    std::env::var("TOLLGATE_MODEL_FULL").is_ok_and(|v| v == "1")
}

fn budgets(mut cfg: SlotConfig, crashes: u8, reuses: u8, reconciles: u8) -> SlotConfig {
    cfg.crash_budget = crashes;
    cfg.reuse_budget = reuses;
    cfg.reconcile_budget = reconciles;
    cfg
}

fn unbounded() -> Strategy {
    Strategy::Concurrent {
        max: MAX_CONCURRENT,
    }
}

/// One CI configuration: its name, whether every example must be reached, its pins.
struct Ci {
    name: &'static str,
    cfg: SlotConfig,
    require_examples: bool,
    pins: Pins,
}

/// Every configuration CI checks (the `s_*` tests run them by name; the teeth guard reads their
/// property lists).
fn ci() -> Vec<Ci> {
    let ci = |name, cfg, reduced, full| Ci {
        name,
        cfg,
        require_examples: true,
        pins: Pins {
            reduced: Some(reduced),
            full: Some(full),
        },
    };
    let mut attached = budgets(SlotConfig::new(1, 1, 1), 1, 0, 1);
    attached.attached = 1;
    // Two tasks: cancelling the first must leave its running turn's row (and slot) in place
    // while the other task's turn waits for the slot.
    let mut cancel =
        budgets(SlotConfig::new(2, 1, 1), 1, 0, 0).with_tasks(vec![unbounded(), unbounded()]);
    cancel.cancel_budget = 1;
    let mut faults = budgets(SlotConfig::new(1, 1, 1), 1, 0, 1).with_command_faults();
    faults.attached = 1;
    let mut limited = budgets(SlotConfig::new(1, 1, 1), 1, 0, 1)
        .with_tasks(vec![Strategy::Concurrent { max: 1 }]);
    limited.attached = 1;
    let mut side = budgets(SlotConfig::new(2, 1, 1), 1, 0, 1);
    side.runner_reconciles = true;
    let mut threads = SlotConfig::new(1, 3, 2).without_faults();
    threads.concurrent_submissions = true;
    let mut reused = budgets(SlotConfig::new(2, 1, 1), 1, 1, 0);
    reused.children_reuse_pids = true;
    vec![
        ci(
            "2x1 cap 1",
            budgets(SlotConfig::new(2, 1, 1), 1, 1, 1),
            9_819,
            136_858,
        ),
        ci(
            "3x1 cap 1",
            budgets(SlotConfig::new(3, 1, 1), 1, 1, 0),
            12_746,
            255_725,
        ),
        large(ci(
            "3x1 cap 2",
            budgets(SlotConfig::new(3, 1, 2), 1, 0, 0),
            47_880,
            1_435_668,
        )),
        ci(
            "2x2 cap 1",
            budgets(SlotConfig::new(2, 2, 1), 1, 0, 0),
            19_757,
            119_621,
        ),
        ci(
            "queue",
            budgets(SlotConfig::new(3, 1, 1), 1, 0, 0).with_tasks(vec![Strategy::Queue]),
            3_356,
            45_616,
        ),
        ci(
            "debounce",
            budgets(SlotConfig::new(3, 1, 1), 1, 0, 1)
                .with_tasks(vec![Strategy::Debounce { quiet_millis: 50 }]),
            7_208,
            132_814,
        ),
        ci(
            "drop",
            budgets(SlotConfig::new(2, 1, 1), 1, 0, 1).with_tasks(vec![Strategy::Drop]),
            2_123,
            16_883,
        ),
        // A `drop` turn parked by the cap (the other task holds the slot) counts as busy: the
        // next `drop` turn is dropped.
        ci(
            "parked drop",
            budgets(SlotConfig::new(3, 1, 1), 0, 0, 1)
                .with_tasks(vec![Strategy::Drop, unbounded()]),
            11_729,
            47_523,
        ),
        large(ci(
            "drop beside concurrent=1",
            budgets(SlotConfig::new(2, 2, 2), 0, 0, 1)
                .with_tasks(vec![Strategy::Drop, Strategy::Concurrent { max: 1 }]),
            53_581,
            571_514,
        )),
        ci("attached", attached, 4_516, 13_664),
        ci("cancel", cancel, 7_790, 32_911),
        ci("command faults", faults, 8_476, 25_082),
        ci("attached concurrent=1", limited, 2_217, 7_170),
        ci("runner reconciles", side, 4_597, 42_530),
        large(Ci {
            // One submitter never duplicates a submission, so not every example is reachable.
            require_examples: false,
            ..ci("concurrent submissions", threads, 138_249, 1_479_233)
        }),
        ci("children reuse pids", reused, 2_613, 12_246),
    ]
}

/// A configuration whose full state space (half a million states and more) takes minutes to
/// explore on 2 cores: CI checks it with the reduction only, and `TOLLGATE_MODEL_FULL=1` adds
/// the exploration without it (and its pinned count).
fn large(ci: Ci) -> Ci {
    Ci {
        pins: Pins {
            full: ci.pins.full.filter(|_| full()),
            ..ci.pins
        },
        ..ci
    }
}

fn check_ci(name: &str) {
    let entry = ci()
        .into_iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no CI configuration named {name}"));
    check(entry.cfg, entry.require_examples, entry.pins);
}

#[test]
fn s_two_submitters_one_turn_cap_one() {
    check_ci("2x1 cap 1");
}

#[test]
fn s_three_submitters_one_turn_cap_one() {
    check_ci("3x1 cap 1");
}

#[test]
fn s_three_submitters_one_turn_cap_two() {
    check_ci("3x1 cap 2");
}

#[test]
fn s_two_submitters_two_turns_cap_one() {
    check_ci("2x2 cap 1");
}

/// Shared task names under each strategy: `queue` and `debounce` (one waiter, superseded by a
/// newer arrival), `drop`, and a `drop` task next to a `concurrent=1` one (turns line up).
#[test]
fn s_strategies_on_shared_tasks() {
    for name in [
        "queue",
        "debounce",
        "drop",
        "parked drop",
        "drop beside concurrent=1",
    ] {
        check_ci(name);
    }
}

/// An attached submitter next to a detached one, and a canceller, with crashes: the attached
/// submitter's own work outlives it when it dies and is killed before its turn runs again.
#[test]
fn s_attached_and_cancel() {
    check_ci("attached");
    check_ci("cancel");
}

/// Every way production's `execute_turn` can start a command: started with its leader recorded,
/// started with its leader unread (no `work_started`), or unstartable (no work, no leader; the
/// runner writes the result and finishes), for a detached runner and an attached submitter, with
/// a crash and a reconcile.
#[test]
fn s_command_faults_detached_and_attached() {
    check_ci("command faults");
}

/// A foreground turn next to a detached one of a `concurrent=1` task, with a crash and a
/// reconcile: the attached start waits while the detached turn is active (also while its dead
/// runner's row waits for reconcile), and never runs beside it (S10).
#[test]
fn s_attached_honours_concurrent_one() {
    check_ci("attached concurrent=1");
}

/// The runner-reconciles, concurrent-submission and children-on-reused-pids shapes, on the
/// production core.
#[test]
fn s_runner_reconciles_and_concurrent_submissions_on_production() {
    check_ci("runner reconciles");
    check_ci("concurrent submissions");
    check_ci("children reuse pids");
}

/// Larger budgets, behind `TOLLGATE_MODEL_FULL=1` (the CI budget cannot hold them), checked with
/// the reduction only; they report their counts.
#[test]
fn s_full_budgets_when_asked() {
    if !full() {
        eprintln!("TOLLGATE_MODEL_FULL is not 1: the larger slot model budgets are skipped");
        return;
    }
    let report_only = Pins {
        reduced: None,
        full: None,
    };
    check(
        budgets(SlotConfig::new(2, 2, 1), 1, 1, 1),
        true,
        report_only,
    );
    check(
        budgets(SlotConfig::new(2, 2, 2), 1, 1, 0),
        true,
        report_only,
    );
    let mut attached = budgets(SlotConfig::new(2, 1, 1), 1, 1, 1);
    attached.attached = 1;
    attached.cancel_budget = 1;
    check(attached, true, report_only);
}

// ---------------------------------------------------------------------------------------------
// Teeth.
// ---------------------------------------------------------------------------------------------

/// One tooth: a broken variant in a configuration whose production check passes above (or
/// would), the properties the checker must find broken, and the examples it must never reach.
struct Tooth {
    cfg: SlotConfig,
    breaks: &'static [&'static str],
    unreached: &'static [&'static str],
}

fn tooth(cfg: SlotConfig, breaks: &'static [&'static str]) -> Tooth {
    Tooth {
        cfg,
        breaks,
        unreached: &[],
    }
}

fn unreached(
    cfg: SlotConfig,
    breaks: &'static [&'static str],
    unreached: &'static [&'static str],
) -> Tooth {
    Tooth {
        cfg,
        breaks,
        unreached,
    }
}

/// The teeth of `variant` (every broken variant has at least one; the match has no wildcard, so
/// a new variant does not build without its teeth).
fn teeth(variant: Variant) -> Vec<Tooth> {
    let quiet = |s, t, c| {
        SlotConfig::new(s, t, c)
            .without_faults()
            .with_variant(variant)
    };
    let faulty = |s, t, c, crashes, reconciles| {
        budgets(SlotConfig::new(s, t, c), crashes, 0, reconciles).with_variant(variant)
    };
    match variant {
        Variant::Production => Vec::new(),
        // One process with several outstanding spawns (a serving submitter's threads);
        // reconcile's rules seam counts their reservations as one and starts a parked row beyond
        // the cap.
        Variant::OccupancyPerReserverPid => {
            let mut cfg = quiet(1, 3, 2);
            cfg.concurrent_submissions = true;
            vec![tooth(cfg, &[names::S1])]
        }
        // A finishing runner passes its own pid as `exclude_reserver` and then holds the
        // reservation of the row it starts; dropping that reservation from the count breaks S4's
        // "counted, one each, under every exclusion the shell passes".
        Variant::ExcludeDropsReservations => vec![tooth(quiet(2, 1, 1), &[names::S4])],
        // A runner whose command runs reconciles on the side: it holds a slot while reconciling.
        Variant::ReconcileExcludesItself => {
            let mut cfg = quiet(2, 1, 1);
            cfg.runner_reconciles = true;
            cfg.reconcile_budget = 1;
            vec![tooth(cfg, &[names::S1])]
        }
        Variant::ReleaseAfterBind => vec![tooth(faulty(1, 1, 1, 1, 0), &[names::S4])],
        // A reserver dies after its spawn; reconcile steals the dead reservation and spawns
        // again; the first child's stale token is refused by production and adopted by the
        // broken step. (The second work of the turn that follows is S2's; the path stops at the
        // first violation, S3. S2 over work has its own tooth.)
        Variant::UnconditionalTakeOver => vec![tooth(faulty(2, 1, 1, 1, 1), &[names::S3])],
        // The runner dies while its command runs; reconcile asks for its work to be killed, the
        // broken driver forgets it instead, and the replacement runs next to it.
        Variant::ReplaceWithoutKill => {
            vec![tooth(faulty(1, 1, 1, 1, 0), &[names::S2, names::S1])]
        }
        Variant::QueueKeepsTwoWaiters => vec![tooth(
            quiet(3, 1, 1).with_tasks(vec![Strategy::Queue]),
            &[names::S10],
        )],
        Variant::DropEnqueues => vec![tooth(
            quiet(2, 1, 1).with_tasks(vec![Strategy::Drop]),
            &[names::S10],
        )],
        // The submitter dies inside its section after writing the turn's record.
        Variant::SkipOrphanRequeue => vec![unreached(
            faulty(1, 1, 1, 1, 0),
            &[names::S9],
            &[names::REQUEUED],
        )],
        Variant::CancelLeavesRow => {
            let mut cfg = quiet(2, 1, 1);
            cfg.cancel_budget = 1;
            vec![tooth(cfg, &[names::S11])]
        }
        // A canceller races the runners of two tasks' turns.
        Variant::CancelledAfterCompletion => {
            let mut cfg = quiet(2, 1, 1).with_tasks(vec![unbounded(), unbounded()]);
            cfg.cancel_budget = 1;
            vec![tooth(cfg, &[names::S12])]
        }
        // A canceller races a finishing runner that starts the cancelled task's parked row: the
        // step as it was before S13 takes the row's live acting holder for its executor.
        Variant::CancelSignalsDispatchers => {
            let mut cfg = quiet(2, 1, 1).with_tasks(vec![unbounded(), unbounded()]);
            cfg.cancel_budget = 1;
            vec![tooth(cfg, &[names::S13])]
        }
        // A detached turn of a `concurrent=1` task runs; the foreground turn must wait for it.
        Variant::AttachedIgnoresStrategy => {
            let mut cfg = quiet(1, 1, 1).with_tasks(vec![Strategy::Concurrent { max: 1 }]);
            cfg.attached = 1;
            vec![unreached(cfg, &[names::S10], &[names::ATTACHED_WAIT])]
        }
        // The submitter dies between the two publishes; reconcile takes the row from the child.
        Variant::ParksBoundRowOfDeadReserver => {
            vec![tooth(faulty(1, 1, 1, 1, 1), &[names::S5])]
        }
        Variant::StartsNoParkedRow => vec![tooth(quiet(2, 1, 1), &[names::S6])],
        Variant::EnqueuesAtOwnClock => vec![tooth(quiet(2, 1, 1), &[names::S7])],
        Variant::QueueIdsRestart => vec![tooth(quiet(1, 2, 1), &[names::S7])],
        Variant::ReusesLastToken => vec![tooth(quiet(2, 1, 1), &[names::S8])],
        Variant::LeaderUnderAnotherTurn => vec![tooth(quiet(1, 1, 1), &[names::CORE])],
        Variant::SubmitSeesNoSlot => {
            vec![unreached(faulty(2, 1, 1, 1, 1), &[], &[names::ACQUIRED])]
        }
        Variant::SubmitStartsEverything => vec![
            unreached(quiet(2, 1, 1), &[names::S1], &[names::SATURATED]),
            unreached(
                quiet(1, 3, 1).with_tasks(vec![Strategy::Queue]),
                &[names::S1],
                &[names::WAIT, names::SUPERSEDED],
            ),
            unreached(
                quiet(2, 1, 1).with_tasks(vec![Strategy::Drop]),
                &[names::S10],
                &[names::DROPPED],
            ),
        ],
        // The runner dies while its work runs: nothing repairs its row.
        Variant::ReconcileSeesEveryoneAlive => vec![unreached(
            faulty(1, 1, 1, 1, 0),
            &[names::S9],
            &[names::KILL, names::REPLACED],
        )],
        Variant::PublishesInOneSection => {
            vec![unreached(
                faulty(1, 1, 1, 1, 0),
                &[],
                &[names::CRASH_BETWEEN],
            )]
        }
        Variant::AttachedNeverRuns => {
            let mut cfg = quiet(1, 1, 1);
            cfg.attached = 1;
            vec![unreached(cfg, &[], &[names::ATTACHED_RUN])]
        }
        Variant::CancelSelectsNothing => {
            let mut cfg = quiet(2, 1, 1);
            cfg.cancel_budget = 1;
            vec![unreached(cfg, &[], &[names::CANCEL_REMOVED])]
        }
    }
}

/// Runs each tooth of `variant` with the symmetry reduction: until every property in `breaks` has
/// a counterexample (printing its trail), and, if the tooth names examples, to completion, which
/// must reach none of them. Fails if a property it names is not one of the configuration's, so a
/// renamed property cannot leave its tooth testing nothing.
fn bites(variant: Variant) {
    for Tooth {
        cfg,
        breaks,
        unreached,
    } in teeth(variant)
    {
        let started = Instant::now();
        let model = SlotModel::new(cfg.clone());
        let listed: BTreeSet<&str> = model.properties().iter().map(|p| p.name).collect();
        for name in breaks.iter().chain(unreached) {
            assert!(
                listed.contains(name),
                "{cfg}: \"{name}\" is not a property of it"
            );
        }
        let builder = model.checker().symmetry();
        let checker = if unreached.is_empty() {
            builder
                .finish_when(HasDiscoveries::AllOf(breaks.iter().copied().collect()))
                .target_state_count(teeth::STATE_BOUND)
                .spawn_dfs()
                .join()
        } else {
            builder.spawn_dfs().join()
        };
        for name in breaks {
            let path = checker.discovery(name).unwrap_or_else(|| {
                panic!(
                    "{cfg}: the broken core was NOT caught: no counterexample for \"{name}\" in {} \
                     states",
                    checker.unique_state_count()
                )
            });
            eprintln!(
                "\"{name}\" broken:\n{}",
                render_trail(path.into_vec()).join("\n")
            );
        }
        if !unreached.is_empty() {
            assert!(checker.is_done(), "{cfg}: the check did not complete");
        }
        for name in unreached {
            assert!(
                !checker.model().example_generated(name),
                "{cfg}: the example \"{name}\" was reached although the variant rules it out"
            );
        }
        if !unreached.is_empty() {
            // The same without the reduction, judged by the checker's discoveries: the examples'
            // own conditions must not hold anywhere either.
            let every = SlotModel::new(cfg.clone()).checker().spawn_dfs().join();
            for name in unreached {
                if let Some(path) = every.discovery(name) {
                    panic!(
                        "{cfg}: the example \"{name}\" holds although the variant rules it out:\n{}",
                        render_trail(path.into_vec()).join("\n")
                    );
                }
            }
        }
        tollgate::model::report(&format!(
            "slot teeth: {cfg}: caught: broken {breaks:?}, never reached {unreached:?} ({} states, \
             {:.1?})",
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
    teeth_occupancy_per_unique_reserver_pid_breaks_s1 => OccupancyPerReserverPid,
    teeth_exclude_reserver_dropping_reservations_breaks_s4 => ExcludeDropsReservations,
    teeth_reconcile_excluding_itself_breaks_s1 => ReconcileExcludesItself,
    teeth_release_after_bind_breaks_s4 => ReleaseAfterBind,
    teeth_unconditional_take_over_breaks_s3 => UnconditionalTakeOver,
    teeth_replacing_a_dead_runner_without_killing_its_work_breaks_s2_and_s1 => ReplaceWithoutKill,
    teeth_queue_keeping_two_waiters_breaks_s10 => QueueKeepsTwoWaiters,
    teeth_drop_that_enqueues_breaks_s10 => DropEnqueues,
    teeth_skipping_the_orphan_requeue_breaks_s9 => SkipOrphanRequeue,
    teeth_cancel_that_leaves_the_row_breaks_s11 => CancelLeavesRow,
    teeth_recording_cancelled_from_the_request_breaks_s12 => CancelledAfterCompletion,
    teeth_signalling_a_dispatcher_breaks_s13 => CancelSignalsDispatchers,
    teeth_attached_start_ignoring_the_running_limit_breaks_s10 => AttachedIgnoresStrategy,
    teeth_parking_a_dead_reservers_bound_row_breaks_s5 => ParksBoundRowOfDeadReserver,
    teeth_starting_no_parked_row_breaks_s6 => StartsNoParkedRow,
    teeth_enqueueing_at_a_clock_that_runs_behind_breaks_s7 => EnqueuesAtOwnClock,
    teeth_restarting_queue_ids_breaks_s7 => QueueIdsRestart,
    teeth_reusing_a_token_breaks_s8 => ReusesLastToken,
    teeth_a_call_the_core_refuses_breaks_core => LeaderUnderAnotherTurn,
    teeth_a_submit_without_a_slot_never_spawns => SubmitSeesNoSlot,
    teeth_a_submit_that_starts_everything_breaks_s1_and_never_waits => SubmitStartsEverything,
    teeth_a_reconcile_seeing_everyone_alive_breaks_s9_and_never_kills => ReconcileSeesEveryoneAlive,
    teeth_one_section_for_both_publishes_leaves_no_crash_between => PublishesInOneSection,
    teeth_an_attached_start_that_never_runs => AttachedNeverRuns,
    teeth_a_cancel_of_no_task_removes_no_row => CancelSelectsNothing,
}

/// The guard: every property of the slot model (the union of the property lists of the CI
/// configurations and of the teeth) has a tooth that names it, and every broken variant has its
/// test above. A property added without a tooth, or a variant without a test, fails here.
#[test]
fn every_property_has_a_tooth() {
    let mut listed: BTreeSet<&'static str> = BTreeSet::new();
    let configs = ci().into_iter().map(|c| c.cfg).chain(
        Variant::BROKEN
            .into_iter()
            .flat_map(|v| teeth(v).into_iter().map(|t| t.cfg)),
    );
    for cfg in configs {
        listed.extend(SlotModel::new(cfg).properties().iter().map(|p| p.name));
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

#[test]
fn random_walk_is_reproducible_and_keeps_the_queue_well_formed() {
    let cfg = SlotConfig::new(2, 2, 1);
    let first = random_walk(cfg.clone(), 7, 200);
    let again = random_walk(cfg.clone(), 7, 200);
    assert_eq!(first, again, "the same seed must give the same walk");
    assert!(!first.is_empty());
    assert!(initial_state(&cfg).queue.entries.is_empty());
    for (_, state) in &first {
        assert_eq!(state.queue.check_structure(), Ok(()));
        // The state's queue is the real document: it round-trips through queue.json's format.
        let json = serde_json::to_string(&state.queue).expect("a queue serialises");
        let back: tollgate::protocol::slots::QueueState =
            serde_json::from_str(&json).expect("a published queue loads");
        assert_eq!(back, state.queue);
    }
    let other = random_walk(cfg, 8, 200);
    assert_ne!(
        first, other,
        "different seeds should explore different paths"
    );
}

/// Found by the checker (2 submitters x 2 turns x cap 1, crash budget 2): a submitter took a parked
/// row (duplicate submission), died before spawning, and its dead reservation on the parked row
/// counted against the cap forever, while reconcile parked the other row and then stopped at it
/// as saturated. Reconcile now clears a dead reservation on a parked row.
#[test]
fn s6_dead_reservation_on_a_parked_row_does_not_wedge_the_queue() {
    use tollgate::model::slots::token_from_counter;
    use tollgate::protocol::slots::{
        enqueue, park, reconcile_step, reserve_runner_slot, Observation, ProcessIdentity,
        QueueState, ReconcileStep, ReserveOutcome, RowState, TurnKey,
    };
    let dead_runner = ProcessIdentity {
        pid: 3,
        start_time_micros: 1,
    };
    let dead_submitter = ProcessIdentity {
        pid: 2,
        start_time_micros: 1,
    };
    let reconciler = ProcessIdentity {
        pid: 4,
        start_time_micros: 1,
    };
    let live = |id: &ProcessIdentity| {
        if *id == reconciler {
            Observation::Matching
        } else {
            Observation::Gone
        }
    };
    let (one, two) = (TurnKey::new("job", 1), TurnKey::new("job", 2));
    let mut q = QueueState::default();
    enqueue(&mut q, &one, dead_runner, 10).unwrap();
    q.entries[0].state = RowState::Dispatching {
        dispatch_owner: dead_runner,
    };
    q.runners.push(tollgate::protocol::slots::RunnerRecord {
        key: one.clone(),
        identity: dead_runner,
        attached: false,
    });
    enqueue(&mut q, &two, dead_submitter, 10).unwrap();
    park(&mut q, &two).unwrap();
    let took = reserve_runner_slot(
        &mut q,
        &two,
        dead_submitter,
        None,
        1,
        token_from_counter(1),
        &|id: &ProcessIdentity| {
            // The runner of turn 1 has already died; the submitter is alive while it reserves.
            if *id == dead_runner {
                Observation::Gone
            } else {
                Observation::Matching
            }
        },
    )
    .unwrap();
    assert!(matches!(took, ReserveOutcome::Acquired { .. }));
    let mut spawned = None;
    for n in 2..10 {
        match reconcile_step(
            &mut q,
            reconciler,
            1,
            token_from_counter(n),
            &live,
            &|_: &TurnKey| false,
        )
        .unwrap()
        {
            ReconcileStep::Spawn { key, .. } => {
                spawned = Some(key);
                break;
            }
            ReconcileStep::Idle | ReconcileStep::Saturated => break,
            _ => {}
        }
    }
    assert!(
        spawned.is_some(),
        "reconcile must start a parked row: {q:?}"
    );
}
