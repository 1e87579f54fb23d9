//! The crash tests' `/proc` sampler counts only copies live at the same moment: a scan reads
//! processes one after another, so a copy that died during a scan must not be counted beside one
//! born later in it (a slot handed over mid-scan is not an overlap).

mod common;

use common::containment::{confirmed, copies, unique_tag, COPY_VAR, TAG_VAR};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn a_copy_that_died_after_the_scan_read_it_is_not_confirmed() {
    let tag = unique_tag("sampler");
    let spawn = |copy: &str| {
        Command::new("sleep")
            .arg("30")
            .env(TAG_VAR, &tag)
            .env(COPY_VAR, copy)
            .stdin(Stdio::null())
            .spawn()
            .expect("spawn sleep")
    };
    let mut early = spawn("early");
    let mut late = spawn("late");
    let until = Instant::now() + Duration::from_secs(10);
    let found = loop {
        let (found, _) = copies(&tag);
        if found.len() == 2 {
            break found;
        }
        assert!(Instant::now() < until, "the two copies never showed up");
        std::thread::sleep(Duration::from_millis(5));
    };
    assert_eq!(confirmed(&found).len(), 2, "both copies are alive");
    early.kill().expect("kill");
    early.wait().expect("reap");
    let left = confirmed(&found);
    late.kill().expect("kill");
    let _ = late.wait();
    assert_eq!(left.len(), 1, "{left:?}");
    assert_eq!(left[0].0, "late");
}
