//! The exchange table: every HTTP exchange the session asked the driver for, what each is
//! for, what is known of it, and the queue of network actions the driver drains.

use crate::proto::limits::{MAX_ANSWERS_IN_FLIGHT, MAX_QUEUED_ANSWERS};
use std::collections::VecDeque;

use rustc_hash::FxHashMap;

use bytes::Bytes;
use http::header::HeaderMap;

use super::lifecycle::{Checks, Negotiated};
use crate::ids::SequencedEventId;
use crate::proto::classify::HeadFacts;
use crate::proto::{CallId, HttpId, HttpMethod, HttpPurpose, HttpRequest, Transmit};
use crate::sse::SseDecoder;

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
pub(super) enum Body {
    /// No head yet.
    Pending,
    Json(Vec<u8>),
    Sse(Box<SseDecoder>),
    /// A refusal's body, read only to classify it (bounded).
    Error(Vec<u8>),
}

/// One exchange in flight.
#[derive(Debug)]
pub(super) struct Exchange {
    pub(super) kind: ExKind,
    pub(super) carried_session_id: bool,
    pub(super) allow_batch: bool,
    pub(super) checks: Checks,
    pub(super) status: Option<u16>,
    pub(super) body: Body,
    /// A GET with `Last-Event-ID`.
    pub(super) resumed: bool,
    /// Delivered anything new.
    pub(super) progress: bool,
    /// The sequenced id that must come next on a resumed stream.
    pub(super) expect: Option<SequencedEventId>,
    /// The driver reported its end; no abort is owed.
    pub(super) ended: bool,
    /// What a refused head said, kept for its body's end.
    pub(super) head: HeadFacts,
}

/// How an exchange is sent: the facts fixed at send time.
#[derive(Debug, Clone, Copy)]
pub(super) struct Sent {
    pub(super) carried_session_id: bool,
    pub(super) allow_batch: bool,
    pub(super) checks: Checks,
}

impl Sent {
    /// An exchange of the established session `s`.
    pub(super) fn on(s: &Negotiated) -> Self {
        Sent {
            carried_session_id: s.id.is_some(),
            allow_batch: s.version.allows_batch(),
            checks: s.checks,
        }
    }
}

/// Answer POSTs: how many are in flight and the bounded queue behind them.
#[derive(Debug, Default)]
pub(super) struct Answers {
    pub(super) in_flight: usize,
    pub(super) queue: VecDeque<Bytes>,
    pub(super) dropped: u64,
}

/// The exchange table and the driver's action queue.
#[derive(Debug, Default)]
pub(super) struct Exchanges {
    /// Keyed by ids this session issues: a fast hash is safe.
    map: FxHashMap<HttpId, Exchange>,
    next: u64,
    transmits: VecDeque<Transmit>,
    pub(super) answers: Answers,
}

impl Exchanges {
    /// Opens an exchange: records it and queues the request for the driver.
    pub(super) fn open(
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
        self.map.insert(
            id,
            Exchange {
                kind,
                carried_session_id: sent.carried_session_id,
                allow_batch: sent.allow_batch,
                checks: sent.checks,
                status: None,
                body: Body::Pending,
                resumed: false,
                progress: false,
                expect: None,
                ended: false,
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

    pub(super) fn poll_transmit(&mut self) -> Option<Transmit> {
        self.transmits.pop_front()
    }
}
