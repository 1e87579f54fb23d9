//! The properties the checker holds the model to: the invariants A1-A6 (names match
//! spec/invariants.md, the A table) and the `sometimes` examples that show they are not vacuous,
//! with which examples a configuration can reach.

use super::config::AdmissionConfig;
use super::state::{current_ledger, event, AdmissionState, Answer};
use super::world::{tenant_of, turn_of};
use super::AdmissionModel;
use stateright::Property;
use tollgate_core::admission::{Dispatch, Ledger, Outcome, RejectReason, Strategy, TurnEnd};
use tollgate_core::slots::RowState;

pub mod names {
    pub const A1: &str = "A1 bounded retention";
    pub const A2: &str = "A2 honest rejection";
    pub const A3: &str = "A3 no silent loss";
    pub const A4: &str = "A4 one parked waiter";
    pub const A5: &str = "A5 capacity only at terminal outcome";
    /// The fleet dedupe model's name (`crate::fleet_dedupe`): one invariant, one name.
    pub const A6: &str = "A6 one turn per identity per mark lifetime";

    pub const AT_REST: &str = "at rest after admitting work";
    pub const RETRY_ADMITTED: &str = "a rejected delivery's retry is admitted";
    pub const DUPLICATE_CONVERGES: &str = "a rejected duplicate converges to the duplicate answer";
    pub const TENANT_CEILING: &str = "a delivery is refused at its tenant's ceiling";
    pub const HANDED_OFF: &str = "shutdown hands off retained work";
    pub const SUPERSEDED: &str = "a parked waiter is superseded";
    pub const DROPPED: &str = "drop: an arrival at a busy scope is dropped";
    pub const DEBOUNCE_START: &str = "debounce: a waiter starts after the quiet period";
    pub const LINE_START: &str = "concurrent: the head of the line starts";
    pub const RECOVERED: &str = "a restarted serve recovers a row a dead serve reserved";
    pub const WITHDRAWN_RETRY: &str = "a withdrawn delivery's retry is admitted";
    pub const TIMED_OUT: &str = "a delivery past its deadline ends timed-out";
}

fn a1_bounded_retention(model: &AdmissionModel, st: &AdmissionState) -> bool {
    let Some(ledger) = current_ledger(st) else {
        return true;
    };
    if ledger.retained() > model.cfg.max_detached {
        return false;
    }
    let ceiling = model.cfg.max_detached_per_tenant;
    if ceiling > 0
        && model
            .cfg
            .events
            .iter()
            .any(|e| ledger.retained_by(&tenant_of(e.tenant)) > ceiling)
    {
        return false;
    }
    // Every queue row (what the scopes retain) is a turn held by this serve's ledger.
    st.queue.entries.iter().all(|e| {
        let turn = Some(turn_of(&e.key));
        st.holds
            .iter()
            .any(|h| h.start == st.starts && h.turn == turn && ledger.is_held(h.id))
    })
}

fn a2_honest_rejection(_: &AdmissionModel, st: &AdmissionState) -> bool {
    st.attempts.iter().enumerate().all(|(i, a)| match a.answer {
        Answer::Rejected(_) => {
            !a.acked && !a.marked && a.outcome == Some(Outcome::AdmissionRejected)
        }
        Answer::Withdrawn | Answer::InFlight => !a.acked,
        // Only an identity an admitted, not withdrawn delivery marked answers as a duplicate:
        // a retry is never deduped away by a delivery that was refused or withdrawn.
        Answer::Duplicate => st.attempts[..i]
            .iter()
            .any(|b| b.event == a.event && matches!(b.answer, Answer::Accepted { .. })),
        Answer::Accepted { .. } => true,
    })
}

/// Whether an acknowledged event's work is accounted for: its turn ran and ended, or its
/// strategy ended it without running (dropped, superseded).
fn event_done(st: &AdmissionState, event: u8) -> bool {
    st.turns.iter().any(|t| {
        t.event == event
            && match t.end {
                Some(TurnEnd::Dropped) | Some(TurnEnd::Superseded) => true,
                Some(_) => t.ran,
                None => false,
            }
    })
}

fn a3_no_silent_loss(model: &AdmissionModel, st: &AdmissionState) -> bool {
    if !model.quiescent(st) {
        return true;
    }
    // Every admission of a serve that did not crash has its outcome, and the ledger is empty.
    let settled = st
        .holds
        .iter()
        .all(|h| h.lost_in_crash || h.outcome.is_some())
        && current_ledger(st).is_none_or_empty();
    // Across serve crashes: every acknowledged delivery ran (or its strategy ended it).
    let ran = st
        .attempts
        .iter()
        .filter(|a| a.acked && !matches!(a.answer, Answer::Rejected(_)))
        .all(|a| event_done(st, a.event));
    settled && ran
}

trait LedgerEmpty {
    fn is_none_or_empty(&self) -> bool;
}

impl LedgerEmpty for Option<&Ledger> {
    fn is_none_or_empty(&self) -> bool {
        match self {
            Some(ledger) => ledger.held().is_empty(),
            None => true,
        }
    }
}

fn a4_one_parked_waiter(model: &AdmissionModel, st: &AdmissionState) -> bool {
    model.cfg.scopes.iter().enumerate().all(|(i, strategy)| {
        let task = format!("s{i}");
        let waiting = st
            .queue
            .entries
            .iter()
            .filter(|e| e.key.task == task && matches!(e.state, RowState::Parked))
            .count();
        !matches!(strategy, Strategy::Queue | Strategy::Debounce { .. }) || waiting <= 1
    })
}

fn a5_capacity_at_outcome(_: &AdmissionModel, st: &AdmissionState) -> bool {
    let ledger = current_ledger(st);
    st.holds.iter().all(|h| {
        let settled = h.outcome.is_some();
        let held_now = match ledger {
            Some(ledger) if h.start == st.starts => ledger.is_held(h.id),
            _ => false,
        };
        let live = h.start == st.starts && st.serve.is_some();
        h.refused_settles == 0 && h.releases == u8::from(settled) && (!live || held_now != settled)
    })
}

/// At most one durable turn per event identity within its mark's lifetime (the model's TTL
/// outlives every run: at most one per event), across serve crashes: the mark is durable with
/// its turn, so a restarted serve answers a redelivery of an event whose turn already ended as a
/// duplicate instead of queueing it again.
fn a6_one_turn_per_identity(_: &AdmissionModel, st: &AdmissionState) -> bool {
    st.turns
        .iter()
        .enumerate()
        .all(|(i, t)| st.turns[..i].iter().all(|earlier| earlier.event != t.event))
}

/// For some event: an answer matching `first`, later one matching `second`, later (when given)
/// one matching `third`.
fn event_saw(st: &AdmissionState, steps: &[fn(&Answer) -> bool]) -> bool {
    let events = st
        .attempts
        .iter()
        .map(|a| a.event)
        .max()
        .map_or(0, |m| m + 1);
    (0..events).any(|event| {
        let mut want = steps.iter();
        let mut next = want.next();
        for a in st.attempts.iter().filter(|a| a.event == event) {
            if let Some(step) = next {
                if step(&a.answer) {
                    next = want.next();
                }
            }
        }
        next.is_none()
    })
}

/// A3 is not vacuous: some quiescent state follows admitted work.
fn at_rest(model: &AdmissionModel, st: &AdmissionState) -> bool {
    !st.holds.is_empty() && model.quiescent(st)
}

fn is_rejected(a: &Answer) -> bool {
    matches!(a, Answer::Rejected(_))
}
fn is_accepted(a: &Answer) -> bool {
    matches!(a, Answer::Accepted { .. })
}
fn is_duplicate(a: &Answer) -> bool {
    matches!(a, Answer::Duplicate)
}
fn is_withdrawn(a: &Answer) -> bool {
    matches!(a, Answer::Withdrawn)
}

fn retry_admitted(_: &AdmissionModel, st: &AdmissionState) -> bool {
    event_saw(st, &[is_rejected, is_accepted])
}

fn duplicate_converges(_: &AdmissionModel, st: &AdmissionState) -> bool {
    event_saw(st, &[is_accepted, is_rejected, is_duplicate])
}

fn withdrawn_retry(_: &AdmissionModel, st: &AdmissionState) -> bool {
    event_saw(st, &[is_withdrawn, is_accepted])
}

fn tenant_ceiling(_: &AdmissionModel, st: &AdmissionState) -> bool {
    st.attempts
        .iter()
        .any(|a| a.answer == Answer::Rejected(RejectReason::TenantAtCapacity))
}

fn outcome_seen(st: &AdmissionState, outcome: Outcome) -> bool {
    st.holds.iter().any(|h| h.outcome == Some(outcome))
}

fn handed_off(_: &AdmissionModel, st: &AdmissionState) -> bool {
    outcome_seen(st, Outcome::HandedOffAtShutdown)
}

fn superseded(_: &AdmissionModel, st: &AdmissionState) -> bool {
    outcome_seen(st, Outcome::Superseded)
}

fn dropped(_: &AdmissionModel, st: &AdmissionState) -> bool {
    outcome_seen(st, Outcome::Dropped)
}

fn timed_out(_: &AdmissionModel, st: &AdmissionState) -> bool {
    outcome_seen(st, Outcome::TimedOut)
}

fn debounce_start(_: &AdmissionModel, st: &AdmissionState) -> bool {
    st.events & event::DEBOUNCE_START != 0
}

fn line_start(_: &AdmissionModel, st: &AdmissionState) -> bool {
    st.events & event::LINE_START != 0
}

fn recovered(_: &AdmissionModel, st: &AdmissionState) -> bool {
    st.events & event::RECOVERED != 0
}

type Properties = Vec<Property<AdmissionModel>>;

/// The `A` invariants always; the `sometimes` examples that this configuration can reach (a
/// strategy's distinctive outcome only where a scope has that strategy). The order is the
/// checker's report order.
pub(super) fn of(model: &AdmissionModel) -> Properties {
    let mut props = vec![
        Property::always(names::A1, a1_bounded_retention),
        Property::always(names::A2, a2_honest_rejection),
        Property::always(names::A3, a3_no_silent_loss),
        Property::always(names::A4, a4_one_parked_waiter),
        Property::always(names::A5, a5_capacity_at_outcome),
        Property::always(names::A6, a6_one_turn_per_identity),
        Property::sometimes(names::AT_REST, at_rest),
    ];
    fault_examples(&model.cfg, &mut props);
    strategy_examples(&model.cfg, &mut props);
    props
}

/// The examples of the gate and the environment: a cap that bites, a tenant ceiling, shutdown,
/// a restart, a failing submit, a timeout (each only where the configuration allows it).
fn fault_examples(cfg: &AdmissionConfig, props: &mut Properties) {
    let cap_bites = cfg.events.len() > cfg.max_detached || cfg.max_detached_per_tenant > 0;
    if cap_bites {
        props.push(Property::sometimes(names::RETRY_ADMITTED, retry_admitted));
    }
    if cap_bites && cfg.events.iter().any(|e| e.deliveries >= 3) {
        props.push(Property::sometimes(
            names::DUPLICATE_CONVERGES,
            duplicate_converges,
        ));
    }
    if cfg.max_detached_per_tenant > 0 {
        props.push(Property::sometimes(names::TENANT_CEILING, tenant_ceiling));
    }
    if cfg.shutdown {
        props.push(Property::sometimes(names::HANDED_OFF, handed_off));
    }
    // Debounce never starts a turn on arrival (its waker does), so only another strategy
    // leaves a row reserved by serve.
    if cfg.restarts > 0 && cfg.has_strategy(|s| !matches!(s, Strategy::Debounce { .. })) {
        props.push(Property::sometimes(names::RECOVERED, recovered));
    }
    if cfg.submit_failures && cfg.events.iter().any(|e| e.deliveries >= 2) {
        props.push(Property::sometimes(names::WITHDRAWN_RETRY, withdrawn_retry));
    }
    if cfg.timeouts {
        props.push(Property::sometimes(names::TIMED_OUT, timed_out));
    }
}

/// The examples of the strategies: each strategy's distinctive outcome, where a scope has it
/// and the configuration is large enough to show it.
fn strategy_examples(cfg: &AdmissionConfig, props: &mut Properties) {
    // Debounce supersedes a parked waiter with two retained; queue parks only behind running
    // work, so it needs three (or an uncapped sync delivery).
    let queue_supersedes =
        cfg.max_detached >= 3 || cfg.events.iter().any(|e| e.dispatch == Dispatch::Sync);
    if cfg.has_strategy(|s| matches!(s, Strategy::Debounce { .. }))
        || (queue_supersedes && cfg.has_strategy(|s| matches!(s, Strategy::Queue)))
    {
        props.push(Property::sometimes(names::SUPERSEDED, superseded));
    }
    if cfg.has_strategy(|s| matches!(s, Strategy::Drop)) {
        props.push(Property::sometimes(names::DROPPED, dropped));
    }
    if cfg.has_strategy(|s| matches!(s, Strategy::Debounce { .. })) {
        props.push(Property::sometimes(names::DEBOUNCE_START, debounce_start));
    }
    // A line needs two retained deliveries in one scope.
    if cfg.max_detached >= 2 && cfg.has_strategy(|s| matches!(s, Strategy::Concurrent { .. })) {
        props.push(Property::sometimes(names::LINE_START, line_start));
    }
}
