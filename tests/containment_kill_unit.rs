//! `kill_unit` from a process that is not the unit's owner's subreaper, on each containment path
//! this host can run: a tree with a plain child, a child that ignores SIGTERM, a child that dropped
//! the marker but stayed in the process group, and a `setsid` grandchild that ignores SIGTERM. The
//! kill returns only once an independent `/proc` scan finds none of them; SIGTERM-ignorers force
//! the SIGKILL escalation. On the cgroup path a `setsid` grandchild that also dropped the marker is
//! killed too (only the group can find it); the subreaper path cannot, which spec/execution.md
//! documents.
//!
//! Synchronisation: the leader waits for a go-file the test creates after adopting it into the
//! group; every process writes its pid to a file and the test waits (bounded) for all of them.

mod common;

use common::containment::{cgroup_base, read_pid, tagged, wait_files, Reaper};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tollgate::process::containment::{self, cgroup, Marker, UnitIdentity};

const GRACE_MILLIS: u64 = 300;

fn kill_a_tree(base: Option<PathBuf>) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display();
    let tag = format!(
        "{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    );
    let group = base
        .as_deref()
        .map(|b| cgroup::create(b, &cgroup::fresh_name()).unwrap());
    let mut reaper = Reaper::new(&tag);
    reaper.groups.extend(group.clone());
    let work = format!("work-{tag}");
    let mut expected = vec!["leader", "plain", "deaf", "unmarked", "setsid"];
    // Only a cgroup can find a setsid process that dropped the marker.
    let escapee = if group.is_some() {
        expected.push("escapee");
        std::fs::write(
            dir.path().join("escapee.sh"),
            format!("trap '' TERM; echo $$ > {d}/escapee; exec sleep 600\n"),
        )
        .unwrap();
        // Its parent exits at once: an orphan with no marker, in a session of its own.
        format!("env -u TOLLGATE_WORK sh -c 'setsid sh {d}/escapee.sh &' & ")
    } else {
        String::new()
    };
    let script = format!(
        "while [ ! -e {d}/go ]; do sleep 0.01; done; \
         sleep 600 & echo $! > {d}/plain; \
         sh -c 'trap \"\" TERM; echo $$ > {d}/deaf; while :; do sleep 1; done' & \
         env -u TOLLGATE_WORK sh -c 'echo $$ > {d}/unmarked; exec sleep 600' & \
         setsid sh -c 'trap \"\" TERM; echo $$ > {d}/setsid; exec sleep 600' & \
         {escapee}echo $$ > {d}/leader; wait"
    );
    let mut leader = {
        use std::os::unix::process::CommandExt;
        Command::new("sh")
            .arg("-c")
            .arg(&script)
            .env("TEST_TAG", &tag)
            .env("TOLLGATE_WORK", &work)
            .process_group(0)
            .stdin(Stdio::null())
            .spawn()
            .unwrap()
    };
    let pid = leader.id() as i32;
    if let Some(g) = &group {
        cgroup::adopt(g, pid).unwrap();
    }
    std::fs::write(dir.path().join("go"), b"").unwrap();
    wait_files(dir.path(), &expected);
    let unit = UnitIdentity {
        cgroup: group.clone(),
        pgid: Some(pid),
        marker: Marker::exact("TOLLGATE_WORK", work),
        leader: tollgate::process::identity_of(pid as u32),
    };
    // The identity a record would carry, read back as any later process would.
    let unit: UnitIdentity = serde_json::from_str(&serde_json::to_string(&unit).unwrap()).unwrap();
    if group.is_some() {
        let escapee = read_pid(dir.path(), "escapee");
        let until = Instant::now() + Duration::from_secs(10);
        // Bounded poll: the middle shell exits right after forking, and the escapee is then no
        // descendant of the leader any more (only the cgroup still holds it).
        let descends_from_leader = || {
            let mut p = escapee;
            for _ in 0..64 {
                match containment::parent_of(p) {
                    Some(q) if q == pid => return true,
                    Some(q) if q > 1 => p = q,
                    _ => return false,
                }
            }
            false
        };
        while descends_from_leader() {
            assert!(Instant::now() < until, "the middle shell never exited");
            std::thread::sleep(Duration::from_millis(5));
        }
        let env = std::fs::read(format!("/proc/{escapee}/environ")).unwrap();
        assert!(
            !env.split(|&b| b == 0)
                .any(|v| v.starts_with(b"TOLLGATE_WORK=")),
            "the escapee still carries the marker"
        );
        let stat = std::fs::read_to_string(format!("/proc/{escapee}/stat")).unwrap();
        eprintln!("escapee: {stat}");
    }
    let before = tagged(&tag);
    assert!(before.len() >= expected.len(), "{before:?}");

    let started = Instant::now();
    let report = containment::kill_unit(&unit, Duration::from_millis(GRACE_MILLIS));
    let took = started.elapsed();
    eprintln!(
        "kill_unit (cgroup: {}) took {} ms: {report:?}",
        group.is_some(),
        took.as_millis()
    );
    assert!(report.survivors.is_empty(), "{report:?}");
    assert!(
        report.signalled >= expected.len(),
        "every process found at the first signal: {report:?}"
    );
    assert!(report.escalated, "SIGTERM-ignorers needed SIGKILL");
    assert!(
        took >= Duration::from_millis(GRACE_MILLIS),
        "no grace given"
    );
    assert!(took < Duration::from_millis(GRACE_MILLIS + containment::KILL_WAIT_MILLIS));
    let left = tagged(&tag);
    assert!(
        left.is_empty(),
        "survivors by the test's own scan: {left:?}"
    );
    for name in &expected {
        let p = read_pid(dir.path(), name);
        assert!(!containment::is_alive(p), "{name} ({p}) survived");
    }
    if let Some(g) = &group {
        assert!(
            report.cgroup_removed && !g.exists(),
            "cgroup left: {}",
            g.display()
        );
    }
    leader.wait().unwrap();
}

#[test]
fn kill_unit_empties_a_tree_through_the_cgroup() {
    match cgroup_base() {
        Some(base) => {
            eprintln!("cgroup path: groups under {}", base.display());
            kill_a_tree(Some(base));
        }
        None => eprintln!("SKIPPED: no delegable cgroup v2 group with cgroup.kill here"),
    }
}

#[test]
fn kill_unit_empties_a_tree_by_process_group_and_marker() {
    kill_a_tree(None);
}
