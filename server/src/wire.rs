//! The resume-safety extension's wire contract (README of `mcp-resume`, "The resume-safety
//! extension"): header names, `_meta` keys, error codes, and the digests both sides agree on.

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::ids::{ArgumentsDigest, CapabilityHash};

mod written;

/// `Mcp-Session-Id`.
pub const SESSION_ID_HEADER: &str = "mcp-session-id";
/// `MCP-Protocol-Version`.
pub const PROTOCOL_VERSION_HEADER: &str = "mcp-protocol-version";
/// `Mcp-Capability-Hash`: the negotiated context's digest, on every response of a session.
pub const CAPABILITY_HASH_HEADER: &str = "mcp-capability-hash";
/// `Mcp-Resume-Rejected`: the reason of an explicit resume rejection.
pub const RESUME_REJECTED_HEADER: &str = "mcp-resume-rejected";
/// `Idempotency-Key`: a keyed `tools/call`'s key, beside its `_meta` copy.
pub const IDEMPOTENCY_KEY_HEADER: &str = "idempotency-key";
/// `Last-Event-ID`.
pub const LAST_EVENT_ID_HEADER: &str = "last-event-id";

/// The header names above as parsed names: a map searched with one of these skips parsing
/// the name again on every request.
pub(crate) mod names {
    use http::HeaderName;

    pub(crate) const SESSION_ID: HeaderName = HeaderName::from_static(super::SESSION_ID_HEADER);
    pub(crate) const CAPABILITY_HASH: HeaderName =
        HeaderName::from_static(super::CAPABILITY_HASH_HEADER);
    pub(crate) const IDEMPOTENCY_KEY: HeaderName =
        HeaderName::from_static(super::IDEMPOTENCY_KEY_HEADER);
    pub(crate) const LAST_EVENT_ID: HeaderName =
        HeaderName::from_static(super::LAST_EVENT_ID_HEADER);
}

/// Where a `tools/call` carries its idempotency key in `params._meta`.
pub const IDEMPOTENCY_META_KEY: &str = "io.github.mcp-resume/idempotency-key";
/// Where a keyed result carries the capability hash it was produced under.
pub const RESULT_HASH_META_KEY: &str = "io.github.mcp-resume/capability-hash";
/// The extension's identifier under 2026-07-28 `capabilities.extensions`.
pub const EXTENSION_ID: &str = "io.github.mcp-resume/resume-safety";
/// The 2026-07-28 `_meta` key naming the protocol version a request is written in.
pub const MODERN_VERSION_META_KEY: &str = "io.modelcontextprotocol/protocolVersion";
/// The stateless revision.
pub const MODERN_VERSION: &str = "2026-07-28";

/// `error.data.code` values, as the client SDK reads them.
pub mod codes {
    /// A resume the server cannot prove.
    pub const SESSION_RESUME_REJECTED: &str = "SESSION_RESUME_REJECTED";
    /// The key's first execution still runs.
    pub const IDEMPOTENCY_KEY_IN_USE: &str = "IDEMPOTENCY_KEY_IN_USE";
    /// The key's first execution was lost mid-way: it never runs again.
    pub const IDEMPOTENCY_OUTCOME_UNKNOWN: &str = "IDEMPOTENCY_OUTCOME_UNKNOWN";
    /// The key was used for another call (other tool or arguments).
    pub const IDEMPOTENCY_KEY_REUSED: &str = "IDEMPOTENCY_KEY_REUSED";
    /// The key is not valid, or the request names two different keys.
    pub const IDEMPOTENCY_KEY_INVALID: &str = "IDEMPOTENCY_KEY_INVALID";
    /// A keyed call the guard cannot guard (in a batch, or a body over the bound).
    pub const IDEMPOTENCY_UNGUARDABLE: &str = "IDEMPOTENCY_UNGUARDABLE";
    /// The store that claims keys cannot be reached: nothing ran, come back later.
    pub const IDEMPOTENCY_STORE_UNAVAILABLE: &str = "IDEMPOTENCY_STORE_UNAVAILABLE";
}

/// JSON-RPC error codes the guard answers with.
pub mod rpc_codes {
    /// Invalid request.
    pub const INVALID_REQUEST: i64 = -32600;
    /// Invalid params.
    pub const INVALID_PARAMS: i64 = -32602;
    /// Server-defined error (idempotency refusals).
    pub const SERVER: i64 = -32000;
    /// Session not found / resume rejected (what the TypeScript SDK answers for an unknown
    /// session).
    pub const SESSION_NOT_FOUND: i64 = -32001;
}

/// `sha256:<hex>` of the negotiated context, serialized with sorted keys so that equal
/// contexts hash equally whatever their key order.
pub fn capability_hash(
    protocol_version: &str,
    client_capabilities: &Value,
    server_capabilities: &Value,
) -> CapabilityHash {
    let mut canon = String::with_capacity(256);
    canon.push_str("{\"clientCapabilities\":");
    write_canonical(client_capabilities, &mut canon, write_as_is);
    canon.push_str(",\"protocolVersion\":");
    write_canonical(&Value::from(protocol_version), &mut canon, write_as_is);
    canon.push_str(",\"serverCapabilities\":");
    write_canonical(server_capabilities, &mut canon, write_as_is);
    canon.push('}');
    CapabilityHash::from_digest(hex(&Sha256::digest(canon.as_bytes())))
}

/// Digest of a tool name and its arguments (key order does not matter).
pub fn arguments_digest(tool: &str, arguments: &Value) -> ArgumentsDigest {
    let mut canon = String::with_capacity(64);
    write_canonical(&Value::from(tool), &mut canon, write_number);
    canon.push('\n');
    write_canonical(arguments, &mut canon, write_number);
    ArgumentsDigest::from_hex(hex(&Sha256::digest(canon.as_bytes())))
}

/// [`arguments_digest`] of the arguments as written (`arguments`, the text of one JSON
/// value): the same digest, except that integers past 64 bits keep their digits (read into
/// a [`Value`] they are rounded to doubles, and two of them could digest alike). `None` when
/// the text is not one JSON value.
pub fn arguments_digest_of_text(tool: &str, arguments: &[u8]) -> Option<ArgumentsDigest> {
    let mut canon = String::with_capacity(64 + arguments.len());
    write_canonical(&Value::from(tool), &mut canon, write_number);
    canon.push('\n');
    written::write(arguments, &mut canon)?;
    Some(ArgumentsDigest::from_hex(hex(&Sha256::digest(
        canon.as_bytes(),
    ))))
}

/// Lowercase hex of `bytes`.
pub(crate) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
    out
}

/// Serializes with object keys sorted, independently of serde_json's map ordering, and
/// numbers as `number` writes them.
///
/// Recursion depth is bounded by serde_json's own parser limit (128) for anything read from
/// the network, so this cannot overflow the stack on hostile input.
fn write_canonical(v: &Value, out: &mut String, number: fn(&serde_json::Number, &mut String)) {
    match v {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::from(k.as_str()).to_string());
                out.push(':');
                write_canonical(&map[*k], out, number);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out, number);
            }
            out.push(']');
        }
        Value::Number(n) => number(n, out),
        other => out.push_str(&other.to_string()),
    }
}

/// A number as serde_json spells it: the capability hash's definition.
fn write_as_is(n: &serde_json::Number, out: &mut String) {
    out.push_str(&n.to_string());
}

/// One spelling per number: `1`, `1.0` and `1e0` are one value to a tool reading JSON numbers
/// (JavaScript's are all doubles), so a re-send written by another serializer must digest
/// alike. Integers keep their exact digits; other numbers are compared as the doubles they
/// read as (as RFC 8785 does), so two spellings of one double are one argument.
fn write_number(n: &serde_json::Number, out: &mut String) {
    use std::fmt::Write as _;
    /// Integers up to 2^53 are exact as doubles.
    const EXACT: f64 = 9_007_199_254_740_992.0;
    if n.is_i64() || n.is_u64() {
        let _ = write!(out, "{n}");
        return;
    }
    match n.as_f64() {
        Some(f) if f.fract() == 0.0 && f.abs() <= EXACT => {
            // Within ±2^53 the cast is exact.
            let _ = write!(out, "{}", f as i64);
        }
        Some(f) => {
            let _ = write!(out, "{f:?}");
        }
        None => out.push_str(&n.to_string()),
    }
}

/// The first value of a header, as `HeaderMap::get` gives it. Most heads hold a few names:
/// comparing each costs less than hashing the one looked up; a long head is looked up.
pub(crate) fn first_header<'a>(
    headers: &'a http::HeaderMap,
    name: &http::HeaderName,
) -> Option<&'a http::HeaderValue> {
    if headers.keys_len() > SHORT_HEAD {
        return headers.get(name);
    }
    // A name's first value comes first.
    headers.iter().find(|(n, _)| *n == name).map(|(_, v)| v)
}

/// Whether a header is present; see [`first_header`].
pub(crate) fn has_header(headers: &http::HeaderMap, name: &http::HeaderName) -> bool {
    if headers.keys_len() > SHORT_HEAD {
        return headers.contains_key(name);
    }
    headers.keys().any(|n| n == name)
}

/// Heads up to this many names are searched name by name.
pub(crate) const SHORT_HEAD: usize = 16;

/// Whether two JSON-RPC ids name the same request: equal, or numbers of one value (an inner
/// server written in JavaScript echoes an id `1.0` as `1`).
pub(crate) fn same_id(a: &Value, b: &Value) -> bool {
    a == b
        || match (a, b) {
            (Value::Number(x), Value::Number(y)) => {
                x.as_f64().is_some() && x.as_f64() == y.as_f64()
            }
            _ => false,
        }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_hash_ignores_key_order_and_names_the_context() {
        let a = json!({"a": 1, "b": {"c": 2, "d": 3}});
        let b = json!({"b": {"d": 3, "c": 2}, "a": 1});
        let s = json!({"tools": {}});
        assert_eq!(
            capability_hash("2025-11-25", &a, &s),
            capability_hash("2025-11-25", &b, &s)
        );
        assert_ne!(
            capability_hash("2025-11-25", &a, &s),
            capability_hash("2025-06-18", &a, &s)
        );
        assert!(capability_hash("v", &a, &s).as_str().starts_with("sha256:"));
        assert_eq!(capability_hash("v", &a, &s).as_str().len(), 7 + 64);
    }

    /// The wire definition, pinned: SHA-256 of the context serialized with sorted keys and
    /// no spaces. Any server (and the mock cluster, which calls this) must produce exactly it.
    #[test]
    fn the_hash_is_the_extensions_definition() {
        let caps = json!({"experimental": {"sampling": {"temperature": 0.2}}});
        let server = json!({"tools": {"listChanged": false}});
        let canon = r#"{"clientCapabilities":{"experimental":{"sampling":{"temperature":0.2}}},"protocolVersion":"2025-11-25","serverCapabilities":{"tools":{"listChanged":false}}}"#;
        let want = format!("sha256:{}", hex(&Sha256::digest(canon.as_bytes())));
        assert_eq!(capability_hash("2025-11-25", &caps, &server).as_str(), want);
    }

    #[test]
    fn the_digest_tells_calls_apart() {
        assert_eq!(
            arguments_digest("t", &json!({"a": 1, "b": 2})),
            arguments_digest("t", &json!({"b": 2, "a": 1}))
        );
        assert_ne!(
            arguments_digest("t", &json!({"a": 1})),
            arguments_digest("u", &json!({"a": 1}))
        );
        assert_ne!(
            arguments_digest("t", &json!({"a": 1})),
            arguments_digest("t", &json!({"a": 2}))
        );
        // One number, three spellings: one digest.
        let spelled = |text: &str| -> Value { serde_json::from_str(text).unwrap() };
        assert_eq!(
            arguments_digest("t", &spelled(r#"{"n": 1}"#)),
            arguments_digest("t", &spelled(r#"{"n": 1.0}"#))
        );
        assert_eq!(
            arguments_digest("t", &spelled(r#"{"n": 2.5}"#)),
            arguments_digest("t", &spelled(r#"{"n": 25e-1}"#))
        );
        // Integers beyond 2^53 keep their digits.
        assert_ne!(
            arguments_digest("t", &spelled(r#"{"n": 18446744073709551615}"#)),
            arguments_digest("t", &spelled(r#"{"n": 18446744073709551614}"#))
        );
        // Past 64 bits too, read from the text (a value holds them as doubles).
        let written = |text: &str| arguments_digest_of_text("t", text.as_bytes()).unwrap();
        assert_ne!(
            written(r#"{"n": 100000000000000000001}"#),
            written(r#"{"n": 100000000000000000002}"#)
        );
        assert_ne!(
            written(r#"{"n": -100000000000000000001}"#),
            written(r#"{"n": -100000000000000000002}"#)
        );
        // Everything else digests from the text as from the value read from it.
        for text in [
            r#"{"n": 1, "m": 1.0, "f": 2.5e0, "g": -0.0, "h": 1e300}"#,
            r#"{"z": -0, "y": [-0, 0, -0.0]}"#,
            r#"{"b": [true, false, null, "a\"\u00e9\n", {}, []], "a": {"z": 1, "y": [1, 2]}}"#,
            r#"{"k": 1, "k": 2, "big": 18446744073709551615, "neg": -9223372036854775808}"#,
            r#" [ 1 , "x" ] "#,
            r#""just a string""#,
        ] {
            assert_eq!(
                written(text),
                arguments_digest("t", &spelled(text)),
                "{text}"
            );
        }
        assert_eq!(
            written(r#"{"n": 1}"#),
            written(r#"{"n": 1.0}"#),
            "one number, two spellings"
        );
        assert_eq!(
            written(r#"{"n": -0}"#),
            written(r#"{"n": 0}"#),
            "zero, with its sign or without"
        );
        for bad in ["", "{", r#"{"a" 1}"#, "[1,]", "01", "1 2", "tru", r#""a"#] {
            assert!(
                arguments_digest_of_text("t", bad.as_bytes()).is_none(),
                "{bad}"
            );
        }
    }
}
