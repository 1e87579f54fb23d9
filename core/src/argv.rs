//! A command's arguments and environment as Unix gives them: bytes ([`OsString`]), kept so from
//! the command line to the record and the spawn (spec/turns.md, "Arguments and environment as
//! bytes"). A record writes each one that is UTF-8 as a plain JSON string, so records of UTF-8
//! commands are what they always were; any other is written losslessly as `{"hex": "<bytes>"}`,
//! and an environment whose names are not all UTF-8 as a list of `[name, value]` pairs instead of
//! an object. Reading accepts both forms.

use serde::de::{self, Deserializer};
use serde::ser::{SerializeMap, SerializeSeq, Serializer};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};

/// A command and its arguments.
pub type Argv = Vec<OsString>;
/// A command's environment.
pub type Env = BTreeMap<OsString, OsString>;

/// One argument, name or value as a record holds it.
#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum Word {
    Text(String),
    Bytes { hex: String },
}

impl Word {
    fn of(word: &OsStr) -> Word {
        match word.to_str() {
            Some(text) => Word::Text(text.to_string()),
            None => Word::Bytes {
                hex: word.as_bytes().iter().map(|b| format!("{b:02x}")).collect(),
            },
        }
    }

    fn into_os<E: de::Error>(self) -> Result<OsString, E> {
        match self {
            Word::Text(text) => Ok(text.into()),
            Word::Bytes { hex } => {
                let digits = hex.as_bytes();
                if digits.len() % 2 != 0 {
                    return Err(E::custom("a hex word of odd length"));
                }
                let nibble = |d: u8| -> Result<u8, E> {
                    (d as char)
                        .to_digit(16)
                        .map(|n| n as u8)
                        .ok_or_else(|| E::custom("a hex word with a character that is not hex"))
                };
                let bytes = digits
                    .chunks(2)
                    .map(|pair| Ok(nibble(pair[0])? << 4 | nibble(pair[1])?))
                    .collect::<Result<Vec<u8>, E>>()?;
                Ok(OsString::from_vec(bytes))
            }
        }
    }
}

/// `#[serde(with = "crate::argv::words")]` for an [`Argv`].
pub mod words {
    use super::*;

    pub fn serialize<S: Serializer>(argv: &[OsString], serializer: S) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(Some(argv.len()))?;
        for word in argv {
            seq.serialize_element(&Word::of(word))?;
        }
        seq.end()
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Argv, D::Error> {
        Vec::<Word>::deserialize(deserializer)?
            .into_iter()
            .map(Word::into_os)
            .collect()
    }
}

/// `#[serde(with = "crate::argv::env")]` for an [`Env`].
pub mod env {
    use super::*;

    /// An environment as a record holds it: an object (every name UTF-8), or pairs.
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Wire {
        Object(BTreeMap<String, Word>),
        Pairs(Vec<(Word, Word)>),
    }

    pub fn serialize<S: Serializer>(env: &Env, serializer: S) -> Result<S::Ok, S::Error> {
        if env.keys().all(|name| name.to_str().is_some()) {
            let mut map = serializer.serialize_map(Some(env.len()))?;
            for (name, value) in env {
                map.serialize_entry(&name.to_string_lossy(), &Word::of(value))?;
            }
            map.end()
        } else {
            let mut seq = serializer.serialize_seq(Some(env.len()))?;
            for (name, value) in env {
                seq.serialize_element(&(Word::of(name), Word::of(value)))?;
            }
            seq.end()
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Env, D::Error> {
        match Wire::deserialize(deserializer)? {
            Wire::Object(map) => map
                .into_iter()
                .map(|(name, value)| Ok((OsString::from(name), value.into_os()?)))
                .collect(),
            Wire::Pairs(pairs) => pairs
                .into_iter()
                .map(|(name, value)| Ok((name.into_os()?, value.into_os()?)))
                .collect(),
        }
    }
}

/// The command as one line for people (`status`, `restart`'s message): the words joined by
/// spaces, bytes that are not UTF-8 shown as U+FFFD. Never parsed back.
pub fn display(argv: &[OsString]) -> String {
    argv.iter()
        .map(|word| word.to_string_lossy())
        .collect::<Vec<_>>()
        .join(" ")
}

/// `NAME=VALUE` (an `--env` argument) split at its first `=`; `None` without one or with an
/// empty name.
pub fn split_assignment(pair: &OsStr) -> Option<(OsString, OsString)> {
    let bytes = pair.as_bytes();
    let at = bytes.iter().position(|&b| b == b'=')?;
    (at > 0).then(|| {
        (
            OsString::from_vec(bytes[..at].to_vec()),
            OsString::from_vec(bytes[at + 1..].to_vec()),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Doc {
        #[serde(with = "words")]
        argv: Argv,
        #[serde(with = "env")]
        env: Env,
    }

    fn os(bytes: &[u8]) -> OsString {
        OsString::from_vec(bytes.to_vec())
    }

    #[test]
    fn utf8_commands_are_written_as_before_and_bytes_round_trip() {
        let utf8 = Doc {
            argv: vec!["echo".into(), "é".into()],
            env: [("K".into(), "v".into())].into(),
        };
        let text = serde_json::to_string(&utf8).unwrap();
        assert_eq!(text, r#"{"argv":["echo","é"],"env":{"K":"v"}}"#);
        assert_eq!(serde_json::from_str::<Doc>(&text).unwrap(), utf8);
        let bytes = Doc {
            argv: vec!["printf".into(), os(b"a\xffb")],
            env: [(os(b"N\xfe"), os(b"\x80")), ("K".into(), "v".into())].into(),
        };
        let text = serde_json::to_string(&bytes).unwrap();
        assert!(text.contains(r#"{"hex":"61ff62"}"#), "{text}");
        assert_eq!(serde_json::from_str::<Doc>(&text).unwrap(), bytes);
        let value = Doc {
            argv: vec!["x".into()],
            env: [("K".into(), os(b"\xff"))].into(),
        };
        let text = serde_json::to_string(&value).unwrap();
        assert_eq!(text, r#"{"argv":["x"],"env":{"K":{"hex":"ff"}}}"#);
        assert_eq!(serde_json::from_str::<Doc>(&text).unwrap(), value);
    }

    #[test]
    fn a_bad_hex_word_is_refused() {
        for text in [
            r#"{"argv":[{"hex":"f"}],"env":{}}"#,
            r#"{"argv":[{"hex":"zz"}],"env":{}}"#,
        ] {
            assert!(serde_json::from_str::<Doc>(text).is_err(), "{text}");
        }
    }

    #[test]
    fn an_assignment_splits_at_its_first_equals_sign() {
        assert_eq!(
            split_assignment(&os(b"K\xff=a=b")),
            Some((os(b"K\xff"), os(b"a=b")))
        );
        assert_eq!(split_assignment(OsStr::new("=v")), None);
        assert_eq!(split_assignment(OsStr::new("K")), None);
    }
}
