//! Chaos soak: many concurrent agents, each with its own client, thousands of calls through
//! the mock cluster under seeded random cuts, idle timeouts and instance restarts, on every
//! preset. The recovery invariants are checked against the cluster's oracle:
//!
//! Agents mostly call one at a time, with occasional bursts of concurrent calls.
//!
//! - every call ends exactly once (result or typed error) within its deadline plus slack;
//! - every successful result echoes the tag of the call that received it (an answer
//!   delivered to another call is a violation);
//! - no side effect (`prepare`, `commit`, `counter_increment`) runs twice for one call, keyed
//!   or not (the server advertises idempotency; unkeyed calls are never re-sent);
//! - no unkeyed call runs twice;
//! - no silent wrong answer, by the demo's rule (`workload::wrong_answer`): no success for a
//!   call nothing ran for, that ran under the wrong capabilities or repeated a side effect,
//!   for a commit that ran against an unknown record in the very session that prepared it, or
//!   for a `generate` at another temperature than the one every agent negotiates;
//! - on every preset but `naive`, nothing runs under a wrong context at all. The cluster is
//!   told the capabilities every agent is configured with, so in either era a context without
//!   them is a wrong one, whatever its session or its request carried;
//! - the faults bit, by the cluster's own counts: on every preset an instance was restarted,
//!   a call was picked up after an interruption (a resumed stream, or a keyed re-send answered
//!   from the idempotency store), and most calls succeeded (a tenth on legacy `naive`, whose
//!   wrong contexts fail most calls by design; four fifths elsewhere).
//!
//! The oracle's totals are never capped, so the checks that can be made from them (side
//! effects run twice, unkeyed calls run twice, wrong contexts outside `naive`) always run.
//! The per-call joins need every execution record; the oracle keeps a limited number
//! (`MCP_RESUME_SOAK_RECORD_LIMIT`, default the cluster's 200,000) and says how many it
//! dropped. A run that dropped records fails, saying so, unless `MCP_RESUME_SOAK_CHECK=totals`
//! accepts that the per-call joins are skipped (the run then says they were).
//!
//! Sizes: `MCP_RESUME_SOAK_CALLS` (total calls over all presets, default 6400),
//! `MCP_RESUME_SOAK_SECS` (minimum seconds per preset, default 0), `MCP_RESUME_SOAK_SEED`
//! (default: from the clock). The seed is printed on failure.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mcp_resume::{Client, Era, ErrorKind, ReconnectPolicy, RpcError, ToolCall};
use mock_server::context::{meta, modern_meta};
use mock_server::{
    Cluster, ClusterConfig, ClusterEra, CutStyle, OracleReport, OracleTotals, Preset,
};
use serde_json::{json, Value};

use crate::workload::{self, CallRecord};

const AGENTS: usize = 8;
const CALL_TIMEOUT: Duration = Duration::from_secs(3);
/// A call must end within its deadline plus this (the client's own guard adds 2 s; the rest
/// absorbs scheduling on a loaded 2-core machine).
const SLACK: Duration = Duration::from_secs(4);

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

/// Prints the seed and sizes if the test fails, so the run can be repeated.
struct SeedReport {
    seed: u64,
    what: String,
}

impl Drop for SeedReport {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "chaos soak failed: rerun with MCP_RESUME_SOAK_SEED={} ({})",
                self.seed, self.what
            );
        }
    }
}

/// SplitMix64: small, seedable, good enough to pick tools and fault timings.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// What the per-call checks need from the oracle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CheckMode {
    /// Totals, and every per-call join: a run whose oracle dropped records fails.
    Records,
    /// Totals; the per-call joins only while the oracle kept every record.
    Totals,
}

impl CheckMode {
    fn from_env() -> Self {
        match std::env::var("MCP_RESUME_SOAK_CHECK").as_deref() {
            Ok("totals") => CheckMode::Totals,
            Ok("records") | Err(_) => CheckMode::Records,
            Ok(other) => panic!("MCP_RESUME_SOAK_CHECK={other:?}: expected `records` or `totals`"),
        }
    }
}

/// How a failed call ended, as counted in the report: the error kind, and for `rpc` the
/// JSON-RPC code and the `error.data.code` the server gave, if any.
fn error_label(kind: ErrorKind, rpc: Option<&RpcError>) -> String {
    match (kind, rpc) {
        (ErrorKind::Rpc, Some(rpc)) => {
            match rpc
                .data
                .as_ref()
                .and_then(|d| d.get("code"))
                .and_then(Value::as_str)
            {
                Some(code) => format!("rpc({}/{code})", rpc.code),
                None => format!("rpc({})", rpc.code),
            }
        }
        (kind, _) => kind.as_str().to_owned(),
    }
}

/// One call as the client saw it: the demo's record of it (what the demo's rule,
/// [`workload::wrong_answer`], judges), and what the soak adds.
struct Outcome {
    call: CallRecord,
    /// `ok`, the error kind, or the named JSON-RPC error.
    label: String,
    /// The call's future did not end within deadline + slack.
    hung: bool,
    /// For a `commit`, the tag of the `prepare` whose record it commits.
    depends_on: Option<String>,
}

async fn one_call(
    client: &Client,
    tag: String,
    tool: &'static str,
    args: Value,
    keyed: bool,
) -> Outcome {
    let mut call = ToolCall::new(tool, args)
        .meta(meta::TAG, json!(tag))
        .timeout(CALL_TIMEOUT);
    if tool == "slow" {
        // A step per event (in the 2026-07-28 era only when log messages are asked for): a
        // stream the cluster's random cuts can break before its answer, in either era.
        call = call.meta(modern_meta::LOG_LEVEL, json!("info"));
    }
    if keyed {
        call = call.random_idempotency_key();
    }
    let started = Instant::now();
    let res = tokio::time::timeout(CALL_TIMEOUT + SLACK, client.call_tool(call)).await;
    let elapsed = started.elapsed();
    let (outcome, label, echoed_tag, hung) = match res {
        Ok(Ok(r)) => {
            let echoed = workload::echoed_tag(r.meta.as_ref());
            let value = r.structured_content.unwrap_or(Value::Null);
            (Ok(value), "ok".to_owned(), echoed, false)
        }
        Ok(Err(e)) => {
            let label = error_label(e.kind(), e.rpc_error());
            (Err(e.kind()), label, None, false)
        }
        Err(_) => {
            let label = error_label(ErrorKind::Timeout, None);
            (Err(ErrorKind::Timeout), label, None, true)
        }
    };
    Outcome {
        call: CallRecord {
            tag,
            tool,
            keyed,
            outcome,
            elapsed,
            echoed_tag,
        },
        label,
        hung,
        depends_on: None,
    }
}

async fn agent(
    url: String,
    era: ClusterEra,
    preset: Preset,
    id: usize,
    seed: u64,
    calls: usize,
    min_time: Duration,
) -> Vec<Outcome> {
    let mut rng = Rng(seed ^ (id as u64).wrapping_mul(0xA076_1D64_78BD_642F));
    let client = Client::builder(url)
        .client_capabilities(workload::client_capabilities())
        .call_timeout(CALL_TIMEOUT)
        .reconnect(
            ReconnectPolicy::default()
                .with_initial_delay(Duration::from_millis(10))
                .with_max_delay(Duration::from_millis(250)),
        )
        .jitter_seed(rng.next())
        .era(client_era(era))
        .build()
        .expect("valid configuration");
    let started = Instant::now();
    let mut out = Vec::with_capacity(calls);
    while out.len() < calls || started.elapsed() < min_time {
        let n = out.len();
        let tag = |tool: &str| format!("{era}/{preset}/a{id}/{n:05}-{tool}");
        let (tool, args, keyed): (&'static str, Value, bool) = match rng.below(10) {
            0 | 1 => ("echo", json!({"text": "hi"}), false),
            2 | 3 => ("generate", json!({"prompt": "p"}), false),
            // 2026-07-28 streams are never resumed: more steps, more chances for a cut to land
            // before the answer and for a keyed call's re-send to be answered from the store.
            4 => (
                "slow",
                json!({"steps": if era == ClusterEra::Modern { 6 } else { 3 }, "delay_ms": 15}),
                rng.below(2) == 0,
            ),
            5 | 6 => ("counter_increment", json!({}), true),
            7 => ("counter_increment", json!({}), false),
            _ => ("prepare", json!({"item": n}), rng.below(2) == 0),
        };
        if rng.below(12) == 0 {
            // A burst of concurrent calls on the same session: one of them meeting a fault
            // must not change how the others' answers are judged.
            let burst = (0..3).map(|b| {
                let (tool, args, keyed) = match rng.below(3) {
                    0 => ("generate", json!({"prompt": "b"}), false),
                    1 => ("echo", json!({"text": "b"}), false),
                    _ => ("counter_increment", json!({}), true),
                };
                one_call(&client, format!("{}-b{b}", tag(tool)), tool, args, keyed)
            });
            out.extend(futures::future::join_all(burst).await);
            continue;
        }
        let outcome = one_call(&client, tag(tool), tool, args, keyed).await;
        let record = outcome
            .call
            .outcome
            .as_ref()
            .ok()
            .and_then(|v| v["record"].as_str().map(str::to_owned));
        out.push(outcome);
        if tool == "prepare" {
            if let Some(record) = record {
                let keyed = rng.below(2) == 0;
                let args = json!({"record": record});
                let mut o = one_call(&client, tag("commit") + "c", "commit", args, keyed).await;
                o.depends_on = Some(tag(tool));
                out.push(o);
            }
        }
    }
    let _ = tokio::time::timeout(Duration::from_secs(5), client.close()).await;
    out
}

/// Kills and restarts instances until told to stop; returns how many restarts it did.
async fn restarter(cluster: Arc<Cluster>, seed: u64, stop: Arc<AtomicBool>) -> u64 {
    let mut rng = Rng(seed ^ 0x5EED);
    let mut restarts = 0;
    // The sleeps are the fault schedule, not synchronisation.
    while !stop.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(60 + rng.below(200))).await;
        let i = rng.below(cluster.instances() as u64) as usize;
        if cluster.kill_instance(i).await {
            tokio::time::sleep(Duration::from_millis(20 + rng.below(100))).await;
            cluster.restart_instance(i).await.expect("restart");
            restarts += 1;
        }
    }
    restarts
}

struct PresetRun {
    outcomes: Vec<Outcome>,
    oracle: OracleReport,
    restarts: u64,
    seconds: f64,
}

/// The era the client is told to speak: the cluster's, without a probe.
fn client_era(era: ClusterEra) -> Era {
    match era {
        ClusterEra::Modern => Era::Modern,
        ClusterEra::Legacy | ClusterEra::Dual => Era::Legacy,
    }
}

async fn soak_preset(
    era: ClusterEra,
    preset: Preset,
    seed: u64,
    calls_per_agent: usize,
    min_time: Duration,
    record_limit: usize,
) -> PresetRun {
    let started = Instant::now();
    let mut rng = Rng(seed ^ preset as u64);
    let config = ClusterConfig {
        preset,
        era,
        instances: 3,
        extension: true,
        idle_timeout: Some(Duration::from_millis(300 + rng.below(300))),
        random_cut: Some((rng.next(), 0.05)),
        cut_style: if rng.below(2) == 0 {
            CutStyle::Abort
        } else {
            CutStyle::CleanEnd
        },
        oracle_record_limit: record_limit,
        // The capabilities every agent is configured with: in either era an execution under
        // any others is a wrong capability, whatever its session or its request carried.
        expected_client_capabilities: Some(workload::client_capabilities()),
        ..ClusterConfig::default()
    };
    let cluster = Arc::new(Cluster::start(config).await.expect("cluster starts"));
    let stop = Arc::new(AtomicBool::new(false));
    let chaos = tokio::spawn(restarter(cluster.clone(), rng.next(), stop.clone()));
    let agents: Vec<_> = (0..AGENTS)
        .map(|id| {
            tokio::spawn(agent(
                cluster.url(),
                era,
                preset,
                id,
                seed ^ rng.next(),
                calls_per_agent,
                min_time,
            ))
        })
        .collect();
    let mut outcomes = Vec::new();
    for a in agents {
        outcomes.extend(a.await.expect("agent task"));
    }
    stop.store(true, Ordering::Relaxed);
    let restarts = chaos.await.expect("restarter task");
    // Calls cut off from their clients may still be running: let them end before judging.
    assert!(
        cluster.wait_idle(Duration::from_secs(30)).await,
        "{era}/{preset}: executions never ended"
    );
    let oracle = cluster.oracle();
    if let Ok(cluster) = Arc::try_unwrap(cluster) {
        cluster.shutdown().await;
    }
    PresetRun {
        outcomes,
        oracle,
        restarts,
        seconds: started.elapsed().as_secs_f64(),
    }
}

/// The side-effect tools of the mock (see its README, "Tools").
fn has_side_effect(tool: &str) -> bool {
    matches!(tool, "prepare" | "commit" | "counter_increment")
}

/// What the checks found for one preset's run.
#[derive(Debug, Default)]
struct Judgement {
    violations: Vec<String>,
    /// Whether the per-call joins with the oracle's records ran.
    joined: bool,
}

/// Checks that need only the oracle's totals, which are never capped.
fn check_totals(era: ClusterEra, preset: Preset, t: &OracleTotals, v: &mut Vec<String>) {
    if t.duplicate_side_effects > 0 {
        v.push(format!(
            "{preset}: {} side effects ran twice for one call (oracle totals)",
            t.duplicate_side_effects
        ));
    }
    if t.repeated_unkeyed_executions > 0 {
        v.push(format!(
            "{preset}: {} unkeyed calls ran more than once (oracle totals)",
            t.repeated_unkeyed_executions
        ));
    }
    // Every legacy preset but `naive` serves a session correctly from any instance, so nothing
    // may run under a context other than the negotiated one, whatever the client does. In the
    // 2026-07-28 era every request carries its own context and `prepare` handles live in the
    // shared store: nothing may run under a wrong context on any preset, `naive` included.
    let context_is_shared = preset != Preset::Naive || era == ClusterEra::Modern;
    if context_is_shared && (t.wrong_capability > 0 || t.unknown_record > 0) {
        v.push(format!(
            "{preset}: {} executions under the wrong capabilities, {} against unknown \
             records (oracle totals)",
            t.wrong_capability, t.unknown_record
        ));
    }
}

/// The §4 invariants for one preset's run.
fn judge(era: ClusterEra, preset: Preset, run: &PresetRun, mode: CheckMode) -> Judgement {
    let mut v = Vec::new();
    let t = &run.oracle.totals;
    check_totals(era, preset, t, &mut v);
    for o in &run.outcomes {
        let c = &o.call;
        if o.hung {
            v.push(format!("{preset}: {} never ended", c.tag));
        } else if c.elapsed > CALL_TIMEOUT + SLACK {
            v.push(format!("{preset}: {} ended after {:?}", c.tag, c.elapsed));
        }
        if c.outcome.is_ok() && c.echoed_tag.as_deref() != Some(c.tag.as_str()) {
            v.push(format!(
                "{preset}: {} got the result of another call (it echoes tag {:?})",
                c.tag, c.echoed_tag
            ));
        }
    }
    if !run.oracle.executions_complete() {
        let kept = run.oracle.executions.len();
        if mode == CheckMode::Records {
            v.push(format!(
                "{preset}: per-call checks incomplete: the oracle kept {kept} of {} execution \
                 records ({} dropped at its limit), so silent wrong answers, commits of \
                 unknown records and repeated calls cannot be joined per call. \
                 Make the run smaller (MCP_RESUME_SOAK_CALLS / MCP_RESUME_SOAK_SECS), raise \
                 MCP_RESUME_SOAK_RECORD_LIMIT, or accept totals-only checks with \
                 MCP_RESUME_SOAK_CHECK=totals",
                t.executions, t.execution_records_dropped
            ));
        }
        return Judgement {
            violations: v,
            joined: false,
        };
    }
    let mut execs: BTreeMap<&str, Vec<&mock_server::ExecutionRecord>> = BTreeMap::new();
    for e in &run.oracle.executions {
        if let Some(tag) = e.tag.as_deref() {
            execs.entry(tag).or_default().push(e);
        }
    }
    for o in &run.outcomes {
        let c = &o.call;
        let ran = execs.get(c.tag.as_str()).map(Vec::as_slice).unwrap_or(&[]);
        if !c.keyed && ran.len() > 1 {
            v.push(format!(
                "{preset}: unkeyed {} ran {} times",
                c.tag,
                ran.len()
            ));
        } else if let Some(e) = ran.iter().find(|e| e.duplicate_side_effect) {
            v.push(format!(
                "{preset}: keyed {} ran its side effect twice (again on instance {})",
                c.tag, e.instance
            ));
        }
        if ran.iter().any(|e| e.side_effect != has_side_effect(c.tool)) {
            v.push(format!(
                "{preset}: the oracle's side-effect mark of {} disagrees with the tool list",
                c.tag
            ));
        }
        // A success whose answer is another call's was counted above.
        if c.outcome.is_err() || c.echoed_tag.as_deref() != Some(c.tag.as_str()) {
            continue;
        }
        // A commit against an unknown record is a wrong answer the client could have caught
        // only if it ran in the session that prepared the record: a commit on a later
        // session (after a re-initialization) is the application's business, and its
        // unknown record is not held against the call.
        let prepared_in: Vec<&str> = o
            .depends_on
            .as_deref()
            .and_then(|p| execs.get(p))
            .map(|es| es.iter().map(|e| e.session.as_str()).collect())
            .unwrap_or_default();
        let own = OracleReport {
            executions: ran
                .iter()
                .map(|e| mock_server::ExecutionRecord {
                    unknown_record: e.unknown_record && prepared_in.contains(&e.session.as_str()),
                    ..(*e).clone()
                })
                .collect(),
            ..OracleReport::default()
        };
        // The demo's rule, over this call's own executions: nothing ran under its tag, one
        // of its runs was flagged (wrong capabilities, unknown record, a side effect again),
        // or a `generate` answered at another temperature than the negotiated one.
        if let Some(why) = workload::wrong_answer(c, &own) {
            v.push(format!(
                "{preset}: {} reported success but is a silent wrong answer: {why}",
                c.tag
            ));
        }
    }
    Judgement {
        violations: v,
        joined: true,
    }
}

/// Whether the run's faults bit, from the cluster's own counts rather than what the clients
/// believe: a soak whose instances never restarted, or whose calls were never interrupted and
/// picked up again (a stream resumed, a keyed re-send answered from the idempotency store),
/// proves nothing about recovery. And enough calls succeeded: a run that fails everything
/// breaks no invariant either.
fn check_faults_bit(era: ClusterEra, preset: Preset, run: &PresetRun) -> Vec<String> {
    let mut v = Vec::new();
    let t = &run.oracle.totals;
    if run.restarts == 0 {
        v.push(format!(
            "{era}/{preset}: no instance was restarted (a run this short proves nothing of \
             restarts: raise MCP_RESUME_SOAK_CALLS or MCP_RESUME_SOAK_SECS)"
        ));
    }
    // A rejected resume picked nothing up: only a stream replayed, or a keyed re-send
    // answered from the store, shows a call taken up again.
    if t.honored_resumes + t.idempotent_replays == 0 {
        v.push(format!(
            "{era}/{preset}: no call was picked up after an interruption (the cluster honored \
             no resume of the {} it saw and answered no keyed re-send from its store)",
            t.resumes
        ));
    }
    let ok = run
        .outcomes
        .iter()
        .filter(|o| o.call.outcome.is_ok())
        .count();
    // Legacy `naive` serves a session from any instance under whatever context it finds
    // there: most calls fail `context_mismatch` by design.
    let floor = if era == ClusterEra::Legacy && preset == Preset::Naive {
        run.outcomes.len() / 10
    } else {
        run.outcomes.len() * 4 / 5
    };
    if ok < floor {
        v.push(format!(
            "{era}/{preset}: {ok} of {} calls succeeded, fewer than {floor}",
            run.outcomes.len()
        ));
    }
    v
}

/// One line of the report for a preset.
fn report_line(preset: Preset, run: &PresetRun, judgement: &Judgement) -> String {
    let mut outcomes: BTreeMap<&str, u64> = BTreeMap::new();
    for o in &run.outcomes {
        *outcomes.entry(o.label.as_str()).or_default() += 1;
    }
    let t = &run.oracle.totals;
    let records = if judgement.joined {
        // Keyed calls that ran more than once, by tool: allowed for read-only tools (the
        // key's first execution was abandoned), a violation for side effects.
        let mut runs: BTreeMap<&str, (&str, u64)> = BTreeMap::new();
        for e in run.oracle.executions.iter().filter(|e| e.keyed) {
            if let Some(tag) = e.tag.as_deref() {
                runs.entry(tag).or_insert((e.tool.as_str(), 0)).1 += 1;
            }
        }
        let mut repeated_keyed: BTreeMap<&str, u64> = BTreeMap::new();
        for (tool, n) in runs.into_values().filter(|(_, n)| *n > 1) {
            *repeated_keyed.entry(tool).or_default() += n - 1;
        }
        format!(
            "repeated_keyed={repeated_keyed:?} records={} (complete, joined per call)",
            t.executions
        )
    } else {
        format!(
            "records={}/{} (LIMIT REACHED, {} dropped: per-call joins skipped, totals checked)",
            run.oracle.executions.len(),
            t.executions,
            t.execution_records_dropped
        )
    };
    format!(
        "{preset:<10} calls={} {outcomes:?} restarts={} resumes={} honored={} replays={} rejections={:?} \
         initializes={} made_up={} wrong_capability={} unknown_record={} \
         duplicate_side_effects={} repeated={} {records} {:.1}s",
        run.outcomes.len(),
        run.restarts,
        t.resumes,
        t.honored_resumes,
        t.idempotent_replays,
        t.rejections,
        t.initializes,
        t.sessions_made_up,
        t.wrong_capability,
        t.unknown_record,
        t.duplicate_side_effects,
        t.repeated_executions,
        run.seconds
    )
}

/// Runs the soak on every preset of one era and fails on any violation. `default_calls` is the
/// total over all presets unless `MCP_RESUME_SOAK_CALLS` says otherwise.
async fn soak_every_preset(era: ClusterEra, default_calls: u64) {
    let seed = env_u64("MCP_RESUME_SOAK_SEED").unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
    });
    let total = env_u64("MCP_RESUME_SOAK_CALLS").unwrap_or(default_calls) as usize;
    let min_time = Duration::from_secs(env_u64("MCP_RESUME_SOAK_SECS").unwrap_or(0));
    let record_limit = env_u64("MCP_RESUME_SOAK_RECORD_LIMIT")
        .map_or(mock_server::DEFAULT_ORACLE_RECORD_LIMIT, |n| n as usize);
    let mode = CheckMode::from_env();
    let per_agent = (total / (Preset::ALL.len() * AGENTS)).max(1);
    let _report = SeedReport {
        seed,
        what: format!(
            "{era} era, {total} calls, {AGENTS} agents, >= {min_time:?} per preset, \
             record limit {record_limit}, {mode:?} checks"
        ),
    };
    eprintln!(
        "chaos soak ({era} era) seed {seed}: {per_agent} calls per agent, {AGENTS} agents per \
         preset, oracle record limit {record_limit}, {mode:?} checks"
    );

    let mut all = Vec::new();
    for preset in Preset::ALL {
        let run = soak_preset(era, preset, seed, per_agent, min_time, record_limit).await;
        let judgement = judge(era, preset, &run, mode);
        eprintln!("{era:<7} {}", report_line(preset, &run, &judgement));
        assert!(run.outcomes.len() >= per_agent * AGENTS, "{era}/{preset}");
        all.extend(judgement.violations);
        all.extend(check_faults_bit(era, preset, &run));
    }
    assert!(
        all.is_empty(),
        "{} invariant violations ({era} era, seed {seed}):\n{}",
        all.len(),
        all.iter().take(40).cloned().collect::<Vec<_>>().join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_soak_every_preset() {
    soak_every_preset(ClusterEra::Legacy, 6400).await;
}

/// The 2026-07-28 era: no sessions and no resumption, so a cut stream loses its request. An
/// unkeyed call then ends `OutcomeUnknown`; a keyed one is re-sent and the server's
/// idempotency store answers it without running it again. Instance kills and cuts as above.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_soak_modern_every_preset() {
    soak_every_preset(ClusterEra::Modern, 6400).await;
}

/// A soak past the oracle's record limit is never silently blind: by default it fails and
/// says why; in totals mode it passes on the totals and says the joins were skipped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_soak_past_the_record_limit_says_so() {
    let seed = env_u64("MCP_RESUME_SOAK_SEED").unwrap_or(7);
    let run = soak_preset(
        ClusterEra::Legacy,
        Preset::Replicated,
        seed,
        20,
        Duration::ZERO,
        50,
    )
    .await;
    let t = &run.oracle.totals;
    assert!(t.executions > 50, "{t:?}");
    assert_eq!(run.oracle.executions.len(), 50);
    assert_eq!(t.execution_records_dropped, t.executions - 50);

    let strict = judge(
        ClusterEra::Legacy,
        Preset::Replicated,
        &run,
        CheckMode::Records,
    );
    assert!(!strict.joined);
    assert!(
        strict
            .violations
            .iter()
            .any(|v| v.contains("per-call checks incomplete") && v.contains("dropped")),
        "{:#?}",
        strict.violations
    );

    let totals = judge(
        ClusterEra::Legacy,
        Preset::Replicated,
        &run,
        CheckMode::Totals,
    );
    assert!(!totals.joined);
    assert!(totals.violations.is_empty(), "{:#?}", totals.violations);
    let line = report_line(Preset::Replicated, &run, &totals);
    assert!(line.contains("LIMIT REACHED"), "{line}");
}

/// A successful call as the client saw it, for the judge's own tests.
fn success(tag: &str, tool: &'static str, value: Value, echoed: Option<&str>) -> Outcome {
    Outcome {
        call: CallRecord {
            tag: tag.to_owned(),
            tool,
            keyed: false,
            outcome: Ok(value),
            elapsed: Duration::ZERO,
            echoed_tag: echoed.map(str::to_owned),
        },
        label: "ok".to_owned(),
        hung: false,
        depends_on: None,
    }
}

/// A clean execution record of `tag` in `session`, as the oracle keeps it.
fn ran(tag: &str, tool: &str, session: &str) -> mock_server::ExecutionRecord {
    mock_server::ExecutionRecord {
        tag: Some(tag.to_owned()),
        tool: tool.to_owned(),
        instance: 0,
        session: session.to_owned(),
        capability_hash: "h".to_owned(),
        expected_capability_hash: Some("h".to_owned()),
        carried_capabilities: None,
        wrong_capability: false,
        unexpected_client_capabilities: false,
        unknown_record: false,
        side_effect: has_side_effect(tool),
        keyed: false,
        duplicate_side_effect: false,
    }
}

fn judged(outcomes: Vec<Outcome>, executions: Vec<mock_server::ExecutionRecord>) -> Judgement {
    let run = PresetRun {
        outcomes,
        oracle: OracleReport {
            executions,
            ..OracleReport::default()
        },
        restarts: 0,
        seconds: 0.0,
    };
    judge(ClusterEra::Legacy, Preset::Strict, &run, CheckMode::Records)
}

#[test]
fn a_result_delivered_to_another_call_is_a_violation() {
    let j = judged(
        vec![
            success("a", "echo", Value::Null, Some("a")),
            success("b", "echo", Value::Null, Some("c")),
            success("c", "echo", Value::Null, None),
        ],
        vec![ran("a", "echo", "s"), ran("b", "echo", "s")],
    );
    assert!(j.joined);
    assert_eq!(j.violations.len(), 2, "{:#?}", j.violations);
    assert!(j.violations[0].contains("b got the result of another call"));
}

/// The demo's rule, per successful call: a `generate` at another temperature than the
/// negotiated one, a run the oracle flagged (the wrong capabilities; an unknown record in the
/// session that prepared it), a success nothing ran for. A commit of a record prepared in an
/// earlier session is not held against the call.
#[test]
fn a_silent_wrong_answer_is_a_violation() {
    let generate = |t: f64| json!({"temperature": t});
    let mut drifted = ran("drifted", "echo", "s");
    drifted.wrong_capability = true;
    drifted.unexpected_client_capabilities = true;
    let commit = |tag: &str, session: &str| {
        let mut e = ran(tag, "commit", session);
        e.unknown_record = true;
        e
    };
    let committed = |tag: &str| Outcome {
        depends_on: Some("prepared".to_owned()),
        ..success(tag, "commit", Value::Null, Some(tag))
    };
    let j = judged(
        vec![
            success(
                "cool",
                "generate",
                generate(workload::TEMPERATURE),
                Some("cool"),
            ),
            success("hot", "generate", generate(1.0), Some("hot")),
            success("drifted", "echo", Value::Null, Some("drifted")),
            success("ghost", "echo", Value::Null, Some("ghost")),
            committed("same-session"),
            committed("later-session"),
        ],
        vec![
            ran("cool", "generate", "s"),
            ran("hot", "generate", "s"),
            drifted,
            ran("prepared", "prepare", "s"),
            commit("same-session", "s"),
            commit("later-session", "s2"),
        ],
    );
    let wrong: Vec<&str> = j
        .violations
        .iter()
        .filter_map(|v| v.split(' ').nth(1))
        .collect();
    assert_eq!(
        wrong,
        ["hot", "drifted", "ghost", "same-session"],
        "{:#?}",
        j.violations
    );
    assert!(
        j.violations[0].contains("temperature 1.0"),
        "{:#?}",
        j.violations
    );
}

/// The faults bit only by the cluster's counts of calls taken up again: resumes it rejected
/// took nothing up.
#[test]
fn rejected_resumes_pick_no_call_up() {
    let run = |resumes: u64, honored: u64, replays: u64| PresetRun {
        outcomes: Vec::new(),
        oracle: OracleReport {
            totals: OracleTotals {
                resumes,
                honored_resumes: honored,
                idempotent_replays: replays,
                ..OracleTotals::default()
            },
            ..OracleReport::default()
        },
        restarts: 1,
        seconds: 0.0,
    };
    let bit = |r: PresetRun| check_faults_bit(ClusterEra::Legacy, Preset::Strict, &r);
    let v = bit(run(5, 0, 0));
    assert!(
        v.len() == 1 && v[0].contains("no call was picked up"),
        "{v:#?}"
    );
    assert!(bit(run(5, 1, 0)).is_empty());
    assert!(bit(run(0, 0, 1)).is_empty());
}

#[test]
fn rpc_outcomes_are_named_by_code() {
    let keyed_in_use =
        RpcError::new(-32000, "m").with_data(json!({"code": "IDEMPOTENCY_KEY_IN_USE"}));
    assert_eq!(
        error_label(ErrorKind::Rpc, Some(&keyed_in_use)),
        "rpc(-32000/IDEMPOTENCY_KEY_IN_USE)"
    );
    assert_eq!(
        error_label(ErrorKind::Rpc, Some(&RpcError::new(-32602, "m"))),
        "rpc(-32602)"
    );
    assert_eq!(
        error_label(ErrorKind::OutcomeUnknown, None),
        "outcome_unknown"
    );
}
