//! `submit` refuses a command whose program cannot be found (exit 2, naming it, nothing queued)
//! unless `--no-check`, looking for it as the runner's exec will: a path in the turn's
//! directory, a bare name on the PATH of the turn's stored environment. `submit -q` prints the
//! id alone. Through the real binary.

mod common;

use common::{describe, tollgate};
use std::os::unix::fs::PermissionsExt;

fn tasks_of(home: &std::path::Path) -> usize {
    let out = tollgate(home, &["status", "--json"]);
    let view: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    view["tasks"].as_array().expect("tasks").len()
}

#[test]
fn a_program_that_cannot_be_found_is_refused_before_anything_is_queued() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = common::init_home(dir.path(), 2);
    let work = dir.path().join("work");
    std::fs::create_dir(&work).expect("work");
    let plain = work.join("notes.txt");
    std::fs::write(&plain, "not a program\n").expect("plain");
    let script = work.join("job.sh");
    std::fs::write(&script, "#!/bin/sh\necho from the job\n").expect("script");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let cwd = work.to_str().expect("utf-8");
    for (argv, named) in [
        (vec!["./backup.sh"], "\"./backup.sh\": no such file"),
        (vec!["./notes.txt"], "\"./notes.txt\" is not executable"),
        (
            vec!["no-such-program-anywhere"],
            "\"no-such-program-anywhere\" is not found in the turn's PATH",
        ),
    ] {
        let mut args = vec!["submit", "--cwd", cwd, "--"];
        args.extend(argv.iter().copied());
        let out = tollgate(&home, &args);
        assert_eq!(out.status.code(), Some(2), "{argv:?}: {}", describe(&out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(named) && stderr.contains("--no-check"),
            "{argv:?}: {}",
            describe(&out)
        );
        assert!(out.stdout.is_empty(), "{}", describe(&out));
    }
    assert_eq!(tasks_of(&home), 0, "nothing was queued");
    // The turn's own PATH is searched (--env PATH=…), and its directory for a path.
    let bare = tollgate(
        &home,
        &[
            "submit",
            "--wait",
            "--env",
            &format!("PATH={cwd}:/usr/bin:/bin"),
            "--",
            "job.sh",
        ],
    );
    assert!(bare.status.success(), "{}", describe(&bare));
    assert_eq!(String::from_utf8_lossy(&bare.stdout), "from the job\n");
    let relative = tollgate(&home, &["submit", "--wait", "--cwd", cwd, "--", "./job.sh"]);
    assert!(relative.status.success(), "{}", describe(&relative));
    // --no-check queues it anyway; the turn then ends unstartable (exit 127 for --wait).
    let unchecked = tollgate(
        &home,
        &[
            "submit",
            "--no-check",
            "--wait",
            "--cwd",
            cwd,
            "--",
            "./backup.sh",
        ],
    );
    assert_eq!(
        unchecked.status.code(),
        Some(127),
        "{}",
        describe(&unchecked)
    );
    let view = tollgate(&home, &["status", "--json"]);
    assert!(
        String::from_utf8_lossy(&view.stdout).contains("\"unstartable\""),
        "{}",
        describe(&view)
    );
}

#[test]
fn quiet_submit_prints_only_the_turns_id() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = common::init_home(dir.path(), 1);
    let out = tollgate(&home, &["submit", "-q", "--task", "one", "--", "true"]);
    assert!(out.status.success(), "{}", describe(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "1\n",
        "{}",
        describe(&out)
    );
    assert!(out.stderr.is_empty(), "{}", describe(&out));
    let out = tollgate(&home, &["submit", "--quiet", "--", "true"]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "2\n",
        "{}",
        describe(&out)
    );
    // The id is what later commands take.
    let waited = tollgate(&home, &["wait", "2"]);
    assert!(waited.status.success(), "{}", describe(&waited));
    let waited = tollgate(&home, &["wait", "one"]);
    assert!(waited.status.success(), "{}", describe(&waited));
    let both = tollgate(&home, &["submit", "-q", "--json", "--", "true"]);
    assert_eq!(both.status.code(), Some(2), "{}", describe(&both));
}
