//! Bad packs are refused with exit 2 and an error that names the file, the key and the line.

use std::process::Command;

fn run_pack(text: &str) -> (i32, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pack.toml");
    std::fs::write(&path, text).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .arg("--home")
        .arg(dir.path().join("home"))
        .arg("run")
        .arg(&path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(stderr.contains("pack.toml"), "names the file: {stderr}");
    (out.status.code().unwrap(), stderr)
}

#[test]
fn unknown_key_is_named_with_its_line() {
    let (code, err) =
        run_pack("jobs = 1\n\n[[item]]\nname = \"a\"\nrun = [\"true\"]\ntimeout = \"1s\"\n");
    assert_eq!(code, 2);
    assert!(err.contains("pack.toml:6:"), "{err}");
    assert!(err.contains("`timeout`"), "{err}");
}

#[test]
fn bad_duration_is_named_with_its_line() {
    let (code, err) =
        run_pack("[[item]]\nname = \"a\"\nrun = [\"true\"]\ndeadline = \"fortnight\"\n");
    assert_eq!(code, 2);
    assert!(err.contains("pack.toml:4:"), "{err}");
    assert!(err.contains("`deadline`"), "{err}");
}

#[test]
fn run_and_shell_together_are_refused() {
    let (code, err) =
        run_pack("ceiling = \"1m\"\n[[item]]\nname = \"a\"\nrun = [\"true\"]\nshell = \"true\"\n");
    assert_eq!(code, 2);
    assert!(err.contains("pack.toml:4:"), "{err}");
    assert!(err.contains("`run`") && err.contains("shell"), "{err}");
}

#[test]
fn a_good_pack_passes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pack.toml");
    std::fs::write(&path, "[[item]]\nname = \"a\"\nrun = [\"true\"]\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .arg("--home")
        .arg(dir.path().join("home"))
        .arg("run")
        .arg(&path)
        .arg("--json")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(last["event"], "run_ended");
    assert_eq!(last["reason"], "completed");
}
