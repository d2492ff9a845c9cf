//! What differs on the wire in the modern era (2026-07-28), and nothing else: per-request
//! `_meta`, the mirrored request headers (`Mcp-Method`, `Mcp-Name`, `Mcp-Param-*`) and their
//! base64 sentinel, `x-mcp-header` annotations, the modern error codes, `resultType`, and
//! reading a `server/discover` answer. Pure functions over JSON; the session decides when.

use std::sync::Arc;

use base64::Engine as _;
use http::header::{HeaderName, HeaderValue};
use serde_json::{Map, Value};

use super::methods;
use super::version::ProtocolVersion;
use crate::error::RpcError;

/// `_meta` key of the protocol version every modern request declares.
pub const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
/// `_meta` key of the client's capabilities.
pub const META_CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
/// `_meta` key of the client's name and version.
pub const META_CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
/// `_meta` key of the server's name and version in a `server/discover` result.
pub const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
/// `_meta` key naming the `subscriptions/listen` stream a notification came on.
pub const META_SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";
/// The tasks extension's identifier in capabilities (SEP-2663).
pub const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";

/// The headers were inconsistent with the body (`HeaderMismatch`).
pub const HEADER_MISMATCH: i64 = -32020;
/// The request needs a client capability the client did not declare.
pub const MISSING_REQUIRED_CLIENT_CAPABILITY: i64 = -32021;
/// The server does not speak the requested protocol version.
pub const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;
/// JSON-RPC's "method not found".
pub const METHOD_NOT_FOUND: i64 = -32601;

/// `Mcp-Method`.
pub const MCP_METHOD: HeaderName = HeaderName::from_static("mcp-method");
/// `Mcp-Name`.
pub const MCP_NAME: HeaderName = HeaderName::from_static("mcp-name");

/// Largest integer a header may carry (the JavaScript safe range).
const MAX_SAFE_INTEGER: i64 = (1 << 53) - 1;

/// What every modern request says of its client: built once, added to each request.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ClientMeta {
    capabilities: Value,
    info: Value,
}

impl ClientMeta {
    /// The metadata of a client with these capabilities, name and version.
    pub fn new(capabilities: Value, name: &str, version: &str) -> Self {
        ClientMeta {
            capabilities,
            info: serde_json::json!({"name": name, "version": version}),
        }
    }
}

/// `params._meta` as an object, creating `params` and `_meta` when absent (a `_meta` that is
/// not an object is replaced; params that are not an object cannot carry one).
pub(crate) fn meta_mut(params: &mut Option<Value>) -> Option<&mut Map<String, Value>> {
    let params = params.get_or_insert_with(|| Value::Object(Map::new()));
    let Value::Object(params) = params else {
        return None;
    };
    let meta = params
        .entry("_meta")
        .or_insert_with(|| Value::Object(Map::new()));
    if !meta.is_object() {
        *meta = Value::Object(Map::new());
    }
    meta.as_object_mut()
}

/// Adds the modern request metadata to `params._meta` (entries the caller set are kept, the
/// protocol's own win).
pub fn add_request_meta(params: &mut Option<Value>, version: ProtocolVersion, client: &ClientMeta) {
    if let Some(meta) = meta_mut(params) {
        meta.insert(
            META_PROTOCOL_VERSION.to_owned(),
            Value::String(version.as_str().to_owned()),
        );
        meta.insert(
            META_CLIENT_CAPABILITIES.to_owned(),
            client.capabilities.clone(),
        );
        meta.insert(META_CLIENT_INFO.to_owned(), client.info.clone());
    }
}

/// The strings of a JSON array (anything else in it, or no array, gives fewer or none).
pub(crate) fn strings(value: Option<&Value>) -> Vec<String> {
    value
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// The value of the `Mcp-Name` header a request must carry, when its method has one.
pub fn mcp_name(method: &str, params: Option<&Value>) -> Option<HeaderValue> {
    let field = match method {
        methods::TOOLS_CALL | "prompts/get" => "name",
        "resources/read" => "uri",
        // The tasks extension routes a task's requests by its id.
        methods::TASKS_GET | methods::TASKS_UPDATE | methods::TASKS_CANCEL => "taskId",
        _ => return None,
    };
    let value = params?.get(field)?.as_str()?;
    Some(encode_header_value(value))
}

/// Encodes a value for a mirrored header: as is when it is plain, visible ASCII without
/// leading or trailing whitespace, else (and when it looks like the sentinel itself) as
/// `=?base64?<base64 of its UTF-8>?=`.
pub fn encode_header_value(value: &str) -> HeaderValue {
    let sentinel_like = value.starts_with("=?base64?") && value.ends_with("?=");
    let plain = !value.is_empty()
        && value.bytes().all(|b| (0x20..=0x7e).contains(&b))
        && !value.starts_with(' ')
        && !value.ends_with(' ')
        && !sentinel_like;
    let text = if plain {
        value.to_owned()
    } else {
        format!(
            "=?base64?{}?=",
            base64::engine::general_purpose::STANDARD.encode(value.as_bytes())
        )
    };
    // Both forms are visible ASCII and spaces only: always a valid header value.
    HeaderValue::from_str(&text).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// One `x-mcp-header` annotation of a tool: the header name and where its value sits in the
/// call's arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamHeader {
    /// `Mcp-Param-{name}`.
    pub header: HeaderName,
    /// The chain of `properties` keys leading to the annotated parameter.
    pub path: Arc<ParamPath>,
}

/// Where a parameter sits in a call's arguments: its `properties` key under the parameter
/// holding it. The parameters of one object share the path to it, each key held once
/// however many annotations lie under it: copied per annotation, one long key above
/// thousands of annotated leaves would take thousands of times the schema's own size.
#[derive(Debug, PartialEq, Eq)]
pub struct ParamPath {
    parent: Option<Arc<ParamPath>>,
    key: String,
}

impl ParamPath {
    /// The keys from the arguments' top level down to the parameter.
    pub fn keys(&self) -> Vec<&str> {
        let mut keys = Vec::new();
        let mut at = Some(self);
        while let Some(node) = at {
            keys.push(node.key.as_str());
            at = node.parent.as_deref();
        }
        keys.reverse();
        keys
    }
}

/// Why a tool's `x-mcp-header` annotations are invalid (the tool is dropped from the list).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidAnnotation(pub String);

/// Reads and checks a tool's `x-mcp-header` annotations from its `inputSchema`.
///
/// Valid annotations sit only on properties reachable through `properties` keys alone, name
/// a non-empty token unique case-insensitively, and annotate a string, integer or boolean.
/// An annotation anywhere else makes the whole tool invalid.
pub fn param_headers(input_schema: &Value) -> Result<Vec<ParamHeader>, InvalidAnnotation> {
    let mut found = Vec::new();
    walk_reachable(input_schema, None, &mut found)?;
    // Annotations off the `properties` chain (under items, anyOf, $ref targets, …).
    let reachable = found.len();
    let total = count_annotations(input_schema);
    if total != reachable {
        return Err(InvalidAnnotation(
            "x-mcp-header on a property not reachable through `properties` alone".into(),
        ));
    }
    // Header names are lowercase: equal names are the case-insensitive duplicates. A set, not
    // a scan of the names before: a schema may annotate hundreds of thousands of properties.
    let mut seen = std::collections::HashSet::with_capacity(found.len());
    for h in &found {
        if !seen.insert(h.header.as_str()) {
            return Err(InvalidAnnotation(format!(
                "duplicate x-mcp-header {}",
                h.header.as_str()
            )));
        }
    }
    Ok(found)
}

fn walk_reachable(
    schema: &Value,
    path: Option<&Arc<ParamPath>>,
    out: &mut Vec<ParamHeader>,
) -> Result<(), InvalidAnnotation> {
    if let Some(name) = schema.get("x-mcp-header") {
        let Some(path) = path else {
            return Err(InvalidAnnotation("x-mcp-header on the schema root".into()));
        };
        let Some(name) = name.as_str() else {
            return Err(InvalidAnnotation("x-mcp-header is not a string".into()));
        };
        if name.is_empty() || !name.bytes().all(is_tchar) {
            return Err(InvalidAnnotation(format!(
                "x-mcp-header {name:?} is not a header token"
            )));
        }
        let primitive = matches!(
            schema.get("type").and_then(Value::as_str),
            Some("string" | "integer" | "boolean")
        );
        if !primitive {
            return Err(InvalidAnnotation(format!(
                "x-mcp-header {name:?} on a parameter that is not a string, integer or boolean"
            )));
        }
        let header = HeaderName::from_bytes(format!("mcp-param-{name}").as_bytes())
            .map_err(|_| InvalidAnnotation(format!("x-mcp-header {name:?} is not a header")))?;
        out.push(ParamHeader {
            header,
            path: Arc::clone(path),
        });
    }
    if let Some(Value::Object(props)) = schema.get("properties") {
        for (key, sub) in props {
            let here = Arc::new(ParamPath {
                parent: path.cloned(),
                key: key.clone(),
            });
            walk_reachable(sub, Some(&here), out)?;
        }
    }
    Ok(())
}

/// The `x-mcp-header` annotations of `schema` and of every schema inside it, wherever it
/// sits. A member of that name counts only on a schema: a parameter may be named so, and
/// the values an instance may take (`default`, `examples`, `const`, `enum`) may hold
/// anything. A keyword not known here is read as holding schemas, so an annotation under it
/// counts, and, not on the `properties` chain, invalidates the tool.
fn count_annotations(schema: &Value) -> usize {
    match schema {
        Value::Object(map) => {
            let nested: usize = map
                .iter()
                .map(|(keyword, value)| match keyword.as_str() {
                    "default" | "examples" | "const" | "enum" => 0,
                    // Maps whose keys are names and whose values are schemas.
                    "properties" | "patternProperties" | "$defs" | "definitions"
                    | "dependentSchemas" => match value {
                        Value::Object(named) => named.values().map(count_annotations).sum(),
                        other => count_annotations(other),
                    },
                    _ => count_annotations(value),
                })
                .sum();
            usize::from(map.contains_key("x-mcp-header")) + nested
        }
        Value::Array(schemas) => schemas.iter().map(count_annotations).sum(),
        _ => 0,
    }
}

/// RFC 9110 `tchar`.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// The `Mcp-Param-*` headers of a call with `arguments` to a tool annotated `headers`.
/// A parameter that is absent, `null`, or of another type than annotated sends no header.
pub fn param_header_values(
    headers: &[ParamHeader],
    arguments: Option<&Value>,
) -> Vec<(HeaderName, HeaderValue)> {
    let mut out = Vec::new();
    for h in headers {
        let mut value = arguments;
        for key in h.path.keys() {
            value = value.and_then(|v| v.get(key));
        }
        let text = match value {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Bool(b)) => b.to_string(),
            Some(Value::Number(n)) => match n.as_i64() {
                Some(i) if i.abs() <= MAX_SAFE_INTEGER => i.to_string(),
                _ => continue,
            },
            _ => continue,
        };
        out.push((h.header.clone(), encode_header_value(&text)));
    }
    out
}

/// What a modern server said in an error, when it is one of the errors only a modern server
/// sends.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ModernError {
    /// `-32022`: the versions it speaks.
    UnsupportedVersion {
        /// `data.supported`.
        supported: Vec<String>,
    },
    /// `-32021`: the capabilities the request needs.
    MissingCapability {
        /// `data.requiredCapabilities`.
        required: Value,
    },
    /// `-32020`: headers and body disagree.
    HeaderMismatch,
}

/// Reads a modern error from a JSON-RPC error object.
pub fn modern_error(error: &RpcError) -> Option<ModernError> {
    match error.code {
        UNSUPPORTED_PROTOCOL_VERSION => {
            let supported = strings(error.data.as_ref().and_then(|d| d.get("supported")));
            Some(ModernError::UnsupportedVersion { supported })
        }
        MISSING_REQUIRED_CLIENT_CAPABILITY => Some(ModernError::MissingCapability {
            required: error
                .data
                .as_ref()
                .and_then(|d| d.get("requiredCapabilities"))
                .cloned()
                .unwrap_or(Value::Null),
        }),
        HEADER_MISMATCH => Some(ModernError::HeaderMismatch),
        _ => None,
    }
}

/// The kind of a modern result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ResultType {
    /// The final result (also when `resultType` is absent, as from a legacy server).
    Complete,
    /// More input is needed: an MRTR round.
    InputRequired,
    /// The call became a durable task (tasks extension).
    Task,
}

/// Reads `resultType`; `Err` with the unknown value (truncated) for anything else.
pub fn result_type(result: &Value) -> Result<ResultType, String> {
    match result.get("resultType") {
        None => Ok(ResultType::Complete),
        Some(Value::String(s)) => match s.as_str() {
            "complete" => Ok(ResultType::Complete),
            "input_required" => Ok(ResultType::InputRequired),
            "task" => Ok(ResultType::Task),
            other => Err(other.chars().take(64).collect()),
        },
        Some(other) => Err(other.to_string().chars().take(64).collect()),
    }
}

/// The modern revision to speak with a server that listed `supported`, if any we speak.
pub fn pick_version(supported: &[String]) -> Option<ProtocolVersion> {
    ProtocolVersion::SUPPORTED
        .iter()
        .copied()
        .filter(|v| v.is_modern())
        .find(|v| supported.iter().any(|s| s == v.as_str()))
}

/// Whether a `server/discover` result is a recognisable one.
pub fn is_discover_result(result: &Value) -> bool {
    result
        .get("supportedVersions")
        .and_then(Value::as_array)
        .is_some()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn header_values_are_plain_or_sentinel_encoded() {
        let enc = |s: &str| encode_header_value(s).to_str().unwrap().to_owned();
        assert_eq!(enc("us-west1"), "us-west1");
        assert_eq!(enc("Hello, 世界"), "=?base64?SGVsbG8sIOS4lueVjA==?=");
        assert_eq!(enc(" padded "), "=?base64?IHBhZGRlZCA=?=");
        assert_eq!(enc("line1\nline2"), "=?base64?bGluZTEKbGluZTI=?=");
        assert_eq!(
            enc("=?base64?literal?="),
            "=?base64?PT9iYXNlNjQ/bGl0ZXJhbD89?="
        );
    }

    #[test]
    fn mcp_name_per_method() {
        let p = json!({"name": "get_weather", "uri": "file:///x"});
        assert_eq!(mcp_name("tools/call", Some(&p)).unwrap(), "get_weather");
        assert_eq!(mcp_name("prompts/get", Some(&p)).unwrap(), "get_weather");
        assert_eq!(mcp_name("resources/read", Some(&p)).unwrap(), "file:///x");
        assert_eq!(mcp_name("tools/list", Some(&p)), None);
    }

    #[test]
    fn annotations_are_read_and_checked() {
        let schema = json!({"type": "object", "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"},
            "opts": {"type": "object", "properties": {
                "dry": {"type": "boolean", "x-mcp-header": "Dry-Run"}}},
            "query": {"type": "string"}}});
        let headers = param_headers(&schema).unwrap();
        assert_eq!(headers.len(), 2);
        let values = param_header_values(
            &headers,
            Some(&json!({"region": "eu", "opts": {"dry": true}})),
        );
        assert!(values.contains(&(
            HeaderName::from_static("mcp-param-region"),
            HeaderValue::from_static("eu")
        )));
        assert!(values.contains(&(
            HeaderName::from_static("mcp-param-dry-run"),
            HeaderValue::from_static("true")
        )));
        // Absent or null: no header.
        assert!(param_header_values(&headers, Some(&json!({"region": null}))).is_empty());
    }

    #[test]
    fn annotations_under_one_object_share_its_path() {
        let long = "k".repeat(4096);
        let schema = json!({"properties": {long.clone(): {"type": "object", "properties": {
            "a": {"type": "string", "x-mcp-header": "A"},
            "b": {"type": "string", "x-mcp-header": "B"}}}}});
        let headers = param_headers(&schema).unwrap();
        assert_eq!(headers[0].path.keys(), [long.as_str(), "a"]);
        assert_eq!(headers[1].path.keys(), [long.as_str(), "b"]);
        // The long key is held once, not once per annotation under it.
        let parent = |h: &ParamHeader| h.path.parent.clone().unwrap();
        assert!(Arc::ptr_eq(&parent(&headers[0]), &parent(&headers[1])));
    }

    #[test]
    fn invalid_annotations_invalidate_the_tool() {
        let bad = [
            json!({"properties": {"a": {"type": "number", "x-mcp-header": "A"}}}),
            json!({"properties": {"a": {"type": "string", "x-mcp-header": ""}}}),
            json!({"properties": {"a": {"type": "string", "x-mcp-header": "A B"}}}),
            json!({"properties": {
                "a": {"type": "string", "x-mcp-header": "X"},
                "b": {"type": "string", "x-mcp-header": "x"}}}),
            json!({"properties": {"a": {"type": "array",
                "items": {"type": "string", "x-mcp-header": "A"}}}}),
            json!({"properties": {"a": {"anyOf": [{"type": "string", "x-mcp-header": "A"}]}}}),
            json!({"$defs": {"d": {"type": "string", "x-mcp-header": "A"}},
                "properties": {"a": {"$ref": "#/$defs/d"}}}),
        ];
        for schema in bad {
            assert!(param_headers(&schema).is_err(), "{schema}");
        }
        assert_eq!(param_headers(&json!({"type": "object"})).unwrap(), vec![]);
    }

    #[test]
    fn the_name_x_mcp_header_outside_a_schema_is_no_annotation() {
        let fine = [
            // A parameter of that name.
            json!({"properties": {"x-mcp-header": {"type": "string"}}}),
            // Values an instance may take, not schemas.
            json!({"properties": {"a": {"type": "object", "default": {"x-mcp-header": "x"}}}}),
            json!({"properties": {"a": {"examples": [{"x-mcp-header": "x"}]}}}),
            json!({"properties": {"a": {"const": {"x-mcp-header": "x"}}}}),
            json!({"properties": {"a": {"enum": [{"x-mcp-header": "x"}]}}}),
            json!({"$defs": {"x-mcp-header": {"type": "string"}}}),
        ];
        for schema in fine {
            assert_eq!(param_headers(&schema), Ok(vec![]), "{schema}");
        }
        // A parameter of that name, annotated, is an annotation like any other.
        let named =
            json!({"properties": {"x-mcp-header": {"type": "string", "x-mcp-header": "X"}}});
        assert_eq!(param_headers(&named).unwrap().len(), 1);
    }

    #[test]
    fn integers_beyond_the_safe_range_send_no_header() {
        let schema = json!({"properties": {"n": {"type": "integer", "x-mcp-header": "N"}}});
        let headers = param_headers(&schema).unwrap();
        assert_eq!(
            param_header_values(&headers, Some(&json!({"n": -7})))[0].1,
            "-7"
        );
        assert!(param_header_values(&headers, Some(&json!({"n": 1u64 << 60}))).is_empty());
    }

    #[test]
    fn modern_errors_and_result_types() {
        let e = RpcError {
            code: -32022,
            message: "x".into(),
            data: Some(json!({"supported": ["2026-07-28", "2025-11-25"]})),
        };
        assert_eq!(
            modern_error(&e),
            Some(ModernError::UnsupportedVersion {
                supported: vec!["2026-07-28".into(), "2025-11-25".into()]
            })
        );
        assert_eq!(
            pick_version(&["2025-11-25".into(), "2026-07-28".into()]),
            Some(ProtocolVersion::V2026_07_28)
        );
        assert_eq!(pick_version(&["2025-11-25".into()]), None);
        assert_eq!(result_type(&json!({})), Ok(ResultType::Complete));
        assert_eq!(
            result_type(&json!({"resultType": "input_required"})),
            Ok(ResultType::InputRequired)
        );
        assert!(result_type(&json!({"resultType": "later"})).is_err());
    }

    #[test]
    fn request_meta_is_added_beside_the_callers() {
        let mut params = Some(json!({"name": "echo", "_meta": {"progressToken": 7}}));
        add_request_meta(
            &mut params,
            ProtocolVersion::V2026_07_28,
            &ClientMeta::new(json!({}), "c", "1"),
        );
        let meta = &params.unwrap()["_meta"];
        assert_eq!(meta["progressToken"], 7);
        assert_eq!(meta[META_PROTOCOL_VERSION], "2026-07-28");
        assert_eq!(meta[META_CLIENT_INFO]["name"], "c");
    }
}
