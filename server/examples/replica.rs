//! One replica of a resume-safe rmcp 3.11 deployment: the process the real-parts tests run
//! three of behind nginx, with Redis holding what they share.
//!
//! ```sh
//! cargo run -p mcp-resume-server --example replica -- \
//!     --listen 127.0.0.1:9100 --redis redis://127.0.0.1:6379 [--no-guard] [--lease-ms 1000]
//! ```
//!
//! Prints `http://ADDR/mcp` on its first stdout line once it listens. SIGTERM drains it as a
//! shutdown that does not wait for open streams does: new connections are refused and every
//! open one is closed at once (a client whose answer had not come must come back elsewhere),
//! while the calls already running go on to their end (and the guard stores their answers);
//! then it exits. SIGKILL is a crash.
//!
//! Its one tool, `bump {tag, delay_ms}`, applies a side effect first (`INCR effects:<tag>` in
//! Redis, the truth the tests read, and `ran:<tag>` = its pid), waits `delay_ms` (a call to
//! cut, drain or kill after its effect), then counts its finish (`INCR done:<tag>`). What the
//! tests read to know a fault bit, per tag: `posts:<tag>`, the `tools/call` requests that
//! reached a replica (a re-send makes two); `cut:<tag>`, the requests whose connection closed
//! before their answer went; `drained:<tag>`, the runs in flight when a drain began. Without
//! `--no-guard` the server wears [`ResumeSafetyLayer`] on a [`RedisStore`].

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::response::Response;
use bytes::Bytes;
use futures::future::BoxFuture;
use http_body::Frame;
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
    live: Live,
    tool_router: ToolRouter<Self>,
}

#[tool_router]
impl Replica {
    #[tool(description = "Applies one side effect for the tag, then waits delay_ms")]
    async fn bump(
        &self,
        Parameters(BumpArgs { tag, delay_ms }): Parameters<BumpArgs>,
    ) -> Result<String, ErrorData> {
        let _running = self.live.enter(&tag);
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
        // The run finished (its answer is about to go): a run killed mid-call never gets here.
        let () = redis::cmd("INCR")
            .arg(format!("{}done:{tag}", self.namespace))
            .query_async(&mut conn)
            .await
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        Ok(format!("{tag}:{n}"))
    }
}

/// What this process still has to finish before a drain may exit: tool runs (by tag), `POST`
/// answers the inner server is still producing (a keyed one read to its end by the guard, which
/// stores it), and the evidence still being written.
#[derive(Clone, Default)]
struct Live(Arc<tokio::sync::watch::Sender<Vec<String>>>);

/// One thing [`Live`] counts, until dropped.
struct Running(Live, String);

impl Live {
    fn enter(&self, tag: &str) -> Running {
        self.0.send_modify(|v| v.push(tag.to_owned()));
        Running(self.clone(), tag.to_owned())
    }

    /// The tags of the tool runs in flight.
    fn runs(&self) -> Vec<String> {
        self.0
            .borrow()
            .iter()
            .filter(|t| !t.is_empty())
            .cloned()
            .collect()
    }

    async fn idle(&self) {
        let _ = self.0.subscribe().wait_for(Vec::is_empty).await;
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.0 .0.send_modify(|v| {
            if let Some(i) = v.iter().position(|t| *t == self.1) {
                v.swap_remove(i);
            }
        });
    }
}

/// Redis counters the tests read to know a fault bit (see the module's docs).
#[derive(Clone)]
struct Evidence {
    redis: redis::aio::ConnectionManager,
    namespace: String,
    live: Live,
}

impl Evidence {
    async fn incr(&self, what: &str, tag: &str) {
        let mut c = self.redis.clone();
        let _: Result<u64, _> = redis::cmd("INCR")
            .arg(format!("{}{what}:{tag}", self.namespace))
            .query_async(&mut c)
            .await;
    }

    /// Counted in a task of its own (from a `Drop`); the drain waits for it.
    fn incr_later(&self, what: &'static str, tag: String) {
        let running = self.live.enter("");
        let this = self.clone();
        tokio::spawn(async move {
            this.incr(what, &tag).await;
            drop(running);
        });
    }
}

/// Outermost: counts each `tools/call` that reaches this replica (`posts:<tag>`) and each
/// whose connection closed before its answer went (`cut:<tag>`).
async fn witness(ev: Evidence, req: Request, next: axum::middleware::Next) -> Response {
    if req.method() != http::Method::POST {
        return next.run(req).await;
    }
    let (parts, body) = req.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, 1 << 20).await else {
        return Response::builder().status(400).body(Body::empty()).unwrap();
    };
    let tag = serde_json::from_slice::<serde_json::Value>(&bytes)
        .ok()
        .filter(|v| v["method"] == "tools/call")
        .and_then(|v| v["params"]["arguments"]["tag"].as_str().map(str::to_owned));
    let Some(tag) = tag else {
        return next
            .run(Request::from_parts(parts, Body::from(bytes)))
            .await;
    };
    ev.incr("posts", &tag).await;
    // Dropped with this future (its connection closed before the answer's head) or with the
    // body before the answer: a cut.
    let watch = Unanswered(Some((ev, tag)));
    let resp = next
        .run(Request::from_parts(parts, Body::from(bytes)))
        .await;
    let (parts, body) = resp.into_parts();
    Response::from_parts(parts, Body::new(Watched { body, watch }))
}

/// Until its answer went: dropped before, it counts `cut:<tag>`.
struct Unanswered(Option<(Evidence, String)>);

impl Drop for Unanswered {
    fn drop(&mut self) {
        if let Some((ev, tag)) = self.0.take() {
            ev.incr_later("cut", tag);
        }
    }
}

/// A `tools/call` answer on its way: its end, or a frame with a result, is the answer gone.
struct Watched {
    body: Body,
    watch: Unanswered,
}

impl http_body::Body for Watched {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let polled = Pin::new(&mut self.body).poll_frame(cx);
        let answered = match &polled {
            Poll::Ready(None) => true,
            Poll::Ready(Some(Ok(frame))) => frame
                .data_ref()
                .is_some_and(|d| memchr::memmem::find(d, b"\"result\"").is_some()),
            _ => false,
        };
        if answered {
            self.watch.0 = None;
        }
        polled
    }
}

/// Between the guard and the server: a `POST`'s answer counts in [`Live`] until the inner
/// server's body is dropped (a keyed one's once the guard stored it).
#[derive(Clone)]
struct HoldAnswers<S> {
    inner: S,
    live: Live,
}

impl<S, B, RB> tower::Service<http::Request<B>> for HoldAnswers<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<RB>> + Send,
    S::Future: Send + 'static,
    RB: http_body::Body<Data = Bytes> + Send + 'static,
    RB::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Response = Response;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let held = (req.method() == http::Method::POST).then(|| self.live.enter(""));
        let fut = self.inner.call(req);
        Box::pin(async move {
            let resp = fut.await?;
            Ok(resp.map(|body| {
                Body::new(Held {
                    body: Body::new(body),
                    _held: held,
                })
            }))
        })
    }
}

struct Held {
    body: Body,
    _held: Option<Running>,
}

impl http_body::Body for Held {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }
}

/// Accepts connections the drain can close: once it begins, their reads and writes fail, and
/// hyper drops them at once (it watches a busy connection's reads for the peer's end, so a
/// call still waiting for its answer is closed too).
struct Closable {
    listener: tokio::net::TcpListener,
    closing: tokio::sync::watch::Receiver<bool>,
}

impl axum::serve::Listener for Closable {
    type Io = ClosableIo;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (ClosableIo, std::net::SocketAddr) {
        let (io, addr) = axum::serve::Listener::accept(&mut self.listener).await;
        // Small SSE writes must not wait on Nagle's algorithm.
        let _ = io.set_nodelay(true);
        let mut closing = self.closing.clone();
        let closed = Box::pin(async move {
            let _ = closing.wait_for(|c| *c).await;
        });
        (ClosableIo { io, closed }, addr)
    }

    fn local_addr(&self) -> io::Result<std::net::SocketAddr> {
        self.listener.local_addr()
    }
}

struct ClosableIo {
    io: tokio::net::TcpStream,
    closed: Pin<Box<dyn Future<Output = ()> + Send>>,
}

impl ClosableIo {
    fn check(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        match self.closed.as_mut().poll(cx) {
            Poll::Ready(()) => Err(io::Error::new(io::ErrorKind::ConnectionAborted, "drained")),
            Poll::Pending => Ok(()),
        }
    }
}

impl tokio::io::AsyncRead for ClosableIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.check(cx)?;
        Pin::new(&mut this.io).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for ClosableIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.check(cx)?;
        Pin::new(&mut this.io).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.check(cx)?;
        Pin::new(&mut this.io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
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
    let redis_for_drain = redis.clone();
    let mut sessions = LocalSessionManager::default();
    // Clients reconnect after this instead of rmcp's 3 s: the tests cut streams often.
    sessions.session_config.sse_retry = Some(Duration::from_millis(50));
    let namespace = args.namespace.clone();
    let live = Live::default();
    let evidence = Evidence {
        redis: redis.clone(),
        namespace: args.namespace.clone(),
        live: live.clone(),
    };
    let mut config = StreamableHttpServerConfig::default()
        .with_sse_keep_alive(None)
        .with_sse_retry(Some(Duration::from_millis(50)));
    config.session_store = Some(Arc::new(RedisSessions {
        redis: redis.clone(),
        namespace: args.namespace.clone(),
    }));
    let tool_live = live.clone();
    let mcp: StreamableHttpService<Replica, LocalSessionManager> = StreamableHttpService::new(
        move || {
            Ok(Replica {
                redis: redis.clone(),
                namespace: namespace.clone(),
                live: tool_live.clone(),
                tool_router: Replica::tool_router(),
            })
        },
        sessions.into(),
        config,
    );
    let mcp = HoldAnswers {
        inner: mcp,
        live: live.clone(),
    };
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
    let app = app.layer(axum::middleware::from_fn(move |req, next| {
        witness(evidence.clone(), req, next)
    }));
    let listener = tokio::net::TcpListener::bind(args.listen.as_str()).await?;
    println!("http://{}/mcp", listener.local_addr()?);
    let (closing_tx, closing) = tokio::sync::watch::channel(false);
    let mut shutdown = closing.clone();
    let server = tokio::spawn(async move {
        axum::serve(Closable { listener, closing }, app)
            .with_graceful_shutdown(async move {
                let _ = shutdown.wait_for(|c| *c).await;
            })
            .await
    });
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    term.recv().await;
    // The drain: the runs it finds in flight are named, every connection is closed and no new
    // one accepted, and the runs (and the guard's storing of their answers) go on to their end.
    let ev = Evidence {
        redis: redis_for_drain,
        namespace: args.namespace.clone(),
        live: live.clone(),
    };
    for tag in live.runs() {
        ev.incr("drained", &tag).await;
    }
    let _ = closing_tx.send(true);
    let _ = tokio::time::timeout(Duration::from_secs(2), server).await;
    let _ = tokio::time::timeout(Duration::from_secs(10), live.idle()).await;
    Ok(())
}
