//! HTTP exchange bookkeeping: what the session asked the driver for, what it knows of each
//! exchange, and the headers every request carries.

use std::collections::VecDeque;

use bytes::Bytes;
use http::HeaderMap;
use tracing::warn;

use super::{Ctx, Session, VERSION_HEADER_SINCE};
use crate::ids::SessionId;
use crate::proto::classify::HeadFacts;
use crate::proto::ext::ResumeSafety;
use crate::proto::{CallId, HttpId, HttpMethod, HttpPurpose, HttpRequest, Transmit};
use crate::sse::SseDecoder;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ExKind {
    Initialize,
    Initialized,
    Post(CallId),
    Resume(CallId),
    Listen,
    /// A notification POST (the app's, or `notifications/cancelled`).
    Notify,
    /// A POST answering a server request; bounded by [`Answers`].
    Answer,
    Delete,
}

#[derive(Debug)]
pub(super) enum Body {
    /// No head yet.
    Pending,
    Json(Vec<u8>),
    Sse(Box<SseDecoder>),
    Error(Vec<u8>),
}

#[derive(Debug)]
pub(super) struct Exchange {
    pub(super) kind: ExKind,
    pub(super) carried_session_id: bool,
    pub(super) allow_batch: bool,
    pub(super) status: Option<u16>,
    pub(super) body: Body,
    /// A GET with `Last-Event-ID`.
    pub(super) resumed: bool,
    /// Delivered anything new.
    pub(super) progress: bool,
    /// Next sequenced id expected (resume-safety extension).
    pub(super) expect_seq: Option<(String, u64)>,
    /// The driver reported its end; no abort is owed.
    pub(super) ended: bool,
    /// The extension checks in force for this exchange: those of the session it was sent
    /// on, fixed at send time so a re-initialization in the meantime cannot switch them off.
    pub(super) checks: Option<ResumeSafety>,
    /// What a refused head said (rejection header, `Retry-After`), kept for its body's end.
    pub(super) head: HeadFacts,
}

/// Answers to server requests in flight at once. A server that floods a stream with requests
/// (`ping`, sampling) must not make the client open a connection per request.
pub const MAX_ANSWERS_IN_FLIGHT: usize = 8;
/// Answers queued behind those in flight; past this they are dropped (counted and logged):
/// the server gets no answer, which it must tolerate anyway from a client that went away.
pub const MAX_QUEUED_ANSWERS: usize = 256;

/// Answer POSTs: those in flight and the bounded queue behind them.
#[derive(Debug, Default)]
pub(super) struct Answers {
    pub(super) in_flight: usize,
    pub(super) queue: VecDeque<Bytes>,
    pub(super) dropped: u64,
}

impl Session {
    pub(super) fn new_decoder(&self) -> Body {
        Body::Sse(Box::new(SseDecoder::new(self.config.max_event_size)))
    }

    /// The reader for a success head's body; `None` for a content type that has none.
    pub(super) fn success_body(&self, ct: ContentType) -> Option<Body> {
        match ct {
            ContentType::Json => Some(Body::Json(Vec::new())),
            ContentType::Sse => Some(self.new_decoder()),
            ContentType::Other => None,
        }
    }

    pub(super) fn set_body(&mut self, http: HttpId, body: Body) {
        if let Some(ex) = self.exchanges.get_mut(&http) {
            ex.body = body;
        }
    }

    pub(super) fn session_headers(ctx: &Ctx, post: bool) -> Vec<(&'static str, String)> {
        let mut headers = Vec::with_capacity(5);
        if post {
            headers.push(("accept", "application/json, text/event-stream".to_owned()));
            headers.push(("content-type", "application/json".to_owned()));
        } else {
            headers.push(("accept", "text/event-stream".to_owned()));
        }
        if let Some(id) = &ctx.id {
            headers.push((SessionId::HEADER, id.expose().to_owned()));
        }
        if ctx.protocol_version.as_str() >= VERSION_HEADER_SINCE {
            headers.push(("mcp-protocol-version", ctx.protocol_version.clone()));
        }
        headers
    }

    pub(super) fn post(
        &mut self,
        kind: ExKind,
        purpose: HttpPurpose,
        body: Bytes,
    ) -> Option<HttpId> {
        let ctx = self.ctx.clone()?;
        let headers = Self::session_headers(&ctx, true);
        Some(self.transmit(
            kind,
            HttpMethod::Post,
            purpose,
            headers,
            Some(body),
            ctx.id.is_some(),
            false,
        ))
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn transmit(
        &mut self,
        kind: ExKind,
        method: HttpMethod,
        purpose: HttpPurpose,
        headers: Vec<(&'static str, String)>,
        body: Option<Bytes>,
        carried_session_id: bool,
        allow_batch: bool,
    ) -> HttpId {
        self.next_http += 1;
        let id = HttpId(self.next_http);
        self.exchanges.insert(
            id,
            Exchange {
                kind,
                carried_session_id,
                allow_batch,
                status: None,
                body: Body::Pending,
                resumed: false,
                progress: false,
                expect_seq: None,
                ended: false,
                checks: self.checks().cloned(),
                head: HeadFacts::default(),
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

    /// Drops an exchange the session no longer needs and tells the driver to stop it.
    pub(super) fn finish_exchange(&mut self, http: HttpId) {
        if let Some(ex) = self.remove_exchange(http) {
            if !ex.ended {
                self.transmits.push_back(Transmit::Abort(http));
            }
        }
    }

    /// The one place an exchange leaves the table, so per-kind counts stay true.
    pub(super) fn remove_exchange(&mut self, http: HttpId) -> Option<Exchange> {
        let ex = self.exchanges.remove(&http)?;
        if ex.kind == ExKind::Answer {
            self.answers.in_flight = self.answers.in_flight.saturating_sub(1);
            self.send_queued_answers();
        }
        Some(ex)
    }

    /// Sends an answer to a server request now, or queues it behind those in flight.
    pub(super) fn send_answer(&mut self, body: Bytes) {
        if self.answers.in_flight < MAX_ANSWERS_IN_FLIGHT {
            if self
                .post(ExKind::Answer, HttpPurpose::Notify, body)
                .is_some()
            {
                self.answers.in_flight += 1;
            }
        } else if self.answers.queue.len() < MAX_QUEUED_ANSWERS {
            self.answers.queue.push_back(body);
        } else {
            self.answers.dropped += 1;
            warn!(
                dropped = self.answers.dropped,
                "answer to a server request dropped: too many queued"
            );
        }
    }

    fn send_queued_answers(&mut self) {
        while self.answers.in_flight < MAX_ANSWERS_IN_FLIGHT {
            let Some(body) = self.answers.queue.pop_front() else {
                break;
            };
            if self
                .post(ExKind::Answer, HttpPurpose::Notify, body)
                .is_none()
            {
                self.answers.queue.clear();
                break;
            }
            self.answers.in_flight += 1;
        }
    }

    pub(super) fn abort_all_exchanges(&mut self) {
        let ids: Vec<HttpId> = self
            .exchanges
            .iter()
            .filter(|(_, e)| e.kind != ExKind::Delete)
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            self.finish_exchange(id);
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ContentType {
    Json,
    Sse,
    Other,
}

pub(super) fn content_type(headers: &HeaderMap) -> ContentType {
    let Some(v) = headers.get(http::header::CONTENT_TYPE) else {
        return ContentType::Other;
    };
    let v = String::from_utf8_lossy(v.as_bytes());
    let essence = v
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    match essence.as_str() {
        "application/json" => ContentType::Json,
        "text/event-stream" => ContentType::Sse,
        _ => ContentType::Other,
    }
}
