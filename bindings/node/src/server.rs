//! The resume-safety guard for Node servers: `ResumeSafety` (`lib/server.js`) drives
//! `mcp_resume_server::skin` through these classes. It converts and forwards: every rule,
//! the store steps, a response's rewriting and when its head may go are the server crate's.
//!
//! A step that leaves no store operation to run answers at once (a plain value); one that
//! does runs them here first when they finish without waiting (the in-memory store always
//! does), and otherwise returns a promise resolved on the addon's runtime. The JavaScript
//! thread never waits on the store.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};

use futures::FutureExt;
use mcp_resume_server::guard::Body;
use mcp_resume_server::ids::InstanceId;
use mcp_resume_server::skin::{
    self, End, GuardBuilder, Inbound, Next, Outbound, SharedGuard, ToClient,
};
use mcp_resume_server::{store, Error, ErrorKind};
use napi::bindgen_prelude::{BufferSlice, Either, Null, PromiseRaw, ToNapiValue};
use napi::{sys, Env};
use napi_derive::napi;

use crate::errors::{invalid, to_js, Failure};
use crate::options::millis;

/// The guard's options (the server crate's `GuardBuilder`; every option left out keeps its
/// default there). Durations in milliseconds.
#[napi(object, object_to_js = false)]
pub struct GuardOptions {
    /// `"memory"` (default) or a `redis://` URL.
    pub store: Option<String>,
    /// The name this process writes as owner of sessions and claims.
    pub instance_id: Option<String>,
    /// Bodies and SSE events longer than this (bytes) pass untouched.
    pub max_body: Option<f64>,
    /// A keyed call's claim lease (ms).
    pub lease: Option<f64>,
    /// Capability hashes, sequenced event ids and resume authorization.
    pub resume_checks: Option<bool>,
    /// Claim and deduplicate keyed `tools/call` requests.
    pub idempotency: Option<bool>,
    /// `Retry-After` of retryable refusals (ms, whole seconds on the wire).
    pub retry_after: Option<f64>,
    /// A request header naming the client: idempotency keys are that client's own.
    pub key_scope_header: Option<String>,
    /// Seeds the stream ids (reproducible tests).
    pub seed: Option<i64>,
}

/// The guard of one process and its store; use `ResumeSafety` from the package.
#[napi]
pub struct NativeGuard {
    guard: SharedGuard,
    outbounds: Arc<Mutex<Outbounds>>,
}

/// The responses on their way out, by handle: what `begin` (or a body step) returns for a
/// forwarded request is a number naming its outbound here, not an object wrapping it (an
/// object per request, with its finalizer, was work for the collector on every request). The
/// wrapper lets each go at the response's end (`push` with `end`) or when its client left
/// (`close`), and closes those it dropped without either when they are collected.
#[derive(Default)]
struct Outbounds {
    /// Handed out so far: a handle is this count doubled, plus 1 for a keyed call. Never
    /// reused (2^52 handles are exact as JavaScript numbers).
    count: u64,
    open: HashMap<u64, Outbound>,
}

impl Outbounds {
    fn open(&mut self, out: Outbound) -> f64 {
        self.count += 1;
        let handle = self.count * 2 + u64::from(out.is_keyed());
        self.open.insert(handle, out);
        handle as f64
    }
}

impl Drop for Outbounds {
    fn drop(&mut self) {
        for (_, out) in self.open.drain() {
            drop_on_runtime(Some(out));
        }
    }
}

/// A handle from JavaScript as the key it was handed out under (one that is not a handle
/// names no outbound).
fn key(handle: f64) -> u64 {
    if handle.is_finite() && handle >= 0.0 {
        handle as u64
    } else {
        0
    }
}

#[napi]
impl NativeGuard {
    /// Reads the options onto a `GuardBuilder` and opens the store (a Redis URL is connected
    /// here, blocking until it answers or its connect timeout passes).
    #[napi(constructor, catch_unwind)]
    pub fn new(env: Env, options: Option<GuardOptions>) -> napi::Result<Self> {
        match build(options) {
            Ok(guard) => Ok(NativeGuard {
                guard,
                outbounds: Arc::default(),
            }),
            Err(Built::Invalid(failure)) => Err(to_js(&env, &failure)),
            Err(Built::Unreachable(message)) => Err(napi::Error::from_reason(message)),
        }
    }

    /// The instance name this guard writes as owner.
    #[napi(getter, catch_unwind)]
    pub fn instance_id(&self) -> String {
        self.guard.config().instance().as_str().to_owned()
    }

    /// A request head arrived (`raw_headers`: Node's flat name/value list joined by NUL, see
    /// [`header_map`]), with its body when it was read already (by a body parser in front:
    /// its bytes, or its text): the first step (see [`Step`]), or a promise of it when the
    /// store must be asked. Given here, the body is not asked for: one crossing instead of
    /// two.
    #[napi(
        ts_return_type = "null | number | [handle: number, lastEventId: string] | NativeStep | [status: number, headers: string | null, body: string | Buffer | null, end: number] | Promise<null | number | [handle: number, lastEventId: string] | NativeStep | [status: number, headers: string | null, body: string | Buffer | null, end: number]>",
        catch_unwind
    )]
    pub fn begin<'env>(
        &self,
        env: &'env Env,
        method: String,
        raw_headers: String,
        body: Option<Either<String, BufferSlice<'_>>>,
    ) -> napi::Result<Either<Step, PromiseRaw<'env, Step>>> {
        let method = http::Method::from_bytes(method.as_bytes())
            .map_err(|_| napi::Error::from_reason("not an HTTP method"))?;
        let headers = header_map(&raw_headers);
        let mut inbound = self.guard.begin(&method, &headers);
        let outbounds = self.outbounds.clone();
        let Some(body) = body else {
            return next_step(env, inbound, headers, outbounds);
        };
        let body: &[u8] = match &body {
            Either::A(text) => text.as_bytes(),
            Either::B(bytes) => bytes,
        };
        // The steps before the body need no waiting unless the store is slow: the body is
        // then read where it lies; else a copy of it waits with them.
        let mut first = Box::pin(async move {
            let next = inbound.next().await;
            (next, inbound)
        });
        let ready =
            napi::bindgen_prelude::within_runtime_if_available(|| first.as_mut().now_or_never());
        match ready {
            Some((Next::ReadBody { limit }, mut inbound)) => {
                inbound.handle_body(body_of(body, limit), &headers);
                next_step(env, inbound, headers, outbounds)
            }
            Some((next, inbound)) => Ok(Either::A(step(next, inbound, headers, &outbounds))),
            None => {
                let body = body.to_vec();
                now_or_promise(env, async move {
                    let (mut next, mut inbound) = first.await;
                    if let Next::ReadBody { limit } = next {
                        inbound.handle_body(body_of(&body, limit), &headers);
                        next = inbound.next().await;
                    }
                    step(next, inbound, headers, &outbounds)
                })
            }
        }
    }

    /// Steps of the response `handle` names that came together, in one crossing and in this
    /// order: the head when `status` is not 0 (`headers`: a flat name/value list joined by
    /// NUL), a body chunk when there is one, and the end of a response the handler ended
    /// (`end`; the response is let go after it). What they say to send (see [`Sent`]),
    /// merged, once the store operations of all of them ran.
    #[napi(
        ts_return_type = "undefined | string | Buffer | [status: number, headers: string | null, body: string | Buffer | null, end: number] | Promise<undefined | string | Buffer | [status: number, headers: string | null, body: string | Buffer | null, end: number]>",
        catch_unwind
    )]
    pub fn push<'env>(
        &self,
        env: &'env Env,
        handle: f64,
        status: u16,
        headers: Option<String>,
        chunk: Option<BufferSlice<'_>>,
        end: bool,
    ) -> napi::Result<Either<Sent, PromiseRaw<'env, Sent>>> {
        let head = match status {
            0 => None,
            status => Some((
                http::StatusCode::from_u16(status)
                    .map_err(|_| napi::Error::from_reason("not an HTTP status"))?,
                header_map(headers.as_deref().unwrap_or_default()),
            )),
        };
        let given = head.as_ref().and(headers);
        let chunk = chunk.as_deref().filter(|c| !c.is_empty());
        self.send(
            env,
            handle,
            |out| {
                let mut sent = ToClient::default();
                if let Some((status, headers)) = head {
                    merge(&mut sent, out.handle_head(status, headers));
                }
                if let Some(chunk) = chunk {
                    if sent.end.is_none() {
                        merge(&mut sent, out.handle_body(chunk));
                    }
                }
                if end && sent.end.is_none() {
                    merge(&mut sent, out.handle_end(true));
                }
                sent
            },
            end,
            given,
        )
    }

    /// A chunk of the body of the response `handle` names: what to send, or `true` when the
    /// chunk passes unchanged (and so will every later one: the body is untouched from here
    /// on).
    #[napi(
        ts_return_type = "true | undefined | string | Buffer | [status: number, headers: string | null, body: string | Buffer | null, end: number] | Promise<undefined | string | Buffer | [status: number, headers: string | null, body: string | Buffer | null, end: number]>",
        catch_unwind
    )]
    pub fn body<'env>(
        &self,
        env: &'env Env,
        handle: f64,
        chunk: BufferSlice<'_>,
    ) -> napi::Result<Either<Unchanged, Either<Sent, PromiseRaw<'env, Sent>>>> {
        let untouched = lock(&self.outbounds)
            .open
            .get(&key(handle))
            .is_some_and(Outbound::is_untouched);
        if untouched {
            return Ok(Either::A(Unchanged));
        }
        self.send(env, handle, |out| out.handle_body(&chunk), false, None)
            .map(Either::B)
    }

    /// Done with the response `handle` names (its client left, or its wrapper failed or was
    /// collected before its end): a keyed call that did not reach its end is recorded as
    /// such. Nothing when it was let go already.
    #[napi(catch_unwind)]
    pub fn close(&self, handle: f64) {
        let out = lock(&self.outbounds).open.remove(&key(handle));
        drop_on_runtime(out);
    }
}

impl NativeGuard {
    /// Runs `step` on the outbound `handle` names (when it is still open; else nothing is
    /// sent), and its store operations here when they need no waiting, else on the runtime
    /// before what it sends is handed over. `last`: the response is let go after it.
    /// `given`: the head this step gave (see [`Sent`]).
    fn send<'env>(
        &self,
        env: &'env Env,
        handle: f64,
        step: impl FnOnce(&mut Outbound) -> ToClient,
        last: bool,
        given: Option<String>,
    ) -> napi::Result<Either<Sent, PromiseRaw<'env, Sent>>> {
        let key = key(handle);
        let mut outbounds = lock(&self.outbounds);
        let Some(out) = outbounds.open.get_mut(&key) else {
            // Let go: nothing more goes to the client.
            return Ok(Either::A(Sent::new(ToClient::default())));
        };
        let to_client = step(out);
        let ops = out.take_ops();
        let done = if last {
            outbounds.open.remove(&key)
        } else {
            None
        };
        drop(outbounds);
        drop_on_runtime(done);
        let sent = Sent { to_client, given };
        if ops.is_empty() {
            return Ok(Either::A(sent));
        }
        now_or_promise(env, async move {
            ops.run().await;
            sent
        })
    }
}

/// A body as read, for the guard: too large when longer than `limit` (then what was read
/// is looked through for a key).
fn body_of(bytes: &[u8], limit: usize) -> Body<'_> {
    if bytes.len() > limit {
        Body::TooLarge(bytes)
    } else {
        Body::Complete(bytes)
    }
}

/// Why no guard was built.
enum Built {
    /// A setting is invalid (`InvalidConfigError`).
    Invalid(Failure),
    /// The store cannot be reached (a plain `Error`).
    Unreachable(String),
}

impl From<Failure> for Built {
    fn from(failure: Failure) -> Self {
        Built::Invalid(failure)
    }
}

fn build(options: Option<GuardOptions>) -> Result<SharedGuard, Built> {
    let o = options.unwrap_or(GuardOptions {
        store: None,
        instance_id: None,
        max_body: None,
        lease: None,
        resume_checks: None,
        idempotency: None,
        retry_after: None,
        key_scope_header: None,
        seed: None,
    });
    let spec = o.store.unwrap_or_default();
    let opened = napi::bindgen_prelude::block_on(store::open(&spec)).map_err(store_failure)?;
    let mut b = GuardBuilder::with_shared_store(opened);
    if let Some(id) = o.instance_id {
        b = b.instance_id(InstanceId::new(id).map_err(|e| invalid(e.to_string()))?);
    }
    if let Some(n) = o.max_body {
        if !(n.is_finite() && n >= 0.0 && n.fract() == 0.0) {
            return Err(invalid(format!(
                "maxBody must be a non-negative integer number of bytes (got {n})"
            ))
            .into());
        }
        b = b.max_body(n as usize);
    }
    if let Some(ms) = o.lease {
        b = b.lease(millis(ms, "lease")?);
    }
    if let Some(on) = o.resume_checks {
        b = b.resume_checks(on);
    }
    if let Some(on) = o.idempotency {
        b = b.idempotency(on);
    }
    if let Some(ms) = o.retry_after {
        b = b.retry_after(millis(ms, "retryAfter")?.as_secs());
    }
    if let Some(name) = o.key_scope_header {
        let name = http::HeaderName::try_from(name.as_str())
            .map_err(|_| invalid("keyScopeHeader must be an HTTP header name"))?;
        b = b.key_scope_header(name);
    }
    if let Some(seed) = o.seed {
        b = b.seed(u64::try_from(seed).map_err(|_| invalid("seed must not be negative"))?);
    }
    Ok(b.build())
}

/// The server crate's error: a bad setting is `invalid_config`; a store that cannot be
/// reached, a plain error naming it.
fn store_failure(err: Error) -> Built {
    match err.kind() {
        ErrorKind::InvalidConfig => Built::Invalid(invalid(err.to_string())),
        _ => Built::Unreachable(format!("the resume-safety store cannot be reached: {err}")),
    }
}

/// What the wrapper does next with a request, as the plainest JavaScript value that says it
/// (each object made here is work for the collector on every request): `null`, pass it on;
/// a number, forward it and push its response through the outbound that number names (see
/// [`Outbounds`]; odd for a keyed call); `[handle, lastEventId]`, the same with the
/// `Last-Event-ID` to forward instead of the client's (a resume); a `NativeStep`, read the
/// body, then `body`; a four-element array, a `Sent` to answer with.
pub enum Step {
    /// Forward the request; its response passes untouched.
    Pass,
    /// Read the body (up to `limit`), then `NativeStep::body`.
    ReadBody(Box<NativeStep>),
    /// Forward the request and push its response through the outbound with this handle.
    Forward(f64),
    /// As `Forward`, with this `Last-Event-ID` instead of the client's.
    Resume(f64, String),
    /// Send this; the inner handler never sees the request.
    Answer(Sent),
}

impl ToNapiValue for Step {
    unsafe fn to_napi_value(env: sys::napi_env, val: Self) -> napi::Result<sys::napi_value> {
        // SAFETY: as each variant's own conversion, on the environment napi handed over.
        unsafe {
            match val {
                Step::Pass => Null::to_napi_value(env, Null),
                Step::ReadBody(step) => NativeStep::to_napi_value(env, *step),
                Step::Forward(handle) => f64::to_napi_value(env, handle),
                Step::Resume(handle, last_event_id) => {
                    ToNapiValue::to_napi_value(env, (handle, last_event_id))
                }
                Step::Answer(sent) => Sent::to_napi_value(env, sent),
            }
        }
    }
}

/// A request whose body the guard asks for: read up to `limit` bytes, then `body`.
#[napi]
pub struct NativeStep {
    limit: u32,
    inbound: Option<(Inbound, http::HeaderMap)>,
    outbounds: Arc<Mutex<Outbounds>>,
}

#[napi]
impl NativeStep {
    /// The most body bytes to read.
    #[napi(getter, catch_unwind)]
    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// The body was read: its bytes (past `limit` when it is longer: what was read of it) or
    /// its text, or `null` when nothing of it is given. The next step, or a promise of it.
    #[napi(
        ts_return_type = "null | number | [handle: number, lastEventId: string] | NativeStep | [status: number, headers: string | null, body: string | Buffer | null, end: number] | Promise<null | number | [handle: number, lastEventId: string] | NativeStep | [status: number, headers: string | null, body: string | Buffer | null, end: number]>",
        catch_unwind
    )]
    pub fn body<'env>(
        &mut self,
        env: &'env Env,
        data: Option<Either<String, BufferSlice<'_>>>,
    ) -> napi::Result<Either<Step, PromiseRaw<'env, Step>>> {
        let Some((mut inbound, headers)) = self.inbound.take() else {
            return Err(napi::Error::from_reason(
                "this step's body was already given",
            ));
        };
        let body = match &data {
            Some(Either::A(text)) => body_of(text.as_bytes(), self.limit as usize),
            Some(Either::B(bytes)) => body_of(bytes, self.limit as usize),
            None => Body::TooLarge(&[]),
        };
        inbound.handle_body(body, &headers);
        next_step(env, inbound, headers, self.outbounds.clone())
    }
}

/// Runs the inbound's next store steps (here if they need no waiting) to its next step.
fn next_step<'env>(
    env: &'env Env,
    mut inbound: Inbound,
    headers: http::HeaderMap,
    outbounds: Arc<Mutex<Outbounds>>,
) -> napi::Result<Either<Step, PromiseRaw<'env, Step>>> {
    now_or_promise(env, async move {
        let next = inbound.next().await;
        step(next, inbound, headers, &outbounds)
    })
}

fn step(
    next: Next,
    inbound: Inbound,
    headers: http::HeaderMap,
    outbounds: &Arc<Mutex<Outbounds>>,
) -> Step {
    match next {
        Next::ReadBody { limit } => Step::ReadBody(Box::new(NativeStep {
            limit: u32::try_from(limit).unwrap_or(u32::MAX),
            inbound: Some((inbound, headers)),
            outbounds: outbounds.clone(),
        })),
        Next::Pass => Step::Pass,
        Next::Forward(out) => {
            let last_event_id = out.last_event_id().map(|v| header_text(v.as_bytes()));
            let handle = lock(outbounds).open(out);
            match last_event_id {
                Some(last_event_id) => Step::Resume(handle, last_event_id),
                None => Step::Forward(handle),
            }
        }
        Next::Answer(answer) => Step::Answer(Sent::new(skin::answer_to_client(answer))),
    }
}

/// The inner server's own event id as the string it issued: the id came to the guard as
/// UTF-8 in the body of an SSE stream, which is how a Node server writes its strings, so
/// their decoding gives back the string its event store compares with (for an id that is
/// not ASCII too, e.g. `é1`). Bytes that are not UTF-8 (a server writing its own bytes) one
/// character each, as Node's parser reads a header's bytes.
fn header_text(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(text) => text.to_owned(),
        Err(_) => bytes.iter().map(|&b| char::from(b)).collect(),
    }
}

/// What to send the client now, as plain values: `undefined`, nothing yet; a string (UTF-8
/// text) or a `Buffer` (other bytes), body bytes; `true`, the chunk just given, unchanged
/// (sent without a copy); otherwise the array `[status, headers, body, end]`: the head when
/// `status` is not 0, body bytes or `null`, and how the response ends (0: it goes on, 1:
/// complete, 2: abort). `headers` is the flat name/value list joined by NUL; or, when it is
/// the head given in the same step with pairs added after it (the guard's own headers), a
/// NUL and the added pairs only (a NUL alone: the head given, unchanged), so that the head
/// does not cross back whole.
pub struct Sent {
    to_client: ToClient,
    /// The head given in the step that sent this, as it crossed (see [`head_text`]).
    given: Option<String>,
}

impl Sent {
    fn new(to_client: ToClient) -> Self {
        Sent {
            to_client,
            given: None,
        }
    }
}

/// The chunk just given passes unchanged.
pub struct Unchanged;

impl ToNapiValue for Sent {
    unsafe fn to_napi_value(env: sys::napi_env, val: Self) -> napi::Result<sys::napi_value> {
        let ToClient {
            head, body, end, ..
        } = val.to_client;
        let js = Env::from_raw(env);
        // Text (SSE, JSON) as a string, which lives on the engine's heap; other bytes copied
        // into a Buffer. Either way no external memory, whose finalizers and accounting
        // would cost the collector on every response.
        let bytes;
        let body = if body.is_empty() {
            None
        } else if let Ok(text) = std::str::from_utf8(&body) {
            Some(Either::A(text))
        } else {
            bytes = BufferSlice::copy_from(&js, &body)?;
            Some(Either::B(&bytes))
        };
        // SAFETY: the values' own conversions, on the environment napi handed over.
        unsafe {
            if head.is_none() && end.is_none() {
                return match body {
                    Some(body) => ToNapiValue::to_napi_value(env, body),
                    None => <()>::to_napi_value(env, ()),
                };
            }
            let (status, headers) = match head {
                Some((status, headers)) => (
                    status.as_u16(),
                    Some(head_text(&headers, val.given.as_deref())),
                ),
                None => (0, None),
            };
            let end: u32 = match end {
                None => 0,
                Some(End::Complete) => 1,
                Some(End::Abort) => 2,
            };
            ToNapiValue::to_napi_value(env, (status, headers, body, end))
        }
    }
}

impl ToNapiValue for Unchanged {
    unsafe fn to_napi_value(env: sys::napi_env, _: Self) -> napi::Result<sys::napi_value> {
        // SAFETY: a boolean on the environment napi handed over.
        unsafe { bool::to_napi_value(env, true) }
    }
}

/// What a later step says to send, after what earlier ones said: the head comes once, the
/// bytes follow in order, the end is the last step's.
fn merge(sent: &mut ToClient, next: ToClient) {
    if sent.head.is_none() {
        sent.head = next.head;
    }
    if sent.body.is_empty() {
        sent.body = next.body;
    } else if !next.body.is_empty() {
        sent.body = [&sent.body[..], &next.body[..]].concat().into();
    }
    sent.end = next.end;
}

/// Drops an outbound where its last store operations can be spawned (only a keyed call's
/// that did not reach its end has any). At the environment's teardown the runtime may be
/// gone: nothing can run then, and nothing must panic.
fn drop_on_runtime(out: Option<Outbound>) {
    let Some(out) = out else { return };
    if !out.must_drain() {
        return;
    }
    let dropped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        napi::bindgen_prelude::within_runtime_if_available(move || drop(out));
    }));
    if dropped.is_err() {
        tracing_free_warning();
    }
}

fn tracing_free_warning() {
    eprintln!("mcp-resume: a keyed call's outcome could not be recorded (the runtime is gone)");
}

/// Polls `fut` once here (inside the runtime, for stores that need it): its output at once
/// when it needs no waiting, else a promise that finishes it on the runtime.
fn now_or_promise<'env, T, F>(
    env: &'env Env,
    fut: F,
) -> napi::Result<Either<T, PromiseRaw<'env, T>>>
where
    T: ToNapiValue + Send + 'static,
    F: Future<Output = T> + Send + 'static,
{
    let mut fut = Box::pin(fut);
    let ready = napi::bindgen_prelude::within_runtime_if_available(|| fut.as_mut().now_or_never());
    match ready {
        Some(out) => Ok(Either::A(out)),
        None => env
            .spawn_future_with_callback(async move { Ok(fut.await) }, |_, out| Ok(out))
            .map(Either::B),
    }
}

/// Headers from Node's flat name/value list joined by NUL: one string crosses the boundary
/// instead of one per name and value (most of a request's cost here, were they separate).
/// Node refuses NUL in header names and values, in both directions; were one there anyway,
/// the pairs would shift and the guard would read headers that are not there, nothing worse.
fn header_map(raw: &str) -> http::HeaderMap {
    // Pair by pair as they are split (an empty string has none: its one part pairs with
    // nothing), without collecting the parts first.
    let mut parts = raw.split('\0');
    skin::header_map(std::iter::from_fn(|| {
        let name = parts.next()?;
        let value = parts.next()?;
        Some((name.as_bytes(), value.as_bytes()))
    }))
}

/// A head to send as [`Sent`] gives it: relative to the head `given` when it is that head
/// with pairs added after it.
fn head_text(headers: &http::HeaderMap, given: Option<&str>) -> String {
    let all = joined(headers);
    if let Some(rest) = given
        .filter(|given| !given.is_empty())
        .and_then(|given| all.strip_prefix(given))
    {
        if rest.is_empty() {
            return "\0".to_owned();
        }
        if rest.starts_with('\0') {
            return rest.to_owned();
        }
    }
    all
}

/// Headers as Node's flat name/value list joined by NUL.
fn joined(headers: &http::HeaderMap) -> String {
    let size = headers
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len() + 2)
        .sum();
    let mut out = String::with_capacity(size);
    for (name, value) in headers {
        if !out.is_empty() {
            out.push('\0');
        }
        out.push_str(name.as_str());
        out.push('\0');
        out.push_str(&String::from_utf8_lossy(value.as_bytes()));
    }
    out
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
