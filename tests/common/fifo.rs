//! A fifo that holds a turn's command (`cat FIFO`) running until the test releases it: the tests'
//! barrier between "the turn is running" and "now let it end", with no sleep.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Makes the fifo `dir/name` (mode 0700) that a turn's `cat` blocks on until [`release`].
pub fn gate(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(name);
    nix::unistd::mkfifo(&path, nix::sys::stat::Mode::S_IRWXU).expect("mkfifo");
    path
}

/// Opens the fifo for writing once its reader (the turn's `cat`) has it open and closes it: the
/// reader's EOF. A non-blocking open fails with ENXIO until a reader exists, so the wait for the
/// turn to start is bounded (30 s).
pub fn release(fifo: &Path) {
    use std::os::unix::fs::OpenOptionsExt;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(nix::libc::O_NONBLOCK)
            .open(fifo)
        {
            Ok(_) => return,
            Err(e) if e.raw_os_error() == Some(nix::libc::ENXIO) => {
                assert!(
                    Instant::now() < deadline,
                    "no turn ever opened {}",
                    fifo.display()
                );
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => panic!("{}: {e}", fifo.display()),
        }
    }
}
