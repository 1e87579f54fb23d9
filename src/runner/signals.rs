//! Termination requests for a process that must finish its bookkeeping before it exits.
//!
//! SIGTERM and SIGINT set a flag instead of killing the process; the handler is installed without
//! SA_RESTART so a blocking `waitpid` returns `EINTR` and the caller sees the flag at once.
//!
//! A detached runner is started with both signals blocked ([`block_in_child`], in the spawner's
//! forked child), and [`install`] unblocks them once the handler is in place: a `cancel` that
//! signals a runner still starting up (its bound child, before the take-over) stays pending
//! instead of killing it by the default action, which left the row to a dead process until some
//! later command repaired it (CI saw a cancelled turn stay unsettled).

use nix::sys::signal::{
    sigaction, sigprocmask, SaFlags, SigAction, SigHandler, SigSet, SigmaskHow, Signal,
};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

static REQUESTED: AtomicBool = AtomicBool::new(false);
static SIGNAL: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(signal: libc::c_int) {
    // Only async-signal-safe work here: two atomic stores.
    SIGNAL.store(signal, Ordering::SeqCst);
    REQUESTED.store(true, Ordering::SeqCst);
}

/// SIGTERM and SIGINT, the termination requests this module routes to the flag.
fn termination() -> SigSet {
    let mut set = SigSet::empty();
    set.add(Signal::SIGTERM);
    set.add(Signal::SIGINT);
    set
}

/// Blocks SIGTERM and SIGINT in a forked child before exec (the mask survives exec), so they stay
/// pending until the started tollgate has called [`install`]. Async-signal-safe: sigemptyset,
/// sigaddset and sigprocmask only.
pub fn block_in_child() -> nix::Result<()> {
    sigprocmask(SigmaskHow::SIG_BLOCK, Some(&termination()), None)
}

/// Routes SIGTERM and SIGINT to the flag, then unblocks them: one that arrived while they were
/// blocked ([`block_in_child`]) is delivered to the handler now.
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
    sigprocmask(SigmaskHow::SIG_UNBLOCK, Some(&termination()), None)
}

/// Whether a termination was requested, and by which signal.
pub fn requested() -> Option<i32> {
    REQUESTED
        .load(Ordering::SeqCst)
        .then(|| SIGNAL.load(Ordering::SeqCst))
}
