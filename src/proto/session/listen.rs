//! The standalone GET stream: server-to-client messages outside any call. It carries no
//! call, so its failures never fail one; they only decide whether to listen again.

use std::time::{Duration, Instant};

use http::HeaderMap;
use tracing::warn;

use super::exchange::{ContentType, ExKind};
use super::{checks, Phase, Session, BATCH_VERSION};
use crate::ids::EventId;
use crate::proto::decide::Failure;
use crate::proto::{HttpId, HttpMethod, HttpPurpose, Output, SessionEvent};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ListenState {
    Off,
    Open(HttpId),
    Backoff(Instant),
    NotOffered,
    GaveUp,
}

#[derive(Debug)]
pub(super) struct Listen {
    pub(super) state: ListenState,
    pub(super) cursor: Option<EventId>,
    pub(super) retry: Option<Duration>,
    pub(super) attempts: u32,
}

impl Listen {
    pub(super) fn new() -> Self {
        Listen {
            state: ListenState::Off,
            cursor: None,
            retry: None,
            attempts: 0,
        }
    }
}

impl Session {
    /// A 2xx head for the standalone stream.
    pub(super) fn on_listen_head(
        &mut self,
        http: HttpId,
        headers: &HeaderMap,
        ct: ContentType,
        now: Instant,
    ) {
        if ct != ContentType::Sse {
            self.finish_exchange(http);
            return self.listen_failed(false, now);
        }
        let resumed = self.exchanges.get(&http).is_some_and(|e| e.resumed);
        let expected = self.ctx.as_ref().and_then(|c| c.hash.clone());
        if !self.hash_matches(http, headers, expected.as_ref()) {
            self.finish_exchange(http);
            if resumed {
                return self.apply_to_session(Failure::ResumeCapabilityHashChanged, now);
            }
            // A fresh stream carries no call; re-initializing for it could loop against a
            // server that omits the header on GET. Stop listening.
            warn!("standalone GET stream under another capability hash; not listening");
            self.listen.state = ListenState::GaveUp;
            return;
        }
        self.listen_404_reinit = false;
        if let Some(ex) = self.exchanges.get_mut(&http) {
            ex.progress = false;
        }
        self.set_body(http, self.new_decoder());
        if let (true, Some(last_event_id)) = (resumed, self.listen.cursor.clone()) {
            self.outputs
                .push_back(Output::Event(SessionEvent::Resumed { last_event_id }));
        }
    }

    pub(super) fn open_listen(&mut self) {
        if !self.config.open_listen_stream || self.phase != Phase::Ready {
            return;
        }
        if self.listen.state != ListenState::Off {
            return;
        }
        let Some(ctx) = self.ctx.clone() else {
            return;
        };
        let mut headers = Self::session_headers(&ctx, false);
        let cursor = self.listen.cursor.clone();
        if let Some(c) = &cursor {
            headers.push(("last-event-id", c.as_str().to_owned()));
        }
        let purpose = if cursor.is_some() {
            HttpPurpose::Resume
        } else {
            HttpPurpose::Listen
        };
        let http = self.transmit(
            ExKind::Listen,
            HttpMethod::Get,
            purpose,
            headers,
            None,
            ctx.id.is_some(),
            ctx.protocol_version == BATCH_VERSION,
        );
        if let Some(ex) = self.exchanges.get_mut(&http) {
            ex.resumed = cursor.is_some();
            ex.expect_seq = cursor.as_ref().and_then(checks::next_in_sequence);
        }
        self.listen.state = ListenState::Open(http);
    }

    pub(super) fn listen_failed(&mut self, progress: bool, now: Instant) {
        if progress {
            self.listen.attempts = 0;
        }
        self.listen.attempts = self.listen.attempts.saturating_add(1);
        if self.listen.attempts > self.config.reconnect.max_attempts {
            warn!("standalone GET stream keeps failing; giving up on it");
            self.listen.state = ListenState::GaveUp;
            return;
        }
        let delay = self.config.reconnect.delay(
            self.listen.attempts - 1,
            self.rng.next(),
            self.listen.retry,
        );
        self.listen.state = ListenState::Backoff(now.checked_add(delay).unwrap_or(now));
    }
}
