//! A programmable HTTP/1.1 server on raw TCP, written by hand so it can send what no
//! well-behaved framework would: endless lines, bodies and headers, broken framing, invalid
//! UTF-8, trickles, hangs, redirects, duplicate headers.
//!
//! It answers `initialize`, `notifications/initialized` and the common requests correctly by
//! default; a script decides, request by request, what to answer instead. Every request is
//! recorded (with the connections and requests in flight when it arrived, when its answer
//! ended and how many bytes of the answer the server managed to write), so a test can count
//! what the client did and how long it kept reading.

#![allow(dead_code)]

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::{oneshot, watch};

/// Hang guard for waits on the server: generous, never a stand-in for synchronisation.
pub(crate) const GUARD: Duration = Duration::from_secs(20);
/// Protocol version the server speaks: the one where batches are not allowed.
pub(crate) const VERSION: &str = "2025-11-25";
/// Body of the 400 a stock server sends for a session it does not know.
pub(crate) const NO_VALID_SESSION: &str = r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":"Bad Request: No valid session ID provided"}}"#;

/// A request head larger than this is refused: the server must stay bounded too.
const MAX_REQUEST_HEAD: usize = 64 * 1024;
/// An endless body stops here even if the client keeps reading, so a client that never stops
/// costs CPU for a bounded time and the test can still report what it read.
pub(crate) const ENDLESS_CAP: u64 = 64 * 1024 * 1024;
/// Small socket buffers: the bytes the server "managed to write" then track what the client
/// actually consumed, not what the kernel could absorb.
const SEND_BUFFER: u32 = 64 * 1024;

/// One request as the server saw it.
#[derive(Debug, Clone)]
pub(crate) struct Request {
    /// Arrival order, from 0.
    pub seq: usize,
    /// Connection it came on, from 0.
    pub conn: u64,
    pub method: String,
    pub path: String,
    /// Names in lowercase, values as sent, in order (duplicates kept).
    pub headers: Vec<(String, Vec<u8>)>,
    pub body: Vec<u8>,
    pub json: Option<Value>,
    pub at: Instant,
    /// Connections open when it arrived, its own included.
    pub open_connections: usize,
}

impl Request {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .and_then(|(_, v)| std::str::from_utf8(v).ok())
    }

    pub(crate) fn header_count(&self, name: &str) -> usize {
        self.headers.iter().filter(|(n, _)| n == name).count()
    }

    pub(crate) fn is_post(&self) -> bool {
        self.method == "POST"
    }

    pub(crate) fn is_get(&self) -> bool {
        self.method == "GET"
    }

    pub(crate) fn is_delete(&self) -> bool {
        self.method == "DELETE"
    }

    pub(crate) fn rpc_method(&self) -> Option<&str> {
        self.json.as_ref()?.get("method")?.as_str()
    }

    pub(crate) fn rpc_id(&self) -> Value {
        self.json
            .as_ref()
            .and_then(|b| b.get("id"))
            .cloned()
            .unwrap_or(Value::Null)
    }

    pub(crate) fn params(&self) -> Value {
        self.json
            .as_ref()
            .and_then(|b| b.get("params"))
            .cloned()
            .unwrap_or(Value::Null)
    }

    pub(crate) fn is_rpc(&self, method: &str) -> bool {
        self.is_post() && self.rpc_method() == Some(method)
    }

    /// A POST carrying a JSON-RPC response (an answer to a server request).
    pub(crate) fn is_answer(&self) -> bool {
        self.is_post()
            && self.rpc_method().is_none()
            && self
                .json
                .as_ref()
                .is_some_and(|j| j.get("result").is_some() || j.get("error").is_some())
    }

    pub(crate) fn session_id(&self) -> Option<&str> {
        self.header("mcp-session-id")
    }

    pub(crate) fn last_event_id(&self) -> Option<&str> {
        self.header("last-event-id")
    }

    /// A GET resuming a stream.
    pub(crate) fn is_resume(&self) -> bool {
        self.is_get() && self.header_count("last-event-id") > 0
    }

    pub(crate) fn label(&self) -> String {
        let what = match self.rpc_method() {
            Some(m) => format!("{} {m}", self.method),
            None if self.is_answer() => format!("{} <answer>", self.method),
            None => self.method.clone(),
        };
        match self.last_event_id() {
            Some(id) => format!("{what} (Last-Event-ID {id:.40})"),
            None => what,
        }
    }
}

/// What became of the answer to a request.
#[derive(Debug, Clone, Default)]
pub(crate) struct Outcome {
    /// When the server stopped answering (finished, or the client went away).
    pub done: Option<Instant>,
    /// Bytes of the answer written to the socket.
    pub written: u64,
    /// The client closed the connection while the answer was being written or held.
    pub peer_gone: bool,
}

/// A one-shot signal between a script, the server and the test.
#[derive(Clone)]
pub(crate) struct Latch(Arc<watch::Sender<bool>>);

impl Latch {
    pub(crate) fn new() -> Self {
        Latch(Arc::new(watch::channel(false).0))
    }

    pub(crate) fn open(&self) {
        self.0.send_replace(true);
    }

    pub(crate) fn is_open(&self) -> bool {
        *self.0.borrow()
    }

    /// Waits (hang-guarded) until opened.
    pub(crate) async fn wait(&self) {
        let mut rx = self.0.subscribe();
        let _ = tokio::time::timeout(GUARD, rx.wait_for(|open| *open)).await;
    }
}

/// One thing to do on the connection while answering.
#[derive(Clone)]
pub(crate) enum Step {
    Write(Bytes),
    /// Writes `chunk` again and again until the client stops reading or closes, or
    /// [`ENDLESS_CAP`] bytes are written; then holds the connection until the client leaves.
    Endless(Bytes),
    /// Writes `len` copies of `byte` (a large body without holding it in memory).
    Fill(u8, u64),
    /// Writes `bytes` one byte at a time, `every` apart; `forever` starts over at the end.
    Trickle {
        bytes: Bytes,
        every: Duration,
        forever: bool,
    },
    /// Pacing that is part of the scripted behaviour (a slow server), not synchronisation.
    Pause(Duration),
    Wait(Latch),
    Open(Latch),
    /// Holds the connection open, sending nothing more, until the client closes it.
    Hang,
}

/// The answer to one request.
#[derive(Clone)]
pub(crate) struct Reply {
    steps: Vec<Step>,
    /// The connection may carry another request afterwards.
    keep_alive: bool,
    /// The well-behaved answer (computed by the server).
    default: bool,
}

impl Reply {
    /// The well-behaved answer.
    pub(crate) fn good() -> Self {
        Reply {
            steps: Vec::new(),
            keep_alive: true,
            default: true,
        }
    }

    /// A complete response with a `Content-Length`, on a connection kept alive.
    pub(crate) fn full(status: u16, headers: &[(&str, &str)], body: impl Into<Bytes>) -> Self {
        let body = body.into();
        let mut head = status_line(status);
        for (name, value) in headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
        Reply {
            steps: vec![Step::Write(Bytes::from(head)), Step::Write(body)],
            keep_alive: true,
            default: false,
        }
    }

    pub(crate) fn status(status: u16) -> Self {
        Self::full(status, &[], Bytes::new())
    }

    pub(crate) fn json(status: u16, body: &Value) -> Self {
        Self::full(
            status,
            &[("Content-Type", "application/json")],
            body.to_string(),
        )
    }

    /// A JSON-RPC result for `req`, as JSON.
    pub(crate) fn result(req: &Request, result: Value) -> Self {
        Self::json(200, &result_msg(req, result))
    }

    /// A response head with `headers` and no framing: the body runs until the connection
    /// closes. Continue it with [`Reply::then`] and friends.
    pub(crate) fn head(status: u16, headers: &[(&str, &str)]) -> Self {
        let mut head = status_line(status);
        for (name, value) in headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str("Connection: close\r\n\r\n");
        Reply {
            steps: vec![Step::Write(Bytes::from(head))],
            keep_alive: false,
            default: false,
        }
    }

    /// An SSE head; the body follows.
    pub(crate) fn sse_head() -> Self {
        Self::head(
            200,
            &[
                ("Content-Type", "text/event-stream"),
                ("Cache-Control", "no-cache"),
            ],
        )
    }

    /// An SSE stream with `text`, then closed.
    pub(crate) fn sse(text: impl Into<Bytes>) -> Self {
        Self::sse_head().write(text)
    }

    /// An SSE stream with `text`, then held open until the client leaves.
    pub(crate) fn sse_open(text: impl Into<Bytes>) -> Self {
        Self::sse_head().write(text).hang()
    }

    /// Raw bytes on the wire, status line included, then the connection closes.
    pub(crate) fn raw(bytes: impl Into<Bytes>) -> Self {
        Reply {
            steps: vec![Step::Write(bytes.into())],
            keep_alive: false,
            default: false,
        }
    }

    /// Reads the request and never answers.
    pub(crate) fn hang_before_head() -> Self {
        Reply {
            steps: vec![Step::Hang],
            keep_alive: false,
            default: false,
        }
    }

    /// The same answer, started only after `pause` (a slow server).
    pub(crate) fn after(mut self, pause: Duration) -> Self {
        self.steps.insert(0, Step::Pause(pause));
        self
    }

    pub(crate) fn then(mut self, step: Step) -> Self {
        self.steps.push(step);
        self
    }

    pub(crate) fn write(self, bytes: impl Into<Bytes>) -> Self {
        self.then(Step::Write(bytes.into()))
    }

    pub(crate) fn endless(self, chunk: impl Into<Bytes>) -> Self {
        self.then(Step::Endless(chunk.into()))
    }

    pub(crate) fn hang(self) -> Self {
        self.then(Step::Hang)
    }

    pub(crate) fn pause(self, pause: Duration) -> Self {
        self.then(Step::Pause(pause))
    }

    pub(crate) fn wait(self, latch: &Latch) -> Self {
        self.then(Step::Wait(latch.clone()))
    }

    pub(crate) fn open(self, latch: &Latch) -> Self {
        self.then(Step::Open(latch.clone()))
    }

    /// Leaves the connection open for another request when the steps are done (the steps
    /// must frame their response).
    pub(crate) fn keep_alive(mut self) -> Self {
        self.keep_alive = true;
        self
    }
}

fn status_line(status: u16) -> String {
    let reason = match status {
        200 => "OK",
        202 => "Accepted",
        301 => "Moved Permanently",
        302 => "Found",
        303 => "See Other",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        406 => "Not Acceptable",
        413 => "Content Too Large",
        415 => "Unsupported Media Type",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        _ => "Whatever",
    };
    format!("HTTP/1.1 {status} {reason}\r\n")
}

pub(crate) fn result_msg(req: &Request, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": req.rpc_id(), "result": result})
}

/// The result of the `echo` tool for `text`.
pub(crate) fn echo_result(text: &str) -> Value {
    json!({"content": [{"type": "text", "text": text}], "isError": false})
}

/// One SSE event block.
pub(crate) fn sse_event(id: Option<&str>, data: &Value) -> String {
    match id {
        Some(id) => format!("id: {id}\ndata: {data}\n\n"),
        None => format!("data: {data}\n\n"),
    }
}

type Script = Arc<dyn Fn(&Request) -> Reply + Send + Sync>;

/// How the well-behaved part of the server presents itself.
#[derive(Clone)]
pub(crate) struct Options {
    pub capabilities: Value,
    /// Sent as `Mcp-Capability-Hash` on every well-behaved answer, `initialize` included.
    pub capability_hash: Option<String>,
    /// Answer the standalone GET with an open, silent stream instead of 405.
    pub listen: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            capabilities: json!({"tools": {}}),
            capability_hash: None,
            listen: false,
        }
    }
}

struct Record {
    request: Request,
    outcome: Outcome,
}

struct Shared {
    script: Script,
    options: Options,
    log: Mutex<Vec<Record>>,
    /// Bumped on every arrival and every finished answer.
    changes: watch::Sender<u64>,
    good: AtomicBool,
    sessions: AtomicU64,
    connections: AtomicUsize,
    written: AtomicU64,
}

pub(crate) struct Server {
    pub url: String,
    pub port: u16,
    shared: Arc<Shared>,
    /// Dropped with the server: stops its thread.
    _stop: oneshot::Sender<()>,
}

impl Server {
    /// Starts a server on 127.0.0.1 answering through `script` (return [`Reply::good`] for
    /// the well-behaved answer).
    pub(crate) async fn start(script: impl Fn(&Request) -> Reply + Send + Sync + 'static) -> Self {
        Self::start_with(Options::default(), script).await
    }

    pub(crate) async fn start_with(
        options: Options,
        script: impl Fn(&Request) -> Reply + Send + Sync + 'static,
    ) -> Self {
        let shared = Arc::new(Shared {
            script: Arc::new(script),
            options,
            log: Mutex::new(Vec::new()),
            changes: watch::channel(0).0,
            good: AtomicBool::new(false),
            sessions: AtomicU64::new(0),
            connections: AtomicUsize::new(0),
            written: AtomicU64::new(0),
        });
        // The server runs on a thread of its own: its allocations stay out of the client's
        // per-thread heap count, and its write loops do not take turns with the client's reads.
        let (ready, port) = oneshot::channel();
        let (stop, stopped) = oneshot::channel::<()>();
        let state = shared.clone();
        std::thread::Builder::new()
            .name("hostile-server".to_owned())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("server runtime");
                runtime.block_on(async move {
                    let socket = TcpSocket::new_v4().expect("socket");
                    socket.set_send_buffer_size(SEND_BUFFER).expect("sndbuf");
                    socket
                        .bind("127.0.0.1:0".parse().expect("addr"))
                        .expect("bind");
                    let listener = socket.listen(1024).expect("listen");
                    let _ = ready.send(listener.local_addr().expect("addr").port());
                    tokio::select! {
                        () = accept_loop(listener, state) => {}
                        _ = stopped => {}
                    }
                });
                // Dropping the runtime ends every connection still open.
            })
            .expect("server thread");
        let port = port.await.expect("server thread started");
        Server {
            url: format!("http://127.0.0.1:{port}/mcp"),
            port,
            shared,
            _stop: stop,
        }
    }

    /// From now on every request gets the well-behaved answer.
    pub(crate) fn behave(&self) {
        self.shared.good.store(true, Ordering::SeqCst);
    }

    pub(crate) fn requests(&self) -> Vec<Request> {
        lock(&self.shared.log)
            .iter()
            .map(|r| r.request.clone())
            .collect()
    }

    pub(crate) fn count(&self, pred: impl Fn(&Request) -> bool) -> usize {
        lock(&self.shared.log)
            .iter()
            .filter(|r| pred(&r.request))
            .count()
    }

    pub(crate) fn matching(&self, pred: impl Fn(&Request) -> bool) -> Vec<Request> {
        lock(&self.shared.log)
            .iter()
            .filter(|r| pred(&r.request))
            .map(|r| r.request.clone())
            .collect()
    }

    pub(crate) fn outcome(&self, seq: usize) -> Outcome {
        lock(&self.shared.log)
            .get(seq)
            .map(|r| r.outcome.clone())
            .unwrap_or_default()
    }

    /// Every request with what became of its answer.
    pub(crate) fn records(&self) -> Vec<(Request, Outcome)> {
        lock(&self.shared.log)
            .iter()
            .map(|r| (r.request.clone(), r.outcome.clone()))
            .collect()
    }

    /// Bytes written on every connection so far.
    pub(crate) fn written(&self) -> u64 {
        self.shared.written.load(Ordering::SeqCst)
    }

    pub(crate) fn labels(&self) -> Vec<String> {
        lock(&self.shared.log)
            .iter()
            .map(|r| r.request.label())
            .collect()
    }

    /// Waits (hang-guarded) until `n` requests match `pred`; returns the `n`th.
    pub(crate) async fn wait_nth(&self, n: usize, pred: impl Fn(&Request) -> bool) -> Request {
        let mut changes = self.shared.changes.subscribe();
        let wait = async {
            loop {
                if let Some(found) = self.matching(&pred).into_iter().nth(n - 1) {
                    return found;
                }
                if changes.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
            }
        };
        match tokio::time::timeout(GUARD, wait).await {
            Ok(found) => found,
            Err(_) => panic!(
                "request #{n} never arrived; the server saw {:?}",
                self.labels()
            ),
        }
    }

    pub(crate) async fn wait_for(&self, pred: impl Fn(&Request) -> bool) -> Request {
        self.wait_nth(1, pred).await
    }

    /// Waits until `n` requests match `pred`, or `limit` passes; true if they did.
    pub(crate) async fn saw_within(
        &self,
        limit: Duration,
        n: usize,
        pred: impl Fn(&Request) -> bool,
    ) -> bool {
        let mut changes = self.shared.changes.subscribe();
        let wait = async {
            while self.count(&pred) < n {
                if changes.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
            }
        };
        tokio::time::timeout(limit, wait).await.is_ok()
    }

    /// Waits until the answer to request `seq` is over (written, or the client left), or
    /// `limit` passes; returns the outcome either way.
    pub(crate) async fn wait_done(&self, seq: usize, limit: Duration) -> Outcome {
        let mut changes = self.shared.changes.subscribe();
        let wait = async {
            loop {
                let outcome = self.outcome(seq);
                if outcome.done.is_some() {
                    return;
                }
                if changes.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
            }
        };
        let _ = tokio::time::timeout(limit, wait).await;
        self.outcome(seq)
    }

    /// The most requests matching `pred` whose answers were in progress at the same time.
    pub(crate) fn max_overlap(&self, pred: impl Fn(&Request) -> bool) -> usize {
        let now = Instant::now();
        let mut edges: Vec<(Instant, i32)> = Vec::new();
        for r in lock(&self.shared.log).iter() {
            if pred(&r.request) {
                edges.push((r.request.at, 1));
                edges.push((r.outcome.done.unwrap_or(now), -1));
            }
        }
        // Ends sort before starts at the same instant: back-to-back is not overlap.
        edges.sort_by_key(|&(at, delta)| (at, delta));
        let (mut open, mut max) = (0i32, 0i32);
        for (_, delta) in edges {
            open += delta;
            max = max.max(open);
        }
        max as usize
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    let mut next_conn = 0u64;
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            // Out of descriptors or a connection reset before accept: the client will see
            // its own error; the server keeps serving.
            Err(_) => {
                tokio::task::yield_now().await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let conn = next_conn;
        next_conn += 1;
        let shared = shared.clone();
        shared.connections.fetch_add(1, Ordering::SeqCst);
        tokio::spawn(async move {
            serve(stream, conn, &shared).await;
            shared.connections.fetch_sub(1, Ordering::SeqCst);
        });
    }
}

async fn serve(mut stream: TcpStream, conn: u64, shared: &Shared) {
    let mut buf = Vec::new();
    loop {
        let Some(parsed) = read_request(&mut stream, &mut buf).await else {
            return;
        };
        let (method, path, headers, body) = match parsed {
            Ok(parsed) => parsed,
            Err(()) => {
                let _ = stream
                    .write_all(b"HTTP/1.1 431 Too Large\r\nConnection: close\r\n\r\n")
                    .await;
                return;
            }
        };
        let json = serde_json::from_slice(&body).ok();
        let request = {
            let mut log = lock(&shared.log);
            let request = Request {
                seq: log.len(),
                conn,
                method,
                path,
                headers,
                body,
                json,
                at: Instant::now(),
                open_connections: shared.connections.load(Ordering::SeqCst),
            };
            log.push(Record {
                request: request.clone(),
                outcome: Outcome::default(),
            });
            request
        };
        shared.changes.send_modify(|n| *n += 1);
        let reply = if shared.good.load(Ordering::SeqCst) {
            Reply::good()
        } else {
            (shared.script)(&request)
        };
        let reply = if reply.default {
            good_reply(shared, &request)
        } else {
            reply
        };
        let mut outcome = Outcome::default();
        let finished = run(&mut stream, &reply.steps, shared, request.seq, &mut outcome).await;
        outcome.done = Some(Instant::now());
        if let Some(record) = lock(&shared.log).get_mut(request.seq) {
            record.outcome = outcome;
        }
        shared.changes.send_modify(|n| *n += 1);
        if !(finished && reply.keep_alive) {
            let _ = stream.shutdown().await;
            return;
        }
    }
}

/// Performs the steps; false once the client has gone.
async fn run(
    stream: &mut TcpStream,
    steps: &[Step],
    shared: &Shared,
    seq: usize,
    out: &mut Outcome,
) -> bool {
    for step in steps {
        let alive = match step {
            Step::Write(bytes) => write(stream, bytes, shared, seq, out).await,
            Step::Endless(chunk) => {
                let mut alive = true;
                while alive && out.written < ENDLESS_CAP {
                    alive = write(stream, chunk, shared, seq, out).await;
                }
                alive && hold(stream, out).await
            }
            Step::Fill(byte, len) => {
                let chunk = vec![*byte; 16 * 1024];
                let mut left = *len;
                let mut alive = true;
                while alive && left > 0 {
                    let n = left.min(chunk.len() as u64) as usize;
                    alive = write(stream, &chunk[..n], shared, seq, out).await;
                    left -= n as u64;
                }
                alive
            }
            Step::Trickle {
                bytes,
                every,
                forever,
            } => {
                let mut alive = true;
                'outer: loop {
                    for i in 0..bytes.len() {
                        tokio::time::sleep(*every).await;
                        if !write(stream, &bytes.slice(i..i + 1), shared, seq, out).await {
                            alive = false;
                            break 'outer;
                        }
                    }
                    if !forever {
                        break;
                    }
                }
                alive
            }
            Step::Pause(pause) => {
                tokio::time::sleep(*pause).await;
                true
            }
            Step::Wait(latch) => {
                latch.wait().await;
                true
            }
            Step::Open(latch) => {
                latch.open();
                true
            }
            Step::Hang => hold(stream, out).await,
        };
        if !alive {
            return false;
        }
    }
    true
}

async fn write(
    stream: &mut TcpStream,
    bytes: &[u8],
    shared: &Shared,
    seq: usize,
    out: &mut Outcome,
) -> bool {
    // Written piecewise so the count reflects what got out before a failure.
    for piece in bytes.chunks(16 * 1024) {
        if stream.write_all(piece).await.is_err() {
            out.peer_gone = true;
            return false;
        }
        out.written += piece.len() as u64;
        shared
            .written
            .fetch_add(piece.len() as u64, Ordering::Relaxed);
        // Visible while the answer is still being written.
        if let Some(record) = lock(&shared.log).get_mut(seq) {
            record.outcome.written = out.written;
        }
    }
    true
}

/// Holds the connection until the client closes it (anything it sends is discarded).
async fn hold(stream: &mut TcpStream, out: &mut Outcome) -> bool {
    let mut sink = [0u8; 1024];
    loop {
        match stream.read(&mut sink).await {
            Ok(0) | Err(_) => {
                out.peer_gone = true;
                return false;
            }
            Ok(_) => {}
        }
    }
}

type Parsed = (String, String, Vec<(String, Vec<u8>)>, Vec<u8>);

/// Reads one request; `None` when the client closed the connection, `Err` for a head too
/// large to accept.
async fn read_request(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Option<Result<Parsed, ()>> {
    let head_end = loop {
        if let Some(pos) = find(buf, b"\r\n\r\n") {
            break pos;
        }
        if buf.len() > MAX_REQUEST_HEAD {
            return Some(Err(()));
        }
        if !fill(stream, buf).await {
            return None;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    buf.drain(..head_end + 4);
    let mut lines = head.split("\r\n");
    let mut first = lines.next().unwrap_or("").split(' ');
    let method = first.next().unwrap_or("").to_owned();
    let path = first.next().unwrap_or("").to_owned();
    let mut headers = Vec::new();
    for line in lines {
        if let Some((name, value)) = line.split_once(':') {
            headers.push((
                name.trim().to_ascii_lowercase(),
                value.trim().as_bytes().to_vec(),
            ));
        }
    }
    let value = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| String::from_utf8_lossy(v).to_ascii_lowercase())
    };
    let body = if value("transfer-encoding").is_some_and(|v| v.contains("chunked")) {
        read_chunked(stream, buf).await?
    } else {
        let length: usize = value("content-length")
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        while buf.len() < length {
            if !fill(stream, buf).await {
                return None;
            }
        }
        buf.drain(..length).collect()
    };
    Some(Ok((method, path, headers, body)))
}

async fn read_chunked(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Option<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let line_end = loop {
            if let Some(pos) = find(buf, b"\r\n") {
                break pos;
            }
            if !fill(stream, buf).await {
                return None;
            }
        };
        let line = String::from_utf8_lossy(&buf[..line_end]).into_owned();
        buf.drain(..line_end + 2);
        let size = usize::from_str_radix(line.split(';').next()?.trim(), 16).ok()?;
        if size == 0 {
            // Trailers, up to the empty line.
            loop {
                let end = loop {
                    if let Some(pos) = find(buf, b"\r\n") {
                        break pos;
                    }
                    if !fill(stream, buf).await {
                        return None;
                    }
                };
                buf.drain(..end + 2);
                if end == 0 {
                    return Some(body);
                }
            }
        }
        while buf.len() < size + 2 {
            if !fill(stream, buf).await {
                return None;
            }
        }
        body.extend_from_slice(&buf[..size]);
        buf.drain(..size + 2);
    }
}

async fn fill(stream: &mut TcpStream, buf: &mut Vec<u8>) -> bool {
    buf.reserve(4096);
    matches!(stream.read_buf(buf).await, Ok(n) if n > 0)
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// The plain MCP behaviour: JSON answers, 202 for notifications and answers, GET 405 (or a
/// silent open stream), DELETE 200.
fn good_reply(shared: &Shared, req: &Request) -> Reply {
    let hash = shared.options.capability_hash.clone();
    let with_hash = |mut headers: Vec<(String, String)>| {
        if let Some(h) = &hash {
            headers.push(("Mcp-Capability-Hash".to_owned(), h.clone()));
        }
        headers
    };
    let json_reply = |headers: Vec<(String, String)>, body: &Value| {
        let mut headers = with_hash(headers);
        headers.push(("Content-Type".to_owned(), "application/json".to_owned()));
        let refs: Vec<(&str, &str)> = headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        Reply::full(200, &refs, body.to_string())
    };
    match req.method.as_str() {
        "GET" if shared.options.listen => {
            let headers = with_hash(vec![
                ("Content-Type".to_owned(), "text/event-stream".to_owned()),
                ("Cache-Control".to_owned(), "no-cache".to_owned()),
            ]);
            let refs: Vec<(&str, &str)> = headers
                .iter()
                .map(|(n, v)| (n.as_str(), v.as_str()))
                .collect();
            return Reply::head(200, &refs).hang();
        }
        "DELETE" => return Reply::status(200),
        "POST" => {}
        _ => return Reply::status(405),
    }
    let Some(method) = req.rpc_method() else {
        return Reply::status(202);
    };
    if req.rpc_id().is_null() {
        return Reply::status(202);
    }
    match method {
        "initialize" => {
            let n = shared.sessions.fetch_add(1, Ordering::SeqCst) + 1;
            let result = json!({
                "protocolVersion": VERSION,
                "capabilities": shared.options.capabilities,
                "serverInfo": {"name": "hostile", "version": "6.6.6"},
            });
            json_reply(
                vec![("Mcp-Session-Id".to_owned(), format!("hostile-{n}"))],
                &result_msg(req, result),
            )
        }
        "ping" => json_reply(vec![], &result_msg(req, json!({}))),
        "tools/list" => json_reply(
            vec![],
            &result_msg(
                req,
                json!({"tools": [{"name": "echo", "inputSchema": {"type": "object"}}]}),
            ),
        ),
        "tools/call" => {
            let text = req.params()["arguments"]["text"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            json_reply(vec![], &result_msg(req, echo_result(&text)))
        }
        other => json_reply(
            vec![],
            &json!({"jsonrpc": "2.0", "id": req.rpc_id(),
                "error": {"code": -32601, "message": format!("no {other}")}}),
        ),
    }
}

/// The session id the well-behaved server gives its `n`th `initialize`.
pub(crate) fn session_name(n: u64) -> String {
    format!("hostile-{n}")
}
