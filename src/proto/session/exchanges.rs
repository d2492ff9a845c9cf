//! The exchange table: every HTTP exchange the session asked the driver for, what each is
//! for, what is known of it, and the queue of network actions the driver drains.

use crate::proto::limits::{MAX_ANSWERS_IN_FLIGHT, MAX_QUEUED_ANSWERS};
use std::collections::VecDeque;

use rustc_hash::FxHashMap;

use bytes::Bytes;
use http::header::HeaderMap;

use super::cursors::Observed;
use super::negotiated::{Checks, Negotiated};
use crate::error::{Error, ErrorKind};
use crate::ids::{EventId, SequencedEventId};
use crate::proto::classify::{self, ContentType, Context, HeadFacts, Refusal, MAX_ERROR_BODY};
use crate::proto::{CallId, HttpId, HttpMethod, HttpPurpose, HttpRequest, Transmit};
use crate::sse::{SseDecoder, SseEvent};

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

/// How a success body is to be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Reader {
    Json,
    Sse,
}

impl Reader {
    /// The reader for a body of content type `ct`; `None` for one that has none.
    pub(super) fn of(ct: ContentType) -> Option<Reader> {
        match ct {
            ContentType::Json => Some(Reader::Json),
            ContentType::Sse => Some(Reader::Sse),
            ContentType::Other => None,
        }
    }
}

/// What a response head is to its exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Head {
    /// A second head: ignored.
    Second,
    /// A refusal (not 2xx): its body is read, bounded, to classify it when it ends.
    Refused,
    /// A success: what it means is the session's to read.
    Success,
}

/// What body bytes fed to an exchange came to.
#[derive(Debug)]
pub(super) enum Fed {
    /// Read (an SSE body's complete events are in the caller's buffer).
    Read,
    /// Bytes before the head: ignored.
    BeforeHead,
    /// A refusal's body reached its bound: enough to classify it.
    RefusalRead,
    /// Something in it is unacceptable (too large): the exchange is to be abandoned.
    Broken(Error),
}

/// Where an exchange's reading stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Stage {
    /// No head yet.
    NoHead,
    /// A head whose body is not read.
    Unread,
    Json,
    Sse,
    Refusal,
}

/// What an exchange's body came to when it ended.
#[derive(Debug)]
pub(super) enum Ended {
    /// It ended where it stood (no head, or a body not read).
    Early,
    /// A JSON body, whole.
    Json(Vec<u8>),
    /// An SSE body: its last events are in the caller's buffer.
    Sse,
    /// A refusal's body, now ready to classify.
    Refusal,
}

/// One exchange in flight.
#[derive(Debug)]
pub(super) struct Exchange {
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
    /// The driver reported its end; no abort is owed.
    ended: bool,
    /// What a refused head said, kept for its body's end.
    head: HeadFacts,
    /// A notification's or an answer's body and how many times it was sent, kept so that a
    /// POST that never left can be sent again (nothing else would ever send it).
    resend: Option<(Bytes, u8)>,
}

impl Exchange {
    pub(super) fn kind(&self) -> ExKind {
        self.kind
    }

    /// A notification's or an answer's body, with the times it was sent, to send it again.
    pub(super) fn take_resend(&mut self) -> Option<(Bytes, u8)> {
        self.resend.take()
    }

    /// Whether this is a GET with `Last-Event-ID`.
    pub(super) fn is_resumed(&self) -> bool {
        self.resumed
    }

    /// Whether its stream delivered anything new.
    pub(super) fn made_progress(&self) -> bool {
        self.progress
    }

    /// Whether its request carried a session id.
    pub(super) fn carried_session_id(&self) -> bool {
        self.sent.carried_session_id
    }

    /// Whether its payloads may be JSON-RPC batches.
    pub(super) fn allows_batch(&self) -> bool {
        self.sent.allow_batch
    }

    /// Whether the capability hash of its answer's head is compared.
    pub(super) fn checks_hash(&self) -> bool {
        self.sent.checks.hash
    }

    /// Where its reading stands.
    pub(super) fn stage(&self) -> Stage {
        match &self.body {
            Body::Pending if self.status.is_none() => Stage::NoHead,
            Body::Pending => Stage::Unread,
            Body::Json(_) => Stage::Json,
            Body::Sse(_) => Stage::Sse,
            Body::Error(_) => Stage::Refusal,
        }
    }

    /// Records its response head, once.
    pub(super) fn on_head(&mut self, status: u16, headers: &HeaderMap) -> Head {
        if self.status.is_some() {
            return Head::Second;
        }
        self.status = Some(status);
        if (200..300).contains(&status) {
            return Head::Success;
        }
        // What a refusal means may depend on its body, read (bounded) and classified when it
        // ends.
        self.head = HeadFacts::read(status, headers);
        self.body = Body::Error(Vec::new());
        Head::Refused
    }

    /// Starts reading a success body with `reader`.
    pub(super) fn read(&mut self, reader: Reader, max_event_size: usize) {
        self.body = match reader {
            Reader::Json => Body::Json(Vec::new()),
            Reader::Sse => Body::Sse(Box::new(SseDecoder::new(max_event_size))),
        };
    }

    /// Feeds body bytes: an SSE body's complete events go to `events`; a JSON body grows up to
    /// `max_body`; a refusal's body up to what classifying it needs.
    pub(super) fn feed(&mut self, data: &[u8], max_body: usize, events: &mut Vec<SseEvent>) -> Fed {
        match &mut self.body {
            Body::Pending => Fed::BeforeHead,
            Body::Error(buf) => {
                let room = MAX_ERROR_BODY.saturating_sub(buf.len());
                buf.extend_from_slice(&data[..data.len().min(room)]);
                // Enough to classify: an endless error body must not hold the answer.
                if buf.len() >= MAX_ERROR_BODY {
                    Fed::RefusalRead
                } else {
                    Fed::Read
                }
            }
            Body::Json(buf) => {
                if buf.len().saturating_add(data.len()) > max_body {
                    Fed::Broken(Error::new(
                        ErrorKind::TooLarge,
                        format!("JSON body larger than {max_body} bytes"),
                    ))
                } else {
                    buf.extend_from_slice(data);
                    Fed::Read
                }
            }
            Body::Sse(decoder) => match decoder.feed(data, events) {
                Ok(()) => Fed::Read,
                Err(crate::sse::SseError::TooLarge { max }) => Fed::Broken(Error::new(
                    ErrorKind::TooLarge,
                    format!("SSE event larger than {max} bytes"),
                )),
            },
        }
    }

    /// The driver reported the body's end: no abort is owed any more. An SSE body's last
    /// events go to `events`.
    pub(super) fn end(&mut self, events: &mut Vec<SseEvent>) -> Ended {
        self.ended = true;
        match &mut self.body {
            Body::Pending => Ended::Early,
            Body::Json(buf) => Ended::Json(std::mem::take(buf)),
            Body::Sse(decoder) => {
                decoder.finish(events);
                Ended::Sse
            }
            Body::Error(_) => Ended::Refusal,
        }
    }

    /// The whole JSON body arrived decoded ahead: `true`, and the body is over, when this
    /// exchange reads a JSON body of which nothing was read yet.
    pub(super) fn take_whole_json(&mut self) -> bool {
        let whole = matches!(&self.body, Body::Json(buf) if buf.is_empty());
        if whole {
            self.ended = true;
        }
        whole
    }

    /// Whether this exchange reads an SSE body of which nothing was read yet (so events read
    /// ahead may take its reader's place).
    pub(super) fn reads_fresh_sse(&self) -> bool {
        matches!(&self.body, Body::Sse(decoder) if decoder.is_fresh())
    }

    /// Observes an event of its stream through `cursor` (the stream's cursor, given the
    /// sequenced id that must come next when this exchange checks the sequence), and notes
    /// progress.
    pub(super) fn observe(
        &mut self,
        cursor: impl FnOnce(Option<&mut Option<SequencedEventId>>) -> Observed,
    ) -> Observed {
        let check_sequence = self.sent.checks.sequenced && self.resumed;
        let observed = cursor(check_sequence.then_some(&mut self.expect));
        if let Observed::New { progressed: true } = observed {
            self.progress = true;
        }
        observed
    }

    /// A refused exchange's status and what its refusal means ([`classify::refusal`]);
    /// `None` for one that was not refused.
    pub(super) fn refusal(&self, unavailable_not_processed: bool) -> Option<(u16, Refusal)> {
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
    carried_session_id: bool,
    allow_batch: bool,
    checks: Checks,
}

impl Sent {
    /// An exchange of the session `s` (or of its stand-in, [`Negotiated::unknown`]).
    fn on(s: &Negotiated) -> Self {
        Sent {
            carried_session_id: s.id.is_some(),
            allow_batch: s.version.allows_batch(),
            checks: s.checks,
        }
    }

    /// The DELETE that closes a session: it names the session, and expects no body.
    fn delete() -> Self {
        Sent {
            carried_session_id: true,
            allow_batch: false,
            checks: Checks::default(),
        }
    }
}

/// Answer POSTs: how many are in flight and the bounded queue behind them.
#[derive(Debug, Default)]
struct Answers {
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

    /// Opens the DELETE that closes the session its `headers` name.
    pub(super) fn open_delete(&mut self, headers: HeaderMap) -> HttpId {
        self.open_sent(
            ExKind::Delete,
            HttpMethod::Delete,
            HttpPurpose::Terminate,
            headers,
            None,
            Sent::delete(),
        )
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
        if kind == ExKind::Answer {
            self.answers.in_flight += 1;
        }
        let resend = match kind {
            ExKind::Notify | ExKind::Answer => body.clone().map(|b| (b, 1)),
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

    /// Counts a re-sent notification or answer as sent `times` in all (after
    /// [`Exchanges::open`]).
    pub(super) fn sent_times(&mut self, http: HttpId, times: u8) {
        if let Some((_, sent)) = self.map.get_mut(&http).and_then(|ex| ex.resend.as_mut()) {
            *sent = times;
        }
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

    pub(super) fn get(&self, http: HttpId) -> Option<&Exchange> {
        self.map.get(&http)
    }

    pub(super) fn get_mut(&mut self, http: HttpId) -> Option<&mut Exchange> {
        self.map.get_mut(&http)
    }

    /// The one place an exchange leaves the table, so per-kind counts stay true.
    pub(super) fn remove(&mut self, http: HttpId) -> Option<Exchange> {
        let ex = self.map.remove(&http)?;
        if ex.kind == ExKind::Answer {
            self.answers.in_flight = self.answers.in_flight.saturating_sub(1);
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

    /// Tells the driver to stop an exchange already taken out of the table.
    pub(super) fn abort(&mut self, http: HttpId) {
        self.transmits.push_back(Transmit::Abort(http));
    }

    /// Finishes every exchange but a DELETE in flight.
    pub(super) fn finish_all_but_delete(&mut self) {
        let mut ids: Vec<HttpId> = self
            .map
            .iter()
            .filter(|(_, e)| e.kind != ExKind::Delete)
            .map(|(id, _)| *id)
            .collect();
        // In the order they were opened, so a run replays the same way.
        ids.sort_unstable();
        for id in ids {
            self.finish(id);
        }
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

    /// Forgets the answers queued for a session that is gone: they have nobody to reach.
    pub(super) fn drop_queued_answers(&mut self) {
        self.answers.queue.clear();
    }

    /// Answers dropped because the queue was full.
    pub(super) fn dropped_answers(&self) -> u64 {
        self.answers.dropped
    }

    pub(super) fn poll_transmit(&mut self) -> Option<Transmit> {
        self.transmits.pop_front()
    }
}
