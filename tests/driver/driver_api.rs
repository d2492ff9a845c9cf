//! The public API over a real HTTP server: builder validation, the paved path, headers on
//! every request, JSON and SSE answers, notifications, tolerated 405s.

use crate::support;

use std::time::Duration;

use axum::http::Method;
use futures::StreamExt;
use mcp_resume::{
    Client, ErrorKind, ProtocolVersion, ReconnectPolicy, Request, ResendPolicy, RpcError, ToolCall,
};
use serde_json::{json, Value};
use support::*;

fn assert_send_sync_clone<T: Send + Sync + Clone + 'static>() {}

#[test]
fn client_is_clone_send_sync() {
    assert_send_sync_clone::<Client>();
    assert_send_sync_clone::<mcp_resume::Error>();
}

#[test]
fn builder_rejects_bad_configuration_without_a_runtime() {
    let cases: Vec<(&str, mcp_resume::ClientBuilder)> = vec![
        ("not a url", Client::builder("not a url")),
        ("ftp scheme", Client::builder("ftp://127.0.0.1/mcp")),
        (
            "bad header name",
            Client::builder("http://127.0.0.1/mcp").header("bad name", "v"),
        ),
        (
            "bad header value",
            Client::builder("http://127.0.0.1/mcp").header("x-a", "line\nbreak"),
        ),
        (
            "protocol header",
            Client::builder("http://127.0.0.1/mcp").header("Mcp-Session-Id", "x"),
        ),
        // The 2026-07-28 era mirrors a request's method, name and annotated arguments in
        // headers: an application's copy would go beside them and contradict the body.
        (
            "mirrored method",
            Client::builder("http://127.0.0.1/mcp").header("Mcp-Method", "ping"),
        ),
        (
            "mirrored name",
            Client::builder("http://127.0.0.1/mcp").header("Mcp-Name", "x"),
        ),
        (
            "mirrored argument",
            Client::builder("http://127.0.0.1/mcp").header("Mcp-Param-Region", "eu"),
        ),
        (
            "bad bearer",
            Client::builder("http://127.0.0.1/mcp").bearer_token("a\r\nb"),
        ),
        (
            "empty bearer",
            Client::builder("http://127.0.0.1/mcp").bearer_token(""),
        ),
        (
            "zero timeout",
            Client::builder("http://127.0.0.1/mcp").call_timeout(Duration::ZERO),
        ),
        (
            "zero event size",
            Client::builder("http://127.0.0.1/mcp").max_event_size(0),
        ),
        (
            "zero body size",
            Client::builder("http://127.0.0.1/mcp").max_body_size(0),
        ),
        (
            "zero connect timeout",
            Client::builder("http://127.0.0.1/mcp").connect_timeout(Duration::ZERO),
        ),
        (
            "a version without initialize",
            Client::builder("http://127.0.0.1/mcp").protocol_version(ProtocolVersion::MODERN),
        ),
        (
            "capabilities not an object",
            Client::builder("http://127.0.0.1/mcp").client_capabilities(json!([1])),
        ),
        (
            "multiplier below one",
            Client::builder("http://127.0.0.1/mcp")
                .reconnect(ReconnectPolicy::default().with_multiplier(0.5)),
        ),
        (
            "jitter above one",
            Client::builder("http://127.0.0.1/mcp")
                .reconnect(ReconnectPolicy::default().with_jitter(1.5)),
        ),
        // A client that may never reconnect would never resume: the policy's own check says
        // so, and the builder runs that one check rather than a copy of it.
        (
            "zero reconnect attempts",
            Client::builder("http://127.0.0.1/mcp")
                .reconnect(ReconnectPolicy::default().with_max_attempts(0)),
        ),
        (
            "zero re-initialization failures",
            Client::builder("http://127.0.0.1/mcp")
                .reconnect(ReconnectPolicy::default().with_max_reinit_failures(0)),
        ),
    ];
    for (name, builder) in cases {
        let err = builder.build().expect_err(name);
        assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{name}: {err}");
    }
    // Every setter at once, valid: builds outside any runtime.
    Client::builder("http://127.0.0.1:1/mcp")
        .client_capabilities(json!({"sampling": {}}))
        .bearer_token("t")
        .header("x-foo", "bar")
        .call_timeout(Duration::from_secs(5))
        .reconnect(ReconnectPolicy::default())
        .max_event_size(1024)
        .max_body_size(1024)
        .protocol_version(ProtocolVersion::V2025_06_18)
        .client_info("test", "0.0.1")
        .open_listen_stream(false)
        .resend_policy(ResendPolicy::AssumeServerDeduplicates)
        .jitter_seed(7)
        .dangerous_trust_replay(false)
        .build()
        .expect("valid configuration");
}

#[test]
fn calls_outside_a_runtime_fail_cleanly() {
    let client = Client::builder("http://127.0.0.1:1/mcp").build().unwrap();
    let err = futures::executor::block_on(client.ping()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidConfig);
}

fn client_for(server: &TestServer) -> mcp_resume::ClientBuilder {
    Client::builder(&server.url)
        .bearer_token("secret-token")
        .header("x-foo", "bar")
        .call_timeout(Duration::from_secs(10))
        .jitter_seed(1)
}

#[tokio::test]
async fn paved_path_sends_the_right_headers_on_every_request() {
    let server = TestServer::start(default_reply).await;
    let client = client_for(&server).build().unwrap();

    let init = guarded(client.connect()).await.unwrap();
    assert_eq!(init.protocol_version, SERVER_VERSION);
    assert_eq!(init.server_name, "driver-test");
    assert_eq!(init.server_version, "1.2.3");
    assert_eq!(init.instructions.as_deref(), Some("be nice"));
    // A second connect answers from the same session.
    assert_eq!(guarded(client.connect()).await.unwrap(), init);

    let tools = guarded(client.list_tools()).await.unwrap();
    assert_eq!(tools.len(), 1);
    assert_eq!(tools[0].name, "echo");
    assert_eq!(tools[0].description.as_deref(), Some("Echoes"));

    let r = guarded(client.call_tool(ToolCall::new("echo", json!({"text": "hi"}))))
        .await
        .unwrap();
    assert_eq!(r.text(), "hi");
    assert!(!r.is_error);

    guarded(client.ping()).await.unwrap();
    client
        .notify("notifications/roots/list_changed", None)
        .unwrap();
    server
        .wait_for(|r| r.is_rpc("notifications/roots/list_changed"))
        .await;
    guarded(client.close()).await.unwrap();
    server.wait_for(|r| r.method == Method::DELETE).await;

    let requests = server.requests();
    for r in &requests {
        assert_eq!(
            r.header("authorization"),
            Some("Bearer secret-token"),
            "{}",
            r.label()
        );
        assert_eq!(r.header("x-foo"), Some("bar"), "{}", r.label());
        if r.method == Method::POST {
            assert_eq!(
                r.header("accept"),
                Some("application/json, text/event-stream"),
                "{}",
                r.label()
            );
            assert_eq!(
                r.header("content-type"),
                Some("application/json"),
                "{}",
                r.label()
            );
        }
        if r.is_rpc("server/discover") {
            // The era probe is a modern request: no session, the modern version, mirrored
            // method.
            assert_eq!(r.header("mcp-session-id"), None);
            assert_eq!(r.header("mcp-protocol-version"), Some("2026-07-28"));
            assert_eq!(r.header("mcp-method"), Some("server/discover"));
            assert_eq!(
                r.params()["_meta"]["io.modelcontextprotocol/protocolVersion"],
                "2026-07-28"
            );
        } else if r.is_rpc("initialize") {
            assert_eq!(
                r.header("mcp-session-id"),
                None,
                "initialize carries no session id"
            );
            assert_eq!(r.params()["protocolVersion"], "2025-11-25");
        } else {
            assert_eq!(
                r.header("mcp-session-id"),
                Some(SESSION_ID),
                "{}",
                r.label()
            );
            assert_eq!(
                r.header("mcp-protocol-version"),
                Some(SERVER_VERSION),
                "{}",
                r.label()
            );
        }
    }
    let labels = server.labels();
    for expected in [
        "POST initialize",
        "POST notifications/initialized",
        "GET",
        "POST tools/list",
        "POST tools/call",
        "POST ping",
        "DELETE",
    ] {
        assert!(
            labels.iter().any(|l| l == expected),
            "{expected} missing from {labels:?}"
        );
    }
    // After close, calls fail with Closed.
    let err = guarded(client.ping()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Closed);
}

#[tokio::test]
async fn first_call_connects_by_itself() {
    let server = TestServer::start(default_reply).await;
    let client = client_for(&server)
        .open_listen_stream(false)
        .build()
        .unwrap();
    let r = guarded(client.call_tool(ToolCall::new("echo", json!({"text": "direct"}))))
        .await
        .unwrap();
    assert_eq!(r.text(), "direct");
    let labels = server.labels();
    // Era::Auto: a modern probe, refused by this legacy server, then `initialize`.
    assert_eq!(labels[..2], ["POST server/discover", "POST initialize"]);
    assert!(
        !labels.iter().any(|l| l == "GET"),
        "listen stream disabled: {labels:?}"
    );
    assert_eq!(client.era(), Some(mcp_resume::Era::Legacy));
}

/// What a probe found is remembered per origin: the next client there starts with
/// `initialize`, and an explicit era never probes.
#[tokio::test]
async fn the_era_is_remembered_per_origin() {
    let server = TestServer::start(default_reply).await;
    let cache = mcp_resume::EraCache::new();
    for _ in 0..2 {
        let client = client_for(&server)
            .open_listen_stream(false)
            .era_cache(cache.clone())
            .build()
            .unwrap();
        guarded(client.ping()).await.unwrap();
        guarded(client.close()).await.unwrap();
    }
    assert_eq!(cache.get(&server.url), Some(mcp_resume::Era::Legacy));
    let explicit = client_for(&server)
        .open_listen_stream(false)
        .era(mcp_resume::Era::Legacy)
        .era_cache(mcp_resume::EraCache::new())
        .build()
        .unwrap();
    guarded(explicit.ping()).await.unwrap();
    let probes = server
        .labels()
        .iter()
        .filter(|l| *l == "POST server/discover")
        .count();
    assert_eq!(probes, 1, "{:?}", server.labels());
}

#[tokio::test]
async fn sse_answers_with_progress_notifications() {
    let server = TestServer::start(|req| {
        if req.is_rpc("tools/call") {
            let token = req.params()["_meta"]["progressToken"].clone();
            let progress = json!({"jsonrpc": "2.0", "method": "notifications/progress",
                "params": {"progressToken": token, "progress": 1, "total": 2}});
            let result = result_msg(
                req,
                json!({"content": [{"type": "text", "text": "done"}],
                "structuredContent": {"ok": true}}),
            );
            return sse_text(sse_event(Some("e1"), &progress) + &sse_event(Some("e2"), &result));
        }
        default_reply(req)
    })
    .await;
    let client = client_for(&server).build().unwrap();
    let mut notes = client.notifications();
    let call = ToolCall::new("slow", json!({})).progress_token("tok-1");
    let id = call.id();
    let r = guarded(client.call_tool(call)).await.unwrap();
    assert_eq!(r.text(), "done");
    assert_eq!(r.structured_content, Some(json!({"ok": true})));
    let note = guarded(notes.next()).await.unwrap();
    assert_eq!(note.method, "notifications/progress");
    assert_eq!(note.progress_token(), Some(&json!("tok-1")));
    assert_eq!(
        note.call,
        Some(id),
        "progress on the call's stream names the call"
    );
}

#[tokio::test]
async fn idempotency_key_and_meta_travel_with_the_call() {
    let server = TestServer::start(default_reply).await;
    let client = client_for(&server).build().unwrap();
    let key = uuid::Uuid::new_v4();
    guarded(
        client.call_tool(
            ToolCall::new("echo", json!({"text": "k"}))
                .idempotency_key(key)
                .meta("tag", json!("t-1")),
        ),
    )
    .await
    .unwrap();
    let call = server.wait_for(|r| r.is_rpc("tools/call")).await;
    assert_eq!(
        call.header("idempotency-key"),
        Some(key.to_string().as_str())
    );
    let meta = &call.params()["_meta"];
    assert_eq!(meta["tag"], "t-1");
    assert_eq!(
        meta["io.github.mcp-resume/idempotency-key"],
        key.to_string()
    );
    // An invalid key fails the call before anything is sent.
    let before = server.requests().len();
    let err =
        guarded(client.call_tool(ToolCall::new("echo", json!({})).idempotency_key("a\u{7f}")))
            .await
            .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidConfig);
    assert_eq!(server.requests().len(), before);
}

#[tokio::test]
async fn rpc_errors_and_generic_requests() {
    let server = TestServer::start(|req| {
        if req.is_rpc("resources/list") {
            return json_result(req, json!({"resources": [{"uri": "file:///a"}]}));
        }
        if req.is_rpc("tools/call") {
            return json_body(&json!({"jsonrpc": "2.0", "id": req.rpc_id(),
                "error": {"code": -32602, "message": "unknown tool", "data": {"tool": "nope"}}}));
        }
        default_reply(req)
    })
    .await;
    let client = client_for(&server).build().unwrap();
    let v = guarded(client.request::<Value>(Request::new("resources/list", json!({}))))
        .await
        .unwrap();
    assert_eq!(v["resources"][0]["uri"], "file:///a");
    let err = guarded(client.call_tool(ToolCall::new("nope", json!({}))))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Rpc);
    let rpc = err.rpc_error().unwrap();
    assert_eq!(rpc.code, -32602);
    assert_eq!(rpc.data, Some(json!({"tool": "nope"})));
}

#[tokio::test]
async fn delete_405_and_get_405_are_tolerated() {
    let server = TestServer::start(|req| match req.method {
        Method::DELETE => status(405),
        _ => default_reply(req),
    })
    .await;
    let client = client_for(&server).build().unwrap();
    guarded(client.connect()).await.unwrap();
    server.wait_for(|r| r.method == Method::GET).await;
    guarded(client.ping()).await.unwrap();
    guarded(client.close()).await.unwrap();
    server.wait_for(|r| r.method == Method::DELETE).await;
}

#[tokio::test]
async fn server_requests_go_to_the_handler_and_notifications_to_subscribers() {
    // The listen stream carries a server request and a log notification.
    let server = TestServer::start(|req| {
        if req.method == Method::GET {
            let ask = json!({"jsonrpc": "2.0", "id": "srv-1", "method": "roots/list"});
            let log = json!({"jsonrpc": "2.0", "method": "notifications/message",
                "params": {"level": "info", "data": "hello"}});
            return sse_open(sse_event(None, &log) + &sse_event(None, &ask));
        }
        default_reply(req)
    })
    .await;
    let client = client_for(&server)
        .on_server_request(|req| async move {
            assert_eq!(req.method, "roots/list");
            Ok::<Value, RpcError>(json!({"roots": []}))
        })
        .build()
        .unwrap();
    let mut notes = client.notifications();
    guarded(client.connect()).await.unwrap();
    let note = guarded(notes.next()).await.unwrap();
    assert_eq!(note.method, "notifications/message");
    assert_eq!(note.call, None);
    let answer = server
        .wait_for(|r| r.method == Method::POST && r.rpc_id() == json!("srv-1"))
        .await;
    assert_eq!(answer.header("authorization"), Some("Bearer secret-token"));
    assert_eq!(answer.body.unwrap()["result"], json!({"roots": []}));
}

#[tokio::test]
async fn unhandled_server_requests_get_method_not_found() {
    let server = TestServer::start(|req| {
        if req.method == Method::GET {
            let ask = json!({"jsonrpc": "2.0", "id": 9, "method": "sampling/createMessage"});
            return sse_open(sse_event(None, &ask));
        }
        default_reply(req)
    })
    .await;
    let client = client_for(&server).build().unwrap();
    guarded(client.connect()).await.unwrap();
    let answer = server
        .wait_for(|r| r.method == Method::POST && r.rpc_id() == json!(9))
        .await;
    assert_eq!(answer.body.unwrap()["error"]["code"], -32601);
}

/// A server request whose method is longer than any a handler takes is refused without
/// reaching a handler, and its error does not echo the method: a server must not make the
/// client hold (or queue answers echoing) megabytes per request.
#[tokio::test]
async fn a_server_request_with_an_overlong_method_is_refused_unhandled() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let method = "x".repeat(2048);
    let server = TestServer::start({
        let method = method.clone();
        move |req| {
            if req.method == Method::GET {
                let ask = json!({"jsonrpc": "2.0", "id": 7, "method": method});
                return sse_open(sse_event(None, &ask));
            }
            default_reply(req)
        }
    })
    .await;
    let handled = Arc::new(AtomicBool::new(false));
    let client = client_for(&server)
        .on_server_request({
            let handled = handled.clone();
            move |_req| {
                handled.store(true, Ordering::SeqCst);
                async { Ok::<Value, RpcError>(json!({})) }
            }
        })
        .build()
        .unwrap();
    guarded(client.connect()).await.unwrap();
    let answer = server
        .wait_for(|r| r.method == Method::POST && r.rpc_id() == json!(7))
        .await;
    let error = &answer.body.unwrap()["error"];
    assert_eq!(error["code"], -32601, "{error}");
    assert!(error.to_string().len() < 200, "{error}");
    assert!(!handled.load(Ordering::SeqCst), "the handler ran");
}

#[tokio::test]
async fn dropping_every_handle_closes_the_session() {
    let server = TestServer::start(default_reply).await;
    let client = client_for(&server).build().unwrap();
    let clone = client.clone();
    guarded(clone.connect()).await.unwrap();
    let mut events = client.events();
    drop(clone);
    drop(client);
    server.wait_for(|r| r.method == Method::DELETE).await;
    // The driver stops: the event stream ends.
    while guarded(events.next()).await.is_some() {}
}

#[tokio::test]
async fn notifications_sent_before_connect_are_delivered_after_it() {
    let server = TestServer::start(default_reply).await;
    let client = client_for(&server).build().unwrap();
    client
        .notify("notifications/custom", Some(json!({"n": 1})))
        .unwrap();
    let note = server.wait_for(|r| r.is_rpc("notifications/custom")).await;
    assert_eq!(note.params(), json!({"n": 1}));
    assert_eq!(note.header("mcp-session-id"), Some(SESSION_ID));
}

#[tokio::test]
async fn a_failed_first_connect_can_be_retried() {
    let attempts = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = attempts.clone();
    let server = TestServer::start(move |req| {
        if req.is_rpc("initialize") && seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
            return status(503);
        }
        default_reply(req)
    })
    .await;
    let client = client_for(&server).build().unwrap();
    let err = guarded(client.connect()).await.unwrap_err();
    assert_ne!(err.kind(), ErrorKind::Timeout, "{err}");
    // A call after the failure starts a new initialize by itself.
    let r = guarded(client.call_tool(ToolCall::new("echo", json!({"text": "again"}))))
        .await
        .unwrap();
    assert_eq!(r.text(), "again");
    assert_eq!(attempts.load(std::sync::atomic::Ordering::SeqCst), 2);
    assert_eq!(
        guarded(client.connect()).await.unwrap().server_name,
        "driver-test"
    );
}

#[tokio::test]
async fn a_panicking_server_request_handler_still_answers() {
    let server = TestServer::start(|req| {
        if req.method == Method::GET {
            let ask = json!({"jsonrpc": "2.0", "id": "boom", "method": "roots/list"});
            return sse_open(sse_event(None, &ask));
        }
        default_reply(req)
    })
    .await;
    let client = client_for(&server)
        .on_server_request(|_req| async move {
            if true {
                panic!("handler bug");
            }
            Ok::<Value, RpcError>(Value::Null)
        })
        .build()
        .unwrap();
    guarded(client.connect()).await.unwrap();
    let answer = server
        .wait_for(|r| r.method == Method::POST && r.rpc_id() == json!("boom"))
        .await;
    assert_eq!(answer.body.unwrap()["error"]["code"], -32603);
    // The client keeps working.
    guarded(client.ping()).await.unwrap();
}

/// `close()` stops the handlers of the server requests still being handled, with the reason
/// "client closed", though the client is kept.
#[tokio::test]
async fn close_cancels_the_handlers_still_running() {
    let server = TestServer::start(|req| {
        if req.method == Method::GET {
            let ask = json!({"jsonrpc": "2.0", "id": "slow", "method": "roots/list"});
            return sse_open(sse_event(None, &ask));
        }
        default_reply(req)
    })
    .await;
    let (started_tx, mut started) = tokio::sync::mpsc::unbounded_channel();
    let (reason_tx, mut reason) = tokio::sync::mpsc::unbounded_channel();
    let client = client_for(&server)
        .on_roots(move |ctx| {
            let _ = started_tx.send(());
            let reason_tx = reason_tx.clone();
            // Work handed elsewhere learns of the cancellation through the context.
            tokio::spawn(async move {
                let _ = reason_tx.send(ctx.cancelled().await);
            });
            std::future::pending()
        })
        .build()
        .unwrap();
    guarded(client.connect()).await.unwrap();
    guarded(started.recv()).await.unwrap();
    guarded(client.close()).await.unwrap();
    assert_eq!(guarded(reason.recv()).await.unwrap(), "client closed");
    drop(client);
}

/// `close()` stops the handler of a 2026-07-28 call's input with the reason "client closed"
/// too: the close ended the call.
#[tokio::test]
async fn close_cancels_the_handlers_of_inputs_with_the_closes_reason() {
    let (_feed, stream) = futures::channel::mpsc::unbounded::<String>();
    let server = mrtr_server(stream).await;
    let (started_tx, mut started) = tokio::sync::mpsc::unbounded_channel();
    let (reason_tx, mut reason) = tokio::sync::mpsc::unbounded_channel();
    let client = mrtr_client(&server)
        .on_roots(move |ctx| {
            let _ = started_tx.send(());
            let reason_tx = reason_tx.clone();
            tokio::spawn(async move {
                let _ = reason_tx.send(ctx.cancelled().await);
            });
            std::future::pending()
        })
        .build()
        .unwrap();
    let confirm = tokio::spawn({
        let client = client.clone();
        async move { client.call_tool(ToolCall::new("confirm", json!({}))).await }
    });
    guarded(started.recv()).await.unwrap();
    guarded(client.close()).await.unwrap();
    assert_eq!(guarded(reason.recv()).await.unwrap(), "client closed");
    let err = guarded(confirm).await.unwrap().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Closed, "{err}");
    drop(client);
}

/// A server request still being handled when its session is replaced is not answered into
/// the new session, even when the new session's server asks under the same id: the earlier
/// handler is cancelled, the new request goes to a handler of its own, and only its answer is
/// sent.
#[tokio::test]
async fn a_server_request_of_a_replaced_session_is_not_answered_into_the_new_one() {
    replaced_while_handling(true).await;
}

/// The handler of a request whose session was replaced is cancelled though nothing takes its
/// place (an elicitation must not keep asking a user for a session that is gone).
#[tokio::test]
async fn a_server_request_of_a_replaced_session_is_withdrawn_from_its_handler() {
    replaced_while_handling(false).await;
}

/// Session `s-1`'s server asks `q` on its stream; a 404 replaces the session by `s-2`, whose
/// server asks `q` too when `new_asks`.
async fn replaced_while_handling(new_asks: bool) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let inits = Arc::new(AtomicUsize::new(0));
    let seen = inits.clone();
    let server = TestServer::start(move |req| {
        let session = req.header("mcp-session-id").unwrap_or_default().to_owned();
        if req.is_rpc("initialize") {
            let n = seen.fetch_add(1, Ordering::SeqCst) + 1;
            let mut response = json_result(req, initialize_result());
            let id = axum::http::HeaderValue::from_str(&format!("s-{n}")).unwrap();
            response.headers_mut().insert("mcp-session-id", id);
            return response;
        }
        if req.method == Method::GET && (session == "s-1" || new_asks) {
            // Each session's server asks the same id; `params.session` says which asked.
            let ask = json!({"jsonrpc": "2.0", "id": "q", "method": "roots/list",
                "params": {"session": session}});
            return sse_open(sse_event(None, &ask));
        }
        if req.is_rpc("ping") && session == "s-1" {
            // The first session is gone: the client re-initializes.
            return status(404);
        }
        default_reply(req)
    })
    .await;
    let (started, mut starts) = tokio::sync::mpsc::unbounded_channel::<String>();
    let release = Arc::new(tokio::sync::Notify::new());
    let client = client_for(&server)
        .on_server_request({
            let release = release.clone();
            move |req| {
                let (started, release) = (started.clone(), release.clone());
                async move {
                    let asked_by = req.params.unwrap_or_default()["session"].clone();
                    let asked_by = asked_by.as_str().unwrap_or_default().to_owned();
                    // Reports a handler dropped before it answered (cancelled).
                    struct Dropped(Option<(String, tokio::sync::mpsc::UnboundedSender<String>)>);
                    impl Drop for Dropped {
                        fn drop(&mut self) {
                            if let Some((who, tx)) = self.0.take() {
                                let _ = tx.send(format!("cancelled {who}"));
                            }
                        }
                    }
                    let mut dropped = Dropped(Some((asked_by.clone(), started.clone())));
                    let _ = started.send(format!("started {asked_by}"));
                    release.notified().await;
                    dropped.0 = None;
                    Ok::<Value, RpcError>(json!({"roots": [], "for": asked_by}))
                }
            }
        })
        .build()
        .unwrap();
    guarded(client.connect()).await.unwrap();
    assert_eq!(guarded(starts.recv()).await.unwrap(), "started s-1");
    guarded(client.ping()).await.unwrap();
    if !new_asks {
        assert_eq!(guarded(starts.recv()).await.unwrap(), "cancelled s-1");
        release.notify_waiters();
        guarded(client.close()).await.unwrap();
        let answers = server
            .requests()
            .iter()
            .filter(|r| r.rpc_id() == json!("q"))
            .count();
        assert_eq!(answers, 0, "nothing answered the withdrawn request");
        return;
    }
    let mut seen = vec![
        guarded(starts.recv()).await.unwrap(),
        guarded(starts.recv()).await.unwrap(),
    ];
    seen.sort();
    assert_eq!(seen, ["cancelled s-1", "started s-2"]);
    release.notify_waiters();
    let answer = server
        .wait_for(|r| r.method == Method::POST && r.rpc_id() == json!("q"))
        .await;
    assert_eq!(answer.header("mcp-session-id"), Some("s-2"));
    assert_eq!(answer.body.unwrap()["result"]["for"], "s-2");
    let answers = server
        .requests()
        .iter()
        .filter(|r| r.method == Method::POST && r.rpc_id() == json!("q"))
        .count();
    assert_eq!(answers, 1);
}

/// A cancellation the replaced session's server sends, on a call's stream still open from that
/// session, does not cancel the new session's request under the same id (nor reach the app's
/// notifications): the new request's handler runs to its end and its answer reaches the new
/// session.
#[tokio::test]
async fn a_cancellation_from_a_replaced_session_leaves_the_new_sessions_request_alone() {
    use std::convert::Infallible;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};
    let inits = Arc::new(AtomicUsize::new(0));
    let (feed, stream) = futures::channel::mpsc::unbounded::<String>();
    let stream = Arc::new(Mutex::new(Some(stream)));
    let server = TestServer::start({
        let inits = inits.clone();
        move |req| {
            let session = req.header("mcp-session-id").unwrap_or_default().to_owned();
            if req.is_rpc("initialize") {
                let n = inits.fetch_add(1, Ordering::SeqCst) + 1;
                let mut response = json_result(req, initialize_result());
                let id = axum::http::HeaderValue::from_str(&format!("s-{n}")).unwrap();
                response.headers_mut().insert("mcp-session-id", id);
                return response;
            }
            if req.is_rpc("tools/call") && session == "s-1" {
                // The call's stream stays open for as long as the test feeds it.
                let body = stream.lock().unwrap().take().expect("one call");
                let body = body.map(|text| Ok::<_, Infallible>(axum::body::Bytes::from(text)));
                return axum::http::Response::builder()
                    .header("content-type", "text/event-stream")
                    .body(axum::body::Body::from_stream(body))
                    .unwrap();
            }
            if req.is_rpc("ping") && session == "s-1" {
                return status(404);
            }
            if req.method == Method::GET && session == "s-2" {
                let ask = json!({"jsonrpc": "2.0", "id": "q", "method": "roots/list"});
                return sse_open(sse_event(None, &ask));
            }
            default_reply(req)
        }
    })
    .await;
    let (started, mut starts) = tokio::sync::mpsc::unbounded_channel();
    let release = Arc::new(tokio::sync::Notify::new());
    let client = client_for(&server)
        .on_roots({
            let release = release.clone();
            move |ctx| {
                let (started, release) = (started.clone(), release.clone());
                async move {
                    let _ = started.send(ctx.clone());
                    release.notified().await;
                    Ok(vec![])
                }
            }
        })
        .build()
        .unwrap();
    let mut notes = client.notifications();
    guarded(client.connect()).await.unwrap();
    let call = tokio::spawn({
        let client = client.clone();
        async move { client.call_tool(ToolCall::new("echo", json!({}))).await }
    });
    let posted = server.wait_for(|r| r.is_rpc("tools/call")).await;
    let log = json!({"jsonrpc": "2.0", "method": "notifications/message",
        "params": {"level": "info", "data": "working"}});
    feed.unbounded_send(sse_event(None, &log)).unwrap();
    let note = guarded(notes.next()).await.unwrap();
    assert_eq!(note.method, "notifications/message");
    // s-1 is gone: the client re-initializes, and s-2's server asks `q`.
    guarded(client.ping()).await.unwrap();
    let ctx = guarded(starts.recv()).await.unwrap();
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": "q"}});
    feed.unbounded_send(sse_event(None, &cancel)).unwrap();
    // Read after the cancellation on the same stream: once it is out, so would the
    // cancellation be.
    let later = json!({"jsonrpc": "2.0", "method": "notifications/message",
        "params": {"level": "info", "data": "after"}});
    feed.unbounded_send(sse_event(None, &later)).unwrap();
    let note = guarded(notes.next()).await.unwrap();
    assert_eq!(
        (note.method.as_str(), &note.params),
        ("notifications/message", &Some(later["params"].clone())),
        "s-1's cancellation is not handed on"
    );
    assert!(
        !ctx.is_cancelled(),
        "s-1's cancellation cancelled s-2's request"
    );
    release.notify_one();
    let answer = server
        .wait_for(|r| r.method == Method::POST && r.rpc_id() == json!("q"))
        .await;
    assert_eq!(answer.header("mcp-session-id"), Some("s-2"));
    assert_eq!(answer.body.unwrap()["result"], json!({"roots": []}));
    let done = result_msg(&posted, json!({"content": [], "isError": false}));
    feed.unbounded_send(sse_event(None, &done)).unwrap();
    guarded(call).await.unwrap().unwrap();
}

type Feed = futures::channel::mpsc::UnboundedReceiver<String>;

/// A 2026-07-28 server whose tool `confirm` asks for one input (`roots/list`, under the key
/// `ok`) in its first round, and whose tool `stream` answers with an SSE stream `stream` feeds
/// (once).
async fn mrtr_server(stream: Feed) -> TestServer {
    use std::convert::Infallible;
    use std::sync::{Arc, Mutex};
    const MODERN: &str = "2026-07-28";
    let stream = Arc::new(Mutex::new(Some(stream)));
    TestServer::start(move |req| {
        let complete = |mut result: Value| {
            if result.get("resultType").is_none() {
                result["resultType"] = json!("complete");
            }
            json_result(req, result)
        };
        let params = req.params();
        match req.rpc_method().unwrap_or_default() {
            "server/discover" => complete(json!({"supportedVersions": [MODERN],
                "capabilities": {"tools": {}},
                "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "m", "version": "1"}}})),
            "tools/list" => complete(json!({"tools": [
                {"name": "confirm", "inputSchema": {"type": "object"}},
                {"name": "stream", "inputSchema": {"type": "object"}}]})),
            "tools/call" if params["name"] == "stream" => {
                let body = stream.lock().unwrap().take().expect("one stream");
                let body = body.map(|text| Ok::<_, Infallible>(axum::body::Bytes::from(text)));
                axum::http::Response::builder()
                    .header("content-type", "text/event-stream")
                    .body(axum::body::Body::from_stream(body))
                    .unwrap()
            }
            "tools/call" if params["inputResponses"].is_null() => complete(json!({
                "resultType": "input_required",
                "inputRequests": {"ok": {"method": "roots/list"}},
                "requestState": "state-1"})),
            "tools/call" => complete(json!({"content": [{"type": "text",
                "text": params["inputResponses"]["ok"]["roots"].to_string()}]})),
            _ => status(405),
        }
    })
    .await
}

fn mrtr_client(server: &TestServer) -> mcp_resume::ClientBuilder {
    Client::builder(&server.url)
        .era(mcp_resume::Era::Modern)
        .era_cache(mcp_resume::EraCache::new())
        .open_listen_stream(false)
        .call_timeout(Duration::from_secs(10))
}

/// A 2026-07-28 server's `notifications/cancelled` naming the id the client gave an MRTR
/// input does not stop the input's handler: no request of the server waits on that id, and
/// the round waits for the handler's answer (cancelling it would leave the call waiting to
/// its deadline).
#[tokio::test]
async fn a_cancellation_naming_an_input_leaves_its_round_to_complete() {
    use std::sync::Arc;
    let (feed, stream) = futures::channel::mpsc::unbounded::<String>();
    let server = mrtr_server(stream).await;
    let (started, mut starts) = tokio::sync::mpsc::unbounded_channel();
    let release = Arc::new(tokio::sync::Notify::new());
    let client = mrtr_client(&server)
        .on_roots({
            let release = release.clone();
            move |ctx| {
                let (started, release) = (started.clone(), release.clone());
                async move {
                    let _ = started.send(ctx.clone());
                    release.notified().await;
                    Ok(vec![])
                }
            }
        })
        .build()
        .unwrap();
    let mut notes = client.notifications();
    let streaming = tokio::spawn({
        let client = client.clone();
        async move { client.call_tool(ToolCall::new("stream", json!({}))).await }
    });
    let log = json!({"jsonrpc": "2.0", "method": "notifications/message",
        "params": {"level": "info", "data": "working"}});
    feed.unbounded_send(sse_event(None, &log)).unwrap();
    assert_eq!(
        guarded(notes.next()).await.unwrap().method,
        "notifications/message"
    );
    let confirm = tokio::spawn({
        let client = client.clone();
        async move { client.call_tool(ToolCall::new("confirm", json!({}))).await }
    });
    let ctx = guarded(starts.recv()).await.unwrap();
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": ctx.request_id().to_json()}});
    feed.unbounded_send(sse_event(None, &cancel)).unwrap();
    let note = guarded(notes.next()).await.unwrap();
    assert_eq!(note.method, "notifications/cancelled");
    assert!(!ctx.is_cancelled(), "the input's handler was cancelled");
    release.notify_one();
    let reply = guarded(confirm).await.unwrap().unwrap();
    assert_eq!(reply.text(), "[]");
    let done = json!({"jsonrpc": "2.0", "id": server.requests().iter()
        .find(|r| r.is_rpc("tools/call") && r.params()["name"] == "stream").unwrap().rpc_id(),
        "result": {"resultType": "complete", "content": []}});
    feed.unbounded_send(sse_event(None, &done)).unwrap();
    guarded(streaming).await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_calls_from_clones_each_get_their_own_answer() {
    let server = TestServer::start(default_reply).await;
    let client = client_for(&server).build().unwrap();
    let tasks: Vec<_> = (0..32)
        .map(|i| {
            let client = client.clone();
            tokio::spawn(async move {
                let text = format!("call-{i}");
                let r = client
                    .call_tool(ToolCall::new("echo", json!({ "text": text })))
                    .await
                    .unwrap();
                assert_eq!(r.text(), text);
            })
        })
        .collect();
    for task in tasks {
        guarded(task).await.unwrap();
    }
    let inits = server
        .requests()
        .iter()
        .filter(|r| r.is_rpc("initialize"))
        .count();
    assert_eq!(inits, 1, "one session for every clone");
}

/// A `ToolCall` cloned and started twice is two calls: the clone is a call of its own, with
/// its own id and its own answer, and the first call is left alone (the two used to share an
/// id: the second took the first's place, the first failed at once, and the second received
/// the first's answer).
#[tokio::test]
async fn a_tool_call_started_twice_makes_two_calls() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let seen = std::sync::Arc::new(AtomicUsize::new(0));
    let counted = seen.clone();
    let server = TestServer::start(move |req| {
        // The first tools/call hangs; later ones are answered.
        if req.is_rpc("tools/call") && counted.fetch_add(1, Ordering::SeqCst) == 0 {
            return hang();
        }
        default_reply(req)
    })
    .await;
    let client = client_for(&server).build().unwrap();
    let call = ToolCall::new("echo", json!({"text": "answered"}));
    let mut first = client.start(call.clone()).unwrap();
    guarded(server.wait_for(|r| r.is_rpc("tools/call"))).await;
    let second = client.start(call.clone()).unwrap();
    assert_ne!(first.id(), second.id(), "each start is a call of its own");
    let answer = guarded(second).await.unwrap();
    assert_eq!(answer.text(), "answered");
    let still = tokio::time::timeout(Duration::from_millis(300), &mut first).await;
    assert!(still.is_err(), "the first call is still pending: {still:?}");
    let posts: Vec<_> = server
        .requests()
        .iter()
        .filter(|r| r.is_rpc("tools/call"))
        .map(|r| r.rpc_id())
        .collect();
    assert_eq!(posts.len(), 2, "both calls were sent: {posts:?}");
    assert_ne!(posts[0], posts[1]);
    first.cancel("done");
}

#[tokio::test]
async fn events_name_calls_by_their_tool_call_id() {
    let server = TestServer::start(|req| {
        if req.is_rpc("tools/call") {
            // Ends without the response and without an event id: outcome unknown.
            return sse_text(": nothing\n\n");
        }
        default_reply(req)
    })
    .await;
    let client = client_for(&server).build().unwrap();
    let mut events = client.events();
    let call = ToolCall::new("counter_increment", json!({}));
    let id = call.id();
    let err = guarded(client.call_tool(call)).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::OutcomeUnknown, "{err}");
    loop {
        match guarded(events.next()).await.expect("event stream ended") {
            mcp_resume::SessionEvent::OutcomeUnknown { call, method } => {
                assert_eq!(call, id);
                assert_eq!(method, "tools/call");
                break;
            }
            _ => continue,
        }
    }
}

/// Counts the wakes of a future's task that happen while that future is being polled: each
/// one makes the runtime poll the task again for nothing (and, on a runtime with more than one
/// worker, wakes another worker to take it).
struct SelfWakes<F> {
    inner: std::pin::Pin<Box<F>>,
    recorder: std::sync::Arc<WakeRecorder>,
}

#[derive(Default)]
struct WakeRecorder {
    in_poll: std::sync::atomic::AtomicBool,
    during_poll: std::sync::atomic::AtomicUsize,
    outer: std::sync::Mutex<Option<std::task::Waker>>,
}

impl futures::task::ArcWake for WakeRecorder {
    fn wake_by_ref(this: &std::sync::Arc<Self>) {
        use std::sync::atomic::Ordering;
        if this.in_poll.load(Ordering::SeqCst) {
            this.during_poll.fetch_add(1, Ordering::SeqCst);
        }
        if let Some(waker) = this.outer.lock().unwrap().as_ref() {
            waker.wake_by_ref();
        }
    }
}

impl<F: std::future::Future> std::future::Future for SelfWakes<F> {
    type Output = F::Output;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<F::Output> {
        use std::sync::atomic::Ordering;
        *self.recorder.outer.lock().unwrap() = Some(cx.waker().clone());
        let waker = futures::task::waker(self.recorder.clone());
        self.recorder.in_poll.store(true, Ordering::SeqCst);
        let out = self
            .inner
            .as_mut()
            .poll(&mut std::task::Context::from_waker(&waker));
        self.recorder.in_poll.store(false, Ordering::SeqCst);
        out
    }
}

#[tokio::test]
async fn a_call_performed_by_its_caller_is_not_woken_by_its_own_answer() {
    let server = TestServer::start(|req| {
        // Every other call's answer comes as an SSE stream.
        if req.is_rpc("tools/call") && req.params()["arguments"]["sse"] == json!(true) {
            let result = result_msg(req, json!({"content": [{"type": "text", "text": "s"}]}));
            let id = format!("e-{}", req.rpc_id());
            return sse_text(sse_event(Some(&id), &result));
        }
        default_reply(req)
    })
    .await;
    let client = client_for(&server).build().unwrap();
    guarded(client.connect()).await.unwrap();
    let recorder = std::sync::Arc::new(WakeRecorder::default());
    let calls = async {
        for i in 0..10 {
            let args = json!({"text": "hi", "sse": i % 2 == 1});
            let r = client
                .call_tool(ToolCall::new("echo", args))
                .await
                .unwrap_or_else(|e| panic!("call {i}: {e}"));
            assert_eq!(r.text(), if i % 2 == 1 { "s" } else { "hi" });
        }
    };
    guarded(SelfWakes {
        inner: Box::pin(calls),
        recorder: recorder.clone(),
    })
    .await;
    assert_eq!(
        recorder
            .during_poll
            .load(std::sync::atomic::Ordering::SeqCst),
        0,
        "the task was woken while it was being polled"
    );
}

/// The ledger named as configuration names one: `memory`, `none`, or a Redis URL with the
/// worker's identity; anything else is refused without quoting more than its scheme.
#[test]
fn a_ledger_is_named_as_configuration_names_it() {
    let builder = || Client::builder("http://127.0.0.1/mcp");
    assert!(builder().ledger_named("memory", None).is_ok());
    assert!(builder().ledger_named("none", None).is_ok());
    for (name, identity) in [
        ("valkey://:hunter2@cache:6379", None),
        ("REDIS://:hunter2@cache:6379", None),
        ("redis://:hunter2@cache:6379", None),
        ("memory", Some("w-1")),
        ("redis://:hunter2@cache:6379", Some("has{brace}")),
    ] {
        let err = builder()
            .ledger_named(name, identity)
            .map(|_| ())
            .expect_err(name);
        assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{name}: {err}");
        assert!(!err.to_string().contains("hunter2"), "{err}");
    }
    let err = builder()
        .ledger_named("valkey://:hunter2@cache", None)
        .map(|_| ())
        .unwrap_err();
    assert!(err.to_string().contains("\"valkey://\""), "{err}");
}

/// `close()` ends the client's event and notification streams, after what was sent before
/// (the `Closed` event among it); one made after the close ends at once.
#[tokio::test]
async fn close_ends_the_streams() {
    let server = TestServer::start(default_reply).await;
    let client = client_for(&server).build().unwrap();
    let mut events = client.events();
    let mut notifications = client.notifications();
    guarded(client.connect()).await.unwrap();
    guarded(client.close()).await.unwrap();
    let mut seen = Vec::new();
    while let Some(event) = guarded(events.next()).await {
        seen.push(event);
    }
    assert!(
        seen.iter()
            .any(|e| matches!(e, mcp_resume::SessionEvent::Closed)),
        "{seen:?}"
    );
    assert!(guarded(notifications.next()).await.is_none());
    assert!(guarded(client.events().next()).await.is_none());
    assert!(guarded(client.notifications().next()).await.is_none());
}
