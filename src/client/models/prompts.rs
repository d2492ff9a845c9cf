//! Prompts: `prompts/list` and `prompts/get`.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::common::{bounded, Role};
use super::content::Content;

/// A prompt template the server offers (`prompts/list`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Prompt {
    /// Name to get it by.
    pub name: String,
    /// Human-readable title.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The arguments it takes (at most [`MAX_CONTENT_ITEMS`](crate::client::MAX_CONTENT_ITEMS)).
    #[serde(
        default,
        deserialize_with = "bounded",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub arguments: Vec<PromptArgument>,
    /// `_meta`, as sent.
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<Value>,
    /// Members this version does not model (`icons`, …), kept as sent.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// One argument of a [`Prompt`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PromptArgument {
    /// Its name.
    pub name: String,
    /// Human-readable title.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Whether it must be given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub required: Option<bool>,
    /// Members this version does not model, kept as sent.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// The result of `prompts/get`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct GetPromptResult {
    /// Description of the rendered prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The messages (at most [`MAX_CONTENT_ITEMS`](crate::client::MAX_CONTENT_ITEMS)).
    #[serde(deserialize_with = "bounded")]
    pub messages: Vec<PromptMessage>,
    /// `_meta`, as sent.
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<Value>,
    /// Members this version does not model, kept as sent.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// One message of a rendered prompt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PromptMessage {
    /// Who says it.
    pub role: Role,
    /// What is said.
    pub content: Content,
    /// Members this version does not model, kept as sent.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}
