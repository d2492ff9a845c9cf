//! Small types shared by several models.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Who a message is from (`role`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Role {
    /// The user.
    User,
    /// The assistant (the model).
    Assistant,
}

/// Hints about how a client should use an item (`annotations`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Annotations {
    /// Who the item is meant for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audience: Option<Vec<Role>>,
    /// Importance, from 0 (optional) to 1 (required).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<f64>,
    /// When the item was last modified (ISO 8601), as sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_modified: Option<String>,
    /// Members this version does not model, kept as sent.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A member the protocol allows to be one item or an array of items (sampling content),
/// kept in the shape it came in so that it is written back unchanged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum OneOrMany<T> {
    /// A single item.
    One(T),
    /// An array of items.
    Many(Vec<T>),
}

impl<T> OneOrMany<T> {
    /// The items, whatever the shape.
    pub fn as_slice(&self) -> &[T] {
        match self {
            OneOrMany::One(item) => std::slice::from_ref(item),
            OneOrMany::Many(items) => items,
        }
    }

    /// Iterates over the items.
    pub fn iter(&self) -> std::slice::Iter<'_, T> {
        self.as_slice().iter()
    }
}

impl<T> From<T> for OneOrMany<T> {
    fn from(item: T) -> Self {
        OneOrMany::One(item)
    }
}

/// One page of a `*/list` result, for callers that page themselves
/// ([`Client::list_tools_page`](crate::Client::list_tools_page) and its siblings).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Page<T> {
    /// The items of this page.
    pub items: Vec<T>,
    /// The cursor of the next page (`nextCursor`); `None` on the last page.
    pub next_cursor: Option<String>,
    /// The whole `result` member, as sent (its `_meta`, members this version does not model).
    pub raw: Value,
}
