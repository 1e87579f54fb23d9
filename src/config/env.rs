//! `env_keep` in tollgate.toml: which variables of the submitter's environment a turn stores
//! (spec/turns.md, "The stored environment"). A turn's record used to hold the whole environment
//! (~11 KB on a desktop session); a restart needs only what the command reads.

use std::collections::BTreeMap;
use std::ffi::OsString;

/// Kept when the config names no `env_keep`: what a command commonly needs to behave the same on
/// a restart (search path, identity, locale, terminal, shell, time zone).
pub const DEFAULT_ENV_KEEP: [&str; 8] = [
    "PATH", "HOME", "USER", "LANG", "LC_*", "TERM", "SHELL", "TZ",
];
/// Most `env_keep` entries.
pub const MAX_ENV_KEEP: usize = 256;

pub fn default_env_keep() -> Vec<String> {
    DEFAULT_ENV_KEEP.iter().map(|s| s.to_string()).collect()
}

pub fn is_default_env_keep(keep: &[String]) -> bool {
    keep.iter().map(String::as_str).eq(DEFAULT_ENV_KEEP)
}

/// The variables of `env` whose name matches a pattern of `keep` (a name, or a glob such as
/// `LC_*`), plus every one named in `given` (`submit --env K=V`: always kept). Names and values
/// are bytes; a pattern (ASCII) matches a name whose bytes it spells, so a name that is not
/// UTF-8 is kept only when given.
pub fn kept(
    env: BTreeMap<OsString, OsString>,
    keep: &[String],
    given: &[OsString],
) -> BTreeMap<OsString, OsString> {
    env.into_iter()
        .filter(|(name, _)| {
            given.contains(name)
                || name.to_str().is_some_and(|name| {
                    keep.iter()
                        .any(|pattern| super::serve::glob_matches(pattern, name))
                })
        })
        .collect()
}

/// Checks `env_keep`: bounded, each entry a variable name or a glob of one (letters, digits,
/// `_`, `*`, `?`).
pub fn validate_env_keep(keep: &[String]) -> Result<(), String> {
    if keep.len() > MAX_ENV_KEEP {
        return Err(format!(
            "key `env_keep`: {} entries; at most {MAX_ENV_KEEP}",
            keep.len()
        ));
    }
    for entry in keep {
        let ok = !entry.is_empty()
            && entry.len() <= 256
            && entry
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '*' | '?'));
        if !ok {
            return Err(format!(
                "key `env_keep`: {entry:?} is not a variable name or a glob of one \
                 (letters, digits, '_', '*', '?')"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_kept_and_given_variables_stay() {
        use std::os::unix::ffi::OsStringExt;
        let raw = OsString::from_vec(b"RAW\xff".to_vec());
        let env: BTreeMap<OsString, OsString> = [
            ("PATH", "/bin"),
            ("LC_ALL", "C"),
            ("SECRET_TOKEN", "x"),
            ("MINE", "1"),
        ]
        .into_iter()
        .map(|(k, v)| (OsString::from(k), OsString::from(v)))
        .chain([(raw.clone(), OsString::from_vec(b"\xfe".to_vec()))])
        .collect();
        let kept = kept(env, &default_env_keep(), &["MINE".into(), raw.clone()]);
        let names: Vec<&OsString> = kept.keys().collect();
        assert_eq!(
            names,
            [&"LC_ALL".into(), &"MINE".into(), &"PATH".into(), &raw]
        );
        assert!(validate_env_keep(&default_env_keep()).is_ok());
        assert!(validate_env_keep(&["A B".to_string()]).is_err());
    }
}
