//! Recovery is owned by the request: once a call's future is dropped, its handle cancelled or
//! its deadline passed, nothing more is sent for it (no resume, re-send or MRTR round); after
//! `close()` returns, or the last `Client` clone is dropped, nothing at all (but the drop's
//! own DELETE). Counted on the wire: the requests the server saw after the moment.
//!
//! Each case pairs the call it abandons with one it keeps, recovered the same way at the
//! same time: seeing the kept call's recovery arrive is what shows the abandoned one's would
//! have arrived by then.

use std::sync::Arc;
use std::time::Duration;

use mcp_resume::client::models::ElicitResult;
use mcp_resume::{Era, ErrorKind, ToolCall};
use serde_json::json;

use crate::harness::*;
use crate::server::*;

/// The server's `retry`: the resume of a cut stream comes no sooner.
const RETRY_MS: u64 = 150;

/// The `retry` of a control call's stream: longer than [`RETRY_MS`] with the most jitter
/// the client adds to it (a fifth), so a control call cut after the abandoned ones is
/// resumed well after any resume of theirs would have been.
const CONTROL_RETRY_MS: u64 = 4 * RETRY_MS;

/// A call's stream: a priming event (its id names the call), then cut before the response.
fn cut_after_priming(req: &Request) -> Reply {
    let text = req.params()["arguments"]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let retry = if text.starts_with("control") {
        CONTROL_RETRY_MS
    } else {
        RETRY_MS
    };
    Reply::sse(format!("retry: {retry}\nid: {text}-1\ndata:\n\n"))
}

/// A legacy server that cuts every call's stream after its priming event and holds every
/// resume open (seeing the resume asked for is all these cases need).
async fn cutting_server() -> Server {
    Server::start(|req| {
        if tool_calls(req) {
            cut_after_priming(req)
        } else if req.is_resume() {
            Reply::sse_open("")
        } else {
            Reply::good()
        }
    })
    .await
}

fn resumes_of(server: &Server, text: &str) -> usize {
    let id = format!("{text}-1");
    server.count(|r| r.is_resume() && r.last_event_id() == Some(id.as_str()))
}

/// Requests the server saw from `seq` on, but the ones `also` allows.
fn seen_since(server: &Server, seq: usize, also: impl Fn(&Request) -> bool) -> Vec<String> {
    server
        .requests()
        .into_iter()
        .filter(|r| r.seq >= seq && !also(r))
        .map(|r| r.label())
        .collect()
}

/// Legacy: a call whose future is dropped (or whose handle is cancelled) while it waits to
/// resume is never resumed; the kept one is.
#[tokio::test]
async fn a_dropped_or_cancelled_legacy_call_is_not_resumed() {
    let server = cutting_server().await;
    let client = builder(&server).build().unwrap();
    client.connect().await.unwrap();
    let kept = client.start(echo("kept")).unwrap();
    let dropped = client.start(echo("dropped")).unwrap();
    let cancelled = client.start(echo("cancelled")).unwrap();
    server.wait_nth(3, tool_calls).await;
    for call in server.matching(tool_calls) {
        server.wait_done(call.seq, GUARD).await;
    }
    // Every stream is cut: each call now waits out the server's `retry`.
    drop(dropped);
    cancelled.cancel("the user gave up");
    // A control call, cut after the abandoned ones and told to wait longer than they were
    // (jitter included): its resume comes after any of theirs would have.
    let control = client.start(echo("control")).unwrap();
    server
        .wait_for(|r| r.is_resume() && r.last_event_id() == Some("control-1"))
        .await;
    server
        .wait_for(|r| r.is_resume() && r.last_event_id() == Some("kept-1"))
        .await;
    assert_eq!(resumes_of(&server, "dropped"), 0, "{:?}", server.labels());
    assert_eq!(resumes_of(&server, "cancelled"), 0, "{:?}", server.labels());
    assert_eq!(
        server.count(tool_calls),
        4,
        "never re-sent: {:?}",
        server.labels()
    );
    drop((kept, control));
}

/// Legacy: a call whose deadline passed while it waited to resume is never resumed.
#[tokio::test]
async fn a_legacy_call_past_its_deadline_is_not_resumed() {
    let server = Server::start(|req| {
        if tool_calls(req) {
            // The server asks for a long wait before the resume: the deadline comes first.
            Reply::sse("retry: 600\nid: late-1\ndata:\n\n")
        } else {
            Reply::good()
        }
    })
    .await;
    let client = builder(&server)
        .call_timeout(Duration::from_millis(200))
        .build()
        .unwrap();
    client.connect().await.unwrap();
    let (err, _) = failing(
        "deadline",
        Duration::from_secs(3),
        client.call_tool(echo("x")),
    )
    .await;
    assert_kind("deadline", &err, ErrorKind::Timeout);
    let after = server.requests().len();
    // A control call resumed with the same `retry`, after the abandoned one's would have been.
    let control = builder(&server).build().unwrap();
    let kept = control.start(echo("y")).unwrap();
    server
        .wait_nth(1, |r| r.is_resume() && r.session_id() == Some("hostile-2"))
        .await;
    drop(kept);
    let late: Vec<_> = seen_since(&server, after, |r| r.session_id() != Some("hostile-1"));
    assert!(
        late.iter()
            .all(|l| l.starts_with("POST notifications/cancelled")),
        "sent for the expired call after its deadline: {late:?}"
    );
}

/// Legacy: once `close()` returns nothing more is sent, though a call was waiting to resume;
/// once the last clone is dropped, nothing but the drop's own close: the waiting call's
/// cancellation (it may be running) and the DELETE. Either way the call is cancelled once.
#[tokio::test]
async fn nothing_is_sent_after_close_or_the_last_drop() {
    for by_drop in [false, true] {
        let what = if by_drop { "last drop" } else { "close" };
        let server = cutting_server().await;
        let client = builder(&server).build().unwrap();
        client.connect().await.unwrap();
        let waiting = client.start(echo("waiting")).unwrap();
        let call = server.wait_for(tool_calls).await;
        server.wait_done(call.seq, GUARD).await;
        let moment = if by_drop {
            let moment = server.requests().len();
            drop(client);
            server.wait_for(Request::is_delete).await;
            moment
        } else {
            client.close().await.unwrap();
            server.requests().len()
        };
        let outcome = within(what, Duration::from_secs(3), waiting).await.unwrap();
        assert!(outcome.is_err(), "{what}: {outcome:?}");
        // A control client's resume, due later than the abandoned one's would have been.
        let control = builder(&server).build().unwrap();
        let kept = control.start(echo("control")).unwrap();
        server
            .wait_for(|r| r.is_resume() && r.last_event_id() == Some("control-1"))
            .await;
        drop(kept);
        let late = seen_since(&server, moment, |r| {
            r.session_id() != Some("hostile-1")
                || (by_drop && (r.is_delete() || r.rpc_method() == Some("notifications/cancelled")))
        });
        assert!(late.is_empty(), "{what}: sent afterwards: {late:?}");
        assert_eq!(
            server.count(|r| r.session_id() == Some("hostile-1")
                && r.rpc_method() == Some("notifications/cancelled")),
            1,
            "{what}: the waiting call is cancelled"
        );
        assert_eq!(
            server.count(|r| r.is_delete() && r.session_id() == Some("hostile-1")),
            1,
            "{what}"
        );
    }
}

const MODERN: &str = "2026-07-28";

/// A stateless 2026-07-28 server on the hostile harness: `server/discover`, and a `confirm`
/// tool that asks for input (an MRTR round) before it answers.
fn modern_reply(req: &Request) -> Reply {
    let params = req.params();
    match req.rpc_method() {
        Some("server/discover") => Reply::result(
            req,
            json!({"resultType": "complete", "supportedVersions": [MODERN],
                "capabilities": {"tools": {}}}),
        ),
        Some("tools/call") if params["name"] == "confirm" => {
            if params["inputResponses"].is_null() {
                Reply::result(
                    req,
                    json!({"resultType": "input_required", "requestState": "s-1",
                    "inputRequests": {"ok": {"method": "elicitation/create",
                        "params": {"message": "proceed?", "requestedSchema": {"type": "object"}}}}}),
                )
            } else {
                Reply::result(req, json!({"resultType": "complete", "content": []}))
            }
        }
        _ => Reply::good(),
    }
}

fn confirm(tag: &str) -> ToolCall {
    ToolCall::new("confirm", json!({ "tag": tag }))
}

fn rounds(server: &Server, tag: &str) -> usize {
    server.count(|r| {
        r.is_rpc("tools/call")
            && r.params()["arguments"]["tag"] == tag
            && !r.params()["inputResponses"].is_null()
    })
}

/// Answers sent back as JSON-RPC responses: the modern era has none to send.
fn answers(r: &Request) -> bool {
    r.is_answer()
}

/// Modern: the input handler answers after its call was dropped, or after its deadline
/// passed; no MRTR round (nor anything else) is sent for it. A kept call's round, answered
/// at the same moment, is.
#[tokio::test]
async fn an_abandoned_modern_call_gets_no_mrtr_round() {
    for by_deadline in [false, true] {
        let what = if by_deadline { "deadline" } else { "dropped" };
        let server = Server::start(modern_reply).await;
        let gate = Latch::new();
        let asked = Arc::new(tokio::sync::Semaphore::new(0));
        let (handler_gate, handler_asked) = (gate.clone(), asked.clone());
        let client = builder(&server)
            .era(Era::Modern)
            .on_elicitation(move |_req, _ctx| {
                let (gate, asked) = (handler_gate.clone(), handler_asked.clone());
                async move {
                    asked.add_permits(1);
                    gate.wait().await;
                    Ok(ElicitResult::accept(json!({})))
                }
            })
            .build()
            .unwrap();
        client.connect().await.unwrap();
        let kept = client.start(confirm("kept")).unwrap();
        let abandoned = if by_deadline {
            let call = confirm("abandoned").timeout(Duration::from_millis(200));
            let (err, _) = failing(what, Duration::from_secs(3), async {
                let handle = client.start(call)?;
                handle.await
            })
            .await;
            assert_kind(what, &err, ErrorKind::Timeout);
            None
        } else {
            Some(client.start(confirm("abandoned")).unwrap())
        };
        // Both handlers are running.
        let both = asked.acquire_many(2).await.unwrap();
        both.forget();
        drop(abandoned);
        let moment = server.requests().len();
        gate.open();
        let result = within(what, Duration::from_secs(3), kept).await.unwrap();
        assert!(result.is_ok(), "{what}: kept call: {result:?}");
        // The abandoned answer was taken by the driver in the same turns as the kept one;
        // one more round trip makes sure whatever it led to is on the wire.
        client.ping().await.unwrap();
        assert_eq!(rounds(&server, "kept"), 1, "{what}: {:?}", server.labels());
        assert_eq!(
            rounds(&server, "abandoned"),
            0,
            "{what}: {:?}",
            server.labels()
        );
        let late = seen_since(&server, moment, |r| {
            r.is_rpc("ping") || r.params()["arguments"]["tag"] == "kept"
        });
        assert!(late.is_empty(), "{what}: sent afterwards: {late:?}");
        assert_eq!(server.count(answers), 0, "{what}: {:?}", server.labels());
    }
}

/// A 2026-07-28 server that deduplicates keyed calls and cuts every `tools/call` stream
/// before its response: each keyed call is re-issued after the backoff, again and again.
fn modern_cutting_reply(req: &Request) -> Reply {
    match req.rpc_method() {
        Some("server/discover") => Reply::result(
            req,
            json!({"resultType": "complete", "supportedVersions": [MODERN],
                "capabilities": {"tools": {}, "extensions": {
                    "io.github.mcp-resume/resume-safety": {"version": 1, "idempotency": {}}}}}),
        ),
        Some("tools/call") => Reply::sse(""),
        _ => Reply::good(),
    }
}

fn issued(server: &Server, tag: &str) -> usize {
    server.count(|r| r.is_rpc("tools/call") && r.params()["arguments"]["tag"] == tag)
}

fn keyed(tag: &str) -> ToolCall {
    ToolCall::new("flaky", json!({ "tag": tag })).random_idempotency_key()
}

/// Modern: a keyed call waiting to be re-issued after its stream broke is never re-issued
/// once dropped or past its deadline; after `close()` or the last drop nothing at all is
/// sent (a modern session has nothing to DELETE).
#[tokio::test]
async fn an_abandoned_modern_call_is_not_reissued() {
    let slow_retry = fast_policy()
        .with_initial_delay(Duration::from_millis(150))
        .with_max_delay(Duration::from_millis(300));
    for how in ["dropped", "deadline", "close", "last drop"] {
        let server = Server::start(modern_cutting_reply).await;
        let client = builder(&server)
            .era(Era::Modern)
            .reconnect(slow_retry.clone())
            .build()
            .unwrap();
        client.connect().await.unwrap();
        let call = match how {
            "deadline" => keyed("abandoned").timeout(Duration::from_millis(80)),
            _ => keyed("abandoned"),
        };
        let abandoned = client.start(call).unwrap();
        let first = server.wait_for(|r| r.is_rpc("tools/call")).await;
        server.wait_done(first.seq, GUARD).await;
        let moment = server.requests().len();
        match how {
            "dropped" => drop(abandoned),
            "deadline" => {
                let outcome = within(how, Duration::from_secs(3), abandoned)
                    .await
                    .unwrap();
                let err = outcome.expect_err("past its deadline");
                assert_kind(how, &err, ErrorKind::Timeout);
            }
            "close" => {
                client.close().await.unwrap();
                drop(abandoned);
            }
            _ => {
                drop(client.clone());
                drop(client);
                drop(abandoned);
            }
        }
        // A control call on a client of its own, re-issued twice: its second re-issue comes
        // after the abandoned call's first would have.
        let control = builder(&server)
            .era(Era::Modern)
            .reconnect(slow_retry.clone())
            .build()
            .unwrap();
        let kept = control.start(keyed("kept")).unwrap();
        server
            .wait_nth(3, |r| {
                r.is_rpc("tools/call") && r.params()["arguments"]["tag"] == "kept"
            })
            .await;
        drop(kept);
        assert_eq!(
            issued(&server, "abandoned"),
            1,
            "{how}: {:?}",
            server.labels()
        );
        let late = seen_since(&server, moment, |r| {
            r.params()["arguments"]["tag"] == "kept" || r.is_rpc("server/discover")
        });
        assert!(late.is_empty(), "{how}: sent afterwards: {late:?}");
    }
}
