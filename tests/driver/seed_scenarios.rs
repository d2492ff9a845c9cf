//! The seed incident, one line of its story per test, through the public API against the
//! mock cluster. Each test sets the cluster up so the situation happens deterministically,
//! then asserts what the resume-aware client reported (results, error kinds, session events)
//! and what the cluster's oracle saw really happen.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use mcp_resume::{
    CallToolResult, Client, ClientBuilder, Error, ErrorKind, ReconnectPolicy, ReinitReason,
    RejectReason, SessionEvent, ToolCall,
};
use mock_server::context::meta;
use mock_server::{Cluster, ClusterConfig, Faults, OracleReport, Preset};
use serde_json::{json, Value};

const GUARD: Duration = Duration::from_secs(20);
const TEMPERATURE: f64 = 0.2;

async fn guarded<T>(fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(GUARD, fut)
        .await
        .expect("hang guard: the future did not complete")
}

/// A cluster, one client on it, and every session event the client reports.
struct Bench {
    cluster: Cluster,
    client: Client,
    events: Arc<Mutex<Vec<SessionEvent>>>,
    collector: tokio::task::JoinHandle<()>,
}

/// What a scenario ends with.
struct Seen {
    events: Vec<SessionEvent>,
    oracle: OracleReport,
}

impl Bench {
    async fn start(
        config: ClusterConfig,
        client: impl FnOnce(ClientBuilder) -> ClientBuilder,
    ) -> Bench {
        let cluster = Cluster::start(config).await.expect("cluster starts");
        let builder = Client::builder(cluster.url())
            .client_capabilities(
                json!({"experimental": {"sampling": {"temperature": TEMPERATURE}}}),
            )
            // Deterministic routing: only the calls of the scenario go through the balancer.
            .open_listen_stream(false)
            .call_timeout(Duration::from_secs(5))
            .reconnect(
                ReconnectPolicy::default()
                    .with_initial_delay(Duration::from_millis(20))
                    .with_max_delay(Duration::from_millis(200)),
            )
            .jitter_seed(3);
        let client = client(builder).build().expect("valid configuration");
        let events = Arc::new(Mutex::new(Vec::new()));
        let mut stream = client.events();
        let sink = events.clone();
        let collector = tokio::spawn(async move {
            while let Some(event) = stream.next().await {
                sink.lock().unwrap().push(event);
            }
        });
        guarded(client.connect()).await.expect("connect");
        Bench {
            cluster,
            client,
            events,
            collector,
        }
    }

    async fn call(
        &self,
        tool: &str,
        args: Value,
        keyed: bool,
        tag: &str,
    ) -> Result<CallToolResult, Error> {
        let mut call = ToolCall::new(tool, args).meta(meta::TAG, json!(tag));
        if keyed {
            call = call.random_idempotency_key();
        }
        guarded(self.client.call_tool(call)).await
    }

    /// Closes the client, waits for every execution to end, and returns what was seen.
    async fn finish(self) -> Seen {
        let _ = guarded(self.client.close()).await;
        drop(self.client);
        guarded(self.collector).await.expect("collector");
        assert!(
            self.cluster.wait_idle(GUARD).await,
            "executions still running"
        );
        let oracle = self.cluster.oracle();
        self.cluster.shutdown().await;
        let events = std::mem::take(&mut *self.events.lock().unwrap());
        Seen { events, oracle }
    }
}

impl Bench {
    /// Stops cutting streams, then makes a call that depends on the negotiated context: it
    /// must run on a session with that context (a new one, if the old one was given up).
    async fn follow_up(&self, tag: &str) {
        self.cluster.set_faults(Faults {
            idle_timeout: None,
            ..Faults::default()
        });
        let r = self
            .call("generate", json!({"prompt": "next"}), false, tag)
            .await
            .expect("the follow-up call succeeds");
        assert_eq!(
            r.structured_content,
            Some(json!({"temperature": TEMPERATURE}))
        );
    }
}

fn count(events: &[SessionEvent], pred: impl Fn(&SessionEvent) -> bool) -> usize {
    events.iter().filter(|e| pred(e)).count()
}

/// Nothing ran under the wrong context, against an unknown record, or twice.
fn assert_clean(oracle: &OracleReport) {
    let t = &oracle.totals;
    assert_eq!(t.wrong_capability, 0, "{t:?}");
    assert_eq!(t.unknown_record, 0, "{t:?}");
    assert_eq!(t.duplicate_side_effects, 0, "{t:?}");
}

fn cluster(preset: Preset) -> ClusterConfig {
    ClusterConfig {
        preset,
        instances: 3,
        idle_timeout: None,
        ..ClusterConfig::default()
    }
}

/// "Mid-stream, the LB drops the connection (idle timeout)": the client resumes with
/// `Last-Event-ID` on the instance that owns the stream and gets the rest, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cut_is_resumed_where_the_stream_lives() {
    let bench = Bench::start(
        ClusterConfig {
            idle_timeout: Some(Duration::from_millis(150)),
            ..cluster(Preset::Sticky)
        },
        |b| b,
    )
    .await;
    let r = bench
        .call("slow", json!({"steps": 3, "delay_ms": 250}), false, "slow")
        .await
        .expect("the cut call completes");
    assert_eq!(r.text(), "slow: done after 3 steps");
    let seen = bench.finish().await;
    assert!(
        count(&seen.events, |e| matches!(e, SessionEvent::Resumed { .. })) >= 1,
        "{:?}",
        seen.events
    );
    assert_eq!(
        count(&seen.events, |e| matches!(
            e,
            SessionEvent::Reinitialized { .. }
        )),
        0,
        "{:?}",
        seen.events
    );
    let o = &seen.oracle;
    assert!(
        !o.resumes.is_empty() && o.resumes.iter().all(|r| r.honored && !r.cross_instance),
        "{:?}",
        o.resumes
    );
    assert_eq!(o.executions_tagged("slow").count(), 1);
    assert_eq!(o.totals.initializes, 1);
    assert_clean(o);
}

/// "Client reconnects … and lands on instance B, which never saw session S1": under the
/// seed's rule B rejects the resume; the client re-initializes and re-sends the keyed call,
/// which the idempotency store answers without running it again.
///
/// The call's stream (priming, two steps, response) is cut after its second event; the
/// re-sent call's stream (priming, stored response) is short enough to get through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cross_instance_resume_is_rejected_and_the_keyed_call_resent_once() {
    let bench = Bench::start(
        ClusterConfig {
            cut_after_events: Some(2),
            ..cluster(Preset::Strict)
        },
        |b| b,
    )
    .await;
    let r = bench
        .call("slow", json!({"steps": 2, "delay_ms": 0}), true, "keyed")
        .await
        .expect("the keyed call is re-sent and answered");
    assert_eq!(r.text(), "slow: done after 2 steps");
    let seen = bench.finish().await;
    let o = &seen.oracle;
    // The situation: the resume reached another instance than the stream's owner.
    assert!(
        o.resumes.iter().any(|r| r.cross_instance),
        "{:?}",
        o.resumes
    );
    assert!(o.resumes.iter().all(|r| !r.honored), "{:?}", o.resumes);
    assert!(o.rejections("not_owner") >= 1, "{:?}", o.totals);
    let ev = &seen.events;
    assert!(
        count(ev, |e| matches!(
            e,
            SessionEvent::ResumeRejected {
                reason: Some(RejectReason::NotOwner)
            }
        )) >= 1,
        "{ev:?}"
    );
    assert!(
        count(ev, |e| matches!(
            e,
            SessionEvent::Reinitialized {
                reason: ReinitReason::ResumeRejected(RejectReason::NotOwner),
                capabilities_changed: false
            }
        )) >= 1,
        "{ev:?}"
    );
    assert!(
        count(ev, |e| matches!(
            e,
            SessionEvent::Redispatched {
                idempotency_key: Some(_),
                ..
            }
        )) >= 1,
        "{ev:?}"
    );
    // Ran once; the re-send was answered from the idempotency store.
    assert_eq!(o.executions_tagged("keyed").count(), 1);
    assert!(o.totals.idempotent_replays >= 1, "{:?}", o.totals);
    assert!(o.totals.initializes >= 2, "{:?}", o.totals);
    assert_clean(o);
}

/// The same cut for an unkeyed side effect: it ran, the client cannot know, so it says so
/// (`OutcomeUnknown`) instead of re-sending it or claiming success.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cross_instance_resume_of_an_unkeyed_call_is_outcome_unknown() {
    let bench = Bench::start(
        ClusterConfig {
            cut_after_events: Some(1),
            ..cluster(Preset::Strict)
        },
        |b| b,
    )
    .await;
    let err = bench
        .call("counter_increment", json!({}), false, "unkeyed")
        .await
        .expect_err("the response was lost with the stream");
    assert_eq!(err.kind(), ErrorKind::OutcomeUnknown, "{err}");
    let seen = bench.finish().await;
    assert!(
        count(&seen.events, |e| matches!(
            e,
            SessionEvent::OutcomeUnknown { .. }
        )) == 1,
        "{:?}",
        seen.events
    );
    assert_eq!(
        count(&seen.events, |e| matches!(
            e,
            SessionEvent::Redispatched { .. }
        )),
        0,
        "{:?}",
        seen.events
    );
    // It did run, exactly once: re-sending it would have incremented twice.
    assert_eq!(seen.oracle.executions_tagged("unkeyed").count(), 1);
    assert!(
        seen.oracle.rejections("not_owner") >= 1,
        "{:?}",
        seen.oracle.totals
    );
    assert_clean(&seen.oracle);
}

/// "Instance B … looks up event 41 in a shared store and replays events 42–47", among them a
/// `tools/call` result whose request B has no record of. Where only the event log is shared
/// (`naive`), the stock-like client takes the replay as a resume; the resume-aware client
/// sees the instance answers under another context and starts over instead.
///
/// Two instances: `initialize` → 0, `initialized` → 1, the call → 0 (the session's owner),
/// the resume → 1, which never saw the session.
async fn replayed_response(
    stock_like: bool,
) -> (
    Result<CallToolResult, Error>,
    Result<CallToolResult, Error>,
    Seen,
) {
    let bench = Bench::start(
        ClusterConfig {
            instances: 2,
            cut_after_events: Some(1),
            ..cluster(Preset::Naive)
        },
        |b| b.dangerous_trust_replay(stock_like),
    )
    .await;
    let result = bench
        .call(
            "slow",
            json!({"steps": 1, "delay_ms": 0}),
            false,
            "replayed",
        )
        .await;
    // The agent goes on with a call that depends on the negotiated context (no more cuts).
    bench.cluster.set_faults(Faults {
        idle_timeout: None,
        ..Faults::default()
    });
    let next = bench
        .call("generate", json!({"prompt": "next"}), false, "next")
        .await;
    let seen = bench.finish().await;
    // The situation: a cross-instance replay was served from the shared log.
    let o = &seen.oracle;
    assert!(
        o.resumes.iter().any(|r| r.cross_instance && r.honored),
        "{:?}",
        o.resumes
    );
    assert!(o.totals.cross_instance_resumes >= 1, "{:?}", o.totals);
    assert_eq!(o.executions_tagged("replayed").count(), 1);
    (result, next, seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replayed_response_is_believed_by_a_stock_like_client() {
    let (result, _, seen) = replayed_response(true).await;
    let r = result.expect("the stock-like client takes the replay as a resume");
    assert_eq!(r.text(), "slow: done after 1 steps");
    assert!(
        count(&seen.events, |e| matches!(e, SessionEvent::Resumed { .. })) >= 1,
        "{:?}",
        seen.events
    );
    assert_eq!(
        count(&seen.events, |e| matches!(
            e,
            SessionEvent::Reinitialized { .. }
        )),
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replayed_response_from_a_stranger_is_not_a_resume() {
    let (result, next, seen) = replayed_response(false).await;
    let ev = &seen.events;
    // The replaying instance answers under a made-up context: treated as a rejection, and
    // the session starts over before the next call.
    assert!(
        count(ev, |e| matches!(
            e,
            SessionEvent::ResumeRejected {
                reason: Some(RejectReason::CapabilityMismatch)
            }
        )) >= 1,
        "{ev:?}"
    );
    assert!(
        count(ev, |e| matches!(
            e,
            SessionEvent::Reinitialized {
                reason: ReinitReason::CapabilityMismatch,
                ..
            }
        )) >= 1,
        "{ev:?}"
    );
    assert!(
        seen.oracle.totals.initializes >= 2,
        "{:?}",
        seen.oracle.totals
    );
    let next = next.expect("the follow-up runs on the new session");
    assert_eq!(
        next.structured_content,
        Some(json!({"temperature": TEMPERATURE}))
    );
    assert_eq!(
        count(ev, |e| matches!(e, SessionEvent::Resumed { .. })),
        0,
        "{ev:?}"
    );
    // Unkeyed, it ran, and the client cannot prove it: it says so.
    let err = result.expect_err("a replay from a stranger is not a result");
    assert_eq!(err.kind(), ErrorKind::OutcomeUnknown, "{err}");
    assert_clean(&seen.oracle);
}

/// "When the client later sent a dependent follow-up tool call, instance C … silently
/// executed it": `prepare` on one instance, `commit` on the next.
async fn dependent_follow_up(
    preset: Preset,
    stock_like: bool,
) -> (Vec<Result<CallToolResult, Error>>, Seen) {
    let bench = Bench::start(cluster(preset), |b| b.dangerous_trust_replay(stock_like)).await;
    let mut results = Vec::new();
    for round in 0..3 {
        let prepared = bench
            .call(
                "prepare",
                json!({"item": round}),
                false,
                &format!("prepare-{round}"),
            )
            .await;
        let record = prepared
            .as_ref()
            .ok()
            .and_then(|r| r.structured_content.as_ref())
            .and_then(|v| v["record"].as_str())
            .unwrap_or("rec-never-prepared")
            .to_owned();
        results.push(prepared);
        results.push(
            bench
                .call(
                    "commit",
                    json!({"record": record}),
                    false,
                    &format!("commit-{round}"),
                )
                .await,
        );
    }
    (results, bench.finish().await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dependent_follow_up_on_naive_silently_commits_unknown_records_for_a_stock_client() {
    let (results, seen) = dependent_follow_up(Preset::Naive, true).await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    // Success everywhere, yet the oracle saw commits against records the instance never had.
    assert!(
        seen.oracle.totals.unknown_record >= 1,
        "{:?}",
        seen.oracle.totals
    );
    assert!(
        seen.oracle.totals.wrong_capability >= 1,
        "{:?}",
        seen.oracle.totals
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dependent_follow_up_never_succeeds_against_an_unknown_record() {
    for preset in Preset::ALL {
        let (results, seen) = dependent_follow_up(preset, false).await;
        let o = &seen.oracle;
        for round in 0..3 {
            let commit = &results[2 * round + 1];
            let tag = format!("commit-{round}");
            let wrong = o
                .executions_tagged(&tag)
                .any(|e| e.unknown_record || e.wrong_capability);
            assert!(
                !(commit.is_ok() && wrong),
                "{preset}: {tag} reported success but ran wrong: {commit:?}"
            );
        }
        if preset != Preset::Naive {
            // Records are shared: every commit succeeds, on another instance than its prepare
            // (round-robin) except under affinity.
            assert!(results.iter().all(Result::is_ok), "{preset}: {results:?}");
            assert_clean(o);
            let p = o.executions_tagged("prepare-0").next().unwrap().instance;
            let c = o.executions_tagged("commit-0").next().unwrap().instance;
            assert_eq!(
                p == c,
                preset == Preset::Sticky,
                "{preset}: prepare on {p}, commit on {c}"
            );
        } else {
            // Where the records live on one instance, failures are explicit: a call that ran
            // under another context, or, once several sessions in a row never worked, the
            // session given up.
            for r in results.iter().filter_map(|r| r.as_ref().err()) {
                assert!(
                    matches!(
                        r.kind(),
                        ErrorKind::ContextMismatch | ErrorKind::SessionLost
                    ),
                    "{preset}: {r}"
                );
            }
        }
    }
}

/// "The replayed stream terminated cleanly … clients interpret clean termination as
/// successful completion." A stock-like server (no extension): the resume lands on an
/// instance that replays what the shared log holds — nothing new — and ends the stream
/// cleanly. That end proves nothing: the client starts over and says it cannot know.
///
/// Two instances: `initialize` → 0, `initialized` → 1, the call → 0, the resume → 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clean_end_without_the_response_is_not_completion() {
    let bench = Bench::start(
        ClusterConfig {
            instances: 2,
            extension: false,
            cut_after_events: Some(1),
            ..cluster(Preset::Naive)
        },
        |b| b,
    )
    .await;
    // Keyed, but this server never advertised idempotency: the key protects nothing, so the
    // call is not re-sent either.
    let err = bench
        .call(
            "slow",
            json!({"steps": 2, "delay_ms": 200}),
            true,
            "clean-end",
        )
        .await
        .expect_err("a clean end without the response is not a result");
    assert_eq!(err.kind(), ErrorKind::OutcomeUnknown, "{err}");
    bench.follow_up("next").await;
    let seen = bench.finish().await;
    let ev = &seen.events;
    assert!(
        count(ev, |e| matches!(
            e,
            SessionEvent::Reinitialized {
                reason: ReinitReason::UnverifiableCleanEnd,
                ..
            }
        )) >= 1,
        "{ev:?}"
    );
    assert_eq!(
        count(ev, |e| matches!(e, SessionEvent::Redispatched { .. })),
        0,
        "{ev:?}"
    );
    let o = &seen.oracle;
    assert!(
        o.resumes.iter().any(|r| r.cross_instance && r.honored),
        "the situation: a cross-instance replay: {:?}",
        o.resumes
    );
    // It did run (to completion, on the owner): re-sending would have run it twice.
    assert_eq!(o.executions_tagged("clean-end").count(), 1);
    assert_clean(o);
}

/// "Skipping the initialize handshake that had negotiated a non-default sampling
/// temperature": the session's context changes under the client (a configuration rollout
/// on shared session records). The call that ran under the drifted context fails with
/// `ContextMismatch` — never success — and the session is re-initialized.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capability_drift_is_an_error_not_a_plausible_answer() {
    let bench = Bench::start(cluster(Preset::Strict), |b| b).await;
    bench
        .call("echo", json!({"text": "hi"}), false, "before")
        .await
        .expect("echo");
    let session = bench
        .cluster
        .oracle()
        .executions_tagged("before")
        .next()
        .expect("echo ran")
        .session
        .clone();
    bench
        .cluster
        .drift_session(&session)
        .await
        .expect("strict shares session records");
    let err = bench
        .call("generate", json!({"prompt": "p"}), false, "drifted")
        .await
        .expect_err("an answer under another context is not a result");
    assert_eq!(err.kind(), ErrorKind::ContextMismatch, "{err}");
    let after = bench
        .call("generate", json!({"prompt": "p"}), false, "after")
        .await
        .expect("the new session has the negotiated context");
    assert_eq!(
        after.structured_content,
        Some(json!({"temperature": TEMPERATURE}))
    );
    let seen = bench.finish().await;
    let ev = &seen.events;
    assert_eq!(
        count(ev, |e| matches!(e, SessionEvent::ContextMismatch { .. })),
        1,
        "{ev:?}"
    );
    assert!(
        count(ev, |e| matches!(
            e,
            SessionEvent::Reinitialized {
                reason: ReinitReason::CapabilityMismatch,
                capabilities_changed: false
            }
        )) == 1,
        "{ev:?}"
    );
    let o = &seen.oracle;
    // The oracle confirms: that one call really ran under the wrong context; nothing else did.
    assert!(o.executions_tagged("drifted").all(|e| e.wrong_capability));
    assert_eq!(o.totals.wrong_capability, 1, "{:?}", o.totals);
    assert!(o.executions_tagged("after").all(|e| !e.wrong_capability));
    assert_eq!(o.totals.initializes, 2, "{:?}", o.totals);
}

/// The fourth check of the seed's `authorize_resume`: a stream opened under one context
/// cannot be resumed once the session's context changed, even on its owner.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capability_drift_during_a_cut_stream_rejects_the_resume() {
    let bench = Bench::start(
        ClusterConfig {
            cut_after_events: Some(2),
            // The client must wait this long before resuming: the drift happens meanwhile.
            retry_ms: Some(300),
            ..cluster(Preset::Sticky)
        },
        |b| b,
    )
    .await;
    bench
        .call("echo", json!({"text": "hi"}), false, "before")
        .await
        .expect("echo");
    let session = bench
        .cluster
        .oracle()
        .executions_tagged("before")
        .next()
        .expect("echo ran")
        .session
        .clone();
    let mut notes = bench.client.notifications();
    let client = bench.client.clone();
    let slow = tokio::spawn(async move {
        client
            .call_tool(
                ToolCall::new("slow", json!({"steps": 3, "delay_ms": 50}))
                    .meta(meta::TAG, json!("slow"))
                    .progress_token("p"),
            )
            .await
    });
    // The first progress step is the stream's second event: the cut follows it.
    let first = guarded(notes.next())
        .await
        .expect("a progress notification");
    assert_eq!(first.method, "notifications/progress");
    bench.cluster.drift_session(&session).await.expect("drift");
    let err = guarded(slow)
        .await
        .expect("task")
        .expect_err("the stream cannot be resumed");
    assert_eq!(err.kind(), ErrorKind::OutcomeUnknown, "{err}");
    bench.follow_up("next").await;
    let seen = bench.finish().await;
    let ev = &seen.events;
    assert!(
        count(ev, |e| matches!(
            e,
            SessionEvent::ResumeRejected {
                reason: Some(RejectReason::CapabilityMismatch)
            }
        )) >= 1,
        "{ev:?}"
    );
    assert!(
        count(ev, |e| matches!(
            e,
            SessionEvent::Reinitialized {
                reason: ReinitReason::ResumeRejected(RejectReason::CapabilityMismatch),
                ..
            }
        )) >= 1,
        "{ev:?}"
    );
    let o = &seen.oracle;
    assert!(o.rejections("capability_mismatch") >= 1, "{:?}", o.totals);
    assert!(
        o.resumes.iter().all(|r| !r.cross_instance),
        "{:?}",
        o.resumes
    );
    assert_clean(o);
}

/// "The event store has a gap between Last-Event-ID and the current head": events missing
/// from the shared log. The server proves it cannot continue and says so; the keyed call is
/// re-sent and answered from the idempotency store, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gap_in_the_event_log_is_rejected_and_the_keyed_call_resent() {
    let bench = Bench::start(
        ClusterConfig {
            cut_after_events: Some(2),
            log_loss: Some((1, 1.0)),
            ..cluster(Preset::Replicated)
        },
        |b| b,
    )
    .await;
    let r = bench
        .call("slow", json!({"steps": 2, "delay_ms": 0}), true, "gap")
        .await
        .expect("re-sent and answered");
    assert_eq!(r.text(), "slow: done after 2 steps");
    let seen = bench.finish().await;
    let ev = &seen.events;
    assert!(
        count(ev, |e| matches!(
            e,
            SessionEvent::ResumeRejected {
                reason: Some(RejectReason::EventGap)
            }
        )) >= 1,
        "{ev:?}"
    );
    assert!(
        count(ev, |e| matches!(
            e,
            SessionEvent::Reinitialized {
                reason: ReinitReason::ResumeRejected(RejectReason::EventGap),
                ..
            }
        )) >= 1,
        "{ev:?}"
    );
    let o = &seen.oracle;
    assert!(o.rejections("event_gap") >= 1, "{:?}", o.totals);
    assert_eq!(o.executions_tagged("gap").count(), 1);
    assert_clean(o);
}

/// A gap the server does not admit: a permissive replay from a log with holes. The client
/// checks the sequenced ids itself and starts over instead of trusting the replay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gap_in_a_replayed_stream_is_detected_by_the_client() {
    let bench = Bench::start(
        ClusterConfig {
            instances: 1,
            cut_after_events: Some(2),
            log_loss: Some((GAP_SEED, 0.5)),
            // The resume comes once every event (some missing from the log) is stored.
            retry_ms: Some(300),
            ..cluster(Preset::Naive)
        },
        |b| b,
    )
    .await;
    let mut notes = bench.client.notifications();
    let client = bench.client.clone();
    let slow = tokio::spawn(async move {
        client
            .call_tool(
                ToolCall::new("slow", json!({"steps": 8, "delay_ms": 10}))
                    .meta(meta::TAG, json!("holes"))
                    .progress_token("p"),
            )
            .await
    });
    // The first step is the stream's second event: the cut follows it. The resumed stream
    // is not cut, so what the client sees is the log's content.
    guarded(notes.next())
        .await
        .expect("a progress notification");
    bench.cluster.set_faults(Faults {
        idle_timeout: None,
        log_loss: Some((GAP_SEED, 0.5)),
        ..Faults::default()
    });
    let err = guarded(slow)
        .await
        .expect("task")
        .expect_err("a replay with holes is not a resume");
    assert_eq!(err.kind(), ErrorKind::OutcomeUnknown, "{err}");
    bench.follow_up("next").await;
    let seen = bench.finish().await;
    let ev = &seen.events;
    assert!(
        count(ev, |e| matches!(
            e,
            SessionEvent::Reinitialized {
                reason: ReinitReason::EventGap,
                ..
            }
        )) >= 1,
        "{ev:?}"
    );
    let o = &seen.oracle;
    assert!(o.resumes.iter().any(|r| r.honored), "{:?}", o.resumes);
    assert_eq!(o.executions_tagged("holes").count(), 1);
    assert_clean(o);
}

const GAP_SEED: u64 = 5;

/// "The agent executed three tool calls under the wrong capability set": several calls in
/// flight at once on a `naive` cluster. One answer under a made-up context starts a
/// re-initialization; the answers to the other calls, sent on the old session, must still
/// be checked against the context they were sent under. A success must be the call's own
/// answer (the result echoes its tag, and something ran under that tag), produced at the
/// negotiated temperature, by no execution the oracle flags.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_calls_never_succeed_under_the_wrong_context() {
    let mut wrong = Vec::new();
    let mut succeeded = 0;
    for round in 0..5 {
        let bench = Bench::start(cluster(Preset::Naive), |b| b).await;
        let calls = (0..9).map(|i| {
            let tag = format!("r{round}-c{i}");
            let bench = &bench;
            async move {
                let r = bench
                    .call("generate", json!({"prompt": "p"}), false, &tag)
                    .await;
                (tag, r)
            }
        });
        let results = futures::future::join_all(calls).await;
        let seen = bench.finish().await;
        assert!(seen.oracle.executions_complete());
        for (tag, r) in results {
            let Ok(r) = &r else { continue };
            succeeded += 1;
            let echoed = r
                .meta
                .as_ref()
                .and_then(|m| m.get(meta::TAG))
                .and_then(Value::as_str);
            let mut execs = seen.oracle.executions_tagged(&tag).peekable();
            let none_ran = execs.peek().is_none();
            let ran_wrong = execs.any(|e| e.wrong_capability);
            let temperature = r
                .structured_content
                .as_ref()
                .and_then(|v| v.get("temperature"));
            if echoed != Some(tag.as_str())
                || none_ran
                || ran_wrong
                || temperature != Some(&json!(TEMPERATURE))
            {
                wrong.push(format!(
                    "{tag}: echoed {echoed:?}, ran: {}, wrong context: {ran_wrong}, {:?}",
                    !none_ran, r.structured_content
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "success reported for calls that did not get their own answer, under the negotiated \
         context: {wrong:?}"
    );
    assert!(succeeded > 0, "some calls succeeded");
}
