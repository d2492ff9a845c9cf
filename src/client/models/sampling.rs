//! Sampling: the server's `sampling/createMessage` request and the client's answer.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::common::{bounded, OneOrMany, Role};
use super::content::Content;

/// The params of `sampling/createMessage`: the server asks the client's model for a message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct CreateMessageRequest {
    /// The conversation so far (at most
    /// [`MAX_CONTENT_ITEMS`](crate::client::MAX_CONTENT_ITEMS) messages).
    #[serde(deserialize_with = "bounded")]
    pub messages: Vec<SamplingMessage>,
    /// The server's model preferences (hints, priorities), as sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_preferences: Option<Value>,
    /// System prompt the server asks for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
    /// Which MCP context to include (`none`, `thisServer`, `allServers`), as sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub include_context: Option<String>,
    /// Sampling temperature.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    /// Most tokens to generate.
    pub max_tokens: u64,
    /// Stop sequences.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_sequences: Option<Vec<String>>,
    /// Provider-specific metadata, as sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
    /// Tools the model may use (2025-11-25), each with its JSON Schema verbatim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<Value>>,
    /// How the model may use them, as sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<Value>,
    /// `_meta`, as sent.
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<Value>,
    /// Members this version does not model, kept as sent.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// One message of a sampling conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SamplingMessage {
    /// Who says it.
    pub role: Role,
    /// What is said: one item or several (`tool_use`/`tool_result` items are
    /// [`Content::Other`]).
    pub content: OneOrMany<Content>,
    /// `_meta`, as sent.
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<Value>,
    /// Members this version does not model, kept as sent.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl SamplingMessage {
    /// The text items joined by newlines.
    pub fn text(&self) -> String {
        let texts: Vec<&str> = self.content.iter().filter_map(Content::as_text).collect();
        texts.join("\n")
    }
}

/// The client's answer to `sampling/createMessage`.
///
/// ```
/// use mcp_resume::client::models::CreateMessageResult;
///
/// let answer = CreateMessageResult::new("my-model", "Paris").stop_reason("endTurn");
/// # let _ = answer;
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct CreateMessageResult {
    /// Who says it (the assistant).
    pub role: Role,
    /// The generated content.
    pub content: OneOrMany<Content>,
    /// The model that generated it.
    pub model: String,
    /// Why generation stopped (`endTurn`, `stopSequence`, `maxTokens`, `toolUse`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<String>,
    /// `_meta`.
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<Value>,
    /// Further members to send.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl CreateMessageResult {
    /// An assistant message from `model`: a string becomes a text item.
    pub fn new(model: impl Into<String>, content: impl Into<SamplingContent>) -> Self {
        CreateMessageResult {
            role: Role::Assistant,
            content: OneOrMany::One(content.into().0),
            model: model.into(),
            stop_reason: None,
            meta: None,
            extra: Map::new(),
        }
    }

    /// Sets why generation stopped.
    pub fn stop_reason(mut self, reason: impl Into<String>) -> Self {
        self.stop_reason = Some(reason.into());
        self
    }
}

/// What [`CreateMessageResult::new`] accepts: a [`Content`] item, or text.
#[derive(Debug)]
pub struct SamplingContent(Content);

impl From<Content> for SamplingContent {
    fn from(c: Content) -> Self {
        SamplingContent(c)
    }
}

impl From<&str> for SamplingContent {
    fn from(text: &str) -> Self {
        SamplingContent(Content::text(text))
    }
}

impl From<String> for SamplingContent {
    fn from(text: String) -> Self {
        SamplingContent(Content::text(text))
    }
}
