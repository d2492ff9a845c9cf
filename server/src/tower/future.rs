//! The layer's response future, written out by hand.
//!
//! An `async` block holding every state a request can pass through took about 3 KB, boxed
//! once per request: an allocation too large for the allocator's per-thread caches, paid by
//! every call. Here a request in its common states (asking the guard, reading the body,
//! waiting for the inner response) takes a few hundred bytes, inline in whatever holds the
//! future; the rare states (store operations, a keyed call, a head held back) are boxed.

use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::{Buf, Bytes, BytesMut};
use http::request::Parts;
use http::{Request, Response};
use http_body::Body;
use tower_service::Service;

use super::{answer_response, keyed, respond_or_gather, BoxError, BoxFuture};
use super::{GuardedBody, GuardedRequestBody};
use crate::guard::{Answer, Body as SeenBody};
use crate::skin::{Inbound, Next, Outbound};

pin_project_lite::pin_project! {
    /// The future of a call through [`ResumeSafety`](super::ResumeSafety).
    pub struct ResponseFuture<I, ReqB, ResB>
    where
        I: Service<Request<GuardedRequestBody<ReqB>>, Response = Response<ResB>>,
    {
        #[pin]
        state: State<I, ReqB, ResB>,
    }
}

impl<I, ReqB, ResB> std::fmt::Debug for ResponseFuture<I, ReqB, ResB>
where
    I: Service<Request<GuardedRequestBody<ReqB>>, Response = Response<ResB>>,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

/// The body being read for the guard, up to `limit` bytes. Most bodies come in one frame,
/// kept as it came; a second one starts a copy.
struct Reading {
    first: Option<Bytes>,
    buf: BytesMut,
    limit: usize,
    /// The body's trailers, forwarded after its bytes (boxed: rare, and this is moved with
    /// every request).
    trailers: Option<Box<http::HeaderMap>>,
}

impl Reading {
    fn new(limit: usize) -> Self {
        Self {
            first: None,
            buf: BytesMut::new(),
            limit,
            trailers: None,
        }
    }

    fn add(&mut self, data: Bytes) {
        if self.first.is_none() && self.buf.is_empty() {
            self.first = Some(data);
            return;
        }
        if let Some(first) = self.first.take() {
            self.buf.extend_from_slice(&first);
        }
        self.buf.extend_from_slice(&data);
    }

    fn len(&self) -> usize {
        self.first.as_ref().map_or(0, Bytes::len) + self.buf.len()
    }

    /// What was read, leaving nothing.
    fn take(&mut self) -> Bytes {
        match self.first.take() {
            Some(first) => first,
            None => std::mem::take(&mut self.buf).freeze(),
        }
    }
}

/// A request not forwarded yet.
struct Held<I, ReqB> {
    parts: Parts,
    body: GuardedRequestBody<ReqB>,
    inner: I,
}

pin_project_lite::pin_project! {
    #[project = StateProj]
    enum State<I, ReqB, ResB>
    where
        I: Service<Request<GuardedRequestBody<ReqB>>, Response = Response<ResB>>,
    {
        /// Not forwarded yet: asking the guard for the next step, or reading the body for
        /// it (one state, so that the request is not moved from one to the other).
        Before {
            held: Option<Held<I, ReqB>>,
            inbound: Option<Inbound>,
            reading: Option<Reading>,
        },
        /// The store has work before the next step.
        Store {
            held: Option<Held<I, ReqB>>,
            next: BoxFuture<(Inbound, Next)>,
        },
        /// Waiting for the inner response the guard watches.
        Calling { #[pin] call: I::Future, out: Option<Outbound> },
        /// Waiting for an inner response that passes untouched.
        Passing { #[pin] call: I::Future },
        /// A rarer way, on its own.
        Boxed { fut: BoxFuture<Result<Response<GuardedBody<ResB>>, I::Error>> },
        /// Answered.
        Done,
    }
}

impl<I, ReqB, ResB> ResponseFuture<I, ReqB, ResB>
where
    I: Service<Request<GuardedRequestBody<ReqB>>, Response = Response<ResB>>,
{
    pub(super) fn new(inbound: Inbound, inner: I, req: Request<ReqB>) -> Self {
        let (parts, body) = req.into_parts();
        let held = Held {
            parts,
            body: GuardedRequestBody::untouched(body),
            inner,
        };
        Self {
            state: State::before(held, inbound),
        }
    }

    /// A call with no inner service to make it (never, see `ResumeSafety::poll_ready`).
    pub(super) fn failed() -> Self {
        Self { state: State::Done }
    }
}

impl<I, ReqB, ResB> Future for ResponseFuture<I, ReqB, ResB>
where
    I: Service<Request<GuardedRequestBody<ReqB>>, Response = Response<ResB>> + Send + 'static,
    I::Future: Send + 'static,
    I::Error: Send + 'static,
    ReqB: Body<Data = Bytes> + Send + Unpin + 'static,
    ReqB::Error: Into<BoxError>,
    ResB: Body<Data = Bytes> + Send + Unpin + 'static,
    ResB::Error: Into<BoxError> + Send,
{
    type Output = Result<Response<GuardedBody<ResB>>, I::Error>;

    // Each way out of a state sets the next one in place: a state is most of this future's
    // size, and is moved once per step that way.
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut state = self.project().state;
        loop {
            match state.as_mut().project() {
                StateProj::Before {
                    held,
                    inbound,
                    reading,
                } => {
                    let (Some(h), Some(i)) = (held.as_mut(), inbound.as_mut()) else {
                        return Poll::Ready(Ok(answer_response(Answer::internal())));
                    };
                    if let Some(r) = reading {
                        ready!(read_body(cx, h, i, r));
                        *reading = None;
                        continue;
                    }
                    match i.next_now() {
                        Some(Next::ReadBody { limit }) => {
                            *reading = Some(Reading::new(limit));
                        }
                        Some(next) => {
                            let Some(h) = held.take() else {
                                return Poll::Ready(Ok(answer_response(Answer::internal())));
                            };
                            if let Some(answer) = on_next(state.as_mut(), h, next) {
                                return Poll::Ready(Ok(answer));
                            }
                        }
                        None => {
                            let (Some(h), Some(mut inbound)) = (held.take(), inbound.take()) else {
                                return Poll::Ready(Ok(answer_response(Answer::internal())));
                            };
                            state.set(State::Store {
                                held: Some(h),
                                next: Box::pin(async move {
                                    let next = inbound.next().await;
                                    (inbound, next)
                                }),
                            });
                        }
                    }
                }
                StateProj::Store { held, next } => {
                    let (inbound, next) = ready!(next.as_mut().poll(cx));
                    let Some(h) = held.take() else {
                        return Poll::Ready(Ok(answer_response(Answer::internal())));
                    };
                    match next {
                        Next::ReadBody { limit } => state.set(State::Before {
                            held: Some(h),
                            inbound: Some(inbound),
                            reading: Some(Reading::new(limit)),
                        }),
                        next => {
                            if let Some(answer) = on_next(state.as_mut(), h, next) {
                                return Poll::Ready(Ok(answer));
                            }
                        }
                    }
                }
                StateProj::Calling { call, out } => {
                    let resp = ready!(call.poll(cx))?;
                    let Some(out) = out.take() else {
                        return Poll::Ready(Ok(answer_response(Answer::internal())));
                    };
                    match respond_or_gather(resp, out) {
                        Ok(resp) => {
                            state.set(State::Done);
                            return Poll::Ready(Ok(resp));
                        }
                        Err(rest) => state.set(State::Boxed {
                            fut: Box::pin(async move { Ok(rest.await) }),
                        }),
                    }
                }
                StateProj::Passing { call } => {
                    let resp = ready!(call.poll(cx))?;
                    state.set(State::Done);
                    return Poll::Ready(Ok(resp.map(GuardedBody::untouched)));
                }
                StateProj::Boxed { fut } => {
                    let out = ready!(fut.as_mut().poll(cx));
                    state.set(State::Done);
                    return Poll::Ready(out);
                }
                StateProj::Done => {
                    return Poll::Ready(Ok(answer_response(Answer::internal())));
                }
            }
        }
    }
}

/// Where a final step (not [`Next::ReadBody`]) leads a request not forwarded yet: the state
/// it is in next, or the response when the guard answers it.
fn on_next<I, ReqB, ResB>(
    mut state: Pin<&mut State<I, ReqB, ResB>>,
    mut h: Held<I, ReqB>,
    next: Next,
) -> Option<Response<GuardedBody<ResB>>>
where
    I: Service<Request<GuardedRequestBody<ReqB>>, Response = Response<ResB>> + Send + 'static,
    I::Future: Send + 'static,
    I::Error: Send + 'static,
    ReqB: Body<Data = Bytes> + Send + Unpin + 'static,
    ReqB::Error: Into<BoxError>,
    ResB: Body<Data = Bytes> + Send + Unpin + 'static,
    ResB::Error: Into<BoxError> + Send,
{
    match next {
        // `ReadBody` is taken where the request is held; were it here, the request passes.
        Next::Pass | Next::ReadBody { .. } => {
            let call = h.inner.call(Request::from_parts(h.parts, h.body));
            state.set(State::Passing { call });
        }
        Next::Forward(out) => {
            if let Some(id) = out.last_event_id() {
                h.parts
                    .headers
                    .insert(crate::wire::names::LAST_EVENT_ID, id.clone());
            }
            let req = Request::from_parts(h.parts, h.body);
            if out.must_drain() {
                state.set(State::Boxed {
                    fut: Box::pin(keyed(h.inner, req, out)),
                });
            } else {
                let call = h.inner.call(req);
                state.set(State::Calling {
                    call,
                    out: Some(out),
                });
            }
        }
        Next::Answer(answer) => {
            state.set(State::Done);
            return Some(answer_response(answer));
        }
    }
    None
}

impl<I, ReqB, ResB> State<I, ReqB, ResB>
where
    I: Service<Request<GuardedRequestBody<ReqB>>, Response = Response<ResB>>,
{
    fn before(held: Held<I, ReqB>, inbound: Inbound) -> Self {
        State::Before {
            held: Some(held),
            inbound: Some(inbound),
            reading: None,
        }
    }
}

/// Reads the request body up to `limit` and reports it to the guard; the inner service gets
/// it unchanged either way (what was read, then the rest).
fn read_body<I, ReqB>(
    cx: &mut Context<'_>,
    h: &mut Held<I, ReqB>,
    inbound: &mut Inbound,
    read: &mut Reading,
) -> Poll<()>
where
    ReqB: Body<Data = Bytes> + Unpin,
    ReqB::Error: Into<BoxError>,
{
    let Some(rest) = h.body.rest.as_mut() else {
        // Read whole already (a step that asks again): reported as it is.
        let bytes = h.body.prefix.clone().unwrap_or_default();
        inbound.handle_body(SeenBody::Complete(&bytes), &h.parts.headers);
        return Poll::Ready(());
    };
    loop {
        match ready!(Pin::new(&mut *rest).poll_frame(cx)) {
            Some(Ok(frame)) => match frame.into_data() {
                Ok(mut data) => {
                    read.add(data.copy_to_bytes(data.remaining()));
                    if read.len() > read.limit {
                        let prefix = read.take();
                        if let Some(rest) = h.body.rest.take() {
                            h.body = GuardedRequestBody::chained(prefix.clone(), rest);
                        }
                        inbound.handle_body(SeenBody::TooLarge(&prefix), &h.parts.headers);
                        return Poll::Ready(());
                    }
                }
                // Trailers: the inner service gets them too, after the bytes.
                Err(frame) => {
                    if let Ok(trailers) = frame.into_trailers() {
                        read.trailers = Some(Box::new(trailers));
                    }
                }
            },
            Some(Err(e)) => {
                let prefix = read.take();
                h.body = GuardedRequestBody::failed(prefix.clone(), read.trailers.take(), e.into());
                inbound.handle_body(SeenBody::TooLarge(&prefix), &h.parts.headers);
                return Poll::Ready(());
            }
            None => {
                let bytes = read.take();
                h.body = GuardedRequestBody::full(bytes.clone(), read.trailers.take());
                inbound.handle_body(SeenBody::Complete(&bytes), &h.parts.headers);
                return Poll::Ready(());
            }
        }
    }
}
