//! The seed scenario, live: an agent workload through the mock round-robin cluster under
//! every preset, for a stock-like client, the resume-aware default, rmcp 3.11 (the official
//! Rust SDK) and the same rmcp code over mcp-resume's `ResumeTransport`, with the truth taken from the cluster's oracle. Then `naive` once more
//! with the balancer cutting nothing, to tell the wrong answers routing causes from the ones
//! resumption causes. Then the 2026-07-28 era on every preset: mcp-resume against a client
//! that re-issues every request whose stream broke.
//!
//! ```text
//! cargo run --example demo            # a table per preset and client
//! cargo run --example demo -- --json  # one JSON document on stdout
//! ```

mod modern;
mod reissue_client;
mod rmcp_client;
mod workload;

use mock_server::Preset;
use modern::{run_modern, MODERN_CLIENTS};
use workload::{
    render_calls, render_json_document, render_modern_table, render_table, render_uncut_table, row,
    run_one, run_one_on, uncut_cluster_config, ClientKind, Row, RunReport, WorkloadConfig,
};

/// Every client of the table, one run each, in table order.
async fn run_clients(preset: Preset, uncut: bool, cfg: &WorkloadConfig) -> Vec<(RunReport, Row)> {
    let mut out = Vec::new();
    for kind in ClientKind::ALL {
        let report = if uncut {
            run_one_on(uncut_cluster_config(preset, cfg), kind, cfg).await
        } else {
            run_one(preset, kind, cfg).await
        };
        let r = row(&report);
        out.push((report, r));
    }
    for kind in [ClientKind::Rmcp, ClientKind::RmcpBridge] {
        let run = if uncut {
            rmcp_client::run_one_on(uncut_cluster_config(preset, cfg), kind, cfg).await
        } else {
            rmcp_client::run_one(preset, kind, cfg).await
        };
        let r = run.row();
        out.push((run.report, r));
    }
    out
}

fn main() {
    let (mut json, mut verbose) = (false, false);
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--json" => json = true,
            "--calls" => verbose = true,
            other => {
                eprintln!(
                    "usage: demo [--json] [--calls]  (unknown argument {other:?})\n  \
                     --json   one JSON document on stdout instead of the table\n  \
                     --calls  also print every call next to the oracle's records (stderr)"
                );
                std::process::exit(2);
            }
        }
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let cfg = WorkloadConfig::default();
    let (runs, uncut_runs, modern_runs) = runtime.block_on(async {
        let mut runs = Vec::new();
        for preset in Preset::ALL {
            runs.extend(run_clients(preset, false, &cfg).await);
        }
        let uncut_runs = run_clients(Preset::Naive, true, &cfg).await;
        let mut modern_runs = Vec::new();
        for preset in Preset::ALL {
            for kind in MODERN_CLIENTS {
                let run = run_modern(preset, kind, &cfg).await;
                let r = run.row();
                modern_runs.push((run.report, r));
            }
        }
        (runs, uncut_runs, modern_runs)
    });
    if verbose {
        for (report, _) in runs.iter().chain(&uncut_runs).chain(&modern_runs) {
            eprintln!("{}", render_calls(report));
        }
    }
    let rows: Vec<Row> = runs.into_iter().map(|(_, r)| r).collect();
    let uncut_rows: Vec<Row> = uncut_runs.into_iter().map(|(_, r)| r).collect();
    let modern_rows: Vec<Row> = modern_runs.into_iter().map(|(_, r)| r).collect();
    if json {
        println!("{}", render_json_document(&rows, &uncut_rows, &modern_rows));
    } else {
        println!(
            "mcp-resume demo: {} presets x 4 clients (mcp-resume stock-like, mcp-resume \
             resume-aware, rmcp {}, and rmcp over mcp-resume's bridge) on an in-process \
             cluster\n(3 instances, streams cut after 3 events, a {:.0} s deadline per call)\n",
            Preset::ALL.len(),
            rmcp_client::RMCP_VERSION,
            cfg.call_timeout.as_secs_f64(),
        );
        print!("{}", render_table(&rows));
        println!();
        print!("{}", render_uncut_table(&uncut_rows));
        println!();
        print!("{}", render_modern_table(&modern_rows));
    }
}
