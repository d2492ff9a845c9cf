//! What every skin does with the guard, whatever its framework or language: the tower
//! [`ResumeSafetyLayer`](crate::ResumeSafetyLayer) here, the ASGI middleware and the Node
//! handler wrapper of the bindings. A skin owns the HTTP I/O and nothing else; the settings,
//! the store steps, the response's rewriting and when its head may go are here, once.
//!
//! - [`GuardBuilder`]: the settings, each default documented. Every skin reads its options
//!   onto one.
//! - [`SharedGuard`]: one process's guard and its store, shared by every request (wrap the MCP
//!   endpoint once per process).
//! - [`Inbound`]: one request. [`Inbound::next`] runs the store steps the guard asks for and
//!   says what the skin does: read the body and report it ([`Next::ReadBody`], then
//!   [`Inbound::handle_body`]), forward the request untouched ([`Next::Pass`]), forward it and
//!   push its response through an [`Outbound`] ([`Next::Forward`]), or answer it without the
//!   inner server ([`Next::Answer`]).
//! - [`Outbound`]: one response, pushed in as it comes ([`Outbound::handle_head`], then
//!   [`Outbound::handle_body`] per chunk, then [`Outbound::handle_end`]); each returns a
//!   [`ToClient`], what to send the client now. Before sending it, run the store operations
//!   the step handed out ([`Outbound::take_ops`]): a keyed call's answer is stored before its
//!   client can read it.
//!
//! A keyed call ([`Outbound::must_drain`]) is read to its end even when its client has gone
//! (its answer is stored for its key whoever asks again): such a skin keeps the inner server
//! from seeing the client leave and keeps feeding the outbound. Its claim's lease is renewed
//! by a task of its own on the current tokio runtime while the call runs, so [`Inbound::next`]
//! must run inside one (every skin's futures do).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use http::header::{HeaderName, CONTENT_LENGTH, TRANSFER_ENCODING};
use http::{HeaderMap, HeaderValue, Method, StatusCode};

use crate::guard::{
    Answer, Body, BodyPlan, Claim, ClaimOutcome, Exchange, Guard, GuardAccess, GuardConfig, Retry,
    SseFlow, Step, StoreOp, StoreUnavailable, Watch,
};
use crate::ids::InstanceId;
use crate::store::{self, OpResult, Store};
use crate::Error;

/// The guard's settings, and the store it keeps what instances share in; [`build`] makes the
/// [`SharedGuard`].
///
/// ```
/// # use mcp_resume_server::MemoryStore;
/// # use mcp_resume_server::skin::GuardBuilder;
/// # use std::time::Duration;
/// let guard = GuardBuilder::new(MemoryStore::default())
///     .lease(Duration::from_secs(5))
///     .max_body(1 << 20)
///     .build();
/// ```
///
/// Defaults: a random [`InstanceId`]; every part of the extension enforced (resume checks
/// with capability hashes and sequenced event ids; idempotency); bodies up to 4 MiB
/// inspected; a 10 s claim lease; `Retry-After: 1` on retryable refusals; each store step
/// bounded at 5 s; random stream ids.
/// The record of a session in use is touched in the store once half the store's retention
/// ([`Store::session_retention`]) passed since this instance wrote or touched it.
///
/// [`build`]: GuardBuilder::build
#[derive(Clone)]
#[must_use]
pub struct GuardBuilder {
    store: Arc<dyn Store>,
    config: GuardConfig,
    seed: Option<u64>,
    store_timeout: Duration,
}

impl std::fmt::Debug for GuardBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GuardBuilder")
            .field("config", &self.config)
            .field("seed", &self.seed)
            .finish_non_exhaustive()
    }
}

impl GuardBuilder {
    /// Settings keeping what instances share in `store`
    /// ([`MemoryStore::default()`](crate::MemoryStore) for one process,
    /// [`RedisStore`](crate::RedisStore) for several), every other setting at its default.
    pub fn new<S: Store>(store: S) -> Self {
        Self::with_shared_store(Arc::new(store))
    }

    /// [`GuardBuilder::new`] with a store already shared (one chosen at run time, such as
    /// [`store::open`]'s).
    pub fn with_shared_store(store: Arc<dyn Store>) -> Self {
        let mut config = GuardConfig::default();
        // Records of sessions in use are touched at half the store's own retention.
        if let Some(retention) = store.session_retention() {
            config.session_refresh = crate::guard::session_refresh(retention);
        }
        Self {
            store,
            config,
            seed: None,
            store_timeout: STORE_TIMEOUT,
        }
    }

    /// The name this instance writes as owner in session records and claims. Default: a
    /// random one per guard. Give each replica (and each restart of it) a distinct one.
    pub fn instance_id(mut self, id: InstanceId) -> Self {
        self.config.instance = id;
        self
    }

    /// Request bodies, JSON response bodies and SSE blocks longer than this pass untouched (a
    /// keyed call whose body is longer is refused with `413`: it cannot be guarded). At least
    /// 1 KiB. Default: 4 MiB.
    pub fn max_body(mut self, bytes: usize) -> Self {
        self.config.max_body = bytes.max(1024);
        self
    }

    /// How long a keyed call's claim holds without renewal (renewed every third of it while
    /// the call runs). When an instance dies, its keys read as "outcome unknown" this long
    /// after its last renewal. At least 30 ms, at most a century (`Duration::MAX` is taken
    /// as that: for ever, in effect). Default: 10 s.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.config.lease = lease.clamp(
            Duration::from_millis(30),
            crate::guard::claims::LONGEST_LEASE,
        );
        self
    }

    /// Whether resumes are checked: capability hashes on every response of a session,
    /// sequenced event ids, and resume authorization. Default: on. Off, resumes pass through
    /// to the inner server unchecked, and only idempotency is advertised.
    pub fn resume_checks(mut self, on: bool) -> Self {
        self.config.parts.capability_hash = on;
        self.config.parts.sequenced_event_ids = on;
        self
    }

    /// Whether keyed `tools/call`s are claimed and deduplicated. Default: on.
    pub fn idempotency(mut self, on: bool) -> Self {
        self.config.parts.idempotency = on;
        self
    }

    /// The `Retry-After` (seconds) of retryable refusals (store unreachable). Default: 1.
    pub fn retry_after(mut self, secs: u64) -> Self {
        self.config.retry_after_secs = secs;
        self
    }

    /// Scopes idempotency keys by the value of the request header `name`: the identity of the
    /// client, set by what authenticated it in front of the guard (a proxy, or middleware
    /// that sets the header from the verified token). The same key text under two identities
    /// is two keys, so one client can neither replay another's stored answer nor block its
    /// key; a keyed call without the header is refused (`400`, nothing runs). Name a value
    /// that stays the same across a client's re-sends (its subject, not its token, which a
    /// refresh changes). Default: none, and keys are one namespace per store, shared by every
    /// client: right when clients draw their keys at random (as mcp-resume's
    /// `random_idempotency_key` does), not when a key can be guessed.
    pub fn key_scope_header(mut self, name: http::HeaderName) -> Self {
        self.config.key_scope = Some(name);
        self
    }

    /// The longest the guard waits on one step of its store (a claim, a session's record):
    /// past it the step fails as unreachable (keyed calls `503`, never run; unkeyed traffic
    /// passes), so that a store that never answers holds no request. A last resort above the
    /// store's own bounds ([`RedisOptions`](crate::RedisOptions)' 1 s per command). At least
    /// 10 ms. Default: 5 s.
    pub fn store_timeout(mut self, limit: Duration) -> Self {
        self.store_timeout = limit.max(Duration::from_millis(10));
        self
    }

    /// Seeds the stream ids the guard draws (tests that want the same ids every run); its
    /// claim tokens stay random. Default: random.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// The settings so far.
    pub fn config(&self) -> &GuardConfig {
        &self.config
    }

    /// The guard.
    pub fn build(self) -> SharedGuard {
        let seed = self
            .seed
            .unwrap_or_else(|| uuid::Uuid::new_v4().as_u64_pair().0);
        SharedGuard {
            core: Arc::new(Core {
                // Tokens from fresh entropy whatever the seed: see `Guard::with_token_seed`.
                guard: Mutex::new(
                    Guard::new(self.config.clone(), seed)
                        .with_token_seed(uuid::Uuid::new_v4().as_u64_pair().1),
                ),
                store: Arc::new(store::Timed {
                    inner: self.store,
                    limit: self.store_timeout,
                }),
                config: self.config,
                retrying: AtomicUsize::new(0),
            }),
        }
    }
}

/// [`GuardBuilder::store_timeout`]'s default.
const STORE_TIMEOUT: Duration = Duration::from_secs(5);

/// One process's guard and its store: every request of the wrapped endpoint goes through the
/// same one. Cheap to clone.
#[derive(Clone)]
pub struct SharedGuard {
    core: Arc<Core>,
}

impl std::fmt::Debug for SharedGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedGuard")
            .field("config", &self.core.config)
            .finish_non_exhaustive()
    }
}

impl SharedGuard {
    /// Its settings.
    pub fn config(&self) -> &GuardConfig {
        &self.core.config
    }

    /// A request head arrived: the request to drive (see [`Inbound::next`]).
    pub fn begin(&self, method: &Method, headers: &HeaderMap) -> Inbound {
        // Read before the lock is taken: the lock is held for the guard's work alone.
        let now = now();
        let exchange = self.core.guard().begin(method, headers, now);
        Inbound {
            core: self.core.clone(),
            exchange,
            claim: None,
        }
    }
}

/// What every request shares: the guard (under a lock never held across an await) and the
/// store.
pub(crate) struct Core {
    guard: Mutex<Guard>,
    store: Arc<dyn Store>,
    config: GuardConfig,
    /// Failed operations being tried again, each on a task of its own (at most
    /// [`Retry::MOST_AT_ONCE`]).
    retrying: AtomicUsize,
}

impl Core {
    fn guard(&self) -> MutexGuard<'_, Guard> {
        // The guard's state is plain data; a panic elsewhere left it usable.
        self.guard.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs an operation that answers nobody; a failure is logged (the guard already chose
    /// the safe side for it), and a release is tried again ([`Core::failed`]).
    async fn run(self: &Arc<Self>, op: &StoreOp) {
        if let Err(e) = store::run(&*self.store, op).await {
            tracing::warn!(error = %e, "resume-safety store operation failed");
            self.failed(op);
        }
    }

    /// An operation failed: one worth trying again ([`Retry`]) is, on a task of its own,
    /// when the core says; at most [`Retry::MOST_AT_ONCE`] at a time: during a long outage
    /// every refused call would leave one more task and one more command a second aimed at
    /// the store, without bound. One past the bound is left (its key, if its claim landed,
    /// reads as in use, then lost, as before any was tried again).
    fn failed(self: &Arc<Self>, op: &StoreOp) {
        let Some(mut retry) = Retry::after_failure(op, now(), self.config.lease()) else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!("no tokio runtime: a failed release is not tried again");
            return;
        };
        let Some(slot) = RetrySlot::take(self) else {
            tracing::warn!("too many failed releases being tried again: this one is left");
            return;
        };
        runtime.spawn(async move {
            let _slot = slot;
            let store = &_slot.0.store;
            loop {
                tokio::time::sleep_until(retry.poll_timeout().into()).await;
                let Err(e) = store::run(&**store, retry.op()).await else {
                    return;
                };
                match retry.handle_failed(now()) {
                    Some(next) => retry = next,
                    None => {
                        tracing::warn!(error = %e, "resume-safety release given up");
                        return;
                    }
                }
            }
        });
    }
}

/// One of a core's [`Retry::MOST_AT_ONCE`] retries, given back when dropped (its task ended,
/// or was dropped with its runtime).
struct RetrySlot(Arc<Core>);

impl RetrySlot {
    fn take(core: &Arc<Core>) -> Option<Self> {
        core.retrying
            .fetch_update(AtomicOrdering::AcqRel, AtomicOrdering::Acquire, |n| {
                (n < Retry::MOST_AT_ONCE).then_some(n + 1)
            })
            .ok()
            .map(|_| RetrySlot(core.clone()))
    }
}

impl Drop for RetrySlot {
    fn drop(&mut self) {
        self.0.retrying.fetch_sub(1, AtomicOrdering::AcqRel);
    }
}

/// Operations that answer nobody, run in order where the request is; those not finished when
/// the request goes away (its client left, a timeout around the service) run on a task of
/// their own: cancelled, the release after a claim whose answer was lost would leave the key
/// held by nobody. Each is safe to run twice.
struct Unfinished {
    core: Arc<Core>,
    ops: VecDeque<StoreOp>,
}

impl Unfinished {
    async fn run(&mut self) {
        while let Some(op) = self.ops.front() {
            self.core.run(op).await;
            self.ops.pop_front();
        }
    }
}

impl Drop for Unfinished {
    fn drop(&mut self) {
        if self.ops.is_empty() {
            return;
        }
        let (core, ops) = (self.core.clone(), std::mem::take(&mut self.ops));
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                for op in &ops {
                    core.run(op).await;
                }
            });
        }
    }
}

/// The guard under the core's lock, one step at a time: reading and rewriting SSE happens
/// outside it.
struct Locked<'a>(&'a Core);

impl GuardAccess for Locked<'_> {
    fn with_guard<R>(&mut self, f: impl FnOnce(&mut Guard) -> R) -> R {
        f(&mut self.0.guard())
    }
}

/// One request on its way in (see the [module docs](self)).
pub struct Inbound {
    core: Arc<Core>,
    exchange: Exchange,
    /// The claim the store granted this request, kept for its call's renewals and answer:
    /// with it they take back a key the store lost.
    claim: Option<Arc<Claim>>,
}

impl std::fmt::Debug for Inbound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inbound")
            .field("exchange", &self.exchange)
            .finish_non_exhaustive()
    }
}

/// A claim the store is taking for a request: if the request is dropped before the store
/// answers (its client left, a timeout around the service), the claim may still be applied,
/// held by nobody, and would read as running, then lost, for a call that never ran. Dropped
/// unanswered, it is let go on a task of its own (a release frees only a running key held by
/// this claim's token: harmless when the claim never landed).
struct ClaimInFlight(Option<Unfinished>);

impl ClaimInFlight {
    fn of(core: &Arc<Core>, op: &StoreOp) -> Self {
        Self(match op {
            StoreOp::Claim(claim) => Some(Unfinished {
                core: core.clone(),
                ops: VecDeque::from([StoreOp::Release {
                    key: claim.key().clone(),
                    token: claim.token().clone(),
                }]),
            }),
            _ => None,
        })
    }

    /// The store answered: what it says is the request's to act on.
    fn taken(mut self) {
        if let Some(release) = &mut self.0 {
            release.ops.clear();
        }
    }
}

/// What the skin does next with a request.
#[derive(Debug)]
pub enum Next {
    /// Read the body, up to `limit` bytes, and report it with [`Inbound::handle_body`]; the
    /// inner server gets it unchanged either way.
    ReadBody {
        /// The most to read: a longer body is reported as [`Body::TooLarge`] (and forwarded
        /// untouched, what was read first).
        limit: usize,
    },
    /// Forward the request; its response passes untouched.
    Pass,
    /// Forward the request (with [`Outbound::last_event_id`] as its `Last-Event-ID` when
    /// there is one) and push its response through the outbound.
    Forward(Outbound),
    /// Send this response; the inner server never sees the request.
    Answer(Answer),
}

impl Inbound {
    /// Runs the store steps the guard asks for, until the skin must act. Inside a tokio
    /// runtime (a keyed call's lease renewals start here).
    pub async fn next(&mut self) -> Next {
        loop {
            let step = self.exchange.step();
            // Most steps hand out none: no clone of the core for them.
            if let Some(first) = self.exchange.poll_op() {
                let mut ops = Unfinished {
                    core: self.core.clone(),
                    ops: VecDeque::from([first]),
                };
                ops.ops
                    .extend(std::iter::from_fn(|| self.exchange.poll_op()));
                ops.run().await;
            }
            match step {
                Step::Store(op) => {
                    let in_flight = ClaimInFlight::of(&self.core, &op);
                    let result = store::run(&*self.core.store, &op).await;
                    in_flight.taken();
                    if let Err(e) = &result {
                        tracing::warn!(error = %e, "resume-safety store unavailable");
                    }
                    let mut g = self.core.guard();
                    match (op, result) {
                        (StoreOp::LoadSession(_), Ok(OpResult::Session(r))) => {
                            self.exchange.handle_session(&mut g, Ok(r))
                        }
                        (StoreOp::LoadSession(_), _) => {
                            self.exchange.handle_session(&mut g, Err(StoreUnavailable))
                        }
                        (StoreOp::Claim(claim), Ok(OpResult::Claim(c))) => {
                            if matches!(c, ClaimOutcome::Granted) {
                                self.claim = Some(Arc::new(claim));
                            }
                            self.exchange.handle_claim(&mut g, Ok(c))
                        }
                        (StoreOp::Claim(_), _) => {
                            self.exchange.handle_claim(&mut g, Err(StoreUnavailable))
                        }
                        _ => {}
                    }
                }
                step => {
                    if let Some(next) = self.skin_step(step) {
                        return next;
                    }
                }
            }
        }
    }

    /// [`Inbound::next`] when it would not wait: `None` when the store has work first
    /// (await [`Inbound::next`] then). Most requests never wait, and a skin that polls by
    /// hand takes the step here without a future.
    pub fn next_now(&mut self) -> Option<Next> {
        if self.exchange.needs_store() {
            return None;
        }
        let step = self.exchange.step();
        self.skin_step(step)
    }

    /// What a step that needs no store operation asks of the skin.
    fn skin_step(&self, step: Step) -> Option<Next> {
        Some(match step {
            Step::ReadBody { limit } => Next::ReadBody { limit },
            Step::Pass => Next::Pass,
            Step::Forward(forward) => {
                let last_event_id = forward.last_event_id().cloned();
                let outbound = Outbound::start(
                    self.core.clone(),
                    forward.into_boxed_watch(),
                    last_event_id,
                    self.claim.clone(),
                );
                Next::Forward(outbound)
            }
            Step::Answer(answer) => Next::Answer(answer),
            Step::Store(_) => return None,
        })
    }

    /// The body was read (after [`Next::ReadBody`]): `Body::Complete` with its bytes, or
    /// `Body::TooLarge` when it was longer than the limit. `headers` are the request's.
    pub fn handle_body(&mut self, body: Body<'_>, headers: &HeaderMap) {
        self.exchange
            .handle_body(&mut Locked(&self.core), body, headers);
    }
}

/// What to send the client after a step of an [`Outbound`], in this order: the head (once),
/// the body bytes, then the end.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct ToClient {
    /// The response head, when it may be sent now (it comes exactly once per response).
    pub head: Option<(StatusCode, HeaderMap)>,
    /// Body bytes to send (after the head).
    pub body: Bytes,
    /// The client's response ends here.
    pub end: Option<End>,
}

/// How a client's response ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// Complete: send what came with it and end the response. The rest of the inner body,
    /// if any, is not for the client (stop reading it unless [`Outbound::must_drain`]).
    Complete,
    /// End the client's response with an error (break the connection): what was sent is
    /// true, what would follow is not (a replay that diverged, an inner body that failed).
    Abort,
}

/// Store operations to run before sending a step's [`ToClient`]. Owned: they can be run on
/// another task.
#[derive(Default)]
#[must_use = "store operations do nothing unless run or spawned"]
pub struct Ops {
    core: Option<Arc<Core>>,
    ops: Vec<StoreOp>,
    /// A keyed call's watch, told when storing its answer failed. Held, not watched: a skin
    /// may drop its outbound before it runs the operations that store the answer, and the
    /// answer must still be stored again if its first attempt fails. Ops are short-lived, so
    /// the renewal task (which stops once nothing holds the watch) is not kept going.
    watch: Option<Arc<Mutex<Watch>>>,
    /// The keyed call's claim (see [`run_held`]).
    claim: Option<Arc<Claim>>,
}

impl std::fmt::Debug for Ops {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ops").field("ops", &self.ops).finish()
    }
}

impl Ops {
    /// Nothing to run.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Runs them in order (a failure is logged: the guard chose the safe side already); those
    /// not finished when this future is dropped run on a task of their own. A keyed call's
    /// answer that could not be stored is stored again later, on a task of its
    /// own that renews the lease meanwhile, whether or not the client is still there or the
    /// skin kept its outbound.
    pub async fn run(self) {
        let Ops {
            core,
            ops,
            watch,
            claim,
        } = self;
        let Some(core) = core else { return };
        let Some(watch) = watch else {
            // Those left when this is dropped (the request went away) still run: a session's
            // record or its forgetting dropped with its request would be lost for good.
            let mut ops = Unfinished {
                core,
                ops: ops.into(),
            };
            ops.run().await;
            return;
        };
        if run_reporting(&core, &watch, ops, claim.as_deref()).await {
            let weak = Arc::downgrade(&watch);
            tokio::spawn(renew(core, weak, Some(watch), claim));
        }
    }

    /// Runs them on a task of their own (a skin that cannot wait where it is, such as a body
    /// polled synchronously; never for a keyed call, whose answer must be stored first).
    pub fn spawn(self) {
        if !self.is_empty() {
            tokio::spawn(self.run());
        }
    }
}

/// One response on its way out (see the [module docs](self)).
pub struct Outbound {
    core: Arc<Core>,
    watch: WatchCell,
    last_event_id: Option<HeaderValue>,
    phase: Phase,
    ops: Vec<StoreOp>,
    keyed: bool,
    /// A keyed call's claim (see [`run_held`]).
    claim: Option<Arc<Claim>>,
}

impl std::fmt::Debug for Outbound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outbound")
            .field("phase", &self.phase.name())
            .field("keyed", &self.keyed)
            .finish_non_exhaustive()
    }
}

/// Where the response is.
enum Phase {
    /// Waiting for the inner head.
    Head,
    /// The head was given out; the body passes untouched.
    Untouched,
    /// A JSON body read whole before the head goes (it may change its length).
    Json {
        head: (StatusCode, HeaderMap),
        buf: BytesMut,
        limit: usize,
    },
    /// An SSE body rewritten as it passes; `head` is held until the watch lets it go (an
    /// `initialize` until its result passed, a resume until its replay is proven).
    Sse {
        head: Option<(StatusCode, HeaderMap)>,
        pending: BytesMut,
    },
    /// The client's response is complete.
    Done,
}

impl Phase {
    fn name(&self) -> &'static str {
        match self {
            Phase::Head => "head",
            Phase::Untouched => "untouched",
            Phase::Json { .. } => "json",
            Phase::Sse { .. } => "sse",
            Phase::Done => "done",
        }
    }
}

impl Outbound {
    fn start(
        core: Arc<Core>,
        mut watch: Box<Watch>,
        last_event_id: Option<HeaderValue>,
        claim: Option<Arc<Claim>>,
    ) -> Self {
        let keyed = watch.must_drain();
        if keyed {
            // Only a keyed call's watch reads the clock (its lease renewals are timed from
            // here): the others skip the read.
            watch.start(now());
        }
        let watch = if watch.poll_timeout().is_some() {
            let watch = Arc::new(Mutex::new(*watch));
            match tokio::runtime::Handle::try_current() {
                Ok(rt) => {
                    let claim = claim.clone();
                    rt.spawn(renew(core.clone(), Arc::downgrade(&watch), None, claim));
                }
                Err(_) => tracing::warn!("no tokio runtime: a keyed call's lease is not renewed"),
            }
            WatchCell::Shared(watch)
        } else {
            WatchCell::Own(watch)
        };
        Self {
            core,
            watch,
            last_event_id,
            phase: Phase::Head,
            ops: Vec::new(),
            keyed,
            claim,
        }
    }

    /// The `Last-Event-ID` to forward instead of the client's (a resume: the inner server's
    /// own id for the client's cursor).
    pub fn last_event_id(&self) -> Option<&HeaderValue> {
        self.last_event_id.as_ref()
    }

    /// Whether the inner body must be read to its end even when the client has gone: a keyed
    /// call whose answer has not been stored yet.
    pub fn must_drain(&self) -> bool {
        self.keyed && self.watch.must_drain()
    }

    /// Whether the call is keyed (its client's leaving must not reach the inner server).
    pub fn is_keyed(&self) -> bool {
        self.keyed
    }

    /// Whether body chunks now pass unchanged: the skin may send them without
    /// [`Outbound::handle_body`] (it still calls [`Outbound::handle_end`]).
    pub fn is_untouched(&self) -> bool {
        matches!(self.phase, Phase::Untouched)
    }

    /// Whether the last steps handed out store operations ([`Outbound::take_ops`]).
    pub(crate) fn has_ops(&self) -> bool {
        !self.ops.is_empty()
    }

    /// The store operations the last steps handed out: run them before sending what those
    /// steps returned.
    pub fn take_ops(&mut self) -> Ops {
        if self.ops.is_empty() {
            return Ops::default();
        }
        let watch = match &self.watch {
            WatchCell::Shared(w) if self.keyed => Some(w.clone()),
            _ => None,
        };
        Ops {
            core: Some(self.core.clone()),
            ops: std::mem::take(&mut self.ops),
            watch,
            claim: self.claim.clone(),
        }
    }

    /// The inner response's head.
    pub fn handle_head(&mut self, status: StatusCode, mut headers: HeaderMap) -> ToClient {
        if !matches!(self.phase, Phase::Head) {
            return ToClient::default();
        }
        let mut w = self.watch.get();
        let plan = w.handle_head(&mut self.core.guard(), status, &mut headers);
        drain(&mut w, &mut self.ops);
        match plan {
            BodyPlan::Untouched => {
                w.finish_head(&mut headers);
                drop(w);
                self.phase = Phase::Untouched;
                ToClient {
                    head: Some((status, headers)),
                    ..ToClient::default()
                }
            }
            BodyPlan::Json { limit } => {
                drop(w);
                self.phase = Phase::Json {
                    head: (status, headers),
                    buf: BytesMut::new(),
                    limit,
                };
                ToClient::default()
            }
            BodyPlan::Sse => {
                drop(w);
                if crate::wire::has_header(&headers, &CONTENT_LENGTH) {
                    headers.remove(CONTENT_LENGTH);
                }
                self.phase = Phase::Sse {
                    head: Some((status, headers)),
                    pending: BytesMut::new(),
                };
                self.release_sse_head(&[], None)
            }
        }
    }

    /// A chunk of the inner body.
    pub fn handle_body(&mut self, chunk: &[u8]) -> ToClient {
        match &mut self.phase {
            Phase::Head | Phase::Untouched => ToClient {
                body: Bytes::copy_from_slice(chunk),
                ..ToClient::default()
            },
            Phase::Json { buf, limit, .. } => {
                buf.extend_from_slice(chunk);
                if buf.len() <= *limit {
                    return ToClient::default();
                }
                let Phase::Json { head, buf, .. } =
                    std::mem::replace(&mut self.phase, Phase::Untouched)
                else {
                    return ToClient::default();
                };
                // Too long to read: it passes as it is, and a keyed call's outcome is unknown.
                let (status, mut headers) = head;
                let mut w = self.watch.get();
                w.handle_json_overflow();
                drain(&mut w, &mut self.ops);
                w.finish_head(&mut headers);
                ToClient {
                    head: Some((status, headers)),
                    body: buf.freeze(),
                    end: None,
                }
            }
            Phase::Sse { .. } => REWRITTEN.with_borrow_mut(|out| {
                out.clear();
                let flow = {
                    let mut w = self.watch.get();
                    let flow = w.handle_sse(&mut Locked(&self.core), chunk, out);
                    drain(&mut w, &mut self.ops);
                    flow
                };
                let abort = (flow == SseFlow::Abort).then_some(End::Abort);
                let step = self.release_sse_head(out, abort);
                if out.capacity() > REWRITTEN_KEPT {
                    *out = BytesMut::new();
                }
                step
            }),
            Phase::Done => ToClient::default(),
        }
    }

    /// The inner body ended: `clean` unless it failed (or the inner server failed before
    /// answering).
    pub fn handle_end(&mut self, clean: bool) -> ToClient {
        let end = if clean { End::Complete } else { End::Abort };
        let phase = std::mem::replace(&mut self.phase, Phase::Done);
        let mut w = self.watch.get();
        match phase {
            Phase::Head => {
                if self.keyed {
                    // No answer at all: the call may have run.
                    w.handle_end(&mut self.core.guard(), false, &mut BytesMut::new());
                    drain(&mut w, &mut self.ops);
                }
                ToClient {
                    end: Some(End::Abort),
                    ..ToClient::default()
                }
            }
            Phase::Untouched => ToClient {
                end: Some(end),
                ..ToClient::default()
            },
            Phase::Json { head, buf, .. } => {
                let (status, mut headers) = head;
                let body = if clean {
                    match w.handle_json(&mut self.core.guard(), &buf) {
                        Some(new) => {
                            headers.remove(TRANSFER_ENCODING);
                            headers.insert(CONTENT_LENGTH, HeaderValue::from(new.len()));
                            new
                        }
                        None => buf.freeze(),
                    }
                } else {
                    w.handle_json_overflow();
                    buf.freeze()
                };
                drain(&mut w, &mut self.ops);
                w.finish_head(&mut headers);
                ToClient {
                    head: Some((status, headers)),
                    body,
                    end: Some(end),
                }
            }
            Phase::Sse { head, mut pending } => {
                w.handle_end_with(&mut Locked(&self.core), clean, &mut pending);
                drain(&mut w, &mut self.ops);
                let head = match head {
                    None => None,
                    Some((status, mut headers)) => {
                        if let Some(refusal) = w.take_refusal() {
                            return answer_to_client(refusal);
                        }
                        w.finish_head(&mut headers);
                        Some((status, headers))
                    }
                };
                ToClient {
                    head,
                    body: pending.freeze(),
                    end: Some(end),
                }
            }
            Phase::Done => ToClient::default(),
        }
    }

    /// After an SSE step: `out` goes to the client, or is held with the head until the watch
    /// lets the head go (or refuses the resume instead).
    fn release_sse_head(&mut self, out: &[u8], end: Option<End>) -> ToClient {
        let Phase::Sse { head, pending } = &mut self.phase else {
            return ToClient::default();
        };
        if head.is_none() {
            if end.is_some() {
                self.phase = Phase::Done;
            }
            return ToClient {
                head: None,
                // Copied at its size: one allocation, which the bytes own alone.
                body: Bytes::copy_from_slice(out),
                end,
            };
        }
        pending.extend_from_slice(out);
        let mut w = self.watch.get();
        if let Some(refusal) = w.take_refusal() {
            drop(w);
            self.phase = Phase::Done;
            return answer_to_client(refusal);
        }
        if !w.head_ready() {
            return ToClient::default();
        }
        let Some((status, mut headers)) = head.take() else {
            return ToClient::default();
        };
        w.finish_head(&mut headers);
        drop(w);
        let body = std::mem::take(pending).freeze();
        if end.is_some() {
            self.phase = Phase::Done;
        }
        ToClient {
            head: Some((status, headers)),
            body,
            end,
        }
    }
}

impl Drop for Outbound {
    fn drop(&mut self) {
        if !self.keyed {
            return;
        }
        // Dropped before its end: whatever a keyed call did is unknown from here on.
        let mut w = self.watch.get();
        if !w.must_drain() {
            return;
        }
        w.handle_end(&mut self.core.guard(), false, &mut BytesMut::new());
        drain(&mut w, &mut self.ops);
        drop(w);
        let ops = self.take_ops();
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => drop(rt.spawn(ops.run())),
            Err(_) => tracing::warn!("no tokio runtime: a dropped keyed call is not marked lost"),
        }
    }
}

thread_local! {
    /// Where a chunk of SSE is rewritten before it is copied out at its length. Written in a
    /// buffer of its own, a chunk took two allocations: the buffer (sized before the length
    /// is known), and the shared header its bytes need when frozen at less than its capacity.
    static REWRITTEN: std::cell::RefCell<BytesMut> = std::cell::RefCell::new(BytesMut::new());
}

/// The most [`REWRITTEN`] keeps between chunks: a longer chunk's room is given back.
const REWRITTEN_KEPT: usize = 64 * 1024;

/// An outbound's watch: its own, or shared with the task renewing a keyed call's lease.
enum WatchCell {
    Own(Box<Watch>),
    Shared(Arc<Mutex<Watch>>),
}

impl WatchCell {
    /// The watch for one step.
    fn get(&mut self) -> WatchRef<'_> {
        match self {
            WatchCell::Own(w) => WatchRef::Own(w),
            WatchCell::Shared(w) => WatchRef::Shared(lock(w)),
        }
    }

    fn must_drain(&self) -> bool {
        match self {
            WatchCell::Own(w) => w.must_drain(),
            WatchCell::Shared(w) => lock(w).must_drain(),
        }
    }
}

/// A watch borrowed for one step (locked when shared).
enum WatchRef<'a> {
    Own(&'a mut Watch),
    Shared(MutexGuard<'a, Watch>),
}

impl std::ops::Deref for WatchRef<'_> {
    type Target = Watch;

    fn deref(&self) -> &Watch {
        match self {
            WatchRef::Own(w) => w,
            WatchRef::Shared(w) => w,
        }
    }
}

impl std::ops::DerefMut for WatchRef<'_> {
    fn deref_mut(&mut self) -> &mut Watch {
        match self {
            WatchRef::Own(w) => w,
            WatchRef::Shared(w) => w,
        }
    }
}

/// The runtime's clock (the stores' too, so a test with paused time moves them together).
fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

fn lock(watch: &Mutex<Watch>) -> MutexGuard<'_, Watch> {
    watch.lock().unwrap_or_else(|p| p.into_inner())
}

/// Moves what the watch handed out to `ops`, under the same lock as the step that handed it
/// out (the renewal task, taking the lock, then finds only its own).
fn drain(w: &mut Watch, ops: &mut Vec<StoreOp>) {
    while let Some(op) = w.poll_op() {
        ops.push(op);
    }
}

/// Renews a keyed call's lease while it runs: until its answer is settled, or its outbound
/// is gone (with the operations it handed out, which hold the watch only while they run).
/// An answer that waits to be stored again keeps the watch (`held`) past its outbound, until
/// it is stored or given up on.
async fn renew(
    core: Arc<Core>,
    watch: Weak<Mutex<Watch>>,
    mut held: Option<Arc<Mutex<Watch>>>,
    claim: Option<Arc<Claim>>,
) {
    loop {
        let due = {
            let Some(w) = held.clone().or_else(|| watch.upgrade()) else {
                return;
            };
            let w_ = lock(&w);
            let Some(due) = w_.poll_timeout() else { return };
            let again = w_.is_storing_again();
            drop(w_);
            held = again.then_some(w);
            due
        };
        tokio::time::sleep_until(due.into()).await;
        let Some(w) = held.clone().or_else(|| watch.upgrade()) else {
            return;
        };
        let mut ops = Vec::new();
        {
            let mut w = lock(&w);
            w.handle_timeout(now());
            // Every step drains what it handed out under the lock: renewals, an answer to
            // store again.
            drain(&mut w, &mut ops);
        }
        run_reporting(&core, &w, ops, claim.as_deref()).await;
    }
}

/// Runs a keyed call's operations, telling its watch of those that failed; says whether its
/// answer now waits to be stored again.
async fn run_reporting(
    core: &Arc<Core>,
    watch: &Mutex<Watch>,
    ops: Vec<StoreOp>,
    claim: Option<&Claim>,
) -> bool {
    for op in ops {
        if let Err(e) = run_held(&*core.store, &op, claim).await {
            tracing::warn!(error = %e, "resume-safety store operation failed");
            core.failed(&op);
            lock(watch).handle_op_failed(op, now());
        }
    }
    lock(watch).is_storing_again()
}

/// Runs one of a keyed call's operations. A renewal or an answer that finds its key gone
/// (the store lost it: a fail-over before replication, a restart, an eviction) first takes
/// it back with the call's own claim: left gone, a re-send would be granted the key and run
/// the call again, and the answer would never be stored.
async fn run_held(store: &dyn Store, op: &StoreOp, claim: Option<&Claim>) -> Result<(), Error> {
    match (op, claim) {
        (StoreOp::Renew { key, token, lease }, Some(claim)) if claim.token() == token => {
            if !store.renew(key, token, *lease).await? {
                reclaim(store, claim).await?;
            }
        }
        (
            StoreOp::Finish {
                key,
                token,
                outcome,
            },
            Some(claim),
        ) if claim.token() == token => {
            if !store.finish(key, token, outcome).await? && reclaim(store, claim).await? {
                store.finish(key, token, outcome).await?;
            }
        }
        _ => {
            store::run(store, op).await?;
        }
    }
    Ok(())
}

/// Claims a key again for the call that holds it; whether it holds it now. Only a key the
/// store no longer has is granted (or one still held): a key another claim took, or one
/// marked lost or answered, is left as it is.
async fn reclaim(store: &dyn Store, claim: &Claim) -> Result<bool, Error> {
    Ok(matches!(store.claim(claim).await?, ClaimOutcome::Granted))
}

/// A guard's own answer as what to send.
pub fn answer_to_client(answer: Answer) -> ToClient {
    let (status, pairs, body) = answer.into_parts();
    let mut headers = HeaderMap::with_capacity(pairs.len());
    for (name, value) in pairs {
        headers.insert(name, value);
    }
    ToClient {
        head: Some((status, headers)),
        body,
        end: Some(End::Complete),
    }
}

/// Headers from name/value byte pairs (an ASGI scope's, Node's `rawHeaders`); pairs that are
/// not valid HTTP are left out (the guard reads only its own headers, and a skin forwards the
/// request's originals).
pub fn header_map<'a>(pairs: impl IntoIterator<Item = (&'a [u8], &'a [u8])>) -> HeaderMap {
    let mut headers = HeaderMap::new();
    for (name, value) in pairs {
        if let (Ok(name), Ok(value)) =
            (HeaderName::from_bytes(name), HeaderValue::from_bytes(value))
        {
            headers.append(name, value);
        }
    }
    headers
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{ClaimToken, IdempotencyKey};
    use crate::MemoryStore;

    /// However many releases fail during an outage, at most [`Retry::MOST_AT_ONCE`] are tried
    /// again at once.
    #[tokio::test]
    async fn failed_releases_tried_again_are_bounded() {
        let guard = GuardBuilder::new(MemoryStore::default()).seed(1).build();
        let core = &guard.core;
        for n in 0..Retry::MOST_AT_ONCE + 100 {
            core.failed(&StoreOp::Release {
                key: IdempotencyKey::new(format!("k-{n}")).unwrap(),
                token: ClaimToken::from_stored("t"),
            });
        }
        // Each waits 50 ms before its first try: none has ended yet.
        assert_eq!(
            core.retrying.load(AtomicOrdering::Acquire),
            Retry::MOST_AT_ONCE
        );
    }
}
