//! The client against the TypeScript SDK v2 server (`tests/interop-modern/server.mjs`) through
//! the public API: what the parent module (`interop_ts_modern.rs`) pins on the raw wire, done
//! by the client.
//!
//! Written against the modern era planned in DESIGN §9:
//! - `Era::Auto` probes with `server/discover`; `Client::era()` says what it found (era
//!   detection is in: those tests run);
//! - every later request carries the 2026-07-28 `_meta` and headers;
//! - the MRTR round of an `input_required` result goes through the handler registered with
//!   `ClientBuilder::on_server_request`, like a legacy server request;
//! - a keyed call whose stream breaks is re-issued (new JSON-RPC id, same key) when the server
//!   advertises the resume-safety extension's idempotency; an unkeyed one fails
//!   `ErrorKind::OutcomeUnknown`;
//! - change notifications from `subscriptions/listen` arrive on `Client::notifications()`;
//! - a `resultType: "task"` answer is polled with `tasks/get` to its result inside `call_tool`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use mcp_resume::{Client, Era, EraCache, ErrorKind, RpcError, ToolCall};
use serde_json::{json, Value};

use super::interop_support::TsServer;
use super::{start_modern, state, within, GUARD, KEY_META, MODERN};

/// A client with an era cache of its own: the process-wide default would carry one test's
/// answer to the next server that happens to get the same port.
fn client(server: &TsServer) -> mcp_resume::ClientBuilder {
    Client::builder(&server.url)
        .era(Era::Auto)
        .era_cache(EraCache::new())
        .client_info("mcp-resume-modern-test", "0.0.0")
        .call_timeout(GUARD)
}

/// Every POST the server received carried the modern envelope and headers, and no session.
fn assert_modern_wire(server: &TsServer) {
    let requests = server.find("http_in", |_| true);
    assert!(!requests.is_empty());
    for r in requests {
        assert_eq!(r["method"], "POST", "{}", server.dump());
        assert_eq!(r["headers"]["mcp-protocol-version"], MODERN, "{r}");
        assert_eq!(r["headers"]["mcp-method"], r["rpc_method"], "{r}");
        assert!(r["headers"]["mcp-session-id"].is_null(), "{r}");
        assert_eq!(r["meta"]["io.modelcontextprotocol/protocolVersion"], MODERN);
        assert!(r["meta"]["io.modelcontextprotocol/clientCapabilities"].is_object());
        assert_eq!(
            r["meta"]["io.modelcontextprotocol/clientInfo"]["name"],
            "mcp-resume-modern-test"
        );
        if r["rpc_method"] == "tools/call" {
            assert_eq!(r["headers"]["mcp-name"], r["tool"], "{r}");
        }
        assert_ne!(r["rpc_method"], "initialize", "{}", server.dump());
    }
}

/// `Era::Auto` against the modern-only server: the `server/discover` probe, with the modern
/// headers and envelope, is the first request, and the client settles on the modern era.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_detects_the_modern_era_by_discovery() {
    let server = start_modern(&[]);
    let client = client(&server).build().unwrap();
    let found = within("connect", client.connect()).await.unwrap();
    assert_eq!(client.era(), Some(Era::Modern));
    assert_eq!(found.protocol_version, MODERN);
    assert_eq!(found.server_name, "mcp-resume-interop-ts-modern");

    state(&server).await;
    let first = server.find("http_in", |_| true).remove(0);
    assert_eq!(first["rpc_method"], "server/discover", "{}", server.dump());
    assert_eq!(first["headers"]["mcp-method"], "server/discover");
    assert_eq!(first["headers"]["mcp-protocol-version"], MODERN);
    assert_eq!(
        first["meta"]["io.modelcontextprotocol/protocolVersion"],
        MODERN
    );
    assert!(first["meta"]["io.modelcontextprotocol/clientCapabilities"].is_object());
    assert_eq!(
        first["meta"]["io.modelcontextprotocol/clientInfo"]["name"],
        "mcp-resume-modern-test"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_and_call_on_the_modern_wire() {
    let server = start_modern(&[]);
    let client = client(&server).build().unwrap();
    within("connect", client.connect()).await.unwrap();

    let tools = within("list_tools", client.list_tools()).await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    for expected in ["echo", "progress", "counter_increment", "confirm", "locate"] {
        assert!(
            names.contains(&expected),
            "{expected} missing from {names:?}"
        );
    }
    let reply = within(
        "echo",
        client.call_tool(ToolCall::new("echo", json!({"text": "hi"}))),
    )
    .await
    .unwrap();
    assert_eq!(reply.text(), "hi");
    state(&server).await;
    assert_modern_wire(&server);
}

/// The dual-era server answers `server/discover`: the client stays modern there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_stays_modern_on_a_dual_era_server() {
    let server = start_modern(&["--legacy", "stateless"]);
    let client = client(&server).build().unwrap();
    within("connect", client.connect()).await.unwrap();
    assert_eq!(client.era(), Some(Era::Modern));
    assert!(server
        .find("http_in", |e| e["rpc_method"] == "initialize")
        .is_empty());
}

/// The TypeScript SDK v1 server (`tests/interop/ts-server.mjs`) refuses the probe with a body
/// that is no modern error: the client falls back to `initialize` and stays legacy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_falls_back_to_legacy_on_a_legacy_server() {
    let server = TsServer::start(&[]);
    let client = client(&server).build().unwrap();
    let init = within("connect", client.connect()).await.unwrap();
    assert_eq!(client.era(), Some(Era::Legacy));
    assert_eq!(init.protocol_version, "2025-11-25");
    let reply = within(
        "echo",
        client.call_tool(ToolCall::new("echo", json!({"text": "old"}))),
    )
    .await
    .unwrap();
    assert_eq!(reply.text(), "old");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_notifications_arrive_before_the_result() {
    let server = start_modern(&[]);
    let client = client(&server).build().unwrap();
    within("connect", client.connect()).await.unwrap();
    let mut notifications = client.notifications();

    let call = ToolCall::new("progress", json!({"steps": 3})).progress_token("tok-m");
    let result = within("progress", client.call_tool(call)).await.unwrap();
    assert_eq!(result.text(), "progress done after 3 steps");

    let mut progress = Vec::new();
    while progress.len() < 3 {
        let n = within("progress notification", notifications.recv())
            .await
            .expect("notification stream ended");
        if n.method == "notifications/progress" {
            progress.push(n);
        }
    }
    for (i, n) in progress.iter().enumerate() {
        assert_eq!(n.progress_token(), Some(&json!("tok-m")));
        assert_eq!(n.params.as_ref().unwrap()["progress"], i as u64 + 1);
    }
}

/// `confirm` answers `input_required`: the elicitation goes to the app's handler, and the
/// client re-sends the call with a new id, the answer and the server's `requestState`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mrtr_round_goes_through_the_server_request_handler() {
    let server = start_modern(&[]);
    let asked = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&asked);
    let client = client(&server)
        .client_capabilities(json!({"elicitation": {}}))
        .on_server_request(move |request| {
            let seen = Arc::clone(&seen);
            async move {
                seen.fetch_add(1, Ordering::SeqCst);
                match request.method.as_str() {
                    "elicitation/create" => {
                        Ok(json!({"action": "accept", "content": {"confirmed": true}}))
                    }
                    other => Err(RpcError::method_not_found(other)),
                }
            }
        })
        .build()
        .unwrap();
    within("connect", client.connect()).await.unwrap();

    let result = within(
        "confirm",
        client.call_tool(ToolCall::new("confirm", json!({"question": "Ship it?"}))),
    )
    .await
    .unwrap();
    assert_eq!(
        result.structured_content,
        Some(json!({"action": "accept", "content": {"confirmed": true}}))
    );
    assert_eq!(asked.load(Ordering::SeqCst), 1);

    let runs = server
        .wait_count("tool", 2, GUARD, |e| e["name"] == "confirm")
        .await;
    assert_ne!(runs[0]["request_id"], runs[1]["request_id"]);
    assert_eq!(runs[0]["input_responses"], Value::Null);
    assert_eq!(runs[1]["input_responses"]["confirm"]["action"], "accept");
    assert!(runs[1]["request_state"].is_string(), "{}", server.dump());
}

/// A keyed `counter_increment` whose response stream the server cuts after the side effect is
/// re-issued once (new id, same key) and the counter moves once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyed_call_over_a_broken_stream_is_reissued_once() {
    for phase in ["after_head", "before_head"] {
        let server = start_modern(&[]);
        let client = client(&server).build().unwrap();
        within("connect", client.connect()).await.unwrap();
        server
            .admin_with(
                "/admin/arm-drop",
                Some(json!({"tool": "counter_increment", "count": 1, "phase": phase})),
            )
            .await;

        let call = ToolCall::new("counter_increment", json!({})).idempotency_key("key-once");
        let result = within("counter_increment", client.call_tool(call))
            .await
            .unwrap_or_else(|e| panic!("{phase}: {e}\n{}", server.dump()));
        assert_eq!(
            result.structured_content,
            Some(json!({"counter": 1, "deduplicated": true})),
            "{phase}"
        );

        assert_eq!(state(&server).await["counter"], 1, "{phase}");
        let runs = server.find("tool", |e| e["name"] == "counter_increment");
        assert_eq!(runs.len(), 2, "{phase}: {}", server.dump());
        assert_ne!(runs[0]["request_id"], runs[1]["request_id"], "a new id");
        for run in &runs {
            assert_eq!(run["key_meta"], "key-once", "{phase}: {run}");
            assert_eq!(run["meta"][KEY_META], "key-once");
        }
        assert_eq!(server.find("side_effect", |_| true).len(), 1, "{phase}");
    }
}

/// An unkeyed call whose stream breaks is not re-issued: `OutcomeUnknown`, one run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unkeyed_interrupted_call_is_outcome_unknown() {
    for phase in ["after_head", "before_head"] {
        let server = start_modern(&[]);
        let client = client(&server).build().unwrap();
        within("connect", client.connect()).await.unwrap();

        let call = ToolCall::new("drop_stream", json!({"phase": phase}));
        let err = within("drop_stream", client.call_tool(call))
            .await
            .expect_err("the response never arrives");
        assert_eq!(err.kind(), ErrorKind::OutcomeUnknown, "{phase}: {err}");

        assert_eq!(state(&server).await["counter"], 1, "{phase}");
        assert_eq!(
            server.find("tool", |e| e["name"] == "drop_stream").len(),
            1,
            "{phase}: not re-sent\n{}",
            server.dump()
        );
    }
}

/// `x-mcp-header` parameters are mirrored as `Mcp-Param-*` (the server refuses the call
/// otherwise).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x_mcp_header_parameters_are_mirrored() {
    let server = start_modern(&[]);
    let client = client(&server).build().unwrap();
    within("connect", client.connect()).await.unwrap();
    within("list_tools", client.list_tools()).await.unwrap();
    let result = within(
        "locate",
        client.call_tool(ToolCall::new("locate", json!({"region": "eu-west1"}))),
    )
    .await
    .unwrap();
    assert_eq!(result.text(), "region=eu-west1");
    let seen = server
        .wait_for("http_in", GUARD, |e| e["tool"] == "locate")
        .await;
    assert_eq!(seen["headers"]["mcp-param-region"], "eu-west1");
}

/// List changes come on the `subscriptions/listen` stream the client keeps open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_changes_arrive_from_subscriptions_listen() {
    let server = start_modern(&[]);
    let client = client(&server).build().unwrap();
    let mut notifications = client.notifications();
    within("connect", client.connect()).await.unwrap();
    // The acknowledgement is the first thing on the stream: once its head is out, the
    // subscription is registered.
    server
        .wait_for("http_head", GUARD, |e| {
            e["rpc_method"] == "subscriptions/listen"
        })
        .await;
    server.admin("/admin/tools-changed").await;
    let changed = within("list_changed", async {
        loop {
            let n = notifications
                .recv()
                .await
                .expect("notification stream ended");
            if n.method == "notifications/tools/list_changed" {
                return n;
            }
        }
    })
    .await;
    assert!(changed.call.is_none());
}

/// A task handle (SEP-2663) is polled with `tasks/get` to its result inside `call_tool`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn task_results_are_polled_to_completion() {
    let server = start_modern(&[]);
    let client = client(&server).build().unwrap();
    within("connect", client.connect()).await.unwrap();
    let result = within(
        "slow_task",
        client.call_tool(ToolCall::new("slow_task", json!({"polls": 2, "text": "x"}))),
    )
    .await
    .unwrap();
    assert_eq!(result.text(), "task done: x");
    state(&server).await;
    assert_eq!(
        server.find("task_created", |_| true).len(),
        1,
        "the client declared the tasks extension: {}",
        server.dump()
    );
    let polls = server.find("http_in", |e| e["rpc_method"] == "tasks/get");
    assert!(polls.len() >= 2, "{}", server.dump());
    for poll in polls {
        assert!(poll["headers"]["mcp-name"].is_string(), "{poll}");
    }
}
