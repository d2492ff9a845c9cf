//! Bad input gets the documented status and JSON-RPC error body, never a panic; the cluster
//! keeps serving afterwards.

use crate::common;

use common::*;
use mock_server::{Cluster, ClusterConfig, Preset};
use serde_json::{json, Value};

const MAX_BODY: usize = 1024;

async fn cluster(preset: Preset) -> Cluster {
    Cluster::start(ClusterConfig {
        preset,
        instances: 2,
        max_body_bytes: MAX_BODY,
        ..Default::default()
    })
    .await
    .expect("cluster starts")
}

fn error_code(r: &Reply) -> i64 {
    let v: Value = serde_json::from_str(&r.body)
        .unwrap_or_else(|e| panic!("JSON body expected ({e}): {}", r.body));
    assert_eq!(v["jsonrpc"], json!("2.0"), "{v}");
    v.pointer("/error/code")
        .and_then(Value::as_i64)
        .unwrap_or_else(|| panic!("no error code: {v}"))
}

/// Every test ends by proving the cluster still works.
async fn still_serves(c: Cluster) {
    let mcp = Mcp::new(c.url());
    let (sid, _, _) = mcp.initialize(None).await;
    let r = mcp
        .call(&sid, 1, "echo", json!({"text": "ok"}), "alive")
        .await;
    assert_eq!(result_text(&r.response().unwrap()), "ok");
    c.shutdown().await;
}

#[tokio::test]
async fn malformed_json_is_a_parse_error() {
    let c = cluster(Preset::Strict).await;
    let mcp = Mcp::new(c.url());
    for body in [
        "{",
        "not json",
        "{\"jsonrpc\": \"2.0\", \"id\": 1,",
        "\u{0}\u{1}",
    ] {
        let r = mcp.post_raw(None, body.to_owned()).await;
        assert_eq!(r.status, 400, "{body:?}");
        assert_eq!(error_code(&r), -32700);
    }
    // Valid JSON that is not JSON-RPC: invalid request.
    for body in [
        json!({"hello": 1}),
        json!([]),
        json!({"jsonrpc": "1.0", "id": 1, "method": "ping"}),
        json!(7),
    ] {
        let r = mcp.post(None, body.clone()).await;
        assert_eq!(r.status, 400, "{body}");
        assert_eq!(error_code(&r), -32600);
    }
    still_serves(c).await;
}

#[tokio::test]
async fn wrong_accept_is_406_and_wrong_content_type_is_415() {
    let c = cluster(Preset::Strict).await;
    let mcp = Mcp::new(c.url());
    let (sid, _, _) = mcp.initialize(None).await;
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}).to_string();
    for accept in ["text/html", "application/json", "text/event-stream"] {
        let resp = mcp
            .http
            .post(&mcp.url)
            .header("accept", accept)
            .header("content-type", "application/json")
            .header("mcp-session-id", &sid)
            .body(ping.clone())
            .send()
            .await
            .unwrap();
        let r = Mcp::read(resp).await;
        assert_eq!(r.status, 406, "POST with Accept {accept}");
        assert_eq!(error_code(&r), -32600);
    }
    let resp = mcp
        .http
        .get(&mcp.url)
        .header("accept", "application/json")
        .header("mcp-session-id", &sid);
    let r = Mcp::read(resp.send().await.unwrap()).await;
    assert_eq!(r.status, 406, "GET without text/event-stream");
    let resp = mcp
        .http
        .post(&mcp.url)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "text/plain")
        .header("mcp-session-id", &sid)
        .body(ping);
    let r = Mcp::read(resp.send().await.unwrap()).await;
    assert_eq!(r.status, 415);
    assert_eq!(error_code(&r), -32600);
    still_serves(c).await;
}

#[tokio::test]
async fn unknown_session_ids_get_404_except_on_naive() {
    let c = cluster(Preset::Strict).await;
    let mcp = Mcp::new(c.url());
    let unknown = "0123456789abcdef0123456789abcdef";
    let r = mcp.ping(unknown).await;
    assert_eq!(r.status, 404);
    assert_eq!(error_code(&r), -32001);
    let r = mcp.get(unknown, None).await;
    assert_eq!(r.status, 404);
    let del = Mcp::read(
        mcp.http
            .delete(&mcp.url)
            .header("mcp-session-id", unknown)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(del.status, 404);
    // A deleted session is gone on every instance.
    let (sid, _, _) = mcp.initialize(None).await;
    let del = Mcp::read(
        mcp.http
            .delete(&mcp.url)
            .header("mcp-session-id", &sid)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(del.status, 200);
    assert_eq!(mcp.ping(&sid).await.status, 404);
    assert_eq!(mcp.ping(&sid).await.status, 404);
    still_serves(c).await;

    // The observed system makes a default session up instead (and says so only through
    // its capability hash).
    let c = cluster(Preset::Naive).await;
    let mcp = Mcp::new(c.url());
    let r = mcp.ping(unknown).await;
    assert_eq!(r.status, 200);
    assert!(r.header("mcp-capability-hash").is_some());
    assert_eq!(c.oracle().totals.sessions_made_up, 1);
    still_serves(c).await;
}

#[tokio::test]
async fn malformed_or_missing_session_ids_are_400() {
    let c = cluster(Preset::Naive).await;
    let mcp = Mcp::new(c.url());
    let long = "a".repeat(129);
    for bad in ["has space", long.as_str(), "tab\there"] {
        let r = mcp.ping(bad).await;
        assert_eq!(r.status, 400, "{bad:?}");
        assert_eq!(error_code(&r), -32600);
    }
    let r = mcp
        .post(None, json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}))
        .await;
    assert_eq!(r.status, 400, "missing session id");
    let r = Mcp::read(
        mcp.http
            .get(&mcp.url)
            .header("accept", "text/event-stream")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, 400, "GET without session id");
    assert_eq!(
        c.oracle().totals.sessions_made_up,
        0,
        "nothing made up for malformed ids"
    );
    still_serves(c).await;
}

#[tokio::test]
async fn oversize_bodies_are_413() {
    let c = cluster(Preset::Strict).await;
    let mcp = Mcp::new(c.url());
    let (sid, _, _) = mcp.initialize(None).await;
    let big = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                     "params": {"name": "echo", "arguments": {"text": "x".repeat(4 * MAX_BODY)}}});
    let r = mcp.post(Some(&sid), big.clone()).await;
    assert_eq!(r.status, 413);
    assert_eq!(error_code(&r), -32600);
    // Without a Content-Length (chunked), the limit holds while reading.
    let chunks = vec![Ok::<_, std::io::Error>(big.to_string().into_bytes())];
    let body = reqwest::Body::wrap_stream(futures::stream::iter(chunks));
    let resp = mcp
        .http
        .post(&mcp.url)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-session-id", &sid)
        .body(body)
        .send()
        .await
        .unwrap();
    let r = Mcp::read(resp).await;
    assert_eq!(r.status, 413);
    assert_eq!(c.oracle().totals.executions, 0);
    still_serves(c).await;
}

#[tokio::test]
async fn bogus_last_event_ids() {
    let c = cluster(Preset::Strict).await;
    let mcp = Mcp::new(c.url());
    let (sid, _, _) = mcp.initialize(None).await;
    for bad in ["garbage", "-5", "stream-", "x y-1"] {
        let r = mcp.get(&sid, Some(bad)).await;
        assert_eq!(r.status, 400, "{bad:?}: {}", r.body);
        assert_eq!(error_code(&r), -32600);
    }
    // Well-formed but naming nothing this server issued: the resume is rejected (§5) and
    // the session forgotten.
    let r = mcp.get(&sid, Some("0000000000000000-41")).await;
    assert_eq!(r.status, 404);
    let v: Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(v.pointer("/error/data/reason"), Some(&json!("event_gap")));
    assert_eq!(
        r.header("mcp-resume-rejected").as_deref(),
        Some("event_gap")
    );
    assert_eq!(mcp.ping(&sid).await.status, 404);
    still_serves(c).await;

    // The observed system replays whatever it finds, here nothing, and ends cleanly.
    let c = cluster(Preset::Naive).await;
    let mcp = Mcp::new(c.url());
    let (sid, _, _) = mcp.initialize(None).await;
    let r = mcp.get(&sid, Some("0000000000000000-41")).await;
    assert_eq!(r.status, 200);
    assert!(r.events.is_empty() && !r.cut);
    still_serves(c).await;
}

/// A cursor at the largest sequence number has no successor: it names nothing issued and is
/// rejected as a gap, not a panic in the handler (which the balancer would answer 502).
#[tokio::test]
async fn a_cursor_at_the_largest_sequence_number_is_a_gap() {
    let c = cluster(Preset::Replicated).await;
    let mcp = Mcp::new(c.url());
    let (sid, _, _) = mcp.initialize(None).await;
    let r = mcp.call(&sid, 1, "echo", json!({"text": "x"}), "t").await;
    let last = r.last_event_id().expect("the call's events carry ids");
    let stream = &last[..last.rfind('-').expect("a sequenced id")];
    let r = mcp.get(&sid, Some(&format!("{stream}-{}", u64::MAX))).await;
    assert_eq!(r.status, 404, "{}", r.body);
    let v: Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(v.pointer("/error/data/reason"), Some(&json!("event_gap")));
    still_serves(c).await;
}

/// What the oracle keeps of a request is bounded: a tag longer than 256 bytes is refused
/// as invalid params (nothing runs), and a trace record keeps a `traceparent` only up to its
/// valid length (55 bytes).
#[tokio::test]
async fn over_long_tags_are_refused_and_traceparents_truncated() {
    let c = cluster(Preset::Strict).await;
    let mcp = Mcp::new(c.url());
    let (sid, _, _) = mcp.initialize(None).await;
    let traceparent = format!(
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01{}",
        "x".repeat(300)
    );
    let body = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": "x"},
                   "_meta": {"io.github.mcp-resume/tag": "t".repeat(257),
                             "traceparent": traceparent}}});
    let r = mcp.post(Some(&sid), body).await;
    assert_eq!(
        r.response().unwrap().pointer("/error/code"),
        Some(&json!(-32602)),
        "{}",
        r.body
    );
    let report = c.oracle();
    assert_eq!(report.totals.executions, 0);
    let trace = report
        .traces
        .last()
        .expect("the call's trace context is recorded");
    assert_eq!(trace.tag, None);
    assert_eq!(trace.meta_traceparent.as_deref(), Some(&traceparent[..55]));
    // A tag of 256 bytes is still a tag.
    let tag = "t".repeat(256);
    let r = mcp.call(&sid, 3, "echo", json!({"text": "x"}), &tag).await;
    assert_eq!(result_text(&r.response().unwrap()), "x");
    assert_eq!(c.oracle().executions_tagged(&tag).count(), 1);
    still_serves(c).await;
}

#[tokio::test]
async fn other_protocol_errors() {
    let c = cluster(Preset::Strict).await;
    let mcp = Mcp::new(c.url());
    let (sid, _, _) = mcp.initialize(None).await;
    // Unknown method: a JSON-RPC error in a 200.
    let r = mcp
        .post(
            Some(&sid),
            json!({"jsonrpc": "2.0", "id": 1, "method": "resources/list"}),
        )
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(error_code(&r), -32601);
    // Unknown tool and bad arguments: invalid params.
    let r = mcp.call(&sid, 2, "nope", json!({}), "t").await;
    assert_eq!(
        r.response().unwrap().pointer("/error/code"),
        Some(&json!(-32602))
    );
    let r = mcp
        .call(&sid, 3, "slow", json!({"steps": "many"}), "t")
        .await;
    assert_eq!(
        r.response().unwrap().pointer("/error/code"),
        Some(&json!(-32602))
    );
    // Unsupported protocol version header.
    let resp = mcp
        .http
        .post(&mcp.url)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-session-id", &sid)
        .header("mcp-protocol-version", "1999-01-01")
        .body(json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}).to_string());
    let r = Mcp::read(resp.send().await.unwrap()).await;
    assert_eq!(r.status, 400);
    // Methods the endpoint does not serve.
    let r = Mcp::read(mcp.http.put(&mcp.url).send().await.unwrap()).await;
    assert_eq!(r.status, 405);
    assert_eq!(r.header("allow").as_deref(), Some("GET, POST, DELETE"));
    let other = mcp.url.replace("/mcp", "/elsewhere");
    let r = Mcp::read(mcp.http.get(&other).send().await.unwrap()).await;
    assert_eq!(r.status, 404);
    // DNS-rebinding protection.
    let r = Mcp::read(
        mcp.http
            .post(&mcp.url)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .header("origin", "http://evil.example")
            .body("{}")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, 403);
    assert_eq!(error_code(&r), -32000);
    let r = Mcp::read(
        mcp.http
            .post(&mcp.url)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .header("host", "evil.example")
            .body("{}")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, 403);
    // A batch with initialize in it is refused; a batch of pings is answered as an array.
    let r = mcp
        .post(None, json!([{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": VERSION}}]))
        .await;
    assert_eq!(r.status, 400);
    let r = mcp
        .post(Some(&sid), json!([{"jsonrpc": "2.0", "id": 1, "method": "ping"}, {"jsonrpc": "2.0", "id": 2, "method": "ping"}]))
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json().as_array().map(Vec::len), Some(2));
    still_serves(c).await;
}

/// A key that is not a string, is empty or is over 256 bytes is refused as the guard refuses
/// it (400 `IDEMPOTENCY_KEY_INVALID`, nothing runs), not ignored with the call run unkeyed.
#[tokio::test]
async fn an_invalid_idempotency_key_is_refused_as_the_guard_refuses_it() {
    let c = cluster(Preset::Strict).await;
    let mcp = Mcp::new(c.url());
    let (sid, _, _) = mcp.initialize(None).await;
    let long = "k".repeat(257);
    for key in [json!(7), json!(""), json!(long)] {
        let body = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": "x"},
                       "_meta": {"io.github.mcp-resume/idempotency-key": key}}});
        let r = mcp.post(Some(&sid), body).await;
        assert_eq!(r.status, 400, "{key}: {}", r.body);
        let v: Value = serde_json::from_str(&r.body).unwrap();
        assert_eq!(v["error"]["data"]["code"], "IDEMPOTENCY_KEY_INVALID", "{v}");
        assert_eq!(v["id"], 3);
    }
    still_serves(c).await;
}

/// A keyed call inside a batch is refused as the guard refuses it (400
/// `IDEMPOTENCY_UNGUARDABLE`, "send it alone"), nothing in the batch run, not deduplicated.
#[tokio::test]
async fn a_keyed_call_in_a_batch_is_refused_as_the_guard_refuses_it() {
    let c = cluster(Preset::Strict).await;
    let mcp = Mcp::new(c.url());
    let (sid, _, _) = mcp.initialize(None).await;
    let call = |id: u64| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "counter_increment", "arguments": {},
                       "_meta": {"io.github.mcp-resume/idempotency-key": "batched-1"}}})
    };
    let ping = json!({"jsonrpc": "2.0", "id": 9, "method": "ping"});
    for id in [3, 4] {
        let r = mcp.post(Some(&sid), json!([call(id), ping])).await;
        assert_eq!(r.status, 400, "{}", r.body);
        let v: Value = serde_json::from_str(&r.body).unwrap();
        assert_eq!(v["error"]["code"], -32600, "{v}");
        assert_eq!(v["error"]["data"]["code"], "IDEMPOTENCY_UNGUARDABLE", "{v}");
    }
    assert_eq!(c.oracle().totals.executions, 0);
    // Sent alone, the same call runs.
    let r = mcp.post(Some(&sid), call(5)).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(c.oracle().totals.executions, 1);
    still_serves(c).await;
}

/// A call keyed only by the standard `params.idempotencyKey` is deduplicated under that key:
/// the key the check accepts is the key claimed, so the same call sent twice runs once.
#[tokio::test]
async fn a_call_keyed_by_params_idempotency_key_runs_once() {
    let c = cluster(Preset::Strict).await;
    let mcp = Mcp::new(c.url());
    let (sid, _, _) = mcp.initialize(None).await;
    for id in [3, 4] {
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": "x"},
                       "idempotencyKey": "standard-key-1"}});
        let r = mcp.post(Some(&sid), body).await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
    assert_eq!(
        c.oracle().totals.executions,
        1,
        "the re-sent call ran again"
    );
    still_serves(c).await;
}
