//! Three items whose durations run opposite to their declaration order. The scored lane emits rows
//! in declaration order (there `first` waits for a file `second` writes, which waits for one
//! `third` writes); the playbook lane emits them in completion order, each row while the run is
//! still going (there the test releases each next item only after reading the previous row from
//! the events FIFO). No sleep synchronises anything; the items poll for files as their workload.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

fn write_pack(dir: &Path) {
    let d = dir.display();
    let pack = format!(
        r#"ceiling = "60s"
jobs = 3

[[item]]
name = "first"
shell = "until [ -e {d}/second.done ]; do sleep 0.01; done; touch {d}/first.done"

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
    write_pack(dir.path());
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
    // Here the test itself drives the completion order: `third` ends at once; `second` waits for
    // `go.second`, which the test creates only after reading `third`'s row from the events FIFO;
    // `first` waits for `go.first`, created after `second`'s row. So every row is read while the
    // run is provably still going, and the completion order is exactly third, second, first.
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display();
    let pack = format!(
        r#"ceiling = "60s"
jobs = 3

[[item]]
name = "first"
shell = "until [ -e {d}/go.first ]; do sleep 0.01; done"

[[item]]
name = "second"
shell = "until [ -e {d}/go.second ]; do sleep 0.01; done"

[[item]]
name = "third"
run = ["true"]
"#
    );
    std::fs::write(dir.path().join("pack.toml"), pack).unwrap();
    let fifo = dir.path().join("events.fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let mut child = tollgate(dir.path(), "playbook", &fifo)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    // Opening the read end pairs with the run's open of the write end.
    let reader = BufReader::new(std::fs::File::open(&fifo).unwrap());
    let mut lines: Vec<serde_json::Value> = Vec::new();
    for line in reader.lines() {
        let value: serde_json::Value = serde_json::from_str(&line.unwrap()).unwrap();
        if value["event"] == "item_settled" {
            assert!(
                !lines.iter().any(|e| e["event"] == "run_ended"),
                "a row after the end"
            );
            let next = match value["item"].as_str().unwrap() {
                "third" => Some("go.second"),
                "second" => Some("go.first"),
                _ => None,
            };
            if let Some(file) = next {
                std::fs::write(dir.path().join(file), "").unwrap();
            }
        }
        lines.push(value);
    }
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0));
    assert_eq!(settled_names(&lines), ["third", "second", "first"]);
    assert_eq!(lines.last().unwrap()["event"], "run_ended");
}

#[test]
fn scored_lane_streams_its_settled_prefix() {
    // `head` ends at once; `tail` waits for `go.tail`, which the test creates only after reading
    // `head`'s row from the events FIFO: the scored lane does not hold rows back until the end.
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display();
    let pack = format!(
        r#"jobs = 2

[[item]]
name = "head"
run = ["true"]

[[item]]
name = "tail"
shell = "until [ -e {d}/go.tail ]; do sleep 0.01; done"
"#
    );
    std::fs::write(dir.path().join("pack.toml"), pack).unwrap();
    let fifo = dir.path().join("events.fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let mut child = tollgate(dir.path(), "scored", &fifo)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let reader = BufReader::new(std::fs::File::open(&fifo).unwrap());
    let mut lines: Vec<serde_json::Value> = Vec::new();
    for line in reader.lines() {
        let value: serde_json::Value = serde_json::from_str(&line.unwrap()).unwrap();
        if value["event"] == "item_settled" && value["item"] == "head" {
            std::fs::write(dir.path().join("go.tail"), "").unwrap();
        }
        lines.push(value);
    }
    assert_eq!(child.wait().unwrap().code(), Some(0));
    assert_eq!(settled_names(&lines), ["head", "tail"]);
}
