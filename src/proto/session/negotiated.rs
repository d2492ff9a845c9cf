//! What one established session negotiated: its id, version and headers, the server's
//! capabilities, and the resume-safety checks and key placement its extension calls for.
//! Built once per handshake, from an `initialize` result or a modern discovery, and read
//! by everything the session sends on it; a JSON-RPC request is assembled here (its key
//! placed, its `_meta` and headers), so every sender puts it together the same way.

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use http::header::{HeaderMap, HeaderValue};
use serde_json::{Map, Value};

use super::headers::SessionHeaders;
use crate::ids::{CapabilityHash, IdempotencyKey, RequestId, SessionId};
use crate::proto::config::DEFAULT_IDEMPOTENCY_META_KEY;
use crate::proto::ext::{self, ResumeSafety};
use crate::proto::modern::{self, ClientMeta, ParamHeader};
use crate::proto::version::ProtocolVersion;
use crate::proto::{jsonrpc, methods, ExtensionStatus};

/// A session that stayed up this long worked, whatever else happened on it.
pub(super) const STABLE_SESSION: Duration = Duration::from_secs(5);

/// What one established session negotiated.
#[derive(Debug, Clone)]
pub(super) struct Negotiated {
    /// Which session this is (one per successful `initialize`).
    pub(super) generation: u64,
    pub(super) id: Option<SessionId>,
    pub(super) version: ProtocolVersion,
    /// The protocol headers of its requests (the id's marked sensitive: it is a bearer
    /// secret), from `id` and `version`.
    pub(super) headers: SessionHeaders,
    server_capabilities: Value,
    hash: Option<CapabilityHash>,
    /// The extension as advertised (with the parts that cannot run switched off).
    ext: Option<ResumeSafety>,
    /// It runs the extension's checks: a legacy session, of a client that does not trust the
    /// server blindly.
    checked: bool,
    /// Where a keyed call carries its key, when the server deduplicates keyed calls.
    keys: Option<KeyPlacement>,
    /// The `initialize` result (or, modern, the discovery reshaped like one), returned to
    /// `connect` calls.
    pub(super) result: Value,
}

/// Where an idempotency key travels for a server that deduplicates by it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum KeyPlacement {
    /// The resume-safety extension: `params._meta[<metaKey>]` and the `Idempotency-Key` header.
    Meta(String),
    /// The proposed standard (SEP-3182): `params.idempotencyKey`.
    Params,
}

impl Negotiated {
    /// A legacy session of `generation`: what `initialize` answered (`result`) under the
    /// session id and capability hash of its head, speaking `version`. `ext`: the extension
    /// as advertised, with the parts that cannot run switched off; `trusting`: a client that
    /// runs none of its checks.
    pub(super) fn legacy(
        generation: u64,
        id: Option<SessionId>,
        hash: Option<CapabilityHash>,
        version: ProtocolVersion,
        ext: Option<ResumeSafety>,
        trusting: bool,
        result: Value,
    ) -> Self {
        Negotiated {
            generation,
            headers: SessionHeaders::new(id.as_ref(), version),
            id,
            version,
            server_capabilities: result
                .get("capabilities")
                .cloned()
                .unwrap_or(Value::Object(Map::new())),
            hash,
            keys: ext
                .as_ref()
                .and_then(|e| e.idempotency_meta_key.clone())
                .map(KeyPlacement::Meta),
            ext,
            // A trusting client runs no check of the extension: it behaves like a stock one.
            checked: !trusting,
            result,
        }
    }

    /// A modern session of `generation`: the server's `capabilities` as its discovery listed
    /// them, and `result`, the discovery in the shape of an `initialize` result.
    pub(super) fn modern(generation: u64, capabilities: Value, result: Value) -> Self {
        let ext = ResumeSafety::from_capabilities(&capabilities);
        let keys = match &ext {
            Some(e) => e.idempotency_meta_key.clone().map(KeyPlacement::Meta),
            None => None,
        }
        .or_else(|| ext::standard_idempotency(&capabilities).then_some(KeyPlacement::Params));
        Negotiated {
            generation,
            id: None,
            version: ProtocolVersion::MODERN,
            headers: SessionHeaders::new(None, ProtocolVersion::MODERN),
            server_capabilities: capabilities,
            hash: None,
            // The capability hash and sequenced ids have no job without resumption.
            checked: false,
            ext,
            keys,
            result,
        }
    }

    /// The stand-in for a request sent before anything is known of the server (an
    /// `initialize`, or a modern probe) by the handshake of `generation`, speaking `version`:
    /// no session, nothing to check.
    pub(super) fn unknown(generation: u64, version: ProtocolVersion) -> Negotiated {
        Negotiated {
            generation,
            id: None,
            version,
            headers: SessionHeaders::new(None, version),
            server_capabilities: Value::Null,
            hash: None,
            ext: None,
            checked: false,
            keys: None,
            result: Value::Null,
        }
    }

    /// The capability hash the answers of this session must carry, when the extension's hash
    /// check is in force.
    pub(super) fn expected_hash(&self) -> Option<&CapabilityHash> {
        let checked = self.checked_ext().is_some_and(|e| e.capability_hash);
        self.hash.as_ref().filter(|_| checked)
    }

    /// The extension as advertised, when its checks run on this session's exchanges.
    pub(super) fn checked_ext(&self) -> Option<&ResumeSafety> {
        self.ext.as_ref().filter(|_| self.checked)
    }

    /// The change notifications a modern `subscriptions/listen` asks for: those of the lists
    /// the server says change (none: nothing would ever come on it).
    pub(super) fn list_changes(&self) -> Map<String, Value> {
        let changes = |what: &str| {
            self.server_capabilities
                .get(what)
                .and_then(|c| c.get("listChanged"))
                .and_then(Value::as_bool)
                .unwrap_or(false)
        };
        let mut filter = Map::new();
        for (capability, field) in [
            ("tools", "toolsListChanged"),
            ("resources", "resourcesListChanged"),
            ("prompts", "promptsListChanged"),
        ] {
            if changes(capability) {
                filter.insert(field.to_owned(), Value::Bool(true));
            }
        }
        filter
    }

    /// Whether the server deduplicates keyed calls.
    pub(super) fn dedups(&self) -> bool {
        self.keys.is_some()
    }

    /// The body and headers of the JSON-RPC request `method`, sent as `rpc` on this session.
    ///
    /// A keyed call's `key` goes where the server looks for it: the proposed standard's
    /// `params.idempotencyKey`, or else `params._meta` under the extension's `metaKey` (ours
    /// by default) and the `Idempotency-Key` header. A `modern` request's `_meta` says what
    /// the server is to know of the client, and its headers mirror its method, name and
    /// annotated tool arguments (the annotations learned from `tools/list`). What is added to
    /// `params` stays there, for the call that keeps them.
    pub(super) fn request(
        &self,
        rpc: &RequestId,
        method: &str,
        params: &mut Option<Value>,
        key: Option<&IdempotencyKey>,
        modern: Option<(&ClientMeta, &HashMap<String, Vec<ParamHeader>>)>,
    ) -> (Bytes, HeaderMap) {
        if let Some(key) = key {
            match &self.keys {
                Some(KeyPlacement::Params) => set_param_key(params, key),
                Some(KeyPlacement::Meta(meta_key)) => set_meta_key(params, meta_key, key),
                None => set_meta_key(params, DEFAULT_IDEMPOTENCY_META_KEY, key),
            }
        }
        if let Some((client, _)) = modern {
            modern::add_request_meta(params, self.version, client);
        }
        let body = jsonrpc::encode_request(rpc, method, params.as_ref());
        let header_key = key.filter(|_| self.keys != Some(KeyPlacement::Params));
        let mut headers = self.headers.post(header_key);
        if let Some((_, tool_headers)) = modern {
            mirror_headers(tool_headers, method, params.as_ref(), &mut headers);
        }
        (body, headers)
    }

    /// Which checks of the extension are in force.
    pub(super) fn extension_status(&self) -> ExtensionStatus {
        match &self.ext {
            None => ExtensionStatus::default(),
            Some(ext) => ExtensionStatus {
                advertised: true,
                capability_hash: ext.capability_hash,
                sequenced_event_ids: ext.sequenced_event_ids,
                idempotency: self.keys.is_some(),
            },
        }
    }

    /// Whether `other` differs in what the application may depend on.
    pub(super) fn differs_from(&self, other: &Negotiated) -> bool {
        self.version != other.version
            || self.server_capabilities != other.server_capabilities
            || self.hash != other.hash
    }
}

/// Puts the idempotency key in the proposed standard's `params.idempotencyKey` (SEP-3182).
fn set_param_key(params: &mut Option<Value>, key: &IdempotencyKey) {
    let params = params.get_or_insert_with(|| Value::Object(Map::new()));
    if let Value::Object(params) = params {
        params.insert(
            "idempotencyKey".to_owned(),
            Value::String(key.as_str().to_owned()),
        );
    }
}

/// Puts the idempotency key in `params._meta[meta_key]` (non-object params cannot carry
/// `_meta`; the header still carries the key).
fn set_meta_key(params: &mut Option<Value>, meta_key: &str, key: &IdempotencyKey) {
    if let Some(meta) = modern::meta_mut(params) {
        if meta.get(meta_key).and_then(Value::as_str) != Some(key.as_str()) {
            meta.insert(meta_key.to_owned(), Value::String(key.as_str().to_owned()));
        }
    }
}

/// Adds the headers a modern request mirrors from its body: `Mcp-Method`, `Mcp-Name`, and
/// the tool's `Mcp-Param-*` annotations (`tool_headers`, learned from `tools/list`).
fn mirror_headers(
    tool_headers: &HashMap<String, Vec<ParamHeader>>,
    method: &str,
    params: Option<&Value>,
    headers: &mut HeaderMap,
) {
    if let Ok(v) = HeaderValue::from_str(method) {
        headers.insert(modern::MCP_METHOD, v);
    }
    if let Some(name) = modern::mcp_name(method, params) {
        headers.insert(modern::MCP_NAME, name);
    }
    if method != methods::TOOLS_CALL {
        return;
    }
    let tool = params.and_then(|p| p.get("name")).and_then(Value::as_str);
    if let Some(annotations) = tool.and_then(|t| tool_headers.get(t)) {
        let arguments = params.and_then(|p| p.get("arguments"));
        for (name, value) in modern::param_header_values(annotations, arguments) {
            headers.insert(name, value);
        }
    }
}
