//! The tower skin: [`ResumeSafetyLayer`] wraps any `http` service (rmcp's
//! `StreamableHttpService`, an axum router) and drives the [guard](crate::guard) with what
//! passes through it.
//!
//! What it does with the I/O the guard asks for:
//! - a POST body is read up to [`ResumeSafetyLayer::max_body`] and forwarded unchanged (a
//!   longer one passes untouched, unread);
//! - SSE responses are rewritten as they stream, block by block: nothing is held back but a
//!   partial block;
//! - a keyed call runs in a task of its own: its inner answer is read to the end and stored
//!   even when the client has gone, its claim's lease renewed meanwhile, and its answer is
//!   stored before the client sees it;
//! - store operations that answer a request (a session lookup, a claim) are awaited; a
//!   failing store makes keyed calls `503` (retryable), everything else passes.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use http::{HeaderValue, Request, Response};
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use tokio::sync::{mpsc, oneshot};
use tower_layer::Layer;
use tower_service::Service;

use crate::guard::{
    Answer, Body as SeenBody, BodyPlan, Guard, GuardAccess, GuardConfig, SseFlow, Step, StoreOp,
    StoreUnavailable, Watch,
};
use crate::ids::InstanceId;
use crate::store::{self, OpResult, Store};

/// The error type of the bodies this layer makes.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Makes an MCP Streamable HTTP service resume-safe (see the [crate docs](crate)).
///
/// ```
/// # use mcp_resume_server::{MemoryStore, ResumeSafetyLayer};
/// # use std::time::Duration;
/// let layer = ResumeSafetyLayer::new(MemoryStore::default())
///     .lease(Duration::from_secs(5))
///     .max_body(1 << 20);
/// ```
///
/// Every service the layer wraps shares one guard: wrap the MCP endpoint once per process.
#[derive(Clone)]
#[must_use]
pub struct ResumeSafetyLayer {
    core: Arc<Core>,
    config: GuardConfig,
    seed: u64,
}

impl std::fmt::Debug for ResumeSafetyLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResumeSafetyLayer")
            .field("config", &self.config)
            .finish()
    }
}

/// What every request shares: the guard (under a lock held only between awaits) and the
/// store.
struct Core {
    guard: Mutex<Guard>,
    store: Arc<dyn Store>,
}

impl Core {
    fn guard(&self) -> MutexGuard<'_, Guard> {
        // The guard's state is plain data; a panic elsewhere left it usable.
        self.guard.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs an operation that answers nobody; a failure is logged (the guard already chose
    /// the safe side for it).
    async fn run(&self, op: &StoreOp) {
        if let Err(e) = store::run(&*self.store, op).await {
            tracing::warn!(error = %e, "resume-safety store operation failed");
        }
    }

    async fn run_watch_ops(&self, watch: &mut Watch) {
        loop {
            let op = watch.poll_op();
            let Some(op) = op else { break };
            self.run(&op).await;
        }
    }

    /// Runs what a watch handed out from inside a body's poll (no await there): spawned.
    fn spawn_watch_ops(self: &Arc<Self>, watch: &mut Watch) {
        while let Some(op) = watch.poll_op() {
            let core = self.clone();
            tokio::spawn(async move { core.run(&op).await });
        }
    }
}

/// The guard under the core's lock, one step at a time.
struct Locked<'a>(&'a Core);

impl GuardAccess for Locked<'_> {
    fn with_guard<R>(&mut self, f: impl FnOnce(&mut Guard) -> R) -> R {
        f(&mut self.0.guard())
    }
}

impl ResumeSafetyLayer {
    /// A layer keeping what instances share in `store`
    /// ([`MemoryStore::default()`](crate::MemoryStore) for one process,
    /// [`RedisStore`](crate::RedisStore) for several).
    ///
    /// Defaults: a random [`InstanceId`]; every part of the extension enforced (resume checks
    /// with capability hashes and sequenced event ids; idempotency); bodies up to 4 MiB
    /// inspected; a 10 s claim lease; `Retry-After: 1` on retryable refusals.
    pub fn new<S: Store>(store: S) -> Self {
        let seed = uuid::Uuid::new_v4().as_u64_pair().0;
        Self::build(Arc::new(store), GuardConfig::default(), seed)
    }

    fn build(store: Arc<dyn Store>, config: GuardConfig, seed: u64) -> Self {
        let core = Arc::new(Core {
            guard: Mutex::new(Guard::new(config.clone(), seed)),
            store,
        });
        Self { core, config, seed }
    }

    fn with(mut self, change: impl FnOnce(&mut GuardConfig)) -> Self {
        change(&mut self.config);
        Self::build(self.core.store.clone(), self.config, self.seed)
    }

    /// The name this instance writes as owner in session records and claims. Default: a
    /// random one per layer. Give each replica (and each restart of it) a distinct one.
    pub fn instance_id(self, id: InstanceId) -> Self {
        self.with(|c| c.instance = id)
    }

    /// Request bodies, JSON response bodies and SSE blocks longer than this pass untouched
    /// (a keyed call whose body is longer is refused with `413`: it cannot be guarded).
    /// Default: 4 MiB.
    pub fn max_body(self, bytes: usize) -> Self {
        self.with(|c| c.max_body = bytes.max(1024))
    }

    /// How long a keyed call's claim holds without renewal (renewed every third of it while
    /// the call runs). When an instance dies, its keys read as "outcome unknown" this long
    /// after its last renewal. Default: 10 s.
    pub fn lease(self, lease: Duration) -> Self {
        self.with(|c| c.lease = lease.max(Duration::from_millis(30)))
    }

    /// Whether resumes are checked: capability hashes on every response of a session,
    /// sequenced event ids, and resume authorization. Default: on. Off, resumes pass through
    /// to the inner server unchecked, and only idempotency is advertised.
    pub fn resume_checks(self, on: bool) -> Self {
        self.with(|c| {
            c.parts.capability_hash = on;
            c.parts.sequenced_event_ids = on;
        })
    }

    /// Whether keyed `tools/call`s are claimed and deduplicated. Default: on.
    pub fn idempotency(self, on: bool) -> Self {
        self.with(|c| c.parts.idempotency = on)
    }

    /// The `Retry-After` (seconds) of retryable refusals (store unreachable). Default: 1.
    pub fn retry_after(self, secs: u64) -> Self {
        self.with(|c| c.retry_after_secs = secs)
    }

    /// Seeds the stream ids the guard draws (tests that want the same ids every run).
    /// Default: random.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        Self::build(self.core.store.clone(), self.config, seed)
    }

    /// The guard's settings.
    pub fn config(&self) -> &GuardConfig {
        &self.config
    }
}

impl<I> Layer<I> for ResumeSafetyLayer {
    type Service = ResumeSafety<I>;

    fn layer(&self, inner: I) -> Self::Service {
        ResumeSafety {
            inner,
            core: self.core.clone(),
        }
    }
}

/// A service made resume-safe by [`ResumeSafetyLayer`].
#[derive(Clone)]
pub struct ResumeSafety<I> {
    inner: I,
    core: Arc<Core>,
}

impl<I> std::fmt::Debug for ResumeSafety<I> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResumeSafety").finish_non_exhaustive()
    }
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<I, ReqB, ResB> Service<Request<ReqB>> for ResumeSafety<I>
where
    I: Service<Request<GuardedRequestBody<ReqB>>, Response = Response<ResB>>
        + Clone
        + Send
        + 'static,
    I::Future: Send + 'static,
    I::Error: Send + 'static,
    ReqB: Body<Data = Bytes> + Send + Unpin + 'static,
    ReqB::Error: Into<BoxError>,
    ResB: Body<Data = Bytes> + Send + Unpin + 'static,
    ResB::Error: Into<BoxError> + Send,
{
    type Response = Response<GuardedBody<ResB>>;
    type Error = I::Error;
    type Future = BoxFuture<Result<Self::Response, I::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        // The service that was polled ready goes with this call; the clone stays for the next.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        Box::pin(handle(self.core.clone(), inner, req))
    }
}

async fn handle<I, ReqB, ResB>(
    core: Arc<Core>,
    mut inner: I,
    req: Request<ReqB>,
) -> Result<Response<GuardedBody<ResB>>, I::Error>
where
    I: Service<Request<GuardedRequestBody<ReqB>>, Response = Response<ResB>> + Send + 'static,
    I::Future: Send + 'static,
    I::Error: Send + 'static,
    ReqB: Body<Data = Bytes> + Send + Unpin + 'static,
    ReqB::Error: Into<BoxError>,
    ResB: Body<Data = Bytes> + Send + Unpin + 'static,
    ResB::Error: Into<BoxError> + Send,
{
    let (mut parts, body) = req.into_parts();
    let mut body = GuardedRequestBody::untouched(body);
    let mut ex = core.guard().begin(&parts.method, &parts.headers);
    loop {
        let step = ex.step();
        while let Some(op) = ex.poll_op() {
            core.run(&op).await;
        }
        match step {
            Step::ReadBody { limit } => {
                let (read, seen) = read_limited(body, limit).await;
                body = read;
                let seen = match &seen {
                    Some(bytes) => SeenBody::Complete(bytes),
                    None => SeenBody::TooLarge,
                };
                ex.handle_body(&mut Locked(&core), seen, &parts.headers);
            }
            Step::Store(op) => {
                let result = store::run(&*core.store, &op).await;
                if let Err(e) = &result {
                    tracing::warn!(error = %e, "resume-safety store unavailable");
                }
                let mut g = core.guard();
                match (op, result) {
                    (StoreOp::LoadSession(_), Ok(OpResult::Session(r))) => {
                        ex.handle_session(&mut g, Ok(r))
                    }
                    (StoreOp::LoadSession(_), _) => {
                        ex.handle_session(&mut g, Err(StoreUnavailable))
                    }
                    (StoreOp::Claim(_), Ok(OpResult::Claim(c))) => ex.handle_claim(&mut g, Ok(c)),
                    (StoreOp::Claim(_), _) => ex.handle_claim(&mut g, Err(StoreUnavailable)),
                    _ => {}
                }
            }
            Step::Pass => {
                let resp = inner.call(Request::from_parts(parts, body)).await?;
                return Ok(resp.map(GuardedBody::untouched));
            }
            Step::Forward(forward) => {
                if let Some(id) = forward.last_event_id() {
                    parts
                        .headers
                        .insert(crate::wire::LAST_EVENT_ID_HEADER, id.clone());
                }
                let watch = forward.into_watch();
                let req = Request::from_parts(parts, body);
                return if watch.must_drain() {
                    keyed(core, inner, req, watch).await
                } else {
                    watched(core, inner, req, watch).await
                };
            }
            Step::Answer(answer) => return Ok(answer_response(answer)),
        }
    }
}

/// Forwards a request whose response the guard watches (everything but keyed calls): the
/// work follows the client's connection, as it would without the guard.
async fn watched<I, ReqB, ResB>(
    core: Arc<Core>,
    mut inner: I,
    req: Request<GuardedRequestBody<ReqB>>,
    mut watch: Watch,
) -> Result<Response<GuardedBody<ResB>>, I::Error>
where
    I: Service<Request<GuardedRequestBody<ReqB>>, Response = Response<ResB>>,
    ResB: Body<Data = Bytes> + Send + Unpin + 'static,
    ResB::Error: Into<BoxError> + Send,
{
    watch.start(std::time::Instant::now());
    let resp = inner.call(req).await?;
    let (mut parts, mut body) = resp.into_parts();
    let plan = watch.handle_head(&mut core.guard(), parts.status, &mut parts.headers);
    core.run_watch_ops(&mut watch).await;
    let body = match plan {
        BodyPlan::Untouched => GuardedBody::untouched(body),
        BodyPlan::Json { limit } => {
            let (body, replaced) = read_json(&core, &mut watch, body, limit).await;
            if let Some(len) = replaced {
                parts
                    .headers
                    .insert(http::header::CONTENT_LENGTH, HeaderValue::from(len));
            }
            body
        }
        BodyPlan::Sse => {
            let mut pending = BytesMut::new();
            let mut ended = false;
            // An `initialize` holds its head until its result has passed; a resume until
            // its replay is proven.
            while !watch.head_ready() {
                match body.frame().await {
                    Some(Ok(frame)) => {
                        if let Ok(data) = frame.into_data() {
                            let _ = watch.handle_sse(&mut Locked(&core), &data, &mut pending);
                        }
                    }
                    end => {
                        let clean = end.is_none();
                        watch.handle_end(&mut core.guard(), clean, &mut pending);
                        ended = true;
                        break;
                    }
                }
            }
            if let Some(refusal) = watch.take_refusal() {
                core.run_watch_ops(&mut watch).await;
                return Ok(answer_response(refusal));
            }
            core.run_watch_ops(&mut watch).await;
            parts.headers.remove(http::header::CONTENT_LENGTH);
            watch.finish_head(&mut parts.headers);
            let body = if ended {
                GuardedBody::full(pending.freeze())
            } else {
                GuardedBody::sse(body, watch, core.clone(), pending.freeze())
            };
            return Ok(Response::from_parts(parts, body));
        }
    };
    watch.finish_head(&mut parts.headers);
    Ok(Response::from_parts(parts, body))
}

/// Reads a JSON body whole (up to `limit`) for the watch; the body to send, and its new
/// length when the watch replaced it.
async fn read_json<ResB>(
    core: &Arc<Core>,
    watch: &mut Watch,
    body: ResB,
    limit: usize,
) -> (GuardedBody<ResB>, Option<usize>)
where
    ResB: Body<Data = Bytes> + Send + Unpin + 'static,
    ResB::Error: Into<BoxError> + Send,
{
    let collected = collect_limited(body, limit).await;
    judge_json(core, watch, collected).await
}

/// Gives a read JSON body to the watch.
async fn judge_json<ResB>(
    core: &Arc<Core>,
    watch: &mut Watch,
    collected: Collected<ResB>,
) -> (GuardedBody<ResB>, Option<usize>) {
    let out = match collected {
        Collected::Whole(bytes) => match watch.handle_json(&mut core.guard(), &bytes) {
            Some(new) => {
                let len = new.len();
                (GuardedBody::full(new), Some(len))
            }
            None => (GuardedBody::full(bytes), None),
        },
        Collected::TooLarge(prefix, rest) => {
            watch.handle_json_overflow();
            (GuardedBody::chained(prefix, rest), None)
        }
        Collected::Failed(prefix, e) => {
            watch.handle_json_overflow();
            (GuardedBody::failed(prefix, e), None)
        }
    };
    core.run_watch_ops(watch).await;
    out
}

/// A keyed call: run in a task of its own so that its answer is read to the end and stored
/// whether or not the client waits; its lease is renewed while it runs.
async fn keyed<I, ReqB, ResB>(
    core: Arc<Core>,
    inner: I,
    req: Request<GuardedRequestBody<ReqB>>,
    watch: Watch,
) -> Result<Response<GuardedBody<ResB>>, I::Error>
where
    I: Service<Request<GuardedRequestBody<ReqB>>, Response = Response<ResB>> + Send + 'static,
    I::Future: Send + 'static,
    I::Error: Send + 'static,
    ReqB: Body<Data = Bytes> + Send + Unpin + 'static,
    ReqB::Error: Into<BoxError>,
    ResB: Body<Data = Bytes> + Send + Unpin + 'static,
    ResB::Error: Into<BoxError> + Send,
{
    let (head_tx, head_rx) = oneshot::channel();
    tokio::spawn(drive_keyed(core, inner, req, watch, head_tx));
    match head_rx.await {
        Ok(result) => result,
        // The task cannot end without answering (it owns the sender until it does).
        Err(_) => Ok(answer_response(Answer::internal())),
    }
}

/// Frames a keyed call's client may lag behind before it is taken to have gone.
const KEYED_CHANNEL: usize = 64;

async fn drive_keyed<I, ReqB, ResB>(
    core: Arc<Core>,
    mut inner: I,
    req: Request<GuardedRequestBody<ReqB>>,
    mut watch: Watch,
    head_tx: oneshot::Sender<Result<Response<GuardedBody<ResB>>, I::Error>>,
) where
    I: Service<Request<GuardedRequestBody<ReqB>>, Response = Response<ResB>>,
    ResB: Body<Data = Bytes> + Send + Unpin + 'static,
    ResB::Error: Into<BoxError> + Send,
{
    watch.start(std::time::Instant::now());
    let call = inner.call(req);
    tokio::pin!(call);
    let resp = loop {
        let due = watch.poll_timeout();
        tokio::select! {
            r = &mut call => break r,
            () = sleep_until(due) => renew(&core, &mut watch).await,
        }
    };
    let resp = match resp {
        Ok(r) => r,
        Err(e) => {
            watch.handle_json_overflow();
            core.run_watch_ops(&mut watch).await;
            let _ = head_tx.send(Err(e));
            return;
        }
    };
    let (mut parts, mut body) = resp.into_parts();
    let plan = watch.handle_head(&mut core.guard(), parts.status, &mut parts.headers);
    core.run_watch_ops(&mut watch).await;
    match plan {
        BodyPlan::Untouched => {
            let _ = head_tx.send(Ok(Response::from_parts(
                parts,
                GuardedBody::untouched(body),
            )));
        }
        BodyPlan::Json { limit } => {
            let collect = collect_limited(body, limit);
            tokio::pin!(collect);
            let collected = loop {
                let due = watch.poll_timeout();
                tokio::select! {
                    c = &mut collect => break c,
                    () = sleep_until(due) => renew(&core, &mut watch).await,
                }
            };
            let (body, replaced) = judge_json(&core, &mut watch, collected).await;
            if let Some(len) = replaced {
                parts
                    .headers
                    .insert(http::header::CONTENT_LENGTH, HeaderValue::from(len));
            }
            watch.finish_head(&mut parts.headers);
            let _ = head_tx.send(Ok(Response::from_parts(parts, body)));
        }
        BodyPlan::Sse => {
            let (tx, rx) = mpsc::channel(KEYED_CHANNEL);
            parts.headers.remove(http::header::CONTENT_LENGTH);
            watch.finish_head(&mut parts.headers);
            let mut client = head_tx
                .send(Ok(Response::from_parts(parts, GuardedBody::channel(rx))))
                .is_ok()
                .then_some(tx);
            loop {
                let due = watch.poll_timeout();
                let frame = tokio::select! {
                    f = body.frame() => f,
                    () = sleep_until(due) => {
                        renew(&core, &mut watch).await;
                        continue;
                    }
                };
                let mut out = BytesMut::new();
                let end = match frame {
                    Some(Ok(frame)) => {
                        if let Ok(data) = frame.into_data() {
                            let _ = watch.handle_sse(&mut Locked(&core), &data, &mut out);
                        }
                        None
                    }
                    None => Some(Ok(())),
                    Some(Err(e)) => Some(Err(e.into())),
                };
                if let Some(end) = &end {
                    watch.handle_end(&mut core.guard(), end.is_ok(), &mut out);
                }
                // The key's answer is stored before the client can see it.
                core.run_watch_ops(&mut watch).await;
                if let Some(tx) = &client {
                    if !out.is_empty() && !send_or_give_up(tx, Ok(out.freeze())).await {
                        client = None;
                    }
                }
                match end {
                    Some(Ok(())) => return,
                    Some(Err(e)) => {
                        if let Some(tx) = &client {
                            let _ = tx.send(Err(e)).await;
                        }
                        return;
                    }
                    None if client.is_none() && !watch.must_drain() => return,
                    None => {}
                }
            }
        }
    }
}

/// Sends a frame to a keyed call's client, giving up on a client that does not read for
/// a while (the call goes on without it). `false` once the client is gone.
async fn send_or_give_up(
    tx: &mpsc::Sender<Result<Bytes, BoxError>>,
    frame: Result<Bytes, BoxError>,
) -> bool {
    matches!(
        tokio::time::timeout(Duration::from_secs(30), tx.send(frame)).await,
        Ok(Ok(()))
    )
}

/// Resolves at `at` (never, without one).
async fn sleep_until(at: Option<std::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

async fn renew(core: &Core, watch: &mut Watch) {
    watch.handle_timeout(std::time::Instant::now());
    core.run_watch_ops(watch).await;
}

fn answer_response<B>(answer: Answer) -> Response<GuardedBody<B>> {
    let (status, headers, body) = answer.into_parts();
    let mut resp = Response::new(GuardedBody::full(body));
    *resp.status_mut() = status;
    for (name, value) in headers {
        resp.headers_mut().insert(name, value);
    }
    resp
}

/// Reads a request body up to `limit`: the body to forward (unchanged) and its bytes when
/// it was complete within the limit.
async fn read_limited<B>(
    body: GuardedRequestBody<B>,
    limit: usize,
) -> (GuardedRequestBody<B>, Option<Bytes>)
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    let Some(mut rest) = body.rest else {
        let bytes = body.prefix.unwrap_or_default();
        return (GuardedRequestBody::full(bytes.clone()), Some(bytes));
    };
    let mut buf = BytesMut::new();
    loop {
        match rest.frame().await {
            Some(Ok(frame)) => {
                if let Ok(mut data) = frame.into_data() {
                    buf.extend_from_slice(&data.copy_to_bytes(data.remaining()));
                    if buf.len() > limit {
                        return (GuardedRequestBody::chained(buf.freeze(), rest), None);
                    }
                }
            }
            Some(Err(e)) => {
                let body = GuardedRequestBody {
                    prefix: Some(buf.freeze()),
                    rest: None,
                    error: Some(e.into()),
                };
                return (body, None);
            }
            None => {
                let bytes = buf.freeze();
                return (GuardedRequestBody::full(bytes.clone()), Some(bytes));
            }
        }
    }
}

/// A response body read up to a limit.
enum Collected<B> {
    Whole(Bytes),
    TooLarge(Bytes, B),
    Failed(Bytes, BoxError),
}

async fn collect_limited<B>(mut body: B, limit: usize) -> Collected<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    let mut buf = BytesMut::new();
    loop {
        match body.frame().await {
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    buf.extend_from_slice(&data);
                    if buf.len() > limit {
                        return Collected::TooLarge(buf.freeze(), body);
                    }
                }
            }
            Some(Err(e)) => return Collected::Failed(buf.freeze(), e.into()),
            None => return Collected::Whole(buf.freeze()),
        }
    }
}

/// The request body the inner service receives: the client's, unchanged (what the guard read
/// of it comes first, then the rest as it arrives).
#[derive(Debug)]
pub struct GuardedRequestBody<B> {
    prefix: Option<Bytes>,
    rest: Option<B>,
    error: Option<BoxError>,
}

impl<B> GuardedRequestBody<B> {
    fn untouched(body: B) -> Self {
        Self {
            prefix: None,
            rest: Some(body),
            error: None,
        }
    }

    fn full(bytes: Bytes) -> Self {
        Self {
            prefix: Some(bytes),
            rest: None,
            error: None,
        }
    }

    fn chained(prefix: Bytes, rest: B) -> Self {
        Self {
            prefix: Some(prefix),
            rest: Some(rest),
            error: None,
        }
    }
}

impl<B> Body for GuardedRequestBody<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if let Some(prefix) = self.prefix.take() {
            if !prefix.is_empty() {
                return Poll::Ready(Some(Ok(Frame::data(prefix))));
            }
        }
        if let Some(e) = self.error.take() {
            return Poll::Ready(Some(Err(e)));
        }
        match self.rest.as_mut() {
            Some(rest) => Pin::new(rest)
                .poll_frame(cx)
                .map(|f| f.map(|r| r.map_err(Into::into))),
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.prefix.as_ref().is_none_or(Bytes::is_empty)
            && self.error.is_none()
            && self.rest.as_ref().is_none_or(Body::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        let prefix = self.prefix.as_ref().map_or(0, |p| p.len() as u64);
        match &self.rest {
            None => SizeHint::with_exact(prefix),
            Some(rest) => {
                let h = rest.size_hint();
                let mut out = SizeHint::new();
                out.set_lower(h.lower() + prefix);
                if let Some(upper) = h.upper() {
                    out.set_upper(upper + prefix);
                }
                out
            }
        }
    }
}

/// The response body the client receives.
pub struct GuardedBody<B> {
    kind: Kind<B>,
}

impl<B> std::fmt::Debug for GuardedBody<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match &self.kind {
            Kind::Untouched(_) => "untouched",
            Kind::Full(_) => "full",
            Kind::Chained { .. } => "chained",
            Kind::Failed { .. } => "failed",
            Kind::Sse(_) => "sse",
            Kind::Channel(_) => "channel",
        };
        f.debug_struct("GuardedBody").field("kind", &kind).finish()
    }
}

enum Kind<B> {
    /// The inner body as it is.
    Untouched(B),
    /// A body the guard wrote or read whole.
    Full(Option<Bytes>),
    /// What was read of an over-long body, then the rest.
    Chained { prefix: Option<Bytes>, rest: B },
    /// What was read, then the inner body's error.
    Failed {
        prefix: Option<Bytes>,
        error: Option<BoxError>,
    },
    /// An SSE stream rewritten as it passes.
    Sse(Box<SseState<B>>),
    /// A keyed call's stream, fed by the task that owns the call.
    Channel(mpsc::Receiver<Result<Bytes, BoxError>>),
}

struct SseState<B> {
    inner: B,
    watch: Watch,
    core: Arc<Core>,
    pending: Option<Bytes>,
    abort: bool,
    done: bool,
}

impl<B> GuardedBody<B> {
    fn untouched(body: B) -> Self {
        Self {
            kind: Kind::Untouched(body),
        }
    }

    fn full(bytes: Bytes) -> Self {
        Self {
            kind: Kind::Full(Some(bytes)),
        }
    }

    fn chained(prefix: Bytes, rest: B) -> Self {
        Self {
            kind: Kind::Chained {
                prefix: Some(prefix),
                rest,
            },
        }
    }

    fn failed(prefix: Bytes, error: BoxError) -> Self {
        Self {
            kind: Kind::Failed {
                prefix: Some(prefix),
                error: Some(error),
            },
        }
    }

    fn sse(inner: B, watch: Watch, core: Arc<Core>, pending: Bytes) -> Self {
        Self {
            kind: Kind::Sse(Box::new(SseState {
                inner,
                watch,
                core,
                pending: Some(pending),
                abort: false,
                done: false,
            })),
        }
    }

    fn channel(rx: mpsc::Receiver<Result<Bytes, BoxError>>) -> Self {
        Self {
            kind: Kind::Channel(rx),
        }
    }
}

/// The error a rewritten stream ends with when the inner server's replay diverged from what
/// was issued: the client must not take what would follow as the stream's continuation.
#[derive(Debug, thiserror::Error)]
#[error("the inner server's replay does not continue the stream from the client's cursor")]
struct ReplayDiverged;

impl<B> Body for GuardedBody<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match &mut self.kind {
            Kind::Untouched(b) => Pin::new(b)
                .poll_frame(cx)
                .map(|f| f.map(|r| r.map_err(Into::into))),
            Kind::Full(bytes) => Poll::Ready(
                bytes
                    .take()
                    .filter(|b| !b.is_empty())
                    .map(|b| Ok(Frame::data(b))),
            ),
            Kind::Chained { prefix, rest } => {
                if let Some(p) = prefix.take() {
                    return Poll::Ready(Some(Ok(Frame::data(p))));
                }
                Pin::new(rest)
                    .poll_frame(cx)
                    .map(|f| f.map(|r| r.map_err(Into::into)))
            }
            Kind::Failed { prefix, error } => {
                if let Some(p) = prefix.take().filter(|p| !p.is_empty()) {
                    return Poll::Ready(Some(Ok(Frame::data(p))));
                }
                Poll::Ready(error.take().map(Err))
            }
            Kind::Channel(rx) => rx.poll_recv(cx).map(|m| m.map(|r| r.map(Frame::data))),
            Kind::Sse(state) => state.poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Untouched(b) => b.is_end_stream(),
            Kind::Full(bytes) => bytes.as_ref().is_none_or(Bytes::is_empty),
            _ => false,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Untouched(b) => b.size_hint(),
            Kind::Full(bytes) => SizeHint::with_exact(bytes.as_ref().map_or(0, |b| b.len() as u64)),
            _ => SizeHint::default(),
        }
    }
}

impl<B> SseState<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    fn poll_frame(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if let Some(p) = self.pending.take().filter(|p| !p.is_empty()) {
            return Poll::Ready(Some(Ok(Frame::data(p))));
        }
        if self.abort {
            self.abort = false;
            self.done = true;
            return Poll::Ready(Some(Err(Box::new(ReplayDiverged))));
        }
        if self.done {
            return Poll::Ready(None);
        }
        loop {
            let frame = match Pin::new(&mut self.inner).poll_frame(cx) {
                Poll::Ready(f) => f,
                Poll::Pending => return Poll::Pending,
            };
            let mut out = BytesMut::new();
            match frame {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => {
                        let flow = self
                            .watch
                            .handle_sse(&mut Locked(&self.core), &data, &mut out);
                        self.core.spawn_watch_ops(&mut self.watch);
                        if flow == SseFlow::Abort {
                            self.abort = true;
                            if out.is_empty() {
                                return self.poll_frame(cx);
                            }
                        }
                        if !out.is_empty() {
                            return Poll::Ready(Some(Ok(Frame::data(out.freeze()))));
                        }
                    }
                    // Trailers pass as they are.
                    Err(frame) => return Poll::Ready(Some(Ok(frame))),
                },
                Some(Err(e)) => {
                    self.watch
                        .handle_end(&mut self.core.guard(), false, &mut out);
                    self.core.spawn_watch_ops(&mut self.watch);
                    self.done = true;
                    return Poll::Ready(Some(Err(e.into())));
                }
                None => {
                    self.watch
                        .handle_end(&mut self.core.guard(), true, &mut out);
                    self.core.spawn_watch_ops(&mut self.watch);
                    self.done = true;
                    if out.is_empty() {
                        return Poll::Ready(None);
                    }
                    return Poll::Ready(Some(Ok(Frame::data(out.freeze()))));
                }
            }
        }
    }
}
