//! The response half of an exchange: the head gains the session's capability hash, SSE ids
//! are numbered `<stream>-<seq>` (an empty one, which resets the client's cursor, passes
//! empty and takes no number), `initialize` and `server/discover` results gain the
//! advertisement, and a keyed call's answer is captured for its key.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use http::header::{HeaderName, CONTENT_ENCODING, CONTENT_TYPE};
use http::{HeaderMap, HeaderValue, StatusCode};
use serde_json::Value;

use super::advertise::{self, Parts};
use super::answer::Answer;
use super::idempotency::{stamp_result, Stamp};
use super::ledger::RequestIds;
use super::records::{SessionRecord, StoreOp, StoredOutcome};
use super::resume::RejectReason;
use super::retry::Retry;
use super::scan;
use super::sse::{Block, Splitter};
use super::{Guard, GuardAccess};
use crate::ids::{
    CapabilityHash, ClaimToken, EventIdText, IdempotencyKey, InstanceId, SessionId, StreamId,
};
use crate::wire::{self, names};

/// Whether a refusal proves the call did not run, so that its key may be claimed again: the
/// statuses a server answers before acting on a request (the client's own list of them), and
/// a 503 that asks to come back later. Any other failure may have come after the call ran: a
/// timeout layer's 408 (tower-http's `TimeoutLayer` answers it once the handler has started),
/// 409, 422, a 503 without `Retry-After` (a handler's own, a gateway's).
fn proves_not_run(status: StatusCode, headers: &HeaderMap) -> bool {
    matches!(
        status.as_u16(),
        301 | 302
            | 307
            | 308
            | 400
            | 401
            | 403
            | 404
            | 405
            | 406
            | 411
            | 413
            | 414
            | 415
            | 417
            | 421
            | 429
            | 431
    ) || (status == StatusCode::SERVICE_UNAVAILABLE
        && headers.contains_key(http::header::RETRY_AFTER))
}

/// Whether an answer to a 2026-07-28 request is a refusal of the request as sent, made before
/// anything ran: its mirrored headers disagree with its body (-32020), or its protocol version
/// is not spoken (-32022). Servers answer them with status 400 (which [`proves_not_run`]) or
/// in a 200 body; the client takes both as never run. A missing capability (-32021) is not
/// among them: in a 200 body it may come from a tool already running (one that found mid-run
/// that the client had not declared what it asked of it), and is stored as the call's
/// answer. With status 400, as a server that checks a tool's required capabilities before
/// running it answers, it lets the key go by its status alone, as any 400 does: the guard,
/// like the client, takes a 400 as sent before anything ran.
fn refused_before_running(message: &Value) -> bool {
    const HEADER_MISMATCH: i64 = -32020;
    const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;
    message
        .get("error")
        .and_then(|e| e.get("code"))
        .and_then(Value::as_i64)
        .is_some_and(|code| code == HEADER_MISMATCH || code == UNSUPPORTED_PROTOCOL_VERSION)
}

/// How the skin reads the response body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyPlan {
    /// Pass it untouched (then call [`Watch::handle_end`] if you like; nothing depends on it).
    Untouched,
    /// Read it whole, up to `limit` bytes, and give it to [`Watch::handle_json`] (or say it
    /// was over the limit with [`Watch::handle_json_overflow`]).
    Json {
        /// The most to read.
        limit: usize,
    },
    /// Feed it chunk by chunk to [`Watch::handle_sse`], sending what it writes as it comes;
    /// hold the head until [`Watch::head_ready`].
    Sse,
}

/// What the skin does with the SSE stream after a chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SseFlow {
    /// Go on.
    Continue,
    /// The inner server replayed something other than what was issued after the client's
    /// cursor: end the client's stream with an error now (what was written so far is true;
    /// nothing after it would be). The stream is marked broken, so a resume of it is refused.
    Abort,
}

/// How a stream's events are numbered.
#[derive(Debug)]
pub(crate) struct Numbering {
    stream: StreamId,
    mode: Mode,
}

#[derive(Debug)]
enum Mode {
    /// A new stream, opened in the ledger when its head passes.
    Fresh {
        open: Option<(SessionId, CapabilityHash, RequestIds)>,
    },
    /// A resumed stream: the inner server's replay must bring `expected` next, and reach
    /// `issued` (the head when the resume was authorized) before the client sees anything,
    /// unless it is long: `held` counts the bytes of it held with the head.
    Resumed {
        expected: u64,
        issued: u64,
        session: SessionId,
        held: usize,
    },
}

impl Numbering {
    pub(crate) fn fresh(
        stream: StreamId,
        session: SessionId,
        hash: CapabilityHash,
        requests: RequestIds,
    ) -> Self {
        Self {
            stream,
            mode: Mode::Fresh {
                open: Some((session, hash, requests)),
            },
        }
    }

    pub(crate) fn resumed(stream: StreamId, cursor: u64, issued: u64, session: SessionId) -> Self {
        Self {
            stream,
            mode: Mode::Resumed {
                expected: cursor + 1,
                issued,
                session,
                held: 0,
            },
        }
    }

    /// A resumed stream whose replay has not yet brought everything issued.
    fn replay_pending(&self) -> bool {
        matches!(self.mode, Mode::Resumed { expected, issued, .. } if expected <= issued)
    }

    /// A resumed stream that holds its head until its replay is proven, and has not held
    /// more than `max` bytes of it yet. A client picks its cursor, so it could ask for a
    /// replay of the whole log: past one event's bound the head goes, and the rest is checked
    /// as it passes (a divergence then cuts the stream and breaks it, instead of a 404).
    fn holds_head(&self, max: usize) -> bool {
        matches!(self.mode, Mode::Resumed { held, .. } if held <= max) && self.replay_pending()
    }

    /// `bytes` more of the replay were held with the head.
    fn held(&mut self, bytes: usize) {
        if let Mode::Resumed { held, .. } = &mut self.mode {
            *held = held.saturating_add(bytes);
        }
    }
}

/// What the response answers, as far as the rules care.
#[derive(Debug)]
pub(crate) enum WatchKind {
    /// Any request of a session (and resumes): the hash on the head, SSE ids numbered.
    Session,
    /// `initialize`: advertise, hash the context, record the session.
    Initialize {
        id: Value,
        client_capabilities: Value,
        session: Option<SessionId>,
        instance: InstanceId,
        parts: Parts,
        done: bool,
        /// Bytes written while the head waits for the result (held with it by the skin).
        held: usize,
        /// When the request came: the record's write counts from then (a little early, so
        /// its touches come a little early, never late).
        at: Instant,
    },
    /// `server/discover`: advertise.
    Discover { id: Value, parts: Parts, done: bool },
    /// A keyed `tools/call` holding its key: capture the answer.
    Keyed {
        id: Value,
        key: IdempotencyKey,
        token: ClaimToken,
        captured: bool,
        lease: Duration,
        renew_at: Option<Instant>,
        /// A 2026-07-28 request: its refusals of the request as sent (-32020, -32022) may
        /// come in a 200 answer, and let the key go. In earlier revisions those codes are any
        /// server's own, which may come after the tool ran.
        modern: bool,
    },
    /// A DELETE of the session.
    Delete { session: Option<SessionId> },
}

/// The response half of one exchange (see the [guard's docs](super)).
///
/// Order: [`Watch::start`] when the request is forwarded; [`Watch::handle_head`]; the body
/// as its [`BodyPlan`] says; [`Watch::finish_head`] right before the head is sent;
/// [`Watch::handle_end`] when the body ends. Drain [`Watch::poll_op`] after each. A watch
/// whose [`Watch::must_drain`] is true must be driven to the end of the inner body even if
/// the client has gone (a keyed call's answer is stored for its key whoever waits for it).
#[derive(Debug)]
pub struct Watch {
    kind: WatchKind,
    hash: Option<CapabilityHash>,
    numbering: Option<Numbering>,
    max: usize,
    splitter: Option<Splitter>,
    passthrough: bool,
    ops: VecDeque<StoreOp>,
    late_headers: Vec<(HeaderName, HeaderValue)>,
    settled: bool,
    /// The head was sent: from then on a failure can only break the stream.
    head_sent: bool,
    /// The resume turned out unprovable before the head was sent: answer this instead.
    refusal: Option<Answer>,
    /// A keyed call's answer whose storing failed, and when to store it again.
    finish_retry: Option<(StoreOp, Instant)>,
    /// How many times storing the answer failed.
    finish_failures: u32,
}

impl Watch {
    pub(crate) fn new(
        kind: WatchKind,
        hash: Option<CapabilityHash>,
        numbering: Option<Numbering>,
        max: usize,
    ) -> Self {
        Self {
            kind,
            hash,
            numbering,
            max,
            splitter: None,
            passthrough: false,
            ops: VecDeque::new(),
            late_headers: Vec::new(),
            settled: false,
            head_sent: false,
            refusal: None,
            finish_retry: None,
            finish_failures: 0,
        }
    }

    /// The request was forwarded at `now`.
    pub fn start(&mut self, now: Instant) {
        if let WatchKind::Keyed {
            lease, renew_at, ..
        } = &mut self.kind
        {
            *renew_at = Some(now + *lease / 3);
        }
    }

    /// When to call [`Watch::handle_timeout`] next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match (&self.kind, &self.finish_retry) {
            (WatchKind::Keyed { renew_at, .. }, _) if !self.settled => *renew_at,
            (WatchKind::Keyed { renew_at, .. }, Some((_, at))) => {
                Some(renew_at.map_or(*at, |r| r.min(*at)))
            }
            _ => None,
        }
    }

    /// The time of [`Watch::poll_timeout`] has come: a keyed call still running renews its
    /// claim's lease; one whose answer could not be stored renews it too, and stores the
    /// answer again when its time has come.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.settled && self.finish_retry.is_none() {
            return;
        }
        if let WatchKind::Keyed {
            key,
            token,
            lease,
            renew_at,
            ..
        } = &mut self.kind
        {
            if renew_at.is_some_and(|at| at <= now) {
                self.ops.push_back(StoreOp::Renew {
                    key: key.clone(),
                    token: token.clone(),
                    lease: *lease,
                });
                *renew_at = Some(now + *lease / 3);
            }
        }
        if self.finish_retry.as_ref().is_some_and(|(_, at)| *at <= now) {
            if let Some((op, _)) = self.finish_retry.take() {
                self.ops.push_back(op);
            }
        }
    }

    /// An operation this watch handed out failed (the store could not be reached). A keyed
    /// call's answer that could not be stored is stored again a few times, waiting longer
    /// each time (see [`Watch::poll_timeout`]), its lease renewed meanwhile: the answer
    /// exists, and a lease let lapse would make its key's outcome unknown for good. Any
    /// other failure changes nothing.
    pub fn handle_op_failed(&mut self, op: StoreOp, now: Instant) {
        let WatchKind::Keyed {
            token,
            lease,
            renew_at,
            ..
        } = &mut self.kind
        else {
            return;
        };
        let ours = matches!(&op, StoreOp::Finish { token: t, .. } if t == token);
        if !ours {
            return;
        }
        let Some(wait) = Retry::finish_wait(self.finish_failures, *lease) else {
            return;
        };
        self.finish_failures += 1;
        renew_at.get_or_insert(now + *lease / 3);
        self.finish_retry = Some((op, now + wait));
    }

    /// Whether a keyed call's answer waits to be stored again.
    pub fn is_storing_again(&self) -> bool {
        self.finish_retry.is_some()
    }

    /// Whether the inner body must be read to its end even when the client has gone.
    pub fn must_drain(&self) -> bool {
        matches!(self.kind, WatchKind::Keyed { .. }) && !self.settled
    }

    /// A store operation to run (none needs a report).
    #[must_use]
    pub fn poll_op(&mut self) -> Option<StoreOp> {
        self.ops.pop_front()
    }

    /// The response head arrived; `headers` may be changed in place. Says how to read the
    /// body.
    pub fn handle_head(
        &mut self,
        guard: &mut Guard,
        status: StatusCode,
        headers: &mut HeaderMap,
    ) -> BodyPlan {
        if let Some(v) = self.hash.as_ref().and_then(|h| h.header_value().cloned()) {
            headers.insert(names::CAPABILITY_HASH, v);
        }
        let ok = status.is_success();
        let body = content_type(headers);
        let max = self.max;
        let plan = match &mut self.kind {
            WatchKind::Session => {
                if ok && body == Content::Sse && self.numbering.is_some() {
                    BodyPlan::Sse
                } else {
                    BodyPlan::Untouched
                }
            }
            WatchKind::Initialize { session, parts, .. } => {
                *session = headers
                    .get(names::SESSION_ID)
                    .and_then(|v| SessionId::parse(v.as_bytes()).ok());
                match (ok, body) {
                    (true, Content::Json) => BodyPlan::Json { limit: max },
                    (true, Content::Sse) => {
                        if let (Some(sid), true) = (session.as_ref(), parts.sequenced_event_ids) {
                            // The hash is known once the result passes; set then.
                            self.numbering = Some(Numbering::fresh(
                                guard.stream_id(),
                                sid.clone(),
                                CapabilityHash::from_stored(""),
                                RequestIds::none(),
                            ));
                        }
                        BodyPlan::Sse
                    }
                    _ => BodyPlan::Untouched,
                }
            }
            WatchKind::Discover { .. } => match (ok, body) {
                (true, Content::Json) => BodyPlan::Json { limit: max },
                (true, Content::Sse) => BodyPlan::Sse,
                _ => BodyPlan::Untouched,
            },
            WatchKind::Keyed { .. } => match (ok, body) {
                (true, Content::Json) => BodyPlan::Json { limit: max },
                (true, Content::Sse) => BodyPlan::Sse,
                (true, Content::Other) => {
                    self.settle(Settle::Lost);
                    BodyPlan::Untouched
                }
                (false, _) => {
                    self.settle(if proves_not_run(status, headers) {
                        Settle::Release
                    } else {
                        Settle::Lost
                    });
                    BodyPlan::Untouched
                }
            },
            WatchKind::Delete { session } => {
                if ok {
                    if let Some(sid) = session.take() {
                        guard.ledger.forget(&sid, false);
                        self.ops.push_back(StoreOp::ForgetSession(sid));
                    }
                }
                BodyPlan::Untouched
            }
        };
        if plan == BodyPlan::Sse {
            self.splitter = Some(Splitter::new(self.max));
            if let Some(Numbering {
                stream,
                mode: Mode::Fresh { open },
            }) = &mut self.numbering
            {
                if let Some((session, hash, requests)) = open.take() {
                    // The id was drawn when the request came, not held then; another request
                    // that drew it since may have opened it first. Nothing is numbered yet:
                    // drawn again, so that a live log is never replaced.
                    if guard.ledger.stream(*stream).is_some() {
                        *stream = guard.stream_id();
                    }
                    guard.ledger.open_stream(*stream, session, hash, requests);
                }
            }
        }
        plan
    }

    /// The whole JSON body (after [`BodyPlan::Json`]); `Some` is the body to send instead.
    pub fn handle_json(&mut self, guard: &mut Guard, body: &[u8]) -> Option<Bytes> {
        let Some(mut message) = self.read_message(body) else {
            self.settle(Settle::Lost);
            return None;
        };
        let changed = self.on_message(guard, &mut message, body, None);
        if matches!(self.kind, WatchKind::Keyed { .. }) && !self.settled {
            // A 200 JSON body that does not answer the call: what ran is unknown.
            self.settle(Settle::Lost);
        }
        changed.map(Bytes::from)
    }

    /// The JSON body was over the limit and passed untouched.
    pub fn handle_json_overflow(&mut self) {
        self.settle(Settle::Lost);
    }

    /// A chunk of the SSE body (after [`BodyPlan::Sse`]): what to send goes to `out`.
    pub fn handle_sse(
        &mut self,
        guard: &mut impl GuardAccess,
        chunk: &[u8],
        out: &mut BytesMut,
    ) -> SseFlow {
        if self.passthrough {
            out.extend_from_slice(chunk);
            return SseFlow::Continue;
        }
        let Some(mut splitter) = self.splitter.take() else {
            out.extend_from_slice(chunk);
            return SseFlow::Continue;
        };
        // Rewritten blocks are about as long as the chunk (ids a few bytes longer).
        out.reserve(chunk.len() + 64);
        let before = out.len();
        let mut flow = SseFlow::Continue;
        let overflow = splitter.feed(chunk, |block| {
            flow = self.on_block(guard, &block, out);
            flow == SseFlow::Continue
        });
        self.splitter = Some(splitter);
        if !self.head_sent {
            if let Some(n) = self.numbering.as_mut() {
                n.held(out.len() - before);
            }
            if let WatchKind::Initialize {
                done: false, held, ..
            } = &mut self.kind
            {
                *held = held.saturating_add(out.len() - before);
                if *held > self.max {
                    // Held with the head, everything before the result would pile up without
                    // bound: the head goes without a hash, the result passes unread (nothing
                    // advertised, no session recorded), as past a block over the bound.
                    self.passthrough = true;
                    if let Some(n) = &self.numbering {
                        let stream = n.stream;
                        guard.with_guard(|g| g.ledger.break_stream(stream));
                    }
                }
            }
        }
        if flow == SseFlow::Abort {
            self.diverged(guard);
            return SseFlow::Abort;
        }
        if let Err(overflow) = overflow {
            if self
                .numbering
                .as_ref()
                .is_some_and(Numbering::replay_pending)
            {
                // A resume not proven yet cannot be proven past a block nobody can read.
                self.diverged(guard);
                return SseFlow::Abort;
            }
            // A block over the bound: nothing after it can be numbered or read.
            out.extend_from_slice(&overflow.pending);
            self.passthrough = true;
            if let Some(n) = &self.numbering {
                let stream = n.stream;
                guard.with_guard(|g| g.ledger.break_stream(stream));
            }
            self.settle(Settle::Lost);
        }
        SseFlow::Continue
    }

    /// Whether the head may be sent. An `initialize` answered with SSE holds it until its
    /// result has passed (the head carries the hash of what the result negotiates); a
    /// resume holds it until the inner server's replay has brought back, in order, every
    /// event issued after the client's cursor (only then is the resume proven).
    pub fn head_ready(&self) -> bool {
        if self.passthrough {
            return true;
        }
        match &self.kind {
            WatchKind::Initialize { done, .. } => *done,
            _ => !self
                .numbering
                .as_ref()
                .is_some_and(|n| n.holds_head(self.max)),
        }
    }

    /// The answer to send instead of the inner response: a resume whose replay failed before
    /// anything was sent (the rejection, the session forgotten). Check once the head is
    /// ready or the body ended.
    pub fn take_refusal(&mut self) -> Option<Answer> {
        self.refusal.take()
    }

    /// Adds what the head learned from the body (the negotiated hash of an `initialize`);
    /// call it right before sending the head.
    pub fn finish_head(&mut self, headers: &mut HeaderMap) {
        self.head_sent = true;
        for (name, value) in self.late_headers.drain(..) {
            headers.insert(name, value);
        }
    }

    /// The inner server's replay is not the stream's continuation: before the head, the
    /// resume is refused (session forgotten); after it, the stream is marked broken so the
    /// next resume of it is refused.
    fn diverged(&mut self, guard: &mut impl GuardAccess) {
        self.passthrough = true;
        self.settle(Settle::Lost);
        let Some(n) = &self.numbering else { return };
        let stream = n.stream;
        guard.with_guard(|g| g.ledger.break_stream(stream));
        if let (false, Mode::Resumed { session, .. }) = (self.head_sent, &n.mode) {
            guard.with_guard(|g| g.ledger.forget(session, true));
            self.ops.push_back(StoreOp::ForgetSession(session.clone()));
            self.refusal = Some(Answer::rejected(RejectReason::EventGap));
        }
    }

    /// The body ended: `clean` unless the inner server failed it. Anything held goes to
    /// `out`.
    pub fn handle_end(&mut self, guard: &mut Guard, clean: bool, out: &mut BytesMut) {
        self.handle_end_with(guard, clean, out);
    }

    /// [`Watch::handle_end`], reaching the guard only when the end changes what it
    /// remembers (most ends leave it as it is).
    pub(crate) fn handle_end_with(
        &mut self,
        guard: &mut impl GuardAccess,
        clean: bool,
        out: &mut BytesMut,
    ) {
        if let Some(splitter) = self.splitter.as_mut() {
            // An incomplete last block is not an event; its bytes pass as they came.
            out.extend_from_slice(&splitter.remainder());
        }
        // A body not read as SSE (a resume answered 503, 405 or JSON) carried nothing of the
        // stream: it neither failed the stream's requests nor ended its replay short, and a
        // resume tried again may still be proven.
        let streamed = self.splitter.is_some();
        if !clean && streamed {
            if let Some(n) = &self.numbering {
                let stream = n.stream;
                guard.with_guard(|g| g.ledger.lose_running(stream));
            }
        }
        if streamed
            && self
                .numbering
                .as_ref()
                .is_some_and(Numbering::replay_pending)
            && !self.passthrough
        {
            // The replay ended before bringing back what was issued: not a resume.
            self.diverged(guard);
        }
        self.passthrough = true;
        self.settle(Settle::Lost);
    }

    /// One SSE block: numbered, read, written.
    fn on_block(
        &mut self,
        guard: &mut impl GuardAccess,
        block: &Block<'_>,
        out: &mut BytesMut,
    ) -> SseFlow {
        let mut seq = None;
        let mut id_out = None;
        let inner = block.id();
        if self.numbering.is_some() && inner.as_deref().is_some_and(<[u8]>::is_empty) {
            return self.on_reset(guard, block, out);
        }
        let data = block.data().filter(|d| self.reads_messages(d));
        let waits = self.waits_for_message();
        // On a fresh stream, the answer an event carries is marked in the step that numbers
        // the event (a resumed one checks the number first).
        let fresh = matches!(
            self.numbering,
            Some(Numbering {
                mode: Mode::Fresh { .. },
                ..
            })
        );
        let mut answer = None;
        if let (Some(d), Some(_), true, false) = (data, &inner, fresh, waits) {
            // Only which request an answer belongs to matters here: read that alone.
            answer = Some(answered_id(d));
        }
        if let (Some(inner), Some(n)) = (inner, self.numbering.as_mut()) {
            let stream = n.stream;
            // Once a replay is proven, a message is new whatever its id: an inner server that
            // reuses its event ids (every id its session's, say) sends new events under ids
            // already numbered. Taken for the events before the cursor, they would be dropped
            // and the answers they carry never sent. An event with no message (the priming
            // event a server sends again with the cursor's id) is still dropped: nothing in it
            // is lost.
            let message = block.data().is_some_and(|d| !d.is_empty());
            let anew_below = match n.mode {
                // Every event of a fresh stream is a new one, whatever its id: the extension
                // numbers each event one past the last, so an id the inner server uses again
                // (the same id on every event, as some servers write) never takes the
                // client's cursor back.
                Mode::Fresh { .. } => u64::MAX,
                Mode::Resumed {
                    expected, issued, ..
                } if message && expected > issued => expected,
                Mode::Resumed { .. } => 0,
            };
            let at = guard.with_guard(|g| match &answer {
                Some(Some(id)) => g.ledger.record_answer(stream, &inner, id, anew_below),
                _ => g.ledger.record_anew_below(stream, &inner, anew_below),
            });
            let Some(at) = at else {
                // The ledger forgot the stream (evicted, or its session was forgotten): its
                // ids can no longer be numbered truthfully, and a replay not proven yet never
                // will be.
                if n.replay_pending() {
                    return SseFlow::Abort;
                }
                // The ids pass as the inner server wrote them; the messages are still read
                // (a keyed call's answer is still captured).
                self.numbering = None;
                return self.on_block(guard, block, out);
            };
            if let Mode::Resumed { expected, .. } = &mut n.mode {
                if at < *expected {
                    // Issued before the client's cursor: the client has it.
                    return SseFlow::Continue;
                }
                if at > *expected {
                    return SseFlow::Abort;
                }
                *expected += 1;
            }
            seq = Some(at);
            id_out = Some(n.stream.event_id_text(at));
        }
        let mut data_out = None;
        if let Some(data) = data {
            if waits {
                if let Some(mut message) = self.read_message(data) {
                    data_out = self.on_message(guard, &mut message, data, seq);
                }
            } else if let (Some(n), Some(seq), None) = (&self.numbering, seq, &answer) {
                // A resumed stream's answer, once its number was checked.
                if let Some(id) = answered_id(data) {
                    let stream = n.stream;
                    guard.with_guard(|g| g.ledger.answered(stream, &id, seq));
                }
            }
        }
        if id_out.is_none() && data_out.is_none() {
            out.extend_from_slice(block.raw());
        } else {
            let id_out = id_out.as_ref().map(EventIdText::as_bytes);
            block.write_with(id_out, data_out.as_deref(), out);
        }
        SseFlow::Continue
    }

    /// A block whose `id:` is empty, on a numbered stream: the inner server resets its
    /// client's cursor there (no resume point), and the client gets it so, its `id:` empty,
    /// as without the guard. It takes no number; the ledger forgets every position before it
    /// (see its `StreamLog::reset`), and marks the answer it carries, which the client has.
    /// On a resumed stream whose replay is not yet proven, it is none of the events issued
    /// after the cursor (each of those had an id): the replay diverged.
    fn on_reset(
        &mut self,
        guard: &mut impl GuardAccess,
        block: &Block<'_>,
        out: &mut BytesMut,
    ) -> SseFlow {
        let Some(n) = &self.numbering else {
            return SseFlow::Continue;
        };
        if n.replay_pending() {
            return SseFlow::Abort;
        }
        let stream = n.stream;
        let data = block.data().filter(|d| self.reads_messages(d));
        let answer = data.and_then(answered_id);
        guard.with_guard(|g| g.ledger.reset_stream(stream, answer.as_ref()));
        let data_out = match data {
            Some(data) if self.waits_for_message() => self
                .read_message(data)
                .and_then(|mut message| self.on_message(guard, &mut message, data, None)),
            _ => None,
        };
        match data_out {
            // As it came: its `id:` lines, the last of them empty, are the client's to read.
            None => out.extend_from_slice(block.raw()),
            Some(data) => block.write_with(Some(b""), Some(&data), out),
        }
        SseFlow::Continue
    }

    /// A message read for [`Watch::on_message`]. A keyed call's answer nested past the
    /// reader's depth (serde_json's 128 levels) is still read, as far as its capture looks
    /// (see [`shallow`]): it is kept and sent from its text as it came, so its depth does not
    /// matter, and it would otherwise go unstored and its key read as lost.
    fn read_message(&self, data: &[u8]) -> Option<Value> {
        let keyed = matches!(self.kind, WatchKind::Keyed { .. });
        parse_data::<Value>(data).or_else(|| {
            let raw = parse_data::<Box<serde_json::value::RawValue>>(data).filter(|_| keyed)?;
            // Only an object can answer; anything else was unreadable for another reason.
            raw.get().starts_with('{').then(|| shallow(&raw, 2))
        })
    }

    /// Whether something here needs whole messages (to change or keep them), not only which
    /// request an answer belongs to.
    fn waits_for_message(&self) -> bool {
        match &self.kind {
            WatchKind::Initialize { done, .. } | WatchKind::Discover { done, .. } => !done,
            WatchKind::Keyed { captured, .. } => !captured,
            WatchKind::Session | WatchKind::Delete { .. } => false,
        }
    }

    /// Whether an event's data is worth parsing: something here waits for a message.
    fn reads_messages(&self, data: &[u8]) -> bool {
        if data.is_empty() {
            return false;
        }
        match &self.kind {
            WatchKind::Initialize { done, .. } | WatchKind::Discover { done, .. } => !done,
            WatchKind::Keyed { captured, .. } => !captured || self.numbering.is_some(),
            WatchKind::Session => self.numbering.is_some(),
            WatchKind::Delete { .. } => false,
        }
    }

    /// A JSON-RPC message passed, read (`message`) and as it came (`raw`); `seq` is its
    /// event's position on a numbered stream. `Some` is the message to send instead.
    fn on_message(
        &mut self,
        guard: &mut impl GuardAccess,
        message: &mut Value,
        raw: &[u8],
        seq: Option<u64>,
    ) -> Option<String> {
        if !is_answer(message) {
            return None;
        }
        let id = message.get("id").cloned()?;
        if let (Some(n), Some(seq)) = (&self.numbering, seq) {
            let stream = n.stream;
            guard.with_guard(|g| g.ledger.answered(stream, &id, seq));
        }
        let stream = self.numbering.as_ref().map(|n| n.stream);
        match &mut self.kind {
            WatchKind::Initialize {
                id: want,
                client_capabilities,
                session,
                instance,
                parts,
                done,
                at,
                ..
            } if !*done && crate::wire::same_id(want, &id) => {
                *done = true;
                let result = message.get_mut("result")?;
                let parts = match session {
                    Some(_) => *parts,
                    // No session to tie a hash or a stream to: keys only.
                    None => Parts {
                        capability_hash: false,
                        sequenced_event_ids: false,
                        ..*parts
                    },
                };
                if !advertise::advertise_initialize(result, parts) {
                    return None;
                }
                if let (Some(sid), true) = (session.as_ref(), parts.capability_hash) {
                    let version = result
                        .get("protocolVersion")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_owned();
                    let caps = result.get("capabilities").cloned().unwrap_or(Value::Null);
                    let hash = wire::capability_hash(&version, client_capabilities, &caps);
                    if let Some(v) = hash.header_value() {
                        self.late_headers.push((names::CAPABILITY_HASH, v.clone()));
                    }
                    let record =
                        SessionRecord::new(sid.clone(), instance.clone(), hash.clone(), version);
                    let shared = std::sync::Arc::new(record.clone());
                    let at = *at;
                    guard.with_guard(|g| {
                        if let Some(stream) = stream {
                            g.ledger.set_stream_hash(stream, hash);
                        }
                        g.ledger.remember(shared, at);
                    });
                    self.ops.push_back(StoreOp::PutSession(record));
                }
                Some(message.to_string())
            }
            WatchKind::Discover {
                id: want,
                parts,
                done,
            } if !*done && crate::wire::same_id(want, &id) => {
                *done = true;
                let result = message.get_mut("result")?;
                advertise::advertise_discover(result, *parts).then(|| message.to_string())
            }
            WatchKind::Keyed {
                id: want,
                captured,
                modern,
                ..
            } if !*captured && crate::wire::same_id(want, &id) => {
                *captured = true;
                if *modern && refused_before_running(message) {
                    // The client sends it again corrected, under the same key: it must run
                    // then, not be served this refusal for the key's whole retention.
                    self.settle(Settle::Release);
                    return None;
                }
                // Kept and stamped from the text as it came: its numbers as written.
                let raw = String::from_utf8_lossy(raw);
                let stamp = self.hash.as_ref().map(|h| stamp_result(&raw, h));
                let kept = match &stamp {
                    Some(Stamp::Marked(text)) => Some(text.as_str()),
                    // A result without its context's mark is never stored: its replay under
                    // another context would be taken for that context's answer.
                    Some(Stamp::Unmarkable) => None,
                    Some(Stamp::NotAResult) | None => Some(&*raw),
                };
                match kept.and_then(StoredOutcome::from_response) {
                    Some(outcome) => self.settle(Settle::Finish(outcome)),
                    None => self.settle(Settle::Lost),
                }
                match stamp {
                    Some(Stamp::Marked(text)) => Some(text),
                    _ => None,
                }
            }
            _ => None,
        }
    }

    /// Ends a keyed call's hold on its key, once.
    fn settle(&mut self, how: Settle) {
        if self.settled {
            return;
        }
        let WatchKind::Keyed { key, token, .. } = &self.kind else {
            return;
        };
        self.settled = true;
        let (key, token) = (key.clone(), token.clone());
        self.ops.push_back(match how {
            Settle::Finish(outcome) => StoreOp::Finish {
                key,
                token,
                outcome,
            },
            Settle::Release => StoreOp::Release { key, token },
            Settle::Lost => StoreOp::MarkLost { key, token },
        });
    }
}

/// Whether a message is an answer as a client takes one (this crate's client; the SDKs take
/// no more): `jsonrpc` "2.0", no `method` (with one it is a request or a notification to the
/// client, whatever else it holds), and a `result`, or an `error` object, not both. Taken
/// for a keyed call's answer, anything else with its id (a server's request reusing it, a
/// message the client drops) would be stored and served to every re-send in place of the
/// answer the client took.
fn is_answer(message: &Value) -> bool {
    message.get("jsonrpc").and_then(Value::as_str) == Some("2.0")
        && message.get("method").is_none()
        && match (message.get("result"), message.get("error")) {
            (Some(_), None) => true,
            (None, Some(error)) => error.is_object(),
            _ => false,
        }
}

/// An event's data read as JSON. Read as bytes (the parser checks its strings' UTF-8 as it
/// goes); data that is not UTF-8 is read as an SSE client decodes it, each bad sequence
/// replaced, so that an answer is recognized as any client would see it.
fn parse_data<T: serde::de::DeserializeOwned>(data: &[u8]) -> Option<T> {
    match serde_json::from_slice(data) {
        Ok(value) => Some(value),
        Err(_) if std::str::from_utf8(data).is_err() => {
            serde_json::from_str(&String::from_utf8_lossy(data)).ok()
        }
        Err(_) => None,
    }
}

/// A JSON value as a `Value` when the reader can hold it; else, for an object and `levels`
/// above 0, its members so read one level down, and `null` in place of what is still too
/// deep. Raw values are read without recursion, whatever their depth. A keyed call's capture
/// reads only the top level and the `error`'s (its id, which answer member it has, the
/// error's code), so a result nested too deep stands as `null`, never sent: the message
/// goes out from its text.
fn shallow(raw: &serde_json::value::RawValue, levels: u8) -> Value {
    type Members<'a> =
        std::collections::BTreeMap<std::borrow::Cow<'a, str>, &'a serde_json::value::RawValue>;
    if let Ok(value) = serde_json::from_str(raw.get()) {
        return value;
    }
    match levels
        .checked_sub(1)
        .and_then(|below| Some((below, serde_json::from_str::<Members<'_>>(raw.get()).ok()?)))
    {
        Some((below, members)) => members
            .into_iter()
            .map(|(name, value)| (name.into_owned(), shallow(value, below)))
            .collect(),
        None => Value::Null,
    }
}

/// The id of the answer an event's data carries, if it carries one: a message a client takes
/// for an answer, as [`is_answer`] tells one (`jsonrpc` "2.0", no `method`, a `result`, or
/// an `error` object, not both). It marks its request answered on the stream, so that a
/// resume of a stream the inner server failed is refused only when it owes the client an
/// answer: taken for an answer, a message the client ignores would have such a resume
/// authorized, the client left waiting for an answer no replay brings; passed over, an
/// answer the client took would have it refused, the session forgotten. Read by its members
/// when they are plain, and only as far as a `result` that is not `null` (the rest of the
/// answer is its client's to read: a member after it, a `method` or an `error` that would
/// make the message no answer, is not looked for); anything else is read whole. What cannot
/// be read plainly is read by the deserializer.
fn answered_id(data: &[u8]) -> Option<Value> {
    if let Some(id) = plain_answer_id(data) {
        return Some(id);
    }
    let (mut id, mut twice, mut stopped) = (None, false, false);
    let (mut version, mut method, mut result, mut error) = (false, false, false, None);
    let answers = |id: bool, version: bool, method: bool, result: bool, error: Option<bool>| {
        id && version
            && !method
            && match (result, error) {
                (true, None) => true,
                (false, Some(object)) => object,
                _ => false,
            }
    };
    let read = scan::object(data, scan::first(data), |key, at| {
        let mut end = None;
        // Only a result that is not `null` stops the reading: an error, or a `null`, is
        // short to read past, and an `error` after it would make the message no answer.
        let mut big_result = false;
        match key {
            b"id" => {
                end = Some(scan::skip(data, at)?);
                twice |= id.replace(&data[at..end?]).is_some();
            }
            b"jsonrpc" => {
                end = Some(scan::skip(data, at)?);
                let value = &data[at..end?];
                version = match scan::plain_bytes(value) {
                    Some(text) => text == b"2.0",
                    // A string written with escapes is read the long way.
                    None if value.starts_with(b"\"") => return None,
                    None => false,
                };
            }
            b"method" => method = true,
            b"result" => {
                result = true;
                big_result = !data[at..].starts_with(b"null");
            }
            // An error is one only as an object.
            b"error" => error = Some(data[at..].starts_with(b"{")),
            _ => {}
        }
        // Stopping is a `None` too, told from a give-up by `stopped`. The answer's own
        // member is not read when it comes last (as it does from most servers).
        stopped = big_result && answers(id.is_some(), version, method, result, error);
        if stopped {
            return None;
        }
        end.or_else(|| scan::skip(data, at))
    });
    let whole = read.is_some_and(|end| scan::at_end(data, end).is_some());
    if stopped || whole {
        if twice || !(stopped || answers(id.is_some(), version, method, result, error)) {
            // An id given twice (the deserializer refuses it); or read whole and no answer.
            return None;
        }
        // An id written with escapes (or not a string or number) is read the long way.
        if let Some(Some(id)) = id.map(scan::id) {
            return Some(id);
        }
    }
    let probe = parse_data::<AnswerProbe>(data)?;
    let answers = probe.jsonrpc.as_ref().and_then(Value::as_str) == Some("2.0")
        && probe.method.is_none()
        && match (probe.result, probe.error) {
            (Some(_), None) => true,
            (None, Some(error)) => error.is_object(),
            _ => false,
        };
    probe.id.filter(|_| answers)
}

/// [`answered_id`] of an answer written as most servers write one: `jsonrpc`, then a plain
/// `id`, then a `result` that is not `null`, no space between; the members are read as the
/// general reading would read them, without walking them one by one. `None`: read it the
/// general way.
fn plain_answer_id(data: &[u8]) -> Option<Value> {
    let rest = data.strip_prefix(br#"{"jsonrpc":"2.0","id":"#)?;
    let end = scan::skip(rest, 0)?;
    let result = rest[end..].strip_prefix(br#","result":"#)?;
    if result.starts_with(b"null") {
        return None;
    }
    scan::id(&rest[..end])
}

/// An answer's id and the members that tell an answer (see [`is_answer`]), its body skipped.
/// A member given as `null` is present (a `null` result is a result, a `null` error makes a
/// message with a result no answer), as a client reads it.
#[derive(serde::Deserialize)]
struct AnswerProbe {
    #[serde(default)]
    id: Option<Value>,
    #[serde(default)]
    jsonrpc: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    method: Option<serde::de::IgnoredAny>,
    #[serde(default, deserialize_with = "present")]
    result: Option<serde::de::IgnoredAny>,
    #[serde(default, deserialize_with = "present")]
    error: Option<Value>,
}

/// A member as present, whatever its value (`null` included).
fn present<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::Deserialize<'de>,
{
    T::deserialize(d).map(Some)
}

enum Settle {
    Finish(StoredOutcome),
    Release,
    Lost,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Content {
    Json,
    Sse,
    Other,
}

fn content_type(headers: &HeaderMap) -> Content {
    let Some(v) = wire::first_header(headers, &CONTENT_TYPE) else {
        return Content::Other;
    };
    // Compressed by the inner app: its bytes are not the events or the JSON they carry, so
    // the body is not read (rewriting it would corrupt it), as a type the guard cannot read.
    if is_encoded(headers) {
        return Content::Other;
    }
    // As most servers write them: no parameters, lower case.
    match v.as_bytes() {
        b"text/event-stream" => return Content::Sse,
        b"application/json" => return Content::Json,
        _ => {}
    }
    let essence = v.as_bytes().split(|b| *b == b';').next().unwrap_or(b"");
    let essence = essence.trim_ascii();
    if essence.eq_ignore_ascii_case(b"application/json") {
        Content::Json
    } else if essence.eq_ignore_ascii_case(b"text/event-stream") {
        Content::Sse
    } else {
        Content::Other
    }
}

/// Whether the body has a `Content-Encoding` other than `identity`.
pub(super) fn is_encoded(headers: &HeaderMap) -> bool {
    headers.get_all(CONTENT_ENCODING).iter().any(names_a_coding)
}

/// Whether one `Content-Encoding` value names a coding other than `identity`.
pub(super) fn names_a_coding(value: &http::HeaderValue) -> bool {
    value.as_bytes().split(|b| *b == b',').any(|coding| {
        let coding = coding.trim_ascii();
        !coding.is_empty() && !coding.eq_ignore_ascii_case(b"identity")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_is_read_only_when_it_is_not_encoded() {
        let head = |pairs: &[(&'static str, &'static str)]| {
            let mut h = HeaderMap::new();
            for (name, value) in pairs {
                h.append(*name, HeaderValue::from_static(value));
            }
            h
        };
        let sse = ("content-type", "text/event-stream");
        assert_eq!(content_type(&head(&[sse])), Content::Sse);
        let identity = head(&[sse, ("content-encoding", "Identity")]);
        assert_eq!(content_type(&identity), Content::Sse);
        for coding in ["gzip", "br", "identity, gzip", ""] {
            let mut h = head(&[sse, ("content-encoding", "identity")]);
            h.append(CONTENT_ENCODING, HeaderValue::from_str(coding).unwrap());
            let expected = if coding.is_empty() {
                Content::Sse
            } else {
                Content::Other
            };
            assert_eq!(content_type(&h), expected, "{coding:?}");
        }
        let json = head(&[
            ("content-type", "application/json"),
            ("content-encoding", "gzip"),
        ]);
        assert_eq!(content_type(&json), Content::Other);
    }

    // | an answer nested 200 deep, in its result or its error's data | read to the depth a
    // keyed call's capture looks: the id, the answer member (the deep one `null`), the
    // error's code |
    #[test]
    fn a_message_too_deep_for_a_value_is_read_as_far_as_a_capture_looks() {
        let deep = format!("{}1{}", "[".repeat(200), "]".repeat(200));
        let result = format!(r#"{{"id":7,"result":{{"content":{deep}}}}}"#);
        let raw: Box<serde_json::value::RawValue> = serde_json::from_str(&result).unwrap();
        assert!(serde_json::from_str::<Value>(&result).is_err());
        let read = shallow(&raw, 2);
        assert_eq!(read["id"], 7);
        assert_eq!(read["result"], serde_json::json!({"content": null}));
        let error = format!(r#"{{"id":7,"error":{{"code":-32020,"data":{deep}}}}}"#);
        let raw: Box<serde_json::value::RawValue> = serde_json::from_str(&error).unwrap();
        let read = shallow(&raw, 2);
        assert!(refused_before_running(&read));
        assert_eq!(read["error"]["data"], Value::Null);
    }

    #[test]
    fn event_data_is_read_as_an_sse_client_decodes_it() {
        let probe: AnswerProbe = parse_data(br#"{"jsonrpc":"2.0","id":7,"result":{}}"#).unwrap();
        assert_eq!(probe.id, Some(Value::from(7)));
        assert!(probe.result.is_some() && probe.error.is_none());
        // A bad UTF-8 sequence in a string: the answer is still an answer, the sequence
        // replaced (as an SSE client's decoder replaces it).
        let bad = b"{\"id\":\"a\xff\",\"result\":{\"text\":\"\xc3\"}}";
        let value: Value = parse_data(bad).unwrap();
        assert_eq!(value["id"], "a\u{fffd}");
        assert_eq!(value["result"]["text"], "\u{fffd}");
        assert!(parse_data::<Value>(b"{\"id\":").is_none());
    }

    // | event data of every shape | an answer exactly when a client takes it for one
    // (`is_answer`), whichever way it is read (at once, member by member, by the
    // deserializer): never a message the client ignores, never not an answer it takes |
    #[test]
    fn an_answer_is_told_as_a_client_tells_it() {
        let cases: [(&[u8], Option<Value>); 21] = [
            (
                br#"{"jsonrpc":"2.0","id":7,"result":{"a":"}"}}"#,
                Some(7.into()),
            ),
            (
                br#"{"error":{"code":1},"id":"x","jsonrpc":"2.0"}"#,
                Some("x".into()),
            ),
            (
                br#"{"jsonrpc":"2.0","id":"a\"b","result":1}"#,
                Some("a\"b".into()),
            ),
            (br#"{"id":7,"jsonrpc":"2.0","result":null}"#, Some(7.into())),
            (
                br#"{"id":7,"jsonrpc":"2.0","result":null,"error":{}}"#,
                None,
            ),
            (
                br#"{"id":7,"jsonrpc":"2.0","result":null,"error":null}"#,
                None,
            ),
            (br#"{"id":7,"jsonrpc":"2.0","error":null}"#, None),
            (br#"{"id":7,"jsonrpc":"2.0","error":"boom"}"#, None),
            (br#"{"id":7,"jsonrpc":"2.0","error":{},"result":1}"#, None),
            (br#"{"id":7,"method":"ping","jsonrpc":"2.0"}"#, None),
            (
                br#"{"id":7,"method":"ping","jsonrpc":"2.0","result":{}}"#,
                None,
            ),
            (br#"{"id":7,"result":{}}"#, None),
            (br#"{"jsonrpc":"1.0","id":7,"result":{}}"#, None),
            (
                br#"{"jsonrpc":"2\u002e0","id":7,"result":{}}"#,
                Some(7.into()),
            ),
            (br#"{"jsonrpc":"2.0","result":{}}"#, None),
            (br#"{"jsonrpc":"2.0","id":7,"id":8,"result":{}}"#, None),
            (br#"{"jsonrpc":"2.0","id":"\u0037","error":7}"#, None),
            (
                br#"{"jsonrpc":"2.0","id":{"x":1},"result":{}}"#,
                Some(serde_json::json!({"x":1})),
            ),
            // Known by its members up to the answer's: the rest is the client's to read.
            (br#"{"jsonrpc":"2.0","id":7,"result":{}"#, Some(7.into())),
            (
                br#"{"jsonrpc":"2.0","result":[1,{"id":2}],"id":9}"#,
                Some(9.into()),
            ),
            (br#"{"jsonrpc":"2.0","id":7,"params":{"result":1}}"#, None),
        ];
        for (data, want) in &cases {
            assert_eq!(
                answered_id(data),
                *want,
                "{}",
                String::from_utf8_lossy(data)
            );
        }
        // As most servers write them: read at once, alike.
        let plain: [(&[u8], Option<Value>); 11] = [
            (
                br#"{"jsonrpc":"2.0","id":2,"result":{"a":1}}"#,
                Some(2.into()),
            ),
            (
                br#"{"jsonrpc":"2.0","id":"x-1","error":{"code":1}}"#,
                Some("x-1".into()),
            ),
            (br#"{"jsonrpc":"2.0","id":7,"result":null}"#, Some(7.into())),
            (
                br#"{"jsonrpc":"2.0","id":7,"result":null,"error":{}}"#,
                None,
            ),
            (br#"{"jsonrpc":"2.0","id":7,"error":"boom"}"#, None),
            (br#"{"jsonrpc":"2.0","id":7,"error":null}"#, None),
            (
                br#"{"jsonrpc":"2.0","id":"a\"b","result":1}"#,
                Some("a\"b".into()),
            ),
            (
                br#"{"jsonrpc":"2.0","id":1.5,"result":1}"#,
                Some(1.5.into()),
            ),
            (br#"{"jsonrpc":"2.0","id":null,"result":1}"#, None),
            (br#"{"jsonrpc":"2.0","id":3,"method":"x","result":1}"#, None),
            (br#"{"jsonrpc":"2.0","id":3,"id":4,"result":1}"#, None),
        ];
        for (data, want) in &plain {
            assert_eq!(
                answered_id(data),
                *want,
                "{}",
                String::from_utf8_lossy(data)
            );
        }
        // Whatever the shape, the reading agrees with the one a keyed call's capture makes
        // (of a message with one id: without one it answers no request, and one given twice
        // is refused by the deserializer, which reads none).
        for (data, want) in cases.iter().chain(&plain) {
            let ids = String::from_utf8_lossy(data).matches(r#""id":"#).count();
            let message = serde_json::from_slice::<Value>(data)
                .ok()
                .filter(|_| ids == 1);
            if let Some(message) = message.filter(|m| !m["id"].is_null()) {
                assert_eq!(
                    is_answer(&message),
                    want.is_some(),
                    "{}",
                    String::from_utf8_lossy(data)
                );
            }
        }
    }
}
