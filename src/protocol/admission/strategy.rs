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
#[serde(tag = "kind", rename_all = "snake_case")]
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

    /// `item` ended; returns what starts in its place now (the parked waiter if it is due, or the
    /// head of the line while there is room).
    pub fn finish(&mut self, strategy: Strategy, item: &T, now_millis: u64) -> Vec<T> {
        self.running.retain(|r| r != item);
        self.start_due(strategy, now_millis)
    }

    /// Starts whatever may start at `now_millis` (a debounce deadline passing, or room freed).
    pub fn start_due(&mut self, strategy: Strategy, now_millis: u64) -> Vec<T> {
        let mut started = Vec::new();
        if let Some((_, ready_at)) = &self.parked {
            if strategy.may_start(self.running.len(), *ready_at, now_millis) {
                if let Some((waiter, _)) = self.parked.take() {
                    self.running.push(waiter.clone());
                    started.push(waiter);
                }
            }
        }
        while self.running.len() < strategy.max_running() {
            match self.line.pop_front() {
                Some(next) => {
                    self.running.push(next.clone());
                    started.push(next);
                }
                None => break,
            }
        }
        started
    }
}
