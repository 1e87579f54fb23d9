//! SIGTERM to a running `tollgate run`: the items are killed, the run ends with reason
//! `interrupted`, pending items are cancelled, and the exit code is 1.
//!
//! Synchronisation: the events go to a FIFO the test reads; the signal is sent once the
//! `item_started` line of the long item is read and the item has written its marker file.

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn sigterm_interrupts_the_run_and_kills_items() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display();
    let pack = format!(
        r#"jobs = 1
grace = "500ms"

[[item]]
name = "long"
shell = "echo $$ > {d}/long.pid; exec sleep 600"

[[item]]
name = "never"
run = ["true"]
"#
    );
    std::fs::write(dir.path().join("pack.toml"), pack).unwrap();
    let fifo = dir.path().join("events.fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .arg("--home")
        .arg(dir.path().join("home"))
        .arg("run")
        .arg(dir.path().join("pack.toml"))
        .arg("--events")
        .arg(&fifo)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let reader = BufReader::new(std::fs::File::open(&fifo).unwrap());
    let mut lines = Vec::new();
    let mut signalled_at = None;
    for line in reader.lines() {
        let value: serde_json::Value = serde_json::from_str(&line.unwrap()).unwrap();
        if value["event"] == "item_started" && value["item"] == "long" {
            // The shell writes its pid before exec; wait for that (bounded), then signal.
            let pid_file = dir.path().join("long.pid");
            let until = Instant::now() + Duration::from_secs(10);
            while std::fs::read_to_string(&pid_file).map_or(true, |s| !s.ends_with('\n')) {
                assert!(Instant::now() < until, "the item never wrote its pid");
                std::thread::yield_now();
            }
            kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM).unwrap();
            signalled_at = Some(Instant::now());
        }
        lines.push(value);
    }
    let status = child.wait().unwrap();
    let took = signalled_at.unwrap().elapsed();
    assert_eq!(status.code(), Some(1));
    assert!(took < Duration::from_secs(3), "took {took:?} after SIGTERM");
    let end = lines.last().unwrap();
    assert_eq!(end["event"], "run_ended");
    assert_eq!(end["reason"], "interrupted");
    let outcomes: Vec<(String, String)> = lines
        .iter()
        .filter(|e| e["event"] == "item_settled")
        .map(|e| {
            (
                e["item"].as_str().unwrap().to_string(),
                e["outcome"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        outcomes,
        [
            ("long".to_string(), "cancelled".to_string()),
            ("never".to_string(), "cancelled".to_string())
        ]
    );
    let pid: i32 = std::fs::read_to_string(dir.path().join("long.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(!tollgate::exec::kill::is_alive(pid), "the item survived");
    let mut out = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut out).unwrap();
    assert!(out.contains("run ended: interrupted"), "{out}");
}
