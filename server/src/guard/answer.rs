//! Responses the guard gives itself, without the inner server: refusals and stored answers.

use bytes::Bytes;
use http::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use http::StatusCode;
use serde_json::{json, Value};

use super::resume::RejectReason;
use crate::ids::CapabilityHash;
use crate::wire::{codes, names, rpc_codes, CAPABILITY_HASH_HEADER, RESUME_REJECTED_HEADER};

/// A complete response for the skin to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    status: StatusCode,
    headers: Vec<(HeaderName, HeaderValue)>,
    body: Bytes,
}

impl Answer {
    /// The status.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// Headers beside `Content-Type: application/json`.
    pub fn headers(&self) -> &[(HeaderName, HeaderValue)] {
        &self.headers
    }

    /// The JSON body.
    pub fn body(&self) -> &Bytes {
        &self.body
    }

    /// Splits into its parts.
    pub fn into_parts(self) -> (StatusCode, Vec<(HeaderName, HeaderValue)>, Bytes) {
        (self.status, self.headers, self.body)
    }

    /// The body as JSON (tests and skins that re-encode).
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    fn new(status: StatusCode, body: &Value) -> Self {
        Self::text(status, body.to_string())
    }

    fn text(status: StatusCode, body: String) -> Self {
        Self {
            status,
            headers: vec![(CONTENT_TYPE, HeaderValue::from_static("application/json"))],
            body: Bytes::from(body),
        }
    }

    fn with(mut self, name: &'static str, value: HeaderValue) -> Self {
        self.headers.push((HeaderName::from_static(name), value));
        self
    }

    pub(crate) fn with_hash(self, hash: Option<&CapabilityHash>) -> Self {
        match hash.and_then(|h| h.header_value().cloned()) {
            Some(v) => self.with(CAPABILITY_HASH_HEADER, v),
            None => self,
        }
    }

    /// 200 with a JSON-RPC response (a stored answer, or an error in the body).
    pub(crate) fn rpc(message: &Value) -> Self {
        Self::new(StatusCode::OK, message)
    }

    /// 200 with a JSON-RPC response already written as JSON text (a stored answer).
    pub(crate) fn rpc_text(message: String) -> Self {
        Self::text(StatusCode::OK, message)
    }

    /// The resume-safety extension's explicit rejection.
    pub(crate) fn rejected(reason: RejectReason) -> Self {
        let body = error_body(
            &Value::Null,
            rpc_codes::SESSION_NOT_FOUND,
            "Session resume rejected: re-initialize",
            Some(json!({"code": codes::SESSION_RESUME_REJECTED, "reason": reason.as_str()})),
        );
        Self::new(StatusCode::NOT_FOUND, &body).with(
            RESUME_REJECTED_HEADER,
            HeaderValue::from_static(reason.as_str()),
        )
    }

    /// 404 for a session the guard does not hold: one it forgot (a rejected resume: every
    /// later request of it), or, for a keyed call while the capability hash is enforced, one
    /// neither this instance nor the store knows.
    pub(crate) fn session_not_found() -> Self {
        let body = error_body(
            &Value::Null,
            rpc_codes::SESSION_NOT_FOUND,
            "Session not found",
            None,
        );
        Self::new(StatusCode::NOT_FOUND, &body)
    }

    /// 400: the request names an invalid idempotency key, or two different ones. Nothing ran.
    pub(crate) fn invalid_key(id: &Value, why: &str) -> Self {
        let body = error_body(
            id,
            rpc_codes::INVALID_PARAMS,
            why,
            Some(json!({"code": codes::IDEMPOTENCY_KEY_INVALID})),
        );
        Self::new(StatusCode::BAD_REQUEST, &body)
    }

    /// A keyed call the guard cannot see whole or alone (413 over the bound, 400 in a batch or
    /// unreadable): refused rather than run unguarded.
    pub(crate) fn unguardable(status: StatusCode, why: &str) -> Self {
        let body = error_body(
            &Value::Null,
            rpc_codes::INVALID_REQUEST,
            why,
            Some(json!({"code": codes::IDEMPOTENCY_UNGUARDABLE})),
        );
        Self::new(status, &body)
    }

    /// 415 `IDEMPOTENCY_UNGUARDABLE` with `Accept-Encoding: identity`: a POST body with a
    /// content coding, which the guard cannot read, so cannot tell keyed or not.
    pub(crate) fn encoded_request() -> Self {
        Self::unguardable(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "a request body with a Content-Encoding cannot be guarded: decompress request \
             bodies in front of the guard, or send them uncompressed",
        )
        .with("accept-encoding", HeaderValue::from_static("identity"))
    }

    /// The guard's answer to a POST whose head names a `Content-Encoding` other than
    /// `identity` (in any of its values), when keys are guarded: 415 `IDEMPOTENCY_UNGUARDABLE`
    /// with `Accept-Encoding: identity`, keyed or not, since the body cannot be read to tell. `None`: the body is readable.
    /// Public so that other servers of the extension (the mock cluster) refuse by the guard's
    /// rule and with its answer.
    pub fn for_encoded_body(headers: &HeaderMap) -> Option<Self> {
        super::watch::is_encoded(headers).then(Self::encoded_request)
    }

    /// The guard's answer to a POST body it cannot read whole (`over_bound`: `413`) or as JSON
    /// (`400`), when keys are guarded and the request names one: in its `Idempotency-Key`
    /// header, or a key's member in `read` (what was read of the body, its first bytes when
    /// over the bound; as UTF-16 or UTF-32 text too). `IDEMPOTENCY_UNGUARDABLE`: the call is
    /// refused rather than run unguarded. `None`: no key named, the body is the server's to
    /// answer. Public so that other servers of the extension (the mock cluster) refuse by the
    /// guard's rule and with its answer.
    pub fn for_unguardable_body(
        headers: &HeaderMap,
        read: &[u8],
        over_bound: bool,
    ) -> Option<Self> {
        let keyed = headers.contains_key(names::IDEMPOTENCY_KEY)
            || super::idempotency::body_names_a_key(read);
        if !keyed {
            return None;
        }
        Some(if over_bound {
            Self::unguardable(
                StatusCode::PAYLOAD_TOO_LARGE,
                "a keyed call's body is over the guard's bound: it cannot be guarded",
            )
        } else {
            Self::unguardable(
                StatusCode::BAD_REQUEST,
                "a keyed call whose body cannot be read cannot be guarded",
            )
        })
    }

    /// 503 with `Retry-After` (`retry_after_secs`) and `IDEMPOTENCY_STORE_UNAVAILABLE`: the
    /// store cannot be reached, the keyed call (JSON-RPC id `id`) did not run, and its client
    /// may send it again. Public so that other servers of the extension (the mock cluster)
    /// give this answer as the guard gives it.
    pub fn store_unavailable(id: &Value, retry_after_secs: u64) -> Self {
        let body = error_body(
            id,
            rpc_codes::SERVER,
            "The idempotency store cannot be reached: the call did not run; retry later",
            Some(json!({"code": codes::IDEMPOTENCY_STORE_UNAVAILABLE})),
        );
        Self::new(StatusCode::SERVICE_UNAVAILABLE, &body)
            .with("retry-after", HeaderValue::from(retry_after_secs))
    }

    /// 500: the guard lost track of its own work (a task that ended without answering).
    pub(crate) fn internal() -> Self {
        let body = error_body(&Value::Null, -32603, "Internal error", None);
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, &body)
    }

    /// 503 with `Retry-After` for a resume that cannot be judged now (the session record
    /// cannot be read): nothing is forgotten.
    pub(crate) fn resume_unavailable(retry_after_secs: u64) -> Self {
        let body = error_body(
            &Value::Null,
            rpc_codes::SERVER,
            "The session store cannot be reached: retry the resume later",
            None,
        );
        let mut a = Self::new(StatusCode::SERVICE_UNAVAILABLE, &body);
        a.headers
            .push((RETRY_AFTER, HeaderValue::from(retry_after_secs)));
        a
    }
}

/// A JSON-RPC error response.
pub(crate) fn error_body(id: &Value, code: i64, message: &str, data: Option<Value>) -> Value {
    let mut error = json!({"code": code, "message": message});
    if let Some(d) = data {
        error["data"] = d;
    }
    json!({"jsonrpc": "2.0", "id": id, "error": error})
}
