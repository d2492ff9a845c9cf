//! The store's test suite, run against both implementations: the same test bodies for the
//! in-memory store and for Redis (a `redis-server` of its own per test, on a free port; the
//! Redis tests fail, saying how to install it, when it is missing).

use std::sync::Arc;
use std::time::{Duration, Instant};

use mock_server::procs::RedisServer;
use mock_server::store::{
    EventKind, IdempotencyBegin, PreparedRecord, RequestRecord, RequestState, SessionRecord,
    StoredEvent, StoredOutcome, StreamKind, StreamRecord, TaskRecord, TaskStatus,
};
use mock_server::{MemoryStore, RedisOptions, RedisStore, Store};
use serde_json::json;

/// A store under test, and what keeps it alive.
struct Subject {
    store: Arc<dyn Store>,
    _server: Option<RedisServer>,
}

async fn memory() -> Subject {
    Subject {
        store: Arc::new(MemoryStore::new()),
        _server: None,
    }
}

async fn redis_with(opts: RedisOptions) -> (Subject, RedisStore) {
    let server = RedisServer::start()
        .await
        .unwrap_or_else(|e| panic!("the Redis store tests need redis-server: {e}"));
    let store = RedisStore::connect_with(&server.url(), opts)
        .await
        .expect("connects to its own redis-server");
    (
        Subject {
            store: Arc::new(store.clone()),
            _server: Some(server),
        },
        store,
    )
}

async fn redis() -> Subject {
    redis_with(RedisOptions::default()).await.0
}

/// Each suite test, once per store; those after `waiting:` also get the store's [`Blocked`].
macro_rules! suite {
    ($($name:ident),* $(,)?; waiting: $($waits:ident),* $(,)?) => {
        mod memory_store {
            $(
                #[tokio::test]
                async fn $name() {
                    super::$name(super::memory().await.store).await;
                }
            )*
            $(
                #[tokio::test]
                async fn $waits() {
                    super::$waits(super::memory().await.store, super::Blocked::Memory).await;
                }
            )*
        }
        mod redis_store {
            $(
                #[tokio::test]
                async fn $name() {
                    let subject = super::redis().await;
                    super::$name(subject.store.clone()).await;
                }
            )*
            $(
                #[tokio::test]
                async fn $waits() {
                    let subject = super::redis().await;
                    let url = subject._server.as_ref().expect("its redis-server").url();
                    super::$waits(subject.store.clone(), super::Blocked::Redis(url)).await;
                }
            )*
        }
    };
}

/// How a test tells that a reader has gone to sleep in `wait_events`, so that what it does
/// next can only reach the reader by waking it.
enum Blocked {
    /// The in-memory store reads without awaiting anything and registers for wake-ups
    /// before it reads: a `wait_events` future that has returned `Pending` is waiting.
    Memory,
    /// Redis, at this URL: counts the clients blocked in a command (`XREAD BLOCK`).
    Redis(String),
}

impl Blocked {
    /// Starts `reader`, a `wait_events` on `store`, and returns once it is blocked in the
    /// store, waiting for an append.
    async fn start<T: Send + 'static>(
        &self,
        reader: impl std::future::Future<Output = T> + Send + 'static,
    ) -> tokio::task::JoinHandle<T> {
        let mut reader = Box::pin(reader);
        assert!(
            futures::poll!(reader.as_mut()).is_pending(),
            "the reader returned before anything was appended"
        );
        let handle = tokio::spawn(reader);
        if let Blocked::Redis(url) = self {
            let client = redis::Client::open(url.as_str()).unwrap();
            let mut c = client.get_multiplexed_async_connection().await.unwrap();
            let blocked = async {
                loop {
                    let info: String = redis::cmd("INFO")
                        .arg("clients")
                        .query_async(&mut c)
                        .await
                        .unwrap();
                    let count = info
                        .lines()
                        .find_map(|l| l.strip_prefix("blocked_clients:"))
                        .and_then(|n| n.trim().parse::<u64>().ok())
                        .expect("INFO clients reports blocked_clients");
                    if count > 0 {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            };
            tokio::time::timeout(Duration::from_secs(10), blocked)
                .await
                .expect("the reader blocked in XREAD");
        }
        handle
    }
}

suite!(
    sessions_round_trip_and_are_removed,
    streams_keep_their_record_and_finish,
    events_after_returns_events_in_order,
    wait_events_times_out_empty_and_returns_at_once_for_unknown_streams,
    a_stream_sees_only_its_own_events_among_its_sessions_streams,
    requests_round_trip_and_a_released_instance_loses_its_running_ones,
    prepared_records_round_trip,
    tasks_round_trip_and_a_released_instance_loses_its_working_ones,
    idempotency_semantics,
    idempotency_abandon_frees_a_running_key_only,
    idempotency_lose_makes_a_running_key_lost_for_good,
    counters_count,
    journal_keeps_entries_in_order;
    waiting: wait_events_wakes_on_append_and_finish,
);

fn stream(id: &str) -> StreamRecord {
    StreamRecord {
        id: id.into(),
        session: "s".into(),
        owner: 0,
        kind: StreamKind::Post,
        capability_hash: "h".into(),
        protocol_version: "2025-11-25".into(),
        request_ids: vec![json!(1)],
        finished: false,
        head: 0,
    }
}

fn ev(stream: &str, seq: u64) -> StoredEvent {
    StoredEvent {
        seq,
        id: format!("{stream}-{seq}"),
        data: if seq == 1 {
            String::new()
        } else {
            format!("{{\"n\":{seq}}}")
        },
        kind: match seq {
            1 => EventKind::Priming,
            3 => EventKind::Response {
                request_id: json!(1),
            },
            _ => EventKind::Notification,
        },
    }
}

fn session(id: &str) -> SessionRecord {
    SessionRecord {
        id: id.into(),
        protocol_version: "2025-11-25".into(),
        client_capabilities: json!({"experimental": {"sampling": {"temperature": 0.2}}}),
        server_capabilities: json!({"tools": {}}),
        capability_hash: "sha256:ab".into(),
        created_by: 1,
        default_context: false,
    }
}

async fn sessions_round_trip_and_are_removed(store: Arc<dyn Store>) {
    assert_eq!(store.get_session("a").await.unwrap(), None);
    store.put_session(session("a")).await.unwrap();
    assert_eq!(store.get_session("a").await.unwrap(), Some(session("a")));
    let mut changed = session("a");
    changed.capability_hash = "sha256:cd".into();
    store.put_session(changed.clone()).await.unwrap();
    assert_eq!(store.get_session("a").await.unwrap(), Some(changed));
    assert!(store.remove_session("a").await.unwrap());
    assert!(!store.remove_session("a").await.unwrap());
    assert_eq!(store.get_session("a").await.unwrap(), None);
}

async fn streams_keep_their_record_and_finish(store: Arc<dyn Store>) {
    assert_eq!(store.get_stream("a").await.unwrap(), None);
    store.create_stream(stream("a")).await.unwrap();
    assert_eq!(store.get_stream("a").await.unwrap(), Some(stream("a")));
    store.append_event("a", ev("a", 1)).await.unwrap();
    store.finish_stream("a", 1).await.unwrap();
    let got = store.get_stream("a").await.unwrap().unwrap();
    assert!(got.finished);
    assert_eq!(got.head, 1);
    // Finishing twice (a cancel racing the call's end) is harmless.
    store.finish_stream("a", 1).await.unwrap();
    // Finishing a stream nobody created does nothing.
    store.finish_stream("nope", 4).await.unwrap();
    assert_eq!(store.get_stream("nope").await.unwrap(), None);
}

async fn events_after_returns_events_in_order(store: Arc<dyn Store>) {
    store.create_stream(stream("a")).await.unwrap();
    store.create_stream(stream("b")).await.unwrap();
    for seq in 1..=4 {
        store.append_event("a", ev("a", seq)).await.unwrap();
    }
    store.append_event("b", ev("b", 1)).await.unwrap();
    let all = store.events_after("a", 0).await.unwrap();
    assert_eq!(all, (1..=4).map(|n| ev("a", n)).collect::<Vec<_>>());
    assert_eq!(
        store.events_after("a", 2).await.unwrap(),
        vec![ev("a", 3), ev("a", 4)]
    );
    assert!(store.events_after("a", 4).await.unwrap().is_empty());
    assert!(store.events_after("unknown", 0).await.unwrap().is_empty());
    // A gap in the log (an event lost on its way to the store) stays a gap.
    store.create_stream(stream("c")).await.unwrap();
    store.append_event("c", ev("c", 1)).await.unwrap();
    store.append_event("c", ev("c", 3)).await.unwrap();
    let seqs: Vec<u64> = store
        .events_after("c", 0)
        .await
        .unwrap()
        .iter()
        .map(|e| e.seq)
        .collect();
    assert_eq!(seqs, vec![1, 3]);
    // Finished: the log reads the same.
    store.finish_stream("a", 4).await.unwrap();
    assert_eq!(store.events_after("a", 3).await.unwrap(), vec![ev("a", 4)]);
}

/// A reader blocked in `wait_events` (see [`Blocked`]: the append and the finish come after it
/// read and found nothing) wakes when an event is appended, and when the stream finishes.
async fn wait_events_wakes_on_append_and_finish(store: Arc<dyn Store>, blocked: Blocked) {
    store.create_stream(stream("a")).await.unwrap();
    let s2 = store.clone();
    let waiter = blocked
        .start(async move {
            s2.wait_events("a", 0, Duration::from_secs(10))
                .await
                .unwrap()
        })
        .await;
    store.append_event("a", ev("a", 1)).await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got, vec![ev("a", 1)]);
    // A reader waiting past the last event wakes when the stream finishes.
    let s2 = store.clone();
    let waiter = blocked
        .start(async move {
            s2.wait_events("a", 1, Duration::from_secs(10))
                .await
                .unwrap()
        })
        .await;
    store.finish_stream("a", 1).await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .unwrap()
        .unwrap();
    assert!(got.is_empty());
    // Once finished, it answers at once.
    let got = store
        .wait_events("a", 1, Duration::from_secs(10))
        .await
        .unwrap();
    assert!(got.is_empty());
}

async fn wait_events_times_out_empty_and_returns_at_once_for_unknown_streams(
    store: Arc<dyn Store>,
) {
    store.create_stream(stream("a")).await.unwrap();
    let started = Instant::now();
    let got = store
        .wait_events("a", 0, Duration::from_millis(100))
        .await
        .unwrap();
    assert!(got.is_empty());
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(90) && waited < Duration::from_secs(3),
        "{waited:?}"
    );
    let started = Instant::now();
    assert!(store
        .wait_events("unknown", 0, Duration::from_secs(10))
        .await
        .unwrap()
        .is_empty());
    assert!(started.elapsed() < Duration::from_secs(3));
}

async fn a_stream_sees_only_its_own_events_among_its_sessions_streams(store: Arc<dyn Store>) {
    // Two streams of session "s" (a call's and the standalone one) and one of session "t".
    store.create_stream(stream("a")).await.unwrap();
    store
        .create_stream(StreamRecord {
            kind: StreamKind::Standalone,
            request_ids: vec![],
            ..stream("b")
        })
        .await
        .unwrap();
    store
        .create_stream(StreamRecord {
            session: "t".into(),
            ..stream("c")
        })
        .await
        .unwrap();
    // A reader of "a" waits while the other streams get events.
    let s2 = store.clone();
    let waiter = tokio::spawn(async move {
        s2.wait_events("a", 1, Duration::from_secs(10))
            .await
            .unwrap()
    });
    store.append_event("a", ev("a", 1)).await.unwrap();
    for seq in 1..=3 {
        store.append_event("b", ev("b", seq)).await.unwrap();
        store.append_event("c", ev("c", seq)).await.unwrap();
    }
    store.finish_stream("c", 3).await.unwrap();
    assert!(!waiter.is_finished());
    store.append_event("a", ev("a", 2)).await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got, vec![ev("a", 2)]);
    assert_eq!(
        store.events_after("b", 1).await.unwrap(),
        vec![ev("b", 2), ev("b", 3)]
    );
    assert_eq!(store.events_after("c", 0).await.unwrap().len(), 3);
    // Events of a stream nobody created are not kept.
    store.append_event("ghost", ev("ghost", 1)).await.unwrap();
    assert!(store.events_after("ghost", 0).await.unwrap().is_empty());
    assert_eq!(store.get_stream("ghost").await.unwrap(), None);
}

fn request(
    session: &str,
    id: serde_json::Value,
    instance: usize,
    state: RequestState,
) -> RequestRecord {
    RequestRecord {
        session: session.into(),
        stream: Some("a".into()),
        request_id: id,
        instance,
        state,
    }
}

async fn requests_round_trip_and_a_released_instance_loses_its_running_ones(store: Arc<dyn Store>) {
    let r1 = request("s", json!(1), 0, RequestState::Running);
    let r2 = request("s", json!("two"), 1, RequestState::Running);
    let r3 = request("s", json!(3), 0, RequestState::Done);
    for r in [&r1, &r2, &r3] {
        store.put_request(r.clone()).await.unwrap();
    }
    assert_eq!(
        store.get_request("s", &json!(1)).await.unwrap(),
        Some(r1.clone())
    );
    // Ids are JSON values: 1 and "1" are different requests.
    assert_eq!(store.get_request("s", &json!("1")).await.unwrap(), None);
    assert_eq!(store.get_request("t", &json!(1)).await.unwrap(), None);
    store.release_instance(0).await.unwrap();
    assert_eq!(
        store
            .get_request("s", &json!(1))
            .await
            .unwrap()
            .unwrap()
            .state,
        RequestState::Lost
    );
    assert_eq!(
        store.get_request("s", &json!("two")).await.unwrap(),
        Some(r2)
    );
    assert_eq!(store.get_request("s", &json!(3)).await.unwrap(), Some(r3));
    // A response written late still wins.
    let done = request("s", json!(1), 0, RequestState::Done);
    store.put_request(done.clone()).await.unwrap();
    assert_eq!(store.get_request("s", &json!(1)).await.unwrap(), Some(done));
    // Released again: only what is running is lost.
    store.release_instance(0).await.unwrap();
    assert_eq!(
        store
            .get_request("s", &json!(1))
            .await
            .unwrap()
            .unwrap()
            .state,
        RequestState::Done
    );
}

async fn prepared_records_round_trip(store: Arc<dyn Store>) {
    let rec = PreparedRecord {
        id: "rec-1".into(),
        session: "s".into(),
        item: json!({"order": 7}),
        instance: 2,
    };
    assert_eq!(store.get_prepared("rec-1").await.unwrap(), None);
    store.put_prepared(rec.clone()).await.unwrap();
    assert_eq!(store.get_prepared("rec-1").await.unwrap(), Some(rec));
}

async fn tasks_round_trip_and_a_released_instance_loses_its_working_ones(store: Arc<dyn Store>) {
    let task = |id: &str, instance, status| TaskRecord {
        id: id.into(),
        instance,
        status,
        result: None,
        error: None,
    };
    assert_eq!(store.get_task("t-1").await.unwrap(), None);
    store
        .put_task(task("t-1", 0, TaskStatus::Working))
        .await
        .unwrap();
    store
        .put_task(task("t-2", 1, TaskStatus::Working))
        .await
        .unwrap();
    let done = TaskRecord {
        result: Some(json!({"content": []})),
        ..task("t-3", 0, TaskStatus::Completed)
    };
    store.put_task(done.clone()).await.unwrap();
    assert_eq!(
        store.get_task("t-1").await.unwrap(),
        Some(task("t-1", 0, TaskStatus::Working))
    );
    store.release_instance(0).await.unwrap();
    let status = |t: Option<TaskRecord>| t.map(|t| t.status);
    assert_eq!(
        status(store.get_task("t-1").await.unwrap()),
        Some(TaskStatus::Lost)
    );
    assert_eq!(
        status(store.get_task("t-2").await.unwrap()),
        Some(TaskStatus::Working),
        "another instance's task"
    );
    assert_eq!(store.get_task("t-3").await.unwrap(), Some(done));
}

async fn idempotency_semantics(store: Arc<dyn Store>) {
    assert_eq!(
        store.idempotency_begin("k", "f", 0, "c").await.unwrap(),
        IdempotencyBegin::Started
    );
    assert_eq!(
        store.idempotency_begin("k", "f", 1, "c").await.unwrap(),
        IdempotencyBegin::Running
    );
    assert_eq!(
        store.idempotency_begin("k", "g", 1, "c").await.unwrap(),
        IdempotencyBegin::Mismatch
    );
    let outcome = StoredOutcome {
        response: json!({"result": {}}),
        capability_hash: "h".into(),
    };
    store
        .idempotency_finish("k", outcome.clone())
        .await
        .unwrap();
    assert_eq!(
        store.idempotency_begin("k", "f", 2, "c").await.unwrap(),
        IdempotencyBegin::Done(outcome.clone())
    );
    assert_eq!(
        store.idempotency_begin("j", "f", 3, "c").await.unwrap(),
        IdempotencyBegin::Started
    );
    // The instance holding "j" dies: its effect may have been applied, so the key must
    // never run again, though an outcome stored late still wins.
    store.release_instance(3).await.unwrap();
    assert_eq!(
        store.idempotency_begin("j", "f", 0, "c").await.unwrap(),
        IdempotencyBegin::Lost
    );
    assert_eq!(
        store.idempotency_begin("j", "g", 0, "c").await.unwrap(),
        IdempotencyBegin::Mismatch
    );
    store.idempotency_abandon("j", "c").await.unwrap();
    assert_eq!(
        store.idempotency_begin("j", "f", 0, "c").await.unwrap(),
        IdempotencyBegin::Lost
    );
    store
        .idempotency_finish("j", outcome.clone())
        .await
        .unwrap();
    assert_eq!(
        store.idempotency_begin("j", "f", 0, "c").await.unwrap(),
        IdempotencyBegin::Done(outcome)
    );
}

async fn idempotency_abandon_frees_a_running_key_only(store: Arc<dyn Store>) {
    assert_eq!(
        store.idempotency_begin("k", "f", 0, "c").await.unwrap(),
        IdempotencyBegin::Started
    );
    // Another claim's release (one whose reply was lost, the key found in use) leaves it.
    store.idempotency_abandon("k", "other").await.unwrap();
    assert_eq!(
        store.idempotency_begin("k", "f", 1, "other").await.unwrap(),
        IdempotencyBegin::Running
    );
    store.idempotency_abandon("k", "c").await.unwrap();
    assert_eq!(
        store.idempotency_begin("k", "g", 1, "c").await.unwrap(),
        IdempotencyBegin::Started
    );
    let outcome = StoredOutcome {
        response: json!({"error": {"code": -1, "message": "no"}}),
        capability_hash: "h".into(),
    };
    store
        .idempotency_finish("k", outcome.clone())
        .await
        .unwrap();
    store.idempotency_abandon("k", "c").await.unwrap();
    assert_eq!(
        store.idempotency_begin("k", "g", 1, "c").await.unwrap(),
        IdempotencyBegin::Done(outcome)
    );
    // Finishing a key nobody claimed stores nothing.
    store
        .idempotency_finish(
            "never",
            StoredOutcome {
                response: json!({"result": {}}),
                capability_hash: "h".into(),
            },
        )
        .await
        .unwrap();
    assert_eq!(
        store.idempotency_begin("never", "f", 0, "c").await.unwrap(),
        IdempotencyBegin::Started
    );
}

async fn idempotency_lose_makes_a_running_key_lost_for_good(store: Arc<dyn Store>) {
    assert_eq!(
        store.idempotency_begin("k", "f", 0, "c").await.unwrap(),
        IdempotencyBegin::Started
    );
    store.idempotency_lose("k").await.unwrap();
    for _ in 0..2 {
        assert_eq!(
            store.idempotency_begin("k", "f", 1, "c").await.unwrap(),
            IdempotencyBegin::Lost
        );
    }
    assert_eq!(
        store.idempotency_begin("k", "g", 1, "c").await.unwrap(),
        IdempotencyBegin::Mismatch
    );
    // Neither a release nor its instance's death frees it.
    store.idempotency_abandon("k", "c").await.unwrap();
    store.release_instance(0).await.unwrap();
    assert_eq!(
        store.idempotency_begin("k", "f", 1, "c").await.unwrap(),
        IdempotencyBegin::Lost
    );
    // Only a running key is lost: a finished one keeps its outcome, an unknown one stays free.
    let outcome = StoredOutcome {
        response: json!({"result": {}}),
        capability_hash: "h".into(),
    };
    store.idempotency_begin("d", "f", 0, "c").await.unwrap();
    store
        .idempotency_finish("d", outcome.clone())
        .await
        .unwrap();
    store.idempotency_lose("d").await.unwrap();
    assert_eq!(
        store.idempotency_begin("d", "f", 0, "c").await.unwrap(),
        IdempotencyBegin::Done(outcome)
    );
    store.idempotency_lose("never").await.unwrap();
    assert_eq!(
        store.idempotency_begin("never", "f", 0, "c").await.unwrap(),
        IdempotencyBegin::Started
    );
}

/// The in-memory store's key table is bounded, but a key whose call may have run is never
/// the one forgotten to make room: a lost key stays lost after 100,000 newer keys, and a new
/// key is refused (a store failure, so the call is not run) when no finished key can go.
#[tokio::test]
async fn memory_store_keeps_a_lost_key_when_newer_keys_fill_it() {
    let store = memory().await.store;
    assert_eq!(
        store.idempotency_begin("k", "f", 0, "c").await.unwrap(),
        IdempotencyBegin::Started
    );
    store.release_instance(0).await.unwrap();
    let mut refused = 0;
    for i in 0..100_000 {
        match store
            .idempotency_begin(&format!("other-{i}"), "f", 1, "c")
            .await
        {
            Ok(begin) => assert_eq!(begin, IdempotencyBegin::Started),
            Err(_) => refused += 1,
        }
    }
    assert_eq!(
        store.idempotency_begin("k", "f", 1, "c").await.unwrap(),
        IdempotencyBegin::Lost
    );
    assert_eq!(refused, 1, "the key beyond the cap is refused");
    // A finished key makes room: it goes, and the refused key now starts.
    let outcome = StoredOutcome {
        response: json!({"result": {}}),
        capability_hash: "h".into(),
    };
    store.idempotency_finish("other-5", outcome).await.unwrap();
    assert_eq!(
        store
            .idempotency_begin("other-99999", "f", 1, "c")
            .await
            .unwrap(),
        IdempotencyBegin::Started
    );
    assert!(store
        .idempotency_begin("other-100000", "f", 1, "c")
        .await
        .is_err());
    assert_eq!(
        store.idempotency_begin("k", "f", 1, "c").await.unwrap(),
        IdempotencyBegin::Lost
    );
}

async fn counters_count(store: Arc<dyn Store>) {
    assert_eq!(store.increment_counter("c").await.unwrap(), 1);
    assert_eq!(store.increment_counter("c").await.unwrap(), 2);
    assert_eq!(store.increment_counter("d").await.unwrap(), 1);
}

async fn journal_keeps_entries_in_order(store: Arc<dyn Store>) {
    assert!(store.journal_entries().await.unwrap().is_empty());
    for n in 0..5 {
        store.journal_append(&json!({"n": n})).await.unwrap();
    }
    let got = store.journal_entries().await.unwrap();
    assert_eq!(got, (0..5).map(|n| json!({"n": n})).collect::<Vec<_>>());
}

// Redis only: what a networked store adds.

#[tokio::test]
async fn redis_claims_of_a_dead_process_read_as_lost_once_its_lease_expires() {
    let opts = RedisOptions {
        lease: Duration::from_millis(300),
        ..RedisOptions::default()
    };
    let (subject, _) = redis_with(opts.clone()).await;
    let url = format!(
        "redis://127.0.0.1:{}",
        subject._server.as_ref().unwrap().port()
    );
    let survivor = subject.store.clone();
    {
        // Another process: it claims a key and a running request, then dies silently.
        let doomed = RedisStore::connect_with(&url, opts).await.unwrap();
        assert_eq!(
            doomed.idempotency_begin("k", "f", 1, "c").await.unwrap(),
            IdempotencyBegin::Started
        );
        doomed
            .put_request(request("s", json!(9), 1, RequestState::Running))
            .await
            .unwrap();
        // Still alive: the key is in use, the request running.
        assert_eq!(
            survivor.idempotency_begin("k", "f", 0, "c").await.unwrap(),
            IdempotencyBegin::Running
        );
    }
    // Dropped: its lease is no longer renewed. Poll until it lapses.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let state = survivor
            .get_request("s", &json!(9))
            .await
            .unwrap()
            .unwrap()
            .state;
        if state == RequestState::Lost {
            break;
        }
        assert!(Instant::now() < deadline, "the lease never lapsed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        survivor.idempotency_begin("k", "f", 0, "c").await.unwrap(),
        IdempotencyBegin::Lost
    );
    // For good: a key found lost stays lost.
    assert_eq!(
        survivor.idempotency_begin("k", "f", 0, "c").await.unwrap(),
        IdempotencyBegin::Lost
    );
}

/// A running key written before keys named their claim (no `claim` field) can still be let
/// go: before the fix no release ever matched it, and it stayed running for good.
#[tokio::test]
async fn redis_abandons_a_running_key_written_without_its_claim() {
    let (subject, _) = redis_with(RedisOptions::default()).await;
    let store = subject.store.clone();
    assert_eq!(
        store.idempotency_begin("k", "f", 0, "c").await.unwrap(),
        IdempotencyBegin::Started
    );
    let url = subject._server.as_ref().expect("its redis-server").url();
    let mut raw = redis::Client::open(url.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let removed: u64 = redis::cmd("HDEL")
        .arg(format!("{}idem:k", RedisOptions::default().namespace))
        .arg("claim")
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(removed, 1, "the key had its claim");
    store.idempotency_abandon("k", "c").await.unwrap();
    assert_eq!(
        store.idempotency_begin("k", "f", 1, "d").await.unwrap(),
        IdempotencyBegin::Started
    );
}

/// A trimmed Redis journal reads back first how many entries it dropped, so a report
/// replayed from it is not taken for complete.
#[tokio::test]
async fn redis_journal_says_how_many_entries_it_trimmed() {
    let (subject, _) = redis_with(RedisOptions {
        max_journal: 10,
        ..RedisOptions::default()
    })
    .await;
    let store = subject.store.clone();
    for n in 0..500 {
        store.journal_append(&json!({"n": n})).await.unwrap();
    }
    let got = store.journal_entries().await.unwrap();
    let kept = got.len() as u64 - 1;
    assert!(kept < 500, "MAXLEN ~ trimmed nothing");
    assert_eq!(
        got[0],
        mock_server::OracleReport::journal_trimmed_entry(500 - kept)
    );
    assert_eq!(got[1], json!({"n": 500 - kept}));
    let report = mock_server::OracleReport::from_journal(
        &[got[0].clone()],
        mock_server::DEFAULT_ORACLE_RECORD_LIMIT,
    )
    .unwrap();
    assert!(!report.executions_complete());
}

#[tokio::test]
async fn redis_namespaces_do_not_see_each_other_and_clear_empties_one() {
    let (subject, a) = redis_with(RedisOptions {
        namespace: "a:".into(),
        ..RedisOptions::default()
    })
    .await;
    let url = format!(
        "redis://127.0.0.1:{}",
        subject._server.as_ref().unwrap().port()
    );
    let b = RedisStore::connect_with(
        &url,
        RedisOptions {
            namespace: "b:".into(),
            ..RedisOptions::default()
        },
    )
    .await
    .unwrap();
    a.put_session(session("x")).await.unwrap();
    assert_eq!(b.get_session("x").await.unwrap(), None);
    assert_eq!(a.increment_counter("c").await.unwrap(), 1);
    assert_eq!(b.increment_counter("c").await.unwrap(), 1);
    a.clear().await.unwrap();
    assert_eq!(a.get_session("x").await.unwrap(), None);
    assert_eq!(b.increment_counter("c").await.unwrap(), 2);
}

#[tokio::test]
async fn redis_fails_loudly_while_the_server_is_down_and_recovers_with_its_data() {
    let (mut subject, store) = redis_with(RedisOptions::default()).await;
    store.put_session(session("a")).await.unwrap();
    store.create_stream(stream("a")).await.unwrap();
    store.append_event("a", ev("a", 1)).await.unwrap();
    let server = subject._server.as_mut().unwrap();
    server.kill();
    // Every operation is an error, at once: nothing hangs, nothing answers "not found".
    let started = Instant::now();
    assert!(store.get_session("a").await.is_err());
    assert!(store.events_after("a", 0).await.is_err());
    assert!(store.idempotency_begin("k", "f", 0, "c").await.is_err());
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    server.start_again().await.unwrap();
    // The connection comes back; what was acknowledged before the crash is still there.
    let deadline = Instant::now() + Duration::from_secs(10);
    let got = loop {
        match store.get_session("a").await {
            Ok(s) => break s,
            Err(e) => {
                assert!(Instant::now() < deadline, "never reconnected: {e}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    assert_eq!(got, Some(session("a")));
    assert_eq!(store.events_after("a", 0).await.unwrap(), vec![ev("a", 1)]);
}
