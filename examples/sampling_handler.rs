//! Answering the server: sampling (the server asks the client's model), elicitation (the
//! server asks the user) and roots. Registering a handler declares the matching capability at
//! `initialize`; the handler gets the typed request and its context, including the server's
//! cancellation.
//!
//! ```text
//! (cd tests/interop && npm ci)                        # once: the TypeScript SDK server
//! cargo run --example sampling_handler                # starts tests/interop/ts-server.mjs
//! cargo run --example sampling_handler -- <mcp url>   # or against another server
//! ```
//!
//! The TypeScript server's `sample`, `elicit` and `roots` tools each make one such request.

mod common;

use std::time::Duration;

use mcp_resume::client::models::{CreateMessageResult, ElicitResult, Root};
use mcp_resume::{Client, RpcError, ToolCall};
use serde_json::json;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let server = common::server_from_args()?;
    let client = Client::builder(&server.url)
        .call_timeout(Duration::from_secs(30))
        .on_sampling(|request, ctx| async move {
            let question = request
                .messages
                .last()
                .map(|m| m.text())
                .unwrap_or_default();
            println!(
                "  [sampling] request {} asks (max {} tokens): {question}",
                ctx.request_id(),
                request.max_tokens
            );
            // A real client calls its model here. If the server cancels the request, this
            // future is dropped; work handed to other tasks can await `ctx.cancelled()`.
            if question.is_empty() {
                return Err(RpcError::invalid_params("nothing to answer"));
            }
            Ok(CreateMessageResult::new("example-model", "Paris").stop_reason("endTurn"))
        })
        .on_elicitation(|request, _ctx| async move {
            println!("  [elicitation] {}", request.message);
            if let Some(schema) = &request.requested_schema {
                println!("  [elicitation] form: {schema}");
            }
            // A real client shows the form; this one fills it in.
            Ok(ElicitResult::accept(json!({"name": "Ada"})))
        })
        .on_roots(
            |_ctx| async move { Ok(vec![Root::new("file:///home/ada/project").name("project")]) },
        )
        .build()?;

    let init = client.connect().await?;
    println!("connected to {}", init.server_name);

    for tool in ["sample", "elicit", "roots"] {
        let arguments = json!({"prompt": "What is the capital of France?"});
        let result = client.call_tool(ToolCall::new(tool, arguments)).await?;
        println!("{tool}: {}", result.text());
    }

    // The roots changed: the server will ask again.
    client.notify_roots_changed()?;
    client.close().await?;
    Ok(())
}
