//! A home of an earlier version, written file by file: the queue in `queue.json` (beside its
//! `queue.lock`), the records in `tasks/<task>/task.json` and `tasks/<task>/turns/<n>/turn.json`,
//! each in the format and the layout that version's file store wrote (its `publish_json`: pretty
//! JSON, fields in declaration order, empty optional fields left out), and the finished turn's
//! logs beside its record. The import tests open such a home with today's binary, which imports
//! it once; the binary itself can no longer run on these files.

use std::path::Path;

/// When the legacy turn was submitted, started and ended (milliseconds since the epoch): long
/// ago, in order.
pub const SUBMITTED_AT_MILLIS: u64 = 1_700_000_000_000;

/// Writes an earlier version's home at `home` (which must exist: its config is the test's,
/// written by `tollgate init`, whose format did not change): task `task` with one finished turn,
/// turn 1 (short id 1), which ran `echo <output>` and completed; the queue it left behind (empty,
/// its next id 2); the turn's logs (`<output>` on stdout).
pub fn write(home: &Path, task: &str, output: &str) {
    let submitted = SUBMITTED_AT_MILLIS;
    let turn_dir = home.join("tasks").join(task).join("turns").join("1");
    mkdir_private(&home.join("tasks"));
    mkdir_private(&home.join("tasks").join(task));
    mkdir_private(&home.join("tasks").join(task).join("turns"));
    mkdir_private(&turn_dir);
    let queue = r#"{
  "version": 1,
  "next_queue_id": 2,
  "entries": [],
  "runners": []
}"#;
    write_private(&home.join("queue.json"), queue);
    write_private(&home.join("queue.lock"), "");
    let task_record = format!(
        r#"{{
  "version": 1,
  "name": {name},
  "created_at_millis": {submitted},
  "next_turn": 2,
  "strategy": {{
    "kind": "concurrent",
    "max": 1
  }}
}}"#,
        name = json_string(task),
    );
    write_private(
        &home.join("tasks").join(task).join("task.json"),
        &task_record,
    );
    let cwd = home.display().to_string();
    let turn_record = format!(
        r#"{{
  "version": 1,
  "task": {name},
  "turn": 1,
  "argv": [
    "echo",
    {output}
  ],
  "cwd": {cwd},
  "env": {{
    "PATH": "/usr/bin:/bin"
  }},
  "attached": false,
  "submitted_at_millis": {submitted},
  "started_at_millis": {started},
  "runner": {{
    "pid": 4194000,
    "start_time_micros": 1000000
  }},
  "ended_at_millis": {ended},
  "exit_code": 0,
  "outcome": "completed",
  "id": 1
}}"#,
        name = json_string(task),
        output = json_string(output),
        cwd = json_string(&cwd),
        started = submitted + 30,
        ended = submitted + 60,
    );
    write_private(&turn_dir.join("turn.json"), &turn_record);
    write_private(&turn_dir.join("stdout.log"), &format!("{output}\n"));
    write_private(&turn_dir.join("stderr.log"), "");
    write_private(
        &turn_dir.join("runner.log"),
        &format!("[2023-11-14T22:13:20.060Z] {task} turn 1: ran, outcome Completed\n"),
    );
}

fn json_string(text: &str) -> String {
    serde_json::to_string(text).expect("a string renders")
}

fn mkdir_private(dir: &Path) {
    use std::os::unix::fs::DirBuilderExt;
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => panic!("create {}: {e}", dir.display()),
    }
}

fn write_private(path: &Path, text: &str) {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .unwrap_or_else(|e| panic!("create {}: {e}", path.display()));
    file.write_all(text.as_bytes())
        .unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}
