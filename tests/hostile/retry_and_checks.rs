//! Defects whose fix adds API: `Error::retry_after`, `SessionEvent::ChecksDegraded`,
//! `Client::extension_status` and `ExtensionStatus`. Written against that API; `hostile.rs`
//! compiles this module in once the API exists.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use mcp_resume::{ErrorKind, ExtensionStatus, SessionEvent};
use serde_json::json;

use crate::harness::*;
use crate::server::*;

/// The first `tools/call` is refused with `status` and `Retry-After: 1`, later ones answered.
async fn retried_after_one_second(status: u16) {
    let what = format!("{status} + Retry-After: 1");
    let refused = Arc::new(AtomicUsize::new(0));
    let server = Server::start(move |req| {
        if tool_calls(req) && refused.fetch_add(1, Ordering::SeqCst) == 0 {
            return Reply::full(status, &[("Retry-After", "1")], "");
        }
        Reply::good()
    })
    .await;
    let client = builder(&server).build().unwrap();
    client.connect().await.unwrap();
    let result = within(
        &what,
        Duration::from_secs(4),
        client.call_tool(echo("later")),
    )
    .await
    .unwrap()
    .unwrap_or_else(|err| panic!("{what}: {err}"));
    assert_eq!(result.text(), "later");
    let calls = server.matching(tool_calls);
    assert_eq!(calls.len(), 2, "{what}: {:?}", server.labels());
    let gap = calls[1].at - calls[0].at;
    assert!(
        gap >= Duration::from_secs(1),
        "{what}: re-sent after {gap:?}"
    );
    assert_ne!(
        calls[0].rpc_id(),
        calls[1].rpc_id(),
        "{what}: a re-send gets a new id"
    );
}

#[tokio::test]
async fn defect_11_retry_after_429_is_honoured() {
    retried_after_one_second(429).await;
}

#[tokio::test]
async fn defect_11_retry_after_503_is_honoured() {
    retried_after_one_second(503).await;
}

#[tokio::test]
async fn defect_11_retry_after_beyond_the_deadline_fails_at_once() {
    let bodies: [(&str, Reply, ErrorKind); 2] = [
        (
            "text body",
            Reply::full(
                429,
                &[("Retry-After", "3600"), ("Content-Type", "text/plain")],
                "later",
            ),
            ErrorKind::Protocol,
        ),
        (
            "JSON-RPC error body",
            Reply::full(
                429,
                &[
                    ("Retry-After", "3600"),
                    ("Content-Type", "application/json"),
                ],
                json!({"jsonrpc": "2.0", "id": null,
                    "error": {"code": -32000, "message": "Too many requests"}})
                .to_string(),
            ),
            ErrorKind::Rpc,
        ),
    ];
    for (what, reply, kind) in bodies {
        let server = Server::start(move |req| {
            if tool_calls(req) {
                reply.clone()
            } else {
                Reply::good()
            }
        })
        .await;
        let deadline = Duration::from_secs(5);
        let client = builder(&server).call_timeout(deadline).build().unwrap();
        client.connect().await.unwrap();
        let started = Instant::now();
        let (err, _) = failing(
            what,
            deadline + Duration::from_secs(1),
            client.call_tool(echo("x")),
        )
        .await;
        // Waiting for the retry would have ended it at its deadline: it ends well before,
        // seconds to spare either way.
        assert!(
            started.elapsed() < deadline / 2,
            "{what}: waited {:?} for a retry it could never make",
            started.elapsed()
        );
        assert_kind(what, &err, kind);
        assert_eq!(err.retry_after(), Some(Duration::from_secs(3600)), "{what}");
        assert_eq!(server.count(tool_calls), 1, "{what}");
    }
}

#[tokio::test]
async fn defect_12_malformed_capability_hash_degrades_checks_visibly() {
    let options = Options {
        capabilities: json!({
            "tools": {},
            "experimental": {"resumeSafety": {"version": 1, "capabilityHash": true}}
        }),
        capability_hash: Some("sha256:zz".to_owned()),
        listen: false,
    };
    let server = Server::start_with(options, |_| Reply::good()).await;
    let client = builder(&server).build().unwrap();
    let mut events = client.events();
    client.connect().await.unwrap();
    let degraded = within("hash", Duration::from_secs(3), async {
        while let Some(event) = events.next().await {
            if let SessionEvent::ChecksDegraded { status, reason, .. } = event {
                return Some((status, reason));
            }
        }
        None
    })
    .await
    .unwrap()
    .expect("a ChecksDegraded event");
    let (status, reason): (ExtensionStatus, String) = degraded;
    assert!(status.advertised && !status.capability_hash, "{status:?}");
    assert!(!reason.is_empty());
    let now = client
        .extension_status()
        .expect("an extension status once connected");
    assert!(now.advertised, "{now:?}");
    assert!(!now.capability_hash, "{now:?}");
    // Degraded, not broken: the session still works.
    let r = client.call_tool(echo("still")).await.unwrap();
    assert_eq!(r.text(), "still");
}

#[tokio::test]
async fn a_503_whose_retry_after_is_not_delay_seconds_may_have_run() {
    // "+0" is no delay-seconds (RFC 9110: digits alone): the 503 names no time to come back,
    // so it proves nothing, and the unkeyed call that may have run is never sent again.
    let what = "503 + Retry-After: +0";
    let server = Server::start(|req| {
        if tool_calls(req) {
            return Reply::full(503, &[("Retry-After", "+0")], "");
        }
        Reply::good()
    })
    .await;
    let client = builder(&server).build().unwrap();
    client.connect().await.unwrap();
    let (err, _) = failing(what, Duration::from_secs(4), client.call_tool(echo("x"))).await;
    assert_kind(what, &err, ErrorKind::OutcomeUnknown);
    assert_eq!(err.retry_after(), None, "{what}");
    assert_eq!(server.count(tool_calls), 1, "{what}: {:?}", server.labels());
}
