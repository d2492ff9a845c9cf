//! Content items (`text`, `image`, `audio`, `resource_link`, `resource`) and resource
//! contents, as tool results, prompt messages and sampling messages carry them.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use super::common::Annotations;

/// One content item. An item of a type this version does not know, or one that does not
/// match its type's shape, is kept whole as [`Content::Other`]: reading a result never fails
/// because of one odd item.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Content {
    /// `{"type": "text"}`.
    Text(TextContent),
    /// `{"type": "image"}`: base64 data.
    Image(ImageContent),
    /// `{"type": "audio"}`: base64 data.
    Audio(AudioContent),
    /// `{"type": "resource_link"}`: a resource the client may read.
    ResourceLink(ResourceLink),
    /// `{"type": "resource"}`: a resource embedded in the item.
    Resource(EmbeddedResource),
    /// Any other item (a newer type, `tool_use`/`tool_result` in sampling, a malformed one),
    /// as sent.
    Other(Value),
}

/// A text item.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct TextContent {
    /// The text.
    pub text: String,
    /// Usage hints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<Annotations>,
    /// `_meta`, as sent.
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<Value>,
    /// Members this version does not model, kept as sent.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// An image item: base64 bytes and their MIME type.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ImageContent {
    /// Base64-encoded bytes.
    pub data: String,
    /// MIME type, e.g. `image/png`.
    pub mime_type: String,
    /// Usage hints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<Annotations>,
    /// `_meta`, as sent.
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<Value>,
    /// Members this version does not model, kept as sent.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// An audio item: base64 bytes and their MIME type.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct AudioContent {
    /// Base64-encoded bytes.
    pub data: String,
    /// MIME type, e.g. `audio/wav`.
    pub mime_type: String,
    /// Usage hints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<Annotations>,
    /// `_meta`, as sent.
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<Value>,
    /// Members this version does not model, kept as sent.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A link to a resource (`resource_link`); it may not appear in `resources/list`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ResourceLink {
    /// The resource's URI, for [`Client::read_resource`](crate::Client::read_resource).
    pub uri: String,
    /// Its name.
    pub name: String,
    /// Human-readable title.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// MIME type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    /// Size in bytes, if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// Usage hints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<Annotations>,
    /// `_meta`, as sent.
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<Value>,
    /// Members this version does not model (`icons`, …), kept as sent.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A resource embedded in a content item (`resource`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct EmbeddedResource {
    /// The resource's contents.
    pub resource: ResourceContents,
    /// Usage hints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<Annotations>,
    /// `_meta`, as sent.
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<Value>,
    /// Members this version does not model, kept as sent.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// The contents of a resource: text or base64 `blob`, with its URI.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ResourceContents {
    /// The URI these contents are of.
    pub uri: String,
    /// MIME type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    /// The text, for text resources.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Base64-encoded bytes, for binary resources.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blob: Option<String>,
    /// `_meta`, as sent.
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<Value>,
    /// Members this version does not model, kept as sent.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl TextContent {
    /// A text item.
    pub fn new(text: impl Into<String>) -> Self {
        TextContent {
            text: text.into(),
            annotations: None,
            meta: None,
            extra: Map::new(),
        }
    }
}

impl ImageContent {
    /// An image item from base64 `data`.
    pub fn new(data: impl Into<String>, mime_type: impl Into<String>) -> Self {
        ImageContent {
            data: data.into(),
            mime_type: mime_type.into(),
            annotations: None,
            meta: None,
            extra: Map::new(),
        }
    }
}

impl AudioContent {
    /// An audio item from base64 `data`.
    pub fn new(data: impl Into<String>, mime_type: impl Into<String>) -> Self {
        AudioContent {
            data: data.into(),
            mime_type: mime_type.into(),
            annotations: None,
            meta: None,
            extra: Map::new(),
        }
    }
}

impl Content {
    /// A text item.
    pub fn text(text: impl Into<String>) -> Self {
        Content::Text(TextContent::new(text))
    }

    /// The text of a [`Content::Text`] item.
    pub fn as_text(&self) -> Option<&str> {
        match self {
            Content::Text(t) => Some(&t.text),
            _ => None,
        }
    }

    /// The `type` member (`"text"`, `"image"`, …; an [`Content::Other`] item's own, if any).
    pub fn kind(&self) -> Option<&str> {
        Some(match self {
            Content::Text(_) => "text",
            Content::Image(_) => "image",
            Content::Audio(_) => "audio",
            Content::ResourceLink(_) => "resource_link",
            Content::Resource(_) => "resource",
            Content::Other(v) => return v.get("type").and_then(Value::as_str),
        })
    }

    /// Reads one content item, as the client does: an item of an unknown type, or one that
    /// does not fit its type, is kept whole rather than refused.
    pub fn from_value(value: Value) -> Self {
        let Value::Object(mut map) = value else {
            return Content::Other(value);
        };
        let kind = match map.remove("type") {
            Some(Value::String(kind)) => kind,
            // Kept whole: a `type` that is not a string stays in the item.
            other => {
                if let Some(other) = other {
                    map.insert("type".to_owned(), other);
                }
                return Content::Other(Value::Object(map));
            }
        };
        if kind == "text" {
            if let Some(text) = TextContent::take_from(&mut map) {
                return Content::Text(text);
            }
        }
        let object = Value::Object(map);
        let typed = match kind.as_str() {
            "text" => None,
            "image" => typed(&object).map(Content::Image),
            "audio" => typed(&object).map(Content::Audio),
            "resource_link" => typed(&object).map(Content::ResourceLink),
            "resource" => typed(&object).map(Content::Resource),
            _ => None,
        };
        typed.unwrap_or_else(|| {
            let Value::Object(mut map) = object else {
                unreachable!("built as an object above")
            };
            map.insert("type".to_owned(), Value::String(kind));
            Content::Other(Value::Object(map))
        })
    }

    /// [`Content::from_value`] of a borrowed item: the same reading, without copying a
    /// text item whole first.
    pub(crate) fn from_ref(value: &Value) -> Self {
        if let Value::Object(map) = value {
            if map.get("type").and_then(Value::as_str) == Some("text") {
                if let Some(text) = TextContent::read_from(map) {
                    return Content::Text(text);
                }
            }
        }
        Content::from_value(value.clone())
    }

    /// The item as the protocol writes it.
    pub fn to_value(&self) -> Value {
        let (kind, body) = match self {
            Content::Text(c) => ("text", serde_json::to_value(c)),
            Content::Image(c) => ("image", serde_json::to_value(c)),
            Content::Audio(c) => ("audio", serde_json::to_value(c)),
            Content::ResourceLink(c) => ("resource_link", serde_json::to_value(c)),
            Content::Resource(c) => ("resource", serde_json::to_value(c)),
            Content::Other(v) => return v.clone(),
        };
        // These types hold strings, numbers and JSON values only: they always serialize.
        let mut body = body.unwrap_or_default();
        if let Value::Object(map) = &mut body {
            map.insert("type".to_owned(), Value::String(kind.to_owned()));
        }
        body
    }
}

impl TextContent {
    /// Moves a text item's members out of `map` (without its `type`), as its `Deserialize`
    /// reads them; `None`, with `map` untouched, when they do not fit. Text is nearly every
    /// tool result: read this way it skips serde's `flatten`, which copies every member
    /// into a buffer first.
    fn take_from(map: &mut Map<String, Value>) -> Option<TextContent> {
        let annotations = Self::annotations_of(map)?;
        let Some(Value::String(text)) = map.remove("text") else {
            return None;
        };
        map.remove("annotations");
        let meta = map.remove("_meta").filter(|meta| !meta.is_null());
        Some(TextContent {
            text,
            annotations,
            meta,
            extra: std::mem::take(map),
        })
    }

    /// The same reading as [`TextContent::take_from`] from a borrowed item (its `type`
    /// skipped), copying only the members it keeps: a tool result keeps the whole `result`
    /// as well, and copying each item whole to take it apart cost more than the reading.
    fn read_from(map: &Map<String, Value>) -> Option<TextContent> {
        let annotations = Self::annotations_of(map)?;
        let text = map.get("text")?.as_str()?.to_owned();
        let meta = map.get("_meta").filter(|meta| !meta.is_null()).cloned();
        let extra = map
            .iter()
            .filter(|(k, _)| !matches!(k.as_str(), "type" | "text" | "annotations" | "_meta"))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        Some(TextContent {
            text,
            annotations,
            meta,
            extra,
        })
    }

    /// The annotations of a text item (`Some(None)` when it has none), or `None` when
    /// `map` is not one: its `text` is not a string or its annotations do not fit.
    fn annotations_of(map: &Map<String, Value>) -> Option<Option<Annotations>> {
        if !map.get("text").is_some_and(Value::is_string) {
            return None;
        }
        match map.get("annotations") {
            None | Some(Value::Null) => Some(None),
            Some(value) => Annotations::deserialize(value).ok().map(Some),
        }
    }
}

fn typed<T: DeserializeOwned>(object: &Value) -> Option<T> {
    T::deserialize(object).ok()
}

impl Serialize for Content {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.to_value().serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Content {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Value::deserialize(deserializer).map(Content::from_value)
    }
}

impl From<TextContent> for Content {
    fn from(c: TextContent) -> Self {
        Content::Text(c)
    }
}

impl From<ImageContent> for Content {
    fn from(c: ImageContent) -> Self {
        Content::Image(c)
    }
}

impl From<AudioContent> for Content {
    fn from(c: AudioContent) -> Self {
        Content::Audio(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_item_whose_type_is_not_a_string_is_kept_whole() {
        for item in [
            json!({"type": 5, "x": 1}),
            json!({"type": null}),
            json!({"x": 1}),
        ] {
            assert_eq!(
                Content::from_value(item.clone()),
                Content::Other(item.clone())
            );
            assert_eq!(Content::from_ref(&item), Content::Other(item));
        }
    }

    #[test]
    fn text_items_read_as_their_deserialize_reads_them() {
        let items = [
            json!({"text": "hi"}),
            json!({"text": "hi", "annotations": null, "_meta": null}),
            json!({"text": "hi", "annotations": {"priority": 0.5, "x": 1}, "_meta": {"k": [1]}, "y": 2}),
            json!({"text": "hi", "annotations": {"priority": "high"}}),
            json!({"text": "hi", "annotations": 3}),
            json!({"text": 7}),
            json!({"text": null}),
            json!({"_meta": {}}),
        ];
        for item in items {
            let Value::Object(mut map) = item.clone() else {
                unreachable!()
            };
            let before = map.clone();
            let mut typed = map.clone();
            typed.insert("type".into(), json!("text"));
            let borrowed = TextContent::read_from(&typed);
            let fast = TextContent::take_from(&mut map);
            let derived = TextContent::deserialize(&item).ok();
            assert_eq!(fast, derived, "{item}");
            assert_eq!(borrowed, derived, "read from a borrowed item: {item}");
            let whole = Value::Object(typed);
            assert_eq!(
                Content::from_ref(&whole),
                Content::from_value(whole.clone())
            );
            if fast.is_none() {
                assert_eq!(map, before, "a refused item is left whole: {item}");
            }
        }
    }

    #[test]
    fn every_type_round_trips_with_unknown_members() {
        let items = json!([
            {"type": "text", "text": "hi", "annotations": {"priority": 0.5, "x-new": 1}, "x-other": true},
            {"type": "image", "data": "AA==", "mimeType": "image/png", "_meta": {"k": 1}},
            {"type": "audio", "data": "AA==", "mimeType": "audio/wav"},
            {"type": "resource_link", "uri": "file:///a", "name": "a", "size": 3, "icons": [{"src": "x"}]},
            {"type": "resource", "resource": {"uri": "file:///b", "text": "b", "x": 2}},
            {"type": "tool_use", "id": "t1", "name": "f", "input": {}},
            {"type": "text"},
            "not an object"
        ]);
        let parsed: Vec<Content> = serde_json::from_value(items.clone()).unwrap();
        for (item, content) in items.as_array().unwrap().iter().zip(&parsed) {
            assert_eq!(&Content::from_ref(item), content, "{item}");
        }
        assert!(matches!(&parsed[0], Content::Text(t) if t.text == "hi"
            && t.extra["x-other"] == json!(true)
            && t.annotations.as_ref().unwrap().extra["x-new"] == json!(1)));
        assert!(matches!(&parsed[1], Content::Image(i) if i.meta == Some(json!({"k": 1}))));
        assert!(matches!(&parsed[2], Content::Audio(_)));
        assert!(matches!(&parsed[3], Content::ResourceLink(l) if l.size == Some(3)));
        assert!(
            matches!(&parsed[4], Content::Resource(r) if r.resource.text.as_deref() == Some("b"))
        );
        assert!(matches!(&parsed[5], Content::Other(_)));
        // A text item without its text is kept whole, not dropped.
        assert_eq!(parsed[6], Content::Other(json!({"type": "text"})));
        assert_eq!(parsed[7], Content::Other(json!("not an object")));
        assert_eq!(serde_json::to_value(&parsed).unwrap(), items);
        assert_eq!(parsed[3].kind(), Some("resource_link"));
        assert_eq!(parsed[5].kind(), Some("tool_use"));
    }
}
