//! What a guarded rmcp 3.11 server says on the wire, and what really ran (the tools' own
//! side-effect counts).

use std::time::Duration;

use mcp_resume_server::{MemoryStore, ResumeSafetyLayer};
use serde_json::{json, Value};

use crate::raw::Raw;
use crate::server::Server;
use crate::stores::{Down, EachStep};

fn layer() -> ResumeSafetyLayer {
    ResumeSafetyLayer::new(MemoryStore::default()).seed(7)
}

fn text(reply: &Value) -> &str {
    reply["result"]["content"][0]["text"].as_str().unwrap_or("")
}

#[tokio::test]
async fn initialize_is_advertised_and_every_response_carries_the_hash() {
    let server = Server::start(Some(layer()), false).await;
    let mut raw = Raw::new(&server.url());
    let init = raw.initialize(json!({})).await;
    let result = &init.response(1).unwrap()["result"];
    assert_eq!(
        result["capabilities"]["experimental"]["resumeSafety"],
        mock_server::context::resume_safety_capability()
    );
    let hash = init.header("mcp-capability-hash").unwrap().to_owned();
    let call = raw.call(2, "echo", json!({"text": "hi"}), None).await;
    assert_eq!(call.header("mcp-capability-hash"), Some(hash.as_str()));
    assert_eq!(text(&call.response(2).unwrap()), "hi");
    let ids: Vec<_> = call
        .events()
        .into_iter()
        .map(|(id, _)| id.unwrap())
        .collect();
    let stream = ids[0].split('-').next().unwrap().to_owned();
    assert_eq!(ids, [format!("{stream}-1"), format!("{stream}-2")]);
}

/// The bare server runs a keyed call as often as it is sent; behind the guard, once.
#[tokio::test]
async fn a_keyed_call_runs_once_whatever_is_resent() {
    for guarded in [false, true] {
        let server = Server::start(guarded.then(layer), false).await;
        let mut raw = Raw::new(&server.url());
        raw.initialize(json!({})).await;
        let mut answers = Vec::new();
        for id in 2..5 {
            let reply = raw
                .call(id, "bump", json!({"tag": "t"}), Some("key-1"))
                .await;
            answers.push(text(&reply.response(id).unwrap()).to_owned());
        }
        if guarded {
            assert_eq!(server.effects.count("t"), 1);
            assert_eq!(
                answers,
                ["t:1", "t:1", "t:1"],
                "the stored answer, each time"
            );
        } else {
            assert_eq!(server.effects.count("t"), 3);
        }
    }
}

/// A body that comes in pieces is read whole: its key (in `_meta` alone) is seen, and the
/// inner server gets every byte.
#[tokio::test]
async fn a_body_in_pieces_is_read_whole() {
    let server = Server::start(Some(layer()), false).await;
    let mut raw = Raw::new(&server.url());
    raw.initialize(json!({})).await;
    for id in 2..4 {
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
            "name": "bump", "arguments": {"tag": "p"},
            "_meta": {"io.github.mcp-resume/idempotency-key": "pieces"}}});
        let reply = raw.post_in_pieces(body, 7).await;
        assert_eq!(text(&reply.response(id).expect(&reply.body)), "p:1");
    }
    assert_eq!(server.effects.count("p"), 1);
}

/// Unkeyed calls are not the guard's business: each runs.
#[tokio::test]
async fn unkeyed_calls_pass() {
    let server = Server::start(Some(layer()), false).await;
    let mut raw = Raw::new(&server.url());
    raw.initialize(json!({})).await;
    for id in 2..4 {
        let reply = raw.call(id, "bump", json!({"tag": "u"}), None).await;
        assert!(reply.header("mcp-capability-hash").is_some());
        assert!(reply.response(id).unwrap()["result"].get("_meta").is_none());
    }
    assert_eq!(server.effects.count("u"), 2);
}

/// A keyed call whose client left mid-call still finishes and is stored: the re-sent call
/// gets its answer and nothing runs again.
#[tokio::test]
async fn a_keyed_call_finishes_and_is_stored_after_its_client_left() {
    // rmcp answers a session's calls with SSE whatever its JSON setting; the stateless
    // test below covers JSON answers.
    let server = Server::start(Some(layer()), false).await;
    let mut raw = Raw::new(&server.url());
    raw.initialize(json!({})).await;
    let body = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "bump", "arguments": {"tag": "gone", "delay_ms": 300},
            "_meta": {"io.github.mcp-resume/idempotency-key": "k-gone"}}});
    let cut = raw
        .http
        .post(&raw.url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-session-id", raw.session.clone().unwrap())
        .header("mcp-protocol-version", "2025-11-25")
        .timeout(Duration::from_millis(100))
        .body(body.to_string())
        .send()
        .await;
    // Whether the head came (SSE) or not (JSON), the client gives up before the answer.
    if let Ok(resp) = cut {
        assert!(resp.text().await.is_err());
    }
    let mut answer = None;
    for id in 3..200 {
        let reply = raw
            .call(
                id,
                "bump",
                json!({"tag": "gone", "delay_ms": 300}),
                Some("k-gone"),
            )
            .await;
        let v = reply.response(id).unwrap();
        match v["error"]["data"]["code"].as_str() {
            Some("IDEMPOTENCY_KEY_IN_USE") => tokio::time::sleep(Duration::from_millis(50)).await,
            _ => {
                answer = Some(v);
                break;
            }
        }
    }
    assert_eq!(text(&answer.unwrap()), "gone:1");
    assert_eq!(server.effects.count("gone"), 1);
}

/// A resume during a running call: the replay is checked event by event and numbered on.
#[tokio::test]
async fn a_resume_of_a_running_call_replays_and_continues() {
    let server = Server::start(Some(layer()), false).await;
    let mut raw = Raw::new(&server.url());
    raw.initialize(json!({})).await;
    let body = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "bump", "arguments": {"tag": "r", "delay_ms": 300}}});
    let resp = raw
        .http
        .post(&raw.url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-session-id", raw.session.clone().unwrap())
        .header("mcp-protocol-version", "2025-11-25")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    let mut resp = resp;
    let first = resp.chunk().await.unwrap().unwrap();
    let first = String::from_utf8_lossy(&first).into_owned();
    let cursor = first
        .lines()
        .find_map(|l| l.strip_prefix("id: "))
        .unwrap()
        .to_owned();
    drop(resp); // the connection is cut after the priming event
    let resumed = raw.get(Some(&cursor)).await;
    assert_eq!(resumed.status, 200, "{}", resumed.body);
    let stream = cursor.split('-').next().unwrap();
    let events = resumed.events();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].0.as_deref(), Some(format!("{stream}-2").as_str()));
    assert_eq!(text(&serde_json::from_str(&events[0].1).unwrap()), "r:1");
    assert_eq!(server.effects.count("r"), 1);
}

/// A store that cannot be reached: keyed calls are refused retryably and never run;
/// unkeyed ones pass.
#[tokio::test]
async fn a_down_store_refuses_keyed_calls_and_passes_the_rest() {
    let server = Server::start(Some(ResumeSafetyLayer::new(EachStep::new(Down))), false).await;
    let mut raw = Raw::new(&server.url());
    raw.initialize(json!({})).await;
    let keyed = raw.call(2, "bump", json!({"tag": "d"}), Some("k")).await;
    assert_eq!(keyed.status, 503);
    assert_eq!(keyed.header("retry-after"), Some("1"));
    let plain = raw.call(3, "bump", json!({"tag": "d"}), None).await;
    assert_eq!(text(&plain.response(3).unwrap()), "d:1");
    assert_eq!(server.effects.count("d"), 1);
}

/// With idempotency off nothing is advertised about keys, and keyed calls run as sent.
#[tokio::test]
async fn with_idempotency_off_keys_are_not_the_guards() {
    let server = Server::start(Some(layer().idempotency(false)), false).await;
    let mut raw = Raw::new(&server.url());
    let init = raw.initialize(json!({})).await;
    let adv = &init.response(1).unwrap()["result"]["capabilities"]["experimental"]["resumeSafety"];
    assert!(adv.get("idempotency").is_none() && adv["capabilityHash"] == true);
    raw.call(2, "bump", json!({"tag": "o"}), Some("k")).await;
    raw.call(3, "bump", json!({"tag": "o"}), Some("k")).await;
    assert_eq!(server.effects.count("o"), 2);
}

/// A keyed body over the bound cannot be guarded: refused, never run.
#[tokio::test]
async fn a_keyed_body_over_the_bound_is_refused() {
    let server = Server::start(Some(layer().max_body(2048)), false).await;
    let mut raw = Raw::new(&server.url());
    raw.initialize(json!({})).await;
    let reply = raw
        .call(
            2,
            "bump",
            json!({"tag": "b", "pad": "x".repeat(4096)}),
            Some("k"),
        )
        .await;
    assert_eq!(reply.status, 413);
    assert_eq!(server.effects.count("b"), 0);
}

/// The 2026-07-28 revision (rmcp serves it statelessly): `server/discover` advertises the
/// keys, keyed calls run once.
#[tokio::test]
async fn the_stateless_revision_is_deduplicated_too() {
    // Stateless, rmcp answers with JSON when asked to, else SSE: both paths of the capture.
    for json in [false, true] {
        stateless_keyed(json).await;
    }
}

async fn stateless_keyed(json: bool) {
    let server = Server::start(Some(layer()), json).await;
    let raw = Raw::new(&server.url());
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"}});
    let modern = |id: i64, method: &str, params: Value| {
        let mut params = params;
        params["_meta"] = meta.clone();
        json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
    };
    let headers = |method: &'static str, name: Option<&'static str>| {
        let mut h = vec![
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", method),
        ];
        if let Some(n) = name {
            h.push(("mcp-name", n));
        }
        h
    };
    let discover = raw
        .post(
            modern(1, "server/discover", json!({})),
            &headers("server/discover", None),
        )
        .await;
    let caps = &discover.response(1).expect(&discover.body)["result"]["capabilities"];
    assert!(
        caps["extensions"]["io.github.mcp-resume/resume-safety"]["idempotency"].is_object(),
        "{caps}"
    );
    for id in 2..4 {
        let mut extra = headers("tools/call", Some("bump"));
        extra.push(("idempotency-key", "m-1"));
        let reply = raw
            .post(
                modern(
                    id,
                    "tools/call",
                    json!({"name": "bump", "arguments": {"tag": "m"}}),
                ),
                &extra,
            )
            .await;
        assert_eq!(text(&reply.response(id).expect(&reply.body)), "m:1");
    }
    assert_eq!(server.effects.count("m"), 1);
}

/// Storing a keyed call's answer fails once: the lease is still renewed and the answer
/// stored again, so a re-send long past the lease gets it (not `IDEMPOTENCY_OUTCOME_UNKNOWN`).
#[tokio::test]
async fn an_answer_whose_storing_failed_once_is_stored_again() {
    let lease = Duration::from_millis(300);
    let layer = ResumeSafetyLayer::new(crate::stores::FinishFailsOnce::default())
        .seed(7)
        .lease(lease);
    let server = Server::start(Some(layer), false).await;
    let mut raw = Raw::new(&server.url());
    raw.initialize(json!({})).await;
    let first = raw.call(2, "bump", json!({"tag": "f"}), Some("k-f")).await;
    assert_eq!(text(&first.response(2).unwrap()), "f:1");
    tokio::time::sleep(lease * 6).await;
    let again = raw.call(3, "bump", json!({"tag": "f"}), Some("k-f")).await;
    let reply = again.response(3).unwrap();
    assert_eq!(text(&reply), "f:1", "{reply}");
    assert_eq!(server.effects.count("f"), 1);
}

/// A second handle on the same session (to send while another call is still running).
fn twin(raw: &Raw) -> Raw {
    Raw {
        http: raw.http.clone(),
        url: raw.url.clone(),
        session: raw.session.clone(),
    }
}

fn refusal(reply: &Value) -> &str {
    reply["error"]["data"]["code"].as_str().unwrap_or("")
}

/// The store loses a running call's claim (a fail-over before replication): the holder's
/// next renewal puts it back, so a re-send meanwhile is told the key is in use instead of
/// running the tool again, and a re-send after it ends gets its stored answer.
#[tokio::test]
async fn a_claim_the_store_lost_while_its_call_runs_is_put_back() {
    let lease = Duration::from_millis(300);
    let store = crate::stores::Failover::default();
    let layer = ResumeSafetyLayer::new(store.clone()).seed(7).lease(lease);
    let server = Server::start(Some(layer), false).await;
    let mut raw = Raw::new(&server.url());
    raw.initialize(json!({})).await;
    let args = json!({"tag": "v", "delay_ms": 1500});
    let first = {
        let (raw, args) = (twin(&raw), args.clone());
        tokio::spawn(async move { raw.call(2, "bump", args, Some("k-v")).await })
    };
    store.until(|s| s.claims() >= 1).await;
    store.fail_over();
    store.until(|s| s.renewals_after() >= 1).await;
    let again = raw.call(3, "bump", args.clone(), Some("k-v")).await;
    let reply = again.response(3).unwrap();
    assert_eq!(refusal(&reply), "IDEMPOTENCY_KEY_IN_USE", "{reply}");
    let first = first.await.unwrap();
    assert_eq!(text(&first.response(2).unwrap()), "v:1");
    let later = raw.call(4, "bump", args, Some("k-v")).await;
    let reply = later.response(4).unwrap();
    assert_eq!(text(&reply), "v:1", "{reply}");
    assert_eq!(server.effects.count("v"), 1);
}

/// The store loses a claim before any renewal (a call shorter than a third of the lease):
/// its holder's answer is stored all the same, and a re-send gets it without running.
#[tokio::test]
async fn an_answer_whose_claim_the_store_lost_is_stored_all_the_same() {
    let store = crate::stores::Failover::default();
    let layer = ResumeSafetyLayer::new(store.clone())
        .seed(7)
        .lease(Duration::from_secs(30));
    let server = Server::start(Some(layer), false).await;
    let mut raw = Raw::new(&server.url());
    raw.initialize(json!({})).await;
    let args = json!({"tag": "w", "delay_ms": 300});
    let first = {
        let (raw, args) = (twin(&raw), args.clone());
        tokio::spawn(async move { raw.call(2, "bump", args, Some("k-w")).await })
    };
    store.until(|s| s.claims() >= 1).await;
    store.fail_over();
    let first = first.await.unwrap();
    assert_eq!(text(&first.response(2).unwrap()), "w:1");
    let later = raw.call(3, "bump", args, Some("k-w")).await;
    let reply = later.response(3).unwrap();
    assert_eq!(text(&reply), "w:1", "{reply}");
    assert_eq!(server.effects.count("w"), 1);
}
