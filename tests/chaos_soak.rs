//! Chaos soak: many concurrent agents, each with its own client, thousands of calls through
//! the mock cluster under seeded random cuts, idle timeouts and instance restarts, on every
//! preset. The recovery invariants are checked against the cluster's oracle:
//!
//! Agents mostly call one at a time, with occasional bursts of concurrent calls.
//!
//! - every call ends exactly once (result or typed error) within its deadline plus slack;
//! - no keyed side effect runs twice (the server advertises idempotency);
//! - no unkeyed call runs twice;
//! - no success for a call that ran under the wrong capabilities, or for a commit that ran
//!   against an unknown record in the very session that prepared it.
//!
//! Sizes: `MCP_RESUME_SOAK_CALLS` (total calls over all presets, default 6400),
//! `MCP_RESUME_SOAK_SECS` (minimum seconds per preset, default 0), `MCP_RESUME_SOAK_SEED`
//! (default: from the clock). The seed is printed on failure.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mcp_resume::{Client, ErrorKind, ReconnectPolicy, ToolCall};
use mock_server::context::meta;
use mock_server::{Cluster, ClusterConfig, CutStyle, OracleReport, Preset};
use serde_json::{json, Value};

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

/// One call as the client saw it.
struct Outcome {
    tag: String,
    tool: &'static str,
    keyed: bool,
    result: Result<(), ErrorKind>,
    elapsed: Duration,
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
) -> (Outcome, Option<Value>) {
    let mut call = ToolCall::new(tool, args)
        .meta(meta::TAG, json!(tag))
        .timeout(CALL_TIMEOUT);
    if keyed {
        call = call.random_idempotency_key();
    }
    let started = Instant::now();
    let res = tokio::time::timeout(CALL_TIMEOUT + SLACK, client.call_tool(call)).await;
    let elapsed = started.elapsed();
    let (result, value, hung) = match res {
        Ok(Ok(r)) => (Ok(()), r.structured_content, false),
        Ok(Err(e)) => (Err(e.kind()), None, false),
        Err(_) => (Err(ErrorKind::Timeout), None, true),
    };
    (
        Outcome {
            tag,
            tool,
            keyed,
            result,
            elapsed,
            hung,
            depends_on: None,
        },
        value,
    )
}

async fn agent(
    url: String,
    preset: Preset,
    id: usize,
    seed: u64,
    calls: usize,
    min_time: Duration,
) -> Vec<Outcome> {
    let mut rng = Rng(seed ^ (id as u64).wrapping_mul(0xA076_1D64_78BD_642F));
    let client = Client::builder(url)
        .client_capabilities(json!({"experimental": {"sampling": {"temperature": 0.2}}}))
        .call_timeout(CALL_TIMEOUT)
        .reconnect(ReconnectPolicy {
            initial_delay: Duration::from_millis(10),
            max_delay: Duration::from_millis(250),
            ..ReconnectPolicy::default()
        })
        .jitter_seed(rng.next())
        .build()
        .expect("valid configuration");
    let started = Instant::now();
    let mut out = Vec::with_capacity(calls);
    while out.len() < calls || started.elapsed() < min_time {
        let n = out.len();
        let tag = |tool: &str| format!("{preset}/a{id}/{n:05}-{tool}");
        let (tool, args, keyed): (&'static str, Value, bool) = match rng.below(10) {
            0 | 1 => ("echo", json!({"text": "hi"}), false),
            2 | 3 => ("generate", json!({"prompt": "p"}), false),
            4 => (
                "slow",
                json!({"steps": 3, "delay_ms": 15}),
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
            out.extend(
                futures::future::join_all(burst)
                    .await
                    .into_iter()
                    .map(|(o, _)| o),
            );
            continue;
        }
        let (outcome, value) = one_call(&client, tag(tool), tool, args, keyed).await;
        out.push(outcome);
        if tool == "prepare" {
            if let Some(record) = value.as_ref().and_then(|v| v["record"].as_str()) {
                let keyed = rng.below(2) == 0;
                let args = json!({"record": record});
                let (mut o, _) =
                    one_call(&client, tag("commit") + "c", "commit", args, keyed).await;
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

async fn soak_preset(
    preset: Preset,
    seed: u64,
    calls_per_agent: usize,
    min_time: Duration,
) -> PresetRun {
    let started = Instant::now();
    let mut rng = Rng(seed ^ preset as u64);
    let config = ClusterConfig {
        preset,
        instances: 3,
        extension: true,
        idle_timeout: Some(Duration::from_millis(300 + rng.below(300))),
        random_cut: Some((rng.next(), 0.05)),
        cut_style: if rng.below(2) == 0 {
            CutStyle::Abort
        } else {
            CutStyle::CleanEnd
        },
        ..ClusterConfig::default()
    };
    let cluster = Arc::new(Cluster::start(config).await.expect("cluster starts"));
    let stop = Arc::new(AtomicBool::new(false));
    let chaos = tokio::spawn(restarter(cluster.clone(), rng.next(), stop.clone()));
    let agents: Vec<_> = (0..AGENTS)
        .map(|id| {
            tokio::spawn(agent(
                cluster.url(),
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
        "{preset}: executions never ended"
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

/// The §4 invariants for one preset's run; returns the violations.
fn violations(preset: Preset, run: &PresetRun) -> Vec<String> {
    let mut v = Vec::new();
    let mut execs: BTreeMap<&str, Vec<&mock_server::ExecutionRecord>> = BTreeMap::new();
    for e in &run.oracle.executions {
        if let Some(tag) = e.tag.as_deref() {
            execs.entry(tag).or_default().push(e);
        }
    }
    for o in &run.outcomes {
        let ran = execs.get(o.tag.as_str()).map(Vec::as_slice).unwrap_or(&[]);
        if o.hung {
            v.push(format!("{preset}: {} never ended", o.tag));
        } else if o.elapsed > CALL_TIMEOUT + SLACK {
            v.push(format!("{preset}: {} ended after {:?}", o.tag, o.elapsed));
        }
        if !o.keyed && ran.len() > 1 {
            v.push(format!(
                "{preset}: unkeyed {} ran {} times",
                o.tag,
                ran.len()
            ));
        }
        if o.keyed && o.tool == "counter_increment" && ran.iter().any(|e| e.duplicate_side_effect) {
            v.push(format!("{preset}: keyed {} incremented twice", o.tag));
        }
        if o.result.is_ok() {
            if let Some(e) = ran.iter().find(|e| e.wrong_capability) {
                v.push(format!(
                    "{preset}: {} reported success but ran under the wrong capabilities \
                     on instance {}",
                    o.tag, e.instance
                ));
            }
            // A commit against an unknown record is a wrong answer the client could have
            // caught only if it ran in the session that prepared the record: a commit on a
            // later session (after a re-initialization) is the application's business.
            let prepared_in: Vec<&str> = o
                .depends_on
                .as_deref()
                .and_then(|p| execs.get(p))
                .map(|es| es.iter().map(|e| e.session.as_str()).collect())
                .unwrap_or_default();
            if let Some(e) = ran
                .iter()
                .find(|e| e.unknown_record && prepared_in.contains(&e.session.as_str()))
            {
                v.push(format!(
                    "{preset}: {} reported success but committed an unknown record on \
                     instance {} in the session that prepared it",
                    o.tag, e.instance
                ));
            }
        }
    }
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_soak_every_preset() {
    let seed = env_u64("MCP_RESUME_SOAK_SEED").unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
    });
    let total = env_u64("MCP_RESUME_SOAK_CALLS").unwrap_or(6400) as usize;
    let min_time = Duration::from_secs(env_u64("MCP_RESUME_SOAK_SECS").unwrap_or(0));
    let per_agent = (total / (Preset::ALL.len() * AGENTS)).max(1);
    let _report = SeedReport {
        seed,
        what: format!("{total} calls, {AGENTS} agents, >= {min_time:?} per preset"),
    };
    eprintln!("chaos soak seed {seed}: {per_agent} calls per agent, {AGENTS} agents per preset");

    let mut all = Vec::new();
    for preset in Preset::ALL {
        let run = soak_preset(preset, seed, per_agent, min_time).await;
        let mut kinds: BTreeMap<String, u64> = BTreeMap::new();
        for o in &run.outcomes {
            let k = match o.result {
                Ok(()) => "ok".to_owned(),
                Err(k) => k.as_str().to_owned(),
            };
            *kinds.entry(k).or_default() += 1;
        }
        let t = &run.oracle.totals;
        eprintln!(
            "{preset:<10} calls={} {kinds:?} restarts={} resumes={} rejections={:?} \
             initializes={} wrong_capability={} unknown_record={} duplicates={} {:.1}s",
            run.outcomes.len(),
            run.restarts,
            t.resumes,
            t.rejections,
            t.initializes,
            t.wrong_capability,
            t.unknown_record,
            t.duplicate_side_effects,
            run.seconds
        );
        assert!(run.outcomes.len() >= per_agent * AGENTS, "{preset}");
        all.extend(violations(preset, &run));
    }
    assert!(
        all.is_empty(),
        "{} invariant violations (seed {seed}):\n{}",
        all.len(),
        all.iter().take(40).cloned().collect::<Vec<_>>().join("\n")
    );
}
