//! A Redis that stalls instead of refusing: it accepts connections but does not answer (a
//! stopped or busy server), answers late, or drops its connections mid-command. Every
//! operation of the store ends within its response timeout, unavailable; the store works
//! again once the server does.

use std::future::Future;
use std::time::{Duration, Instant};

use mcp_resume_server::store::Store;
use mcp_resume_server::{ErrorKind, RedisStore};

use crate::stall_proxy::{Mode, StallProxy};
use crate::{claim, key, options, outcome, record, redis_server, token, LEASE};

/// The response timeout these stores run with.
const TIMEOUT: Duration = Duration::from_millis(300);

/// The most an operation may take past the timeout (a connection dropped after it is taken
/// again, once).
const SLACK: Duration = Duration::from_millis(1500);

async fn behind_proxy() -> (StallProxy, RedisStore) {
    let server = redis_server().await;
    let target = ([127, 0, 0, 1], server.port()).into();
    let proxy = StallProxy::start(target).await;
    let mut o = options();
    o.response_timeout = TIMEOUT;
    o.connect_timeout = TIMEOUT;
    let store = RedisStore::connect_with(&proxy.url(), o)
        .await
        .expect("connects");
    (proxy, store)
}

/// Runs `op`, bounded by a generous outer deadline so that a hang fails instead of waiting;
/// asserts that it ended unavailable within the timeout and slack.
async fn ends_unavailable<T: std::fmt::Debug>(
    what: &str,
    op: impl Future<Output = Result<T, mcp_resume_server::Error>>,
) {
    let started = Instant::now();
    let result = tokio::time::timeout(Duration::from_secs(20), op)
        .await
        .unwrap_or_else(|_| panic!("{what}: still waiting after 20 s"));
    let took = started.elapsed();
    let err = result.expect_err(what);
    assert_eq!(err.kind(), ErrorKind::StoreUnavailable, "{what}: {err}");
    assert!(took < TIMEOUT + SLACK, "{what} took {took:?}");
}

/// Every operation of the store, against a server that does not answer.
async fn every_op_ends_unavailable(store: &RedisStore) {
    let sid = mcp_resume_server::ids::SessionId::parse(b"s-1").unwrap();
    ends_unavailable("put_session", store.put_session(&record("s-1"))).await;
    ends_unavailable("session", store.session(&sid)).await;
    ends_unavailable("touch_session", store.touch_session(&sid)).await;
    ends_unavailable("forget_session", store.forget_session(&sid)).await;
    ends_unavailable("claim", store.claim(&claim("k", 1, "a"))).await;
    ends_unavailable("renew", store.renew(&key("k"), &token("a"), LEASE)).await;
    ends_unavailable(
        "finish",
        store.finish(&key("k"), &token("a"), &outcome("x")),
    )
    .await;
    ends_unavailable("release", store.release(&key("k"), &token("a"))).await;
    ends_unavailable("mark_lost", store.mark_lost(&key("k"), &token("a"))).await;
}

/// Waits (bounded) until the store answers a claim again.
async fn answers_again(store: &RedisStore) {
    let back = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            if let Ok(o) = store.claim(&claim("back", 1, "a")).await {
                return o;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(back.is_ok(), "the store never answered again");
}

/// A server that takes the connection and every command but never answers (stopped).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_a_server_that_never_answers_fails_every_op_in_time() {
    let (proxy, store) = behind_proxy().await;
    store.put_session(&record("s-0")).await.unwrap();
    proxy.set(Mode::Stall);
    every_op_ends_unavailable(&store).await;
    // Twice: the first timeouts may have left the connection to be made again.
    every_op_ends_unavailable(&store).await;
    proxy.set(Mode::Pass);
    answers_again(&store).await;
}

/// A server that answers, but later than the response timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_a_server_slower_than_the_timeout_fails_every_op_in_time() {
    let (proxy, store) = behind_proxy().await;
    proxy.set(Mode::Slow(TIMEOUT * 3));
    every_op_ends_unavailable(&store).await;
    proxy.set(Mode::Pass);
    answers_again(&store).await;
}

/// A server slower than usual but within the timeout is still a store that works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_a_slow_server_within_the_timeout_still_answers() {
    let (proxy, store) = behind_proxy().await;
    proxy.set(Mode::Slow(TIMEOUT / 6));
    let got = tokio::time::timeout(Duration::from_secs(10), store.claim(&claim("k", 1, "a")))
        .await
        .expect("answers");
    assert!(got.is_ok(), "{got:?}");
}

/// The connection dropped while a command waits for its answer: it fails at once, and the
/// store connects again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_a_connection_dropped_mid_command_fails_it_and_recovers() {
    let (proxy, store) = behind_proxy().await;
    let kept = proxy.kept();
    proxy.set(Mode::Stall);
    let claiming = {
        let store = store.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            let r = store.claim(&claim("k", 1, "a")).await;
            (r, started.elapsed())
        })
    };
    // The claim waits in the proxy: the connection goes mid-command.
    tokio::time::timeout(Duration::from_secs(5), proxy.kept_past(kept))
        .await
        .expect("the claim reached the proxy");
    proxy.cut();
    proxy.set(Mode::Pass);
    let (r, took) = tokio::time::timeout(Duration::from_secs(20), claiming)
        .await
        .expect("ends")
        .unwrap();
    assert!(took < TIMEOUT + SLACK, "took {took:?}");
    if let Err(e) = r {
        assert_eq!(e.kind(), ErrorKind::StoreUnavailable);
    }
    answers_again(&store).await;
}

/// A Redis Cluster whose every node is stopped (`SIGSTOP`): they keep their connections and
/// answer nothing. Every operation ends unavailable in time; continued, the store works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cluster_a_stopped_cluster_fails_every_op_in_time() {
    // A cluster of its own: stopping the shared one would fail the other tests.
    let cluster = crate::redis_cluster::RedisCluster::start().await;
    let urls = cluster.urls();
    let nodes: Vec<&str> = urls.iter().map(String::as_str).collect();
    let mut o = options();
    o.response_timeout = TIMEOUT;
    o.connect_timeout = TIMEOUT;
    let store = RedisStore::connect_cluster_with(&nodes, o)
        .await
        .expect("connects to the cluster");
    store.put_session(&record("s-0")).await.unwrap();
    cluster.stop_all();
    let stalled = std::panic::AssertUnwindSafe(every_op_ends_unavailable(&store));
    let result = futures::FutureExt::catch_unwind(stalled).await;
    cluster.continue_all();
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
    answers_again(&store).await;
}
