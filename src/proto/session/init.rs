//! The handshake: `initialize`, the `notifications/initialized` that follows, and comparing
//! the new session with the one it replaces.

use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};
use tracing::{debug, info, warn};

use super::exchanges::{ExKind, Sent};
use super::headers::{initialize_headers, session_id_header, SessionHeaders};
use super::lifecycle::{
    Checks, Established, Handshake, InitHead, KeyPlacement, Negotiated, Phase, Step,
};
use super::timers::Timer;
use super::Session;
use crate::error::{Error, ErrorKind, RpcError};
use crate::proto::classify;
use crate::proto::decide::{decide, Decision, Failure};
use crate::proto::ext::ResumeSafety;
use crate::proto::version::ProtocolVersion;
use crate::proto::{jsonrpc, methods, Era, HttpId, HttpMethod, HttpPurpose, Output, SessionEvent};

/// A session that stayed up this long worked, whatever else happened on it.
pub(super) const STABLE_SESSION: Duration = Duration::from_secs(5);

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
        let sent = Sent {
            carried_session_id: false,
            allow_batch: self.config.protocol_version.allows_batch(),
            checks: Checks::default(),
        };
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
    pub(super) fn on_initialize_head(
        &mut self,
        http: HttpId,
        headers: &http::HeaderMap,
        now: Instant,
    ) {
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
    pub(super) fn on_initialize_response(
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
        // A trusting client runs no check of the extension: it behaves like a stock one.
        let checks = match (&ext, trust) {
            (Some(e), false) => Checks {
                hash: e.capability_hash,
                sequenced: e.sequenced_event_ids,
                rejections: true,
            },
            _ => Checks::default(),
        };
        let session = Negotiated {
            generation,
            headers: SessionHeaders::new(
                head.session_id.as_ref().and_then(session_id_header),
                version,
            ),
            id: head.session_id,
            version,
            server_capabilities: result
                .get("capabilities")
                .cloned()
                .unwrap_or(Value::Object(Map::new())),
            hash: head.hash,
            keys: ext
                .as_ref()
                .and_then(|e| e.idempotency_meta_key.clone())
                .map(KeyPlacement::Meta),
            ext,
            checks,
            result,
        };
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
    pub(super) fn init_succeeded(&mut self, now: Instant) {
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

    /// The handshake failed: report it (first connect) or back off and try again, while a
    /// call waits or until the recovery decision says the session is lost.
    pub(super) fn init_failed(&mut self, error: Error, now: Instant) {
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
