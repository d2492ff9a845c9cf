//! The ledger of calls in flight through the driver: what is written when (the server looks
//! at the ledger as each request arrives), what a ledger that fails, stalls or panics costs,
//! and `recover` in a client that takes over from one that froze mid-call, judged by the
//! mock cluster's oracle.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use mcp_resume::client::ledger::EntryId;
use mcp_resume::{Client, ErrorKind, Ledger, LedgerEntry, MemoryLedger, ToolCall};
use mock_server::context::meta;
use mock_server::{Cluster, ClusterConfig, Preset};
use serde_json::{json, Value};

use crate::support::*;

/// A ledger in front of a [`MemoryLedger`] that can stall, fail or panic its writes.
#[derive(Default)]
struct Faulty {
    inner: MemoryLedger,
    /// Each write first waits this long.
    stall: Mutex<Duration>,
    /// Each removal first waits this long.
    remove_stall: Mutex<Duration>,
    /// Writes still to fail.
    fail: AtomicUsize,
    /// Writes of a call that became a task still to fail.
    fail_tasks: AtomicUsize,
    panic: std::sync::atomic::AtomicBool,
    writes: AtomicUsize,
}

impl Ledger for Faulty {
    fn put(&self, entry: LedgerEntry) -> BoxFuture<'_, Result<(), mcp_resume::Error>> {
        Box::pin(async move {
            let stall = *self.stall.lock().unwrap();
            if !stall.is_zero() {
                tokio::time::sleep(stall).await;
            }
            if self.panic.load(Ordering::SeqCst) {
                panic!("a ledger's bug");
            }
            self.writes.fetch_add(1, Ordering::SeqCst);
            let failing = self
                .fail
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok();
            let task = matches!(entry.stage(), mcp_resume::proto::CallStage::Task { .. });
            let failing = failing
                || (task
                    && self
                        .fail_tasks
                        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                        .is_ok());
            if failing {
                return Err(mcp_resume::Error::ledger(std::io::Error::other(
                    "storage unavailable",
                )));
            }
            self.inner.put(entry).await
        })
    }

    fn remove(&self, id: EntryId) -> BoxFuture<'_, Result<(), mcp_resume::Error>> {
        Box::pin(async move {
            let stall = *self.remove_stall.lock().unwrap();
            if !stall.is_zero() {
                tokio::time::sleep(stall).await;
            }
            self.inner.remove(id).await
        })
    }

    fn entries(&self) -> BoxFuture<'_, Result<Vec<LedgerEntry>, mcp_resume::Error>> {
        self.inner.entries()
    }
}

/// A [`MemoryLedger`] that counts the removals asked of it.
struct Counting {
    inner: Arc<MemoryLedger>,
    removes: AtomicUsize,
}

impl Ledger for Counting {
    fn put(&self, entry: LedgerEntry) -> BoxFuture<'_, Result<(), mcp_resume::Error>> {
        self.inner.put(entry)
    }

    fn remove(&self, id: EntryId) -> BoxFuture<'_, Result<(), mcp_resume::Error>> {
        self.removes.fetch_add(1, Ordering::SeqCst);
        self.inner.remove(id)
    }

    fn entries(&self) -> BoxFuture<'_, Result<Vec<LedgerEntry>, mcp_resume::Error>> {
        self.inner.entries()
    }
}

/// The plain server, noting for each `tools/call` whether the ledger held its entry (by its
/// text argument) when the request arrived.
async fn watching(ledger: Arc<Faulty>) -> (TestServer, Arc<Mutex<Vec<(String, bool)>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let server = TestServer::start(move |req| {
        if req.is_rpc("tools/call") {
            let text = req.params()["arguments"]["text"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let entries = futures::executor::block_on(ledger.inner.entries()).unwrap();
            let held = entries
                .iter()
                .any(|e| e.arguments().is_some_and(|a| a["text"] == text.as_str()));
            log.lock().unwrap().push((text, held));
        }
        default_reply(req)
    })
    .await;
    (server, seen)
}

fn echo(text: &str) -> ToolCall {
    ToolCall::new("echo", json!({"text": text}))
}

/// A call's entry is durable before its first byte leaves, even from a ledger that takes
/// its time, and is gone once the call has ended; reads are never written.
#[tokio::test]
async fn a_call_is_recorded_before_its_request_leaves_and_forgotten_after() {
    let ledger = Arc::new(Faulty::default());
    *ledger.stall.lock().unwrap() = Duration::from_millis(50);
    let (server, seen) = watching(ledger.clone()).await;
    let client = Client::builder(&server.url)
        .bearer_token("secret-token")
        .ledger(ledger.clone())
        .build()
        .unwrap();
    guarded(client.list_tools()).await.unwrap();
    guarded(client.ping()).await.unwrap();
    let reply = guarded(client.call_tool(echo("one"))).await.unwrap();
    assert_eq!(reply.text(), "one");
    let handle = client.start(echo("two")).unwrap();
    assert_eq!(guarded(handle).await.unwrap().text(), "two");
    assert_eq!(
        *seen.lock().unwrap(),
        [("one".to_owned(), true), ("two".to_owned(), true)],
        "each entry was there when its request arrived"
    );
    assert_eq!(
        ledger.writes.load(Ordering::SeqCst),
        2,
        "reads write nothing"
    );
    // Removals finish once the call has ended, off the caller's path for a slow ledger.
    guarded(async {
        while !ledger.inner.is_empty() {
            tokio::task::yield_now().await;
        }
    })
    .await;
}

/// `close` finishes the removals the calls that ended before it queued: a process that
/// closes its client and exits leaves no entry of a finished call, even on a slow ledger.
#[tokio::test]
async fn close_finishes_the_removals_of_ended_calls() {
    let ledger = Arc::new(Faulty::default());
    *ledger.remove_stall.lock().unwrap() = Duration::from_millis(300);
    let (server, _) = watching(ledger.clone()).await;
    let client = Client::builder(&server.url)
        .ledger(ledger.clone())
        .build()
        .unwrap();
    let reply = guarded(client.call_tool(echo("one"))).await.unwrap();
    assert_eq!(reply.text(), "one");
    assert!(
        !ledger.inner.is_empty(),
        "the call ended before its entry's removal did"
    );
    guarded(client.close()).await.unwrap();
    assert!(ledger.inner.is_empty(), "close waited for the removal");
}

/// A ledger that fails holds the call back, like a connection that cannot be made: it is
/// tried again (written again first) and sent once the ledger takes it, exactly once.
#[tokio::test]
async fn a_failing_ledger_holds_the_call_back_until_it_takes_the_entry() {
    let ledger = Arc::new(Faulty::default());
    ledger.fail.store(2, Ordering::SeqCst);
    let (server, seen) = watching(ledger.clone()).await;
    let client = Client::builder(&server.url)
        .ledger(ledger.clone())
        .build()
        .unwrap();
    let reply = guarded(client.call_tool(echo("late"))).await.unwrap();
    assert_eq!(reply.text(), "late");
    assert_eq!(*seen.lock().unwrap(), [("late".to_owned(), true)]);
    assert_eq!(ledger.writes.load(Ordering::SeqCst), 3);
}

/// A call that can never be recorded is never sent: it fails, saying why, and the client
/// goes on; so does a ledger that panics, which costs the call and never the client.
#[tokio::test]
async fn a_call_that_cannot_be_recorded_is_never_sent() {
    for panics in [false, true] {
        let ledger = Arc::new(Faulty::default());
        ledger.fail.store(usize::MAX, Ordering::SeqCst);
        ledger.panic.store(panics, Ordering::SeqCst);
        let (server, seen) = watching(ledger.clone()).await;
        let client = Client::builder(&server.url)
            .ledger(ledger.clone())
            .reconnect(
                mcp_resume::ReconnectPolicy::default()
                    .with_initial_delay(Duration::from_millis(5))
                    .with_max_attempts(3),
            )
            .build()
            .unwrap();
        let err = guarded(client.call_tool(echo("never"))).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Transport, "{err}");
        let why = format!("{err:#}");
        assert!(why.contains("ledger"), "{why}");
        assert!(seen.lock().unwrap().is_empty(), "panics: {panics}");
        assert_eq!(
            server
                .requests()
                .iter()
                .filter(|r| r.is_rpc("tools/call"))
                .count(),
            0
        );
        guarded(client.ping()).await.unwrap();
        ledger.fail.store(0, Ordering::SeqCst);
        ledger.panic.store(false, Ordering::SeqCst);
        assert_eq!(
            guarded(client.call_tool(echo("after")))
                .await
                .unwrap()
                .text(),
            "after"
        );
    }
}

/// A ledger that never finishes a write cannot hold a call past its deadline: the call ends
/// `Timeout` by then, unsent, and the client goes on.
#[tokio::test]
async fn a_stalled_ledger_costs_the_call_its_deadline_and_nothing_more() {
    let ledger = Arc::new(Faulty::default());
    *ledger.stall.lock().unwrap() = Duration::from_secs(3600);
    let (server, seen) = watching(ledger.clone()).await;
    let client = Client::builder(&server.url)
        .ledger(ledger.clone())
        .build()
        .unwrap();
    let started = std::time::Instant::now();
    let err = guarded(client.call_tool(echo("stuck").timeout(Duration::from_millis(300))))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert!(
        seen.lock().unwrap().is_empty(),
        "sent before it was recorded"
    );
    guarded(client.ping()).await.unwrap();
}

/// Writes that never finish neither pile up nor outlive the client: each call fails
/// `Timeout` at its deadline, and once the client is dropped its writer gives up on them
/// within a bound and lets the application's ledger go.
#[tokio::test]
async fn a_stalled_ledger_is_let_go_when_the_client_is_dropped() {
    let ledger = Arc::new(Faulty::default());
    *ledger.stall.lock().unwrap() = Duration::from_secs(3600);
    let (server, _) = watching(ledger.clone()).await;
    let base = Arc::strong_count(&ledger);
    let client = Client::builder(&server.url)
        .ledger(ledger.clone())
        .build()
        .unwrap();
    for n in 0..3 {
        let err = guarded(
            client.call_tool(echo(&format!("stuck-{n}")).timeout(Duration::from_millis(300))),
        )
        .await
        .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    }
    drop(client);
    // Observed with a bound: the writer task ends on its own clock, not on this test's.
    let started = std::time::Instant::now();
    while Arc::strong_count(&ledger) > base && started.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        Arc::strong_count(&ledger),
        base,
        "the ledger is still held {:?} after the client was dropped",
        started.elapsed()
    );
}

/// A [`MemoryLedger`] whose `entries` takes its snapshot, says so, then waits to be let go.
#[derive(Default)]
struct SlowReads {
    inner: MemoryLedger,
    read: tokio::sync::Notify,
    go: tokio::sync::Notify,
}

impl Ledger for SlowReads {
    fn put(&self, entry: LedgerEntry) -> BoxFuture<'_, Result<(), mcp_resume::Error>> {
        self.inner.put(entry)
    }

    fn remove(&self, id: EntryId) -> BoxFuture<'_, Result<(), mcp_resume::Error>> {
        self.inner.remove(id)
    }

    fn entries(&self) -> BoxFuture<'_, Result<Vec<LedgerEntry>, mcp_resume::Error>> {
        Box::pin(async move {
            let snapshot = self.inner.entries().await;
            self.read.notify_one();
            self.go.notified().await;
            snapshot
        })
    }
}

/// A call of this client's that ends while a recovery reads the ledger is not picked up
/// from the entry the read still saw: the application has its outcome already, and a
/// second one (its stored result again, or an unknown outcome) would contradict it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_call_that_ends_while_recover_reads_is_not_picked_up() {
    let ledger = Arc::new(SlowReads::default());
    let arrived = Arc::new(tokio::sync::Notify::new());
    let (release, held) = std::sync::mpsc::channel::<()>();
    let held = Mutex::new(held);
    let seen = arrived.clone();
    let server = TestServer::start(move |req| {
        if req.is_rpc("tools/call") {
            seen.notify_one();
            // Held on this worker thread (the runtime has others) until the test lets go.
            let _ = held.lock().unwrap().recv_timeout(GUARD);
        }
        default_reply(req)
    })
    .await;
    let client = Client::builder(&server.url)
        .ledger(ledger.clone())
        .build()
        .unwrap();
    let call = client
        .start(echo("ending").idempotency_key("key-ending"))
        .unwrap();
    guarded(arrived.notified()).await;
    let recovery = tokio::spawn({
        let client = client.clone();
        async move { client.recover().await }
    });
    guarded(ledger.read.notified()).await;
    release.send(()).unwrap();
    assert_eq!(guarded(call).await.unwrap().text(), "ending");
    ledger.go.notify_one();
    let recovered = guarded(recovery).await.unwrap().unwrap();
    assert!(recovered.is_empty(), "picked up again: {recovered:?}");
}

/// Without a ledger nothing is written and there is nothing to recover.
#[tokio::test]
async fn no_ledger_writes_nothing() {
    let server = TestServer::start(default_reply).await;
    let client = Client::builder(&server.url).no_ledger().build().unwrap();
    assert_eq!(
        guarded(client.call_tool(echo("x"))).await.unwrap().text(),
        "x"
    );
    assert!(guarded(client.recover()).await.unwrap().is_empty());
    // Closed, it says so, as a client with a ledger does.
    guarded(client.close()).await.unwrap();
    let err = guarded(client.recover()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Closed, "{err}");
}

/// A strict two-instance cluster of the 2026-07-28 era (tasks, MRTR rounds).
async fn strict_modern_cluster() -> Cluster {
    Cluster::start(ClusterConfig {
        preset: Preset::Strict,
        era: mock_server::ClusterEra::Modern,
        instances: 2,
        ..ClusterConfig::default()
    })
    .await
    .unwrap()
}

/// A strict two-instance cluster on a runtime of its own, a memory ledger, and a builder of
/// clients of that cluster on that ledger.
fn strict_pair_world(
    seed: u64,
) -> (
    tokio::runtime::Runtime,
    Cluster,
    Arc<MemoryLedger>,
    mcp_resume::ClientBuilder,
) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let cluster = runtime
        .block_on(Cluster::start(ClusterConfig {
            preset: Preset::Strict,
            instances: 2,
            ..ClusterConfig::default()
        }))
        .unwrap();
    let ledger = Arc::new(MemoryLedger::new());
    let builder = Client::builder(cluster.url())
        .ledger(ledger.clone())
        .call_timeout(Duration::from_secs(20))
        .jitter_seed(seed);
    (runtime, cluster, ledger, builder)
}

/// A client built from `builder` starts `calls` (tag, keyed) as slow `counter_increment`s of
/// `steps` steps on a runtime of its own, which stops once each has run: the calls' futures
/// go first, then its tasks, the driver's among them, and the calls are left in the ledger.
fn leave_in_flight(
    builder: mcp_resume::ClientBuilder,
    cluster: &Cluster,
    calls: &[(&str, bool)],
    steps: u64,
) {
    let stopping = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let client = builder.build().unwrap();
    let slow = json!({"steps": steps, "delay_ms": 150});
    let tags: Vec<&str> = calls.iter().map(|(tag, _)| *tag).collect();
    let handles = stopping.block_on(async {
        let handles: Vec<_> = calls
            .iter()
            .map(|(tag, keyed)| client.start(slow_increment(tag, *keyed, &slow)).unwrap())
            .collect();
        ran_once(cluster, &tags).await;
        handles
    });
    drop(handles);
    drop(stopping);
    drop(client);
}

/// A slow `counter_increment` tagged `tag`, keyed by `key-<tag>` when `keyed`.
fn slow_increment(tag: &str, keyed: bool, slow: &Value) -> ToolCall {
    let call = ToolCall::new("counter_increment", slow.clone()).meta(meta::TAG, json!(tag));
    if keyed {
        call.idempotency_key(format!("key-{tag}"))
    } else {
        call
    }
}

/// Until the calls tagged `tags` each ran once on the server (their side effects happened).
async fn ran_once(cluster: &Cluster, tags: &[&str]) {
    guarded(async {
        while !tags
            .iter()
            .all(|tag| cluster.oracle().executions_tagged(tag).count() == 1)
        {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
}

/// A client that froze mid-call (its runtime runs nothing of it again) cannot be told from
/// one still running: the other clients of the process on the same ledger leave its calls to
/// it. Once it stopped with its runtime, as when its process is killed, they pick them up,
/// each call by one of them: the keyed call is re-sent under its key and runs once, the
/// unkeyed one is reported with its arguments and never re-sent; nothing is left in the
/// ledger after.
#[test]
fn a_client_on_the_same_ledger_picks_up_what_a_frozen_one_left() {
    let (runtime, cluster, ledger, builder) = strict_pair_world(3);

    // The client that freezes, on a runtime of its own.
    let frozen = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let first = builder.clone().build().unwrap();
    let slow = json!({"steps": 4, "delay_ms": 150});
    frozen.block_on(async {
        guarded(first.connect()).await.unwrap();
        for (tag, keyed) in [("keyed-1", true), ("unkeyed-1", false)] {
            let call = slow_increment(tag, keyed, &slow);
            let client = first.clone();
            tokio::spawn(async move { client.call_tool(call).await });
        }
        // Until both ran on the server (their side effects happened).
        ran_once(&cluster, &["keyed-1", "unkeyed-1"]).await;
    });
    // Frozen: nothing of it runs until its runtime is dropped.
    assert_eq!(ledger.len(), 2, "both calls are in the ledger");
    let second = builder.clone().build().unwrap();
    let third = builder.build().unwrap();
    runtime.block_on(async {
        assert!(
            guarded(second.recover()).await.unwrap().is_empty(),
            "the calls of a client that may still run are left to it"
        );
    });
    // Stopped with its runtime: its calls' futures and its driver go.
    drop(frozen);
    drop(first);
    assert_eq!(ledger.len(), 2, "both calls are still in the ledger");

    let outcomes: Vec<(LedgerEntry, Result<Value, mcp_resume::Error>)> = runtime.block_on(async {
        let (picked, also) = futures::join!(second.recover(), third.recover());
        let (picked, also) = (picked.unwrap(), also.unwrap());
        let mut outcomes = Vec::new();
        for call in picked.into_iter().chain(also) {
            let entry = call.entry().clone();
            outcomes.push((entry, guarded(call).await));
        }
        outcomes
    });
    assert_eq!(outcomes.len(), 2, "{outcomes:?}");
    for (entry, outcome) in &outcomes {
        let tag = entry.params().unwrap()["_meta"][meta::TAG]
            .as_str()
            .unwrap();
        assert_eq!(entry.arguments(), Some(&slow));
        match tag {
            "keyed-1" => {
                let value = outcome.as_ref().unwrap();
                assert!(value["structuredContent"]["value"].is_u64(), "{value}");
            }
            "unkeyed-1" => {
                let err = outcome.as_ref().unwrap_err();
                assert_eq!(err.kind(), ErrorKind::OutcomeUnknown, "{err}");
                assert_eq!(entry.idempotency_key(), None);
            }
            other => panic!("unexpected {other}"),
        }
    }
    let oracle = cluster.oracle();
    assert_eq!(oracle.executions_tagged("keyed-1").count(), 1);
    assert_eq!(oracle.executions_tagged("unkeyed-1").count(), 1);
    assert_eq!(oracle.totals.duplicate_side_effects, 0);
    runtime.block_on(async {
        guarded(async {
            while !ledger.is_empty() {
                tokio::task::yield_now().await;
            }
        })
        .await;
        assert!(guarded(second.recover()).await.unwrap().is_empty());
    });
}

/// A client stopped with its runtime leaves its calls to the next client on the ledger, even
/// when their futures go before its driver does (the runtime drops its tasks in no order):
/// the keyed call is re-sent under its key and ran once, the unkeyed one is reported.
#[test]
fn a_client_stopped_with_its_runtime_leaves_its_calls_to_the_next() {
    let (runtime, cluster, ledger, builder) = strict_pair_world(5);

    leave_in_flight(
        builder.clone(),
        &cluster,
        &[("keyed-2", true), ("unkeyed-2", false)],
        4,
    );
    assert_eq!(ledger.len(), 2, "both calls are in the ledger");

    let second = builder.build().unwrap();
    runtime.block_on(async {
        let mut tags = Vec::new();
        for call in guarded(second.recover()).await.unwrap() {
            let entry = call.entry().clone();
            let tag = entry.params().unwrap()["_meta"][meta::TAG]
                .as_str()
                .unwrap()
                .to_owned();
            let outcome = guarded(call).await;
            match tag.as_str() {
                "keyed-2" => assert!(outcome.is_ok(), "{outcome:?}"),
                "unkeyed-2" => {
                    assert_eq!(outcome.unwrap_err().kind(), ErrorKind::OutcomeUnknown);
                }
                other => panic!("unexpected {other}"),
            }
            tags.push(tag);
        }
        tags.sort();
        assert_eq!(tags, ["keyed-2", "unkeyed-2"]);
    });
    let oracle = cluster.oracle();
    assert_eq!(oracle.executions_tagged("keyed-2").count(), 1);
    assert_eq!(oracle.executions_tagged("unkeyed-2").count(), 1);
    assert_eq!(oracle.totals.duplicate_side_effects, 0);
}

/// A closed client recovers nothing: `recover` fails `Closed` before it claims an entry, and
/// every entry stays for the next client (a closed client used to pick them up, fail each at
/// once as `Closed` saying it had not run, and delete its entry: the keyed call was lost and
/// the unkeyed one never reported).
#[test]
fn a_closed_client_leaves_the_calls_it_would_recover_to_the_next() {
    let (runtime, cluster, ledger, builder) = strict_pair_world(7);

    leave_in_flight(
        builder.clone(),
        &cluster,
        &[("keyed-7", true), ("unkeyed-7", false)],
        4,
    );
    assert_eq!(ledger.len(), 2, "both calls are in the ledger");

    let counting = Arc::new(Counting {
        inner: ledger.clone(),
        removes: AtomicUsize::new(0),
    });
    let closed = builder.clone().ledger(counting.clone()).build().unwrap();
    runtime.block_on(async {
        guarded(closed.close()).await.unwrap();
        let err = guarded(closed.recover()).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Closed, "{err}");
        // Once the client is gone and its writer task has ended (it ends only when nothing
        // is left to write), nothing holds the ledger but this test: any write the client
        // queued has been made.
        drop(closed);
        guarded(async {
            while Arc::strong_count(&counting) > 1 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
    });
    assert_eq!(
        counting.removes.load(Ordering::SeqCst),
        0,
        "the closed client removed no entry"
    );
    assert_eq!(ledger.len(), 2, "the entries are left for the next client");

    let next = builder.build().unwrap();
    runtime.block_on(async {
        let mut tags = Vec::new();
        for call in guarded(next.recover()).await.unwrap() {
            let tag = call.entry().params().unwrap()["_meta"][meta::TAG]
                .as_str()
                .unwrap()
                .to_owned();
            let outcome = guarded(call).await;
            match tag.as_str() {
                "keyed-7" => assert!(outcome.is_ok(), "{outcome:?}"),
                "unkeyed-7" => {
                    assert_eq!(outcome.unwrap_err().kind(), ErrorKind::OutcomeUnknown);
                }
                other => panic!("unexpected {other}"),
            }
            tags.push(tag);
        }
        tags.sort();
        assert_eq!(tags, ["keyed-7", "unkeyed-7"]);
    });
    assert_eq!(cluster.oracle().executions_tagged("keyed-7").count(), 1);
}

/// A call picked up and still in flight when its client is closed fails `Closed`, says it
/// may have run, and leaves its entry (and its claim) to the next client, which finishes it.
#[test]
fn a_picked_up_call_in_flight_at_close_leaves_its_entry() {
    let (runtime, cluster, ledger, builder) = strict_pair_world(8);
    leave_in_flight(builder.clone(), &cluster, &[("keyed-8", true)], 8);
    assert_eq!(ledger.len(), 1);

    let closing = builder.clone().build().unwrap();
    runtime.block_on(async {
        let mut recovered = guarded(closing.recover()).await.unwrap();
        assert_eq!(recovered.len(), 1);
        let call = recovered.pop().unwrap();
        // Its first execution still holds the key: the re-send waits it out.
        let waiting = tokio::spawn(call);
        guarded(closing.close()).await.unwrap();
        let err = guarded(waiting).await.unwrap().unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Closed, "{err}");
        assert!(err.may_have_run(), "{err}");
    });
    assert_eq!(ledger.len(), 1, "its entry is left for the next client");
    let next = builder.build().unwrap();
    runtime.block_on(async {
        for call in guarded(next.recover()).await.unwrap() {
            assert!(guarded(call).await.is_ok());
        }
    });
    assert_eq!(cluster.oracle().executions_tagged("keyed-8").count(), 1);
}

/// Entries belong to the endpoint as the client was given it: two URLs that differ only in
/// what entries do not show (a query naming a tenant, user info) are two endpoints, and the
/// calls one left are not the other's to recover (re-sent there, a keyed call would run
/// again, under the other tenant's credentials).
#[test]
fn an_endpoint_that_differs_only_in_what_entries_hide_is_another_endpoint() {
    let (runtime, cluster, ledger, _) = strict_pair_world(6);
    let at = |query: &str| {
        Client::builder(format!("{}{query}", cluster.url()))
            .ledger(ledger.clone())
            .call_timeout(Duration::from_secs(20))
    };
    leave_in_flight(at("?t=a"), &cluster, &[("keyed-3", true)], 4);
    assert_eq!(ledger.len(), 1);

    let other = at("?t=b").build().unwrap();
    let same = at("?t=a").build().unwrap();
    runtime.block_on(async {
        let recovered = guarded(other.recover()).await.unwrap();
        assert!(recovered.is_empty(), "another endpoint's call was taken");
        let recovered = guarded(same.recover()).await.unwrap();
        assert_eq!(recovered.len(), 1, "its own endpoint recovers it");
        for call in recovered {
            assert!(guarded(call).await.is_ok());
        }
    });
    assert_eq!(cluster.oracle().executions_tagged("keyed-3").count(), 1);
}

/// A call the application drops in a client that goes on has ended: its entry goes (off the
/// caller's path), and a later `recover` has nothing of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_dropped_in_a_live_client_leaves_no_entry() {
    let cluster = Cluster::start(ClusterConfig {
        preset: Preset::Strict,
        instances: 1,
        ..ClusterConfig::default()
    })
    .await
    .unwrap();
    let ledger = Arc::new(MemoryLedger::new());
    let client = Client::builder(cluster.url())
        .ledger(ledger.clone())
        .build()
        .unwrap();
    let call = ToolCall::new("counter_increment", json!({"steps": 4, "delay_ms": 150}))
        .meta(meta::TAG, json!("dropped"))
        .idempotency_key("key-dropped");
    let handle = client.start(call).unwrap();
    guarded(async {
        while cluster.oracle().executions_tagged("dropped").count() == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    assert_eq!(ledger.len(), 1);
    drop(handle);
    guarded(async {
        while !ledger.is_empty() {
            tokio::task::yield_now().await;
        }
    })
    .await;
    assert!(guarded(client.recover()).await.unwrap().is_empty());
    cluster.shutdown().await;
}

/// A write no request waits for (a call became a task) that fails is tried again: the task
/// the call left behind when it stopped waiting is in the ledger for a later `recover`, which
/// polls it to its end; the work ran once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_write_of_a_task_is_tried_again() {
    let cluster = strict_modern_cluster().await;
    let ledger = Arc::new(Faulty::default());
    ledger.fail_tasks.store(1, Ordering::SeqCst);
    let client = Client::builder(cluster.url())
        .ledger(ledger.clone())
        .build()
        .unwrap();
    let call = ToolCall::new("batch_job", json!({"steps": 10, "delay_ms": 100}))
        .meta(meta::TAG, json!("task-rewritten"))
        .timeout(Duration::from_millis(600));
    let err = guarded(client.call_tool(call)).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    assert_eq!(
        ledger.fail_tasks.load(Ordering::SeqCst),
        0,
        "a task's write failed"
    );
    let recovered = guarded(client.recover()).await.unwrap();
    assert_eq!(recovered.len(), 1, "{recovered:?}");
    let call = recovered.into_iter().next().unwrap();
    assert!(matches!(
        call.entry().stage(),
        mcp_resume::proto::CallStage::Task { .. }
    ));
    let result = guarded(call).await.unwrap();
    assert!(
        result["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("done"),
        "{result}"
    );
    assert_eq!(
        cluster.oracle().executions_tagged("task-rewritten").count(),
        1
    );
    cluster.shutdown().await;
}

/// A client's unkeyed MRTR round awaiting its input (the application's answer) is that
/// client's to send: another client of the process on the same ledger does not pick it up
/// while the first runs, which would send the round too and run the tool twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_clients_round_awaiting_input_is_left_to_it() {
    let cluster = strict_modern_cluster().await;
    let ledger = Arc::new(MemoryLedger::new());
    let builder = Client::builder(cluster.url())
        .ledger(ledger.clone())
        .call_timeout(Duration::from_secs(20));
    let first = builder
        .clone()
        .on_elicitation(|_request, _ctx| async {
            // The application takes its time to answer.
            std::future::pending::<()>().await;
            Ok(mcp_resume::client::models::ElicitResult::accept(
                json!({"confirmed": true}),
            ))
        })
        .build()
        .unwrap();
    let call =
        ToolCall::new("confirm", json!({"question": "ship?"})).meta(meta::TAG, json!("live-round"));
    let call = first.start(call).unwrap();
    guarded(async {
        loop {
            let entries = ledger.entries().await.unwrap();
            if entries.iter().any(|e| {
                matches!(
                    e.stage(),
                    mcp_resume::proto::CallStage::AwaitingInput { .. }
                )
            }) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    let second = builder
        .on_elicitation(|_request, _ctx| async {
            Ok(mcp_resume::client::models::ElicitResult::accept(
                json!({"confirmed": true}),
            ))
        })
        .build()
        .unwrap();
    let recovered = guarded(second.recover()).await.unwrap();
    assert!(recovered.is_empty(), "{recovered:?}");
    assert_eq!(ledger.len(), 1);
    drop(call);
    cluster.shutdown().await;
}

/// Keeps every entry written.
#[derive(Default)]
struct Written(Mutex<Vec<LedgerEntry>>);

impl Ledger for Written {
    fn put(&self, entry: LedgerEntry) -> BoxFuture<'_, Result<(), mcp_resume::Error>> {
        self.0.lock().unwrap().push(entry);
        Box::pin(async { Ok(()) })
    }

    fn remove(&self, _: EntryId) -> BoxFuture<'_, Result<(), mcp_resume::Error>> {
        Box::pin(async { Ok(()) })
    }

    fn entries(&self) -> BoxFuture<'_, Result<Vec<LedgerEntry>, mcp_resume::Error>> {
        Box::pin(async { Ok(Vec::new()) })
    }
}

/// A session id is written only when the application asks for it; the bearer token never.
#[tokio::test]
async fn session_ids_are_written_only_on_request() {
    let server = TestServer::start(default_reply).await;
    for record in [false, true] {
        let ledger = Arc::new(Written::default());
        let client = Client::builder(&server.url)
            .bearer_token("secret-token")
            .ledger(ledger.clone())
            .record_session_ids(record)
            .build()
            .unwrap();
        guarded(client.call_tool(echo("x"))).await.unwrap();
        let written = ledger.0.lock().unwrap().clone();
        assert_eq!(written.len(), 1);
        let session = written[0].session_id().map(|s| s.expose().to_owned());
        assert_eq!(
            session,
            record.then(|| SESSION_ID.to_owned()),
            "record: {record}"
        );
        assert!(!written[0].to_json().to_string().contains("secret-token"));
    }
}

/// The default ledger, the client's own: a task still working when its call stopped waiting
/// is polled to its end by the same client's `recover`, and the work ran once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_ledger_keeps_the_tasks_calls_leave_behind() {
    let cluster = strict_modern_cluster().await;
    let client = Client::builder(cluster.url()).build().unwrap();
    let call = ToolCall::new("batch_job", json!({"steps": 10, "delay_ms": 100}))
        .meta(meta::TAG, json!("left-behind"))
        .timeout(Duration::from_millis(600));
    let err = guarded(client.call_tool(call)).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    let recovered = guarded(client.recover()).await.unwrap();
    assert_eq!(recovered.len(), 1);
    let call = recovered.into_iter().next().unwrap();
    assert!(matches!(
        call.entry().stage(),
        mcp_resume::proto::CallStage::Task { .. }
    ));
    let result = guarded(call).await.unwrap();
    assert!(
        result["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("done"),
        "{result}"
    );
    assert!(guarded(client.recover()).await.unwrap().is_empty());
    assert_eq!(cluster.oracle().executions_tagged("left-behind").count(), 1);
    cluster.shutdown().await;
}

/// A task picked up whose call stopped waiting again is the client's to pick up again: a
/// recovered call that ends leaves nothing of its claim behind, and the task is polled to its
/// end by the third `recover`, the work run once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_recovered_and_left_behind_again_is_recovered_again() {
    let cluster = strict_modern_cluster().await;
    let client = Client::builder(cluster.url())
        .call_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let call = ToolCall::new("batch_job", json!({"steps": 12, "delay_ms": 100}))
        .meta(meta::TAG, json!("left-twice"));
    let err = guarded(client.call_tool(call)).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    let recovered = guarded(client.recover()).await.unwrap();
    assert_eq!(recovered.len(), 1);
    let err = guarded(recovered.into_iter().next().unwrap())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    let mut again = guarded(client.recover()).await.unwrap();
    assert_eq!(
        again.len(),
        1,
        "the task left behind twice is picked up again"
    );
    // Polled until it ends, each pick-up waiting a call's time.
    let result = loop {
        let call = again.pop().expect("the task's entry stays until it ends");
        match guarded(call).await {
            Ok(result) => break result,
            Err(e) if e.kind() == ErrorKind::Timeout => {
                again = guarded(client.recover()).await.unwrap();
            }
            Err(e) => panic!("{e}"),
        }
    };
    assert!(
        result["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("done"),
        "{result}"
    );
    assert!(guarded(client.recover()).await.unwrap().is_empty());
    assert_eq!(cluster.oracle().executions_tagged("left-twice").count(), 1);
    cluster.shutdown().await;
}

/// An unkeyed call's entry as a client of `server` writes it; its writer is gone.
async fn written_entry(server: &TestServer) -> LedgerEntry {
    let (entry, outcome) = entry_of(server, echo("kept")).await;
    outcome.unwrap();
    entry
}

/// The first entry a client of `server` writes for `call`, and how the call ended; its
/// writer is gone.
async fn entry_of(
    server: &TestServer,
    call: ToolCall,
) -> (LedgerEntry, mcp_resume::Result<mcp_resume::CallToolResult>) {
    let capture = Arc::new(Written::default());
    let writing = Client::builder(&server.url)
        .ledger(capture.clone())
        .reconnect(
            mcp_resume::ReconnectPolicy::default()
                .with_initial_delay(Duration::from_millis(5))
                .with_max_attempts(1),
        )
        .build()
        .unwrap();
    let outcome = guarded(writing.call_tool(call)).await;
    guarded(writing.close()).await.unwrap();
    drop(writing);
    let entry = capture.0.lock().unwrap()[0].clone();
    (entry, outcome)
}

/// A Redis ledger's index forgets the entries that expired without being removed (a task
/// left behind, a removal given up during an outage) as it is written to, not only when
/// someone reads it: a worker that keeps calling and never recovers keeps a bounded index.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_ledger_index_drops_expired_ids_as_it_is_written() {
    let redis = mock_server::procs::RedisServer::start()
        .await
        .expect("redis-server");
    let server = TestServer::start(default_reply).await;
    let entry = written_entry(&server).await;
    let identity = "swept";
    let index = format!("mcp-resume:ledger:{{{identity}}}:index");
    let mut conn = redis::Client::open(redis.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    // What an entry that expired unremoved leaves: its id, due a minute ago, its value gone.
    let due = std::time::SystemTime::now() - Duration::from_secs(60);
    let due = due
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let _: () = redis::cmd("ZADD")
        .arg(&index)
        .arg(due)
        .arg("expired-unremoved")
        .query_async(&mut conn)
        .await
        .unwrap();
    let ledger = mcp_resume::client::ledger::RedisLedger::new(&redis.url(), identity).unwrap();
    guarded(ledger.put(entry.clone())).await.unwrap();
    let ids: Vec<String> = redis::cmd("ZRANGE")
        .arg(&index)
        .arg(0)
        .arg(-1)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(ids, vec![entry.id().as_str().to_owned()]);
}

/// A Redis ledger holding one written entry, with what a test needs to write beside it: the
/// ledger's key prefix, the entry's expiry as the index scores it, and a raw connection.
struct InRedis {
    _redis: mock_server::procs::RedisServer,
    server: TestServer,
    entry: LedgerEntry,
    ledger: Arc<mcp_resume::client::ledger::RedisLedger>,
    prefix: String,
    far: u64,
    conn: redis::aio::MultiplexedConnection,
}

async fn written_to_redis(identity: &str) -> InRedis {
    let redis = mock_server::procs::RedisServer::start()
        .await
        .expect("redis-server");
    let server = TestServer::start(default_reply).await;
    let entry = written_entry(&server).await;
    let ledger =
        Arc::new(mcp_resume::client::ledger::RedisLedger::new(&redis.url(), identity).unwrap());
    guarded(ledger.put(entry.clone())).await.unwrap();
    let far = entry
        .expires_at()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    // Bounded by the test's guard rather than the client's default 500 ms: a pipeline of
    // thousands of writes (or one of many MiB) can take longer on a loaded machine.
    let conn = redis::Client::open(redis.url())
        .unwrap()
        .get_multiplexed_async_connection_with_config(
            &redis::AsyncConnectionConfig::new().set_response_timeout(None),
        )
        .await
        .unwrap();
    InRedis {
        _redis: redis,
        server,
        entry,
        ledger,
        prefix: format!("mcp-resume:ledger:{{{identity}}}:"),
        far,
        conn,
    }
}

/// A value in a Redis ledger that is not UTF-8 (damage, or someone else's write), as an
/// entry or as an id in the index, costs that entry alone: the others are read and recovered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_value_that_is_not_text_costs_only_its_entry() {
    let InRedis {
        _redis,
        server,
        entry,
        ledger,
        prefix,
        far,
        mut conn,
    } = written_to_redis("not-text").await;
    let _: () = redis::pipe()
        .set(format!("{prefix}entry:x"), &b"\xff"[..])
        .zadd(format!("{prefix}index"), "x", far)
        .zadd(format!("{prefix}index"), &b"\xfe"[..], far)
        .query_async(&mut conn)
        .await
        .unwrap();

    let read = guarded(ledger.entries()).await.unwrap();
    assert_eq!(read.len(), 1, "{read:?}");
    assert_eq!(read[0].id(), entry.id());
    let client = Client::builder(&server.url)
        .ledger(ledger.clone())
        .build()
        .unwrap();
    let recovered = guarded(client.recover()).await.unwrap();
    assert_eq!(recovered.len(), 1, "{recovered:?}");
    let call = recovered.into_iter().next().unwrap();
    assert_eq!(call.entry().id(), entry.id());
    // Unkeyed, its request may have run: reported, never re-sent.
    let err = guarded(call).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::OutcomeUnknown, "{err}");
}

/// Reading a Redis ledger is bounded whatever was written to its namespace: an entry of more
/// than 16 MiB is skipped (never read whole), and one read takes the 10,000 entries due first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_ledger_read_is_bounded() {
    let InRedis {
        _redis,
        server: _server,
        entry,
        ledger,
        prefix,
        far,
        mut conn,
    } = written_to_redis("bounded").await;
    // A valid entry, padded past the bound with a member no reader looks at.
    let mut big = entry.to_json();
    big["id"] = json!("big");
    big["pad"] = json!("x".repeat(16 * 1024 * 1024 + 1));
    let _: () = redis::pipe()
        .set(format!("{prefix}entry:big"), big.to_string())
        .zadd(format!("{prefix}index"), "big", far)
        .query_async(&mut conn)
        .await
        .unwrap();
    let read = guarded(ledger.entries()).await.unwrap();
    assert_eq!(read.len(), 1, "the oversized entry is skipped");
    assert_eq!(read[0].id(), entry.id());

    // Many more than one read takes, all due after the real one.
    let mut many = redis::pipe();
    many.del(format!("{prefix}entry:big"))
        .zrem(format!("{prefix}index"), "big")
        .ignore();
    for n in 0..10_000 {
        let id = format!("many-{n}");
        let mut copy = entry.to_json();
        copy["id"] = json!(id);
        many.set(format!("{prefix}entry:{id}"), copy.to_string())
            .zadd(format!("{prefix}index"), &id, far + 1)
            .ignore();
    }
    let _: () = guarded(many.query_async(&mut conn)).await.unwrap();
    let read = guarded(ledger.entries()).await.unwrap();
    assert_eq!(read.len(), 10_000);
    assert!(read.iter().any(|e| e.id() == entry.id()), "due first");
}

/// Writes `n` copies of `entry` under the ids `long-0`, `long-1`, ..., each carrying `pad`,
/// due at `due`: entries as long as a test needs, straight into the Redis ledger's namespace.
async fn write_long_copies(
    conn: &mut redis::aio::MultiplexedConnection,
    prefix: &str,
    entry: &LedgerEntry,
    due: u64,
    n: usize,
    pad: &str,
) {
    for n in 0..n {
        let id = format!("long-{n}");
        let mut copy = entry.to_json();
        copy["id"] = json!(id);
        copy["pad"] = json!(pad);
        let _: () = guarded(
            redis::pipe()
                .set(format!("{prefix}entry:{id}"), copy.to_string())
                .zadd(format!("{prefix}index"), &id, due)
                .query_async(conn),
        )
        .await
        .unwrap();
    }
}

/// The longest entry a Redis ledger reads, and so the longest it writes.
const REDIS_ENTRY_BYTES: usize = 16 * 1024 * 1024;

/// The entry a client writes for an echo of `len` bytes' text, and its length as stored.
async fn entry_of_echo(server: &TestServer, len: usize) -> (LedgerEntry, usize) {
    let (entry, _) = entry_of(server, echo(&"a".repeat(len))).await;
    let stored = entry.to_json().to_string().len();
    (entry, stored)
}

/// A Redis ledger writes only what it reads back: an entry of 16 MiB is written and read,
/// one byte more is refused with `Ledger` and nothing of it is stored (an entry it took and
/// then skipped on reading would be a call in flight that no recovery ever sees).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_ledger_refuses_an_entry_longer_than_it_reads() {
    let InRedis {
        _redis,
        server,
        entry: small,
        ledger,
        prefix,
        far: _,
        mut conn,
    } = written_to_redis("refusing").await;
    // What an echo's entry holds besides its text, to size entries to the byte.
    let (_, base) = entry_of_echo(&server, 0).await;
    let (longest, stored) = entry_of_echo(&server, REDIS_ENTRY_BYTES - base).await;
    assert_eq!(stored, REDIS_ENTRY_BYTES);
    let (over, stored) = entry_of_echo(&server, REDIS_ENTRY_BYTES - base + 1).await;
    assert_eq!(stored, REDIS_ENTRY_BYTES + 1);

    let err = guarded(ledger.put(over.clone())).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Ledger, "{err}");
    let (stored, indexed): (bool, Option<u64>) = redis::pipe()
        .exists(format!("{prefix}entry:{}", over.id().as_str()))
        .zscore(format!("{prefix}index"), over.id().as_str())
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(!stored, "the refused entry was stored");
    assert_eq!(indexed, None, "the refused entry was indexed");

    guarded(ledger.put(longest.clone())).await.unwrap();
    let mut read: Vec<EntryId> = guarded(ledger.entries())
        .await
        .unwrap()
        .iter()
        .map(|e| e.id().clone())
        .collect();
    read.sort_by(|a, b| a.as_str().cmp(b.as_str()));
    let mut written = vec![small.id().clone(), longest.id().clone()];
    written.sort_by(|a, b| a.as_str().cmp(b.as_str()));
    assert_eq!(read, written, "every entry written is read back");
}

/// A ledger in front of another that counts the writes it is asked for.
struct CountingPuts<L> {
    inner: L,
    puts: AtomicUsize,
}

impl<L: Ledger> Ledger for CountingPuts<L> {
    fn put(&self, entry: LedgerEntry) -> BoxFuture<'_, Result<(), mcp_resume::Error>> {
        self.puts.fetch_add(1, Ordering::SeqCst);
        self.inner.put(entry)
    }

    fn remove(&self, id: EntryId) -> BoxFuture<'_, Result<(), mcp_resume::Error>> {
        self.inner.remove(id)
    }

    fn entries(&self) -> BoxFuture<'_, Result<Vec<LedgerEntry>, mcp_resume::Error>> {
        self.inner.entries()
    }

    fn max_entry_bytes(&self) -> Option<usize> {
        self.inner.max_entry_bytes()
    }
}

/// A call whose entry is longer than a Redis ledger takes is never sent: it fails at once
/// with `Ledger`, saying why, without a write of its entry tried (nor tried again with
/// backoff: no write of it can succeed), the server never runs it, and nothing of it is left
/// in the ledger; the client goes on. Taken and then skipped by the recovery's read, it would
/// have been a call that may have run and that no recovery ever reports.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_too_long_for_a_redis_ledger_is_never_sent() {
    let redis = mock_server::procs::RedisServer::start()
        .await
        .expect("redis-server");
    let cluster = Cluster::start(ClusterConfig {
        preset: Preset::Strict,
        // The cluster would take the call: only the ledger stands in its way.
        max_body_bytes: 64 * 1024 * 1024,
        ..ClusterConfig::default()
    })
    .await
    .unwrap();
    let ledger = Arc::new(CountingPuts {
        inner: mcp_resume::client::ledger::RedisLedger::new(&redis.url(), "too-long").unwrap(),
        puts: AtomicUsize::new(0),
    });
    let client = Client::builder(cluster.url())
        .ledger(ledger.clone())
        .reconnect(
            mcp_resume::ReconnectPolicy::default()
                .with_initial_delay(Duration::from_millis(5))
                .with_max_attempts(3),
        )
        .build()
        .unwrap();
    let data = "a".repeat(17 * 1024 * 1024);
    let call = ToolCall::new("counter_increment", json!({ "data": data }))
        .meta(meta::TAG, json!("too-long"));
    let err = guarded(client.call_tool(call)).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Ledger, "{err}");
    let why = format!("{err:#}");
    assert!(why.contains("longer than"), "{why}");
    assert!(!why.contains("could not be reached"), "{why}");
    assert!(!err.may_have_run(), "{err}");
    assert_eq!(
        ledger.puts.load(Ordering::SeqCst),
        0,
        "a write that cannot succeed was tried"
    );
    assert_eq!(
        cluster.oracle().executions_tagged("too-long").count(),
        0,
        "the server ran a call the ledger did not hold"
    );
    assert!(guarded(ledger.entries()).await.unwrap().is_empty());
    let after = ToolCall::new("counter_increment", json!({})).meta(meta::TAG, json!("after"));
    guarded(client.call_tool(after)).await.unwrap();
    assert_eq!(cluster.oracle().executions_tagged("after").count(), 1);
    cluster.shutdown().await;
}

/// A ledger whose reads never finish; with `true`, one panics when it is dropped.
struct NeverReads(bool);

/// Panics when dropped.
struct Bomb;

impl Drop for Bomb {
    fn drop(&mut self) {
        panic!("a ledger's bug in a drop");
    }
}

impl Ledger for NeverReads {
    fn put(&self, _: LedgerEntry) -> BoxFuture<'_, Result<(), mcp_resume::Error>> {
        Box::pin(async { Ok(()) })
    }

    fn remove(&self, _: EntryId) -> BoxFuture<'_, Result<(), mcp_resume::Error>> {
        Box::pin(async { Ok(()) })
    }

    fn entries(&self) -> BoxFuture<'_, Result<Vec<LedgerEntry>, mcp_resume::Error>> {
        let bomb = self.0.then_some(Bomb);
        Box::pin(async move {
            let _bomb = bomb;
            futures::future::pending().await
        })
    }
}

/// A ledger that never answers a read fails the recovery with `Ledger` within a call's time:
/// it does not hold the process that is starting; nor does one whose read panics as the
/// recovery gives up on it.
#[tokio::test]
async fn a_ledger_that_never_reads_fails_the_recovery_in_time() {
    let server = TestServer::start(default_reply).await;
    for panics in [false, true] {
        let client = Client::builder(&server.url)
            .ledger(Arc::new(NeverReads(panics)))
            .call_timeout(Duration::from_millis(300))
            .build()
            .unwrap();
        let err = guarded(client.recover()).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Ledger, "{err}");
    }
}

/// A server whose task `t1` keeps working.
async fn working_task_server() -> TestServer {
    TestServer::start(|req| {
        if req.is_rpc("tasks/get") {
            return json_result(
                req,
                json!({"taskId": "t1", "status": "working", "pollIntervalMs": 20}),
            );
        }
        default_reply(req)
    })
    .await
}

/// How many calls a client started now over `ledger` recovers (then closed).
async fn recovered_by_next(server: &TestServer, ledger: &Arc<MemoryLedger>) -> usize {
    let next = Client::builder(&server.url)
        .ledger(ledger.clone())
        .build()
        .unwrap();
    let recovered = guarded(next.recover()).await.unwrap().len();
    guarded(next.close()).await.unwrap();
    recovered
}

/// The task entries in `ledger`, by task id.
async fn task_entries(ledger: &MemoryLedger) -> Vec<String> {
    let mut ids: Vec<String> = ledger
        .entries()
        .await
        .unwrap()
        .into_iter()
        .filter_map(|e| match e.stage() {
            mcp_resume::proto::CallStage::Task { task_id } => Some(task_id.clone()),
            _ => None,
        })
        .collect();
    ids.sort();
    ids
}

/// A task whose resumption fails (here a server without `tasks/get`) is kept for a later
/// `recover`, once: resuming it again and failing again adds no second entry, so the
/// recovery polls the task once, not once per failed attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_resumed_and_failed_twice_is_recovered_once() {
    let server = TestServer::start(default_reply).await;
    let ledger = Arc::new(MemoryLedger::new());
    let client = Client::builder(&server.url)
        .ledger(ledger.clone())
        .build()
        .unwrap();
    for _ in 0..2 {
        let err = guarded(client.resume_task("t1", Some(Duration::from_secs(2))))
            .await
            .unwrap_err();
        assert_ne!(err.kind(), ErrorKind::InvalidConfig, "{err}");
    }
    guarded(client.close()).await.unwrap();
    drop(client);
    assert_eq!(task_entries(&ledger).await, ["t1"]);
    assert_eq!(
        recovered_by_next(&server, &ledger).await,
        1,
        "one call per task left behind"
    );
}

/// The same with resumptions that time out, the task still working.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_resumed_and_timed_out_twice_is_recovered_once() {
    let server = working_task_server().await;
    let ledger = Arc::new(MemoryLedger::new());
    let client = Client::builder(&server.url)
        .ledger(ledger.clone())
        .build()
        .unwrap();
    for _ in 0..2 {
        let err = guarded(client.resume_task("t1", Some(Duration::from_millis(200))))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    }
    let recovered = guarded(client.recover()).await.unwrap();
    assert_eq!(recovered.len(), 1, "one call per task left behind");
    assert_eq!(task_entries(&ledger).await, ["t1"]);
}

/// A zero timeout is refused as `ToolCall::timeout(ZERO)` is, before anything is written:
/// `InvalidConfig`, and the ledger as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_task_with_a_zero_timeout_is_refused_unwritten() {
    let server = TestServer::start(default_reply).await;
    let ledger = Arc::new(MemoryLedger::new());
    let client = Client::builder(&server.url)
        .ledger(ledger.clone())
        .build()
        .unwrap();
    let err = guarded(client.resume_task("t1", Some(Duration::ZERO)))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
    guarded(client.close()).await.unwrap();
    assert!(ledger.entries().await.unwrap().is_empty());
    assert!(!server.requests().iter().any(|r| r.is_rpc("tasks/get")));
}

/// A closed client is no longer running: the task it left behind is the next client's to
/// recover as soon as `close` returns, not only once the closed client is dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_clients_task_left_behind_is_recovered_before_it_is_dropped() {
    let server = TestServer::start(default_reply).await;
    let ledger = Arc::new(MemoryLedger::new());
    let closed = Client::builder(&server.url)
        .ledger(ledger.clone())
        .build()
        .unwrap();
    let err = guarded(closed.resume_task("t1", Some(Duration::from_secs(2))))
        .await
        .unwrap_err();
    assert_ne!(err.kind(), ErrorKind::InvalidConfig, "{err}");
    guarded(closed.close()).await.unwrap();
    assert_eq!(task_entries(&ledger).await, ["t1"]);
    assert_eq!(
        recovered_by_next(&server, &ledger).await,
        1,
        "the closed client's task is the next's"
    );
    drop(closed);
}

/// A token provider whose `close` panics.
struct PanicsAsClosed;

impl mcp_resume::TokenProvider for PanicsAsClosed {
    fn token(
        &self,
        _: mcp_resume::TokenRequest,
    ) -> BoxFuture<'static, Result<String, mcp_resume::Error>> {
        Box::pin(async { Ok("t-1".to_owned()) })
    }

    fn close(&self) {
        panic!("a token provider's close bug");
    }
}

/// A token provider panicking as the client closes it costs nothing but its own cleanup:
/// `close` returns instead of unwinding its caller, having done the rest (the task the
/// closed client left behind is the next client's at once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_panicking_as_the_client_closes_it_fails_nothing() {
    let server = TestServer::start(default_reply).await;
    let ledger = Arc::new(MemoryLedger::new());
    let closed = Client::builder(&server.url)
        .ledger(ledger.clone())
        .auth(PanicsAsClosed)
        .build()
        .unwrap();
    let err = guarded(closed.resume_task("t1", Some(Duration::from_secs(2))))
        .await
        .unwrap_err();
    assert_ne!(err.kind(), ErrorKind::InvalidConfig, "{err}");
    let closing = closed.clone();
    guarded(tokio::spawn(async move { closing.close().await }))
        .await
        .expect("close does not unwind its caller")
        .expect("the session is closed");
    assert_eq!(task_entries(&ledger).await, ["t1"]);
    assert_eq!(
        recovered_by_next(&server, &ledger).await,
        1,
        "the closed client's task is the next's"
    );
    drop(closed);
}

/// A token provider counting the times its client told it it stopped.
struct CountsCloses(Arc<AtomicUsize>);

impl mcp_resume::TokenProvider for CountsCloses {
    fn token(
        &self,
        _: mcp_resume::TokenRequest,
    ) -> BoxFuture<'static, Result<String, mcp_resume::Error>> {
        Box::pin(async { Ok("t-1".to_owned()) })
    }

    fn close(&self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// A `close` dropped half way (an application's own timeout, a handler that closes its
/// client and is stopped by that close) has closed the session all the same: the closed
/// client lets go of what it holds for no call any more, the task it left behind is the
/// next client's at once and its token provider is told, instead of both waiting for the
/// client to be dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_close_dropped_half_way_still_lets_go() {
    // The first DELETE is never answered; the next client's is.
    let deletes = AtomicUsize::new(0);
    let server = TestServer::start(move |req| match req.method {
        http::Method::DELETE if deletes.fetch_add(1, Ordering::SeqCst) == 0 => hang(),
        _ => default_reply(req),
    })
    .await;
    let ledger = Arc::new(MemoryLedger::new());
    let closes = Arc::new(AtomicUsize::new(0));
    let closed = Client::builder(&server.url)
        .ledger(ledger.clone())
        .auth(CountsCloses(closes.clone()))
        .build()
        .unwrap();
    let err = guarded(closed.resume_task("t1", Some(Duration::from_secs(2))))
        .await
        .unwrap_err();
    assert_ne!(err.kind(), ErrorKind::InvalidConfig, "{err}");
    // Given up once its DELETE is at the server, which never answers it.
    tokio::select! {
        _ = closed.close() => panic!("the DELETE is never answered"),
        _ = server.wait_for(|r| r.method == http::Method::DELETE) => {}
    }
    assert!(
        closes.load(Ordering::SeqCst) > 0,
        "the token provider is told"
    );
    assert_eq!(task_entries(&ledger).await, ["t1"]);
    assert_eq!(
        recovered_by_next(&server, &ledger).await,
        1,
        "the closed client's task is the next's"
    );
    drop(closed);
}

/// A call that became a task and a later `resume_task` of that task (a deprecated task
/// store drained, say) share one entry, the task's: both left behind, the recovery polls the
/// task once, and the ledger holds one entry of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_calls_task_resumed_by_its_id_keeps_one_entry() {
    let cluster = strict_modern_cluster().await;
    let ledger = Arc::new(MemoryLedger::new());
    let client = Client::builder(cluster.url())
        .ledger(ledger.clone())
        .build()
        .unwrap();
    let call = ToolCall::new("batch_job", json!({"steps": 20, "delay_ms": 100}))
        .meta(meta::TAG, json!("resumed-task"))
        .timeout(Duration::from_millis(600));
    let err = guarded(client.call_tool(call)).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    let tasks = task_entries(&ledger).await;
    assert_eq!(tasks.len(), 1, "{tasks:?}");
    let err = guarded(client.resume_task(&tasks[0], Some(Duration::from_millis(300))))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    assert_eq!(task_entries(&ledger).await, tasks, "one entry of the task");
    assert_eq!(ledger.len(), 1);
    let recovered = guarded(client.recover()).await.unwrap();
    assert_eq!(recovered.len(), 1, "the task is polled once");
    for call in recovered {
        guarded(call).await.unwrap();
    }
    assert!(ledger.is_empty());
    assert_eq!(
        cluster.oracle().executions_tagged("resumed-task").count(),
        1
    );
    cluster.shutdown().await;
}

/// Two entries of one task (a call's entry whose move to the task's id was cut short by a
/// crash, or one an earlier version wrote beside a resumption's) are one call to `recover`:
/// the task is polled once, and both entries go when it ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_entries_of_one_task_are_recovered_as_one() {
    let cluster = strict_modern_cluster().await;
    let ledger = Arc::new(MemoryLedger::new());
    let client = Client::builder(cluster.url())
        .ledger(ledger.clone())
        .build()
        .unwrap();
    let call = ToolCall::new("batch_job", json!({"steps": 10, "delay_ms": 100}))
        .meta(meta::TAG, json!("twice-entered"))
        .timeout(Duration::from_millis(600));
    let err = guarded(client.call_tool(call)).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    let held = ledger.entries().await.unwrap();
    assert_eq!(held.len(), 1);
    let mut stored = held[0].to_json();
    stored["id"] = json!("0123456789abcdef-1");
    ledger
        .put(LedgerEntry::from_json(&stored).unwrap())
        .await
        .unwrap();
    assert_eq!(task_entries(&ledger).await.len(), 2);
    let recovered = guarded(client.recover()).await.unwrap();
    assert_eq!(recovered.len(), 1, "the task is polled once");
    for call in recovered {
        guarded(call).await.unwrap();
    }
    guarded(client.close()).await.unwrap();
    assert!(ledger.is_empty(), "{:?}", ledger.entries().await.unwrap());
    assert_eq!(
        cluster.oracle().executions_tagged("twice-entered").count(),
        1
    );
    cluster.shutdown().await;
}

/// Two resumptions of one task in one client share its entry: the one the application gives
/// up (dropped; the server is told, but keeps the task working) leaves the entry to the other,
/// which ends later by timing out with the task still working: the task stays recorded, and
/// the next client's recovery polls it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_left_behind_by_the_last_of_two_resumptions_is_recovered() {
    let server = working_task_server().await;
    let ledger = Arc::new(MemoryLedger::new());
    let client = Arc::new(
        Client::builder(&server.url)
            .ledger(ledger.clone())
            .build()
            .unwrap(),
    );
    let polls = |server: &TestServer, method: &str| {
        server
            .requests()
            .iter()
            .filter(|r| r.is_rpc(method))
            .count()
    };
    let first = tokio::spawn({
        let client = client.clone();
        async move {
            client
                .resume_task("t1", Some(Duration::from_secs(30)))
                .await
        }
    });
    let last = tokio::spawn({
        let client = client.clone();
        async move { client.resume_task("t1", Some(Duration::from_secs(2))).await }
    });
    // Both poll the task (each has written the entry) before the first is given up.
    guarded(async {
        while polls(&server, "tasks/get") < 4 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    first.abort();
    assert!(first.await.unwrap_err().is_cancelled());
    // The driver has taken the first as given up (the server is told) before the last ends.
    guarded(async {
        while polls(&server, "notifications/cancelled") == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    let err = guarded(last).await.unwrap().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    guarded(client.close()).await.unwrap();
    assert_eq!(task_entries(&ledger).await, ["t1"], "the task left behind");
    assert_eq!(
        recovered_by_next(&server, &ledger).await,
        1,
        "the task left behind is recovered"
    );
}

/// Two clients of one process sharing a ledger, each resuming one task, share its entry as
/// two resumptions in one client do: the client whose call is given up first (dropped) leaves
/// the entry to the other's call still polling the task, which ends later by timing out with
/// the task still working: the task stays recorded, and a third client's recovery polls it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_left_behind_by_the_last_of_two_clients_resumptions_is_recovered() {
    let server = working_task_server().await;
    let ledger = Arc::new(MemoryLedger::new());
    let client = |name: &str| {
        Arc::new(
            Client::builder(&server.url)
                .ledger(ledger.clone())
                .header("x-client", name)
                .build()
                .unwrap(),
        )
    };
    let (first, last) = (client("first"), client("last"));
    let polls = |server: &TestServer, method: &str, by: &str| {
        server
            .requests()
            .iter()
            .filter(|r| r.is_rpc(method) && r.header("x-client") == Some(by))
            .count()
    };
    let given_up = tokio::spawn({
        let first = first.clone();
        async move { first.resume_task("t1", Some(Duration::from_secs(30))).await }
    });
    let timed_out = tokio::spawn({
        let last = last.clone();
        async move { last.resume_task("t1", Some(Duration::from_secs(2))).await }
    });
    // Both poll the task (each has written the entry, before its first poll) before the
    // first is given up.
    guarded(async {
        while polls(&server, "tasks/get", "first") < 2 || polls(&server, "tasks/get", "last") < 2 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    given_up.abort();
    assert!(given_up.await.unwrap_err().is_cancelled());
    // The first client has taken its call as given up (the server is told) before the last
    // call ends.
    guarded(async {
        while polls(&server, "notifications/cancelled", "first") == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    let err = guarded(timed_out).await.unwrap().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    guarded(first.close()).await.unwrap();
    guarded(last.close()).await.unwrap();
    assert_eq!(task_entries(&ledger).await, ["t1"], "the task left behind");
    let next = client("next");
    let recovered = guarded(next.recover()).await.unwrap();
    assert_eq!(recovered.len(), 1, "the task left behind is recovered");
    drop(recovered);
    guarded(next.close()).await.unwrap();
}

/// An entry under a Redis key that names another id than its own (a copy, a rename, damage)
/// is skipped and left where it is, never picked up: the call's removal would go to the id
/// the entry names, not to the key that holds it, and every later recovery would pick the
/// same call up again (an unkeyed call reported again, a keyed one sent again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_entry_under_another_ids_key_is_never_recovered() {
    let InRedis {
        _redis,
        server,
        entry,
        ledger,
        prefix,
        far,
        mut conn,
    } = written_to_redis("misnamed").await;
    let index = format!("{prefix}index");
    let _: () = redis::pipe()
        .del(format!("{prefix}entry:{}", entry.id()))
        .zrem(&index, entry.id().as_str())
        .set(format!("{prefix}entry:copy"), entry.to_json().to_string())
        .zadd(&index, "copy", far)
        .query_async(&mut conn)
        .await
        .unwrap();
    let mut picked = 0;
    for _ in 0..2 {
        let client = Client::builder(&server.url)
            .ledger(ledger.clone())
            .build()
            .unwrap();
        let recovered = guarded(client.recover()).await.unwrap();
        picked += recovered.len();
        for call in recovered {
            let _ = guarded(call).await;
        }
        guarded(client.close()).await.unwrap();
    }
    assert_eq!(picked, 0, "an entry under another id's key is skipped");
    let kept: bool = redis::cmd("EXISTS")
        .arg(format!("{prefix}entry:copy"))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(kept, "left where it is, for whoever looks");
}

/// One read of a Redis ledger holds at most 256 MiB of entries, even when they all fall in
/// one batch of its reads: 18 entries of 15 MiB each (each under the bound on one entry) are
/// not all read at once; the rest are left for a later read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_ledger_read_holds_no_more_bytes_than_it_takes() {
    let InRedis {
        _redis,
        server: _server,
        entry,
        ledger,
        prefix,
        far,
        mut conn,
    } = written_to_redis("batch-bytes").await;
    const LONG: usize = 15 * 1024 * 1024;
    let pad = "x".repeat(LONG);
    write_long_copies(&mut conn, &prefix, &entry, far + 1, 18, &pad).await;
    let read = guarded(ledger.entries()).await.unwrap();
    let long = read.iter().filter(|e| e.id() != entry.id()).count();
    assert!(read.iter().any(|e| e.id() == entry.id()), "due first");
    assert!(
        long * LONG <= 256 * 1024 * 1024,
        "{long} entries of 15 MiB read at once"
    );
    assert!(long > 0, "as many as the bound takes");
}

/// Bytes Redis has sent its clients so far.
async fn redis_bytes_out(conn: &mut redis::aio::MultiplexedConnection) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("stats")
        .query_async(conn)
        .await
        .unwrap();
    info.lines()
        .find_map(|line| line.strip_prefix("total_net_output_bytes:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("total_net_output_bytes")
}

/// Ids in a Redis ledger's index longer than any entry's id (someone else's write, damage)
/// are not read at all: a read takes up to 10,000 ids, and 64 MiB of two of them cost it
/// nothing; the entry beside them is read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_ledger_read_takes_no_id_longer_than_an_entrys() {
    let InRedis {
        _redis,
        server: _server,
        entry,
        ledger,
        prefix,
        far,
        mut conn,
    } = written_to_redis("long-ids").await;
    for n in 0..2u8 {
        let mut member = vec![b'a' + n; 32 * 1024 * 1024];
        member[0] = b'0' + n;
        let _: () = guarded(
            redis::cmd("ZADD")
                .arg(format!("{prefix}index"))
                .arg(far + 1)
                .arg(member)
                .query_async(&mut conn),
        )
        .await
        .unwrap();
    }
    let before = redis_bytes_out(&mut conn).await;
    let read = guarded(ledger.entries()).await.unwrap();
    let sent = redis_bytes_out(&mut conn).await - before;
    assert_eq!(read.len(), 1, "{read:?}");
    assert_eq!(read[0].id(), entry.id());
    assert!(sent < 1024 * 1024, "{sent} bytes read for one entry");
}

/// A TCP proxy to `target` that passes what comes back at `rate` bytes a second, as a
/// network slower than a loopback's does; its address, and the bytes it has passed back.
async fn slow_proxy(target: u16, rate: usize) -> (std::net::SocketAddr, Arc<AtomicUsize>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let passed = Arc::new(AtomicUsize::new(0));
    let counted = passed.clone();
    tokio::spawn(async move {
        while let Ok((inbound, _)) = listener.accept().await {
            let Ok(outbound) = tokio::net::TcpStream::connect(("127.0.0.1", target)).await else {
                continue;
            };
            let (mut in_read, mut in_write) = inbound.into_split();
            let (mut out_read, mut out_write) = outbound.into_split();
            tokio::spawn(async move {
                let _ = tokio::io::copy(&mut in_read, &mut out_write).await;
            });
            let counted = counted.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 64 * 1024];
                let started = tokio::time::Instant::now();
                let mut sent = 0usize;
                while let Ok(n) = out_read.read(&mut buf).await {
                    if n == 0 || in_write.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                    sent += n;
                    counted.fetch_add(n, Ordering::SeqCst);
                    let due = started + Duration::from_secs_f64(sent as f64 / rate as f64);
                    tokio::time::sleep_until(due).await;
                }
            });
        }
    });
    (addr, passed)
}

/// Entries as long as a Redis ledger takes are read back over a network slower than a
/// loopback (here 48 MiB/s, a few hundred Mbit/s): each round trip of a read carries at most
/// about one entry's bound, so none takes longer than a command may, and 120 MiB of entries,
/// each of 15 MiB, are all read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_ledger_reads_long_entries_over_a_slower_network() {
    let InRedis {
        _redis: redis,
        server: _server,
        entry,
        ledger: _,
        prefix,
        far,
        mut conn,
    } = written_to_redis("slow-network").await;
    const LONG: usize = 15 * 1024 * 1024;
    let pad = "x".repeat(LONG);
    write_long_copies(&mut conn, &prefix, &entry, far + 1, 8, &pad).await;
    let (proxy, _) = slow_proxy(redis.port(), 48 * 1024 * 1024).await;
    let ledger =
        mcp_resume::client::ledger::RedisLedger::new(&format!("redis://{proxy}"), "slow-network")
            .unwrap();
    let read = guarded(ledger.entries()).await.unwrap();
    assert_eq!(read.len(), 9, "every entry read");
}

/// A client whose calls may take longer than Redis can keep a key for (a call timeout of 2^60
/// seconds, to wait for good) still records them on a Redis ledger, kept for as long as Redis
/// can, and makes them: a write Redis refused for its expiry held every call back until it
/// failed, never sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_waiting_longer_than_redis_keeps_keys_is_recorded_and_made() {
    let redis = mock_server::procs::RedisServer::start()
        .await
        .expect("redis-server");
    let server = TestServer::start(default_reply).await;
    let ledger =
        Arc::new(mcp_resume::client::ledger::RedisLedger::new(&redis.url(), "for-good").unwrap());
    let client = Client::builder(&server.url)
        .ledger(ledger.clone())
        .call_timeout(Duration::from_secs(1 << 60))
        .reconnect(
            mcp_resume::ReconnectPolicy::default()
                .with_initial_delay(Duration::from_millis(5))
                .with_max_attempts(2),
        )
        .build()
        .unwrap();
    let outcome = guarded(client.call_tool(echo("for good"))).await;
    assert!(outcome.is_ok(), "{outcome:?}");
    guarded(client.close()).await.unwrap();
}

/// An id a Redis ledger's read found without its entry (removed, or expired) is dropped from
/// the index only if its entry is still gone when the read ends: an entry written again under
/// that id meanwhile (a task's, which each resumption of the task writes) stays indexed,
/// instead of being left for no recovery to find.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entry_written_again_while_a_redis_ledger_reads_stays_indexed() {
    let InRedis {
        _redis: redis,
        server: _server,
        entry,
        ledger: _,
        prefix,
        far,
        mut conn,
    } = written_to_redis("rewritten").await;
    let index = format!("{prefix}index");
    const LONG: usize = 15 * 1024 * 1024;
    let pad = "x".repeat(LONG);
    // Due first, its entry gone; then two long entries, read in two round trips.
    let _: () = redis::cmd("ZADD")
        .arg(&index)
        .arg(far - 1000)
        .arg("task-again")
        .query_async(&mut conn)
        .await
        .unwrap();
    write_long_copies(&mut conn, &prefix, &entry, far + 1, 2, &pad).await;
    let (proxy, passed) = slow_proxy(redis.port(), 12 * 1024 * 1024).await;
    let ledger =
        mcp_resume::client::ledger::RedisLedger::new(&format!("redis://{proxy}"), "rewritten")
            .unwrap();
    let read = tokio::spawn(async move { ledger.entries().await.map(|e| e.len()) });
    // The first round trip has answered (the entry found gone), the second not.
    guarded(async {
        while passed.load(Ordering::SeqCst) < LONG {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    let mut again = entry.to_json();
    again["id"] = json!("task-again");
    let _: () = redis::pipe()
        .set(format!("{prefix}entry:task-again"), again.to_string())
        .zadd(&index, "task-again", far)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(
        passed.load(Ordering::SeqCst) < 2 * LONG,
        "written before the read ended"
    );
    assert_eq!(guarded(read).await.unwrap().unwrap(), 3);
    let indexed: Option<u64> = redis::cmd("ZSCORE")
        .arg(&index)
        .arg("task-again")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(
        indexed.is_some(),
        "the entry written again was dropped from the index"
    );
}

/// A key of another type under a Redis ledger's entry name (someone else's write, damage)
/// costs that id alone: skipped, and its id dropped from the index, as an entry gone is; the
/// entry beside it is read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_key_of_another_type_is_dropped_from_the_index() {
    let InRedis {
        _redis,
        server: _server,
        entry,
        ledger,
        prefix,
        far,
        mut conn,
    } = written_to_redis("other-type").await;
    let index = format!("{prefix}index");
    let _: () = redis::pipe()
        .hset(format!("{prefix}entry:hash"), "v", 1)
        .zadd(&index, "hash", far)
        .query_async(&mut conn)
        .await
        .unwrap();
    let read = guarded(ledger.entries()).await.unwrap();
    assert_eq!(read.len(), 1, "{read:?}");
    assert_eq!(read[0].id(), entry.id());
    let indexed: Option<u64> = redis::cmd("ZSCORE")
        .arg(&index)
        .arg("hash")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(indexed, None, "an id of no entry stays indexed");
}

/// A Redis ledger whose index name holds a value of another type (someone else's write,
/// damage), which lists no entry, takes it for an empty index: calls are recorded and made,
/// and recovered, instead of every write failing on it (each call held back until it failed,
/// never sent) and every recovery too, for as long as the value was there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_index_of_another_type_is_taken_for_an_empty_one() {
    let redis = mock_server::procs::RedisServer::start()
        .await
        .expect("redis-server");
    let server = TestServer::start(default_reply).await;
    let mut conn = redis::Client::open(redis.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg("mcp-resume:ledger:{foreign-index}:index")
        .arg("not an index")
        .query_async(&mut conn)
        .await
        .unwrap();
    let ledger = Arc::new(
        mcp_resume::client::ledger::RedisLedger::new(&redis.url(), "foreign-index").unwrap(),
    );
    let recovered = guarded(
        Client::builder(&server.url)
            .ledger(ledger.clone())
            .build()
            .unwrap()
            .recover(),
    )
    .await
    .map(|calls| calls.len());
    assert_eq!(recovered.unwrap(), 0);
    let client = Client::builder(&server.url)
        .ledger(ledger.clone())
        .reconnect(
            mcp_resume::ReconnectPolicy::default()
                .with_initial_delay(Duration::from_millis(5))
                .with_max_attempts(2),
        )
        .build()
        .unwrap();
    let outcome = guarded(client.call_tool(echo("recorded"))).await;
    assert!(outcome.is_ok(), "{outcome:?}");
    guarded(client.close()).await.unwrap();
}
