//! The driver's side: what the state behind the session's lock tells telemetry as it applies
//! inputs and drains outputs. It owns every request's span until the request ends, knows
//! which request each HTTP exchange serves (a resume GET names the request it continues by
//! its `Last-Event-ID`), and turns the session's events into span events and metrics.
//! Nothing here reads the session's internals: only its public answers and its outputs.

use std::sync::Arc;
use std::time::Instant;

use opentelemetry::trace::{SpanKind, TraceContextExt, Tracer};
use opentelemetry::{Context, KeyValue};
use rustc_hash::FxHashMap;
use serde_json::Value;

mod attempts;
mod events;

use super::attempt::{Attempt, Cursor};
use super::calls::{CallTrace, Outcome};
use super::{isolate, names, Instrumentation};
use crate::client::http::ExchangeEvent;
use crate::error::{Error, ErrorKind};
use crate::proto::{
    CallId, HttpId, HttpMethod, HttpPurpose, HttpRequest, ProtocolVersion, Session, SessionEvent,
    TransportFailure,
};
use attempts::{read_head, request_id, Head};

/// The driver's telemetry; does nothing when telemetry is disabled.
pub(crate) struct Tracker(Option<Box<Inner>>);

struct Inner {
    inst: Instrumentation,
    max_event_size: usize,
    /// Requests in flight, by the session's id.
    calls: FxHashMap<CallId, Call>,
    /// Exchanges in flight, and whom each serves.
    exchanges: FxHashMap<HttpId, Exchange>,
    /// The context of the call being registered.
    ambient: Option<Context>,
    /// The exchange whose report is being applied.
    current: Option<HttpId>,
    /// The standalone stream: the context its GETs are children of (the `initialize` that
    /// opened the session), and when it was cut.
    listen_parent: Option<Context>,
    /// The latest `initialize`'s span.
    initialize: Option<Context>,
    /// What started the re-initialization under way (the context of the exchange whose
    /// failure the session answered with it): its handshake's parent when it goes out later,
    /// after its backoff, from a timer.
    reinit_parent: Option<Context>,
    listen_cut: Option<Instant>,
    session: SessionClock,
}

struct Call {
    trace: CallTrace,
    /// HTTP requests made for it so far.
    attempts: i64,
    cursor: Arc<Cursor>,
    /// When its stream was cut, until a resume delivers again.
    cut_at: Option<Instant>,
    /// How its last exchange ended.
    last_end: Option<End>,
    /// A resume of its stream was rejected since its last exchange began.
    rejected: bool,
    /// The server asked for input on its stream: the next POST is the next round.
    round: bool,
    /// It became a task: its POSTs are polls.
    polling: bool,
}

impl Call {
    /// A call before its first HTTP request.
    fn new(trace: CallTrace) -> Self {
        Call {
            trace,
            attempts: 0,
            cursor: Arc::default(),
            cut_at: None,
            last_end: None,
            rejected: false,
            round: false,
            polling: false,
        }
    }
}

/// Whom an exchange serves.
#[derive(Clone)]
enum Owner {
    Call(CallId),
    Listen,
    /// A request the session makes itself: the context holding its MCP span, and that span's
    /// parent (what the session does next is that parent's too: the handshake's steps are
    /// siblings).
    Own(Context, Context),
    /// Anything else (an answer to the server, DELETE), under this parent.
    Other(Context),
}

struct Exchange {
    owner: Owner,
    resume: bool,
    status: Option<u16>,
    /// The resumed stream delivered its first byte.
    delivered: bool,
    end: Option<End>,
}

#[derive(Debug, Clone, Copy)]
enum End {
    NotSent,
    Lost,
    Ended,
    TooLarge,
    Answered,
    Refused(u16),
}

/// The current session's start, for `mcp.client.session.duration`.
#[derive(Default)]
struct SessionClock {
    started: Option<(Instant, Option<ProtocolVersion>)>,
    /// The last session id seen and what `mcp.session.id` carries for it.
    id: Option<(String, Option<String>)>,
}

impl Tracker {
    pub(crate) fn new(inst: Option<Instrumentation>, max_event_size: usize) -> Self {
        Tracker(inst.map(|inst| {
            Box::new(Inner {
                inst,
                max_event_size,
                calls: FxHashMap::default(),
                exchanges: FxHashMap::default(),
                ambient: None,
                current: None,
                listen_parent: None,
                initialize: None,
                reinit_parent: None,
                listen_cut: None,
                session: SessionClock::default(),
            })
        }))
    }

    /// Runs `f` on the records, contained ([`Instrumentation::contain`]): these run under
    /// the driver's lock, where an application's span processor panicking would poison it
    /// and stop the client. Once telemetry is off the records go, their spans ended (each
    /// end contained too), and nothing more is recorded.
    fn with<R>(&mut self, f: impl FnOnce(&mut Inner) -> R) -> Option<R> {
        let inner = self.0.as_mut()?;
        let inst = inner.inst.clone();
        let result = inst.contain(|| f(inner));
        if result.is_none() {
            self.shut();
        }
        result
    }

    /// Drops the records, ending their spans, contained.
    fn shut(&mut self) {
        if let Some(inner) = self.0.take() {
            let Inner {
                calls,
                exchanges,
                ambient,
                listen_parent,
                initialize,
                reinit_parent,
                ..
            } = *inner;
            // One at a time: a panic ending one span must not leave the others unended,
            // to end (and panic) later wherever they are dropped.
            for (_, call) in calls {
                isolate(move || drop(call));
            }
            for (_, exchange) in exchanges {
                isolate(move || drop(exchange));
            }
            for cx in [ambient, listen_parent, initialize, reinit_parent]
                .into_iter()
                .flatten()
            {
                isolate(move || drop(cx));
            }
        }
    }

    /// A call was registered under `call`: what the session does for it next is its child.
    pub(crate) fn registered(&mut self, call: CallId, trace: Option<Box<CallTrace>>) {
        let Some(trace) = trace else {
            return;
        };
        if self.0.is_none() {
            // Started before telemetry went off.
            isolate(move || drop(trace));
            return;
        }
        self.with(|inner| {
            inner.ambient = Some(trace.cx.clone());
            inner.calls.insert(call, Call::new(*trace));
        });
    }

    /// The input being applied is done with.
    pub(crate) fn settled(&mut self) {
        self.with(|inner| {
            inner.ambient = None;
            inner.current = None;
        });
    }

    /// Plans the span of the HTTP request the session asks for.
    pub(crate) fn attempt(&mut self, session: &Session, request: &HttpRequest) -> Attempt {
        self.with(|inner| inner.attempt(session, request))
            .unwrap_or_else(Attempt::none)
    }

    /// An exchange reports `event` (before the session applies it).
    pub(crate) fn exchange_event(&mut self, event: &ExchangeEvent) {
        self.with(|inner| inner.exchange_event(event));
    }

    /// The session applied what exchange `id` reported.
    pub(crate) fn exchange_applied(&mut self, id: HttpId, session: &Session) {
        self.with(|inner| {
            if session.is_ready() {
                inner.reinit_parent = None;
            } else if inner.reinit_parent.is_none() {
                // A re-initialization it started, which may go out later from a timer.
                inner.reinit_parent = inner.current_owner().map(|owner| inner.owner_cx(&owner));
            }
            inner.exchange_applied(id);
            inner.current = None;
        });
    }

    /// The session dropped exchange `id`: it had what it needed of it (an answer, an error
    /// it acts on), or gave up on its request.
    pub(crate) fn aborted(&mut self, id: HttpId) {
        self.with(|inner| {
            let Some(ex) = inner.exchanges.remove(&id) else {
                return;
            };
            if let (Owner::Call(call), Some(status)) = (&ex.owner, ex.status) {
                if let Some(record) = inner.calls.get_mut(call) {
                    record.last_end = Some(if (200..300).contains(&status) {
                        End::Answered
                    } else {
                        End::Refused(status)
                    });
                }
            }
        });
    }

    /// A call ended with `result`.
    pub(crate) fn completed(&mut self, call: CallId, result: &Result<Value, Error>) {
        self.with(|inner| {
            if let Some(record) = inner.calls.remove(&call) {
                let outcome = match result {
                    Ok(value) => Outcome::Answered(value),
                    Err(err) => Outcome::Failed(err),
                };
                record.trace.end(&inner.inst, outcome);
            }
        });
    }

    /// The application gave up on a call (`None`: it cancelled or dropped it), or the driver
    /// failed it with `error`.
    pub(crate) fn abandoned(&mut self, call: CallId, error: Option<&Error>) {
        self.with(|inner| {
            if let Some(record) = inner.calls.remove(&call) {
                let outcome = error.map_or(Outcome::Cancelled, Outcome::Failed);
                record.trace.end(&inner.inst, outcome);
            }
            // A POST withdrawn before it was sent is neither ended nor aborted: forget it
            // here.
            inner
                .exchanges
                .retain(|_, ex| !matches!(ex.owner, Owner::Call(owner) if owner == call));
        });
    }

    /// The server sent a request on the stream being read (a multi round-trip request's
    /// round asks for input this way).
    pub(crate) fn server_request(&mut self) {
        self.with(|inner| {
            if let Some(Owner::Call(call)) = inner.current_owner() {
                if let Some(record) = inner.calls.get_mut(&call) {
                    record.round = true;
                }
            }
        });
    }

    /// A session event (in the session's call ids).
    pub(crate) fn event(&mut self, event: &SessionEvent, session: &Session) {
        self.with(|inner| inner.event(event, session));
    }

    /// The driver stopped: every call still in flight ends `closed`, and so does the session.
    pub(crate) fn stop(&mut self) {
        self.with(|inner| {
            let closed = Error::new(ErrorKind::Closed, "the client's driver stopped");
            for (_, record) in inner.calls.drain() {
                record.trace.end(&inner.inst, Outcome::Failed(&closed));
            }
            inner.exchanges.clear();
            inner.end_session(None);
        });
    }
}

impl Drop for Tracker {
    fn drop(&mut self) {
        self.shut();
    }
}

impl Inner {
    fn attempt(&mut self, session: &Session, request: &HttpRequest) -> Attempt {
        let resume = request.purpose == HttpPurpose::Resume;
        let owner = match session.exchange_call(request.id) {
            Some(call) if self.calls.contains_key(&call) => Owner::Call(call),
            _ if resume => self.resumed_owner(request),
            _ if request.purpose == HttpPurpose::Listen => Owner::Listen,
            _ => self.own_request(session, request),
        };
        // A call whose span records nothing (no exporter, or sampled out) gets no HTTP spans
        // either: its requests carry its own context, and its metrics are kept.
        let unrecorded = match &owner {
            Owner::Call(call) => self
                .calls
                .get_mut(call)
                .filter(|record| !record.trace.recording)
                .map(|record| {
                    record.advance(resume);
                    (record.trace.cx.clone(), record.cursor.clone())
                }),
            _ => None,
        };
        if let Some((cx, cursor)) = unrecorded {
            self.track(request.id, owner, resume);
            return Attempt::unrecorded(&cx, cursor, self.max_event_size);
        }
        let method = match request.method {
            HttpMethod::Post => "POST",
            HttpMethod::Get => "GET",
            HttpMethod::Delete => "DELETE",
        };
        let mut attributes = vec![
            KeyValue::new(names::HTTP_REQUEST_METHOD, method),
            KeyValue::new(names::URL_FULL, self.inst.0.url.clone()),
        ];
        attributes.extend(self.inst.0.server.iter().cloned());
        let (parent, cursor) = match &owner {
            Owner::Call(call) => {
                let facts = self.session_facts(session);
                let Some(record) = self.calls.get_mut(call) else {
                    return Attempt::none();
                };
                record.planned(request, resume, facts, &mut attributes);
                (record.trace.cx.clone(), Some(record.cursor.clone()))
            }
            Owner::Listen => {
                if request.purpose == HttpPurpose::Listen || self.listen_parent.is_none() {
                    let parent = self.initialize.clone().unwrap_or_else(|| self.ambient_cx());
                    self.listen_parent = Some(parent);
                }
                attributes.push(KeyValue::new(names::RECOVERY_STREAM, "listen"));
                if resume {
                    attributes.push(KeyValue::new(names::RECOVERY_ATTEMPT, "resume"));
                }
                (self.listen_parent.clone().unwrap_or_default(), None)
            }
            Owner::Own(cx, _) | Owner::Other(cx) => (cx.clone(), None),
        };
        let mcp = match &owner {
            Owner::Own(cx, _) => Some(cx.clone()),
            _ => None,
        };
        self.track(request.id, owner, resume);
        let builder = self
            .inst
            .tracer()
            .span_builder(method)
            .with_kind(SpanKind::Client)
            .with_attributes(attributes);
        Attempt::planned(
            self.inst.clone(),
            builder,
            parent,
            mcp,
            cursor,
            self.max_event_size,
        )
    }

    fn track(&mut self, id: HttpId, owner: Owner, resume: bool) {
        let exchange = Exchange {
            owner,
            resume,
            status: None,
            delivered: false,
            end: None,
        };
        self.exchanges.insert(id, exchange);
    }

    /// The request whose stream a resume GET continues: the one whose stream last delivered
    /// the event id it presents; the standalone stream when none did.
    fn resumed_owner(&self, request: &HttpRequest) -> Owner {
        let Some(last) = request
            .headers
            .get("last-event-id")
            .and_then(|v| v.to_str().ok())
        else {
            return Owner::Listen;
        };
        self.calls
            .iter()
            .filter_map(|(call, record)| {
                let age = record.cursor.age_of(last)?;
                // Between equally recent ids, a stream known to be cut wins.
                Some(((age, record.cut_at.is_none()), *call))
            })
            .min_by_key(|(rank, call)| (*rank, *call))
            .map_or(Owner::Listen, |(_, call)| Owner::Call(call))
    }

    /// A request the session makes itself: its own MCP span when it is one (the handshake,
    /// a notification), else only a parent for its HTTP span.
    fn own_request(&mut self, session: &Session, request: &HttpRequest) -> Owner {
        let parent = self.ambient_cx();
        let head = request.body.as_deref().and_then(read_head);
        let Some(Head {
            id,
            method: Some(method),
        }) = head
        else {
            return Owner::Other(parent);
        };
        let span = self
            .inst
            .tracer()
            .span_builder(method.clone())
            .with_kind(SpanKind::Client)
            .start_with_context(self.inst.tracer(), &parent);
        let cx = parent.with_span(span);
        if method == "initialize" {
            self.initialize = Some(cx.clone());
        }
        let span = cx.span();
        if span.is_recording() {
            span.set_attribute(KeyValue::new(names::MCP_METHOD_NAME, method));
            span.set_attributes(self.inst.connection());
            if let Some(id) = id.as_ref().and_then(request_id) {
                span.set_attribute(KeyValue::new(names::JSONRPC_REQUEST_ID, id));
            }
            let facts = self.session_facts(session);
            span.set_attributes(facts);
        }
        Owner::Own(cx, parent)
    }

    /// `mcp.session.id` and `mcp.protocol.version` of the session in force.
    fn session_facts(&mut self, session: &Session) -> Vec<KeyValue> {
        let mut facts = Vec::with_capacity(2);
        if let Some(id) = session.session_id() {
            let raw = id.expose();
            if self.session.id.as_ref().map(|(seen, _)| seen.as_str()) != Some(raw) {
                let exported = self.inst.session_attribute(raw);
                self.session.id = Some((raw.to_owned(), exported));
            }
            if let Some((_, Some(exported))) = &self.session.id {
                facts.push(KeyValue::new(names::MCP_SESSION_ID, exported.clone()));
            }
        }
        if let Some(version) = session.protocol_version() {
            facts.push(KeyValue::new(names::MCP_PROTOCOL_VERSION, version.as_str()));
        }
        facts
    }

    /// The context of whatever is being applied: the exchange reporting, the call being
    /// registered, or the caller's own.
    fn ambient_cx(&self) -> Context {
        match self.current_owner() {
            Some(owner) => self.owner_cx(&owner),
            None => self
                .ambient
                .clone()
                .or_else(|| self.reinit_parent.clone())
                .unwrap_or_else(Context::current),
        }
    }

    fn current_owner(&self) -> Option<Owner> {
        let id = self.current?;
        self.exchanges.get(&id).map(|ex| ex.owner.clone())
    }

    fn owner_cx(&self, owner: &Owner) -> Context {
        match owner {
            Owner::Call(call) => self
                .calls
                .get(call)
                .map(|record| record.trace.cx.clone())
                .unwrap_or_default(),
            Owner::Listen => self.listen_parent.clone().unwrap_or_default(),
            Owner::Own(_, parent) | Owner::Other(parent) => parent.clone(),
        }
    }

    fn exchange_event(&mut self, event: &ExchangeEvent) {
        let id = event.id();
        self.current = Some(id);
        let Some(ex) = self.exchanges.get_mut(&id) else {
            return;
        };
        let ok = ex.status.is_some_and(|s| (200..300).contains(&s));
        match event {
            ExchangeEvent::Head { status, .. } => ex.status = Some(*status),
            ExchangeEvent::Data { .. } | ExchangeEvent::Events { .. } => {
                if ex.resume && ok && !ex.delivered {
                    ex.delivered = true;
                    let owner = ex.owner.clone();
                    self.resumed_delivery(&owner);
                }
            }
            ExchangeEvent::End { .. } => {
                ex.end = Some(match ex.status {
                    Some(status) if !ok => End::Refused(status),
                    _ => End::Ended,
                });
            }
            ExchangeEvent::Json { .. } => {
                ex.end = Some(match ex.status {
                    Some(status) if !ok => End::Refused(status),
                    _ => End::Answered,
                });
            }
            ExchangeEvent::Failed { failure, .. } => {
                let never_sent =
                    ex.status.is_none() && matches!(failure, TransportFailure::Connect(_));
                ex.end = Some(if never_sent { End::NotSent } else { End::Lost });
            }
            ExchangeEvent::TooLarge { .. } => ex.end = Some(End::TooLarge),
        }
    }

    /// A resumed stream's first byte: the recovery since its cut is over.
    fn resumed_delivery(&mut self, owner: &Owner) {
        let (cut, stream) = match owner {
            Owner::Call(call) => (
                self.calls.get_mut(call).and_then(|r| r.cut_at.take()),
                "request",
            ),
            Owner::Listen => (self.listen_cut.take(), "listen"),
            _ => return,
        };
        if let Some(cut) = cut {
            let mut attributes: Vec<KeyValue> = self.inst.0.server.clone();
            attributes.push(KeyValue::new(names::RECOVERY_STREAM, stream));
            self.inst
                .instruments()
                .recovery_duration
                .record(cut.elapsed().as_secs_f64(), &attributes);
        }
    }

    fn exchange_applied(&mut self, id: HttpId) {
        let ended = self.exchanges.get(&id).and_then(|ex| ex.end);
        let Some(end) = ended else {
            return;
        };
        let Some(ex) = self.exchanges.remove(&id) else {
            return;
        };
        let cut = matches!(end, End::Lost | End::Ended | End::TooLarge);
        match ex.owner {
            // Still in flight after its exchange ended: it was cut, or moves on.
            Owner::Call(call) => {
                if let Some(record) = self.calls.get_mut(&call) {
                    record.last_end = Some(end);
                    if cut {
                        record.cut_at = Some(Instant::now());
                    }
                }
            }
            Owner::Listen if cut => self.listen_cut = Some(Instant::now()),
            _ => {}
        }
    }
}
