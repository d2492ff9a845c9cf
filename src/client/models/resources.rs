//! Resources: `resources/list`, `resources/templates/list`, `resources/read`.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::common::{bounded, Annotations};
use super::content::ResourceContents;

/// A resource the server offers (`resources/list`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Resource {
    /// Its URI, for [`Client::read_resource`](crate::Client::read_resource).
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

/// A family of resources addressed by an RFC 6570 URI template
/// (`resources/templates/list`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ResourceTemplate {
    /// The URI template, as sent (never expanded by this crate).
    pub uri_template: String,
    /// Its name.
    pub name: String,
    /// Human-readable title.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// MIME type of the resources it names, when they share one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
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

/// The result of `resources/read`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ReadResourceResult {
    /// The contents (one resource may have several parts; at most
    /// [`MAX_CONTENT_ITEMS`](crate::client::MAX_CONTENT_ITEMS)).
    #[serde(deserialize_with = "bounded")]
    pub contents: Vec<ResourceContents>,
    /// `_meta`, as sent.
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<Value>,
    /// Members this version does not model, kept as sent.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl ReadResourceResult {
    /// The text parts joined by newlines (convenient for text resources).
    pub fn text(&self) -> String {
        let texts: Vec<&str> = self
            .contents
            .iter()
            .filter_map(|c| c.text.as_deref())
            .collect();
        texts.join("\n")
    }
}
