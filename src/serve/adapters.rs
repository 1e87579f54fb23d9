//! Adapters: who sent a delivery, checked before anything else is done with its body, and what it
//! is (event identity, tenant, scope). Signatures are HMAC-SHA256, compared in constant time.

use super::config::AdapterKind;
use axum::http::HeaderMap;
use hmac::{Hmac, Mac};
use serde_json::Value;
use sha2::Sha256;

/// Slack refuses requests whose timestamp is further than this from now (replay window).
pub const SLACK_MAX_SKEW_SECS: u64 = 5 * 60;
/// The installation a delivery belongs to when its sender names none.
pub const DEFAULT_INSTALLATION: &str = "default";
/// The longest event identity accepted (a header or a body field).
const MAX_IDENTITY_BYTES: usize = 256;

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
    /// The platform's event name, when it gives one (github's `X-GitHub-Event`).
    pub event: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("missing signature header {0}")]
    MissingSignature(&'static str),
    #[error("the signature does not match the body")]
    BadSignature,
    #[error("the request timestamp is missing, malformed or more than five minutes from now")]
    StaleTimestamp,
    #[error("missing event identity ({0})")]
    MissingIdentity(&'static str),
    #[error("malformed body: {0}")]
    BadBody(String),
}

impl Refusal {
    /// 401 for anything about the sender, 400 for a verified sender's malformed delivery.
    pub fn status(&self) -> u16 {
        match self {
            Refusal::MissingSignature(_) | Refusal::BadSignature | Refusal::StaleTimestamp => 401,
            Refusal::MissingIdentity(_) | Refusal::BadBody(_) => 400,
        }
    }
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
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
    headers: &HeaderMap,
    body: &[u8],
    now_secs: u64,
) -> Result<Verified, Refusal> {
    match kind {
        AdapterKind::Generic => generic(secret, headers, body),
        AdapterKind::Github => github(secret, headers, body),
        AdapterKind::SlackEvents => slack_events(secret, headers, body, now_secs),
        AdapterKind::SlackCommands => slack_commands(secret, headers, body, now_secs),
    }
}

fn generic(secret: &[u8], headers: &HeaderMap, body: &[u8]) -> Result<Verified, Refusal> {
    verify_sha256_header(headers, "x-tollgate-signature", secret, body)?;
    let id = header(headers, "x-tollgate-delivery")
        .ok_or(Refusal::MissingIdentity("X-Tollgate-Delivery"))?;
    Ok(Verified {
        identity: bounded_identity(id, "X-Tollgate-Delivery")?,
        installation: header(headers, "x-tollgate-tenant")
            .unwrap_or(DEFAULT_INSTALLATION)
            .to_string(),
        scope: header(headers, "x-tollgate-scope").map(str::to_string),
        challenge: None,
        retry: header(headers, "x-tollgate-retry").map(str::to_string),
        event: None,
    })
}

fn github(secret: &[u8], headers: &HeaderMap, body: &[u8]) -> Result<Verified, Refusal> {
    verify_sha256_header(headers, "x-hub-signature-256", secret, body)?;
    let id = header(headers, "x-github-delivery")
        .ok_or(Refusal::MissingIdentity("X-GitHub-Delivery"))?;
    let payload: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
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
    })
}

/// Slack's `v0=<hex>` over `v0:<timestamp>:<body>`, within five minutes of now.
fn verify_slack(
    secret: &[u8],
    headers: &HeaderMap,
    body: &[u8],
    now_secs: u64,
) -> Result<(), Refusal> {
    let signature = header(headers, "x-slack-signature")
        .ok_or(Refusal::MissingSignature("X-Slack-Signature"))?;
    let timestamp = header(headers, "x-slack-request-timestamp").ok_or(Refusal::StaleTimestamp)?;
    let seconds: u64 = timestamp.parse().map_err(|_| Refusal::StaleTimestamp)?;
    if now_secs.abs_diff(seconds) > SLACK_MAX_SKEW_SECS {
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
    headers: &HeaderMap,
    body: &[u8],
    now_secs: u64,
) -> Result<Verified, Refusal> {
    verify_slack(secret, headers, body, now_secs)?;
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
    })
}

fn slack_commands(
    secret: &[u8],
    headers: &HeaderMap,
    body: &[u8],
    now_secs: u64,
) -> Result<Verified, Refusal> {
    verify_slack(secret, headers, body, now_secs)?;
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

    #[test]
    fn generic_accepts_a_good_signature_and_refuses_a_bad_or_missing_one() {
        let body = b"{\"x\":1}";
        let good = format!("sha256={}", sign(b"s3", &[body]));
        let h = headers(&[
            ("x-tollgate-signature", good),
            ("x-tollgate-delivery", "d-1".into()),
            ("x-tollgate-tenant", "acme".into()),
        ]);
        let v = verify(AdapterKind::Generic, b"s3", &h, body, 0).expect("verified");
        assert_eq!(
            (v.identity.as_str(), v.installation.as_str()),
            ("d-1", "acme")
        );
        assert_eq!(
            verify(AdapterKind::Generic, b"other", &h, body, 0),
            Err(Refusal::BadSignature)
        );
        let h = headers(&[("x-tollgate-delivery", "d-1".into())]);
        assert_eq!(
            verify(AdapterKind::Generic, b"s3", &h, body, 0).map_err(|e| e.status()),
            Err(401)
        );
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
        assert!(verify(AdapterKind::SlackEvents, b"k", &h, body, 1000 + 60).is_ok());
        assert_eq!(
            verify(AdapterKind::SlackEvents, b"k", &h, body, 1000 + 301),
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
        let v = verify(AdapterKind::SlackCommands, b"k", &h, body.as_bytes(), 50).expect("ok");
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
        let v = verify(AdapterKind::SlackEvents, b"k", &h, body, 50).expect("verified");
        assert_eq!(v.challenge.as_deref(), Some("abc"));
    }
}
