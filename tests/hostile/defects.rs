//! One test per known defect, asserting the behaviour the client must have once it is fixed.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use mcp_resume::{ErrorKind, ReconnectPolicy, ReinitReason, SessionEvent};
use serde_json::{json, Value};

use crate::harness::*;
use crate::server::*;

fn no_valid_session(status: u16) -> Reply {
    Reply::full(
        status,
        &[("Content-Type", "application/json")],
        NO_VALID_SESSION,
    )
}

fn storm_policy() -> ReconnectPolicy {
    ReconnectPolicy::default()
        .with_initial_delay(Duration::from_millis(10))
        .with_max_delay(Duration::from_millis(200))
}

/// `initialize` always succeeds, every later request is refused with `refuse`; the first
/// session's `notifications/initialized` is accepted (so the client connects), later ones
/// are accepted too unless `refuse_initialized`.
///
/// The storm is bounded by backoff and by the call: re-initializations back off
/// exponentially up to `max_delay`, the call's re-sends stop after `max_attempts`, and a
/// call that never gets sent ends at its deadline, all with `SessionLost` (issue 24: this used
/// to end after `max_reinit_failures` in a terminal `SessionLost`). A later call is tried
/// again, no faster than the backoff reached.
async fn reinit_storm(what: &str, refuse: fn() -> Reply, refuse_initialized: bool) {
    let server = Server::start(move |req| {
        if initializes(req) {
            return Reply::good();
        }
        if req.is_get() {
            return Reply::status(405);
        }
        if req.is_rpc("notifications/initialized")
            && (!refuse_initialized || req.session_id() == Some(session_name(1).as_str()))
        {
            return Reply::good();
        }
        refuse()
    })
    .await;
    let policy = storm_policy();
    let deadline = Duration::from_secs(2);
    let client = builder(&server)
        .call_timeout(deadline)
        .reconnect(policy.clone())
        .open_listen_stream(true)
        .build()
        .unwrap();
    client.connect().await.unwrap();
    let probe = Probe::start();
    let outcome = within(what, Duration::from_secs(4), client.call_tool(echo("x"))).await;
    let inits = server.matching(initializes);
    let err = match outcome {
        Ok(Err(err)) => err,
        Ok(Ok(r)) => panic!("{what}: succeeded with {:?}", r.text()),
        Err(message) => panic!(
            "{message}: {} initialize and {} requests so far (a storm)",
            inits.len(),
            server.requests().len()
        ),
    };
    assert_kind(what, &err, ErrorKind::SessionLost);
    probe.assert_memory(what, 4 * MIB);
    let total = server.requests().len();
    assert!(
        inits.len() <= 16,
        "{what}: {} initialize: {:?}",
        inits.len(),
        server.labels()
    );
    assert!(
        total <= 50,
        "{what}: {total} requests: {:?}",
        server.labels()
    );
    assert!(
        server.count(tool_calls) <= policy.max_attempts as usize,
        "{what}: {:?}",
        server.labels()
    );
    // Backoff between re-initializations: each gap at least the initial delay, and growing.
    let gaps: Vec<Duration> = inits[1..].windows(2).map(|w| w[1].at - w[0].at).collect();
    assert!(
        gaps.len() >= 2,
        "{what}: too few re-initializations to see a backoff: {gaps:?}"
    );
    for gap in &gaps {
        assert!(*gap >= Duration::from_millis(10), "{what}: gaps {gaps:?}");
    }
    assert!(
        gaps.last() > gaps.first(),
        "{what}: gaps do not grow: {gaps:?}"
    );
    // Not terminal: a later call is tried again, bounded the same way, and no faster than
    // the backoff reached (`max_delay` by now).
    let before = inits.len();
    let (err, _) = failing(what, Duration::from_secs(4), client.call_tool(echo("y"))).await;
    assert_kind(what, &err, ErrorKind::SessionLost);
    let inits = server.matching(initializes);
    assert!(inits.len() > before, "{what}: {:?}", server.labels());
    let later: Vec<Duration> = inits[before - 1..]
        .windows(2)
        .map(|w| w[1].at - w[0].at)
        .collect();
    for gap in &later {
        assert!(*gap >= policy.max_delay, "{what}: gaps {later:?}");
    }
}

#[tokio::test]
async fn defect_01_reinit_storm_404() {
    reinit_storm("404 storm", || Reply::status(404), false).await;
}

#[tokio::test]
async fn defect_01_reinit_storm_400() {
    reinit_storm("400 storm", || no_valid_session(400), false).await;
}

#[tokio::test]
async fn defect_01_reinit_storm_404_initialized_refused_too() {
    reinit_storm(
        "404 storm, initialized refused",
        || Reply::status(404),
        true,
    )
    .await;
}

#[tokio::test]
async fn defect_04_listen_stream_400_naming_the_session_reinitializes() {
    let server = Server::start(|req| {
        if req.is_get() {
            // The server restarted right after `initialize`: it no longer knows session 1.
            if req.session_id() == Some(session_name(1).as_str()) {
                return no_valid_session(400);
            }
            return Reply::sse_open(": listening\n\n");
        }
        Reply::good()
    })
    .await;
    let client = builder(&server).open_listen_stream(true).build().unwrap();
    let mut events = client.events();
    client.connect().await.unwrap();
    let probe = Probe::start();
    let reinit = within("listen 400", Duration::from_secs(3), async {
        while let Some(event) = events.next().await {
            if let SessionEvent::Reinitialized { reason, .. } = event {
                return Some(reason);
            }
        }
        None
    })
    .await
    .unwrap_or_else(|m| {
        panic!(
            "{m}: no re-initialization; the server saw {:?}",
            server.labels()
        )
    });
    assert_eq!(reinit, Some(ReinitReason::SessionNotFound));
    let fresh = server.wait_nth(2, initializes).await;
    assert_eq!(
        fresh.session_id(),
        None,
        "a fresh initialize carries no old id"
    );
    let get = server
        .wait_for(|r| r.is_get() && r.session_id() == Some(session_name(2).as_str()))
        .await;
    assert!(get.at > fresh.at);
    let old = server.count(|r| r.is_get() && r.session_id() == Some(session_name(1).as_str()));
    assert_eq!(
        old,
        1,
        "the old session's stream was retried: {:?}",
        server.labels()
    );
    probe.assert_memory("listen 400", MIB);
    assert_usable("listen 400", &server, &client).await;
}

#[tokio::test]
async fn defect_05_close_after_the_server_lost_the_session() {
    let server = Server::start(|req| {
        if req.is_delete() {
            no_valid_session(400)
        } else {
            Reply::good()
        }
    })
    .await;
    let client = builder(&server).build().unwrap();
    client.connect().await.unwrap();
    let closed = within("close", Duration::from_secs(2), client.close())
        .await
        .unwrap();
    assert!(closed.is_ok(), "close: {closed:?}");
    let deletes = server.matching(Request::is_delete);
    assert_eq!(deletes.len(), 1);
    assert_eq!(deletes[0].session_id(), Some(session_name(1).as_str()));
}

fn progress(token: &str, n: u64) -> Value {
    json!({"jsonrpc": "2.0", "method": "notifications/progress",
        "params": {"progressToken": token, "progress": n}})
}

#[tokio::test]
async fn defect_06_replayed_notifications_are_delivered_once_to_their_call() {
    let both = Latch::new();
    let a_progressed = Latch::new();
    let b_progressed = Latch::new();
    let cut_b = Latch::new();
    let arrived = Arc::new(AtomicUsize::new(0));
    let ids: Arc<Mutex<HashMap<String, Value>>> = Arc::default();
    let script = {
        let (both, a_progressed, b_progressed, cut_b) = (
            both.clone(),
            a_progressed.clone(),
            b_progressed.clone(),
            cut_b.clone(),
        );
        let ids = ids.clone();
        move |req: &Request| {
            if tool_calls(req) {
                let token = req.params()["_meta"]["progressToken"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                ids.lock().unwrap().insert(token.clone(), req.rpc_id());
                if arrived.fetch_add(1, Ordering::SeqCst) + 1 == 2 {
                    both.open();
                }
                let reply = Reply::sse_head().wait(&both);
                return if token == "a" {
                    let mut first = sse_event(Some("e1"), &progress("a", 1));
                    first.push_str(&sse_event(Some("e2"), &progress("a", 2)));
                    reply
                        .write(first)
                        .open(&a_progressed)
                        .wait(&b_progressed)
                        .write(sse_event(Some("e4"), &result_msg(req, echo_result("A"))))
                } else {
                    // Cut after its first event, once the test says so.
                    reply
                        .wait(&a_progressed)
                        .write(sse_event(Some("e3"), &progress("b", 1)))
                        .open(&b_progressed)
                        .wait(&cut_b)
                };
            }
            if req.is_resume() {
                // Not what was asked (after e3): the whole session log, then what is new.
                let ids = ids.lock().unwrap();
                let answer = |token: &str, text: &str| json!({"jsonrpc": "2.0", "id": ids[token], "result": echo_result(text)});
                let mut log = String::new();
                log.push_str(&sse_event(Some("e1"), &progress("a", 1)));
                log.push_str(&sse_event(Some("e2"), &progress("a", 2)));
                log.push_str(&sse_event(Some("e3"), &progress("b", 1)));
                log.push_str(&sse_event(Some("e4"), &answer("a", "A")));
                log.push_str(&sse_event(Some("e5"), &progress("b", 2)));
                log.push_str(&sse_event(Some("e6"), &answer("b", "B")));
                return Reply::sse_open(log);
            }
            Reply::good()
        }
    };
    let server = Server::start(script).await;
    let client = builder(&server).build().unwrap();
    client.connect().await.unwrap();
    let mut notes = client.notifications();

    let a = echo("A").meta("progressToken", json!("a"));
    let b = echo("B").meta("progressToken", json!("b"));
    let (a_id, b_id) = (a.id(), b.id());
    let other = client.clone();
    let call_b = tokio::spawn(async move { other.call_tool(b).await });
    let ra = within("call A", Duration::from_secs(5), client.call_tool(a))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(ra.text(), "A");
    cut_b.open();
    let rb = within("call B", Duration::from_secs(5), call_b)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(rb.text(), "B");

    let mut seen: HashMap<(String, u64), Vec<Option<mcp_resume::CallId>>> = HashMap::new();
    while let Some(Some(note)) = notes.next().now_or_never() {
        if note.method != "notifications/progress" {
            continue;
        }
        let params = note.params.clone().unwrap_or_default();
        let key = (
            params["progressToken"].as_str().unwrap_or("?").to_owned(),
            params["progress"].as_u64().unwrap_or(0),
        );
        seen.entry(key).or_default().push(note.call);
    }
    let mut problems = Vec::new();
    for (token, n, owner) in [
        ("a", 1, a_id),
        ("a", 2, a_id),
        ("b", 1, b_id),
        ("b", 2, b_id),
    ] {
        let calls = seen.remove(&(token.to_owned(), n)).unwrap_or_default();
        if calls != vec![Some(owner)] {
            problems.push(format!(
                "progress {token}/{n}: delivered as {calls:?}, expected once as {owner:?} \
                 (A is {a_id:?}, B is {b_id:?})"
            ));
        }
    }
    if !seen.is_empty() {
        problems.push(format!("unexpected progress: {seen:?}"));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert_eq!(server.count(tool_calls), 2);
}

#[tokio::test]
async fn defect_07_flood_of_server_requests_is_bounded() {
    let _heavy = heavy().await;
    const PINGS: usize = 5000;
    let server = Server::start(|req| {
        if tool_calls(req) {
            let mut text = String::with_capacity(PINGS * 48);
            for i in 1..=PINGS {
                text.push_str(&sse_event(
                    None,
                    &json!({"jsonrpc": "2.0", "id": i, "method": "ping"}),
                ));
            }
            text.push_str(&sse_event(None, &result_msg(req, echo_result("flooded"))));
            return Reply::sse(text);
        }
        if req.is_answer() {
            // A slow server holds each answer: answers in flight pile up unless bounded.
            return Reply::status(202).after(Duration::from_millis(200));
        }
        Reply::good()
    })
    .await;
    let client = builder(&server)
        .call_timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    client.connect().await.unwrap();
    let probe = Probe::start();
    let result = within(
        "flood",
        Duration::from_secs(10),
        client.call_tool(echo("x")),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(result.text(), "flooded");
    assert!(
        server
            .saw_within(Duration::from_secs(3), 8, Request::is_answer)
            .await,
        "fewer than 8 answers: {}",
        server.count(Request::is_answer)
    );
    let mut failures = Failures::default();
    let grown = probe.peak_growth();
    failures.check(grown < 32 * MIB, || {
        format!("heap peak grew by {} KiB, bound 32 MiB", grown / 1024)
    });
    let in_flight = server.max_overlap(Request::is_answer);
    let answers = server.count(Request::is_answer);
    failures.check(in_flight <= 8, || {
        format!("{in_flight} answer POSTs in flight at once")
    });
    failures.check((8..=PINGS).contains(&answers), || {
        format!("{answers} answers")
    });
    failures.finish("flood");
    assert_usable("flood", &server, &client).await;
}

#[tokio::test]
async fn defect_08a_endless_500_body_on_a_call() {
    let _heavy = heavy().await;
    let server = Server::start(|req| {
        if tool_calls(req) {
            Reply::head(500, &[("Content-Type", "text/plain")]).endless(vec![b'5'; 16 * 1024])
        } else {
            Reply::good()
        }
    })
    .await;
    let client = builder(&server)
        .call_timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    client.connect().await.unwrap();
    let probe = Probe::start();
    let outcome = within(
        "endless 500",
        Duration::from_secs(2),
        client.call_tool(echo("x")),
    )
    .await;
    let call = server.wait_for(tool_calls).await;
    let err = match outcome {
        Ok(Err(err)) => err,
        Ok(Ok(r)) => panic!("endless 500: succeeded with {:?}", r.text()),
        Err(message) => panic!(
            "{message}; the server wrote {} bytes so far",
            server.outcome(call.seq).written.max(server.written())
        ),
    };
    assert_kind("endless 500", &err, ErrorKind::OutcomeUnknown);
    probe.assert_memory("endless 500", 4 * MIB);
    let outcome = server.wait_done(call.seq, Duration::from_secs(3)).await;
    assert!(
        outcome.done.is_some(),
        "the client still holds the connection"
    );
    assert!(
        outcome.written < 8 * MIB as u64,
        "the server wrote {} bytes",
        outcome.written
    );
    assert_eq!(server.count(tool_calls), 1);
    assert_usable("endless 500", &server, &client).await;
}

#[tokio::test]
async fn defect_08b_endless_404_body_on_the_listen_stream() {
    let _heavy = heavy().await;
    let server = Server::start(|req| {
        if req.is_get() {
            if req.session_id() == Some(session_name(1).as_str()) {
                return Reply::head(404, &[("Content-Type", "text/plain")])
                    .endless(vec![b'4'; 16 * 1024]);
            }
            return Reply::sse_open(": listening\n\n");
        }
        Reply::good()
    })
    .await;
    let client = builder(&server).open_listen_stream(true).build().unwrap();
    let probe = Probe::start();
    client.connect().await.unwrap();
    let get = server.wait_for(Request::is_get).await;
    let reinitialized = server
        .saw_within(Duration::from_secs(3), 2, initializes)
        .await;
    let outcome = server.wait_done(get.seq, Duration::from_secs(1)).await;
    assert!(
        reinitialized,
        "no re-initialization; the server wrote {} bytes of the 404 and saw {:?}",
        outcome.written,
        server.labels()
    );
    assert!(outcome.done.is_some(), "the client still holds the 404");
    assert!(
        outcome.written < 8 * MIB as u64,
        "the server wrote {} bytes",
        outcome.written
    );
    probe.assert_memory("endless 404", 4 * MIB);
    assert_usable("endless 404", &server, &client).await;
}

/// One call answered by `reply`; the error must be `kind`, name `cause` in its message if
/// given, come fast, and the call must have reached the server exactly once.
async fn one_meaning<F>(
    what: &str,
    reply: F,
    kind: ErrorKind,
    cause: Option<&str>,
    failures: &mut Failures,
) where
    F: Fn(&Request) -> Reply + Send + Sync + 'static,
{
    let server = Server::start(move |req| {
        if tool_calls(req) {
            reply(req)
        } else {
            Reply::good()
        }
    })
    .await;
    let client = builder(&server).build().unwrap();
    client.connect().await.unwrap();
    // By the harness's 5 s deadline, with a second's slack; that it was not sent again is
    // counted below.
    let outcome = within(what, Duration::from_secs(6), client.call_tool(echo("x"))).await;
    let err = match outcome {
        Ok(Err(err)) => err,
        Ok(Ok(r)) => return failures.push(format!("{what}: succeeded with {:?}", r.text())),
        Err(message) => return failures.push(message),
    };
    failures.check(err.kind() == kind, || {
        format!("{what}: got {} ({err}), expected {kind}", err.kind())
    });
    if let Some(cause) = cause {
        let message = err.to_string();
        failures.check(message.contains(cause), || {
            format!("{what}: message {message:?} does not name {cause:?}")
        });
    }
    let calls = server.count(tool_calls);
    failures.check(calls == 1, || {
        format!("{what}: the server saw the call {calls} times")
    });
}

#[tokio::test]
async fn defect_10_one_meaning_for_may_have_run() {
    let mut failures = Failures::default();
    one_meaning(
        "200 JSON answering another id",
        |_| {
            Reply::json(
                200,
                &json!({"jsonrpc": "2.0", "id": 987654, "result": echo_result("not yours")}),
            )
        },
        ErrorKind::OutcomeUnknown,
        Some("id"),
        &mut failures,
    )
    .await;
    one_meaning(
        "202 without a body",
        |_| Reply::status(202),
        ErrorKind::OutcomeUnknown,
        Some("202"),
        &mut failures,
    )
    .await;
    one_meaning(
        "500 with a JSON-RPC error, id null",
        |_| {
            Reply::json(
                500,
                &json!({"jsonrpc": "2.0", "id": null,
                    "error": {"code": -32603, "message": "Internal error"}}),
            )
        },
        ErrorKind::OutcomeUnknown,
        Some("500"),
        &mut failures,
    )
    .await;
    for status in [400u16, 401, 403, 405, 406, 413, 415, 429] {
        // A 401 refuses the credentials: its own kind, the body's JSON-RPC error kept.
        let refused = |kind| {
            if status == 401 {
                ErrorKind::Unauthorized
            } else {
                kind
            }
        };
        one_meaning(
            &format!("{status} with a JSON-RPC error"),
            move |_| {
                Reply::json(
                    status,
                    &json!({"jsonrpc": "2.0", "id": null,
                        "error": {"code": -32600, "message": "Refused"}}),
                )
            },
            refused(ErrorKind::Rpc),
            None,
            &mut failures,
        )
        .await;
        one_meaning(
            &format!("{status} with a text body"),
            move |_| Reply::full(status, &[("Content-Type", "text/plain")], "refused"),
            refused(ErrorKind::Protocol),
            None,
            &mut failures,
        )
        .await;
    }
    failures.finish("one meaning for may have run");
}
