//! A small scriptable MCP server for the driver tests: records every request it receives and
//! answers through a closure, on 127.0.0.1 port 0.
#![allow(dead_code)]

pub(crate) mod oauth;

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::Response;
use futures::StreamExt;
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::sync::watch;

/// Hang guard for waits in tests: generous, never a stand-in for synchronisation.
pub(crate) const GUARD: Duration = Duration::from_secs(20);

/// One request as the server saw it.
#[derive(Debug, Clone)]
pub(crate) struct Recorded {
    pub method: Method,
    pub headers: HeaderMap,
    pub body: Option<Value>,
    /// When the request arrived.
    pub at: std::time::Instant,
}

impl Recorded {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The JSON-RPC method of a POST.
    pub(crate) fn rpc_method(&self) -> Option<&str> {
        self.body.as_ref()?.get("method")?.as_str()
    }

    pub(crate) fn rpc_id(&self) -> Value {
        self.body
            .as_ref()
            .and_then(|b| b.get("id"))
            .cloned()
            .unwrap_or(Value::Null)
    }

    pub(crate) fn params(&self) -> Value {
        self.body
            .as_ref()
            .and_then(|b| b.get("params"))
            .cloned()
            .unwrap_or(Value::Null)
    }

    pub(crate) fn is_rpc(&self, method: &str) -> bool {
        self.method == Method::POST && self.rpc_method() == Some(method)
    }

    /// Short label for assertion messages.
    pub(crate) fn label(&self) -> String {
        match self.rpc_method() {
            Some(m) => format!("{} {m}", self.method),
            None => self.method.to_string(),
        }
    }
}

type Responder = Arc<dyn Fn(&Recorded) -> Response + Send + Sync>;

/// Marker: a response carrying it makes the server never answer (hangs before the head).
#[derive(Clone, Copy)]
struct Hang;

pub(crate) struct TestServer {
    pub url: String,
    pub port: u16,
    log: Arc<Mutex<Vec<Recorded>>>,
    count: watch::Receiver<usize>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl TestServer {
    /// Starts a server answering with `responder`.
    pub(crate) async fn start(
        responder: impl Fn(&Recorded) -> Response + Send + Sync + 'static,
    ) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        Self::start_on(listener, responder)
    }

    /// Starts a server on an existing listener.
    pub(crate) fn start_on(
        listener: TcpListener,
        responder: impl Fn(&Recorded) -> Response + Send + Sync + 'static,
    ) -> Self {
        let port = listener.local_addr().expect("addr").port();
        let log = Arc::new(Mutex::new(Vec::new()));
        let (count_tx, count) = watch::channel(0usize);
        let responder: Responder = Arc::new(responder);
        let state = (log.clone(), Arc::new(count_tx), responder);
        let app = axum::Router::new().route(
            "/mcp",
            axum::routing::any(move |method: Method, headers: HeaderMap, body: Bytes| {
                let (log, count, responder) = state.clone();
                async move {
                    let body = if body.is_empty() {
                        None
                    } else {
                        Some(serde_json::from_slice(&body).unwrap_or(Value::Null))
                    };
                    let recorded = Recorded {
                        method,
                        headers,
                        body,
                        at: std::time::Instant::now(),
                    };
                    let response = responder(&recorded);
                    {
                        let mut log = log.lock().unwrap();
                        log.push(recorded);
                        count.send_replace(log.len());
                    }
                    if response.extensions().get::<Hang>().is_some() {
                        std::future::pending::<()>().await;
                    }
                    response
                }
            }),
        );
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        TestServer {
            url: format!("http://127.0.0.1:{port}/mcp"),
            port,
            log,
            count,
            task,
        }
    }

    /// Every request received so far, in order.
    pub(crate) fn requests(&self) -> Vec<Recorded> {
        self.log.lock().unwrap().clone()
    }

    /// Waits (hang-guarded) until a request matching `pred` has been received.
    pub(crate) async fn wait_for(&self, pred: impl Fn(&Recorded) -> bool) -> Recorded {
        let mut count = self.count.clone();
        let wait = async {
            loop {
                if let Some(found) = self.requests().into_iter().find(|r| pred(r)) {
                    return found;
                }
                count.changed().await.expect("server gone");
            }
        };
        tokio::time::timeout(GUARD, wait)
            .await
            .unwrap_or_else(|_| panic!("request never arrived; saw {:?}", self.labels()))
    }

    pub(crate) fn labels(&self) -> Vec<String> {
        self.requests().iter().map(Recorded::label).collect()
    }
}

// ---- response helpers ------------------------------------------------------------------

pub(crate) const SESSION_ID: &str = "sess-0123456789";
pub(crate) const SERVER_VERSION: &str = "2025-06-18";

pub(crate) fn hang() -> Response {
    let mut response = Response::new(Body::empty());
    response.extensions_mut().insert(Hang);
    response
}

pub(crate) fn status(code: u16) -> Response {
    let mut response = Response::new(Body::empty());
    *response.status_mut() = StatusCode::from_u16(code).unwrap();
    response
}

pub(crate) fn accepted() -> Response {
    status(202)
}

pub(crate) fn json_body(value: &Value) -> Response {
    Response::builder()
        .header("content-type", "application/json")
        .body(Body::from(value.to_string()))
        .unwrap()
}

pub(crate) fn result_msg(req: &Recorded, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": req.rpc_id(), "result": result})
}

pub(crate) fn json_result(req: &Recorded, result: Value) -> Response {
    json_body(&result_msg(req, result))
}

/// An SSE response whose body is `text` verbatim, then ends.
pub(crate) fn sse_text(text: impl Into<String>) -> Response {
    Response::builder()
        .header("content-type", "text/event-stream")
        .header("cache-control", "no-cache")
        .body(Body::from(text.into()))
        .unwrap()
}

/// An SSE response sending `text`, then staying open forever.
pub(crate) fn sse_open(text: impl Into<String>) -> Response {
    let first: Result<Bytes, Infallible> = Ok(Bytes::from(text.into()));
    let stream = futures::stream::once(async move { first }).chain_pending();
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from_stream(stream))
        .unwrap()
}

/// Like [`sse_open`], and `dropped` fires when the server drops the body (the client went
/// away).
pub(crate) fn sse_open_watched(
    text: impl Into<String>,
    dropped: tokio::sync::mpsc::UnboundedSender<()>,
) -> Response {
    struct OnDrop(tokio::sync::mpsc::UnboundedSender<()>);
    impl Drop for OnDrop {
        fn drop(&mut self) {
            let _ = self.0.send(());
        }
    }
    let guard = OnDrop(dropped);
    let first: Result<Bytes, Infallible> = Ok(Bytes::from(text.into()));
    let stream = futures::stream::once(async move { first })
        .chain_pending()
        .map(move |item| {
            let _keep = &guard;
            item
        });
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from_stream(stream))
        .unwrap()
}

pub(crate) fn sse_event(id: Option<&str>, data: &Value) -> String {
    match id {
        Some(id) => format!("id: {id}\ndata: {data}\n\n"),
        None => format!("data: {data}\n\n"),
    }
}

pub(crate) fn initialize_result() -> Value {
    json!({
        "protocolVersion": SERVER_VERSION,
        "capabilities": {"tools": {}},
        "serverInfo": {"name": "driver-test", "version": "1.2.3"},
        "instructions": "be nice"
    })
}

/// The plain MCP behaviour: JSON answers, 202 for notifications, GET 405, DELETE 200.
pub(crate) fn default_reply(req: &Recorded) -> Response {
    match req.method {
        Method::GET => return status(405),
        Method::DELETE => return status(200),
        _ => {}
    }
    let Some(method) = req.rpc_method() else {
        // A response or a notification without method: acknowledge.
        return accepted();
    };
    if req.rpc_id().is_null() {
        return accepted();
    }
    match method {
        "initialize" => {
            let mut response = json_result(req, initialize_result());
            response
                .headers_mut()
                .insert("mcp-session-id", HeaderValue::from_static(SESSION_ID));
            response
        }
        "ping" => json_result(req, json!({})),
        "tools/list" => json_result(
            req,
            json!({"tools": [{"name": "echo", "description": "Echoes", "inputSchema": {"type": "object"}}]}),
        ),
        "tools/call" => {
            let text = req.params()["arguments"]["text"].clone();
            json_result(
                req,
                json!({"content": [{"type": "text", "text": text}], "isError": false}),
            )
        }
        other => json_body(&json!({"jsonrpc": "2.0", "id": req.rpc_id(),
            "error": {"code": -32601, "message": format!("no {other}")}})),
    }
}

// ---- small future/stream utilities -------------------------------------------------------

trait ChainPending: futures::Stream + Sized {
    fn chain_pending(self) -> futures::stream::Chain<Self, futures::stream::Pending<Self::Item>> {
        futures::StreamExt::chain(self, futures::stream::pending())
    }
}

impl<S: futures::Stream> ChainPending for S {}

/// Hang guard around a future under test.
pub(crate) async fn guarded<T>(fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(GUARD, fut)
        .await
        .expect("hang guard: the future did not complete")
}

pub(crate) type BoxFut<T> = Pin<Box<dyn Future<Output = T> + Send>>;
