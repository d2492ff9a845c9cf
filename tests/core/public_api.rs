//! The public surface the compatibility promise (`guide::compatibility`) keeps, pinned: this file stops
//! compiling when one of those items is removed or its signature changes incompatibly, and the
//! stable strings and codes are checked at run time. A deliberate break edits this file in the
//! same commit, which makes the break visible in review and in the release notes.

use std::time::Duration;

use std::sync::Arc;

use mcp_resume::client::ledger::{EntryId, RedisLedger, TASK_RETENTION};
use mcp_resume::proto::{
    CallRequest, CallStage, Checkpoint, HttpId, HttpMethod, HttpPurpose, ListenStopReason, Output,
    Session, SessionConfig, Transmit, TransportFailure,
};
#[allow(deprecated)]
use mcp_resume::StoredTask;
use mcp_resume::{
    CallHandle, CallId, CallToolResult, Client, ClientBuilder, Era, Error, ErrorKind, EventId,
    ExtensionStatus, IdempotencyKey, Ledger, LedgerEntry, MemoryLedger, ProtocolVersion,
    ReconnectPolicy, RecoveredCall, ReinitReason, RejectReason, Request, ResendPolicy, RpcError,
    SessionEvent, SessionId, ToolCall,
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
            .with_resend_policy(ResendPolicy::ServerAdvertised),
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
        (ErrorKind::Ledger, "ledger"),
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
    // Ends no request: it never ran.
    assert!(!e.may_have_run());
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
#[allow(deprecated)] // kept for applications migrating to the ledger
fn stored_tasks_are_built_by_durable_stores() {
    let t = StoredTask::new("task-1", "http://127.0.0.1/mcp");
    assert_eq!(t.task_id, "task-1");
    assert_eq!(t.endpoint, "http://127.0.0.1/mcp");
}

/// Every `SessionEvent` variant, with the fields it promises (a `_` arm is required: it may
/// grow), and its stable kind name.
#[allow(dead_code)]
fn events(event: &SessionEvent) -> &'static str {
    let _: &'static str = event.kind();
    match event {
        SessionEvent::Connected { protocol_version } => protocol_version.as_str(),
        SessionEvent::Listening => "listening",
        SessionEvent::ListenStopped { reason } => reason.as_str(),
        SessionEvent::Resumed { last_event_id } => {
            let _: &EventId = last_event_id;
            "resumed"
        }
        SessionEvent::ResumeRejected { reason } => {
            let _: Option<&str> = reason.as_ref().map(RejectReason::as_str);
            "resume_rejected"
        }
        SessionEvent::Reinitialized {
            reason,
            capabilities_changed,
        } => {
            let _: (&str, Option<&RejectReason>, bool) =
                (reason.as_str(), reason.rejection(), *capabilities_changed);
            "reinitialized"
        }
        SessionEvent::Redispatched {
            call,
            method,
            idempotency_key,
        } => {
            let _: (CallId, &String, &Option<IdempotencyKey>) = (*call, method, idempotency_key);
            "redispatched"
        }
        SessionEvent::OutcomeUnknown { call, method } => {
            let _: (CallId, &String) = (*call, method);
            "outcome_unknown"
        }
        SessionEvent::ContextMismatch { call } => {
            let _: CallId = *call;
            "context_mismatch"
        }
        SessionEvent::ChecksDegraded { status, reason } => {
            let _: (&ExtensionStatus, &String) = (status, reason);
            "checks_degraded"
        }
        SessionEvent::EraDetected { era } => era.as_str(),
        SessionEvent::TaskCreated { call, task_id }
        | SessionEvent::TaskFinished { call, task_id } => {
            let _: (CallId, &String) = (*call, task_id);
            "task"
        }
        SessionEvent::SessionLost => "session_lost",
        SessionEvent::Closed => "closed",
        _ => "other",
    }
}

#[test]
fn configuration_and_lifecycle_names_are_stable() {
    for (era, name) in [
        (Era::Auto, "auto"),
        (Era::Legacy, "legacy"),
        (Era::Modern, "modern"),
    ] {
        assert_eq!(era.as_str(), name);
        assert_eq!(name.parse::<Era>().ok(), Some(era));
    }
    for (policy, name) in [
        (ResendPolicy::ServerAdvertised, "server_advertised"),
        (
            ResendPolicy::AssumeServerDeduplicates,
            "assume_server_deduplicates",
        ),
    ] {
        assert_eq!(policy.as_str(), name);
        assert_eq!(name.parse::<ResendPolicy>().ok(), Some(policy));
    }
    assert_eq!(
        "sometimes".parse::<Era>().unwrap_err().kind(),
        ErrorKind::InvalidConfig
    );
    for (version, name) in [
        (ProtocolVersion::V2025_03_26, "2025-03-26"),
        (ProtocolVersion::V2025_06_18, "2025-06-18"),
        (ProtocolVersion::V2025_11_25, "2025-11-25"),
        (ProtocolVersion::V2026_07_28, "2026-07-28"),
    ] {
        assert_eq!(version.as_str(), name);
        assert_eq!(name.parse::<ProtocolVersion>().ok(), Some(version));
    }
    let reasons = [
        (ReinitReason::SessionNotFound, "session_not_found"),
        (
            ReinitReason::ResumeRejected(RejectReason::NotOwner),
            "resume_rejected",
        ),
        (ReinitReason::UnverifiableCleanEnd, "unverifiable_clean_end"),
        (ReinitReason::EventGap, "event_gap"),
        (ReinitReason::OrphanedResponse, "orphaned_response"),
        (ReinitReason::CapabilityMismatch, "capability_mismatch"),
        (ReinitReason::VersionRefused, "version_refused"),
    ];
    for (reason, name) in reasons {
        assert_eq!(reason.as_str(), name);
    }
    for (reason, name) in [
        (RejectReason::UnknownSession, "unknown_session"),
        (RejectReason::NotOwner, "not_owner"),
        (RejectReason::EventGap, "event_gap"),
        (RejectReason::OrphanedRequest, "orphaned_request"),
        (RejectReason::CapabilityMismatch, "capability_mismatch"),
        (RejectReason::Other("draining".into()), "draining"),
    ] {
        assert_eq!(reason.as_str(), name);
    }
    for (reason, name) in [
        (ListenStopReason::GaveUp { attempts: 3 }, "gave_up"),
        (ListenStopReason::Refused, "refused"),
        (ListenStopReason::Unauthorized, "unauthorized"),
    ] {
        assert_eq!(reason.as_str(), name);
    }
    let kinds = [
        (SessionEvent::Listening, "listening"),
        (
            SessionEvent::ListenStopped {
                reason: ListenStopReason::Refused,
            },
            "listen_stopped",
        ),
        (SessionEvent::SessionLost, "session_lost"),
        (SessionEvent::Closed, "closed"),
        (
            SessionEvent::ResumeRejected { reason: None },
            "resume_rejected",
        ),
        (
            SessionEvent::EraDetected { era: Era::Modern },
            "era_detected",
        ),
    ];
    for (event, kind) in kinds {
        assert_eq!(event.kind(), kind);
    }
}

/// The sans-IO core's driver contract (`proto`'s module docs): the inputs and outputs a driver, a
/// binding or a simulator uses. Never run: compiling it is the check.
#[allow(dead_code)]
fn sans_io(session: &mut Session, http: HttpId, now: std::time::Instant) {
    let config: SessionConfig = SessionConfig::default()
        .with_call_timeout(Duration::from_secs(1))
        .with_resend_policy(ResendPolicy::ServerAdvertised);
    let _ = config;
    let _: CallId = session.connect(now);
    let call: CallId = CallId::next();
    session.submit(call, CallRequest::new("ping", None), now);
    session.resume_task(CallId::next(), "task-1", None, now);
    let request =
        CallRequest::tool_call(json!({"name": "t"}), None).with_timeout(Duration::from_secs(1));
    let _: Option<Duration> = request.timeout();
    session.notify("notifications/x", None, now);
    session.handle_head(http, 200, &http::HeaderMap::new(), now);
    session.handle_data(http, b"{}", now);
    session.handle_end(http, now);
    session.handle_error(http, TransportFailure::Lost("cut".into()), now);
    session.handle_timeout(now);
    let _: Option<Transmit> = session.poll_transmit();
    let _: Option<Output> = session.poll_output();
    match session.poll_output() {
        Some(Output::ServerRequest(request)) => {
            let _: (&mcp_resume::RequestId, &str, &Option<Value>) =
                (&request.id, &request.method, &request.params);
            // The server cancelled it and its handler was stopped: nothing is owed.
            session.withdraw_request(&request.id);
        }
        Some(Output::ServerRequestWithdrawn(id)) => {
            let _: mcp_resume::RequestId = id;
        }

        _ => {}
    }
    let _: Option<std::time::Instant> = session.poll_timeout();
    let _: u64 = http.get();
    if let Some(Transmit::Send(request)) = session.poll_transmit() {
        let _: (HttpId, HttpMethod, HttpPurpose) = (request.id, request.method, request.purpose);
        let _: (&http::HeaderMap, &Option<bytes::Bytes>) = (&request.headers, &request.body);
    }
    let _: Option<&SessionId> = session.session_id();
    let _: Option<Era> = session.era_to_remember();
    let _ = SessionConfig::default().with_checkpoints(true);
    if let Some(Output::Checkpoint { call, checkpoint }) = session.poll_output() {
        let _: CallId = call;
        let _: &Checkpoint = &checkpoint;
        let _: (&str, Option<&Value>, Option<&IdempotencyKey>) = (
            &checkpoint.method,
            checkpoint.params.as_ref(),
            checkpoint.idempotency_key.as_ref(),
        );
        let _: (
            Option<Era>,
            Option<&SessionId>,
            Option<&EventId>,
            std::time::Instant,
        ) = (
            checkpoint.era,
            checkpoint.session_id.as_ref(),
            checkpoint.last_event_id.as_ref(),
            checkpoint.deadline,
        );
        let _: &'static str = match &checkpoint.stage {
            CallStage::Sent { round } => {
                let _: u32 = *round;
                "sent"
            }
            CallStage::AwaitingInput {
                round,
                request_state,
                input_requests,
            } => {
                let _: (u32, Option<&String>) = (*round, request_state.as_ref());
                let _: &serde_json::Map<String, Value> = input_requests;
                "awaiting_input"
            }
            CallStage::Task { task_id } => {
                let _: &String = task_id;
                "task"
            }
            _ => "other",
        };
    }
    let _: Option<Checkpoint> = session.checkpoint(CallId::next());
    let picked = Checkpoint::new("tools/call", Some(json!({"name": "t"})), now)
        .with_idempotency_key(IdempotencyKey::new("k").ok())
        .with_stage(CallStage::Sent { round: 0 });
    session.pick_up(CallId::next(), picked, now);
    session.close(now);
    let _: bool = session.is_closed();
}

/// The ledger and recovery: the trait, its stores, entries and what `recover` gives back.
/// Never run.
#[allow(dead_code)]
async fn ledgers(client: &Client) -> Result<(), Error> {
    let memory: Arc<dyn Ledger> = Arc::new(MemoryLedger::new());
    let redis: Result<RedisLedger, Error> = RedisLedger::new("redis://127.0.0.1:6379", "worker-1");
    let _: ClientBuilder = Client::builder("http://127.0.0.1:8080/mcp")
        .ledger(memory.clone())
        .record_session_ids(false);
    let _: ClientBuilder = Client::builder("http://127.0.0.1:8080/mcp").no_ledger();
    let _: Result<ClientBuilder, Error> =
        Client::builder("http://127.0.0.1:8080/mcp").ledger_named("none", None);
    let _ = redis;
    let _: Result<RedisLedger, Error> = RedisLedger::cluster(
        &["redis://127.0.0.1:7000", "redis://127.0.0.1:7001"],
        "worker-1",
    );
    let entries: Vec<LedgerEntry> = memory.entries().await?;
    for entry in entries {
        let _: (&EntryId, &str, &str) = (entry.id(), entry.endpoint(), entry.method());
        let _: (Option<&Value>, Option<&Value>, Option<&str>) =
            (entry.params(), entry.arguments(), entry.tool_name());
        let _: (Option<&IdempotencyKey>, &CallStage) = (entry.idempotency_key(), entry.stage());
        let _: (std::time::SystemTime, std::time::SystemTime) =
            (entry.deadline(), entry.expires_at());
        let _: Value = entry.to_json();
        let _: Result<LedgerEntry, Error> = LedgerEntry::from_json(&entry.to_json());
        memory.put(entry.clone()).await?;
        memory.remove(entry.id().clone()).await?;
    }
    let _: Duration = TASK_RETENTION;
    let _: Error = Error::ledger(std::io::Error::other("down"));
    for call in client.recover().await? {
        let _: (CallId, &LedgerEntry) = (call.id(), call.entry());
        let recovered: RecoveredCall = call;
        let _: Result<Value, Error> = recovered.await;
    }
    Ok(())
}

/// The bridge, token providers and the streams a client hands out. Never run.
#[allow(dead_code)]
async fn layers(client: &Client) -> Result<(), Error> {
    use futures::StreamExt;
    use mcp_resume::bridge::Bridge;
    use mcp_resume::{EventStream, NotificationStream, ProgressStream, TokenProvider};

    fn provider<P: TokenProvider>(_: P) {}
    provider(|_request: mcp_resume::TokenRequest| async { Ok("token".to_owned()) });

    let mut events: EventStream = client.events();
    let _: Option<SessionEvent> = events.next().await;
    let mut notifications: NotificationStream = client.notifications();
    let _ = notifications.next().await;
    let mut handle = client.start(ToolCall::new("slow", json!({})))?;
    let mut progress: ProgressStream = handle.progress();
    let _ = progress.next().await;
    let _: Option<SessionId> = client.session_id();
    let _: Option<Era> = client.era();

    let bridge: Bridge = Bridge::builder("http://127.0.0.1:8080/mcp").build()?;
    bridge
        .send(json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}))
        .await?;
    let _: Option<serde_json::Value> = bridge.recv().await;
    bridge.close().await
}
