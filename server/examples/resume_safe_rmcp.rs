//! An rmcp 3.11 server made resume-safe by one `.layer(...)` line.
//!
//! ```sh
//! cargo run -p mcp-resume-server --example resume_safe_rmcp            # MemoryStore
//! REDIS_URL=redis://127.0.0.1:6379 cargo run -p mcp-resume-server --example resume_safe_rmcp
//! ```
//!
//! Its `initialize` results now advertise the resume-safety extension; keyed calls of
//! `increment` run once per idempotency key, whatever the client re-sends; a resume that this
//! instance cannot prove is refused with `SESSION_RESUME_REJECTED`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use axum::serve::ListenerExt;
use mcp_resume_server::{MemoryStore, RedisStore, ResumeSafetyLayer};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::model::{ServerCapabilities, ServerConfig};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{tool, tool_handler, tool_router, ServerHandler};

#[derive(Clone)]
struct Counter {
    value: Arc<AtomicU64>,
    tool_router: ToolRouter<Self>,
}

#[tool_router]
impl Counter {
    /// The side effect an idempotency key protects.
    #[tool(description = "Increments the counter and returns its new value")]
    fn increment(&self) -> String {
        (self.value.fetch_add(1, Ordering::SeqCst) + 1).to_string()
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Counter {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let value = Arc::new(AtomicU64::new(0));
    let mcp: StreamableHttpService<Counter, LocalSessionManager> = StreamableHttpService::new(
        move || {
            Ok(Counter {
                value: value.clone(),
                tool_router: Counter::tool_router(),
            })
        },
        Default::default(),
        StreamableHttpServerConfig::default(),
    );
    let layer = match std::env::var("REDIS_URL") {
        Ok(url) => ResumeSafetyLayer::new(RedisStore::connect(&url).await?),
        Err(_) => ResumeSafetyLayer::new(MemoryStore::default()),
    };
    let app = axum::Router::new().nest_service(
        "/mcp",
        tower::ServiceBuilder::new().layer(layer).service(mcp),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
    println!("http://{}/mcp", listener.local_addr()?);
    // Small SSE writes must not wait on Nagle's algorithm.
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    axum::serve(listener, app).await?;
    Ok(())
}
