//! Resources, prompts and completions: list them page by page or whole, read a resource,
//! subscribe to its changes, render a prompt, complete an argument.
//!
//! ```text
//! (cd tests/interop && npm ci)                   # once: the TypeScript SDK server
//! cargo run --example resources                  # starts tests/interop/ts-server.mjs
//! cargo run --example resources -- <mcp url>     # or against any MCP server with resources
//! ```

mod common;

use std::time::Duration;

use mcp_resume::client::models::{
    CompleteRequest, CompletionReference, Content, LoggingLevel, TypedNotification,
};
use mcp_resume::{Client, SessionEvent, ToolCall};
use serde_json::json;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let server = common::server_from_args()?;
    let client = Client::builder(&server.url)
        .call_timeout(Duration::from_secs(30))
        .build()?;
    let mut events = client.events();
    let init = client.connect().await?;
    println!("server capabilities: {}", init.capabilities);

    // Whole lists: the client follows `nextCursor` (bounded).
    for resource in client.list_resources().await? {
        println!(
            "resource {} ({}), {} bytes",
            resource.uri,
            resource.mime_type.as_deref().unwrap_or("?"),
            resource.size.unwrap_or_default()
        );
    }
    // Or page by page, when the caller wants to stop early or show pages.
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let page = client.list_resources_page(cursor.as_deref()).await?;
        pages += 1;
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    println!("{pages} pages of resources");
    for template in client.list_resource_templates().await? {
        println!("template {}", template.uri_template);
    }

    let note = client.read_resource("mem://notes/2").await?;
    println!("mem://notes/2: {:?}", note.text());

    // Subscriptions: updates arrive as notifications; read the resource again. They travel on
    // the stream the server opens outside any request, and a server may drop what it sends
    // before that stream is up: wait for it (or for word that it will not come).
    let mut notifications = client.notifications();
    let listening = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(event) = events.recv().await {
            match event {
                SessionEvent::Listening => return true,
                SessionEvent::ListenStopped { reason } => {
                    println!(
                        "no stream of server messages ({}): no updates",
                        reason.as_str()
                    );
                    return false;
                }
                _ => {}
            }
        }
        false
    })
    .await
    .unwrap_or(false);
    if listening {
        client.subscribe_resource("mem://notes/2").await?;
        client
            .call_tool(ToolCall::new(
                "touch_resource",
                json!({"uri": "mem://notes/2"}),
            ))
            .await?;
        let updated = tokio::time::timeout(Duration::from_secs(10), async {
            while let Some(n) = notifications.recv().await {
                if let TypedNotification::ResourceUpdated { uri } = n.typed() {
                    return Some(uri);
                }
            }
            None
        })
        .await;
        match updated {
            Ok(Some(uri)) => {
                let again = client.read_resource(&uri).await?;
                println!("{uri} changed: {:?}", again.text());
            }
            _ => println!("no update came within 10 s"),
        }
        client.unsubscribe_resource("mem://notes/2").await?;
    }

    // Prompts and their arguments' completions.
    for prompt in client.list_prompts().await? {
        let arguments: Vec<&str> = prompt.arguments.iter().map(|a| a.name.as_str()).collect();
        println!("prompt {} {:?}", prompt.name, arguments);
    }
    let languages = client
        .complete(CompleteRequest::new(
            CompletionReference::prompt("greet"),
            "language",
            "e",
        ))
        .await?;
    println!("languages starting with e: {:?}", languages.values);
    let rendered = client
        .get_prompt("greet", [("name", "Ada"), ("language", "en")])
        .await?;
    for message in &rendered.messages {
        match &message.content {
            Content::Text(text) => println!("{:?}: {}", message.role, text.text),
            Content::Resource(embedded) => {
                println!("{:?}: <resource {}>", message.role, embedded.resource.uri)
            }
            other => println!("{:?}: {:?}", message.role, other.kind()),
        }
    }

    // Fewer log messages from now on.
    client.set_logging_level(LoggingLevel::Warning).await?;

    client.close().await?;
    Ok(())
}
