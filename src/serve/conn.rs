//! The accept loop and the life of each client connection (spec/ingress.md, "Connections and
//! logs"): a cap on open connections with the excess refused at once, timeouts for idle
//! connections, request heads and request bodies, and an accept loop that outlives running out
//! of descriptors.
//!
//! Connections are served with hyper's HTTP/1 connection directly rather than `axum::serve`,
//! which has no timeout, no connection cap and no say over accept errors. hyper's own
//! `header_read_timeout` starts when a connection begins waiting for a request, so it cannot tell
//! an idle keep-alive connection from one trickling its head; a small per-connection watchdog
//! does, from what the connection reads:
//!
//! - *idle*: no request in progress, nothing received since accept or since the last answer;
//!   closed after `idle_timeout`.
//! - *head*: the first byte of a request arrived; the head must be complete within
//!   `header_timeout`, else the connection is closed (no answer: the request is not known yet).
//! - *in flight*: the head is complete and the router has the request. Its body must arrive within
//!   `body_timeout`, else it is answered 408 and the connection closed. A sync route's answer may
//!   take as long as its turn (bounded by `detach_timeout`).

use super::events::AGGREGATE_MILLIS;
use super::handler::{App, RETRY_AFTER_SECS};
use super::metrics::Counters;
use crate::sync::atomic::{AtomicBool, Ordering};
use crate::sync::{Arc, Mutex};
use axum::http::{header, HeaderValue, Request, Response, StatusCode};
use hyper::body::{Body as HttpBody, Frame, Incoming, SizeHint};
use hyper_util::rt::{TokioIo, TokioTimer};
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};
use tower_service::Service;

/// Refused connections answered at once (503, then a short linger so closing does not reset the
/// answer); beyond this many at a time, the excess is closed without an answer.
const REFUSAL_SLOTS: usize = 64;
/// How long a refused connection is kept to read (and discard) what its client sends.
const REFUSAL_LINGER_MILLIS: u64 = 1_000;
/// The most bytes read from a refused connection before it is closed.
const REFUSAL_DRAIN_BYTES: usize = 16 << 10;
/// The first and the longest pause after a failed accept (EMFILE, ENFILE, ENOBUFS, …); it
/// doubles while accepts keep failing. Short, so serving resumes soon after descriptors free up.
const ACCEPT_BACKOFF_MIN_MILLIS: u64 = 10;
const ACCEPT_BACKOFF_MAX_MILLIS: u64 = 250;
/// Descriptors serve needs besides its client connections (logs, queue lock, submits, runners'
/// pipes); `max_connections` beyond what the limit leaves for them gets a warning at start.
const FD_RESERVE: u64 = 64;

/// The `[serve]` connection keys, validated on load.
#[derive(Clone, Copy, Debug)]
pub struct ConnLimits {
    pub header_timeout: Duration,
    pub body_timeout: Duration,
    pub idle_timeout: Duration,
    pub max_connections: usize,
}

impl ConnLimits {
    pub fn from_config(config: &crate::config::Config) -> ConnLimits {
        let table = config.serve.clone().unwrap_or_default();
        ConnLimits {
            header_timeout: table.header_timeout(),
            body_timeout: table.body_timeout(),
            idle_timeout: table.idle_timeout(),
            max_connections: table.max_connections,
        }
    }
}

/// Accepts and serves connections until `shutdown` completes, then stops accepting, lets open
/// connections finish their request in flight (idle ones close at once) and returns when all have
/// closed.
pub async fn serve(
    listener: TcpListener,
    router: axum::Router,
    app: Arc<App>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let limits = ConnLimits::from_config(&app.config);
    warn_if_descriptors_short(limits.max_connections);
    let counters = &app.counters.conn;
    counters
        .max
        .store(limits.max_connections as u64, Ordering::Relaxed);
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let refusals = Arc::new(Semaphore::new(REFUSAL_SLOTS));
    let (close_tx, close_rx) = watch::channel(false);
    let flusher = tokio::spawn({
        let app = Arc::clone(&app);
        async move {
            let mut tick = tokio::time::interval(Duration::from_millis(AGGREGATE_MILLIS));
            loop {
                tick.tick().await;
                app.events.flush_due();
            }
        }
    });
    let mut backoff_millis = ACCEPT_BACKOFF_MIN_MILLIS;
    let mut errors_unreported = 0u64;
    let mut reported_at: Option<Instant> = None;
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((stream, _peer)) => {
                backoff_millis = ACCEPT_BACKOFF_MIN_MILLIS;
                match Arc::clone(&slots).try_acquire_owned() {
                    Ok(permit) => {
                        Counters::bump(&counters.accepted);
                        Counters::bump(&counters.open);
                        let _ = stream.set_nodelay(true);
                        tokio::spawn(connection(
                            stream,
                            permit,
                            router.clone(),
                            limits,
                            Arc::clone(&app),
                            close_rx.clone(),
                        ));
                    }
                    Err(_) => refuse(stream, &app, &refusals),
                }
            }
            // The client gave up before we accepted: nothing to back off from.
            Err(e) if is_connection_error(&e) => {}
            Err(e) => {
                Counters::bump(&counters.accept_errors);
                errors_unreported += 1;
                let now = Instant::now();
                if reported_at.is_none_or_elapsed(now, Duration::from_millis(AGGREGATE_MILLIS)) {
                    tracing::warn!(
                        "accepting a connection failed ({errors_unreported} time(s) since the last report): {e}; still serving, retrying in {backoff_millis} ms"
                    );
                    errors_unreported = 0;
                    reported_at = Some(now);
                }
                tokio::select! {
                    () = &mut shutdown => break,
                    () = tokio::time::sleep(Duration::from_millis(backoff_millis)) => {}
                }
                backoff_millis = (backoff_millis * 2).min(ACCEPT_BACKOFF_MAX_MILLIS);
            }
        }
    }
    drop(listener);
    let _ = close_tx.send(true);
    let all = u32::try_from(limits.max_connections).unwrap_or(u32::MAX);
    let closed = slots.acquire_many(all).await;
    drop(closed);
    flusher.abort();
    Ok(())
}

/// `Option<Instant>::is_none_or` for the 1.85 MSRV.
trait ElapsedSince {
    fn is_none_or_elapsed(&self, now: Instant, period: Duration) -> bool;
}

impl ElapsedSince for Option<Instant> {
    fn is_none_or_elapsed(&self, now: Instant, period: Duration) -> bool {
        match self {
            None => true,
            Some(at) => now.saturating_duration_since(*at) >= period,
        }
    }
}

/// Errors of one connection (not of the listener): accept again at once.
fn is_connection_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}

fn warn_if_descriptors_short(max_connections: usize) {
    use nix::sys::resource::{getrlimit, Resource};
    if let Ok((soft, _hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
        let wanted = (max_connections as u64).saturating_add(FD_RESERVE);
        if soft < wanted {
            tracing::warn!(
                "[serve] max_connections = {max_connections} needs about {wanted} descriptors but RLIMIT_NOFILE is {soft}: at the limit accepts fail and are retried after a brief pause (raise the limit, e.g. `ulimit -n {wanted}`, or lower max_connections)"
            );
        }
    }
}

/// The answer to a connection over `max_connections`, written before its request is read.
fn refusal_answer() -> String {
    let body = r#"{"error":"too many open connections; retry later"}"#;
    format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: {RETRY_AFTER_SECS}\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// Refuses a connection over the cap fast: a 503 at once and a bounded linger, or (when too many
/// refusals are pending already) an immediate close.
fn refuse(stream: TcpStream, app: &App, refusals: &Arc<Semaphore>) {
    Counters::bump(&app.counters.conn.refused);
    let Ok(permit) = Arc::clone(refusals).try_acquire_owned() else {
        return;
    };
    tokio::spawn(async move {
        let _permit = permit;
        let mut stream = stream;
        let answer = async {
            stream.write_all(refusal_answer().as_bytes()).await?;
            stream.shutdown().await?;
            // Read what the client sends until it closes, so our close does not reset the
            // answer before the client read it.
            let mut sink = [0u8; 4096];
            let mut drained = 0;
            while drained < REFUSAL_DRAIN_BYTES {
                match stream.read(&mut sink).await? {
                    0 => break,
                    n => drained += n,
                }
            }
            Ok::<(), io::Error>(())
        };
        let _ = tokio::time::timeout(Duration::from_millis(REFUSAL_LINGER_MILLIS), answer).await;
    });
}

/// Where a connection is in its request cycle (see the module doc).
#[derive(Clone, Copy, Debug)]
enum Phase {
    Idle { since: Instant },
    Head { since: Instant },
    InFlight,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Expired {
    Idle,
    Head,
}

/// A connection's phase, shared by its reads, its service calls and its watchdog.
struct Activity {
    phase: Mutex<Phase>,
    changed: Notify,
}

impl Activity {
    fn new() -> Activity {
        Activity {
            phase: Mutex::new(Phase::Idle {
                since: Instant::now(),
            }),
            changed: Notify::new(),
        }
    }

    fn set(&self, phase: Phase) {
        *crate::sync::lock(&self.phase) = phase;
        self.changed.notify_one();
    }

    /// Bytes arrived: an idle connection has started a request head.
    fn received(&self) {
        let mut phase = crate::sync::lock(&self.phase);
        if let Phase::Idle { .. } = *phase {
            *phase = Phase::Head {
                since: Instant::now(),
            };
            drop(phase);
            self.changed.notify_one();
        }
    }

    fn deadline(&self, limits: &ConnLimits) -> Option<(Instant, Expired)> {
        match *crate::sync::lock(&self.phase) {
            Phase::Idle { since } => Some((since + limits.idle_timeout, Expired::Idle)),
            Phase::Head { since } => Some((since + limits.header_timeout, Expired::Head)),
            Phase::InFlight => None,
        }
    }
}

/// The socket, telling its connection's [`Activity`] when bytes arrive.
struct Tracked {
    stream: TcpStream,
    activity: Arc<Activity>,
}

impl AsyncRead for Tracked {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.stream).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            this.activity.received();
        }
        polled
    }
}

impl AsyncWrite for Tracked {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

/// A request body that fails once `body_timeout` has passed since its head was complete, and
/// says so in `timed_out` (so the answer becomes a 408).
struct TimedBody {
    inner: Incoming,
    deadline: Pin<Box<Sleep>>,
    timed_out: Arc<AtomicBool>,
}

impl HttpBody for TimedBody {
    type Data = axum::body::Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.get_mut();
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        if this.deadline.as_mut().poll(cx).is_ready() {
            this.timed_out.store(true, Ordering::SeqCst);
            return Poll::Ready(Some(Err("the request body did not arrive in time".into())));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

fn body_timeout_answer(limits: &ConnLimits) -> Response<axum::body::Body> {
    let body = serde_json::json!({
        "error": format!(
            "the request body did not arrive within body_timeout ({})",
            humantime::format_duration(limits.body_timeout)
        )
    });
    let mut response = Response::new(axum::body::Body::from(body.to_string()));
    *response.status_mut() = StatusCode::REQUEST_TIMEOUT;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// One request through the router, with its body timed.
async fn request(
    request: Request<Incoming>,
    mut router: axum::Router,
    activity: Arc<Activity>,
    limits: ConnLimits,
    app: Arc<App>,
) -> Result<Response<axum::body::Body>, Infallible> {
    activity.set(Phase::InFlight);
    let timed_out = Arc::new(AtomicBool::new(false));
    let request = request.map(|inner| {
        axum::body::Body::new(TimedBody {
            inner,
            deadline: Box::pin(tokio::time::sleep(limits.body_timeout)),
            timed_out: Arc::clone(&timed_out),
        })
    });
    let response = match router.call(request).await {
        Ok(response) => response,
        Err(never) => match never {},
    };
    let response = if timed_out.load(Ordering::SeqCst) {
        Counters::bump(&app.counters.conn.body_timeouts);
        // The handler takes any failure to read the body for an oversized one: this was not.
        if response.status() == StatusCode::PAYLOAD_TOO_LARGE {
            app.counters.too_large.fetch_sub(1, Ordering::Relaxed);
        }
        body_timeout_answer(&limits)
    } else {
        response
    };
    activity.set(Phase::Idle {
        since: Instant::now(),
    });
    Ok(response)
}

async fn connection(
    stream: TcpStream,
    permit: OwnedSemaphorePermit,
    router: axum::Router,
    limits: ConnLimits,
    app: Arc<App>,
    mut close: watch::Receiver<bool>,
) {
    let activity = Arc::new(Activity::new());
    let io = TokioIo::new(Tracked {
        stream,
        activity: Arc::clone(&activity),
    });
    let service = {
        let activity = Arc::clone(&activity);
        let app = Arc::clone(&app);
        hyper::service::service_fn(move |r| {
            request(
                r,
                router.clone(),
                Arc::clone(&activity),
                limits,
                Arc::clone(&app),
            )
        })
    };
    let mut builder = hyper::server::conn::http1::Builder::new();
    // The watchdog below times heads; hyper's timer would also cut idle keep-alive connections.
    builder.timer(TokioTimer::new()).header_read_timeout(None);
    let conn = builder.serve_connection(io, service);
    tokio::pin!(conn);
    let mut closing = false;
    if *close.borrow() {
        closing = true;
        conn.as_mut().graceful_shutdown();
    }
    let counters = &app.counters.conn;
    loop {
        let deadline = activity.deadline(&limits);
        tokio::select! {
            served = conn.as_mut() => {
                if let Err(e) = served {
                    tracing::debug!("a connection ended with {e}");
                }
                break;
            }
            () = until(deadline.map(|(at, _)| at)) => {
                let still = activity.deadline(&limits);
                match still {
                    Some((at, Expired::Idle)) if at <= Instant::now() => {
                        Counters::bump(&counters.idle_timeouts);
                        break;
                    }
                    Some((at, Expired::Head)) if at <= Instant::now() => {
                        Counters::bump(&counters.header_timeouts);
                        break;
                    }
                    _ => {}
                }
            }
            () = activity.changed.notified() => {}
            _ = close.changed(), if !closing => {
                closing = true;
                conn.as_mut().graceful_shutdown();
            }
        }
    }
    counters.open.fetch_sub(1, Ordering::Relaxed);
    drop(permit);
}

async fn until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_refusal_is_a_complete_http_answer() {
        let answer = refusal_answer();
        let (head, body) = answer.split_once("\r\n\r\n").expect("a head");
        assert!(head.starts_with("HTTP/1.1 503 "));
        assert!(head.contains(&format!("content-length: {}", body.len())));
        assert!(serde_json::from_str::<serde_json::Value>(body).is_ok());
    }
}
