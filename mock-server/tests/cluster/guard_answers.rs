//! Where the mock answers a keyed call itself, it answers as the resume-safety guard does
//! (`docs/extension.md`): a store that cannot take the claim is `503`
//! `IDEMPOTENCY_STORE_UNAVAILABLE` with `Retry-After` before anything is streamed, and two
//! calls under one key are told apart by their arguments as written.

use crate::common;

use std::sync::Arc;

use common::modern::*;
use common::*;
use mock_server::store::StoredOutcome;
use mock_server::{Cluster, ClusterConfig, ClusterEra, MemoryStore, Preset, Store};
use serde_json::{json, Value};

async fn cluster(preset: Preset, era: ClusterEra, store: &MemoryStore) -> Cluster {
    Cluster::start(ClusterConfig {
        preset,
        era,
        instances: 2,
        idle_timeout: None,
        store: Some(Arc::new(store.clone())),
        ..Default::default()
    })
    .await
    .expect("cluster starts")
}

/// Claims keys until the store refuses one: every key it holds is then running, none can
/// make room. Returns the keys claimed.
async fn fill_with_running_keys(store: &MemoryStore) -> Vec<String> {
    let mut keys = Vec::new();
    loop {
        let key = format!("filler-{}", keys.len());
        match store.idempotency_begin(&key, "filler", 0, &key).await {
            Ok(_) => keys.push(key),
            Err(_) => return keys,
        }
        assert!(keys.len() <= 1_000_000, "the key map has no bound");
    }
}

/// The guard's answer to a keyed call while its store cannot take the claim.
fn assert_store_unavailable(r: &Reply, id: u64) {
    assert_eq!(r.status, 503, "{}", r.body);
    assert!(!r.sse, "answered before anything is streamed: {r:?}");
    assert!(r.header("retry-after").is_some(), "{:?}", r.headers);
    let v = r.json();
    assert_eq!(
        v.pointer("/error/data/code"),
        Some(&json!("IDEMPOTENCY_STORE_UNAVAILABLE")),
        "{v}"
    );
    assert_eq!(v["id"], json!(id), "{v}");
}

/// Frees room in a full store: one filler key finishes, so it may be forgotten.
async fn make_room(store: &MemoryStore, keys: &[String]) {
    let outcome = StoredOutcome {
        response: json!({"result": {"content": []}}),
        capability_hash: String::new(),
    };
    store
        .idempotency_finish(&keys[0], outcome)
        .await
        .expect("finishes");
}

#[tokio::test]
async fn a_keyed_call_the_full_store_cannot_claim_is_503_store_unavailable_then_runs() {
    for preset in [Preset::Strict, Preset::Replicated] {
        let store = MemoryStore::new();
        let c = cluster(preset, ClusterEra::Legacy, &store).await;
        let mcp = Mcp::new(c.url());
        let (sid, _, _) = mcp.initialize(None).await;
        let keys = fill_with_running_keys(&store).await;
        let r = mcp
            .call_keyed(&sid, 1, "counter_increment", json!({}), "full", "k-full")
            .await;
        assert_store_unavailable(&r, 1);
        assert_eq!(c.oracle().executions_tagged("full").count(), 0, "{preset}");

        // The store has room again: the same call, re-sent, runs once.
        make_room(&store, &keys).await;
        let r = mcp
            .call_keyed(&sid, 2, "counter_increment", json!({}), "full", "k-full")
            .await;
        assert_eq!(r.status, 200, "{preset}: {}", r.body);
        let resp = r.response().expect("an answer");
        assert!(resp.get("result").is_some(), "{preset}: {resp}");
        assert_eq!(c.oracle().executions_tagged("full").count(), 1, "{preset}");
        c.shutdown().await;
    }
}

#[tokio::test]
async fn a_keyed_call_the_full_store_cannot_claim_is_503_store_unavailable_in_2026_07_28() {
    let store = MemoryStore::new();
    let c = cluster(Preset::Strict, ClusterEra::Modern, &store).await;
    let mcp = Mcp::new(c.url());
    let keys = fill_with_running_keys(&store).await;
    let keyed = |id: u64| {
        Req::new(
            id,
            "tools/call",
            json!({"name": "counter_increment", "arguments": {},
                   "_meta": {TAG: "full", KEY: "k-full"}}),
            &json!({}),
        )
    };
    assert_store_unavailable(&mcp.modern(keyed(1)).await, 1);
    assert_eq!(c.oracle().executions_tagged("full").count(), 0);
    make_room(&store, &keys).await;
    let r = mcp.modern(keyed(2)).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r
        .response()
        .and_then(|v| v.get("result").cloned())
        .is_some());
    assert_eq!(c.oracle().executions_tagged("full").count(), 1);
    c.shutdown().await;
}

/// Integers past 64 bits that a reader into doubles would take for one number: two calls,
/// not one, so the second is refused, not answered with the first's result.
#[tokio::test]
async fn the_same_key_for_integers_apart_past_64_bits_is_refused() {
    for preset in [Preset::Strict, Preset::Replicated] {
        let store = MemoryStore::new();
        let c = cluster(preset, ClusterEra::Legacy, &store).await;
        let mcp = Mcp::new(c.url());
        let (sid, _, _) = mcp.initialize(None).await;
        let call = |id: u64, item: &str| {
            format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"prepare","arguments":{{"item":{item}}},"_meta":{{"{TAG}":"big","{KEY}":"k-big"}}}}}}"#
            )
        };
        let first = mcp
            .post_raw(Some(&sid), call(1, "123456789012345678901"))
            .await;
        let first = first.response().expect("an answer");
        assert!(first.get("result").is_some(), "{preset}: {first}");
        let second = mcp
            .post_raw(Some(&sid), call(2, "123456789012345678902"))
            .await;
        let second: Value = second.response().expect("an answer");
        assert_eq!(
            second.pointer("/error/data/code"),
            Some(&json!("IDEMPOTENCY_KEY_REUSED")),
            "{preset}: {second}"
        );
        // The first call, sent again, is still the first call: its stored answer.
        let again = mcp
            .post_raw(Some(&sid), call(3, "123456789012345678901"))
            .await;
        let again = again.response().expect("an answer");
        assert_eq!(again["result"], first["result"], "{preset}: {again}");
        assert_eq!(c.oracle().executions_tagged("big").count(), 1, "{preset}");
        c.shutdown().await;
    }
}

/// A body bound small enough for a test's call to pass it.
const MAX_BODY: usize = 1024;

async fn bounded(preset: Preset) -> Cluster {
    Cluster::start(ClusterConfig {
        preset,
        instances: 2,
        max_body_bytes: MAX_BODY,
        ..Default::default()
    })
    .await
    .expect("cluster starts")
}

/// The guard's refusal of a call it cannot see whole: `status`, `IDEMPOTENCY_UNGUARDABLE`.
fn assert_unguardable(r: &Reply, status: u16) {
    assert_eq!(r.status, status, "{}", r.body);
    let v = r.json();
    assert_eq!(
        v.pointer("/error/data/code"),
        Some(&json!("IDEMPOTENCY_UNGUARDABLE")),
        "{v}"
    );
}

/// `data.code` of a JSON error reply, if any.
fn data_code(r: &Reply) -> Option<Value> {
    r.json().pointer("/error/data/code").cloned()
}

async fn post_streamed(mcp: &Mcp, sid: &str, body: String, key_header: Option<&str>) -> Reply {
    let chunks = vec![Ok::<_, std::io::Error>(body.into_bytes())];
    let mut req = mcp
        .http
        .post(&mcp.url)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-session-id", sid)
        .header("mcp-protocol-version", VERSION)
        .body(reqwest::Body::wrap_stream(futures::stream::iter(chunks)));
    if let Some(key) = key_header {
        req = req.header("idempotency-key", key);
    }
    Mcp::read(req.send().await.expect("request sent")).await
}

#[tokio::test]
async fn a_keyed_body_over_the_bound_is_413_unguardable_and_an_unkeyed_one_plain_413() {
    for preset in [Preset::Strict, Preset::Replicated] {
        let c = bounded(preset).await;
        let mcp = Mcp::new(c.url());
        let (sid, _, _) = mcp.initialize(None).await;
        let call = |meta: Value| {
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                   "params": {"_meta": meta, "name": "echo",
                              "arguments": {"text": "x".repeat(4 * MAX_BODY)}}})
            .to_string()
        };
        // Key in its first bytes: declared over the bound, then streamed without a length.
        let keyed = call(json!({KEY: "k-big", TAG: "big"}));
        assert_unguardable(&mcp.post_raw(Some(&sid), keyed.clone()).await, 413);
        assert_unguardable(&post_streamed(&mcp, &sid, keyed, None).await, 413);
        // Key in the header.
        let unkeyed = call(json!({TAG: "big"}));
        assert_unguardable(
            &post_streamed(&mcp, &sid, unkeyed.clone(), Some("k-big")).await,
            413,
        );
        // No key: the server's own 413.
        let r = mcp.post_raw(Some(&sid), unkeyed).await;
        assert_eq!(r.status, 413, "{preset}: {}", r.body);
        assert_eq!(data_code(&r), None, "{preset}: {}", r.body);
        assert_eq!(c.oracle().totals.executions, 0, "{preset}");
        c.shutdown().await;
    }
}

#[tokio::test]
async fn a_keyed_body_that_cannot_be_read_is_400_unguardable_and_an_unkeyed_one_a_parse_error() {
    for preset in [Preset::Strict, Preset::Replicated] {
        let c = bounded(preset).await;
        let mcp = Mcp::new(c.url());
        let (sid, _, _) = mcp.initialize(None).await;
        // `NaN`, which lenient readers take.
        let call = |meta: &str| {
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"echo","arguments":{{"text":"x","n":NaN}},"_meta":{{{meta}}}}}}}"#
            )
        };
        let keyed = call(&format!(r#""{KEY}":"k-nan","{TAG}":"nan""#));
        assert_unguardable(&mcp.post_raw(Some(&sid), keyed).await, 400);
        let r = mcp
            .post_raw(Some(&sid), call(&format!(r#""{TAG}":"nan""#)))
            .await;
        assert_eq!(r.status, 400, "{preset}: {}", r.body);
        assert_eq!(r.json()["error"]["code"], json!(-32700), "{preset}");
        assert_eq!(data_code(&r), None, "{preset}: {}", r.body);
        assert_eq!(c.oracle().totals.executions, 0, "{preset}");
        c.shutdown().await;
    }
}

#[tokio::test]
async fn a_request_body_with_a_content_encoding_is_415_unguardable_keyed_or_not() {
    for preset in [Preset::Strict, Preset::Replicated] {
        let c = bounded(preset).await;
        let mcp = Mcp::new(c.url());
        let (sid, _, _) = mcp.initialize(None).await;
        for (coding, meta) in [
            ("gzip", json!({TAG: "gz", KEY: "k-gz"})),
            ("identity, br", json!({TAG: "gz"})),
        ] {
            let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                              "params": {"name": "echo", "arguments": {"text": "x"},
                                         "_meta": meta}});
            let req = mcp
                .http
                .post(&mcp.url)
                .header("accept", "application/json, text/event-stream")
                .header("content-type", "application/json")
                .header("content-encoding", coding)
                .header("mcp-session-id", &sid)
                .header("mcp-protocol-version", VERSION)
                .body(body.to_string());
            let r = Mcp::read(req.send().await.expect("request sent")).await;
            assert_unguardable(&r, 415);
            assert_eq!(
                r.header("accept-encoding").as_deref(),
                Some("identity"),
                "{preset} {coding}"
            );
        }
        assert_eq!(c.oracle().totals.executions, 0, "{preset}");
        c.shutdown().await;
    }
}

/// Whether a client of `redis` (its `CLIENT LIST`) is held back by `CLIENT PAUSE` in a
/// script: the keyed call's claim, when nothing else writes meanwhile.
async fn a_script_is_paused(mut redis: redis::aio::MultiplexedConnection) -> bool {
    let clients: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query_async(&mut redis)
        .await
        .expect("CLIENT LIST");
    clients.lines().any(|l| {
        let field = |name: &str| {
            l.split(' ')
                .find_map(|f| f.strip_prefix(name))
                .unwrap_or("")
                .to_owned()
        };
        field("flags=").contains('b') && field("cmd=") == "evalsha"
    })
}

/// Waits, at most [`STEP`], until `done` holds; false if it never did.
async fn until<F: std::future::Future<Output = bool>>(mut done: impl FnMut() -> F) -> bool {
    tokio::time::timeout(STEP, async {
        while !done().await {
            tokio::task::yield_now().await;
        }
    })
    .await
    .is_ok()
}

/// A keyed call whose client left while the claim of its key was waiting on Redis never
/// ran: the key is let go once the store has taken the claim, and the call sent again runs.
/// Before the fix the claim was dropped with the request's handler, the key stayed running
/// under the live instance, and every re-send was answered `IDEMPOTENCY_KEY_IN_USE`.
#[tokio::test]
async fn a_claim_whose_client_left_while_redis_was_busy_lets_the_key_go() {
    let server = mock_server::procs::RedisServer::start()
        .await
        .unwrap_or_else(|e| panic!("this test needs redis-server: {e}"));
    // No lease renewal and no deadline inside the pause: the claim is the only write held.
    let opts = mock_server::RedisOptions {
        lease: std::time::Duration::from_secs(600),
        response_timeout: std::time::Duration::from_secs(600),
        ..Default::default()
    };
    let store = mock_server::RedisStore::connect_with(&server.url(), opts)
        .await
        .expect("connects to its own redis-server");
    let cluster = Cluster::start(ClusterConfig {
        preset: Preset::Strict,
        instances: 1,
        idle_timeout: None,
        store: Some(Arc::new(store)),
        ..Default::default()
    })
    .await
    .expect("cluster starts");
    let url = cluster.instance_url(0).expect("instance 0 is up");
    let mcp = Mcp::new(url.clone());
    let (sid, _, _) = mcp.initialize(None).await;
    // Redis knows the claim's script from then on: a first claim is sent by its digest, and
    // refused unknown, only to be sent again whole by a sender no longer there to do it.
    let warm = mcp
        .call_keyed(&sid, 1, "counter_increment", json!({}), "warm", "warm-key")
        .await;
    assert!(
        warm.response().is_some_and(|r| r.get("result").is_some()),
        "{warm:?}"
    );

    let mut redis = redis::Client::open(server.url().as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(600_000)
        .arg("WRITE")
        .query_async(&mut redis)
        .await
        .expect("CLIENT PAUSE");

    let call = |id: u64| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
               "params": {"name": "counter_increment", "arguments": {},
                          "_meta": {TAG: "left", KEY: "left-key"}}})
    };
    let body = call(2).to_string();
    let conn = post_by_hand(&url, &sid, &body).await;
    assert!(
        until(|| a_script_is_paused(redis.clone())).await,
        "the claim reached Redis"
    );
    drop(conn);
    // The handler is gone: nothing of the request is in flight any more.
    assert!(
        cluster.wait_idle(STEP).await,
        "the request's handler was dropped"
    );

    let _: () = redis::cmd("CLIENT")
        .arg("UNPAUSE")
        .query_async(&mut redis)
        .await
        .expect("CLIENT UNPAUSE");
    assert!(
        until(|| {
            let redis = redis.clone();
            async move { !a_script_is_paused(redis).await }
        })
        .await,
        "the claim ran once Redis was let go"
    );
    // The claim is let go in the background: wait for its record to go before sending again
    // (never, before the fix: then the assertion below says what was answered).
    until(|| {
        let mut redis = redis.clone();
        async move {
            let held: bool = redis::cmd("EXISTS")
                .arg("mcp:idem:left-key")
                .query_async(&mut redis)
                .await
                .expect("EXISTS");
            !held
        }
    })
    .await;

    let again = mcp.post(Some(&sid), call(3)).await;
    let resp = again.response().expect("an answer");
    assert!(resp.get("result").is_some(), "the call ran: {resp}");
    assert_eq!(cluster.oracle().executions_tagged("left").count(), 1);
    cluster.shutdown().await;
}
