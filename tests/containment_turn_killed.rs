//! A SIGKILLed runner whose turn's command forked a plain child, a `setsid` grandchild and a child
//! in its own process group (issue "Turn containment", acceptance 1): `tollgate reconcile` kills
//! the whole old tree before it starts the turn again. An independent `/proc` sampler (matching
//! the test's own `COPY=<leader pid>` variable, not tollgate's marker) never sees two live copies
//! of the turn's work, and none of the old tree is alive once reconcile returns. Runs on the
//! subreaper path (`TOLLGATE_NO_CGROUP=1`) and, where this host can delegate a group, on the
//! cgroup path; the test prints which ran.
//!
//! Synchronisation: every process of a copy writes its pid to `<copy>-<role>`; the test waits for
//! those files (a bounded poll), never for a time.

mod common;

use common::containment::{
    is_alive, paths, read_pid, tollgate_on as tollgate, wait_files, wait_untagged, Reaper, Sampler,
};
use common::describe;
use std::path::Path;
use std::time::{Duration, Instant};

const ROLES: [&str; 4] = ["leader", "plain", "setsid", "pgroup"];

/// The turn's command: every process carries `COPY=<leader pid>`, writes its pid, then sleeps.
fn script(dir: &Path) -> String {
    let d = dir.display();
    format!(
        "export COPY=$$; \
         sleep 600 & echo $! > {d}/$COPY-plain.tmp && mv {d}/$COPY-plain.tmp {d}/$COPY-plain; \
         setsid sh -c 'echo $$ > {d}/$COPY-setsid.tmp && mv {d}/$COPY-setsid.tmp {d}/$COPY-setsid; exec sleep 600' & \
         perl -e 'setpgrp(0, 0); open(my $f, \">\", \"$ARGV[0].tmp\") or die; print $f $$; close $f; rename(\"$ARGV[0].tmp\", $ARGV[0]); exec(\"sleep\", \"600\")' {d}/$COPY-pgroup & \
         echo $$ > {d}/$COPY-leader.tmp && mv {d}/$COPY-leader.tmp {d}/$COPY-leader; wait"
    )
}

/// The copies (leader pids) that wrote a leader file so far.
fn copies_started(dir: &Path) -> Vec<i32> {
    let mut out: Vec<i32> = std::fs::read_dir(dir)
        .expect("pid dir")
        .flatten()
        .filter_map(|e| {
            e.file_name()
                .to_str()?
                .strip_suffix("-leader")?
                .parse()
                .ok()
        })
        .collect();
    out.sort_unstable();
    out
}

fn wait_for_copy(dir: &Path, except: &[i32]) -> i32 {
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(copy) = copies_started(dir)
            .into_iter()
            .find(|c| !except.contains(c))
        {
            let names: Vec<String> = ROLES.iter().map(|r| format!("{copy}-{r}")).collect();
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            wait_files(dir, &names);
            return copy;
        }
        assert!(Instant::now() < until, "no new copy of the work started");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn runner_pid(home: &Path, force_subreaper: bool) -> i32 {
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let out = tollgate(home, force_subreaper, &["status", "--json"]);
        let value: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        if let Some(pid) = value["runners"][0]["identity"]["pid"].as_i64() {
            return pid as i32;
        }
        assert!(Instant::now() < until, "no runner: {}", describe(&out));
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The leader's v2 group, from `/proc/<pid>/cgroup`.
fn v2_group(pid: i32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("0::").map(str::to_string))
}

fn runner_killed_then_repaired(path: &str, force_subreaper: bool, repairer: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = dir.path().join("home");
    let pids = dir.path().join("pids");
    std::fs::create_dir(&pids).expect("pid dir");
    let tag = common::containment::unique_tag("turn-killed");
    let _reaper = Reaper::new(&tag);
    let init = tollgate(&home, force_subreaper, &["init", "--workers", "1"]);
    assert!(init.status.success(), "{}", describe(&init));
    let sampler = Sampler::start(&tag);
    let tag_env = format!("TEST_TAG={tag}");
    let submit = tollgate(
        &home,
        force_subreaper,
        &[
            "submit",
            "--task",
            "victim",
            "--env",
            &tag_env,
            "--",
            "sh",
            "-c",
            &script(&pids),
        ],
    );
    assert!(submit.status.success(), "{}", describe(&submit));
    let old = wait_for_copy(&pids, &[]);
    let old_tree: Vec<(&str, i32)> = ROLES
        .iter()
        .map(|r| (*r, read_pid(&pids, &format!("{old}-{r}"))))
        .collect();
    let group = v2_group(old).expect("the leader's v2 group");
    eprintln!("{path} path: the work's leader {old} is in the v2 group {group:?}");
    if force_subreaper {
        assert!(!group.contains("-work-"), "forced off, yet in {group}");
    } else {
        assert!(
            group.contains("-work-"),
            "the work has no group of its own: {group}"
        );
    }
    // The sampler must have watched the old copy before the runner dies, and (below) the new
    // one before it stops, or its peak says nothing about the hand-over between them.
    sampler.wait_seen(&old.to_string());
    let runner = runner_pid(&home, force_subreaper);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(runner),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("SIGKILL the runner");
    let until = Instant::now() + Duration::from_secs(10);
    while is_alive(runner) || is_alive(old) {
        assert!(Instant::now() < until, "runner or leader did not die");
        std::thread::sleep(Duration::from_millis(5));
    }
    // What the issue measured: the rest of the tree outlives its runner.
    let orphans: Vec<_> = old_tree.iter().filter(|(_, p)| is_alive(*p)).collect();
    assert_eq!(
        orphans.len(),
        3,
        "the plain child, the setsid grandchild and the process-group child outlive the runner: {old_tree:?}"
    );

    // `reconcile`, or the bounded repair `status` runs after its own output (one kill at most).
    let reconcile = tollgate(&home, force_subreaper, &[repairer]);
    assert!(reconcile.status.success(), "{}", describe(&reconcile));
    let left: Vec<_> = old_tree.iter().filter(|(_, p)| is_alive(*p)).collect();
    assert!(
        left.is_empty(),
        "{path}: the old tree survived reconcile: {left:?}\n{}",
        describe(&reconcile)
    );
    if !force_subreaper {
        let dir = Path::new("/sys/fs/cgroup/unified").join(group.trim_start_matches('/'));
        assert!(
            !dir.exists(),
            "the old work's group is left: {}",
            dir.display()
        );
    }
    if repairer != "reconcile" {
        // The repair stopped after its kill; the next command's repair replaces the runner.
        let again = tollgate(&home, force_subreaper, &[repairer]);
        assert!(again.status.success(), "{}", describe(&again));
    }
    // The turn runs again: the sampler watches the new copy start too.
    let new = wait_for_copy(&pids, &[old]);
    sampler.wait_seen(&new.to_string());
    let report = sampler.finish();
    eprintln!(
        "{path} path, repaired by {repairer}: old copy {old}, new copy {new}, sampler {report:?}"
    );
    // Not a count of scans (under load a scan of /proc takes long): the scans saw both copies.
    assert!(
        report.copies_seen.contains(&old.to_string())
            && report.copies_seen.contains(&new.to_string()),
        "the sampler did not see both copies: {report:?}"
    );
    assert_eq!(
        report.peak_copies, 1,
        "{path}: two copies of the turn's work were alive at once: {report:?}"
    );
    let cancel = tollgate(&home, force_subreaper, &["cancel", "victim"]);
    assert!(cancel.status.success(), "{}", describe(&cancel));
    wait_untagged(&tag, "cancel");
}

#[test]
fn a_killed_runners_tree_is_gone_before_its_turn_runs_again() {
    for (path, force_subreaper) in paths() {
        runner_killed_then_repaired(path, force_subreaper, "reconcile");
    }
}

/// `status` repairs too (a bounded reconcile step after its output), so nobody has to run
/// `reconcile` by hand.
#[test]
fn status_kills_a_killed_runners_tree_without_reconcile() {
    for (path, force_subreaper) in paths() {
        runner_killed_then_repaired(path, force_subreaper, "status");
    }
}
