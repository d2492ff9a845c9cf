//! The public surface the README's compatibility promise keeps, pinned: this file stops
//! compiling when one of those items is removed or its signature changes incompatibly, and the
//! stable strings and codes are checked at run time. A deliberate break edits this file in the
//! same commit, which makes the break visible in review and in the release notes.

use std::time::Duration;

use mcp_resume::proto::{CallRequest, Session, SessionConfig};
use mcp_resume::{
    CallHandle, CallId, CallToolResult, Client, ClientBuilder, Era, Error, ErrorKind,
    IdempotencyKey, ReconnectPolicy, Request, ResendPolicy, RpcError, SessionEvent, StoredTask,
    ToolCall,
};
use serde_json::{json, Value};

/// Every way to make a call, with the types it promises. Never run: compiling it is the check.
#[allow(dead_code)]
async fn calls(client: &Client) -> Result<(), Error> {
    let keyed = ToolCall::new("counter_increment", json!({}))
        .idempotency_key("key-1")
        .timeout(Duration::from_secs(5));
    let _: Option<&IdempotencyKey> = keyed.idempotency_key_ref();
    let _: CallId = keyed.id();
    let _: CallToolResult = client.call_tool(keyed).await?;

    let raw: Value = client.request(Request::new("acme/status", None)).await?;
    let _ = raw;
    let handle: CallHandle<CallToolResult> = client.start(ToolCall::new("echo", json!({})))?;
    let _: CallId = handle.id();
    handle.cancel("no longer needed");
    let handle: CallHandle<Value> = client.start(Request::new("tools/list", json!({})))?;
    let _: Value = handle.await?;

    client.notify("notifications/custom", None)?;
    client.ping().await?;
    client.close().await
}

/// Configuration: builders, defaults and setters.
#[allow(dead_code)]
fn configuration() -> Result<Client, Error> {
    let policy = ReconnectPolicy::default()
        .with_initial_delay(Duration::from_millis(20))
        .with_multiplier(2.0)
        .with_max_delay(Duration::from_secs(10))
        .with_jitter(0.2)
        .with_max_attempts(10)
        .with_max_resumes_without_progress(3)
        .with_max_reinit_failures(5);
    let _core = Session::new(
        SessionConfig::default()
            .with_reconnect(policy.clone())
            .with_era(Era::Legacy)
            .with_resend(ResendPolicy::ServerAdvertised),
        std::time::Instant::now(),
    );
    let _ = CallRequest::new("ping", None);
    let builder: ClientBuilder = Client::builder("http://127.0.0.1:8080/mcp")
        .reconnect(policy)
        .call_timeout(Duration::from_secs(60));
    builder.build()
}

#[test]
fn error_kind_names_are_stable() {
    let names = [
        (ErrorKind::Transport, "transport"),
        (ErrorKind::Timeout, "timeout"),
        (ErrorKind::SessionLost, "session_lost"),
        (ErrorKind::OutcomeUnknown, "outcome_unknown"),
        (ErrorKind::ContextMismatch, "context_mismatch"),
        (ErrorKind::Rpc, "rpc"),
        (ErrorKind::Protocol, "protocol"),
        (ErrorKind::TooLarge, "too_large"),
        (ErrorKind::Closed, "closed"),
        (ErrorKind::Unauthorized, "unauthorized"),
        (ErrorKind::InvalidConfig, "invalid_config"),
        (ErrorKind::MissingCapability, "missing_capability"),
    ];
    for (kind, name) in names {
        assert_eq!(kind.as_str(), name);
        assert_eq!(kind.to_string(), name);
    }
}

#[test]
fn rpc_error_constructors_use_the_json_rpc_codes() {
    assert_eq!(RpcError::method_not_found("x").code, -32601);
    assert_eq!(RpcError::invalid_params("x").code, -32602);
    assert_eq!(RpcError::internal_error("x").code, -32603);
    let e = RpcError::new(-32000, "busy").with_data(json!({"retry": true}));
    assert_eq!((e.code, e.message.as_str()), (-32000, "busy"));
    assert_eq!(e.data, Some(json!({"retry": true})));
}

#[test]
fn a_token_providers_error_keeps_its_cause() {
    let cause = std::io::Error::other("vault sealed");
    let e = Error::token_unavailable(cause);
    let source = std::error::Error::source(&e).expect("the cause is the source");
    assert!(source.to_string().contains("vault sealed"));
}

#[test]
fn idempotency_keys_convert_from_strings_and_uuids() {
    assert!(IdempotencyKey::try_from("k-1").is_ok());
    assert!(IdempotencyKey::try_from(String::new()).is_err());
    let u = uuid::Uuid::nil();
    assert_eq!(IdempotencyKey::from(u).as_str(), u.to_string());
    // An invalid key fails the call when it is made, not the builder.
    let call = ToolCall::new("t", json!({})).idempotency_key("bad\nkey");
    assert!(call.idempotency_key_ref().is_none());
}

#[test]
fn stored_tasks_are_built_by_durable_stores() {
    let t = StoredTask::new("task-1", "http://127.0.0.1/mcp");
    assert_eq!(t.task_id, "task-1");
    assert_eq!(t.endpoint, "http://127.0.0.1/mcp");
}

/// Every `SessionEvent` the README names still exists (a `_` arm is required: it may grow).
#[allow(dead_code)]
fn events(event: &SessionEvent) -> &'static str {
    match event {
        SessionEvent::Connected { .. } => "connected",
        SessionEvent::Resumed { .. } => "resumed",
        SessionEvent::ResumeRejected { .. } => "resume_rejected",
        SessionEvent::Reinitialized { .. } => "reinitialized",
        SessionEvent::Redispatched { .. } => "redispatched",
        SessionEvent::OutcomeUnknown { .. } => "outcome_unknown",
        SessionEvent::ContextMismatch { .. } => "context_mismatch",
        SessionEvent::SessionLost => "session_lost",
        SessionEvent::Closed => "closed",
        _ => "other",
    }
}
