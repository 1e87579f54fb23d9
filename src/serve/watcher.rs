//! The watcher: settles each retained delivery's permit with its turn's outcome. One tokio task
//! polls the turn records of every retained delivery at a fixed, bounded interval; a delivery past
//! `detach_timeout` has its turn cancelled and ends as timed-out once the turn has really ended
//! (capacity is never given back while the turn still runs).

use super::events::{Event, EventLog};
use crate::gate::Permit;
use crate::home::Home;
use crate::protocol::admission::{watch_turn, Deadline, Outcome, TurnEnd, TurnNow, WatchEffect};
use crate::protocol::slots::TurnKey;
use crate::tasks::{self, DeliveryMeta, TurnOutcome};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::oneshot;

/// How often the watcher reads the retained deliveries' turn records.
pub const WATCH_POLL_MILLIS: u64 = 100;

/// How a delivery ended, for a synchronous request waiting on it.
#[derive(Clone, Debug)]
pub struct Ended {
    pub outcome: Outcome,
    pub exit_code: Option<i32>,
}

pub struct Watched {
    pub permit: Permit,
    pub key: TurnKey,
    pub meta: DeliveryMeta,
    pub route: String,
    /// The detach deadline (from the first admission) and whether the turn was cancelled for it.
    pub deadline: Deadline,
    pub readopted: bool,
    pub reply: Option<oneshot::Sender<Ended>>,
}

impl Watched {
    pub fn event(&self, kind: &'static str, outcome: String) -> Event {
        Event {
            at_millis: tasks::now_millis(),
            kind,
            route: self.route.clone(),
            adapter: self.meta.adapter.clone(),
            tenant: self.meta.tenant.clone(),
            delivery: Some(self.meta.id.clone()),
            identity: self.meta.identity.clone(),
            task: Some(self.key.task.clone()),
            turn: Some(self.key.turn),
            outcome,
            readopted: self.readopted,
            ..Event::default()
        }
    }
}

/// A turn record's outcome in the core's terms (the delivery-outcome rule is the core's).
pub fn turn_end(turn: TurnOutcome) -> TurnEnd {
    match turn {
        TurnOutcome::Completed => TurnEnd::Completed,
        TurnOutcome::Failed => TurnEnd::Failed,
        TurnOutcome::Unstartable => TurnEnd::Unstartable,
        TurnOutcome::Cancelled => TurnEnd::Cancelled,
        TurnOutcome::Dropped => TurnEnd::Dropped,
        TurnOutcome::Superseded => TurnEnd::Superseded,
        // For a delivery, a turn cut off at its timeout failed.
        TurnOutcome::TimedOut => TurnEnd::Failed,
    }
}

pub struct Watcher {
    entries: Mutex<BTreeMap<String, Watched>>,
    home: Home,
    config: crate::config::Config,
    events: Arc<EventLog>,
    /// Held while this process spawns runners, and while it reaps them (so a runner that exits at
    /// once is not reaped before its spawner read its identity).
    spawn_lock: Arc<Mutex<()>>,
}

impl Watcher {
    pub fn new(
        home: Home,
        config: crate::config::Config,
        events: Arc<EventLog>,
        spawn_lock: Arc<Mutex<()>>,
    ) -> Self {
        Watcher {
            entries: Mutex::new(BTreeMap::new()),
            home,
            config,
            events,
            spawn_lock,
        }
    }

    /// Reaps runners this process spawned that have ended (they are detached, but still our
    /// children): a long-lived `serve` must not collect zombies.
    fn reap(&self) {
        use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
        let _spawning = crate::sync::lock(&self.spawn_lock);
        // Bounded: at most this many children per poll.
        for _ in 0..1024 {
            match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) | Err(_) => return,
                Ok(_) => {}
            }
        }
    }

    /// Starts watching an admitted delivery. The map is bounded by the gate: deferred entries by
    /// `max_detached`, synchronous ones by the requests waiting on them.
    pub fn watch(&self, watched: Watched) {
        crate::sync::lock(&self.entries).insert(watched.meta.id.clone(), watched);
    }

    pub fn len(&self) -> usize {
        crate::sync::lock(&self.entries).len()
    }

    /// Polls until `stop` says so.
    pub async fn run(self: Arc<Self>, mut stop: tokio::sync::watch::Receiver<bool>) {
        let mut interval = tokio::time::interval(Duration::from_millis(WATCH_POLL_MILLIS));
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = interval.tick() => {}
                _ = stop.changed() => return,
            }
            let this = Arc::clone(&self);
            if let Err(e) = tokio::task::spawn_blocking(move || this.tick()).await {
                tracing::error!("the serve watcher's poll failed: {e}");
            }
        }
    }

    /// One poll: for every watched delivery, read its turn record and run the core's
    /// `watch_turn` step (under the entries' lock) and perform its effect: settle the permit, or
    /// cancel a turn past its deadline.
    pub fn tick(&self) {
        self.reap();
        let snapshot: Vec<(String, TurnKey)> = crate::sync::lock(&self.entries)
            .iter()
            .map(|(id, w)| (id.clone(), w.key.clone()))
            .collect();
        for (id, key) in snapshot {
            let record = match tasks::load_turn(&self.home, &key) {
                Ok(record) => record,
                Err(e) => {
                    tracing::warn!("{e}");
                    continue;
                }
            };
            let turn = match &record {
                Some(turn) => turn
                    .outcome
                    .map_or(TurnNow::Live, |o| TurnNow::Ended(turn_end(o))),
                None => TurnNow::Missing,
            };
            let now = tasks::now_millis();
            let mut entries = crate::sync::lock(&self.entries);
            let Some(watched) = entries.get_mut(&id) else {
                continue;
            };
            match watch_turn(&mut watched.deadline, turn, now) {
                WatchEffect::Wait => {}
                WatchEffect::Settle { outcome } => {
                    let watched = entries.remove(&id);
                    drop(entries);
                    if let Some(watched) = watched {
                        let exit_code = record.as_ref().and_then(|t| t.exit_code);
                        self.settle(watched, outcome, exit_code);
                    }
                }
                WatchEffect::Cancel => {
                    drop(entries);
                    let rt = super::runtime_for(&self.home, &self.config);
                    if let Err(e) = crate::cancel::cancel_turn(&rt, &key) {
                        tracing::warn!("{key}: past detach_timeout, cannot cancel it: {e}");
                    }
                }
            }
        }
    }

    fn settle(&self, watched: Watched, outcome: Outcome, exit_code: Option<i32>) {
        let event = watched.event("outcome", outcome.to_string());
        let Watched { permit, reply, .. } = watched;
        if permit.settle(outcome) {
            self.events.record(&event);
        }
        if let Some(reply) = reply {
            let _ = reply.send(Ended { outcome, exit_code });
        }
    }

    /// Shutdown: takes every delivery still watched (the caller records them as handed off).
    pub fn take_all(&self) -> Vec<Watched> {
        std::mem::take(&mut *crate::sync::lock(&self.entries))
            .into_values()
            .collect()
    }
}
