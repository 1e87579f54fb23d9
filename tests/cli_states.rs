//! One vocabulary of turn states (`src/turn_state.rs`): `status --help`, spec/turns.md and
//! README.md list exactly the code's words with their meanings, and the table, `--json`, `wait`
//! and `logs` speak them, through the real binary.

mod common;

use common::{describe, tollgate};
use tollgate::turn_state::TurnState;

/// The `- \`word\`: meaning` items of the list that follows the line starting with `heading`
/// in `text` (README.md and spec/turns.md write the states so).
fn listed_states(text: &str, heading: &str) -> Vec<(String, String)> {
    let start = text
        .find(heading)
        .unwrap_or_else(|| panic!("no {heading:?} in the text"));
    text[start..]
        .lines()
        .skip_while(|l| !l.starts_with("- `"))
        .take_while(|l| l.starts_with("- `"))
        .map(|l| {
            let rest = &l[3..];
            let (word, meaning) = rest.split_once("`: ").expect("- `word`: meaning");
            (word.to_string(), meaning.replace('`', ""))
        })
        .collect()
}

fn code_states() -> Vec<(String, String)> {
    TurnState::ALL
        .iter()
        .map(|s| (s.word().to_string(), s.meaning().replace('`', "")))
        .collect()
}

#[test]
fn readme_spec_and_status_help_list_the_codes_states() {
    let root = env!("CARGO_MANIFEST_DIR");
    let readme = std::fs::read_to_string(format!("{root}/README.md")).expect("README.md");
    assert_eq!(
        listed_states(&readme, "States: "),
        code_states(),
        "README.md's states are not src/turn_state.rs's"
    );
    let spec = std::fs::read_to_string(format!("{root}/spec/turns.md")).expect("spec");
    assert_eq!(
        listed_states(&spec, "## States of a turn"),
        code_states(),
        "spec/turns.md's states are not src/turn_state.rs's"
    );
    let home = tempfile::tempdir().expect("tempdir");
    let help = tollgate(home.path(), &["status", "--help"]);
    assert!(help.status.success(), "{}", describe(&help));
    let text = String::from_utf8_lossy(&help.stdout);
    let start = text.find("States").expect("a States paragraph");
    let listed: Vec<(String, String)> = text[start..]
        .lines()
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .map(|l| {
            let (word, meaning) = l.trim().split_once(' ').expect("word and meaning");
            (word.to_string(), meaning.trim().replace('`', ""))
        })
        .collect();
    assert_eq!(listed, code_states(), "status --help:\n{text}");
    // The manual page carries the same paragraph.
    let man = tollgate(home.path(), &["man"]);
    let page = String::from_utf8_lossy(&man.stdout);
    for state in TurnState::ALL {
        assert!(
            page.contains(&format!("  {:<18} {}", state.word(), state.meaning())),
            "the man page lacks {state}"
        );
    }
}

/// Every word `status --json` gives a turn is one of the list, the same in the table, and a
/// queued turn keeps its earlier word as `legacy_state`; `wait` and `logs` say the same words.
#[test]
fn the_table_json_wait_and_logs_speak_the_same_words() {
    let home = tempfile::tempdir().expect("tempdir");
    let home = home.path();
    let init = tollgate(home, &["init", "--workers", "1"]);
    assert!(init.status.success(), "{}", describe(&init));
    let run = |args: &[&str]| {
        let out = tollgate(home, args);
        assert!(out.status.code().is_some(), "{}", describe(&out));
        out
    };
    run(&["submit", "--task", "ok", "--wait", "--", "true"]);
    let failed = run(&["submit", "--task", "bad", "--wait", "--", "false"]);
    assert_eq!(failed.status.code(), Some(1));
    let slow = run(&[
        "submit",
        "--task",
        "slow",
        "--timeout",
        "1s",
        "--wait",
        "--",
        "sleep",
        "30",
    ]);
    assert_eq!(slow.status.code(), Some(124), "{}", describe(&slow));
    run(&["submit", "--task", "later", "--delay", "1h", "--", "true"]);
    run(&["submit", "--task", "gone", "--delay", "1h", "--", "true"]);
    run(&["cancel", "gone"]);

    let out = run(&["status", "--json"]);
    let view: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let words: Vec<&str> = TurnState::ALL.iter().map(|s| s.word()).collect();
    let mut seen = std::collections::BTreeMap::new();
    for task in view["tasks"].as_array().expect("tasks") {
        for turn in task["turns"].as_array().expect("turns") {
            let state = turn["state"].as_str().expect("state");
            assert!(
                words.contains(&state),
                "{state} is not a state word: {turn}"
            );
            seen.insert(
                task["name"].as_str().expect("name").to_string(),
                (state.to_string(), turn["legacy_state"].clone()),
            );
        }
    }
    let state = |task: &str| seen[task].0.clone();
    assert_eq!(state("ok"), "completed");
    assert_eq!(state("bad"), "failed");
    assert_eq!(state("slow"), "timed_out");
    assert_eq!(state("later"), "delayed");
    assert_eq!(state("gone"), "cancelled");
    assert_eq!(
        seen["later"].1, "parked",
        "the earlier word, for one version"
    );
    assert_eq!(seen["ok"].1, "completed");

    let table = String::from_utf8_lossy(&run(&["status"]).stdout).to_string();
    for (task, word) in [
        ("ok", "completed"),
        ("bad", "failed"),
        ("slow", "timed_out"),
        ("later", "delayed until"),
        ("gone", "cancelled"),
    ] {
        assert!(
            table
                .lines()
                .any(|l| l.split_whitespace().nth(1) == Some(task) && l.contains(word)),
            "{task} {word}: {table}"
        );
    }
    let wait = run(&["wait", "bad", "slow"]);
    let said = String::from_utf8_lossy(&wait.stderr);
    assert!(
        said.contains("bad turn 1: failed (exit 1)") && said.contains("slow turn 1: timed_out"),
        "{}",
        describe(&wait)
    );
    let logs = run(&["logs", "gone"]);
    assert!(
        String::from_utf8_lossy(&logs.stderr).contains("it never ran (cancelled)"),
        "{}",
        describe(&logs)
    );
    let logs = run(&["logs", "later"]);
    assert!(
        String::from_utf8_lossy(&logs.stderr).contains("it is delayed"),
        "{}",
        describe(&logs)
    );
    // The delayed turn's waker is the test's: cancelling the turn stops it (Q4).
    run(&["cancel", "later"]);
}
