//! One key of `tollgate.toml` read or changed in place: `tollgate config get|set|show` and
//! `tollgate init --workers N` on an existing file. Edits go through `toml_edit`, so the user's
//! comments, order and layout stay; the edited text must load (every check of [`Config::parse`])
//! before it is published atomically, else the file is left as it was.

use super::serve::ServeTable;
use super::{Config, ConfigError};
use crate::fsutil;
use serde_json::Value;
use std::path::Path;

/// The effective configuration as JSON: every key with its value, defaults filled in (`[serve]`
/// is shown with its defaults when the file has none).
pub fn effective(config: &Config) -> Value {
    let mut value = serde_json::to_value(config).unwrap_or(Value::Null);
    if let Value::Object(map) = &mut value {
        if config.serve.is_none() {
            map.insert(
                "serve".to_string(),
                serde_json::to_value(ServeTable::default()).unwrap_or(Value::Null),
            );
        }
        map.entry("route")
            .or_insert_with(|| Value::Array(Vec::new()));
        // Keys serialization leaves out at their default: `config show` lists every key.
        let defaults = Config::default();
        let default_of = |value: serde_json::Result<Value>| value.unwrap_or(Value::Null);
        map.entry("durability")
            .or_insert_with(|| default_of(serde_json::to_value(defaults.durability)));
        map.entry("store")
            .or_insert_with(|| Value::String("sqlite".to_string()));
        map.entry("env_keep")
            .or_insert_with(|| default_of(serde_json::to_value(&defaults.env_keep)));
        map.entry("log_bytes")
            .or_insert_with(|| Value::from(defaults.log_bytes));
        map.entry("log_tail_bytes")
            .or_insert_with(|| Value::from(defaults.log_tail_bytes));
        map.entry("hook")
            .or_insert_with(|| Value::Array(Vec::new()));
        map.entry("status_ended_turns")
            .or_insert_with(|| Value::from(defaults.status_ended_turns));
        // The host name a fleet sees (derived from the machine and boot ids when unset).
        map.entry("host").or_insert_with(|| {
            super::fleet::host_for(config).map_or(Value::Null, |h| Value::String(h.to_string()))
        });
    }
    value
}

/// The value at a dotted `key` (`workers`, `serve.max_detached`, `route.0.path`).
pub fn lookup<'a>(value: &'a Value, key: &str) -> Option<&'a Value> {
    key.split('.').try_fold(value, |at, part| match at {
        Value::Object(map) => map.get(part),
        Value::Array(items) => part.parse::<usize>().ok().and_then(|i| items.get(i)),
        _ => None,
    })
}

/// Every leaf key of `value` with its value, in order (`serve.listen`, …).
pub fn leaves(value: &Value) -> Vec<(String, Value)> {
    fn walk(prefix: &str, value: &Value, out: &mut Vec<(String, Value)>) {
        match value {
            Value::Object(map) if !map.is_empty() => {
                for (k, v) in map {
                    let key = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    walk(&key, v, out);
                }
            }
            Value::Array(items) if items.iter().any(Value::is_object) => {
                for (i, v) in items.iter().enumerate() {
                    walk(&format!("{prefix}.{i}"), v, out);
                }
            }
            _ => out.push((prefix.to_string(), value.clone())),
        }
    }
    let mut out = Vec::new();
    walk("", value, &mut out);
    out
}

/// Whether the dotted `key` is written in the config text (else its value is the default).
pub fn is_set_in(text: &str, key: &str) -> bool {
    fn walk(item: &toml_edit::Item, parts: &[&str]) -> bool {
        let Some((part, rest)) = parts.split_first() else {
            return !item.is_none();
        };
        if let Ok(i) = part.parse::<usize>() {
            return item
                .as_array_of_tables()
                .and_then(|tables| tables.get(i))
                .is_some_and(|t| walk(&toml_edit::Item::Table(t.clone()), rest));
        }
        item.get(part).is_some_and(|next| walk(next, rest))
    }
    let parts: Vec<&str> = key.split('.').collect();
    text.parse::<toml_edit::DocumentMut>()
        .is_ok_and(|doc| walk(doc.as_item(), &parts))
}

fn invalid(path: &Path, detail: String) -> ConfigError {
    ConfigError::Invalid {
        path: path.display().to_string(),
        detail,
    }
}

/// Sets the dotted `key` of the config at `path` to `value` (read as the type the key has:
/// a whole number, true/false, or a string, quoted or not), keeping the rest of the file as it
/// is. A missing file is created. Refused, with the file unchanged: a file that does not load
/// now, an unknown key, a table or array key (`route`: edit the file), a value of the wrong
/// type, and a result that would not load (the error names the key).
pub fn set_key(path: &Path, key: &str, value: &str) -> Result<Config, ConfigError> {
    let existing = fsutil::read_state_file(path, "config", fsutil::limits::CONFIG_BYTES)?;
    let (text, current) = match &existing {
        Some(bytes) => (
            String::from_utf8_lossy(bytes).into_owned(),
            Config::parse(path, bytes)?,
        ),
        None => (
            "# tollgate home configuration (`tollgate config show` lists every key).\n".to_string(),
            Config::default(),
        ),
    };
    let known = effective(&current);
    let shown = lookup(&known, key).ok_or_else(|| {
        invalid(
            path,
            format!("key `{key}`: no such key (`tollgate config show` lists them)"),
        )
    })?;
    let unquoted = value
        .strip_prefix('"')
        .and_then(|v| v.strip_suffix('"'))
        .unwrap_or(value);
    let new_value: toml_edit::Value = match shown {
        Value::Number(_) => unquoted
            .parse::<i64>()
            .map(toml_edit::Value::from)
            .map_err(|_| {
                invalid(
                    path,
                    format!("key `{key}`: {value:?} is not a whole number"),
                )
            })?,
        Value::Bool(_) => unquoted
            .parse::<bool>()
            .map(toml_edit::Value::from)
            .map_err(|_| invalid(path, format!("key `{key}`: {value:?} is not true or false")))?,
        Value::String(_) | Value::Null => toml_edit::Value::from(unquoted),
        Value::Array(_) | Value::Object(_) => {
            return Err(invalid(
                path,
                format!(
                    "key `{key}` is a table or a list; edit {} instead",
                    path.display()
                ),
            ))
        }
    };
    let parts: Vec<&str> = key.split('.').collect();
    if parts.iter().any(|p| p.parse::<usize>().is_ok()) {
        return Err(invalid(
            path,
            format!(
                "key `{key}`: routes are set by editing {} (`[[route]]` tables)",
                path.display()
            ),
        ));
    }
    let mut doc = text
        .parse::<toml_edit::DocumentMut>()
        .map_err(|e| invalid(path, e.to_string()))?;
    let (leaf, tables) = parts
        .split_last()
        .ok_or_else(|| invalid(path, "an empty key".to_string()))?;
    let mut table = doc.as_table_mut();
    for part in tables {
        let entry = table
            .entry(part)
            .or_insert_with(|| toml_edit::Item::Table(toml_edit::Table::new()));
        table = entry
            .as_table_mut()
            .ok_or_else(|| invalid(path, format!("key `{part}` is not a table")))?;
    }
    match table.get_mut(leaf).and_then(toml_edit::Item::as_value_mut) {
        Some(old) => {
            // In place: the key keeps its comments above, the value the comment after it.
            let decor = old.decor().clone();
            *old = new_value;
            *old.decor_mut() = decor;
        }
        None => {
            table.insert(leaf, toml_edit::Item::Value(new_value));
        }
    }
    let edited = doc.to_string();
    let config = Config::parse(path, edited.as_bytes())?;
    fsutil::publish_bytes(path, edited.as_bytes())?;
    Ok(config)
}
