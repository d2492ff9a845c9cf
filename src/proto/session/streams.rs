//! What arrives on an exchange: response heads of a call's POST or resume, SSE events and
//! their cursors, and the ways a body ends.

use std::time::{Duration, Instant};

use http::HeaderMap;
use tracing::{debug, warn};

use super::calls::CallState;
use super::exchange::{ContentType, ExKind, Exchange};
use super::listen::ListenState;
use super::{checks, Session, MAX_RETRY};
use crate::error::{Error, ErrorKind};
use crate::ids::EventId;
use crate::proto::decide::Failure;
use crate::proto::{CallId, HttpId, Output, SessionEvent};
use crate::sse::SseEvent;

impl Session {
    /// Whether the call is still `on` the exchange `http`; a stale exchange is dropped.
    fn still_on(&mut self, id: CallId, http: HttpId, on: CallState) -> bool {
        let current = self.calls.get(&id).is_some_and(|c| c.state == on);
        if !current {
            self.finish_exchange(http);
        }
        current
    }

    /// A 2xx head for a call's POST.
    pub(super) fn on_post_head(
        &mut self,
        http: HttpId,
        id: CallId,
        status: u16,
        headers: &HeaderMap,
        ct: ContentType,
        now: Instant,
    ) {
        if !self.still_on(id, http, CallState::Posting(http)) {
            return;
        }
        if status == 202 {
            // Accepted, with no response to come: whatever happened to the call is unknown.
            self.finish_exchange(http);
            let cause = Error::new(
                ErrorKind::Protocol,
                "request answered 202 without a response",
            );
            return self.apply_because(id, Failure::AnsweredWithoutResponse, cause, now);
        }
        if !self.call_hash_matches(id, http, headers) {
            return self.apply(id, Failure::CapabilityHashMismatch, now);
        }
        if self
            .calls
            .get(&id)
            .is_some_and(|c| c.generation == self.generation)
        {
            self.confirm();
        }
        match self.success_body(ct) {
            Some(body) => self.set_body(http, body),
            None => {
                self.finish_exchange(http);
                let cause = Error::new(
                    ErrorKind::Protocol,
                    "response with an unexpected content type",
                );
                self.apply_because(id, Failure::AnsweredWithoutResponse, cause, now);
            }
        }
    }

    /// A 2xx head for a call's resume GET.
    pub(super) fn on_resume_head(
        &mut self,
        http: HttpId,
        id: CallId,
        headers: &HeaderMap,
        ct: ContentType,
        now: Instant,
    ) {
        if !self.still_on(id, http, CallState::Resuming(http)) {
            return;
        }
        if ct != ContentType::Sse {
            return self.apply(id, Failure::ResumeNotAllowed, now);
        }
        if !self.call_hash_matches(id, http, headers) {
            return self.apply(id, Failure::ResumeCapabilityHashChanged, now);
        }
        self.set_body(http, self.new_decoder());
        if let Some(last_event_id) = self.calls.get(&id).and_then(|c| c.cursor.clone()) {
            self.outputs
                .push_back(Output::Event(SessionEvent::Resumed { last_event_id }));
        }
    }

    pub(super) fn on_events(&mut self, http: HttpId, events: Vec<SseEvent>, now: Instant) {
        for event in events {
            if !self.exchanges.contains_key(&http) {
                return;
            }
            self.on_event(http, event, now);
        }
    }

    fn on_event(&mut self, http: HttpId, event: SseEvent, now: Instant) {
        let Some(ex) = self.exchanges.get_mut(&http) else {
            return;
        };
        let sequenced = ex.checks.as_ref().is_some_and(|e| e.sequenced_event_ids);
        let kind = ex.kind;
        let mut new_cursor: Option<Option<EventId>> = None;
        if let Some(raw) = &event.id {
            if raw.is_empty() {
                // Per the SSE spec an empty id resets the cursor.
                new_cursor = Some(None);
            } else {
                match EventId::parse(raw) {
                    Ok(id) => {
                        if sequenced
                            && ex.resumed
                            && !checks::continues_sequence(&ex.expect_seq, &id)
                        {
                            warn!(event_id = %id, "event ids not contiguous on a resumed stream");
                            return self.stream_violation(http, Failure::EventGap, now);
                        }
                        if !self.delivered.insert(&id) {
                            // Replayed beyond what was asked: handled once already, and its
                            // id must not pull this stream's cursor back.
                            debug!(event_id = %id, "event already delivered; skipped");
                            return;
                        }
                        ex.expect_seq = checks::next_in_sequence(&id);
                        ex.progress = true;
                        new_cursor = Some(Some(id));
                    }
                    Err(e) => warn!(error = %e, "invalid SSE event id ignored"),
                }
            }
        }
        if !event.data.is_empty() {
            ex.progress = true;
        }
        let progressed = new_cursor.is_some() || !event.data.is_empty();
        let retry = event
            .retry
            .map(|ms| Duration::from_millis(ms).min(MAX_RETRY));
        match kind {
            ExKind::Post(c) | ExKind::Resume(c) => {
                if let Some(call) = self.calls.get_mut(&c) {
                    // Only progress proves the server is reachable and the stream alive;
                    // a head alone does not (a replaying instance answers 200 too).
                    if progressed {
                        call.attempts = 0;
                    }
                    if let Some(cursor) = new_cursor {
                        call.cursor = cursor;
                    }
                    if retry.is_some() {
                        call.retry = retry;
                    }
                }
            }
            ExKind::Listen => {
                if let Some(cursor) = new_cursor {
                    self.listen.cursor = cursor;
                }
                if retry.is_some() {
                    self.listen.retry = retry;
                }
                if !event.data.is_empty() {
                    // A message from the server on its own stream: the session works.
                    self.confirm();
                }
            }
            _ => {}
        }
        if event.data.is_empty() {
            return;
        }
        let allow_batch = self.exchanges.get(&http).is_some_and(|e| e.allow_batch);
        let _ = self.on_payload(http, event.data.as_bytes(), allow_batch, now);
    }

    /// A protocol violation on a resumed stream (gap, orphan).
    pub(super) fn stream_violation(&mut self, http: HttpId, failure: Failure, now: Instant) {
        let Some(ex) = self.exchanges.get(&http) else {
            return;
        };
        match ex.kind {
            ExKind::Resume(c) | ExKind::Post(c) => self.apply(c, failure, now),
            ExKind::Listen => {
                self.finish_exchange(http);
                self.apply_to_session(failure, now);
            }
            _ => {}
        }
    }

    /// A JSON body ended: a call whose response was not in it fails.
    pub(super) fn json_ended_without_response(
        &mut self,
        kind: ExKind,
        decoded: bool,
        now: Instant,
    ) {
        match kind {
            ExKind::Post(c)
                if self
                    .calls
                    .get(&c)
                    .is_some_and(|call| matches!(call.state, CallState::Posting(_))) =>
            {
                if let Some(call) = self.calls.get_mut(&c) {
                    call.state = CallState::Waiting;
                }
                // The request reached the server, and the answer is not this call's
                // response (another id, none, or garbled): the call may have run.
                let cause = if decoded {
                    "the JSON body answered another request id or none"
                } else {
                    "the JSON body was cut or undecodable"
                };
                let cause = Error::new(ErrorKind::Protocol, cause);
                self.apply_because(c, Failure::AnsweredWithoutResponse, cause, now);
            }
            ExKind::Initialize => self.init_failed(
                Error::new(ErrorKind::Protocol, "initialize body without the response"),
                now,
            ),
            _ => {}
        }
    }

    pub(super) fn stream_ended(&mut self, ex: Exchange, clean: bool, now: Instant) {
        match ex.kind {
            ExKind::Initialize => self.init_failed(
                Error::new(
                    ErrorKind::Transport,
                    "initialize stream ended before the response",
                ),
                now,
            ),
            ExKind::Post(c) => {
                let Some(call) = self.calls.get_mut(&c) else {
                    return;
                };
                if !matches!(call.state, CallState::Posting(_)) {
                    return;
                }
                call.state = CallState::Waiting;
                let event_id_seen = call.cursor.is_some();
                debug!(
                    call = c.0,
                    clean, event_id_seen, "response stream ended early"
                );
                self.apply(c, Failure::StreamEnded { event_id_seen }, now);
            }
            ExKind::Resume(c) => {
                let Some(call) = self.calls.get_mut(&c) else {
                    return;
                };
                if !matches!(call.state, CallState::Resuming(_)) {
                    return;
                }
                call.state = CallState::Waiting;
                self.bump_no_progress(c, ex.progress);
                debug!(
                    call = c.0,
                    clean,
                    progress = ex.progress,
                    "resumed stream ended early"
                );
                self.apply(
                    c,
                    Failure::ResumedStreamEnded {
                        clean,
                        progress: ex.progress,
                    },
                    now,
                );
            }
            ExKind::Listen => self.listen_failed(ex.progress, now),
            _ => {}
        }
    }

    /// Something in a body was unacceptable (too large): the exchange is abandoned.
    pub(super) fn exchange_broken(&mut self, http: HttpId, error: Error, now: Instant) {
        let Some(ex) = self.exchanges.get(&http) else {
            return;
        };
        let kind = ex.kind;
        self.finish_exchange(http);
        warn!(error = %error, "exchange abandoned");
        match kind {
            ExKind::Initialize => self.init_failed(error, now),
            ExKind::Post(c) | ExKind::Resume(c) => self.complete(c, Err(error)),
            ExKind::Listen => {
                // A hostile stream would only repeat itself: stop listening.
                self.listen.state = ListenState::GaveUp;
            }
            _ => {}
        }
    }
}
