//! The guard: every rule of the resume-safety extension, once, with no I/O, no clock reads
//! and no randomness of its own (time is passed in, ids come from a seeded generator).
//!
//! A skin (the tower [`ResumeSafetyLayer`](crate::ResumeSafetyLayer), or one in another
//! language) feeds it what passes between a client and an MCP Streamable HTTP server and does
//! what it says. One HTTP exchange is driven in two halves:
//!
//! **Request** — [`Guard::begin`] with the request head and the time it arrived gives an
//! [`Exchange`]. Then, until it says otherwise, take its [`Exchange::step`] step:
//! - [`Step::ReadBody`]: read the body up to the limit and report it with
//!   [`Exchange::handle_body`] (the body is forwarded unchanged either way);
//! - [`Step::Store`]: run the store operation and report its result
//!   ([`Exchange::handle_session`] for [`StoreOp::LoadSession`], [`Exchange::handle_claim`]
//!   for [`StoreOp::Claim`]);
//! - [`Step::Pass`]: forward the request; its response passes untouched;
//! - [`Step::Forward`]: forward the request (with its `Last-Event-ID` replaced when the step
//!   says so) and feed the response to the step's [`Watch`];
//! - [`Step::Answer`]: send this response; the inner server never sees the request.
//!
//! After every step, run what [`Exchange::poll_op`] hands out (operations that need no
//! report, such as forgetting a session, or keeping the record of a session in use). One of
//! those that fails is worth trying again when [`Retry::after_failure`] says so (a release
//! of a key whose call did not run).
//!
//! **Response** — see [`Watch`]: its head, then its body (JSON or SSE), then its end;
//! [`Watch::poll_op`] hands out the store operations to run (session records, a keyed call's
//! stored answer) and [`Watch::poll_timeout`] when to call [`Watch::handle_timeout`] (a keyed
//! call's lease renewals).
//!
//! The rules, each in one place: the advertisement ([`Parts`]), the capability hash
//! ([`crate::wire::capability_hash`]), sequenced event ids (the watch and the ledger),
//! resume authorization ([`authorize_resume`]), idempotency ([`claim_verdict`]).

#![deny(clippy::disallowed_methods)]

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use http::{HeaderMap, HeaderValue, Method, StatusCode};
use serde_json::Value;
use sha2::Digest;

mod advertise;
mod answer;
pub mod claims;
mod classify;
mod idempotency;
mod ledger;
mod records;
mod resume;
mod retry;
mod scan;
mod sse;
mod watch;

pub use advertise::Parts;
pub use answer::Answer;
pub use idempotency::{call_key, claim_message, claim_verdict, ClaimVerdict};
pub use records::{Claim, ClaimOutcome, SessionRecord, StoreOp, StoredOutcome};
pub use resume::{authorize_resume, CursorFacts, RejectReason, ResumeFacts, StreamFacts};
pub use retry::Retry;
pub use watch::{BodyPlan, SseFlow, Watch};

use ledger::{Capacities, Ledger, RequestIds};
use watch::WatchKind;

use crate::ids::{ClaimToken, Cursor, InstanceId, SessionId};
use crate::wire::names;

/// What a guard enforces and how much it keeps. Built by the layer's builder
/// ([`ResumeSafetyLayer`](crate::ResumeSafetyLayer)), where every default is documented.
#[derive(Debug, Clone)]
pub struct GuardConfig {
    pub(crate) instance: InstanceId,
    pub(crate) parts: Parts,
    pub(crate) max_body: usize,
    pub(crate) lease: Duration,
    pub(crate) retry_after_secs: u64,
    pub(crate) capacities: Capacities,
    /// The request header whose value scopes idempotency keys (see
    /// [`GuardBuilder::key_scope_header`](crate::skin::GuardBuilder::key_scope_header)).
    pub(crate) key_scope: Option<http::HeaderName>,
    /// How often a session in use has the store keep its record again: half the store's
    /// retention (see [`GuardConfig::session_refresh`]).
    pub(crate) session_refresh: Duration,
}

/// The retention of a session record assumed when the store does not say its own
/// ([`Store::session_retention`](crate::store::Store::session_retention)): the default of
/// every store here.
pub(crate) const DEFAULT_SESSION_RETENTION: Duration = Duration::from_secs(24 * 3600);

/// The refresh period for a store whose session records are kept `retention` after their
/// last write or touch: half of it, so a record in use is touched while it has half its life
/// left, whatever the gaps between the session's requests (up to half the retention) and
/// wherever its requests land.
pub(crate) fn session_refresh(retention: Duration) -> Duration {
    retention / 2
}

impl Default for GuardConfig {
    fn default() -> Self {
        Self {
            instance: InstanceId::random(),
            parts: Parts {
                capability_hash: true,
                sequenced_event_ids: true,
                idempotency: true,
            },
            max_body: 4 * 1024 * 1024,
            lease: Duration::from_secs(10),
            retry_after_secs: 1,
            key_scope: None,
            session_refresh: session_refresh(DEFAULT_SESSION_RETENTION),
            capacities: Capacities {
                sessions: 100_000,
                streams: 10_000,
                events_per_stream: 4096,
            },
        }
    }
}

impl GuardConfig {
    /// The instance this guard runs in.
    pub fn instance(&self) -> &InstanceId {
        &self.instance
    }

    /// The parts of the extension enforced (and advertised).
    pub fn parts(&self) -> Parts {
        self.parts
    }

    /// Request bodies, JSON response bodies and SSE blocks over this size pass untouched,
    /// except a keyed call's request body (its key in the `Idempotency-Key` header or named in
    /// the bytes read): it is refused 413, as it cannot be guarded.
    pub fn max_body(&self) -> usize {
        self.max_body
    }

    /// A keyed call's claim lease.
    pub fn lease(&self) -> Duration {
        self.lease
    }

    /// The request header whose value scopes idempotency keys, when one does.
    pub fn key_scope_header(&self) -> Option<&http::HeaderName> {
        self.key_scope.as_ref()
    }

    /// How long after a session record was last written or touched from this instance a
    /// request of the session has the store touch it again ([`StoreOp::TouchSession`]): half
    /// the store's retention, so a session in use keeps its record while the store has room (a
    /// full `MemoryStore` drops the record that expires first, the one written or touched
    /// longest ago, which may be a session in use). A record read from
    /// the store is touched when read (its age is not known). Default: 12 hours (stores keep
    /// records 24 hours).
    pub fn session_refresh(&self) -> Duration {
        self.session_refresh
    }
}

/// The rules and what one instance remembers to apply them (sessions it knows, the event
/// maps of the streams it numbered). Drive it as the [module docs](self) say.
#[derive(Debug)]
pub struct Guard {
    config: GuardConfig,
    ledger: Ledger,
    rng: SplitMix,
    /// Where claim tokens come from: apart from the stream ids, so that a seed fixing those
    /// for a test does not fix the tokens of every guard given it.
    tokens: SplitMix,
    claims: u64,
    /// The instance's mark in the stream ids it draws (the high 32 bits).
    tag: u32,
}

impl Guard {
    /// A guard with `config`; `seed` seeds the stream ids it draws, and its claim tokens
    /// until [`Guard::with_token_seed`] gives them a seed of their own.
    pub fn new(config: GuardConfig, seed: u64) -> Self {
        let ledger = Ledger::new(config.capacities);
        let digest = sha2::Sha256::digest(config.instance.as_str().as_bytes());
        let tag = u32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]]);
        Self {
            config,
            ledger,
            rng: SplitMix(seed),
            tokens: SplitMix(seed),
            claims: 0,
            tag,
        }
    }

    /// Seeds its claim tokens apart from its stream ids; give it fresh entropy. A claim by
    /// the key's holder's own token is granted (a store client's retry of its own claim), so
    /// two guards drawing the same tokens (the same instance id and seed) would each run a
    /// key the other holds.
    pub fn with_token_seed(mut self, seed: u64) -> Self {
        self.tokens = SplitMix(seed);
        self
    }

    /// Its configuration.
    pub fn config(&self) -> &GuardConfig {
        &self.config
    }

    /// A request head arrived at `now`: the exchange to drive.
    pub fn begin(&mut self, method: &Method, headers: &HeaderMap, now: Instant) -> Exchange {
        let head = HeadOf::read(headers);
        let text = head
            .session
            .and_then(|v| SessionId::check(v.as_bytes()).ok());
        // A session known here lends its id: nothing is copied for most requests.
        let mut known = false;
        let session = text.map(|text| match self.ledger.session(text) {
            Some(rec) => {
                known = true;
                rec.session().clone()
            }
            None => SessionId::from_checked(text),
        });
        let mut ex = Exchange {
            at: now,
            session,
            record: None,
            looked_up: false,
            plan: Plan::Pass,
            next: None,
            ops: VecDeque::new(),
            keys: self.config.parts.idempotency,
            key_header: false,
            lease: self.config.lease,
        };
        // A known session is not a forgotten one (the ledger keeps them apart): one lookup.
        if let Some(text) = text.filter(|_| !known) {
            if self.ledger.is_forgotten(text) {
                // A session this guard refused to resume: nothing of it runs any more.
                ex.next = Some(Step::Answer(Answer::session_not_found()));
                return ex;
            }
        }
        let hashes = self.config.parts.capability_hash;
        match *method {
            Method::POST if ex.keys && head.encoded => {
                // A compressed body cannot be read here, so cannot be told keyed or not; a
                // decompressing layer inside the guard would run a keyed call unguarded on
                // every re-send. Decompression belongs in front of the guard.
                ex.next = Some(Step::Answer(Answer::encoded_request()));
            }
            Method::POST => {
                let declared = head
                    .content_length
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.parse::<u64>().ok());
                // Declared over the bound: decided now when what the body says cannot matter
                // (no keys guarded, or keyed by its header); else its first bytes are read, to
                // see whether it names a key.
                ex.key_header = ex.keys && head.idempotency_key;
                let settled = !ex.keys || ex.key_header;
                if settled && declared.is_some_and(|n| n > self.config.max_body as u64) {
                    ex.too_large(self, headers, &[]);
                    return ex;
                }
                ex.next = Some(Step::ReadBody {
                    limit: self.config.max_body,
                });
            }
            Method::GET if hashes && ex.session.is_some() => {
                ex.plan = match head.last_event_id {
                    Some(v) => Plan::Resume {
                        cursor: Cursor::parse(v.as_bytes()),
                    },
                    None => Plan::Session {
                        requests: RequestIds::none(),
                    },
                };
                ex.advance(self);
            }
            Method::DELETE if ex.session.is_some() => {
                ex.plan = Plan::Delete;
                ex.advance(self);
            }
            _ => ex.next = Some(Step::Pass),
        }
        ex
    }

    fn token(&mut self) -> ClaimToken {
        self.claims += 1;
        ClaimToken::new(&self.config.instance, self.claims ^ self.tokens.next_u64())
    }

    /// A fresh stream id: this instance's tag, then 32 random bits. Any instance can tell
    /// from a cursor whether it numbered its stream.
    ///
    /// 32 bits repeat among the logs held often enough to matter at scale: an id still held
    /// is drawn again, else opening the new stream would replace the live log and the old
    /// stream's cursors would name the new one's events.
    fn stream_id(&mut self) -> crate::ids::StreamId {
        loop {
            let low = self.rng.next_u64() & 0xffff_ffff;
            let id = crate::ids::StreamId::from_u64((u64::from(self.tag) << 32) | low);
            if self.ledger.stream(id).is_none() {
                return id;
            }
        }
    }

    fn owns(&self, stream: crate::ids::StreamId) -> bool {
        stream.instance_tag() == self.tag
    }
}

/// The request headers [`Guard::begin`] reads: each the first value of its name, as
/// `HeaderMap::get` gives it (`Content-Encoding`: all its values).
#[derive(Default)]
struct HeadOf<'a> {
    session: Option<&'a HeaderValue>,
    content_length: Option<&'a HeaderValue>,
    idempotency_key: bool,
    last_event_id: Option<&'a HeaderValue>,
    /// Its body has a `Content-Encoding` other than `identity`, in any of that header's values.
    encoded: bool,
}

impl<'a> HeadOf<'a> {
    /// Most requests carry a few headers: their names are compared in one pass, which costs
    /// less than hashing each name looked up; a long head is looked up by name.
    fn read(headers: &'a HeaderMap) -> Self {
        if headers.keys_len() > crate::wire::SHORT_HEAD {
            return Self {
                session: headers.get(names::SESSION_ID),
                content_length: headers.get(http::header::CONTENT_LENGTH),
                idempotency_key: headers.contains_key(names::IDEMPOTENCY_KEY),
                last_event_id: headers.get(names::LAST_EVENT_ID),
                encoded: watch::is_encoded(headers),
            };
        }
        let mut head = Self::default();
        // A name's first value comes first.
        for (name, value) in headers {
            let slot = match name.as_str() {
                "content-length" => &mut head.content_length,
                crate::wire::SESSION_ID_HEADER => &mut head.session,
                crate::wire::LAST_EVENT_ID_HEADER => &mut head.last_event_id,
                crate::wire::IDEMPOTENCY_KEY_HEADER => {
                    head.idempotency_key = true;
                    continue;
                }
                "content-encoding" => {
                    head.encoded |= watch::names_a_coding(value);
                    continue;
                }
                _ => continue,
            };
            if slot.is_none() {
                *slot = Some(value);
            }
        }
        head
    }
}

/// How a [`Watch`] reaches its guard for the brief steps that touch what the guard remembers
/// (numbering an event, marking a request answered): a skin that shares one guard between
/// concurrent exchanges (under a lock) hands it out one step at a time, so that reading and
/// rewriting SSE happens outside the lock. A `Guard` is its own access.
pub trait GuardAccess {
    /// Runs `f` on the guard.
    fn with_guard<R>(&mut self, f: impl FnOnce(&mut Guard) -> R) -> R;
}

impl GuardAccess for Guard {
    fn with_guard<R>(&mut self, f: impl FnOnce(&mut Guard) -> R) -> R {
        f(self)
    }
}

/// A request body as read by the skin.
#[derive(Debug, Clone, Copy)]
pub enum Body<'a> {
    /// The whole body (at most the limit).
    Complete(&'a [u8]),
    /// The body is longer than the limit: the guard cannot read it whole (it is forwarded
    /// untouched). What was read of it (at least the limit's worth, or all of it) is looked
    /// through for a key.
    TooLarge(&'a [u8]),
}

/// What the skin does next for a request (see the [module docs](self)).
#[derive(Debug)]
#[non_exhaustive]
pub enum Step {
    /// Read the body, up to `limit` bytes, and report it with [`Exchange::handle_body`].
    ReadBody {
        /// The most to read.
        limit: usize,
    },
    /// Run this store operation and report its result.
    Store(StoreOp),
    /// Forward the request; its response passes untouched.
    Pass,
    /// Forward the request and feed its response to the watch.
    Forward(Forward),
    /// Answer with this; the inner server never sees the request.
    Answer(Answer),
}

/// A request to forward, and the watch its response goes through.
#[derive(Debug)]
pub struct Forward {
    last_event_id: Option<HeaderValue>,
    watch: Box<Watch>,
}

impl Forward {
    /// The `Last-Event-ID` to forward instead of the client's (a resume: the inner server's
    /// own id for the client's cursor).
    pub fn last_event_id(&self) -> Option<&HeaderValue> {
        self.last_event_id.as_ref()
    }

    /// The watch for the response.
    pub fn into_watch(self) -> Watch {
        *self.watch
    }

    /// [`Forward::into_watch`], left where it is.
    pub(crate) fn into_boxed_watch(self) -> Box<Watch> {
        self.watch
    }
}

/// A failed store operation, as the skin reports it: the store could not be reached (or
/// answered nonsense). Keyed calls are refused with a retryable error; nothing else waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreUnavailable;

/// One request on its way through the guard (see the [module docs](self)).
#[derive(Debug)]
pub struct Exchange {
    /// When the request came.
    at: Instant,
    session: Option<SessionId>,
    record: Option<std::sync::Arc<SessionRecord>>,
    looked_up: bool,
    plan: Plan,
    next: Option<Step>,
    ops: VecDeque<StoreOp>,
    /// Copied from the configuration, so that a body is read without the guard.
    keys: bool,
    /// A POST's head names a key in `Idempotency-Key` (looked up once, when keys are guarded).
    key_header: bool,
    lease: Duration,
}

/// What the request turned out to be, once its head (and body) were read.
#[derive(Debug)]
enum Plan {
    /// Nothing to do: forward untouched.
    Pass,
    /// A request of a session (GET listen stream, or a POST): the session's hash on the
    /// response, its SSE ids sequenced; `requests` are the JSON-RPC ids of a POST.
    Session { requests: RequestIds },
    /// `initialize`.
    Initialize {
        id: Value,
        client_capabilities: Value,
    },
    /// 2026-07-28 `server/discover`.
    Discover { id: Value },
    /// A keyed `tools/call`; `claimed` once the claim was granted.
    Keyed(Box<KeyedPlan>),
    /// A GET with `Last-Event-ID`.
    Resume { cursor: Option<Cursor> },
    /// A DELETE of the session.
    Delete,
}

/// A keyed `tools/call`: boxed in its plan, which every request's exchange holds (most hold
/// none, and move the exchange a few times).
#[derive(Debug)]
struct KeyedPlan {
    id: Value,
    claim: Claim,
    requests: RequestIds,
    /// A 2026-07-28 request (see [`WatchKind::Keyed`]'s `modern`).
    modern: bool,
}

impl Exchange {
    /// The step to take now (see the [module docs](self)). After a final step ([`Step::Pass`],
    /// [`Step::Forward`], [`Step::Answer`]) it keeps answering [`Step::Pass`].
    #[must_use]
    pub fn step(&mut self) -> Step {
        self.next.take().unwrap_or(Step::Pass)
    }

    /// Whether the store has work before the next step: an operation to run, or the next
    /// step is one ([`Step::Store`]). Most requests have none.
    #[must_use]
    pub fn needs_store(&self) -> bool {
        !self.ops.is_empty() || matches!(self.next, Some(Step::Store(_)))
    }

    /// A store operation to run that needs no report.
    #[must_use]
    pub fn poll_op(&mut self) -> Option<StoreOp> {
        self.ops.pop_front()
    }

    /// The body was read (after [`Step::ReadBody`]).
    ///
    /// The body is read without the guard; it is reached (through `guard`) only to decide.
    pub fn handle_body(
        &mut self,
        guard: &mut impl GuardAccess,
        body: Body<'_>,
        headers: &HeaderMap,
    ) {
        let bytes = match body {
            Body::Complete(b) => b,
            Body::TooLarge(read) => return guard.with_guard(|g| self.too_large(g, headers, read)),
        };
        match classify::classify_post(
            self.keys,
            self.key_header,
            self.lease,
            bytes,
            headers,
            self.session.is_some(),
        ) {
            Ok(plan) => guard.with_guard(|g| {
                self.plan = match plan {
                    Plan::Keyed(mut keyed) => {
                        let claim = match &g.config.key_scope {
                            None => keyed.claim,
                            Some(name) => match headers.get(name).filter(|v| !v.is_empty()) {
                                Some(scope) => keyed.claim.within(scope.as_bytes()),
                                None => {
                                    // Unscoped, it would share its record with every
                                    // client's key of the same text.
                                    let why = format!(
                                        "a keyed call without the {name} header cannot be guarded"
                                    );
                                    let answer = Answer::unguardable(StatusCode::BAD_REQUEST, &why);
                                    self.next = Some(Step::Answer(answer));
                                    return;
                                }
                            },
                        };
                        keyed.claim = claim.with_token(g.token());
                        Plan::Keyed(keyed)
                    }
                    other => other,
                };
                self.advance(g);
            }),
            Err(refusal) => self.next = Some(Step::Answer(refusal)),
        }
    }

    /// The session record was read (after [`StoreOp::LoadSession`]).
    pub fn handle_session(
        &mut self,
        guard: &mut Guard,
        record: Result<Option<SessionRecord>, StoreUnavailable>,
    ) {
        self.looked_up = true;
        match record {
            Ok(Some(rec)) => {
                let rec = std::sync::Arc::new(rec);
                // How long the store still keeps it is not known here: it is touched now,
                // then every refresh period while in use here.
                self.keep(rec.session());
                guard.ledger.remember(rec.clone(), self.at);
                self.record = Some(rec);
            }
            Ok(None) => {
                if let (Plan::Keyed(_), true) = (&self.plan, guard.config.parts.capability_hash) {
                    // No record anywhere (evicted, expired, or never stored): run, the call
                    // would go without its context's mark, and its answer be stored unmarked
                    // for another context to be served. Answered as the inner server answers
                    // a session it does not know, so the client starts over; a refusal to
                    // retry would be retried forever, since the record does not come back.
                    self.next = Some(Step::Answer(Answer::session_not_found()));
                    return;
                }
            }
            Err(StoreUnavailable) => match &self.plan {
                Plan::Resume { .. } => {
                    // A resume cannot be judged: refuse it for now, forget nothing.
                    let answer = Answer::resume_unavailable(guard.config.retry_after_secs);
                    self.next = Some(Step::Answer(answer));
                    return;
                }
                Plan::Keyed(keyed) => {
                    let id = &keyed.id;
                    // Run without the session's hash, its answer would be stored and sent
                    // unstamped, and the client would refuse a call that ran: refused before
                    // anything is claimed, as when the claim fails.
                    let answer = Answer::store_unavailable(id, guard.config.retry_after_secs);
                    self.next = Some(Step::Answer(answer));
                    return;
                }
                _ => {}
            },
        }
        self.advance(guard);
    }

    /// The key's claim came back (after [`StoreOp::Claim`]).
    pub fn handle_claim(
        &mut self,
        guard: &mut Guard,
        outcome: Result<ClaimOutcome, StoreUnavailable>,
    ) {
        let Plan::Keyed(keyed) = std::mem::replace(&mut self.plan, Plan::Pass) else {
            return;
        };
        let KeyedPlan {
            id,
            claim,
            requests,
            modern,
        } = *keyed;
        let hash = self.record.as_ref().map(|r| r.hash().clone());
        let outcome = match outcome {
            Ok(o) => o,
            Err(StoreUnavailable) => {
                // Never run a keyed call unguarded: the client comes back after the delay.
                // The claim may have been taken though its reply was lost: it is let go
                // (if the store is back), else the re-send would find it held, then lost,
                // for a call that never ran.
                self.ops.push_back(StoreOp::Release {
                    key: claim.key().clone(),
                    token: claim.token().clone(),
                });
                let answer = Answer::store_unavailable(&id, guard.config.retry_after_secs);
                self.next = Some(Step::Answer(answer));
                return;
            }
        };
        match claim_verdict(outcome, &id, hash.as_ref()) {
            ClaimVerdict::Run => {
                let stream = self.session_stream(guard, requests);
                let watch = Watch::new(
                    WatchKind::Keyed {
                        id,
                        key: claim.key().clone(),
                        token: claim.token().clone(),
                        captured: false,
                        lease: claim.lease(),
                        renew_at: None,
                        modern,
                    },
                    hash,
                    stream,
                    guard.config.max_body,
                );
                self.forward(None, watch);
            }
            ClaimVerdict::Answer(answer) => self.next = Some(Step::Answer(answer)),
        }
    }

    /// A body the guard cannot read whole: a keyed call is refused (its key in the header, or
    /// a key's member name in what was read), anything else passes (with its session's hash).
    /// A key named only past the bytes read is not seen: the header carries it for such calls.
    fn too_large(&mut self, guard: &mut Guard, headers: &HeaderMap, read: &[u8]) {
        if guard.config.parts.idempotency {
            if let Some(answer) = Answer::for_unguardable_body(headers, read, true) {
                self.next = Some(Step::Answer(answer));
                return;
            }
        }
        self.plan = if self.session.is_some() {
            Plan::Session {
                requests: RequestIds::unread(),
            }
        } else {
            Plan::Pass
        };
        self.advance(guard);
    }

    /// Decides the next step from what is known; asks for the session record first when the
    /// plan needs it and this guard does not hold it.
    fn advance(&mut self, guard: &mut Guard) {
        let needs_record = !matches!(
            self.plan,
            Plan::Pass | Plan::Initialize { .. } | Plan::Discover { .. }
        );
        if needs_record && !self.looked_up {
            if let Some(sid) = &self.session {
                let every = guard.config.session_refresh;
                match guard.ledger.session_in_use(sid, self.at, every) {
                    Some((rec, due)) => {
                        self.record = Some(rec.clone());
                        self.looked_up = true;
                        if due {
                            let sid = sid.clone();
                            self.keep(&sid);
                        }
                    }
                    None => {
                        self.next = Some(Step::Store(StoreOp::LoadSession(sid.clone())));
                        return;
                    }
                }
            }
        }
        let hash = self.record.as_ref().map(|r| r.hash().clone());
        let max = guard.config.max_body;
        match std::mem::replace(&mut self.plan, Plan::Pass) {
            Plan::Pass => self.next = Some(Step::Pass),
            Plan::Session { requests } => {
                if self.record.is_none() {
                    // A session nobody here knows: the inner server will say what it is.
                    self.next = Some(Step::Pass);
                    return;
                }
                let stream = self.session_stream(guard, requests);
                self.forward(None, Watch::new(WatchKind::Session, hash, stream, max));
            }
            Plan::Initialize {
                id,
                client_capabilities,
            } => {
                let kind = WatchKind::Initialize {
                    id,
                    client_capabilities,
                    session: None,
                    instance: guard.config.instance.clone(),
                    parts: guard.config.parts,
                    done: false,
                    held: 0,
                    at: self.at,
                };
                self.forward(None, Watch::new(kind, None, None, max));
            }
            Plan::Discover { id } => {
                let kind = WatchKind::Discover {
                    id,
                    parts: guard.config.parts,
                    done: false,
                };
                self.forward(None, Watch::new(kind, None, None, max));
            }
            Plan::Keyed(keyed) => {
                self.next = Some(Step::Store(StoreOp::Claim(keyed.claim.clone())));
                self.plan = Plan::Keyed(keyed);
            }
            Plan::Resume { cursor } => self.resume(guard, cursor),
            Plan::Delete => {
                let session = self.session.clone();
                self.forward(
                    None,
                    Watch::new(WatchKind::Delete { session }, None, None, max),
                );
            }
        }
    }

    /// Has the store keep a session's record a full retention from now: the session is in
    /// use, and a record that expired (or was evicted) while it is would leave its responses
    /// without their hash and its resumes refused. A DELETE ends the session instead.
    fn keep(&mut self, sid: &SessionId) {
        if !matches!(self.plan, Plan::Delete) {
            self.ops.push_back(StoreOp::TouchSession(sid.clone()));
        }
    }

    fn forward(&mut self, last_event_id: Option<HeaderValue>, watch: Watch) {
        self.next = Some(Step::Forward(Forward {
            last_event_id,
            watch: Box::new(watch),
        }));
    }

    /// The stream a response of this session's request will be numbered as, when the guard
    /// numbers streams and knows the session.
    fn session_stream(&self, guard: &mut Guard, requests: RequestIds) -> Option<watch::Numbering> {
        if !guard.config.parts.sequenced_event_ids {
            return None;
        }
        let rec = self.record.as_ref()?;
        Some(watch::Numbering::fresh(
            guard.stream_id(),
            rec.session().clone(),
            rec.hash().clone(),
            requests,
        ))
    }

    fn resume(&mut self, guard: &mut Guard, cursor: Option<Cursor>) {
        let Some(sid) = self.session.clone() else {
            self.next = Some(Step::Pass);
            return;
        };
        let stream = cursor.and_then(|c| guard.ledger.stream(c.stream));
        let facts = ResumeFacts {
            session: self.record.as_ref().map(|r| r.hash().clone()),
            cursor: cursor.map(|c| CursorFacts {
                seq: c.seq,
                owned_here: guard.owns(c.stream),
            }),
            stream: stream.map(|log| StreamFacts {
                of_session: log.session() == &sid,
                head: log.head(),
                earliest: log.earliest(),
                broken: log.is_broken(),
                orphans: log.has_orphans(),
                hash: log.hash().clone(),
            }),
        };
        let verdict = authorize_resume(&facts);
        // Authorized implies a known stream and cursor; the inner id must also fit a header.
        let inner = match (verdict, cursor, stream) {
            (Ok(()), Some(c), Some(log)) => log
                .inner_id(c.seq)
                .and_then(|id| HeaderValue::from_bytes(id).ok())
                .map(|v| (c, v))
                .ok_or(RejectReason::EventGap),
            (Ok(()), _, _) => Err(RejectReason::EventGap),
            (Err(reason), _, _) => Err(reason),
        };
        match inner {
            Ok((cursor, inner)) => {
                let issued = stream.map_or(cursor.seq, ledger::StreamLog::head);
                guard.ledger.touch_stream(cursor.stream);
                let numbering = watch::Numbering::resumed(cursor.stream, cursor.seq, issued, sid);
                let hash = self.record.as_ref().map(|r| r.hash().clone());
                let watch = Watch::new(
                    WatchKind::Session,
                    hash,
                    Some(numbering),
                    guard.config.max_body,
                );
                self.forward(Some(inner), watch);
            }
            Err(reason) => self.reject(guard, sid, reason),
        }
    }

    /// Refuses a resume and forgets the session, here and in the store: every later request
    /// of it is answered 404, so the client starts over. A session unknown to both has
    /// nothing to forget.
    fn reject(&mut self, guard: &mut Guard, sid: SessionId, reason: RejectReason) {
        self.next = Some(Step::Answer(Answer::rejected(reason)));
        if reason == RejectReason::UnknownSession {
            // Neither here nor in the store: nothing to forget. Made-up ids cost no scan of
            // the streams, no store write and no tombstone.
            return;
        }
        guard.ledger.forget(&sid, true);
        self.ops.push_back(StoreOp::ForgetSession(sid));
    }
}

/// A seeded splitmix64: the guard's only source of ids.
#[derive(Debug, Clone)]
struct SplitMix(u64);

impl SplitMix {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

#[cfg(test)]
mod tests {
    use http::HeaderName;

    use super::*;

    // | a stream id drawn while a log held here has the same id (its 32 random bits repeat
    // once in ~430k draws with 10,000 logs held) | drawn again: a live log is never replaced |
    #[test]
    fn a_stream_id_is_never_one_still_held() {
        let mut guard = Guard::new(GuardConfig::default(), 1);
        let sid = SessionId::parse(b"s1").unwrap();
        let hash = crate::ids::CapabilityHash::from_stored("sha256:00");
        // With seed 1, draw 294,521 repeats the low bits of draw 285,813.
        for n in 0..300_000 {
            let id = guard.stream_id();
            assert!(guard.ledger.stream(id).is_none(), "draw {n} is held");
            guard
                .ledger
                .open_stream(id, sid.clone(), hash.clone(), RequestIds::none());
        }
    }

    // | a stream id drawn for a request whose head has not come, opened meanwhile by another
    // request that drew it too | drawn again when the head comes: the other's log stays |
    #[test]
    #[allow(clippy::disallowed_methods)] // A test's own start of time.
    fn a_stream_id_opened_while_its_request_waited_is_drawn_again() {
        let now = Instant::now();
        let config = GuardConfig::default();
        let first_draw = Guard::new(config.clone(), 1).stream_id();
        let mut guard = Guard::new(config, 1);
        let hash = crate::ids::CapabilityHash::from_stored("sha256:00");
        let record = SessionRecord::new(
            SessionId::parse(b"s1").unwrap(),
            guard.config.instance.clone(),
            hash.clone(),
            "2025-11-25".into(),
        );
        guard.ledger.remember(std::sync::Arc::new(record), now);
        let mut headers = HeaderMap::new();
        headers.insert(names::SESSION_ID, HeaderValue::from_static("s1"));
        let mut ex = guard.begin(&Method::POST, &headers, now);
        assert!(matches!(ex.step(), Step::ReadBody { .. }));
        let ping = br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
        ex.handle_body(&mut guard, Body::Complete(ping), &headers);
        let Step::Forward(forward) = ex.step() else {
            panic!("forwarded");
        };
        let mut watch = forward.into_watch();
        // The other request, which drew the same id, opened its stream first.
        let other = SessionId::parse(b"s2").unwrap();
        guard
            .ledger
            .open_stream(first_draw, other.clone(), hash, RequestIds::none());
        let mut head = HeaderMap::new();
        head.insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream"),
        );
        watch.handle_head(&mut guard, StatusCode::OK, &mut head);
        assert_eq!(guard.ledger.stream(first_draw).unwrap().session(), &other);
        assert_eq!(guard.ledger.stream_count(), 2);
    }

    #[test]
    fn the_head_is_read_in_one_pass_as_by_name() {
        for extra in [0, 20] {
            let mut headers = HeaderMap::new();
            for i in 0..extra {
                headers.insert(
                    HeaderName::from_bytes(format!("x-filler-{i}").as_bytes()).unwrap(),
                    HeaderValue::from_static("f"),
                );
            }
            let seen = |h: &HeaderMap| {
                let head = HeadOf::read(h);
                (
                    head.session.cloned(),
                    head.content_length.cloned(),
                    head.idempotency_key,
                    head.last_event_id.cloned(),
                )
            };
            let by_name = |h: &HeaderMap| {
                (
                    h.get(names::SESSION_ID).cloned(),
                    h.get(http::header::CONTENT_LENGTH).cloned(),
                    h.contains_key(names::IDEMPOTENCY_KEY),
                    h.get(names::LAST_EVENT_ID).cloned(),
                )
            };
            assert_eq!(seen(&headers), by_name(&headers));
            headers.insert("accept", HeaderValue::from_static("text/event-stream"));
            headers.append(names::SESSION_ID, HeaderValue::from_static("s-1"));
            headers.append(names::SESSION_ID, HeaderValue::from_static("s-2"));
            headers.append(http::header::CONTENT_LENGTH, HeaderValue::from_static("12"));
            headers.append(http::header::CONTENT_LENGTH, HeaderValue::from_static("13"));
            assert_eq!(seen(&headers), by_name(&headers));
            headers.append(names::IDEMPOTENCY_KEY, HeaderValue::from_static("k"));
            headers.append(names::LAST_EVENT_ID, HeaderValue::from_static("a"));
            headers.append(names::LAST_EVENT_ID, HeaderValue::from_static("b"));
            assert_eq!(seen(&headers), by_name(&headers));
            assert_eq!(seen(&headers).0.unwrap(), "s-1");
        }
    }
}
