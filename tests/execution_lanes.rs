//! Three items whose durations run opposite to their declaration order: `first` waits for
//! `second`, which waits for `third`. The order is forced through files the items write, not by
//! sleeps. The scored lane emits rows in declaration order; the playbook lane in completion order,
//! and its first row reaches the events stream while the run is still going: `first` also waits
//! for a `release` file the test creates only after it has read that row from the events FIFO.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

fn write_pack(dir: &Path, gate_on_release: bool) {
    let d = dir.display();
    let release = if gate_on_release {
        format!(" && [ -e {d}/release ]")
    } else {
        String::new()
    };
    let pack = format!(
        r#"ceiling = "60s"
jobs = 3

[[item]]
name = "first"
shell = "until [ -e {d}/second.done ]{release}; do sleep 0.01; done; touch {d}/first.done"

[[item]]
name = "second"
shell = "until [ -e {d}/third.done ]; do sleep 0.01; done; touch {d}/second.done"

[[item]]
name = "third"
shell = "touch {d}/third.done"
"#
    );
    std::fs::write(dir.join("pack.toml"), pack).unwrap();
}

fn tollgate(dir: &Path, lane: &str, events: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tollgate"));
    cmd.arg("--home")
        .arg(dir.join("home"))
        .arg("run")
        .arg(dir.join("pack.toml"))
        .arg("--lane")
        .arg(lane)
        .arg("--events")
        .arg(events);
    cmd
}

fn settled_names(lines: &[serde_json::Value]) -> Vec<String> {
    lines
        .iter()
        .filter(|e| e["event"] == "item_settled")
        .map(|e| e["item"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn scored_lane_rows_come_in_declaration_order() {
    let dir = tempfile::tempdir().unwrap();
    write_pack(dir.path(), false);
    let events = dir.path().join("events.jsonl");
    let out = tollgate(dir.path(), "scored", &events).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&events)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(settled_names(&lines), ["first", "second", "third"]);
    for row in lines.iter().filter(|e| e["event"] == "item_settled") {
        assert_eq!(row["outcome"], "passed");
        assert!(row["duration_millis"].is_u64());
        assert!(row["started_at_millis"].is_u64() && row["ended_at_millis"].is_u64());
    }
    let end = lines.last().unwrap();
    assert_eq!(end["event"], "run_ended");
    assert_eq!(end["reason"], "completed");
    assert_eq!(end["counts"]["passed"], 3);
    // Plain text rows on a pipe, in the same order.
    let text = String::from_utf8_lossy(&out.stdout);
    let order: Vec<_> = ["first", "second", "third"]
        .iter()
        .map(|n| text.find(n).unwrap())
        .collect();
    assert!(order.windows(2).all(|w| w[0] < w[1]), "{text}");
}

#[test]
fn playbook_lane_rows_come_in_completion_order_and_live() {
    let dir = tempfile::tempdir().unwrap();
    write_pack(dir.path(), true);
    let fifo = dir.path().join("events.fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let mut child = tollgate(dir.path(), "playbook", &fifo)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    // Opening the read end pairs with the run's open of the write end.
    let reader = BufReader::new(std::fs::File::open(&fifo).unwrap());
    let mut lines = Vec::new();
    let mut released = false;
    for line in reader.lines() {
        let value: serde_json::Value = serde_json::from_str(&line.unwrap()).unwrap();
        if value["event"] == "item_settled" && !released {
            // The first row is here while `first` still waits for `release`: the run cannot
            // have ended.
            assert_eq!(value["item"], "third");
            assert!(!lines
                .iter()
                .any(|e: &serde_json::Value| e["event"] == "run_ended"));
            std::fs::write(dir.path().join("release"), "").unwrap();
            released = true;
        }
        lines.push(value);
    }
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0));
    assert!(released);
    assert_eq!(settled_names(&lines), ["third", "second", "first"]);
    assert_eq!(lines.last().unwrap()["event"], "run_ended");
}
