//! The negotiated context of a session and its capability hash, as the resume-safety extension
//! defines it; and what a 2026-07-28 request carries instead (its own context, in `_meta`).

use mcp_resume_server::guard::Parts;
use serde_json::{json, Map, Value};

/// Protocol versions the instances accept, oldest first.
pub const SUPPORTED_VERSIONS: [&str; 3] = ["2025-03-26", "2025-06-18", "2025-11-25"];

/// The version an instance answers with when the client asks for one it does not know.
pub const LATEST_VERSION: &str = "2025-11-25";

/// The version assumed for a session the instance never saw `initialize` for (the spec's
/// fallback when no `MCP-Protocol-Version` header says otherwise).
pub const DEFAULT_VERSION: &str = "2025-03-26";

/// The stateless revision: no session, every request carries its own context.
pub const MODERN_VERSION: &str = "2026-07-28";

/// Protocol versions a server of `era` names as supported, newest first (what `server/discover`
/// and an unsupported-version error list).
pub fn supported_versions(era: crate::ClusterEra) -> Vec<&'static str> {
    let mut out = Vec::new();
    if era.serves_modern() {
        out.push(MODERN_VERSION);
    }
    if era.serves_legacy() {
        out.extend(SUPPORTED_VERSIONS.iter().rev());
    }
    out
}

/// `_meta` keys of the 2026-07-28 revision.
pub mod modern_meta {
    /// The protocol version a request is written in (mirrored in `MCP-Protocol-Version`).
    pub const PROTOCOL_VERSION: &str = mcp_resume_server::wire::MODERN_VERSION_META_KEY;
    /// The capabilities of the client that sent the request.
    pub const CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
    /// The name and version of the client that sent the request.
    pub const CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
    /// The server's name and version, in results.
    pub const SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
    /// The `subscriptions/listen` request a notification belongs to.
    pub const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";
    /// The log level a request asks for (no `notifications/message` without it).
    pub const LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";
}

/// Capability extension identifiers.
pub mod extensions {
    /// The resume-safety extension, where the 2026-07-28 revision puts extensions.
    pub const RESUME_SAFETY: &str = mcp_resume_server::wire::EXTENSION_ID;
    /// The tasks extension (SEP-2663).
    pub const TASKS: &str = "io.modelcontextprotocol/tasks";
}

/// Modern error codes (2026-07-28).
pub mod modern_code {
    /// The headers do not match the body, or a required one is missing or malformed.
    pub const HEADER_MISMATCH: i64 = -32020;
    /// The request needs a client capability its `_meta` does not declare.
    pub const MISSING_REQUIRED_CLIENT_CAPABILITY: i64 = -32021;
    /// The server does not speak the requested protocol version.
    pub const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;
}

/// The resume-safety extension as a 2026-07-28 server advertises it: idempotency only (the
/// capability hash and sequenced ids have no job without sessions and resumption). The
/// guard's own advertisement.
pub fn modern_resume_safety_capability() -> Value {
    Parts {
        capability_hash: false,
        sequenced_event_ids: false,
        idempotency: true,
    }
    .advertisement()
    .unwrap_or(Value::Null)
}

/// What a 2026-07-28 instance answers in `server/discover`: tool list changes (on
/// `subscriptions/listen`), tasks, and the resume-safety extension when it is on.
pub fn modern_server_capabilities(extension: bool) -> Value {
    let mut caps = json!({ "tools": { "listChanged": true }, "extensions": {} });
    caps["extensions"][extensions::TASKS] = json!({});
    if extension {
        caps["extensions"][extensions::RESUME_SAFETY] = modern_resume_safety_capability();
    }
    caps
}

/// `params._meta` key (and result `_meta` key) names used by the extension and the oracle.
pub mod meta {
    /// Where a `tools/call` carries its idempotency key.
    pub const IDEMPOTENCY_KEY: &str = mcp_resume_server::wire::IDEMPOTENCY_META_KEY;
    /// Where a keyed result carries the capability hash it was produced under.
    pub const CAPABILITY_HASH: &str = mcp_resume_server::wire::RESULT_HASH_META_KEY;
    /// Where a caller puts the tag the oracle records with each execution; a tool result
    /// echoes it under the same key in its `_meta` (a stored result replayed for a keyed
    /// call echoes the tag of the execution that produced it).
    pub const TAG: &str = "io.github.mcp-resume/tag";
    /// The longest tag, in bytes: the oracle keeps every distinct tag that executed, so a
    /// `tools/call` with a longer one is refused (invalid params) rather than kept.
    pub const MAX_TAG_LEN: usize = 256;
}

/// HTTP header names of the transport and of the extension.
pub mod headers {
    use mcp_resume_server::wire;

    /// Session id header.
    pub const SESSION_ID: &str = wire::SESSION_ID_HEADER;
    /// Protocol version header (from 2025-06-18).
    pub const PROTOCOL_VERSION: &str = wire::PROTOCOL_VERSION_HEADER;
    /// The capability hash in force on the answering instance.
    pub const CAPABILITY_HASH: &str = wire::CAPABILITY_HASH_HEADER;
    /// Reason of an explicit resume rejection.
    pub const RESUME_REJECTED: &str = wire::RESUME_REJECTED_HEADER;
    /// Idempotency key of a `tools/call`.
    pub const IDEMPOTENCY_KEY: &str = wire::IDEMPOTENCY_KEY_HEADER;
    /// SSE resume cursor.
    pub const LAST_EVENT_ID: &str = wire::LAST_EVENT_ID_HEADER;
    /// The JSON-RPC method of a 2026-07-28 request.
    pub const MCP_METHOD: &str = "mcp-method";
    /// `params.name` (or `params.uri`) of a 2026-07-28 request that has one.
    pub const MCP_NAME: &str = "mcp-name";
}

/// True when `v` is one of [`SUPPORTED_VERSIONS`].
pub fn is_supported(v: &str) -> bool {
    SUPPORTED_VERSIONS.contains(&v)
}

/// True when the version sends a priming event first on every SSE stream (2025-11-25 on).
pub fn sends_priming(v: &str) -> bool {
    v >= "2025-11-25"
}

/// The `capabilities.experimental.resumeSafety` object the instances advertise: the guard's
/// own advertisement with every part enforced.
pub fn resume_safety_capability() -> Value {
    Parts {
        capability_hash: true,
        sequenced_event_ids: true,
        idempotency: true,
    }
    .advertisement()
    .unwrap_or(Value::Null)
}

/// Server capabilities of an instance, with or without the extension's advertisement.
pub fn server_capabilities(extension: bool) -> Value {
    let mut caps = json!({ "tools": { "listChanged": false } });
    if extension {
        caps["experimental"] = json!({ "resumeSafety": resume_safety_capability() });
    }
    caps
}

/// `sha256:<hex>` of the negotiated context: protocol version, client and server
/// capabilities, serialized with sorted keys so equal contexts always hash equally (the
/// guard's definition, `mcp_resume_server::wire::capability_hash`).
pub fn capability_hash(protocol_version: &str, client_caps: &Value, server_caps: &Value) -> String {
    mcp_resume_server::wire::capability_hash(protocol_version, client_caps, server_caps)
        .as_str()
        .to_owned()
}

/// Digest of a tool name and its arguments, used to tell "same key, same call" from
/// "same key, different call" (the guard's definition, `mcp_resume_server::wire::arguments_digest`).
pub(crate) fn call_fingerprint(tool: &str, args: &Value) -> String {
    mcp_resume_server::wire::arguments_digest(tool, args)
        .as_str()
        .to_owned()
}

/// [`call_fingerprint`] of a call's arguments as its body (`body`, one JSON-RPC request)
/// wrote them, as the guard digests a keyed call (`wire::arguments_digest_of_text`):
/// integers past 64 bits keep their digits there, where `args`, read into a [`Value`], has
/// them rounded to doubles, so two calls apart only in such digits are two calls, not one.
/// Arguments absent or `null` are the empty object, as `args` says; a body whose arguments'
/// text cannot be taken alone is digested from `args`.
pub(crate) fn written_call_fingerprint(tool: &str, args: &Value, body: &[u8]) -> String {
    use serde::Deserialize;
    use serde_json::value::RawValue;

    #[derive(Deserialize)]
    struct Request<'a> {
        #[serde(borrow)]
        params: Params<'a>,
    }
    #[derive(Deserialize)]
    struct Params<'a> {
        #[serde(borrow, default)]
        arguments: Option<&'a RawValue>,
    }
    serde_json::from_slice::<Request<'_>>(body)
        .ok()
        .and_then(|r| r.params.arguments)
        .filter(|text| text.get().starts_with('{'))
        .and_then(|text| {
            mcp_resume_server::wire::arguments_digest_of_text(tool, text.get().as_bytes())
        })
        .map(|digest| digest.as_str().to_owned())
        .unwrap_or_else(|| call_fingerprint(tool, args))
}

/// The sampling temperature a client negotiated (`capabilities.experimental.sampling.temperature`),
/// 1.0 when absent.
pub fn negotiated_temperature(client_caps: &Value) -> f64 {
    client_caps
        .pointer("/experimental/sampling/temperature")
        .and_then(Value::as_f64)
        .unwrap_or(1.0)
}

/// An empty JSON object, for default client capabilities.
pub(crate) fn empty_object() -> Value {
    Value::Object(Map::new())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_ignores_key_order() {
        let a: Value = serde_json::from_str(r#"{"a":1,"b":{"c":2,"d":3}}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"b":{"d":3,"c":2},"a":1}"#).unwrap();
        let s = server_capabilities(true);
        assert_eq!(
            capability_hash("2025-11-25", &a, &s),
            capability_hash("2025-11-25", &b, &s)
        );
        assert_ne!(
            capability_hash("2025-11-25", &a, &s),
            capability_hash("2025-06-18", &a, &s)
        );
    }

    #[test]
    fn modern_capabilities_advertise_idempotency_only_with_the_extension() {
        let on = modern_server_capabilities(true);
        assert_eq!(on["tools"]["listChanged"], true);
        assert_eq!(
            on["extensions"][extensions::RESUME_SAFETY]["idempotency"]["metaKey"],
            meta::IDEMPOTENCY_KEY
        );
        assert!(on["extensions"][extensions::TASKS].is_object());
        let off = modern_server_capabilities(false);
        assert!(off["extensions"].get(extensions::RESUME_SAFETY).is_none());
        assert_eq!(
            supported_versions(crate::ClusterEra::Dual),
            [MODERN_VERSION, "2025-11-25", "2025-06-18", "2025-03-26"]
        );
        assert_eq!(
            supported_versions(crate::ClusterEra::Modern),
            [MODERN_VERSION]
        );
    }

    #[test]
    fn temperature_defaults_to_one() {
        assert_eq!(negotiated_temperature(&json!({})), 1.0);
        let caps = json!({"experimental": {"sampling": {"temperature": 0.2}}});
        assert_eq!(negotiated_temperature(&caps), 0.2);
    }
}
