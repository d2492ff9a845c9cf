//! The legacy handshake (`initialize`, the `notifications/initialized` that follows, comparing
//! the new session with the one it replaces), and the lifecycle around any handshake:
//! starting one, re-initializing, giving a session up as lost and reconnecting it.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tracing::{debug, info, warn};

use super::Lost;
use super::{Established, Handshake, InitHead, Phase, Step};
use crate::error::{Error, ErrorKind, RpcError};
use crate::proto::classify::{self, ContentType, Refusal};
use crate::proto::decide::State;
use crate::proto::decide::{decide, Decision, Failure};
use crate::proto::ext::ResumeSafety;
use crate::proto::probe::ProbeAnswer;
use crate::proto::session::call::{CallState, Retry};
use crate::proto::session::exchanges::Reader;
use crate::proto::session::exchanges::{ExKind, Sent};
use crate::proto::session::headers::initialize_headers;
use crate::proto::session::listen::Listen;
use crate::proto::session::negotiated::{Negotiated, STABLE_SESSION};
use crate::proto::session::timers::Timer;
use crate::proto::session::Session;
use crate::proto::version::ProtocolVersion;
use crate::proto::ReinitReason;
use crate::proto::{jsonrpc, methods, Era, HttpId, HttpMethod, HttpPurpose, Output, SessionEvent};

impl Session {
    /// Sends `initialize` for the handshake in progress.
    pub(super) fn send_initialize(&mut self, now: Instant) {
        if self.life.handshake().is_none() {
            return;
        }
        let rpc = self.calls.new_rpc();
        let params = json!({
            "protocolVersion": self.config.protocol_version.as_str(),
            "capabilities": self.config.client_capabilities,
            "clientInfo": {"name": self.config.client_name, "version": self.config.client_version},
        });
        let body = jsonrpc::encode_request(&rpc, methods::INITIALIZE, Some(&params));
        debug!(generation = self.life.generation, "sending initialize");
        let sent = Sent::initialize(self.config.protocol_version);
        let http = self.exchanges.open(
            ExKind::Initialize,
            HttpMethod::Post,
            HttpPurpose::Request,
            initialize_headers(),
            Some(body),
            sent,
        );
        self.timers.set(
            Timer::InitDeadline,
            now.checked_add(self.config.call_timeout).unwrap_or(now),
        );
        if let Some(h) = self.life.handshake_mut() {
            h.step = Step::Initialize {
                http,
                rpc,
                head: InitHead::default(),
            };
        }
    }

    /// The `initialize` answer's head: note the session id and capability hash it assigns.
    fn on_initialize_head(&mut self, http: HttpId, headers: &http::HeaderMap, now: Instant) {
        let session_id = match classify::session_id(headers) {
            Ok(id) => id,
            Err(e) => {
                self.exchanges.finish(http);
                return self.init_failed(e, now);
            }
        };
        let hash = classify::head_hash(headers);
        if let Some(Handshake {
            step: Step::Initialize { head, .. },
            ..
        }) = self.life.handshake_mut()
        {
            *head = InitHead { session_id, hash };
        }
    }

    /// The `initialize` response: check it, then send `notifications/initialized`.
    pub(in crate::proto::session) fn on_initialize_response(
        &mut self,
        http: HttpId,
        result: Result<Value, RpcError>,
        now: Instant,
    ) {
        self.exchanges.finish(http);
        let result = match result {
            Ok(r) => r,
            Err(e) => return self.init_failed(Error::rpc(e), now),
        };
        let named = result.get("protocolVersion").and_then(Value::as_str);
        // `initialize` negotiates a legacy revision; a modern one has no place here.
        let legacy = named
            .and_then(ProtocolVersion::parse)
            .filter(|v| !v.is_modern());
        let Some(version) = legacy else {
            let mut shown = named.unwrap_or("<none>").to_owned();
            jsonrpc::truncate(&mut shown, 64);
            return self.init_failed(
                Error::new(
                    ErrorKind::Protocol,
                    format!("server answered unsupported protocol version {shown:?}"),
                ),
                now,
            );
        };
        let generation = self.life.generation;
        let trust = self.config.dangerous_trust_replay;
        let Some(h) = self.life.handshake_mut() else {
            return;
        };
        let Step::Initialize { head, .. } = &h.step else {
            return;
        };
        let head = head.clone();
        let mut ext = ResumeSafety::from_initialize_result(&result);
        if let Some(e) = &mut ext {
            if e.capability_hash && head.hash.is_none() {
                // Nothing to compare against: the checks cannot run. The app is told (an
                // event, and the queryable extension status), not just the log.
                warn!("server advertised capability hashes but sent no valid one at initialize; hash checks off");
                e.capability_hash = false;
                h.degraded = Some(
                    "the server advertised capability hashes but its initialize response \
                     carried no valid Mcp-Capability-Hash: hash checks are off for this session"
                        .to_owned(),
                );
            }
        }
        let session = Negotiated::legacy(
            generation,
            head.session_id,
            head.hash,
            version,
            ext,
            trust,
            result,
        );
        let headers = session.headers.post();
        let body = jsonrpc::encode_notification(methods::INITIALIZED, None);
        let sent = Sent::on(&session);
        let http = self.exchanges.open(
            ExKind::Initialized,
            HttpMethod::Post,
            HttpPurpose::Notify,
            headers,
            Some(body),
            sent,
        );
        if let Some(h) = self.life.handshake_mut() {
            h.step = Step::Initialized {
                http,
                session: Box::new(session),
            };
        }
    }

    /// `notifications/initialized` was accepted: the legacy session is established.
    fn init_succeeded(&mut self, now: Instant) {
        let session = match self.life.handshake_mut().map(|h| &mut h.step) {
            Some(Step::Initialized { session, .. }) => {
                std::mem::replace(session.as_mut(), Negotiated::probe())
            }
            _ => return,
        };
        self.life.era = Some(Era::Legacy);
        self.established(session, now);
    }

    /// The handshake is over: `session` is the one in force from now on.
    pub(super) fn established(&mut self, session: Negotiated, now: Instant) {
        let phase = std::mem::replace(&mut self.life.phase, Phase::Idle);
        let Phase::Initializing(Handshake {
            reason,
            previous,
            degraded,
            ..
        }) = phase
        else {
            self.life.phase = phase;
            return;
        };
        self.timers.cancel(Timer::InitDeadline);
        match &session.id {
            Some(id) => info!(session = %id, version = %session.version, "session ready"),
            None => info!(version = %session.version, "session ready (no session id)"),
        }
        // A fresh session has its own event ids.
        self.delivered.clear();
        let era = if session.version.is_modern() {
            Era::Modern
        } else {
            Era::Legacy
        };
        let era_news =
            previous.as_ref().map(|p| p.version.is_modern()) != Some(session.version.is_modern());
        match reason {
            None => {
                self.life.ever_connected = true;
                self.outputs
                    .push_back(Output::Event(SessionEvent::Connected {
                        protocol_version: session.version,
                    }));
            }
            Some(reason) => {
                let changed = previous.as_ref().is_none_or(|p| session.differs_from(p));
                info!(
                    ?reason,
                    capabilities_changed = changed,
                    "session re-initialized"
                );
                self.outputs
                    .push_back(Output::Event(SessionEvent::Reinitialized {
                        reason,
                        capabilities_changed: changed,
                    }));
            }
        }
        if era_news {
            self.outputs
                .push_back(Output::Event(SessionEvent::EraDetected { era }));
        }
        if let Some(reason) = degraded {
            self.outputs
                .push_back(Output::Event(SessionEvent::ChecksDegraded {
                    status: session.extension_status(),
                    reason,
                }));
        }
        let result = session.result.clone();
        self.life.phase = Phase::Ready(Established {
            session,
            since: now,
            confirmed: false,
        });
        for waiter in std::mem::take(&mut self.life.connect_waiters) {
            self.outputs.push_back(Output::Completed {
                call: waiter,
                result: Ok(result.clone()),
            });
        }
        // The stream of server-initiated messages first: a call's server may send there.
        self.open_listen(now);
        for id in self.calls.waiting() {
            self.send_call(id);
        }
        self.flush_notifications();
    }

    /// A success head answered a request of the handshake (`kind`): returns the reader its
    /// body calls for, if there is one to read.
    pub(in crate::proto::session) fn handshake_head(
        &mut self,
        http: HttpId,
        kind: ExKind,
        headers: &http::HeaderMap,
        ct: ContentType,
        now: Instant,
    ) -> Option<Reader> {
        if kind == ExKind::Initialized {
            self.exchanges.finish(http);
            self.init_succeeded(now);
            return None;
        }
        if kind == ExKind::Initialize {
            self.on_initialize_head(http, headers, now);
        }
        self.exchanges.get(http)?;
        let reader = Reader::of(ct);
        if reader.is_none() {
            if kind == ExKind::Discover {
                self.probe_answered(
                    ProbeAnswer::NoResponse,
                    Error::new(ErrorKind::Protocol, "answered with no JSON or SSE body"),
                    now,
                );
            } else {
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
        reader
    }

    /// A request of the handshake (`kind`) was refused: `server/discover`'s refusal is read
    /// by the probe; `initialize` refused the way only a modern server refuses it probes
    /// forward; otherwise the handshake failed, or, for a 5xx to `initialize`, got no answer.
    pub(in crate::proto::session) fn handshake_refused(
        &mut self,
        kind: ExKind,
        status: u16,
        refusal: Refusal,
        now: Instant,
    ) {
        match kind {
            ExKind::Discover => self.on_discover_refused(status, refusal, now),
            ExKind::Initialize if self.initialize_refused_as_modern(&refusal, now) => {}
            _ => {
                let error = match refusal.error.kind() {
                    ErrorKind::Rpc | ErrorKind::Unauthorized => refusal.error,
                    kind => Error::caused_by(kind, "initialize", refusal.error),
                };
                if kind == ExKind::Initialize && status >= 500 {
                    self.initialize_unanswered(error, now);
                } else {
                    self.init_failed(error, now);
                }
            }
        }
    }

    /// The handshake failed: report it (first connect) or back off and try again, while a
    /// call waits or until the recovery decision says the session is lost.
    pub(in crate::proto::session) fn init_failed(&mut self, error: Error, now: Instant) {
        let Some(h) = self.life.handshake() else {
            return;
        };
        match &h.step {
            Step::Initialize { http, .. }
            | Step::Initialized { http, .. }
            | Step::Discover { http, .. } => {
                let http = *http;
                self.exchanges.finish(http);
            }
            Step::Backoff => {}
        }
        self.timers.cancel(Timer::InitDeadline);
        warn!(error = %error, "initialization failed");
        if !self.life.ever_connected {
            // First connect: report to the app rather than retrying behind its back (a probe
            // waiting to be sent again included).
            self.life.phase = Phase::Idle;
            self.timers.cancel(Timer::InitBackoff);
            for waiter in std::mem::take(&mut self.life.connect_waiters) {
                self.outputs.push_back(Output::Completed {
                    call: waiter,
                    result: Err(error.clone()),
                });
            }
            for id in self.calls.ids() {
                self.complete(id, Err(error.clone()));
            }
            self.notifications.clear();
            return;
        }
        self.life.reinit_failures += 1;
        match decide(&Failure::ReinitFailed, &self.reinit_state()) {
            Decision::RetryReinitialize => {
                let delay = self.reinit_delay();
                if let Some(h) = self.life.handshake_mut() {
                    h.step = Step::Backoff;
                    h.last_failure = Some(error);
                }
                self.timers
                    .set(Timer::InitBackoff, now.checked_add(delay).unwrap_or(now));
            }
            _ => {
                let reason = self.life.handshake().and_then(|h| h.reason.clone());
                self.session_lost(reason, now)
            }
        }
    }
}

// Re-initialization, and a session lost and found again.
impl Session {
    /// Replaces the established session with a fresh one.
    ///
    /// A session that never worked (no call answered, no message on its stream, and younger
    /// than [`STABLE_SESSION`]) makes this re-initialization count as a failed one: it backs
    /// off exponentially, which is what slows the loop against a server that accepts
    /// `initialize` and refuses everything after it (each call's `max_attempts` ends it).
    pub(in crate::proto::session) fn start_reinit(&mut self, reason: ReinitReason, now: Instant) {
        let Phase::Ready(established) = &self.life.phase else {
            return;
        };
        if now.saturating_duration_since(established.since) >= STABLE_SESSION {
            self.life.confirm();
        }
        let delay = if self.life.is_confirmed() {
            None
        } else {
            self.life.reinit_failures += 1;
            let state = self.reinit_state();
            match decide(&Failure::ReinitFailed, &state) {
                Decision::RetryReinitialize => Some(self.reinit_delay()),
                _ => return self.session_lost(Some(reason), now),
            }
        };
        info!(?reason, ?delay, "re-initializing the session");
        let previous = match std::mem::replace(&mut self.life.phase, Phase::Idle) {
            Phase::Ready(e) => Some(e.session),
            _ => None,
        };
        // The standalone stream belongs to the old session; it is reopened afterwards.
        if let Some(http) = self.listen.reset() {
            self.exchanges.finish(http);
        }
        self.timers.cancel(Timer::ListenBackoff);
        // Answers queued for the old session's requests have nobody to reach.
        self.exchanges.drop_queued_answers();
        self.start_handshake(Some(reason), previous, delay, now);
        // Calls waiting for a retry on the old session: a resend waits for the new one; a
        // resume cannot happen any more (its cursor belongs to the old session).
        for id in self.calls.ids() {
            let Some(call) = self.calls.get_mut(id) else {
                continue;
            };
            match call.state() {
                CallState::Backoff(Retry::Resend) => {
                    call.wait();
                    self.timers.cancel(Timer::CallBackoff(id));
                }
                CallState::Backoff(Retry::Resume) => {
                    call.wait();
                    self.timers.cancel(Timer::CallBackoff(id));
                    self.apply(id, Failure::SessionReplaced, now);
                }
                _ => {}
            }
        }
    }

    /// Starts a handshake: at once, or after `delay` (a re-initialization backing off).
    pub(in crate::proto::session) fn start_handshake(
        &mut self,
        reason: Option<ReinitReason>,
        previous: Option<Negotiated>,
        delay: Option<Duration>,
        now: Instant,
    ) {
        self.life.generation += 1;
        self.life.phase = Phase::Initializing(Handshake {
            step: Step::Backoff,
            reason,
            previous,
            degraded: None,
            probe: Default::default(),
            last_failure: None,
        });
        match delay {
            Some(delay) => self
                .timers
                .set(Timer::InitBackoff, now.checked_add(delay).unwrap_or(now)),
            None => self.send_handshake(now),
        }
    }

    /// Sends the first request of a handshake: `server/discover` or `initialize`, per era.
    pub(in crate::proto::session) fn send_handshake(&mut self, now: Instant) {
        match self.handshake_era() {
            crate::proto::Era::Legacy => self.send_initialize(now),
            _ => self.send_discover(now),
        }
    }

    /// Backoff before the next re-initialization attempt.
    fn reinit_delay(&mut self) -> Duration {
        self.config.reconnect.delay(
            self.life.reinit_failures.saturating_sub(1),
            self.rng.next(),
            None,
        )
    }

    /// Facts for deciding on a failed re-initialization.
    fn reinit_state(&self) -> State {
        self.base_state(false)
            .reinit_failures(self.life.reinit_failures)
            // `connect` waiters are not counted: the driver bounds them with a timeout the core
            // does not see, so they could keep a dead server busy for ever.
            .calls_waiting(self.calls.len() > 0)
    }

    /// Re-initialization kept failing and no call waits: stop trying until the next call.
    /// Not an end: the backoff reached so far is kept for that next attempt.
    fn session_lost(&mut self, reason: Option<ReinitReason>, now: Instant) {
        warn!(
            failures = self.life.reinit_failures,
            "session lost: re-initialization kept failing; the next call reconnects"
        );
        let previous = match std::mem::replace(&mut self.life.phase, Phase::Idle) {
            Phase::Initializing(h) => h.previous,
            Phase::Ready(e) => Some(e.session),
            _ => None,
        };
        let retry_at = now.checked_add(self.reinit_delay()).unwrap_or(now);
        self.life.phase = Phase::Lost(Lost {
            reason: reason.unwrap_or(ReinitReason::SessionNotFound),
            previous,
            retry_at,
        });
        self.exchanges.finish_all_but_delete();
        self.timers.clear();
        self.listen = Listen::new();
        self.fail_everything(
            ErrorKind::SessionLost,
            "session lost: re-initialization kept failing",
            true,
        );
        self.outputs
            .push_back(Output::Event(SessionEvent::SessionLost));
    }

    /// The first call after the session was lost: re-initialize, no sooner than the backoff
    /// reached when it was given up.
    pub(in crate::proto::session) fn reconnect_lost(&mut self, now: Instant) {
        let Phase::Lost(lost) = std::mem::replace(&mut self.life.phase, Phase::Idle) else {
            return;
        };
        let wait = lost.retry_at.saturating_duration_since(now);
        info!(?wait, "reconnecting a lost session");
        let delay = (!wait.is_zero()).then_some(wait);
        self.start_handshake(Some(lost.reason), lost.previous, delay, now);
    }
}
