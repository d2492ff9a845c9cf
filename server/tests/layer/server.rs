//! An rmcp 3.11 server on 127.0.0.1, with or without the guard in front, for the layer's
//! tests: `echo`, and `bump` (a side effect counted per tag, then a pause).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::serve::ListenerExt;
use mcp_resume_server::ResumeSafetyLayer;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{ServerCapabilities, ServerConfig};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{schemars, tool, tool_handler, tool_router, ServerHandler};

/// Side effects per tag: the truth the tests assert on.
#[derive(Clone, Default)]
pub(crate) struct Effects(Arc<Mutex<HashMap<String, u64>>>);

impl Effects {
    pub(crate) fn count(&self, tag: &str) -> u64 {
        self.0.lock().unwrap().get(tag).copied().unwrap_or(0)
    }

    fn bump(&self, tag: &str) -> u64 {
        let mut m = self.0.lock().unwrap();
        let n = m.entry(tag.to_owned()).or_insert(0);
        *n += 1;
        *n
    }
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub(crate) struct BumpArgs {
    pub(crate) tag: String,
    #[serde(default)]
    pub(crate) delay_ms: u64,
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub(crate) struct EchoArgs {
    pub(crate) text: String,
}

#[derive(Clone)]
pub(crate) struct Tools {
    effects: Effects,
    tool_router: ToolRouter<Self>,
}

#[tool_router]
impl Tools {
    #[tool(description = "Echoes text")]
    fn echo(&self, Parameters(EchoArgs { text }): Parameters<EchoArgs>) -> String {
        text
    }

    #[tool(description = "Counts one side effect for the tag, then waits delay_ms")]
    async fn bump(&self, Parameters(BumpArgs { tag, delay_ms }): Parameters<BumpArgs>) -> String {
        let n = self.effects.bump(&tag);
        if delay_ms > 0 {
            tokio::time::sleep(Duration::from_millis(delay_ms)).await;
        }
        format!("{tag}:{n}")
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Tools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }
}

pub(crate) struct Server {
    pub(crate) addr: SocketAddr,
    pub(crate) effects: Effects,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Server {
    pub(crate) fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    /// rmcp behind `layer` (none: the bare server), `json`: JSON responses.
    pub(crate) async fn start(layer: Option<ResumeSafetyLayer>, json: bool) -> Server {
        let effects = Effects::default();
        let mcp = Self::mcp(&effects, json);
        let app = match layer {
            Some(layer) => axum::Router::new().nest_service(
                "/mcp",
                tower::ServiceBuilder::new().layer(layer).service(mcp),
            ),
            None => axum::Router::new().nest_service("/mcp", mcp),
        };
        Self::serve(app, effects).await
    }

    /// One rmcp server (its sessions shared) behind two guards, as two instances of a fleet
    /// are: `/mcp` behind `first`, `/other` behind `second`. (Only the Redis tests use it.)
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) async fn start_pair(first: ResumeSafetyLayer, second: ResumeSafetyLayer) -> Server {
        let effects = Effects::default();
        let mcp = Self::mcp(&effects, false);
        let app = axum::Router::new()
            .nest_service(
                "/mcp",
                tower::ServiceBuilder::new()
                    .layer(first)
                    .service(mcp.clone()),
            )
            .nest_service(
                "/other",
                tower::ServiceBuilder::new().layer(second).service(mcp),
            );
        Self::serve(app, effects).await
    }

    /// The second guard's URL of a [`Server::start_pair`].
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) fn other_url(&self) -> String {
        format!("http://{}/other", self.addr)
    }

    fn mcp(effects: &Effects, json: bool) -> StreamableHttpService<Tools, LocalSessionManager> {
        let e = effects.clone();
        let config = StreamableHttpServerConfig::default()
            .with_sse_keep_alive(None)
            .with_json_response(json);
        StreamableHttpService::new(
            move || {
                Ok(Tools {
                    effects: e.clone(),
                    tool_router: Tools::tool_router(),
                })
            },
            Default::default(),
            config,
        )
    }

    async fn serve(app: axum::Router, effects: Effects) -> Server {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        // Small SSE writes must not wait on Nagle's algorithm.
        let listener = listener.tap_io(|tcp| {
            let _ = tcp.set_nodelay(true);
        });
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async move {
                    let _ = rx.await;
                })
                .await;
        });
        Server {
            addr,
            effects,
            shutdown: Some(tx),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}
