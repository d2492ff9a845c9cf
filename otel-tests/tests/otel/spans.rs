//! The span tree of a call, for each way a call can go: plain, cut and resumed, cut and
//! refused with a re-initialization and a keyed re-send, and `OutcomeUnknown`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::http::{header, HeaderMap, HeaderName, Method, StatusCode};
use axum::response::IntoResponse;
use axum::routing::any;
use axum::Router;
use futures::StreamExt;
use mcp_resume::client::telemetry::names;
use mcp_resume::client::SessionIdExport;
use mcp_resume::{Client, Era, ErrorKind, ReconnectPolicy, SessionEvent};
use mock_server::{ClusterConfig, Preset};
use opentelemetry::trace::{
    FutureExt as _, SpanKind, Status, TraceContextExt, Tracer, TracerProvider as _,
};
use opentelemetry::Context;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::support::{
    assert_one_request_resume, attr, cluster, count, cut_slow_call, event_attr, event_names,
    guarded, text, traceparent, Bench, Exporters,
};

/// A plain call: one `CLIENT` span named after the method and the tool, a child of the
/// caller's span, with one HTTP child; the server saw both spans' contexts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_call_is_one_span_with_one_http_child() {
    let bench = Bench::start(cluster(Preset::Replicated), |b, _| b).await;
    let agent = bench.exporters.tracer.tracer("agent").start("agent turn");
    let cx = Context::current_with_span(agent);
    let call = mcp_resume::ToolCall::new("echo", json!({"text": "hi"}))
        .meta(mock_server::context::meta::TAG, json!("plain"));
    let reply = guarded(bench.client.call_tool(call).with_context(cx.clone()))
        .await
        .expect("echo answers");
    assert_eq!(reply.text(), "hi");
    cx.span().end();
    let session_id = bench.client.session_id().expect("a legacy session");
    let port = bench.cluster.addr().port();
    let url = bench.cluster.url();
    let seen = bench.finish().await;
    let spans = &seen.spans;

    let agent = spans.one("agent turn");
    let call = spans.one("tools/call echo");
    assert_eq!(call.span_kind, SpanKind::Client);
    assert_eq!(
        call.parent_span_id,
        agent.span_context.span_id(),
        "{}",
        spans.tree()
    );
    assert_eq!(call.status, Status::Unset);
    assert_eq!(
        text(call, names::MCP_METHOD_NAME).as_deref(),
        Some("tools/call")
    );
    assert_eq!(text(call, names::GEN_AI_TOOL_NAME).as_deref(), Some("echo"));
    assert_eq!(
        text(call, names::GEN_AI_OPERATION_NAME).as_deref(),
        Some("execute_tool")
    );
    assert_eq!(
        text(call, names::MCP_PROTOCOL_VERSION).as_deref(),
        Some("2025-11-25")
    );
    assert_eq!(
        text(call, names::NETWORK_PROTOCOL_NAME).as_deref(),
        Some("http")
    );
    assert_eq!(text(call, names::NETWORK_TRANSPORT).as_deref(), Some("tcp"));
    assert_eq!(
        text(call, names::SERVER_ADDRESS).as_deref(),
        Some("127.0.0.1")
    );
    assert_eq!(
        attr(call, names::SERVER_PORT),
        Some(&i64::from(port).into())
    );
    assert!(attr(call, names::ERROR_TYPE).is_none());
    let id = text(call, names::JSONRPC_REQUEST_ID).expect("jsonrpc.request.id");
    assert!(id.parse::<u64>().is_ok(), "{id}");
    // The session id, hashed: the first 16 bytes of its SHA-256.
    let digest: String = Sha256::digest(session_id.expose().as_bytes())[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(text(call, names::MCP_SESSION_ID), Some(digest));
    assert!(!spans.0.iter().any(|s| s
        .attributes
        .iter()
        .any(|kv| kv.value.as_str().contains(session_id.expose()))));

    let http = spans.http_children(call);
    assert_eq!(http.len(), 1, "{}", spans.tree());
    let post = http[0];
    assert_eq!(
        (post.name.as_ref(), post.span_kind.clone()),
        ("POST", SpanKind::Client)
    );
    assert_eq!(
        text(post, names::HTTP_REQUEST_METHOD).as_deref(),
        Some("POST")
    );
    assert_eq!(
        attr(post, names::HTTP_RESPONSE_STATUS_CODE),
        Some(&200i64.into())
    );
    assert_eq!(text(post, names::URL_FULL), Some(url));
    assert_eq!(
        text(post, names::NETWORK_PROTOCOL_VERSION).as_deref(),
        Some("1.1")
    );
    assert!(attr(post, names::HTTP_REQUEST_RESEND_COUNT).is_none());
    assert!(attr(post, names::RECOVERY_ATTEMPT).is_none());

    // The handshake has spans of its own, under the call that made the client connect: the
    // era probe (a legacy server refuses it), `initialize`, `notifications/initialized`.
    let steps: Vec<_> = spans
        .children(call)
        .into_iter()
        .filter(|s| s.name != "POST")
        .map(|s| s.name.as_ref())
        .collect();
    assert_eq!(
        steps,
        ["server/discover", "initialize", "notifications/initialized"],
        "{}",
        spans.tree()
    );
    let init = spans.one("initialize");
    let init_http = spans.http_children(init);
    assert_eq!(init_http.len(), 1);
    assert_eq!(
        attr(init_http[0], names::HTTP_RESPONSE_STATUS_CODE),
        Some(&200i64.into())
    );
    assert!(attr(init, names::ERROR_TYPE).is_none());
    let probe = spans.one("server/discover");
    assert!(
        attr(probe, names::ERROR_TYPE).is_none(),
        "a refused probe is an answer, not a failure"
    );
    assert_eq!(
        text(spans.http_children(probe)[0], names::ERROR_TYPE).as_deref(),
        Some("400")
    );

    // What the server saw: the HTTP span in the header, the request's span in `_meta`.
    let trace = seen
        .oracle
        .traces
        .iter()
        .find(|t| t.tag.as_deref() == Some("plain"))
        .expect("the call carried trace context");
    assert_eq!(trace.mcp_method.as_deref(), Some("tools/call"));
    assert_eq!(trace.traceparent, Some(traceparent(post)));
    assert_eq!(trace.meta_traceparent, Some(traceparent(call)));
    // Every request the client sent carried a traceparent naming one of its spans.
    let http_spans: Vec<String> = spans
        .named("POST")
        .chain(spans.named("DELETE"))
        .map(traceparent)
        .collect();
    assert_eq!(
        seen.oracle.totals.requests_per_instance.iter().sum::<u64>(),
        seen.oracle.traces.len() as u64
    );
    for trace in &seen.oracle.traces {
        let header = trace.traceparent.as_ref().expect("a traceparent header");
        assert!(
            http_spans.contains(header),
            "{header} names no HTTP span:\n{}",
            spans.tree()
        );
    }
}

/// A stream cut after an event id is resumed on the instance that owns it: the GET is the
/// call's second HTTP child (`resend_count` 1, `resume`), and the call's span says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_and_resumed_call_has_its_resume_as_a_second_http_child() {
    // The event id itself, as the session id would be (a digest by default).
    let seen = cut_slow_call(Preset::Sticky, false, "resumed", |b, e| {
        b.telemetry(e.telemetry().session_id(SessionIdExport::Expose))
    })
    .await;
    let spans = &seen.spans;
    let call = spans.one("tools/call slow");
    assert_eq!(call.status, Status::Unset, "{}", spans.tree());
    assert_eq!(
        event_names(call),
        [names::EVENT_RESUMED],
        "{}",
        spans.tree()
    );
    assert_eq!(
        event_attr(call, names::EVENT_RESUMED, names::RECOVERY_STREAM).as_deref(),
        Some("request")
    );
    let http = spans.http_children(call);
    let shape: Vec<_> = http.iter().map(|s| s.name.as_ref()).collect();
    assert_eq!(shape, ["POST", "GET"], "{}", spans.tree());
    let (post, get) = (http[0], http[1]);
    // The cut shows where it happened: the POST's span ends with it.
    assert_eq!(
        attr(post, names::HTTP_RESPONSE_STATUS_CODE),
        Some(&200i64.into())
    );
    assert_eq!(
        text(post, names::ERROR_TYPE).as_deref(),
        Some("connection_lost")
    );
    assert!(post.end_time <= get.start_time, "{}", spans.tree());
    assert_eq!(
        attr(get, names::HTTP_REQUEST_RESEND_COUNT),
        Some(&1i64.into())
    );
    assert_eq!(
        text(get, names::RECOVERY_ATTEMPT).as_deref(),
        Some("resume")
    );
    assert_eq!(
        text(get, names::RECOVERY_REASON).as_deref(),
        Some("connection_lost")
    );
    assert_eq!(
        attr(get, names::HTTP_RESPONSE_STATUS_CODE),
        Some(&200i64.into())
    );
    // The resume presented the last id the POST's stream delivered, and the server got the
    // GET's span in its header.
    let resume = seen.oracle.resumes.first().expect("a resume");
    assert!(resume.honored && !resume.cross_instance, "{resume:?}");
    let last =
        event_attr(call, names::EVENT_RESUMED, names::RECOVERY_LAST_EVENT_ID).expect("the cursor");
    assert!(last.starts_with(&resume.stream), "{last} vs {resume:?}");
    let get_trace = seen
        .oracle
        .traces
        .iter()
        .find(|t| t.http_method == "GET")
        .expect("a traced GET");
    assert_eq!(get_trace.traceparent, Some(traceparent(get)));

    let m = &seen.metrics;
    assert_one_request_resume(m);
    assert_eq!(m.total(names::METRIC_REINITIALIZATIONS, &[]), 0);
    assert_eq!(
        count(&seen.events, |e| matches!(e, SessionEvent::Resumed { .. })),
        1
    );
}

/// The seed's story: the resume lands on an instance that does not own the stream and is
/// refused; the client re-initializes and re-sends the keyed call. All of it sits under the
/// call's span: the refused GET, the new `initialize`, the re-sent POST, and the events.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_resume_shows_the_reinitialization_and_the_keyed_resend() {
    let seen = cut_slow_call(Preset::Strict, true, "keyed", |b, _| b).await;
    let spans = &seen.spans;
    let call = spans.one("tools/call slow");
    assert_eq!(call.status, Status::Unset, "{}", spans.tree());
    assert_eq!(
        event_names(call),
        [
            names::EVENT_RESUME_REJECTED,
            names::EVENT_REINITIALIZED,
            names::EVENT_REDISPATCHED
        ],
        "{}",
        spans.tree()
    );
    assert_eq!(
        event_attr(
            call,
            names::EVENT_RESUME_REJECTED,
            names::RECOVERY_REJECT_REASON
        )
        .as_deref(),
        Some("not_owner")
    );
    assert_eq!(
        event_attr(
            call,
            names::EVENT_REINITIALIZED,
            names::RECOVERY_REINIT_REASON
        )
        .as_deref(),
        Some("resume_rejected")
    );
    assert_eq!(
        event_attr(call, names::EVENT_REDISPATCHED, names::RECOVERY_KEYED).as_deref(),
        Some("true")
    );

    // In order: the handshake, the POST whose stream is cut, the refused resume, the new
    // session's handshake, the re-sent POST.
    let children = spans.children(call);
    let shape: Vec<_> = children.iter().map(|s| s.name.as_ref()).collect();
    assert_eq!(
        shape,
        [
            "server/discover",
            "initialize",
            "notifications/initialized",
            "POST",
            "GET",
            "initialize",
            "notifications/initialized",
            "POST"
        ],
        "{}",
        spans.tree()
    );
    let (get, reinit, resent) = (children[4], children[5], children[7]);
    assert_eq!(
        attr(get, names::HTTP_RESPONSE_STATUS_CODE),
        Some(&404i64.into())
    );
    assert_eq!(text(get, names::ERROR_TYPE).as_deref(), Some("404"));
    assert_eq!(
        text(get, names::RECOVERY_ATTEMPT).as_deref(),
        Some("resume")
    );
    assert_eq!(
        spans.children(reinit).first().map(|s| s.name.as_ref()),
        Some("POST")
    );
    assert_eq!(
        attr(resent, names::HTTP_REQUEST_RESEND_COUNT),
        Some(&2i64.into())
    );
    assert_eq!(
        text(resent, names::RECOVERY_ATTEMPT).as_deref(),
        Some("resend")
    );
    assert_eq!(
        text(resent, names::RECOVERY_REASON).as_deref(),
        Some("resume_rejected")
    );
    assert_eq!(
        attr(resent, names::HTTP_RESPONSE_STATUS_CODE),
        Some(&200i64.into())
    );
    // The re-sent request has a new JSON-RPC id; the span reports the one that was answered.
    let resent_trace = seen
        .oracle
        .traces
        .iter()
        .rfind(|t| t.tag.as_deref() == Some("keyed"))
        .expect("the re-send was traced");
    assert_eq!(resent_trace.traceparent, Some(traceparent(resent)));

    // The counters agree with the oracle's truth and the client's events.
    let m = &seen.metrics;
    assert_eq!(
        m.total(
            names::METRIC_RESUME_REJECTIONS,
            &[(names::RECOVERY_REJECT_REASON, "not_owner")]
        ),
        seen.oracle.rejections("not_owner")
    );
    assert_eq!(
        m.total(
            names::METRIC_REINITIALIZATIONS,
            &[(names::RECOVERY_REINIT_REASON, "resume_rejected")]
        ),
        seen.oracle.totals.initializes - 1
    );
    assert_eq!(
        m.total(
            names::METRIC_RESENDS,
            &[
                (names::MCP_METHOD_NAME, "tools/call"),
                (names::RECOVERY_KEYED, "true")
            ]
        ),
        1
    );
    assert_eq!(
        seen.oracle.executions_tagged("keyed").count(),
        1,
        "ran once"
    );
}

/// An unkeyed side effect whose stream is lost: the span ends in error with
/// `error.type = outcome_unknown` and says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outcome_unknown_call_ends_in_error_with_its_kind() {
    let bench = Bench::start(
        ClusterConfig {
            cut_after_events: Some(1),
            ..cluster(Preset::Strict)
        },
        |b, _| b,
    )
    .await;
    let err = bench
        .call("counter_increment", json!({}), false, "unkeyed")
        .await
        .expect_err("the response was lost with the stream");
    assert_eq!(err.kind(), ErrorKind::OutcomeUnknown, "{err}");
    let seen = bench.finish().await;
    let spans = &seen.spans;
    let call = spans.one("tools/call counter_increment");
    assert_eq!(
        text(call, names::ERROR_TYPE).as_deref(),
        Some("outcome_unknown")
    );
    assert!(
        matches!(call.status, Status::Error { .. }),
        "{:?}",
        call.status
    );
    let events = event_names(call);
    assert_eq!(
        events.last(),
        Some(&names::EVENT_OUTCOME_UNKNOWN),
        "{}",
        spans.tree()
    );
    assert!(!events.contains(&names::EVENT_REDISPATCHED), "{events:?}");
    let m = &seen.metrics;
    assert_eq!(
        m.total(
            names::METRIC_OUTCOME_UNKNOWN,
            &[(names::MCP_METHOD_NAME, "tools/call")]
        ),
        1
    );
    assert_eq!(m.total(names::METRIC_RESENDS, &[]), 0);
    assert_eq!(
        m.total(
            names::MCP_CLIENT_OPERATION_DURATION,
            &[
                (names::GEN_AI_TOOL_NAME, "counter_increment"),
                (names::ERROR_TYPE, "outcome_unknown")
            ]
        ),
        1
    );
    // It did run, once: the oracle's truth.
    assert_eq!(seen.oracle.executions_tagged("unkeyed").count(), 1);
}

/// An answer produced under another negotiated context (the session's record drifted on the
/// cluster): the call's span ends in error `context_mismatch`, says so in an event, and the
/// counter and the session's re-initialization agree with the oracle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_context_mismatch_ends_the_calls_span_in_error() {
    let bench = Bench::start(cluster(Preset::Strict), |b, _| b).await;
    bench
        .call("echo", json!({"text": "hi"}), false, "before")
        .await
        .expect("echo");
    let session = bench
        .cluster
        .oracle()
        .executions_tagged("before")
        .next()
        .expect("echo ran")
        .session
        .clone();
    bench
        .cluster
        .drift_session(&session)
        .await
        .expect("strict shares session records");
    let err = bench
        .call("generate", json!({"prompt": "p"}), false, "drifted")
        .await
        .expect_err("an answer under another context is not a result");
    assert_eq!(err.kind(), ErrorKind::ContextMismatch, "{err}");
    // The mismatch re-initializes the session after the call has failed: a call made now goes
    // out on the new session, so the re-initialization has ended, and is counted, before the
    // client is closed (closed during it, the server counted an `initialize` the client never
    // finished).
    bench
        .call("echo", json!({"text": "after"}), false, "after")
        .await
        .expect("echo on the new session");
    let seen = bench.finish().await;
    let spans = &seen.spans;
    let call = spans.one("tools/call generate");
    assert_eq!(
        text(call, names::ERROR_TYPE).as_deref(),
        Some("context_mismatch")
    );
    assert!(
        matches!(call.status, Status::Error { .. }),
        "{:?}",
        call.status
    );
    assert!(
        event_names(call).contains(&names::EVENT_CONTEXT_MISMATCH),
        "{}",
        spans.tree()
    );
    let m = &seen.metrics;
    let by_method = [(names::MCP_METHOD_NAME, "tools/call")];
    assert_eq!(m.total(names::METRIC_CONTEXT_MISMATCHES, &by_method), 1);
    assert_eq!(
        seen.oracle.totals.wrong_capability, 1,
        "the oracle: it ran under the wrong context"
    );
    assert_eq!(
        m.total(
            names::METRIC_REINITIALIZATIONS,
            &[(names::RECOVERY_REINIT_REASON, "capability_mismatch")]
        ),
        seen.oracle.totals.initializes - 1
    );
}

/// A server as the official Java SDK's is, whose event ids are the session id. Its
/// `tools/call` stream ends after one event, without the answer; the resume (GET with
/// `Last-Event-ID`) brings the answer. Returns its URL.
async fn session_id_as_event_ids(session_id: &'static str) -> String {
    let call_id = Arc::new(Mutex::new(Value::Null));
    let mcp = move |method: Method, headers: HeaderMap, body: Bytes| {
        let call_id = call_id.clone();
        async move {
            let sse = |event: String| {
                ([(header::CONTENT_TYPE, "text/event-stream")], event).into_response()
            };
            if method == Method::DELETE {
                return StatusCode::OK.into_response();
            }
            if method == Method::GET {
                if !headers.contains_key("last-event-id") {
                    return StatusCode::METHOD_NOT_ALLOWED.into_response();
                }
                let id = call_id.lock().unwrap().clone();
                let answer = json!({"jsonrpc": "2.0", "id": id, "result": {
                    "content": [{"type": "text", "text": "resumed"}]}});
                // No id: a replayed event whose id was delivered already is skipped.
                return sse(format!("data: {answer}\n\n"));
            }
            let request: Value = serde_json::from_slice(&body).unwrap_or_default();
            let id = request["id"].clone();
            match request["method"].as_str() {
                _ if id.is_null() => StatusCode::ACCEPTED.into_response(),
                Some("initialize") => {
                    let answer = json!({"jsonrpc": "2.0", "id": id, "result": {
                        "protocolVersion": "2025-11-25",
                        "capabilities": {"tools": {}},
                        "serverInfo": {"name": "java-like", "version": "1"}}});
                    let headers = [
                        (header::CONTENT_TYPE, "application/json"),
                        (HeaderName::from_static("mcp-session-id"), session_id),
                    ];
                    (headers, answer.to_string()).into_response()
                }
                Some("tools/call") => {
                    *call_id.lock().unwrap() = id;
                    sse(format!("id: {session_id}\ndata:\n\n"))
                }
                _ => {
                    let answer = json!({"jsonrpc": "2.0", "id": id,
                        "error": {"code": -32601, "message": "no such method"}});
                    let headers = [(header::CONTENT_TYPE, "application/json")];
                    (headers, answer.to_string()).into_response()
                }
            }
        }
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let app = Router::new().route("/mcp", any(mcp));
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

/// A server whose event ids are its session id: the resume's span event carries the id the
/// way `mcp.session.id` carries the session id (a digest by default), so no span says the
/// session id itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_id_that_is_the_session_id_is_not_exported_raw() {
    const SESSION_ID: &str = "java-like-session-2f9c41d7e8a04b6c";
    let url = session_id_as_event_ids(SESSION_ID).await;
    let exporters = Exporters::new();
    let client = Client::builder(url)
        .era(Era::Legacy)
        .open_listen_stream(false)
        .call_timeout(Duration::from_secs(5))
        .reconnect(
            ReconnectPolicy::default()
                .with_initial_delay(Duration::from_millis(10))
                .with_max_delay(Duration::from_millis(50)),
        )
        .telemetry(exporters.telemetry())
        .build()
        .expect("valid configuration");
    let mut events = client.events();
    let reply = guarded(client.call_tool(mcp_resume::ToolCall::new("echo", json!({}))))
        .await
        .expect("the resume answers");
    assert_eq!(reply.text(), "resumed");
    let _ = guarded(client.close()).await;
    drop(client);
    // The event stream ends with the driver, once every span it held has ended.
    let events: Vec<SessionEvent> = guarded(events.by_ref().collect()).await;
    assert_eq!(
        count(&events, |e| matches!(e, SessionEvent::Resumed { .. })),
        1
    );

    let spans = exporters.spans();
    let call = spans.one("tools/call echo");
    let digest: String = Sha256::digest(SESSION_ID.as_bytes())[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(
        event_attr(call, names::EVENT_RESUMED, names::RECOVERY_LAST_EVENT_ID),
        Some(digest),
        "{}",
        spans.tree()
    );
    for span in &spans.0 {
        let attributes = span
            .attributes
            .iter()
            .chain(span.events.iter().flat_map(|e| e.attributes.iter()));
        for kv in attributes {
            assert!(
                !kv.value.as_str().contains(SESSION_ID),
                "{} of {} says the session id",
                kv.key,
                span.name
            );
        }
    }
}
