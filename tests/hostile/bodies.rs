//! Hostile bodies and heads on a call's POST: endless and oversized lines, events, bodies and
//! headers; invalid UTF-8 and BOMs; broken framing; trickles and hangs.

use std::time::Duration;

use bytes::Bytes;
use mcp_resume::ErrorKind;
use serde_json::{json, Value};

use crate::harness::*;
use crate::server::*;

fn json_head() -> Reply {
    Reply::head(200, &[("Content-Type", "application/json")])
}

fn response_text(req: &Request, text: &str) -> Value {
    result_msg(req, echo_result(text))
}

const MANY: u64 = 8 * 1024 * 1024;

#[tokio::test]
async fn endless_sse_line_without_newline() {
    let _heavy = heavy().await;
    run(Case::new(
        "endless SSE line",
        |_| {
            Reply::sse_head()
                .write("data: ")
                .endless(vec![b'a'; 16 * 1024])
        },
        Expect::Err(ErrorKind::TooLarge),
    )
    .written_below(MANY))
    .await;
}

#[tokio::test]
async fn sse_event_larger_than_max_event_size() {
    let _heavy = heavy().await;
    // Many short lines, each harmless: only their sum is too large.
    run(Case::new(
        "SSE event over max_event_size",
        |_| {
            let line = format!("data: {}\n", "b".repeat(1000));
            Reply::sse_head().write(line.repeat(2 * MAX_EVENT / 1000))
        },
        Expect::Err(ErrorKind::TooLarge),
    ))
    .await;
}

#[tokio::test]
async fn endless_json_body() {
    let _heavy = heavy().await;
    run(Case::new(
        "endless JSON body",
        |req| {
            let start = format!(
                r#"{{"jsonrpc":"2.0","id":{},"result":{{"content":[{{"type":"text","text":""#,
                req.rpc_id()
            );
            json_head().write(start).endless(vec![b'j'; 16 * 1024])
        },
        Expect::Err(ErrorKind::TooLarge),
    )
    .written_below(MANY))
    .await;
}

#[tokio::test]
async fn oversized_json_body_with_content_length() {
    let _heavy = heavy().await;
    run(Case::new(
        "JSON body over max_body_size",
        |req| {
            let prefix = format!(
                r#"{{"jsonrpc":"2.0","id":{},"result":{{"content":[{{"type":"text","text":""#,
                req.rpc_id()
            );
            let suffix = r#""}]}}"#;
            let fill = 4 * MAX_BODY as u64;
            let length = prefix.len() as u64 + fill + suffix.len() as u64;
            Reply::raw(format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
            ))
            .write(prefix)
            .then(Step::Fill(b'k', fill))
            .write(suffix)
        },
        Expect::Err(ErrorKind::TooLarge),
    ))
    .await;
}

// A head the HTTP layer refuses arrives after the request reached the server: the call may
// have run, and it is unkeyed.

#[tokio::test]
async fn huge_response_header() {
    run(Case::new(
        "1 MiB response header",
        |_| {
            let mut head =
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Huge: ".to_vec();
            head.extend(vec![b'h'; MIB]);
            head.extend_from_slice(b"\r\nContent-Length: 2\r\n\r\n{}");
            Reply::raw(head)
        },
        Expect::Err(ErrorKind::OutcomeUnknown),
    )
    .written_below(MANY))
    .await;
}

#[tokio::test]
async fn endless_response_header_line() {
    let _heavy = heavy().await;
    run(Case::new(
        "endless header line",
        |_| Reply::raw("HTTP/1.1 200 OK\r\nX-Endless: ").endless(vec![b'e'; 16 * 1024]),
        Expect::Err(ErrorKind::OutcomeUnknown),
    )
    .written_below(MANY))
    .await;
}

#[tokio::test]
async fn ten_thousand_response_headers() {
    run(Case::new(
        "10,000 headers",
        |_| {
            let mut head = String::from("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n");
            for i in 0..10_000 {
                head.push_str(&format!("X-H{i}: v\r\n"));
            }
            head.push_str("Content-Length: 2\r\n\r\n{}");
            Reply::raw(head)
        },
        Expect::Err(ErrorKind::OutcomeUnknown),
    ))
    .await;
}

#[tokio::test]
async fn invalid_utf8_in_sse_data_is_decoded_lossily() {
    // The SSE spec decodes UTF-8 lossily: the answer arrives, with U+FFFD where the bytes
    // were invalid.
    run(Case::new(
        "invalid UTF-8 in SSE data",
        |req| {
            let mut event = format!(
                r#"id: u1{nl}data: {{"jsonrpc":"2.0","id":{},"result":{{"content":[{{"type":"text","text":"a"#,
                req.rpc_id(),
                nl = "\n"
            )
            .into_bytes();
            event.extend_from_slice(b"\xff\xfe\xc3");
            event.extend_from_slice(b"b\"}]}}\n\n");
            Reply::sse(event)
        },
        Expect::Ok(|text| text.starts_with('a') && text.ends_with('b') && text.contains('\u{FFFD}')),
    ))
    .await;
}

#[tokio::test]
async fn invalid_utf8_in_a_json_body() {
    // Not JSON at all (RFC 8259 requires UTF-8), after the request reached the server.
    run(Case::new(
        "invalid UTF-8 in JSON",
        |req| {
            let mut body = format!(
                r#"{{"jsonrpc":"2.0","id":{},"result":{{"content":[{{"type":"text","text":"a"#,
                req.rpc_id()
            )
            .into_bytes();
            body.extend_from_slice(b"\xff\xfe\"}]}}");
            Reply::full(200, &[("Content-Type", "application/json")], body)
        },
        Expect::Err(ErrorKind::OutcomeUnknown),
    ))
    .await;
}

#[tokio::test]
async fn utf8_bom_at_the_start_of_the_stream() {
    run(Case::new(
        "BOM before the first event",
        |req| {
            let mut body = b"\xEF\xBB\xBF".to_vec();
            body.extend(sse_event(Some("b1"), &response_text(req, "bom")).into_bytes());
            Reply::sse(body)
        },
        Expect::Ok(|text| text == "bom"),
    ))
    .await;
}

#[tokio::test]
async fn a_second_bom_is_content_not_a_bom() {
    // Only the first BOM is stripped; the second makes the field name unknown, so the event
    // carries no data and the stream ends without the response (and without an id).
    run(Case::new(
        "two BOMs",
        |req| {
            let mut body = b"\xEF\xBB\xBF\xEF\xBB\xBF".to_vec();
            body.extend(sse_event(None, &response_text(req, "bom")).into_bytes());
            Reply::sse(body)
        },
        Expect::Err(ErrorKind::OutcomeUnknown),
    ))
    .await;
}

#[tokio::test]
async fn trickled_answer_arrives() {
    run(Case::new(
        "trickled JSON answer",
        |req| {
            let body = response_text(req, "slowly").to_string();
            Reply::head(
                200,
                &[
                    ("Content-Type", "application/json"),
                    ("Content-Length", &body.len().to_string()),
                ],
            )
            .then(Step::Trickle {
                bytes: Bytes::from(body),
                every: Duration::from_millis(4),
                forever: false,
            })
        },
        Expect::Ok(|text| text == "slowly"),
    )
    .timing(
        Duration::from_secs(5),
        Duration::from_millis(300),
        Duration::from_secs(4),
    ))
    .await;
}

#[tokio::test]
async fn endless_trickle_meets_the_deadline() {
    // One comment byte every 20 ms keeps the connection busy forever; only the deadline ends
    // the call.
    run(Case::new(
        "endless trickle",
        |_| {
            Reply::sse_head().then(Step::Trickle {
                bytes: Bytes::from_static(b":"),
                every: Duration::from_millis(20),
                forever: true,
            })
        },
        Expect::Err(ErrorKind::Timeout),
    )
    .timing(
        Duration::from_secs(1),
        Duration::from_millis(900),
        Duration::from_secs(3),
    ))
    .await;
}

#[tokio::test]
async fn endless_events_without_the_response() {
    // Valid progress notifications, forever: nothing may accumulate per event, and only the
    // deadline ends the call.
    let _heavy = heavy().await;
    let mut case = Case::new(
        "endless events",
        |_| {
            let mut chunk = String::new();
            for i in 0..100 {
                let note = json!({"jsonrpc": "2.0", "method": "notifications/progress",
                    "params": {"progressToken": "t", "progress": i}});
                chunk.push_str(&sse_event(Some(&format!("p{i}")), &note));
            }
            Reply::sse_head().endless(chunk)
        },
        Expect::Err(ErrorKind::Timeout),
    )
    .timing(
        Duration::from_secs(1),
        Duration::from_millis(900),
        Duration::from_secs(3),
    );
    case.memory = 8 * MIB;
    run(case).await;
}

#[tokio::test]
async fn hang_before_the_head() {
    run(Case::new(
        "hang before head",
        |_| Reply::hang_before_head(),
        Expect::Err(ErrorKind::Timeout),
    )
    .timing(
        Duration::from_secs(1),
        Duration::from_millis(900),
        Duration::from_secs(3),
    ))
    .await;
}

#[tokio::test]
async fn hang_after_an_sse_head() {
    run(Case::new(
        "hang after SSE head",
        |_| Reply::sse_head().hang(),
        Expect::Err(ErrorKind::Timeout),
    )
    .timing(
        Duration::from_secs(1),
        Duration::from_millis(900),
        Duration::from_secs(3),
    ))
    .await;
}

#[tokio::test]
async fn hang_inside_a_json_body() {
    run(Case::new(
        "hang inside JSON body",
        |_| {
            Reply::raw(
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n{\"jsonrpc\":",
            )
            .hang()
        },
        Expect::Err(ErrorKind::Timeout),
    )
    .timing(
        Duration::from_secs(1),
        Duration::from_millis(900),
        Duration::from_secs(3),
    ))
    .await;
}

#[tokio::test]
async fn a_deadline_cancels_the_hanging_call() {
    let server = Server::start(|req| {
        if tool_calls(req) {
            Reply::hang_before_head()
        } else {
            Reply::good()
        }
    })
    .await;
    let client = builder(&server)
        .call_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let (err, _) = failing("hang", Duration::from_secs(3), client.call_tool(echo("x"))).await;
    assert_kind("hang", &err, ErrorKind::Timeout);
    let call = server.wait_for(tool_calls).await;
    let cancel = server
        .wait_for(|r| r.is_rpc("notifications/cancelled"))
        .await;
    assert_eq!(cancel.params()["requestId"], call.rpc_id());
    // The abandoned connection is closed, not leaked.
    let outcome = server.wait_done(call.seq, Duration::from_secs(3)).await;
    assert!(outcome.peer_gone, "the client kept the hanging connection");
}

#[tokio::test]
async fn invalid_chunk_size() {
    run(Case::new(
        "bad chunked encoding",
        |_| {
            Reply::raw(
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n",
            )
        },
        Expect::Err(ErrorKind::OutcomeUnknown),
    ))
    .await;
}

#[tokio::test]
async fn chunk_size_beyond_u64() {
    run(Case::new(
        "chunk size overflow",
        |_| {
            Reply::raw(
                "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffffffffffffff\r\ndata: x\n\n\r\n",
            )
        },
        Expect::Err(ErrorKind::OutcomeUnknown),
    ))
    .await;
}

#[tokio::test]
async fn body_shorter_than_its_content_length() {
    run(Case::new(
        "truncated body",
        |req| {
            let body = response_text(req, "cut").to_string();
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                body.len() + 100
            );
            Reply::raw(head).write(body)
        },
        Expect::Err(ErrorKind::OutcomeUnknown),
    ))
    .await;
}

#[tokio::test]
async fn conflicting_duplicate_content_lengths() {
    run(Case::new(
        "two Content-Length headers",
        |req| {
            let body = response_text(req, "dup").to_string();
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nContent-Length: {}\r\n\r\n",
                body.len(),
                body.len() + 7
            );
            Reply::raw(head).write(body)
        },
        Expect::Err(ErrorKind::OutcomeUnknown),
    ))
    .await;
}

#[tokio::test]
async fn duplicate_session_id_headers_are_used_consistently() {
    // Two different session ids at `initialize`: whichever the client keeps, every later
    // request must carry exactly one, always the same.
    let server = Server::start(|req| {
        if initializes(req) {
            let body = result_msg(
                req,
                json!({"protocolVersion": VERSION, "capabilities": {"tools": {}},
                    "serverInfo": {"name": "dup", "version": "1"}}),
            );
            return Reply::full(
                200,
                &[
                    ("Content-Type", "application/json"),
                    ("Mcp-Session-Id", "first-id"),
                    ("Mcp-Session-Id", "second-id"),
                ],
                body.to_string(),
            );
        }
        Reply::good()
    })
    .await;
    let client = builder(&server).build().unwrap();
    match within("duplicate ids", Duration::from_secs(3), client.connect()).await {
        Ok(Ok(_)) => {
            within("duplicate ids", Duration::from_secs(3), client.ping())
                .await
                .unwrap()
                .unwrap();
            within(
                "duplicate ids",
                Duration::from_secs(3),
                client.call_tool(echo("d")),
            )
            .await
            .unwrap()
            .unwrap();
            let later: Vec<Request> = server.matching(|r| !handshake(r));
            assert!(!later.is_empty());
            let first = later[0].session_id().map(str::to_owned);
            assert!(
                matches!(first.as_deref(), Some("first-id" | "second-id")),
                "{first:?}"
            );
            for r in &later {
                assert_eq!(r.header_count("mcp-session-id"), 1, "{}", r.label());
                assert_eq!(r.session_id(), first.as_deref(), "{}", r.label());
            }
        }
        // Refusing an ambiguous session is fine too.
        Ok(Err(err)) => assert_kind("duplicate ids", &err, ErrorKind::Protocol),
        Err(message) => panic!("{message}"),
    }
}

// 29 bytes of body per message, several times that once typed: a body within its bound must
// not become gigabytes of messages. Refused through the client as in the models.
#[tokio::test]
async fn a_prompt_of_more_messages_than_the_bound_is_refused() {
    let _heavy = heavy().await;
    let server = Server::start(|req| {
        if req.is_rpc("prompts/get") {
            let message = json!({"role": "user", "content": 0});
            let messages = vec![message; mcp_resume::client::MAX_CONTENT_ITEMS + 1];
            return Reply::result(req, json!({ "messages": messages }));
        }
        Reply::good()
    })
    .await;
    let client = builder(&server).max_body_size(8 * MIB).build().unwrap();
    let no_arguments: [(&str, &str); 0] = [];
    let what = "100,001 prompt messages";
    let read = within(
        what,
        Duration::from_secs(10),
        client.get_prompt("p", no_arguments),
    );
    let err = match read.await {
        Ok(Err(err)) => err,
        Ok(Ok(prompt)) => panic!("{what}: read {} messages", prompt.messages.len()),
        Err(message) => panic!("{message}"),
    };
    assert_kind(what, &err, ErrorKind::Protocol);
    assert!(err.message().contains("more than 100000"), "{err}");
    // The server answered: the request ran.
    assert!(err.may_have_run(), "{err}");
    assert_usable(what, &server, &client).await;
}

/// A `tools/list` whose pages never end before `pages` (each with a cursor of its own), each
/// holding `per_page` tools described by `description` bytes.
async fn endless_tool_list(per_page: usize, description: usize, pages: u64) -> Server {
    Server::start(move |req| {
        if req.is_rpc("tools/list") {
            let page = req.params()["cursor"]
                .as_str()
                .and_then(|c| c.strip_prefix('c'))
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or(0);
            let tool = json!({"name": "t", "description": "d".repeat(description)});
            let mut result = json!({ "tools": vec![tool; per_page] });
            if page + 1 < pages {
                result["nextCursor"] = json!(format!("c{}", page + 1));
            }
            return Reply::result(req, result);
        }
        Reply::good()
    })
    .await
}

/// A client taking responses of up to `size` bytes (the harness's own bound is far smaller).
fn taking(server: &Server, size: usize) -> mcp_resume::Client {
    builder(server)
        .max_body_size(size)
        .max_event_size(size)
        .build()
        .unwrap()
}

/// Lists `server`'s tools, which must fail, within `memory` bytes of heap, with the default
/// bound on a response (16 MiB), which a whole list is held to.
async fn list_refused(what: &str, server: &Server, memory: usize) -> mcp_resume::Error {
    let client = taking(server, 16 * MIB);
    let probe = Probe::start();
    let listed = within(what, Duration::from_secs(20), client.list_tools()).await;
    let err = match listed {
        Ok(Err(err)) => err,
        Ok(Ok(tools)) => panic!("{what}: listed {} tools", tools.len()),
        Err(message) => panic!("{message}"),
    };
    probe.assert_memory(what, memory);
    assert_kind(what, &err, ErrorKind::Protocol);
    // The server answered every page: the requests ran.
    assert!(err.may_have_run(), "{what}: {err}");
    assert_usable(what, server, &client).await;
    err
}

// Each page within the body bound, the list never ending: without a bound on the whole list,
// 1,000 pages of a body each would be held before the list ends.
#[tokio::test]
async fn a_list_of_more_items_than_the_bound_in_all_is_refused() {
    let _heavy = heavy().await;
    // 5,000 tools a page: the 21st page passes 100,000.
    let server = endless_tool_list(5_000, 0, 40).await;
    let what = "a list of 5,000 tools a page";
    let err = list_refused(what, &server, 200 * MIB).await;
    assert!(err.message().contains("more than 100000"), "{err}");
    assert_eq!(server.count(|r| r.is_rpc("tools/list")), 21, "{what}");
}

#[tokio::test]
async fn a_list_of_more_bytes_than_the_bound_in_all_is_refused() {
    let _heavy = heavy().await;
    // One tool of 200 KB a page: the 84th page passes 16 MiB.
    let server = endless_tool_list(1, 200_000, 120).await;
    let what = "a list of one 200 KB tool a page";
    let err = list_refused(what, &server, 48 * MIB).await;
    assert!(err.message().contains("more than 16777216 bytes"), "{err}");
    assert_eq!(server.count(|r| r.is_rpc("tools/list")), 84, "{what}");
    // The bound is one response's: a client that takes larger ones takes the whole list.
    let server = endless_tool_list(1, 200_000, 120).await;
    let roomier = taking(&server, 32 * MIB);
    let listed = within(what, Duration::from_secs(20), roomier.list_tools()).await;
    assert_eq!(listed.unwrap().unwrap().len(), 120, "{what}");
}
