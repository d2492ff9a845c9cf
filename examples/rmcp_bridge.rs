//! An rmcp application that keeps its code and gets mcp-resume's recovery: the one line that
//! builds the transport changes (the `rmcp` feature).
//!
//! ```text
//! cargo run --example rmcp_bridge                 # against the bundled mock cluster
//! cargo run --example rmcp_bridge -- <mcp url>    # against any MCP server
//! ```
//!
//! Without a URL it starts the mock cluster in-process with the seed's failure: three
//! instances behind round-robin that replay each other's streams without owning the session
//! (`naive`), every stream cut after three events. rmcp's own transport reports wrong answers
//! as success there (`cargo run --example demo`); over `ResumeTransport` each call is right or
//! an explicit error, and the bridge's events say what happened underneath.

use futures::StreamExt;
use mcp_resume::bridge::rmcp::ResumeTransport;
use mcp_resume::bridge::{Bridge, IDEMPOTENCY_META_KEY};
use mock_server::{Cluster, ClusterConfig, Preset};
use rmcp::model::{CallToolRequestParams, JsonObject, RequestMetaObject};
use rmcp::ServiceExt;
use serde_json::{json, Map};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut cluster = None;
    let url = match std::env::args().nth(1) {
        Some(url) => url,
        None => {
            let started = Cluster::start(ClusterConfig {
                preset: Preset::Naive,
                cut_after_events: Some(3),
                ..ClusterConfig::default()
            })
            .await?;
            let url = started.url();
            cluster = Some(started);
            url
        }
    };

    // Before: `().serve(StreamableHttpClientTransport::from_uri(url.as_str())).await?`.
    // `ResumeTransport::new(url)` does the same with mcp-resume's defaults; a bridge of your
    // own carries its options (timeouts, reconnect and resend policies, authorization, era).
    let bridge = Bridge::builder(&url).build()?;
    let mut events = bridge.events();
    tokio::spawn(async move {
        while let Some(event) = events.next().await {
            eprintln!("[session] {event:?}");
        }
    });
    let service = ().serve(ResumeTransport::with_bridge(bridge)).await?;

    // From here on, rmcp's own API, unchanged.
    for tool in service.list_all_tools().await? {
        println!("tool: {}", tool.name);
    }
    let mut echo = JsonObject::new();
    echo.insert("text".to_owned(), json!("hi"));
    let reply = service
        .call_tool(CallToolRequestParams::new("echo").with_arguments(echo))
        .await?;
    println!("echo: {:?}", reply.content[0].as_text().map(|t| &t.text));

    // A call with a side effect: the key in `_meta` (the bridge's member) makes it keyed, so
    // it may be re-sent after an interruption when the server deduplicates; an unkeyed call
    // never is.
    for _ in 0..5 {
        let mut params = CallToolRequestParams::new("counter_increment");
        let mut meta = Map::new();
        meta.insert(
            IDEMPOTENCY_META_KEY.to_owned(),
            json!(uuid::Uuid::new_v4().to_string()),
        );
        params.meta = Some(RequestMetaObject::from(meta));
        match service.call_tool(params).await {
            Ok(result) => println!("counter: {:?}", result.structured_content),
            // What JSON-RPC cannot say (outcome unknown, another context, session lost, …)
            // arrives as an error whose `data.kind` names it: never a silent success.
            Err(error) => println!("counter: explicit error: {error}"),
        }
    }

    service.cancel().await?;
    if let Some(cluster) = cluster {
        cluster.shutdown().await;
    }
    Ok(())
}
