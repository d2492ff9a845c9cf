//! Argument completion: `completion/complete`.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::common::bounded;

/// What is being completed: a prompt's argument or a resource template's variable.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CompletionReference {
    /// `{"type": "ref/prompt", "name": …}`.
    Prompt {
        /// The prompt's name.
        name: String,
    },
    /// `{"type": "ref/resource", "uri": …}`: a resource template's URI template.
    Resource {
        /// The URI template.
        uri: String,
    },
}

impl CompletionReference {
    /// A prompt, by name.
    pub fn prompt(name: impl Into<String>) -> Self {
        CompletionReference::Prompt { name: name.into() }
    }

    /// A resource template, by its URI template.
    pub fn resource(uri_template: impl Into<String>) -> Self {
        CompletionReference::Resource {
            uri: uri_template.into(),
        }
    }

    fn to_value(&self) -> Value {
        match self {
            CompletionReference::Prompt { name } => {
                serde_json::json!({"type": "ref/prompt", "name": name})
            }
            CompletionReference::Resource { uri } => {
                serde_json::json!({"type": "ref/resource", "uri": uri})
            }
        }
    }
}

/// A `completion/complete` request: which argument, its partial value, and the values of
/// the arguments already chosen.
///
/// ```
/// use mcp_resume::client::models::{CompleteRequest, CompletionReference};
///
/// let request = CompleteRequest::new(CompletionReference::prompt("greet"), "language", "fr")
///     .context_argument("style", "formal");
/// # let _ = request;
/// ```
#[derive(Debug, Clone, PartialEq)]
#[must_use = "a CompleteRequest does nothing until passed to Client::complete"]
pub struct CompleteRequest {
    reference: CompletionReference,
    name: String,
    value: String,
    context: Map<String, Value>,
}

impl CompleteRequest {
    /// Completion of argument `name`, whose partial value is `value`, of `reference`.
    pub fn new(
        reference: CompletionReference,
        name: impl Into<String>,
        value: impl Into<String>,
    ) -> Self {
        CompleteRequest {
            reference,
            name: name.into(),
            value: value.into(),
            context: Map::new(),
        }
    }

    /// Adds the value of an argument already chosen (`context.arguments`).
    pub fn context_argument(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.context
            .insert(name.into(), Value::String(value.into()));
        self
    }

    pub(crate) fn to_params(&self) -> Value {
        let mut params = serde_json::json!({
            "ref": self.reference.to_value(),
            "argument": {"name": self.name, "value": self.value},
        });
        if !self.context.is_empty() {
            params["context"] = serde_json::json!({ "arguments": self.context });
        }
        params
    }
}

/// The result of `completion/complete`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct CompleteResult {
    /// The completion.
    pub completion: Completion,
    /// `_meta`, as sent.
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<Value>,
    /// Members this version does not model, kept as sent.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Suggested values for the argument being completed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Completion {
    /// The suggestions (at most 100 by the specification; read with at most
    /// [`MAX_CONTENT_ITEMS`](crate::client::MAX_CONTENT_ITEMS)).
    #[serde(deserialize_with = "bounded")]
    pub values: Vec<String>,
    /// How many suggestions exist in all, if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<u64>,
    /// Whether there are more than these.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub has_more: Option<bool>,
    /// Members this version does not model, kept as sent.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}
