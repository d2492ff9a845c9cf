//! One MCP server instance on `/mcp`: legacy Streamable HTTP (2025-03-26 … 2025-11-25) here,
//! the stateless 2026-07-28 revision in [`modern`], or both (the cluster's era decides).
//!
//! An instance lives in *incarnations*: killing it drops the incarnation (its local store,
//! its connections, its running calls); restarting makes a new, empty one.

// Validation helpers return the ready-made HTTP error as their `Err`: it is the cold path
// and boxing it would only add noise at every call site.
#![allow(clippy::result_large_err)]

use std::collections::{HashMap, HashSet};
use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use bytes::Bytes;
use http_body_util::BodyExt;
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::task::{AbortHandle, JoinSet};

mod modern;
mod open_streams;

use crate::config::{ClusterEra, Faults, Placement, ResumePolicy, Scope};
use crate::context::{self, headers as h, meta};
use crate::oracle::{Oracle, ResumeRecord, TraceRecord};
use crate::rng::SplitMix;
use crate::sse;
use crate::store::{
    EventKind, IdempotencyBegin, MemoryStore, RequestRecord, RequestState, SessionRecord, Store,
    StoreError, StoreFuture, StoredEvent, StreamKind, StreamRecord,
};
use crate::tools;
use mcp_resume_server::guard::{
    call_key, claim_message, Answer, ClaimOutcome, Retry, StoreOp, StoredOutcome,
};
use mcp_resume_server::ids::{ClaimToken, IdempotencyKey};

/// JSON-RPC error codes used on the wire.
pub(crate) mod code {
    pub const PARSE_ERROR: i64 = -32700;
    pub const INVALID_REQUEST: i64 = -32600;
    pub const METHOD_NOT_FOUND: i64 = -32601;
    pub const INVALID_PARAMS: i64 = -32602;
    pub const INTERNAL: i64 = -32603;
    /// Server-defined: session not found, forbidden origin, idempotency conflicts.
    pub const SERVER: i64 = -32000;
    /// What the TypeScript SDK answers for an unknown session.
    pub const SESSION_NOT_FOUND: i64 = -32001;
}

/// Ended sessions an instance remembers (for its 404s) before starting over.
const MAX_TOMBSTONES: usize = 100_000;

/// Longest accepted `Mcp-Session-Id` / `Last-Event-ID` value.
const MAX_ID_LEN: usize = 128;

/// How long a live-following resume waits on the store before re-checking its client.
const FOLLOW_POLL: Duration = Duration::from_millis(500);

/// Settings common to every instance of a cluster.
#[derive(Debug)]
pub(crate) struct Settings {
    pub era: ClusterEra,
    pub placement: Placement,
    pub extension: bool,
    pub retry_ms: Option<u64>,
    pub json_response: bool,
    pub max_body_bytes: usize,
    pub allowed_origins: Vec<String>,
    pub check_host: bool,
}

/// What an instance keeps across restarts: its identity and its view of the cluster.
pub(crate) struct InstanceEnv {
    pub index: usize,
    pub settings: Arc<Settings>,
    pub shared: Arc<dyn Store>,
    pub oracle: Oracle,
    pub faults: Arc<RwLock<Faults>>,
    pub log_rng: Arc<Mutex<Option<SplitMix>>>,
    /// Armed crashes (a cluster's; stand-alone instances have none).
    pub crash: Option<Arc<CrashPoints>>,
}

/// Calls armed to crash their instance mid-call (see `Cluster::crash_mid_call`): by caller
/// tag, the step after which the instance dies. Shared by a cluster's instances.
pub(crate) struct CrashPoints {
    armed: Mutex<HashMap<String, u64>>,
    /// Who kills (and restarts) an instance on request: the cluster.
    kill: mpsc::UnboundedSender<usize>,
}

impl CrashPoints {
    pub(crate) fn new(kill: mpsc::UnboundedSender<usize>) -> Self {
        Self {
            armed: Mutex::new(HashMap::new()),
            kill,
        }
    }

    /// Arms a one-shot crash of whichever instance runs the call tagged `tag`, right after
    /// its `after_steps`-th step.
    pub(crate) fn arm(&self, tag: &str, after_steps: u64) {
        lock(&self.armed).insert(tag.to_owned(), after_steps.max(1));
    }
}

struct RunningCall {
    abort: AbortHandle,
    stream: Option<(String, Arc<AtomicU64>)>,
}

/// One life of an instance: everything here is lost when it is killed.
pub(crate) struct Incarnation {
    pub env: Arc<InstanceEnv>,
    local: MemoryStore,
    tasks: Mutex<JoinSet<()>>,
    running: Mutex<HashMap<(String, String), RunningCall>>,
    standalone: Mutex<open_streams::OpenStreams>,
    tombstones: Mutex<HashSet<String>>,
    /// Set before a kill aborts the running calls: from then on, what they held belongs to
    /// the store's record of the death, not to them (see [`KeyClaim`]).
    dying: AtomicBool,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A running instance: its address and the handles that kill it.
pub(crate) struct RunningInstance {
    pub addr: SocketAddr,
    pub incarnation: Arc<Incarnation>,
    accept: tokio::task::JoinHandle<()>,
    connections: Arc<Mutex<JoinSet<()>>>,
}

impl RunningInstance {
    /// Stops accepting, drops every connection and every running call, without waiting and
    /// without telling the shared store (for teardown on drop).
    pub(crate) fn abort(&self) {
        self.incarnation.dying.store(true, Ordering::SeqCst);
        self.accept.abort();
        lock(&self.connections).abort_all();
        lock(&self.incarnation.tasks).abort_all();
    }

    /// Stops accepting, drops every connection and every running call.
    pub(crate) async fn kill(self) {
        self.incarnation.dying.store(true, Ordering::SeqCst);
        self.accept.abort();
        let _ = self.accept.await;
        lock(&self.connections).abort_all();
        lock(&self.incarnation.tasks).abort_all();
        lock(&self.incarnation.standalone).clear();
        let _ = self
            .incarnation
            .env
            .shared
            .release_instance(self.incarnation.env.index)
            .await;
    }
}

/// Starts a fresh incarnation on 127.0.0.1, port 0.
pub(crate) async fn start(env: Arc<InstanceEnv>) -> io::Result<RunningInstance> {
    let listener = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
    serve(env, listener, None)
}

/// Starts a fresh incarnation on `listener`, with `extra` routes beside `/mcp`.
pub(crate) fn serve(
    env: Arc<InstanceEnv>,
    listener: TcpListener,
    extra: Option<Router>,
) -> io::Result<RunningInstance> {
    let addr = listener.local_addr()?;
    let incarnation = Arc::new(Incarnation {
        env,
        local: MemoryStore::new(),
        tasks: Mutex::new(JoinSet::new()),
        running: Mutex::new(HashMap::new()),
        standalone: Mutex::new(open_streams::OpenStreams::new(
            open_streams::MAX_OPEN_STREAMS,
        )),
        tombstones: Mutex::new(HashSet::new()),
        dying: AtomicBool::new(false),
    });
    let mut router = router(incarnation.clone());
    if let Some(extra) = extra {
        router = router.merge(extra);
    }
    let connections = Arc::new(Mutex::new(JoinSet::new()));
    let conns = connections.clone();
    let accept = tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                continue;
            };
            let _ = tcp.set_nodelay(true);
            let service = hyper_util::service::TowerToHyperService::new(router.clone());
            let mut set = lock(&conns);
            while set.try_join_next().is_some() {}
            set.spawn(async move {
                let builder = hyper_util::server::conn::auto::Builder::new(
                    hyper_util::rt::TokioExecutor::new(),
                );
                let _ = builder
                    .serve_connection(hyper_util::rt::TokioIo::new(tcp), service)
                    .await;
            });
        }
    });
    Ok(RunningInstance {
        addr,
        incarnation,
        accept,
        connections,
    })
}

fn router(inc: Arc<Incarnation>) -> Router {
    Router::new()
        .route(
            "/mcp",
            post(handle_post)
                .get(handle_get)
                .delete(handle_delete)
                .fallback(method_not_allowed),
        )
        .fallback(not_found)
        .with_state(inc)
}

// ---------------------------------------------------------------------------------------
// Responses

/// A JSON-RPC error response with an HTTP status.
pub(crate) fn rpc_error(
    status: StatusCode,
    code: i64,
    message: &str,
    data: Option<Value>,
) -> Response {
    let mut error = json!({ "code": code, "message": message });
    if let Some(d) = data {
        error["data"] = d;
    }
    json_response(
        status,
        &json!({ "jsonrpc": "2.0", "id": null, "error": error }),
    )
}

fn json_response(status: StatusCode, body: &Value) -> Response {
    let mut resp = Response::new(Body::from(body.to_string()));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

fn sse_response(rx: mpsc::UnboundedReceiver<Bytes>) -> Response {
    // Events already queued go out as one chunk: fewer writes for the common case of a
    // quick call whose priming event and response are ready together. Nothing waits.
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        let first = rx.recv().await?;
        let mut more = match rx.try_recv() {
            Ok(next) => {
                let mut buf = bytes::BytesMut::from(&first[..]);
                buf.extend_from_slice(&next);
                buf
            }
            Err(_) => return Some((Ok::<_, Infallible>(first), rx)),
        };
        while more.len() < 64 * 1024 {
            match rx.try_recv() {
                Ok(next) => more.extend_from_slice(&next),
                Err(_) => break,
            }
        }
        Some((Ok(more.freeze()), rx))
    });
    let mut resp = Response::new(Body::from_stream(stream));
    let hs = resp.headers_mut();
    hs.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    hs.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    resp
}

/// The guard's own answer, as the response to send.
fn guard_answer(answer: Answer) -> Response {
    let (status, pairs, body) = answer.into_parts();
    let mut resp = Response::new(Body::from(body));
    *resp.status_mut() = status;
    for (name, value) in pairs {
        resp.headers_mut().insert(name, value);
    }
    resp
}

fn store_failure(e: StoreError) -> Response {
    rpc_error(
        StatusCode::INTERNAL_SERVER_ERROR,
        code::INTERNAL,
        &e.to_string(),
        None,
    )
}

async fn not_found() -> Response {
    rpc_error(
        StatusCode::NOT_FOUND,
        code::INVALID_REQUEST,
        "Not found: the MCP endpoint is /mcp",
        None,
    )
}

async fn method_not_allowed(State(inc): State<Arc<Incarnation>>) -> Response {
    not_allowed(inc.settings().era)
}

/// 405 with the methods the era serves: a 2026-07-28-only server has no GET stream and no
/// session to DELETE.
fn not_allowed(era: ClusterEra) -> Response {
    let mut resp = rpc_error(
        StatusCode::METHOD_NOT_ALLOWED,
        code::INVALID_REQUEST,
        "Method not allowed",
        None,
    );
    let allow = if era.serves_legacy() {
        "GET, POST, DELETE"
    } else {
        "POST"
    };
    resp.headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static(allow));
    resp
}

fn session_not_found() -> Response {
    rpc_error(
        StatusCode::NOT_FOUND,
        code::SESSION_NOT_FOUND,
        "Session not found",
        None,
    )
}

fn bad_request(message: &str) -> Response {
    rpc_error(
        StatusCode::BAD_REQUEST,
        code::INVALID_REQUEST,
        message,
        None,
    )
}

// ---------------------------------------------------------------------------------------
// Header checks

fn is_local_host(host: &str) -> bool {
    // Strip a port; keep bracketed IPv6 intact.
    let name = if let Some(rest) = host.strip_prefix('[') {
        match rest.find(']') {
            Some(end) => &host[..end + 2],
            None => return false,
        }
    } else {
        host.split(':').next().unwrap_or("")
    };
    matches!(
        name.to_ascii_lowercase().as_str(),
        "localhost" | "127.0.0.1" | "[::1]"
    )
}

impl Incarnation {
    fn settings(&self) -> &Settings {
        &self.env.settings
    }

    /// DNS-rebinding protection, as the official SDKs do it for local servers.
    fn check_origin(&self, headers: &HeaderMap) -> Result<(), Response> {
        let s = self.settings();
        if s.check_host {
            if let Some(host) = headers.get(header::HOST) {
                let ok = host.to_str().map(is_local_host).unwrap_or(false);
                if !ok {
                    return Err(rpc_error(
                        StatusCode::FORBIDDEN,
                        code::SERVER,
                        "Invalid Host header",
                        None,
                    ));
                }
            }
        }
        if let Some(origin) = headers.get(header::ORIGIN) {
            let ok = origin.to_str().is_ok_and(|o| {
                s.allowed_origins.iter().any(|a| a == o)
                    || o.strip_prefix("http://")
                        .or_else(|| o.strip_prefix("https://"))
                        .is_some_and(|rest| !rest.contains('/') && is_local_host(rest))
            });
            if !ok {
                return Err(rpc_error(
                    StatusCode::FORBIDDEN,
                    code::SERVER,
                    "Invalid Origin header",
                    None,
                ));
            }
        }
        Ok(())
    }

    fn sessions(&self) -> &dyn Store {
        self.store_for(self.settings().placement.sessions)
    }

    fn requests(&self) -> &dyn Store {
        self.store_for(self.settings().placement.requests)
    }

    pub(crate) fn prepared(&self) -> &dyn Store {
        self.store_for(self.settings().placement.prepared)
    }

    fn store_for(&self, scope: Scope) -> &dyn Store {
        match scope {
            Scope::Local => &self.local,
            Scope::Shared => &*self.env.shared,
        }
    }

    /// The session in force on this instance for `id`: the stored record, or — on a
    /// permissive instance — a default one made up on the spot.
    async fn resolve_session(
        &self,
        id: &str,
        headers: &HeaderMap,
    ) -> Result<Option<SessionRecord>, StoreError> {
        if let Some(rec) = self.sessions().get_session(id).await? {
            return Ok(Some(rec));
        }
        let permissive = self.settings().placement.resume == ResumePolicy::Permissive;
        if !permissive || lock(&self.tombstones).contains(id) {
            return Ok(None);
        }
        let version = headers
            .get(h::PROTOCOL_VERSION)
            .and_then(|v| v.to_str().ok())
            .filter(|v| context::is_supported(v))
            .unwrap_or(context::DEFAULT_VERSION)
            .to_owned();
        let server_caps = context::server_capabilities(self.settings().extension);
        let client_caps = context::empty_object();
        let rec = SessionRecord {
            id: id.to_owned(),
            capability_hash: context::capability_hash(&version, &client_caps, &server_caps),
            protocol_version: version,
            client_capabilities: client_caps,
            server_capabilities: server_caps,
            created_by: self.env.index,
            default_context: true,
        };
        self.env.oracle.session_made_up().await?;
        self.sessions().put_session(rec.clone()).await?;
        Ok(Some(rec))
    }

    fn with_session_headers(&self, mut resp: Response, session: &SessionRecord) -> Response {
        if self.settings().extension {
            if let Ok(v) = HeaderValue::from_str(&session.capability_hash) {
                resp.headers_mut().insert(h::CAPABILITY_HASH, v);
            }
        }
        resp
    }

    /// Remembers that this instance ended a session (bounded: a very old one is forgotten).
    fn bury(&self, sid: &str) {
        let mut t = lock(&self.tombstones);
        if t.len() >= MAX_TOMBSTONES {
            t.clear();
        }
        t.insert(sid.to_owned());
    }

    /// Whether the call tagged `tag` must crash this instance now, after its step `step`;
    /// if so, the kill has been requested and the caller must not go on.
    pub(crate) fn crash_point(&self, tag: Option<&str>, step: u64) -> bool {
        let (Some(crash), Some(tag)) = (&self.env.crash, tag) else {
            return false;
        };
        let mut armed = lock(&crash.armed);
        if armed.get(tag).is_some_and(|n| step >= *n) {
            armed.remove(tag);
            let _ = crash.kill.send(self.env.index);
            return true;
        }
        false
    }

    pub(crate) fn spawn_task(
        &self,
        fut: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> AbortHandle {
        let mut set = lock(&self.tasks);
        while set.try_join_next().is_some() {}
        set.spawn(fut)
    }

    /// [`Incarnation::spawn_task`] for work that may execute a tool: the oracle counts it in
    /// flight from now until it ends or is aborted, polled or not (see `Oracle::in_flight`).
    pub(crate) fn spawn_call(
        &self,
        fut: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> AbortHandle {
        let in_flight = self.env.oracle.in_flight();
        self.spawn_task(async move {
            let _in_flight = in_flight;
            fut.await;
        })
    }

    fn new_event_id(&self, stream: &str, seq: u64) -> String {
        if self.settings().extension {
            format!("{stream}-{seq}")
        } else {
            // Stock servers promise nothing about their ids: make them unique but not
            // contiguous, so a client cannot rely on sequencing that was not advertised.
            format!("{stream}_{}", seq * 7 + 3)
        }
    }

    fn log_loses_event(&self) -> bool {
        let p = match lock_read(&self.env.faults).log_loss {
            Some((_, p)) => p,
            None => return false,
        };
        let mut rng = lock(&self.env.log_rng);
        rng.as_mut().is_some_and(|r| r.chance(p))
    }
}

fn lock_read<T>(l: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(|p| p.into_inner())
}

/// Parses and validates the `Mcp-Session-Id` header: `Ok(None)` when absent.
fn session_header(headers: &HeaderMap) -> Result<Option<String>, Response> {
    let Some(v) = headers.get(h::SESSION_ID) else {
        return Ok(None);
    };
    let bytes = v.as_bytes();
    if bytes.is_empty()
        || bytes.len() > MAX_ID_LEN
        || !bytes.iter().all(|b| (0x21..=0x7e).contains(b))
    {
        return Err(bad_request("Bad Request: malformed Mcp-Session-Id header"));
    }
    Ok(Some(String::from_utf8_lossy(bytes).into_owned()))
}

/// The session id of a request that needs one (everything but `initialize`).
fn required_session(headers: &HeaderMap) -> Result<String, Response> {
    session_header(headers)?
        .ok_or_else(|| bad_request("Bad Request: Mcp-Session-Id header is required"))
}

fn check_protocol_header(headers: &HeaderMap) -> Result<(), Response> {
    if let Some(v) = headers.get(h::PROTOCOL_VERSION) {
        let ok = v.to_str().is_ok_and(context::is_supported);
        if !ok {
            return Err(bad_request(&format!(
                "Bad Request: unsupported MCP-Protocol-Version (supported: {})",
                context::SUPPORTED_VERSIONS.join(", ")
            )));
        }
    }
    Ok(())
}

fn accepts(headers: &HeaderMap, needed: &str) -> bool {
    headers.get_all(header::ACCEPT).iter().any(|v| {
        v.to_str().is_ok_and(|s| {
            s.split(',').any(|part| {
                let t = part.split(';').next().unwrap_or("").trim();
                t.eq_ignore_ascii_case(needed) || t == "*/*"
            })
        })
    })
}

// ---------------------------------------------------------------------------------------
// POST

enum Message {
    Request {
        id: Value,
        method: String,
        value: Value,
    },
    Notification {
        method: String,
        value: Value,
    },
    Response,
}

fn classify(v: &Value) -> Option<Message> {
    let obj = v.as_object()?;
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return None;
    }
    match (obj.get("method"), obj.get("id")) {
        (Some(Value::String(m)), Some(id @ (Value::String(_) | Value::Number(_)))) => {
            Some(Message::Request {
                id: id.clone(),
                method: m.clone(),
                value: v.clone(),
            })
        }
        (Some(Value::String(m)), None) => Some(Message::Notification {
            method: m.clone(),
            value: v.clone(),
        }),
        (None, Some(_)) if obj.contains_key("result") || obj.contains_key("error") => {
            Some(Message::Response)
        }
        _ => None,
    }
}

/// A POST body, read whole within `max_body_bytes`. One over the bound is `413`: with the
/// extension on, the guard's `IDEMPOTENCY_UNGUARDABLE` when the request names a key (its
/// header, or a key's member in the bound's worth of its first bytes, which are read to
/// tell), as the guard refuses a keyed call it cannot see whole rather than run it; else the
/// server's own.
async fn read_body(inc: &Incarnation, req: Request) -> Result<(HeaderMap, Bytes), Response> {
    let max = inc.settings().max_body_bytes;
    let (parts, mut body) = req.into_parts();
    let too_large = |read: &[u8]| {
        let keyed = inc
            .settings()
            .extension
            .then(|| Answer::for_unguardable_body(&parts.headers, read, true))
            .flatten();
        match keyed {
            Some(answer) => guard_answer(answer),
            None => rpc_error(
                StatusCode::PAYLOAD_TOO_LARGE,
                code::INVALID_REQUEST,
                &format!("Request body larger than {max} bytes"),
                None,
            ),
        }
    };
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    // Declared over the bound: what it says matters only for a key it may name.
    let settled = !inc.settings().extension || parts.headers.contains_key(h::IDEMPOTENCY_KEY);
    if settled && declared.is_some_and(|n| n > max as u64) {
        return Err(too_large(&[]));
    }
    let mut read = Vec::with_capacity(declared.map_or(0, |n| n.min(max as u64) as usize));
    while let Some(frame) = body.frame().await {
        let Ok(frame) = frame else {
            return Err(bad_request("Bad Request: could not read the request body"));
        };
        if let Ok(data) = frame.into_data() {
            read.extend_from_slice(&data);
            if read.len() > max {
                read.truncate(max);
                return Err(too_large(&read));
            }
        }
    }
    Ok((parts.headers, Bytes::from(read)))
}

/// Tells the oracle the W3C trace context a request carried (its `traceparent` header, and a
/// single message's `params._meta.traceparent`), if it carried any.
async fn record_trace(
    inc: &Incarnation,
    http_method: &str,
    headers: &HeaderMap,
    message: Option<&Value>,
) {
    let header = headers
        .get("traceparent")
        .and_then(|v| v.to_str().ok())
        .map(kept_traceparent);
    let meta = message
        .and_then(|m| m.get("params"))
        .and_then(|p| p.get("_meta"));
    fn text(v: Option<&Value>) -> Option<&str> {
        v.and_then(Value::as_str)
    }
    let meta_traceparent = text(meta.and_then(|m| m.get("traceparent"))).map(kept_traceparent);
    if header.is_none() && meta_traceparent.is_none() {
        return;
    }
    // The record holds what the client sent, so only as much of it as is meaningful: a tag
    // a call could carry, and a method name of reasonable length.
    let record = TraceRecord {
        instance: inc.env.index,
        http_method: http_method.to_owned(),
        mcp_method: text(message.and_then(|m| m.get("method")))
            .filter(|m| m.len() <= meta::MAX_TAG_LEN)
            .map(str::to_owned),
        tag: text(meta.and_then(|m| m.get(meta::TAG)))
            .filter(|t| t.len() <= meta::MAX_TAG_LEN)
            .map(str::to_owned),
        traceparent: header,
        meta_traceparent,
    };
    inc.env.oracle.trace(record).await;
}

/// A W3C `traceparent` (version 00 is 55 bytes) as a trace record keeps it: anything past
/// that length is cut, so a client cannot make the oracle hold an arbitrarily long one.
fn kept_traceparent(v: &str) -> String {
    let mut end = v.len().min(TRACEPARENT_LEN);
    while !v.is_char_boundary(end) {
        end -= 1;
    }
    v[..end].to_owned()
}

/// The length of a version-00 `traceparent`.
const TRACEPARENT_LEN: usize = 55;

async fn handle_post(State(inc): State<Arc<Incarnation>>, req: Request) -> Response {
    // In flight until it has answered: the work it spawns for a call counts on its own.
    let _in_flight = inc.env.oracle.in_flight();
    inc.env.oracle.request(inc.env.index).await;
    if let Err(r) = inc.check_origin(req.headers()) {
        return r;
    }
    // A body with a content coding cannot be read to tell keyed or not: refused as the guard
    // refuses it, keyed or not, rather than decoded here (which behind a guard would run a
    // keyed call unguarded on every re-send).
    if inc.settings().extension {
        if let Some(answer) = Answer::for_encoded_body(req.headers()) {
            return guard_answer(answer);
        }
    }
    if !(accepts(req.headers(), "application/json") && accepts(req.headers(), "text/event-stream"))
    {
        return rpc_error(
            StatusCode::NOT_ACCEPTABLE,
            code::INVALID_REQUEST,
            "Not Acceptable: Accept must include application/json and text/event-stream",
            None,
        );
    }
    let json_ct = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .eq_ignore_ascii_case("application/json")
        });
    if !json_ct {
        return rpc_error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            code::INVALID_REQUEST,
            "Unsupported Media Type: Content-Type must be application/json",
            None,
        );
    }
    let (headers, body) = match read_body(&inc, req).await {
        Ok(x) => x,
        Err(r) => return r,
    };
    let parsed: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(_) => {
            // A keyed call the guard cannot read it refuses rather than let a lenient reader
            // behind it run the call unguarded.
            if inc.settings().extension {
                if let Some(answer) = Answer::for_unguardable_body(&headers, &body, false) {
                    return guard_answer(answer);
                }
            }
            return rpc_error(
                StatusCode::BAD_REQUEST,
                code::PARSE_ERROR,
                "Parse error",
                None,
            );
        }
    };
    record_trace(&inc, "POST", &headers, Some(&parsed)).await;
    if modern::serves(inc.settings().era, &headers, &parsed) {
        return modern::handle_post(&inc, headers, parsed, &body).await;
    }
    let (items, batch) = match parsed {
        Value::Array(items) if !items.is_empty() => (items, true),
        Value::Array(_) => return bad_request("Invalid Request: empty batch"),
        single => (vec![single], false),
    };
    let mut messages = Vec::with_capacity(items.len());
    for item in &items {
        match classify(item) {
            Some(m) => messages.push(m),
            None => return bad_request("Invalid Request: not a JSON-RPC 2.0 message"),
        }
    }
    let is_init =
        |m: &Message| matches!(m, Message::Request { method, .. } if method == "initialize");
    if messages.iter().any(is_init) {
        if batch {
            return bad_request("Invalid Request: initialize must not be part of a batch");
        }
        return match messages.pop() {
            Some(Message::Request { id, value, .. }) => initialize(&inc, id, &value).await,
            _ => bad_request("Invalid Request"),
        };
    }
    let sid = match required_session(&headers).and_then(|sid| {
        check_protocol_header(&headers)?;
        Ok(sid)
    }) {
        Ok(sid) => sid,
        Err(r) => return r,
    };
    let session = match inc.resolve_session(&sid, &headers).await {
        Ok(Some(s)) => s,
        Ok(None) => return session_not_found(),
        Err(e) => return store_failure(e),
    };
    // A key claims one call's outcome for one exchange: the guard cannot claim one inside a
    // batch, so it refuses the batch (any key, even an invalid one) before anything in it is
    // handled, and so does this.
    let keyed = |value: &Value| {
        headers.contains_key(h::IDEMPOTENCY_KEY)
            || !matches!(
                call_key(&Value::Null, value.get("params"), &HeaderMap::new()),
                Ok(None)
            )
    };
    let keyed_call = |m: &Message| matches!(m, Message::Request { method, value, .. } if method == "tools/call" && keyed(value));
    if inc.settings().extension && batch && messages.iter().any(keyed_call) {
        let resp = rpc_error(
            StatusCode::BAD_REQUEST,
            code::INVALID_REQUEST,
            "a keyed call in a batch cannot be guarded: send it alone",
            Some(json!({ "code": mcp_resume_server::wire::codes::IDEMPOTENCY_UNGUARDABLE })),
        );
        return inc.with_session_headers(resp, &session);
    }
    let mut requests = Vec::new();
    for m in messages {
        match m {
            Message::Request { id, method, value } => requests.push((id, method, value)),
            Message::Notification { method, value } => {
                notification(&inc, &session, &method, &value).await
            }
            Message::Response => {}
        }
    }
    if requests.is_empty() {
        let resp = StatusCode::ACCEPTED.into_response();
        return inc.with_session_headers(resp, &session);
    }
    if inc.settings().extension {
        // Keys are read by the guard's own rule: one it would refuse is refused here as it
        // refuses it, before anything runs, not ignored with the call run unkeyed.
        for (id, method, value) in &requests {
            if method != "tools/call" {
                continue;
            }
            if let Err(answer) = call_key(id, value.get("params"), &headers) {
                return inc.with_session_headers(guard_answer(answer), &session);
            }
        }
    }
    // A keyed call comes alone (a batch holding one was refused above).
    let claimed = match requests.as_slice() {
        [(id, method, value)] if !batch && method == "tools/call" => {
            match claim_up_front(&inc, id, value, &body, &headers, false).await {
                Ok(claimed) => claimed,
                Err(refused) => return inc.with_session_headers(refused, &session),
            }
        }
        _ => None,
    };
    let use_sse =
        !inc.settings().json_response && requests.iter().any(|(_, m, _)| m == "tools/call");
    let resp = if use_sse {
        respond_sse(inc.clone(), session.clone(), requests, headers, claimed).await
    } else {
        respond_json(
            inc.clone(),
            session.clone(),
            requests,
            headers,
            batch,
            claimed,
        )
        .await
    };
    inc.with_session_headers(resp, &session)
}

async fn initialize(inc: &Incarnation, id: Value, req: &Value) -> Response {
    let params = req.get("params").cloned().unwrap_or(Value::Null);
    let Some(requested) = params.get("protocolVersion").and_then(Value::as_str) else {
        let body = json!({"jsonrpc": "2.0", "id": id, "error": {
            "code": code::INVALID_PARAMS, "message": "initialize: params.protocolVersion is required"}});
        return json_response(StatusCode::BAD_REQUEST, &body);
    };
    let version = if context::is_supported(requested) {
        requested
    } else {
        context::LATEST_VERSION
    };
    let client_caps = match params.get("capabilities") {
        Some(c @ Value::Object(_)) => c.clone(),
        _ => context::empty_object(),
    };
    let server_caps = context::server_capabilities(inc.settings().extension);
    let session_id = uuid::Uuid::new_v4().simple().to_string();
    let rec = SessionRecord {
        id: session_id.clone(),
        capability_hash: context::capability_hash(version, &client_caps, &server_caps),
        protocol_version: version.to_owned(),
        client_capabilities: client_caps,
        server_capabilities: server_caps.clone(),
        created_by: inc.env.index,
        default_context: false,
    };
    // The truth first: a session the oracle does not know would never be flagged.
    if let Err(e) = inc
        .env
        .oracle
        .initialized(&session_id, &rec.capability_hash)
        .await
    {
        return store_failure(e);
    }
    if let Err(e) = inc.sessions().put_session(rec.clone()).await {
        return store_failure(e);
    }
    let result = json!({
        "protocolVersion": version,
        "capabilities": server_caps,
        "serverInfo": { "name": "mcp-resume-mock", "version": env!("CARGO_PKG_VERSION") },
        "instructions": format!("mock MCP instance {}", inc.env.index),
    });
    let body = json!({ "jsonrpc": "2.0", "id": id, "result": result });
    let mut resp = json_response(StatusCode::OK, &body);
    if let Ok(v) = HeaderValue::from_str(&session_id) {
        resp.headers_mut().insert(h::SESSION_ID, v);
    }
    inc.with_session_headers(resp, &rec)
}

async fn notification(inc: &Incarnation, session: &SessionRecord, method: &str, value: &Value) {
    if method == "notifications/cancelled" {
        let Some(rid) = value.pointer("/params/requestId") else {
            return;
        };
        let call = lock(&inc.running).remove(&(session.id.clone(), rid.to_string()));
        if let Some(call) = call {
            call.abort.abort();
            // The aborted task cannot finish its bookkeeping: close the stream for it so
            // readers of the log do not wait for a response that will never come.
            if let Some((stream, seq)) = call.stream {
                let _ = inc
                    .env
                    .shared
                    .finish_stream(&stream, seq.load(Ordering::SeqCst))
                    .await;
            }
            let rec = RequestRecord {
                session: session.id.clone(),
                stream: None,
                request_id: rid.clone(),
                instance: inc.env.index,
                state: RequestState::Done,
            };
            let _ = inc.requests().put_request(rec).await;
        }
    }
    // notifications/initialized, progress and anything else need no action.
}

/// Writes ids and events of one stream, to the log and to the live connection.
pub(crate) struct Emitter {
    inc: Arc<Incarnation>,
    stream: String,
    seq: Arc<AtomicU64>,
    live: Option<mpsc::UnboundedSender<Bytes>>,
    /// 2026-07-28: events carry no id and are not logged (nothing is ever resumed).
    modern: bool,
}

impl Emitter {
    /// Emits one id-carrying event. A dead live connection is not an error: the log keeps
    /// the event for a resume.
    pub(crate) async fn emit(
        &mut self,
        data: String,
        kind: EventKind,
        retry: Option<u64>,
    ) -> Result<(), StoreError> {
        if self.modern {
            if let Some(tx) = &self.live {
                let _ = tx.send(sse::event(None, retry, &data));
            }
            return Ok(());
        }
        let seq = self.seq.fetch_add(1, Ordering::SeqCst) + 1;
        let id = self.inc.new_event_id(&self.stream, seq);
        let frame = sse::event(Some(&id), retry, &data);
        if !self.inc.log_loses_event() {
            self.inc
                .env
                .shared
                .append_event(
                    &self.stream,
                    StoredEvent {
                        seq,
                        id,
                        data,
                        kind,
                    },
                )
                .await?;
        }
        if let Some(tx) = &self.live {
            let _ = tx.send(frame);
        }
        Ok(())
    }

    pub(crate) async fn notify(&mut self, notification: Value) {
        let _ = self
            .emit(notification.to_string(), EventKind::Notification, None)
            .await;
    }
}

async fn respond_sse(
    inc: Arc<Incarnation>,
    session: SessionRecord,
    requests: Vec<(Value, String, Value)>,
    headers: HeaderMap,
    claimed: Option<Claimed>,
) -> Response {
    let stream_id = uuid::Uuid::new_v4().simple().to_string()[..16].to_owned();
    let record = StreamRecord {
        id: stream_id.clone(),
        session: session.id.clone(),
        owner: inc.env.index,
        kind: StreamKind::Post,
        capability_hash: session.capability_hash.clone(),
        protocol_version: session.protocol_version.clone(),
        request_ids: requests.iter().map(|(id, _, _)| id.clone()).collect(),
        finished: false,
        head: 0,
    };
    if let Err(e) = inc.env.shared.create_stream(record).await {
        return store_failure(e);
    }
    for (id, _, _) in &requests {
        let rec = RequestRecord {
            session: session.id.clone(),
            stream: Some(stream_id.clone()),
            request_id: id.clone(),
            instance: inc.env.index,
            state: RequestState::Running,
        };
        if let Err(e) = inc.requests().put_request(rec).await {
            return store_failure(e);
        }
    }
    let (tx, rx) = mpsc::unbounded_channel();
    let seq = Arc::new(AtomicU64::new(0));
    let mut emitter = Emitter {
        inc: inc.clone(),
        stream: stream_id.clone(),
        seq: seq.clone(),
        live: Some(tx),
        modern: false,
    };
    if context::sends_priming(&session.protocol_version) {
        if let Err(e) = emitter
            .emit(String::new(), EventKind::Priming, inc.settings().retry_ms)
            .await
        {
            return store_failure(e);
        }
    }
    let task_inc = inc.clone();
    let task_session = session.clone();
    let ids: Vec<Value> = requests.iter().map(|(id, _, _)| id.clone()).collect();
    let abort = inc.spawn_call(async move {
        let inc = task_inc;
        // A claimed key is the only request's: a keyed call never comes in a batch.
        let mut claimed = claimed;
        for (id, method, value) in requests {
            let response = handle_request(
                &inc,
                &task_session,
                &id,
                &method,
                &value,
                &headers,
                Some(&mut emitter),
                claimed.take(),
            )
            .await;
            let _ = emitter
                .emit(
                    response.to_string(),
                    EventKind::Response {
                        request_id: id.clone(),
                    },
                    None,
                )
                .await;
            let rec = RequestRecord {
                session: task_session.id.clone(),
                stream: Some(emitter.stream.clone()),
                request_id: id.clone(),
                instance: inc.env.index,
                state: RequestState::Done,
            };
            let _ = inc.requests().put_request(rec).await;
            lock(&inc.running).remove(&(task_session.id.clone(), id.to_string()));
        }
        let head = emitter.seq.load(Ordering::SeqCst);
        let _ = inc.env.shared.finish_stream(&emitter.stream, head).await;
    });
    {
        let mut running = lock(&inc.running);
        for id in ids {
            running.insert(
                (session.id.clone(), id.to_string()),
                RunningCall {
                    abort: abort.clone(),
                    stream: Some((stream_id.clone(), seq.clone())),
                },
            );
        }
    }
    sse_response(rx)
}

async fn respond_json(
    inc: Arc<Incarnation>,
    session: SessionRecord,
    requests: Vec<(Value, String, Value)>,
    headers: HeaderMap,
    batch: bool,
    claimed: Option<Claimed>,
) -> Response {
    for (id, _, _) in &requests {
        let rec = RequestRecord {
            session: session.id.clone(),
            stream: None,
            request_id: id.clone(),
            instance: inc.env.index,
            state: RequestState::Running,
        };
        if let Err(e) = inc.requests().put_request(rec).await {
            return store_failure(e);
        }
    }
    let ids: Vec<Value> = requests.iter().map(|(id, _, _)| id.clone()).collect();
    // The work runs in its own task: a client that disconnects does not cancel it.
    let (tx, rx) = tokio::sync::oneshot::channel();
    let task_inc = inc.clone();
    let task_session = session.clone();
    let abort = inc.spawn_call(async move {
        let inc = task_inc;
        let mut out = Vec::with_capacity(requests.len());
        // A claimed key is the only request's: a keyed call never comes in a batch.
        let mut claimed = claimed;
        for (id, method, value) in requests {
            let claimed = claimed.take();
            out.push(
                handle_request(
                    &inc,
                    &task_session,
                    &id,
                    &method,
                    &value,
                    &headers,
                    None,
                    claimed,
                )
                .await,
            );
            let rec = RequestRecord {
                session: task_session.id.clone(),
                stream: None,
                request_id: id.clone(),
                instance: inc.env.index,
                state: RequestState::Done,
            };
            let _ = inc.requests().put_request(rec).await;
            lock(&inc.running).remove(&(task_session.id.clone(), id.to_string()));
        }
        let _ = tx.send(out);
    });
    {
        let mut running = lock(&inc.running);
        for id in ids {
            running.insert(
                (session.id.clone(), id.to_string()),
                RunningCall {
                    abort: abort.clone(),
                    stream: None,
                },
            );
        }
    }
    match rx.await {
        Ok(mut out) if !batch && out.len() == 1 => json_response(StatusCode::OK, &out.remove(0)),
        Ok(out) => json_response(StatusCode::OK, &Value::Array(out)),
        // The task was aborted (cancelled): nothing to answer.
        Err(_) => StatusCode::NO_CONTENT.into_response(),
    }
}

fn rpc_result(id: &Value, result: Value) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "result": result })
}

fn rpc_err(id: &Value, code: i64, message: &str, data: Option<Value>) -> Value {
    let mut error = json!({ "code": code, "message": message });
    if let Some(d) = data {
        error["data"] = d;
    }
    json!({ "jsonrpc": "2.0", "id": id, "error": error })
}

// The request's parts and where its answer goes, each used apart: a struct would only name them
// again.
#[allow(clippy::too_many_arguments)]
async fn handle_request(
    inc: &Arc<Incarnation>,
    session: &SessionRecord,
    id: &Value,
    method: &str,
    value: &Value,
    headers: &HeaderMap,
    emitter: Option<&mut Emitter>,
    claimed: Option<Claimed>,
) -> Value {
    match method {
        "ping" => rpc_result(id, json!({})),
        "tools/list" => rpc_result(id, json!({ "tools": tools::list() })),
        "tools/call" => tools_call(inc, session, id, value, headers, emitter, None, claimed).await,
        "initialize" => rpc_err(
            id,
            code::INVALID_REQUEST,
            "initialize is not allowed here",
            None,
        ),
        other => rpc_err(
            id,
            code::METHOD_NOT_FOUND,
            &format!("Method not found: {other}"),
            None,
        ),
    }
}

/// What becomes of a claimed idempotency key when its call ends without an outcome (it was
/// cancelled): released when the call never ran, so the key may run later; lost for good
/// once it ran (its effect may have been applied), so a re-send is answered "outcome
/// unknown" and never runs again. A guard does the same: a claim is let go only before the
/// call reaches the server behind it.
///
/// Not when its instance is being killed: the store's record of the death makes the key
/// lost. Releasing it here would race that record: a key freed first would let a re-sent
/// call run a second time.
struct KeyClaim {
    inc: Arc<Incarnation>,
    key: Option<String>,
    /// Names this claim in the store (see [`Store::idempotency_abandon`]).
    claim: String,
    /// Set once the tool reached its execution (see [`tools::ToolCtx::ran`]).
    ran: AtomicBool,
}

impl Drop for KeyClaim {
    fn drop(&mut self) {
        if self.inc.dying.load(Ordering::SeqCst) {
            return;
        }
        if let Some(key) = self.key.take() {
            let store = self.inc.env.shared.clone();
            if self.ran.load(Ordering::SeqCst) {
                lose(store, key);
            } else {
                release(store, key, std::mem::take(&mut self.claim));
            }
        }
    }
}

/// A name for a new claim, unique across instances and processes sharing a store.
fn new_claim() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// Lets go of `claim`'s hold on `key` (its call never ran), on a task of its own, tried
/// again while the store fails ([`until_taken`]): a claim may have landed although its reply
/// never came (the store went away mid-command, and was still away for the release). Left
/// held by nobody, the key would answer the call's every re-send "in use" under this live
/// instance, for a call that never ran. The release frees only a key `claim` holds, so
/// trying it again never touches another claim's key.
fn release(store: Arc<dyn Store>, key: String, claim: String) {
    until_taken(key, "release", move |key| {
        let (store, claim) = (store.clone(), claim.clone());
        Box::pin(async move { store.idempotency_abandon(&key, &claim).await })
    });
}

/// Marks `key` lost (its call ran and ended without an outcome kept), on a task of its own,
/// tried again while the store fails ([`until_taken`]): left running, the key would answer
/// its every re-send "in use" under this live instance, for good.
fn lose(store: Arc<dyn Store>, key: String) {
    until_taken(key, "lost mark", move |key| {
        let store = store.clone();
        Box::pin(async move { store.idempotency_lose(&key).await })
    });
}

/// Runs `op` on `key` on a task of its own until the store takes it, on the guard's
/// schedule for a failed release ([`Retry`]), read off the operation it would retry: with no
/// lease of its own, a running key of a live instance never lapses here.
fn until_taken<F>(key: String, what: &'static str, op: F)
where
    F: Fn(String) -> StoreFuture<'static, ()> + Send + 'static,
{
    let Ok(rt) = tokio::runtime::Handle::try_current() else {
        return;
    };
    rt.spawn(async move {
        if op(key.clone()).await.is_ok() {
            return;
        }
        let Ok(id) = IdempotencyKey::new(key.as_str()) else {
            return;
        };
        let schedule = StoreOp::Release {
            key: id,
            token: ClaimToken::from_stored(""),
        };
        let mut retry = Retry::after_failure(&schedule, Instant::now(), Duration::ZERO);
        while let Some(next) = retry {
            tokio::time::sleep_until(next.poll_timeout().into()).await;
            if op(key.clone()).await.is_ok() {
                return;
            }
            retry = next.handle_failed(Instant::now());
        }
        tracing::warn!(key, what, "a store operation on a key given up");
    });
}

/// Stores `outcome` as `key`'s; when the store fails, stores it again on a task of its own
/// on the guard's schedule ([`Retry::finish_wait`], with no lease of its own) and, given up
/// on, marks the key lost: left running, the key would answer its every re-send "in use"
/// under this live instance, for a call that ran.
///
/// The task is the incarnation's, ended by its death: the death's record makes the key lost,
/// and the store's finish takes any key, so a retry after it would turn the lost key into a
/// finished one, after a re-send had been told the outcome was unknown.
async fn finish(inc: &Arc<Incarnation>, key: String, outcome: crate::store::StoredOutcome) {
    let store = inc.env.shared.clone();
    let this = inc.clone();
    if store
        .idempotency_finish(&key, outcome.clone())
        .await
        .is_ok()
    {
        return;
    }
    inc.spawn_task(async move {
        let mut failures = 0;
        while let Some(wait) = Retry::finish_wait(failures, Duration::MAX) {
            failures += 1;
            tokio::time::sleep(wait).await;
            // A task spawned as the kill aborted the others is not aborted with them.
            if this.dying.load(Ordering::SeqCst) {
                return;
            }
            if store
                .idempotency_finish(&key, outcome.clone())
                .await
                .is_ok()
            {
                return;
            }
        }
        lose(store, key);
    });
}

/// The guard's answer to a claim that does not let the call run.
fn refusal(outcome: ClaimOutcome, id: &Value) -> Value {
    claim_message(outcome, id).unwrap_or_else(|| rpc_err(id, code::INTERNAL, "claim granted", None))
}

/// The idempotency key a call carries, when the instance honours keys (the extension is on):
/// the guard's own reading (`params._meta`, the `Idempotency-Key` header or
/// `params.idempotencyKey`), the one the request was checked with, so a key accepted there is
/// the key claimed. A key it refuses never gets here: the request was answered 400 first.
fn idempotency_key(
    inc: &Incarnation,
    id: &Value,
    params: &Value,
    headers: &HeaderMap,
) -> Option<String> {
    if !inc.settings().extension {
        return None;
    }
    match call_key(id, Some(params), headers) {
        Ok(Some(key)) => Some(key.as_str().to_owned()),
        Ok(None) | Err(_) => None,
    }
}

/// A `tools/call` as its checks read it: what the claim and the run need.
struct CheckedCall {
    name: String,
    args: Value,
    tag: Option<String>,
    call: tools::Call,
}

/// The checks a `tools/call` passes before its key is claimed: `Err` is its error answer
/// (nothing claimed, nothing run).
fn checked_call(id: &Value, params: &Value, modern: bool) -> Result<CheckedCall, Value> {
    let Some(name) = params.get("name").and_then(Value::as_str) else {
        return Err(rpc_err(
            id,
            code::INVALID_PARAMS,
            "tools/call: params.name is required",
            None,
        ));
    };
    let args = match params.get("arguments") {
        None | Some(Value::Null) => context::empty_object(),
        Some(a @ Value::Object(_)) => a.clone(),
        Some(_) => {
            return Err(rpc_err(
                id,
                code::INVALID_PARAMS,
                "tools/call: arguments must be an object",
                None,
            ))
        }
    };
    let tag = params
        .get("_meta")
        .and_then(|m| m.get(meta::TAG))
        .and_then(Value::as_str)
        .map(str::to_owned);
    if tag.as_ref().is_some_and(|t| t.len() > meta::MAX_TAG_LEN) {
        return Err(rpc_err(
            id,
            code::INVALID_PARAMS,
            &format!(
                "tools/call: _meta[\"{}\"] is longer than {} bytes",
                meta::TAG,
                meta::MAX_TAG_LEN
            ),
            None,
        ));
    }
    let call = tools::parse(name, &args, modern)
        .map_err(|e| rpc_err(id, code::INVALID_PARAMS, &e, None))?;
    Ok(CheckedCall {
        name: name.to_owned(),
        args,
        tag,
        call,
    })
}

/// What the claim of a keyed call's key, made before its answer begins, decided.
enum Claimed {
    /// The key is this call's: run it.
    Run(KeyClaim),
    /// The guard's answer instead of a run: the key is in use, lost, another call's, or
    /// holds this call's stored answer.
    Answered(Value),
}

/// What the store answered a key's claim, as the task that took it hands it over.
enum Begun {
    /// The key was free: it is now this claim's.
    Claimed(KeyClaim),
    /// The key is in use, lost, or another call's.
    Refused(ClaimOutcome),
    /// The key holds this call's stored outcome.
    Done(crate::store::StoredOutcome),
}

/// `Retry-After` of a keyed call refused while the store cannot take its claim (the guard's
/// default).
const STORE_RETRY_AFTER_SECS: u64 = 1;

/// Claims the key of a keyed `tools/call` (`value`, the request; `body`, its text, whose
/// arguments are digested as written) before anything of its answer is sent, as the guard
/// claims it before the server behind it sees the call: a store that cannot take the claim
/// (Redis out of reach, a memory store full of running and lost keys) is then the guard's
/// `503` `IDEMPOTENCY_STORE_UNAVAILABLE` with `Retry-After` (`Err`), which tells the client
/// nothing ran and to send the call again, rather than an error inside an answer already
/// begun, which would end the call. `None`: the call is unkeyed, or fails its checks
/// (answered by its run, its key untouched).
async fn claim_up_front(
    inc: &Arc<Incarnation>,
    id: &Value,
    value: &Value,
    body: &[u8],
    headers: &HeaderMap,
    modern: bool,
) -> Result<Option<Claimed>, Response> {
    let params = value.get("params").cloned().unwrap_or(Value::Null);
    let Some(key) = idempotency_key(inc, id, &params, headers) else {
        return Ok(None);
    };
    let Ok(checked) = checked_call(id, &params, modern) else {
        return Ok(None);
    };
    let fp = context::written_call_fingerprint(&checked.name, &checked.args, body);
    let claim = new_claim();
    // On a task of its own: the store may take the claim after this request's handler was
    // dropped (its client left while Redis was answering). The task then still makes the
    // `KeyClaim`, which nobody reads and which, dropped, lets the unrun call's key go;
    // made here, after the await, it would never exist, and the key would stay running
    // under this live instance, every re-send refused as in use.
    let claiming = {
        let inc = inc.clone();
        let claim = claim.clone();
        let key = key.clone();
        tokio::spawn(async move {
            let begun = match inc
                .env
                .shared
                .idempotency_begin(&key, &fp, inc.env.index, &claim)
                .await
            {
                Ok(begun) => begun,
                // The claim may have landed though its reply was lost: it is let go, as
                // the guard lets it go, so the call sent again after the 503 is not refused
                // "in use". Here, not in the handler, which may be gone by now.
                Err(e) => {
                    release(inc.env.shared.clone(), key, claim);
                    return Err(e);
                }
            };
            // The instance died while its claim was on the way: the store may have recorded
            // the death before the claim, which would then stay running under a dead
            // instance, held by nobody, every re-send refused "in use" for good. Its claim
            // is a dead holder's, as a guard's that died mid-claim, whose lease lapses to
            // lost: marked lost, as the death's record makes what it finds.
            if begun == IdempotencyBegin::Started && inc.dying.load(Ordering::SeqCst) {
                // Marked before the refusal goes, so that a re-send finds it lost.
                if inc.env.shared.idempotency_lose(&key).await.is_err() {
                    lose(inc.env.shared.clone(), key);
                }
                return Ok(Begun::Refused(ClaimOutcome::Lost));
            }
            Ok::<_, StoreError>(match begun {
                IdempotencyBegin::Started => Begun::Claimed(KeyClaim {
                    inc,
                    key: Some(key),
                    claim,
                    ran: AtomicBool::new(false),
                }),
                IdempotencyBegin::Running => Begun::Refused(ClaimOutcome::InUse),
                IdempotencyBegin::Lost => Begun::Refused(ClaimOutcome::Lost),
                IdempotencyBegin::Mismatch => Begun::Refused(ClaimOutcome::Mismatch),
                IdempotencyBegin::Done(outcome) => Begun::Done(outcome),
            })
        })
    };
    // Refusals and stored answers are the guard's own messages.
    let answered = match claiming.await {
        Ok(Ok(Begun::Claimed(claim))) => return Ok(Some(Claimed::Run(claim))),
        Ok(Ok(Begun::Refused(outcome))) => refusal(outcome, id),
        Ok(Ok(Begun::Done(outcome))) => match inc.env.oracle.idempotent_replay().await {
            Err(e) => rpc_err(id, code::INTERNAL, &e.to_string(), None),
            Ok(()) => match StoredOutcome::from_stored(&outcome.response.to_string()) {
                Some(stored) => refusal(ClaimOutcome::Done(stored), id),
                None => rpc_err(id, code::INTERNAL, "malformed stored outcome", None),
            },
        },
        // A claim task that failed is a store that could not answer: nothing ran. The task
        // let go of a claim whose reply was lost itself.
        Ok(Err(_)) => {
            let answer = Answer::store_unavailable(id, STORE_RETRY_AFTER_SECS);
            return Err(guard_answer(answer));
        }
        // The task ended before letting go of anything (it panicked): the claim it may have
        // left is let go here.
        Err(_) => {
            release(inc.env.shared.clone(), key, claim);
            let answer = Answer::store_unavailable(id, STORE_RETRY_AFTER_SECS);
            return Err(guard_answer(answer));
        }
    };
    Ok(Some(Claimed::Answered(answered)))
}

/// A `tools/call`, legacy or (with `modern`, what the request carried) 2026-07-28: its
/// idempotency key's claim (`claimed`, made by [`claim_up_front`] before the answer began)
/// honoured, the tool run, the outcome stored under the key.
// As `handle_request`'s, the parts are used apart.
#[allow(clippy::too_many_arguments)]
async fn tools_call(
    inc: &Arc<Incarnation>,
    session: &SessionRecord,
    id: &Value,
    value: &Value,
    headers: &HeaderMap,
    emitter: Option<&mut Emitter>,
    modern: Option<modern::Carried<'_>>,
    claimed: Option<Claimed>,
) -> Value {
    let params = value.get("params").cloned().unwrap_or(Value::Null);
    let CheckedCall {
        name: _,
        args,
        tag,
        call,
    } = match checked_call(id, &params, modern.is_some()) {
        Ok(c) => c,
        Err(refused) => return refused,
    };
    let progress_token = params
        .get("_meta")
        .and_then(|m| m.get("progressToken"))
        .cloned();
    let key = idempotency_key(inc, id, &params, headers);
    let mut claim = match claimed {
        Some(Claimed::Run(claim)) => claim,
        Some(Claimed::Answered(answer)) => return answer,
        // Every keyed call that passes its checks was claimed before its answer began.
        None if key.is_some() => {
            return rpc_err(
                id,
                code::INTERNAL,
                "a keyed call reached its run unclaimed",
                None,
            )
        }
        None => KeyClaim {
            inc: inc.clone(),
            key: None,
            claim: String::new(),
            ran: AtomicBool::new(false),
        },
    };
    let ctx = tools::ToolCtx {
        inc: inc.clone(),
        session,
        tag,
        keyed: key.is_some(),
        progress_token,
        emitter,
        ran: &claim.ran,
        modern: modern.map(|c| tools::ModernCall {
            params: &params,
            args: &args,
            carried_hash: c.hash,
            carried_capabilities: c.capabilities,
            log_level: c.log_level,
            tasks: c.tasks,
        }),
    };
    let outcome = tools::run(call, ctx).await;
    let mut response = match outcome {
        Ok(mut result) => {
            if modern.is_some() {
                if result.get("resultType").is_none() {
                    result["resultType"] = json!("complete");
                }
            } else if key.is_some() {
                result["_meta"][meta::CAPABILITY_HASH] = json!(session.capability_hash);
            }
            json!({ "result": result })
        }
        Err(err) => json!({ "error": err }),
    };
    if let Some(key) = claim.key.take() {
        let stored = crate::store::StoredOutcome {
            response: response.clone(),
            capability_hash: session.capability_hash.clone(),
        };
        finish(inc, key, stored).await;
    }
    response["jsonrpc"] = json!("2.0");
    response["id"] = id.clone();
    response
}

// ---------------------------------------------------------------------------------------
// GET

async fn handle_get(State(inc): State<Arc<Incarnation>>, req: Request) -> Response {
    inc.env.oracle.request(inc.env.index).await;
    if !inc.settings().era.serves_legacy() {
        return not_allowed(inc.settings().era);
    }
    let headers = req.headers().clone();
    record_trace(&inc, "GET", &headers, None).await;
    if let Err(r) = inc.check_origin(&headers) {
        return r;
    }
    if !accepts(&headers, "text/event-stream") {
        return rpc_error(
            StatusCode::NOT_ACCEPTABLE,
            code::INVALID_REQUEST,
            "Not Acceptable: Accept must include text/event-stream",
            None,
        );
    }
    let sid = match required_session(&headers).and_then(|sid| {
        check_protocol_header(&headers)?;
        Ok(sid)
    }) {
        Ok(sid) => sid,
        Err(r) => return r,
    };
    if let Some(last) = headers.get(h::LAST_EVENT_ID) {
        return resume(inc.clone(), sid, last.as_bytes().to_vec(), &headers).await;
    }
    let session = match inc.resolve_session(&sid, &headers).await {
        Ok(Some(s)) => s,
        Ok(None) => return session_not_found(),
        Err(e) => return store_failure(e),
    };
    let stream_id = uuid::Uuid::new_v4().simple().to_string()[..16].to_owned();
    let record = StreamRecord {
        id: stream_id.clone(),
        session: session.id.clone(),
        owner: inc.env.index,
        kind: StreamKind::Standalone,
        capability_hash: session.capability_hash.clone(),
        protocol_version: session.protocol_version.clone(),
        request_ids: Vec::new(),
        finished: false,
        head: 0,
    };
    if let Err(e) = inc.env.shared.create_stream(record).await {
        return store_failure(e);
    }
    let (tx, rx) = mpsc::unbounded_channel();
    let mut emitter = Emitter {
        inc: inc.clone(),
        stream: stream_id,
        seq: Arc::new(AtomicU64::new(0)),
        live: Some(tx.clone()),
        modern: false,
    };
    if context::sends_priming(&session.protocol_version) {
        if let Err(e) = emitter
            .emit(String::new(), EventKind::Priming, inc.settings().retry_ms)
            .await
        {
            return store_failure(e);
        }
    }
    // One standalone stream per session and instance: a new one replaces the old (whose
    // connection a balancer may have silently dropped).
    lock(&inc.standalone).insert(session.id.clone(), tx);
    inc.with_session_headers(sse_response(rx), &session)
}

/// Parses `Last-Event-ID` into (stream, sequence) for sequenced ids, or (stream, raw id).
fn parse_last_event_id(raw: &[u8]) -> Option<(String, String)> {
    if raw.is_empty() || raw.len() > MAX_ID_LEN || !raw.iter().all(|b| (0x21..=0x7e).contains(b)) {
        return None;
    }
    let s = std::str::from_utf8(raw).ok()?;
    let cut = s.rfind(['-', '_'])?;
    let (stream, _) = s.split_at(cut);
    if stream.is_empty() || cut + 1 == s.len() {
        return None;
    }
    Some((stream.to_owned(), s.to_owned()))
}

/// The sequence number `Last-Event-ID` points at, if it names an event we issued.
async fn cursor_seq(inc: &Incarnation, stream: &str, raw: &str) -> Result<Option<u64>, StoreError> {
    if inc.settings().extension {
        let n = raw.rsplit('-').next().and_then(|n| n.parse::<u64>().ok());
        return Ok(n.filter(|n| *n >= 1));
    }
    let events = inc.env.shared.events_after(stream, 0).await?;
    Ok(events.iter().find(|e| e.id == raw).map(|e| e.seq))
}

fn reject(inc: &Incarnation, reason: &str) -> Response {
    if !inc.settings().extension {
        return session_not_found();
    }
    let mut resp = rpc_error(
        StatusCode::NOT_FOUND,
        code::SESSION_NOT_FOUND,
        "Session resume rejected: re-initialize",
        Some(json!({ "code": "SESSION_RESUME_REJECTED", "reason": reason })),
    );
    if let Ok(v) = HeaderValue::from_str(reason) {
        resp.headers_mut().insert(h::RESUME_REJECTED, v);
    }
    resp
}

async fn resume(inc: Arc<Incarnation>, sid: String, raw: Vec<u8>, headers: &HeaderMap) -> Response {
    let Some((stream_id, raw_id)) = parse_last_event_id(&raw) else {
        return bad_request("Bad Request: malformed Last-Event-ID");
    };
    let me = inc.env.index;
    let policy = inc.settings().placement.resume;
    let stream = match inc.env.shared.get_stream(&stream_id).await {
        Ok(s) => s,
        Err(e) => return store_failure(e),
    };
    let owner = stream.as_ref().map(|s| s.owner);
    let mut record = ResumeRecord {
        session: sid.clone(),
        stream: stream_id.clone(),
        instance: me,
        owner,
        cross_instance: owner.is_some_and(|o| o != me),
        honored: false,
        reason: None,
    };

    if policy == ResumePolicy::Permissive {
        // The observed system: whatever the shared log holds is replayed, no questions.
        let session = match inc.resolve_session(&sid, headers).await {
            Ok(Some(s)) => s,
            Ok(None) => return session_not_found(),
            Err(e) => return store_failure(e),
        };
        let after = match cursor_seq(&inc, &stream_id, &raw_id).await {
            Ok(n) => n.unwrap_or(0),
            Err(e) => return store_failure(e),
        };
        let follow = stream
            .as_ref()
            .is_some_and(|s| s.owner == me && !s.finished);
        record.honored = true;
        if let Err(e) = inc.env.oracle.resume(record).await {
            return store_failure(e);
        }
        let resp = replay(inc.clone(), stream_id, after, follow, false);
        return inc.with_session_headers(resp, &session);
    }

    match authorize_resume(&inc, &sid, &stream_id, &raw_id, stream.as_ref()).await {
        Ok(Ok((session, after))) => {
            record.honored = true;
            if let Err(e) = inc.env.oracle.resume(record).await {
                return store_failure(e);
            }
            let keep_open = !inc.settings().extension;
            let resp = replay(inc.clone(), stream_id, after, true, keep_open);
            inc.with_session_headers(resp, &session)
        }
        Ok(Err(reason)) => {
            // The server cannot vouch for this session any more: forget it everywhere it
            // can, so every later request gets 404 and the client starts over.
            let _ = inc.sessions().remove_session(&sid).await;
            inc.bury(&sid);
            lock(&inc.standalone).remove(&sid);
            record.reason = Some(reason.to_owned());
            if let Err(e) = inc.env.oracle.resume(record).await {
                return store_failure(e);
            }
            reject(&inc, reason)
        }
        Err(e) => store_failure(e),
    }
}

/// The seed's `authorize_resume`: ownership, gap-free log, resolvable requests, same
/// capability hash. The facts are read from this cluster's stores; the decision is the
/// resume-safety guard's own (`mcp_resume_server::guard::authorize_resume`), so the oracle
/// judges the rule real servers wear. Returns the session and the cursor's sequence number,
/// or the reason.
async fn authorize_resume(
    inc: &Incarnation,
    sid: &str,
    stream_id: &str,
    raw_id: &str,
    stream: Option<&StreamRecord>,
) -> Result<Result<(SessionRecord, u64), &'static str>, StoreError> {
    use mcp_resume_server::guard::{self, CursorFacts, ResumeFacts, StreamFacts};
    use mcp_resume_server::ids::CapabilityHash;

    let session = inc.sessions().get_session(sid).await?;
    // A cursor naming no stream of this session is one nobody here issued for it.
    let stream = stream.filter(|s| s.session == sid);
    let cursor = match (&session, stream) {
        (Some(_), Some(_)) => cursor_seq(inc, stream_id, raw_id).await?,
        _ => None,
    };
    let mut facts = ResumeFacts {
        session: session
            .as_ref()
            .map(|s| CapabilityHash::from_stored(s.capability_hash.clone())),
        cursor: None,
        stream: None,
    };
    let owned_here = stream.is_some_and(|s| {
        inc.settings().placement.resume != ResumePolicy::OwnerOnly || s.owner == inc.env.index
    });
    if let (Some(_), Some(_), false) = (&session, stream, owned_here) {
        // Ownership is judged before the cursor is read.
        facts.cursor = Some(CursorFacts {
            seq: 0,
            owned_here: false,
        });
    }
    if let (Some(stream), Some(after), true) = (stream, cursor, owned_here) {
        facts.cursor = Some(CursorFacts {
            seq: after,
            owned_here,
        });
        let events = inc.env.shared.events_after(stream_id, 0).await?;
        let issued = if stream.finished {
            stream.head
        } else {
            events.last().map_or(0, |e| e.seq)
        };
        // Every event from the cursor on must be in the log, in order, up to what was issued.
        // The cursor is the client's number: at u64::MAX it has no successor, so it names
        // nothing issued (a gap) rather than overflowing.
        let mut gap = after == u64::MAX;
        let mut expect = after.saturating_add(1);
        for e in events.iter().filter(|e| e.seq > after) {
            if e.seq != expect {
                gap = true;
                break;
            }
            expect += 1;
        }
        if stream.finished && expect != stream.head + 1 {
            gap = true;
        }
        let answered_before: HashSet<String> = events
            .iter()
            .filter(|e| e.seq <= after)
            .filter_map(|e| match &e.kind {
                EventKind::Response { request_id } => Some(request_id.to_string()),
                _ => None,
            })
            .collect();
        let mut orphans = false;
        if !gap && after <= issued {
            for rid in stream
                .request_ids
                .iter()
                .filter(|r| !answered_before.contains(&r.to_string()))
            {
                match inc.requests().get_request(sid, rid).await? {
                    Some(r) if r.state != RequestState::Lost => {}
                    _ => {
                        orphans = true;
                        break;
                    }
                }
            }
        }
        facts.stream = Some(StreamFacts {
            of_session: true,
            head: issued,
            earliest: 1,
            broken: gap,
            orphans,
            hash: CapabilityHash::from_stored(stream.capability_hash.clone()),
        });
    }
    match (guard::authorize_resume(&facts), session, cursor) {
        (Ok(()), Some(session), Some(after)) => Ok(Ok((session, after))),
        (Ok(()), _, _) => Ok(Err("event_gap")),
        (Err(reason), _, _) => Ok(Err(reason.as_str())),
    }
}

/// Serves a resumed stream: `retry`, the stored events after the cursor, then (when
/// `follow`) new events until the stream finishes; then ends, or stays open like stock
/// servers do when `keep_open`.
fn replay(
    inc: Arc<Incarnation>,
    stream: String,
    after: u64,
    follow: bool,
    keep_open: bool,
) -> Response {
    let (tx, rx) = mpsc::unbounded_channel();
    if let Some(ms) = inc.settings().retry_ms {
        let _ = tx.send(sse::retry_only(ms));
    }
    let store = inc.env.shared.clone();
    inc.spawn_task(async move {
        let mut last = after;
        let mut first = true;
        loop {
            let events = if first || !follow {
                store.events_after(&stream, last).await
            } else {
                tokio::select! {
                    r = store.wait_events(&stream, last, FOLLOW_POLL) => r,
                    _ = tx.closed() => return,
                }
            };
            first = false;
            let Ok(events) = events else { return };
            for e in &events {
                last = e.seq;
                if tx.send(sse::event(Some(&e.id), None, &e.data)).is_err() {
                    return;
                }
            }
            if !follow {
                break;
            }
            match store.get_stream(&stream).await {
                Ok(Some(s)) if s.finished => {
                    if events.is_empty() {
                        break;
                    }
                }
                Ok(Some(_)) => {}
                _ => break,
            }
        }
        if keep_open {
            tx.closed().await;
        }
    });
    sse_response(rx)
}

// ---------------------------------------------------------------------------------------
// DELETE

async fn handle_delete(State(inc): State<Arc<Incarnation>>, req: Request) -> Response {
    inc.env.oracle.request(inc.env.index).await;
    record_trace(&inc, "DELETE", req.headers(), None).await;
    if !inc.settings().era.serves_legacy() {
        return not_allowed(inc.settings().era);
    }
    let headers = req.headers();
    if let Err(r) = inc.check_origin(headers) {
        return r;
    }
    let sid = match required_session(headers) {
        Ok(sid) => sid,
        Err(r) => return r,
    };
    let existed = match inc.sessions().remove_session(&sid).await {
        Ok(b) => b,
        Err(e) => return store_failure(e),
    };
    inc.bury(&sid);
    lock(&inc.standalone).remove(&sid);
    let permissive = inc.settings().placement.resume == ResumePolicy::Permissive;
    if existed || permissive {
        StatusCode::OK.into_response()
    } else {
        session_not_found()
    }
}
