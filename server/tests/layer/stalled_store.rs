//! The guard in front of a Redis that stalls rather than refuses: it takes connections and
//! commands and answers nothing (a stopped or busy server). Every request still ends, within
//! the store's response timeout: keyed calls refused retryably and never run, everything
//! else passing; and a stalled store holds up no other request.

use std::future::Future;
use std::time::{Duration, Instant};

use mcp_resume_server::{RedisOptions, RedisStore, ResumeSafetyLayer};
use mock_server::procs::RedisServer;
use serde_json::json;
use tokio::sync::OnceCell;

use crate::raw::{Raw, Reply};
use crate::server::Server;
use crate::stall_proxy::{Mode, StallProxy};

/// The response timeout of these guards' stores.
const TIMEOUT: Duration = Duration::from_millis(300);

/// What a request may take past the store's timeout: a few store steps, each bounded by it,
/// and the inner server's own time.
const SLACK: Duration = Duration::from_millis(2000);

static SERVER: OnceCell<RedisServer> = OnceCell::const_new();

async fn redis_server() -> &'static RedisServer {
    SERVER
        .get_or_init(|| async {
            RedisServer::start()
                .await
                .unwrap_or_else(|e| panic!("these tests need redis-server: {e}"))
        })
        .await
}

/// A guard on a Redis reached through `proxy`, its commands timed out after `timeout`, its
/// keys under `namespace`.
async fn guard(proxy: &StallProxy, namespace: &str, timeout: Duration) -> ResumeSafetyLayer {
    let mut o = RedisOptions::default();
    o.namespace = namespace.to_owned();
    o.response_timeout = timeout;
    o.connect_timeout = timeout;
    let store = RedisStore::connect_with(&proxy.url(), o)
        .await
        .expect("connects");
    // Longer than any test: a key left held reads as in use throughout, never lapses.
    ResumeSafetyLayer::new(store).lease(Duration::from_secs(30))
}

/// Two guards of one fleet on one Redis, behind a proxy that can stall it.
async fn fleet(timeout: Duration) -> (StallProxy, Server) {
    let (proxy, server, _) = fleet_in(timeout).await;
    (proxy, server)
}

/// [`fleet`], and the namespace of its keys.
async fn fleet_in(timeout: Duration) -> (StallProxy, Server, String) {
    let redis = redis_server().await;
    let proxy = StallProxy::start(([127, 0, 0, 1], redis.port()).into()).await;
    let namespace = format!("t{}:", uuid::Uuid::new_v4().simple());
    let first = guard(&proxy, &namespace, timeout).await;
    let second = guard(&proxy, &namespace, timeout).await;
    (proxy, Server::start_pair(first, second).await, namespace)
}

/// How many idempotency keys the Redis holds under `namespace` (read past the proxy).
async fn keys_held(namespace: &str) -> usize {
    let redis = redis_server().await;
    let mut conn = redis::Client::open(redis.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{namespace}{{k:*"))
        .query_async(&mut conn)
        .await
        .unwrap();
    keys.len()
}

/// Runs a request; it must end (a hang fails the test rather than waiting on it) within the
/// store's timeout and slack.
async fn in_time(what: &str, request: impl Future<Output = Reply>) -> Reply {
    let started = Instant::now();
    let reply = tokio::time::timeout(Duration::from_secs(20), request)
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer after 20 s"));
    let took = started.elapsed();
    assert!(took < TIMEOUT + SLACK, "{what} took {took:?}");
    reply
}

fn refused_retryably(what: &str, reply: &Reply) {
    assert_eq!(reply.status, 503, "{what}: {}", reply.body);
    assert!(
        reply.header("retry-after").is_some(),
        "{what}: no Retry-After"
    );
}

/// With the store stalled: on the instance that began the session and on one that must load
/// its record, unkeyed calls pass, keyed calls are refused retryably and never run, a new
/// session begins, and a resume ends; each within the store's timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_request_ends_in_time_while_the_store_stalls() {
    let (proxy, server) = fleet(TIMEOUT).await;
    let mut here = Raw::new(&server.url());
    here.initialize(json!({})).await;
    let echoed = here.call(2, "echo", json!({"text": "before"}), None).await;
    let last_event = echoed.events()[0].0.clone().expect("an event id");
    let mut there = Raw::new(&server.other_url());
    there.session = here.session.clone();

    proxy.set(Mode::Stall);

    let reply = in_time(
        "an unkeyed call",
        here.call(3, "echo", json!({"text": "a"}), None),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert!(reply.response(3).is_some(), "{}", reply.body);

    let reply = in_time(
        "an unkeyed call needing the session's record",
        there.call(4, "echo", json!({"text": "b"}), None),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert!(reply.response(4).is_some(), "{}", reply.body);

    let reply = in_time(
        "a keyed call",
        here.call(5, "bump", json!({"tag": "k"}), Some("key-here")),
    )
    .await;
    refused_retryably("a keyed call", &reply);
    let reply = in_time(
        "a keyed call needing the session's record",
        there.call(6, "bump", json!({"tag": "k"}), Some("key-there")),
    )
    .await;
    refused_retryably("a keyed call needing the session's record", &reply);
    assert_eq!(server.effects.count("k"), 0, "nothing keyed ran unguarded");

    let mut fresh = Raw::new(&server.url());
    let reply = in_time("an initialize", fresh.initialize(json!({}))).await;
    assert_eq!(reply.status, 200, "{}", reply.body);

    let reply = in_time("a resume needing the session's record", async {
        there.get(Some(&last_event)).await
    })
    .await;
    assert!(reply.status != 0, "{}", reply.body);

    proxy.set(Mode::Pass);
}

/// A keyed call that ran while the store was fine and ends while it stalls: its client's
/// answer waits no longer than storing it may take, and once the store answers again the
/// key gives that answer to a re-send, which does not run the call again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_keyed_call_ending_while_the_store_stalls_ends_in_time() {
    let (proxy, server) = fleet(TIMEOUT).await;
    let mut here = Raw::new(&server.url());
    here.initialize(json!({})).await;
    let call = {
        let here = Raw {
            http: here.http.clone(),
            url: here.url.clone(),
            session: here.session.clone(),
        };
        tokio::spawn(async move {
            let started = Instant::now();
            let reply = here
                .call(
                    2,
                    "bump",
                    json!({"tag": "s", "delay_ms": 600}),
                    Some("key-s"),
                )
                .await;
            (reply, started.elapsed())
        })
    };
    // The call runs (its claim granted): then the store stops answering.
    let ran = tokio::time::timeout(Duration::from_secs(10), async {
        while server.effects.count("s") == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    assert!(ran.is_ok(), "the call never ran");
    proxy.set(Mode::Stall);
    let (reply, took) = tokio::time::timeout(Duration::from_secs(20), call)
        .await
        .expect("the keyed call's client is answered")
        .unwrap();
    assert!(
        took < Duration::from_millis(600) + TIMEOUT + SLACK,
        "took {took:?}: {}",
        reply.body
    );
    proxy.set(Mode::Pass);
    let again = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            let r = here
                .call(
                    3,
                    "bump",
                    json!({"tag": "s", "delay_ms": 600}),
                    Some("key-s"),
                )
                .await;
            if r.status != 503 && !r.body.contains("IDEMPOTENCY_KEY_IN_USE") {
                return r;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the re-send is answered");
    let answer = again.response(3).expect(&again.body);
    assert_eq!(
        answer["result"]["content"][0]["text"], "s:1",
        "the stored answer: {}",
        again.body
    );
    assert_eq!(server.effects.count("s"), 1, "{}", again.body);
}

/// A keyed call whose claim the store has not answered holds up no other request: another
/// session's calls, on the same instance, are answered meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stalled_claim_holds_up_no_other_request() {
    let (proxy, server) = fleet(Duration::from_secs(10)).await;
    let mut first = Raw::new(&server.url());
    first.initialize(json!({})).await;
    let mut second = Raw::new(&server.url());
    second.initialize(json!({})).await;
    proxy.set(Mode::Stall);
    let keyed = {
        let first = Raw {
            http: first.http.clone(),
            url: first.url.clone(),
            session: first.session.clone(),
        };
        tokio::spawn(async move {
            first
                .call(2, "bump", json!({"tag": "h"}), Some("key-h"))
                .await
        })
    };
    for id in 3..6 {
        let reply = tokio::time::timeout(
            Duration::from_secs(5),
            second.call(id, "echo", json!({"text": "meanwhile"}), None),
        )
        .await
        .expect("another session's call is answered while a claim waits");
        assert!(reply.response(id).is_some(), "{}", reply.body);
        let reply = tokio::time::timeout(
            Duration::from_secs(5),
            first.call(id + 10, "echo", json!({"text": "meanwhile"}), None),
        )
        .await
        .expect("the same session's unkeyed call is answered while a claim waits");
        assert!(reply.response(id + 10).is_some(), "{}", reply.body);
    }
    assert!(!keyed.is_finished(), "the claim was still waiting");
    proxy.set(Mode::Pass);
    let reply = tokio::time::timeout(Duration::from_secs(20), keyed)
        .await
        .expect("the keyed call ends once the store answers")
        .unwrap();
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(server.effects.count("h"), 1);
}

/// A keyed call refused while the store stalls did not run, and its claim may still reach the
/// store once the store answers again: its re-send, then, is granted and runs, once, rather
/// than told the key is in use (or, past the lease, that its outcome is unknown).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_keyed_call_refused_while_the_store_stalls_runs_when_sent_again() {
    for (mode, name) in [(Mode::Stall, "stalled"), (Mode::Slow(TIMEOUT * 3), "slow")] {
        let (proxy, server) = fleet(TIMEOUT).await;
        let mut here = Raw::new(&server.url());
        here.initialize(json!({})).await;
        proxy.set(mode);
        let reply = in_time(
            "a keyed call",
            here.call(2, "bump", json!({"tag": "r"}), Some("key-r")),
        )
        .await;
        refused_retryably(name, &reply);
        proxy.set(Mode::Pass);
        // The store answers again: the re-send is answered by the call itself.
        let again = tokio::time::timeout(Duration::from_secs(20), async {
            loop {
                let r = here
                    .call(3, "bump", json!({"tag": "r"}), Some("key-r"))
                    .await;
                if r.status != 503 {
                    return r;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await
        .expect("the re-send is answered");
        assert_eq!(again.status, 200, "{name}: {}", again.body);
        assert_eq!(server.effects.count("r"), 1, "{name}: {}", again.body);
    }
}

/// Redis goes away mid-claim: it ran the claim, and the connection broke before its answer
/// came; the guard refuses the call (it did not run) and lets the key go, but the store is
/// down for that too. Once the store is back, the key the unrun call left must be let go
/// still: its re-send runs, once, instead of being told the key is in use (and, past the
/// lease, that its outcome is unknown, for as long as the store keeps lost keys).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_claim_cut_off_mid_command_leaves_no_key_behind() {
    let (proxy, server, namespace) = fleet_in(Duration::from_secs(5)).await;
    let mut here = Raw::new(&server.url());
    here.initialize(json!({})).await;
    proxy.set(Mode::Deaf);
    let keyed = {
        let here = Raw {
            http: here.http.clone(),
            url: here.url.clone(),
            session: here.session.clone(),
        };
        tokio::spawn(async move {
            here.call(2, "bump", json!({"tag": "m"}), Some("key-m"))
                .await
        })
    };
    // The claim ran in Redis; its answer is on its way when the server goes.
    let landed = tokio::time::timeout(Duration::from_secs(10), async {
        while keys_held(&namespace).await == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    assert!(landed.is_ok(), "the claim never reached the store");
    proxy.set(Mode::Refuse);
    proxy.cut();
    let reply = tokio::time::timeout(Duration::from_secs(20), keyed)
        .await
        .expect("the keyed call is answered")
        .unwrap();
    refused_retryably("a claim cut off", &reply);
    proxy.set(Mode::Pass);
    // Re-sent as a client does: again after a 503, and after "key in use" (waiting out a
    // first run), until the call is answered.
    let again = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let r = here
                .call(3, "bump", json!({"tag": "m"}), Some("key-m"))
                .await;
            if r.status != 503 && !r.body.contains("IDEMPOTENCY_KEY_IN_USE") {
                return r;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the re-send runs: the key the unrun call left is let go");
    assert_eq!(again.status, 200, "{}", again.body);
    assert_eq!(server.effects.count("m"), 1, "{}", again.body);
}
