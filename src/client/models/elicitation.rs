//! Elicitation: the server's `elicitation/create` request and the client's answer.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The params of `elicitation/create`: the server asks the user for information, with a form
/// (`requested_schema`) or by sending them to a URL (`url` mode).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ElicitRequest {
    /// `form` or `url`; absent means `form` (older servers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// What to tell the user.
    pub message: String,
    /// The form's JSON Schema (a flat object of primitive properties), verbatim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_schema: Option<Value>,
    /// The URL to send the user to (`url` mode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// The elicitation's id (`url` mode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elicitation_id: Option<String>,
    /// `_meta`, as sent.
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<Value>,
    /// Members this version does not model, kept as sent.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl ElicitRequest {
    /// Whether the server asks the user to visit a URL rather than fill in a form.
    pub fn is_url_mode(&self) -> bool {
        self.mode.as_deref() == Some("url")
    }
}

/// What the user did with an elicitation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ElicitAction {
    /// Submitted (with `content` for a form).
    Accept,
    /// Explicitly refused.
    Decline,
    /// Dismissed without choosing.
    Cancel,
}

/// The client's answer to `elicitation/create`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ElicitResult {
    /// What the user did.
    pub action: ElicitAction,
    /// The submitted form values, for an accepted form.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<Map<String, Value>>,
    /// `_meta`.
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<Value>,
    /// Further members to send.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl ElicitResult {
    /// The user submitted `content` (a JSON object; anything else sends no content).
    pub fn accept(content: Value) -> Self {
        let content = match content {
            Value::Object(map) => Some(map),
            _ => None,
        };
        ElicitResult {
            action: ElicitAction::Accept,
            content,
            meta: None,
            extra: Map::new(),
        }
    }

    /// The user refused.
    pub fn decline() -> Self {
        Self::without_content(ElicitAction::Decline)
    }

    /// The user dismissed the request.
    pub fn cancel() -> Self {
        Self::without_content(ElicitAction::Cancel)
    }

    fn without_content(action: ElicitAction) -> Self {
        ElicitResult {
            action,
            content: None,
            meta: None,
            extra: Map::new(),
        }
    }
}
