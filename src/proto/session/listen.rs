//! The standalone GET stream: server-to-client messages outside any call (in the modern era,
//! the change notifications of a `subscriptions/listen` request). Opening it, what its answer
//! head says, and which of its notifications are for the app are read here. It carries no
//! call, so its failures never fail one; they decide whether to listen again, and whether
//! the session itself is gone.

use std::time::Instant;

use serde_json::{json, Value};
use tracing::{debug, warn};

use super::cursors::{Cursor, Delivered, Observed};
use super::exchanges::ExKind;
use super::lifecycle::Standing;
use super::negotiated::STABLE_SESSION;
use super::timers::Timer;
use super::Session;
use crate::ids::RequestId;
use crate::ids::{EventId, SequencedEventId};
use crate::proto::classify::ContentType;
use crate::proto::decide::{decide, Decision, Failure};
use crate::proto::{
    methods, modern, HttpId, HttpMethod, HttpPurpose, ListenStopReason, Output, SessionEvent,
};
use crate::sse::SseEvent;

/// Where the standalone stream stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum ListenState {
    /// Not open (yet, or until the session is ready).
    #[default]
    Off,
    Open(HttpId),
    /// Waiting out a backoff (its timer is armed).
    Backoff,
    /// The server refused its credentials: opened again once a request of the session is
    /// answered (the credentials work again).
    Unauthorized,
    /// The server does not offer it.
    NotOffered,
    /// It kept failing.
    GaveUp,
}

/// The standalone stream of the current session (closed, with nothing seen, by default).
#[derive(Debug, Default)]
pub(super) struct Listen {
    state: ListenState,
    cursor: Cursor,
    /// Consecutive failed attempts.
    attempts: u32,
    /// The current session was made by a re-initialization this stream's own refusal caused.
    caused_reinit: bool,
    /// Modern era: the JSON-RPC id of the `subscriptions/listen` request the stream answers
    /// (notifications on it name it as their `subscriptionId`).
    subscription: Option<RequestId>,
    /// Modern era: when the `subscriptions/listen` request was sent.
    opened: Option<Instant>,
    /// The [`SessionEvent::ListenStopped`] reported for this session since the last
    /// [`SessionEvent::Listening`]: a stream retried and refused its credentials once more is
    /// not reported twice, but one that then stops for good is.
    stop_reported: Option<ListenStopReason>,
}

impl Listen {
    /// Whether `http` is the stream's open exchange.
    fn is_open(&self, http: HttpId) -> bool {
        self.state == ListenState::Open(http)
    }

    /// Forgets the stream; returns its exchange, if one is open, to be finished.
    fn reset(&mut self) -> Option<HttpId> {
        let open = match self.state {
            ListenState::Open(http) => Some(http),
            _ => None,
        };
        *self = Listen::default();
        open
    }

    /// The stream is answered and read: a refusal of it from now on is not the one that
    /// caused the current session's re-initialization.
    fn answered(&mut self) {
        self.caused_reinit = false;
    }

    /// The last event id seen on the stream, which a reopened stream resumes from.
    pub(super) fn last_event_id(&self) -> Option<&EventId> {
        self.cursor.last.as_ref()
    }

    /// Observes an event of the stream ([`Cursor::observe`]).
    pub(super) fn observe(
        &mut self,
        event: &SseEvent,
        expect: Option<&mut Option<SequencedEventId>>,
        delivered: &mut Delivered,
        replay: bool,
    ) -> Observed {
        self.cursor.observe(event, expect, delivered, replay)
    }
}

impl Session {
    /// Forgets the standalone stream, which belonged to a session now replaced, closed or
    /// lost: its exchange is finished and its backoff disarmed.
    pub(super) fn stop_listening(&mut self) {
        if let Some(http) = self.listen.reset() {
            self.exchanges.finish(http);
        }
        self.timers.cancel(Timer::ListenBackoff);
    }

    /// Opens the modern era's change-notification stream: a `subscriptions/listen` request
    /// for the list changes the server says it sends.
    fn open_subscription(&mut self, now: Instant) {
        let Some(session) = self.life.ready() else {
            return;
        };
        let filter = session.list_changes();
        if filter.is_empty() {
            // Nothing the server would ever send on it.
            self.not_offered();
            return;
        }
        let rpc = self.calls.new_rpc();
        let (body, headers) = session.request(
            &rpc,
            methods::SUBSCRIPTIONS_LISTEN,
            &mut Some(json!({ "notifications": filter })),
            None,
            Some((&self.client_meta, &self.tool_headers)),
        );
        let http = self.exchanges.open(
            ExKind::Listen,
            HttpMethod::Post,
            HttpPurpose::Listen,
            headers,
            Some(body),
            session,
        );
        self.listen.subscription = Some(rpc);
        self.listen.opened = Some(now);
        self.listen.state = ListenState::Open(http);
    }

    /// Opens the standalone stream if the app wants it and nothing says otherwise: it is
    /// closed, or its backoff just ended (its timer calls this). Resumes it with
    /// `Last-Event-ID` when a cursor is known.
    pub(super) fn open_listen(&mut self, now: Instant) {
        match self.listen.state {
            ListenState::Off => {}
            ListenState::Backoff => self.listen.state = ListenState::Off,
            _ => return,
        }
        if !self.config.open_listen_stream {
            return;
        }
        if self.is_modern() {
            // The modern era has no GET stream; change notifications come on a
            // `subscriptions/listen` request instead.
            return self.open_subscription(now);
        }
        let Some(session) = self.life.ready() else {
            return;
        };
        let cursor = self.listen.last_event_id();
        let headers = session.headers.get(cursor);
        let http = self
            .exchanges
            .open_stream(ExKind::Listen, headers, cursor, session);
        self.listen.state = ListenState::Open(http);
    }

    /// A 2xx head answered the standalone stream, `resumed` with `Last-Event-ID`, carrying the
    /// capability hash of the session or not (`hash_matches`): `true` when its body is to be
    /// read, as an event stream; otherwise the stream failed (not one, or under another
    /// capability hash).
    pub(super) fn on_listen_head(
        &mut self,
        http: HttpId,
        resumed: bool,
        hash_matches: bool,
        ct: ContentType,
        now: Instant,
    ) -> bool {
        if ct != ContentType::Sse {
            self.listen_failed(Failure::ListenNotOffered, Some(http), false, now);
            return false;
        }
        if !hash_matches {
            let failure = if resumed {
                Failure::ResumeCapabilityHashChanged
            } else {
                Failure::ListenHashMismatch
            };
            self.listen_failed(failure, Some(http), false, now);
            if !self.listen.is_open(http) {
                return false;
            }
        }
        self.listen.answered();
        // A subscription listens once the server acknowledges it (`on_subscription`).
        if !self.is_modern() {
            self.listening();
        }
        if let (true, Some(last_event_id)) = (resumed, self.listen.last_event_id().cloned()) {
            self.outputs
                .push_back(Output::Event(SessionEvent::Resumed { last_event_id }));
        }
        true
    }

    /// The standalone stream was refused its credentials (after the driver's one retry, with
    /// a fresh token when one could be had): opened again only once a request of the session
    /// is answered ([`Session::credentials_work`]), at most `max_attempts` times in a row.
    /// Tried again on a timer, each try cost a token refresh, as fast as the backoff went.
    pub(super) fn listen_unauthorized(&mut self) {
        self.listen.attempts = self.listen.attempts.saturating_add(1);
        if self.listen.attempts >= self.config.reconnect.max_attempts {
            warn!("standalone GET stream refused its credentials again and again; giving up on it");
            self.listen.state = ListenState::GaveUp;
            let attempts = self.listen.attempts;
            self.listen_stopped(ListenStopReason::GaveUp { attempts });
        } else {
            debug!("standalone GET stream refused its credentials; reopened once they work");
            self.listen.state = ListenState::Unauthorized;
            // Nothing reopens it but a call answered: an app waiting only for notifications
            // would wait for ever unless told.
            self.listen_stopped(ListenStopReason::Unauthorized);
        }
    }

    /// A request of the session was answered: its credentials work. A stream refused them is
    /// opened again.
    pub(super) fn credentials_work(&mut self, now: Instant) {
        if self.listen.state == ListenState::Unauthorized {
            self.listen.state = ListenState::Off;
            self.open_listen(now);
        }
    }

    /// The standalone stream failed: the recovery decision says whether to listen again, stop,
    /// or start over with a new session. `http`: the exchange still open, finished here unless
    /// the decision is to keep reading it.
    pub(super) fn listen_failed(
        &mut self,
        failure: Failure,
        http: Option<HttpId>,
        progress: bool,
        now: Instant,
    ) {
        // A subscription is meant to stay open: one that ends soon after it was sent did not
        // work, whatever it carried (an acknowledgement, a change), or a server that answers
        // each one and closes it would have it re-sent at the initial delay forever. (A legacy
        // GET stream may be closed after every event by design, to be resumed.)
        let progress = if self.is_modern() {
            self.listen
                .opened
                .is_some_and(|at| now.saturating_duration_since(at) >= STABLE_SESSION)
        } else {
            progress
        };
        let attempts = if progress {
            1
        } else {
            self.listen.attempts.saturating_add(1)
        };
        let state = self.base_state(true).attempts(attempts);
        let decision = decide(&failure, &state);
        debug!(
            ?failure,
            ?decision,
            "recovery decision for the standalone stream"
        );
        if decision == Decision::Continue {
            return;
        }
        if let Some(http) = http {
            self.exchanges.finish(http);
        }
        self.listen.attempts = attempts;
        self.listen.state = ListenState::Off;
        let refused_again = matches!(
            failure,
            Failure::ResumeNotFound | Failure::ResumeRejected(_)
        ) && self.listen.caused_reinit
            && self.life.standing() != Standing::Ready { confirmed: true };
        if refused_again {
            // The fresh session's stream was refused the same way before anything else
            // worked on it: the endpoint does not offer the stream (a server that says 404
            // where it means 405). Re-initializing again would loop.
            warn!("standalone GET stream refused twice in a row; not offered");
            self.not_offered();
            return;
        }
        match decision {
            Decision::Continue => {}
            Decision::Resume | Decision::Resend => {
                let delay = self.config.reconnect.delay(
                    attempts - 1,
                    self.rng.next(),
                    self.listen.cursor.retry,
                );
                self.listen.state = ListenState::Backoff;
                self.timers
                    .set(Timer::ListenBackoff, now.checked_add(delay).unwrap_or(now));
            }
            Decision::Reinitialize { reason, .. } => {
                self.report_rejection(&failure);
                self.start_reinit(reason, now);
                // Set after: the new session starts with a new stream state.
                self.listen.caused_reinit = true;
            }
            Decision::Fail(_) if matches!(failure, Failure::ListenNotOffered) => {
                debug!("the server offers no standalone GET stream");
                self.not_offered();
            }
            Decision::Fail(_) if matches!(failure, Failure::ListenHashMismatch) => {
                warn!("standalone GET stream under another capability hash; not listening");
                self.listen.state = ListenState::GaveUp;
                self.listen_stopped(ListenStopReason::Refused);
            }
            Decision::RetryReinitialize
            | Decision::Report
            | Decision::RefreshTools
            | Decision::Fail(_) => {
                warn!("standalone GET stream keeps failing; giving up on it");
                self.listen.state = ListenState::GaveUp;
                // Stopped with attempts left: what the server answered, not their number,
                // is why.
                let reason = if attempts < state.max_attempts {
                    ListenStopReason::Refused
                } else {
                    ListenStopReason::GaveUp { attempts }
                };
                self.listen_stopped(reason);
            }
        }
    }

    /// The stream sent what it should not (an event past the size bound): a hostile stream
    /// would only repeat itself, so it is not opened again, and the app is told.
    pub(in crate::proto::session) fn listen_broken(&mut self) {
        self.listen.state = ListenState::GaveUp;
        self.listen_stopped(ListenStopReason::Refused);
    }

    /// The server does not offer the stream: nothing was stopped, and nothing is said,
    /// unless the app was told it would be reopened once its credentials work
    /// ([`ListenStopReason::Unauthorized`]): then it is told it will not be.
    fn not_offered(&mut self) {
        self.listen.state = ListenState::NotOffered;
        if self.listen.stop_reported == Some(ListenStopReason::Unauthorized) {
            self.listen_stopped(ListenStopReason::Refused);
        }
    }

    /// The stream is open: reported, and a later stop is news again.
    fn listening(&mut self) {
        self.listen.stop_reported = None;
        self.outputs
            .push_back(Output::Event(SessionEvent::Listening));
    }

    /// The core stopped trying to open the stream for this session: reported once, until it
    /// is open again; after [`ListenStopReason::Unauthorized`] (the app told it would be
    /// reopened once a call is answered), a stop for good is reported too.
    fn listen_stopped(&mut self, reason: ListenStopReason) {
        let news = match self.listen.stop_reported {
            None => true,
            Some(ListenStopReason::Unauthorized) => reason != ListenStopReason::Unauthorized,
            Some(_) => false,
        };
        if news {
            self.listen.stop_reported = Some(reason);
            self.outputs
                .push_back(Output::Event(SessionEvent::ListenStopped { reason }));
        }
    }

    /// A notification on the modern change stream: `false` when it is not for the app (the
    /// acknowledgement, or one naming another subscription).
    pub(super) fn on_subscription(&mut self, method: &str, params: Option<&Value>) -> bool {
        let Some(ours) = self.listen.subscription.as_ref() else {
            return true;
        };
        let named = params
            .and_then(|p| p.get("_meta"))
            .and_then(|m| m.get(modern::META_SUBSCRIPTION_ID))
            .and_then(RequestId::from_json);
        if named.as_ref().is_some_and(|n| n != ours) {
            debug!(%method, "notification of another subscription dropped");
            return false;
        }
        if method == methods::SUBSCRIPTIONS_ACKNOWLEDGED {
            debug!("subscription acknowledged");
            self.life.confirm();
            self.listening();
            return false;
        }
        true
    }
}
