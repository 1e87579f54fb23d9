//! Failpoint gates (feature `failpoints`): a failpoint set to `return(GATE)` holds the process at
//! that point until the file `GATE` exists (at most [`HOLD_LIMIT_MILLIS`]), after publishing its
//! pid in `GATE.waiting`, so a test can act inside the window it names (a cancel while a
//! dispatcher is between its spawn and its first publish, or while a runner starts up). Any other
//! action (`panic`, `sleep(…)`, …) behaves as the `fail` crate defines it.

use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The longest a gate holds a process when the test never opens it.
pub const HOLD_LIMIT_MILLIS: u64 = 30_000;
/// How often a held process looks for the gate file.
const POLL_MILLIS: u64 = 5;

/// Holds at the failpoint `name` while its gate is closed (see the module comment).
pub fn hold(name: &str) {
    let Some(Some(gate)) = fail::eval(name, |arg| arg) else {
        return;
    };
    let gate = PathBuf::from(gate);
    let waiting = gate.with_extension("waiting");
    // Written beside and renamed into place: a test reads the pid as soon as the file exists,
    // so it must never see it empty.
    let partial = gate.with_extension("waiting.partial");
    if let Err(e) = std::fs::write(&partial, std::process::id().to_string())
        .and_then(|()| std::fs::rename(&partial, &waiting))
    {
        tracing::warn!("failpoint {name}: cannot write {}: {e}", waiting.display());
    }
    let until = Instant::now() + Duration::from_millis(HOLD_LIMIT_MILLIS);
    while !gate.exists() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(POLL_MILLIS));
    }
}
