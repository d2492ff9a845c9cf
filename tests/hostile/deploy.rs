//! Issue 24, defect 5 and gap 7 on the wire: a rolling deploy (the session gone, then 502 to
//! `initialize` for a while), `SessionLost` that is not terminal, and "session gone" read only
//! from the shapes real servers send, its re-sends bounded by `max_attempts`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use mcp_resume::{ErrorKind, ReconnectPolicy, SessionEvent};
use serde_json::json;

use crate::harness::*;
use crate::server::*;

const DOWN: Duration = Duration::from_millis(1500);

fn session_not_found() -> Reply {
    Reply::json(
        404,
        &json!({"jsonrpc": "2.0", "id": null,
            "error": {"code": -32001, "message": "Session not found"}}),
    )
}

fn text_of(req: &Request) -> String {
    req.params()["arguments"]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// Gaps between successive `initialize`s from `from` on.
fn init_gaps(server: &Server, from: Instant) -> Vec<Duration> {
    let inits: Vec<Instant> = server
        .matching(initializes)
        .into_iter()
        .map(|r| r.at)
        .filter(|at| *at >= from)
        .collect();
    inits.windows(2).map(|w| w[1] - w[0]).collect()
}

/// The scenario as a new user meets it, with the default reconnect policy: the
/// session is gone (404) and for 1.5 s the balancer answers `initialize` with 502. The
/// waiting call (3 s deadline) used to fail `SessionLost` after 0.34 s; it succeeds once the
/// server is back, or ends at its deadline, never before.
#[tokio::test]
async fn rolling_deploy_waiting_call_outlives_the_outage() {
    let deploy: Arc<Mutex<Option<Instant>>> = Arc::default();
    let seen = deploy.clone();
    let server = Server::start(move |req| {
        let Some(started) = *seen.lock().unwrap() else {
            return Reply::good();
        };
        if initializes(req) && req.at < started + DOWN {
            return Reply::status(502);
        }
        if req.session_id() == Some(session_name(1).as_str()) {
            return session_not_found();
        }
        Reply::good()
    })
    .await;
    let client = builder(&server)
        .reconnect(ReconnectPolicy::default())
        .call_timeout(Duration::from_secs(3))
        .build()
        .unwrap();
    client.connect().await.unwrap();
    assert_eq!(client.call_tool(echo("warm")).await.unwrap().text(), "warm");

    let started = Instant::now();
    *deploy.lock().unwrap() = Some(started);
    let outcome = within(
        "deploy",
        Duration::from_secs(5),
        client.call_tool(echo("d")),
    )
    .await
    .unwrap();
    let took = started.elapsed();
    match outcome {
        Ok(r) => {
            assert_eq!(r.text(), "d");
            assert!(took >= DOWN, "{took:?}");
        }
        Err(err) => {
            assert_kind("deploy", &err, ErrorKind::SessionLost);
            assert!(
                took >= Duration::from_millis(2950),
                "ended after {took:?}: {err}"
            );
            assert!(format!("{err:#}").contains("502"), "{err:#}");
        }
    }
    // Bounded by the backoff: few `initialize`s, each gap longer than the one before.
    let gaps = init_gaps(&server, started);
    assert!(gaps.len() >= 5 && gaps.len() <= 9, "{gaps:?}");
    assert!(gaps.windows(2).all(|w| w[1] > w[0]), "{gaps:?}");
    assert!(server.requests().len() <= 40, "{:?}", server.labels());
    let d_calls = server.count(|r| tool_calls(r) && text_of(r) == "d");
    assert!(d_calls <= 2, "{:?}", server.labels());
}

/// `SessionLost` used to be terminal: a call made with the server healthy again failed at
/// once. Now a call whose deadline passes during the outage fails `SessionLost` at that
/// deadline; with no call waiting the client stops trying (`SessionEvent::SessionLost`);
/// and the next call reconnects and succeeds.
#[tokio::test]
async fn call_after_session_lost_reconnects() {
    let down = Arc::new(AtomicBool::new(false));
    let flag = down.clone();
    let server = Server::start(move |req| {
        if !flag.load(Ordering::SeqCst) {
            return Reply::good();
        }
        if initializes(req) {
            return Reply::status(502);
        }
        if req.session_id() == Some(session_name(1).as_str()) {
            return session_not_found();
        }
        Reply::good()
    })
    .await;
    let client = builder(&server)
        .reconnect(ReconnectPolicy::default())
        .build()
        .unwrap();
    let mut events = client.events();
    client.connect().await.unwrap();
    assert_eq!(client.call_tool(echo("warm")).await.unwrap().text(), "warm");

    down.store(true, Ordering::SeqCst);
    let short = echo("short").timeout(Duration::from_millis(500));
    let (err, took) = failing("short", Duration::from_secs(3), client.call_tool(short)).await;
    assert_kind("short", &err, ErrorKind::SessionLost);
    assert!(took >= Duration::from_millis(490), "{took:?}: {err}");
    assert!(format!("{err:#}").contains("502"), "{err:#}");
    let lost = within("lost", Duration::from_secs(3), async {
        while let Some(event) = events.next().await {
            if matches!(event, SessionEvent::SessionLost) {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(lost, Ok(true));
    let inits = server.count(initializes);
    assert!(inits <= 8, "{:?}", server.labels());

    // The server is healthy again: the next call reconnects.
    down.store(false, Ordering::SeqCst);
    let r = within(
        "after",
        Duration::from_secs(5),
        client.call_tool(echo("after")),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(r.text(), "after");
    assert_eq!(
        server.count(initializes),
        inits + 1,
        "{:?}",
        server.labels()
    );
}

/// A refusal, and its name.
type Refusal = (&'static str, fn() -> Reply);

/// A 400 whose body merely contains the word "session" is the call's own answer: never
/// re-initialized for, never re-sent (it used to start a re-initialization storm).
#[tokio::test]
async fn a_400_mentioning_a_session_is_the_calls_answer() {
    let bodies: [Refusal; 2] = [
        ("-32602 naming a session parameter", || {
            Reply::json(
                400,
                &json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32602,
                    "message": "invalid params: session_name is required"}}),
            )
        }),
        ("text: the header did not arrive", || {
            Reply::full(
                400,
                &[("Content-Type", "text/plain")],
                "Bad Request: Missing session ID",
            )
        }),
    ];
    let mut failures = Failures::default();
    for (what, reply) in bodies {
        let server = Server::start(move |req| {
            if tool_calls(req) {
                reply()
            } else {
                Reply::good()
            }
        })
        .await;
        let client = builder(&server).build().unwrap();
        client.connect().await.unwrap();
        let (err, _) = failing(what, Duration::from_secs(3), client.call_tool(echo("x"))).await;
        failures.check(
            matches!(err.kind(), ErrorKind::Rpc | ErrorKind::Protocol),
            || format!("{what}: {err}"),
        );
        failures.check(server.count(tool_calls) == 1, || {
            format!("{what}: {:?}", server.labels())
        });
        failures.check(server.count(initializes) == 1, || {
            format!("{what}: {:?}", server.labels())
        });
    }
    failures.finish("400 mentioning a session");
}

/// A proxy answers 404 to one request, whatever the session: its re-sends are bounded by
/// `max_attempts` (4 here), then it fails alone; the calls made meanwhile are answered.
#[tokio::test]
async fn repeated_404_on_one_call_is_bounded_without_failing_others() {
    let server = Server::start(|req| {
        if tool_calls(req) && text_of(req) == "blocked" {
            Reply::status(404)
        } else {
            Reply::good()
        }
    })
    .await;
    let client = builder(&server).build().unwrap();
    client.connect().await.unwrap();
    let blocked = {
        let client = client.clone();
        tokio::spawn(async move { client.call_tool(echo("blocked")).await })
    };
    for i in 0..5 {
        let text = format!("ok{i}");
        let r = within(&text, Duration::from_secs(3), client.call_tool(echo(&text)))
            .await
            .unwrap()
            .unwrap_or_else(|e| panic!("{text}: {e}; {:?}", server.labels()));
        assert_eq!(r.text(), text);
    }
    let err = within("blocked", Duration::from_secs(5), blocked)
        .await
        .unwrap()
        .unwrap()
        .unwrap_err();
    assert_kind("blocked", &err, ErrorKind::SessionLost);
    let policy = fast_policy();
    assert_eq!(
        server.count(|r| tool_calls(r) && text_of(r) == "blocked"),
        policy.max_attempts as usize,
        "{:?}",
        server.labels()
    );
    assert!(
        server.count(initializes) <= policy.max_attempts as usize,
        "{:?}",
        server.labels()
    );
    assert_usable("404 on one call", &server, &client).await;
}
