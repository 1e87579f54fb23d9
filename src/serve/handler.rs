//! One delivery, in the order spec/ingress.md fixes: route, body limit, verify the sender, admit
//! and mark (the gate), make the turn durable, acknowledge; the watcher settles it later.

use super::adapters::{self, Shape, Verified};
use super::config::DispatchMode;
use super::delivery::{dedupe_key, legacy_dedupe_key, AcceptQueue, Committed, Pending};
use super::events::{Event, EventLog};
use super::metrics::{self, Counters};
use super::refused::RefusedDelivery;
use super::settings::{Route, Settings};
use super::state::ServeState;
use super::watcher::{Watched, Watcher};
use crate::config::Config;
use crate::gate::{Gate, GateDecision, Permit};
use crate::home::Home;
use crate::protocol::admission::{
    delivery_outcome, Deadline, DedupeKeys, Dispatch, EventIdentity, RejectReason, Tenant, TurnEnd,
};
use crate::protocol::slots::sections::Placement;
use crate::protocol::slots::ProcessIdentity;
use crate::sync::atomic::{AtomicUsize, Ordering};
use crate::sync::{Arc, Mutex};
use crate::tasks::{self, DeliveryMeta};
use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// What a refused sender is told to wait before retrying, in seconds.
pub const RETRY_AFTER_SECS: u64 = 5;

/// Everything a request needs; shared by every request of one `serve`.
pub struct App {
    pub settings: Settings,
    pub gate: Gate,
    pub watcher: Arc<Watcher>,
    pub events: Arc<EventLog>,
    /// The dedupe marks, refused deliveries and hand-off list (tables of `tollgate.db`).
    pub serve_state: ServeState,
    /// The group committer's queue (spec/ingress.md, "Group commit").
    pub accept: AcceptQueue,
    pub counters: Counters,
    pub home: Home,
    pub config: Config,
    pub me: ProcessIdentity,
    pub cwd: PathBuf,
    /// The environment turns run with: serve's own (every variable, whatever its bytes), without
    /// the routes' secrets nor any variable holding one.
    pub base_env: crate::argv::Env,
    /// Serialises this process's submits (and runner reaping, see the watcher).
    pub spawn_lock: Arc<Mutex<()>>,
    /// Admitted deliveries between the gate and the watcher (shutdown waits for them).
    pub dispatching: AtomicUsize,
    /// Starts parked rows by itself, and retries a runner that could not be spawned.
    pub starter: super::starter::Starter,
}

/// The most bytes of one payload field put into a turn's environment (`[route.env]`).
pub const MAX_ENV_VALUE_BYTES: usize = 32 * 1024;

fn answer(status: StatusCode, body: Value) -> Response {
    (status, axum::Json(body)).into_response()
}

fn retry_later(body: Value) -> Response {
    let mut response = answer(StatusCode::SERVICE_UNAVAILABLE, body);
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECS));
    response
}

pub async fn metrics(State(app): State<Arc<App>>) -> Response {
    let text = metrics::render(
        &app.gate.stats(),
        &app.counters,
        app.settings.limits.max_detached(),
    );
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}

/// The fallback handler: every path that is not `/metrics`.
pub async fn ingress(
    State(app): State<Arc<App>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let Some(route) = app.settings.routes.get(uri.path()).cloned() else {
        return answer(
            StatusCode::NOT_FOUND,
            json!({"error": format!("no route for {}", uri.path())}),
        );
    };
    if method != Method::POST {
        return answer(
            StatusCode::METHOD_NOT_ALLOWED,
            json!({"error": "deliveries are POSTed"}),
        );
    }
    let limit = app.settings.body_limit_bytes;
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let too_large = || {
        Counters::bump(&app.counters.too_large);
        record_too_large(&app, &route, &headers, limit);
        answer(
            StatusCode::PAYLOAD_TOO_LARGE,
            json!({"error": format!("the body is over the limit of {limit} bytes")}),
        )
    };
    if declared.is_some_and(|n| n > limit as u64) {
        return too_large();
    }
    let Ok(bytes) = axum::body::to_bytes(body, limit).await else {
        return too_large();
    };
    let now = tasks::now_millis();
    let adapter = route.adapter();
    let verified = match adapters::verify(
        adapter,
        &route.secret,
        &route.policy,
        &headers,
        &bytes,
        now / 1000,
    ) {
        Ok(verified) => verified,
        Err(refusal) => {
            Counters::bump(&app.counters.refused_senders);
            app.events.record(&Event {
                at_millis: now,
                kind: "decision",
                route: route.table.path.clone(),
                adapter: adapter.name().to_string(),
                outcome: "refused-sender".into(),
                reason: Some(refusal.to_string()),
                status: Some(refusal.status()),
                ..Event::default()
            });
            let status = StatusCode::from_u16(refusal.status()).unwrap_or(StatusCode::UNAUTHORIZED);
            return answer(status, json!({"error": refusal.to_string()}));
        }
    };
    if let Some(challenge) = verified.challenge {
        return answer(StatusCode::OK, json!({"challenge": challenge}));
    }
    if verified.legacy {
        tracing::warn!(
            route = %route.table.path,
            identity = %verified.identity,
            "accepted a legacy body-only signature: it can be replayed with another delivery id, tenant or scope; move the sender to t=,v1= (spec/ingress.md) and drop legacy_signature"
        );
    }
    let payload = if route.table.trigger.is_empty() && route.table.env.is_empty() {
        Value::Null
    } else {
        adapters::payload_view(adapter, &bytes)
    };
    if !route.table.triggered(verified.event.as_deref(), &payload) {
        // Verified, but no trigger rule wants it: nothing is admitted, marked or run.
        app.events.record(&Event {
            at_millis: now,
            kind: "decision",
            route: route.table.path.clone(),
            adapter: adapter.name().to_string(),
            tenant: verified.installation.clone(),
            identity: verified.identity.clone(),
            outcome: "ignored".into(),
            reason: Some(match &verified.event {
                Some(event) => format!("no trigger rule matches this {event} event"),
                None => "no trigger rule matches".to_string(),
            }),
            status: Some(200),
            ..Event::default()
        });
        let mut body = json!({"status": "ignored", "identity": verified.identity});
        if adapters::shape(adapter) == Shape::Interactive {
            body["response_type"] = json!("ephemeral");
            body["text"] = json!("Not handled here: no rule of this route matches it.");
        }
        return answer(StatusCode::OK, body);
    }
    let tenant = Tenant::new(adapter.name(), verified.installation.clone());
    let identity = dedupe_key(
        &route.table.path,
        adapter.name(),
        &verified.installation,
        &verified.identity,
    );
    let legacy = EventIdentity(legacy_dedupe_key(
        adapter.name(),
        &verified.installation,
        &verified.identity,
    ));
    let dispatch = match route.dispatch() {
        DispatchMode::Deferred => Dispatch::Deferred,
        DispatchMode::Sync => Dispatch::Sync,
    };
    let base = Event {
        at_millis: now,
        kind: "decision",
        route: route.table.path.clone(),
        adapter: adapter.name().to_string(),
        tenant: verified.installation.clone(),
        identity: verified.identity.clone(),
        retry: verified.retry.clone(),
        // Kept on every line of the delivery, so the log shows who still signs the old way.
        reason: verified
            .legacy
            .then(|| "legacy body-only signature (replayable)".to_string()),
        ..Event::default()
    };
    let decision_event = |outcome: &str| decided(&base, outcome);
    // A mark an older instance left under the legacy key still makes this a duplicate: the
    // core's dedupe rule, given both identities.
    let keys = DedupeKeys {
        identity: &identity,
        legacy: Some(&legacy),
    };
    let decision = app.gate.deliver(&tenant, keys, dispatch, now);
    match decision {
        GateDecision::Rejected(reason) => {
            let mut event = decision_event("rejected");
            event.reason = Some(reason_name(reason).to_string());
            overloaded(&app, &route, &verified, reason, event)
        }
        GateDecision::Duplicate => {
            let mut event = decision_event("duplicate");
            event.status = Some(200);
            app.events.record(&event);
            let mut body = json!({"status": "duplicate", "identity": verified.identity});
            if adapters::shape(adapter) == Shape::Interactive {
                body = json!({"response_type": "ephemeral", "text": "Already received; it is being handled."});
            }
            answer(StatusCode::OK, body)
        }
        GateDecision::InFlight => {
            // The first delivery of this identity is not durable yet: acknowledging this one
            // would lose the event if that one is withdrawn or this serve dies now.
            let mut event = decision_event("in-flight");
            event.status = Some(503);
            app.events.record(&event);
            retry_later(json!({"status": "in_flight", "identity": verified.identity}))
        }
        GateDecision::Accepted(permit) => {
            // From here the delivery holds capacity: its dispatch runs in its own task, so a
            // client that goes away mid-request cannot cut it between the gate and the watcher.
            app.dispatching.fetch_add(1, Ordering::SeqCst);
            let task = tokio::spawn({
                let app = Arc::clone(&app);
                async move {
                    let response = accepted(
                        &app, &route, verified, bytes, payload, identity, permit, base,
                    )
                    .await;
                    app.dispatching.fetch_sub(1, Ordering::SeqCst);
                    response
                }
            });
            match task.await {
                Ok(response) => response,
                Err(e) => answer(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    json!({"error": format!("the dispatch task failed: {e}")}),
                ),
            }
        }
    }
}

fn decided(base: &Event, outcome: &str) -> Event {
    Event {
        outcome: outcome.to_string(),
        ..base.clone()
    }
}

fn reason_name(reason: RejectReason) -> &'static str {
    match reason {
        RejectReason::AtCapacity => "at_capacity",
        RejectReason::TenantAtCapacity => "tenant_at_capacity",
        RejectReason::ShuttingDown => "shutting_down",
    }
}

/// The overload answer of the adapter's shape; nothing was marked or acknowledged.
fn overloaded(
    app: &App,
    route: &Route,
    verified: &Verified,
    reason: RejectReason,
    mut event: Event,
) -> Response {
    let reason = reason_name(reason);
    match adapters::shape(route.adapter()) {
        Shape::Retried => {
            event.status = Some(503);
            app.events.record(&event);
            retry_later(json!({"status": "rejected", "reason": reason}))
        }
        Shape::Recorded => {
            record_refused(app, route, verified, event.at_millis, reason.to_string());
            event.status = Some(503);
            app.events.record(&event);
            retry_later(json!({
                "status": "rejected", "reason": reason,
                "note": "recorded as refused: `tollgate deliveries --refused` lists it for redelivery",
            }))
        }
        Shape::Interactive => {
            event.status = Some(200);
            app.events.record(&event);
            let what = verified.event.as_deref().unwrap_or("your command");
            answer(
                StatusCode::OK,
                json!({
                    "response_type": "ephemeral",
                    "text": format!("tollgate is busy and did not run {what}; please try again in a minute."),
                }),
            )
        }
    }
}

/// A GitHub delivery over `body_limit` cannot be verified (its body is not read), yet GitHub will
/// not send it again: it is listed as refused, its id marked unverified. Each line costs the
/// sender more than `body_limit` bytes of upload, so this cannot be used to fill the disk fast.
fn record_too_large(app: &App, route: &Route, headers: &HeaderMap, limit: usize) {
    if adapters::shape(route.adapter()) != Shape::Recorded {
        return;
    }
    let text = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(|v| v.chars().take(256).collect::<String>())
    };
    let Some(identity) = text("x-github-delivery") else {
        return;
    };
    let refused = RefusedDelivery {
        at_millis: tasks::now_millis(),
        route: route.table.path.clone(),
        adapter: route.adapter().name().to_string(),
        tenant: text("x-github-hook-installation-target-id").unwrap_or_default(),
        identity,
        event: text("x-github-event"),
        reason: format!(
            "body over the limit of {limit} bytes (unverified; raise [serve] body_limit)"
        ),
    };
    if let Err(e) = app.serve_state.record_refused(&refused) {
        tracing::error!("cannot record a refused delivery: {e}");
    }
}

/// A verified delivery of a sender that does not redeliver by itself (github) that is not
/// accepted, for whatever reason: appended to the refused list for a manual redelivery.
fn record_refused(app: &App, route: &Route, verified: &Verified, at_millis: u64, reason: String) {
    if adapters::shape(route.adapter()) != Shape::Recorded {
        return;
    }
    let refused = RefusedDelivery {
        at_millis,
        route: route.table.path.clone(),
        adapter: route.adapter().name().to_string(),
        tenant: verified.installation.clone(),
        identity: verified.identity.clone(),
        event: verified.event.clone(),
        reason,
    };
    if let Err(e) = app.serve_state.record_refused(&refused) {
        tracing::error!("cannot record a refused delivery: {e}");
    }
}

/// Admitted and marked: make the turn durable, then acknowledge (deferred) or wait for it (sync).
#[allow(clippy::too_many_arguments)]
async fn accepted(
    app: &Arc<App>,
    route: &Arc<Route>,
    verified: Verified,
    body: axum::body::Bytes,
    payload: Value,
    identity: EventIdentity,
    permit: Permit,
    base: Event,
) -> Response {
    let now = base.at_millis;
    let decision_event = |outcome: &str| decided(&base, outcome);
    let adapter = route.adapter();
    let meta = DeliveryMeta {
        id: crate::protocol::slots::SlotToken::generate()
            .as_uuid()
            .to_string(),
        adapter: adapter.name().to_string(),
        tenant: verified.installation.clone(),
        identity: verified.identity.clone(),
        admitted_at_millis: now,
        route: route.table.path.clone(),
    };
    let mut env = app.base_env.clone();
    env.extend(
        route_env(route, &payload)
            .into_iter()
            .map(|(name, value)| (name.into(), value.into())),
    );
    if let Some(event) = &verified.event {
        env.insert("TOLLGATE_EVENT_TYPE".into(), event.clone().into());
    }
    env.insert("TOLLGATE_DELIVERY".into(), meta.id.clone().into());
    env.insert("TOLLGATE_EVENT_ID".into(), meta.identity.clone().into());
    env.insert("TOLLGATE_ADAPTER".into(), meta.adapter.clone().into());
    env.insert("TOLLGATE_TENANT".into(), meta.tenant.clone().into());
    // Everything that does not need the queue is prepared here, off the committer's thread.
    let pending = Pending::new(
        route,
        &app.cwd,
        meta.clone(),
        verified.scope.as_deref(),
        env,
        body.to_vec(),
        identity.clone(),
        now,
    );
    // Queued for the next group commit; answered once its batch committed (or failed).
    let committed = {
        let app = Arc::clone(app);
        tokio::task::spawn_blocking(move || {
            let ticket = app
                .accept
                .submit(pending, app.config.lock_timeout())
                .map_err(|e| e.to_string())?;
            ticket.wait().map_err(|e| e.to_string())
        })
        .await
    };
    let decided = match committed {
        Ok(Ok(Committed::Queued(decided))) => *decided,
        Ok(Ok(Committed::Duplicate)) => {
            // A live mark of this identity was already in the database: the event is durable
            // from an earlier delivery, so this one is a duplicate (nothing was queued).
            permit.made_durable(&identity);
            drop(permit);
            let mut event = decision_event("duplicate");
            event.status = Some(200);
            app.events.record(&event);
            return answer(
                StatusCode::OK,
                json!({"status": "duplicate", "identity": verified.identity}),
            );
        }
        Ok(Ok(Committed::Failed(error))) | Ok(Err(error)) => {
            return withdrawn(
                app,
                route,
                &verified,
                &identity,
                permit,
                error,
                decision_event,
            )
        }
        Err(join) => {
            return withdrawn(
                app,
                route,
                &verified,
                &identity,
                permit,
                join.to_string(),
                decision_event,
            )
        }
    };
    // The turn record holds the delivery (and the database its mark): a restart restores the
    // mark from there.
    permit.made_durable(&identity);
    let key = decided.key.clone();
    let mut event = decision_event("accepted");
    event.delivery = Some(meta.id.clone());
    event.task = Some(key.task.clone());
    event.turn = Some(key.turn);
    event.status = Some(200);
    app.events.record(&event);
    let body = json!({
        "status": "accepted",
        "delivery": meta.id,
        "identity": meta.identity,
        "task": key.task,
        "turn": key.turn,
        "placement": placement_name(&decided.placement),
    });
    let watched = |reply| Watched {
        permit,
        key: key.clone(),
        meta: meta.clone(),
        route: route.table.path.clone(),
        deadline: Deadline::new(now, app.settings.detach_timeout_millis),
        readopted: false,
        reply,
    };
    if let Placement::Dropped { .. } = decided.placement {
        // The task's `drop` strategy ended the turn at once: so does the delivery (the core's
        // turn-outcome rule names its outcome).
        let outcome = delivery_outcome(TurnEnd::Dropped, false);
        let watched = watched(None);
        let event = watched.event("outcome", outcome.to_string());
        if watched.permit.settle(outcome) {
            app.events.record(&event);
        }
        let mut body = body;
        body["outcome"] = json!(outcome.to_string());
        return interactive_or(route, body, &key);
    }
    match route.dispatch() {
        DispatchMode::Deferred => {
            match decided.placement {
                // Live and waiting in the queue as the batch left it: no need to read its record
                // again right after the answer.
                Placement::Park | Placement::Wait { .. } | Placement::Held { .. } => {
                    app.watcher.watch_queued(watched(None))
                }
                _ => app.watcher.watch(watched(None)),
            }
            interactive_or(route, body, &key)
        }
        DispatchMode::Sync => {
            let (tx, rx) = tokio::sync::oneshot::channel();
            app.watcher.watch(watched(Some(tx)));
            match rx.await {
                Ok(ended) => {
                    let mut body = body;
                    body["outcome"] = json!(ended.outcome.to_string());
                    body["exit_code"] = json!(ended.exit_code);
                    interactive_or(route, body, &key)
                }
                Err(_) => retry_later(json!({
                    "status": "handed-off-at-shutdown",
                    "delivery": meta.id, "task": key.task, "turn": key.turn,
                })),
            }
        }
    }
}

fn placement_name(placement: &Placement) -> &'static str {
    match placement {
        // The slot is reserved; the runner is spawned right after this answer.
        Placement::Spawn(_) => "starting",
        Placement::Park => "parked",
        Placement::Pending => "pending",
        Placement::Wait { .. } => "waiting",
        Placement::Held { .. } => "held",
        Placement::Dropped { .. } => "dropped",
        Placement::DependencyFailed { .. } => "dependency_failed",
    }
}

/// Slack's slash commands show `text`; everyone else gets the JSON as it is.
fn interactive_or(route: &Route, body: Value, key: &crate::protocol::slots::TurnKey) -> Response {
    if adapters::shape(route.adapter()) == Shape::Interactive {
        let mut slack = json!({
            "response_type": "ephemeral",
            "text": format!("Accepted: task {} turn {}.", key.task, key.turn),
        });
        if let (Some(out), Some(map)) = (slack.as_object_mut(), body.as_object()) {
            for (k, v) in map {
                out.insert(k.clone(), v.clone());
            }
        }
        return answer(StatusCode::OK, slack);
    }
    answer(StatusCode::OK, body)
}

/// The turn could not be created: nothing was acknowledged, so the mark is withdrawn and the
/// sender told to retry (or, for a person, told it did not run).
fn withdrawn(
    app: &App,
    route: &Route,
    verified: &Verified,
    identity: &EventIdentity,
    permit: Permit,
    error: String,
    decision_event: impl Fn(&str) -> Event,
) -> Response {
    Counters::bump(&app.counters.dispatch_errors);
    tracing::error!("cannot create the turn of a delivery: {error}");
    permit.withdraw(identity);
    record_refused(
        app,
        route,
        verified,
        tasks::now_millis(),
        format!("withdrawn: {error}"),
    );
    let mut event = decision_event("withdrawn");
    event.reason = Some(error.clone());
    if adapters::shape(route.adapter()) == Shape::Interactive {
        event.status = Some(200);
        app.events.record(&event);
        return answer(
            StatusCode::OK,
            json!({"response_type": "ephemeral", "text": format!("tollgate could not start {}; please try again.", verified.event.as_deref().unwrap_or("your command"))}),
        );
    }
    event.status = Some(503);
    app.events.record(&event);
    retry_later(json!({"status": "withdrawn", "error": error}))
}

/// The `[route.env]` variables: each payload field as text (strings as they are, other values as
/// compact JSON); a missing field is left unset, and so is one over [`MAX_ENV_VALUE_BYTES`] or
/// holding a NUL (no environment can carry it), with a warning.
fn route_env(route: &Route, payload: &Value) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    for (name, pointer) in &route.table.env {
        let Some(value) = payload.pointer(pointer) else {
            continue;
        };
        let text = match value {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        if text.len() > MAX_ENV_VALUE_BYTES || text.contains('\0') {
            tracing::warn!(
                route = %route.table.path,
                "{name} from {pointer} is over {MAX_ENV_VALUE_BYTES} bytes or holds a NUL: left unset"
            );
            continue;
        }
        env.insert(name.clone(), text);
    }
    env
}
