//! Start and stop: one `serve` per home (flock on `serve.lock`), re-adoption of the previous
//! instance's retained deliveries, and the shutdown drain and hand-off.

use super::delivery::dedupe_key_of;
use super::events::{Event, EventLog};
use super::handler::{self, App};
use super::metrics::Counters;
use super::settings::{ServeError, ServePaths, Settings};
use super::state::HandedOff;
use super::state::ServeState;
use super::watcher::{Watched, Watcher, WATCH_POLL_MILLIS};
use crate::flock::{self, TryLock};
use crate::fsutil;
use crate::gate::Gate;
use crate::home::Home;
use crate::protocol::admission::{
    drain, recovery, turn_at_start, Deadline, Drain, DrainInputs, EventIdentity, Outcome, Readopt,
    Recovery, Retained, Tenant,
};
use crate::protocol::slots::TurnKey;
use crate::sync::atomic::AtomicUsize;
use crate::sync::{Arc, Mutex};
use crate::tasks::{self, DeliveryMeta};
use std::fs::File;
use std::io::{Read, Seek, Write};
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

/// Threads serving requests (the blocking work runs on tokio's bounded blocking pool).
const WORKER_THREADS: usize = 2;
/// The most blocking jobs (turn submits, watcher polls) at once.
const MAX_BLOCKING_THREADS: usize = 64;
/// How long in-flight requests may take to finish once the hand-off is recorded.
const CLOSE_GRACE_MILLIS: u64 = 5_000;

/// The exclusive `serve.lock`, held for the life of the instance.
pub struct ServeLock {
    _lock: nix::fcntl::Flock<File>,
}

impl ServeLock {
    pub fn acquire(path: &Path) -> Result<ServeLock, ServeError> {
        let io = |source| ServeError::Io {
            what: format!("opening {}", path.display()),
            source,
        };
        let file = flock::open(path).map_err(io)?;
        match flock::try_exclusive(file) {
            Ok(TryLock::Locked(mut lock)) => {
                let pid = std::process::id();
                let write = |f: &mut File| -> std::io::Result<()> {
                    f.set_len(0)?;
                    f.rewind()?;
                    f.write_all(format!("{pid}\n").as_bytes())
                };
                write(&mut lock).map_err(io)?;
                Ok(ServeLock { _lock: lock })
            }
            Ok(TryLock::Held(mut file)) => {
                let mut text = String::new();
                let _ = file.read_to_string(&mut text);
                let holder = match text.trim() {
                    "" => String::new(),
                    pid => format!(" by pid {pid}"),
                };
                Err(ServeError::AlreadyServing {
                    lock: path.to_path_buf(),
                    holder,
                })
            }
            Err(errno) => Err(ServeError::Io {
                what: format!("locking {}", path.display()),
                source: std::io::Error::from(errno),
            }),
        }
    }
}

/// How a `serve` ended.
#[derive(Debug, Default)]
pub struct Summary {
    pub readopted: usize,
    pub handed_off: usize,
}

/// Runs `serve` until SIGTERM or SIGINT. `on_listening` is told the bound address.
pub fn run(
    home: Home,
    listen: Option<String>,
    on_listening: impl FnOnce(SocketAddr),
) -> Result<Summary, ServeError> {
    // `FAILPOINTS` (e.g. `serve::after_reserve=return`) is read once for every subcommand, in
    // `cli::main`: a second `FailScenario` here would wait forever on the first one's lock.
    let config = home.ensure().map_err(|e| match e {
        crate::home::HomeError::File(f) => ServeError::File(f),
        other => ServeError::Config(other.to_string()),
    })?;
    let settings = Settings::from_config(&config, listen.as_deref())?;
    let paths = ServePaths::new(&home);
    fsutil::create_private_dir(&paths.dir)?;
    let _lock = ServeLock::acquire(&paths.lock)?;
    let now = tasks::now_millis();
    // Building the home's store registers where its records (and so serve's tables) live.
    let _ = crate::runtime::store_for(&home, &config);
    let (serve_state, marks) = ServeState::open(&home, &paths, now, settings.dedupe_ttl_millis)?;
    let gate = Gate::new(settings.limits, settings.dedupe_ttl_millis);
    for mark in &marks {
        gate.restore_mark(&EventIdentity(mark.identity.clone()), mark.marked_at_millis);
    }
    let events = Arc::new(EventLog::open(&paths.log, &config)?);
    let spawn_lock = Arc::new(Mutex::new(()));
    let watcher = Arc::new(Watcher::new(
        home.clone(),
        config.clone(),
        Arc::clone(&events),
        Arc::clone(&spawn_lock),
    ));
    let me = crate::process::self_identity().map_err(|source| ServeError::Io {
        what: "reading this process's identity".into(),
        source,
    })?;
    let cwd = std::env::current_dir().map_err(|source| ServeError::Io {
        what: "reading the current directory".into(),
        source,
    })?;
    let secrets = super::secret_variables(&config);
    let base_env = std::env::vars_os()
        .filter(|(k, _)| !secrets.contains(k))
        .collect();
    let (accept, accept_worker) = super::delivery::channel();
    let starter =
        super::starter::Starter::start(home.clone(), config.clone(), me, Arc::clone(&spawn_lock))
            .map_err(|source| ServeError::Io {
            what: "starting the starter of parked rows".into(),
            source,
        })?;
    let app = Arc::new(App {
        settings,
        gate,
        watcher,
        counters: Counters::for_log(events.stats()),
        events,
        serve_state,
        accept,
        home,
        config,
        me,
        cwd,
        base_env,
        spawn_lock,
        dispatching: AtomicUsize::new(0),
        starter,
    });
    let restored = super::accept::restore_payloads(&app);
    if restored > 0 {
        tracing::info!("restored {restored} delivery payload file(s) from the home's database");
    }
    let readopted = readopt(&app)?;
    let committer = {
        let app = Arc::clone(&app);
        crate::sync::thread::Builder::new()
            .name("group-commit".into())
            .spawn(move || super::accept::run_worker(app, accept_worker))
            .map_err(|source| ServeError::Io {
                what: "starting the group committer".into(),
                source,
            })?
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(WORKER_THREADS)
        .max_blocking_threads(MAX_BLOCKING_THREADS)
        .enable_all()
        .build()
        .map_err(|source| ServeError::Io {
            what: "starting the async runtime".into(),
            source,
        })?;
    let served = runtime.block_on(serve(Arc::clone(&app), on_listening));
    // Every accepted delivery was answered by now (the drain waited for them): the committer
    // commits what is queued and ends.
    app.accept.close();
    if committer.join().is_err() {
        tracing::error!("the group committer panicked");
    }
    let handed_off = served?;
    Ok(Summary {
        readopted,
        handed_off,
    })
}

/// Serve's start: every delivery a previous instance admitted whose turn has no outcome (its
/// row is still in the queue) or that it handed off is re-adopted through the core's `readopt`
/// step, and its effect performed: watch it (counted against the limits again), log the end of
/// a handed-off one that ended meanwhile, or warn that it runs on unwatched. Then the core's
/// `recovery` step: when a retained delivery's row is held only by dead processes (a serve
/// killed between reserving the row and starting its runner, or a runner bound but not
/// recorded), reconcile repairs it, so every acknowledged delivery runs (A3).
fn readopt(app: &Arc<App>) -> Result<usize, ServeError> {
    let handed: Vec<HandedOff> = app.serve_state.handed_off()?;
    let rt = super::runtime_for(&app.home, &app.config);
    let state = rt
        .store
        .load()
        .map_err(|e| ServeError::Config(e.to_string()))?;
    let mut keys: Vec<TurnKey> = state.entries.iter().map(|e| e.key.clone()).collect();
    for h in &handed {
        let key = TurnKey::new(h.task.clone(), h.turn);
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
    let route_of = |meta: &DeliveryMeta| {
        handed
            .iter()
            .find(|h| h.delivery.id == meta.id)
            .map(|h| h.route.clone())
            .unwrap_or_default()
    };
    let mut count = 0;
    let mut effects = Vec::new();
    for key in keys {
        let Some(turn) = tasks::load_turn(&app.home, &key)? else {
            continue;
        };
        let Some(meta) = turn.delivery.clone() else {
            continue;
        };
        let retained = Retained {
            tenant: Tenant::new(meta.adapter.clone(), meta.tenant.clone()),
            identity: dedupe_key_of(&meta),
            admitted_at_millis: meta.admitted_at_millis,
            handed_off: handed.iter().any(|h| h.delivery.id == meta.id),
            turn: turn_at_start(
                turn.outcome.map(crate::tasks::TurnOutcome::delivery_end),
                state.row(&key),
                &rt.liveness,
            ),
        };
        let readopted = app
            .gate
            .readopt(&retained, app.settings.detach_timeout_millis);
        effects.push(readopted.effect);
        match (readopted.effect, readopted.permit) {
            (Readopt::Watch { .. }, Some(permit)) => {
                Counters::bump(&app.counters.readopted);
                let mut event = outcome_event(&meta, &key, route_of(&meta));
                event.kind = "decision";
                event.outcome = "readopted".into();
                app.events.record(&event);
                app.watcher.watch(Watched {
                    permit,
                    key,
                    route: route_of(&meta),
                    // The deadline runs from the first admission, not from this restart.
                    deadline: Deadline::new(
                        meta.admitted_at_millis,
                        app.settings.detach_timeout_millis,
                    ),
                    meta,
                    readopted: true,
                    reply: None,
                });
                count += 1;
            }
            (Readopt::LogEnded { outcome }, _) => {
                let mut event = outcome_event(&meta, &key, route_of(&meta));
                event.outcome = outcome.to_string();
                app.events.record(&event);
            }
            (Readopt::Unwatched { reason, .. }, _) => tracing::warn!(
                "{key}: cannot re-adopt delivery {} ({reason:?}: max_detached was lowered?); its turn runs on, unwatched",
                meta.id
            ),
            (Readopt::Ended, _) | (Readopt::Watch { .. }, None) => {}
        }
    }
    app.serve_state.replace_handed_off(&[])?;
    match recovery(&effects) {
        Recovery::Reconcile => match crate::reconcile::reconcile(&rt, app.me) {
            Ok(report) => tracing::info!(
                "recovered the rows of an earlier serve: {} reconcile step(s), {} runner(s) started",
                report.steps.len(),
                report.handoffs.len()
            ),
            Err(e) => tracing::error!(
                "cannot recover the rows of an earlier serve ({e}); `tollgate reconcile` repairs them"
            ),
        },
        Recovery::Nothing => {}
    }
    Ok(count)
}

fn outcome_event(meta: &DeliveryMeta, key: &TurnKey, route: String) -> Event {
    Event {
        at_millis: tasks::now_millis(),
        kind: "outcome",
        route,
        adapter: meta.adapter.clone(),
        tenant: meta.tenant.clone(),
        delivery: Some(meta.id.clone()),
        identity: meta.identity.clone(),
        task: Some(key.task.clone()),
        turn: Some(key.turn),
        readopted: true,
        ..Event::default()
    }
}

async fn serve(app: Arc<App>, on_listening: impl FnOnce(SocketAddr)) -> Result<usize, ServeError> {
    let addr = app.settings.listen;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| ServeError::Bind { addr, source })?;
    let bound = listener
        .local_addr()
        .map_err(|source| ServeError::Bind { addr, source })?;
    // Signal handlers before we say we listen, so a SIGTERM right after is never fatal.
    let handler = |kind| {
        tokio::signal::unix::signal(kind).map_err(|source| ServeError::Io {
            what: "installing the signal handlers".into(),
            source,
        })
    };
    let mut term = handler(tokio::signal::unix::SignalKind::terminate())?;
    let mut int = handler(tokio::signal::unix::SignalKind::interrupt())?;
    let router = axum::Router::new()
        .route("/metrics", axum::routing::get(handler::metrics))
        .fallback(handler::ingress)
        .with_state(Arc::clone(&app));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let watcher_task = tokio::spawn(Arc::clone(&app.watcher).run(stop_rx.clone()));
    let mut close_rx = stop_rx;
    let server = tokio::spawn(super::conn::serve(
        listener,
        router,
        Arc::clone(&app),
        async move {
            // Closed only after the hand-off is recorded: until then refusals are answered.
            while close_rx.changed().await.is_ok() {
                if *close_rx.borrow() {
                    return;
                }
            }
        },
    ));
    tracing::info!(
        "serving {} route(s) on http://{bound}, max_detached {}",
        app.settings.routes.len(),
        app.settings.limits.max_detached()
    );
    on_listening(bound);
    let which = tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    };
    let retained = app.gate.begin_shutdown();
    tracing::info!(
        "{which}: admission stopped; draining {retained} retained delivery(ies) for up to {} ms",
        app.settings.drain_timeout_millis
    );
    // The core's drain step decides when to hand off: retained deliveries may end until
    // `drain_timeout`; a delivery between the gate and the watcher finishes its submit (bounded
    // by the queue lock timeout after that) so it is handed off with its turn.
    let started = tasks::now_millis();
    let drain_until_millis = started.saturating_add(app.settings.drain_timeout_millis);
    let submit_until_millis = drain_until_millis
        .saturating_add(u64::try_from(app.config.lock_timeout().as_millis()).unwrap_or(u64::MAX));
    loop {
        let inputs = DrainInputs {
            watched: app.watcher.len(),
            dispatching: app.dispatching.load(crate::sync::atomic::Ordering::SeqCst),
            now_millis: tasks::now_millis(),
            drain_until_millis,
            submit_until_millis,
        };
        match drain(inputs) {
            Drain::Wait => tokio::time::sleep(Duration::from_millis(WATCH_POLL_MILLIS)).await,
            Drain::HandOff => break,
        }
    }
    let _ = stop_tx.send(true);
    if let Err(e) = watcher_task.await {
        tracing::error!("the watcher ended badly: {e}");
    }
    // No new runner from here on: what is parked now is the next serve's (or a command's).
    {
        let app = Arc::clone(&app);
        let _ = tokio::task::spawn_blocking(move || app.starter.stop()).await;
    }
    // One last look, so what ended during the drain's last poll period is not handed off.
    {
        let watcher = Arc::clone(&app.watcher);
        let _ = tokio::task::spawn_blocking(move || watcher.tick()).await;
    }
    app.gate.hand_off_remaining();
    let remaining = app.watcher.take_all();
    let mut handed: Vec<HandedOff> = Vec::with_capacity(remaining.len());
    for watched in remaining {
        app.events
            .record(&watched.event("outcome", Outcome::HandedOffAtShutdown.to_string()));
        handed.push(HandedOff {
            route: watched.route.clone(),
            delivery: watched.meta.clone(),
            task: watched.key.task.clone(),
            turn: watched.key.turn,
        });
    }
    app.serve_state.replace_handed_off(&handed)?;
    app.events.sync();
    tracing::info!("handed off {} delivery(ies) at shutdown", handed.len());
    match tokio::time::timeout(Duration::from_millis(CLOSE_GRACE_MILLIS), server).await {
        Ok(Ok(Ok(()))) => {}
        Ok(Ok(Err(e))) => tracing::warn!("the HTTP server ended with {e}"),
        Ok(Err(e)) => tracing::warn!("the HTTP server task failed: {e}"),
        Err(_) => {
            tracing::warn!("in-flight requests did not finish within {CLOSE_GRACE_MILLIS} ms")
        }
    }
    Ok(handed.len())
}
