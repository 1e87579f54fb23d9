//! Termination requests for a process that must finish its bookkeeping before it exits.
//!
//! SIGTERM and SIGINT set a flag instead of killing the process; the handler is installed without
//! SA_RESTART so a blocking `waitpid` returns `EINTR` and the caller sees the flag at once.

use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

static REQUESTED: AtomicBool = AtomicBool::new(false);
static SIGNAL: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(signal: libc::c_int) {
    // Only async-signal-safe work here: two atomic stores.
    SIGNAL.store(signal, Ordering::SeqCst);
    REQUESTED.store(true, Ordering::SeqCst);
}

/// Routes SIGTERM and SIGINT to the flag.
pub fn install() -> nix::Result<()> {
    let action = SigAction::new(
        SigHandler::Handler(on_signal),
        SaFlags::empty(),
        SigSet::empty(),
    );
    for signal in [Signal::SIGTERM, Signal::SIGINT] {
        // SAFETY: the handler only stores to atomics, which is async-signal-safe, and we replace
        // the default disposition process-wide on purpose.
        unsafe { sigaction(signal, &action) }?;
    }
    Ok(())
}

/// Whether a termination was requested, and by which signal.
pub fn requested() -> Option<i32> {
    REQUESTED
        .load(Ordering::SeqCst)
        .then(|| SIGNAL.load(Ordering::SeqCst))
}
