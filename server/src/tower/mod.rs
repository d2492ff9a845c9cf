//! The tower skin: [`ResumeSafetyLayer`] wraps any `http` service (rmcp's
//! `StreamableHttpService`, an axum router) and drives the [guard](crate::guard) with what
//! passes through it, through the [skin](crate::skin) every other skin uses too.
//!
//! What it does with the I/O the guard asks for:
//! - a POST body is read up to [`ResumeSafetyLayer::max_body`] and forwarded unchanged (a
//!   longer one passes untouched, unread, except a keyed call that long, its key in the
//!   `Idempotency-Key` header or named in the bytes read: it is refused 413, as it cannot be
//!   guarded);
//! - SSE responses are rewritten as they stream, block by block: nothing is held back but a
//!   partial block;
//! - a keyed call runs in a task of its own: its inner answer is read to the end and stored
//!   even when the client has gone, its claim's lease renewed meanwhile, and its answer is
//!   stored before the client sees it;
//! - store operations that answer a request (a session lookup, a claim) are awaited; a
//!   failing store makes keyed calls `503` (retryable), everything else passes.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::{Request, Response};
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use tokio::sync::{mpsc, oneshot};
use tower_layer::Layer;
use tower_service::Service;

use crate::guard::{Answer, GuardConfig};
use crate::ids::InstanceId;
use crate::skin::{self, End, GuardBuilder, Outbound, SharedGuard, ToClient};
use crate::store::Store;

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
/// Its settings are a [`GuardBuilder`]'s (each setter here is that one; the defaults are
/// documented there), so the layer and the other languages' skins read the same ones.
/// Every service the layer wraps shares one guard: wrap the MCP endpoint once per process.
#[derive(Clone)]
#[must_use]
pub struct ResumeSafetyLayer {
    builder: GuardBuilder,
    guard: SharedGuard,
}

impl std::fmt::Debug for ResumeSafetyLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResumeSafetyLayer")
            .field("config", self.guard.config())
            .finish()
    }
}

impl ResumeSafetyLayer {
    /// A layer keeping what instances share in `store`
    /// ([`MemoryStore::default()`](crate::MemoryStore) for one process,
    /// [`RedisStore`](crate::RedisStore) for several).
    ///
    /// Defaults: a random [`InstanceId`]; every part of the extension enforced (resume checks
    /// with capability hashes and sequenced event ids; idempotency); bodies up to 4 MiB
    /// inspected; a 10 s claim lease; `Retry-After: 1` on retryable refusals; each store step
    /// bounded at 5 s.
    pub fn new<S: Store>(store: S) -> Self {
        Self::from_builder(GuardBuilder::new(store))
    }

    /// A layer with these settings.
    pub fn from_builder(builder: GuardBuilder) -> Self {
        let guard = builder.clone().build();
        Self { builder, guard }
    }

    fn with(self, change: impl FnOnce(GuardBuilder) -> GuardBuilder) -> Self {
        Self::from_builder(change(self.builder))
    }

    /// [`GuardBuilder::instance_id`].
    pub fn instance_id(self, id: InstanceId) -> Self {
        self.with(|b| b.instance_id(id))
    }

    /// [`GuardBuilder::max_body`]. Default: 4 MiB.
    pub fn max_body(self, bytes: usize) -> Self {
        self.with(|b| b.max_body(bytes))
    }

    /// [`GuardBuilder::lease`]. Default: 10 s.
    pub fn lease(self, lease: Duration) -> Self {
        self.with(|b| b.lease(lease))
    }

    /// [`GuardBuilder::resume_checks`]. Default: on.
    pub fn resume_checks(self, on: bool) -> Self {
        self.with(|b| b.resume_checks(on))
    }

    /// [`GuardBuilder::idempotency`]. Default: on.
    pub fn idempotency(self, on: bool) -> Self {
        self.with(|b| b.idempotency(on))
    }

    /// [`GuardBuilder::store_timeout`]. Default: 5 s.
    pub fn store_timeout(self, limit: Duration) -> Self {
        self.with(|b| b.store_timeout(limit))
    }

    /// [`GuardBuilder::retry_after`]. Default: 1.
    pub fn retry_after(self, secs: u64) -> Self {
        self.with(|b| b.retry_after(secs))
    }

    /// [`GuardBuilder::key_scope_header`]. Default: none (one namespace per store).
    pub fn key_scope_header(self, name: http::HeaderName) -> Self {
        self.with(|b| b.key_scope_header(name))
    }

    /// [`GuardBuilder::seed`]. Default: random.
    pub fn seed(self, seed: u64) -> Self {
        self.with(|b| b.seed(seed))
    }

    /// The guard's settings.
    pub fn config(&self) -> &GuardConfig {
        self.guard.config()
    }
}

impl<I> Layer<I> for ResumeSafetyLayer {
    type Service = ResumeSafety<I>;

    fn layer(&self, inner: I) -> Self::Service {
        ResumeSafety {
            inner: Some(inner),
            spare: Arc::new(OnceLock::new()),
            guard: self.guard.clone(),
        }
    }
}

/// A service made resume-safe by [`ResumeSafetyLayer`].
pub struct ResumeSafety<I> {
    /// The service for the next call (polled ready for it); the call takes it.
    inner: Option<I>,
    /// What a service is cloned from once a call took the one here, shared by every clone of
    /// this service; set by the first call.
    ///
    /// A router (axum's) clones the service for each request and drops it after one call: the
    /// call takes the inner service it was polled ready with, and nothing is cloned for a
    /// next call that never comes. A service called again clones from here when polled.
    spare: Arc<OnceLock<Mutex<I>>>,
    guard: SharedGuard,
}

impl<I: Clone> Clone for ResumeSafety<I> {
    fn clone(&self) -> Self {
        Self {
            inner: match &self.inner {
                Some(inner) => Some(inner.clone()),
                None => self.spare_clone(),
            },
            spare: self.spare.clone(),
            guard: self.guard.clone(),
        }
    }
}

impl<I: Clone> ResumeSafety<I> {
    fn spare_clone(&self) -> Option<I> {
        let spare = self.spare.get()?;
        // A clone panicking elsewhere leaves the service as it was.
        Some(spare.lock().unwrap_or_else(|p| p.into_inner()).clone())
    }
}

impl<I> std::fmt::Debug for ResumeSafety<I> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResumeSafety").finish_non_exhaustive()
    }
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

mod future;

pub use future::ResponseFuture;

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
    type Future = ResponseFuture<I, ReqB, ResB>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        if self.inner.is_none() {
            self.inner = self.spare_clone();
        }
        match &mut self.inner {
            Some(inner) => inner.poll_ready(cx),
            // Never: only a call takes the service, and it leaves the spare first. The call
            // that follows answers an internal error.
            None => Poll::Ready(Ok(())),
        }
    }

    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        // The service that was polled ready goes with this call.
        let inner = match self.inner.take() {
            Some(inner) => {
                if self.spare.get().is_none() {
                    let _ = self.spare.set(Mutex::new(inner.clone()));
                }
                inner
            }
            // Called without being polled ready after a call: as with any service called
            // unready, this one goes as it is.
            None => match self.spare_clone() {
                Some(inner) => inner,
                None => return ResponseFuture::failed(),
            },
        };
        let inbound = self.guard.begin(req.method(), req.headers());
        ResponseFuture::new(inbound, inner, req)
    }
}

/// What the client gets until the head may go: the head, the bytes so far, how it ended.
#[derive(Default)]
struct Gathered {
    head: Option<(http::StatusCode, http::HeaderMap)>,
    body: BytesMut,
    end: Option<End>,
}

impl Gathered {
    fn add(&mut self, step: ToClient) {
        if step.head.is_some() {
            self.head = step.head;
        }
        self.body.extend_from_slice(&step.body);
        if step.end.is_some() {
            self.end = step.end;
        }
    }
}

/// The inner response's head, for a request the guard watches (everything but keyed calls,
/// whose work follows the client's connection as it would without the guard): the client's
/// response when its head may go now (most), else the rest of the work, boxed: store
/// operations to run first, a JSON body read whole, an `initialize` answered with SSE
/// holding its head until its result has passed, a resume until its replay is proven.
fn respond_or_gather<ResB>(
    resp: Response<ResB>,
    mut out: Outbound,
) -> Result<Response<GuardedBody<ResB>>, BoxFuture<Response<GuardedBody<ResB>>>>
where
    ResB: Body<Data = Bytes> + Send + Unpin + 'static,
    ResB::Error: Into<BoxError> + Send,
{
    let (parts, body) = resp.into_parts();
    let mut got = Gathered::default();
    got.add(out.handle_head(parts.status, parts.headers));
    let ops = out.take_ops();
    if ops.is_empty() && (got.head.is_some() || got.end.is_some()) {
        return Ok(respond(
            got,
            None,
            body,
            out,
            parts.version,
            parts.extensions,
        ));
    }
    Err(Box::pin(async move {
        ops.run().await;
        gather(got, body, out, parts.version, parts.extensions).await
    }))
}

/// Reads the inner body until the head may go (or the body ended), then responds.
async fn gather<ResB>(
    mut got: Gathered,
    mut body: ResB,
    mut out: Outbound,
    version: http::Version,
    extensions: http::Extensions,
) -> Response<GuardedBody<ResB>>
where
    ResB: Body<Data = Bytes> + Send + Unpin + 'static,
    ResB::Error: Into<BoxError> + Send,
{
    let mut failed = None;
    while got.head.is_none() && got.end.is_none() {
        let step = match body.frame().await {
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) => out.handle_body(&data),
                Err(_) => continue,
            },
            Some(Err(e)) => {
                failed = Some(e.into());
                out.handle_end(false)
            }
            None => out.handle_end(true),
        };
        got.add(step);
        out.take_ops().run().await;
    }
    respond(got, failed, body, out, version, extensions)
}

/// The client's response, once its head may go: the head, what was gathered, and the rest
/// of the inner body as the guard passes it on.
fn respond<ResB>(
    got: Gathered,
    failed: Option<BoxError>,
    body: ResB,
    out: Outbound,
    version: http::Version,
    extensions: http::Extensions,
) -> Response<GuardedBody<ResB>>
where
    ResB: Body<Data = Bytes> + Send + Unpin + 'static,
    ResB::Error: Into<BoxError> + Send,
{
    let Some((status, headers)) = got.head else {
        // Ended without a head (only an inner failure does): an error, as the inner's was.
        return answer_response(Answer::internal());
    };
    let prefix = got.body.freeze();
    let body = match (got.end, failed) {
        (Some(End::Abort), Some(e)) => GuardedBody::failed(prefix, e),
        (Some(End::Abort), None) => GuardedBody::failed(prefix, Box::new(ReplayDiverged)),
        (Some(End::Complete), _) => GuardedBody::full(prefix),
        (None, _) if out.is_untouched() => GuardedBody::chained(prefix, body),
        (None, _) => GuardedBody::driven(prefix, body, out),
    };
    let mut resp = Response::new(body);
    *resp.status_mut() = status;
    *resp.headers_mut() = headers;
    // The inner response's version and extensions stay.
    *resp.version_mut() = version;
    *resp.extensions_mut() = extensions;
    resp
}

/// A keyed call: run in a task of its own so that its answer is read to the end and stored
/// whether or not the client waits (its lease is renewed by the outbound meanwhile).
async fn keyed<I, ReqB, ResB>(
    inner: I,
    req: Request<GuardedRequestBody<ReqB>>,
    out: Outbound,
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
    tokio::spawn(drive_keyed(inner, req, out, head_tx));
    match head_rx.await {
        Ok(result) => result,
        // The task cannot end without answering (it owns the sender until it does).
        Err(_) => Ok(answer_response(Answer::internal())),
    }
}

/// Frames a keyed call's client may lag behind before it is taken to have gone.
const KEYED_CHANNEL: usize = 64;

async fn drive_keyed<I, ReqB, ResB>(
    mut inner: I,
    req: Request<GuardedRequestBody<ReqB>>,
    mut out: Outbound,
    head_tx: oneshot::Sender<Result<Response<GuardedBody<ResB>>, I::Error>>,
) where
    I: Service<Request<GuardedRequestBody<ReqB>>, Response = Response<ResB>>,
    ResB: Body<Data = Bytes> + Send + Unpin + 'static,
    ResB::Error: Into<BoxError> + Send,
{
    let resp = match inner.call(req).await {
        Ok(r) => r,
        Err(e) => {
            let _ = out.handle_end(false);
            out.take_ops().run().await;
            let _ = head_tx.send(Err(e));
            return;
        }
    };
    let (parts, mut body) = resp.into_parts();
    let mut got = Gathered::default();
    got.add(out.handle_head(parts.status, parts.headers));
    out.take_ops().run().await;
    let mut head_tx = Some(head_tx);
    let mut client: Option<mpsc::Sender<Fed>> = None;
    loop {
        if let Some(tx) = head_tx.take_if(|_| got.head.is_some()) {
            let Some((status, headers)) = got.head.take() else {
                return;
            };
            let prefix = std::mem::take(&mut got.body).freeze();
            let mut resp = Response::new(());
            *resp.status_mut() = status;
            *resp.headers_mut() = headers;
            let (mut head, ()) = resp.into_parts();
            head.version = parts.version;
            if got.end.is_some() {
                // Whole at once (a JSON answer, a refusal): sent as it is.
                let body = match got.end {
                    Some(End::Abort) => GuardedBody::failed(prefix, Box::new(InnerFailed)),
                    _ => GuardedBody::full(prefix),
                };
                let _ = tx.send(Ok(Response::from_parts(head, body)));
                return;
            }
            if out.is_untouched() {
                let body = GuardedBody::chained(prefix, body);
                let _ = tx.send(Ok(Response::from_parts(head, body)));
                return;
            }
            let (ctx, rx) = mpsc::channel(KEYED_CHANNEL);
            if tx
                .send(Ok(Response::from_parts(head, GuardedBody::channel(rx))))
                .is_ok()
                && (prefix.is_empty() || send_or_give_up(&ctx, Fed::Data(prefix)).await)
            {
                client = Some(ctx);
            }
        } else if let Some(tx) = &client {
            let bytes = std::mem::take(&mut got.body).freeze();
            if !bytes.is_empty() && !send_or_give_up(tx, Fed::Data(bytes)).await {
                client = None;
            }
        } else if head_tx.is_none() {
            // The client left: nobody reads these bytes any more (the answer is stored from
            // what the watch read, not from them).
            got.body.clear();
        }
        if let Some(end) = got.end {
            if let Some(tx) = &client {
                let last = match end {
                    End::Abort => Fed::Failed(Box::new(InnerFailed)),
                    End::Complete => Fed::End,
                };
                send_or_give_up(tx, last).await;
            }
            return;
        }
        if client.is_none() && head_tx.is_none() && !out.must_drain() {
            return;
        }
        let step = match body.frame().await {
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) => out.handle_body(&data),
                Err(_) => continue,
            },
            Some(Err(_)) => out.handle_end(false),
            None => out.handle_end(true),
        };
        got.add(step);
        // The key's answer is stored before the client can see it.
        out.take_ops().run().await;
    }
}

/// Sends a frame to a keyed call's client, giving up on a client that does not read for
/// a while (the call goes on without it). `false` once the client is gone.
async fn send_or_give_up(tx: &mpsc::Sender<Fed>, frame: Fed) -> bool {
    matches!(
        tokio::time::timeout(Duration::from_secs(30), tx.send(frame)).await,
        Ok(Ok(()))
    )
}

fn answer_response<B>(answer: Answer) -> Response<GuardedBody<B>> {
    let ToClient { head, body, .. } = skin::answer_to_client(answer);
    let mut resp = Response::new(GuardedBody::full(body));
    if let Some((status, headers)) = head {
        *resp.status_mut() = status;
        *resp.headers_mut() = headers;
    }
    resp
}

/// The request body the inner service receives: the client's, unchanged (what the guard read
/// of it comes first, then the rest as it arrives).
#[derive(Debug)]
pub struct GuardedRequestBody<B> {
    prefix: Option<Bytes>,
    /// The trailers of a body read whole (after the prefix, as they came after its bytes);
    /// boxed: rare, and this is moved with every request.
    trailers: Option<Box<http::HeaderMap>>,
    rest: Option<B>,
    error: Option<BoxError>,
}

impl<B> GuardedRequestBody<B> {
    fn untouched(body: B) -> Self {
        Self {
            prefix: None,
            trailers: None,
            rest: Some(body),
            error: None,
        }
    }

    fn full(bytes: Bytes, trailers: Option<Box<http::HeaderMap>>) -> Self {
        Self {
            prefix: Some(bytes),
            trailers,
            rest: None,
            error: None,
        }
    }

    fn chained(prefix: Bytes, rest: B) -> Self {
        Self {
            prefix: Some(prefix),
            trailers: None,
            rest: Some(rest),
            error: None,
        }
    }

    fn failed(prefix: Bytes, trailers: Option<Box<http::HeaderMap>>, error: BoxError) -> Self {
        Self {
            prefix: Some(prefix),
            trailers,
            rest: None,
            error: Some(error),
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
        if let Some(trailers) = self.trailers.take() {
            return Poll::Ready(Some(Ok(Frame::trailers(*trailers))));
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
            && self.trailers.is_none()
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
            Kind::Driven(_) => "driven",
            Kind::Channel { .. } => "channel",
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
    /// An SSE stream rewritten as it passes. Boxed: inline, it made every response that
    /// carries this body longer to move (counted: more than the allocation costs).
    Driven(Box<Driven<B>>),
    /// A keyed call's stream, fed by the task that owns the call; `ended` once it told
    /// how the stream ends.
    Channel {
        rx: mpsc::Receiver<Fed>,
        ended: bool,
    },
}

struct Driven<B> {
    inner: B,
    out: Outbound,
    pending: Option<Bytes>,
    error: Option<BoxError>,
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

    fn driven(pending: Bytes, inner: B, out: Outbound) -> Self {
        Self {
            kind: Kind::Driven(Box::new(Driven {
                inner,
                out,
                pending: Some(pending),
                error: None,
                done: false,
            })),
        }
    }

    fn channel(rx: mpsc::Receiver<Fed>) -> Self {
        Self {
            kind: Kind::Channel { rx, ended: false },
        }
    }
}

/// The error a rewritten stream ends with when the inner server's replay diverged from what
/// was issued: the client must not take what would follow as the stream's continuation.
#[derive(Debug, thiserror::Error)]
#[error("the inner server's replay does not continue the stream from the client's cursor")]
struct ReplayDiverged;

/// The error a keyed call's stream ends with when the inner server's body failed.
#[derive(Debug, thiserror::Error)]
#[error("the inner server's response failed")]
struct InnerFailed;

/// The error a keyed call's stream ends with when the task feeding it stopped without
/// saying the stream was whole: the inner server's body panicked, the runtime stopped, or
/// the client read too slowly and was given up on.
#[derive(Debug, thiserror::Error)]
#[error("the keyed call's stream was cut before its end")]
struct KeyedStreamCut;

/// What a keyed call's task feeds its client's stream. The stream is whole only when `End`
/// came: a task that stops without sending it (a panic in the inner body it reads) leaves
/// the stream failed, not ended.
enum Fed {
    Data(Bytes),
    Failed(BoxError),
    End,
}

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
            Kind::Channel { rx, ended } => {
                if *ended {
                    return Poll::Ready(None);
                }
                let fed = match rx.poll_recv(cx) {
                    Poll::Ready(fed) => fed,
                    Poll::Pending => return Poll::Pending,
                };
                match fed {
                    Some(Fed::Data(bytes)) => Poll::Ready(Some(Ok(Frame::data(bytes)))),
                    Some(Fed::Failed(e)) => {
                        *ended = true;
                        Poll::Ready(Some(Err(e)))
                    }
                    Some(Fed::End) => {
                        *ended = true;
                        Poll::Ready(None)
                    }
                    // The task stopped before it said how the stream ends: what came is not
                    // the whole answer, and must not read as if it were.
                    None => {
                        *ended = true;
                        Poll::Ready(Some(Err(Box::new(KeyedStreamCut))))
                    }
                }
            }
            Kind::Driven(state) => state.poll_frame(cx),
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

impl<B> Driven<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    fn poll_frame(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if let Some(p) = self.pending.take().filter(|p| !p.is_empty()) {
            return Poll::Ready(Some(Ok(Frame::data(p))));
        }
        if let Some(e) = self.error.take() {
            return Poll::Ready(Some(Err(e)));
        }
        if self.done {
            return Poll::Ready(None);
        }
        loop {
            let frame = match Pin::new(&mut self.inner).poll_frame(cx) {
                Poll::Ready(f) => f,
                Poll::Pending => return Poll::Pending,
            };
            let step = match frame {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => self.out.handle_body(&data),
                    // Trailers pass as they are.
                    Err(frame) => return Poll::Ready(Some(Ok(frame))),
                },
                Some(Err(e)) => {
                    self.error = Some(e.into());
                    self.out.handle_end(false)
                }
                None => self.out.handle_end(true),
            };
            // No await in a poll: a stream that is not a keyed call's (those run in a task
            // of their own) lets its operations run beside it.
            if self.out.has_ops() {
                self.out.take_ops().spawn();
            }
            match step.end {
                Some(End::Abort) => {
                    self.done = true;
                    if self.error.is_none() {
                        self.error = Some(Box::new(ReplayDiverged));
                    }
                }
                Some(End::Complete) => self.done = true,
                None => {}
            }
            if !step.body.is_empty() {
                return Poll::Ready(Some(Ok(Frame::data(step.body))));
            }
            if self.done {
                return Poll::Ready(self.error.take().map(Err));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use http_body_util::Full;

    use super::*;
    use crate::MemoryStore;

    /// Counts its clones, and the calls made without a ready service.
    #[derive(Default)]
    struct Counts {
        clones: AtomicUsize,
        unready_calls: AtomicUsize,
    }

    struct Inner {
        counts: Arc<Counts>,
        ready: bool,
    }

    impl Clone for Inner {
        fn clone(&self) -> Self {
            self.counts.clones.fetch_add(1, Ordering::Relaxed);
            Inner {
                counts: self.counts.clone(),
                ready: false,
            }
        }
    }

    impl Service<Request<GuardedRequestBody<Full<Bytes>>>> for Inner {
        type Response = Response<Full<Bytes>>;
        type Error = std::convert::Infallible;
        type Future = std::future::Ready<Result<Self::Response, Self::Error>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            self.ready = true;
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, _: Request<GuardedRequestBody<Full<Bytes>>>) -> Self::Future {
            if !std::mem::take(&mut self.ready) {
                self.counts.unready_calls.fetch_add(1, Ordering::Relaxed);
            }
            std::future::ready(Ok(Response::new(Full::new(Bytes::new()))))
        }
    }

    async fn ready_and_call(svc: &mut ResumeSafety<Inner>) {
        std::future::poll_fn(|cx| svc.poll_ready(cx)).await.unwrap();
        let req = Request::get("/mcp").body(Full::new(Bytes::new())).unwrap();
        svc.call(req).await.unwrap();
    }

    // | a router clones the service per request, polls it ready, calls it once, drops it | the
    // inner service is cloned once per request (the router's clone), once more ever for the
    // spare |
    // | one service polled and called again and again (a connection's) | every call gets a
    // service polled ready for it |
    #[tokio::test]
    async fn a_call_takes_the_inner_service_polled_ready_for_it() {
        let counts = Arc::new(Counts::default());
        let inner = Inner {
            counts: counts.clone(),
            ready: false,
        };
        let layered = ResumeSafetyLayer::new(MemoryStore::default()).layer(inner);
        for _ in 0..3 {
            ready_and_call(&mut layered.clone()).await;
        }
        assert_eq!(counts.clones.load(Ordering::Relaxed), 3 + 1);
        let mut svc = layered.clone();
        for _ in 0..3 {
            ready_and_call(&mut svc).await;
        }
        // The clone, then one from the spare for each call after the first.
        assert_eq!(counts.clones.load(Ordering::Relaxed), 4 + 1 + 2);
        assert_eq!(counts.unready_calls.load(Ordering::Relaxed), 0);
    }
}
