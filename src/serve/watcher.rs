//! The watcher: settles each retained delivery's permit with its turn's outcome. One tokio task
//! sleeps on one inotify instance watching the retained turns' folders and re-reads only the
//! records whose folder changed (a record is published by rename: `IN_MOVED_TO`). Beyond
//! [`MAX_WATCHES`] folders, or when inotify is refused, the records are read on the fallback tick
//! ([`crate::watch::FALLBACK_POLL_MILLIS`]), which also looks at every watched turn so a missed
//! event only costs latency (in a database home by one read of the unfinished turns' keys, the
//! records of the turns not among them read one by one). A delivery past `detach_timeout` has its turn cancelled (the task wakes at
//! the nearest deadline) and ends as timed-out once the turn has really ended (capacity is never
//! given back while the turn still runs).
//!
//! A queued turn has no folder until its runner makes it (spec/turns.md, "The turn folder"): its
//! delivery waits on the nearest existing ancestor (one watch shared by every delivery under it,
//! [`crate::watch::ancestor_mask`]) and is moved to its own folder's watch, and read again, when
//! the entry on its way is made.

use super::events::{Event, EventLog};
use crate::gate::Permit;
use crate::home::Home;
use crate::protocol::admission::{watch_turn, Deadline, Outcome, TurnNow, WatchEffect};
use crate::protocol::slots::TurnKey;
use crate::sync::{Arc, Mutex};
use crate::tasks::{self, DeliveryMeta};
use nix::sys::inotify::{AddWatchFlags, Inotify, WatchDescriptor};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::time::Duration;
use tokio::io::unix::AsyncFd;
use tokio::sync::{oneshot, Notify};

/// The drain's poll period (shutdown waits for the watched deliveries to settle).
pub const WATCH_POLL_MILLIS: u64 = 100;

/// Bound on the turn folders watched by inotify; deliveries beyond it are read on the fallback
/// tick only (the default `max_user_watches` is 8192 per user, shared with other programs).
pub const MAX_WATCHES: usize = 4096;

/// Which turn folders the inotify instance watches, both ways, with how many deliveries use each.
#[derive(Default)]
struct WatchBook {
    by_key: HashMap<TurnKey, (WatchDescriptor, usize)>,
    by_wd: HashMap<WatchDescriptor, TurnKey>,
    /// Turns whose folder is not made yet, with the watch of their nearest existing ancestor
    /// and how many deliveries use them.
    waiting: HashMap<TurnKey, (WatchDescriptor, usize)>,
    /// The ancestors watched for them: the path and the turns waiting under it.
    ancestors: HashMap<WatchDescriptor, (PathBuf, BTreeSet<TurnKey>)>,
}

impl WatchBook {
    fn watched(&self) -> usize {
        self.by_key.len() + self.waiting.len()
    }

    /// Drops `key` from its ancestor's turns; the ancestor's watch once nobody waits under it.
    fn leave_ancestor(&mut self, inotify: &Inotify, key: &TurnKey) -> Option<usize> {
        let (wd, users) = self.waiting.remove(key)?;
        if let Some((_, keys)) = self.ancestors.get_mut(&wd) {
            keys.remove(key);
            if keys.is_empty() {
                self.ancestors.remove(&wd);
                let _ = inotify.rm_watch(wd);
            }
        }
        Some(users)
    }
}

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

pub struct Watcher {
    entries: Mutex<BTreeMap<String, Watched>>,
    home: Home,
    config: crate::config::Config,
    events: Arc<EventLog>,
    /// Held while this process spawns runners, and while it reaps them (so a runner that exits at
    /// once is not reaped before its spawner read its identity).
    spawn_lock: Arc<Mutex<()>>,
    /// The turn folders' watches (`None`: inotify refused, everything on the fallback tick).
    inotify: Option<Inotify>,
    book: Mutex<WatchBook>,
    /// Deliveries to re-read at the next wake (new ones, and those whose folder changed).
    dirty: Mutex<BTreeSet<String>>,
    wake: Notify,
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
            inotify: crate::watch::inotify_instance(),
            book: Mutex::new(WatchBook::default()),
            dirty: Mutex::new(BTreeSet::new()),
            wake: Notify::new(),
        }
    }

    /// Watches `key`'s folder (shared by deliveries of the same turn), unless over the bound.
    fn add_watch(&self, key: &TurnKey) {
        let Some(inotify) = &self.inotify else {
            return;
        };
        let mut book = crate::sync::lock(&self.book);
        if let Some((_, users)) = book.by_key.get_mut(key) {
            *users += 1;
            return;
        }
        if let Some((_, users)) = book.waiting.get_mut(key) {
            *users += 1;
            return;
        }
        if book.watched() >= MAX_WATCHES {
            return;
        }
        self.watch_folder(inotify, &mut book, key, 1);
    }

    /// Watches `key`'s folder for `users` deliveries, or, while it is not made, its nearest
    /// existing ancestor. Returns true when the folder itself is watched.
    fn watch_folder(
        &self,
        inotify: &Inotify,
        book: &mut WatchBook,
        key: &TurnKey,
        users: usize,
    ) -> bool {
        let dir = self.home.turn_dir(key);
        match inotify.add_watch(dir.as_path(), crate::watch::dir_mask(false)) {
            Ok(wd) => {
                book.by_key.insert(key.clone(), (wd, users));
                book.by_wd.insert(wd, key.clone());
                true
            }
            Err(nix::errno::Errno::ENOENT) => {
                let Some((wd, path)) = crate::watch::watch_ancestor(inotify, &dir) else {
                    return false;
                };
                book.waiting.insert(key.clone(), (wd, users));
                book.ancestors
                    .entry(wd)
                    .or_insert_with(|| (path, BTreeSet::new()))
                    .1
                    .insert(key.clone());
                // Made between the two tries: its creation event was not watched.
                if dir.is_dir() {
                    book.leave_ancestor(inotify, key);
                    return self.watch_folder(inotify, book, key, users);
                }
                false
            }
            Err(e) => {
                tracing::debug!(
                    "cannot watch {} ({e}); read on the fallback tick",
                    dir.display()
                );
                false
            }
        }
    }

    /// Drops one delivery's use of `key`'s folder watch.
    fn remove_watch(&self, key: &TurnKey) {
        let Some(inotify) = &self.inotify else {
            return;
        };
        let mut book = crate::sync::lock(&self.book);
        if let Some((_, users)) = book.waiting.get_mut(key) {
            *users = users.saturating_sub(1);
            if *users == 0 {
                book.leave_ancestor(inotify, key);
            }
            return;
        }
        let Some((wd, users)) = book.by_key.get_mut(key) else {
            return;
        };
        *users = users.saturating_sub(1);
        if *users == 0 {
            let wd = *wd;
            book.by_key.remove(key);
            book.by_wd.remove(&wd);
            // The folder may be gone already (its watch then went with it).
            let _ = inotify.rm_watch(wd);
        }
    }

    /// Reads the queued inotify events and marks the deliveries whose folder changed. Returns
    /// true when events were lost (queue overflow): every record must be re-read.
    fn read_events(&self) -> bool {
        let Some(inotify) = &self.inotify else {
            return false;
        };
        let mut changed: BTreeSet<TurnKey> = BTreeSet::new();
        let mut overflow = false;
        // Bounded: each read empties up to one kernel buffer; the kernel's queue is bounded.
        for _ in 0..64 {
            match inotify.read_events() {
                Ok(events) if !events.is_empty() => {
                    let mut book = crate::sync::lock(&self.book);
                    for event in events {
                        if event.mask.contains(AddWatchFlags::IN_Q_OVERFLOW) {
                            overflow = true;
                        }
                        if let Some(key) = book.by_wd.get(&event.wd) {
                            changed.insert(key.clone());
                        }
                        // The entry made in an ancestor (all of them when the ancestor itself
                        // went): the turns on its way move to their folder, or a nearer ancestor.
                        let moved: Vec<TurnKey> = match book.ancestors.get(&event.wd) {
                            Some((path, keys)) => {
                                let made = event.name.as_ref().map(|name| path.join(name));
                                keys.iter()
                                    .filter(|key| {
                                        made.as_ref().is_none_or(|made| {
                                            self.home.turn_dir(key).starts_with(made)
                                        })
                                    })
                                    .cloned()
                                    .collect()
                            }
                            None => Vec::new(),
                        };
                        for key in moved {
                            if let Some(users) = book.leave_ancestor(inotify, &key) {
                                if self.watch_folder(inotify, &mut book, &key, users) {
                                    changed.insert(key);
                                }
                            }
                        }
                        if event.mask.contains(AddWatchFlags::IN_IGNORED) {
                            // The folder is gone (swept): its watch went with it.
                            if let Some(key) = book.by_wd.remove(&event.wd) {
                                book.by_key.remove(&key);
                            }
                        }
                    }
                }
                Ok(_) | Err(nix::errno::Errno::EAGAIN) => break,
                Err(e) => {
                    tracing::warn!("reading the serve watcher's inotify events failed: {e}");
                    overflow = true;
                    break;
                }
            }
        }
        if !changed.is_empty() {
            let ids: Vec<String> = crate::sync::lock(&self.entries)
                .iter()
                .filter(|(_, w)| changed.contains(&w.key))
                .map(|(id, _)| id.clone())
                .collect();
            crate::sync::lock(&self.dirty).extend(ids);
        }
        overflow
    }

    /// How long until the nearest detach deadline of a delivery not yet timing out.
    fn next_deadline_in(&self, now_millis: u64) -> Option<Duration> {
        crate::sync::lock(&self.entries)
            .values()
            .filter(|w| !w.deadline.timing_out)
            .map(|w| w.deadline.deadline_millis)
            .min()
            .map(|at| Duration::from_millis(at.saturating_sub(now_millis)))
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
    /// The folder is watched before the delivery is marked for a first read, so a turn that
    /// ended before (or while) it was added is still seen.
    pub fn watch(&self, watched: Watched) {
        self.watch_reading(watched, true);
    }

    /// [`Watcher::watch`] for a turn the caller has just seen live in the section that queued
    /// it, waiting in the queue (parked, or waiting for its time: nothing of this process starts
    /// it): its record is not read again now, only when its folder changes or on the fallback
    /// tick. A turn started and ended by another process before its folder is watched is seen on
    /// that tick (latency, never a lost outcome).
    pub fn watch_queued(&self, watched: Watched) {
        self.watch_reading(watched, false);
    }

    fn watch_reading(&self, watched: Watched, read_now: bool) {
        self.add_watch(&watched.key);
        let id = watched.meta.id.clone();
        if let Some(old) = crate::sync::lock(&self.entries).insert(id.clone(), watched) {
            self.remove_watch(&old.key);
        }
        if read_now {
            crate::sync::lock(&self.dirty).insert(id);
            self.wake.notify_one();
        }
    }

    pub fn len(&self) -> usize {
        crate::sync::lock(&self.entries).len()
    }

    /// Waits on the folders' events, new deliveries, the nearest detach deadline and the
    /// fallback tick, until `stop` says so; each wake re-reads only what it has to.
    pub async fn run(self: Arc<Self>, mut stop: tokio::sync::watch::Receiver<bool>) {
        let fallback = Duration::from_millis(crate::watch::FALLBACK_POLL_MILLIS);
        let events: Option<AsyncFd<OwnedFd>> = self.inotify.as_ref().and_then(|inotify| {
            let fd = inotify.as_fd().try_clone_to_owned().ok()?;
            // SAFETY: `fd` is an OwnedFd (a duplicate of the inotify descriptor) moved into the
            // AsyncFd, which owns it until dropped: it stays open and always returns the same fd.
            match unsafe { AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) } {
                Ok(fd) => Some(fd),
                Err(e) => {
                    tracing::warn!("cannot wait on inotify ({e}); the watcher polls");
                    None
                }
            }
        });
        let mut last_full = tokio::time::Instant::now();
        loop {
            let now = tasks::now_millis();
            let since_full = last_full.elapsed();
            let mut sleep_for = fallback.saturating_sub(since_full);
            if let Some(deadline) = self.next_deadline_in(now) {
                sleep_for = sleep_for.min(deadline);
            }
            let mut full = false;
            tokio::select! {
                _ = tokio::time::sleep(sleep_for) => full = true,
                _ = self.wake.notified() => {}
                ready = readable(events.as_ref()) => {
                    if ready {
                        full = self.read_events();
                    }
                }
                _ = stop.changed() => return,
            }
            if full {
                last_full = tokio::time::Instant::now();
            }
            let this = Arc::clone(&self);
            let pass = tokio::task::spawn_blocking(move || {
                if full {
                    crate::sync::lock(&this.dirty).clear();
                    this.tick();
                } else {
                    let ids = std::mem::take(&mut *crate::sync::lock(&this.dirty));
                    this.tick_some(ids.into_iter().collect());
                }
            });
            if let Err(e) = pass.await {
                tracing::error!("the serve watcher's pass failed: {e}");
            }
        }
    }

    /// Looks at every watched delivery's turn (the fallback tick, and the drain's poll). One read
    /// of the unfinished turns' keys answers for every turn still live, so
    /// only the records of turns that ended (or vanished) are read: the tick's cost follows the
    /// deliveries that changed, not the deliveries retained.
    pub fn tick(&self) {
        let snapshot: Vec<String> = crate::sync::lock(&self.entries).keys().cloned().collect();
        if snapshot.is_empty() {
            self.reap();
            return;
        }
        let unfinished = match tasks::unfinished_turn_keys(&self.home) {
            Ok(keys) => Some(keys),
            Err(e) => {
                tracing::warn!("{e}; reading each watched turn's record instead");
                None
            }
        };
        self.pass(snapshot, unfinished.as_ref());
    }

    /// One pass over `ids`, each turn's record read (the deliveries an event named).
    fn tick_some(&self, ids: Vec<String>) {
        self.pass(ids, None);
    }

    /// One pass over `ids`: for each delivery still watched, read its turn record (or take it as
    /// live when `unfinished` holds its key) and run the core's `watch_turn` step (under the
    /// entries' lock) and perform its effect: settle the permit, or cancel a turn past its
    /// deadline.
    fn pass(&self, ids: Vec<String>, unfinished: Option<&BTreeSet<TurnKey>>) {
        self.reap();
        let snapshot: Vec<(String, TurnKey)> = {
            let entries = crate::sync::lock(&self.entries);
            ids.into_iter()
                .filter_map(|id| entries.get(&id).map(|w| (id, w.key.clone())))
                .collect()
        };
        for (id, key) in snapshot {
            let live = unfinished.is_some_and(|keys| keys.contains(&key));
            let record = if live {
                None
            } else {
                match tasks::load_turn(&self.home, &key) {
                    Ok(record) => record,
                    Err(e) => {
                        tracing::warn!("{e}");
                        continue;
                    }
                }
            };
            let turn = match &record {
                _ if live => TurnNow::Live,
                Some(turn) => turn
                    .outcome
                    .map_or(TurnNow::Live, |o| TurnNow::Ended(o.delivery_end())),
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
                        self.remove_watch(&watched.key);
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
        *crate::sync::lock(&self.book) = WatchBook::default();
        std::mem::take(&mut *crate::sync::lock(&self.entries))
            .into_values()
            .collect()
    }
}

/// Resolves when the inotify descriptor is readable (true), or never when there is none.
async fn readable(fd: Option<&AsyncFd<OwnedFd>>) -> bool {
    match fd {
        Some(fd) => match fd.readable().await {
            Ok(mut guard) => {
                // The events are read right after; a later event is a new edge.
                guard.clear_ready();
                true
            }
            Err(e) => {
                tracing::warn!("waiting on inotify failed: {e}");
                std::future::pending::<()>().await;
                false
            }
        },
        None => std::future::pending().await,
    }
}
