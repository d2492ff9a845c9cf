//! The seed scenario in the 2026-07-28 era: the same cluster of instances behind round-robin,
//! now stateless (`ClusterEra::Modern`), and a stream broken while a call runs. Nothing can be
//! resumed any more; the question is what gets sent again.
//!
//! One run = one preset × one client on a fresh cluster: a keyed `slow` call whose stream the
//! balancer cuts (after 3 of its 6 progress events), rounds of `generate` (the temperature
//! travels in each request's client capabilities), `prepare`→`commit` (a handle any instance
//! resolves), keyed and unkeyed `counter_increment`; then a keyed and an unkeyed
//! `counter_increment` whose instance crashes right after the increment (after its first
//! progress step; it is restarted empty), an MRTR `confirm`, and a keyed `batch_job` (a task
//! for a client that declares the tasks extension). Every call is tagged and joined with the
//! oracle like the legacy rows.
//!
//! Clients: mcp-resume's default, and a stock-like client that re-issues every request whose
//! stream broke, as the changelog's rule reads ([`crate::reissue_client`]).

// The demo and the end-to-end tests use different parts of this module.
#![allow(dead_code)]

use std::time::{Duration, Instant};

use mcp_resume::client::models::ElicitResult;
use mcp_resume::{Client, EraCache, ReconnectPolicy};
use mock_server::context::meta;
use mock_server::{Cluster, ClusterConfig, ClusterEra, CutStyle, Preset};
use serde_json::{json, Map, Value};

use crate::reissue_client::ReissueClient;
use crate::workload::{
    call_tagged, client_capabilities, echoed_tag, final_oracle, row, tag, CallRecord, ClientKind,
    EventCollector, Row, RunReport, WorkloadConfig,
};

/// The clients of the modern rows, in table order.
pub(crate) const MODERN_CLIENTS: [ClientKind; 2] = [ClientKind::Reissue, ClientKind::ResumeAware];

/// Rounds of generate, prepare→commit, keyed and unkeyed counter_increment.
pub(crate) const MODERN_ROUNDS: usize = 2;

/// Steps a crashed `counter_increment` reports after its increment; the crash comes after
/// the first. Fewer than the balancer's cut, so the call re-issued elsewhere is not cut too.
const CRASH_STEPS: u64 = 2;

/// The cluster of a modern run: the preset in the 2026-07-28 era, the extension on (keys are
/// deduplicated), every SSE stream cut after `cut_after_events` events.
///
/// Each request carries its client capabilities and the instance runs under exactly those,
/// so the oracle cannot learn the right ones from a request: it is told them here, and flags
/// an execution whose request carried others. An unknown record cannot happen in this era
/// (a `commit` of a handle no instance knows is refused, never run), so `unkrec` stays 0.
pub(crate) fn modern_cluster_config(preset: Preset, cfg: &WorkloadConfig) -> ClusterConfig {
    ClusterConfig {
        preset,
        era: ClusterEra::Modern,
        instances: cfg.instances,
        extension: true,
        idle_timeout: None,
        cut_after_events: Some(cfg.cut_after_events),
        cut_style: CutStyle::Abort,
        expected_client_capabilities: Some(client_capabilities()),
        ..ClusterConfig::default()
    }
}

/// A modern run: the report every row is built from, and the stock-like client's re-issues
/// (it reports no events).
#[derive(Debug, Clone)]
pub(crate) struct ModernRun {
    pub report: RunReport,
    pub reissued: u64,
}

impl ModernRun {
    /// The table row; `resent` is mcp-resume's `Redispatched` events, or the re-issues of
    /// the stock-like client.
    pub(crate) fn row(&self) -> Row {
        let mut r = row(&self.report);
        if self.report.client == ClientKind::Reissue {
            r.resent = self.reissued;
        }
        r
    }

    /// The calls whose instance was crashed mid-call.
    pub(crate) fn crashed(&self) -> impl Iterator<Item = &CallRecord> {
        self.report
            .calls
            .iter()
            .filter(|c| c.tag.ends_with(CRASHED_SUFFIX))
    }
}

/// Tags of crashed calls end with this (after the tool name).
const CRASHED_SUFFIX: &str = "-crashed";

/// How one client makes a call of the modern workload.
trait ModernCaller {
    /// Calls `tool` under the next tag (`-crashed` appended when its instance is to crash
    /// after `crash_after` steps), with a fresh key when `keyed` and a progress token when
    /// `progress`; records the outcome; returns `structuredContent` on success.
    fn call(
        &mut self,
        tool: &'static str,
        args: Value,
        keyed: bool,
        progress: bool,
        crash_after: Option<u64>,
    ) -> impl std::future::Future<Output = Option<Value>>;
}

/// The workload's calls, in order.
async fn run_calls(caller: &mut impl ModernCaller, cfg: &WorkloadConfig) {
    caller
        .call(
            "slow",
            json!({"steps": cfg.slow_steps, "delay_ms": cfg.slow_delay_ms}),
            true,
            true,
            None,
        )
        .await;
    for round in 0..MODERN_ROUNDS {
        caller
            .call(
                "generate",
                json!({"prompt": format!("summary {round}")}),
                false,
                false,
                None,
            )
            .await;
        let prepared = caller
            .call(
                "prepare",
                json!({"item": format!("order-{round}")}),
                true,
                false,
                None,
            )
            .await;
        let record = prepared
            .as_ref()
            .and_then(|v| v.get("record"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        if let Some(record) = record {
            caller
                .call("commit", json!({"record": record}), true, false, None)
                .await;
        }
        caller
            .call("counter_increment", json!({}), true, false, None)
            .await;
        caller
            .call("counter_increment", json!({}), false, false, None)
            .await;
    }
    let crashing = json!({"steps": CRASH_STEPS, "delay_ms": cfg.slow_delay_ms});
    for keyed in [true, false] {
        caller
            .call("counter_increment", crashing.clone(), keyed, true, Some(1))
            .await;
    }
    caller
        .call(
            "confirm",
            json!({"question": "ship order-0?"}),
            false,
            false,
            None,
        )
        .await;
    caller
        .call(
            "batch_job",
            json!({"steps": 2, "delay_ms": 10}),
            true,
            true,
            None,
        )
        .await;
}

struct Calls<'a> {
    cluster: &'a Cluster,
    preset: Preset,
    kind: ClientKind,
    calls: Vec<CallRecord>,
}

impl Calls<'_> {
    fn next_tag(&mut self, tool: &str, crash_after: Option<u64>) -> String {
        let mut t = tag(self.preset, self.kind, self.calls.len(), tool);
        if let Some(steps) = crash_after {
            t.push_str(CRASHED_SUFFIX);
            self.cluster.crash_mid_call(&t, steps);
        }
        t
    }

    /// Records the outcome: `structuredContent` and the tag the result echoed, or the error.
    fn record(
        &mut self,
        tag: String,
        tool: &'static str,
        keyed: bool,
        answer: Result<(Value, Option<String>), mcp_resume::ErrorKind>,
        started: Instant,
    ) -> Option<Value> {
        let (outcome, echoed_tag) = match answer {
            Ok((value, echoed)) => (Ok(value), echoed),
            Err(kind) => (Err(kind), None),
        };
        self.calls.push(CallRecord {
            tag,
            tool,
            keyed,
            outcome: outcome.clone(),
            elapsed: started.elapsed(),
            echoed_tag,
        });
        outcome.ok()
    }
}

struct SdkCaller<'a> {
    client: &'a Client,
    calls: Calls<'a>,
}

impl ModernCaller for SdkCaller<'_> {
    async fn call(
        &mut self,
        tool: &'static str,
        args: Value,
        keyed: bool,
        progress: bool,
        crash_after: Option<u64>,
    ) -> Option<Value> {
        let tag = self.calls.next_tag(tool, crash_after);
        let started = Instant::now();
        let outcome = call_tagged(self.client, tool, args, &tag, keyed, progress).await;
        self.calls.record(tag, tool, keyed, outcome, started)
    }
}

struct ReissueCaller<'a> {
    client: ReissueClient,
    calls: Calls<'a>,
    reissued: u64,
}

impl ModernCaller for ReissueCaller<'_> {
    async fn call(
        &mut self,
        tool: &'static str,
        args: Value,
        keyed: bool,
        progress: bool,
        crash_after: Option<u64>,
    ) -> Option<Value> {
        let tag = self.calls.next_tag(tool, crash_after);
        let mut m = Map::new();
        m.insert(meta::TAG.to_owned(), json!(tag));
        if keyed {
            m.insert(
                meta::IDEMPOTENCY_KEY.to_owned(),
                json!(uuid::Uuid::new_v4().to_string()),
            );
        }
        if progress {
            m.insert("progressToken".to_owned(), json!(tag));
        }
        let started = Instant::now();
        let outcome = self.client.call_tool(tool, args, m).await;
        self.reissued += u64::from(outcome.reissued);
        let result = outcome.result.map(|r| {
            let echoed = echoed_tag(r.get("_meta"));
            let value = r.get("structuredContent").cloned().unwrap_or(Value::Null);
            (value, echoed)
        });
        self.calls.record(tag, tool, keyed, result, started)
    }
}

/// mcp-resume as an application would set it up for this server: the era detected (a cache
/// of its own, so runs do not share what they learnt), an elicitation handler (it declares
/// the capability `confirm` needs), the workload's capabilities, deadline and backoff.
pub(crate) fn build_modern_client(url: &str, cfg: &WorkloadConfig) -> Client {
    Client::builder(url)
        .client_capabilities(client_capabilities())
        .call_timeout(cfg.call_timeout)
        .reconnect(
            ReconnectPolicy::default()
                .with_initial_delay(Duration::from_millis(10))
                .with_max_delay(Duration::from_millis(200)),
        )
        .jitter_seed(cfg.jitter_seed)
        .era_cache(EraCache::new())
        .on_elicitation(|_request, _ctx| async move {
            Ok(ElicitResult::accept(json!({"confirmed": true})))
        })
        .build()
        .expect("the demo's client configuration is valid")
}

/// Runs the modern workload for one preset and one client on a fresh cluster.
pub(crate) async fn run_modern(
    preset: Preset,
    kind: ClientKind,
    cfg: &WorkloadConfig,
) -> ModernRun {
    assert!(MODERN_CLIENTS.contains(&kind), "{kind:?} has no modern run");
    let started = Instant::now();
    let cluster = Cluster::start(modern_cluster_config(preset, cfg))
        .await
        .expect("the cluster starts on 127.0.0.1");
    let calls = Calls {
        cluster: &cluster,
        preset,
        kind,
        calls: Vec::new(),
    };
    let (connect, calls, events, reissued) = if kind == ClientKind::ResumeAware {
        let client = build_modern_client(&cluster.url(), cfg);
        let events = EventCollector::start(client.events());
        let connect = client.connect().await.map(drop).map_err(|e| e.kind());
        let mut caller = SdkCaller {
            client: &client,
            calls,
        };
        if connect.is_ok() {
            run_calls(&mut caller, cfg).await;
        }
        let calls = caller.calls.calls;
        let _ = tokio::time::timeout(Duration::from_secs(5), client.close()).await;
        drop(client);
        (connect, calls, events.finish().await, 0)
    } else {
        let mut client =
            ReissueClient::new(&cluster.url(), client_capabilities(), cfg.call_timeout);
        let connect = client.discover().await.map(drop);
        let mut caller = ReissueCaller {
            client,
            calls,
            reissued: 0,
        };
        if connect.is_ok() {
            run_calls(&mut caller, cfg).await;
        }
        (connect, caller.calls.calls, Vec::new(), caller.reissued)
    };
    let (oracle, settled) = final_oracle(cluster).await;
    ModernRun {
        report: RunReport {
            preset,
            client: kind,
            connect,
            calls,
            events,
            oracle,
            settled,
            seconds: started.elapsed().as_secs_f64(),
        },
        reissued,
    }
}
