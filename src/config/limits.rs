//! Bounds on a turn's command that both the config (a route's `argv`) and the turn records
//! (`tasks`, `submit`) check. They live here, below both, so neither has to import the other.

/// Arguments of one command, bounded so a turn record stays small.
pub use crate::protocol::records::MAX_ARGV;

/// The longest `submit --timeout` accepted: longer is a typo (and would overflow deadlines).
pub const MAX_TURN_TIMEOUT_MILLIS: u64 = 30 * 24 * 60 * 60 * 1000;

/// Parses a turn timeout (humantime: `30s`, `5m`, `1h30m`) into milliseconds: more than 0, at
/// most [`MAX_TURN_TIMEOUT_MILLIS`]. The error says which rule `text` broke.
pub fn parse_turn_timeout(text: &str) -> Result<u64, String> {
    let duration = humantime::parse_duration(text).map_err(|e| format!("{text:?}: {e}"))?;
    let millis = u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
    if millis == 0 || millis > MAX_TURN_TIMEOUT_MILLIS {
        return Err(format!(
            "{text:?} is out of range (at least 1ms, at most 30days)"
        ));
    }
    Ok(millis)
}
