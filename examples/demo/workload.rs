//! The agent workload of the demo, shared with the end-to-end tests so that they assert on
//! exactly what the demo runs.
//!
//! One run = one preset × one client kind, on a fresh in-process cluster: `initialize` with a
//! non-default sampling temperature, a `slow` call whose stream the balancer cuts, then rounds
//! of `generate`, `prepare`→`commit`, keyed and unkeyed `counter_increment`. Every call carries
//! a unique caller tag in `_meta`; what the client reported for a tag is joined with what the
//! cluster's oracle recorded for it.

// Each includer (the demo, several test crates) uses a different part of this module.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use futures::StreamExt;
use mcp_resume::{Client, ClientBuilder, ErrorKind, ReconnectPolicy, SessionEvent, ToolCall};
use mock_server::context::meta;
use mock_server::{Cluster, ClusterConfig, CutStyle, ExecutionRecord, OracleReport, Preset};
use serde::Serialize;
use serde_json::{json, Value};

/// The sampling temperature negotiated at `initialize` (the mock's default is 1.0).
pub(crate) const TEMPERATURE: f64 = 0.2;

/// Client capabilities every agent negotiates; `generate` reads the temperature.
pub(crate) fn client_capabilities() -> Value {
    json!({"experimental": {"sampling": {"temperature": TEMPERATURE}}})
}

/// The two clients compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum ClientKind {
    /// Behaves like the stock SDKs: trusts replayed streams and clean ends
    /// (`dangerous_trust_replay(true)`).
    StockLike,
    /// The SDK's default, resume-aware behaviour.
    ResumeAware,
    /// rmcp 3.11, the official Rust SDK, as configured by default (driven by `rmcp_client.rs`
    /// next to this file, not by [`run_one`]).
    Rmcp,
    /// The same rmcp code over mcp-resume's `ResumeTransport` (the bridge), with the
    /// resume-aware client's configuration (also driven by `rmcp_client.rs`).
    RmcpBridge,
    /// The modern rows' stock-like client: re-issues every request whose stream broke
    /// (`reissue_client.rs`, driven by `modern.rs`).
    Reissue,
}

impl ClientKind {
    /// Both kinds, in table order.
    pub(crate) const ALL: [ClientKind; 2] = [ClientKind::StockLike, ClientKind::ResumeAware];

    /// Name used in the table and the JSON.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ClientKind::StockLike => "stock-like",
            ClientKind::ResumeAware => "resume-aware",
            ClientKind::Rmcp => "rmcp",
            ClientKind::RmcpBridge => "rmcp+bridge",
            ClientKind::Reissue => "blind-reissue",
        }
    }
}

/// Sizes and timings of a run.
#[derive(Debug, Clone)]
pub(crate) struct WorkloadConfig {
    /// Instances behind the balancer.
    pub instances: usize,
    /// Rounds of generate, prepare→commit, keyed and unkeyed counter_increment.
    pub rounds: usize,
    /// Progress steps of the `slow` call.
    pub slow_steps: u64,
    /// Delay between the `slow` call's steps.
    pub slow_delay_ms: u64,
    /// The balancer cuts every SSE stream after this many events: the `slow` call's stream
    /// (priming event + one event per step) is cut, short calls' streams (priming + response)
    /// are not.
    pub cut_after_events: u32,
    /// Deadline of each call.
    pub call_timeout: Duration,
    /// Seed of the client's reconnect jitter.
    pub jitter_seed: u64,
}

impl Default for WorkloadConfig {
    fn default() -> Self {
        WorkloadConfig {
            instances: 3,
            rounds: 4,
            slow_steps: 6,
            slow_delay_ms: 20,
            cut_after_events: 3,
            call_timeout: Duration::from_secs(3),
            jitter_seed: 7,
        }
    }
}

/// The cluster configuration of a run: the preset with the extension on, its own routing
/// (round-robin except `sticky`), and the cut that hits the `slow` call. The oracle is told
/// the capabilities every client of the workload negotiates: an execution under any others
/// is a wrong capability, whatever its session or request said.
pub(crate) fn cluster_config(preset: Preset, cfg: &WorkloadConfig) -> ClusterConfig {
    ClusterConfig {
        preset,
        instances: cfg.instances,
        extension: true,
        idle_timeout: None,
        cut_after_events: Some(cfg.cut_after_events),
        cut_style: CutStyle::Abort,
        expected_client_capabilities: Some(client_capabilities()),
        ..ClusterConfig::default()
    }
}

/// [`cluster_config`] with the balancer cutting nothing: on `naive`, the wrong answers left
/// are the ones routing alone causes (calls landing on instances that never saw
/// `initialize`), none of them caused by a resumption.
pub(crate) fn uncut_cluster_config(preset: Preset, cfg: &WorkloadConfig) -> ClusterConfig {
    ClusterConfig {
        cut_after_events: None,
        ..cluster_config(preset, cfg)
    }
}

/// Builds the client of `kind` for `url`.
pub(crate) fn build_client(kind: ClientKind, url: &str, cfg: &WorkloadConfig) -> Client {
    configure(Client::builder(url), kind, cfg)
        .build()
        .expect("the demo's client configuration is valid")
}

/// The demo's options for a client of `kind` (the bridge's client too: its host's
/// `initialize` then supplies the capabilities).
pub(crate) fn configure(
    builder: ClientBuilder,
    kind: ClientKind,
    cfg: &WorkloadConfig,
) -> ClientBuilder {
    builder
        .client_capabilities(client_capabilities())
        .call_timeout(cfg.call_timeout)
        .reconnect(
            ReconnectPolicy::default()
                .with_initial_delay(Duration::from_millis(10))
                .with_max_delay(Duration::from_millis(200)),
        )
        .jitter_seed(cfg.jitter_seed)
        .dangerous_trust_replay(kind == ClientKind::StockLike)
}

/// What the client reported for one call.
#[derive(Debug, Clone)]
pub(crate) struct CallRecord {
    /// The unique caller tag sent in `_meta`.
    pub tag: String,
    /// Tool name.
    pub tool: &'static str,
    /// Whether the call carried an idempotency key.
    pub keyed: bool,
    /// `structuredContent` (or `null`) on success, the error kind otherwise.
    pub outcome: Result<Value, ErrorKind>,
    /// Time from the call to its completion.
    pub elapsed: Duration,
    /// On success, the tag the result's `_meta` echoed (None: it echoed none). The cluster
    /// echoes the tag of the call it answered, so an answer echoing another tag, or none, was
    /// not this call's.
    pub echoed_tag: Option<String>,
}

/// The tag a result's `_meta` echoed.
pub(crate) fn echoed_tag(meta: Option<&Value>) -> Option<String> {
    meta.and_then(|m| m.get(meta::TAG))
        .and_then(Value::as_str)
        .map(str::to_owned)
}

/// Why the oracle's record of an execution makes it wrong, if it does.
fn execution_flaw(e: &ExecutionRecord) -> Option<&'static str> {
    if e.wrong_capability {
        Some("ran under the wrong capabilities")
    } else if e.unknown_record {
        Some("ran against an unknown record")
    } else if e.duplicate_side_effect {
        Some("ran its side effect twice")
    } else {
        None
    }
}

/// Why a call the client reported as a success is a silent wrong answer, or None when it is
/// not one (or did not succeed): its answer echoed another tag than the call's own, or none
/// (it was handed another call's answer); nothing ran under its tag (the answer cannot be
/// its own); one of its executions ran under the wrong capabilities, against an unknown
/// record, or repeated a side effect; or it is a `generate` whose temperature is not the
/// negotiated [`TEMPERATURE`].
pub(crate) fn wrong_answer(call: &CallRecord, oracle: &OracleReport) -> Option<String> {
    let Ok(value) = &call.outcome else {
        return None;
    };
    if call.echoed_tag.as_deref() != Some(call.tag.as_str()) {
        return Some(format!("answer echoed tag {:?}", call.echoed_tag));
    }
    let mut ran = false;
    for e in oracle.executions_tagged(&call.tag) {
        ran = true;
        if let Some(flaw) = execution_flaw(e) {
            return Some(format!("instance {} {flaw}", e.instance));
        }
    }
    if !ran {
        return Some("no execution recorded under its tag".to_owned());
    }
    if call.tool == "generate" && value.get("temperature") != Some(&json!(TEMPERATURE)) {
        return Some(format!("generated at temperature {}", value["temperature"]));
    }
    None
}

/// Everything a run produced: the client's view, its events, and the oracle's truth.
#[derive(Debug, Clone)]
pub(crate) struct RunReport {
    /// Preset of the cluster.
    pub preset: Preset,
    /// Client kind.
    pub client: ClientKind,
    /// Result of `connect`, as the error kind if it failed.
    pub connect: Result<(), ErrorKind>,
    /// Every tool call, in order.
    pub calls: Vec<CallRecord>,
    /// Every session event the client reported.
    pub events: Vec<SessionEvent>,
    /// What really happened.
    pub oracle: OracleReport,
    /// Whether the cluster went idle before the oracle was read: when not, an execution
    /// still starting may be missing from it.
    pub settled: bool,
    /// Wall time of the run (cluster start to shutdown).
    pub seconds: f64,
}

/// The oracle once the cluster is idle (calls cut off from their client may still be
/// running, and their executions count too), and whether it went idle in time; then the
/// cluster is shut down.
pub(crate) async fn final_oracle(cluster: Cluster) -> (OracleReport, bool) {
    let settled = cluster.wait_idle(Duration::from_secs(5)).await;
    let oracle = cluster.oracle();
    cluster.shutdown().await;
    (oracle, settled)
}

/// Unique tag of the `n`-th call of a run.
pub(crate) fn tag(preset: Preset, kind: ClientKind, n: usize, tool: &str) -> String {
    format!("{}/{}/{n:03}-{tool}", preset.as_str(), kind.as_str())
}

/// The workload's caller on mcp-resume: each call tagged, keyed when asked, recorded with
/// what the client reported.
pub(crate) struct Agent<'a> {
    client: &'a Client,
    preset: Preset,
    kind: ClientKind,
    calls: Vec<CallRecord>,
}

impl<'a> Agent<'a> {
    /// An agent making the calls of `kind`'s run on `preset` through `client`.
    pub(crate) fn new(client: &'a Client, preset: Preset, kind: ClientKind) -> Self {
        Self {
            client,
            preset,
            kind,
            calls: Vec::new(),
        }
    }

    /// The calls made so far, in order.
    pub(crate) fn calls(&self) -> &[CallRecord] {
        &self.calls
    }

    /// The calls made, in order.
    pub(crate) fn into_calls(self) -> Vec<CallRecord> {
        self.calls
    }
}

/// One workload call through mcp-resume: `tag` in its `_meta` (and as its progress token when
/// `progress`), a fresh idempotency key when `keyed`; `structuredContent` and the tag the
/// result echoed, or the error's kind.
pub(crate) async fn call_tagged(
    client: &Client,
    tool: &str,
    args: Value,
    tag: &str,
    keyed: bool,
    progress: bool,
) -> Result<(Value, Option<String>), ErrorKind> {
    let mut call = ToolCall::new(tool, args).meta(meta::TAG, json!(tag));
    if keyed {
        call = call.random_idempotency_key();
    }
    if progress {
        call = call.progress_token(tag);
    }
    client
        .call_tool(call)
        .await
        .map(|r| {
            let echoed = echoed_tag(r.meta.as_ref());
            (r.structured_content.unwrap_or(Value::Null), echoed)
        })
        .map_err(|e| e.kind())
}

impl WorkloadCaller for Agent<'_> {
    async fn call(&mut self, tool: &'static str, args: Value, keyed: bool) -> Option<Value> {
        let tag = tag(self.preset, self.kind, self.calls.len(), tool);
        let started = Instant::now();
        let answer = call_tagged(self.client, tool, args, &tag, keyed, tool == "slow").await;
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

/// Runs the workload for one preset and one client kind on a fresh cluster.
pub(crate) async fn run_one(preset: Preset, kind: ClientKind, cfg: &WorkloadConfig) -> RunReport {
    run_one_on(cluster_config(preset, cfg), kind, cfg).await
}

/// [`run_one`] on a fresh cluster started with `config`.
pub(crate) async fn run_one_on(
    config: ClusterConfig,
    kind: ClientKind,
    cfg: &WorkloadConfig,
) -> RunReport {
    assert!(
        !matches!(kind, ClientKind::Rmcp | ClientKind::RmcpBridge),
        "rmcp runs are driven by rmcp_client.rs"
    );
    let preset = config.preset;
    let started = Instant::now();
    let cluster = Cluster::start(config)
        .await
        .expect("the cluster starts on 127.0.0.1");
    let client = build_client(kind, &cluster.url(), cfg);
    let events = EventCollector::start(client.events());

    let connect = client.connect().await.map(drop).map_err(|e| e.kind());
    let mut agent = Agent::new(&client, preset, kind);
    if connect.is_ok() {
        run_calls(&mut agent, cfg).await;
    }
    let calls = agent.into_calls();
    let _ = tokio::time::timeout(Duration::from_secs(5), client.close()).await;
    drop(client);
    // The last handle is gone: the driver stops and the event stream ends.
    let events = events.finish().await;
    let (oracle, settled) = final_oracle(cluster).await;
    RunReport {
        preset,
        client: kind,
        connect,
        calls,
        events,
        oracle,
        settled,
        seconds: started.elapsed().as_secs_f64(),
    }
}

/// Gathers a client's session events while it runs.
pub(crate) struct EventCollector(tokio::task::JoinHandle<Vec<SessionEvent>>);

impl EventCollector {
    pub(crate) fn start(mut events: mcp_resume::EventStream) -> Self {
        EventCollector(tokio::spawn(async move {
            let mut seen = Vec::new();
            while let Some(event) = events.next().await {
                seen.push(event);
            }
            seen
        }))
    }

    /// The events, once the stream ended (the client's last handle is gone); what came
    /// within 10 s if it did not.
    pub(crate) async fn finish(self) -> Vec<SessionEvent> {
        tokio::time::timeout(Duration::from_secs(10), self.0)
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or_default()
    }
}

/// How a driver of another SDK makes one call of the workload, so that it runs the very
/// sequence [`run_one`] runs (see [`run_calls`]).
pub(crate) trait WorkloadCaller {
    /// Calls `tool` with `args` under the next tag (a fresh idempotency key when `keyed`),
    /// records what the client reported, and returns `structuredContent` on success.
    fn call(
        &mut self,
        tool: &'static str,
        args: Value,
        keyed: bool,
    ) -> impl std::future::Future<Output = Option<Value>>;
}

/// The workload's calls after `initialize`, in the order [`run_one`] makes them.
pub(crate) async fn run_calls(caller: &mut impl WorkloadCaller, cfg: &WorkloadConfig) {
    caller
        .call(
            "slow",
            json!({"steps": cfg.slow_steps, "delay_ms": cfg.slow_delay_ms}),
            true,
        )
        .await;
    for round in 0..cfg.rounds {
        caller
            .call(
                "generate",
                json!({"prompt": format!("summary {round}")}),
                false,
            )
            .await;
        let prepared = caller
            .call("prepare", json!({"item": format!("order-{round}")}), true)
            .await;
        let record = prepared
            .as_ref()
            .and_then(|v| v.get("record"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        if let Some(record) = record {
            caller.call("commit", json!({"record": record}), true).await;
        }
        caller.call("counter_increment", json!({}), true).await;
        caller.call("counter_increment", json!({}), false).await;
    }
}

/// Runs every preset for both clients, one after the other (wall times stay comparable).
pub(crate) async fn run_all(cfg: &WorkloadConfig) -> Vec<RunReport> {
    let mut reports = Vec::new();
    for preset in Preset::ALL {
        for kind in ClientKind::ALL {
            reports.push(run_one(preset, kind, cfg).await);
        }
    }
    reports
}

/// One line of the table / one element of the JSON `rows`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Row {
    /// Preset name.
    pub preset: String,
    /// Client kind name.
    pub client: String,
    /// Tool calls made.
    pub calls: u64,
    /// Calls that ended in success.
    pub ok: u64,
    /// Calls the client reported as success with a wrong answer ([`wrong_answer`]): another
    /// call's answer, or none of its own ran, or the oracle recorded for its tag an execution
    /// under the wrong capabilities, against an unknown record, or a duplicate side effect,
    /// or a `generate` at another temperature than negotiated.
    pub silent_wrong: u64,
    /// Oracle: executions of this run's calls under the wrong capabilities.
    pub wrong_capability: u64,
    /// Oracle: dependent calls executed against unknown records.
    pub unknown_record: u64,
    /// Oracle: side effects executed more than once for one tag.
    pub duplicate_side_effects: u64,
    /// Oracle: duplicate side effects of keyed calls.
    pub duplicate_keyed: u64,
    /// Oracle: executions of unkeyed requests beyond their first (an unkeyed call sent
    /// again and run again).
    pub rerun: u64,
    /// Oracle: `initialize` requests beyond the first.
    pub reinitializations: u64,
    /// Client: `Reinitialized` events it reported.
    pub reinitialized_events: u64,
    /// Client: calls re-sent (`Redispatched` events).
    pub resent: u64,
    /// Client: calls that ended with `OutcomeUnknown`.
    pub outcome_unknown: u64,
    /// Client: calls that ended with an error, by error kind.
    pub errors: BTreeMap<String, u64>,
    /// Oracle: resumes honored by another instance than the stream's owner.
    pub cross_instance_resumes: u64,
    /// Oracle: resumes rejected, all reasons.
    pub rejected_resumes: u64,
    /// Whether the cluster went idle before the oracle was read (when not, the oracle's
    /// counts may be short of a late execution: shown in the table).
    pub settled: bool,
    /// Wall time of the run.
    pub seconds: f64,
}

/// Joins the client's view of each call with the oracle's records for its tag.
pub(crate) fn row(report: &RunReport) -> Row {
    let oracle = &report.oracle;
    let mut row = Row {
        preset: report.preset.as_str().to_owned(),
        client: report.client.as_str().to_owned(),
        calls: report.calls.len() as u64,
        ok: 0,
        silent_wrong: 0,
        wrong_capability: 0,
        unknown_record: 0,
        duplicate_side_effects: 0,
        duplicate_keyed: 0,
        rerun: oracle.totals.repeated_unkeyed_executions,
        reinitializations: oracle.totals.initializes.saturating_sub(1),
        reinitialized_events: 0,
        resent: 0,
        outcome_unknown: 0,
        errors: BTreeMap::new(),
        cross_instance_resumes: oracle.totals.cross_instance_resumes,
        rejected_resumes: oracle.totals.rejections.values().sum(),
        settled: report.settled,
        seconds: (report.seconds * 100.0).round() / 100.0,
    };
    if let Err(kind) = report.connect {
        *row.errors.entry(format!("connect:{kind}")).or_default() += 1;
    }
    for call in &report.calls {
        for exec in oracle.executions_tagged(&call.tag) {
            row.wrong_capability += u64::from(exec.wrong_capability);
            row.unknown_record += u64::from(exec.unknown_record);
            row.duplicate_side_effects += u64::from(exec.duplicate_side_effect);
            if call.keyed {
                row.duplicate_keyed += u64::from(exec.duplicate_side_effect);
            }
        }
        match call.outcome {
            Ok(_) => {
                row.ok += 1;
                row.silent_wrong += u64::from(wrong_answer(call, oracle).is_some());
            }
            Err(kind) => {
                *row.errors.entry(kind.as_str().to_owned()).or_default() += 1;
                row.outcome_unknown += u64::from(kind == ErrorKind::OutcomeUnknown);
            }
        }
    }
    for event in &report.events {
        match event {
            SessionEvent::Reinitialized { .. } => row.reinitialized_events += 1,
            SessionEvent::Redispatched { .. } => row.resent += 1,
            _ => {}
        }
    }
    row
}

/// The header and one line per row, in the table's columns.
fn render_rows(rows: &[Row]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<10} {:<12} {:>5} {:>4} {:>6} | {:>5} {:>6} {:>5} {:>5} | {:>7} {:>6} {:>7} {:>6} | {:<28}",
        "preset",
        "client",
        "calls",
        "ok",
        "SILENT",
        "wcap",
        "unkrec",
        "dup",
        "rerun",
        "re-init",
        "resent",
        "unknown",
        "secs",
        "explicit errors by kind",
    );
    let _ = writeln!(out, "{}", "-".repeat(130));
    for r in rows {
        let mut errors = if r.errors.is_empty() {
            "-".to_owned()
        } else {
            r.errors
                .iter()
                .map(|(k, n)| format!("{k}={n}"))
                .collect::<Vec<_>>()
                .join(" ")
        };
        if !r.settled {
            errors.push_str(" [cluster still busy: oracle counts may be short]");
        }
        let _ = writeln!(
            out,
            "{:<10} {:<12} {:>5} {:>4} {:>6} | {:>5} {:>6} {:>5} {:>5} | {:>7} {:>6} {:>7} {:>6.2} | {}",
            r.preset,
            r.client,
            r.calls,
            r.ok,
            r.silent_wrong,
            r.wrong_capability,
            r.unknown_record,
            r.duplicate_side_effects,
            r.rerun,
            r.reinitializations,
            r.resent,
            r.outcome_unknown,
            r.seconds,
            errors,
        );
    }
    out
}

/// Silent wrong answers summed per client, clients in the order they first appear.
fn silent_totals(rows: &[Row]) -> String {
    let mut totals: Vec<(&str, u64)> = Vec::new();
    for r in rows {
        match totals.iter_mut().find(|(client, _)| *client == r.client) {
            Some((_, n)) => *n += r.silent_wrong,
            None => totals.push((&r.client, r.silent_wrong)),
        }
    }
    totals
        .iter()
        .map(|(client, n)| format!("{client} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The human-readable table.
pub(crate) fn render_table(rows: &[Row]) -> String {
    let mut out = render_rows(rows);
    let _ = writeln!(
        out,
        "\nSilent wrong answers in total: {}.",
        silent_totals(rows)
    );
    let _ = writeln!(
        out,
        "\nSILENT: the client said success, and the answer was another call's (its tag), none of \
         its own ran, the oracle says the call ran under the wrong capabilities, against an \
         unknown record, or twice, or a generate answered at another temperature than \
         negotiated.\nwcap/unkrec/dup: oracle counts \
         for the run's calls. rerun: unkeyed requests a server ran more than once (oracle). \
         re-init: initialize requests beyond the first (oracle).\n\
         resent/unknown: calls re-sent / ended OutcomeUnknown (client; rmcp: tools/call POSTs \
         of a tag beyond its first).\ndeadline: the demo's deadline ended an rmcp call (rmcp \
         sets none by default)."
    );
    out
}

/// The table of the 2026-07-28 runs.
pub(crate) fn render_modern_table(rows: &[Row]) -> String {
    let mut out = String::from(
        "modern era (2026-07-28): the same presets in ClusterEra::Modern (stateless, nothing \
         to resume); a keyed slow call cut after 3 events, two counter_increment calls whose \
         instance crashes after the increment:\n",
    );
    out.push_str(&render_rows(rows));
    let _ = writeln!(
        out,
        "\nSilent wrong answers in total: {}.",
        silent_totals(rows)
    );
    let _ = writeln!(
        out,
        "blind-reissue: re-issues every request whose stream broke (the changelog's rule, read \
         literally). resent: its re-issues / mcp-resume's Redispatched events.\nunknown: \
         interrupted calls mcp-resume could not prove safe to re-issue (OutcomeUnknown)."
    );
    out
}

/// The table of runs on `naive` with the balancer cutting nothing: what routing alone does.
pub(crate) fn render_uncut_table(rows: &[Row]) -> String {
    let mut out = String::from(
        "naive with the balancer cutting nothing (no stream is cut, nothing is resumed):\n",
    );
    out.push_str(&render_rows(rows));
    out
}

/// The JSON document printed by `--json`.
pub(crate) fn render_json(rows: &[Row]) -> String {
    serde_json::to_string_pretty(&json!({ "rows": rows })).expect("rows serialize")
}

/// The JSON document printed by `--json`: the legacy rows, `naive` uncut, the modern rows.
pub(crate) fn render_json_document(
    rows: &[Row],
    uncut_rows: &[Row],
    modern_rows: &[Row],
) -> String {
    serde_json::to_string_pretty(&json!({
        "rows": rows,
        "naive_uncut_rows": uncut_rows,
        "modern_rows": modern_rows,
    }))
    .expect("rows serialize")
}

/// One line per call: the client's outcome next to the oracle's records for its tag.
pub(crate) fn render_calls(report: &RunReport) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "== {} / {}", report.preset, report.client.as_str());
    for call in &report.calls {
        let outcome = match (&call.outcome, wrong_answer(call, &report.oracle)) {
            (Ok(v), None) => format!("ok {v}"),
            (Ok(v), Some(why)) => format!("ok {v} WRONG: {why}"),
            (Err(kind), _) => format!("error {kind}"),
        };
        let execs: Vec<String> = report
            .oracle
            .executions_tagged(&call.tag)
            .map(|e| {
                let mut flags = Vec::new();
                if e.wrong_capability {
                    flags.push("WRONG-CAPABILITY");
                }
                if e.unknown_record {
                    flags.push("UNKNOWN-RECORD");
                }
                if e.duplicate_side_effect {
                    flags.push("DUPLICATE");
                }
                format!("i{}[{}]", e.instance, flags.join(","))
            })
            .collect();
        let _ = writeln!(
            out,
            "{:<44} {:<5} {:<40} ran: {}",
            call.tag,
            if call.keyed { "keyed" } else { "" },
            outcome,
            execs.join(" ")
        );
    }
    for event in &report.events {
        let _ = writeln!(out, "   event: {event:?}");
    }
    out
}
