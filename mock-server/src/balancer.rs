//! The load balancer: one public port, round-robin or session affinity, streams passed
//! through frame by frame, and the stream faults a real balancer inflicts.

use std::convert::Infallible;
use std::fmt;
use std::future::{poll_fn, Future};
use std::io;
use std::net::SocketAddr;
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures::stream::{FuturesUnordered, StreamExt};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Frame, Incoming};
use hyper::client::conn::http1::SendRequest;
use hyper::header::{self, HeaderName, HeaderValue};
use hyper::{Method, Request, Response, StatusCode, Uri};
use hyper_util::rt::TokioIo;
use serde_json::json;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio::time::Sleep;

use crate::cluster::Inner;
use crate::config::{CutStyle, Faults};
use crate::context::headers as h;
use crate::rng::SplitMix;
use crate::store::{Bounded, MAX_SESSIONS};

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type ProxyBody = UnsyncBoxBody<Bytes, BoxError>;

/// Delay between the last byte a cut stream delivers and the dropped connection.
const CUT_GRACE: Duration = Duration::from_millis(5);

/// Headers that describe one hop, never forwarded (pre-parsed: removing by `&str` would
/// parse and hash each name again on every request).
const HOP_HEADERS: [HeaderName; 8] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::UPGRADE,
];

/// The error a cut stream ends with: the connection is dropped mid-body.
#[derive(Debug)]
struct Cut(&'static str);

impl fmt::Display for Cut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "stream cut by the balancer: {}", self.0)
    }
}

impl std::error::Error for Cut {}

/// Routing state of the balancer.
pub(crate) struct Proxy {
    inner: Arc<Inner>,
    rr: AtomicUsize,
    pins: Mutex<Pins>,
}

/// Session affinity: the instance each session is pinned to. A client can send any session
/// id, so only one an instance accepted is pinned, and at most as many as the store keeps
/// sessions, the oldest forgotten first (its session then goes round robin until it is
/// served again).
struct Pins(Bounded<String, usize>);

impl Pins {
    fn new(cap: usize) -> Self {
        Pins(Bounded::new(cap))
    }

    fn get(&self, session: &str) -> Option<usize> {
        self.0.get(session).copied()
    }

    /// Records how instance `index` answered a request that carried session `sent`: a
    /// session it issued, or one it served, is pinned to it; one a DELETE ended is not.
    fn answered(
        &mut self,
        sent: Option<&str>,
        issued: Option<&str>,
        index: usize,
        status: StatusCode,
        delete: bool,
    ) {
        if let Some(sid) = issued {
            self.0.insert(sid.to_owned(), index);
        }
        match sent {
            Some(sid) if delete => {
                self.0.remove(&sid.to_owned());
            }
            Some(sid) if status.is_success() => self.0.insert(sid.to_owned(), index),
            _ => {}
        }
    }
}

/// An upstream connection to the instance at an address (a restarted instance has a new one).
type Upstream = (SocketAddr, SendRequest<Incoming>);

/// A future that drives one upstream connection.
type Driver = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The upstream connections of one client connection: at most one per instance, driven by
/// the client connection's own task.
///
/// An HTTP/1.1 client connection carries one exchange at a time, so one upstream connection
/// per instance is all it can use. Driving them in the same task as the client connection
/// means every frame of a streamed body is handed from the upstream reader to the
/// downstream writer without waking another task (possibly on another thread), which is
/// most of what a shared pool with its own connection tasks costs per call.
struct Upstreams {
    conns: Mutex<Vec<Option<Upstream>>>,
    drivers: Mutex<FuturesUnordered<Driver>>,
}

impl Upstreams {
    /// Lets the upstream connections read and decode what has arrived. Also called from a
    /// response body that would otherwise report "pending" while the rest of the response
    /// already sits in the upstream connection's buffer: the frames then reach the client
    /// in one write instead of one write each.
    fn poll_drivers(&self, cx: &mut Context<'_>) {
        let mut drivers = self.drivers.lock().unwrap_or_else(|p| p.into_inner());
        while let Poll::Ready(Some(())) = drivers.poll_next_unpin(cx) {}
    }

    /// The idle connection to instance `index` at `addr`, if there is one still open.
    fn take(&self, index: usize, addr: SocketAddr) -> Option<SendRequest<Incoming>> {
        let mut conns = self.conns.lock().unwrap_or_else(|p| p.into_inner());
        match conns.get_mut(index)?.take() {
            Some((a, s)) if a == addr && !s.is_closed() => Some(s),
            _ => None,
        }
    }

    fn put(&self, index: usize, addr: SocketAddr, sender: SendRequest<Incoming>) {
        let mut conns = self.conns.lock().unwrap_or_else(|p| p.into_inner());
        if conns.len() <= index {
            conns.resize_with(index + 1, || None);
        }
        conns[index] = Some((addr, sender));
    }

    async fn connect(&self, addr: SocketAddr) -> Option<SendRequest<Incoming>> {
        let tcp = TcpStream::connect(addr).await.ok()?;
        let _ = tcp.set_nodelay(true);
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
            .await
            .ok()?;
        self.drivers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Box::pin(async move {
                let _ = conn.await;
            }));
        // The serving loop polls the new connection once this task runs again.
        tokio::task::yield_now().await;
        Some(sender)
    }

    /// Sends `req` to instance `index`, reusing its connection when it is still open; a
    /// request that never left (the connection closed under it) is sent once more on a
    /// fresh connection.
    async fn send(
        &self,
        index: usize,
        addr: SocketAddr,
        mut req: Request<Incoming>,
    ) -> Option<Response<Incoming>> {
        for attempt in 0..2 {
            let mut sender = match self.take(index, addr) {
                Some(s) => s,
                None => self.connect(addr).await?,
            };
            if sender.ready().await.is_err() {
                continue;
            }
            match sender.try_send_request(req).await {
                Ok(resp) => {
                    self.put(index, addr, sender);
                    return Some(resp);
                }
                Err(mut e) => match e.take_message() {
                    Some(r) if attempt == 0 => req = r,
                    _ => return None,
                },
            }
        }
        None
    }
}

/// Serves one client connection, with its upstream connections in the same task.
async fn serve(proxy: Arc<Proxy>, tcp: TcpStream) {
    let upstreams = Arc::new(Upstreams {
        conns: Mutex::new(Vec::new()),
        drivers: Mutex::new(FuturesUnordered::new()),
    });
    let ups = upstreams.clone();
    let service = hyper::service::service_fn(move |req| {
        let (proxy, upstreams) = (proxy.clone(), upstreams.clone());
        async move { Ok::<_, Infallible>(proxy.handle(&upstreams, req).await) }
    });
    // HTTP/1.1 only: the design above relies on the service and the response body being
    // polled by this task, one exchange at a time (an HTTP/2 server runs each stream in a
    // task of its own). MCP's Streamable HTTP clients speak HTTP/1.1 to a plain-text port.
    let builder = hyper::server::conn::http1::Builder::new();
    let mut server = pin!(builder.serve_connection(TokioIo::new(tcp), service));
    poll_fn(|cx| {
        // Twice: serving the client may free room an upstream reader waits for, and the
        // other way round, without a round trip through the scheduler.
        for _ in 0..2 {
            ups.poll_drivers(cx);
            if server.as_mut().poll(cx).is_ready() {
                return Poll::Ready(());
            }
        }
        Poll::Pending
    })
    .await;
}

/// A running balancer.
pub(crate) struct BalancerHandle {
    pub addr: SocketAddr,
    accept: tokio::task::JoinHandle<()>,
    connections: Arc<Mutex<JoinSet<()>>>,
}

impl BalancerHandle {
    /// Stops accepting and drops every connection, without waiting.
    pub(crate) fn abort(&self) {
        self.accept.abort();
        self.connections
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .abort_all();
    }

    pub(crate) async fn stop(self) {
        self.accept.abort();
        let _ = self.accept.await;
        self.connections
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .abort_all();
    }
}

/// Binds the public port and serves until stopped.
pub(crate) async fn start(inner: Arc<Inner>, listen: SocketAddr) -> io::Result<BalancerHandle> {
    let listener = TcpListener::bind(listen).await?;
    let addr = listener.local_addr()?;
    let proxy = Arc::new(Proxy {
        inner,
        rr: AtomicUsize::new(0),
        pins: Mutex::new(Pins::new(MAX_SESSIONS)),
    });
    let connections = Arc::new(Mutex::new(JoinSet::new()));
    let conns = connections.clone();
    let accept = tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                continue;
            };
            let _ = tcp.set_nodelay(true);
            let mut set = conns.lock().unwrap_or_else(|p| p.into_inner());
            while set.try_join_next().is_some() {}
            set.spawn(serve(proxy.clone(), tcp));
        }
    });
    Ok(BalancerHandle {
        addr,
        accept,
        connections,
    })
}

fn full(
    status: StatusCode,
    content_type: &'static str,
    body: impl Into<Bytes>,
) -> Response<ProxyBody> {
    let mut resp = Response::new(
        Full::new(body.into())
            .map_err(|e: Infallible| match e {})
            .boxed_unsync(),
    );
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    resp
}

fn gateway_error(status: StatusCode, message: &str) -> Response<ProxyBody> {
    let body = json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32000, "message": message}});
    full(status, "application/json", body.to_string())
}

fn strip_hop_headers(headers: &mut hyper::HeaderMap) {
    if headers.contains_key(header::CONNECTION) {
        strip_connection_named(headers);
    }
    for n in &HOP_HEADERS {
        headers.remove(n);
    }
}

/// A `Connection` header may name further hop-by-hop headers.
fn strip_connection_named(headers: &mut hyper::HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| {
            v.split(',')
                .map(|s| s.trim().to_ascii_lowercase())
                .collect::<Vec<_>>()
        })
        .filter_map(|n| HeaderName::from_bytes(n.as_bytes()).ok())
        .collect();
    for n in named {
        headers.remove(n);
    }
}

impl Proxy {
    async fn handle(
        &self,
        upstreams: &Arc<Upstreams>,
        req: Request<Incoming>,
    ) -> Response<ProxyBody> {
        if req.uri().path().starts_with("/admin/") {
            return self.admin(req).await;
        }
        // A POST may execute a tool: in flight from its acceptance until the instance has
        // answered its head, by when the instance counts it (or the work it spawned) itself.
        let in_flight = (req.method() == Method::POST).then(|| self.inner.oracle.in_flight());
        let session = req
            .headers()
            .get(h::SESSION_ID)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let Some((index, addr)) = self.pick(session.as_deref()) else {
            return gateway_error(StatusCode::BAD_GATEWAY, "Bad Gateway: no instance is up");
        };
        let is_delete = req.method() == Method::DELETE;
        let (mut parts, body) = req.into_parts();
        if parts.uri.authority().is_some() {
            // Absolute-form target: the instance gets origin-form.
            let pq = parts.uri.path_and_query().cloned();
            let mut uri = Uri::builder();
            if let Some(pq) = pq {
                uri = uri.path_and_query(pq);
            }
            parts.uri = match uri.build() {
                Ok(u) => u,
                Err(_) => {
                    return gateway_error(StatusCode::BAD_REQUEST, "Bad Request: invalid target")
                }
            };
        }
        strip_hop_headers(&mut parts.headers);
        if !parts.headers.contains_key(header::HOST) {
            if let Ok(v) = HeaderValue::from_str(&addr.to_string()) {
                parts.headers.insert(header::HOST, v);
            }
        }
        let Some(upstream) = upstreams
            .send(index, addr, Request::from_parts(parts, body))
            .await
        else {
            return gateway_error(StatusCode::BAD_GATEWAY, "Bad Gateway: instance unreachable");
        };
        drop(in_flight);
        let (mut parts, body) = upstream.into_parts();
        strip_hop_headers(&mut parts.headers);
        if self.inner.affinity {
            let issued = parts
                .headers
                .get(h::SESSION_ID)
                .and_then(|v| v.to_str().ok());
            self.pins()
                .answered(session.as_deref(), issued, index, parts.status, is_delete);
        }
        let is_sse = parts
            .headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        let faults = self.inner.current_faults();
        let faulty = faults.idle_timeout.is_some()
            || faults.cut_after_events.is_some()
            || faults.random_cut.is_some();
        let body = Passthrough {
            inner: body,
            upstreams: upstreams.clone(),
        };
        let body = if is_sse && faulty {
            FaultBody::new(body, &faults, self.inner.cut_rng.clone()).boxed_unsync()
        } else {
            body.boxed_unsync()
        };
        Response::from_parts(parts, body)
    }

    fn pins(&self) -> std::sync::MutexGuard<'_, Pins> {
        self.pins.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Chooses an instance that is up: the pinned one under affinity, else the next in turn.
    fn pick(&self, session: Option<&str>) -> Option<(usize, SocketAddr)> {
        let backends = self.inner.backends();
        let n = backends.len();
        if self.inner.affinity {
            if let Some(sid) = session {
                if let Some(i) = self.pins().get(sid) {
                    if let Some(Some(addr)) = backends.get(i) {
                        return Some((i, *addr));
                    }
                }
            }
        }
        for _ in 0..n {
            let i = self.rr.fetch_add(1, Ordering::Relaxed) % n;
            if let Some(addr) = backends[i] {
                // Pinned once the instance has answered (see `Pins::answered`).
                return Some((i, addr));
            }
        }
        None
    }

    async fn admin(&self, req: Request<Incoming>) -> Response<ProxyBody> {
        let path = req.uri().path().trim_end_matches('/').to_owned();
        let method = req.method().clone();
        let parts: Vec<&str> = path.trim_start_matches("/admin/").split('/').collect();
        let no_content = || full(StatusCode::NO_CONTENT, "text/plain", Bytes::new());
        match (method, parts.as_slice()) {
            (Method::GET, ["oracle"]) => match serde_json::to_vec(&self.inner.oracle.report()) {
                Ok(b) => full(StatusCode::OK, "application/json", b),
                Err(_) => gateway_error(StatusCode::INTERNAL_SERVER_ERROR, "could not serialize"),
            },
            (Method::POST, ["reset"]) => {
                self.inner.oracle.reset();
                no_content()
            }
            (Method::GET, ["status"]) => {
                let backends = self.inner.backends();
                let instances: Vec<_> = backends
                    .iter()
                    .enumerate()
                    .map(|(i, a)| json!({"index": i, "up": a.is_some(), "addr": a.map(|a| a.to_string())}))
                    .collect();
                let body = json!({"preset": self.inner.preset.as_str(), "affinity": self.inner.affinity,
                                  "extension": self.inner.settings.extension, "era": self.inner.era.as_str(),
                                  "instances": instances});
                full(StatusCode::OK, "application/json", body.to_string())
            }
            (Method::POST, ["instances", i, action @ ("kill" | "restart")]) => {
                let Ok(i) = i.parse::<usize>() else {
                    return gateway_error(StatusCode::BAD_REQUEST, "bad instance index");
                };
                let ok = if *action == "kill" {
                    self.inner.kill(i).await
                } else {
                    self.inner.restart(i).await.is_ok()
                };
                if ok {
                    no_content()
                } else {
                    gateway_error(
                        StatusCode::NOT_FOUND,
                        "no such instance, or not in that state",
                    )
                }
            }
            _ => gateway_error(StatusCode::NOT_FOUND, "unknown admin route"),
        }
    }
}

/// Finds SSE event boundaries (a blank line after at least one field line) across frames,
/// for `\n`, `\r\n` and `\r` line ends.
#[derive(Debug, Default)]
struct EventScanner {
    at_line_start: bool,
    after_cr: bool,
    has_content: bool,
}

impl EventScanner {
    fn new() -> Self {
        Self {
            at_line_start: true,
            after_cr: false,
            has_content: false,
        }
    }

    /// Feeds one byte; true when it completes an event.
    fn feed(&mut self, b: u8) -> bool {
        match b {
            b'\n' if self.after_cr => {
                self.after_cr = false;
                false
            }
            b'\r' | b'\n' => {
                self.after_cr = b == b'\r';
                let boundary = self.at_line_start && self.has_content;
                if self.at_line_start {
                    self.has_content = false;
                }
                self.at_line_start = true;
                boundary
            }
            _ => {
                // Only blocks with an `id` or `data` field count as events: a `retry`-only
                // block or a comment dispatches nothing.
                if self.at_line_start && (b == b'i' || b == b'd') {
                    self.has_content = true;
                }
                self.after_cr = false;
                self.at_line_start = false;
                false
            }
        }
    }
}

/// An upstream response body, frame by frame as the instance sent them.
struct Passthrough {
    inner: Incoming,
    upstreams: Arc<Upstreams>,
}

impl Body for Passthrough {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        let poll = Pin::new(&mut this.inner).poll_frame(cx);
        let poll = if poll.is_pending() {
            this.upstreams.poll_drivers(cx);
            Pin::new(&mut this.inner).poll_frame(cx)
        } else {
            poll
        };
        poll.map_err(|e| Box::new(e) as BoxError)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

/// Passes an SSE body through, frame by frame, and cuts it when a fault says so.
struct FaultBody {
    inner: Passthrough,
    idle: Option<Duration>,
    timer: Option<Pin<Box<Sleep>>>,
    cut_after: Option<u32>,
    random: Option<(Arc<Mutex<Option<SplitMix>>>, f64)>,
    style: CutStyle,
    events: u32,
    scanner: EventScanner,
    cut: Option<&'static str>,
    grace: Option<Pin<Box<Sleep>>>,
    done: bool,
}

impl FaultBody {
    fn new(inner: Passthrough, faults: &Faults, rng: Arc<Mutex<Option<SplitMix>>>) -> Self {
        Self {
            inner,
            idle: faults.idle_timeout,
            timer: faults.idle_timeout.map(|d| Box::pin(tokio::time::sleep(d))),
            cut_after: faults.cut_after_events,
            random: faults.random_cut.map(|(_, p)| (rng, p)),
            style: faults.cut_style,
            events: 0,
            scanner: EventScanner::new(),
            cut: None,
            grace: None,
            done: false,
        }
    }

    /// Scans a data frame; returns how many bytes to deliver before cutting, if a cut falls
    /// inside it.
    fn scan(&mut self, data: &[u8]) -> Option<usize> {
        if self.cut_after.is_none() && self.random.is_none() {
            // Only the idle timeout is on: nothing to count.
            return None;
        }
        for (i, b) in data.iter().enumerate() {
            if self.scanner.feed(*b) {
                self.events += 1;
                if self.cut_after.is_some_and(|n| self.events >= n) {
                    self.cut = Some("cut after events");
                    return Some(i + 1);
                }
                if let Some((rng, p)) = &self.random {
                    let hit = rng
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .as_mut()
                        .is_some_and(|r| r.chance(*p));
                    if hit {
                        self.cut = Some("random cut");
                        return Some(i + 1);
                    }
                }
            }
        }
        None
    }

    fn end(&mut self, reason: &'static str) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        self.done = true;
        match self.style {
            CutStyle::Abort => Poll::Ready(Some(Err(Box::new(Cut(reason))))),
            CutStyle::CleanEnd => Poll::Ready(None),
        }
    }
}

impl Body for FaultBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        if this.done {
            return Poll::Ready(None);
        }
        if let Some(reason) = this.cut {
            // Give the server a moment to flush the frame that completed the last event
            // before the connection drops, as a balancer closing between writes would.
            let grace = this
                .grace
                .get_or_insert_with(|| Box::pin(tokio::time::sleep(CUT_GRACE)));
            if grace.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            this.cut = None;
            return this.end(reason);
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let (Some(d), Some(t)) = (this.idle, this.timer.as_mut()) {
                    t.as_mut().reset(tokio::time::Instant::now() + d);
                }
                match frame.into_data() {
                    Ok(mut data) => {
                        if let Some(keep) = this.scan(&data) {
                            data.truncate(keep);
                        }
                        Poll::Ready(Some(Ok(Frame::data(data))))
                    }
                    Err(frame) => Poll::Ready(Some(Ok(frame))),
                }
            }
            Poll::Ready(Some(Err(e))) => {
                this.done = true;
                Poll::Ready(Some(Err(e)))
            }
            Poll::Ready(None) => {
                this.done = true;
                Poll::Ready(None)
            }
            Poll::Pending => {
                let fired = this
                    .timer
                    .as_mut()
                    .is_some_and(|t| t.as_mut().poll(cx).is_ready());
                if fired {
                    this.end("idle timeout")
                } else {
                    Poll::Pending
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count(chunks: &[&[u8]]) -> u32 {
        let mut s = EventScanner::new();
        chunks
            .iter()
            .flat_map(|c| c.iter())
            .filter(|b| s.feed(**b))
            .count() as u32
    }

    /// A session id is pinned only once an instance has accepted it (a client can send any
    /// id), and the pins are bounded, the oldest forgotten first.
    #[test]
    fn only_accepted_sessions_are_pinned_and_the_pins_are_bounded() {
        let mut pins = Pins::new(2);
        pins.answered(Some("bogus"), None, 0, StatusCode::NOT_FOUND, false);
        assert_eq!(pins.get("bogus"), None);
        pins.answered(None, Some("a"), 1, StatusCode::OK, false);
        assert_eq!(pins.get("a"), Some(1));
        // An accepted session whose instance went down is pinned where it was served.
        pins.answered(Some("a"), None, 0, StatusCode::OK, false);
        assert_eq!(pins.get("a"), Some(0));
        pins.answered(None, Some("b"), 1, StatusCode::OK, false);
        pins.answered(None, Some("c"), 1, StatusCode::OK, false);
        assert_eq!(pins.get("a"), None);
        assert_eq!((pins.get("b"), pins.get("c")), (Some(1), Some(1)));
        pins.answered(Some("b"), None, 1, StatusCode::OK, true);
        assert_eq!(pins.get("b"), None);
    }

    #[test]
    fn hop_headers_and_those_connection_names_are_stripped() {
        let mut h = hyper::HeaderMap::new();
        h.insert(
            header::CONNECTION,
            HeaderValue::from_static("X-Hop, keep-alive"),
        );
        h.insert("x-hop", HeaderValue::from_static("1"));
        h.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        h.insert(header::TE, HeaderValue::from_static("trailers"));
        h.insert("mcp-session-id", HeaderValue::from_static("s"));
        strip_hop_headers(&mut h);
        let left: Vec<_> = h.keys().map(|k| k.as_str()).collect();
        assert_eq!(left, ["mcp-session-id"]);
    }

    #[test]
    fn scanner_counts_events_across_frames_and_line_ends() {
        assert_eq!(count(&[b"id: 1\ndata: \n\n", b"data: x\n", b"\n"]), 2);
        assert_eq!(count(&[b"data: a\r\n\r\ndata: b\r\r"]), 2);
        assert_eq!(count(&[b"data: a\r", b"\n\r", b"\n"]), 1);
        assert_eq!(count(&[b"\n\n\n"]), 0);
        assert_eq!(count(&[b"retry: 5\n\n: comment\n\nid: 1\n\n"]), 1);
    }
}
