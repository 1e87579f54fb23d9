//! `tollgate run` on a terminal (a pseudo-terminal made by script(1)): a progress display on both
//! lanes that names the items still running, and a failed item's output under its row.

mod common;

use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

fn in_pty(cmd: &str) -> (std::process::Child, mpsc::Receiver<Vec<u8>>) {
    let mut child = Command::new("script")
        .args(["-qfec", cmd, "/dev/null"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("script(1) from util-linux");
    let mut stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = stdout.read(&mut buf) {
            if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    (child, rx)
}

fn read_until(rx: &mpsc::Receiver<Vec<u8>>, seen: &mut Vec<u8>, needle: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !String::from_utf8_lossy(seen).contains(needle) {
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(chunk) => seen.extend_from_slice(&chunk),
            Err(_) => panic!(
                "never saw {needle:?} on the terminal; got {:?}",
                String::from_utf8_lossy(seen)
            ),
        }
    }
}

fn progress_names_the_running_item(lane: &str, label: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let go = dir.path().join("go");
    let pack = dir.path().join("pack.toml");
    std::fs::write(
        &pack,
        format!(
            "ceiling = \"2m\"\ndeadline = \"1m\"\njobs = 2\n\
             [[item]]\nname = \"quick\"\nshell = \"echo quick-output; exit 5\"\n\
             [[item]]\nname = \"gated\"\nshell = \"while [ ! -e '{}' ]; do sleep 0.05; done\"\n",
            go.display()
        ),
    )
    .expect("pack");
    let cmd = format!(
        "{} --home {} run {} --lane {lane}",
        common::BIN,
        dir.path().join("home").display(),
        pack.display()
    );
    let (mut child, rx) = in_pty(&cmd);
    let mut seen = Vec::new();
    // While `gated` waits for its file, the display names it.
    read_until(&rx, &mut seen, &format!("{label}: "));
    read_until(&rx, &mut seen, "gated");
    std::fs::write(&go, b"").expect("release the gated item");
    read_until(&rx, &mut seen, "run ended:");
    let status = child.wait().expect("wait");
    let text = String::from_utf8_lossy(&seen);
    assert!(!status.success(), "one item failed: {text}");
    assert!(
        text.contains("failed     quick") && text.contains("| quick-output"),
        "the failed item's output tail is shown under its row: {text:?}"
    );
}

#[test]
fn playbook_lane_shows_progress_naming_running_items() {
    progress_names_the_running_item("playbook", "running");
}

#[test]
fn scored_lane_shows_progress_too() {
    progress_names_the_running_item("scored", "pending");
}
