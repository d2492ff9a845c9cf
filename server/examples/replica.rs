//! One replica of a resume-safe rmcp 3.11 deployment: the process the real-parts tests run
//! three of behind nginx, with Redis holding what they share.
//!
//! ```sh
//! cargo run -p mcp-resume-server --example replica -- \
//!     --listen 127.0.0.1:9100 --redis redis://127.0.0.1:6379 [--no-guard] [--lease-ms 1000]
//! ```
//!
//! Prints `http://ADDR/mcp` on its first stdout line once it listens. SIGTERM drains it
//! (in-flight calls finish, new connections are refused); SIGKILL is a crash.
//!
//! Its one tool, `bump {tag, delay_ms}`, applies a side effect first (`INCR effects:<tag>` in
//! Redis, the truth the tests read, and `ran:<tag>` = its pid) and then waits `delay_ms`: a
//! call to cut, drain or kill after its effect. Without `--no-guard` the server wears [`ResumeSafetyLayer`] on a
//! [`RedisStore`].

use std::sync::Arc;
use std::time::Duration;

use axum::serve::ListenerExt;
use mcp_resume_server::ids::InstanceId;
use mcp_resume_server::{RedisOptions, RedisStore, ResumeSafetyLayer};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{ServerCapabilities, ServerConfig};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::session::store::{
    SessionState, SessionStore, SessionStoreError,
};
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{schemars, tool, tool_handler, tool_router, ErrorData, ServerHandler};

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
struct BumpArgs {
    tag: String,
    #[serde(default)]
    delay_ms: u64,
}

#[derive(Clone)]
struct Replica {
    redis: redis::aio::ConnectionManager,
    namespace: String,
    tool_router: ToolRouter<Self>,
}

#[tool_router]
impl Replica {
    #[tool(description = "Applies one side effect for the tag, then waits delay_ms")]
    async fn bump(
        &self,
        Parameters(BumpArgs { tag, delay_ms }): Parameters<BumpArgs>,
    ) -> Result<String, ErrorData> {
        let mut conn = self.redis.clone();
        // The effect, and which process applied it (so a test can kill that one).
        let (n, ()): (u64, ()) = redis::pipe()
            .atomic()
            .cmd("INCR")
            .arg(format!("{}effects:{tag}", self.namespace))
            .cmd("SET")
            .arg(format!("{}ran:{tag}", self.namespace))
            .arg(std::process::id())
            .query_async(&mut conn)
            .await
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        tokio::time::sleep(Duration::from_millis(delay_ms)).await;
        Ok(format!("{tag}:{n}"))
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Replica {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }
}

/// rmcp's own cross-instance session restore, on the same Redis: a session's POSTs may land
/// on any replica (nginx pins them by session id, but `initialize` has none yet), which
/// restores the session from its `initialize` parameters. Its streams stay where they were
/// opened: that is what the guard's resume checks are about.
struct RedisSessions {
    redis: redis::aio::ConnectionManager,
    namespace: String,
}

impl RedisSessions {
    fn key(&self, id: &str) -> String {
        format!("{}rmcp-session:{id}", self.namespace)
    }
}

#[async_trait::async_trait]
impl SessionStore for RedisSessions {
    async fn load(&self, id: &str) -> Result<Option<SessionState>, SessionStoreError> {
        let mut c = self.redis.clone();
        let json: Option<String> = redis::cmd("GET")
            .arg(self.key(id))
            .query_async(&mut c)
            .await?;
        Ok(match json {
            Some(j) => Some(serde_json::from_str(&j)?),
            None => None,
        })
    }

    async fn store(&self, id: &str, state: &SessionState) -> Result<(), SessionStoreError> {
        let mut c = self.redis.clone();
        let () = redis::cmd("SET")
            .arg(self.key(id))
            .arg(serde_json::to_string(state)?)
            .arg("PX")
            .arg(3_600_000)
            .query_async(&mut c)
            .await?;
        Ok(())
    }

    async fn delete(&self, id: &str) -> Result<(), SessionStoreError> {
        let mut c = self.redis.clone();
        let () = redis::cmd("DEL")
            .arg(self.key(id))
            .query_async(&mut c)
            .await?;
        Ok(())
    }
}

struct Args {
    listen: String,
    redis: String,
    namespace: String,
    guard: bool,
    lease: Duration,
    instance: Option<String>,
}

fn args() -> Args {
    let mut a = Args {
        listen: "127.0.0.1:0".into(),
        redis: "redis://127.0.0.1:6379".into(),
        namespace: "mcp-resume:".into(),
        guard: true,
        lease: Duration::from_secs(10),
        instance: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--listen" => a.listen = value(),
            "--redis" => a.redis = value(),
            "--namespace" => a.namespace = value(),
            "--no-guard" => a.guard = false,
            "--lease-ms" => a.lease = Duration::from_millis(value().parse().expect("a number")),
            "--instance" => a.instance = Some(value()),
            other => panic!("unknown flag {other}"),
        }
    }
    a
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = args();
    let redis = redis::Client::open(args.redis.as_str())?
        .get_connection_manager()
        .await?;
    let mut sessions = LocalSessionManager::default();
    // Clients reconnect after this instead of rmcp's 3 s: the tests cut streams often.
    sessions.session_config.sse_retry = Some(Duration::from_millis(50));
    let namespace = args.namespace.clone();
    let mut config = StreamableHttpServerConfig::default()
        .with_sse_keep_alive(None)
        .with_sse_retry(Some(Duration::from_millis(50)));
    config.session_store = Some(Arc::new(RedisSessions {
        redis: redis.clone(),
        namespace: args.namespace.clone(),
    }));
    let mcp: StreamableHttpService<Replica, LocalSessionManager> = StreamableHttpService::new(
        move || {
            Ok(Replica {
                redis: redis.clone(),
                namespace: namespace.clone(),
                tool_router: Replica::tool_router(),
            })
        },
        sessions.into(),
        config,
    );
    let app = if args.guard {
        let mut opts = RedisOptions::default();
        opts.namespace = args.namespace.clone();
        let store = RedisStore::connect_with(&args.redis, opts).await?;
        let mut layer = ResumeSafetyLayer::new(store).lease(args.lease);
        if let Some(name) = args.instance {
            // Fresh per process: a restarted replica is another owner.
            let name = format!("{name}-{}", std::process::id());
            layer = layer.instance_id(InstanceId::new(name)?);
        }
        axum::Router::new().nest_service(
            "/mcp",
            tower::ServiceBuilder::new().layer(layer).service(mcp),
        )
    } else {
        axum::Router::new().nest_service("/mcp", mcp)
    };
    let listener = tokio::net::TcpListener::bind(args.listen.as_str()).await?;
    println!("http://{}/mcp", listener.local_addr()?);
    // Small SSE writes must not wait on Nagle's algorithm.
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    // SIGTERM: stop accepting, let in-flight requests finish; streams that never end (a
    // session's GET stream) are cut after a grace period.
    let (drain_tx, drain_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = drain_rx.await;
            })
            .await
    });
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    term.recv().await;
    let _ = drain_tx.send(());
    let _ = tokio::time::timeout(Duration::from_secs(2), server).await;
    Ok(())
}
