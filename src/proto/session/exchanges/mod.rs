//! The exchange table: every HTTP exchange the session asked the driver for, what each is
//! for, what is known of it (its body as far as it was read), and the queue of network actions
//! the driver drains.
//!
//! What the driver reports of an exchange (its head, body, end or failure) is read in
//! `responses`, the one place that looks inside an exchange: the record, its body and what
//! its end came to stay private to this module, and the rest of the session sees only what
//! kind of exchange is in flight.

mod responses;

use crate::proto::limits::{
    MAX_ANSWERS_IN_FLIGHT, MAX_NOTIFICATIONS_IN_FLIGHT, MAX_OPEN_SERVER_REQUESTS,
    MAX_QUEUED_ANSWERS,
};
use std::collections::{HashSet, VecDeque};

use rustc_hash::FxHashMap;

use bytes::Bytes;
use http::header::HeaderMap;

use super::cursors::Observed;
use super::negotiated::Negotiated;
use crate::error::{Error, ErrorKind};
use crate::ids::{CapabilityHash, EventId, RequestId, SequencedEventId};
use crate::proto::classify::{self, ContentType, Context, HeadFacts, Refusal, MAX_ERROR_BODY};
use crate::proto::{CallId, HttpId, HttpMethod, HttpPurpose, HttpRequest, Transmit};
use crate::sse::{SseDecoder, SseEvent};
use tracing::{debug, warn};

/// How many times a notification or an answer is sent at most while its POST may never have
/// left (each time, a pooled connection whose runtime is gone is dropped from the pool: the
/// next send takes another, or a new one).
const MAX_SENDS_UNSENT: u8 = 3;

/// What an exchange is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ExKind {
    Initialize,
    /// `server/discover`: the modern handshake, or a probe for the era.
    Discover,
    Initialized,
    /// A call's POST.
    Post(CallId),
    /// A GET with `Last-Event-ID` resuming a call's stream.
    Resume(CallId),
    /// The standalone GET stream (fresh or resumed).
    Listen,
    /// A notification POST (the app's, or `notifications/cancelled`).
    Notify,
    /// A POST answering a server request; bounded by `MAX_ANSWERS_IN_FLIGHT`.
    Answer,
    Delete,
}

/// How the body is being read.
#[derive(Debug)]
enum Body {
    /// No head yet, or a head whose body is not read.
    Pending,
    Json(Vec<u8>),
    Sse(Box<SseDecoder>),
    /// A refusal's body, read only to classify it (bounded).
    Error(Vec<u8>),
}

/// What body bytes fed to an exchange came to.
#[derive(Debug)]
enum Fed {
    /// Read (an SSE body's complete events are in the caller's buffer), or ignored (bytes
    /// before the head, or for an exchange no longer in the table).
    Read,
    /// A refusal's body reached its bound, enough to classify it: the exchange is out of the
    /// table and the driver told to stop it.
    Refused(Box<Exchange>),
    /// Something in it is unacceptable (too large): the exchange is to be abandoned.
    Broken(Error),
}

/// What an exchange's body came to when it ended, cleanly or not.
#[derive(Debug)]
enum Ended {
    /// Before any head: a notification's or an answer's body and headers, with the times it
    /// was sent, to send it again.
    NoHead {
        resend: Option<(Bytes, HeaderMap, u8)>,
    },
    /// After a head whose body was not read.
    Unread,
    /// A JSON body, as much of it as came.
    Json(Vec<u8>),
    /// An SSE body: on a clean end, its last events are in the caller's buffer.
    Sse,
    /// A refusal's body, now ready to classify.
    Refusal,
}

/// One exchange in flight.
#[derive(Debug)]
struct Exchange {
    kind: ExKind,
    sent: Sent,
    status: Option<u16>,
    body: Body,
    /// A GET with `Last-Event-ID`.
    resumed: bool,
    /// Delivered anything new.
    progress: bool,
    /// The sequenced id that must come next on a resumed stream.
    expect: Option<SequencedEventId>,
    /// The driver reported its end or its failure; no abort is owed.
    ended: bool,
    /// What a refused head said, kept for its body's end.
    head: HeadFacts,
    /// A notification's or an answer's body, its headers and how many times it was sent,
    /// kept so that a POST that never left can be sent again (nothing else would ever send
    /// it) as it was first sent: a modern request's headers mirror its body, and a server
    /// refuses one without them.
    resend: Option<(Bytes, HeaderMap, u8)>,
}

impl Exchange {
    fn kind(&self) -> ExKind {
        self.kind
    }

    /// The session generation it was sent on.
    fn generation(&self) -> u64 {
        self.sent.generation
    }

    /// Whether this is a GET with `Last-Event-ID`.
    fn is_resumed(&self) -> bool {
        self.resumed
    }

    /// Whether its stream delivered anything new.
    fn made_progress(&self) -> bool {
        self.progress
    }

    /// Whether its request carried a session id.
    fn carried_session_id(&self) -> bool {
        self.sent.carried_session_id
    }

    /// Whether its payloads may be JSON-RPC batches.
    fn allows_batch(&self) -> bool {
        self.sent.allow_batch
    }

    /// Whether the head `headers` of its answer carries the capability hash `expected` (that
    /// of the session it was sent on), or need not: its session does not check the hash.
    fn hash_matches(&self, headers: &HeaderMap, expected: Option<&CapabilityHash>) -> bool {
        classify::hash_matches(self.sent.checks.hash, headers, expected)
    }

    /// A refused exchange's status and what its refusal means ([`classify::refusal`]);
    /// `None` for one that was not refused.
    fn refusal(&self, unavailable_not_processed: bool) -> Option<(u16, Refusal)> {
        let Body::Error(body) = &self.body else {
            return None;
        };
        let status = self.status.unwrap_or(0);
        let context = Context {
            carried_session_id: self.sent.carried_session_id,
            extension: self.sent.checks.rejections,
            unavailable_not_processed,
        };
        Some((status, classify::refusal(status, &self.head, body, context)))
    }
}

/// How an exchange is sent: the facts fixed at send time.
#[derive(Debug, Clone, Copy)]
struct Sent {
    /// The session generation it was sent on: what arrives on it or befalls it after a new
    /// session began is the old session's, not the new one's.
    generation: u64,
    carried_session_id: bool,
    allow_batch: bool,
    checks: Checks,
}

/// The resume-safety checks in force on one exchange: those of the session it was sent on,
/// fixed at send time so a re-initialization in the meantime cannot switch them off.
#[derive(Debug, Clone, Copy, Default)]
struct Checks {
    /// Compare the capability hash of the answer's head.
    hash: bool,
    /// Require contiguous sequenced ids on a resumed stream.
    sequenced: bool,
    /// Read the extension's rejection marker on a 404 as the server's explicit rejection:
    /// the session negotiated the extension. Without it the marker proves nothing.
    rejections: bool,
}

impl Sent {
    /// An exchange of the session `s` (or of its stand-in, [`Negotiated::unknown`]).
    fn on(s: &Negotiated) -> Self {
        Sent {
            generation: s.generation,
            carried_session_id: s.id.is_some(),
            allow_batch: s.version.allows_batch(),
            checks: match s.checked_ext() {
                Some(e) => Checks {
                    hash: e.capability_hash,
                    sequenced: e.sequenced_event_ids,
                    rejections: true,
                },
                None => Checks::default(),
            },
        }
    }

    /// The DELETE that closes the session of `generation`: it names the session, and expects
    /// no body.
    fn delete(generation: u64) -> Self {
        Sent {
            generation,
            carried_session_id: true,
            allow_batch: false,
            checks: Checks::default(),
        }
    }
}

/// Whether a server request could be held open for the app's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hold {
    /// Held: the app answers it with `Session::respond`.
    Held,
    /// A request of this session with the same id waits for its answer already: one answer
    /// per id.
    AlreadyOpen,
    /// Too many wait already ([`MAX_OPEN_SERVER_REQUESTS`]).
    Full,
}

/// The server requests this session owes an answer, and the answer POSTs: how many are in
/// flight and the bounded queue behind them.
#[derive(Debug, Default)]
struct Answers {
    /// Ids of the server's requests handed to the app and not answered yet. The server picks
    /// them (a hashed set that a chosen id cannot degrade), and they are this session's only:
    /// the next session's server numbers its requests anew.
    open: HashSet<RequestId>,
    in_flight: usize,
    queue: VecDeque<Bytes>,
    dropped: u64,
}

/// The exchange table and the driver's action queue.
#[derive(Debug, Default)]
pub(super) struct Exchanges {
    /// Keyed by ids this session issues: a fast hash is safe.
    map: FxHashMap<HttpId, Exchange>,
    next: u64,
    transmits: VecDeque<Transmit>,
    answers: Answers,
    /// The app's notifications being POSTed.
    notifying: usize,
}

impl Exchanges {
    /// Opens an exchange of `session` (what it negotiated fixes what its answer is checked
    /// for): records it and queues the request for the driver.
    pub(super) fn open(
        &mut self,
        kind: ExKind,
        method: HttpMethod,
        purpose: HttpPurpose,
        headers: HeaderMap,
        body: Option<Bytes>,
        session: &Negotiated,
    ) -> HttpId {
        self.open_sent(kind, method, purpose, headers, body, Sent::on(session))
    }

    /// Opens, on `session`, the POST of a message whose answer nothing reads: a notification,
    /// or a modern request answered with an empty acknowledgement (`tasks/update`,
    /// `tasks/cancel`). It counts among the notifications in flight, and is sent again as one
    /// if it may never have left.
    pub(super) fn open_notify(
        &mut self,
        headers: HeaderMap,
        body: Bytes,
        session: &Negotiated,
    ) -> HttpId {
        self.open(
            ExKind::Notify,
            HttpMethod::Post,
            HttpPurpose::Notify,
            headers,
            Some(body),
            session,
        )
    }

    /// Opens the DELETE that closes the session its `headers` name, of `generation`.
    pub(super) fn open_delete(&mut self, headers: HeaderMap, generation: u64) -> HttpId {
        self.open_sent(
            ExKind::Delete,
            HttpMethod::Delete,
            HttpPurpose::Terminate,
            headers,
            None,
            Sent::delete(generation),
        )
    }

    /// Opens again, on `session`, a notification's or an answer's POST that failed where it
    /// may never have left (a connection that could not be made, or a pooled one whose runtime
    /// is gone): `resend` is what its exchange kept of it ([`Ended::NoHead`]), its body,
    /// headers and the times it was sent. Nothing else would send it, and a second copy is
    /// harmless, so it goes again as it first went, up to [`MAX_SENDS_UNSENT`] times in all;
    /// `false` once it went as many.
    fn post_again(
        &mut self,
        kind: ExKind,
        resend: (Bytes, HeaderMap, u8),
        session: &Negotiated,
    ) -> bool {
        let (body, headers, sent) = resend;
        if sent >= MAX_SENDS_UNSENT {
            return false;
        }
        let http = self.open(
            kind,
            HttpMethod::Post,
            HttpPurpose::Notify,
            headers,
            Some(body),
            session,
        );
        if let Some((_, _, times)) = self.map.get_mut(&http).and_then(|ex| ex.resend.as_mut()) {
            *times = sent + 1;
        }
        true
    }

    /// Opens an exchange sent as `sent` says.
    fn open_sent(
        &mut self,
        kind: ExKind,
        method: HttpMethod,
        purpose: HttpPurpose,
        headers: HeaderMap,
        body: Option<Bytes>,
        sent: Sent,
    ) -> HttpId {
        self.next += 1;
        let id = HttpId(self.next);
        match kind {
            ExKind::Answer => self.answers.in_flight += 1,
            ExKind::Notify => self.notifying += 1,
            _ => {}
        }
        let resend = match kind {
            ExKind::Notify | ExKind::Answer => body.clone().map(|b| (b, headers.clone(), 1)),
            _ => None,
        };
        self.map.insert(
            id,
            Exchange {
                kind,
                sent,
                status: None,
                body: Body::Pending,
                resumed: false,
                progress: false,
                expect: None,
                ended: false,
                head: HeadFacts::default(),
                resend,
            },
        );
        self.transmits.push_back(Transmit::Send(HttpRequest {
            id,
            method,
            purpose,
            headers,
            body,
        }));
        id
    }

    /// Opens a GET stream with `headers`, resuming after `cursor` when there is one (the
    /// headers carry it as `Last-Event-ID`): the sequenced id that follows it is expected.
    pub(super) fn open_stream(
        &mut self,
        kind: ExKind,
        headers: HeaderMap,
        cursor: Option<&EventId>,
        session: &Negotiated,
    ) -> HttpId {
        let purpose = match cursor {
            Some(_) => HttpPurpose::Resume,
            None => HttpPurpose::Listen,
        };
        let http = self.open(kind, HttpMethod::Get, purpose, headers, None, session);
        if let (Some(cursor), Some(ex)) = (cursor, self.map.get_mut(&http)) {
            ex.resumed = true;
            ex.expect = SequencedEventId::of(cursor).map(|s| s.next());
        }
        http
    }

    fn get(&self, http: HttpId) -> Option<&Exchange> {
        self.map.get(&http)
    }

    /// Whether exchange `http` is in flight (not ended, failed or finished).
    pub(super) fn in_flight(&self, http: HttpId) -> bool {
        self.map.contains_key(&http)
    }

    /// The call whose request exchange `http` POSTs, if it is a call's POST.
    pub(super) fn posted_call(&self, http: HttpId) -> Option<CallId> {
        match self.get(http)?.kind {
            ExKind::Post(call) => Some(call),
            _ => None,
        }
    }

    /// Records the response head of exchange `http`, once: its kind when the head is a
    /// success, whose body is the session's to read.
    fn on_head(&mut self, http: HttpId, status: u16, headers: &HeaderMap) -> Option<ExKind> {
        let Some(ex) = self.map.get_mut(&http) else {
            debug!(
                http = http.0,
                "head for an unknown or aborted exchange ignored"
            );
            return None;
        };
        if ex.status.is_some() {
            warn!(http = http.0, "second response head ignored");
            return None;
        }
        ex.status = Some(status);
        if (200..300).contains(&status) {
            return Some(ex.kind);
        }
        // What a refusal means may depend on its body, read (bounded) and classified when it
        // ends.
        ex.head = HeadFacts::read(status, headers);
        ex.body = Body::Error(Vec::new());
        None
    }

    /// Starts reading exchange `http`'s success body as its content type `ct` says; one of
    /// neither JSON nor SSE stays unread.
    fn read(&mut self, http: HttpId, ct: ContentType, max_event_size: usize) {
        let Some(ex) = self.map.get_mut(&http) else {
            return;
        };
        ex.body = match ct {
            ContentType::Json => Body::Json(Vec::new()),
            ContentType::Sse => Body::Sse(Box::new(SseDecoder::new(max_event_size))),
            ContentType::Other => return,
        };
    }

    /// Feeds body bytes to exchange `http`: an SSE body's complete events go to `events`; a
    /// JSON body grows up to `max_body`; a refusal's body up to what classifying it needs.
    fn feed(
        &mut self,
        http: HttpId,
        data: &[u8],
        max_body: usize,
        events: &mut Vec<SseEvent>,
    ) -> Fed {
        let Some(ex) = self.map.get_mut(&http) else {
            return Fed::Read;
        };
        match &mut ex.body {
            Body::Pending => warn!(http = http.0, "body bytes before the head ignored"),
            Body::Error(buf) => {
                let room = MAX_ERROR_BODY.saturating_sub(buf.len());
                buf.extend_from_slice(&data[..data.len().min(room)]);
                // Enough to classify: an endless error body must not hold the answer.
                if buf.len() >= MAX_ERROR_BODY {
                    if let Some(ex) = self.remove(http) {
                        self.transmits.push_back(Transmit::Abort(http));
                        return Fed::Refused(Box::new(ex));
                    }
                }
            }
            Body::Json(buf) => {
                if buf.len().saturating_add(data.len()) > max_body {
                    return Fed::Broken(Error::new(
                        ErrorKind::TooLarge,
                        format!("JSON body larger than {max_body} bytes"),
                    ));
                }
                buf.extend_from_slice(data);
            }
            Body::Sse(decoder) => {
                if let Err(crate::sse::SseError::TooLarge { max }) = decoder.feed(data, events) {
                    return Fed::Broken(Error::new(
                        ErrorKind::TooLarge,
                        format!("SSE event larger than {max} bytes"),
                    ));
                }
            }
        }
        Fed::Read
    }

    /// The driver reported the end of exchange `http`'s body, cleanly (an SSE body's last
    /// events go to `events`) or not (`None`: an event cut short is dropped): no abort is owed
    /// any more. `None` for an exchange not in the table.
    fn end(&mut self, http: HttpId, events: Option<&mut Vec<SseEvent>>) -> Option<Ended> {
        let ex = self.map.get_mut(&http)?;
        ex.ended = true;
        Some(match &mut ex.body {
            Body::Pending if ex.status.is_none() => Ended::NoHead {
                resend: ex.resend.take(),
            },
            Body::Pending => Ended::Unread,
            Body::Json(buf) => Ended::Json(std::mem::take(buf)),
            Body::Sse(decoder) => {
                if let Some(events) = events {
                    decoder.finish(events);
                }
                Ended::Sse
            }
            Body::Error(_) => Ended::Refusal,
        })
    }

    /// Whether a body read ahead as `ct` takes the place of exchange `http`'s own reading: the
    /// exchange reads its body that way and has read nothing of it yet. A whole JSON body read
    /// ahead is also the body's end: no abort is owed any more.
    fn takes_ahead(&mut self, http: HttpId, ct: ContentType) -> bool {
        let Some(ex) = self.map.get_mut(&http) else {
            return false;
        };
        match (&ex.body, ct) {
            (Body::Json(buf), ContentType::Json) if buf.is_empty() => {
                ex.ended = true;
                true
            }
            (Body::Sse(decoder), ContentType::Sse) => decoder.is_fresh(),
            _ => false,
        }
    }

    /// Observes an event of exchange `http`'s stream through `cursor` (the stream's cursor,
    /// given the sequenced id that must come next when the exchange checks the sequence, and
    /// whether the exchange is a resume), and notes progress; `None` for an exchange not in
    /// the table.
    fn observe(
        &mut self,
        http: HttpId,
        cursor: impl FnOnce(Option<&mut Option<SequencedEventId>>, bool) -> Observed,
    ) -> Option<Observed> {
        let ex = self.map.get_mut(&http)?;
        let check_sequence = ex.sent.checks.sequenced && ex.resumed;
        let observed = cursor(check_sequence.then_some(&mut ex.expect), ex.resumed);
        if let Observed::New { progressed: true } = observed {
            ex.progress = true;
        }
        Some(observed)
    }

    /// The one place an exchange leaves the table, so per-kind counts stay true.
    fn remove(&mut self, http: HttpId) -> Option<Exchange> {
        let ex = self.map.remove(&http)?;
        match ex.kind {
            ExKind::Answer => self.answers.in_flight = self.answers.in_flight.saturating_sub(1),
            ExKind::Notify => self.notifying = self.notifying.saturating_sub(1),
            _ => {}
        }
        Some(ex)
    }

    /// Drops an exchange the session no longer needs and tells the driver to stop it.
    pub(super) fn finish(&mut self, http: HttpId) {
        if let Some(ex) = self.remove(http) {
            if self.withdraw(http) {
                // Never handed to the driver: there is nothing to stop.
                return;
            }
            if !ex.ended {
                self.transmits.push_back(Transmit::Abort(http));
            }
        }
    }

    /// Whether exchange `http`'s request is still queued for the driver (it has not left).
    pub(super) fn unsent(&self, http: HttpId) -> bool {
        self.transmits
            .iter()
            .any(|t| matches!(t, Transmit::Send(r) if r.id == http))
    }

    /// Takes exchange `http`'s request back out of the driver's queue, if it is still there.
    fn withdraw(&mut self, http: HttpId) -> bool {
        let queued = self
            .transmits
            .iter()
            .position(|t| matches!(t, Transmit::Send(r) if r.id == http));
        queued.and_then(|i| self.transmits.remove(i)).is_some()
    }

    /// Finishes every exchange but a DELETE in flight.
    pub(super) fn finish_all_but_delete(&mut self) {
        self.finish_all_but(&[ExKind::Delete]);
    }

    /// Finishes every exchange but a DELETE and the notifications, queued or in flight: what
    /// closing leaves to go. A notification may be the `notifications/cancelled` of a call the
    /// server runs, which nothing else would stop on a server that keeps the session; each
    /// has its own bound in the driver, and what it is answered is of no consequence.
    pub(super) fn finish_all_but_delete_and_notifications(&mut self) {
        self.finish_all_but(&[ExKind::Delete, ExKind::Notify]);
    }

    /// Finishes every exchange of a kind not in `keep`.
    fn finish_all_but(&mut self, keep: &[ExKind]) {
        let mut ids: Vec<HttpId> = self
            .map
            .iter()
            .filter(|(_, e)| !keep.contains(&e.kind))
            .map(|(id, _)| *id)
            .collect();
        // In the order they were opened, so a run replays the same way.
        ids.sort_unstable();
        for id in ids {
            self.finish(id);
        }
    }

    /// Whether another of the app's notifications may be POSTed now.
    pub(super) fn may_notify(&self) -> bool {
        self.notifying < MAX_NOTIFICATIONS_IN_FLIGHT
    }

    /// A server request is handed to the app, which now owes it an answer.
    fn hold_request(&mut self, id: &RequestId) -> Hold {
        if self.answers.open.contains(id) {
            Hold::AlreadyOpen
        } else if self.answers.open.len() >= MAX_OPEN_SERVER_REQUESTS {
            Hold::Full
        } else {
            self.answers.open.insert(id.clone());
            Hold::Held
        }
    }

    /// The app answered `id`: whether a request of this session was waiting for that answer
    /// (not one of an earlier session's, nor one answered already).
    pub(super) fn release_request(&mut self, id: &RequestId) -> bool {
        self.answers.open.remove(id)
    }

    /// Queues an answer behind those in flight; `false` when the queue is full (dropped).
    pub(super) fn queue_answer(&mut self, body: Bytes) -> bool {
        if self.answers.queue.len() >= MAX_QUEUED_ANSWERS {
            self.answers.dropped += 1;
            return false;
        }
        self.answers.queue.push_back(body);
        true
    }

    /// The next queued answer, when a slot is free.
    pub(super) fn next_answer(&mut self) -> Option<Bytes> {
        if self.answers.in_flight >= MAX_ANSWERS_IN_FLIGHT {
            return None;
        }
        self.answers.queue.pop_front()
    }

    /// The session is gone: the answers queued for its requests have nobody to reach, and
    /// those still owed must not reach the next session, whose server may send a request of
    /// its own under the same id. Returns the ids of those still owed, in order.
    pub(super) fn forget_answers(&mut self) -> Vec<RequestId> {
        self.answers.queue.clear();
        let mut owed: Vec<RequestId> = self.answers.open.drain().collect();
        owed.sort_unstable();
        owed
    }

    /// Answers dropped because the queue was full.
    pub(super) fn dropped_answers(&self) -> u64 {
        self.answers.dropped
    }

    pub(super) fn poll_transmit(&mut self) -> Option<Transmit> {
        self.transmits.pop_front()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use http::HeaderMap;
    use serde_json::{json, Value};

    use crate::proto::{CallId, CallRequest, Era, Output, Session, SessionConfig, Transmit};

    /// A legacy session past its handshake, and the SSE stream of a call it keeps open.
    pub(super) fn call_stream() -> (Session, crate::proto::HttpId, Instant) {
        #[allow(clippy::disallowed_methods)] // the test's origin of time
        let now = Instant::now();
        let config = SessionConfig::default()
            .with_era(Era::Legacy)
            .with_open_listen_stream(false);
        let mut session = Session::new(config, now);
        session.connect(now);
        session.submit(CallId::next(), CallRequest::new("tools/call", None), now);
        let mut call = None;
        while let Some(transmit) = session.poll_transmit() {
            let Transmit::Send(request) = transmit else {
                continue;
            };
            let body: Value = serde_json::from_slice(request.body.as_deref().unwrap_or(b"null"))
                .unwrap_or(Value::Null);
            let mut headers = HeaderMap::new();
            match body["method"].as_str() {
                Some("initialize") => {
                    headers.insert("content-type", "application/json".parse().unwrap());
                    headers.insert("mcp-session-id", "s-1".parse().unwrap());
                    let answer = json!({"jsonrpc": "2.0", "id": body["id"], "result": {
                        "protocolVersion": "2025-11-25", "capabilities": {},
                        "serverInfo": {"name": "scripted", "version": "1"}}});
                    session.handle_head(request.id, 200, &headers, now);
                    session.handle_data(request.id, answer.to_string().as_bytes(), now);
                }
                Some("tools/call") => {
                    headers.insert("content-type", "text/event-stream".parse().unwrap());
                    session.handle_head(request.id, 200, &headers, now);
                    call = Some(request.id);
                    continue;
                }
                _ => session.handle_head(request.id, 202, &headers, now),
            }
            session.handle_end(request.id, now);
        }
        while session.poll_output().is_some() {}
        (session, call.expect("the call is sent"), now)
    }

    /// The ids of the server requests handed out, and the bodies sent, after `event`.
    fn after(event: &Value) -> (Vec<crate::ids::RequestId>, Vec<bytes::Bytes>) {
        let (mut session, stream, now) = call_stream();
        session.handle_data(stream, format!("data: {event}\n\n").as_bytes(), now);
        let mut requests = Vec::new();
        while let Some(output) = session.poll_output() {
            if let Output::ServerRequest(request) = output {
                requests.push(request.id);
            }
        }
        let mut sent = Vec::new();
        while let Some(transmit) = session.poll_transmit() {
            if let Transmit::Send(request) = transmit {
                sent.extend(request.body);
            }
        }
        (requests, sent)
    }

    #[test]
    fn a_server_request_with_a_longer_id_than_a_kilobyte_is_neither_handed_out_nor_echoed() {
        let id = "i".repeat(1024);
        let (requests, _) = after(&json!({"jsonrpc": "2.0", "id": id, "method": "roots/list"}));
        assert_eq!(requests.len(), 1, "a 1 KiB id is a request's");

        let id = "i".repeat(2048);
        let (requests, sent) = after(&json!({"jsonrpc": "2.0", "id": id, "method": "roots/list"}));
        assert!(requests.is_empty(), "handed out: {requests:?}");
        assert!(
            sent.iter().all(|body| body.len() < 1024),
            "an answer echoes the id"
        );
    }
}
