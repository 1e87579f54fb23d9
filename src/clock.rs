//! The wall clock in milliseconds since the Unix epoch: the one reading of `SystemTime` that
//! records (`created_at_millis`, `ended_at_millis`, dedupe marks, log lines) are stamped with.
//!
//! The core never reads a clock; the shell passes this value in (`now_millis`), which is what
//! lets the models and the conformance tests drive time themselves.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch; 0 for a clock set before 1970 (nothing tollgate records is
/// older than its own start, so such a clock is broken rather than meaningful).
pub fn now_millis() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, duration_millis)
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
