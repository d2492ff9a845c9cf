//! Roots: the client's answer to `roots/list`.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// A root the client exposes to the server: a directory or file the server may work in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Root {
    /// Its URI (a `file://` URI in the 2025-11-25 revision).
    pub uri: String,
    /// Human-readable name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// `_meta`.
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<Value>,
    /// Further members to send.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Root {
    /// A root at `uri`.
    pub fn new(uri: impl Into<String>) -> Self {
        Root {
            uri: uri.into(),
            name: None,
            meta: None,
            extra: Map::new(),
        }
    }

    /// Sets its human-readable name.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }
}

/// The answer to `roots/list`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ListRootsResult {
    /// The roots.
    pub roots: Vec<Root>,
    /// Further members to send.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl From<Vec<Root>> for ListRootsResult {
    fn from(roots: Vec<Root>) -> Self {
        ListRootsResult {
            roots,
            extra: Map::new(),
        }
    }
}
