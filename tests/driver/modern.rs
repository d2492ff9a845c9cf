//! The modern era (2026-07-28) through the real driver, against a scripted stateless server:
//! era detection, the wire (per-request `_meta`, mirrored headers, no session), `x-mcp-header`,
//! the modern errors, MRTR rounds, the broken-stream rule, deadlines, tasks and
//! `subscriptions/listen`. Each test asserts on what the server saw.

use crate::support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::response::Response;
use futures::StreamExt;
use mcp_resume::{Client, Era, EraCache, ErrorKind, RpcError, SessionEvent, ToolCall};
use serde_json::{json, Value};
use support::*;

const MODERN: &str = "2026-07-28";
const KEY_META: &str = "io.github.mcp-resume/idempotency-key";

/// What the scripted server remembers across requests (it is "stateless" per request; this
/// is the shared store behind it).
#[derive(Default)]
struct Store {
    /// Side effects by idempotency key (or by request id when unkeyed): how many times each
    /// ran.
    runs: HashMap<String, u32>,
    /// Stored results by idempotency key.
    results: HashMap<String, Value>,
    mismatches_left: u32,
    task_polls: u32,
}

fn rpc_error(req: &Recorded, status: u16, code: i64, message: &str, data: Value) -> Response {
    let mut r = json_body(&json!({"jsonrpc": "2.0", "id": req.rpc_id(),
        "error": {"code": code, "message": message, "data": data}}));
    *r.status_mut() = axum::http::StatusCode::from_u16(status).unwrap();
    r
}

/// A result, `resultType: "complete"` unless it names its own.
fn complete(req: &Recorded, mut result: Value) -> Response {
    if result.get("resultType").is_none() {
        result["resultType"] = json!("complete");
    }
    json_result(req, result)
}

fn text(t: &str) -> Value {
    json!({"content": [{"type": "text", "text": t}]})
}

/// An SSE stream that sends `events` and then breaks the connection.
fn sse_cut(events: String) -> Response {
    let chunks: Vec<Result<Bytes, std::io::Error>> = vec![
        Ok(Bytes::from(events)),
        Err(std::io::Error::other("connection cut")),
    ];
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from_stream(futures::stream::iter(chunks)))
        .unwrap()
}

fn tools() -> Value {
    json!({"tools": [
        {"name": "echo", "inputSchema": {"type": "object"}},
        {"name": "regional", "inputSchema": {"type": "object", "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"}}}},
        {"name": "broken", "inputSchema": {"type": "object", "properties": {
            "n": {"type": "number", "x-mcp-header": "N"}}}},
    ]})
}

/// A modern-only server: checks the request metadata on every POST as the specification's
/// server validation does, refuses GET and DELETE, answers `initialize` with the versions it
/// speaks.
fn modern_server(store: Arc<Mutex<Store>>) -> impl Fn(&Recorded) -> Response + Send + Sync {
    move |req| {
        if req.method != axum::http::Method::POST {
            return status(405);
        }
        let method = req.rpc_method().unwrap_or_default().to_owned();
        let params = req.params();
        let meta = &params["_meta"];
        if method == "initialize" {
            return rpc_error(
                req,
                400,
                -32022,
                "Unsupported protocol version",
                json!({"supported": [MODERN]}),
            );
        }
        if req.header("mcp-protocol-version") != Some(MODERN)
            || meta["io.modelcontextprotocol/protocolVersion"] != MODERN
            || req.header("mcp-method") != Some(method.as_str())
            || !meta["io.modelcontextprotocol/clientInfo"].is_object()
            || !meta["io.modelcontextprotocol/clientCapabilities"].is_object()
            || req.header("mcp-session-id").is_some()
        {
            return rpc_error(req, 400, -32020, "Header mismatch", Value::Null);
        }
        match method.as_str() {
            "server/discover" => complete(
                req,
                json!({
                    "supportedVersions": [MODERN],
                    "capabilities": {"tools": {"listChanged": true}, "extensions": {
                        "io.github.mcp-resume/resume-safety": {"version": 1, "idempotency": {}},
                        "io.modelcontextprotocol/tasks": {}}},
                    "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "modern", "version": "9"}},
                }),
            ),
            "tools/list" => complete(req, tools()),
            "tools/call" => {
                if req.header("mcp-name") != params["name"].as_str() {
                    return rpc_error(req, 400, -32020, "Mcp-Name mismatch", Value::Null);
                }
                call_tool(req, &params, &store)
            }
            "tasks/get" => {
                let mut store = store.lock().unwrap();
                store.task_polls += 1;
                if store.task_polls < 3 {
                    complete(
                        req,
                        json!({"taskId": "t-1", "status": "working", "pollIntervalMs": 10}),
                    )
                } else {
                    complete(
                        req,
                        json!({"taskId": "t-1", "status": "completed",
                        "result": text("from the task")}),
                    )
                }
            }
            "subscriptions/listen" => {
                let id = req.rpc_id();
                let sub = json!({"io.modelcontextprotocol/subscriptionId": id});
                let ack = json!({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
                    "params": {"_meta": sub, "notifications": params["notifications"]}});
                let changed = json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed",
                    "params": {"_meta": sub}});
                let other = json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed",
                    "params": {"_meta": {"io.modelcontextprotocol/subscriptionId": "someone-else"}}});
                sse_open(format!(
                    "data: {ack}\n\ndata: {other}\n\ndata: {changed}\n\n"
                ))
            }
            _ => rpc_error(req, 404, -32601, "Method not found", Value::Null),
        }
    }
}

fn call_tool(req: &Recorded, params: &Value, store: &Arc<Mutex<Store>>) -> Response {
    let args = &params["arguments"];
    let key = params["_meta"][KEY_META].as_str().map(str::to_owned);
    match params["name"].as_str().unwrap_or_default() {
        "echo" => complete(req, text(args["text"].as_str().unwrap_or_default())),
        "regional" => {
            let mut store = store.lock().unwrap();
            if store.mismatches_left > 0 {
                store.mismatches_left -= 1;
                return rpc_error(req, 400, -32020, "Mcp-Param-Region missing", Value::Null);
            }
            if req.header("mcp-param-region")
                != Some(expected_header(args["region"].as_str().unwrap_or_default()).as_str())
            {
                return rpc_error(req, 400, -32020, "Mcp-Param-Region mismatch", Value::Null);
            }
            complete(req, text("regional"))
        }
        "confirm" => {
            if params["inputResponses"].is_null() {
                return complete(
                    req,
                    json!({"resultType": "input_required",
                    "inputRequests": {"ok": {"method": "elicitation/create",
                        "params": {"message": "proceed?", "requestedSchema": {"type": "object"}}}},
                    "requestState": "state-1"}),
                );
            }
            assert_eq!(params["requestState"], "state-1");
            let answer = &params["inputResponses"]["ok"];
            if answer["action"] == "decline" {
                // The tool, told no, fails its call with a JSON-RPC error.
                return rpc_error(req, 200, -32603, "declined", Value::Null);
            }
            complete(req, text(answer["action"].as_str().unwrap_or("none")))
        }
        "ask_overlong" => complete(
            req,
            json!({"resultType": "input_required",
            "inputRequests": {"ok": {"method": "elicitation/create", "params": {}},
                "long": {"method": "x".repeat(2048), "params": {}}},
            "requestState": "state-1"}),
        ),
        "missing" => rpc_error(
            req,
            400,
            -32021,
            "needs sampling",
            json!({"requiredCapabilities": {"sampling": {}}}),
        ),
        "durable" => complete(
            req,
            json!({"resultType": "task", "taskId": "t-1",
            "status": "working", "pollIntervalMs": 10}),
        ),
        "increment_then_cut" => {
            let mut store = store.lock().unwrap();
            let run_key = key
                .clone()
                .unwrap_or_else(|| format!("rpc-{}", req.rpc_id()));
            if let Some(stored) = key.as_ref().and_then(|k| store.results.get(k)) {
                // Deduplicated: the stored result, nothing runs again.
                return complete(req, stored.clone());
            }
            *store.runs.entry(run_key.clone()).or_default() += 1;
            let result = text("incremented");
            if let Some(k) = &key {
                store.results.insert(k.clone(), result.clone());
            }
            // The side effect ran; the stream breaks before the response.
            sse_cut(format!(
                "data: {}\n\n",
                json!({"jsonrpc": "2.0",
                "method": "notifications/progress", "params": {"progressToken": 1, "progress": 1}})
            ))
        }
        "hang" => hang(),
        other => rpc_error(
            req,
            400,
            -32602,
            &format!("unknown tool {other}"),
            Value::Null,
        ),
    }
}

fn expected_header(value: &str) -> String {
    mcp_resume::proto::modern::encode_header_value(value)
        .to_str()
        .unwrap()
        .to_owned()
}

async fn modern() -> (TestServer, Arc<Mutex<Store>>) {
    let store = Arc::new(Mutex::new(Store::default()));
    let server = TestServer::start(modern_server(store.clone())).await;
    (server, store)
}

fn client(server: &TestServer) -> mcp_resume::ClientBuilder {
    Client::builder(&server.url)
        .call_timeout(Duration::from_secs(5))
        .open_listen_stream(false)
        .era_cache(EraCache::new())
        .jitter_seed(3)
}

#[tokio::test]
async fn auto_detects_the_modern_era_and_speaks_it_exactly() {
    let (server, _) = modern().await;
    let client = client(&server).build().unwrap();
    let init = guarded(client.connect()).await.unwrap();
    assert_eq!(init.protocol_version, MODERN);
    assert_eq!(init.server_name, "modern");
    assert_eq!(client.era(), Some(Era::Modern));
    let reply = guarded(client.call_tool(ToolCall::new("echo", json!({"text": "hi"}))))
        .await
        .unwrap();
    assert_eq!(reply.text(), "hi");
    guarded(client.close()).await.unwrap();
    let labels = server.labels();
    assert_eq!(
        labels,
        ["POST server/discover", "POST tools/call"],
        "{labels:?}"
    );
    let call = server
        .requests()
        .into_iter()
        .find(|r| r.is_rpc("tools/call"))
        .unwrap();
    assert_eq!(call.header("mcp-name"), Some("echo"));
    assert_eq!(
        call.params()["_meta"]["io.modelcontextprotocol/clientInfo"]["name"],
        "mcp-resume"
    );
    // The core declares the tasks extension it handles.
    assert!(
        call.params()["_meta"]["io.modelcontextprotocol/clientCapabilities"]["extensions"]
            ["io.modelcontextprotocol/tasks"]
            .is_object()
    );
}

#[tokio::test]
async fn tools_with_invalid_header_annotations_are_dropped_and_params_mirrored() {
    let (server, _) = modern().await;
    let client = client(&server).build().unwrap();
    let tools = guarded(client.list_tools()).await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(
        names,
        ["echo", "regional"],
        "the tool annotating a number is dropped"
    );
    for region in ["eu-west1", "Zürich "] {
        let reply = guarded(client.call_tool(ToolCall::new("regional", json!({"region": region}))))
            .await
            .unwrap();
        assert_eq!(reply.text(), "regional");
    }
    let sent: Vec<String> = server
        .requests()
        .iter()
        .filter_map(|r| r.header("mcp-param-region").map(str::to_owned))
        .collect();
    assert_eq!(sent, ["eu-west1", "=?base64?WsO8cmljaCA=?="]);
}

#[tokio::test]
async fn a_header_mismatch_refetches_the_tools_and_retries_once() {
    let (server, store) = modern().await;
    let client = client(&server).build().unwrap();
    guarded(client.list_tools()).await.unwrap();
    store.lock().unwrap().mismatches_left = 1;
    let reply = guarded(client.call_tool(ToolCall::new("regional", json!({"region": "eu"}))))
        .await
        .unwrap();
    assert_eq!(reply.text(), "regional");
    let labels = server.labels();
    assert_eq!(
        labels[1..],
        [
            "POST tools/list",
            "POST tools/call",
            "POST tools/list",
            "POST tools/call"
        ],
        "{labels:?}"
    );
    // A second mismatch in a row is the call's answer.
    store.lock().unwrap().mismatches_left = 2;
    let err = guarded(client.call_tool(ToolCall::new("regional", json!({"region": "eu"}))))
        .await
        .unwrap_err();
    assert_eq!(err.rpc_error().map(|e| e.code), Some(-32020), "{err}");
}

#[tokio::test]
async fn input_required_is_answered_by_the_handler_and_the_call_sent_again() {
    let (server, _) = modern().await;
    let client = client(&server)
        .on_server_request(|req| async move {
            assert_eq!(req.method, "elicitation/create");
            Ok(json!({"action": "accept", "content": {}}))
        })
        .build()
        .unwrap();
    let reply =
        guarded(client.call_tool(ToolCall::new("confirm", json!({})).idempotency_key("confirm-1")))
            .await
            .unwrap();
    assert_eq!(reply.text(), "accept");
    let calls: Vec<Recorded> = server
        .requests()
        .into_iter()
        .filter(|r| r.is_rpc("tools/call"))
        .collect();
    assert_eq!(calls.len(), 2);
    assert_ne!(
        calls[0].rpc_id(),
        calls[1].rpc_id(),
        "a new JSON-RPC id per round"
    );
    assert_eq!(calls[1].params()["requestState"], "state-1");
    assert_eq!(calls[0].params()["_meta"][KEY_META], "confirm-1");
    assert_eq!(calls[1].params()["_meta"][KEY_META], "confirm-1.round1");
}

/// An input handler still running when its MRTR call ends (here: its timeout) is cancelled:
/// its answer could reach no round any more, and it would hold one of the handler slots.
#[tokio::test]
async fn an_input_handler_is_cancelled_when_its_call_ends() {
    let (server, _) = modern().await;
    let (cancelled_tx, mut cancelled) = tokio::sync::mpsc::unbounded_channel();
    let client = client(&server)
        .on_elicitation(move |_req, ctx| {
            // Work handed elsewhere learns of the cancellation through the context; the
            // handler's own future is dropped.
            let cancelled_tx = cancelled_tx.clone();
            tokio::spawn(async move {
                let _ = cancelled_tx.send(ctx.cancelled().await);
            });
            std::future::pending()
        })
        .build()
        .unwrap();
    let call = ToolCall::new("confirm", json!({})).timeout(Duration::from_millis(200));
    let err = guarded(client.call_tool(call)).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    let reason = tokio::time::timeout(Duration::from_secs(1), cancelled.recv()).await;
    assert!(
        matches!(reason, Ok(Some(_))),
        "the handler was not cancelled: {reason:?}"
    );
}

/// An input the app's handler could not provide ends its MRTR call with an error of the
/// client's own, not as if the server had refused the call: the round before it was answered,
/// so the call may have run, and the error says so.
#[tokio::test]
async fn an_input_the_app_cannot_provide_ends_the_call_as_one_that_may_have_run() {
    let (server, _) = modern().await;
    let client = client(&server)
        .on_server_request(|_req| async move { Err(RpcError::new(-32603, "no")) })
        .build()
        .unwrap();
    let call = ToolCall::new("confirm", json!({})).idempotency_key("c-1");
    let err = guarded(client.call_tool(call)).await.unwrap_err();
    assert!(err.may_have_run(), "{err:?}");
    assert!(
        !(err.kind() == ErrorKind::Rpc && err.rpc_error().is_none()),
        "{err:?}"
    );
}

/// A round asking for an input whose method is longer than any a handler takes is the
/// server's error: no handler runs for any of the round's inputs, the call ends `Protocol`
/// saying it may have run (the server took it before it asked), not as an input the app
/// refused, and the next round is never sent.
#[tokio::test]
async fn a_rounds_input_with_an_overlong_method_ends_the_call_unhandled() {
    let (server, _) = modern().await;
    let handled = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let client = client(&server)
        .on_server_request({
            let handled = handled.clone();
            move |_req| {
                handled.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                async { Ok(json!({"action": "accept"})) }
            }
        })
        .build()
        .unwrap();
    let err = guarded(client.call_tool(ToolCall::new("ask_overlong", json!({}))))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Protocol, "{err}");
    assert!(err.may_have_run(), "{err}");
    assert!(!err.input_refused(), "{err}");
    assert!(format!("{err:#}").len() < 1024, "{err:#}");
    assert_eq!(handled.load(std::sync::atomic::Ordering::SeqCst), 0);
    let calls = server
        .requests()
        .into_iter()
        .filter(|r| r.is_rpc("tools/call"))
        .count();
    assert_eq!(calls, 1, "the next round was sent");
}

/// A later round answered with the server's JSON-RPC error is the call's answer, and the
/// rounds before it were the server's too: the tool may have acted before it asked, so the
/// error says the call may have run.
#[tokio::test]
async fn a_later_rounds_error_answer_says_the_call_may_have_run() {
    let (server, _) = modern().await;
    let client = client(&server)
        .on_server_request(|_req| async move { Ok(json!({"action": "decline"})) })
        .build()
        .unwrap();
    let call = ToolCall::new("confirm", json!({})).idempotency_key("c-2");
    let err = guarded(client.call_tool(call)).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Rpc, "{err:?}");
    assert_eq!(err.rpc_error().map(|e| e.code), Some(-32603), "{err:?}");
    assert!(err.may_have_run(), "{err:?}");
}

/// The inputs of the app's own MRTR calls are not held to the bound on a server's concurrent
/// requests: with every one of its slots taken by a slow handler, one more call's input waits
/// for its handler like the others, instead of failing its call at once.
#[tokio::test]
async fn inputs_beyond_the_server_request_bound_wait_for_their_handlers() {
    let (server, _) = modern().await;
    let (started_tx, mut started) = tokio::sync::mpsc::unbounded_channel();
    let (release_tx, release) = tokio::sync::watch::channel(false);
    let client = client(&server)
        .on_server_request(move |_req| {
            let started_tx = started_tx.clone();
            let mut release = release.clone();
            async move {
                let _ = started_tx.send(());
                let _ = release.wait_for(|go| *go).await;
                Ok(json!({"action": "accept", "content": {}}))
            }
        })
        .build()
        .unwrap();
    let calls: Vec<_> = (0..33)
        .map(|_| {
            let client = client.clone();
            let call = ToolCall::new("confirm", json!({})).timeout(Duration::from_secs(5));
            tokio::spawn(async move { client.call_tool(call).await })
        })
        .collect();
    for _ in 0..32 {
        guarded(started.recv()).await.expect("a handler started");
    }
    assert!(
        calls.iter().all(|c| !c.is_finished()),
        "a call ended while its handlers were held"
    );
    release_tx.send_replace(true);
    for call in calls {
        let reply = guarded(call).await.unwrap().expect("every call succeeds");
        assert_eq!(reply.text(), "accept");
    }
}

/// A key ending in `.round<n>` is the derived key of an MRTR round: an app's call under one
/// could be taken by the server for another call's round (and answered with its result), so
/// it is refused before anything is sent.
#[tokio::test]
async fn an_idempotency_key_shaped_like_a_round_key_is_refused() {
    let (server, _) = modern().await;
    let client = client(&server).build().unwrap();
    guarded(client.connect()).await.unwrap();
    let call = ToolCall::new("echo", json!({"text": "hi"})).idempotency_key("order-7.round1");
    let err = guarded(client.call_tool(call)).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
    assert!(
        !server.requests().iter().any(|r| r.is_rpc("tools/call")),
        "{:?}",
        server.labels()
    );
    // A suffix that is no round's stays the app's.
    let call = ToolCall::new("echo", json!({"text": "hi"})).idempotency_key("order-7.roundup");
    guarded(client.call_tool(call)).await.unwrap();
}

#[tokio::test]
async fn a_broken_stream_reissues_only_a_keyed_call_to_a_deduplicating_server() {
    let (server, store) = modern().await;
    let client = client(&server).build().unwrap();
    let mut events = client.events();
    let keyed = guarded(
        client.call_tool(ToolCall::new("increment_then_cut", json!({})).idempotency_key("inc-1")),
    )
    .await
    .unwrap();
    assert_eq!(keyed.text(), "incremented");
    assert_eq!(store.lock().unwrap().runs["inc-1"], 1, "ran once");
    let err = guarded(client.call_tool(ToolCall::new("increment_then_cut", json!({}))))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::OutcomeUnknown, "{err}");
    let posts = server
        .requests()
        .iter()
        .filter(|r| r.is_rpc("tools/call"))
        .count();
    assert_eq!(posts, 3, "the keyed call twice, the unkeyed one once");
    let unkeyed_runs: u32 = store
        .lock()
        .unwrap()
        .runs
        .iter()
        .filter(|(k, _)| k.starts_with("rpc-"))
        .map(|(_, n)| *n)
        .sum();
    assert_eq!(unkeyed_runs, 1);
    let mut saw_redispatch = false;
    while let Ok(Some(e)) = tokio::time::timeout(Duration::from_millis(1), events.recv()).await {
        saw_redispatch |= matches!(e, SessionEvent::Redispatched { .. });
    }
    assert!(saw_redispatch);
}

#[tokio::test]
async fn a_deadline_closes_the_stream_and_sends_no_cancellation() {
    let (server, _) = modern().await;
    let client = client(&server).build().unwrap();
    let call = ToolCall::new("hang", json!({})).timeout(Duration::from_millis(200));
    let err = guarded(client.call_tool(call)).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout);
    guarded(client.ping()).await.ok();
    assert!(
        !server.labels().iter().any(|l| l.contains("cancelled")),
        "{:?}",
        server.labels()
    );
}

#[tokio::test]
async fn a_missing_capability_is_a_typed_error() {
    let (server, _) = modern().await;
    let client = client(&server).build().unwrap();
    let err = guarded(client.call_tool(ToolCall::new("missing", json!({}))))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::MissingCapability, "{err}");
    assert_eq!(
        err.rpc_error().unwrap().data.as_ref().unwrap()["requiredCapabilities"]["sampling"],
        json!({})
    );
}

#[tokio::test]
#[allow(deprecated)] // the task store's path, kept for migration
async fn a_task_is_stored_then_polled_to_its_result() {
    let (server, _) = modern().await;
    let store = Arc::new(mcp_resume::InMemoryTaskStore::new());
    let client = client(&server).task_store(store.clone()).build().unwrap();
    let mut events = client.events();
    let reply = guarded(client.call_tool(ToolCall::new("durable", json!({}))))
        .await
        .unwrap();
    assert_eq!(reply.text(), "from the task");
    let polls: Vec<Recorded> = server
        .requests()
        .into_iter()
        .filter(|r| r.is_rpc("tasks/get"))
        .collect();
    assert_eq!(polls.len(), 3);
    assert!(polls.iter().all(|p| p.header("mcp-name") == Some("t-1")));
    let mut created = false;
    let mut finished = false;
    while let Ok(Some(e)) = tokio::time::timeout(Duration::from_millis(1), events.recv()).await {
        created |= matches!(&e, SessionEvent::TaskCreated { task_id, .. } if task_id == "t-1");
        finished |= matches!(&e, SessionEvent::TaskFinished { task_id, .. } if task_id == "t-1");
    }
    assert!(created && finished);
    use mcp_resume::TaskStore;
    assert!(store.pending().is_empty(), "a finished task is forgotten");
}

#[tokio::test]
async fn change_notifications_come_on_subscriptions_listen() {
    let (server, _) = modern().await;
    let client = client(&server).open_listen_stream(true).build().unwrap();
    let mut notes = client.notifications();
    let mut events = client.events();
    guarded(client.connect()).await.unwrap();
    let note = guarded(notes.next()).await.unwrap();
    assert_eq!(note.method, "notifications/tools/list_changed");
    // Listening once the server acknowledged the subscription, not also at its head: the
    // events before the notification were all sent before it.
    let mut listening = 0;
    while let Some(Some(event)) = futures::FutureExt::now_or_never(events.next()) {
        listening += usize::from(matches!(event, SessionEvent::Listening));
    }
    assert_eq!(listening, 1);
    assert_eq!(
        note.params.as_ref().unwrap()["_meta"]["io.modelcontextprotocol/subscriptionId"],
        server
            .requests()
            .iter()
            .find(|r| r.is_rpc("subscriptions/listen"))
            .unwrap()
            .rpc_id()
    );
    let listen = server.wait_for(|r| r.is_rpc("subscriptions/listen")).await;
    assert_eq!(listen.params()["notifications"]["toolsListChanged"], true);
    assert!(!server.labels().iter().any(|l| l == "GET"));
}

#[tokio::test]
async fn a_legacy_server_refuses_a_forced_modern_client() {
    let server = TestServer::start(default_reply).await;
    let client = Client::builder(&server.url)
        .era(Era::Modern)
        .era_cache(EraCache::new())
        .build()
        .unwrap();
    let err = guarded(client.connect()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Protocol, "{err}");
    assert!(!server.labels().iter().any(|l| l == "POST initialize"));
}

#[tokio::test]
async fn a_cached_legacy_era_is_probed_again_when_the_server_answers_as_modern() {
    let (server, _) = modern().await;
    let cache = EraCache::new();
    // The origin spoke the legacy era before a redeploy (an era restored from storage).
    cache.remember(&server.url, Era::Legacy);
    let client = client(&server).era_cache(cache.clone()).build().unwrap();
    guarded(client.connect()).await.unwrap();
    assert_eq!(client.era(), Some(Era::Modern));
    assert_eq!(cache.get(&server.url), Some(Era::Modern));
    assert_eq!(
        server.labels()[..2],
        ["POST initialize", "POST server/discover"],
        "the cached era first, then the probe its refusal calls for"
    );
}

/// A legacy session whose server is redeployed modern-only: the TypeScript SDK's modern mode
/// refuses every request without the modern envelope with 400 -32022 listing 2026-07-28 alone.
/// The refused call (not run: a 400 refusal is not processed) goes on a new handshake that
/// probes first, and the client speaks the modern era from then on; before, every call failed
/// `Rpc -32022` for good on a session that stayed ready.
#[tokio::test]
async fn a_legacy_session_probes_again_when_its_server_is_redeployed_modern_only() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
    let redeployed = Arc::new(AtomicBool::new(false));
    let ran = Arc::new(AtomicUsize::new(0));
    let modern = modern_server(Arc::new(Mutex::new(Store::default())));
    let (flipped, runs) = (redeployed.clone(), ran.clone());
    let server = TestServer::start(move |req| {
        if !flipped.load(SeqCst) {
            return default_reply(req);
        }
        let enveloped = req.params()["_meta"]["io.modelcontextprotocol/protocolVersion"] == MODERN;
        if req.method == axum::http::Method::POST && !enveloped {
            return rpc_error(
                req,
                400,
                -32022,
                "Unsupported protocol version",
                json!({"supported": [MODERN]}),
            );
        }
        let response = modern(req);
        if req.is_rpc("tools/call") && response.status().is_success() {
            runs.fetch_add(1, SeqCst);
        }
        response
    })
    .await;
    let client = client(&server).build().unwrap();
    let mut events = client.events();
    guarded(client.connect()).await.unwrap();
    assert_eq!(client.era(), Some(Era::Legacy));
    redeployed.store(true, SeqCst);
    let before = server.requests().len();

    let reply = guarded(client.call_tool(ToolCall::new("echo", json!({"text": "hi"}))))
        .await
        .unwrap();
    assert_eq!(reply.text(), "hi");
    assert_eq!(client.era(), Some(Era::Modern));
    assert_eq!(ran.load(SeqCst), 1, "the tool ran once");
    let after: Vec<String> = server.labels()[before..].to_vec();
    assert_eq!(
        after,
        ["POST tools/call", "POST server/discover", "POST tools/call"],
        "the refused call, the probe (not `initialize`), the call on the modern era"
    );
    let mut seen = Vec::new();
    while let Ok(Some(event)) = tokio::time::timeout(Duration::from_millis(1), events.recv()).await
    {
        seen.push(event);
    }
    assert!(
        seen.iter()
            .any(|e| matches!(e, SessionEvent::EraDetected { era: Era::Modern })),
        "{seen:?}"
    );
}
