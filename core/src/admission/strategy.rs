//! Per-scope strategies: what a new arrival does when its scope is busy, and what starts when a
//! running item ends. Each keeps its retained set bounded: `queue` and `debounce` hold at most one
//! parked waiter, `concurrent` a line that the admission cap bounds.

use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// The largest `concurrent=N` accepted.
pub const MAX_CONCURRENT: u32 = 1024;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", try_from = "StrategyFields")]
pub enum Strategy {
    /// A busy scope drops the newcomer, observably.
    Drop,
    /// Most recent wins: at most one parked waiter, replaced by each newer arrival.
    Queue,
    /// The last arrival starts once `quiet_millis` passed without another; one parked waiter.
    Debounce { quiet_millis: u64 },
    /// Up to `max` running; the rest wait in line, in arrival order.
    Concurrent { max: u32 },
}

/// The stored shape of a [`Strategy`], checked on the way in: a file must not hold a strategy the
/// text form refuses. `concurrent` with `max: 0` would line up every arrival and never start one
/// (admitted work held until shutdown), and a zero quiet period is refused for the same reason as
/// on the command line.
#[derive(Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum StrategyFields {
    Drop,
    Queue,
    Debounce { quiet_millis: u64 },
    Concurrent { max: u32 },
}

impl TryFrom<StrategyFields> for Strategy {
    type Error = StrategyParseError;

    fn try_from(fields: StrategyFields) -> Result<Self, Self::Error> {
        let strategy = match fields {
            StrategyFields::Drop => Strategy::Drop,
            StrategyFields::Queue => Strategy::Queue,
            StrategyFields::Debounce { quiet_millis } => Strategy::Debounce { quiet_millis },
            StrategyFields::Concurrent { max } => Strategy::Concurrent { max },
        };
        let reason = match strategy {
            Strategy::Debounce { quiet_millis: 0 } => "the quiet period must be positive".into(),
            Strategy::Concurrent { max } if max == 0 || max > MAX_CONCURRENT => {
                format!("N must be in 1..={MAX_CONCURRENT}")
            }
            _ => return Ok(strategy),
        };
        Err(StrategyParseError {
            given: strategy.to_string(),
            reason,
        })
    }
}

impl Default for Strategy {
    /// A scope runs one turn at a time and keeps every arrival, in order.
    fn default() -> Self {
        Strategy::Concurrent { max: 1 }
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Strategy::Drop => f.write_str("drop"),
            Strategy::Queue => f.write_str("queue"),
            Strategy::Debounce { quiet_millis } => write!(
                f,
                "debounce={}",
                humantime::format_duration(Duration::from_millis(*quiet_millis))
            ),
            Strategy::Concurrent { max } => write!(f, "concurrent={max}"),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("strategy {given:?}: {reason} (expected drop, queue, debounce=DURATION or concurrent=N)")]
pub struct StrategyParseError {
    pub given: String,
    pub reason: String,
}

impl FromStr for Strategy {
    type Err = StrategyParseError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let fail = |reason: String| StrategyParseError {
            given: text.to_string(),
            reason,
        };
        match text.split_once('=') {
            None if text == "drop" => Ok(Strategy::Drop),
            None if text == "queue" => Ok(Strategy::Queue),
            Some(("debounce", quiet)) => {
                let quiet = humantime::parse_duration(quiet).map_err(|e| fail(e.to_string()))?;
                let quiet_millis = u64::try_from(quiet.as_millis())
                    .map_err(|_| fail("the quiet period is too long".into()))?;
                if quiet_millis == 0 {
                    return Err(fail("the quiet period must be positive".into()));
                }
                Ok(Strategy::Debounce { quiet_millis })
            }
            Some(("concurrent", n)) => {
                let max: u32 = n
                    .parse()
                    .map_err(|_| fail(format!("{n:?} is not a number")))?;
                if max == 0 || max > MAX_CONCURRENT {
                    return Err(fail(format!("N must be in 1..={MAX_CONCURRENT}")));
                }
                Ok(Strategy::Concurrent { max })
            }
            _ => Err(fail("unknown strategy".into())),
        }
    }
}

impl Strategy {
    /// How many items of one scope may run at once.
    pub fn max_running(&self) -> usize {
        match self {
            Strategy::Concurrent { max } => *max as usize,
            Strategy::Drop | Strategy::Queue | Strategy::Debounce { .. } => 1,
        }
    }

    /// Whether a parked item of this scope may start now, given how many run and when it may
    /// start (`ready_at_millis`: the debounce deadline, 0 otherwise).
    pub fn may_start(&self, running: usize, ready_at_millis: u64, now_millis: u64) -> bool {
        running < self.max_running() && ready_at_millis <= now_millis
    }
}

/// What an arrival did.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Arrival<T> {
    /// Start it now.
    Start(T),
    /// It waits as the scope's single parked waiter until `ready_at_millis`; `superseded` is the
    /// waiter it replaced, which ends as superseded at once.
    Park {
        waiter: T,
        ready_at_millis: u64,
        superseded: Option<T>,
    },
    /// It waits in the scope's line (concurrent).
    LineUp(T),
    /// Refused because `running` runs (drop); it ends as dropped at once.
    Dropped { dropped: T, running: T },
}

/// One scope's retained items.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Scope<T> {
    pub running: Vec<T>,
    /// The single parked waiter (queue, debounce) and when it may start.
    pub parked: Option<(T, u64)>,
    /// The line (concurrent), oldest first.
    pub line: VecDeque<T>,
}

impl<T> Default for Scope<T> {
    fn default() -> Self {
        Scope {
            running: Vec::new(),
            parked: None,
            line: VecDeque::new(),
        }
    }
}

impl<T: Clone + PartialEq> Scope<T> {
    /// Everything the scope retains (running, parked, in line).
    pub fn retained(&self) -> usize {
        self.running.len() + usize::from(self.parked.is_some()) + self.line.len()
    }

    pub fn arrive(&mut self, strategy: Strategy, item: T, now_millis: u64) -> Arrival<T> {
        match strategy {
            Strategy::Drop => match self.running.first() {
                Some(running) => Arrival::Dropped {
                    dropped: item,
                    running: running.clone(),
                },
                None => {
                    self.running.push(item.clone());
                    Arrival::Start(item)
                }
            },
            Strategy::Queue => {
                if self.running.is_empty() && self.parked.is_none() {
                    self.running.push(item.clone());
                    return Arrival::Start(item);
                }
                let superseded = self.parked.replace((item.clone(), 0)).map(|(old, _)| old);
                Arrival::Park {
                    waiter: item,
                    ready_at_millis: 0,
                    superseded,
                }
            }
            Strategy::Debounce { quiet_millis } => {
                let ready_at_millis = now_millis.saturating_add(quiet_millis);
                let superseded = self
                    .parked
                    .replace((item.clone(), ready_at_millis))
                    .map(|(old, _)| old);
                Arrival::Park {
                    waiter: item,
                    ready_at_millis,
                    superseded,
                }
            }
            Strategy::Concurrent { max } => {
                if self.running.len() < max as usize && self.line.is_empty() {
                    self.running.push(item.clone());
                    Arrival::Start(item)
                } else {
                    self.line.push_back(item.clone());
                    Arrival::LineUp(item)
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_strategies_are_checked_like_typed_ones() {
        let round_trip = |s: Strategy| {
            let json = serde_json::to_string(&s).unwrap();
            assert_eq!(serde_json::from_str::<Strategy>(&json).unwrap(), s);
        };
        round_trip(Strategy::Drop);
        round_trip(Strategy::Queue);
        round_trip(Strategy::Debounce { quiet_millis: 250 });
        round_trip(Strategy::Concurrent { max: 3 });
        for bad in [
            r#"{"kind":"concurrent","max":0}"#,
            r#"{"kind":"concurrent","max":1025}"#,
            r#"{"kind":"debounce","quiet_millis":0}"#,
        ] {
            assert!(serde_json::from_str::<Strategy>(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn text_form_refuses_what_cannot_run() {
        assert_eq!("drop".parse(), Ok(Strategy::Drop));
        assert_eq!(
            "debounce=2s".parse(),
            Ok(Strategy::Debounce { quiet_millis: 2000 })
        );
        for bad in [
            "concurrent=0",
            "concurrent=1025",
            "debounce=0s",
            "burst",
            "queue=1",
        ] {
            assert!(bad.parse::<Strategy>().is_err(), "{bad}");
        }
    }

    #[test]
    fn queue_keeps_the_newest_waiter_and_supersedes_the_old() {
        let mut scope = Scope::default();
        assert_eq!(scope.arrive(Strategy::Queue, 1, 0), Arrival::Start(1));
        assert!(matches!(
            scope.arrive(Strategy::Queue, 2, 0),
            Arrival::Park {
                superseded: None,
                ..
            }
        ));
        assert!(matches!(
            scope.arrive(Strategy::Queue, 3, 0),
            Arrival::Park {
                superseded: Some(2),
                ..
            }
        ));
        assert_eq!(scope.retained(), 2);
        // The waiter starts (a finishing runner's start filter) only once nothing runs.
        assert!(!Strategy::Queue.may_start(1, 0, 0));
        assert!(Strategy::Queue.may_start(0, 0, 0));
    }

    #[test]
    fn debounce_starts_the_last_arrival_after_the_quiet_period() {
        let s = Strategy::Debounce { quiet_millis: 10 };
        let mut scope = Scope::default();
        assert!(matches!(
            scope.arrive(s, 1, 0),
            Arrival::Park {
                ready_at_millis: 10,
                superseded: None,
                ..
            }
        ));
        // A newer arrival replaces the waiter and moves the deadline.
        assert!(matches!(
            scope.arrive(s, 2, 5),
            Arrival::Park {
                ready_at_millis: 15,
                superseded: Some(1),
                ..
            }
        ));
        assert!(!s.may_start(0, 15, 14));
        assert!(s.may_start(0, 15, 15));
        // A due waiter behind running work starts only when that work ends.
        assert!(!s.may_start(1, 15, 40));
    }

    #[test]
    fn drop_refuses_a_busy_scope_and_concurrent_lines_up_in_order() {
        let mut scope = Scope::default();
        assert_eq!(scope.arrive(Strategy::Drop, 1, 0), Arrival::Start(1));
        assert_eq!(
            scope.arrive(Strategy::Drop, 2, 0),
            Arrival::Dropped {
                dropped: 2,
                running: 1
            }
        );
        assert_eq!(scope.retained(), 1);

        let c = Strategy::Concurrent { max: 2 };
        let mut scope = Scope::default();
        assert_eq!(scope.arrive(c, 1, 0), Arrival::Start(1));
        assert_eq!(scope.arrive(c, 2, 0), Arrival::Start(2));
        assert_eq!(scope.arrive(c, 3, 0), Arrival::LineUp(3));
        assert_eq!(scope.arrive(c, 4, 0), Arrival::LineUp(4));
        assert_eq!(scope.retained(), 4);
        assert!(c.may_start(1, 0, 0));
        assert!(!c.may_start(2, 0, 0));
    }
}
