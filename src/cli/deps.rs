//! `submit --after`/`--after-success`/`--retry`/`--backoff` at the CLI edge: the references
//! resolved to turns (each followed along its retry chain), the retry plan parsed, and the
//! messages for a held or dependency-failed turn.

use super::{turnref, CliError, SubmitArgs};
use crate::protocol::slots::{
    AfterRule, Dependency, RetryPlan, TurnKey, MAX_ATTEMPTS, MAX_BACKOFF_MILLIS, MAX_DEPENDENCIES,
};
use crate::runtime::Runtime;
use crate::submit::Sequencing;

/// What the submit options ask, before the references are resolved.
#[derive(Clone, Debug, Default)]
pub struct SequencingArgs {
    pub after: Vec<String>,
    pub after_success: Vec<String>,
    pub retry: Option<RetryPlan>,
}

impl SequencingArgs {
    /// Takes the options out of `args`, checking the retry count and the backoff.
    pub fn from_args(args: &mut SubmitArgs) -> Result<Self, CliError> {
        let count = args.after.len() + args.after_success.len();
        if count > MAX_DEPENDENCIES {
            return Err(CliError::Usage(format!(
                "--after/--after-success: {count} turns given, at most {MAX_DEPENDENCIES}"
            )));
        }
        let retry = match args.retry {
            None => None,
            Some(n) if n >= MAX_ATTEMPTS => {
                return Err(CliError::Usage(format!(
                    "--retry {n}: at most {} retries",
                    MAX_ATTEMPTS - 1
                )))
            }
            Some(n) => {
                let backoff_millis = match &args.backoff {
                    None => 0,
                    Some(text) => parse_backoff(text)
                        .map_err(|e| CliError::Usage(format!("--backoff: {e}")))?,
                };
                Some(RetryPlan::first(n, backoff_millis))
            }
        };
        Ok(SequencingArgs {
            after: std::mem::take(&mut args.after),
            after_success: std::mem::take(&mut args.after_success),
            retry,
        })
    }

    /// Resolves the references (an unknown one is a usage error naming it, before anything is
    /// queued), each to the last attempt of its retry chain.
    pub fn resolve(&self, rt: &Runtime) -> Result<Sequencing, CliError> {
        let mut after: Vec<Dependency> = Vec::new();
        let given = self
            .after
            .iter()
            .map(|r| (r, AfterRule::Ended))
            .chain(self.after_success.iter().map(|r| (r, AfterRule::Succeeded)));
        for (reference, rule) in given {
            let key = turnref::resolve(rt, reference).map_err(|e| match e {
                CliError::Usage(text) => CliError::Usage(format!("--after {reference}: {text}")),
                other => other,
            })?;
            let key = crate::deps::last_attempt(&rt.home, &key)?;
            let dependency = Dependency { key, rule };
            // The same turn named twice: the stricter rule wins.
            match after.iter_mut().find(|d| d.key == dependency.key) {
                Some(existing) => existing.rule = existing.rule.max(dependency.rule),
                None => after.push(dependency),
            }
        }
        Ok(Sequencing {
            after,
            retry: self.retry,
        })
    }

    pub fn is_empty(&self) -> bool {
        self.after.is_empty() && self.after_success.is_empty() && self.retry.is_none()
    }
}

/// A backoff (humantime: `500ms`, `10s`, `5m`): 0 up to [`MAX_BACKOFF_MILLIS`].
fn parse_backoff(text: &str) -> Result<u64, String> {
    let duration = humantime::parse_duration(text).map_err(|e| format!("{text:?}: {e}"))?;
    let millis = u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
    if millis > MAX_BACKOFF_MILLIS {
        return Err(format!("{text:?} is longer than 1h"));
    }
    Ok(millis)
}

/// The turns a held turn waits for, as a line names them.
pub fn waiting_on(rt: &Runtime, keys: &[TurnKey]) -> String {
    keys.iter()
        .map(|k| named(rt, k))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `task T turn N (id I)`.
pub fn named(rt: &Runtime, key: &TurnKey) -> String {
    match crate::tasks::load_turn(&rt.home, key)
        .ok()
        .flatten()
        .and_then(|t| t.id)
    {
        Some(id) => format!("{key} (id {id})"),
        None => key.to_string(),
    }
}
