//! Hostile protocol content: wrong, duplicate and unknown JSON-RPC ids, batches where they are
//! not allowed, wrong content types, hostile `retry` and event ids, malformed capability
//! hashes, floods of server requests, and reconnect storms.

use std::collections::HashSet;
use std::time::Duration;

use futures::StreamExt;
use mcp_resume::{ErrorKind, ReinitReason, SessionEvent};
use serde_json::{json, Value};

use crate::harness::*;
use crate::server::*;

fn response_text(req: &Request, text: &str) -> Value {
    result_msg(req, echo_result(text))
}

#[tokio::test]
async fn unknown_null_and_duplicate_ids_on_a_stream_are_ignored() {
    run(Case::new(
        "stray responses around the real one",
        |req| {
            let stray =
                |id: Value| json!({"jsonrpc": "2.0", "id": id, "result": echo_result("stray")});
            let mut text = String::new();
            text.push_str(&sse_event(None, &stray(json!(424242))));
            text.push_str(&sse_event(None, &stray(json!("not-ours"))));
            text.push_str(&sse_event(None, &stray(Value::Null)));
            text.push_str(&sse_event(None, &response_text(req, "real")));
            text.push_str(&sse_event(None, &response_text(req, "duplicate")));
            Reply::sse(text)
        },
        Expect::Ok(|text| text == "real"),
    ))
    .await;
}

// A batch is not a message on 2025-11-25: the answer is unreadable, after the request reached
// the server.

#[tokio::test]
async fn json_rpc_batch_as_a_json_body() {
    run(Case::new(
        "batch body",
        |req| Reply::json(200, &json!([response_text(req, "batched")])),
        Expect::Err(ErrorKind::OutcomeUnknown),
    ))
    .await;
}

#[tokio::test]
async fn json_rpc_batch_in_an_sse_event() {
    run(Case::new(
        "batch event",
        |req| Reply::sse(sse_event(None, &json!([response_text(req, "batched")]))),
        Expect::Err(ErrorKind::OutcomeUnknown),
    ))
    .await;
}

#[tokio::test]
async fn a_batch_of_millions_of_elements_is_refused_without_reading_each() {
    let _heavy = heavy().await;
    // Four million elements in 8 MiB: each a `Value`, then a decoded message, they took
    // gigabytes where batches are allowed (2025-03-26), and a `Value` each where they are not.
    let body = bytes::Bytes::from(format!("[{}0]", "0,".repeat(4_000_000)));
    for version in ["2025-03-26", VERSION] {
        let what = format!("a batch of four million elements on {version}");
        let answer = body.clone();
        let server = Server::start(move |req| {
            if initializes(req) {
                let result = json!({"protocolVersion": version, "capabilities": {},
                    "serverInfo": {"name": "hostile", "version": "1"}});
                return Reply::json(200, &result_msg(req, result));
            }
            if tool_calls(req) {
                let json = [("Content-Type", "application/json")];
                return Reply::full(200, &json, answer.clone());
            }
            Reply::good()
        })
        .await;
        let client = builder(&server).max_body_size(16 * MIB).build().unwrap();
        client.connect().await.unwrap();
        let probe = Probe::start();
        let (err, _) = failing(&what, Duration::from_secs(5), client.call_tool(echo("x"))).await;
        // Read like any other body without the call's response, after the call reached the
        // server.
        assert_kind(&what, &err, ErrorKind::OutcomeUnknown);
        probe.assert_memory(&what, 40 * MIB);
        assert_usable(&what, &server, &client).await;
    }
}

#[tokio::test]
async fn text_html_with_200() {
    // A 200 page from something that is not the MCP server (a portal, a proxy) may or may
    // not have passed the request on: both readings are defensible; success is not.
    run(Case::new(
        "text/html 200",
        |_| {
            Reply::full(
                200,
                &[("Content-Type", "text/html")],
                "<html><body>hello</body></html>",
            )
        },
        Expect::ErrAny(&[ErrorKind::Protocol, ErrorKind::OutcomeUnknown]),
    ))
    .await;
}

#[tokio::test]
async fn a_huge_retry_is_never_undercut() {
    // `retry` beyond the deadline: the client may not reconnect earlier than asked, so the call
    // cannot be resumed in time. It ends by its deadline at the latest, and no resume is sent.
    let server = Server::start(|req| {
        if tool_calls(req) {
            Reply::sse("retry: 99999999999999999999999999\nid: r1\ndata:\n\n")
        } else {
            Reply::good()
        }
    })
    .await;
    let deadline = Duration::from_secs(1);
    let client = builder(&server).call_timeout(deadline).build().unwrap();
    client.connect().await.unwrap();
    let probe = Probe::start();
    // By its deadline, with slack for a loaded machine.
    let (err, _) = failing(
        "huge retry",
        deadline + Duration::from_secs(2),
        client.call_tool(echo("x")),
    )
    .await;
    assert!(
        matches!(err.kind(), ErrorKind::Timeout | ErrorKind::OutcomeUnknown),
        "{err}"
    );
    probe.assert_memory("huge retry", MIB);
    assert_eq!(server.count(Request::is_resume), 0, "{:?}", server.labels());
    assert_eq!(server.count(tool_calls), 1);
    assert_usable("huge retry", &server, &client).await;
}

#[tokio::test]
async fn negative_and_non_numeric_retry_values_are_ignored() {
    let posted = std::sync::Arc::new(std::sync::Mutex::new(Value::Null));
    let seen = posted.clone();
    let server = Server::start(move |req| {
        if tool_calls(req) {
            *seen.lock().unwrap() = req.rpc_id();
            return Reply::sse("retry: -5\nretry: 1e3\nretry: 12abc\nretry:\nid: r1\ndata:\n\n");
        }
        if req.is_resume() {
            let id = seen.lock().unwrap().clone();
            let answer = json!({"jsonrpc": "2.0", "id": id, "result": echo_result("resumed")});
            return Reply::sse_open(sse_event(Some("r2"), &answer));
        }
        Reply::good()
    })
    .await;
    let client = builder(&server).build().unwrap();
    client.connect().await.unwrap();
    let probe = Probe::start();
    let result = within(
        "odd retry",
        Duration::from_secs(3),
        client.call_tool(echo("x")),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(result.text(), "resumed");
    probe.assert_memory("odd retry", MIB);
    let post = server.wait_for(tool_calls).await;
    let resumes = server.matching(Request::is_resume);
    assert_eq!(resumes.len(), 1, "{:?}", server.labels());
    assert_eq!(resumes[0].last_event_id(), Some("r1"));
    // The backoff still applies: an ignored `retry` is not a `retry: 0`.
    let gap = resumes[0].at - post.at;
    assert!(gap >= Duration::from_millis(10), "resumed after {gap:?}");
    assert_eq!(server.count(tool_calls), 1);
    assert_usable("odd retry", &server, &client).await;
}

#[tokio::test]
async fn hostile_event_ids_never_become_the_cursor() {
    let posted = std::sync::Arc::new(std::sync::Mutex::new(Value::Null));
    let seen = posted.clone();
    let server = Server::start(move |req| {
        if tool_calls(req) {
            *seen.lock().unwrap() = req.rpc_id();
            let mut text = b"id: e1\ndata:\n\n".to_vec();
            // Too long for a header, then control characters a header cannot carry.
            text.extend(format!("id: {}\ndata:\n\n", "x".repeat(2000)).into_bytes());
            text.extend_from_slice(b"id: e\x01x\ndata:\n\n");
            text.extend_from_slice(b"id: e\x7fx\ndata:\n\n");
            text.extend_from_slice(b"id: e\x00x\ndata:\n\n");
            text.extend_from_slice(b"id: e\x1bx\ndata:\n\n");
            return Reply::sse(text);
        }
        if req.is_resume() {
            let id = seen.lock().unwrap().clone();
            let answer = json!({"jsonrpc": "2.0", "id": id, "result": echo_result("resumed")});
            return Reply::sse_open(sse_event(Some("e9"), &answer));
        }
        Reply::good()
    })
    .await;
    let client = builder(&server).build().unwrap();
    client.connect().await.unwrap();
    let result = within(
        "hostile ids",
        Duration::from_secs(3),
        client.call_tool(echo("x")),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(result.text(), "resumed");
    let resumes = server.matching(Request::is_resume);
    assert_eq!(resumes.len(), 1, "{:?}", server.labels());
    assert_eq!(resumes[0].last_event_id(), Some("e1"));
    assert_usable("hostile ids", &server, &client).await;
}

/// A resume answered 409 while the server still maps the cut stream (the TypeScript SDK 1.x
/// answers so to a resume that comes before it noticed the cut): the stream is still there,
/// so the call resumes again after its backoff rather than ending with an unknown outcome.
#[tokio::test]
async fn a_resume_refused_409_while_the_stream_is_mapped_resumes_again() {
    let posted = std::sync::Arc::new(std::sync::Mutex::new(Value::Null));
    let seen = posted.clone();
    let resumes = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let server = Server::start(move |req| {
        if tool_calls(req) {
            *seen.lock().unwrap() = req.rpc_id();
            return Reply::sse(&b"id: s-1\ndata:\n\n"[..]);
        }
        if req.is_resume() {
            if resumes.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
                return Reply::json(
                    409,
                    &json!({"jsonrpc": "2.0", "error": {"code": -32000,
                        "message": "Conflict: Stream already has an active connection"},
                        "id": null}),
                );
            }
            let id = seen.lock().unwrap().clone();
            let answer = json!({"jsonrpc": "2.0", "id": id, "result": echo_result("resumed")});
            return Reply::sse_open(sse_event(Some("s-2"), &answer));
        }
        Reply::good()
    })
    .await;
    let client = builder(&server).build().unwrap();
    client.connect().await.unwrap();
    let result = within(
        "409 resume",
        Duration::from_secs(3),
        client.call_tool(echo("x")),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(result.text(), "resumed");
    let resumes = server.matching(Request::is_resume);
    assert_eq!(resumes.len(), 2, "{:?}", server.labels());
    assert!(resumes.iter().all(|r| r.last_event_id() == Some("s-1")));
    assert_usable("409 resume", &server, &client).await;
}

/// A server giving every event of the session the same id (the official Java SDK writes the
/// session id as each response event's id): each call's answer is read, not dropped as a
/// replay of the first one's.
#[tokio::test]
async fn a_server_reusing_one_event_id_for_every_answer_is_read() {
    let server = Server::start(|req| {
        if tool_calls(req) {
            let text = req.params()["arguments"]["text"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            return Reply::sse(sse_event(Some("session-1"), &response_text(req, &text)));
        }
        Reply::good()
    })
    .await;
    let client = builder(&server).build().unwrap();
    client.connect().await.unwrap();
    for text in ["first", "second", "third"] {
        let result = within(
            "one id",
            Duration::from_secs(3),
            client.call_tool(echo(text)),
        )
        .await
        .unwrap()
        .unwrap();
        assert_eq!(result.text(), text);
    }
    assert_eq!(server.count(tool_calls), 3, "each call sent once");
}

fn hash_options() -> Options {
    Options {
        capabilities: json!({
            "tools": {},
            "experimental": {"resumeSafety": {"version": 1, "capabilityHash": true}}
        }),
        capability_hash: Some(format!("sha256:{}", "ab".repeat(32))),
        listen: false,
    }
}

#[tokio::test]
async fn malformed_capability_hash_on_an_answer_is_a_context_mismatch() {
    // The session negotiated a valid hash; an answer naming no valid hash cannot be proven to
    // come from the same context.
    let server = Server::start_with(hash_options(), |req| {
        if tool_calls(req) {
            let body = response_text(req, "unproven");
            return Reply::full(
                200,
                &[
                    ("Content-Type", "application/json"),
                    ("Mcp-Capability-Hash", "sha256:zz"),
                ],
                body.to_string(),
            );
        }
        Reply::good()
    })
    .await;
    let client = builder(&server).build().unwrap();
    let mut events = client.events();
    client.connect().await.unwrap();
    // By the harness's 5 s deadline, with a second's slack.
    let (err, _) = failing(
        "bad hash",
        Duration::from_secs(6),
        client.call_tool(echo("x")),
    )
    .await;
    assert_kind("bad hash", &err, ErrorKind::ContextMismatch);
    let reinit = within("bad hash", Duration::from_secs(3), async {
        while let Some(event) = events.next().await {
            if let SessionEvent::Reinitialized { reason, .. } = event {
                return Some(reason);
            }
        }
        None
    })
    .await
    .unwrap();
    assert_eq!(reinit, Some(ReinitReason::CapabilityMismatch));
    assert_eq!(server.count(tool_calls), 1, "it already ran: never re-sent");
    assert_usable("bad hash", &server, &client).await;
}

/// Memory must not grow with the flood: the answers are tiny, and only a bounded number of
/// them may be in flight or queued at once.
#[tokio::test]
async fn a_flood_of_server_pings_is_answered_in_bounds() {
    let _heavy = heavy().await;
    const PINGS: usize = 1000;
    let server = Server::start(|req| {
        if tool_calls(req) {
            let mut text = String::with_capacity(PINGS * 48);
            for i in 1..=PINGS {
                text.push_str(&sse_event(
                    None,
                    &json!({"jsonrpc": "2.0", "id": i, "method": "ping"}),
                ));
            }
            text.push_str(&sse_event(None, &response_text(req, "after the flood")));
            return Reply::sse(text);
        }
        Reply::good()
    })
    .await;
    let client = builder(&server).build().unwrap();
    client.connect().await.unwrap();
    let probe = Probe::start();
    let result = within(
        "ping flood",
        Duration::from_secs(5),
        client.call_tool(echo("x")),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(result.text(), "after the flood");
    probe.assert_memory("ping flood", 16 * MIB);
    let answers = server.matching(Request::is_answer);
    assert!(answers.len() <= PINGS, "{} answers", answers.len());
    let mut ids = HashSet::new();
    for answer in &answers {
        let body = answer.json.as_ref().unwrap();
        assert_eq!(body["result"], json!({}), "{body}");
        assert!(ids.insert(body["id"].clone()), "answered twice: {body}");
    }
    assert_usable("ping flood", &server, &client).await;
}

/// A POST stream that sends its priming event and closes, and resumes answered by `resume`.
async fn storm(resume: fn(&Request) -> Reply) -> (Server, mcp_resume::Client) {
    let server = Server::start(move |req| {
        if tool_calls(req) {
            Reply::sse("id: s1\ndata:\n\n")
        } else if req.is_resume() {
            resume(req)
        } else {
            Reply::good()
        }
    })
    .await;
    let client = builder(&server).build().unwrap();
    client.connect().await.unwrap();
    (server, client)
}

/// The resumes are bounded and spaced by the backoff, and the call ends by its deadline.
async fn assert_storm_bounded(what: &str, server: &Server, client: &mcp_resume::Client) {
    let probe = Probe::start();
    // The harness's 5 s deadline, with a second's slack.
    let outcome = within(what, Duration::from_secs(6), client.call_tool(echo("x"))).await;
    let err = match outcome {
        Ok(Err(err)) => err,
        Ok(Ok(r)) => panic!("{what}: succeeded with {:?}", r.text()),
        Err(message) => panic!(
            "{message}: {} resumes so far (a storm)",
            server.count(Request::is_resume)
        ),
    };
    assert_kind(what, &err, ErrorKind::OutcomeUnknown);
    probe.assert_memory(what, MIB);
    let post = server.wait_for(tool_calls).await;
    let resumes = server.matching(Request::is_resume);
    assert!(
        (1..=5).contains(&resumes.len()),
        "{what}: {} resumes: {:?}",
        resumes.len(),
        server.labels()
    );
    let mut last = post.at;
    for resume in &resumes {
        assert_eq!(resume.last_event_id(), Some("s1"), "{what}");
        let gap = resume.at - last;
        assert!(
            gap >= Duration::from_millis(10),
            "{what}: resumed after {gap:?}"
        );
        last = resume.at;
    }
    assert_eq!(
        server.count(tool_calls),
        1,
        "{what}: unkeyed, never re-sent"
    );
    assert_usable(what, server, client).await;
}

#[tokio::test]
async fn reconnect_storm_of_empty_streams() {
    let (server, client) = storm(|_| Reply::sse("")).await;
    assert_storm_bounded("empty resumed streams", &server, &client).await;
}

#[tokio::test]
async fn reconnect_storm_of_cut_streams() {
    // Chunked, cut inside a chunk: an error, not a clean end.
    let (server, client) = storm(|_| {
        Reply::raw(
            "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n40\r\n: partial",
        )
    })
    .await;
    assert_storm_bounded("cut resumed streams", &server, &client).await;
}

#[tokio::test]
async fn reconnect_storm_replaying_the_cursor() {
    // Each resume replays the event the client resumed from, and ends: nothing new arrives,
    // so this is no progress however many times it repeats.
    let (server, client) = storm(|_| Reply::sse("id: s1\ndata:\n\n")).await;
    assert_storm_bounded("resumes replaying the cursor", &server, &client).await;
}

#[tokio::test]
async fn a_keyed_call_whose_every_resume_is_refused_is_resent_at_most_max_attempts_times() {
    // A cluster without affinity: each POST stream sends its priming event and closes, and
    // each resume lands where the session is unknown (404). The keyed call is re-sent on a
    // new session each time, and none of those sessions ever answers anything. A priming
    // event is no progress of the call: its failed attempts add up, and after
    // `max_attempts` it ends with its outcome unknown, instead of re-initializing and
    // re-sending as fast as the server answers until its deadline.
    let what = "keyed call, every resume refused 404";
    let server = Server::start(|req| {
        if tool_calls(req) {
            Reply::sse("id: s1\ndata:\n\n")
        } else if req.is_resume() {
            Reply::status(404)
        } else {
            Reply::good()
        }
    })
    .await;
    let policy = mcp_resume::ReconnectPolicy::default().with_max_delay(Duration::from_millis(50));
    let client = builder(&server)
        .resend_policy(mcp_resume::ResendPolicy::AssumeServerDeduplicates)
        .reconnect(policy.clone())
        .call_timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    client.connect().await.unwrap();
    let probe = Probe::start();
    let call = echo("x").random_idempotency_key();
    let (err, took) = failing(what, Duration::from_secs(7), client.call_tool(call)).await;
    assert_kind(what, &err, ErrorKind::OutcomeUnknown);
    assert!(err.may_have_run(), "{what}: {err:?}");
    assert!(
        took < Duration::from_secs(4),
        "{what}: ended after {took:?}"
    );
    probe.assert_memory(what, 4 * MIB);
    let max = policy.max_attempts as usize;
    let posts = server.count(tool_calls);
    assert!(posts <= max, "{what}: {posts} POSTs of one call");
    let inits = server.count(initializes);
    assert!(inits <= max + 1, "{what}: {inits} initialize");
    assert_usable(what, &server, &client).await;
}

#[tokio::test]
async fn a_call_whose_stream_primes_after_failed_sends_still_resumes() {
    // The call's first POST is answered 502 (it may have run: the keyed call is re-sent), its
    // second primes its stream and the connection drops. The priming event proves the server
    // reached again: the failures before it are no longer "in a row", and a stream with an
    // event id seen is resumed, as the recovery guide says, instead of the call ending
    // OutcomeUnknown on attempts the server's answer had ended.
    let what = "primed after a failed send";
    let posted = std::sync::Arc::new(std::sync::Mutex::new(Value::Null));
    let seen = posted.clone();
    let server = Server::start(move |req| {
        if tool_calls(req) {
            let mut last = seen.lock().unwrap();
            let first = last.is_null();
            *last = req.rpc_id();
            if first {
                return Reply::status(502);
            }
            return Reply::sse("id: p1\ndata:\n\n");
        }
        if req.is_resume() {
            let id = seen.lock().unwrap().clone();
            let answer = json!({"jsonrpc": "2.0", "id": id, "result": echo_result("resumed")});
            return Reply::sse_open(sse_event(Some("p2"), &answer));
        }
        Reply::good()
    })
    .await;
    let client = builder(&server)
        .resend_policy(mcp_resume::ResendPolicy::AssumeServerDeduplicates)
        .reconnect(fast_policy().with_max_attempts(2))
        .build()
        .unwrap();
    client.connect().await.unwrap();
    let call = echo("x").random_idempotency_key();
    let result = within(what, Duration::from_secs(4), client.call_tool(call))
        .await
        .unwrap();
    let resumes = server.matching(Request::is_resume);
    assert_eq!(resumes.len(), 1, "{what}: {:?}", server.labels());
    assert_eq!(resumes[0].last_event_id(), Some("p1"), "{what}");
    assert_eq!(result.unwrap().text(), "resumed", "{what}");
    assert_eq!(server.count(tool_calls), 2, "{what}");
    assert_usable(what, &server, &client).await;
}

#[tokio::test]
async fn listen_stream_storm_gives_up() {
    let server = Server::start(|req| {
        if req.is_get() {
            Reply::sse("")
        } else {
            Reply::good()
        }
    })
    .await;
    let client = builder(&server).open_listen_stream(true).build().unwrap();
    let probe = Probe::start();
    client.connect().await.unwrap();
    // The stream gets `max_attempts` tries in all, like a call's exchanges.
    let cap = fast_policy().max_attempts as usize;
    assert!(
        server
            .saw_within(Duration::from_secs(3), cap, Request::is_get)
            .await,
        "{:?}",
        server.labels()
    );
    // An observation window for the absence of more GETs: twenty times the longest backoff.
    tokio::time::sleep(fast_policy().max_delay * 20).await;
    let gets = server.matching(Request::is_get);
    assert_eq!(gets.len(), cap, "{:?}", server.labels());
    for pair in gets.windows(2) {
        let gap = pair[1].at - pair[0].at;
        assert!(gap >= Duration::from_millis(10), "reopened after {gap:?}");
    }
    probe.assert_memory("listen storm", MIB);
    assert_usable("listen storm", &server, &client).await;
}

/// A session id a server may send, and the error kinds refusing it may take.
type HostileId = (&'static str, fn() -> String, &'static [ErrorKind]);

#[tokio::test]
async fn hostile_session_ids_are_refused_at_initialize() {
    let mut failures = Failures::default();
    // The HTTP layer itself refuses a control character in a header, before the client sees
    // the head: that surfaces as a transport failure of `initialize`.
    let hostile: [HostileId; 3] = [
        ("a space", || "bad id".to_owned(), &[ErrorKind::Protocol]),
        (
            "a control character",
            || "bad\u{7}id".to_owned(),
            &[ErrorKind::Protocol, ErrorKind::Transport],
        ),
        ("2,000 bytes", || "s".repeat(2000), &[ErrorKind::Protocol]),
    ];
    for (what, id, kinds) in hostile {
        let server = Server::start(move |req| {
            if initializes(req) {
                let body = result_msg(
                    req,
                    json!({"protocolVersion": VERSION, "capabilities": {},
                        "serverInfo": {"name": "hostile", "version": "1"}}),
                );
                let id = id();
                return Reply::full(
                    200,
                    &[
                        ("Content-Type", "application/json"),
                        ("Mcp-Session-Id", &id),
                    ],
                    body.to_string(),
                );
            }
            Reply::good()
        })
        .await;
        let client = builder(&server).build().unwrap();
        match within(what, Duration::from_secs(2), client.connect()).await {
            Ok(Err(err)) => failures.check(kinds.contains(&err.kind()), || {
                format!("session id with {what}: {err}")
            }),
            other => failures.push(format!("session id with {what}: {other:?}")),
        }
        // Nothing was ever sent with the hostile id.
        failures.check(server.count(|r| !handshake(r)) == 0, || {
            format!("session id with {what}: {:?}", server.labels())
        });
        // A failed first connect is not terminal: the next one starts over.
        server.behave();
        let again = within(what, Duration::from_secs(2), client.call_tool(echo("ok"))).await;
        failures.check(matches!(&again, Ok(Ok(r)) if r.text() == "ok"), || {
            format!("session id with {what}: afterwards {again:?}")
        });
    }
    failures.finish("hostile session ids");
}

#[tokio::test]
async fn a_hanging_delete_does_not_hang_close() {
    let server = Server::start(|req| {
        if req.is_delete() {
            Reply::hang_before_head()
        } else {
            Reply::good()
        }
    })
    .await;
    let deadline = Duration::from_secs(1);
    let client = builder(&server).call_timeout(deadline).build().unwrap();
    client.connect().await.unwrap();
    // The DELETE is given the call timeout; slack for a loaded machine.
    let closed = within("close", deadline + Duration::from_secs(2), client.close())
        .await
        .unwrap();
    if let Err(err) = closed {
        assert!(
            matches!(err.kind(), ErrorKind::Transport | ErrorKind::Timeout),
            "{err}"
        );
    }
    assert_eq!(server.count(Request::is_delete), 1);
    // Closed is terminal, whatever the DELETE did.
    let (err, _) = failing("after close", Duration::from_secs(1), client.ping()).await;
    assert_kind("after close", &err, ErrorKind::Closed);
}

#[tokio::test]
async fn initialize_redirect_is_not_followed() {
    let server = Server::start(|req| {
        if initializes(req) {
            let location = format!("http://{}/elsewhere", req.header("host").unwrap_or(""));
            Reply::full(307, &[("Location", &location)], "")
        } else {
            Reply::good()
        }
    })
    .await;
    let client = builder(&server).build().unwrap();
    // By the harness's 5 s deadline, with a second's slack; not followed, as counted below.
    let (err, _) = failing("redirect", Duration::from_secs(6), client.connect()).await;
    assert_kind("redirect", &err, ErrorKind::Protocol);
    assert_eq!(
        server.count(|r| r.path != "/mcp"),
        0,
        "{:?}",
        server.labels()
    );
    assert_eq!(server.count(initializes), 1);
    assert_usable("redirect", &server, &client).await;
}

#[tokio::test]
async fn a_session_id_on_a_later_answer_is_ignored() {
    // Only `initialize` assigns the session; a later header naming another one is noise.
    let server = Server::start(|req| {
        if tool_calls(req) {
            let body = response_text(req, "x");
            return Reply::full(
                200,
                &[
                    ("Content-Type", "application/json"),
                    ("Mcp-Session-Id", "hijacked"),
                ],
                body.to_string(),
            );
        }
        Reply::good()
    })
    .await;
    let client = builder(&server).build().unwrap();
    client.connect().await.unwrap();
    let r = within(
        "late id",
        Duration::from_secs(2),
        client.call_tool(echo("x")),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(r.text(), "x");
    within("late id", Duration::from_secs(2), client.ping())
        .await
        .unwrap()
        .unwrap();
    let ping = server.wait_for(|r| r.is_rpc("ping")).await;
    assert_eq!(ping.session_id(), Some(session_name(1).as_str()));
}
