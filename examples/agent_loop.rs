//! An agent's loop: connect, list the tools, call them (keyed when they have side effects),
//! follow a long call's progress, and react to what the session reports.
//!
//! ```text
//! cargo run --example agent_loop                 # against the bundled mock cluster
//! cargo run --example agent_loop -- <mcp url>    # against any MCP server
//! ```
//!
//! Without a URL it starts the mock cluster in-process: three instances behind round-robin
//! that share their records (`replicated`), and a balancer that cuts every stream after three
//! events, so the session events below actually happen.

use std::time::Duration;

use mcp_resume::client::models::{ListKind, TypedNotification};
use mcp_resume::{Client, ErrorKind, SessionEvent, ToolCall};
use mock_server::{Cluster, ClusterConfig, Preset};
use serde_json::json;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut cluster = None;
    let url = match std::env::args().nth(1) {
        Some(url) => url,
        None => {
            let started = Cluster::start(ClusterConfig {
                preset: Preset::Replicated,
                instances: 3,
                cut_after_events: Some(3),
                ..ClusterConfig::default()
            })
            .await?;
            let url = started.url();
            cluster = Some(started);
            url
        }
    };

    let client = Client::builder(&url)
        .client_info("agent-loop-example", env!("CARGO_PKG_VERSION"))
        .call_timeout(Duration::from_secs(30))
        .build()?;

    // What the session does on its own: resumes, re-initializations, re-sends. An agent logs
    // them, and re-reads what a new session may have changed.
    let mut events = client.events();
    let watcher = client.clone();
    tokio::spawn(async move {
        while let Some(event) = events.recv().await {
            match event {
                SessionEvent::Resumed { last_event_id } => {
                    println!("  [session] stream resumed after event {last_event_id}")
                }
                SessionEvent::Reinitialized {
                    reason,
                    capabilities_changed,
                } => {
                    println!("  [session] re-initialized ({reason:?})");
                    if capabilities_changed {
                        // A new session may offer other tools.
                        if let Ok(tools) = watcher.list_tools().await {
                            println!("  [session] {} tools now", tools.len());
                        }
                    }
                }
                SessionEvent::Redispatched { call, method, .. } => {
                    println!("  [session] {method} ({call:?}) re-sent with its idempotency key")
                }
                SessionEvent::OutcomeUnknown { call, method } => {
                    println!("  [session] {method} ({call:?}) may or may not have run")
                }
                other => println!("  [session] {other:?}"),
            }
        }
    });

    // Notifications, typed: a list change means listing again.
    let mut notifications = client.notifications();
    let lister = client.clone();
    tokio::spawn(async move {
        while let Some(n) = notifications.recv().await {
            if let TypedNotification::ListChanged(ListKind::Tools) = n.typed() {
                if let Ok(tools) = lister.list_tools().await {
                    println!("  [server] the tool list changed: {} tools", tools.len());
                }
            }
        }
    });

    let server = client.connect().await?;
    println!(
        "connected to {} {} (protocol {})",
        server.server_name, server.server_version, server.protocol_version
    );

    let tools = client.list_tools().await?;
    for tool in &tools {
        let kind = if tool.is_read_only_hint() {
            "read-only"
        } else {
            "side effects"
        };
        println!("tool {} ({kind})", tool.name);
    }

    // A read-only call: nothing to protect.
    let reply = client
        .call_tool(ToolCall::new("echo", json!({"text": "hello"})))
        .await?;
    println!("echo: {}", reply.text());

    // A call with a side effect carries an idempotency key: after an interruption the client
    // may re-send it (same key) when the server deduplicates; otherwise it says it does not
    // know, instead of guessing.
    let call = ToolCall::new("counter_increment", json!({})).random_idempotency_key();
    match client.call_tool(call).await {
        Ok(result) => println!("counter: {}", result.structured_content.unwrap_or_default()),
        Err(e) if e.kind() == ErrorKind::OutcomeUnknown => {
            println!("counter: interrupted, may or may not have run: check before retrying")
        }
        Err(e) => return Err(e.into()),
    }

    // A long call as a handle: its own progress, a timeout that restarts on progress.
    let mut slow = client.start(
        ToolCall::new("slow", json!({"steps": 5, "delay_ms": 50}))
            .timeout(Duration::from_secs(2))
            .reset_timeout_on_progress(true),
    )?;
    println!("slow started as {:?}", slow.id());
    let mut progress = slow.progress();
    let result = loop {
        tokio::select! {
            result = &mut slow => break result?,
            Some(p) = progress.recv() => {
                println!("  slow: {} of {}", p.progress, p.total.unwrap_or_default())
            }
        }
    };
    println!("slow: {}", result.text());

    client.close().await?;
    if let Some(cluster) = cluster {
        let oracle = cluster.oracle();
        println!(
            "oracle: {} wrong-capability executions, {} duplicate side effects",
            oracle.totals.wrong_capability, oracle.totals.duplicate_side_effects
        );
        cluster.shutdown().await;
    }
    Ok(())
}
