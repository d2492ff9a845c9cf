//! The resume-safety extension (`docs/extension.md`): advertisement,
//! headers, rejection body, idempotency refusals.

use serde_json::Value;

use super::config::DEFAULT_IDEMPOTENCY_META_KEY;
use super::RejectReason;

/// Response header carrying the negotiated-context digest.
pub(crate) const CAPABILITY_HASH_HEADER: &str = "mcp-capability-hash";
/// Response header naming the reason of a resume rejection.
pub(crate) const REJECTED_HEADER: &str = "mcp-resume-rejected";
/// `error.data.code` of a resume rejection body.
pub(crate) const REJECTED_CODE: &str = "SESSION_RESUME_REJECTED";
/// `_meta` key of a tool result carrying the capability hash it was produced under.
pub(crate) const RESULT_HASH_META_KEY: &str = "io.github.mcp-resume/capability-hash";

/// What a server advertised under `capabilities.experimental.resumeSafety`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ResumeSafety {
    /// Event ids are `<stream>-<seq>`, contiguous per stream.
    pub sequenced_event_ids: bool,
    /// Every response carries `Mcp-Capability-Hash`.
    pub capability_hash: bool,
    /// The `_meta` key for idempotency keys, when the server deduplicates keyed calls.
    pub idempotency_meta_key: Option<String>,
}

/// The extension's identifier where the 2026-07-28 revision puts extensions
/// (`capabilities.extensions`).
pub(crate) const EXTENSION_ID: &str = "io.github.mcp-resume/resume-safety";

impl ResumeSafety {
    /// Reads the advertisement from an `initialize` result; `None` when absent.
    pub(crate) fn from_initialize_result(result: &Value) -> Option<Self> {
        Self::from_capabilities(result.get("capabilities")?)
    }

    /// Reads the advertisement from server capabilities: under `extensions` (the 2026-07-28
    /// place) or `experimental.resumeSafety` (legacy); `None` when absent.
    ///
    /// Each part is optional; a part with an unexpected shape counts as not advertised, so a
    /// confused server gets fewer checks rather than a failed connection.
    pub(crate) fn from_capabilities(capabilities: &Value) -> Option<Self> {
        let adv = capabilities
            .get("extensions")
            .and_then(|e| e.get(EXTENSION_ID))
            .or_else(|| capabilities.get("experimental")?.get("resumeSafety"))?;
        if !adv.is_object() {
            return None;
        }
        let flag = |name: &str| adv.get(name).and_then(Value::as_bool).unwrap_or(false);
        let idempotency_meta_key = match adv.get("idempotency") {
            Some(Value::Object(idem)) => Some(
                idem.get("metaKey")
                    .and_then(Value::as_str)
                    .filter(|k| !k.is_empty() && k.len() <= 256)
                    .unwrap_or(DEFAULT_IDEMPOTENCY_META_KEY)
                    .to_owned(),
            ),
            Some(Value::Bool(true)) => Some(DEFAULT_IDEMPOTENCY_META_KEY.to_owned()),
            _ => None,
        };
        Some(ResumeSafety {
            sequenced_event_ids: flag("sequencedEventIds"),
            capability_hash: flag("capabilityHash"),
            idempotency_meta_key,
        })
    }
}

/// Whether server capabilities advertise the proposed standard idempotency capability
/// (`tools.idempotency`, SEP-3182: the key travels in `params.idempotencyKey`).
pub(crate) fn standard_idempotency(capabilities: &Value) -> bool {
    match capabilities.get("tools").and_then(|t| t.get("idempotency")) {
        Some(Value::Bool(b)) => *b,
        Some(Value::Object(_)) => true,
        _ => false,
    }
}

/// Maps a reason string of the wire contract to its variant.
pub(crate) fn reject_reason(reason: &str) -> RejectReason {
    let known = [
        RejectReason::UnknownSession,
        RejectReason::NotOwner,
        RejectReason::EventGap,
        RejectReason::OrphanedRequest,
        RejectReason::CapabilityMismatch,
    ];
    let reason = reason.trim();
    match known.into_iter().find(|known| known.as_str() == reason) {
        Some(known) => known,
        None => {
            let mut s: String = reason
                .chars()
                .filter(|c| !c.is_control())
                .take(64)
                .collect();
            super::jsonrpc::truncate(&mut s, 64);
            RejectReason::Other(s)
        }
    }
}

/// Reads a rejection from a JSON-RPC error body (`error.data.code == SESSION_RESUME_REJECTED`).
pub(crate) fn rejection_from_body(body: &[u8]) -> Option<RejectReason> {
    let v: Value = serde_json::from_slice(body).ok()?;
    let data = v.get("error")?.get("data")?;
    if data.get("code")?.as_str()? != REJECTED_CODE {
        return None;
    }
    Some(reject_reason(
        data.get("reason").and_then(Value::as_str).unwrap_or(""),
    ))
}

/// `error.data.code` of a keyed call refused because the key's first execution still runs.
pub(crate) const KEY_IN_USE_CODE: &str = "IDEMPOTENCY_KEY_IN_USE";
/// `error.data.code` of a keyed call whose first execution the server lost track of.
pub(crate) const KEY_OUTCOME_UNKNOWN_CODE: &str = "IDEMPOTENCY_OUTCOME_UNKNOWN";

/// How a server that deduplicates keyed calls refused one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeyRefusal {
    /// The first execution still holds the key; its stored result will come.
    InUse,
    /// The first execution was lost mid-way: whether it ran cannot be known.
    OutcomeUnknown,
}

/// Reads an idempotency refusal from a JSON-RPC error's `data.code`.
pub(crate) fn key_refusal(data: Option<&Value>) -> Option<KeyRefusal> {
    match data?.get("code")?.as_str()? {
        KEY_IN_USE_CODE => Some(KeyRefusal::InUse),
        KEY_OUTCOME_UNKNOWN_CODE => Some(KeyRefusal::OutcomeUnknown),
        _ => None,
    }
}

/// The capability hash a tool result says it was produced under, if it says so.
pub(crate) fn result_capability_hash(result: &Value) -> Option<&str> {
    result.get("_meta")?.get(RESULT_HASH_META_KEY)?.as_str()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn idempotency_refusals() {
        let data = json!({"code": "IDEMPOTENCY_KEY_IN_USE"});
        assert_eq!(key_refusal(Some(&data)), Some(KeyRefusal::InUse));
        let data = json!({"code": "IDEMPOTENCY_OUTCOME_UNKNOWN"});
        assert_eq!(key_refusal(Some(&data)), Some(KeyRefusal::OutcomeUnknown));
        assert_eq!(key_refusal(Some(&json!({"code": "OTHER"}))), None);
        assert_eq!(key_refusal(Some(&json!("IDEMPOTENCY_KEY_IN_USE"))), None);
        assert_eq!(key_refusal(None), None);
    }

    #[test]
    fn full_advertisement() {
        let r = json!({"capabilities": {"experimental": {"resumeSafety": {
            "version": 1, "sequencedEventIds": true, "capabilityHash": true,
            "idempotency": {"metaKey": "x/key", "header": "Idempotency-Key"}}}}});
        assert_eq!(
            ResumeSafety::from_initialize_result(&r),
            Some(ResumeSafety {
                sequenced_event_ids: true,
                capability_hash: true,
                idempotency_meta_key: Some("x/key".into()),
            })
        );
    }

    #[test]
    fn partial_and_absent_advertisements() {
        let r = json!({"capabilities": {"experimental": {"resumeSafety": {"idempotency": {}}}}});
        let adv = ResumeSafety::from_initialize_result(&r).unwrap();
        assert!(!adv.sequenced_event_ids && !adv.capability_hash);
        assert_eq!(
            adv.idempotency_meta_key.as_deref(),
            Some(DEFAULT_IDEMPOTENCY_META_KEY)
        );
        assert_eq!(
            ResumeSafety::from_initialize_result(&json!({"capabilities": {}})),
            None
        );
        assert_eq!(
            ResumeSafety::from_initialize_result(
                &json!({"capabilities": {"experimental": {"resumeSafety": 1}}})
            ),
            None
        );
        let odd = json!({"capabilities": {"experimental": {"resumeSafety": {
            "sequencedEventIds": "yes", "idempotency": false}}}});
        let adv = ResumeSafety::from_initialize_result(&odd).unwrap();
        assert!(!adv.sequenced_event_ids);
        assert_eq!(adv.idempotency_meta_key, None);
    }

    #[test]
    fn rejection_body() {
        let body = br#"{"jsonrpc":"2.0","id":null,"error":{"code":-32001,"message":"rejected",
            "data":{"code":"SESSION_RESUME_REJECTED","reason":"not_owner"}}}"#;
        assert_eq!(rejection_from_body(body), Some(RejectReason::NotOwner));
        let plain =
            br#"{"jsonrpc":"2.0","id":null,"error":{"code":-32001,"message":"Session not found"}}"#;
        assert_eq!(rejection_from_body(plain), None);
        assert_eq!(rejection_from_body(b"not json"), None);
        assert_eq!(
            reject_reason("something_new"),
            RejectReason::Other("something_new".into())
        );
        assert_eq!(reject_reason("event_gap"), RejectReason::EventGap);
    }

    #[test]
    fn result_hash() {
        let r =
            json!({"content": [], "_meta": {"io.github.mcp-resume/capability-hash": "sha256:ab"}});
        assert_eq!(result_capability_hash(&r), Some("sha256:ab"));
        assert_eq!(result_capability_hash(&json!({"content": []})), None);
    }
}
