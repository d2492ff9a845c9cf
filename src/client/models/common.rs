//! Small types shared by several models.

use std::fmt;
use std::marker::PhantomData;

use serde::de::{DeserializeOwned, Deserializer, Error as _, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::client::MAX_CONTENT_ITEMS;

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
/// kept in the shape it came in so that it is written back unchanged. An array is read with
/// at most [`MAX_CONTENT_ITEMS`](crate::client::MAX_CONTENT_ITEMS) items: a typed item can
/// take a hundred times the bytes it took in the message.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum OneOrMany<T> {
    /// An array of items.
    Many(Vec<T>),
    /// A single item.
    One(T),
}

// An array is always `Many`: an item type that accepts any JSON (`Content` keeps unknown
// shapes whole) would otherwise take an array as one item.
impl<'de, T: DeserializeOwned> Deserialize<'de> for OneOrMany<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        match Value::deserialize(deserializer)? {
            many @ Value::Array(_) => bounded(many).map(OneOrMany::Many).map_err(D::Error::custom),
            one => T::deserialize(one)
                .map(OneOrMany::One)
                .map_err(D::Error::custom),
        }
    }
}

/// Reads an array of typed items from a server, refusing one of more than
/// [`MAX_CONTENT_ITEMS`](crate::client::MAX_CONTENT_ITEMS) items before typing them: a typed
/// item can take a hundred times the bytes it took in the message. The field's
/// `deserialize_with` for every array of modelled items the client reads (arrays of plain
/// values take no more than the JSON they were read from).
pub(crate) fn bounded<'de, D, T>(deserializer: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    deserializer.deserialize_seq(Bounded(PhantomData))
}

struct Bounded<T>(PhantomData<T>);

impl<'de, T: Deserialize<'de>> Visitor<'de> for Bounded<T> {
    type Value = Vec<T>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "an array of at most {MAX_CONTENT_ITEMS} items")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
        // A parsed array says its length: refuse it before typing any item. A streamed one is
        // counted as it comes.
        let told = seq.size_hint().unwrap_or(0);
        if told > MAX_CONTENT_ITEMS {
            return Err(A::Error::custom(format_args!(
                "{told} items, more than {MAX_CONTENT_ITEMS}"
            )));
        }
        let mut items = Vec::with_capacity(told);
        while let Some(item) = seq.next_element()? {
            if items.len() == MAX_CONTENT_ITEMS {
                return Err(A::Error::custom(format_args!(
                    "more than {MAX_CONTENT_ITEMS} items"
                )));
            }
            items.push(item);
        }
        Ok(items)
    }
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

    // `[0,0,…]` within a message's size bound would be gigabytes of typed items.
    #[test]
    fn an_array_of_more_items_than_the_bound_is_refused() {
        let items = |n: usize| json!(vec![0; n]);
        let read: OneOrMany<Content> = serde_json::from_value(items(MAX_CONTENT_ITEMS)).unwrap();
        assert_eq!(read.as_slice().len(), MAX_CONTENT_ITEMS);
        let refused = serde_json::from_value::<OneOrMany<Content>>(items(MAX_CONTENT_ITEMS + 1));
        assert!(refused
            .unwrap_err()
            .to_string()
            .contains("more than 100000"));
    }

    // `{"role":"user","content":0}` is 29 bytes in the body; a typed message is several
    // times that.
    #[test]
    fn every_typed_array_takes_at_most_the_bound() {
        use crate::client::models::{
            from_result, from_value, CompleteResult, CreateMessageRequest, GetPromptResult, Prompt,
            ReadResourceResult,
        };
        use crate::error::{Error, ErrorKind};

        type Read = fn(Value) -> Result<usize, Error>;
        let message = json!({"role": "user", "content": 0});
        // Each case: a body holding one item at `array`, and how the client reads it.
        let cases: [(&str, Value, Read); 5] = [
            ("/messages", json!({"messages": message}), |v| {
                from_result::<GetPromptResult>(v).map(|r| r.messages.len())
            }),
            (
                "/contents",
                json!({"contents": {"uri": "x:/y", "text": ""}}),
                |v| from_result::<ReadResourceResult>(v).map(|r| r.contents.len()),
            ),
            (
                "/messages",
                json!({"maxTokens": 1, "messages": message}),
                |v| {
                    from_value::<CreateMessageRequest>(v, "sampling request")
                        .map(|r| r.messages.len())
                },
            ),
            (
                "/arguments",
                json!({"name": "p", "arguments": {"name": ""}}),
                |v| from_value::<Prompt>(v, "list item").map(|r| r.arguments.len()),
            ),
            (
                "/completion/values",
                json!({"completion": {"values": ""}}),
                |v| from_result::<CompleteResult>(v).map(|r| r.completion.values.len()),
            ),
        ];
        for (array, one, read) in cases {
            let body = |n: usize| {
                let mut body = one.clone();
                let slot = body.pointer_mut(array).unwrap();
                *slot = Value::Array(vec![slot.clone(); n]);
                body
            };
            assert_eq!(
                read(body(MAX_CONTENT_ITEMS)).unwrap(),
                MAX_CONTENT_ITEMS,
                "{array}"
            );
            let error = read(body(MAX_CONTENT_ITEMS + 1)).unwrap_err();
            assert_eq!(error.kind(), ErrorKind::Protocol, "{array}");
            assert!(
                error.message().contains("more than 100000"),
                "{array}: {error}"
            );
        }

        // A result the client cannot read as its type is still the server's answer: the
        // request ran.
        let refused = json!({"messages": vec![message; MAX_CONTENT_ITEMS + 1]});
        assert!(from_result::<GetPromptResult>(refused)
            .unwrap_err()
            .may_have_run());
    }
}
