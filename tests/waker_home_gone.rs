//! A waker (`worker wake`, started for a delayed or debounced turn) sleeps until its time; if its
//! home is deleted meanwhile it has nothing left to wake and exits at once instead of sleeping on
//! for hours (a removed test home, a home deleted by hand). Its exit is observed through /proc.

mod common;

use common::{describe, init_home, tollgate};
use std::time::{Duration, Instant};

/// The pids of `worker wake` processes of `home`, from /proc.
fn wakers_of(home: &std::path::Path) -> Vec<u32> {
    let needle = home.to_string_lossy().into_owned();
    std::fs::read_dir("/proc")
        .expect("/proc")
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()))
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|raw| {
                let args: Vec<String> = raw
                    .split(|b| *b == 0)
                    .map(|a| String::from_utf8_lossy(a).into_owned())
                    .collect();
                args.iter().any(|a| a == &needle)
                    && args.windows(2).any(|w| w == ["worker", "wake"])
            }) && common::containment::is_alive(*pid as i32)
        })
        .collect()
}

#[test]
fn a_waker_whose_home_is_deleted_exits_instead_of_sleeping_on() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = init_home(dir.path(), 1);
    let out = tollgate(
        &home,
        &["submit", "--task", "later", "--delay", "2h", "--", "true"],
    );
    assert!(out.status.success(), "{}", describe(&out));
    let until = Instant::now() + Duration::from_secs(20);
    let wakers = loop {
        let found = wakers_of(&home);
        if !found.is_empty() {
            break found;
        }
        assert!(
            Instant::now() < until,
            "no waker was started for the delayed turn"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    // The waker may still be opening the home's database (its `-wal`/`-shm` files appear while
    // the tree is being removed: ENOTEMPTY), as it would under a user's `rm -rf`: remove again,
    // a bounded number of times, until the home is gone.
    let mut attempts = 0;
    while let Err(e) = std::fs::remove_dir_all(&home) {
        attempts += 1;
        assert!(
            attempts < 100 && e.kind() == std::io::ErrorKind::DirectoryNotEmpty,
            "delete the home (attempt {attempts}): {e}"
        );
    }
    let until = Instant::now() + Duration::from_secs(20);
    while wakers
        .iter()
        .any(|p| common::containment::is_alive(*p as i32))
    {
        assert!(
            Instant::now() < until,
            "the waker {wakers:?} still sleeps for a home that is gone"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}
