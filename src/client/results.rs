//! Typed views of the results the paved path returns. Each keeps the server's JSON (`raw`),
//! so nothing a newer server sends is lost to an older client.

use serde_json::{Map, Value};

use super::models::Content;
use crate::error::{Error, ErrorKind};

/// The server's answer to `initialize`, returned by [`Client::connect`](super::Client::connect).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct InitializeResult {
    /// The protocol version the server chose.
    pub protocol_version: String,
    /// The server's capabilities (`capabilities`), as sent.
    pub capabilities: Value,
    /// `serverInfo.name`.
    pub server_name: String,
    /// `serverInfo.version`.
    pub server_version: String,
    /// Optional usage instructions for the model (`instructions`).
    pub instructions: Option<String>,
    /// The whole `result` member.
    pub raw: Value,
}

impl InitializeResult {
    /// Reads the `result` of an `initialize` response, as the client does (a language
    /// binding rebuilding one, a test); what cannot be one is an [`ErrorKind::Protocol`]
    /// error.
    ///
    /// [`ErrorKind::Protocol`]: crate::ErrorKind::Protocol
    pub fn from_value(raw: Value) -> Result<Self, Error> {
        let obj = as_object(&raw, "initialize result")?;
        let protocol_version = obj
            .get("protocolVersion")
            .and_then(Value::as_str)
            .ok_or_else(|| protocol("initialize result lacks protocolVersion"))?
            .to_owned();
        let capabilities = obj
            .get("capabilities")
            .cloned()
            .unwrap_or_else(|| Value::Object(Map::new()));
        let info = obj.get("serverInfo");
        let field = |name: &str| {
            info.and_then(|i| i.get(name))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        Ok(InitializeResult {
            protocol_version,
            capabilities,
            server_name: field("name"),
            server_version: field("version"),
            instructions: obj
                .get("instructions")
                .and_then(Value::as_str)
                .map(str::to_owned),
            raw,
        })
    }
}

/// A tool the server offers (`tools/list`).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Tool {
    /// Name to call it by.
    pub name: String,
    /// Human-readable title, if any.
    pub title: Option<String>,
    /// Description, if any.
    pub description: Option<String>,
    /// JSON Schema of the arguments (`inputSchema`).
    pub input_schema: Value,
    /// JSON Schema of `structuredContent`, if declared (`outputSchema`).
    pub output_schema: Option<Value>,
    /// Behaviour hints (`readOnlyHint`, `idempotentHint`, …), as sent.
    pub annotations: Option<Value>,
    /// The whole tool object.
    pub raw: Value,
}

impl Tool {
    /// Reads one tool of a `tools/list` result, as the client does; what cannot be one is an
    /// [`ErrorKind::Protocol`](crate::ErrorKind::Protocol) error.
    pub fn from_value(raw: Value) -> Result<Self, Error> {
        let obj = as_object(&raw, "tool")?;
        let name = obj
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| protocol("tool lacks a name"))?
            .to_owned();
        let text = |key: &str| obj.get(key).and_then(Value::as_str).map(str::to_owned);
        Ok(Tool {
            name,
            title: text("title"),
            description: text("description"),
            input_schema: obj
                .get("inputSchema")
                .cloned()
                .unwrap_or_else(|| serde_json::json!({"type": "object"})),
            output_schema: obj.get("outputSchema").cloned(),
            annotations: obj.get("annotations").cloned(),
            raw,
        })
    }

    /// The `idempotentHint` annotation (`false` when absent, as the specification defaults it).
    pub fn is_idempotent_hint(&self) -> bool {
        self.hint("idempotentHint")
    }

    /// The `readOnlyHint` annotation (`false` when absent).
    pub fn is_read_only_hint(&self) -> bool {
        self.hint("readOnlyHint")
    }

    fn hint(&self, name: &str) -> bool {
        self.annotations
            .as_ref()
            .and_then(|a| a.get(name))
            .and_then(Value::as_bool)
            .unwrap_or(false)
    }
}

/// The most items the client reads in one array of typed items from a server: a tool
/// result's content, a prompt's messages and arguments, a resource's contents, completion
/// values, a sampling request's messages and content, the items of one list page, and those
/// of one whole list (all its pages together, their bytes bounded as one response's). A typed item
/// takes up to 296 bytes where `0,` takes two in the body, so a message within the body
/// bound could otherwise become gigabytes of items: a result with more is an
/// [`ErrorKind::Protocol`](crate::ErrorKind::Protocol) error, which says the call may have run
/// (it did: the server answered).
pub const MAX_CONTENT_ITEMS: usize = 100_000;

/// The result of `tools/call`.
///
/// A tool that failed reports it in-band: `is_error` is `true` and the call itself succeeded.
/// Protocol-level failures are [`Error`]s instead.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct CallToolResult {
    /// Unstructured result items.
    pub content: Vec<Content>,
    /// Structured result (`structuredContent`), if any.
    pub structured_content: Option<Value>,
    /// Whether the tool reported an error (`isError`).
    pub is_error: bool,
    /// The result's `_meta`, if any.
    pub meta: Option<Value>,
    /// The whole `result` member.
    pub raw: Value,
}

impl CallToolResult {
    /// Reads the `result` of a `tools/call` response, as the client does; what cannot be
    /// one is an [`ErrorKind::Protocol`](crate::ErrorKind::Protocol) error.
    pub fn from_value(raw: Value) -> Result<Self, Error> {
        let obj = as_object(&raw, "tool result")?;
        let content = match obj.get("content") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) if items.len() > MAX_CONTENT_ITEMS => {
                return Err(protocol(format!(
                    "tool result has {} content items, more than {MAX_CONTENT_ITEMS}",
                    items.len()
                )))
            }
            Some(Value::Array(items)) => items.iter().map(Content::from_ref).collect(),
            Some(_) => return Err(protocol("tool result content is not an array")),
        };
        Ok(CallToolResult {
            content,
            structured_content: obj.get("structuredContent").cloned(),
            is_error: obj.get("isError").and_then(Value::as_bool).unwrap_or(false),
            meta: obj.get("_meta").cloned(),
            raw,
        })
    }

    /// The text items joined by newlines (convenient for text-only tools).
    pub fn text(&self) -> String {
        let texts: Vec<&str> = self.content.iter().filter_map(Content::as_text).collect();
        texts.join("\n")
    }
}

fn as_object<'a>(value: &'a Value, what: &str) -> Result<&'a Map<String, Value>, Error> {
    value
        .as_object()
        .ok_or_else(|| protocol(format!("{what} is not a JSON object")))
}

pub(crate) fn protocol(message: impl Into<String>) -> Error {
    Error::new(ErrorKind::Protocol, message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tool_result_reads_content_and_flags() {
        let r = CallToolResult::from_value(json!({
            "content": [{"type": "text", "text": "hi"}, {"type": "image", "data": "AA==", "mimeType": "image/png"},
                        {"type": "resource_link", "uri": "x:/y", "name": "y"}],
            "structuredContent": {"n": 1},
            "isError": true,
            "_meta": {"k": 2}
        }))
        .unwrap();
        assert_eq!(r.text(), "hi");
        assert!(r.is_error);
        assert_eq!(r.structured_content, Some(json!({"n": 1})));
        assert!(matches!(r.content[1], Content::Image(_)));
        assert!(matches!(r.content[2], Content::ResourceLink(_)));
        assert_eq!(r.meta, Some(json!({"k": 2})));
    }

    // A body of `[0,0,…]` within the body bound would be gigabytes of typed items.
    #[test]
    fn a_result_with_more_content_items_than_the_bound_is_a_protocol_error() {
        let items = |n: usize| json!({"content": vec![0; n]});
        let read = CallToolResult::from_value(items(MAX_CONTENT_ITEMS)).unwrap();
        assert_eq!(read.content.len(), MAX_CONTENT_ITEMS);
        let error = CallToolResult::from_value(items(MAX_CONTENT_ITEMS + 1)).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Protocol);
        assert!(error.message().contains("100001 content items"), "{error}");
    }

    #[test]
    fn malformed_results_are_protocol_errors() {
        assert_eq!(
            CallToolResult::from_value(json!([1])).unwrap_err().kind(),
            ErrorKind::Protocol
        );
        assert_eq!(
            CallToolResult::from_value(json!({"content": 3}))
                .unwrap_err()
                .kind(),
            ErrorKind::Protocol
        );
        assert_eq!(
            Tool::from_value(json!({"description": "no name"}))
                .unwrap_err()
                .kind(),
            ErrorKind::Protocol
        );
        assert_eq!(
            InitializeResult::from_value(json!({})).unwrap_err().kind(),
            ErrorKind::Protocol
        );
    }

    #[test]
    fn tool_hints() {
        let t = Tool::from_value(json!({"name": "c", "annotations": {"idempotentHint": true}}))
            .unwrap();
        assert!(t.is_idempotent_hint());
        assert!(!t.is_read_only_hint());
        assert_eq!(t.input_schema, json!({"type": "object"}));
    }
}
