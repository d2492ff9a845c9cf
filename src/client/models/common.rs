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
// `Many` is tried first: an item type that accepts any JSON (`Content` keeps unknown shapes
// whole) would otherwise take an array as one item.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum OneOrMany<T> {
    /// An array of items.
    Many(Vec<T>),
    /// A single item.
    One(T),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::models::Content;
    use serde_json::json;

    #[test]
    fn an_array_of_content_is_many_items_and_keeps_its_shape() {
        let many = json!([{"type": "text", "text": "a"}, {"type": "tool_use", "id": "t"}]);
        let parsed: OneOrMany<Content> = serde_json::from_value(many.clone()).unwrap();
        assert!(matches!(&parsed, OneOrMany::Many(items) if items.len() == 2));
        assert_eq!(parsed.as_slice()[0].as_text(), Some("a"));
        assert_eq!(serde_json::to_value(&parsed).unwrap(), many);

        let one = json!({"type": "text", "text": "b"});
        let parsed: OneOrMany<Content> = serde_json::from_value(one.clone()).unwrap();
        assert!(matches!(&parsed, OneOrMany::One(c) if c.as_text() == Some("b")));
        assert_eq!(serde_json::to_value(&parsed).unwrap(), one);
    }
}
