//! The driver under faults: dropped futures, deadlines, hanging servers, refused
//! connections, broken and hostile bodies, and resumes that must carry every header.

use crate::support;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::http::Method;
use futures::StreamExt;
use mcp_resume::{Client, ErrorKind, ReconnectPolicy, ToolCall};
use serde_json::json;
use support::*;

fn fast_policy(max_attempts: u32) -> ReconnectPolicy {
    ReconnectPolicy::default()
        .with_initial_delay(Duration::from_millis(10))
        .with_max_delay(Duration::from_millis(50))
        .with_max_attempts(max_attempts)
}

fn client_for(server: &TestServer) -> mcp_resume::ClientBuilder {
    Client::builder(&server.url)
        .bearer_token("secret-token")
        .header("x-foo", "bar")
        .call_timeout(Duration::from_secs(10))
        .reconnect(fast_policy(4))
        .jitter_seed(3)
}

fn hang_on_tool_calls(req: &Recorded) -> axum::response::Response {
    if req.is_rpc("tools/call") {
        return hang();
    }
    default_reply(req)
}

#[tokio::test]
async fn dropping_a_call_future_sends_notifications_cancelled() {
    let server = TestServer::start(hang_on_tool_calls).await;
    let client = client_for(&server).build().unwrap();
    guarded(client.connect()).await.unwrap();

    let call = client.call_tool(ToolCall::new("slow", json!({})));
    let received = async {
        let post = server.wait_for(|r| r.is_rpc("tools/call")).await;
        post.rpc_id()
    };
    // The call is dropped as soon as the server has it.
    let request_id = tokio::select! {
        _ = call => panic!("the call cannot complete: the server never answers"),
        id = received => id,
    };
    let cancel = server
        .wait_for(|r| r.is_rpc("notifications/cancelled"))
        .await;
    assert_eq!(cancel.params()["requestId"], request_id);
    assert_eq!(cancel.header("authorization"), Some("Bearer secret-token"));
    assert_eq!(cancel.header("mcp-session-id"), Some(SESSION_ID));
    // The session is still usable.
    guarded(client.ping()).await.unwrap();
}

#[tokio::test]
async fn deadline_passes_with_timeout_and_a_cancellation() {
    let server = TestServer::start(hang_on_tool_calls).await;
    let client = client_for(&server).build().unwrap();
    let err = guarded(
        client.call_tool(ToolCall::new("slow", json!({})).timeout(Duration::from_millis(300))),
    )
    .await
    .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    let call = server.wait_for(|r| r.is_rpc("tools/call")).await;
    let cancel = server
        .wait_for(|r| r.is_rpc("notifications/cancelled"))
        .await;
    assert_eq!(cancel.params()["requestId"], call.rpc_id());
}

/// A timeout beyond what the clock can represent ("no timeout") means practically never,
/// for the handshake as for calls: not a deadline that has passed already.
#[tokio::test]
async fn the_largest_call_timeout_is_no_timeout() {
    let server = TestServer::start(default_reply).await;
    let client = client_for(&server)
        .call_timeout(Duration::MAX)
        .build()
        .unwrap();
    guarded(client.connect()).await.unwrap();
    let result = guarded(client.call_tool(ToolCall::new("echo", json!({"text": "x"}))))
        .await
        .unwrap();
    assert_eq!(result.text(), "x");
}

#[tokio::test]
async fn a_server_that_never_answers_initialize_times_out() {
    let server = TestServer::start(|req| {
        if req.is_rpc("initialize") {
            return hang();
        }
        default_reply(req)
    })
    .await;
    let client = client_for(&server)
        .call_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let err = guarded(client.connect()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
}

#[tokio::test]
async fn a_silent_open_stream_times_out() {
    let server = TestServer::start(|req| {
        if req.is_rpc("tools/call") {
            // Head sent, then nothing at all, connection held open.
            return sse_open(String::new());
        }
        default_reply(req)
    })
    .await;
    let client = client_for(&server).build().unwrap();
    let err = guarded(
        client.call_tool(ToolCall::new("slow", json!({})).timeout(Duration::from_millis(300))),
    )
    .await
    .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
}

#[tokio::test]
async fn first_connect_refused_is_a_transport_error() {
    // Bound but not listening: connections are refused.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let port = socket.local_addr().unwrap().port();
    let client = Client::builder(format!("http://127.0.0.1:{port}/mcp?token=s3cret"))
        .reconnect(fast_policy(2))
        .build()
        .unwrap();
    let err = guarded(client.connect()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Transport, "{err}");
    // The query may carry credentials: it stays out of error messages.
    assert!(!format!("{err} {err:?}").contains("s3cret"), "{err:?}");
    drop(socket);
}

/// Resolves `mcp.test` to the server, or to an address nobody listens on (connection
/// refused) for the next `refuse` connection attempts. The client pools no connections, so
/// every request resolves.
struct Gate {
    server: SocketAddr,
    refuse: AtomicUsize,
    refused: AtomicUsize,
}

impl reqwest::dns::Resolve for Gate {
    fn resolve(&self, _name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let refuse = self
            .refuse
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        let addr = if refuse {
            self.refused.fetch_add(1, Ordering::SeqCst);
            // Loopback, but not the address the server is bound to.
            SocketAddr::from(([127, 0, 0, 2], self.server.port()))
        } else {
            self.server
        };
        let addrs: reqwest::dns::Addrs = Box::new(std::iter::once(addr));
        Box::pin(async move { Ok(addrs) })
    }
}

async fn gated(server: &TestServer) -> (Arc<Gate>, mcp_resume::ClientBuilder) {
    let gate = Arc::new(Gate {
        server: SocketAddr::from(([127, 0, 0, 1], server.port)),
        refuse: AtomicUsize::new(0),
        refused: AtomicUsize::new(0),
    });
    let http = reqwest::Client::builder()
        .dns_resolver(gate.clone())
        .pool_max_idle_per_host(0)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let builder = Client::builder(format!("http://mcp.test:{}/mcp", server.port))
        .http_client(http)
        .bearer_token("secret-token")
        .open_listen_stream(false)
        .call_timeout(Duration::from_secs(10))
        .jitter_seed(5);
    (gate, builder)
}

#[tokio::test]
async fn refused_posts_are_re_sent_after_backoff_even_without_a_key() {
    let server = TestServer::start(default_reply).await;
    let (gate, builder) = gated(&server).await;
    let client = builder.reconnect(fast_policy(5)).build().unwrap();
    guarded(client.connect()).await.unwrap();

    gate.refuse.store(2, Ordering::SeqCst);
    let r = guarded(client.call_tool(ToolCall::new("echo", json!({"text": "late"}))))
        .await
        .unwrap();
    assert_eq!(r.text(), "late");
    assert_eq!(gate.refused.load(Ordering::SeqCst), 2);
    let calls: Vec<_> = server
        .requests()
        .into_iter()
        .filter(|r| r.is_rpc("tools/call"))
        .collect();
    assert_eq!(calls.len(), 1, "refused attempts never reached the server");
    assert_eq!(
        calls[0].header("authorization"),
        Some("Bearer secret-token")
    );
}

#[tokio::test]
async fn refused_posts_fail_with_transport_after_the_attempt_cap() {
    let server = TestServer::start(default_reply).await;
    let (gate, builder) = gated(&server).await;
    let client = builder.reconnect(fast_policy(3)).build().unwrap();
    guarded(client.connect()).await.unwrap();

    gate.refuse.store(usize::MAX, Ordering::SeqCst);
    let err = guarded(client.call_tool(ToolCall::new("echo", json!({"text": "never"}))))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Transport, "{err}");
    let refused = gate.refused.load(Ordering::SeqCst);
    assert!(
        (2..=4).contains(&refused),
        "bounded attempts, got {refused}"
    );
    assert!(!server.requests().iter().any(|r| r.is_rpc("tools/call")));
}

#[tokio::test]
async fn a_cut_stream_is_resumed_with_every_header() {
    let posted = Arc::new(std::sync::Mutex::new(serde_json::Value::Null));
    let seen = posted.clone();
    let server = TestServer::start(move |req| {
        if req.is_rpc("tools/call") {
            *seen.lock().unwrap() = req.rpc_id();
            // Priming event, then the stream ends before the response.
            return sse_text("id: ev-1\ndata: \n\n");
        }
        if req.method == Method::GET && req.header("last-event-id").is_some() {
            let id = seen.lock().unwrap().clone();
            let result = json!({"jsonrpc": "2.0", "id": id,
                "result": {"content": [{"type": "text", "text": "resumed"}]}});
            return sse_text(sse_event(Some("ev-2"), &result));
        }
        default_reply(req)
    })
    .await;
    let client = client_for(&server)
        .open_listen_stream(false)
        .build()
        .unwrap();
    guarded(client.connect()).await.unwrap();
    let r = guarded(client.call_tool(ToolCall::new("slow", json!({}))))
        .await
        .unwrap();
    assert_eq!(r.text(), "resumed");
    let posts = server
        .requests()
        .iter()
        .filter(|r| r.is_rpc("tools/call"))
        .count();
    assert_eq!(posts, 1, "resumed, not re-sent");
    let resume = server
        .wait_for(|r| r.method == Method::GET && r.header("last-event-id").is_some())
        .await;
    assert_eq!(resume.header("last-event-id"), Some("ev-1"));
    assert_eq!(resume.header("authorization"), Some("Bearer secret-token"));
    assert_eq!(resume.header("x-foo"), Some("bar"));
    assert_eq!(resume.header("mcp-session-id"), Some(SESSION_ID));
    assert_eq!(resume.header("mcp-protocol-version"), Some(SERVER_VERSION));
    assert_eq!(resume.header("accept"), Some("text/event-stream"));
    assert!(posted.lock().unwrap().is_number());
}

/// An undecodable JSON body: the server broke the protocol after it may have run the call, so
/// the call ends with an unknown outcome (it is unkeyed); never a success or a hang.
#[tokio::test]
async fn malformed_json_fails_the_call() {
    let server = TestServer::start(|req| {
        if req.is_rpc("tools/call") {
            return axum::response::Response::builder()
                .header("content-type", "application/json")
                .body(axum::body::Body::from("{not json"))
                .unwrap();
        }
        default_reply(req)
    })
    .await;
    let client = client_for(&server).build().unwrap();
    let err = guarded(client.call_tool(ToolCall::new("echo", json!({}))))
        .await
        .unwrap_err();
    // The call was accepted and its answer is unreadable: it may have run.
    assert_eq!(err.kind(), ErrorKind::OutcomeUnknown, "{err}");
}

/// A result that cannot be read as a tool result (here more content items than the client
/// reads) is still the server's answer: `Protocol`, and the call ran, so the error says it
/// may have run (an application retrying on "did not run" would run it twice).
#[tokio::test]
async fn an_unreadable_result_says_the_call_may_have_run() {
    let server = TestServer::start(|req| {
        if req.is_rpc("tools/call") {
            let items = vec![0; mcp_resume::client::MAX_CONTENT_ITEMS + 1];
            return json_result(req, json!({ "content": items }));
        }
        default_reply(req)
    })
    .await;
    let client = client_for(&server).build().unwrap();
    let err = guarded(client.call_tool(ToolCall::new("echo", json!({}))))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Protocol, "{err}");
    assert!(err.may_have_run(), "{err}");
}

/// An undecodable SSE message: the stream ends without the response and without an event id.
/// An unknown outcome (the call is unkeyed); never a success or a hang.
#[tokio::test]
async fn malformed_sse_data_fails_the_call() {
    let server = TestServer::start(|req| {
        if req.is_rpc("tools/call") {
            return sse_text("data: {broken\n\n");
        }
        default_reply(req)
    })
    .await;
    let client = client_for(&server).build().unwrap();
    let err = guarded(client.call_tool(ToolCall::new("echo", json!({}))))
        .await
        .unwrap_err();
    // The call was accepted and its answer is unreadable: it may have run.
    assert_eq!(err.kind(), ErrorKind::OutcomeUnknown, "{err}");
}

#[tokio::test]
async fn an_oversized_event_is_too_large() {
    let server = TestServer::start(|req| {
        if req.is_rpc("tools/call") {
            let big = "x".repeat(64 * 1024);
            return sse_open(format!("data: {big}"));
        }
        default_reply(req)
    })
    .await;
    let client = client_for(&server).max_event_size(4096).build().unwrap();
    let err = guarded(client.call_tool(ToolCall::new("echo", json!({}))))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::TooLarge, "{err}");
}

#[tokio::test]
async fn an_oversized_json_body_is_too_large() {
    let server = TestServer::start(|req| {
        if req.is_rpc("tools/call") {
            let big = "y".repeat(64 * 1024);
            return json_result(req, json!({"content": [{"type": "text", "text": big}]}));
        }
        default_reply(req)
    })
    .await;
    let client = client_for(&server).max_body_size(4096).build().unwrap();
    let err = guarded(client.call_tool(ToolCall::new("echo", json!({}))))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::TooLarge, "{err}");
}

/// A 500 after the request reached the server does not prove it did not run: the outcome is
/// unknown, and the error says what was answered.
#[tokio::test]
async fn a_server_error_after_delivery_is_an_unknown_outcome() {
    let server = TestServer::start(|req| {
        if req.is_rpc("tools/call") {
            return status(500);
        }
        default_reply(req)
    })
    .await;
    let client = client_for(&server).build().unwrap();
    let err = guarded(client.call_tool(ToolCall::new("echo", json!({}))))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::OutcomeUnknown, "{err}");
    assert!(err.to_string().contains("HTTP 500"), "{err}");
}

/// A status that proves the request was not processed is the call's answer, sent once.
#[tokio::test]
async fn a_status_that_proves_no_processing_is_a_plain_error() {
    let server = TestServer::start(|req| {
        if req.is_rpc("tools/call") {
            return status(403);
        }
        default_reply(req)
    })
    .await;
    let client = client_for(&server).build().unwrap();
    let err = guarded(client.call_tool(ToolCall::new("echo", json!({}))))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Protocol, "{err}");
    assert!(err.to_string().contains("HTTP 403"), "{err}");
    assert_eq!(
        server
            .requests()
            .iter()
            .filter(|r| r.is_rpc("tools/call"))
            .count(),
        1
    );
}

/// The server's `retry` is a floor for the resume: the driver's timer must not fire early.
#[tokio::test]
async fn the_resume_waits_for_the_servers_retry() {
    let posted = Arc::new(std::sync::Mutex::new(serde_json::Value::Null));
    let seen = posted.clone();
    let server = TestServer::start(move |req| {
        if req.is_rpc("tools/call") {
            *seen.lock().unwrap() = req.rpc_id();
            return sse_text("id: r-1\nretry: 400\ndata: \n\n");
        }
        if req.method == Method::GET && req.header("last-event-id").is_some() {
            let id = seen.lock().unwrap().clone();
            let result = json!({"jsonrpc": "2.0", "id": id, "result": {"content": []}});
            return sse_text(sse_event(Some("r-2"), &result));
        }
        default_reply(req)
    })
    .await;
    let client = client_for(&server)
        .open_listen_stream(false)
        .build()
        .unwrap();
    guarded(client.call_tool(ToolCall::new("slow", json!({}))))
        .await
        .unwrap();
    let post = server.wait_for(|r| r.is_rpc("tools/call")).await;
    let resume = server
        .wait_for(|r| r.method == Method::GET && r.header("last-event-id").is_some())
        .await;
    let waited = resume.at.duration_since(post.at);
    assert!(
        waited >= Duration::from_millis(400),
        "resumed after {waited:?}"
    );
    assert!(waited < Duration::from_secs(3), "resumed after {waited:?}");
}

/// DELETE has no session deadline: the driver bounds it, so `close` cannot hang.
#[tokio::test]
async fn a_hanging_delete_does_not_hang_close() {
    let server = TestServer::start(|req| match req.method {
        Method::DELETE => hang(),
        _ => default_reply(req),
    })
    .await;
    let client = client_for(&server)
        .call_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    guarded(client.connect()).await.unwrap();
    let err = guarded(client.close()).await.unwrap_err();
    assert!(
        matches!(err.kind(), ErrorKind::Transport | ErrorKind::Timeout),
        "{err}"
    );
    server.wait_for(|r| r.method == Method::DELETE).await;
    // Closed all the same.
    assert_eq!(
        guarded(client.ping()).await.unwrap_err().kind(),
        ErrorKind::Closed
    );
}

/// 404 to a POST carrying the session id: a fresh `initialize` without the old id, then the
/// call re-sent on the new session, every request still carrying the app's headers.
#[tokio::test]
async fn session_gone_reinitializes_and_resends_with_every_header() {
    let inits = Arc::new(AtomicUsize::new(0));
    let counter = inits.clone();
    let server = TestServer::start(move |req| {
        if req.is_rpc("initialize") {
            let n = counter.fetch_add(1, Ordering::SeqCst);
            let mut response = default_reply(req);
            let id = format!("sess-{n}");
            response
                .headers_mut()
                .insert("mcp-session-id", id.parse().unwrap());
            return response;
        }
        if req.is_rpc("tools/call") && req.header("mcp-session-id") == Some("sess-0") {
            return status(404);
        }
        default_reply(req)
    })
    .await;
    let client = client_for(&server).build().unwrap();
    let mut events = client.events();
    guarded(client.connect()).await.unwrap();
    let r = guarded(client.call_tool(ToolCall::new("echo", json!({"text": "again"}))))
        .await
        .unwrap();
    assert_eq!(r.text(), "again");
    assert_eq!(inits.load(Ordering::SeqCst), 2);

    let requests = server.requests();
    let calls: Vec<_> = requests.iter().filter(|r| r.is_rpc("tools/call")).collect();
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0].header("mcp-session-id"), Some("sess-0"));
    assert_eq!(calls[1].header("mcp-session-id"), Some("sess-1"));
    assert_ne!(
        calls[0].rpc_id(),
        calls[1].rpc_id(),
        "a re-send gets a new id"
    );
    let reinit = requests
        .iter()
        .filter(|r| r.is_rpc("initialize"))
        .nth(1)
        .unwrap();
    assert_eq!(reinit.header("mcp-session-id"), None);
    for r in &requests {
        assert_eq!(
            r.header("authorization"),
            Some("Bearer secret-token"),
            "{}",
            r.label()
        );
        assert_eq!(r.header("x-foo"), Some("bar"), "{}", r.label());
    }
    loop {
        if let mcp_resume::SessionEvent::Reinitialized { reason, .. } =
            guarded(events.next()).await.expect("events ended")
        {
            assert_eq!(reason, mcp_resume::ReinitReason::SessionNotFound);
            break;
        }
    }
}

/// Once a POST stream has delivered its response the session is done with it: the driver
/// must drop the connection even though the server keeps the stream open.
#[tokio::test]
async fn a_finished_stream_left_open_is_dropped() {
    let (dropped_tx, mut dropped) = tokio::sync::mpsc::unbounded_channel();
    let server = TestServer::start(move |req| {
        if req.is_rpc("tools/call") {
            let result = result_msg(req, json!({"content": [{"type": "text", "text": "ok"}]}));
            return sse_open_watched(sse_event(Some("o-1"), &result), dropped_tx.clone());
        }
        default_reply(req)
    })
    .await;
    let client = client_for(&server)
        .open_listen_stream(false)
        .build()
        .unwrap();
    let r = guarded(client.call_tool(ToolCall::new("echo", json!({}))))
        .await
        .unwrap();
    assert_eq!(r.text(), "ok");
    // The client is still alive: only the finished exchange was aborted.
    guarded(dropped.recv()).await.expect("stream dropped");
    guarded(client.ping()).await.unwrap();
}

/// A call performs its POST in its own task while the driver keeps its deadline. When the
/// driver's runtime is alive but no longer polled (a current-thread runtime outside its
/// `block_on`) and the server never answers, nothing enforces that deadline: the call's own
/// guard (its bound plus two seconds) ends it with `Timeout` rather than let it hang.
#[test]
fn a_call_ends_by_its_guard_when_the_drivers_runtime_is_not_polled() {
    let servers = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let server = servers.block_on(TestServer::start(hang_on_tool_calls));
    let client = Client::builder(&server.url)
        .call_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let current = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    };
    // The driver starts here, and this runtime is never polled again.
    let drivers = current();
    drivers.block_on(guarded(client.connect())).unwrap();

    let callers = current();
    let started = std::time::Instant::now();
    let err = callers
        .block_on(guarded(client.call_tool(ToolCall::new("slow", json!({})))))
        .expect_err("the server never answers");
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    assert!(
        started.elapsed() >= Duration::from_millis(2300),
        "ended by the guard, not by the driver's deadline: {:?}",
        started.elapsed()
    );
    drop(drivers);
}

/// A driver whose runtime shut down under a call in flight: the runtimes still running (the
/// server's, the caller's), the client, and the call's task.
struct StoppedUnderACall {
    _server: TestServer,
    _servers: tokio::runtime::Runtime,
    callers: tokio::runtime::Runtime,
    client: Client,
    call: tokio::task::JoinHandle<Result<mcp_resume::CallToolResult, mcp_resume::Error>>,
}

/// Connects a client on a runtime of its own, runs `before` on it, starts a call the server
/// never answers (its deadline far away) from another runtime, then shuts the driver's
/// runtime down once the server has the call.
fn stopped_under_a_call(before: impl FnOnce(&Client)) -> StoppedUnderACall {
    let rt = |workers| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers)
            .enable_all()
            .build()
            .unwrap()
    };
    let servers = rt(1);
    let server = servers.block_on(TestServer::start(hang_on_tool_calls));
    // The call may wait far longer than a test: only the shutdown can end it in time.
    let client = Client::builder(&server.url)
        .call_timeout(Duration::from_secs(600))
        .build()
        .unwrap();
    let drivers = rt(1);
    drivers.block_on(guarded(client.connect())).unwrap();
    before(&client);
    let callers = rt(1);
    let call = callers.spawn({
        let client = client.clone();
        async move { client.call_tool(ToolCall::new("slow", json!({}))).await }
    });
    servers.block_on(server.wait_for(|r| r.is_rpc("tools/call")));
    drop(drivers);
    StoppedUnderACall {
        _server: server,
        _servers: servers,
        callers,
        client,
        call,
    }
}

/// A call performs its POST in its own task, but the driver keeps its deadline: when the
/// driver's runtime shuts down under a call in flight, the call fails at once (nothing is
/// left to enforce its deadline): `Closed`, or `OutcomeUnknown` when the shutdown cut its
/// POST's connection (opened on that runtime) before the driver's stop reached the call;
/// either says it may have run. Later calls fail with `Closed`.
#[test]
fn a_call_in_flight_fails_closed_when_the_drivers_runtime_shuts_down() {
    let StoppedUnderACall {
        callers,
        client,
        call,
        ..
    } = stopped_under_a_call(|_| {});
    let err = callers
        .block_on(guarded(call))
        .unwrap()
        .expect_err("the server never answers");
    assert!(
        matches!(err.kind(), ErrorKind::Closed | ErrorKind::OutcomeUnknown),
        "{err}"
    );
    assert!(err.may_have_run(), "{err}");
    let later = callers.block_on(guarded(client.call_tool(ToolCall::new("echo", json!({})))));
    assert_eq!(later.unwrap_err().kind(), ErrorKind::Closed);
}

/// The lifecycle and notification streams end when the driver's runtime shuts down: a
/// consumer reading them to their end is not left waiting for ever. No
/// `SessionEvent::Closed` comes first: the app did not close the session, and its server
/// was never told.
#[test]
fn the_event_and_notification_streams_end_when_the_drivers_runtime_shuts_down() {
    let mut streams = None;
    let StoppedUnderACall {
        callers,
        client,
        call,
        ..
    } = stopped_under_a_call(|client| streams = Some((client.events(), client.notifications())));
    let (mut events, mut notifications) = streams.unwrap();

    let seen = callers.block_on(async {
        let mut seen = Vec::new();
        tokio::time::timeout(Duration::from_secs(5), async {
            while let Some(event) = events.recv().await {
                seen.push(event);
            }
        })
        .await
        .expect("the event stream never ended");
        tokio::time::timeout(Duration::from_secs(5), async {
            while notifications.recv().await.is_some() {}
        })
        .await
        .expect("the notification stream never ended");
        seen
    });
    assert!(
        !seen
            .iter()
            .any(|e| matches!(e, mcp_resume::SessionEvent::Closed)),
        "{seen:?}"
    );
    // Subscribed after the stop, a stream ends at once.
    let late = callers.block_on(guarded(client.events().recv()));
    assert!(late.is_none(), "{late:?}");
    // The call ends too, as in the test above.
    let err = callers.block_on(guarded(call)).unwrap().unwrap_err();
    assert!(
        matches!(err.kind(), ErrorKind::Closed | ErrorKind::OutcomeUnknown),
        "{err}"
    );
    assert!(err.may_have_run(), "{err}");
}
