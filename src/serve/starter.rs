//! The starter: serve starts parked rows on free slots by itself (spec/ingress.md, "Starting
//! parked rows"). An accepted delivery whose runner could not be spawned (no descriptor left:
//! `EMFILE`; no memory for a fork) is parked again by the spawn-failure release, and before this
//! nothing but a finishing runner or another command's repair would have started it: with idle
//! slots and no other command it waited, acknowledged and not running, until `detach_timeout`
//! cancelled it (issue 31, point 3).
//!
//! On a thread of its own the starter runs the bounded repair every command runs after its
//! section ([`crate::runner::repair::bounded_repair`]: the core's look at the active part of the
//! queue, then reconcile sections that start parked rows on free slots): after each failed spawn,
//! with a pause doubling from [`RETRY_FIRST_MILLIS`] to [`RETRY_MAX_MILLIS`] while spawns keep
//! failing, and otherwise every [`CHECK_MILLIS`]. The look costs a read of the active rows, and a
//! section is taken only when the core says a step would act. What starts, and where, is the core's
//! reconcile step: the starter only decides when to ask.

use crate::config::Config;
use crate::home::Home;
use crate::protocol::slots::ProcessIdentity;
use crate::sync::mpsc::{self, RecvTimeoutError, SyncSender};
use crate::sync::thread::JoinHandle;
use crate::sync::{Arc, Mutex};
use std::time::Duration;

/// The first pause before a failed spawn is tried again.
pub const RETRY_FIRST_MILLIS: u64 = 50;
/// The longest pause between two tries while spawns keep failing.
pub const RETRY_MAX_MILLIS: u64 = 5_000;
/// How often the starter looks for a parked row that could start, with no failure to retry.
pub const CHECK_MILLIS: u64 = 1_000;

enum Message {
    /// A runner could not be spawned: try again after the current pause.
    SpawnFailed,
    Stop,
}

/// The starter's thread and its mailbox (one message: a full mailbox already holds a wake-up).
pub struct Starter {
    tx: SyncSender<Message>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Starter {
    /// Starts the thread; it repairs as `me` (serve's own identity), holding `spawn_lock` (this
    /// process's submits and spawns) for each repair.
    pub fn start(
        home: Home,
        config: Config,
        me: ProcessIdentity,
        spawn_lock: Arc<Mutex<()>>,
    ) -> std::io::Result<Starter> {
        let (tx, rx) = mpsc::sync_channel(1);
        let thread = crate::sync::thread::Builder::new()
            .name("starter".into())
            .spawn(move || run(&home, &config, me, &spawn_lock, &rx))?;
        Ok(Starter {
            tx,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// A runner of an accepted delivery could not be spawned: its row is parked; start it again.
    pub fn spawn_failed(&self) {
        let _ = self.tx.try_send(Message::SpawnFailed);
    }

    /// Stops the thread (after the repair it may be running) and waits for it.
    pub fn stop(&self) {
        let _ = self.tx.send(Message::Stop);
        if let Some(thread) = crate::sync::lock(&self.thread).take() {
            if thread.join().is_err() {
                tracing::error!("the starter panicked");
            }
        }
    }
}

fn run(
    home: &Home,
    config: &Config,
    me: ProcessIdentity,
    spawn_lock: &Mutex<()>,
    rx: &mpsc::Receiver<Message>,
) {
    let rt = super::runtime_for(home, config);
    // The database is opened now, while descriptors are free: the repair that must start a row
    // may come when none is left to open it.
    if let Err(e) = crate::queue::Store::load_active(&rt.store) {
        tracing::warn!("starting parked rows: {e}");
    }
    let mut retry_millis = RETRY_FIRST_MILLIS;
    let mut wait_millis = CHECK_MILLIS;
    loop {
        match rx.recv_timeout(Duration::from_millis(wait_millis)) {
            Ok(Message::Stop) | Err(RecvTimeoutError::Disconnected) => return,
            Ok(Message::SpawnFailed) => {
                wait_millis = retry_millis;
                continue;
            }
            Err(RecvTimeoutError::Timeout) => {}
        }
        let repaired = {
            let _spawning = crate::sync::lock(spawn_lock);
            crate::runner::repair::bounded_repair(&rt, me)
        };
        let failed = match repaired {
            Ok(repair) => repair.spawn_failures > 0,
            Err(e) => {
                tracing::warn!("starting parked rows: {e}");
                true
            }
        };
        if failed {
            retry_millis = (retry_millis * 2).min(RETRY_MAX_MILLIS);
            wait_millis = retry_millis;
        } else {
            retry_millis = RETRY_FIRST_MILLIS;
            wait_millis = CHECK_MILLIS;
        }
    }
}
