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

/// Waits (bounded) until no process of `pids` is alive.
fn await_gone(pids: &[u32], what: &str) {
    let until = Instant::now() + Duration::from_secs(20);
    while pids
        .iter()
        .any(|p| common::containment::is_alive(*p as i32))
    {
        assert!(Instant::now() < until, "{what}: {pids:?} still alive");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The waker started for the only `--at` turn has nothing left to wake once that turn is
/// cancelled: `cancel` stops it (Q4) instead of leaving it asleep until then; a waker another
/// turn still needs is left alone.
#[test]
fn cancelling_the_only_delayed_turn_stops_its_waker_and_spares_the_others() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = init_home(dir.path(), 1);
    let wakers_for = |count: usize| {
        let until = Instant::now() + Duration::from_secs(20);
        loop {
            let found = wakers_of(&home);
            if found.len() >= count {
                break found;
            }
            assert!(
                Instant::now() < until,
                "{count} waker(s) never started: {found:?}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    let at = humantime::format_rfc3339_seconds(
        std::time::SystemTime::now() + Duration::from_secs(2 * 3600),
    )
    .to_string();
    let out = tollgate(
        &home,
        &["submit", "--task", "nightly", "--at", &at, "--", "true"],
    );
    assert!(out.status.success(), "{}", describe(&out));
    let first = wakers_for(1);
    let out = tollgate(
        &home,
        &["submit", "--task", "report", "--delay", "3h", "--", "true"],
    );
    assert!(out.status.success(), "{}", describe(&out));
    let both = wakers_for(2);
    let second: Vec<u32> = both
        .iter()
        .copied()
        .filter(|p| !first.contains(p))
        .collect();
    let out = tollgate(&home, &["cancel", "report"]);
    assert!(out.status.success(), "{}", describe(&out));
    await_gone(&second, "the cancelled turn's waker");
    assert!(
        first
            .iter()
            .all(|p| common::containment::is_alive(*p as i32)),
        "the waker of the turn still delayed lives on"
    );
    let out = tollgate(&home, &["cancel", "nightly"]);
    assert!(out.status.success(), "{}", describe(&out));
    await_gone(&first, "the last delayed turn's waker");
}
