//! The wall clock in milliseconds since the Unix epoch: the one reading of `SystemTime` that
//! records (`created_at_millis`, `ended_at_millis`, dedupe marks, log lines) are stamped with.
//!
//! The core never reads a clock; the shell passes this value in (`now_millis`), which is what
//! lets the models and the conformance tests drive time themselves.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch; 0 for a clock set before 1970 (nothing tollgate records is
/// older than its own start, so such a clock is broken rather than meaningful).
pub fn now_millis() -> u64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, duration_millis);
    offset(now)
}

/// The variable a fault-injection build reads to run this process's wall clock ahead (or behind,
/// negative) by that many milliseconds: the fleet tests' hosts on one machine then disagree on
/// the time as hosts do, so a step that judged a lease by the host's clock instead of the
/// database's shows (spec/fleet.md, "Leases"). Read once; ignored outside `failpoints` builds.
pub const TEST_OFFSET_ENV: &str = "TOLLGATE_TEST_CLOCK_OFFSET_MILLIS";

#[cfg(feature = "failpoints")]
fn offset(now: u64) -> u64 {
    static OFFSET: std::sync::OnceLock<i64> = std::sync::OnceLock::new();
    let by = *OFFSET.get_or_init(|| {
        std::env::var(TEST_OFFSET_ENV)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    });
    now.saturating_add_signed(by)
}

#[cfg(not(feature = "failpoints"))]
fn offset(now: u64) -> u64 {
    now
}

/// `duration` in whole milliseconds, saturating at `u64::MAX` instead of wrapping.
pub fn duration_millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_reads_after_2020_and_does_not_go_backwards_within_a_call_pair() {
        // 2020-01-01T00:00:00Z: a clock before it is not the one these tests run on.
        let first = now_millis();
        assert!(first > 1_577_836_800_000, "{first}");
        assert!(now_millis() >= first);
    }

    #[test]
    fn durations_saturate_instead_of_wrapping() {
        assert_eq!(duration_millis(Duration::from_millis(1_234)), 1_234);
        assert_eq!(duration_millis(Duration::MAX), u64::MAX);
    }
}
