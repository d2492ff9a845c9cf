//! The seed scenario, live: an agent workload through the mock round-robin cluster under
//! every preset, for a stock-like client and the resume-aware default, with the truth taken
//! from the cluster's oracle.
//!
//! ```text
//! cargo run --example demo            # a table per preset and client
//! cargo run --example demo -- --json  # one JSON document on stdout
//! ```

mod workload;

use workload::{render_calls, render_json, render_table, row, run_all, WorkloadConfig};

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
    let reports = runtime.block_on(run_all(&WorkloadConfig::default()));
    let rows: Vec<_> = reports.iter().map(row).collect();
    if verbose {
        for report in &reports {
            eprintln!("{}", render_calls(report));
        }
    }
    if json {
        println!("{}", render_json(&rows));
    } else {
        println!(
            "mcp-resume demo: {} presets x 2 clients on an in-process cluster (3 instances, \
             streams cut after 3 events)\n",
            rows.len() / 2
        );
        print!("{}", render_table(&rows));
    }
}
