//! What the demo shows, asserted: the same workload (`examples/demo/workload.rs`), the numbers
//! taken from the cluster's oracle, joined per call tag with what the client reported.

use crate::{demo_modern as modern, rmcp_client, workload};

use std::path::PathBuf;
use std::process::Command;

use mcp_resume::ErrorKind;
use mock_server::Preset;
use modern::{run_modern, MODERN_CLIENTS};
use serde_json::Value;
use workload::{
    render_json, row, run_one, uncut_cluster_config, ClientKind, RunReport, WorkloadConfig,
    TEMPERATURE,
};

/// The calls the client reported as success with a wrong answer: one that echoed another
/// tag than the call's (or none), one for which the oracle recorded no execution under the
/// call's tag, one whose execution the oracle flags, or a `generate` at another temperature
/// than the one the client negotiated.
fn silent_wrong_calls(report: &RunReport) -> Vec<String> {
    assert!(
        report.oracle.executions_complete(),
        "the join needs every execution"
    );
    report
        .calls
        .iter()
        .filter(|c| c.outcome.is_ok())
        .filter(|c| {
            let mut execs = report.oracle.executions_tagged(&c.tag).peekable();
            let not_its_own = c.echoed_tag.as_deref() != Some(c.tag.as_str());
            let none_ran = execs.peek().is_none();
            let flagged =
                execs.any(|e| e.wrong_capability || e.unknown_record || e.duplicate_side_effect);
            let cold = c.tool == "generate"
                && c.outcome
                    .as_ref()
                    .is_ok_and(|v| v["temperature"] != TEMPERATURE);
            not_its_own || none_ran || flagged || cold
        })
        .map(|c| format!("{} -> {:?} (echoed {:?})", c.tag, c.outcome, c.echoed_tag))
        .collect()
}

/// Every call reported as a success got its own answer (the result echoed the call's tag,
/// something ran under that tag), and every `generate` among them answered at the
/// temperature the client negotiated.
fn assert_answers_are_their_own(label: &str, report: &RunReport) {
    for c in report.calls.iter().filter(|c| c.outcome.is_ok()) {
        assert_eq!(
            c.echoed_tag.as_deref(),
            Some(c.tag.as_str()),
            "{label}: another call's answer: {c:?}"
        );
        assert!(
            report.oracle.executions_tagged(&c.tag).next().is_some(),
            "{label}: nothing ran for {c:?}"
        );
        if c.tool == "generate" {
            assert_eq!(
                c.outcome.as_ref().unwrap()["temperature"],
                TEMPERATURE,
                "{label}: {c:?}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stock_like_client_on_naive_gives_silent_wrong_answers() {
    let report = run_one(
        Preset::Naive,
        ClientKind::StockLike,
        &WorkloadConfig::default(),
    )
    .await;
    let r = row(&report);
    assert!(report.connect.is_ok(), "{:?}", report.connect);
    // The seed's failure: success reported, wrong context underneath, no error anywhere.
    assert!(r.silent_wrong > 0, "{r:?}");
    assert_eq!(silent_wrong_calls(&report).len() as u64, r.silent_wrong);
    assert!(report.oracle.totals.wrong_capability > 0, "{r:?}");
    assert!(
        report.oracle.totals.sessions_made_up > 0,
        "{:?}",
        report.oracle.totals
    );
    // At least one generate call answered at the default temperature, reported as success.
    assert!(
        report
            .calls
            .iter()
            .any(|c| c.tool == "generate"
                && c.outcome.as_ref().is_ok_and(|v| v["temperature"] == 1.0)),
        "{:#?}",
        report.calls
    );
    assert!(r.errors.is_empty(), "no explicit error surfaced: {r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_aware_has_no_silent_wrong_answers() {
    let cfg = WorkloadConfig::default();
    // Naive is where a race (a response arriving while the session re-initializes) can let a
    // wrong answer through: run it several times (a run takes a fraction of a second).
    let mut runs = vec![Preset::Naive; 10];
    runs.extend([Preset::Strict, Preset::Replicated, Preset::Sticky]);
    let mut failures = Vec::new();
    for preset in runs {
        let report = run_one(preset, ClientKind::ResumeAware, &cfg).await;
        let r = row(&report);
        assert!(report.connect.is_ok(), "{preset}: {:?}", report.connect);
        let wrong = silent_wrong_calls(&report);
        if !wrong.is_empty() || r.silent_wrong != 0 {
            failures.push(format!("{preset}: {wrong:?}"));
        }
        assert_answers_are_their_own(preset.as_str(), &report);
        // Keyed side effects never ran twice, and no unkeyed call was run again, whatever
        // the preset; read from an oracle that had every execution.
        assert_eq!(r.duplicate_keyed, 0, "{preset}: {r:?}");
        assert_eq!(r.rerun, 0, "{preset}: {r:?}");
        assert!(report.settled, "{preset}: the cluster never went idle");
        // Every call ends exactly once: the workload recorded one outcome per call.
        let mut tags: Vec<&str> = report.calls.iter().map(|c| c.tag.as_str()).collect();
        tags.sort_unstable();
        tags.dedup();
        assert_eq!(tags.len(), report.calls.len(), "{preset}");
    }
    assert!(
        failures.is_empty(),
        "silent wrong answers (success reported, oracle says wrong): {failures:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_aware_never_reinitializes_where_resume_is_safe() {
    let cfg = WorkloadConfig::default();
    for preset in [Preset::Replicated, Preset::Sticky] {
        let report = run_one(preset, ClientKind::ResumeAware, &cfg).await;
        // The counts below are final only once the cluster went idle.
        assert!(report.settled, "{preset}: the cluster never went idle");
        let totals = &report.oracle.totals;
        assert_eq!(totals.initializes, 1, "{preset}: {totals:?}");
        assert_eq!(totals.wrong_capability, 0, "{preset}: {totals:?}");
        assert_eq!(totals.unknown_record, 0, "{preset}: {totals:?}");
        assert_eq!(totals.duplicate_side_effects, 0, "{preset}: {totals:?}");
        // The slow call's stream was cut and resumed, and every call succeeded.
        let honored = report.oracle.resumes.iter().filter(|r| r.honored).count();
        assert!(honored > 0, "{preset}: {:?}", report.oracle.resumes);
        let failed: Vec<_> = report.calls.iter().filter(|c| c.outcome.is_err()).collect();
        assert!(failed.is_empty(), "{preset}: {failed:#?}");
        // Each call ran exactly once (no re-send was needed).
        for call in &report.calls {
            assert_eq!(
                report.oracle.executions_tagged(&call.tag).count(),
                1,
                "{preset}: {}",
                call.tag
            );
        }
    }
}

/// rmcp's own API over mcp-resume's `ResumeTransport`: the calls rmcp's transport gets wrong
/// (silent wrong answers on `naive`, the cut call lost on `strict`) come out right, and where
/// resuming is safe the session is never re-initialized.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rmcp_over_the_bridge_has_no_silent_wrong_answers() {
    let cfg = WorkloadConfig::default();
    for preset in Preset::ALL {
        let run = rmcp_client::run_one(preset, ClientKind::RmcpBridge, &cfg).await;
        let report = &run.report;
        let r = run.row();
        assert_eq!(r.client, "rmcp+bridge");
        assert!(report.connect.is_ok(), "{preset}: {:?}", report.connect);
        assert!(!report.calls.is_empty(), "{preset}: the workload ran");
        let wrong = silent_wrong_calls(report);
        assert!(
            wrong.is_empty(),
            "{preset}: silent wrong answers {wrong:#?}"
        );
        assert_eq!(r.silent_wrong, 0, "{preset}: {r:?}");
        assert_answers_are_their_own(preset.as_str(), report);
        assert_eq!(r.duplicate_keyed, 0, "{preset}: {r:?}");
        assert_eq!(r.rerun, 0, "{preset}: {r:?}");
        assert!(report.settled, "{preset}: the cluster never went idle");
        let failed: Vec<_> = report.calls.iter().filter(|c| c.outcome.is_err()).collect();
        match preset {
            // The seed's cluster: what cannot be proven right is an explicit error.
            Preset::Naive => assert!(!failed.is_empty(), "{preset}: {r:?}"),
            // Resume is safe (`replicated`, `sticky`) or refused explicitly (`strict`): every
            // call succeeds, the cut one included.
            _ => assert!(failed.is_empty(), "{preset}: {failed:#?}"),
        }
        if matches!(preset, Preset::Replicated | Preset::Sticky) {
            let totals = &report.oracle.totals;
            assert_eq!(totals.initializes, 1, "{preset}: {totals:?}");
            let honored = report.oracle.resumes.iter().filter(|r| r.honored).count();
            assert!(honored > 0, "{preset}: {:?}", report.oracle.resumes);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rmcp_on_naive_gives_silent_wrong_answers_with_or_without_cuts() {
    let cfg = WorkloadConfig::default();
    let cut = rmcp_client::run_one(Preset::Naive, ClientKind::Rmcp, &cfg).await;
    let uncut = rmcp_client::run_one_on(
        uncut_cluster_config(Preset::Naive, &cfg),
        ClientKind::Rmcp,
        &cfg,
    )
    .await;
    for (label, run) in [("cut", &cut), ("uncut", &uncut)] {
        let r = run.row();
        let report = &run.report;
        assert!(report.connect.is_ok(), "{label}: {:?}", report.connect);
        assert!(report.settled, "{label}: the cluster never went idle");
        // The incident: every call reported as success, no error anywhere, and wrong answers
        // underneath, whether or not a stream was cut (routing alone causes them).
        assert_eq!(r.ok, r.calls, "{label}: {r:?}");
        assert!(r.errors.is_empty(), "{label}: {r:?}");
        assert!(r.silent_wrong > 0, "{label}: {r:?}");
        assert_eq!(silent_wrong_calls(report).len() as u64, r.silent_wrong);
        assert!(
            report.calls.iter().any(|c| c.tool == "generate"
                && c.outcome.as_ref().is_ok_and(|v| v["temperature"] == 1.0)),
            "{label}: {:#?}",
            report.calls
        );
        assert_eq!(r.reinitializations, 0, "{label}: {r:?}");
    }
    assert_eq!(
        uncut.report.oracle.totals.resumes, 0,
        "nothing to resume without a cut"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rmcp_on_strict_loses_the_cut_call_to_the_deadline() {
    let cfg = WorkloadConfig::default();
    let run = rmcp_client::run_one(Preset::Strict, ClientKind::Rmcp, &cfg).await;
    let (report, r) = (&run.report, run.row());
    assert!(report.connect.is_ok(), "{:?}", report.connect);
    assert!(report.settled, "the cluster never went idle");
    // The cut `slow` call: its resume is rejected and rmcp keeps retrying the GET, so the
    // call ends only by the demo's deadline, although the server ran it to the end.
    let expired: Vec<&str> = run
        .deadline_expired()
        .iter()
        .map(|c| c.tag.as_str())
        .collect();
    assert_eq!(expired, [report.calls[0].tag.as_str()], "{r:?}");
    assert_eq!(report.calls[0].tool, "slow");
    assert!(report.calls[0].elapsed >= cfg.call_timeout);
    assert_eq!(
        report
            .oracle
            .executions_tagged(&report.calls[0].tag)
            .count(),
        1
    );
    assert!(r.rejected_resumes > 0, "{r:?}");
    assert_eq!(r.errors.get("deadline"), Some(&1), "{r:?}");
    // The next POST's 404 makes rmcp re-initialize once, silently, and re-send that POST;
    // everything after runs on the new session, correctly.
    assert_eq!(report.oracle.totals.initializes, 2, "{r:?}");
    assert_eq!(r.ok, r.calls - 1, "{r:?}");
    assert_eq!(r.silent_wrong, 0, "{r:?}");
    assert_answers_are_their_own("strict", report);
    assert_eq!(r.duplicate_side_effects, 0, "{r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rmcp_runs_the_same_workload() {
    let cfg = WorkloadConfig::default();
    let ours = run_one(Preset::Sticky, ClientKind::ResumeAware, &cfg).await;
    let rmcp = rmcp_client::run_one(Preset::Sticky, ClientKind::Rmcp, &cfg).await;
    let shape = |report: &RunReport| -> Vec<(&'static str, bool)> {
        report.calls.iter().map(|c| (c.tool, c.keyed)).collect()
    };
    assert_eq!(shape(&rmcp.report), shape(&ours));
    assert!(rmcp.report.settled, "the cluster never went idle");
    // With affinity nothing goes wrong for rmcp either: each call ran once, correctly.
    let r = rmcp.row();
    assert_eq!(r.ok, r.calls, "{r:?}");
    for call in &rmcp.report.calls {
        let execs: Vec<_> = rmcp.report.oracle.executions_tagged(&call.tag).collect();
        assert_eq!(execs.len(), 1, "{}", call.tag);
        assert!(
            !execs[0].wrong_capability && !execs[0].unknown_record,
            "{}",
            call.tag
        );
    }
    // The negotiated temperature reached the server, and each answer was its call's own.
    assert!(rmcp.report.calls.iter().any(|c| c.tool == "generate"));
    assert_answers_are_their_own("sticky", &rmcp.report);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn modern_era_resume_aware_never_repeats_an_effect_and_says_what_it_cannot_know() {
    let cfg = WorkloadConfig::default();
    for preset in Preset::ALL {
        let run = run_modern(preset, ClientKind::ResumeAware, &cfg).await;
        let (report, r) = (&run.report, run.row());
        assert!(report.connect.is_ok(), "{preset}: {:?}", report.connect);
        let t = &report.oracle.totals;
        assert_eq!(r.duplicate_side_effects, 0, "{preset}: {r:?}");
        assert_eq!(t.duplicate_side_effects, 0, "{preset}: {t:?}");
        assert_eq!(t.repeated_unkeyed_executions, 0, "{preset}: {t:?}");
        assert!(report.settled, "{preset}: the cluster never went idle");
        assert_eq!(
            r.silent_wrong,
            0,
            "{preset}: {:?}",
            silent_wrong_calls(report)
        );
        // The oracle was told the capabilities the client is configured with: every request
        // carried them (an unknown record cannot happen in this era: a `commit` of a handle
        // nobody knows is refused, never run).
        assert_eq!(t.wrong_capability, 0, "{preset}: {t:?}");
        assert_eq!(t.unknown_record, 0, "{preset}: {t:?}");
        assert_answers_are_their_own(preset.as_str(), report);
        // Each crashed call applied its effect once; neither can be proven, so neither is
        // re-run nor reported as success: the unkeyed one because it has no key, the keyed
        // one because its key's first execution died with its instance.
        let crashed: Vec<_> = run.crashed().collect();
        assert_eq!(crashed.len(), 2, "{preset}");
        for call in crashed {
            assert_eq!(
                call.outcome,
                Err(ErrorKind::OutcomeUnknown),
                "{preset}: {}",
                call.tag
            );
            assert_eq!(
                report.oracle.executions_tagged(&call.tag).count(),
                1,
                "{preset}: {}",
                call.tag
            );
        }
        // The keyed `slow` call whose stream was cut: re-issued with its key, answered from
        // its one execution.
        let slow = &report.calls[0];
        assert_eq!(slow.tool, "slow");
        assert!(slow.outcome.is_ok(), "{preset}: {slow:?}");
        assert_eq!(report.oracle.executions_tagged(&slow.tag).count(), 1);
        assert!(r.resent > 0, "{preset}: {r:?}");
        // The re-issue reached the cluster and was answered from the key's stored outcome.
        assert!(t.idempotent_replays >= 1, "{preset}: {t:?}");
        // Every call ended exactly once.
        let mut tags: Vec<&str> = report.calls.iter().map(|c| c.tag.as_str()).collect();
        tags.sort_unstable();
        tags.dedup();
        assert_eq!(tags.len(), report.calls.len(), "{preset}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn modern_era_blind_reissue_runs_side_effects_twice() {
    let cfg = WorkloadConfig::default();
    for preset in Preset::ALL {
        let run = run_modern(preset, ClientKind::Reissue, &cfg).await;
        let (report, r) = (&run.report, run.row());
        assert!(report.connect.is_ok(), "{preset}: {:?}", report.connect);
        assert!(r.duplicate_side_effects > 0, "{preset}: {r:?}");
        // The server deduplicates keys, so only the unkeyed effect ran twice...
        assert_eq!(r.duplicate_keyed, 0, "{preset}: {r:?}");
        // ...and the client reported that call as a success.
        let unkeyed = run
            .crashed()
            .find(|c| !c.keyed)
            .expect("an unkeyed crashed call");
        assert!(unkeyed.outcome.is_ok(), "{preset}: {unkeyed:?}");
        assert_eq!(
            report.oracle.executions_tagged(&unkeyed.tag).count(),
            2,
            "{preset}: {}",
            unkeyed.tag
        );
        assert!(r.silent_wrong > 0, "{preset}: {r:?}");
        assert!(run.reissued > 0, "{preset}");
    }
}

const FIELDS: [&str; 13] = [
    "preset",
    "client",
    "calls",
    "silent_wrong",
    "wrong_capability",
    "unknown_record",
    "duplicate_side_effects",
    "rerun",
    "reinitializations",
    "resent",
    "outcome_unknown",
    "seconds",
    "settled",
];

fn check_json_document(text: &str) -> Vec<Value> {
    let doc: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"));
    let rows = doc["rows"].as_array().expect("`rows` is an array").clone();
    for r in &rows {
        for field in FIELDS {
            assert!(r.get(field).is_some(), "{field} missing from {r}");
        }
        assert!(r["preset"].is_string() && r["client"].is_string(), "{r}");
        for field in &FIELDS[2..11] {
            assert!(r[field].is_u64(), "{field} is not a count in {r}");
        }
        assert!(r["seconds"].as_f64().is_some_and(|s| s >= 0.0), "{r}");
        assert!(r["settled"].is_boolean(), "{r}");
    }
    rows
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_rendering_has_the_documented_fields() {
    let cfg = WorkloadConfig::default();
    let reports = [
        run_one(Preset::Sticky, ClientKind::StockLike, &cfg).await,
        run_one(Preset::Sticky, ClientKind::ResumeAware, &cfg).await,
    ];
    let rows: Vec<_> = reports.iter().map(row).collect();
    let parsed = check_json_document(&render_json(&rows));
    assert_eq!(parsed.len(), 2);
    assert_eq!(parsed[0]["client"], "stock-like");
    assert_eq!(parsed[1]["client"], "resume-aware");
    assert_eq!(parsed[1]["calls"], rows[1].calls);
}

/// The demo binary, next to this test's binary (`target/<profile>/examples/demo`).
fn demo_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("the test binary lives in target/<profile>/deps");
    profile_dir
        .join("examples")
        .join(format!("demo{}", std::env::consts::EXE_SUFFIX))
}

#[test]
fn demo_binary_prints_one_json_document() {
    // `cargo test` builds the examples; a run limited to this test target does not, and must
    // build the demo first rather than pass without running it.
    let bin = demo_binary();
    assert!(
        bin.is_file(),
        "{} is not built: run `cargo build --example demo` (or the whole `cargo test`)",
        bin.display()
    );
    let out = Command::new(&bin)
        .arg("--json")
        .output()
        .expect("the demo runs");
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8(out.stdout).expect("UTF-8 stdout");
    let rows = check_json_document(&stdout);
    let mut pairs: Vec<(String, String)> = rows
        .iter()
        .map(|r| {
            (
                r["preset"].as_str().unwrap().to_owned(),
                r["client"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    pairs.sort();
    let mut expected: Vec<(String, String)> = Preset::ALL
        .iter()
        .flat_map(|p| {
            [
                ClientKind::StockLike,
                ClientKind::ResumeAware,
                ClientKind::Rmcp,
                ClientKind::RmcpBridge,
            ]
            .map(|k| (p.as_str().to_owned(), k.as_str().to_owned()))
        })
        .collect();
    expected.sort();
    assert_eq!(pairs, expected);
    let doc: Value = serde_json::from_str(&stdout).expect("JSON");
    let uncut = doc["naive_uncut_rows"]
        .as_array()
        .expect("`naive_uncut_rows` is an array");
    assert_eq!(uncut.len(), 4, "{uncut:?}");
    assert!(uncut.iter().all(|r| r["preset"] == "naive"), "{uncut:?}");
    let modern = doc["modern_rows"]
        .as_array()
        .expect("`modern_rows` is an array");
    let mut pairs: Vec<(String, String)> = modern
        .iter()
        .map(|r| {
            (
                r["preset"].as_str().unwrap().to_owned(),
                r["client"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    pairs.sort();
    let mut expected: Vec<(String, String)> = Preset::ALL
        .iter()
        .flat_map(|p| MODERN_CLIENTS.map(|k| (p.as_str().to_owned(), k.as_str().to_owned())))
        .collect();
    expected.sort();
    assert_eq!(pairs, expected);
    for r in modern {
        if r["client"] == ClientKind::ResumeAware.as_str() {
            assert_eq!(r["duplicate_side_effects"], 0, "{r}");
            assert_eq!(r["silent_wrong"], 0, "{r}");
        }
    }
}
