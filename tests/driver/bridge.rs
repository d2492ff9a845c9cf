//! The bridge's rules at the message level: a scripted host (plain JSON-RPC messages) against
//! the in-process mock cluster in both eras, and against scripted servers where a rule needs
//! a server the cluster cannot be. Every test checks what really happened: the cluster's
//! oracle, or the requests the scripted server received.

mod host;
use crate::support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, Method};
use axum::response::Response;
use futures::{FutureExt, StreamExt};
use host::{error_of, guarded, Host};
use mcp_resume::bridge::{
    codes, Bridge, BridgeBuilder, ANNOTATED_RESENDS, DEFAULT_CAPACITY, IDEMPOTENCY_META_KEY,
};
use mcp_resume::{EraCache, ErrorKind, ReconnectPolicy, SessionEvent};
use mock_server::context::meta;
use mock_server::{Cluster, ClusterConfig, ClusterEra, OracleReport, Preset};
use serde_json::{json, Value};
use support::{
    default_reply, hang, initialize_result, json_body, json_result, result_msg, sse_event,
    sse_open_watched, sse_text, status, Recorded, TestServer, SESSION_ID,
};
use tokio::sync::Notify;

const LEGACY: &str = "2025-11-25";

fn bridge(url: &str) -> BridgeBuilder {
    Bridge::builder(url).configure(|c| {
        c.era_cache(EraCache::new())
            .open_listen_stream(false)
            .call_timeout(Duration::from_secs(5))
            .reconnect(
                ReconnectPolicy::default()
                    .with_initial_delay(Duration::from_millis(20))
                    .with_max_delay(Duration::from_millis(100)),
            )
            .jitter_seed(5)
    })
}

async fn cluster(preset: Preset, era: ClusterEra, cut_after_events: Option<u32>) -> Cluster {
    Cluster::start(ClusterConfig {
        preset,
        era,
        instances: 3,
        idle_timeout: None,
        cut_after_events,
        ..ClusterConfig::default()
    })
    .await
    .expect("cluster starts")
}

/// Closes the bridge, waits for the cluster's executions to end, and returns its oracle.
async fn finish(host: Host, cluster: Cluster) -> OracleReport {
    let _ = guarded(host.bridge.close()).await;
    assert!(cluster.wait_idle(host::GUARD).await, "executions running");
    let oracle = cluster.oracle();
    cluster.shutdown().await;
    oracle
}

fn tagged(tag: &str) -> Value {
    json!({ meta::TAG: tag })
}

fn tool_call(name: &str, arguments: Value, meta: Value) -> Value {
    json!({"name": name, "arguments": arguments, "_meta": meta})
}

// ---- lifecycle and era translation ---------------------------------------------------------

/// A legacy server: the host's `initialize` gets the server's answer, a `server/discover`
/// gets "method not found" (a dual-era host falls back), every answer carries the host's id,
/// the host's progress token keeps its meaning, a server's JSON-RPC error passes unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_legacy_session_is_the_hosts_own() {
    let cluster = cluster(Preset::Strict, ClusterEra::Legacy, None).await;
    let mut host = Host::new(bridge(&cluster.url()).build().unwrap());

    let discover = host.request("server/discover", json!({})).await;
    assert_eq!(error_of(&discover).0, codes::METHOD_NOT_FOUND);
    let early = host.request("tools/list", json!({})).await;
    assert_eq!(error_of(&early).0, codes::INVALID_REQUEST);

    let init = host.initialize(LEGACY, json!({})).await;
    let result = &init["result"];
    assert_eq!(result["protocolVersion"], LEGACY, "{init}");
    assert!(result["capabilities"]["tools"].is_object(), "{init}");
    assert!(result["serverInfo"]["name"].is_string(), "{init}");
    assert!(host.bridge.session_id().is_some());

    let list = host.request("tools/list", json!({})).await;
    assert!(list["result"]["tools"].as_array().unwrap().len() >= 5);

    let id = json!("call-1");
    let mut meta = tagged("slow-1");
    meta["progressToken"] = json!("host-token");
    host.send_with_id(
        id.clone(),
        "tools/call",
        tool_call("slow", json!({"steps": 2, "delay_ms": 0}), meta),
    )
    .await;
    let answer = host.answer(&id).await;
    assert_eq!(answer["id"], "call-1");
    assert_eq!(
        answer["result"]["content"][0]["text"],
        "slow: done after 2 steps"
    );
    // Every progress notification, under the host's token, before the answer.
    let progress: Vec<&Value> = host
        .seen
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .collect();
    assert_eq!(progress.len(), 2, "{:?}", host.seen);
    assert!(progress
        .iter()
        .all(|p| p["params"]["progressToken"] == "host-token"));
    // A token the client refuses from its own application (a float: it could not match the
    // progress to the call) is the host's to choose, and travels as sent.
    let id = json!("call-2");
    let mut meta = tagged("slow-2");
    meta["progressToken"] = json!(1.5);
    host.send_with_id(
        id.clone(),
        "tools/call",
        tool_call("slow", json!({"steps": 1, "delay_ms": 0}), meta),
    )
    .await;
    let answer = host.answer(&id).await;
    assert_eq!(
        answer["result"]["content"][0]["text"], "slow: done after 1 steps",
        "{answer}"
    );

    let unknown = host.request("no/such-method", json!({})).await;
    let (code, kind) = error_of(&unknown);
    assert_eq!((code, kind.as_str()), (-32601, ""), "{unknown}");

    let oracle = finish(host, cluster).await;
    assert_eq!(oracle.executions_tagged("slow-1").count(), 1);
    assert_eq!(oracle.totals.initializes, 1, "{:?}", oracle.totals);
}

/// Era translation: a host that speaks only the legacy lifecycle reaches a 2026-07-28-only
/// server. Its `initialize` is answered from `server/discover`, in the version it asked for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_legacy_host_reaches_a_modern_only_server() {
    let cluster = cluster(Preset::Strict, ClusterEra::Modern, None).await;
    let mut host = Host::new(bridge(&cluster.url()).build().unwrap());
    let init = host.initialize("2025-06-18", json!({})).await;
    assert_eq!(init["result"]["protocolVersion"], "2025-06-18", "{init}");
    assert!(
        init["result"]["capabilities"]["tools"].is_object(),
        "{init}"
    );
    let client = host.bridge.client().unwrap();
    assert_eq!(client.era(), Some(mcp_resume::Era::Modern));
    assert_eq!(host.bridge.session_id(), None);

    let answer = host
        .request(
            "tools/call",
            tool_call("echo", json!({"text": "across eras"}), tagged("echo-m")),
        )
        .await;
    assert_eq!(answer["result"]["content"][0]["text"], "across eras");
    let oracle = finish(host, cluster).await;
    assert_eq!(oracle.executions_tagged("echo-m").count(), 1);
    assert_eq!(oracle.totals.initializes, 0, "{:?}", oracle.totals);
}

// ---- recovery is invisible, except a capability change ----------------------------------

/// Strict cluster, every stream cut after two events: the resume is refused, the client
/// re-initializes and re-sends the call keyed by the host's `_meta`. The host sees its
/// answer and nothing else; the tool ran once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reinitialization_and_a_keyed_resend_are_invisible() {
    let cluster = cluster(Preset::Strict, ClusterEra::Legacy, Some(2)).await;
    let mut host = Host::new(bridge(&cluster.url()).build().unwrap());
    let mut events = host.bridge.events();
    host.initialize(LEGACY, json!({})).await;
    let mut meta = tagged("keyed");
    meta[IDEMPOTENCY_META_KEY] = json!("host-key-1");
    let answer = host
        .request(
            "tools/call",
            tool_call("slow", json!({"steps": 2, "delay_ms": 0}), meta),
        )
        .await;
    assert_eq!(
        answer["result"]["content"][0]["text"], "slow: done after 2 steps",
        "{answer}"
    );
    // The server's own notifications (progress, log messages), and nothing of the recovery.
    assert!(
        host.notifications()
            .iter()
            .all(|m| m == "notifications/progress" || m == "notifications/message"),
        "{:?}",
        host.seen
    );
    let oracle = finish(host, cluster).await;
    assert_eq!(oracle.executions_tagged("keyed").count(), 1);
    assert!(oracle.totals.idempotent_replays >= 1, "{:?}", oracle.totals);
    assert!(oracle.totals.initializes >= 2, "{:?}", oracle.totals);
    assert_eq!(oracle.totals.duplicate_side_effects, 0);
    let mut reinitialized = false;
    while let Some(event) = guarded(events.next()).await {
        reinitialized |= matches!(event, SessionEvent::Reinitialized { .. });
    }
    assert!(reinitialized);
}

/// The answer to the `n`th `initialize` (counted in `inits`): session `{SESSION_ID}-n`, the
/// legacy revision, `capabilities(n)`.
fn numbered_session(
    req: &Recorded,
    inits: &Mutex<u32>,
    capabilities: impl Fn(u32) -> Value,
) -> Response<Body> {
    let n = {
        let mut n = inits.lock().unwrap();
        *n += 1;
        *n
    };
    let mut result = initialize_result();
    result["protocolVersion"] = json!(LEGACY);
    result["capabilities"] = capabilities(n);
    let mut response = json_result(req, result);
    let session = format!("{SESSION_ID}-{n}");
    response
        .headers_mut()
        .insert("mcp-session-id", HeaderValue::from_str(&session).unwrap());
    response
}

/// A re-initialization that changes the server's capabilities is announced: the host gets
/// `list_changed` for the lists the server declared, and its call's answer.
#[tokio::test]
async fn a_capability_change_is_announced_as_list_changed() {
    let inits = Arc::new(Mutex::new(0));
    let seen = inits.clone();
    let server = TestServer::start(move |req| {
        if req.is_rpc("initialize") {
            return numbered_session(
                req,
                &seen,
                |n| json!({"tools": {"listChanged": n > 1}, "prompts": {}}),
            );
        }
        if [
            "logging/setLevel",
            "resources/subscribe",
            "resources/unsubscribe",
        ]
        .iter()
        .any(|m| req.is_rpc(m))
        {
            return json_result(req, json!({}));
        }
        // The first session expires before the call.
        if req.header("mcp-session-id") == Some(&format!("{SESSION_ID}-1"))
            && req.is_rpc("tools/call")
        {
            return status(404);
        }
        default_reply(req)
    })
    .await;
    let mut host = Host::new(bridge(&server.url).build().unwrap());
    host.initialize(LEGACY, json!({})).await;
    host.request("logging/setLevel", json!({"level": "debug"}))
        .await;
    for uri in ["file:///a", "file:///b"] {
        host.request("resources/subscribe", json!({ "uri": uri }))
            .await;
    }
    host.request("resources/unsubscribe", json!({"uri": "file:///b"}))
        .await;
    let answer = host
        .request(
            "tools/call",
            tool_call("echo", json!({"text": "t"}), json!({})),
        )
        .await;
    assert_eq!(answer["result"]["content"][0]["text"], "t", "{answer}");
    // The announcements travel apart from the answer: on either side of it.
    while host.notifications().len() < 2 {
        let message = host.next_message().await;
        host.seen.push(message);
    }
    let mut announced = host.notifications();
    announced.sort();
    assert_eq!(
        announced,
        [
            "notifications/prompts/list_changed",
            "notifications/tools/list_changed"
        ]
    );
    let calls = server
        .requests()
        .iter()
        .filter(|r| r.is_rpc("tools/call"))
        .count();
    assert_eq!(calls, 2, "{:?}", server.labels());
    assert_eq!(*inits.lock().unwrap(), 2);
    // The host's session state is set again on the new session, and only what it holds.
    let second = format!("{SESSION_ID}-2");
    let on_second = |r: &Recorded, method: &str| {
        r.is_rpc(method) && r.header("mcp-session-id") == Some(second.as_str())
    };
    let level = server.wait_for(|r| on_second(r, "logging/setLevel")).await;
    assert_eq!(level.params()["level"], "debug");
    let subscribed = server
        .wait_for(|r| on_second(r, "resources/subscribe"))
        .await;
    assert_eq!(subscribed.params()["uri"], "file:///a");
    host.request("ping", json!({})).await;
    let resubscribed = server
        .requests()
        .iter()
        .filter(|r| on_second(r, "resources/subscribe"))
        .count();
    assert_eq!(resubscribed, 1, "{:?}", server.labels());
}

// ---- errors ------------------------------------------------------------------------------

/// Strict cluster, streams cut after the priming event: the resume is refused and the
/// unkeyed side effect may have run. The host gets `outcome_unknown`; it ran once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_unkeyed_call_is_outcome_unknown() {
    let cluster = cluster(Preset::Strict, ClusterEra::Legacy, Some(1)).await;
    let mut host = Host::new(bridge(&cluster.url()).build().unwrap());
    host.initialize(LEGACY, json!({})).await;
    let answer = host
        .request(
            "tools/call",
            tool_call("counter_increment", json!({}), tagged("unkeyed")),
        )
        .await;
    let (code, kind) = error_of(&answer);
    assert_eq!(
        (code, kind.as_str()),
        (codes::OUTCOME_UNKNOWN, "outcome_unknown")
    );
    let oracle = finish(host, cluster).await;
    assert_eq!(oracle.executions_tagged("unkeyed").count(), 1);
}

/// A session whose negotiated context drifted answers under another capability hash: the
/// host gets `context_mismatch`, not the plausible answer; the next call is fine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_under_another_context_is_context_mismatch() {
    let cluster = cluster(Preset::Strict, ClusterEra::Legacy, None).await;
    let mut host = Host::new(bridge(&cluster.url()).build().unwrap());
    host.initialize(
        LEGACY,
        json!({"experimental": {"sampling": {"temperature": 0.3}}}),
    )
    .await;
    host.request(
        "tools/call",
        tool_call("echo", json!({"text": "hi"}), tagged("before")),
    )
    .await;
    let session = host.bridge.session_id().unwrap();
    cluster
        .drift_session(session.expose())
        .await
        .expect("drift");
    let answer = host
        .request(
            "tools/call",
            tool_call("generate", json!({"prompt": "p"}), tagged("drifted")),
        )
        .await;
    let (code, kind) = error_of(&answer);
    assert_eq!(
        (code, kind.as_str()),
        (codes::CONTEXT_MISMATCH, "context_mismatch")
    );
    let after = host
        .request(
            "tools/call",
            tool_call("generate", json!({"prompt": "p"}), tagged("after")),
        )
        .await;
    assert!(after.get("result").is_some(), "{after}");
    let oracle = finish(host, cluster).await;
    assert!(oracle
        .executions_tagged("drifted")
        .all(|e| e.wrong_capability));
    assert!(oracle
        .executions_tagged("after")
        .all(|e| !e.wrong_capability));
}

/// The kinds a scripted server produces, one row each: what the host receives, and that the
/// server really saw what the row says.
#[tokio::test]
async fn outcomes_json_rpc_cannot_express_are_errors_with_their_kind() {
    struct Row {
        name: &'static str,
        reply: Box<dyn Fn(&Recorded) -> Response + Send + Sync>,
        configure: fn(BridgeBuilder) -> BridgeBuilder,
        expect: (i64, &'static str),
    }
    fn call_reply(req: &Recorded, on_call: fn(&Recorded) -> Response) -> Response {
        if req.is_rpc("tools/call") {
            return on_call(req);
        }
        let mut response = default_reply(req);
        if req.is_rpc("initialize") {
            *response.body_mut() = Body::from(
                json!({"jsonrpc": "2.0", "id": req.rpc_id(), "result": {
                    "protocolVersion": LEGACY, "capabilities": {"tools": {}},
                    "serverInfo": {"name": "s", "version": "1"}}})
                .to_string(),
            );
        }
        response
    }
    let rows = [
        Row {
            name: "timeout",
            reply: Box::new(|r| call_reply(r, |_| hang())),
            configure: |b| b.configure(|c| c.call_timeout(Duration::from_millis(300))),
            expect: (codes::TIMEOUT, "timeout"),
        },
        Row {
            name: "protocol",
            reply: Box::new(|r| call_reply(r, |_| status(400))),
            configure: |b| b,
            expect: (codes::PROTOCOL, "protocol"),
        },
        Row {
            name: "too large",
            reply: Box::new(|r| {
                call_reply(r, |req| {
                    json_result(
                        req,
                        json!({"content": [{"type": "text", "text": "x".repeat(4096)}]}),
                    )
                })
            }),
            configure: |b| b.configure(|c| c.max_body_size(1024)),
            expect: (codes::TOO_LARGE, "too_large"),
        },
        Row {
            name: "unauthorized",
            reply: Box::new(|r| call_reply(r, |_| status(401))),
            configure: |b| b,
            expect: (codes::UNAUTHORIZED, "unauthorized"),
        },
        Row {
            name: "session lost",
            reply: {
                // The session ends at the call, and no new one can be made.
                let inits = AtomicUsize::new(0);
                Box::new(move |r| {
                    if r.is_rpc("initialize") && inits.fetch_add(1, Ordering::SeqCst) > 0 {
                        return status(500);
                    }
                    call_reply(r, |_| status(404))
                })
            },
            configure: |b| b,
            expect: (codes::SESSION_LOST, "session_lost"),
        },
        Row {
            name: "server error",
            reply: Box::new(|r| {
                call_reply(r, |req| {
                    json_body(&json!({"jsonrpc": "2.0", "id": req.rpc_id(),
                        "error": {"code": -32602, "message": "bad args", "data": {"arg": "x"}}}))
                })
            }),
            configure: |b| b,
            expect: (-32602, ""),
        },
    ];
    for row in rows {
        let server = TestServer::start(row.reply).await;
        let mut host = Host::new((row.configure)(bridge(&server.url)).build().unwrap());
        host.initialize(LEGACY, json!({})).await;
        let answer = host
            .request("tools/call", tool_call("t", json!({}), json!({})))
            .await;
        let (code, kind) = error_of(&answer);
        assert_eq!((code, kind.as_str()), row.expect, "{}: {answer}", row.name);
        if row.name == "server error" {
            assert_eq!(answer["error"]["data"], json!({"arg": "x"}));
        }
        assert!(
            server.requests().iter().any(|r| r.is_rpc("tools/call")),
            "{}: {:?}",
            row.name,
            server.labels()
        );
        let _ = guarded(host.bridge.close()).await;
    }
}

/// A server answering a host request with a `result` that is no object (MCP results always
/// are): the host gets the bridge's protocol error at once, marked `mayHaveRun` (the server
/// answered, so the call ran), never the bare value, which a host SDK cannot classify and
/// leaves waiting for its own timeout. Nothing is sent again, and the session goes on.
#[tokio::test]
async fn a_result_that_is_no_object_is_a_protocol_error_that_may_have_run() {
    let results = [json!(null), json!("ok"), json!(5), json!([])];
    for result in results {
        let answer = result.clone();
        let server = TestServer::start(move |req| {
            if req.is_rpc("tools/call") || req.is_rpc("resources/list") {
                if req.params()["name"] == "fine" {
                    return json_result(req, json!({"content": []}));
                }
                if req.params()["name"] == "streamed" {
                    return sse_text(sse_event(None, &result_msg(req, answer.clone())));
                }
                return json_result(req, answer.clone());
            }
            default_reply(req)
        })
        .await;
        // The call's deadline is far beyond the test's own wait: an answer that came from
        // it would fail the wait, not pass it.
        let mut host = Host::new(
            bridge(&server.url)
                .configure(|c| c.call_timeout(Duration::from_secs(120)))
                .build()
                .unwrap(),
        );
        host.initialize(LEGACY, json!({})).await;
        for (method, params) in [
            ("tools/call", tool_call("t", json!({}), json!({}))),
            ("tools/call", tool_call("streamed", json!({}), json!({}))),
            ("resources/list", json!({})),
        ] {
            let id = host.send(method, params).await;
            let answer = tokio::time::timeout(Duration::from_secs(10), host.answer(&id))
                .await
                .unwrap_or_else(|_| panic!("{method} answered {result}: no answer"));
            let (code, kind) = error_of(&answer);
            assert_eq!(
                (code, kind.as_str()),
                (codes::PROTOCOL, "protocol"),
                "{method} answered {result}: {answer}"
            );
            assert_eq!(
                answer["error"]["data"]["mayHaveRun"], true,
                "{method} answered {result}: {answer}"
            );
            assert!(answer.get("result").is_none(), "{answer}");
        }
        let sends = server
            .requests()
            .iter()
            .filter(|r| r.is_rpc("tools/call"))
            .count();
        assert_eq!(sends, 2, "{result}: {:?}", server.labels());
        let fine = host
            .request("tools/call", tool_call("fine", json!({}), json!({})))
            .await;
        assert_eq!(fine["result"], json!({"content": []}), "{fine}");
        let _ = guarded(host.bridge.close()).await;
    }
}

/// Errors of the bridge's own making: an invalid key in `_meta` never reaches the server; an
/// invalid session configuration answers `initialize`; the real session closed under a call.
#[tokio::test]
async fn invalid_keys_configurations_and_closed_sessions_are_errors() {
    let server = TestServer::start(|req| {
        if req.is_rpc("tools/call") {
            return hang();
        }
        default_reply(req)
    })
    .await;
    let mut host = Host::new(bridge(&server.url).build().unwrap());
    host.initialize("2025-06-18", json!({})).await;
    let answer = host
        .request(
            "tools/call",
            tool_call("t", json!({}), json!({ IDEMPOTENCY_META_KEY: "" })),
        )
        .await;
    assert_eq!(
        error_of(&answer),
        (codes::INVALID_CONFIG, "invalid_config".to_owned())
    );
    assert!(!server.requests().iter().any(|r| r.is_rpc("tools/call")));

    // The real session closes while a call waits: the host hears `closed`.
    let id = host
        .send("tools/call", tool_call("t", json!({}), json!({})))
        .await;
    server.wait_for(|r| r.is_rpc("tools/call")).await;
    guarded(host.bridge.client().unwrap().close())
        .await
        .unwrap();
    let answer = host.answer(&id).await;
    assert_eq!(error_of(&answer), (codes::CLOSED, "closed".to_owned()));

    // Nobody listens: the network fails beyond recovery.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let closed_port = format!("http://{}/mcp", listener.local_addr().unwrap());
    drop(listener);
    let mut host = Host::new(bridge(&closed_port).build().unwrap());
    let init = host
        .request(
            "initialize",
            json!({"protocolVersion": LEGACY, "capabilities": {}}),
        )
        .await;
    assert_eq!(error_of(&init), (codes::TRANSPORT, "transport".to_owned()));

    let mut host = Host::new(Bridge::builder("ftp://example.com/mcp").build().unwrap());
    let init = host
        .request(
            "initialize",
            json!({"protocolVersion": LEGACY, "capabilities": {}}),
        )
        .await;
    assert_eq!(
        error_of(&init),
        (codes::INVALID_CONFIG, "invalid_config".to_owned())
    );
}

/// A modern server requiring a capability the host did not declare: its error keeps its
/// code and data, with the kind added.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_capability_keeps_the_servers_code() {
    let cluster = cluster(Preset::Strict, ClusterEra::Modern, None).await;
    let mut host = Host::new(bridge(&cluster.url()).build().unwrap());
    host.initialize(LEGACY, json!({})).await;
    let answer = host
        .request(
            "tools/call",
            tool_call("confirm", json!({"question": "ok?"}), tagged("no-elicit")),
        )
        .await;
    let (code, kind) = error_of(&answer);
    assert_eq!(
        (code, kind.as_str()),
        (-32021, "missing_capability"),
        "{answer}"
    );
    let oracle = finish(host, cluster).await;
    assert_eq!(oracle.executions_tagged("no-elicit").count(), 0);
}

// ---- cancellation ------------------------------------------------------------------------

/// A request and its cancel handed to the bridge back to back, the cancel's future run first
/// (as a host SDK's skin that spawns each message's future may run them): the request is
/// never sent, and never answered.
#[tokio::test]
async fn a_cancel_handed_over_right_after_its_request_stops_it_whichever_runs_first() {
    let server = TestServer::start(default_reply).await;
    let mut host = Host::new(bridge(&server.url).build().unwrap());
    host.initialize("2025-06-18", json!({})).await;
    let call = json!({"jsonrpc": "2.0", "id": "c", "method": "tools/call",
        "params": tool_call("t", json!({}), json!({}))});
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": "c"}});
    let sending = host.bridge.send(call);
    let cancelling = host.bridge.send(cancel);
    guarded(cancelling).await.unwrap();
    guarded(sending).await.unwrap();
    // The next request's answer is the next message: the cancelled one got none.
    let ping = host.send("ping", json!({})).await;
    assert_eq!(host.next_message().await["id"], ping);
    server.wait_for(|r| r.is_rpc("ping")).await;
    assert!(
        !server.requests().iter().any(|r| r.is_rpc("tools/call")),
        "the cancelled request reached the server"
    );
}

/// The host cancels a call while the client resumes its cut stream: the resume is dropped,
/// the server is told, nothing is sent again, and the host gets no answer for it.
#[tokio::test]
async fn a_hosts_cancel_stops_the_calls_recovery() {
    let (dropped_tx, mut dropped) = tokio::sync::mpsc::unbounded_channel();
    let server = TestServer::start(move |req| {
        if req.method == Method::GET && req.header("last-event-id").is_some() {
            return sse_open_watched("", dropped_tx.clone());
        }
        if req.is_rpc("tools/call") {
            // One event with an id, then the stream ends without the answer: resume.
            let progress = json!({"jsonrpc": "2.0", "method": "notifications/progress",
                "params": {"progressToken": "p", "progress": 1}});
            return sse_text(sse_event(Some("ev-1"), &progress));
        }
        default_reply(req)
    })
    .await;
    let mut host = Host::new(bridge(&server.url).build().unwrap());
    host.initialize("2025-06-18", json!({})).await;
    let id = host
        .send(
            "tools/call",
            tool_call("t", json!({}), json!({"progressToken": "p"})),
        )
        .await;
    let call = server.wait_for(|r| r.is_rpc("tools/call")).await;
    server
        .wait_for(|r| r.method == Method::GET && r.header("last-event-id") == Some("ev-1"))
        .await;
    host.notify(
        "notifications/cancelled",
        Some(json!({"requestId": id, "reason": "user"})),
    )
    .await;
    let cancelled = server
        .wait_for(|r| r.is_rpc("notifications/cancelled"))
        .await;
    assert_eq!(cancelled.params()["requestId"], call.rpc_id());
    guarded(dropped.recv())
        .await
        .expect("the resume stream was dropped");
    // The next request's answer is the next answer: the cancelled call got none.
    let ping = host.send("ping", json!({})).await;
    let next = loop {
        let m = host.next_message().await;
        if m.get("method").is_none() {
            break m;
        }
    };
    assert_eq!(next["id"], ping);
    let posts = server
        .requests()
        .iter()
        .filter(|r| r.is_rpc("tools/call"))
        .count();
    let resumes = server
        .requests()
        .iter()
        .filter(|r| r.method == Method::GET)
        .count();
    assert_eq!((posts, resumes), (1, 1), "{:?}", server.labels());
}

// ---- idempotency and annotations ---------------------------------------------------------

/// Every `tools/call` stream cut: with the annotations trusted, a call to a tool the last
/// `tools/list` marked read-only is sent again on an unknown outcome (bounded); untrusted,
/// or to a tool not so marked, it is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_annotation_policy_is_opt_in() {
    for trust in [false, true] {
        let cluster = cluster(Preset::Strict, ClusterEra::Legacy, Some(1)).await;
        let mut host = Host::new(
            bridge(&cluster.url())
                .trust_tool_annotations(trust)
                .build()
                .unwrap(),
        );
        host.initialize(LEGACY, json!({})).await;
        host.request("tools/list", json!({})).await;
        let echo = host
            .request(
                "tools/call",
                tool_call("echo", json!({"text": "e"}), tagged("echo")),
            )
            .await;
        assert_eq!(error_of(&echo).1, "outcome_unknown", "{echo}");
        let counter = host
            .request(
                "tools/call",
                tool_call("counter_increment", json!({}), tagged("counter")),
            )
            .await;
        assert_eq!(error_of(&counter).1, "outcome_unknown", "{counter}");
        let oracle = finish(host, cluster).await;
        let sends = if trust {
            1 + ANNOTATED_RESENDS as usize
        } else {
            1
        };
        assert_eq!(
            oracle.executions_tagged("echo").count(),
            sends,
            "trust {trust}"
        );
        assert_eq!(
            oracle.executions_tagged("counter").count(),
            1,
            "trust {trust}"
        );
    }
}

// ---- server requests, MRTR, tasks --------------------------------------------------------

/// A legacy server's sampling request reaches the host under the bridge's id; the host's
/// answer reaches the server under the server's id, and the call completes.
#[tokio::test]
async fn a_sampling_request_goes_to_the_host_and_back() {
    let answered = Arc::new(Notify::new());
    let answer_text = Arc::new(Mutex::new(String::new()));
    let (notify, text) = (answered.clone(), answer_text.clone());
    let server = TestServer::start(move |req| {
        if req.method == Method::POST && req.rpc_id() == json!("srv-7") {
            let reply = req.body.as_ref().unwrap()["result"]["content"]["text"].clone();
            *text.lock().unwrap() = reply.as_str().unwrap_or_default().to_owned();
            notify.notify_one();
            return status(202);
        }
        if req.is_rpc("tools/call") {
            let ask = json!({"jsonrpc": "2.0", "id": "srv-7", "method": "sampling/createMessage",
                "params": {"messages": [{"role": "user", "content": {"type": "text", "text": "2+2?"}}],
                           "maxTokens": 5}});
            let (notify, text, id) = (notify.clone(), text.clone(), req.rpc_id());
            let first: Result<Bytes, std::io::Error> = Ok(Bytes::from(sse_event(None, &ask)));
            let rest = futures::stream::once(async move {
                notify.notified().await;
                let sampled = text.lock().unwrap().clone();
                let result = json!({"jsonrpc": "2.0", "id": id,
                    "result": {"content": [{"type": "text", "text": format!("model said {sampled}")}]}});
                Ok(Bytes::from(sse_event(None, &result)))
            });
            return Response::builder()
                .header("content-type", "text/event-stream")
                .body(Body::from_stream(futures::stream::once(async move { first }).chain(rest)))
                .unwrap();
        }
        default_reply(req)
    })
    .await;
    let mut host = Host::new(bridge(&server.url).build().unwrap());
    host.initialize("2025-06-18", json!({"sampling": {}})).await;
    let init = server.wait_for(|r| r.is_rpc("initialize")).await;
    assert_eq!(init.params()["capabilities"], json!({"sampling": {}}));
    assert_eq!(init.params()["clientInfo"]["name"], "scripted-host");

    let call = host
        .send("tools/call", tool_call("ask", json!({}), json!({})))
        .await;
    let request = host.server_request().await;
    assert_eq!(request["method"], "sampling/createMessage");
    assert_eq!(request["id"], 1, "the bridge's own id: {request}");
    host.bridge
        .send(json!({"jsonrpc": "2.0", "id": request["id"], "result": {
            "role": "assistant", "model": "host-model",
            "content": {"type": "text", "text": "4"}}}))
        .await
        .unwrap();
    let answer = host.answer(&call).await;
    assert_eq!(answer["result"]["content"][0]["text"], "model said 4");
    let reply = server
        .wait_for(|r| r.method == Method::POST && r.rpc_id() == json!("srv-7"))
        .await;
    assert_eq!(reply.body.unwrap()["result"]["model"], "host-model");
}

/// Through rmcp's transport, a server request rmcp cannot read (by-position params, as
/// JSON-RPC allows): it is answered "invalid params" for the host, so the server is not left
/// waiting on a request no one will answer (a 2026-07-28 call would wait out its deadline).
#[tokio::test]
async fn the_rmcp_skin_answers_a_server_request_rmcp_cannot_read() {
    use mcp_resume::bridge::rmcp::ResumeTransport;
    use rmcp::transport::Transport;

    let server = TestServer::start(|req| {
        if req.method == Method::POST && req.rpc_id() == json!("srv-9") {
            return status(202);
        }
        if req.is_rpc("tools/call") {
            let ask = json!({"jsonrpc": "2.0", "id": "srv-9", "method": "acme/ask",
                "params": [1, 2]});
            return support::sse_open(sse_event(None, &ask));
        }
        default_reply(req)
    })
    .await;
    let mut host = Host::new(bridge(&server.url).build().unwrap());
    host.initialize("2025-06-18", json!({})).await;
    let mut transport = ResumeTransport::with_bridge(host.bridge.clone());
    let reading = tokio::spawn(async move { while transport.receive().await.is_some() {} });
    host.send("tools/call", tool_call("ask", json!({}), json!({})))
        .await;
    let reply = tokio::time::timeout(
        Duration::from_secs(10),
        server.wait_for(|r| r.method == Method::POST && r.rpc_id() == json!("srv-9")),
    )
    .await
    .expect("the server's request was answered");
    assert_eq!(reply.body.unwrap()["error"]["code"], -32602);
    guarded(host.bridge.close()).await.unwrap();
    guarded(reading).await.unwrap();
}

/// The server cancels its request: the host is told under the bridge's id, and its late
/// answer goes nowhere.
#[tokio::test]
async fn a_servers_cancellation_reaches_the_host() {
    let forwarded = Arc::new(Notify::new());
    let asked = forwarded.clone();
    let server = TestServer::start(move |req| {
        if req.is_rpc("tools/call") {
            let ask = json!({"jsonrpc": "2.0", "id": "srv-9", "method": "roots/list"});
            let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                "params": {"requestId": "srv-9", "reason": "changed my mind"}});
            let first: Result<Bytes, std::io::Error> = Ok(Bytes::from(sse_event(None, &ask)));
            let asked = asked.clone();
            // The cancellation once the host has the request.
            let then = futures::stream::once(async move {
                asked.notified().await;
                Ok(Bytes::from(sse_event(None, &cancel)))
            });
            let body = futures::stream::once(async move { first })
                .chain(then)
                .chain(futures::stream::pending());
            return Response::builder()
                .header("content-type", "text/event-stream")
                .body(Body::from_stream(body))
                .unwrap();
        }
        default_reply(req)
    })
    .await;
    let mut host = Host::new(bridge(&server.url).build().unwrap());
    host.initialize("2025-06-18", json!({"roots": {"listChanged": true}}))
        .await;
    host.send("tools/call", tool_call("t", json!({}), json!({})))
        .await;
    let ask = host.server_request().await;
    assert_eq!(ask["method"], "roots/list");
    forwarded.notify_one();
    let cancelled = loop {
        let m = host.next_message().await;
        if m["method"] == "notifications/cancelled" {
            break m;
        }
    };
    assert_eq!(cancelled["params"]["requestId"], ask["id"], "{cancelled}");
    host.bridge
        .send(json!({"jsonrpc": "2.0", "id": ask["id"], "result": {"roots": []}}))
        .await
        .unwrap();
    // A request after the late answer reaches the server; the answer never did.
    host.request("ping", json!({})).await;
    server.wait_for(|r| r.is_rpc("ping")).await;
    assert!(
        !server
            .requests()
            .iter()
            .any(|r| r.rpc_id() == json!("srv-9")),
        "{:?}",
        server.labels()
    );
}

/// A server that asks and cancels at line rate while the host reads nothing: the requests
/// that never reached the host are withdrawn without a word to it, so nothing waits to tell
/// it (a task each, before, parked on the full queue for as long as the host stalls).
#[tokio::test]
async fn requests_cancelled_before_the_host_got_them_leave_nothing_waiting() {
    const PAIRS: usize = 2_000;
    let streamed = Arc::new(Notify::new());
    let done = streamed.clone();
    let server = TestServer::start(move |req| {
        if req.is_rpc("tools/call") {
            let mut chunk = String::new();
            for i in 0..PAIRS {
                let ask = json!({"jsonrpc": "2.0", "id": format!("s-{i}"), "method": "roots/list"});
                let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                    "params": {"requestId": format!("s-{i}")}});
                chunk.push_str(&sse_event(None, &ask));
                chunk.push_str(&sse_event(None, &cancel));
            }
            let done = done.clone();
            let body =
                futures::stream::once(async move { Ok::<_, std::io::Error>(Bytes::from(chunk)) })
                    .chain(futures::stream::once(async move {
                        done.notify_one();
                        Ok(Bytes::new())
                    }))
                    .chain(futures::stream::pending());
            return Response::builder()
                .header("content-type", "text/event-stream")
                .body(Body::from_stream(body))
                .unwrap();
        }
        default_reply(req)
    })
    .await;
    let mut host = Host::new(bridge(&server.url).capacity(1).build().unwrap());
    host.initialize("2025-06-18", json!({"roots": {"listChanged": true}}))
        .await;
    let before = tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks();
    host.send("tools/call", tool_call("t", json!({}), json!({})))
        .await;
    // The host reads nothing from here on.
    streamed.notified().await;
    // The client has read the whole chunk once the stream goes on to its end: every pair
    // was handled by then, or is being.
    for _ in 0..100 {
        tokio::task::yield_now().await;
    }
    let alive = tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks();
    assert!(
        alive < before + 64,
        "{alive} tasks alive after {PAIRS} requests asked and cancelled ({before} before)"
    );
}

/// The 2026-07-28 era: an `input_required` round is answered by the host (an elicitation
/// under the bridge's id), and a task is polled to its end: the host sees plain results.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mrtr_rounds_and_tasks_become_plain_results() {
    let cluster = cluster(Preset::Strict, ClusterEra::Modern, None).await;
    let mut host = Host::new(bridge(&cluster.url()).build().unwrap());
    host.initialize(LEGACY, json!({"elicitation": {}})).await;

    let call = host
        .send(
            "tools/call",
            tool_call("confirm", json!({"question": "ship?"}), tagged("confirm")),
        )
        .await;
    let ask = host.server_request().await;
    assert_eq!(ask["method"], "elicitation/create", "{ask}");
    assert_eq!(ask["params"]["message"], "ship?");
    host.bridge
        .send(json!({"jsonrpc": "2.0", "id": ask["id"], "result": {
            "action": "accept", "content": {"confirmed": true}}}))
        .await
        .unwrap();
    let answer = host.answer(&call).await;
    assert_eq!(
        answer["result"]["content"][0]["text"], "confirmed: accept",
        "{answer}"
    );

    let job = host
        .request(
            "tools/call",
            tool_call(
                "batch_job",
                json!({"steps": 2, "delay_ms": 10}),
                tagged("job"),
            ),
        )
        .await;
    let result = &job["result"];
    assert!(result["content"].is_array(), "{job}");
    assert_ne!(result["resultType"], "task", "{job}");
    assert!(result.get("task").is_none(), "{job}");

    let oracle = finish(host, cluster).await;
    assert_eq!(oracle.executions_tagged("confirm").count(), 1);
    assert_eq!(oracle.executions_tagged("job").count(), 1);
}

// ---- bounds ------------------------------------------------------------------------------

/// Capacity 1: a second answer waits for the host to read the first, and a third request
/// waits for it in turn. Nothing is lost: every answer arrives, in order.
#[tokio::test]
async fn both_directions_are_bounded_by_back_pressure() {
    let server = TestServer::start(default_reply).await;
    let mut host = Host::new(bridge(&server.url).capacity(1).build().unwrap());
    host.initialize("2025-06-18", json!({})).await;
    let first = host.send("ping", json!({})).await;
    // Taken once the first answer is queued; its own answer then waits for room.
    let second = host.send("ping", json!({})).await;
    let third = json!({"jsonrpc": "2.0", "id": "third", "method": "ping"});
    let bridge = host.bridge.clone();
    let mut third_send = Box::pin(async move { bridge.send(third).await });
    assert!(
        (&mut third_send).now_or_never().is_none(),
        "a request beyond the bound waits"
    );
    assert_eq!(host.next_message().await["id"], first);
    guarded(third_send).await.unwrap();
    assert_eq!(host.next_message().await["id"], second);
    assert_eq!(host.next_message().await["id"], "third");
    let pings = server
        .requests()
        .iter()
        .filter(|r| r.is_rpc("ping"))
        .count();
    assert_eq!(pings, 3);
    assert!(matches!(
        Bridge::builder("http://127.0.0.1:1/mcp").capacity(0).build(),
        Err(e) if e.kind() == ErrorKind::InvalidConfig
    ));
}

/// Requests in flight are bounded too: with both places taken by calls the server holds, a
/// third waits until the host cancels one.
#[tokio::test]
async fn requests_in_flight_are_bounded() {
    let server = TestServer::start(|req| {
        if req.is_rpc("tools/call") {
            return hang();
        }
        default_reply(req)
    })
    .await;
    let mut host = Host::new(bridge(&server.url).capacity(2).build().unwrap());
    host.initialize("2025-06-18", json!({})).await;
    let first = host
        .send("tools/call", tool_call("t", json!({}), json!({})))
        .await;
    host.send("tools/call", tool_call("t", json!({}), json!({})))
        .await;
    let ping = json!({"jsonrpc": "2.0", "id": "p", "method": "ping"});
    let bridge = host.bridge.clone();
    let mut waiting = Box::pin(async move { bridge.send(ping).await });
    assert!((&mut waiting).now_or_never().is_none());
    host.notify("notifications/cancelled", Some(json!({"requestId": first})))
        .await;
    guarded(waiting).await.unwrap();
    assert_eq!(host.next_message().await["id"], "p");
    server.wait_for(|r| r.is_rpc("ping")).await;
}

/// Closing the bridge ends a `send` waiting for a place with `closed`, though the place never
/// frees (the call holding it cannot queue its answer: a ping's answer sits unread), so a
/// host's pending send settles and lets the bridge go.
#[tokio::test]
async fn closing_ends_a_send_waiting_for_a_place() {
    let (server, mut host) = host_of_hanging_tools(Duration::from_secs(5), 1).await;
    host.send("ping", json!({})).await;
    // Taken once the ping's answer is queued.
    host.send("tools/call", tool_call("t", json!({}), json!({})))
        .await;
    server.wait_for(|r| r.is_rpc("tools/call")).await;
    let bridge = host.bridge.clone();
    let third = json!({"jsonrpc": "2.0", "id": "third", "method": "ping"});
    let mut waiting = Box::pin(async move { bridge.send(third).await });
    assert!((&mut waiting).now_or_never().is_none());
    guarded(host.bridge.close()).await.unwrap();
    let sent = guarded(waiting).await;
    assert!(
        matches!(&sent, Err(e) if e.kind() == ErrorKind::Closed),
        "{sent:?}"
    );
    assert!(!server.requests().iter().any(|r| r.rpc_id() == "third"));
}

/// A server whose tool calls never answer, and an initialized host bridged to it with
/// `timeout` per call and `capacity`.
async fn host_of_hanging_tools(timeout: Duration, capacity: usize) -> (TestServer, Host) {
    let server = TestServer::start(|req| {
        if req.is_rpc("tools/call") {
            return hang();
        }
        default_reply(req)
    })
    .await;
    let mut host = Host::new(
        bridge(&server.url)
            .configure(|c| c.call_timeout(timeout))
            .capacity(capacity)
            .build()
            .unwrap(),
    );
    host.initialize("2025-06-18", json!({})).await;
    (server, host)
}

/// A host that drops its bridge (every clone) without closing it, a call in flight: the calls
/// are abandoned with it, so the session closes then (its DELETE), not once the last call's
/// deadline has passed with nobody left to read its answer.
#[tokio::test]
async fn dropping_the_bridge_abandons_its_calls_and_closes_the_session() {
    let (server, mut host) = host_of_hanging_tools(Duration::from_secs(60), DEFAULT_CAPACITY).await;
    host.send("tools/call", tool_call("t", json!({}), json!({})))
        .await;
    server.wait_for(|r| r.is_rpc("tools/call")).await;
    drop(host);
    let deleted = tokio::time::timeout(
        Duration::from_secs(10),
        server.wait_for(|r| r.method == Method::DELETE),
    )
    .await;
    assert!(
        deleted.is_ok(),
        "the session stayed open: {:?}",
        server.labels()
    );
}

/// A host that reuses the id of a request still in flight gets both answered: the second at
/// once with "invalid request", the first with its own outcome (here its deadline).
#[tokio::test]
async fn a_reused_request_id_gets_both_answers() {
    let (server, mut host) =
        host_of_hanging_tools(Duration::from_millis(300), DEFAULT_CAPACITY).await;
    let id = json!("reused");
    host.send_with_id(
        id.clone(),
        "tools/call",
        tool_call("t", json!({}), json!({})),
    )
    .await;
    server.wait_for(|r| r.is_rpc("tools/call")).await;
    host.send_with_id(id.clone(), "ping", json!({})).await;
    let second = host.answer(&id).await;
    assert_eq!(
        second["error"]["code"],
        codes::INVALID_REQUEST,
        "the second request is refused at once: {second}"
    );
    let first = host.answer(&id).await;
    assert_eq!(error_of(&first).1, "timeout", "{first}");
    // The second request never reached the server.
    assert!(server.requests().iter().all(|r| !r.is_rpc("ping")));
}

/// A host that hands the bridge the same request twice (its id still in flight): the copy is
/// the request the host already made, so it is neither sent nor refused, and the host's one
/// request gets one answer, its call's own. A refusal would reach the host first, telling
/// it "invalid request" of a call that runs (and may be sent again).
#[tokio::test]
async fn the_same_request_handed_over_twice_gets_one_answer_its_own() {
    let (server, mut host) =
        host_of_hanging_tools(Duration::from_millis(300), DEFAULT_CAPACITY).await;
    let id = json!("twice");
    let params = tool_call("t", json!({"n": 1}), json!({}));
    host.send_with_id(id.clone(), "tools/call", params.clone())
        .await;
    server.wait_for(|r| r.is_rpc("tools/call")).await;
    host.send_with_id(id.clone(), "tools/call", params).await;
    let answer = host.answer(&id).await;
    assert_eq!(error_of(&answer).1, "timeout", "{answer}");
    answered_once_and_ran_once(&server, &mut host).await;
}

/// Nothing more comes under the id the host handed over twice (the next request's answer is
/// the next message), and the server ran its call once.
async fn answered_once_and_ran_once(server: &TestServer, host: &mut Host) {
    let ping = host.send("ping", json!({})).await;
    let next = host.next_message().await;
    assert_eq!(next["id"], ping, "{next}");
    let calls = server
        .requests()
        .iter()
        .filter(|r| r.is_rpc("tools/call"))
        .count();
    assert_eq!(calls, 1, "{:?}", server.labels());
}

/// Another request under an id in flight, whose arguments a weak (unkeyed, linear) hash
/// could not tell from the first's: it is refused as any other reuse of the id, never taken
/// for the same request handed over again (left unanswered while the host read the first
/// call's answer as its own).
#[tokio::test]
async fn another_request_under_an_id_in_flight_is_refused_whatever_its_digest() {
    let (server, mut host) =
        host_of_hanging_tools(Duration::from_millis(300), DEFAULT_CAPACITY).await;
    let id = json!("lookalike");
    // Under an unkeyed multiply-and-add hash, [1, b - K*K] ends in the state [0, b] does.
    const K: u64 = 0xf1357aea2e62a9c5;
    let lookalike = 0u64.wrapping_sub(K.wrapping_mul(K));
    let first = tool_call("t", json!({"n": [0u64, 0u64]}), json!({}));
    let second = tool_call("t", json!({"n": [1u64, lookalike]}), json!({}));
    host.send_with_id(id.clone(), "tools/call", first).await;
    server.wait_for(|r| r.is_rpc("tools/call")).await;
    host.send_with_id(id.clone(), "tools/call", second).await;
    let refusal = tokio::time::timeout(Duration::from_millis(200), host.answer(&id))
        .await
        .expect("the second request is answered at once");
    assert_eq!(
        refusal["error"]["code"],
        codes::INVALID_REQUEST,
        "{refusal}"
    );
    let answer = host.answer(&id).await;
    assert_eq!(error_of(&answer).1, "timeout", "{answer}");
    let calls = server
        .requests()
        .iter()
        .filter(|r| r.is_rpc("tools/call"))
        .count();
    assert_eq!(calls, 1, "{:?}", server.labels());
}

/// The same request handed over again while the first is in flight, the copy waiting for a
/// place (the bridge at its capacity): it is the request the host already made, whenever it
/// gets its place, so it is never sent, and the host's one request gets one answer. Taken
/// as a new request once the first was answered, it ran the call a second time and answered
/// the id twice.
#[tokio::test]
async fn the_same_request_handed_over_twice_at_capacity_runs_once() {
    let (server, mut host) = host_of_hanging_tools(Duration::from_millis(300), 1).await;
    let id = json!("twice");
    let message = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": tool_call("t", json!({"n": 1}), json!({}))});
    guarded(host.bridge.send(message.clone())).await.unwrap();
    server.wait_for(|r| r.is_rpc("tools/call")).await;
    // Handed over now, taken (the send settles) once the first call's place frees.
    let bridge = host.bridge.clone();
    let copy = tokio::spawn(bridge.send(message));
    let answer = host.answer(&id).await;
    assert_eq!(error_of(&answer).1, "timeout", "{answer}");
    guarded(copy).await.unwrap().unwrap();
    answered_once_and_ran_once(&server, &mut host).await;
}

/// A request reusing the id of one whose answer waits for room in the host's queue: once the
/// first answer is queued the id is the host's to use again, so the refusal of the reuse must
/// not follow it, or it answers the host's next request under the id (a call that then runs
/// while the host reads "invalid request", and may send it again).
#[tokio::test]
async fn a_refusal_never_answers_a_later_request_under_the_id() {
    let server = TestServer::start(default_reply).await;
    let mut host = Host::new(bridge(&server.url).capacity(2).build().unwrap());
    host.initialize("2025-06-18", json!({})).await;
    // Answered by the bridge at once, without the network: an invalid key.
    let invalid = || tool_call("t", json!({}), json!({ IDEMPOTENCY_META_KEY: 3 }));
    host.send_with_id(json!("f1"), "tools/call", invalid())
        .await;
    host.send_with_id(json!("f2"), "tools/call", invalid())
        .await;
    // Taken once both answers above are queued: the queue is full, so this answer waits.
    let id = json!("x");
    host.send_with_id(id.clone(), "tools/call", invalid()).await;
    host.send_with_id(id.clone(), "ping", json!({})).await;
    assert_eq!(host.next_message().await["id"], "f1");
    assert_eq!(host.next_message().await["id"], "f2");
    let first = host.answer(&id).await;
    assert_eq!(error_of(&first).0, codes::INVALID_CONFIG, "{first}");
    // The host got its answer under the id and uses it again.
    host.send_with_id(id.clone(), "ping", json!({})).await;
    let next = host.answer(&id).await;
    assert_eq!(next["result"], json!({}), "{next}");
    server.wait_for(|r| r.is_rpc("ping")).await;
}

/// An id the host cancelled may be used again at once: the new request runs and is answered,
/// though the cancelled one's task ends after it took the id again.
#[tokio::test]
async fn a_cancelled_id_used_again_gets_its_answer() {
    let (server, mut host) = host_of_hanging_tools(Duration::from_secs(5), DEFAULT_CAPACITY).await;
    let id = json!(1);
    host.send_with_id(
        id.clone(),
        "tools/call",
        tool_call("slow", json!({}), json!({})),
    )
    .await;
    server.wait_for(|r| r.is_rpc("tools/call")).await;
    host.notify("notifications/cancelled", Some(json!({"requestId": 1})))
        .await;
    host.send_with_id(id.clone(), "ping", json!({})).await;
    let answer = host.answer(&id).await;
    assert_eq!(answer["result"], json!({}), "{answer}");
    assert!(server.requests().iter().any(|r| r.is_rpc("ping")));
}

/// A stale cancel (its request long answered: here the host's `initialize`, id 1) handed to
/// the bridge right before a new request that reuses the id: the cancel reaches only what was
/// handed over before it, so the new request is answered whichever future runs first.
#[tokio::test]
async fn a_stale_cancel_spares_the_next_request_under_its_id_whichever_runs_first() {
    let server = TestServer::start(default_reply).await;
    let mut host = Host::new(bridge(&server.url).build().unwrap());
    host.initialize("2025-06-18", json!({})).await;
    let id = json!(1);
    for cancel_first in [false, true] {
        let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": id}});
        let ping = json!({"jsonrpc": "2.0", "id": id, "method": "ping", "params": {}});
        let cancelling = host.bridge.send(cancel);
        let sending = host.bridge.send(ping);
        if cancel_first {
            guarded(cancelling).await.unwrap();
            guarded(sending).await.unwrap();
        } else {
            guarded(sending).await.unwrap();
            guarded(cancelling).await.unwrap();
        }
        let answer = host.answer(&id).await;
        assert_eq!(answer["result"], json!({}), "cancel first: {cancel_first}");
    }
}

/// A call whose answer waits for room in the host's queue, cancelled, its id then used
/// again: the new request gets its own answer, never the cancelled call's.
#[tokio::test]
async fn a_cancelled_answer_waiting_for_room_never_answers_the_ids_next_request() {
    let (dropped_tx, mut dropped) = tokio::sync::mpsc::unbounded_channel();
    let server = TestServer::start(move |req| {
        if req.is_rpc("tools/call") {
            // Two progress notifications fill the host's queue, then the answer; the stream
            // stays open until the client lets it go, having read the answer.
            let progress = |n: u32| {
                json!({"jsonrpc": "2.0", "method": "notifications/progress",
                    "params": {"progressToken": "p", "progress": n}})
            };
            let answer = json!({"content": [{"type": "text", "text": "the tool's answer"}]});
            let events = [progress(1), progress(2), result_msg(req, answer)]
                .iter()
                .map(|m| sse_event(None, m))
                .collect::<String>();
            return sse_open_watched(events, dropped_tx.clone());
        }
        default_reply(req)
    })
    .await;
    let mut host = Host::new(bridge(&server.url).capacity(2).build().unwrap());
    host.initialize("2025-06-18", json!({})).await;
    let id = json!("reused");
    host.send_with_id(
        id.clone(),
        "tools/call",
        tool_call("t", json!({}), json!({"progressToken": "p"})),
    )
    .await;
    guarded(dropped.recv())
        .await
        .expect("the client let the answer's stream go");
    host.notify("notifications/cancelled", Some(json!({"requestId": id})))
        .await;
    host.send_with_id(id.clone(), "ping", json!({})).await;
    let answer = host.answer(&id).await;
    assert_eq!(
        answer["result"],
        json!({}),
        "{answer} after {:?}",
        host.seen
    );
    assert_eq!(
        host.notifications(),
        ["notifications/progress", "notifications/progress"]
    );
    // Nothing more under the id: the next request's answer is the next message.
    let ping = host.send("ping", json!({})).await;
    let next = host.next_message().await;
    assert_eq!(next["id"], ping, "{next}");
}

/// A host's cancel reaches a request still waiting for a place (rmcp's and the TypeScript
/// SDK's timeouts send it while their `send` waits): the waiting `send` returns without taking
/// it, it is never sent, and the host gets no answer for it.
#[tokio::test]
async fn a_request_cancelled_while_it_waits_for_a_place_is_never_sent() {
    let (server, mut host) = host_of_hanging_tools(Duration::from_secs(5), 1).await;
    let first = host
        .send("tools/call", tool_call("t", json!({}), json!({})))
        .await;
    server.wait_for(|r| r.is_rpc("tools/call")).await;
    let second = json!({"jsonrpc": "2.0", "id": "b", "method": "tools/call",
        "params": tool_call("t", json!({}), json!({}))});
    let bridge = host.bridge.clone();
    let mut waiting = Box::pin(async move { bridge.send(second).await });
    assert!(
        (&mut waiting).now_or_never().is_none(),
        "the second call waits for the first's place"
    );
    let waiting = tokio::spawn(waiting);
    host.notify("notifications/cancelled", Some(json!({"requestId": "b"})))
        .await;
    host.notify("notifications/cancelled", Some(json!({"requestId": first})))
        .await;
    guarded(waiting).await.unwrap().unwrap();
    // The place is free: the next request is answered, and nothing came for "b".
    host.request("ping", json!({})).await;
    assert!(host.seen.iter().all(|m| m["id"] != "b"), "{:?}", host.seen);
    let calls = server
        .requests()
        .iter()
        .filter(|r| r.is_rpc("tools/call"))
        .count();
    assert_eq!(calls, 1, "{:?}", server.labels());
}

/// Annotation-trusted re-sends share the call's one deadline: each send of a read-only tool
/// ends `OutcomeUnknown` after 1 s, and a call allowed 1.5 s is sent twice, the second send
/// ended by the deadline, not three times (a third send could start only after 2 s).
#[tokio::test]
async fn annotated_resends_share_one_deadline() {
    let server = TestServer::start(|req| {
        if req.is_rpc("tools/list") {
            return json_result(
                req,
                json!({"tools": [{"name": "read", "inputSchema": {"type": "object"},
                    "annotations": {"readOnlyHint": true}}]}),
            );
        }
        if req.is_rpc("tools/call") {
            // The answer's stream breaks after 1 s, before any event.
            let cut = futures::stream::once(async {
                tokio::time::sleep(Duration::from_secs(1)).await;
                Err::<Bytes, std::io::Error>(std::io::Error::other("cut"))
            });
            return Response::builder()
                .header("content-type", "text/event-stream")
                .body(Body::from_stream(cut))
                .unwrap();
        }
        default_reply(req)
    })
    .await;
    let mut host = Host::new(
        bridge(&server.url)
            .trust_tool_annotations(true)
            .configure(|c| c.call_timeout(Duration::from_millis(1500)))
            .build()
            .unwrap(),
    );
    host.initialize("2025-06-18", json!({})).await;
    host.request("tools/list", json!({})).await;
    let answer = host
        .request("tools/call", tool_call("read", json!({}), json!({})))
        .await;
    assert_eq!(answer["error"]["data"]["kind"], "timeout", "{answer}");
    let sends = server
        .requests()
        .iter()
        .filter(|r| r.is_rpc("tools/call"))
        .count();
    assert_eq!(
        sends,
        2,
        "re-sent once, then ended by the one deadline: {:?}",
        server.labels()
    );
}

/// A call re-sent on its tool's annotation after its first send was cut, the re-send then
/// refused before it could run (a 429 asking for longer than the call has left): the first
/// send may have run, so the host hears `mayHaveRun`, never that the call did not run.
#[tokio::test]
async fn a_refused_resend_still_says_the_first_send_may_have_run() {
    // A 429 asking for longer than the call has left; a 400 whose body is a JSON-RPC error
    // (as the TypeScript SDK answers a request it refuses), read as the server's error.
    let refusals: [fn() -> Response<Body>; 2] = [
        || {
            let mut refused = status(429);
            refused
                .headers_mut()
                .insert("retry-after", HeaderValue::from_static("60"));
            refused
        },
        || {
            Response::builder()
                .status(400)
                .header("content-type", "application/json")
                .body(Body::from(
                    r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":"Bad Request"}}"#,
                ))
                .unwrap()
        },
    ];
    for refusal in refusals {
        let calls = Arc::new(AtomicUsize::new(0));
        let server = TestServer::start(move |req| {
            if req.is_rpc("tools/list") {
                return json_result(
                    req,
                    json!({"tools": [{"name": "inc", "inputSchema": {"type": "object"},
                        "annotations": {"idempotentHint": true}}]}),
                );
            }
            if req.is_rpc("tools/call") {
                if calls.fetch_add(1, Ordering::SeqCst) == 0 {
                    // A comment, then the stream breaks: sent, and never answered.
                    let body = futures::stream::iter([
                        Ok(Bytes::from(": working\n\n")),
                        Err::<Bytes, _>(std::io::Error::other("cut")),
                    ]);
                    return Response::builder()
                        .header("content-type", "text/event-stream")
                        .body(Body::from_stream(body))
                        .unwrap();
                }
                return refusal();
            }
            default_reply(req)
        })
        .await;
        let mut host = Host::new(
            bridge(&server.url)
                .trust_tool_annotations(true)
                .build()
                .unwrap(),
        );
        host.initialize("2025-06-18", json!({})).await;
        host.request("tools/list", json!({})).await;
        let answer = host
            .request("tools/call", tool_call("inc", json!({}), json!({})))
            .await;
        let sends = server
            .requests()
            .iter()
            .filter(|r| r.is_rpc("tools/call"))
            .count();
        assert_eq!(sends, 2, "{:?}", server.labels());
        assert_eq!(answer["error"]["data"]["mayHaveRun"], true, "{answer}");
    }
}

/// A call to a tool listed as idempotent whose outcome a re-initialization made unknown, on
/// a server whose capabilities changed with it: the annotation came from a server that is
/// gone, so the call is not sent again (the new server's tool may run twice).
#[tokio::test]
async fn annotations_of_a_replaced_server_send_nothing_again() {
    let seen = Arc::new(Mutex::new(0));
    let server = TestServer::start(move |req| {
        if req.is_rpc("initialize") {
            return numbered_session(req, &seen, |n| json!({"tools": {"listChanged": n > 1}}));
        }
        if req.is_rpc("tools/list") {
            return json_result(
                req,
                json!({"tools": [{"name": "inc", "inputSchema": {"type": "object"},
                    "annotations": {"idempotentHint": true}}]}),
            );
        }
        let first = req.header("mcp-session-id") == Some(&format!("{SESSION_ID}-1"));
        if first && req.is_rpc("tools/call") {
            // Its priming event, then the stream breaks (a while later: a reset at once may
            // overtake the event).
            let body = futures::stream::iter([Ok(Bytes::from("id: ev-1\ndata: \n\n"))]).chain(
                futures::stream::once(async {
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    Err::<Bytes, _>(std::io::Error::other("cut"))
                }),
            );
            return Response::builder()
                .header("content-type", "text/event-stream")
                .body(Body::from_stream(body))
                .unwrap();
        }
        if first && req.method == Method::GET {
            // The resume: the session is gone.
            return status(404);
        }
        default_reply(req)
    })
    .await;
    let mut host = Host::new(
        bridge(&server.url)
            .trust_tool_annotations(true)
            .build()
            .unwrap(),
    );
    host.initialize(LEGACY, json!({})).await;
    host.request("tools/list", json!({})).await;
    let answer = host
        .request("tools/call", tool_call("inc", json!({}), json!({})))
        .await;
    assert_eq!(error_of(&answer).1, "outcome_unknown", "{answer}");
    let calls = server
        .requests()
        .iter()
        .filter(|r| r.is_rpc("tools/call"))
        .count();
    assert_eq!(calls, 1, "{:?}", server.labels());
}

/// A 2026-07-28 call to a tool listed read-only, whose input the host refused (every
/// `elicitation/create` answered with an error): the call ends `outcome_unknown`, may have
/// run (the server took a round), and is not sent again on its annotation: a re-send would
/// start the call over and ask the host the same thing again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_whose_input_the_host_refused_is_not_sent_again() {
    let cluster = cluster(Preset::Strict, ClusterEra::Modern, None).await;
    let mut host = Host::new(
        bridge(&cluster.url())
            .trust_tool_annotations(true)
            .build()
            .unwrap(),
    );
    host.initialize(LEGACY, json!({"elicitation": {}})).await;
    let list = host.request("tools/list", json!({})).await;
    let confirm = list["result"]["tools"]
        .as_array()
        .and_then(|tools| tools.iter().find(|t| t["name"] == "confirm"))
        .unwrap_or_else(|| panic!("no confirm tool: {list}"));
    assert_eq!(confirm["annotations"]["readOnlyHint"], true, "{confirm}");

    let call = host
        .send(
            "tools/call",
            tool_call("confirm", json!({"question": "ship?"}), tagged("confirm")),
        )
        .await;
    let mut asked = Vec::new();
    let answer = loop {
        let message = host.next_message().await;
        if message.get("method").is_some() && message.get("id").is_some() {
            host.bridge
                .send(json!({"jsonrpc": "2.0", "id": message["id"], "error": {
                    "code": -32603, "message": "the user is away"}}))
                .await
                .unwrap();
            asked.push(message);
        } else if message.get("method").is_none() && message.get("id") == Some(&call) {
            break message;
        }
    };
    assert_eq!(asked.len(), 1, "the host was asked again: {asked:?}");
    assert_eq!(asked[0]["method"], "elicitation/create", "{asked:?}");
    assert_eq!(error_of(&answer).1, "outcome_unknown", "{answer}");
    assert_eq!(answer["error"]["data"]["mayHaveRun"], true, "{answer}");
    // The host can tell it from an interruption: not one to send again.
    assert_eq!(answer["error"]["data"]["inputRefused"], true, "{answer}");
    finish(host, cluster).await;
}

/// Two re-initializations that change the server's capabilities while the host reads
/// nothing: the host's session state is set again on each new session, although the
/// announcements of the first change wait for room in the host's queue.
#[tokio::test]
async fn session_state_is_restored_while_announcements_wait_for_the_host() {
    let seen = Arc::new(Mutex::new(0));
    let server = TestServer::start(move |req| {
        if req.is_rpc("initialize") {
            return numbered_session(req, &seen, |n| {
                json!({"tools": {"listChanged": n > 1}, "prompts": {"listChanged": n > 2},
                    "logging": {}})
            });
        }
        if req.is_rpc("logging/setLevel") {
            return json_result(req, json!({}));
        }
        // The first two sessions expire before the call.
        let session = req.header("mcp-session-id").unwrap_or_default();
        if req.is_rpc("tools/call")
            && [format!("{SESSION_ID}-1"), format!("{SESSION_ID}-2")].contains(&session.to_owned())
        {
            return status(404);
        }
        default_reply(req)
    })
    .await;
    let mut host = Host::new(bridge(&server.url).capacity(1).build().unwrap());
    host.initialize(LEGACY, json!({})).await;
    host.request("logging/setLevel", json!({"level": "debug"}))
        .await;
    // From here the host reads nothing: one announcement fills its queue.
    host.send(
        "tools/call",
        tool_call("echo", json!({"text": "t"}), json!({})),
    )
    .await;
    let third = format!("{SESSION_ID}-3");
    let level = server
        .wait_for(|r| {
            r.is_rpc("logging/setLevel") && r.header("mcp-session-id") == Some(third.as_str())
        })
        .await;
    assert_eq!(level.params()["level"], "debug");
}
