//! The store suite: the same test bodies against `MemoryStore`, a `RedisStore` on a
//! `redis-server` of its own, and a `RedisStore` on a three-node Redis Cluster started here.
//! Needs `redis-server` (`apt-get install redis-server`); without it the Redis rows fail
//! saying so.

#[path = "../support/redis_cluster.rs"]
mod redis_cluster;
#[path = "../support/stall_proxy.rs"]
mod stall_proxy;
mod stalls;

use std::sync::Arc;
use std::time::Duration;

use mcp_resume_server::guard::{Claim, ClaimOutcome, SessionRecord, StoredOutcome};
use mcp_resume_server::ids::{ClaimToken, IdempotencyKey, SessionId};
use mcp_resume_server::store::Store;
use mcp_resume_server::wire::arguments_digest;
use mcp_resume_server::{ErrorKind, MemoryStore, RedisOptions, RedisStore};
use mock_server::procs::RedisServer;
use serde_json::json;
use tokio::sync::OnceCell;

use redis_cluster::RedisCluster;

/// Short enough that a lapse is quick to wait for, long enough that no renewal is late.
const LEASE: Duration = Duration::from_millis(150);

/// One redis-server and one cluster for the whole binary: each test takes a namespace of
/// its own, so they never see each other's keys.
static SERVER: OnceCell<RedisServer> = OnceCell::const_new();
static CLUSTER: OnceCell<RedisCluster> = OnceCell::const_new();

fn options() -> RedisOptions {
    let mut o = RedisOptions::default();
    o.namespace = format!("t{}:", uuid::Uuid::new_v4().simple());
    o
}

async fn memory() -> Arc<dyn Store> {
    Arc::new(MemoryStore::default())
}

/// The binary's one redis-server, started by the first test that needs it.
async fn redis_server() -> &'static RedisServer {
    SERVER
        .get_or_init(|| async {
            RedisServer::start()
                .await
                .unwrap_or_else(|e| panic!("the Redis store tests need redis-server: {e}"))
        })
        .await
}

async fn redis() -> Arc<dyn Store> {
    let server = redis_server().await;
    Arc::new(
        RedisStore::connect_with(&server.url(), options())
            .await
            .expect("connects"),
    )
}

async fn cluster() -> Arc<dyn Store> {
    let cluster = CLUSTER.get_or_init(RedisCluster::start).await;
    let urls = cluster.urls();
    let nodes: Vec<&str> = urls.iter().map(String::as_str).collect();
    Arc::new(
        RedisStore::connect_cluster_with(&nodes, options())
            .await
            .expect("connects to the cluster"),
    )
}

/// Each suite test, once per store.
macro_rules! suite {
    ($($name:ident),* $(,)?) => {
        mod memory_store {
            $( #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
               async fn $name() { super::$name(super::memory().await).await; } )*
        }
        mod redis_store {
            $( #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
               async fn $name() { super::$name(super::redis().await).await; } )*
        }
        mod redis_cluster_store {
            $( #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
               async fn $name() { super::$name(super::cluster().await).await; } )*
        }
    };
}

suite!(
    sessions_round_trip_and_are_forgotten,
    a_free_key_is_granted_once_then_in_use,
    a_claim_repeated_by_its_holder_is_granted_again,
    a_finished_key_answers_its_outcome_to_the_same_call_only,
    a_lapsed_lease_makes_the_key_lost_for_good,
    renewals_keep_a_claim_alive,
    only_the_holder_settles_a_key,
    a_release_frees_the_key_and_lost_keys_never_free,
    the_holder_s_answer_wins_over_a_lost_mark,
    concurrent_claims_grant_one,
    keys_of_any_shape_spread_over_the_cluster,
    a_key_the_store_lost_is_told_to_its_holder_and_taken_back,
);

fn key(k: &str) -> IdempotencyKey {
    IdempotencyKey::new(k).unwrap()
}

fn token(t: &str) -> ClaimToken {
    ClaimToken::from_stored(t)
}

fn claim(k: &str, args: u64, t: &str) -> Claim {
    Claim::new(
        key(k),
        arguments_digest("bump", &json!({"n": args})),
        token(t),
        LEASE,
    )
}

/// A stored answer with a number no `f64` holds: every store gives it back as written.
fn outcome(text: &str) -> StoredOutcome {
    let content = json!([{"type": "text", "text": text}]);
    let answer =
        format!(r#"{{"result":{{"content":{content},"n":123456789012345678901234567890}}}}"#);
    let stored = StoredOutcome::from_stored(&answer).unwrap();
    assert_eq!(stored.response(), answer);
    stored
}

fn record(sid: &str) -> SessionRecord {
    // A record as the guard writes it, read back through serde like a store does.
    serde_json::from_value(json!({
        "session": sid, "owner": "replica-1", "hash": "sha256:ab", "protocol_version": "2025-11-25"
    }))
    .unwrap()
}

/// A key the store no longer has (a fail-over before replication, a restart): its holder's
/// renewal and answer say so (`false`) and store nothing; its holder's claim takes it back
/// and its answer is stored then. One another claim took meanwhile stays that claim's.
async fn a_key_the_store_lost_is_told_to_its_holder_and_taken_back(store: Arc<dyn Store>) {
    for (k, held_by_another) in [("gone", false), ("taken", true)] {
        assert_eq!(
            store.claim(&claim(k, 1, "a")).await.unwrap(),
            ClaimOutcome::Granted
        );
        // Gone as a lost write leaves it.
        store.release(&key(k), &token("a")).await.unwrap();
        if held_by_another {
            assert_eq!(
                store.claim(&claim(k, 1, "b")).await.unwrap(),
                ClaimOutcome::Granted
            );
        }
        assert!(!store.renew(&key(k), &token("a"), LEASE).await.unwrap());
        let known = store
            .finish(&key(k), &token("a"), &outcome("a's"))
            .await
            .unwrap();
        assert_eq!(known, held_by_another, "{k}");
        let again = store.claim(&claim(k, 1, "a")).await.unwrap();
        if held_by_another {
            assert_eq!(again, ClaimOutcome::InUse);
            continue;
        }
        assert_eq!(again, ClaimOutcome::Granted);
        assert!(store
            .finish(&key(k), &token("a"), &outcome("a's"))
            .await
            .unwrap());
        assert_eq!(
            store.claim(&claim(k, 1, "c")).await.unwrap(),
            ClaimOutcome::Done(outcome("a's"))
        );
    }
}

async fn sessions_round_trip_and_are_forgotten(store: Arc<dyn Store>) {
    let sid = SessionId::parse(b"s-{1}").unwrap();
    assert_eq!(store.session(&sid).await.unwrap(), None);
    store.put_session(&record("s-{1}")).await.unwrap();
    let back = store.session(&sid).await.unwrap().unwrap();
    assert_eq!(back, record("s-{1}"));
    assert_eq!(back.owner().as_str(), "replica-1");
    store.forget_session(&sid).await.unwrap();
    assert_eq!(store.session(&sid).await.unwrap(), None);
}

async fn a_free_key_is_granted_once_then_in_use(store: Arc<dyn Store>) {
    assert_eq!(
        store.claim(&claim("k", 1, "a")).await.unwrap(),
        ClaimOutcome::Granted
    );
    assert_eq!(
        store.claim(&claim("k", 1, "b")).await.unwrap(),
        ClaimOutcome::InUse
    );
    assert_eq!(
        store.claim(&claim("k", 2, "b")).await.unwrap(),
        ClaimOutcome::Mismatch
    );
}

/// A claim's command sent twice (a Redis Cluster client re-sends a command whose reply timed
/// out, after the first one ran): the second is its holder's own and is granted, instead of
/// answering the holder "in use" and leaving a call that never ran to be lost when its lease
/// lapses. Another holder is still refused, and a settled key is never granted again.
async fn a_claim_repeated_by_its_holder_is_granted_again(store: Arc<dyn Store>) {
    let first = claim("k", 1, "a");
    assert_eq!(store.claim(&first).await.unwrap(), ClaimOutcome::Granted);
    assert_eq!(store.claim(&first).await.unwrap(), ClaimOutcome::Granted);
    assert_eq!(
        store.claim(&claim("k", 1, "b")).await.unwrap(),
        ClaimOutcome::InUse
    );
    assert_eq!(
        store.claim(&claim("k", 2, "a")).await.unwrap(),
        ClaimOutcome::Mismatch
    );
    store
        .finish(&key("k"), &token("a"), &outcome("done"))
        .await
        .unwrap();
    assert!(matches!(
        store.claim(&first).await.unwrap(),
        ClaimOutcome::Done(_)
    ));
}

async fn a_finished_key_answers_its_outcome_to_the_same_call_only(store: Arc<dyn Store>) {
    store.claim(&claim("k", 1, "a")).await.unwrap();
    store
        .finish(&key("k"), &token("a"), &outcome("once"))
        .await
        .unwrap();
    for t in ["b", "c"] {
        assert_eq!(
            store.claim(&claim("k", 1, t)).await.unwrap(),
            ClaimOutcome::Done(outcome("once"))
        );
    }
    assert_eq!(
        store.claim(&claim("k", 2, "d")).await.unwrap(),
        ClaimOutcome::Mismatch
    );
    // A finished key outlives any lease.
    tokio::time::sleep(LEASE * 2).await;
    assert_eq!(
        store.claim(&claim("k", 1, "e")).await.unwrap(),
        ClaimOutcome::Done(outcome("once"))
    );
}

async fn a_lapsed_lease_makes_the_key_lost_for_good(store: Arc<dyn Store>) {
    store.claim(&claim("k", 1, "a")).await.unwrap();
    tokio::time::sleep(LEASE + Duration::from_millis(50)).await;
    assert_eq!(
        store.claim(&claim("k", 1, "b")).await.unwrap(),
        ClaimOutcome::Lost
    );
    tokio::time::sleep(LEASE * 2).await;
    assert_eq!(
        store.claim(&claim("k", 1, "c")).await.unwrap(),
        ClaimOutcome::Lost
    );
    assert!(
        !store.renew(&key("k"), &token("a"), LEASE).await.unwrap(),
        "a lost claim cannot be renewed"
    );
}

async fn renewals_keep_a_claim_alive(store: Arc<dyn Store>) {
    // A lease of its own, long enough that a renewal due every half lease is not late on a
    // loaded machine (a second to spare); three keep the claim past one and a half leases.
    let lease = Duration::from_secs(2);
    let first = Claim::new(
        key("k"),
        arguments_digest("bump", &json!({"n": 1})),
        token("a"),
        lease,
    );
    store.claim(&first).await.unwrap();
    for _ in 0..3 {
        tokio::time::sleep(lease / 2).await;
        assert!(store.renew(&key("k"), &token("a"), lease).await.unwrap());
    }
    assert_eq!(
        store.claim(&claim("k", 1, "b")).await.unwrap(),
        ClaimOutcome::InUse
    );
    assert!(
        !store.renew(&key("k"), &token("b"), LEASE).await.unwrap(),
        "only the holder renews"
    );
    assert!(!store.renew(&key("free"), &token("a"), LEASE).await.unwrap());
}

async fn only_the_holder_settles_a_key(store: Arc<dyn Store>) {
    store.claim(&claim("k", 1, "a")).await.unwrap();
    store
        .finish(&key("k"), &token("x"), &outcome("forged"))
        .await
        .unwrap();
    store.release(&key("k"), &token("x")).await.unwrap();
    store.mark_lost(&key("k"), &token("x")).await.unwrap();
    assert_eq!(
        store.claim(&claim("k", 1, "b")).await.unwrap(),
        ClaimOutcome::InUse
    );
    store
        .finish(&key("k"), &token("a"), &outcome("real"))
        .await
        .unwrap();
    store
        .finish(&key("k"), &token("a"), &outcome("again"))
        .await
        .unwrap();
    assert_eq!(
        store.claim(&claim("k", 1, "c")).await.unwrap(),
        ClaimOutcome::Done(outcome("real"))
    );
}

async fn a_release_frees_the_key_and_lost_keys_never_free(store: Arc<dyn Store>) {
    store.claim(&claim("k", 1, "a")).await.unwrap();
    store.release(&key("k"), &token("a")).await.unwrap();
    assert_eq!(
        store.claim(&claim("k", 2, "b")).await.unwrap(),
        ClaimOutcome::Granted,
        "a freed key takes any call"
    );
    store.mark_lost(&key("k"), &token("b")).await.unwrap();
    store.release(&key("k"), &token("b")).await.unwrap();
    assert_eq!(
        store.claim(&claim("k", 2, "c")).await.unwrap(),
        ClaimOutcome::Lost
    );
}

async fn the_holder_s_answer_wins_over_a_lost_mark(store: Arc<dyn Store>) {
    store.claim(&claim("k", 1, "a")).await.unwrap();
    tokio::time::sleep(LEASE + Duration::from_millis(50)).await;
    assert_eq!(
        store.claim(&claim("k", 1, "b")).await.unwrap(),
        ClaimOutcome::Lost
    );
    // The holder was slow, not dead: its answer is the call's one run.
    store
        .finish(&key("k"), &token("a"), &outcome("late"))
        .await
        .unwrap();
    assert_eq!(
        store.claim(&claim("k", 1, "c")).await.unwrap(),
        ClaimOutcome::Done(outcome("late"))
    );
}

async fn concurrent_claims_grant_one(store: Arc<dyn Store>) {
    let mut tasks = Vec::new();
    for i in 0..16 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            store
                .claim(&claim("race", 1, &format!("t{i}")))
                .await
                .unwrap()
        }));
    }
    let mut granted = 0;
    for t in tasks {
        match t.await.unwrap() {
            ClaimOutcome::Granted => granted += 1,
            ClaimOutcome::InUse => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(granted, 1);
}

async fn keys_of_any_shape_spread_over_the_cluster(store: Arc<dyn Store>) {
    let shapes = [
        "{a}",
        "}{",
        "k:{x}:y",
        &"z".repeat(256),
        "a b c",
        "{",
        "ключ-ascii-only",
    ];
    for (i, k) in shapes.iter().enumerate() {
        let Ok(k) = IdempotencyKey::new(*k) else {
            continue; // not printable ASCII: never reaches a store
        };
        let c = Claim::new(
            k.clone(),
            arguments_digest("t", &json!(i)),
            token("a"),
            LEASE,
        );
        assert_eq!(store.claim(&c).await.unwrap(), ClaimOutcome::Granted);
        store
            .finish(&k, &token("a"), &outcome(&i.to_string()))
            .await
            .unwrap();
        let again = Claim::new(
            k.clone(),
            arguments_digest("t", &json!(i)),
            token("b"),
            LEASE,
        );
        assert_eq!(
            store.claim(&again).await.unwrap(),
            ClaimOutcome::Done(outcome(&i.to_string()))
        );
    }
}

// ---- Session expiry, on stores of a short retention ----

/// The retention of the stores in the session-expiry tests: long enough that no step is
/// late on a loaded machine (each has three quarters of a second to spare), short enough to
/// wait past.
const SHORT: Duration = Duration::from_secs(2);

fn short_options() -> RedisOptions {
    let mut o = options();
    o.retention = SHORT;
    o
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_a_touch_extends_a_session_s_expiry() {
    let store = Arc::new(MemoryStore::with_limits(16, SHORT));
    assert_eq!(store.session_retention(), Some(SHORT));
    a_touch_extends_a_session_s_expiry(store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_a_touch_extends_a_session_s_expiry() {
    let server = redis_server().await;
    let store = RedisStore::connect_with(&server.url(), short_options())
        .await
        .expect("connects");
    assert_eq!(store.session_retention(), Some(SHORT));
    a_touch_extends_a_session_s_expiry(Arc::new(store)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cluster_a_touch_extends_a_session_s_expiry() {
    let cluster = CLUSTER.get_or_init(RedisCluster::start).await;
    let urls = cluster.urls();
    let nodes: Vec<&str> = urls.iter().map(String::as_str).collect();
    let store = RedisStore::connect_cluster_with(&nodes, short_options())
        .await
        .expect("connects to the cluster");
    a_touch_extends_a_session_s_expiry(Arc::new(store)).await;
}

/// A touch moves a record's expiry to a retention from now; it never brings back a record
/// that is gone (forgotten, or never written).
async fn a_touch_extends_a_session_s_expiry(store: Arc<dyn Store>) {
    let sid = SessionId::parse(b"s-{1}").unwrap();
    store.put_session(&record("s-{1}")).await.unwrap();
    tokio::time::sleep(SHORT * 5 / 8).await;
    store.touch_session(&sid).await.unwrap();
    tokio::time::sleep(SHORT * 5 / 8).await;
    assert_eq!(
        store.session(&sid).await.unwrap(),
        Some(record("s-{1}")),
        "kept past the retention of its write"
    );
    tokio::time::sleep(SHORT * 5 / 8).await;
    assert_eq!(
        store.session(&sid).await.unwrap(),
        None,
        "a retention after"
    );
    store.touch_session(&sid).await.unwrap();
    assert_eq!(store.session(&sid).await.unwrap(), None, "not brought back");
    let other = SessionId::parse(b"s-2").unwrap();
    store.put_session(&record("s-2")).await.unwrap();
    store.forget_session(&other).await.unwrap();
    store.touch_session(&other).await.unwrap();
    assert_eq!(
        store.session(&other).await.unwrap(),
        None,
        "not brought back"
    );
}

/// A full in-memory store makes room by dropping the session record that expires first: a
/// touched one moved its expiry, so an older record of a session not in use goes instead.
#[tokio::test]
async fn memory_evicts_a_session_not_in_use_before_a_touched_one() {
    let store = MemoryStore::with_limits(2, Duration::from_secs(60));
    let (a, b) = (
        SessionId::parse(b"a").unwrap(),
        SessionId::parse(b"b").unwrap(),
    );
    store.put_session(&record("a")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    store.put_session(&record("b")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    store.touch_session(&a).await.unwrap();
    store.put_session(&record("c")).await.unwrap();
    assert!(store.session(&a).await.unwrap().is_some(), "in use: kept");
    assert_eq!(store.session(&b).await.unwrap(), None);
}

/// Stored answers count against a byte budget as keys do against their number: past it,
/// new claims are refused (retryably) rather than memory grown without bound; a key already
/// known still gets its answer.
#[tokio::test]
async fn memory_refuses_new_claims_once_its_answers_fill_its_byte_budget() {
    let store = MemoryStore::with_limits(1_000, Duration::from_secs(60)).with_answer_budget(4096);
    let big = outcome(&"x".repeat(1500));
    let mut refused = None;
    for i in 0..10 {
        let k = format!("k{i}");
        match store.claim(&claim(&k, 1, "a")).await {
            Ok(ClaimOutcome::Granted) => {}
            Ok(other) => panic!("{other:?}"),
            Err(e) => {
                refused = Some((i, e));
                break;
            }
        }
        assert!(store.finish(&key(&k), &token("a"), &big).await.unwrap());
    }
    let (i, e) = refused.expect("the budget refused a claim");
    assert_eq!(e.kind(), ErrorKind::StoreFull);
    assert_eq!(i, 3, "three answers of 1.5 KiB pass 4 KiB");
    // A known key still answers.
    assert_eq!(
        store.claim(&claim("k0", 1, "b")).await.unwrap(),
        ClaimOutcome::Done(big)
    );
}

// ---- Redis only ----

/// Every key the store writes expires, running, finished and lost ones alike.
#[tokio::test]
async fn redis_keys_all_expire() {
    let server = RedisServer::start().await.expect("redis-server");
    let mut o = RedisOptions::default();
    o.namespace = "ttl:".into();
    let store = RedisStore::connect_with(&server.url(), o).await.unwrap();
    store.put_session(&record("s1")).await.unwrap();
    store.claim(&claim("running", 1, "a")).await.unwrap();
    store.claim(&claim("done", 1, "a")).await.unwrap();
    store
        .finish(&key("done"), &token("a"), &outcome("x"))
        .await
        .unwrap();
    store.claim(&claim("lost", 1, "a")).await.unwrap();
    store.mark_lost(&key("lost"), &token("a")).await.unwrap();
    let client = redis::Client::open(server.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("ttl:*")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(keys.len(), 4, "{keys:?}");
    for k in keys {
        assert!(k.contains('{') && k.ends_with('}'), "hash-tagged: {k}");
        let ttl: i64 = redis::cmd("PTTL")
            .arg(&k)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!(ttl > 0, "{k} has no expiry");
    }
}

/// The server away: every operation fails at once with `StoreUnavailable` (the guard then
/// refuses keyed calls, retryably); back, the store works again with its data.
#[tokio::test]
async fn redis_unreachable_fails_fast_and_recovers() {
    let mut server = RedisServer::start().await.expect("redis-server");
    let store = RedisStore::connect_with(&server.url(), options())
        .await
        .unwrap();
    store.claim(&claim("k", 1, "a")).await.unwrap();
    store
        .finish(&key("k"), &token("a"), &outcome("kept"))
        .await
        .unwrap();
    server.kill();
    let started = std::time::Instant::now();
    let err = store.claim(&claim("k2", 1, "a")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::StoreUnavailable);
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    server.start_again().await.unwrap();
    let mut back = None;
    for _ in 0..50 {
        match store.claim(&claim("k", 1, "b")).await {
            Ok(o) => {
                back = Some(o);
                break;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
    assert_eq!(back, Some(ClaimOutcome::Done(outcome("kept"))));
}

/// The in-memory store is bounded: full of live keys, it refuses new claims (retryably)
/// rather than forget one.
#[tokio::test]
async fn memory_is_bounded_and_never_drops_a_live_key() {
    let store = MemoryStore::with_limits(2, Duration::from_secs(60));
    store.claim(&claim("a", 1, "x")).await.unwrap();
    store.claim(&claim("b", 1, "x")).await.unwrap();
    let err = store.claim(&claim("c", 1, "x")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::StoreFull);
    assert_eq!(
        store.claim(&claim("a", 1, "y")).await.unwrap(),
        ClaimOutcome::InUse
    );
    let short = MemoryStore::with_limits(1, Duration::from_millis(20));
    short.claim(&claim("a", 1, "x")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(40)).await;
    let err = short.claim(&claim("b", 1, "x")).await.unwrap_err();
    assert_eq!(
        err.kind(),
        ErrorKind::StoreFull,
        "a running key is live for its lease, past the retention"
    );
    short
        .finish(&key("a"), &token("x"), &outcome("done"))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(40)).await;
    assert_eq!(
        short.claim(&claim("b", 1, "x")).await.unwrap(),
        ClaimOutcome::Granted,
        "expired entries make room"
    );
}

/// A running key is kept past the store's retention while its lease may still run: shorter
/// retention than lease must not let a second claim of a live key be granted.
#[tokio::test]
async fn memory_keeps_a_running_key_for_its_lease_whatever_the_retention() {
    let store = MemoryStore::with_limits(4, Duration::from_millis(20));
    store.claim(&claim("a", 1, "x")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(40)).await;
    assert_eq!(
        store.claim(&claim("a", 1, "y")).await.unwrap(),
        ClaimOutcome::InUse,
        "past the retention, within the lease"
    );
}

/// A key whose holder stopped renewing is remembered as lost for `lost_retention` after its
/// lease, even when nobody claimed it in between to see it lapse: it never runs again.
#[tokio::test]
async fn redis_keeps_a_lapsed_running_key_for_the_lost_retention() {
    let server = redis_server().await;
    let mut o = options();
    o.retention = Duration::from_millis(200);
    o.lost_retention = Duration::from_secs(30);
    let store = RedisStore::connect_with(&server.url(), o).await.unwrap();
    store.claim(&claim("k", 1, "a")).await.unwrap();
    assert!(store.renew(&key("k"), &token("a"), LEASE).await.unwrap());
    // The holder dies: past its lease and the retention, nobody having claimed the key.
    tokio::time::sleep(LEASE + Duration::from_millis(300)).await;
    assert_eq!(
        store.claim(&claim("k", 1, "b")).await.unwrap(),
        ClaimOutcome::Lost
    );
}

/// `store::open`, the stores named by text (the bindings' `store` option): `memory`, a Redis
/// URL (a live store: a claim goes through it), anything else refused as configuration.
#[tokio::test]
async fn a_store_is_opened_from_its_name() {
    use mcp_resume_server::store::open;
    let server = redis_server().await;
    for spec in ["memory", "", &server.url()] {
        let store = open(spec).await.expect("opens");
        let key = IdempotencyKey::new(format!("open-{}", uuid::Uuid::new_v4().simple())).unwrap();
        let claim = Claim::new(
            key,
            arguments_digest("t", &json!({})),
            ClaimToken::from_stored("holder"),
            LEASE,
        );
        assert_eq!(
            store.claim(&claim).await.unwrap(),
            ClaimOutcome::Granted,
            "{spec}"
        );
    }
    for spec in ["mysql://x", "redis:/nope"] {
        let err = open(spec).await.err().expect("refused");
        assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{spec}");
    }
}

// ---- A stored answer this crate cannot read ----

/// A finished key whose stored answer cannot be read (written by another version, or
/// damaged) ran, and its answer is gone: an unknown outcome (the key never runs again), not a
/// store outage a client would retry to its deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_an_unreadable_stored_answer_is_an_unknown_outcome() {
    let server = redis_server().await;
    let (store, namespace) = store_with(server, options()).await;
    store.claim(&claim("k", 1, "a")).await.unwrap();
    assert!(store
        .finish(&key("k"), &token("a"), &outcome("once"))
        .await
        .unwrap());
    let mut conn = raw(server).await;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{namespace}*"))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(keys.len(), 1, "{keys:?}");
    // Text that is no answer, and bytes that are no text (an answer kept compressed).
    for stored in [&b"not an answer"[..], &b"\x1f\x8b\x08\xff"[..]] {
        let _: () = redis::cmd("HSET")
            .arg(&keys[0])
            .arg("outcome")
            .arg(stored)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(
            store.claim(&claim("k", 1, "b")).await.unwrap(),
            ClaimOutcome::Lost,
            "{stored:?}"
        );
    }
}

/// A session record this crate cannot read (another version's, or damaged), or one kept under
/// another session's name, is read as no record: the guard then answers the session's keyed
/// calls and resumes as a session it does not know, and the client starts a new one. Read as
/// a store outage, a keyed call was refused as retryable to its deadline, again and again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_an_unreadable_session_record_is_read_as_absent() {
    let server = redis_server().await;
    let (store, namespace) = store_with(server, options()).await;
    let mut conn = raw(server).await;
    let other = serde_json::to_string(&record("s-other")).unwrap();
    // Text that is no record, another session's record, and bytes that are no text.
    for stored in [
        &b"not a record"[..],
        other.as_bytes(),
        &b"\x1f\x8b\x08\xff"[..],
    ] {
        store.put_session(&record("s-1")).await.unwrap();
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{namespace}*"))
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(keys.len(), 1, "{keys:?}");
        let _: () = redis::cmd("SET")
            .arg(&keys[0])
            .arg(stored)
            .query_async(&mut conn)
            .await
            .unwrap();
        let read = store.session(&SessionId::parse(b"s-1").unwrap()).await;
        assert!(matches!(read, Ok(None)), "{stored:?}: {read:?}");
    }
}

/// A store on `server` with `opts`, and its namespace.
async fn store_with(server: &RedisServer, opts: RedisOptions) -> (RedisStore, String) {
    let namespace = opts.namespace.clone();
    let store = RedisStore::connect_with(&server.url(), opts)
        .await
        .expect("connects");
    (store, namespace)
}

/// A connection of the test's own to `server`, to read and damage what a store wrote.
async fn raw(server: &RedisServer) -> redis::aio::MultiplexedConnection {
    redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// The one key a test's namespace holds, and a connection to change it by hand.
async fn only_key(
    server: &RedisServer,
    namespace: &str,
) -> (String, redis::aio::MultiplexedConnection) {
    let mut conn = raw(server).await;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{namespace}*"))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(keys.len(), 1, "{keys:?}");
    (keys[0].clone(), conn)
}

/// A key's state this crate cannot read (a running key's lease end damaged, or a value of
/// another type under the key's name, another version's) is an unknown outcome: the key
/// never runs again, and its calls are told so, instead of a store outage that refused them
/// as retryable, again and again, for as long as the key is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_an_unreadable_key_is_an_unknown_outcome() {
    let server = redis_server().await;
    let (store, namespace) = store_with(server, options()).await;
    store.claim(&claim("k", 1, "a")).await.unwrap();
    let (name, mut conn) = only_key(server, &namespace).await;
    let _: () = redis::cmd("HSET")
        .arg(&name)
        .arg("until")
        .arg("soon")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        store.claim(&claim("k", 1, "b")).await.unwrap(),
        ClaimOutcome::Lost,
        "a damaged lease"
    );
    let _: () = redis::cmd("SET")
        .arg(&name)
        .arg("another version's key")
        .arg("PX")
        .arg(60_000)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        store.claim(&claim("k", 1, "b")).await.unwrap(),
        ClaimOutcome::Lost,
        "a value of another type"
    );
}

/// A session's record kept as another type than this crate writes (another version's) is
/// read as absent, as a record it cannot parse is, not as a store outage.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_a_session_record_of_another_type_is_read_as_absent() {
    let server = redis_server().await;
    let (store, namespace) = store_with(server, options()).await;
    store.put_session(&record("s-1")).await.unwrap();
    let (name, mut conn) = only_key(server, &namespace).await;
    let _: () = redis::cmd("DEL")
        .arg(&name)
        .query_async(&mut conn)
        .await
        .unwrap();
    let _: () = redis::cmd("HSET")
        .arg(&name)
        .arg("session")
        .arg("s-1")
        .query_async(&mut conn)
        .await
        .unwrap();
    let read = store.session(&SessionId::parse(b"s-1").unwrap()).await;
    assert!(matches!(read, Ok(None)), "{read:?}");
}

/// A memory store told to keep its entries for as long as a `Duration` goes (for ever, in
/// effect) works as one with a long retention, instead of overflowing the clock in every
/// step that dates an entry.
#[tokio::test]
async fn memory_keeps_entries_for_ever_when_told_to() {
    let store = MemoryStore::with_limits(4, Duration::MAX);
    store.put_session(&record("s-1")).await.unwrap();
    store
        .touch_session(&SessionId::parse(b"s-1").unwrap())
        .await
        .unwrap();
    assert!(store
        .session(&SessionId::parse(b"s-1").unwrap())
        .await
        .unwrap()
        .is_some());
    assert_eq!(
        store.claim(&claim("k", 1, "a")).await.unwrap(),
        ClaimOutcome::Granted
    );
    assert!(store.renew(&key("k"), &token("a"), LEASE).await.unwrap());
    assert!(store
        .finish(&key("k"), &token("a"), &outcome("kept"))
        .await
        .unwrap());
    assert_eq!(
        store.claim(&claim("k", 1, "b")).await.unwrap(),
        ClaimOutcome::Done(outcome("kept"))
    );
}

/// A Redis store told to keep what it writes for as long as a `Duration` goes (for ever, in
/// effect) works as one with a long retention, every key still given an expiry, instead of
/// every write refused by Redis as an expiry out of its range (every keyed call refused as
/// retryable, no session's record kept).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_keeps_entries_for_ever_when_told_to() {
    let server = redis_server().await;
    let mut opts = options();
    opts.retention = Duration::MAX;
    opts.lost_retention = Duration::MAX;
    let (store, namespace) = store_with(server, opts).await;
    let sid = SessionId::parse(b"s-1").unwrap();
    store.put_session(&record("s-1")).await.unwrap();
    store.touch_session(&sid).await.unwrap();
    assert!(store.session(&sid).await.unwrap().is_some());
    assert_eq!(
        store.claim(&claim("k", 1, "a")).await.unwrap(),
        ClaimOutcome::Granted
    );
    assert!(store.renew(&key("k"), &token("a"), LEASE).await.unwrap());
    assert!(store
        .finish(&key("k"), &token("a"), &outcome("kept"))
        .await
        .unwrap());
    assert_eq!(
        store.claim(&claim("k", 1, "b")).await.unwrap(),
        ClaimOutcome::Done(outcome("kept"))
    );
    store.claim(&claim("lost", 1, "a")).await.unwrap();
    store.mark_lost(&key("lost"), &token("a")).await.unwrap();
    let mut conn = raw(server).await;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{namespace}*"))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(keys.len(), 3, "{keys:?}");
    for k in keys {
        let ttl: i64 = redis::cmd("PTTL")
            .arg(&k)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!(ttl > 0, "{k} has no expiry");
    }
}
