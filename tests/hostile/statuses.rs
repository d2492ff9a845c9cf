//! Every error status a server (or something in front of it) may answer a call's POST with,
//! with and without bodies: redirects are never followed, statuses that prove the request was
//! not processed give a plain error at once, statuses after which it may have run give
//! `OutcomeUnknown`, and a lost session is re-established with the call re-sent.

use std::time::Duration;

use futures::StreamExt;
use mcp_resume::{ErrorKind, ReinitReason, SessionEvent};
use serde_json::json;

use crate::harness::*;
use crate::server::*;

#[derive(Debug, Clone, Copy)]
enum Body {
    None,
    Text,
    /// A JSON-RPC error object with `id: null`, the way stock servers refuse a request.
    RpcError,
}

const BODIES: [Body; 3] = [Body::None, Body::Text, Body::RpcError];

fn error_reply(status: u16, body: Body, extra: &[(&str, &str)]) -> Reply {
    let mut headers: Vec<(&str, &str)> = extra.to_vec();
    let text = match body {
        Body::None => String::new(),
        Body::Text => {
            headers.push(("Content-Type", "text/plain"));
            "nope".to_owned()
        }
        Body::RpcError => {
            headers.push(("Content-Type", "application/json"));
            json!({"jsonrpc": "2.0", "id": null,
                "error": {"code": -32600, "message": "Invalid Request"}})
            .to_string()
        }
    };
    Reply::full(status, &headers, text)
}

/// One call answered `status` + `body`; checks kind, speed, request count, and that the
/// client works afterwards. Failures are collected, not raised.
async fn row(status: u16, body: Body, expected: ErrorKind, failures: &mut Failures) {
    let what = format!("{status} with body {body:?}");
    let server = Server::start(move |req| {
        if tool_calls(req) {
            let location = format!("http://127.0.0.1:{}/elsewhere", req_port(req));
            error_reply(status, body, &[("Location", &location)])
        } else {
            Reply::good()
        }
    })
    .await;
    let client = builder(&server).build().unwrap();
    client.connect().await.unwrap();
    let probe = Probe::start();
    // By the harness's 5 s deadline, with a second's slack; that it was not sent again is
    // counted below.
    let outcome = within(&what, Duration::from_secs(6), client.call_tool(echo("x"))).await;
    match outcome {
        Err(message) => return failures.push(message),
        Ok(Ok(r)) => return failures.push(format!("{what}: succeeded with {:?}", r.text())),
        Ok(Err(err)) => failures.check(err.kind() == expected, || {
            format!("{what}: got {} ({err}), expected {expected}", err.kind())
        }),
    }
    failures.check(probe.peak_growth() < MIB, || {
        format!("{what}: heap grew {} KiB", probe.peak_growth() / 1024)
    });
    let calls = server.count(tool_calls);
    failures.check(calls == 1, || {
        format!(
            "{what}: the server saw {calls} calls: {:?}",
            server.labels()
        )
    });
    failures.check(server.count(|r| r.path != "/mcp") == 0, || {
        format!("{what}: a redirect was followed: {:?}", server.labels())
    });
    server.behave();
    let again = within(
        &what,
        Duration::from_secs(3),
        client.call_tool(echo("again")),
    )
    .await;
    failures.check(matches!(&again, Ok(Ok(r)) if r.text() == "again"), || {
        format!("{what}: unusable afterwards: {again:?}")
    });
}

/// The port the request was sent to, from its `Host` header.
fn req_port(req: &Request) -> u16 {
    req.header("host")
        .and_then(|h| h.rsplit(':').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or(80)
}

#[tokio::test]
async fn statuses_that_prove_the_call_was_not_processed() {
    let mut failures = Failures::default();
    for status in [301, 302, 307, 308, 400, 401, 403, 405, 406, 413, 415, 429] {
        for body in BODIES {
            let expected = match body {
                // A 401 refuses the credentials: its own kind, whatever the body.
                _ if status == 401 => ErrorKind::Unauthorized,
                Body::RpcError => ErrorKind::Rpc,
                _ => ErrorKind::Protocol,
            };
            row(status, body, expected, &mut failures).await;
        }
    }
    failures.finish("not processed");
}

#[tokio::test]
async fn statuses_after_which_the_call_may_have_run() {
    let mut failures = Failures::default();
    for status in [500, 502, 503] {
        for body in BODIES {
            row(status, body, ErrorKind::OutcomeUnknown, &mut failures).await;
        }
    }
    // Success without the response: processed, answer lost, like a 202.
    row(204, Body::None, ErrorKind::OutcomeUnknown, &mut failures).await;
    // "See Other" answers a POST that was processed: the answer is elsewhere, not absent.
    for body in BODIES {
        row(303, body, ErrorKind::OutcomeUnknown, &mut failures).await;
    }
    failures.finish("may have run");
}

/// A way of saying "session gone", and its name.
type Gone = (&'static str, fn() -> Reply);

#[tokio::test]
async fn session_gone_reinitializes_and_resends() {
    let gone: [Gone; 5] = [
        ("404 without a body", || Reply::status(404)),
        ("404 with -32001", || {
            Reply::json(
                404,
                &json!({"jsonrpc": "2.0", "id": null,
                    "error": {"code": -32001, "message": "Session not found"}}),
            )
        }),
        ("404 with -32600", || {
            Reply::json(
                404,
                &json!({"jsonrpc": "2.0", "id": null,
                    "error": {"code": -32600, "message": "Bad Request"}}),
            )
        }),
        ("404 with text", || {
            Reply::full(404, &[("Content-Type", "text/plain")], "gone")
        }),
        ("400 naming the session", || {
            Reply::full(
                400,
                &[("Content-Type", "application/json")],
                NO_VALID_SESSION,
            )
        }),
    ];
    let mut failures = Failures::default();
    for (what, reply) in gone {
        let server = Server::start(move |req| {
            // Only the first session is lost.
            if tool_calls(req) && req.session_id() == Some(session_name(1).as_str()) {
                reply()
            } else {
                Reply::good()
            }
        })
        .await;
        let client = builder(&server).build().unwrap();
        let mut events = client.events();
        client.connect().await.unwrap();
        let result = within(what, Duration::from_secs(3), client.call_tool(echo("x"))).await;
        match result {
            Ok(Ok(r)) => failures.check(r.text() == "x", || format!("{what}: {:?}", r.text())),
            other => {
                failures.push(format!("{what}: {other:?}; saw {:?}", server.labels()));
                continue;
            }
        }
        let inits = server.matching(initializes);
        failures.check(inits.len() == 2, || {
            format!("{what}: {} initialize: {:?}", inits.len(), server.labels())
        });
        failures.check(inits.iter().all(|r| r.session_id().is_none()), || {
            format!("{what}: initialize carried a session id")
        });
        let calls = server.matching(tool_calls);
        failures.check(
            calls.len() == 2 && calls[1].session_id() == Some(session_name(2).as_str()),
            || format!("{what}: calls {:?}", server.labels()),
        );
        let reason = within(what, Duration::from_secs(1), async {
            while let Some(event) = events.next().await {
                if let SessionEvent::Reinitialized { reason, .. } = event {
                    return Some(reason);
                }
            }
            None
        })
        .await;
        failures.check(
            matches!(reason, Ok(Some(ReinitReason::SessionNotFound))),
            || format!("{what}: event {reason:?}"),
        );
    }
    failures.finish("session gone");
}
