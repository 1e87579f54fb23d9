//! The occupancy token: one fresh, non-nil UUID per spawn attempt, never reused.
//!
//! Serialised by hand as a hyphenated UUID string (uuid's serde feature stays off so the on-disk
//! form cannot change under us), and the nil UUID is refused both when built and when loaded.

use super::SlotError;
use serde::{de, Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::str::FromStr;
use uuid::Uuid;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SlotToken(Uuid);

impl SlotToken {
    /// Wraps `uuid`, refusing the nil UUID: nil means "no reservation" and is never installable.
    pub fn new(uuid: Uuid) -> Result<Self, SlotError> {
        if uuid.is_nil() {
            Err(SlotError::NilToken)
        } else {
            Ok(SlotToken(uuid))
        }
    }

    pub fn as_uuid(&self) -> Uuid {
        self.0
    }

    /// A time-ordered token (UUID v7) from the system clock and randomness; the shell's source of
    /// fresh tokens. The core never calls this: it takes tokens as inputs.
    pub fn generate() -> Self {
        let uuid = Uuid::now_v7();
        debug_assert!(!uuid.is_nil());
        SlotToken(uuid)
    }
}

impl fmt::Display for SlotToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0.hyphenated(), f)
    }
}

impl FromStr for SlotToken {
    type Err = SlotError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let uuid = Uuid::try_parse(text).map_err(|_| SlotError::MalformedToken {
            given: text.to_string(),
        })?;
        SlotToken::new(uuid)
    }
}

impl Serialize for SlotToken {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(&self.0.hyphenated())
    }
}

impl<'de> Deserialize<'de> for SlotToken {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        let uuid = Uuid::try_parse(&text)
            .map_err(|e| de::Error::custom(format!("slot token {text:?} is not a UUID: {e}")))?;
        SlotToken::new(uuid).map_err(|_| de::Error::custom("slot token is the nil UUID"))
    }
}
