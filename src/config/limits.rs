//! Bounds on a turn's command that both the config (a route's `argv`) and the turn records
//! (`tasks`, `submit`) check. They live here, below both, so neither has to import the other.

/// Arguments of one command, bounded so a turn record stays small.
pub const MAX_ARGV: usize = 4096;
