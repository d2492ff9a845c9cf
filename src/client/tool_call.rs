//! [`ToolCall`]: a `tools/call` request under construction.

use std::time::Duration;

use serde_json::{Map, Value};

use super::request::{Submission, Timing};
use crate::error::{Error, ErrorKind};
use crate::ids::{IdempotencyKey, InvalidId};
use crate::proto::{CallId, CallRequest};

/// A `tools/call` request: a tool name, its arguments and how to deliver it.
///
/// ```
/// use mcp_resume::ToolCall;
/// use serde_json::json;
/// use std::time::Duration;
///
/// let call = ToolCall::new("counter_increment", json!({}))
///     .random_idempotency_key()
///     .meta("tag", json!("run-7"))
///     .timeout(Duration::from_secs(5));
/// assert!(call.idempotency_key_ref().is_some());
/// ```
///
/// Only a call carrying an idempotency key can ever be re-sent after an interruption whose
/// outcome is unknown, and only when that is safe (see [`crate::ResendPolicy`]).
///
/// A clone is another call: it copies everything (the idempotency key too) but the
/// [`ToolCall::id`], and gets an id of its own, so a clone started while the original runs
/// gets its own answer.
#[derive(Debug)]
#[must_use = "a ToolCall does nothing until passed to Client::call_tool"]
pub struct ToolCall {
    id: CallId,
    name: String,
    arguments: Value,
    key: Option<Result<IdempotencyKey, InvalidId>>,
    meta: Map<String, Value>,
    timing: Timing,
}

/// Another call of the same tool with the same arguments, key, meta and timing, under a fresh
/// [`CallId`]: one id names one call, and two calls in flight under one id would receive each
/// other's answers.
impl Clone for ToolCall {
    fn clone(&self) -> Self {
        ToolCall {
            id: CallId::next(),
            name: self.name.clone(),
            arguments: self.arguments.clone(),
            key: self.key.clone(),
            meta: self.meta.clone(),
            timing: self.timing,
        }
    }
}

impl ToolCall {
    /// A call of tool `name` with `arguments` (normally a JSON object; `null` sends none).
    pub fn new(name: impl Into<String>, arguments: Value) -> Self {
        ToolCall {
            id: CallId::next(),
            name: name.into(),
            arguments,
            key: None,
            meta: Map::new(),
            timing: Timing::default(),
        }
    }

    /// Sets the idempotency key: it stays the same across re-sends while the JSON-RPC id
    /// changes. It travels in `params._meta` and in the `Idempotency-Key` header.
    ///
    /// Takes an [`IdempotencyKey`], a [`uuid::Uuid`] or any string; a string that cannot be a
    /// key (see [`IdempotencyKey`]: one with a space at either edge cannot) fails the call with
    /// [`ErrorKind::InvalidConfig`] when it is made (it never panics).
    /// Keys ending in `.round` and digits are reserved (a multi-round call's later rounds are
    /// keyed so) and fail the call the same way.
    pub fn idempotency_key<K>(mut self, key: K) -> Self
    where
        K: TryInto<IdempotencyKey>,
        K::Error: Into<InvalidId>,
    {
        self.key = Some(key.try_into().map_err(Into::into));
        self
    }

    /// Sets a fresh random (UUID v4) idempotency key.
    pub fn random_idempotency_key(mut self) -> Self {
        self.key = Some(Ok(IdempotencyKey::random()));
        self
    }

    /// Adds an entry to `params._meta` (e.g. a caller's tag, or `progressToken`).
    pub fn meta(mut self, key: impl Into<String>, value: Value) -> Self {
        self.meta.insert(key.into(), value);
        self
    }

    /// Asks the server for progress notifications under `token` (`_meta.progressToken`: a
    /// string or an integer, else the call fails `InvalidConfig` unsent); they arrive on [`Client::notifications`](super::Client::notifications) with the call's
    /// [`CallId`](crate::proto::CallId) when they came on its stream.
    pub fn progress_token(self, token: impl Into<Value>) -> Self {
        self.meta("progressToken", token.into())
    }

    /// Deadline of this call, spanning every resume and re-send (default: the client's
    /// `call_timeout`); with [`ToolCall::reset_timeout_on_progress`], how long it may go
    /// without progress.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timing.timeout = Some(timeout);
        self
    }

    /// Restarts the timeout at each progress notification of this call, so a long tool that
    /// keeps reporting progress is not cut (default: `false`). A progress token is added when
    /// the call has none. The whole call stays bounded by [`ToolCall::max_total_timeout`],
    /// when set.
    pub fn reset_timeout_on_progress(mut self, reset: bool) -> Self {
        self.timing.reset_on_progress = reset;
        self
    }

    /// Bound on the whole call, however much progress it reports (default: none beyond the
    /// timeout; with [`ToolCall::reset_timeout_on_progress`], none at all).
    pub fn max_total_timeout(mut self, timeout: Duration) -> Self {
        self.timing.max_total = Some(timeout);
        self
    }

    /// The id this call goes by in [`Client::events`](super::Client::events) (re-sends,
    /// unknown outcomes, context mismatches) and in
    /// [`Client::notifications`](super::Client::notifications) (progress on its stream).
    /// Assigned by [`ToolCall::new`]; a clone gets an id of its own (read it from the clone,
    /// or from the [`CallHandle`](super::CallHandle) it starts).
    pub fn id(&self) -> CallId {
        self.id
    }

    /// The tool's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The idempotency key set by [`ToolCall::idempotency_key`], if any and valid.
    pub fn idempotency_key_ref(&self) -> Option<&IdempotencyKey> {
        self.key.as_ref().and_then(|k| k.as_ref().ok())
    }

    /// Builds what the driver needs; an invalid key or timeout is a configuration error.
    pub(crate) fn into_submission(self, default_timeout: Duration) -> Result<Submission, Error> {
        let idempotency_key = match self.key {
            None => None,
            Some(Ok(key)) => Some(key),
            Some(Err(err)) => {
                return Err(Error::with_source(
                    ErrorKind::InvalidConfig,
                    "invalid idempotency key",
                    err,
                ))
            }
        };
        let mut params = Map::new();
        params.insert("name".to_owned(), Value::String(self.name));
        if !self.arguments.is_null() {
            params.insert("arguments".to_owned(), self.arguments);
        }
        if !self.meta.is_empty() {
            params.insert("_meta".to_owned(), Value::Object(self.meta));
        }
        let request = CallRequest::tool_call(Value::Object(params), idempotency_key);
        Submission::of_app(self.id, request, self.timing, default_timeout)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn builds_params_with_meta_and_key() {
        let call = ToolCall::new("echo", json!({"text": "hi"}))
            .idempotency_key("k-1")
            .meta("tag", json!(7))
            .progress_token("p")
            .timeout(Duration::from_secs(3));
        let id = call.id();
        let clone = call.clone();
        assert_ne!(clone.id(), id, "a clone is another call");
        assert_eq!(clone.idempotency_key_ref(), call.idempotency_key_ref());
        let sub = call.into_submission(Duration::from_secs(60)).unwrap();
        let req = sub.request;
        assert_eq!(sub.id, id);
        assert_ne!(ToolCall::new("echo", json!({})).id(), id);
        assert_eq!(req.method, "tools/call");
        assert_eq!(
            req.params,
            Some(json!({"name": "echo", "arguments": {"text": "hi"},
                         "_meta": {"tag": 7, "progressToken": "p"}}))
        );
        assert_eq!(req.idempotency_key.unwrap().as_str(), "k-1");
        assert_eq!(req.timeout, Some(Duration::from_secs(3)));
        assert_eq!(sub.idle, None);
    }

    #[test]
    fn invalid_key_is_a_config_error_not_a_panic() {
        let err = ToolCall::new("echo", json!({}))
            .idempotency_key("bad\nkey")
            .into_submission(Duration::from_secs(60))
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidConfig);
        let err = ToolCall::new("echo", json!({}))
            .idempotency_key(String::new())
            .into_submission(Duration::from_secs(60))
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidConfig);
    }

    #[test]
    fn uuid_keys() {
        let u = uuid::Uuid::new_v4();
        let call = ToolCall::new("c", json!({})).idempotency_key(u);
        assert_eq!(call.idempotency_key_ref().unwrap().as_str(), u.to_string());
    }
}
