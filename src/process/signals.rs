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
/// The self-pipe: the handler writes a byte into `WAKE_WRITE`, so a `poll` on `WAKE_READ` (beside
/// the command's pidfd) wakes on a signal however it lands relative to the flag check. -1 until
/// [`install`] made it; never closed once made (it lives as long as the process).
static WAKE_WRITE: AtomicI32 = AtomicI32::new(-1);
static WAKE_READ: AtomicI32 = AtomicI32::new(-1);

extern "C" fn on_signal(signal: libc::c_int) {
    // Only async-signal-safe work here: two atomic stores and a write(2).
    SIGNAL.store(signal, Ordering::SeqCst);
    REQUESTED.store(true, Ordering::SeqCst);
    let fd = WAKE_WRITE.load(Ordering::SeqCst);
    if fd >= 0 {
        let byte = 1u8;
        // SAFETY: write(2) is async-signal-safe; `fd` is our non-blocking pipe, never closed, and
        // the buffer is one byte on this stack. A full pipe (EAGAIN) already holds a wake-up.
        let _ = unsafe { libc::write(fd, std::ptr::addr_of!(byte).cast(), 1) };
    }
}

/// Makes the self-pipe once (non-blocking, close-on-exec, so no command inherits it).
fn make_wake_pipe() -> nix::Result<()> {
    if WAKE_READ.load(Ordering::SeqCst) >= 0 {
        return Ok(());
    }
    let (read, write) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_NONBLOCK | nix::fcntl::OFlag::O_CLOEXEC)?;
    use std::os::fd::IntoRawFd;
    WAKE_READ.store(read.into_raw_fd(), Ordering::SeqCst);
    WAKE_WRITE.store(write.into_raw_fd(), Ordering::SeqCst);
    Ok(())
}

/// The read end of the self-pipe, readable after a termination request; `None` before
/// [`install`].
pub fn wake_fd() -> Option<std::os::fd::BorrowedFd<'static>> {
    let fd = WAKE_READ.load(Ordering::SeqCst);
    // SAFETY: once made, the pipe's read end is never closed (see `WAKE_READ`), so it stays valid
    // for the rest of the process.
    (fd >= 0).then(|| unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) })
}

/// Empties the self-pipe after a wake-up (the flag stays set: [`requested`] is sticky).
pub fn drain_wake() {
    let fd = WAKE_READ.load(Ordering::SeqCst);
    if fd < 0 {
        return;
    }
    let mut buf = [0u8; 64];
    loop {
        // SAFETY: read(2) into a stack buffer of its stated length from our non-blocking pipe.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n <= 0 {
            break;
        }
    }
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
    make_wake_pipe()?;
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
