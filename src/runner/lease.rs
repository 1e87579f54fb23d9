//! The runner's lease thread on a PostgreSQL store (spec/fleet.md, "Self-fencing"): renew the
//! lease every renew interval and, when no renewal has been confirmed in time, fence.
//!
//! Two threads, so a renewal stuck on a cut connection cannot delay the fence: the *renewer*
//! sends a renewal every `renew_interval_millis` and reports `(sent_at, outcome)` on a bounded
//! channel; the *watchdog* keeps the fence deadline of the latest confirmed renewal, measured from
//! when it was **sent** on `CLOCK_BOOTTIME` ([`LeaseTiming::kill_at_local_millis`]), and waits on
//! the channel only until then. When the deadline passes, or a renewal comes back `Lost` or
//! `NotOwner`, the watchdog calls the fence action once (the runner's: kill the work's unit, then
//! exit) before the lease can have expired on the database clock (F1).

use crate::dispatch::DispatchError;
use crate::fleet::boottime_millis;
use crate::process::work;
use crate::protocol::fleet::{FleetIdentity, LeaseTiming, RenewOutcome};
use crate::protocol::slots::{Liveness, ProcessIdentity, TurnKey, WorkId, WorkRecord};
use crate::queue::Store;
use crate::runtime::Runtime;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;

/// The exit code of a runner that fenced itself (its lease could not be renewed in time): its
/// work was killed and nothing was recorded; the row is left to reconcile (spec/fleet.md).
pub const FENCED_EXIT_CODE: i32 = 75;

/// A runner's lease while its command runs; dropping it ends the renewals without fencing.
pub struct RunnerLease {
    keeper: LeaseKeeper,
}

impl RunnerLease {
    /// Ends the renewals (the work is dead: the runner killed what was left of it).
    pub fn stop(self) {
        self.keeper.stop();
    }
}

/// On a fleet (a PostgreSQL home, [`Store::lease_renewer`]), starts the runner's lease keeper
/// before its command starts: it renews `me`'s lease on a connection of its own, and when no
/// renewal is confirmed by the fence deadline (measured from `take_over_sent_at_local_millis`,
/// when the take-over that renewed the lease was sent, then from each confirmed renewal's send)
/// or the database says the lease is lost, it kills the turn's work (the containment unit of
/// `work`: its marker and `cgroup`) and exits this process with [`FENCED_EXIT_CODE`], recording
/// nothing. `None` on one host.
pub fn start_if_fleet<L: Liveness, S: Store>(
    rt: &Runtime<L, S>,
    key: &TurnKey,
    me: ProcessIdentity,
    work: WorkId,
    cgroup: Option<PathBuf>,
    take_over_sent_at_local_millis: u64,
) -> Result<Option<RunnerLease>, DispatchError> {
    let Some(renewer) = rt.store.lease_renewer() else {
        return Ok(None);
    };
    let Some(fleet) = renewer.fleet().cloned() else {
        return Ok(None);
    };
    let timing = fleet.timing;
    let holder = FleetIdentity {
        host: fleet.host,
        process: me,
    };
    let record = WorkRecord {
        key: key.clone(),
        id: work,
        runner: me,
        leader: None,
        cgroup: cgroup.map(|d| d.display().to_string()),
    };
    let key = key.clone();
    let keeper = LeaseKeeper::start(
        timing,
        take_over_sent_at_local_millis,
        move || {
            renewer
                .renew_lease(&holder, &timing)
                .map_err(|e| e.to_string())
        },
        move |reason| fence_and_exit(&key, &record, &timing, &reason),
    )
    .map_err(|e| DispatchError::io("starting the lease threads", e))?;
    Ok(Some(RunnerLease { keeper }))
}

/// Set when this process's fence began: from then on nothing may touch the queue.
static FENCING: AtomicBool = AtomicBool::new(false);

/// How long the main thread waits for a fence that began to end the process itself (its kill is
/// bounded by the kill budget; this is the bound of the bound).
const FENCE_WAIT_MILLIS: u64 = 30_000;

/// Called by the runner after its work ended and its lease was dropped, before it records
/// anything: if the fence already began (its kill is what ended the work), the runner must not
/// record the killed run nor free the slot; it waits for the fence to finish the kill and exit
/// with [`FENCED_EXIT_CODE`] (bounded; then it exits with that code itself). Without this the
/// main thread raced the fence: it saw its command die and ran its finishing section, and exited
/// 3 when that could not reach the database (tests/fleet_postgres.rs, the partition test).
pub fn wait_out_a_fence() {
    if !FENCING.load(Ordering::SeqCst) {
        return;
    }
    let until = std::time::Instant::now() + Duration::from_millis(FENCE_WAIT_MILLIS);
    while std::time::Instant::now() < until {
        std::thread::sleep(Duration::from_millis(10));
    }
    std::process::exit(FENCED_EXIT_CODE);
}

/// The TERM-to-KILL grace of a fence's kill: half the kill budget, at most the work's usual grace.
/// The runner's guard kills with the same grace (spec/fleet.md, "The guard").
pub fn fence_grace_millis(timing: &LeaseTiming) -> u64 {
    (timing.kill_budget_millis / 2).min(work::WORK_TERM_GRACE_MILLIS)
}

/// The runner's fence action: kill the work's unit within the kill budget (its marker finds
/// every process of it, the cgroup too where there is one), then exit at once without touching
/// the queue. The command's first process also dies with this process (`PR_SET_PDEATHSIG`),
/// which covers a command spawned while the kill ran.
fn fence_and_exit(key: &TurnKey, record: &WorkRecord, timing: &LeaseTiming, reason: &FenceReason) {
    FENCING.store(true, Ordering::SeqCst);
    let grace = Duration::from_millis(fence_grace_millis(timing));
    let killed = work::kill_unit(&work::unit_of(record), grace);
    if !killed.is_complete() {
        tracing::error!(
            "{key}: self-fencing: {} process(es) of work {} survived the kill: {:?}",
            killed.remaining.len(),
            record.id,
            killed.remaining
        );
    }
    eprintln!(
        "tollgate runner {key}: fenced itself ({reason:?}): its lease could not be renewed in          time, so its work was killed and nothing was recorded; another host may run the turn          again once the lease has expired"
    );
    std::process::exit(FENCED_EXIT_CODE);
}

/// Renewal reports in flight between the two threads: the renewer waits a whole interval between
/// sends, so more than a few pending means the watchdog is gone.
const REPORTS_BOUND: usize = 4;

/// Why the watchdog fenced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FenceReason {
    /// No renewal was confirmed before the kill deadline (`kill_at_local_millis`) of the last
    /// confirmed one; `last_error` is the latest renewal failure, if any.
    Unconfirmed {
        deadline_local_millis: u64,
        last_error: Option<String>,
    },
    /// The database said the lease is gone or not ours.
    Lost(RenewOutcome),
}

/// A running lease thread pair. [`LeaseKeeper::stop`] (or dropping it) ends both without
/// fencing; the renewer, if stuck in a renewal, is left to end with the process.
pub struct LeaseKeeper {
    stopped: Arc<AtomicBool>,
    stop: Option<mpsc::Sender<()>>,
    watchdog: Option<JoinHandle<Option<FenceReason>>>,
}

impl LeaseKeeper {
    /// Starts renewing with `renew` (one renewal, e.g. [`crate::queue::PostgresStore::renew_lease`]
    /// on a connection of its own). `acked_sent_at_local_millis`: when the last confirmed
    /// acquisition or renewal was sent ([`boottime_millis`]). `fence` runs at most once, on the
    /// watchdog thread.
    pub fn start<R, F>(
        timing: LeaseTiming,
        acked_sent_at_local_millis: u64,
        mut renew: R,
        fence: F,
    ) -> std::io::Result<LeaseKeeper>
    where
        R: FnMut() -> Result<RenewOutcome, String> + Send + 'static,
        F: FnOnce(FenceReason) + Send + 'static,
    {
        let stopped = Arc::new(AtomicBool::new(false));
        let (stop_tx, stop_rx) = mpsc::channel::<()>();
        let (report_tx, report_rx) =
            mpsc::sync_channel::<(u64, Result<RenewOutcome, String>)>(REPORTS_BOUND);
        let interval = Duration::from_millis(timing.renew_interval_millis);
        std::thread::Builder::new()
            .name("lease-renewer".to_string())
            .spawn(move || loop {
                match stop_rx.recv_timeout(interval) {
                    Err(mpsc::RecvTimeoutError::Timeout) => {}
                    _ => return,
                }
                let sent = boottime_millis();
                let outcome = renew();
                if report_tx.send((sent, outcome)).is_err() {
                    return;
                }
            })?;
        let watch_stopped = Arc::clone(&stopped);
        let watchdog = std::thread::Builder::new()
            .name("lease-watchdog".to_string())
            .spawn(move || {
                let mut acked = acked_sent_at_local_millis;
                let mut last_error = None;
                let reason = loop {
                    let deadline = timing.kill_at_local_millis(acked);
                    let now = boottime_millis();
                    if now >= deadline {
                        break FenceReason::Unconfirmed {
                            deadline_local_millis: deadline,
                            last_error,
                        };
                    }
                    match report_rx.recv_timeout(Duration::from_millis(deadline - now)) {
                        Ok((sent, Ok(RenewOutcome::Renewed { .. }))) => acked = acked.max(sent),
                        Ok((_, Ok(other))) => break FenceReason::Lost(other),
                        Ok((_, Err(error))) => {
                            tracing::warn!("lease renewal not confirmed: {error}");
                            last_error = Some(error);
                        }
                        Err(mpsc::RecvTimeoutError::Timeout) => {}
                        // The renewer ended: stop was asked for.
                        Err(mpsc::RecvTimeoutError::Disconnected) => return None,
                    }
                };
                if watch_stopped.load(Ordering::SeqCst) {
                    return None;
                }
                tracing::error!("self-fencing: {reason:?}");
                fence(reason.clone());
                Some(reason)
            })?;
        Ok(LeaseKeeper {
            stopped,
            stop: Some(stop_tx),
            watchdog: Some(watchdog),
        })
    }

    /// Ends renewing (the work ended); no fence runs after this returns unless it already began.
    pub fn stop(mut self) -> Option<FenceReason> {
        self.stop_inner()
    }

    fn stop_inner(&mut self) -> Option<FenceReason> {
        self.stopped.store(true, Ordering::SeqCst);
        self.stop.take();
        let watchdog = self.watchdog.take()?;
        if watchdog.is_finished() {
            return watchdog.join().ok().flatten();
        }
        // Not joined: the watchdog may be waiting on a renewer stuck in a renewal; it sees
        // `stopped` before it could fence.
        None
    }

    /// Waits for the watchdog to end (it ends only by fencing or by [`LeaseKeeper::stop`]).
    pub fn join(mut self) -> Option<FenceReason> {
        self.watchdog.take()?.join().ok().flatten()
    }
}

impl Drop for LeaseKeeper {
    fn drop(&mut self) {
        self.stop_inner();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `TOLLGATE_LEASE_MILLIS=4000` gives: kill 3294 ms after a confirmed send.
    const SHORT: LeaseTiming = LeaseTiming {
        lease_duration_millis: 4_000,
        renew_interval_millis: 666,
        margin_millis: 266,
        kill_budget_millis: 400,
        drift_ppm: 10_000,
    };

    #[test]
    fn the_fence_is_measured_from_the_send_of_the_last_confirmed_renewal_not_its_ack() {
        SHORT.validate().unwrap();
        let (entered_tx, entered_rx) = mpsc::channel::<u64>();
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let mut calls = 0;
        // The first renewal is confirmed, but only when the test releases it (a late ack); every
        // later one fails (the database is unreachable).
        let renew = move || {
            calls += 1;
            if calls > 1 {
                return Err("unreachable".to_string());
            }
            entered_tx.send(boottime_millis()).unwrap();
            release_rx.recv().map_err(|e| e.to_string())?;
            Ok(RenewOutcome::Renewed {
                expires_at_db_millis: 0,
            })
        };
        let (fenced_tx, fenced_rx) = mpsc::channel();
        let started = boottime_millis();
        let keeper = LeaseKeeper::start(SHORT, started, renew, move |reason| {
            fenced_tx.send((reason, boottime_millis())).unwrap();
        })
        .unwrap();
        let entered = entered_rx.recv_timeout(Duration::from_secs(5)).unwrap();
        // Hold the acknowledgement for 1.5 s (bounded: the fence of the start comes first if
        // the keeper measured from nothing newer).
        let ack_delay = Duration::from_millis(1_500);
        assert!(
            fenced_rx.recv_timeout(ack_delay).is_err(),
            "fenced too early"
        );
        release_tx.send(()).unwrap();
        let (reason, fenced_at) = fenced_rx.recv_timeout(Duration::from_secs(10)).unwrap();
        assert!(
            matches!(reason, FenceReason::Unconfirmed { .. }),
            "{reason:?}"
        );
        // The send was at or before `entered`: the fence comes by kill_at(entered), not
        // kill_at(ack) = 1.5 s later (the tooth "measured from the ack").
        let by_send = SHORT.kill_at_local_millis(entered);
        assert!(
            fenced_at >= SHORT.kill_at_local_millis(started),
            "{fenced_at}"
        );
        assert!(
            fenced_at < by_send + 500,
            "fenced at {fenced_at}, deadline from the send {by_send}"
        );
        assert!(keeper.join().is_some());
    }

    #[test]
    fn a_lost_lease_fences_at_once_and_stop_never_fences() {
        let (fenced_tx, fenced_rx) = mpsc::channel();
        let now = boottime_millis();
        let keeper = LeaseKeeper::start(
            SHORT,
            now,
            || Ok(RenewOutcome::Lost),
            move |reason| fenced_tx.send((reason, boottime_millis())).unwrap(),
        )
        .unwrap();
        let (reason, at) = fenced_rx.recv_timeout(Duration::from_secs(10)).unwrap();
        assert_eq!(reason, FenceReason::Lost(RenewOutcome::Lost));
        assert!(at < SHORT.kill_at_local_millis(now), "not at once: {at}");
        drop(keeper);

        let (fenced_tx, fenced_rx) = mpsc::channel::<FenceReason>();
        let (renewed_tx, renewed_rx) = mpsc::channel();
        let keeper = LeaseKeeper::start(
            SHORT,
            boottime_millis(),
            move || {
                let _ = renewed_tx.send(());
                Ok(RenewOutcome::Renewed {
                    expires_at_db_millis: 0,
                })
            },
            move |reason| fenced_tx.send(reason).unwrap(),
        )
        .unwrap();
        renewed_rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(keeper.stop(), None);
        assert!(fenced_rx.recv_timeout(Duration::from_secs(1)).is_err());
    }
}
