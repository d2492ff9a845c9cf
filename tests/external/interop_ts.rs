//! The public API against a server nobody here wrote: the official TypeScript SDK's
//! `StreamableHTTPServerTransport` (stateful sessions, an event store), pinned in
//! `tests/interop/package.json` and run by `tests/interop/ts-server.mjs`.
//!
//! Every assertion about what happened on the wire is made on the server's own log (HTTP
//! requests as received, tool executions, stream closes), not on what the client believed.

use crate::interop_support;

use std::time::Duration;

use mcp_resume::{
    Client, EraCache, ErrorKind, ReinitReason, ResendPolicy, ServerNotification, SessionEvent,
    ToolCall,
};
use serde_json::{json, Value};

use interop_support::TsServer;

/// Hang guard for anything awaited in these tests.
const GUARD: Duration = Duration::from_secs(20);

/// A client with an era cache of its own: the process-wide default would carry one test's
/// answer to the next server that happens to get the same port.
fn client(server: &TsServer) -> mcp_resume::ClientBuilder {
    Client::builder(&server.url)
        .call_timeout(GUARD)
        .era_cache(EraCache::new())
}

async fn within<T>(what: &str, fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(GUARD, fut)
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer within {GUARD:?}"))
}

fn tool_runs(server: &TsServer, name: &str) -> Vec<Value> {
    server.find("tool", |e| e["name"] == name)
}

/// [`tool_runs`] once the server's log has been read up to now: a run logged before the
/// client got its answer may still be in the pipe.
async fn settled_tool_runs(server: &TsServer, name: &str) -> Vec<Value> {
    server.settle().await;
    tool_runs(server, name)
}

fn str_of(v: &Value) -> &str {
    v.as_str().unwrap_or_default()
}

/// The next `notifications/message` (hang-guarded).
async fn next_message(notifications: &mut mcp_resume::NotificationStream) -> ServerNotification {
    within("notification", async {
        loop {
            let n = notifications
                .recv()
                .await
                .expect("notification stream ended");
            if n.method == "notifications/message" {
                return n;
            }
        }
    })
    .await
}

/// Collects session events until `pred` matches one (hang-guarded).
async fn event_matching(
    events: &mut mcp_resume::EventStream,
    what: &str,
    pred: impl Fn(&SessionEvent) -> bool,
) -> SessionEvent {
    within(what, async {
        loop {
            match events.recv().await {
                Some(e) if pred(&e) => return e,
                Some(_) => {}
                None => panic!("{what}: event stream ended"),
            }
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_list_call_close() {
    let server = TsServer::start(&[]);
    let client = client(&server).build().unwrap();

    let init = within("connect", client.connect()).await.unwrap();
    assert_eq!(init.protocol_version, "2025-11-25");
    assert_eq!(init.server_name, "mcp-resume-interop-ts");

    let tools = within("list_tools", client.list_tools()).await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    for expected in ["echo", "progress", "close_stream", "notify", "block"] {
        assert!(
            names.contains(&expected),
            "{expected} missing from {names:?}"
        );
    }

    let result = within(
        "echo",
        client.call_tool(ToolCall::new("echo", json!({"text": "hi"}))),
    )
    .await
    .unwrap();
    assert_eq!(result.text(), "hi");
    assert!(!result.is_error);

    within("close", client.close()).await.unwrap();
    let delete = server
        .wait_for("http_done", GUARD, |e| e["method"] == "DELETE")
        .await;
    assert_eq!(delete["status"], 200, "{}", server.dump());
    server
        .wait_for("session_closed", GUARD, |e| {
            e["session"] == delete["session"]
        })
        .await;

    // The era probe was a modern request this legacy server refused; every request after
    // `initialize` carried the session id and the negotiated version.
    let probes = server.find("http_in", |e| e["rpc_method"] == "server/discover");
    assert_eq!(probes.len(), 1, "{}", server.dump());
    let session = str_of(&delete["session"]).to_owned();
    let legacy =
        |e: &Value| e["rpc_method"] != "initialize" && e["rpc_method"] != "server/discover";
    for req in server.find("http_in", legacy) {
        assert_eq!(req["session"], session.as_str(), "{}", server.dump());
        assert_eq!(req["protocol_version"], "2025-11-25", "{}", server.dump());
    }
    assert_eq!(settled_tool_runs(&server, "echo").await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_notifications_are_delivered() {
    let server = TsServer::start(&[]);
    let client = client(&server).build().unwrap();
    within("connect", client.connect()).await.unwrap();
    let mut notifications = client.notifications();

    let result = within(
        "progress",
        client.call_tool(ToolCall::new("progress", json!({"steps": 3})).progress_token("tok-1")),
    )
    .await
    .unwrap();
    assert_eq!(result.text(), "progress done after 3 steps");

    let mut progress: Vec<ServerNotification> = Vec::new();
    while progress.len() < 3 {
        let n = within("progress notification", notifications.recv())
            .await
            .expect("notification stream ended");
        if n.method == "notifications/progress" {
            progress.push(n);
        }
    }
    for (i, n) in progress.iter().enumerate() {
        assert_eq!(n.progress_token(), Some(&json!("tok-1")));
        let params = n.params.as_ref().unwrap();
        assert_eq!(params["progress"], json!(i + 1), "{progress:?}");
        assert_eq!(params["total"], 3);
        assert!(
            n.call.is_some(),
            "progress came on the call's stream: {n:?}"
        );
    }
    assert_eq!(settled_tool_runs(&server, "progress").await.len(), 1);
}

/// The server closes the call's stream right after its priming event (`closeSSEStream`) and
/// completes later: the client must come back with GET + `Last-Event-ID`, no earlier than
/// `retry` ms, and get the response on the resumed stream; the tool runs once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_stream_is_resumed_after_retry() {
    const RETRY_MS: f64 = 400.0;
    let server = TsServer::start(&["--retry-ms", "400"]);
    let client = client(&server).build().unwrap();
    within("connect", client.connect()).await.unwrap();
    let mut events = client.events();

    // Completes after the resume has arrived, so the response is delivered live on it.
    let result = within(
        "close_stream",
        client.call_tool(ToolCall::new("close_stream", json!({"delay_ms": 800}))),
    )
    .await
    .unwrap();
    assert_eq!(result.text(), "completed 800 ms after closing the stream");

    let closed = server.find("stream_closed", |_| true);
    assert_eq!(closed.len(), 1, "{}", server.dump());
    let resumes = server.find("http_in", |e| {
        e["method"] == "GET" && !e["last_event_id"].is_null()
    });
    assert_eq!(resumes.len(), 1, "one resume expected:\n{}", server.dump());
    let waited = resumes[0]["t"].as_f64().unwrap() - closed[0]["t"].as_f64().unwrap();
    eprintln!("resume GET arrived {waited:.0} ms after closeSSEStream (retry {RETRY_MS} ms)");
    assert!(
        waited >= RETRY_MS,
        "resumed {waited:.0} ms after the close, retry was {RETRY_MS} ms"
    );
    // The priming event of the POST stream is the cursor presented.
    let call_post = server
        .find("http_in", |e| e["tool"] == "close_stream")
        .pop()
        .unwrap();
    assert_eq!(
        server
            .find("http_in", |e| e["tool"] == "close_stream")
            .len(),
        1,
        "the call was re-sent:\n{}",
        server.dump()
    );
    assert_eq!(resumes[0]["session"], call_post["session"]);
    assert_eq!(settled_tool_runs(&server, "close_stream").await.len(), 1);

    let resumed = event_matching(&mut events, "Resumed event", |e| {
        matches!(e, SessionEvent::Resumed { .. })
    })
    .await;
    if let SessionEvent::Resumed { last_event_id } = resumed {
        assert_eq!(last_event_id.as_str(), str_of(&resumes[0]["last_event_id"]));
    }
}

/// When the call completes while the client waits out `retry`, the server replays the stored
/// response on the resumed GET and then keeps that stream open (stock behaviour): the client
/// must close it once it has the response.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resumed_stream_left_open_is_closed_by_client() {
    let server = TsServer::start(&["--retry-ms", "300"]);
    let client = client(&server).build().unwrap();
    within("connect", client.connect()).await.unwrap();

    let result = within(
        "close_stream",
        client.call_tool(ToolCall::new("close_stream", json!({"delay_ms": 0}))),
    )
    .await
    .unwrap();
    assert_eq!(result.text(), "completed 0 ms after closing the stream");

    let replay = server.wait_for("replay", GUARD, |_| true).await;
    assert_eq!(replay["count"], 1, "{}", server.dump());
    // The server never ends this stream (it only sends keep-alives every 15 s).
    let done = server
        .wait_for("http_done", Duration::from_secs(10), |e| {
            e["method"] == "GET" && !e["last_event_id"].is_null()
        })
        .await;
    eprintln!(
        "client closed the replayed stream {:.0} ms after the server replayed into it",
        done["t"].as_f64().unwrap() - replay["t"].as_f64().unwrap()
    );
    assert_eq!(
        done["server_ended"],
        false,
        "the client did not close the resumed stream:\n{}",
        server.dump()
    );
    assert_eq!(settled_tool_runs(&server, "close_stream").await.len(), 1);
}

/// The server forgets the session while the client is idle: the next call gets 404, the client
/// starts a new session without the stale id and re-sends that call (never accepted), once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_session_reinitializes_and_resends_unaccepted_call() {
    let server = TsServer::start(&[]);
    // No standalone GET stream: the call below is then the first request to meet the 404.
    let client = client(&server).open_listen_stream(false).build().unwrap();
    within("connect", client.connect()).await.unwrap();
    let mut events = client.events();
    within(
        "first echo",
        client.call_tool(ToolCall::new("echo", json!({"text": "before"}))),
    )
    .await
    .unwrap();
    let old = str_of(&server.find("session_created", |_| true)[0]["session"]).to_owned();

    assert_eq!(server.admin("/admin/drop-sessions").await["dropped"], 1);
    let result = within(
        "echo after drop",
        client.call_tool(ToolCall::new("echo", json!({"text": "after"}))),
    )
    .await
    .unwrap();
    assert_eq!(result.text(), "after");

    let posts = server
        .wait_count("http_done", 3, GUARD, |e| e["tool"] == "echo")
        .await;
    assert_eq!(posts.len(), 3, "{}", server.dump());
    assert_eq!(posts[1]["session"], old.as_str());
    assert_eq!(posts[1]["status"], 404);
    assert_eq!(posts[2]["status"], 200);
    assert_ne!(posts[2]["session"], old.as_str());
    assert_ne!(
        posts[1]["rpc_id"], posts[2]["rpc_id"],
        "re-sent with a new id"
    );

    let inits = server.find("http_in", |e| e["rpc_method"] == "initialize");
    assert_eq!(inits.len(), 2, "{}", server.dump());
    assert!(
        inits[1]["session"].is_null(),
        "re-initialized with the stale id"
    );
    let reinit_at = inits[1]["t"].as_f64().unwrap();
    for req in server.find("http_in", |e| e["t"].as_f64().unwrap() > reinit_at) {
        assert_ne!(
            req["session"],
            old.as_str(),
            "stale id sent after re-initialize"
        );
    }
    let runs = settled_tool_runs(&server, "echo").await;
    assert_eq!(runs.len(), 2, "each echo executed once:\n{}", server.dump());
    assert_eq!(runs[1]["arguments"]["text"], "after");

    let e = event_matching(&mut events, "Reinitialized", |e| {
        matches!(e, SessionEvent::Reinitialized { .. })
    })
    .await;
    assert!(
        matches!(
            e,
            SessionEvent::Reinitialized {
                reason: ReinitReason::SessionNotFound,
                ..
            }
        ),
        "{e:?}"
    );
}

/// Starts `block`, waits until it runs on the server, then deletes the session under it. The
/// POST stream ends after its priming event; the resume GET meets 404.
async fn interrupt_block_call(
    server: &TsServer,
    client: &Client,
    call: ToolCall,
) -> Result<mcp_resume::CallToolResult, mcp_resume::Error> {
    let before = tool_runs(server, "block").len();
    let pending = {
        let client = client.clone();
        tokio::spawn(async move { client.call_tool(call).await })
    };
    server
        .wait_for("tool", GUARD, |e| {
            e["name"] == "block" && tool_runs(server, "block").len() > before
        })
        .await;
    assert_eq!(server.admin("/admin/drop-sessions").await["dropped"], 1);
    within("interrupted call", pending).await.unwrap()
}

/// An interrupted call on a stock server (no idempotency advertised) ends in `OutcomeUnknown`,
/// keyed or not, and is never re-sent; the client then goes on with a new session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interrupted_call_ends_outcome_unknown() {
    let server = TsServer::start(&["--retry-ms", "200"]);
    let client = client(&server).open_listen_stream(false).build().unwrap();
    within("connect", client.connect()).await.unwrap();
    let mut events = client.events();

    let err = interrupt_block_call(&server, &client, ToolCall::new("block", json!({})))
        .await
        .expect_err("an interrupted call cannot succeed");
    assert_eq!(err.kind(), ErrorKind::OutcomeUnknown, "{err}");
    event_matching(&mut events, "OutcomeUnknown event", |e| {
        matches!(e, SessionEvent::OutcomeUnknown { .. })
    })
    .await;

    // A key alone proves nothing to a server that never advertised idempotency.
    let err = interrupt_block_call(
        &server,
        &client,
        ToolCall::new("block", json!({})).random_idempotency_key(),
    )
    .await
    .expect_err("an interrupted keyed call cannot succeed by default");
    assert_eq!(err.kind(), ErrorKind::OutcomeUnknown, "{err}");

    assert_eq!(
        server.find("http_in", |e| e["tool"] == "block").len(),
        2,
        "an interrupted call was re-sent:\n{}",
        server.dump()
    );
    // Each interruption: resume GET with the stale session, 404, fresh initialize.
    let resumes = server
        .wait_count("http_done", 2, GUARD, |e| {
            e["method"] == "GET" && !e["last_event_id"].is_null()
        })
        .await;
    assert_eq!(resumes.len(), 2, "{}", server.dump());
    assert!(
        resumes.iter().all(|r| r["status"] == 404),
        "{}",
        server.dump()
    );
    // The call fails as soon as the 404 is seen; the fresh initialize may follow it.
    let inits = server
        .wait_count("http_in", 3, GUARD, |e| e["rpc_method"] == "initialize")
        .await;
    assert!(
        inits.iter().all(|i| i["session"].is_null()),
        "{}",
        server.dump()
    );

    let after = within(
        "echo after",
        client.call_tool(ToolCall::new("echo", json!({"text": "still here"}))),
    )
    .await
    .unwrap();
    assert_eq!(after.text(), "still here");
}

/// With the application's explicit opt-in, an interrupted keyed call is re-sent on the new
/// session: a new JSON-RPC id, the same key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interrupted_keyed_call_is_resent_when_app_opts_in() {
    let server = TsServer::start(&["--retry-ms", "200"]);
    let client = client(&server)
        .open_listen_stream(false)
        .resend_policy(ResendPolicy::AssumeServerDeduplicates)
        .build()
        .unwrap();
    within("connect", client.connect()).await.unwrap();

    let pending = {
        let client = client.clone();
        tokio::spawn(async move {
            client
                .call_tool(ToolCall::new("block", json!({})).idempotency_key("interop-key-1"))
                .await
        })
    };
    server
        .wait_for("tool", GUARD, |e| e["name"] == "block")
        .await;
    assert_eq!(server.admin("/admin/drop-sessions").await["dropped"], 1);
    // The re-sent call runs on the new session; let it finish.
    server
        .wait_for("tool", GUARD, |_| tool_runs(&server, "block").len() == 2)
        .await;
    server.admin("/admin/release").await;
    let result = within("re-sent call", pending).await.unwrap().unwrap();
    assert_eq!(result.text(), "released");

    let runs = settled_tool_runs(&server, "block").await;
    assert_eq!(runs.len(), 2, "{}", server.dump());
    assert_ne!(runs[0]["session"], runs[1]["session"]);
    assert_ne!(runs[0]["request_id"], runs[1]["request_id"]);
    let posts = server.find("http_in", |e| e["tool"] == "block");
    assert_eq!(posts.len(), 2, "{}", server.dump());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_response_mode() {
    let server = TsServer::start(&["--json"]);
    let client = client(&server).build().unwrap();
    let init = within("connect", client.connect()).await.unwrap();
    assert_eq!(init.protocol_version, "2025-11-25");
    let tools = within("list_tools", client.list_tools()).await.unwrap();
    assert!(tools.iter().any(|t| t.name == "echo"));
    let result = within(
        "echo",
        client.call_tool(ToolCall::new("echo", json!({"text": "json"}))),
    )
    .await
    .unwrap();
    assert_eq!(result.text(), "json");
    within("close", client.close()).await.unwrap();

    for head in server.find("http_head", |e| {
        e["method"] == "POST" && !e["rpc_id"].is_null()
    }) {
        assert_eq!(
            head["content_type"],
            "application/json",
            "{}",
            server.dump()
        );
    }
    assert_eq!(settled_tool_runs(&server, "echo").await.len(), 1);
}

/// A notification unrelated to any request goes out on the standalone GET stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standalone_stream_notifications_arrive() {
    let server = TsServer::start(&[]);
    let client = client(&server).build().unwrap();
    let mut notifications = client.notifications();
    within("connect", client.connect()).await.unwrap();

    // The transport registers the GET stream before its response head goes out.
    let get = server
        .wait_for("http_head", GUARD, |e| {
            e["method"] == "GET" && e["last_event_id"].is_null()
        })
        .await;
    assert_eq!(get["status"], 200, "{}", server.dump());
    assert_eq!(get["content_type"], "text/event-stream");

    within(
        "notify",
        client.call_tool(ToolCall::new(
            "notify",
            json!({"text": "on the GET stream"}),
        )),
    )
    .await
    .unwrap();
    let n = next_message(&mut notifications).await;
    assert_eq!(n.params.as_ref().unwrap()["data"], "on the GET stream");
    assert!(n.call.is_none(), "it was not on a call's stream: {n:?}");
}

/// Older protocol versions the SDK offers are accepted by the stock server, and the version
/// header follows the negotiated one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn older_protocol_versions() {
    for version in ["2025-06-18", "2025-03-26"] {
        let server = TsServer::start(&[]);
        let client = client(&server)
            .protocol_version(version.parse().unwrap())
            .build()
            .unwrap();
        let init = within("connect", client.connect()).await.unwrap();
        assert_eq!(init.protocol_version, version);
        let result = within(
            "echo",
            client.call_tool(ToolCall::new("echo", json!({"text": version}))),
        )
        .await
        .unwrap();
        assert_eq!(result.text(), version);
        within("close", client.close()).await.unwrap();
        let later = server.find("http_in", |e| {
            e["rpc_method"] != "initialize" && e["rpc_method"] != "server/discover"
        });
        assert!(!later.is_empty());
        for req in later {
            // The header exists from 2025-06-18 on; a 2025-03-26 client may omit it.
            let header = &req["protocol_version"];
            let ok = header == version || (version == "2025-03-26" && header.is_null());
            assert!(ok, "{version}: header {header}\n{}", server.dump());
        }
    }
}

/// A call whose deadline passes is cancelled on the server with `notifications/cancelled`
/// (a disconnect alone would not cancel it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timed_out_call_is_cancelled_on_the_server() {
    let server = TsServer::start(&[]);
    let client = client(&server).build().unwrap();
    within("connect", client.connect()).await.unwrap();

    let err = within(
        "block with a deadline",
        client.call_tool(ToolCall::new("block", json!({})).timeout(Duration::from_millis(500))),
    )
    .await
    .expect_err("block never finishes by itself");
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");

    let run = settled_tool_runs(&server, "block")
        .await
        .pop()
        .expect("block ran");
    let cancel = server
        .wait_for("http_in", GUARD, |e| {
            e["rpc_method"] == "notifications/cancelled"
        })
        .await;
    assert_eq!(cancel["session"], run["session"]);
    server
        .wait_for("cancelled", GUARD, |e| e["request_id"] == run["request_id"])
        .await;

    // The session is still usable.
    let after = within(
        "echo after",
        client.call_tool(ToolCall::new("echo", json!({"text": "next"}))),
    )
    .await
    .unwrap();
    assert_eq!(after.text(), "next");
}

/// Concurrent calls through one client: each completes once, with its own answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_calls_complete_once_each() {
    const CALLS: usize = 20;
    let server = TsServer::start(&[]);
    let client = client(&server).build().unwrap();
    within("connect", client.connect()).await.unwrap();

    let calls = (0..CALLS).map(|i| {
        let client = client.clone();
        async move {
            let text = format!("call-{i}");
            let r = client
                .call_tool(ToolCall::new("echo", json!({ "text": text })))
                .await
                .unwrap();
            assert_eq!(r.text(), text);
        }
    });
    within("concurrent echoes", futures::future::join_all(calls)).await;

    // The server's log is read from its output asynchronously: an answer can arrive before
    // the log line that records its run.
    for i in 0..CALLS {
        let text = format!("call-{i}");
        server
            .wait_for("tool", GUARD, |e| {
                e["name"] == "echo" && e["arguments"]["text"] == text.as_str()
            })
            .await;
    }
    let runs = settled_tool_runs(&server, "echo").await;
    assert_eq!(runs.len(), CALLS, "{}", server.dump());
    let mut texts: Vec<&str> = runs
        .iter()
        .map(|r| str_of(&r["arguments"]["text"]))
        .collect();
    texts.sort_unstable();
    texts.dedup();
    assert_eq!(texts.len(), CALLS, "each call executed exactly once");
}

/// The server ends the standalone GET stream (`closeStandaloneSSEStream`): the client opens a
/// new one, and notifications sent after that arrive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_listen_stream_is_reopened() {
    let server = TsServer::start(&["--retry-ms", "200"]);
    let client = client(&server).build().unwrap();
    let mut notifications = client.notifications();
    within("connect", client.connect()).await.unwrap();
    let is_listen_head = |e: &Value| e["method"] == "GET" && e["status"] == 200;
    server
        .wait_count("http_head", 1, GUARD, is_listen_head)
        .await;

    within(
        "close_listen_stream",
        client.call_tool(ToolCall::new("close_listen_stream", json!({}))),
    )
    .await
    .unwrap();
    let heads = server
        .wait_count("http_head", 2, GUARD, is_listen_head)
        .await;
    let reopened_at = heads[1]["t"].as_f64().unwrap();
    let closed_at = server.find("listen_stream_closed", |_| true)[0]["t"]
        .as_f64()
        .unwrap();
    eprintln!(
        "standalone stream reopened {:.0} ms after the server closed it",
        reopened_at - closed_at
    );

    within(
        "notify",
        client.call_tool(ToolCall::new("notify", json!({"text": "after reopen"}))),
    )
    .await
    .unwrap();
    let n = next_message(&mut notifications).await;
    assert_eq!(n.params.as_ref().unwrap()["data"], "after reopen");
}

/// Servers derived from older SDK examples answer an unknown session id with 400 and a
/// "No valid session ID" body instead of 404: the client reads the body, starts a new session
/// and re-sends the call the server never accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_session_answered_400_reinitializes() {
    let server = TsServer::start(&["--unknown-session-400"]);
    let client = client(&server).open_listen_stream(false).build().unwrap();
    within("connect", client.connect()).await.unwrap();
    assert_eq!(server.admin("/admin/drop-sessions").await["dropped"], 1);

    let result = within(
        "echo after drop",
        client.call_tool(ToolCall::new("echo", json!({"text": "after 400"}))),
    )
    .await
    .unwrap();
    assert_eq!(result.text(), "after 400");
    let posts = server
        .wait_count("http_done", 2, GUARD, |e| e["tool"] == "echo")
        .await;
    assert_eq!(posts[0]["status"], 400, "{}", server.dump());
    assert_eq!(posts[1]["status"], 200, "{}", server.dump());
    let inits = server.find("http_in", |e| e["rpc_method"] == "initialize");
    assert_eq!(inits.len(), 2, "{}", server.dump());
    assert!(inits[1]["session"].is_null());
    assert_eq!(settled_tool_runs(&server, "echo").await.len(), 1);
}

/// Once a notification (with an event id) came on the standalone GET stream, a server-side
/// close is resumed with `Last-Event-ID`, and a notification sent while it was down is
/// replayed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listen_stream_resumes_with_cursor_and_gets_missed_notification() {
    let server = TsServer::start(&["--retry-ms", "200"]);
    let client = client(&server).build().unwrap();
    let mut notifications = client.notifications();
    within("connect", client.connect()).await.unwrap();
    server
        .wait_count("http_head", 1, GUARD, |e| {
            e["method"] == "GET" && e["status"] == 200
        })
        .await;

    within(
        "notify",
        client.call_tool(ToolCall::new("notify", json!({"text": "one"}))),
    )
    .await
    .unwrap();
    assert_eq!(
        next_message(&mut notifications).await.params.unwrap()["data"],
        "one"
    );

    within(
        "close_listen_stream",
        client.call_tool(ToolCall::new(
            "close_listen_stream",
            json!({"then_notify": "two"}),
        )),
    )
    .await
    .unwrap();
    assert_eq!(
        next_message(&mut notifications).await.params.unwrap()["data"],
        "two"
    );

    let resume = server
        .wait_for("http_in", GUARD, |e| {
            e["method"] == "GET" && !e["last_event_id"].is_null()
        })
        .await;
    let replay = server
        .wait_for("replay", GUARD, |e| {
            e["last_event_id"] == resume["last_event_id"]
        })
        .await;
    assert_eq!(replay["stream"], "_GET_stream", "{}", server.dump());
    assert_eq!(replay["count"], 1, "{}", server.dump());
}
