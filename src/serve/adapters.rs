//! Adapters: who sent a delivery, checked before anything else is done with its body, and what it
//! is (event identity, tenant, scope). Signatures are HMAC-SHA256, compared in constant time.
//!
//! The generic adapter's signature (spec/ingress.md, "The generic signature") covers a timestamp,
//! the delivery id, tenant, scope and body, so a captured request cannot be re-sent under another
//! identity, tenant or scope, nor later than the route's replay window.

use super::config::{AdapterKind, RouteTable};
use axum::http::HeaderMap;
use hmac::{Hmac, Mac};
use serde_json::Value;
use sha2::Sha256;

/// The installation a delivery belongs to when its sender names none.
pub const DEFAULT_INSTALLATION: &str = "default";
/// The longest event identity accepted (a header or a body field); also bounds a generic tenant.
const MAX_IDENTITY_BYTES: usize = 256;
/// The longest generic scope header accepted (it only ever becomes a bounded task-name fragment).
const MAX_SCOPE_BYTES: usize = 1024;
/// The first line of the generic signed string: names the scheme, so a later one cannot be
/// confused with it.
pub const GENERIC_SCHEME: &str = "tollgate-v1";
/// At most this many comma-separated elements in `X-Tollgate-Signature` (`t` and a few `v1`).
const MAX_SIGNATURE_ELEMENTS: usize = 8;

/// How a route checks the freshness and form of a signature.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    /// A timestamp at most this far behind the clock is accepted.
    pub replay_window_secs: u64,
    /// A timestamp at most this far ahead of the clock is accepted.
    pub clock_skew_secs: u64,
    /// Generic only: the old body-only `sha256=` signature is accepted too.
    pub legacy_signature: bool,
}

impl Policy {
    pub fn of(route: &RouteTable) -> Policy {
        Policy {
            replay_window_secs: route.replay_window_secs(),
            clock_skew_secs: route.clock_skew_secs(),
            legacy_signature: route.legacy_signature,
        }
    }

    /// `timestamp` is within the window: not older than the replay window, not further ahead
    /// than the skew tolerance.
    pub fn fresh(&self, timestamp_secs: u64, now_secs: u64) -> bool {
        if timestamp_secs <= now_secs {
            now_secs - timestamp_secs <= self.replay_window_secs
        } else {
            timestamp_secs - now_secs <= self.clock_skew_secs
        }
    }
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            replay_window_secs: 5 * 60,
            clock_skew_secs: 60,
            legacy_signature: false,
        }
    }
}

/// How a sender treats an overload answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// The sender retries on 503 (generic, slack-events).
    Retried,
    /// The sender does not retry by itself (github): a refusal is answered 503 and recorded for a
    /// manual redelivery.
    Recorded,
    /// A person's invocation that is never redelivered (slack-commands): a visible busy text.
    Interactive,
}

pub fn shape(kind: AdapterKind) -> Shape {
    match kind {
        AdapterKind::Generic | AdapterKind::SlackEvents => Shape::Retried,
        AdapterKind::Github => Shape::Recorded,
        AdapterKind::SlackCommands => Shape::Interactive,
    }
}

/// A verified delivery.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verified {
    /// The event identity as the sender gave it.
    pub identity: String,
    /// The installation half of the tenant.
    pub installation: String,
    pub scope: Option<String>,
    /// Slack's `url_verification`: answer the challenge; nothing is admitted.
    pub challenge: Option<String>,
    /// The sender's retry number, when it says this is a retry.
    pub retry: Option<String>,
    /// The platform's event name, when it gives one (github's `X-GitHub-Event`, Slack's
    /// `event.type`, a slash command's `command`).
    pub event: Option<String>,
    /// Verified by the generic adapter's legacy body-only signature (replayable).
    pub legacy: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("missing signature header {0}")]
    MissingSignature(&'static str),
    #[error("the signature does not match the request")]
    BadSignature,
    #[error("malformed signature header: {0}")]
    MalformedSignature(&'static str),
    #[error("a body-only `sha256=` signature is accepted only where the route sets legacy_signature = true; sign `t=<unix seconds>,v1=<hex>` (spec/ingress.md)")]
    LegacyRefused,
    #[error("the request timestamp is missing, malformed or outside the route's replay window")]
    StaleTimestamp,
    #[error("{0} is longer than {1} bytes")]
    TooLong(&'static str, usize),
    #[error("missing event identity ({0})")]
    MissingIdentity(&'static str),
    #[error("malformed body: {0}")]
    BadBody(String),
}

impl Refusal {
    /// 401 for anything about the sender, 400 for a verified sender's malformed delivery.
    pub fn status(&self) -> u16 {
        match self {
            Refusal::MissingSignature(_)
            | Refusal::BadSignature
            | Refusal::MalformedSignature(_)
            | Refusal::LegacyRefused
            | Refusal::StaleTimestamp => 401,
            Refusal::MissingIdentity(_) | Refusal::BadBody(_) | Refusal::TooLong(..) => 400,
        }
    }
}

/// A header's value as UTF-8 (HTTP allows bytes above 0x7f), without the spaces and tabs HTTP
/// allows around it (and nothing else: a non-breaking space is part of the value); `None` when
/// absent or empty.
fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get(name)
        .and_then(|v| std::str::from_utf8(v.as_bytes()).ok())
        .map(|v| v.trim_matches([' ', '\t']))
        .filter(|v| !v.is_empty())
}

/// Constant-time check of `hex_mac` against HMAC-SHA256(secret, parts...).
fn mac_matches(secret: &[u8], parts: &[&[u8]], hex_mac: &str) -> bool {
    let Ok(expected) = hex::decode(hex_mac) else {
        return false;
    };
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(secret) else {
        return false;
    };
    for part in parts {
        mac.update(part);
    }
    mac.verify_slice(&expected).is_ok()
}

/// `sha256=<hex>` as the generic and github adapters send it.
fn verify_sha256_header(
    headers: &HeaderMap,
    name: &'static str,
    secret: &[u8],
    body: &[u8],
) -> Result<(), Refusal> {
    let value = header(headers, name).ok_or(Refusal::MissingSignature(name))?;
    let hex_mac = value.strip_prefix("sha256=").ok_or(Refusal::BadSignature)?;
    if mac_matches(secret, &[body], hex_mac) {
        Ok(())
    } else {
        Err(Refusal::BadSignature)
    }
}

fn bounded_identity(id: &str, what: &'static str) -> Result<String, Refusal> {
    if id.is_empty() || id.len() > MAX_IDENTITY_BYTES {
        return Err(Refusal::MissingIdentity(what));
    }
    Ok(id.to_string())
}

/// Verifies the sender, then reads identity, tenant and scope. `now_secs`: wall clock, seconds.
pub fn verify(
    kind: AdapterKind,
    secret: &[u8],
    policy: &Policy,
    headers: &HeaderMap,
    body: &[u8],
    now_secs: u64,
) -> Result<Verified, Refusal> {
    match kind {
        AdapterKind::Generic => generic(secret, policy, headers, body, now_secs),
        AdapterKind::Github => github(secret, headers, body),
        AdapterKind::SlackEvents => slack_events(secret, policy, headers, body, now_secs),
        AdapterKind::SlackCommands => slack_commands(secret, policy, headers, body, now_secs),
    }
}

/// The string the generic `v1` signature is the HMAC-SHA256 of: the scheme name, the timestamp,
/// the delivery id, tenant and scope headers (as sent, trimmed; empty when absent), each ended by
/// `\n`, then the raw body. Header values cannot hold a line feed, so the split is unambiguous.
pub fn generic_signed_prefix(timestamp: &str, delivery: &str, tenant: &str, scope: &str) -> String {
    format!("{GENERIC_SCHEME}\n{timestamp}\n{delivery}\n{tenant}\n{scope}\n")
}

/// `t=<unix seconds>,v1=<hex>[,v1=<hex>...]`: the timestamp and the candidate MACs (several
/// while a secret is rotated). Unknown elements are ignored, for later schemes.
fn parse_generic_signature(value: &str) -> Result<(&str, Vec<&str>), Refusal> {
    let mut timestamp = None;
    let mut macs = Vec::new();
    for (i, element) in value.split(',').enumerate() {
        if i >= MAX_SIGNATURE_ELEMENTS {
            return Err(Refusal::MalformedSignature("too many elements"));
        }
        let Some((key, val)) = element.trim().split_once('=') else {
            return Err(Refusal::MalformedSignature("an element is not key=value"));
        };
        match key {
            "t" if timestamp.is_some() => {
                return Err(Refusal::MalformedSignature("more than one t="))
            }
            "t" => timestamp = Some(val),
            "v1" => macs.push(val),
            _ => {}
        }
    }
    let timestamp = timestamp.ok_or(Refusal::StaleTimestamp)?;
    if macs.is_empty() {
        return Err(Refusal::MalformedSignature("no v1="));
    }
    Ok((timestamp, macs))
}

fn generic(
    secret: &[u8],
    policy: &Policy,
    headers: &HeaderMap,
    body: &[u8],
    now_secs: u64,
) -> Result<Verified, Refusal> {
    const SIGNATURE: &str = "X-Tollgate-Signature";
    let value =
        header(headers, "x-tollgate-signature").ok_or(Refusal::MissingSignature(SIGNATURE))?;
    let id = header(headers, "x-tollgate-delivery").unwrap_or("");
    let tenant = header(headers, "x-tollgate-tenant").unwrap_or("");
    let scope = header(headers, "x-tollgate-scope").unwrap_or("");
    let legacy = value.starts_with("sha256=");
    if legacy {
        if !policy.legacy_signature {
            return Err(Refusal::LegacyRefused);
        }
        verify_sha256_header(headers, "x-tollgate-signature", secret, body)?;
    } else {
        let (timestamp, macs) = parse_generic_signature(value)?;
        let seconds = parse_timestamp(timestamp)?;
        if !policy.fresh(seconds, now_secs) {
            return Err(Refusal::StaleTimestamp);
        }
        let prefix = generic_signed_prefix(timestamp, id, tenant, scope);
        // Every candidate is checked (each in constant time), so timing says nothing about
        // which one matched.
        let matched = macs.iter().fold(false, |ok, mac| {
            mac_matches(secret, &[prefix.as_bytes(), body], mac) | ok
        });
        if !matched {
            return Err(Refusal::BadSignature);
        }
    }
    if id.is_empty() {
        return Err(Refusal::MissingIdentity("X-Tollgate-Delivery"));
    }
    if tenant.len() > MAX_IDENTITY_BYTES {
        return Err(Refusal::TooLong("X-Tollgate-Tenant", MAX_IDENTITY_BYTES));
    }
    if scope.len() > MAX_SCOPE_BYTES {
        return Err(Refusal::TooLong("X-Tollgate-Scope", MAX_SCOPE_BYTES));
    }
    Ok(Verified {
        identity: bounded_identity(id, "X-Tollgate-Delivery")?,
        installation: if tenant.is_empty() {
            DEFAULT_INSTALLATION.to_string()
        } else {
            tenant.to_string()
        },
        scope: (!scope.is_empty()).then(|| scope.to_string()),
        challenge: None,
        retry: header(headers, "x-tollgate-retry").map(str::to_string),
        event: None,
        legacy,
    })
}

/// Unix seconds: ASCII digits only, at most 19 of them (no sign, no space, no overflow).
fn parse_timestamp(text: &str) -> Result<u64, Refusal> {
    if text.is_empty() || text.len() > 19 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(Refusal::StaleTimestamp);
    }
    text.parse().map_err(|_| Refusal::StaleTimestamp)
}

/// The payload as JSON for trigger rules and route environment: the JSON body of generic,
/// github and slack-events (anything else: null, which no pointer matches); slack-commands'
/// form fields as an object of texts, with the interactivity `payload` field parsed.
pub fn payload_view(kind: AdapterKind, body: &[u8]) -> Value {
    match kind {
        AdapterKind::SlackCommands => {
            let mut map = serde_json::Map::new();
            for (key, value) in form_urlencoded::parse(body) {
                let value = if key == "payload" {
                    serde_json::from_str(&value).unwrap_or(Value::String(value.into_owned()))
                } else {
                    Value::String(value.into_owned())
                };
                map.insert(key.into_owned(), value);
            }
            Value::Object(map)
        }
        _ => serde_json::from_slice(body).unwrap_or(Value::Null),
    }
}

fn github(secret: &[u8], headers: &HeaderMap, body: &[u8]) -> Result<Verified, Refusal> {
    verify_sha256_header(headers, "x-hub-signature-256", secret, body)?;
    let id = header(headers, "x-github-delivery")
        .ok_or(Refusal::MissingIdentity("X-GitHub-Delivery"))?;
    // GitHub sends a JSON object: anything else is an unreadable body (400), never a turn.
    let payload: Value =
        serde_json::from_slice(body).map_err(|e| Refusal::BadBody(e.to_string()))?;
    if !payload.is_object() {
        return Err(Refusal::BadBody("the body is not a JSON object".into()));
    }
    let installation = header(headers, "x-github-hook-installation-target-id")
        .map(str::to_string)
        .or_else(|| {
            payload["installation"]["id"]
                .as_u64()
                .map(|id| id.to_string())
        })
        .unwrap_or_else(|| DEFAULT_INSTALLATION.to_string());
    Ok(Verified {
        identity: bounded_identity(id, "X-GitHub-Delivery")?,
        installation,
        scope: payload["repository"]["full_name"]
            .as_str()
            .map(str::to_string),
        challenge: None,
        retry: None,
        event: header(headers, "x-github-event").map(str::to_string),
        legacy: false,
    })
}

/// Slack's `v0=<hex>` over `v0:<timestamp>:<body>`, within the route's window (five minutes).
fn verify_slack(
    secret: &[u8],
    policy: &Policy,
    headers: &HeaderMap,
    body: &[u8],
    now_secs: u64,
) -> Result<(), Refusal> {
    let signature = header(headers, "x-slack-signature")
        .ok_or(Refusal::MissingSignature("X-Slack-Signature"))?;
    let timestamp = header(headers, "x-slack-request-timestamp").ok_or(Refusal::StaleTimestamp)?;
    let seconds = parse_timestamp(timestamp)?;
    if !policy.fresh(seconds, now_secs) {
        return Err(Refusal::StaleTimestamp);
    }
    let hex_mac = signature.strip_prefix("v0=").ok_or(Refusal::BadSignature)?;
    let prefix = format!("v0:{timestamp}:");
    if mac_matches(secret, &[prefix.as_bytes(), body], hex_mac) {
        Ok(())
    } else {
        Err(Refusal::BadSignature)
    }
}

fn slack_events(
    secret: &[u8],
    policy: &Policy,
    headers: &HeaderMap,
    body: &[u8],
    now_secs: u64,
) -> Result<Verified, Refusal> {
    verify_slack(secret, policy, headers, body, now_secs)?;
    let payload: Value =
        serde_json::from_slice(body).map_err(|e| Refusal::BadBody(e.to_string()))?;
    let installation = payload["team_id"]
        .as_str()
        .unwrap_or(DEFAULT_INSTALLATION)
        .to_string();
    if payload["type"] == "url_verification" {
        let challenge = payload["challenge"]
            .as_str()
            .ok_or_else(|| Refusal::BadBody("url_verification without a challenge".into()))?;
        return Ok(Verified {
            identity: String::new(),
            installation,
            scope: None,
            challenge: Some(challenge.to_string()),
            retry: None,
            event: Some("url_verification".into()),
            legacy: false,
        });
    }
    let id = payload["event_id"]
        .as_str()
        .ok_or(Refusal::MissingIdentity("event_id"))?;
    Ok(Verified {
        identity: bounded_identity(id, "event_id")?,
        installation,
        scope: payload["event"]["channel"].as_str().map(str::to_string),
        challenge: None,
        retry: header(headers, "x-slack-retry-num").map(|n| {
            match header(headers, "x-slack-retry-reason") {
                Some(reason) => format!("{n} ({reason})"),
                None => n.to_string(),
            }
        }),
        event: payload["event"]["type"].as_str().map(str::to_string),
        legacy: false,
    })
}

fn slack_commands(
    secret: &[u8],
    policy: &Policy,
    headers: &HeaderMap,
    body: &[u8],
    now_secs: u64,
) -> Result<Verified, Refusal> {
    verify_slack(secret, policy, headers, body, now_secs)?;
    let mut trigger = None;
    let mut team = None;
    let mut channel = None;
    let mut command = None;
    for (key, value) in form_urlencoded::parse(body) {
        match key.as_ref() {
            "trigger_id" => trigger = Some(value.into_owned()),
            "team_id" => team = Some(value.into_owned()),
            "channel_id" => channel = Some(value.into_owned()),
            "command" => command = Some(value.into_owned()),
            // Interactivity (buttons, shortcuts, modals) sends its fields as JSON in `payload`.
            "payload" => {
                let payload: Value = serde_json::from_str(&value)
                    .map_err(|e| Refusal::BadBody(format!("payload: {e}")))?;
                let text = |v: &Value| v.as_str().map(str::to_string);
                trigger = trigger.or_else(|| text(&payload["trigger_id"]));
                team = team.or_else(|| text(&payload["team"]["id"]));
                channel = channel.or_else(|| text(&payload["channel"]["id"]));
                command = command.or_else(|| text(&payload["type"]));
            }
            _ => {}
        }
    }
    let trigger = trigger.ok_or(Refusal::MissingIdentity("trigger_id"))?;
    Ok(Verified {
        identity: bounded_identity(&trigger, "trigger_id")?,
        installation: team.unwrap_or_else(|| DEFAULT_INSTALLATION.to_string()),
        scope: channel,
        challenge: None,
        retry: None,
        event: command,
        legacy: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn sign(secret: &[u8], parts: &[&[u8]]) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("key");
        for p in parts {
            mac.update(p);
        }
        hex::encode(mac.finalize().into_bytes())
    }

    fn headers(pairs: &[(&'static str, String)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.insert(*k, HeaderValue::from_str(v).expect("header"));
        }
        map
    }

    /// Headers of a generic request signed with the v1 scheme at `t`.
    fn generic_signed(
        secret: &[u8],
        t: u64,
        id: &str,
        tenant: &str,
        scope: &str,
        body: &[u8],
    ) -> HeaderMap {
        let prefix = generic_signed_prefix(&t.to_string(), id, tenant, scope);
        let sig = format!("t={t},v1={}", sign(secret, &[prefix.as_bytes(), body]));
        let mut pairs = vec![("x-tollgate-signature", sig)];
        for (name, value) in [
            ("x-tollgate-delivery", id),
            ("x-tollgate-tenant", tenant),
            ("x-tollgate-scope", scope),
        ] {
            if !value.is_empty() {
                pairs.push((name, value.to_string()));
            }
        }
        headers(&pairs)
    }

    fn generic(secret: &[u8], h: &HeaderMap, body: &[u8], now: u64) -> Result<Verified, Refusal> {
        verify(
            AdapterKind::Generic,
            secret,
            &Policy::default(),
            h,
            body,
            now,
        )
    }

    #[test]
    fn generic_accepts_a_good_signature_and_refuses_a_bad_or_missing_one() {
        let body = b"{\"x\":1}";
        let h = generic_signed(b"s3", 1000, "d-1", "acme", "", body);
        let v = generic(b"s3", &h, body, 1000).expect("verified");
        assert_eq!(
            (
                v.identity.as_str(),
                v.installation.as_str(),
                v.scope.as_deref()
            ),
            ("d-1", "acme", None)
        );
        assert_eq!(
            generic(b"other", &h, body, 1000),
            Err(Refusal::BadSignature)
        );
        let h = headers(&[("x-tollgate-delivery", "d-1".into())]);
        assert_eq!(
            generic(b"s3", &h, body, 1000).map_err(|e| e.status()),
            Err(401)
        );
    }

    /// The replay of issue 11: one captured body + signature under another delivery id, tenant
    /// or scope no longer verifies.
    #[test]
    fn a_generic_signature_binds_delivery_tenant_and_scope() {
        let body = b"{}";
        let captured = generic_signed(b"k", 1000, "d-1", "acme", "main", body);
        let signature = captured["x-tollgate-signature"].clone();
        for (name, value) in [
            ("x-tollgate-delivery", "d-2"),
            ("x-tollgate-tenant", "globex"),
            ("x-tollgate-scope", "other"),
        ] {
            let mut forged = captured.clone();
            forged.insert(name, HeaderValue::from_static(value));
            assert_eq!(forged["x-tollgate-signature"], signature);
            assert_eq!(
                generic(b"k", &forged, body, 1000),
                Err(Refusal::BadSignature),
                "{name}"
            );
        }
        let mut dropped = captured.clone();
        dropped.remove("x-tollgate-tenant");
        assert_eq!(
            generic(b"k", &dropped, body, 1000),
            Err(Refusal::BadSignature)
        );
        assert_eq!(
            generic(b"k", &captured, b"{} ", 1000),
            Err(Refusal::BadSignature)
        );
    }

    #[test]
    fn a_generic_timestamp_outside_the_window_is_refused() {
        let body = b"{}";
        let h = generic_signed(b"k", 10_000, "d", "", "", body);
        let policy = Policy::default();
        let at = |now| verify(AdapterKind::Generic, b"k", &policy, &h, body, now).map(|_| ());
        assert_eq!(at(10_000 + 300), Ok(()));
        assert_eq!(at(10_000 + 301), Err(Refusal::StaleTimestamp));
        assert_eq!(at(10_000 - 60), Ok(()));
        assert_eq!(at(10_000 - 61), Err(Refusal::StaleTimestamp));
        let strict = Policy {
            replay_window_secs: 10,
            clock_skew_secs: 0,
            legacy_signature: false,
        };
        let at = |now| verify(AdapterKind::Generic, b"k", &strict, &h, body, now).map(|_| ());
        assert_eq!(at(10_011), Err(Refusal::StaleTimestamp));
        assert_eq!(at(9_999), Err(Refusal::StaleTimestamp));
        assert_eq!(at(10_010), Ok(()));
    }

    #[test]
    fn the_legacy_body_only_signature_needs_the_route_to_allow_it() {
        let body = b"{}";
        let h = headers(&[
            (
                "x-tollgate-signature",
                format!("sha256={}", sign(b"k", &[body])),
            ),
            ("x-tollgate-delivery", "d".into()),
        ]);
        assert_eq!(generic(b"k", &h, body, 0), Err(Refusal::LegacyRefused));
        let legacy = Policy {
            legacy_signature: true,
            ..Policy::default()
        };
        let v = verify(AdapterKind::Generic, b"k", &legacy, &h, body, 0).expect("legacy");
        assert!(v.legacy);
    }

    #[test]
    fn a_rotated_secret_may_send_two_v1_values() {
        let body = b"{}";
        let prefix = generic_signed_prefix("5", "d", "", "");
        let new = sign(b"new", &[prefix.as_bytes(), body]);
        let old = sign(b"old", &[prefix.as_bytes(), body]);
        let h = headers(&[
            ("x-tollgate-signature", format!("t=5,v1={old},v1={new}")),
            ("x-tollgate-delivery", "d".into()),
        ]);
        assert!(generic(b"new", &h, body, 5).is_ok());
        assert!(generic(b"old", &h, body, 5).is_ok());
        assert_eq!(generic(b"third", &h, body, 5), Err(Refusal::BadSignature));
    }

    #[test]
    fn slack_refuses_a_stale_timestamp_even_with_a_valid_signature() {
        let body = br#"{"event_id":"Ev1","team_id":"T1","type":"event_callback"}"#;
        let ts = "1000";
        let sig = format!("v0={}", sign(b"k", &[b"v0:1000:", body]));
        let h = headers(&[
            ("x-slack-signature", sig),
            ("x-slack-request-timestamp", ts.into()),
        ]);
        assert!(verify(
            AdapterKind::SlackEvents,
            b"k",
            &Policy::default(),
            &h,
            body,
            1000 + 60
        )
        .is_ok());
        assert_eq!(
            verify(
                AdapterKind::SlackEvents,
                b"k",
                &Policy::default(),
                &h,
                body,
                1000 + 301
            ),
            Err(Refusal::StaleTimestamp)
        );
    }

    #[test]
    fn slack_interactivity_payloads_give_their_trigger_team_and_channel() {
        let json = r#"{"type":"block_actions","trigger_id":"tr-7","team":{"id":"T7"},"channel":{"id":"C7"}}"#;
        let body: String = form_urlencoded::Serializer::new(String::new())
            .append_pair("payload", json)
            .finish();
        let sig = format!("v0={}", sign(b"k", &[b"v0:50:", body.as_bytes()]));
        let h = headers(&[
            ("x-slack-signature", sig),
            ("x-slack-request-timestamp", "50".into()),
        ]);
        let v = verify(
            AdapterKind::SlackCommands,
            b"k",
            &Policy::default(),
            &h,
            body.as_bytes(),
            50,
        )
        .expect("ok");
        assert_eq!(
            (
                v.identity.as_str(),
                v.installation.as_str(),
                v.scope.as_deref()
            ),
            ("tr-7", "T7", Some("C7"))
        );
        assert_eq!(v.event.as_deref(), Some("block_actions"));
    }

    #[test]
    fn slack_url_verification_is_answered_with_its_challenge() {
        let body = br#"{"type":"url_verification","challenge":"abc"}"#;
        let sig = format!("v0={}", sign(b"k", &[b"v0:50:", body]));
        let h = headers(&[
            ("x-slack-signature", sig),
            ("x-slack-request-timestamp", "50".into()),
        ]);
        let v = verify(
            AdapterKind::SlackEvents,
            b"k",
            &Policy::default(),
            &h,
            body,
            50,
        )
        .expect("verified");
        assert_eq!(v.challenge.as_deref(), Some("abc"));
    }

    /// Issue 31, point 9: a GitHub delivery with a valid signature over a body that is not a
    /// JSON object is an unreadable body (400), not a turn of the default scope.
    #[test]
    fn a_signed_github_body_that_is_not_a_json_object_is_refused_400() {
        for body in [&b"not json"[..], b"", b"[1,2]", b"\"text\"", b"{\"a\":"] {
            let h = headers(&[
                (
                    "x-hub-signature-256",
                    format!("sha256={}", sign(b"k", &[body])),
                ),
                ("x-github-delivery", "gh-1".into()),
                ("x-github-event", "push".into()),
            ]);
            let answer = verify(AdapterKind::Github, b"k", &Policy::default(), &h, body, 0);
            assert_eq!(
                answer.as_ref().map_err(Refusal::status),
                Err(400),
                "{:?}: {answer:?}",
                String::from_utf8_lossy(body)
            );
        }
    }

    mod fuzz {
        //! Arbitrary headers and bodies never panic any adapter; a validly signed request always
        //! verifies and gives back what was signed; a signed request of arbitrary headers (any
        //! bytes HTTP allows in a value) and body gets a well-formed answer from every adapter.
        use super::*;
        use proptest::prelude::*;

        const KINDS: [AdapterKind; 4] = [
            AdapterKind::Generic,
            AdapterKind::Github,
            AdapterKind::SlackEvents,
            AdapterKind::SlackCommands,
        ];
        const NAMES: [&str; 10] = [
            "x-tollgate-signature",
            "x-tollgate-delivery",
            "x-tollgate-tenant",
            "x-tollgate-scope",
            "x-hub-signature-256",
            "x-github-delivery",
            "x-github-event",
            "x-github-hook-installation-target-id",
            "x-slack-signature",
            "x-slack-request-timestamp",
        ];

        /// A header value: printable text, often shaped like a signature.
        fn value() -> impl Strategy<Value = String> {
            prop_oneof![
                "[ -~]{0,40}",
                "t=[0-9]{0,12},v1=[0-9a-f]{0,64}",
                "(sha256|v0)=[0-9a-f]{0,64}",
                "[0-9]{0,20}",
                "(t=|v1=|,|=|[0-9a-f]){0,30}",
            ]
        }

        fn header_map(pairs: &[(usize, String)]) -> HeaderMap {
            let mut map = HeaderMap::new();
            for (i, v) in pairs {
                if let Ok(v) = HeaderValue::from_str(v) {
                    map.insert(NAMES[i % NAMES.len()], v);
                }
            }
            map
        }

        /// Any header value HTTP allows (visible ASCII, obs-text bytes, spaces and tabs), or a
        /// near-signature.
        fn raw_value() -> impl Strategy<Value = HeaderValue> {
            prop_oneof![
                proptest::collection::vec(any::<u8>(), 0..40),
                value().prop_map(String::into_bytes),
            ]
            .prop_map(|bytes| {
                HeaderValue::from_bytes(&bytes).unwrap_or_else(|_| HeaderValue::from_static("x"))
            })
        }

        /// A verified delivery as the handler uses it: an identity (or a challenge) within its
        /// bound, an installation, a scope within its bound; a refusal is 400 or 401.
        fn well_formed(
            kind: AdapterKind,
            result: &Result<Verified, Refusal>,
            body: &[u8],
        ) -> Result<(), TestCaseError> {
            match result {
                Ok(v) => {
                    prop_assert!(
                        (!v.identity.is_empty() && v.identity.len() <= MAX_IDENTITY_BYTES)
                            || v.challenge.is_some()
                    );
                    prop_assert!(!v.installation.is_empty());
                    if kind == AdapterKind::Generic {
                        prop_assert!(v.installation.len() <= MAX_IDENTITY_BYTES);
                        prop_assert!(v.scope.as_ref().is_none_or(|s| s.len() <= MAX_SCOPE_BYTES));
                    }
                    if kind == AdapterKind::Github {
                        // Issue 31, point 9: only a JSON object becomes a turn.
                        let json = serde_json::from_slice::<Value>(body);
                        prop_assert!(json.is_ok_and(|v| v.is_object()));
                    }
                }
                Err(refusal) => prop_assert!(matches!(refusal.status(), 400 | 401)),
            }
            Ok(())
        }

        fn body() -> impl Strategy<Value = Vec<u8>> {
            prop_oneof![
                proptest::collection::vec(any::<u8>(), 0..200),
                "[ -~]{0,200}".prop_map(String::into_bytes),
                Just(br#"{"type":"url_verification","challenge":"c"}"#.to_vec()),
                Just(
                    br#"{"event_id":"E","team_id":"T","event":{"type":"m","channel":"C"}}"#
                        .to_vec()
                ),
                Just(b"payload=%7B%22trigger_id%22%3A1%7D&team_id=T".to_vec()),
            ]
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(512))]

            #[test]
            fn arbitrary_requests_never_panic(
                kind in 0..4usize,
                pairs in proptest::collection::vec((0..NAMES.len(), value()), 0..8),
                body in body(),
                now in any::<u64>(),
                window in any::<u64>(),
                skew in any::<u64>(),
                legacy in any::<bool>(),
            ) {
                let policy = Policy { replay_window_secs: window, clock_skew_secs: skew, legacy_signature: legacy };
                let h = header_map(&pairs);
                let result = verify(KINDS[kind], b"k", &policy, &h, &body, now);
                well_formed(KINDS[kind], &result, &body)?;
                // Unsigned input never verifies (the only secret is "k" and nothing signed it).
                if let Ok(v) = result {
                    prop_assert!(!v.identity.is_empty() || v.challenge.is_some());
                }
                let _ = payload_view(KINDS[kind], &body);
            }

            /// Every adapter, signed correctly over an arbitrary body, with arbitrary other
            /// headers (any bytes HTTP allows): a well-formed answer, never a panic.
            #[test]
            fn signed_requests_of_arbitrary_headers_and_bodies_get_a_well_formed_answer(
                kind in 0..4usize,
                pairs in proptest::collection::vec((0..NAMES.len(), raw_value()), 0..8),
                body in body(),
                t in 1_000u64..4_000_000_000,
                id in proptest::collection::vec(any::<u8>(), 0..300),
            ) {
                let kind = KINDS[kind];
                let mut h = HeaderMap::new();
                for (i, v) in &pairs {
                    h.insert(NAMES[i % NAMES.len()], v.clone());
                }
                let id = HeaderValue::from_bytes(&id).unwrap_or_else(|_| HeaderValue::from_static("d"));
                let ts = t.to_string();
                match kind {
                    AdapterKind::Github => {
                        h.insert("x-hub-signature-256", HeaderValue::from_str(&format!("sha256={}", sign(b"k", &[&body]))).map_err(|e| TestCaseError::fail(e.to_string()))?);
                        h.insert("x-github-delivery", id);
                    }
                    AdapterKind::Generic => {
                        h.insert("x-tollgate-delivery", id);
                        let text = |name: &str| header(&h, name).unwrap_or("").to_string();
                        let prefix = generic_signed_prefix(&ts, &text("x-tollgate-delivery"), &text("x-tollgate-tenant"), &text("x-tollgate-scope"));
                        let sig = format!("t={ts},v1={}", sign(b"k", &[prefix.as_bytes(), &body]));
                        h.insert("x-tollgate-signature", HeaderValue::from_str(&sig).map_err(|e| TestCaseError::fail(e.to_string()))?);
                    }
                    AdapterKind::SlackEvents | AdapterKind::SlackCommands => {
                        let base = format!("v0:{ts}:");
                        h.insert("x-slack-signature", HeaderValue::from_str(&format!("v0={}", sign(b"k", &[base.as_bytes(), &body]))).map_err(|e| TestCaseError::fail(e.to_string()))?);
                        h.insert("x-slack-request-timestamp", HeaderValue::from_str(&ts).map_err(|e| TestCaseError::fail(e.to_string()))?);
                    }
                }
                let result = verify(kind, b"k", &Policy::default(), &h, &body, t);
                // Signed correctly: never refused as unsigned (a body or identity may be bad).
                if let Err(refusal) = &result {
                    prop_assert_eq!(refusal.status(), 400, "{:?}", refusal);
                }
                well_formed(kind, &result, &body)?;
                let _ = payload_view(kind, &body);
            }

            #[test]
            fn a_signed_generic_request_verifies_with_what_was_signed(
                secret in proptest::collection::vec(any::<u8>(), 1..64),
                id in "[!-~][ -~]{0,60}[!-~]",
                tenant in "([!-~][ -~]{0,30}[!-~])?",
                scope in "([!-~]|[\u{80}-\u{10ffff}]){0,50}",
                body in proptest::collection::vec(any::<u8>(), 0..300),
                t in 0u64..4_000_000_000,
                age in -60i64..=300,
            ) {
                let h = generic_signed(&secret, t, &id, &tenant, &scope, &body);
                let now = t.saturating_add_signed(age);
                let v = verify(AdapterKind::Generic, &secret, &Policy::default(), &h, &body, now);
                let v = v.map_err(|e| TestCaseError::fail(e.to_string()))?;
                prop_assert_eq!(v.identity, id);
                let expected_tenant = if tenant.is_empty() { DEFAULT_INSTALLATION.to_string() } else { tenant };
                prop_assert_eq!(v.installation, expected_tenant);
                prop_assert_eq!(v.scope.unwrap_or_default(), scope);
            }

            #[test]
            fn signed_github_and_slack_requests_verify(
                secret in proptest::collection::vec(any::<u8>(), 1..64),
                id in "[A-Za-z0-9-]{1,40}",
                repo in "[ -~]{0,120}",
                event in "[a-z_]{1,20}",
                t in 1_000u64..4_000_000_000,
            ) {
                let body = serde_json::to_vec(&serde_json::json!({
                    "repository": {"full_name": repo},
                    "event_id": id, "team_id": "T1",
                    "event": {"type": event, "channel": repo},
                })).map_err(|e| TestCaseError::fail(e.to_string()))?;
                let gh = headers(&[
                    ("x-hub-signature-256", format!("sha256={}", sign(&secret, &[&body]))),
                    ("x-github-delivery", id.clone()),
                    ("x-github-event", event.clone()),
                ]);
                let v = verify(AdapterKind::Github, &secret, &Policy::default(), &gh, &body, t)
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                prop_assert_eq!(v.scope.as_deref(), Some(repo.as_str()));
                prop_assert_eq!(v.event.as_deref(), Some(event.as_str()));
                let base = format!("v0:{t}:");
                let slack = headers(&[
                    ("x-slack-signature", format!("v0={}", sign(&secret, &[base.as_bytes(), &body]))),
                    ("x-slack-request-timestamp", t.to_string()),
                ]);
                let v = verify(AdapterKind::SlackEvents, &secret, &Policy::default(), &slack, &body, t)
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                prop_assert_eq!(v.identity, id.clone());
                prop_assert_eq!(v.event.as_deref(), Some(event.as_str()));
                let form = form_urlencoded::Serializer::new(String::new())
                    .append_pair("trigger_id", &id)
                    .append_pair("team_id", &repo)
                    .append_pair("command", &event)
                    .finish();
                let slack = headers(&[
                    ("x-slack-signature", format!("v0={}", sign(&secret, &[base.as_bytes(), form.as_bytes()]))),
                    ("x-slack-request-timestamp", t.to_string()),
                ]);
                let v = verify(AdapterKind::SlackCommands, &secret, &Policy::default(), &slack, form.as_bytes(), t)
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                prop_assert_eq!(v.identity, id);
                let view = payload_view(AdapterKind::SlackCommands, form.as_bytes());
                prop_assert_eq!(view["command"].as_str(), Some(event.as_str()));
            }
        }
    }
}
