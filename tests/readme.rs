//! README.md cannot drift from what tollgate does: every `sh` block is pasted into a shell (bash,
//! `set -e`) in a temporary directory with a temporary default home, and must succeed; what its
//! `# prints: TEXT` comments and its JSON comment lines (`# {"key":"value",…}`, `…` in a value
//! matching anything) say must be in its output; the synopsis (the `text` block of commands)
//! names only commands and options that exist, and every visible command; the exit codes README
//! lists are those of `tollgate --help`.
//!
//! What a test cannot do is not run: `cargo build` (the binary under test is built already, as
//! `target/release/tollgate` in the block's directory) and `cargo test` (the suite cannot run
//! itself inside itself: its `--features` are checked against Cargo.toml instead) are shims;
//! `cargo run [--features F] -- ARGS` runs the binary under test with ARGS. The webhook block's
//! port 8787 is replaced by a free one, so runs in parallel do not collide.

mod common;

use common::BIN;
use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The longest one block may run.
const BLOCK_DEADLINE: Duration = Duration::from_secs(60);

/// A fenced block of README.md: its info string, its first line's number and its text (the
/// fence's indentation removed).
struct Block {
    lang: String,
    line: usize,
    text: String,
}

fn readme() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).expect("README.md")
}

fn blocks(text: &str) -> Vec<Block> {
    let mut out = Vec::new();
    // The open block: its info string, first line, fence indentation and text so far.
    let mut open: Option<(String, usize, usize, String)> = None;
    for (n, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        let Some((lang, first, at, mut body)) = open.take() else {
            if let Some(lang) = trimmed.strip_prefix("```") {
                open = Some((lang.trim().to_string(), n + 2, indent, String::new()));
            }
            continue;
        };
        if trimmed.starts_with("```") {
            out.push(Block {
                lang,
                line: first,
                text: body,
            });
            continue;
        }
        body.push_str(line.get(at..).unwrap_or(trimmed));
        body.push('\n');
        open = Some((lang, first, at, body));
    }
    out
}

/// The shims for what a test must not run again (see the module comment).
const PRELUDE: &str = r#"set -e
cargo() {
    printf '%s\n' "$*" >> "$README_CARGO_LOG"
    case "$1" in
        build) return 0 ;;
        test) return 0 ;;
        run)
            shift
            local features=""
            while [ "$#" -gt 0 ] && [ "$1" != "--" ]; do
                [ "$1" = "--features" ] && features="$2"
                shift
            done
            shift
            if [ "$features" = model-check ] && [ "$README_MODEL_CHECK" != 1 ]; then
                echo "(built without model-check: not run: tollgate $*)"
                return 0
            fi
            tollgate "$@"
            ;;
        *) echo "README test: no shim for cargo $1" >&2; return 1 ;;
    esac
}
"#;

/// A port nothing listens on now (bound and released: a test server binds it right after).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// The pids of processes whose command line names `dir` (runners and wakers of its homes).
fn processes_under(dir: &Path) -> Vec<i32> {
    let needle = dir.to_string_lossy().into_owned();
    std::fs::read_dir("/proc")
        .expect("/proc")
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|raw| String::from_utf8_lossy(&raw).contains(&needle))
                && common::containment::is_alive(*pid)
        })
        .collect()
}

/// Runs `script` in `dir` as a pasted block: bash in a process group of its own, the binary
/// under test on PATH as `tollgate` and at `target/release/tollgate`, HOME and TMPDIR inside
/// `dir`. Returns its exit status and its output (stdout and stderr together, in order).
fn paste(dir: &Path, script: &str) -> (std::process::ExitStatus, String) {
    use std::os::unix::process::CommandExt;
    let release = dir.join("target/release");
    std::fs::create_dir_all(&release).expect("target/release");
    std::os::unix::fs::symlink(BIN, release.join("tollgate")).expect("the binary");
    for sub in ["home", "tmp"] {
        std::fs::create_dir_all(dir.join(sub)).expect("home, tmp");
    }
    let path = format!(
        "{}:{}",
        release.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    // Both streams into one file, in the order they were written.
    let log = dir.join("output.log");
    let writer = std::fs::File::create(&log).expect("the output file");
    let mut child = Command::new("bash")
        .arg("-c")
        .arg(format!("{PRELUDE}\n{script}"))
        .current_dir(dir)
        .env_clear()
        .env("PATH", path)
        .env("HOME", dir.join("home"))
        .env("TMPDIR", dir.join("tmp"))
        .env("LANG", "C.UTF-8")
        .env("README_CARGO_LOG", dir.join("cargo.log"))
        .env(
            "README_MODEL_CHECK",
            if cfg!(feature = "model-check") {
                "1"
            } else {
                "0"
            },
        )
        .stdin(Stdio::null())
        .stdout(writer.try_clone().expect("the output file"))
        .stderr(writer)
        .process_group(0)
        .spawn()
        .expect("bash");
    let deadline = Instant::now() + BLOCK_DEADLINE;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(child.id() as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
            let _ = child.wait();
            panic!("the block ran longer than {BLOCK_DEADLINE:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    // Whatever the block left in its group (a background job) ends with it.
    let _ = nix::sys::signal::killpg(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGKILL,
    );
    let output = std::fs::read(&log).expect("the output");
    (status, String::from_utf8_lossy(&output).into_owned())
}

/// Whether `got` matches `want` (a JSON value from a comment): the same keys, the same values,
/// a string with `…` matching any text in its place.
fn matches(want: &serde_json::Value, got: &serde_json::Value) -> bool {
    use serde_json::Value;
    match (want, got) {
        (Value::Object(w), Value::Object(g)) => {
            w.len() == g.len()
                && w.iter()
                    .all(|(k, v)| g.get(k).is_some_and(|x| matches(v, x)))
        }
        (Value::String(w), Value::String(g)) if w.contains('…') => {
            let parts: Vec<&str> = w.split('…').collect();
            let mut rest = g.as_str();
            for (i, part) in parts.iter().enumerate() {
                match rest.find(part) {
                    Some(at) if i > 0 || at == 0 => rest = &rest[at + part.len()..],
                    _ => return false,
                }
            }
            parts.last().is_none_or(|p| p.is_empty() || g.ends_with(p))
        }
        (w, g) => w == g,
    }
}

/// Checks what the block's comments say it prints against its output.
fn check_output(block: &Block, output: &str) {
    for line in block.text.lines() {
        if let Some((_, said)) = line.split_once("# prints: ") {
            assert!(
                output.contains(said.trim()),
                "README.md block at line {}: {said:?} was not printed:\n{output}",
                block.line
            );
        }
        if let Some(json) = line.trim().strip_prefix("# {") {
            let want: serde_json::Value =
                serde_json::from_str(&format!("{{{json}")).expect("a JSON comment");
            assert!(
                output.lines().any(|l| serde_json::from_str(l)
                    .is_ok_and(|got: serde_json::Value| matches(&want, &got))),
                "README.md block at line {}: no output line like {want}:\n{output}",
                block.line
            );
        }
    }
}

/// The `--features` a block gave `cargo` exist in Cargo.toml.
fn check_features(dir: &Path) {
    let Ok(log) = std::fs::read_to_string(dir.join("cargo.log")) else {
        return;
    };
    let manifest: toml::Value = toml::from_str(
        &std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml"))
            .expect("Cargo.toml"),
    )
    .expect("Cargo.toml parses");
    let features = manifest["features"].as_table().expect("[features]");
    for call in log.lines() {
        let words: Vec<&str> = call.split_whitespace().collect();
        for pair in words.windows(2).filter(|w| w[0] == "--features") {
            for feature in pair[1].split(',') {
                assert!(
                    features.contains_key(feature),
                    "README.md runs `cargo {call}`: no feature {feature:?} in Cargo.toml"
                );
            }
        }
    }
}

#[test]
fn every_shell_block_of_the_readme_runs_and_prints_what_it_says() {
    let readme = readme();
    let blocks: Vec<Block> = blocks(&readme)
        .into_iter()
        .filter(|b| b.lang == "sh")
        .collect();
    assert!(
        blocks.len() >= 4,
        "the README's shell blocks were not found"
    );
    for block in &blocks {
        let dir = tempfile::tempdir().expect("tempdir");
        let script = block.text.replace("8787", &free_port().to_string());
        let (status, output) = paste(dir.path(), &script);
        assert!(
            status.success(),
            "README.md block at line {} failed ({status}):\n{}\n--- its output:\n{output}",
            block.line,
            block.text
        );
        check_output(block, &output);
        check_features(dir.path());
        // Nothing it started outlives it: its runners end with their turns, and its homes go.
        let until = Instant::now() + Duration::from_secs(20);
        while !processes_under(dir.path()).is_empty() {
            assert!(
                Instant::now() < until,
                "README.md block at line {} left processes behind: {:?}",
                block.line,
                processes_under(dir.path())
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// The visible subcommands and their options, from `tollgate --help` and `SUB --help`.
fn help(args: &[&str]) -> Option<String> {
    let out = Command::new(BIN)
        .args(args)
        .arg("--help")
        .env_remove("TOLLGATE_HOME")
        .stdin(Stdio::null())
        .output()
        .expect("tollgate --help");
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn the_synopsis_names_every_command_and_only_options_that_exist() {
    let readme = readme();
    let synopsis = blocks(&readme)
        .into_iter()
        .find(|b| b.lang == "text" && b.text.starts_with("tollgate "))
        .expect("the synopsis block");
    let top = help(&[]).expect("tollgate --help");
    let commands: BTreeSet<String> = top
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        // A command's line; its description may go on, indented further, on the next lines.
        .filter(|l| !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .filter(|c| c != "help")
        .collect();
    let mut named = BTreeSet::new();
    for line in synopsis.text.lines() {
        let usage = line.split(" # ").next().unwrap_or(line);
        let words: Vec<&str> = usage.split_whitespace().collect();
        let sub = words.get(1).expect("tollgate SUB").to_string();
        if sub == "model" && !cfg!(feature = "model-check") {
            continue;
        }
        let Some(sub_help) = help(&[&sub]) else {
            panic!("the synopsis names `tollgate {sub}`, which does not exist");
        };
        named.insert(sub.clone());
        for word in &words[2..] {
            let option = word.trim_matches(|c| matches!(c, '[' | ']' | '|'));
            if option.starts_with('-') && option != "--" {
                assert!(
                    sub_help.contains(option),
                    "the synopsis gives `tollgate {sub}` {option}, which its --help lacks"
                );
            }
        }
    }
    let missing: Vec<&String> = commands.difference(&named).collect();
    assert!(missing.is_empty(), "the synopsis lacks {missing:?}");
}

#[test]
fn the_readme_lists_the_exit_codes_of_help() {
    let readme = readme();
    let start = readme
        .find("Exit codes (also in")
        .expect("README's exit codes");
    let listed: BTreeSet<String> = readme[start..]
        .lines()
        .skip(1)
        .skip_while(|l| l.trim().is_empty())
        .take_while(|l| l.starts_with("- `"))
        .map(|l| l[3..].split('`').next().expect("a code").to_string())
        .collect();
    let top = help(&[]).expect("tollgate --help");
    let documented: BTreeSet<String> = top
        .lines()
        .skip_while(|l| !l.starts_with("Exit codes:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| {
            let first = l.split_whitespace().next()?;
            first.parse::<u32>().is_ok().then(|| first.to_string())
        })
        .collect();
    assert_eq!(
        listed, documented,
        "README.md and `tollgate --help` list other exit codes"
    );
}
