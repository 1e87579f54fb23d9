//! `[[hook]]` in tollgate.toml: commands the runner runs after a turn's result is recorded
//! (spec/turns.md, "Hooks"). This module is the schema and its checks; running them is
//! `runner::hooks`.

use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Most `[[hook]]` tables a config may hold: more would only hide a copy-paste mistake.
pub const MAX_HOOKS: usize = 32;
/// Most hooks run for one turn (the first matching ones, in file order); the rest are logged as
/// skipped, so a turn's end costs a bounded time.
pub const MAX_HOOKS_PER_TURN: usize = 8;
/// A hook's `timeout` when it gives none.
pub const DEFAULT_HOOK_TIMEOUT_MILLIS: u64 = 30_000;
/// The longest `timeout` a hook may have: a hook holds its runner (not a slot) until it ends.
pub const MAX_HOOK_TIMEOUT_MILLIS: u64 = 60 * 60 * 1000;
/// Longest `task` glob, in bytes.
const MAX_GLOB_BYTES: usize = 256;

/// When a hook runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HookOn {
    /// After every turn that ran or was settled by its runner (any outcome).
    Finish,
    /// After a turn that did not complete (failed, timed out, cancelled, could not start).
    Failure,
    /// After a turn that completed (exit 0).
    Success,
}

/// One `[[hook]]` table.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HookTable {
    pub on: HookOn,
    /// The hook's argv (run as is, no shell).
    pub command: Vec<String>,
    /// Only turns of tasks whose name matches this glob (`*` any run, `?` one character).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<String>,
    /// Killed (its whole unit) once it has run this long (humantime; default 30s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
}

impl HookTable {
    /// The hook's timeout (validated on load; the fallback only serves values built in code).
    pub fn timeout(&self) -> Duration {
        self.timeout
            .as_deref()
            .and_then(|t| humantime::parse_duration(t).ok())
            .unwrap_or(Duration::from_millis(DEFAULT_HOOK_TIMEOUT_MILLIS))
    }

    /// Whether this hook runs for a turn of `task` that ended `succeeded` (completed) or not.
    pub fn matches(&self, task: &str, succeeded: bool) -> bool {
        let when = match self.on {
            HookOn::Finish => true,
            HookOn::Success => succeeded,
            HookOn::Failure => !succeeded,
        };
        when && self
            .task
            .as_deref()
            .is_none_or(|glob| super::serve::glob_matches(glob, task))
    }
}

/// `[[hook]] N` (`hook[N]`, from 0) when line `line` (from 1) of the config `text` is inside
/// the N-th `[[hook]]` table, so a parse error there names the table as well as the key.
pub fn hook_table_at(text: &str, line: usize) -> Option<String> {
    let mut current = None;
    let mut hooks = 0;
    for l in text.lines().take(line) {
        let l = l.trim();
        if l == "[[hook]]" {
            current = Some(hooks);
            hooks += 1;
        } else if l.starts_with('[') {
            current = None;
        }
    }
    current.map(|i| format!("[[hook]] {i} (hook[{i}])"))
}

/// Checks every `[[hook]]`; the error names the table (`hook[N]`, from 0 in file order) and key.
pub fn validate_hooks(hooks: &[HookTable]) -> Result<(), String> {
    if hooks.len() > MAX_HOOKS {
        return Err(format!(
            "{} [[hook]] tables; at most {MAX_HOOKS} are allowed",
            hooks.len()
        ));
    }
    for (i, hook) in hooks.iter().enumerate() {
        let at =
            |key: &str, detail: String| format!("[[hook]] {i} (hook[{i}]), key `{key}`: {detail}");
        if hook.command.is_empty() || hook.command[0].is_empty() {
            return Err(at(
                "command",
                "must name a program: command = [\"prog\", \"arg\"]".into(),
            ));
        }
        if hook.command.len() > super::limits::MAX_ARGV {
            return Err(at(
                "command",
                format!("more than {} arguments", super::limits::MAX_ARGV),
            ));
        }
        if let Some(glob) = &hook.task {
            if glob.is_empty() || glob.len() > MAX_GLOB_BYTES {
                return Err(at(
                    "task",
                    format!("{glob:?}: a glob of 1..={MAX_GLOB_BYTES} bytes"),
                ));
            }
        }
        if let Some(text) = &hook.timeout {
            let duration = humantime::parse_duration(text)
                .map_err(|e| at("timeout", format!("{text:?}: {e}")))?;
            if duration.is_zero() || duration > Duration::from_millis(MAX_HOOK_TIMEOUT_MILLIS) {
                return Err(at(
                    "timeout",
                    format!("{text:?} is out of range (more than 0s, at most 1h)"),
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hook(on: HookOn, task: Option<&str>) -> HookTable {
        HookTable {
            on,
            command: vec!["true".into()],
            task: task.map(str::to_string),
            timeout: None,
        }
    }

    #[test]
    fn a_hook_matches_by_outcome_and_task_glob() {
        assert!(hook(HookOn::Finish, None).matches("a", true));
        assert!(hook(HookOn::Finish, None).matches("a", false));
        assert!(hook(HookOn::Success, None).matches("a", true));
        assert!(!hook(HookOn::Success, None).matches("a", false));
        assert!(hook(HookOn::Failure, None).matches("a", false));
        assert!(!hook(HookOn::Failure, None).matches("a", true));
        assert!(hook(HookOn::Finish, Some("build*")).matches("build-17", true));
        assert!(!hook(HookOn::Finish, Some("build*")).matches("rebuild", true));
    }

    #[test]
    fn a_parse_error_inside_a_hook_table_names_it() {
        let text = "workers = 1\n[[hook]]\non = 1\n[serve]\nx = 1\n[[hook]]\non = 2\n";
        assert_eq!(hook_table_at(text, 1), None);
        assert_eq!(
            hook_table_at(text, 3).as_deref(),
            Some("[[hook]] 0 (hook[0])")
        );
        assert_eq!(hook_table_at(text, 5), None);
        assert_eq!(
            hook_table_at(text, 7).as_deref(),
            Some("[[hook]] 1 (hook[1])")
        );
    }
}
