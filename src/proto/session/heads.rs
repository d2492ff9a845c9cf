//! Success heads (2xx): what each exchange expects of one, read through
//! [`classify`](crate::proto::classify) and turned into a body to read or a recovery failure.

use std::time::Instant;

use http::HeaderMap;

use super::call::CallState;
use super::exchanges::{Body, ExKind};
use super::listen::ListenState;
use super::Session;
use crate::error::{Error, ErrorKind};
use crate::proto::classify::{self, ContentType};
use crate::proto::decide::Failure;
use crate::proto::probe::ProbeAnswer;
use crate::proto::{CallId, HttpId, Output, SessionEvent};
use crate::sse::SseDecoder;

impl Session {
    /// A 2xx head arrived for `http`.
    pub(super) fn on_success_head(
        &mut self,
        http: HttpId,
        kind: ExKind,
        status: u16,
        headers: &HeaderMap,
        now: Instant,
    ) {
        let ct = classify::content_type(headers);
        match kind {
            ExKind::Initialize | ExKind::Discover => {
                if kind == ExKind::Initialize {
                    self.on_initialize_head(http, headers, now);
                }
                if self.exchanges.get(http).is_none() {
                    return;
                }
                match self.reader(ct) {
                    Some(body) => self.set_body(http, body),
                    None if kind == ExKind::Discover => self.probe_answered(
                        ProbeAnswer::NoResponse,
                        Error::new(ErrorKind::Protocol, "answered with no JSON or SSE body"),
                        now,
                    ),
                    None => {
                        self.exchanges.finish(http);
                        self.init_failed(
                            Error::new(
                                ErrorKind::Protocol,
                                "initialize answered with an unexpected content type",
                            ),
                            now,
                        );
                    }
                }
            }
            ExKind::Initialized => {
                self.exchanges.finish(http);
                self.init_succeeded(now);
            }
            ExKind::Post(call) => self.on_post_head(http, call, status, headers, ct, now),
            ExKind::Resume(call) => self.on_resume_head(http, call, headers, ct, now),
            ExKind::Listen => self.on_listen_head(http, headers, ct, now),
            ExKind::Notify | ExKind::Answer => self.exchanges.finish(http),
            ExKind::Delete => {
                self.exchanges.finish(http);
                self.close_done(Ok(serde_json::Value::Null));
            }
        }
    }

    /// The reader for a body of content type `ct`; `None` for one that has none.
    fn reader(&self, ct: ContentType) -> Option<Body> {
        match ct {
            ContentType::Json => Some(Body::Json(Vec::new())),
            ContentType::Sse => Some(self.sse_reader()),
            ContentType::Other => None,
        }
    }

    fn sse_reader(&self) -> Body {
        Body::Sse(Box::new(SseDecoder::new(self.config.max_event_size)))
    }

    fn set_body(&mut self, http: HttpId, body: Body) {
        if let Some(ex) = self.exchanges.get_mut(http) {
            ex.body = body;
        }
    }

    /// Whether the call is still on the exchange `http`; a stale exchange is dropped.
    fn still_on(&mut self, id: CallId, http: HttpId, on: CallState) -> bool {
        let current = self.calls.get(id).is_some_and(|c| c.state() == on);
        if !current {
            self.exchanges.finish(http);
        }
        current
    }

    /// Whether a head carries the capability hash the call's session negotiated.
    fn call_hash_matches(&self, id: CallId, http: HttpId, headers: &HeaderMap) -> bool {
        let checked = self.exchanges.get(http).is_some_and(|e| e.checks.hash);
        let expected = self.calls.get(id).and_then(|c| c.expected_hash());
        classify::hash_matches(checked, headers, expected)
    }

    fn on_post_head(
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
        let Some(body) = self.reader(ct).filter(|_| status != 202 && status != 204) else {
            // Accepted with no response to come, or a body that is not one: whatever
            // happened to the call is unknown.
            self.exchanges.finish(http);
            let cause = if status == 202 || status == 204 {
                format!("request answered {status} without a response")
            } else {
                "response with an unexpected content type".to_owned()
            };
            let cause = Error::new(ErrorKind::Protocol, cause);
            self.apply_because(id, Failure::AnsweredWithoutResponse, cause, now);
            return;
        };
        if !self.call_hash_matches(id, http, headers)
            && !self.apply(id, Failure::CapabilityHashMismatch, now)
        {
            return;
        }
        if self
            .calls
            .get(id)
            .is_some_and(|c| c.attempt().generation() == self.life.generation)
        {
            self.life.confirm();
        }
        self.set_body(http, body);
    }

    fn on_resume_head(
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
            self.apply(id, Failure::ResumeNotAllowed, now);
            return;
        }
        if !self.call_hash_matches(id, http, headers)
            && !self.apply(id, Failure::ResumeCapabilityHashChanged, now)
        {
            return;
        }
        self.set_body(http, self.sse_reader());
        if let Some(last_event_id) = self.calls.get(id).and_then(|c| c.last_event_id().cloned()) {
            self.outputs
                .push_back(Output::Event(SessionEvent::Resumed { last_event_id }));
        }
    }

    fn on_listen_head(&mut self, http: HttpId, headers: &HeaderMap, ct: ContentType, now: Instant) {
        if ct != ContentType::Sse {
            return self.listen_failed(Failure::ListenNotOffered, Some(http), false, now);
        }
        let Some(ex) = self.exchanges.get(http) else {
            return;
        };
        let resumed = ex.resumed;
        let expected = self.life.ready().and_then(|s| s.hash.as_ref());
        if !classify::hash_matches(ex.checks.hash, headers, expected) {
            let failure = if resumed {
                Failure::ResumeCapabilityHashChanged
            } else {
                Failure::ListenHashMismatch
            };
            self.listen_failed(failure, Some(http), false, now);
            if self.listen.state != ListenState::Open(http) {
                return;
            }
        }
        self.listen.caused_reinit = false;
        self.set_body(http, self.sse_reader());
        self.outputs
            .push_back(Output::Event(SessionEvent::Listening));
        if let (true, Some(last_event_id)) = (resumed, self.listen.cursor.last.clone()) {
            self.outputs
                .push_back(Output::Event(SessionEvent::Resumed { last_event_id }));
        }
    }
}
