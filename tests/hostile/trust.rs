//! Issue 24 on the wire: what the client trusts, and what it keeps. A call awaiting the
//! application's input is not re-sent by a re-initialization; a refusal of the credentials is
//! the error of its own request only; task events name calls as the application knows them;
//! cancelled calls leave nothing behind; a rejection marker proves nothing outside the
//! extension's terms; a 503 with `Retry-After` can be taken as "may have run"; a resumed task
//! has a timeout of its own; URLs in `Debug` lose their query.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use mcp_resume::client::ledger::EntryId;
use mcp_resume::{Era, ErrorKind, Ledger, LedgerEntry, SessionEvent, TokenRequest, ToolCall};
#[allow(deprecated)]
use mcp_resume::{StoredTask, TaskStore};
use serde_json::{json, Value};

use crate::harness::*;
use crate::server::*;

const MODERN: &str = "2026-07-28";

/// A JSON-RPC error answer with `status`.
fn rpc_error(req: &Request, status: u16, code: i64, data: Value) -> Reply {
    Reply::json(
        status,
        &json!({"jsonrpc": "2.0", "id": req.rpc_id(),
            "error": {"code": code, "message": "refused", "data": data}}),
    )
}

/// A modern result (`resultType` added when absent).
fn modern_result(req: &Request, mut result: Value) -> Reply {
    if result.get("resultType").is_none() {
        result["resultType"] = json!("complete");
    }
    Reply::result(req, result)
}

/// The modern server's answer to `server/discover` (tasks extension on), if `req` is one.
fn discovered(req: &Request) -> Option<Reply> {
    req.is_rpc("server/discover").then(|| {
        modern_result(
            req,
            json!({"supportedVersions": [MODERN], "capabilities": {"tools": {},
                "extensions": {"io.modelcontextprotocol/tasks": {}}},
                "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "hostile", "version": "1"}}}),
        )
    })
}

fn tag_of(req: &Request) -> String {
    req.params()["arguments"]["tag"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn tagged(tag: &str) -> ToolCall {
    ToolCall::new("act", json!({ "tag": tag }))
}

fn calls_tagged(tag: &'static str) -> impl Fn(&Request) -> bool {
    move |r| tool_calls(r) && tag_of(r) == tag
}

/// Defect 1: an MRTR call waits for the application's answer while another call's version
/// refusal re-initializes the client. The waiting call is not POSTed again (its old round's
/// params, a second round opened); it goes out once, when the application answers.
#[tokio::test]
async fn defect_1_a_call_awaiting_input_is_not_resent_by_a_reinitialization() {
    let refused = Arc::new(AtomicUsize::new(0));
    let server = Server::start(move |req| {
        if let Some(reply) = discovered(req) {
            return reply;
        }
        match tag_of(req).as_str() {
            "ask" if req.params()["inputResponses"].is_null() => modern_result(
                req,
                json!({"resultType": "input_required", "requestState": "round-1",
                    "inputRequests": {"q": {"method": "x/question", "params": {}}}}),
            ),
            "other" if refused.fetch_add(1, Ordering::SeqCst) == 0 => {
                rpc_error(req, 400, -32022, json!({"supported": [MODERN]}))
            }
            tag if tool_calls(req) => modern_result(req, echo_result(tag)),
            _ => modern_result(req, json!({})),
        }
    })
    .await;
    let asked = Arc::new(AtomicUsize::new(0));
    let answer = Latch::new();
    let client = {
        let asked = asked.clone();
        let answer = answer.clone();
        builder(&server)
            .era(Era::Modern)
            .on_server_request(move |_| {
                asked.fetch_add(1, Ordering::SeqCst);
                let answer = answer.clone();
                async move {
                    answer.wait().await;
                    Ok(json!({"answer": 42}))
                }
            })
            .build()
            .unwrap()
    };
    let ask = client.start(tagged("ask")).unwrap();
    let ask = tokio::spawn(ask);
    server.wait_for(calls_tagged("ask")).await;
    let other = within("other", GUARD, client.call_tool(tagged("other"))).await;
    assert!(matches!(other, Ok(Ok(_))), "{other:?}");
    assert_eq!(
        server.count(|r| r.is_rpc("server/discover")),
        2,
        "re-initialized: {:?}",
        server.labels()
    );
    answer.open();
    let ask = within("ask", GUARD, ask).await.unwrap().unwrap();
    assert!(ask.is_ok(), "{ask:?}");
    let posts = server.matching(calls_tagged("ask"));
    assert_eq!(posts.len(), 2, "{:?}", server.labels());
    assert!(posts[0].params()["inputResponses"].is_null());
    assert_eq!(posts[1].params()["inputResponses"]["q"]["answer"], 42);
    assert_eq!(posts[1].params()["requestState"], "round-1");
    assert_eq!(asked.load(Ordering::SeqCst), 1, "one round, asked once");
}

/// Defect 2: a 401 on the GET resuming a call's stream does not make the call
/// `Unauthorized` ("not processed"): its POST ran, so its outcome is unknown.
#[tokio::test]
async fn defect_2_a_refused_resume_leaves_the_outcome_unknown() {
    let server = Server::start(|req| {
        if req.is_resume() {
            return Reply::full(
                401,
                &[("WWW-Authenticate", r#"Bearer error="invalid_token""#)],
                "",
            );
        }
        if tool_calls(req) {
            // The call runs; its stream breaks after the priming event.
            return Reply::sse("id: s-1\ndata:\n\n");
        }
        Reply::good()
    })
    .await;
    let client = builder(&server).build().unwrap();
    client.connect().await.unwrap();
    let (err, _) = failing("resume 401", GUARD, client.call_tool(echo("x"))).await;
    assert_kind("resume 401", &err, ErrorKind::OutcomeUnknown);
    assert_eq!(server.count(tool_calls), 1, "{:?}", server.labels());
    assert_eq!(server.count(|r| r.is_resume()), 1, "{:?}", server.labels());
}

/// Defect 3: `TaskCreated` and `TaskFinished` name the call by `ToolCall::id()`.
#[tokio::test]
async fn defect_3_task_events_name_the_applications_call() {
    let server = Server::start(|req| {
        if let Some(reply) = discovered(req) {
            return reply;
        }
        if tool_calls(req) && tag_of(req) == "task" {
            return modern_result(
                req,
                json!({"resultType": "task", "taskId": "t-3", "status": "working",
                    "pollIntervalMs": 10}),
            );
        }
        if tool_calls(req) {
            return modern_result(req, echo_result("plain"));
        }
        if req.is_rpc("tasks/get") {
            return modern_result(
                req,
                json!({"taskId": "t-3", "status": "completed", "result": echo_result("done")}),
            );
        }
        modern_result(req, json!({}))
    })
    .await;
    let client = builder(&server).era(Era::Modern).build().unwrap();
    let mut events = client.events();
    // A few calls first, so the session's ids and the application's ids differ.
    for i in 0..3 {
        client.call_tool(tagged(&format!("t{i}"))).await.ok();
    }
    let call = tagged("task");
    let id = call.id();
    let result = within("task", GUARD, client.call_tool(call)).await.unwrap();
    assert_eq!(result.unwrap().text(), "done");
    let mut named = Vec::new();
    while let Ok(Some(event)) = tokio::time::timeout(Duration::from_millis(50), events.recv()).await
    {
        match event {
            SessionEvent::TaskCreated { call, .. } => named.push(("created", call)),
            SessionEvent::TaskFinished { call, .. } => named.push(("finished", call)),
            _ => {}
        }
    }
    assert_eq!(named, vec![("created", id), ("finished", id)]);
}

/// Defect 4: calls dropped before they end (an outer `select!` or timeout) leave nothing in
/// the client: memory stays flat however many there were.
#[tokio::test]
async fn defect_4_cancelled_calls_leave_nothing_behind() {
    let server = Server::start(|_| Reply::good()).await;
    let client = builder(&server).build().unwrap();
    client.connect().await.unwrap();
    let cancel = |n: usize| {
        let client = client.clone();
        async move {
            for _ in 0..n / 16 {
                // Started and dropped in one batch of the driver: nothing reaches the wire.
                for _ in 0..16 {
                    drop(client.start(echo("dropped")).unwrap());
                }
                tokio::task::yield_now().await;
            }
        }
    };
    // Warm up: the tables reach their working size.
    cancel(4096).await;
    let probe = Probe::start();
    cancel(50_000).await;
    client.ping().await.unwrap();
    probe.assert_memory("50,000 cancelled calls", 256 * 1024);
    // Withdrawn before they left: no request, and no cancellation of what never ran.
    assert_eq!(server.count(tool_calls), 0, "{:?}", server.labels());
    assert_eq!(server.count(|r| r.is_rpc("notifications/cancelled")), 0);
    assert_usable("after cancelled calls", &server, &client).await;
}

/// Trust gap 6, as a new user would meet it: an unkeyed `tools/call` answered `500` with
/// `Mcp-Resume-Rejected: not_owner` by a server that never advertised the extension. It may
/// have run: it is sent once and its outcome is unknown (never re-sent, never a success).
#[tokio::test]
async fn gap_6_a_rejection_marker_outside_the_extension_proves_nothing() {
    let answered = Arc::new(AtomicUsize::new(0));
    let server = Server::start(move |req| {
        if tool_calls(req) && answered.fetch_add(1, Ordering::SeqCst) == 0 {
            return Reply::full(
                500,
                &[
                    ("Mcp-Resume-Rejected", "not_owner"),
                    ("Content-Type", "application/json"),
                ],
                json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32001,
                    "message": "rejected",
                    "data": {"code": "SESSION_RESUME_REJECTED", "reason": "not_owner"}}})
                .to_string(),
            );
        }
        Reply::good()
    })
    .await;
    let client = builder(&server).build().unwrap();
    client.connect().await.unwrap();
    let (err, _) = failing("500 + marker", GUARD, client.call_tool(echo("once"))).await;
    assert_kind("500 + marker", &err, ErrorKind::OutcomeUnknown);
    assert_eq!(server.count(tool_calls), 1, "{:?}", server.labels());
    assert_eq!(server.count(initializes), 1, "{:?}", server.labels());
}

/// Trust gap 8: an application that knows its server may answer 503 after it started
/// processing turns "503 + `Retry-After` = not processed" off; the call is then not re-sent.
#[tokio::test]
async fn gap_8_a_503_with_retry_after_can_mean_may_have_run() {
    let server = Server::start(|req| {
        if tool_calls(req) {
            return Reply::full(503, &[("Retry-After", "0")], "");
        }
        Reply::good()
    })
    .await;
    let client = builder(&server)
        .unavailable_not_processed(false)
        .build()
        .unwrap();
    client.connect().await.unwrap();
    let (err, _) = failing("503 may have run", GUARD, client.call_tool(echo("x"))).await;
    assert_kind("503 may have run", &err, ErrorKind::OutcomeUnknown);
    assert_eq!(server.count(tool_calls), 1, "{:?}", server.labels());
}

/// Trust gap 8: `Client::resume_task` takes a timeout of its own, shorter or longer than the
/// client's call timeout.
#[tokio::test]
async fn gap_8_resume_task_has_its_own_timeout() {
    let server = Server::start(|req| {
        if let Some(reply) = discovered(req) {
            return reply;
        }
        if req.is_rpc("tasks/get") {
            return modern_result(
                req,
                json!({"taskId": "t-8", "status": "working", "pollIntervalMs": 20}),
            );
        }
        modern_result(req, json!({}))
    })
    .await;
    // The client's call timeout is 5 s (the harness's); the task gets 300 ms.
    let client = builder(&server).era(Era::Modern).build().unwrap();
    client.connect().await.unwrap();
    let started = Instant::now();
    let (err, _) = failing(
        "resume_task",
        GUARD,
        client.resume_task("t-8", Some(Duration::from_millis(300))),
    )
    .await;
    assert_kind("resume_task", &err, ErrorKind::Timeout);
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(3),
        "{took:?}"
    );
    assert!(server.count(|r| r.is_rpc("tasks/get")) >= 2);
}

/// A ledger that keeps the stored form of every write.
#[derive(Default)]
struct Watched(Mutex<Vec<String>>);

impl Ledger for Watched {
    fn put(&self, entry: LedgerEntry) -> BoxFuture<'_, Result<(), mcp_resume::Error>> {
        self.0.lock().unwrap().push(entry.to_json().to_string());
        Box::pin(async { Ok(()) })
    }

    fn remove(&self, _: EntryId) -> BoxFuture<'_, Result<(), mcp_resume::Error>> {
        Box::pin(async { Ok(()) })
    }

    fn entries(&self) -> BoxFuture<'_, Result<Vec<LedgerEntry>, mcp_resume::Error>> {
        Box::pin(async { Ok(Vec::new()) })
    }
}

/// Trust gap 8: the endpoint URL's query string (which may carry credentials) does not show
/// in the `Debug` of what the client hands to a token provider or a task store, and is never
/// written to the ledger; nor is the bearer token.
#[tokio::test]
#[allow(deprecated)] // the task store's path, kept for migration
async fn gap_8_debug_leaves_out_the_endpoints_query() {
    const SECRET: &str = "s3cr3t-in-query";
    const TOKEN: &str = "t0k3n-s3cr3t";
    let server = Server::start(|req| {
        if let Some(reply) = discovered(req) {
            return reply;
        }
        if tool_calls(req) {
            return modern_result(req, json!({"resultType": "task", "taskId": "t-q"}));
        }
        if req.is_rpc("tasks/get") {
            return modern_result(
                req,
                json!({"taskId": "t-q", "status": "completed", "result": echo_result("ok")}),
            );
        }
        modern_result(req, json!({}))
    })
    .await;

    #[derive(Default)]
    struct Recording(Mutex<Vec<String>>);
    impl TaskStore for Recording {
        fn created(&self, task: StoredTask) {
            self.0.lock().unwrap().push(format!("{task:?}"));
        }
        fn finished(&self, _: &str) {}
        fn pending(&self) -> Vec<StoredTask> {
            Vec::new()
        }
    }
    let store = Arc::new(Recording::default());
    let ledger = Arc::new(Watched::default());
    let requests = Arc::new(Mutex::new(Vec::new()));
    let url = format!("{}?token={SECRET}", server.url);
    let client = {
        let requests = requests.clone();
        mcp_resume::Client::builder(&url)
            .era(Era::Modern)
            .era_cache(mcp_resume::EraCache::new())
            .call_timeout(Duration::from_secs(5))
            .task_store(store.clone())
            .ledger(ledger.clone())
            .auth(move |request: TokenRequest| {
                requests.lock().unwrap().push(format!("{request:?}"));
                async move { Ok(TOKEN.to_owned()) }
            })
            .build()
            .unwrap()
    };
    let result = within("task", GUARD, client.call_tool(tagged("q")))
        .await
        .unwrap();
    assert_eq!(result.unwrap().text(), "ok");
    let shown: Vec<String> = requests
        .lock()
        .unwrap()
        .iter()
        .chain(store.0.lock().unwrap().iter())
        .cloned()
        .collect();
    assert!(shown.len() >= 2, "{shown:?}");
    for debug in &shown {
        assert!(!debug.contains(SECRET), "{debug}");
        assert!(debug.contains("/mcp"), "{debug}");
    }
    let written = ledger.0.lock().unwrap().clone();
    assert!(written.len() >= 2, "{written:?}");
    for entry in &written {
        assert!(!entry.contains(SECRET) && !entry.contains(TOKEN), "{entry}");
        assert!(entry.contains(&server.url), "{entry}");
    }
    // The stored endpoint itself is whole: it is what a restarted agent reconnects to.
    let task = StoredTask::new("t", url.clone());
    assert!(task.endpoint.contains(SECRET));
    assert!(!format!("{task:?}").contains(SECRET));
}
