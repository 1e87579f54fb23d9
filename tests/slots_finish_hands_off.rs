//! The finishing runner starts the next parked turn of its slot itself (spec/slots.md, the
//! finish; no resident scheduler): once a turn ends, the turn queued behind it starts with no
//! other tollgate command run, no waker and no repair. The test observes the turns through files
//! their commands write, never through `status` or `wait`, whose bounded repair would start a
//! parked turn itself and so hide a finish that handed nothing off.
mod common;

use common::{describe, tollgate, wait_until};

#[test]
fn a_finishing_runner_starts_the_next_parked_turn_with_no_other_command() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = common::init_home(&tmp.path().join("home"), 1);
    let (gate, first, second) = (
        tmp.path().join("go"),
        tmp.path().join("first"),
        tmp.path().join("second"),
    );
    let _open = common::OpenOnDrop(gate.clone());
    let long = format!(
        ": > {f}; i=0; while [ ! -e {g} ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done",
        f = first.display(),
        g = gate.display()
    );
    let out = tollgate(&home, &["submit", "--task", "one", "--", "sh", "-c", &long]);
    assert!(out.status.success(), "{}", describe(&out));
    wait_until("the first turn to start", || first.exists());
    // The one slot is taken: the second turn is queued behind it.
    let touch = format!(": > {}", second.display());
    let out = tollgate(
        &home,
        &["submit", "--task", "two", "--", "sh", "-c", &touch],
    );
    assert!(out.status.success(), "{}", describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("queued"),
        "{}",
        describe(&out)
    );
    assert!(!second.exists(), "the second turn waits for the slot");
    // The first ends; its runner starts the second, and nothing else runs.
    std::fs::write(&gate, b"").expect("open the gate");
    wait_until("the finishing runner to start the queued turn", || {
        second.exists()
    });
    let out = tollgate(&home, &["wait", "two"]);
    assert!(out.status.success(), "{}", describe(&out));
}
