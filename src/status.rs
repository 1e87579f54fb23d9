//! The view behind `tollgate status`: cap, occupancy, rows, runners and turns with their outcome.

use crate::dispatch::DispatchError;
use crate::protocol::slots::{
    held_back, occupied_runner_slots, HeldBack, Liveness, Observation, PauseSet, ProcessIdentity,
    QueueState, RowState, RunnerSlotReservation, TurnKey,
};
use crate::runtime::Runtime;
use crate::tasks::{self, TurnRecord};
use crate::turn_state::TurnState;
use serde::Serialize;

#[derive(Debug, Serialize)]
pub struct StatusView {
    pub home: String,
    pub workers: usize,
    pub occupied: usize,
    pub parked: usize,
    pub rows: Vec<RowView>,
    pub runners: Vec<RunnerView>,
    /// The recorded works (a turn's process tree), with whether any process of each is alive.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub works: Vec<WorkView>,
    pub tasks: Vec<TaskView>,
    /// Ended turns left out of the tasks' `turns` (the home's view shows every turn that has not
    /// ended and only the newest `ended_turns_shown` ended ones); 0 with a task, `--all` or
    /// `--label`.
    pub hidden_turns: usize,
    /// The home's limit on ended turns shown (`status_ended_turns` in tollgate.toml); absent when
    /// every turn is shown.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ended_turns_shown: Option<usize>,
    /// What `tollgate pause` holds: `{"home": true}` and/or `{"tasks": [...]}`; absent when
    /// nothing is paused.
    #[serde(skip_serializing_if = "PauseSet::is_empty")]
    pub paused: PauseSet,
    /// On a PostgreSQL home (a fleet): this command's host; absent on a SQLite home.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub this_host: Option<String>,
    /// On a fleet: whether this host is drained (`tollgate drain`); absent when not.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub this_host_drained: bool,
}

#[derive(Debug, Serialize)]
pub struct WorkView {
    pub task: String,
    pub turn: u32,
    pub id: String,
    pub runner: ProcessIdentity,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub leader: Option<ProcessIdentity>,
    pub observed: &'static str,
}

#[derive(Debug, Serialize)]
pub struct RowView {
    pub queue_id: u64,
    pub task: String,
    pub turn: u32,
    pub state: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owner: Option<ProcessIdentity>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slot_reservation: Option<RunnerSlotReservation>,
    pub enqueued_at_millis: u64,
    /// `submit --priority` (absent: 0).
    #[serde(skip_serializing_if = "is_zero_i32")]
    pub priority: i32,
    /// Earliest start (`--delay`/`--at`, a debounce deadline); absent: at once.
    #[serde(skip_serializing_if = "is_zero")]
    pub ready_at_millis: u64,
}

fn is_zero(value: &u64) -> bool {
    *value == 0
}

fn is_zero_i32(value: &i32) -> bool {
    *value == 0
}

#[derive(Debug, Serialize)]
pub struct RunnerView {
    pub task: String,
    pub turn: u32,
    pub identity: ProcessIdentity,
    pub observed: &'static str,
    pub attached: bool,
    /// On a fleet (a PostgreSQL home): the host whose lease names this executor (absent on one
    /// host, or when no lease names it: it is about to leave, or its lease was swept).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct TaskView {
    pub name: String,
    pub strategy: String,
    pub turns: Vec<TurnView>,
    /// The task is paused (`tollgate pause TASK`; the home's pause is [`StatusView::paused`]).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub paused: bool,
    /// Ended turns of this task left out of `turns` (see [`StatusView::hidden_turns`]).
    pub hidden_turns: usize,
}

#[derive(Debug, Serialize)]
pub struct TurnView {
    pub turn: u32,
    /// The turn's short id (see [`TurnRecord::id`]); absent for a turn that has none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<u64>,
    /// Labels given at submit (`--label`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub labels: Vec<String>,
    /// Where the turn stands, one word of [`TurnState`] (the table's word too).
    pub state: TurnState,
    /// The word earlier versions gave [`TurnView::state`] ([`TurnState::legacy_word`]: `parked`
    /// for a queued, paused or delayed turn), kept for one version for scripts that read it.
    pub legacy_state: &'static str,
    /// The command, as its record writes it (UTF-8 words as strings, others as `{"hex"}`).
    #[serde(with = "crate::argv::words")]
    pub argv: crate::argv::Argv,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    pub submitted_at_millis: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub started_at_millis: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ended_at_millis: Option<u64>,
    /// Why a queued turn does not start although a slot may be free: `paused` (the home or its
    /// task is paused) or `delayed` (until `not_before_millis`); the same as its state says.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_before_millis: Option<u64>,
    /// `submit --priority` of a queued turn (absent: 0).
    #[serde(skip_serializing_if = "is_zero_i32")]
    pub priority: i32,
    /// `submit --retry`: which attempt this turn is, of how many.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry: Option<crate::protocol::slots::RetryPlan>,
    /// The turns it waits (or waited) for (`submit --after`/`--after-success`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<crate::protocol::slots::Dependency>,
    /// For a `dependency_failed` turn: the dependency whose end settled it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed_dependency: Option<TurnKey>,
    /// On a PostgreSQL home: the host whose runner (or attached submitter) took the turn over
    /// ([`TurnRecord::host`]); absent before it started and on a SQLite home.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
}

/// What holds a parked row back now, as [`TurnView::held`] says it, and its not-before time.
fn held_of(
    queue: &QueueState,
    key: &TurnKey,
    now_millis: u64,
) -> (Option<&'static str>, Option<u64>) {
    let Some(row) = queue
        .row(key)
        .filter(|r| matches!(r.state, RowState::Parked))
    else {
        return (None, None);
    };
    match held_back(queue, &key.task, row.ready_at_millis, now_millis) {
        Some(HeldBack::Paused) => (
            Some("paused"),
            (row.ready_at_millis > now_millis).then_some(row.ready_at_millis),
        ),
        Some(HeldBack::NotBefore { ready_at_millis }) => (Some("delayed"), Some(ready_at_millis)),
        None => (None, None),
    }
}

fn observed(o: Observation) -> &'static str {
    match o {
        Observation::Matching => "live",
        Observation::Ambiguous => "ambiguous",
        Observation::Gone => "gone",
    }
}

/// Where a turn stands (as in [`TurnView::state`]), from its record and the queue at
/// `now_millis`. A turn whose result waits for disk space is `running` here; [`state_of`] tells
/// it apart.
pub fn turn_state(
    queue: &QueueState,
    turn: &TurnRecord,
    liveness: &impl Liveness,
    now_millis: u64,
) -> TurnState {
    if let Some(outcome) = turn.outcome {
        return TurnState::of_outcome(outcome);
    }
    let Some(row) = queue.row(&turn.key) else {
        // A record without an outcome and without a row: its submitter died before queueing it.
        return TurnState::Orphaned;
    };
    match &row.state {
        // Parked until the turns it waits for (`--after`) have left the queue.
        RowState::Parked if !crate::protocol::slots::dependencies_met(queue, row) => {
            TurnState::Held
        }
        RowState::Parked => match held_of(queue, &turn.key, now_millis).0 {
            Some("paused") => TurnState::Paused,
            Some(_) => TurnState::Delayed,
            None => TurnState::Queued,
        },
        RowState::Waiting { .. } => TurnState::Waiting,
        RowState::Dispatching { dispatch_owner } => {
            match queue.runner(&turn.key) {
                Some(r) if liveness.is_live(&r.identity) => TurnState::Running,
                // Its runner died: nobody will record its end until reconcile repairs it.
                Some(_) => TurnState::Orphaned,
                None => {
                    // Not taken over yet: starting while whoever dispatches it is alive.
                    let reservation = row.slot_reservation.as_ref();
                    let holders = [
                        Some(*dispatch_owner),
                        reservation.map(|r| r.reserver),
                        reservation.and_then(|r| r.child),
                    ];
                    // A reserver gone before its first publish may have spawned the child that
                    // adopts the slot: unrecorded, only its command line names the token.
                    let unrecorded_child = || {
                        reservation.is_some_and(|r| {
                            r.child.is_none() && crate::process::runner_for_token_alive(r.token)
                        })
                    };
                    if holders.iter().flatten().any(|h| liveness.is_live(h)) || unrecorded_child() {
                        TurnState::Starting
                    } else {
                        TurnState::Orphaned
                    }
                }
            }
        }
    }
}

/// [`turn_state`], with a running turn whose result waits for disk space (`result.pending` in
/// its folder) told apart as `recording`.
pub fn state_of(
    home: &crate::home::Home,
    queue: &QueueState,
    turn: &TurnRecord,
    liveness: &impl Liveness,
    now_millis: u64,
) -> TurnState {
    match turn_state(queue, turn, liveness, now_millis) {
        TurnState::Running if tasks::result_pending(home, &turn.key) => TurnState::Recording,
        state => state,
    }
}

/// Builds the status of the whole home, or of one task (all its turns). An unknown task is an
/// error; the caller names it.
pub fn status<L: Liveness>(
    rt: &Runtime<L>,
    only: Option<&str>,
) -> Result<StatusView, DispatchError> {
    status_with(rt, only, false)
}

/// Orders names as people count: `job2` before `job10` (runs of digits compare as numbers).
pub fn natural_cmp(a: &str, b: &str) -> std::cmp::Ordering {
    fn chunks(s: &str) -> Vec<(bool, &str)> {
        let mut out = Vec::new();
        let mut start = 0;
        let bytes = s.as_bytes();
        for i in 1..=bytes.len() {
            let boundary =
                i == bytes.len() || bytes[i].is_ascii_digit() != bytes[start].is_ascii_digit();
            if boundary {
                out.push((bytes[start].is_ascii_digit(), &s[start..i]));
                start = i;
            }
        }
        out
    }
    let (ca, cb) = (chunks(a), chunks(b));
    for ((da, xa), (db, xb)) in ca.iter().zip(cb.iter()) {
        let order = if *da && *db {
            let (ta, tb) = (xa.trim_start_matches('0'), xb.trim_start_matches('0'));
            ta.len().cmp(&tb.len()).then_with(|| ta.cmp(tb))
        } else {
            xa.cmp(xb)
        };
        if order != std::cmp::Ordering::Equal {
            return order;
        }
    }
    ca.len().cmp(&cb.len()).then_with(|| a.cmp(b))
}

/// [`status`], with `all` showing every turn of every task instead of the most recent ones.
pub fn status_with<L: Liveness>(
    rt: &Runtime<L>,
    only: Option<&str>,
    all: bool,
) -> Result<StatusView, DispatchError> {
    let queue = rt.store.load()?;
    // Another host's runners by their leases, read after the queue (spec/fleet.md, "Operations").
    crate::fleet::observing(&rt.store, &rt.liveness, |live| {
        status_of(rt, live, queue, only, all)
    })?
}

fn status_of<L: Liveness>(
    rt: &Runtime<L>,
    live: &impl Liveness,
    queue: crate::protocol::slots::QueueState,
    only: Option<&str>,
    all: bool,
) -> Result<StatusView, DispatchError> {
    let now_millis = crate::clock::now_millis();
    let names = match only {
        Some(task) => {
            if tasks::load_task(&rt.home, task)?.is_none() {
                return Err(DispatchError::UnknownTask {
                    task: task.to_string(),
                    home: rt.home.root().display().to_string(),
                });
            }
            vec![task.to_string()]
        }
        None => {
            let mut names = tasks::list_tasks(&rt.home)?;
            names.sort_by(|a, b| natural_cmp(a, b));
            names
        }
    };
    // The home's view (no task named, not `--all`) shows every turn that has not ended and the
    // newest `status_ended_turns` ended ones of the whole home; the rest is counted as hidden.
    let ended_limit = (only.is_none() && !all).then_some(rt.config.status_ended_turns);
    let mut task_views = Vec::with_capacity(names.len());
    // (id order, task index, turn) of every ended turn loaded, to keep the newest of the home.
    let mut ended: Vec<((u64, u64), usize, u32)> = Vec::new();
    for name in names {
        let numbers = tasks::list_turns(&rt.home, &name)?;
        let count = numbers.len();
        let mut turns = Vec::new();
        let mut ended_here = 0;
        // Newest first: a task can add at most `ended_limit` turns to the home's newest ended
        // ones, so older turns are read only when they have a queue row (not ended).
        for n in numbers.into_iter().rev() {
            let key = TurnKey::new(name.clone(), n);
            let past_limit = ended_limit.is_some_and(|limit| ended_here >= limit);
            if past_limit && queue.row(&key).is_none() {
                continue;
            }
            let Some(turn) = tasks::load_turn(&rt.home, &key)? else {
                continue;
            };
            let view = turn_view(rt, live, &queue, &turn, now_millis);
            if view.state.ended() {
                if past_limit {
                    continue;
                }
                ended_here += 1;
                ended.push((
                    (turn.id.unwrap_or(0), turn.submitted_at_millis),
                    task_views.len(),
                    n,
                ));
            }
            turns.push(view);
        }
        turns.reverse();
        let strategy = tasks::load_task(&rt.home, &name)?
            .map(|t| t.strategy)
            .unwrap_or_default()
            .to_string();
        task_views.push(TaskView {
            paused: queue.paused.tasks.contains(&name),
            name,
            strategy,
            hidden_turns: count,
            turns,
        });
    }
    if let Some(limit) = ended_limit {
        // The newest ended turns of the home stay; older ones are dropped from their task.
        ended.sort_by(|a, b| b.cmp(a));
        for &(_, task, turn) in ended.iter().skip(limit) {
            task_views[task]
                .turns
                .retain(|t| t.turn != turn || !t.state.ended());
        }
    }
    let mut hidden_turns = 0;
    for task in &mut task_views {
        task.hidden_turns = task.hidden_turns.saturating_sub(task.turns.len());
        hidden_turns += task.hidden_turns;
    }
    let rows = queue
        .entries
        .iter()
        .filter(|e| only.is_none_or(|t| e.key.task == t))
        .map(|e| {
            let (state, owner) = match e.state {
                RowState::Waiting { owner, .. } => ("waiting", Some(owner)),
                RowState::Dispatching { dispatch_owner } => ("dispatching", Some(dispatch_owner)),
                RowState::Parked => ("parked", None),
            };
            RowView {
                queue_id: e.queue_id,
                task: e.key.task.clone(),
                turn: e.key.turn,
                state,
                owner,
                slot_reservation: e.slot_reservation.clone(),
                enqueued_at_millis: e.enqueued_at_millis,
                priority: e.priority,
                ready_at_millis: e.ready_at_millis,
            }
        })
        .collect();
    let leases = crate::fleet::leases_for_report(&rt.store);
    let (this_host, this_host_drained) = this_host_report(&rt.store);
    let runners = queue
        .runners
        .iter()
        .map(|r| RunnerView {
            host: crate::fleet::host_of(leases.as_ref(), &r.identity),
            task: r.key.task.clone(),
            turn: r.key.turn,
            identity: r.identity,
            observed: observed(live.observe(&r.identity)),
            attached: r.attached,
        })
        .collect();
    let works = queue
        .works
        .iter()
        .filter(|w| only.is_none_or(|t| w.key.task == t))
        .map(|w| WorkView {
            task: w.key.task.clone(),
            turn: w.key.turn,
            id: w.id.to_string(),
            runner: w.runner,
            leader: w.leader,
            observed: observed(live.observe_work(w)),
        })
        .collect();
    Ok(StatusView {
        home: rt.home.root().display().to_string(),
        workers: rt.cap(),
        occupied: occupied_runner_slots(&queue, live, None, None),
        parked: queue
            .entries
            .iter()
            .filter(|e| matches!(e.state, RowState::Parked))
            .count(),
        rows,
        runners,
        works,
        tasks: task_views,
        hidden_turns,
        ended_turns_shown: ended_limit,
        paused: queue.paused.clone(),
        this_host,
        this_host_drained,
    })
}

/// One turn as `status` shows it.
fn turn_view<L: Liveness>(
    rt: &Runtime<L>,
    live: &impl Liveness,
    queue: &QueueState,
    turn: &TurnRecord,
    now_millis: u64,
) -> TurnView {
    let (held, not_before_millis) = held_of(queue, &turn.key, now_millis);
    let state = state_of(&rt.home, queue, turn, live, now_millis);
    TurnView {
        held,
        not_before_millis,
        priority: queue.row(&turn.key).map_or(0, |r| r.priority),
        turn: turn.key.turn,
        id: turn.id,
        labels: turn.labels.clone(),
        state,
        legacy_state: state.legacy_word(),
        argv: turn.argv.clone(),
        exit_code: turn.exit_code,
        signal: turn.signal,
        submitted_at_millis: turn.submitted_at_millis,
        started_at_millis: turn.started_at_millis,
        ended_at_millis: turn.ended_at_millis,
        retry: turn.retry,
        after: turn.after.clone(),
        failed_dependency: turn.failed_dependency.clone(),
        host: turn.host.as_ref().map(ToString::to_string),
    }
}

/// On a fleet: this host's name and whether it is drained (its own read, beside the queue's
/// snapshot; a failed read is logged and reported as not drained). `(None, false)` on one host.
pub fn this_host_report<S: crate::queue::Store>(store: &S) -> (Option<String>, bool) {
    let Some(fleet) = store.lease_renewer() else {
        return (None, false);
    };
    let Some(host) = fleet.fleet().map(|f| f.host.to_string()) else {
        return (None, false);
    };
    let drained = match fleet.drained_hosts() {
        Ok(hosts) => hosts.iter().any(|d| d.host == host),
        Err(e) => {
            tracing::warn!("cannot read the drained hosts: {e}");
            false
        }
    };
    (Some(host), drained)
}
