//! A detached runner's sections (spec/slots.md, "Take-over", "Finish"; spec/fleet.md): its
//! take-over records the turn as started only when asked to, renews its lease on a fleet and is
//! refused without one, gives its lease back when another live process holds the row; its finish
//! records the outcome on its own part of the queue, settles every `--after-success` dependent
//! in one read round, and releases its lease.

mod common;

use common::{argv, fleet, id, lease, start, submit, submit_to, Home, World};
use tollgate_core::fleet::{FleetError, FleetIdentity, HostId, LeaseTable, LeaseTiming};
use tollgate_core::records::{TurnOutcome, TurnRecord};
use tollgate_core::section::{Undecided, MAX_READ_ROUNDS};
use tollgate_core::slots::sections::{
    FinishSection, Placement, PublishFirst, Submitted, TakeOverSection,
};
use tollgate_core::slots::steps::{finish_reads, Reads, TakeOverEffect};
use tollgate_core::slots::{AfterRule, Dependency, ProcessIdentity, TurnKey};
use tollgate_core::turns::NewTurn;

const NOW_DB: u64 = 50_000;

fn here() -> FleetIdentity {
    FleetIdentity {
        host: HostId::new("here").expect("a host"),
        process: id(100),
    }
}

fn ended(home: &Home, key: &TurnKey, outcome: TurnOutcome, exit_code: i32) -> TurnRecord {
    let mut turn = home.turn(key).clone();
    turn.ended_at_millis = Some(3_000);
    turn.exit_code = Some(exit_code);
    turn.outcome = Some(outcome);
    turn
}

fn finish_of<'a>(key: &'a TurnKey, result: &'a TurnRecord) -> FinishSection<'a> {
    FinishSection {
        key,
        me: id(100),
        result: Some(result),
        fresh_token: common::token(77),
        now_millis: 3_000,
        cap: 1,
    }
}

fn take_over_of(
    submitted: &Submitted,
    me: ProcessIdentity,
    record_started: bool,
) -> TakeOverSection<'_> {
    let Placement::Spawn(handoff) = &submitted.placement else {
        panic!("not a spawn: {submitted:?}");
    };
    TakeOverSection {
        key: &submitted.key,
        token: handoff.token(),
        me,
        cgroup: None,
        record_started,
        now_millis: 2_000,
    }
}

#[test]
fn a_take_over_records_the_start_only_when_asked_to() {
    for record_started in [true, false] {
        let mut home = Home::default();
        let mut world = World::default();
        world.live.insert(id(100));
        let submitted = submit(&mut home, &world, "a", None, 1, 1_000).effect;
        let ran = home.run(
            &take_over_of(&submitted, id(100), record_started),
            &world,
            None,
        );
        assert!(
            matches!(ran.effect.0, TakeOverEffect::Run { .. }),
            "{:?}",
            ran.effect
        );
        let turn = home.turn(&submitted.key);
        if record_started {
            assert_eq!(turn.started_at_millis, Some(2_000));
            assert_eq!(turn.runner, Some(id(100)));
        } else {
            assert_eq!(turn.started_at_millis, None);
            assert_eq!(turn.runner, None);
            assert!(ran.writes.turns.is_empty(), "{:?}", ran.writes);
        }
        assert_eq!(ran.effect.1, *turn, "the runner runs the record as written");
    }
}

#[test]
fn on_a_fleet_the_take_over_renews_the_lease_its_handoff_took() {
    let view = fleet("here", LeaseTable::default(), NOW_DB);
    let mut home = Home::default();
    let mut world = World::default();
    let submitted = submit(&mut home, &world, "a", None, 1, 1_000).effect;
    // The first publish leases the child at NOW_DB; the take-over renews it later.
    let later = fleet("here", LeaseTable::default(), NOW_DB + 1_000);
    let Placement::Spawn(handoff) = &submitted.placement else {
        panic!("{submitted:?}");
    };
    world.live.insert(id(100));
    let first = PublishFirst {
        handoff: handoff.clone(),
        child: id(100),
    };
    home.run(&first, &world, Some(&view))
        .effect
        .expect("published");
    let leased = home
        .leases
        .lease_of(&here())
        .expect("the child's lease")
        .clone();
    assert_eq!(
        leased.expires_at_db_millis,
        NOW_DB + LeaseTiming::DEFAULT.lease_duration_millis
    );
    home.run(
        &take_over_of(&submitted, id(100), true),
        &world,
        Some(&later),
    );
    let renewed = home.leases.lease_of(&here()).expect("the lease stays");
    assert_eq!(
        renewed.expires_at_db_millis,
        NOW_DB + 1_000 + LeaseTiming::DEFAULT.lease_duration_millis
    );
    assert_eq!(
        home.turn(&submitted.key).host,
        Some(HostId::new("here").expect("a host"))
    );
}

#[test]
fn on_a_fleet_a_runner_whose_lease_expired_is_refused_and_runs_nothing() {
    let mut home = Home::default();
    let mut world = World::default();
    world.live.insert(id(100));
    let submitted = submit(&mut home, &world, "a", None, 1, 1_000).effect;
    home.leases.leases.push(lease("here", id(100), NOW_DB - 1));
    let view = fleet("here", LeaseTable::default(), NOW_DB);
    let before = home.clone();
    let Err((undecided, _)) = home.decide(
        &take_over_of(&submitted, id(100), true),
        &world,
        Some(&view),
    ) else {
        panic!("a runner without a live lease took over");
    };
    assert_eq!(
        undecided,
        Undecided::Fleet(FleetError::Unknown { holder: here() })
    );
    assert_eq!(home.queue, before.queue);
}

#[test]
fn on_a_fleet_a_take_over_refused_for_another_live_holder_gives_its_lease_back() {
    let view = fleet("here", LeaseTable::default(), NOW_DB);
    let mut home = Home::default();
    let mut world = World::default();
    let submitted = submit(&mut home, &world, "a", None, 1, 1_000).effect;
    let Placement::Spawn(handoff) = &submitted.placement else {
        panic!("{submitted:?}");
    };
    // The handoff bound runner 100 (alive, leased); a second process with the same token and
    // a lease of its own tries to take the row over.
    world.live.insert(id(100));
    let first = PublishFirst {
        handoff: handoff.clone(),
        child: id(100),
    };
    home.run(&first, &world, Some(&view))
        .effect
        .expect("published");
    home.leases
        .leases
        .push(lease("here", id(101), NOW_DB + 10_000));
    let ran = home.run(
        &take_over_of(&submitted, id(101), true),
        &world,
        Some(&view),
    );
    assert_eq!(ran.effect.0, TakeOverEffect::Refused { holder: id(100) });
    let second = FleetIdentity {
        process: id(101),
        ..here()
    };
    assert_eq!(
        home.leases.lease_of(&second),
        None,
        "the refused runner's lease is gone"
    );
    assert!(
        home.leases.lease_of(&here()).is_some(),
        "the holder keeps its lease"
    );
    assert_eq!(home.turn(&submitted.key).started_at_millis, None);
}

#[test]
fn a_finish_records_the_outcome_on_its_own_part_and_its_row_leaves() {
    let mut home = Home::default();
    let mut world = World::default();
    let submitted = submit(&mut home, &world, "a", None, 1, 1_000).effect;
    start(&mut home, &mut world, &submitted, id(100), None);
    let key = submitted.key.clone();
    let result = ended(&home, &key, TurnOutcome::Completed, 0);
    let ran = home.run(&finish_of(&key, &result), &world, None);
    assert_eq!(ran.loads, [Reads::Part(finish_reads(&key))]);
    assert!(ran.writes.records_an_outcome(), "{:?}", ran.writes);
    assert!(!ran.writes.is_empty());
    assert_eq!(home.turn(&key).outcome, Some(TurnOutcome::Completed));
    assert!(home.queue.row(&key).is_none());
    assert!(home.queue.runner(&key).is_none());
}

#[test]
fn a_failed_turn_settles_every_after_success_dependent_in_one_read_round() {
    let mut home = Home::default();
    let mut world = World::default();
    let submitted = submit(&mut home, &world, "a", None, 1, 1_000).effect;
    let key = submitted.key.clone();
    let new = NewTurn {
        argv: argv(&["true"]),
        after: vec![Dependency {
            key: key.clone(),
            rule: AfterRule::Succeeded,
        }],
        ..NewTurn::default()
    };
    let dependents: Vec<TurnKey> = (1..=MAX_READ_ROUNDS as u128 + 4)
        .map(|n| {
            let task = format!("dep{n}");
            let section = submit_to(Some(&task), &new, id(1), n + 1, 1_000);
            home.run(&section, &world, None).effect.key
        })
        .collect();
    start(&mut home, &mut world, &submitted, id(100), None);
    let result = ended(&home, &key, TurnOutcome::Failed, 1);
    let ran = home.run(&finish_of(&key, &result), &world, None);
    let with_dependents = ran
        .rounds
        .iter()
        .filter(|r| r.turns.iter().any(|k| dependents.contains(k)))
        .count();
    assert_eq!(with_dependents, 1, "{:?}", ran.rounds);
    for dependent in &dependents {
        assert_eq!(
            home.turn(dependent).outcome,
            Some(TurnOutcome::DependencyFailed)
        );
        assert_eq!(home.turn(dependent).failed_dependency, Some(key.clone()));
        assert!(home.queue.row(dependent).is_none());
    }
}

#[test]
fn on_a_fleet_a_finish_releases_the_runners_lease_and_keeps_the_others() {
    let other = lease("there", id(500), NOW_DB + 60_000);
    let view = fleet("here", LeaseTable::default(), NOW_DB);
    let mut home = Home::default();
    home.leases.leases.push(other.clone());
    let mut world = World::default();
    let submitted = submit(&mut home, &world, "a", None, 1, 1_000).effect;
    start(&mut home, &mut world, &submitted, id(100), Some(&view));
    assert!(home.leases.lease_of(&here()).is_some());
    let key = submitted.key.clone();
    let result = ended(&home, &key, TurnOutcome::Completed, 0);
    home.run(&finish_of(&key, &result), &world, Some(&view));
    assert_eq!(home.leases.leases, [other]);
}
