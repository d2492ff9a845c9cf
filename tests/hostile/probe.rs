//! The era probe against deployed legacy servers: every way they answer a sessionless
//! `server/discover` must read as "legacy" (one probe, then `initialize`, remembered for the
//! origin unless the answer says nothing about the era: a 401, 403, 408, 429 or 5xx), a probe
//! without an answer is sent again within the connect deadline, and every error that ends the
//! handshake names `server/discover`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use mcp_resume::{Era, EraCache, ErrorKind};
use serde_json::json;

use crate::harness::*;
use crate::server::*;

fn probes(r: &Request) -> bool {
    r.is_rpc("server/discover")
}

fn rpc_error_body(code: i64, message: &str) -> String {
    json!({"jsonrpc": "2.0", "id": null, "error": {"code": code, "message": message}}).to_string()
}

/// How a deployed legacy server answers the probe.
type Answer = (&'static str, fn(&Request) -> Reply);

const LEGACY_ANSWERS: [Answer; 15] = [
    ("400 JSON-RPC (not initialized)", |_| {
        Reply::full(
            400,
            &[("Content-Type", "application/json")],
            rpc_error_body(-32000, "Bad Request: Server not initialized"),
        )
    }),
    ("400 plain text", |_| {
        Reply::full(
            400,
            &[("Content-Type", "text/plain")],
            "Bad Request: No valid session ID provided",
        )
    }),
    ("400 JSON-RPC with a session id header", |_| {
        Reply::full(
            400,
            &[
                ("Content-Type", "application/json"),
                ("Mcp-Session-Id", "assigned-anyway"),
            ],
            rpc_error_body(-32600, "Invalid Request"),
        )
    }),
    ("404 empty", |_| Reply::status(404)),
    ("404 JSON-RPC method not found", |_| {
        Reply::full(
            404,
            &[("Content-Type", "application/json")],
            rpc_error_body(-32601, "Method not found"),
        )
    }),
    ("405 with a session id header", |_| {
        Reply::full(405, &[("Mcp-Session-Id", "assigned-anyway")], "")
    }),
    ("406 plain text", |_| {
        Reply::full(406, &[], "Not Acceptable")
    }),
    // goose #11965: a 200 event stream that ends without an event.
    ("200 SSE ending with no event", |_| Reply::sse("")),
    ("200 SSE with a priming event and no response", |_| {
        Reply::sse("id: p-1\ndata:\n\n")
    }),
    ("200 SSE answering another id", |_| {
        Reply::sse(sse_event(
            Some("e-1"),
            &json!({"jsonrpc": "2.0", "id": "someone-else", "result": {}}),
        ))
    }),
    ("200 JSON with an empty body", |_| {
        Reply::full(200, &[("Content-Type", "application/json")], "")
    }),
    ("200 JSON that is not JSON-RPC", |_| {
        Reply::full(
            200,
            &[("Content-Type", "application/json")],
            r#"{"ok":true}"#,
        )
    }),
    ("200 text/html", |_| {
        Reply::full(200, &[("Content-Type", "text/html")], "<html>hello</html>")
    }),
    ("200 discover result listing only legacy revisions", |req| {
        Reply::result(
            req,
            json!({"supportedVersions": ["2025-06-18", VERSION], "capabilities": {}}),
        )
    }),
    ("400 -32022 listing only legacy revisions", |_| {
        Reply::full(
            400,
            &[("Content-Type", "application/json")],
            json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32022,
                "message": "Unsupported protocol version",
                "data": {"supported": ["2025-03-26", VERSION]}}})
            .to_string(),
        )
    }),
];

/// Whether `client` connects within 3 s; if not, why goes to `failures` under `name`.
async fn connects(name: &str, client: &mcp_resume::Client, failures: &mut Failures) -> bool {
    match within(name, Duration::from_secs(3), client.connect()).await {
        Ok(Ok(_)) => true,
        Ok(Err(err)) => {
            failures.push(format!("{name}: connect failed: {err}"));
            false
        }
        Err(message) => {
            failures.push(message);
            false
        }
    }
}

/// Each answer: `connect` succeeds after one probe and one `initialize`, the client is legacy
/// and works, and the next client sharing the cache goes straight to `initialize`.
#[tokio::test]
async fn every_legacy_answer_to_the_probe_falls_back_to_initialize() {
    let mut failures = Failures::default();
    for (name, answer) in LEGACY_ANSWERS {
        let server = Server::start(move |req| {
            if probes(req) {
                answer(req)
            } else {
                Reply::good()
            }
        })
        .await;
        let cache = EraCache::new();
        let client = builder(&server).era_cache(cache.clone()).build().unwrap();
        if !connects(name, &client, &mut failures).await {
            continue;
        }
        match within(name, Duration::from_secs(3), client.call_tool(echo("hi"))).await {
            Ok(Ok(r)) => failures.check(r.text() == "hi", || format!("{name}: {:?}", r.text())),
            Ok(Err(err)) => failures.push(format!("{name}: call failed: {err}")),
            Err(message) => failures.push(message),
        }
        failures.check(client.era() == Some(Era::Legacy), || {
            format!("{name}: era {:?}", client.era())
        });
        let labels = server.labels();
        failures.check(
            labels.len() >= 2 && labels[..2] == ["POST server/discover", "POST initialize"],
            || format!("{name}: one probe then initialize, saw {labels:?}"),
        );
        client.close().await.ok();
        // Remembered per origin: the next client with the same cache does not probe.
        let next = builder(&server).era_cache(cache.clone()).build().unwrap();
        if let Err(err) = next.connect().await {
            failures.push(format!("{name}: second client: {err}"));
        }
        failures.check(server.count(probes) == 1, || {
            format!("{name}: probes {:?}", server.labels())
        });
        failures.check(cache.get(&server.url) == Some(Era::Legacy), || {
            format!("{name}: cache {:?}", cache.get(&server.url))
        });
    }
    failures.finish("legacy answers to the probe");
}

/// A probe that got no answer at all (the connection dropped) is sent again with backoff:
/// here two failures, then the legacy answer.
#[tokio::test]
async fn an_unanswered_probe_is_sent_again() {
    let seen = Arc::new(AtomicUsize::new(0));
    let counter = seen.clone();
    let server = Server::start(move |req| {
        if probes(req) && counter.fetch_add(1, Ordering::SeqCst) < 2 {
            Reply::raw("")
        } else if probes(req) {
            Reply::status(404)
        } else {
            Reply::good()
        }
    })
    .await;
    let client = builder(&server).build().unwrap();
    within("dropped", Duration::from_secs(3), client.connect())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(server.count(probes), 3, "{:?}", server.labels());
    assert_eq!(server.count(initializes), 1, "{:?}", server.labels());
    assert_eq!(client.era(), Some(Era::Legacy));
}

/// A legacy server that answers unknown methods with a 5xx and `initialize` normally: one
/// probe, then `initialize`, and the client works (before, the probe was retried until the
/// connect deadline and such a server could never be reached under `Era::Auto`).
#[tokio::test]
async fn a_5xx_to_the_probe_falls_back_to_initialize_once() {
    let mut failures = Failures::default();
    let answers: [Answer; 3] = [
        ("500", |_| Reply::status(500)),
        ("503", |_| Reply::status(503)),
        ("500 JSON-RPC", |_| {
            Reply::full(
                500,
                &[("Content-Type", "application/json")],
                rpc_error_body(-32603, "Internal error"),
            )
        }),
    ];
    for (name, answer) in answers {
        let server = Server::start(move |req| {
            if probes(req) {
                answer(req)
            } else {
                Reply::good()
            }
        })
        .await;
        let client = builder(&server).build().unwrap();
        connects(name, &client, &mut failures).await;
        match within(name, Duration::from_secs(3), client.call_tool(echo("hi"))).await {
            Ok(Ok(r)) => failures.check(r.text() == "hi", || format!("{name}: {:?}", r.text())),
            Ok(Err(err)) => failures.push(format!("{name}: call failed: {err}")),
            Err(message) => failures.push(message),
        }
        let labels = server.labels();
        failures.check(
            labels.len() >= 2 && labels[..2] == ["POST server/discover", "POST initialize"],
            || format!("{name}: one probe then initialize, saw {labels:?}"),
        );
        failures.check(server.count(probes) == 1, || {
            format!("{name}: one probe, saw {labels:?}")
        });
        failures.check(client.era() == Some(Era::Legacy), || {
            format!("{name}: era {:?}", client.era())
        });
    }
    failures.finish("5xx to the probe");
}

/// A server failing everything for a while: the probe's 5xx falls back to `initialize`, whose
/// 5xx sends the probe again after the backoff; once the server recovers, the client connects.
#[tokio::test]
async fn a_5xx_to_the_fallback_initialize_too_probes_again() {
    let seen = Arc::new(AtomicUsize::new(0));
    let counter = seen.clone();
    let server = Server::start(move |req| {
        if initializes(req) && counter.fetch_add(1, Ordering::SeqCst) == 0 {
            Reply::status(503)
        } else if probes(req) {
            Reply::status(500)
        } else {
            Reply::good()
        }
    })
    .await;
    let client = builder(&server).build().unwrap();
    within("5xx twice", Duration::from_secs(3), client.connect())
        .await
        .unwrap()
        .unwrap();
    let labels = server.labels();
    assert_eq!(
        labels[..4],
        [
            "POST server/discover",
            "POST initialize",
            "POST server/discover",
            "POST initialize"
        ],
        "{labels:?}"
    );
    assert_eq!(client.era(), Some(Era::Legacy));
}

/// A server answering 5xx to the probe and to `initialize` forever: the attempts are bounded
/// by the policy, each probe followed by one `initialize`.
#[tokio::test]
async fn a_server_failing_every_handshake_request_is_reported() {
    let server = Server::start(|req| {
        if probes(req) || initializes(req) {
            Reply::status(502)
        } else {
            Reply::good()
        }
    })
    .await;
    let client = builder(&server).build().unwrap();
    let (err, _) = failing("502 forever", Duration::from_secs(3), client.connect()).await;
    assert!(err.to_string().contains("502"), "{err}");
    let probed = server.count(probes);
    assert!(
        (1..=fast_policy().max_attempts as usize).contains(&probed),
        "{:?}",
        server.labels()
    );
    assert_eq!(server.count(initializes), probed, "{:?}", server.labels());
}

/// A probe that keeps getting no answer at all: the attempts are bounded by the policy and
/// the error names `server/discover`; no `initialize` is sent in its name.
#[tokio::test]
async fn a_probe_that_keeps_failing_is_reported_as_the_probe() {
    let server = Server::start(|req| {
        if probes(req) {
            Reply::raw("")
        } else {
            Reply::good()
        }
    })
    .await;
    let client = builder(&server).build().unwrap();
    let (err, _) = failing("dropped forever", Duration::from_secs(3), client.connect()).await;
    assert!(err.to_string().contains("server/discover"), "{err}");
    assert_eq!(server.count(probes), fast_policy().max_attempts as usize);
    assert_eq!(server.count(initializes), 0, "{:?}", server.labels());
}

/// A probe that hangs: the connect deadline ends it, with an error that names the probe.
#[tokio::test]
async fn a_hanging_probe_times_out_as_the_probe() {
    let server = Server::start(|req| {
        if probes(req) {
            Reply::hang_before_head()
        } else {
            Reply::good()
        }
    })
    .await;
    let client = builder(&server)
        .call_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let (err, took) = failing("hanging probe", Duration::from_secs(3), client.connect()).await;
    assert_kind("hanging probe", &err, ErrorKind::Timeout);
    assert!(err.to_string().contains("server/discover"), "{err}");
    assert!(!err.to_string().contains("initialize"), "{err}");
    assert!(took >= Duration::from_millis(300), "{took:?}");
    assert_eq!(server.count(initializes), 0);
}

/// A probe answered 503, `initialize` answered 503, then the probe hangs: the probe sent
/// again stays within `initialize`'s deadline.
#[tokio::test]
async fn probe_retries_stay_within_the_connect_deadline() {
    let seen = Arc::new(AtomicUsize::new(0));
    let counter = seen.clone();
    let server = Server::start(move |req| {
        if probes(req) && counter.fetch_add(1, Ordering::SeqCst) == 0 {
            Reply::status(503)
        } else if probes(req) {
            Reply::hang_before_head()
        } else if initializes(req) {
            Reply::status(503)
        } else {
            Reply::good()
        }
    })
    .await;
    // Long enough that the slack below is a second either way: the deadline ends it after
    // 2 s, a deadline of its own for the probe sent again would after 4 s.
    let deadline = Duration::from_secs(2);
    let client = builder(&server).call_timeout(deadline).build().unwrap();
    let (err, took) = failing("503 then hang", Duration::from_secs(10), client.connect()).await;
    assert_kind("503 then hang", &err, ErrorKind::Timeout);
    assert!(err.to_string().contains("server/discover"), "{err}");
    assert!(
        took < deadline + Duration::from_secs(1),
        "one deadline for both: {took:?}"
    );
    assert_eq!(server.count(probes), 2, "{:?}", server.labels());
    assert_eq!(server.count(initializes), 1, "{:?}", server.labels());
}

/// Answers to the probe that come from something in front of the server, or from a server
/// failing for the moment, and say nothing about which era it speaks.
const INCONCLUSIVE_ANSWERS: [Answer; 6] = [
    ("429 rate limited", |_| {
        Reply::full(429, &[("Retry-After", "0")], "slow down")
    }),
    ("401 before a token exists", |_| {
        Reply::full(401, &[], "who are you")
    }),
    ("403 from a WAF", |_| {
        Reply::full(
            403,
            &[("Content-Type", "text/html")],
            "<html>blocked</html>",
        )
    }),
    ("408 request timeout", |_| Reply::status(408)),
    ("429 JSON-RPC", |_| {
        Reply::full(
            429,
            &[("Content-Type", "application/json")],
            rpc_error_body(-32000, "Too many requests"),
        )
    }),
    ("503 for a moment", |_| Reply::status(503)),
];

/// A dual-era server whose first probe meets one of those answers (then answers normally): the
/// first client goes on in the legacy era, as the probe rule says, but that era is not
/// remembered for the origin: the next client sharing the cache probes, and finds the modern
/// era. Before, the legacy era was remembered and every later client of the origin sent
/// `initialize` first and never probed again.
#[tokio::test]
async fn an_answer_that_says_nothing_about_the_era_is_not_remembered() {
    let mut failures = Failures::default();
    for (name, answer) in INCONCLUSIVE_ANSWERS {
        let seen = Arc::new(AtomicUsize::new(0));
        let counter = seen.clone();
        let server = Server::start(move |req| {
            if probes(req) && counter.fetch_add(1, Ordering::SeqCst) == 0 {
                answer(req)
            } else if probes(req) {
                Reply::result(
                    req,
                    json!({"resultType": "complete", "supportedVersions": ["2026-07-28"],
                        "capabilities": {"tools": {}}}),
                )
            } else {
                Reply::good()
            }
        })
        .await;
        let cache = EraCache::new();
        let first = builder(&server).era_cache(cache.clone()).build().unwrap();
        if !connects(name, &first, &mut failures).await {
            continue;
        }
        failures.check(first.era() == Some(Era::Legacy), || {
            format!("{name}: first client's era {:?}", first.era())
        });
        failures.check(cache.get(&server.url).is_none(), || {
            format!("{name}: remembered {:?}", cache.get(&server.url))
        });
        first.close().await.ok();
        let next = builder(&server).era_cache(cache.clone()).build().unwrap();
        connects(&format!("{name}: second client"), &next, &mut failures).await;
        failures.check(next.era() == Some(Era::Modern), || {
            format!("{name}: second client's era {:?}", next.era())
        });
        failures.check(server.count(probes) == 2, || {
            format!("{name}: the second client probes: {:?}", server.labels())
        });
        failures.check(cache.get(&server.url) == Some(Era::Modern), || {
            format!("{name}: cache {:?}", cache.get(&server.url))
        });
    }
    failures.finish("answers that say nothing about the era");
}
