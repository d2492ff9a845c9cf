//! The handshakes of either era, from the first request to the session they establish: the
//! legacy `initialize` and the `notifications/initialized` that follows it; the modern
//! `server/discover`, and the era probe that reads its answer ([`read_probe`]) and falls back
//! to (or forward from) `initialize`. How a failed handshake is retried, and
//! re-initialization, are `reinit`'s.
//!
//! A modern session is stateless on the server: "established" means only that the client
//! knows the server speaks 2026-07-28 and what it offers.

use std::time::Instant;

use serde_json::{json, Map, Value};
use tracing::{debug, info, warn};

use super::{Established, Handshake, InitHead, Phase, ProbeState, Step};
use crate::error::{Error, ErrorKind, RpcError};
use crate::ids::RequestId;
use crate::proto::classify::{self, ContentType, Refusal};
use crate::proto::ext::ResumeSafety;
use crate::proto::modern;
use crate::proto::probe::{read_probe, says_era, ProbeAnswer, ProbeFacts, ProbeVerdict};
use crate::proto::session::exchanges::ExKind;
use crate::proto::session::headers::initialize_headers;
use crate::proto::session::negotiated::Negotiated;
use crate::proto::session::timers::Timer;
use crate::proto::session::{deadline_after, Session};
use crate::proto::version::ProtocolVersion;
use crate::proto::{
    jsonrpc, methods, Era, HttpId, HttpMethod, HttpPurpose, Output, ReinitReason, SessionEvent,
};

/// `server/discover`.
const DISCOVER: &str = "server/discover";

// Starting a handshake, and what its answers are.
impl Session {
    /// Sends the first request of a handshake: `server/discover` or `initialize`, per era.
    pub(in crate::proto::session) fn send_handshake(&mut self, now: Instant) {
        match self.handshake_era() {
            crate::proto::Era::Legacy => self.send_initialize(now),
            _ => self.send_discover(now),
        }
    }

    /// Which era the next handshake speaks first: the configured one, else a modern probe when
    /// the server refused the session's revision (whichever era the session spoke: the
    /// refusal lists what it speaks now), else what this origin was found (or last known) to
    /// speak, else a modern probe.
    fn handshake_era(&self) -> Era {
        let refused = self
            .life
            .handshake()
            .is_some_and(|h| h.reason == Some(ReinitReason::VersionRefused));
        match self.config.era {
            Era::Auto if refused => Era::Modern,
            Era::Auto => self
                .life
                .era
                .or(self.config.era_hint)
                .unwrap_or(Era::Modern),
            forced => forced,
        }
    }

    /// Whether the handshake may switch era when the server answers like the other one.
    fn may_switch_era(&self) -> bool {
        self.config.era == Era::Auto
    }

    /// A success head answered a request of the handshake (`kind`): returns the content type
    /// its body is read as, if there is one to read.
    pub(in crate::proto::session) fn handshake_head(
        &mut self,
        http: HttpId,
        kind: ExKind,
        headers: &http::HeaderMap,
        ct: ContentType,
        now: Instant,
    ) -> Option<ContentType> {
        if kind == ExKind::Initialized {
            self.exchanges.finish(http);
            self.init_succeeded(now);
            return None;
        }
        if kind == ExKind::Initialize {
            self.on_initialize_head(http, headers, now);
        }
        if !self.exchanges.in_flight(http) {
            return None;
        }
        let reader = Some(ct).filter(|ct| *ct != ContentType::Other);
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

    /// The name of the handshake request in flight (or waited for), for the errors that
    /// end it.
    pub(in crate::proto::session) fn handshake_request(&self) -> &'static str {
        match self.life.handshake() {
            Some(h) if matches!(h.step, Step::Discover { .. }) || h.probe.waiting => DISCOVER,
            _ => crate::proto::methods::INITIALIZE,
        }
    }

    /// A response on a handshake request's stream: the answer to `initialize` or to
    /// `server/discover`, when it answers the request awaited.
    pub(in crate::proto::session) fn on_handshake_message(
        &mut self,
        http: HttpId,
        id: Option<RequestId>,
        result: Result<Value, RpcError>,
        now: Instant,
    ) {
        let (expected, discover) = match self.life.handshake().and_then(|h| h.awaits()) {
            Some((rpc, discover)) => (Some(rpc), discover),
            None => (None, false),
        };
        // An error without an id on the probe's own stream can only be about the probe.
        let unattributed_error = discover && id.is_none() && result.is_err();
        if !unattributed_error && (id.is_none() || id.as_ref() != expected) {
            warn!("unexpected response on the handshake stream ignored");
        } else if discover {
            self.on_discover_response(http, result, now);
        } else {
            self.on_initialize_response(http, result, now);
        }
    }

    /// The handshake is over: `session` is the one in force from now on.
    fn established(&mut self, session: Negotiated, now: Instant) {
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
        let era = if session.version.is_modern() {
            Era::Modern
        } else {
            Era::Legacy
        };
        let era_news =
            previous.as_ref().map(|p| p.version.is_modern()) != Some(session.version.is_modern());
        let after_version_refusal = reason == Some(ReinitReason::VersionRefused);
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
            after_version_refusal,
        });
        self.answer_connects(Ok(result));
        // The stream of server-initiated messages first: a call's server may send there.
        self.open_listen(now);
        for id in self.calls.waiting() {
            self.send_call(id);
        }
        self.flush_notifications();
    }
}

// The legacy handshake: `initialize`, then `notifications/initialized`.
impl Session {
    /// Sends `initialize` for the handshake in progress.
    fn send_initialize(&mut self, now: Instant) {
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
        let http = self.exchanges.open(
            ExKind::Initialize,
            HttpMethod::Post,
            HttpPurpose::Request,
            initialize_headers(),
            Some(body),
            &Negotiated::unknown(self.life.generation, self.config.protocol_version),
        );
        self.timers.set(
            Timer::InitDeadline,
            deadline_after(now, self.config.call_timeout),
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
    fn on_initialize_response(
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
        let headers = session.headers.post(None);
        let body = jsonrpc::encode_notification(methods::INITIALIZED, None);
        let http = self.exchanges.open(
            ExKind::Initialized,
            HttpMethod::Post,
            HttpPurpose::Notify,
            headers,
            Some(body),
            &session,
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
            Some(Step::Initialized { session, .. }) => std::mem::replace(
                session.as_mut(),
                Negotiated::unknown(0, ProtocolVersion::MODERN),
            ),
            _ => return,
        };
        self.life.era = Some(Era::Legacy);
        self.established(session, now);
    }

    /// `initialize` got no answer (no connection, a broken stream, a 5xx). After a probe
    /// that met a 5xx, the server is failing rather than legacy: the probe is sent again,
    /// while attempts remain. Otherwise, or once they ran out, the handshake failed.
    pub(in crate::proto::session) fn initialize_unanswered(&mut self, error: Error, now: Instant) {
        let max_attempts = self.config.reconnect.max_attempts;
        let retry = match self.life.handshake_mut() {
            Some(h) if matches!(h.step, Step::Initialize { .. }) => {
                h.probe.initialize_unanswered(max_attempts)
            }
            _ => None,
        };
        let Some(unanswered) = retry else {
            return self.init_failed(error, now);
        };
        if let Some(Step::Initialize { http, .. }) = self.life.handshake().map(|h| &h.step) {
            let http = *http;
            self.exchanges.finish(http);
        }
        // The probe goes out within `initialize`'s deadline, still running.
        self.probe_again(unanswered, &error, now);
    }

    /// A legacy handshake was refused in a way only a modern server refuses: probe forward.
    /// Returns whether it did.
    fn initialize_refused_as_modern(&mut self, refusal: &Refusal, now: Instant) -> bool {
        let modern_refusal = refusal
            .error
            .rpc_error()
            .is_some_and(|rpc| modern::modern_error(rpc).is_some());
        if !modern_refusal || !self.may_switch_era() || self.life.era == Some(Era::Modern) {
            return false;
        }
        info!("initialize answered with a modern error: probing with server/discover");
        self.timers.cancel(Timer::InitDeadline);
        self.life.era = Some(Era::Modern);
        if let Some(h) = self.life.handshake_mut() {
            h.probe.modern_refused();
        }
        self.send_discover(now);
        true
    }
}

// The modern handshake, and the era probe.
impl Session {
    /// Sends `server/discover` for the handshake in progress.
    fn send_discover(&mut self, now: Instant) {
        if self.life.handshake().is_none() {
            return;
        }
        let rpc = self.calls.new_rpc();
        let probe = Negotiated::unknown(self.life.generation, ProtocolVersion::MODERN);
        let modern = Some((&self.client_meta, &self.tool_headers));
        let (body, headers) = probe.request(&rpc, DISCOVER, &mut None, None, modern);
        debug!(generation = self.life.generation, "sending server/discover");
        let http = self.exchanges.open(
            ExKind::Discover,
            HttpMethod::Post,
            HttpPurpose::Request,
            headers,
            Some(body),
            &probe,
        );
        // A probe sent again after no answer stays within the first one's deadline.
        if !self.timers.is_armed(Timer::InitDeadline) {
            self.timers.set(
                Timer::InitDeadline,
                deadline_after(now, self.config.call_timeout),
            );
        }
        if let Some(h) = self.life.handshake_mut() {
            h.step = Step::Discover { http, rpc };
            h.probe.sent();
        }
    }

    /// The answer to `server/discover` (a result or a JSON-RPC error in a 2xx body).
    fn on_discover_response(
        &mut self,
        http: HttpId,
        result: Result<Value, RpcError>,
        now: Instant,
    ) {
        self.exchanges.finish(http);
        let (answer, cause) = match result {
            Ok(result) => (
                ProbeAnswer::Result(result),
                Error::new(
                    ErrorKind::Protocol,
                    "the result lists no revision this client speaks",
                ),
            ),
            Err(error) => (ProbeAnswer::Error(error.clone()), Error::rpc(error)),
        };
        self.probe_answered(answer, cause, now);
    }

    /// `server/discover` was refused (non-2xx).
    fn on_discover_refused(&mut self, status: u16, refusal: Refusal, now: Instant) {
        let answer = ProbeAnswer::Refused {
            status,
            error: refusal.error.rpc_error().cloned(),
        };
        self.probe_answered(answer, refusal.error, now);
    }

    /// What an answer to the probe means ([`read_probe`]), carried out. `cause` describes the
    /// answer: the handshake fails with it if it fails on this answer.
    pub(in crate::proto::session) fn probe_answered(
        &mut self,
        answer: ProbeAnswer,
        cause: Error,
        now: Instant,
    ) {
        let may_switch_era = self.may_switch_era();
        let max_attempts = self.config.reconnect.max_attempts;
        let Some(h) = self.life.handshake_mut() else {
            return;
        };
        let Step::Discover { http, .. } = h.step else {
            debug!("answer to a superseded server/discover ignored");
            return;
        };
        let facts = h.probe.answered(&answer, may_switch_era, max_attempts);
        let verdict = read_probe(&answer, &facts);
        h.probe.read(verdict);
        self.exchanges.finish(http);
        debug!(?verdict, "server/discover answered");
        match verdict {
            ProbeVerdict::Modern => match answer {
                ProbeAnswer::Result(result) => self.discovered(result, now),
                // A modern server without the method: modern all the same.
                _ => self.discovered(
                    json!({"supportedVersions": [ProtocolVersion::MODERN.as_str()]}),
                    now,
                ),
            },
            ProbeVerdict::RetryVersion => {
                self.timers.cancel(Timer::InitDeadline);
                self.send_discover(now);
            }
            ProbeVerdict::Legacy => {
                info!("the server speaks the legacy era; initializing");
                self.timers.cancel(Timer::InitDeadline);
                self.life.era = Some(Era::Legacy);
                self.life.era_inferred = !says_era(&answer);
                self.send_initialize(now);
            }
            ProbeVerdict::FallBack => {
                info!(%cause, "server/discover failed on a server that answers; initializing");
                self.timers.cancel(Timer::InitDeadline);
                self.life.era_inferred = true;
                self.send_initialize(now);
            }
            ProbeVerdict::Retry => self.probe_again(facts.unanswered, &cause, now),
            ProbeVerdict::Report => {
                // What the answer would have meant with the era free to change.
                let free = ProbeFacts {
                    may_switch_era: true,
                    after_modern_refusal: false,
                    ..facts
                };
                let error = if read_probe(&answer, &free) != ProbeVerdict::Legacy {
                    cause
                } else if facts.after_modern_refusal {
                    Error::caused_by(
                        ErrorKind::Protocol,
                        "initialize was refused as by a 2026-07-28 server, and this as by a \
                         legacy one",
                        cause,
                    )
                } else {
                    // An answer too large to read is still reported as what it was.
                    let kind = match cause.kind() {
                        ErrorKind::TooLarge => ErrorKind::TooLarge,
                        _ => ErrorKind::Protocol,
                    };
                    Error::caused_by(kind, "not a 2026-07-28 server", cause)
                };
                self.init_failed(error.during(DISCOVER), now)
            }
        }
    }

    /// Sends the probe again after the backoff delay for its `unanswered`th unanswered
    /// attempt. Read-only, so safe to send again; the handshake's deadline keeps running.
    fn probe_again(&mut self, unanswered: u32, cause: &Error, now: Instant) {
        let attempt = unanswered.saturating_sub(1);
        let delay = self
            .config
            .reconnect
            .delay(attempt, self.rng.next(), cause.retry_after());
        debug!(?delay, %cause, "server/discover got no answer; probing again");
        if let Some(h) = self.life.handshake_mut() {
            h.step = Step::Backoff;
            h.probe.wait();
        }
        self.timers
            .set(Timer::InitBackoff, now.checked_add(delay).unwrap_or(now));
    }

    /// Whether a server listing `supported` (and no modern revision of ours) can still be
    /// spoken to: it lists a legacy revision we speak, and the era is not forced.
    pub(in crate::proto::session) fn may_fall_back_to(&self, supported: &[String]) -> bool {
        self.may_switch_era()
            && supported
                .iter()
                .filter_map(|s| ProtocolVersion::parse(s))
                .any(|v| !v.is_modern())
    }

    /// Whether `rpc`, refusing a request of a legacy session, is the refusal of a server that
    /// speaks only the modern era now (a redeploy): -32022 listing a modern revision we speak
    /// and no legacy one, with the era free to change. Not on a session a probe for the same
    /// refusal has just found legacy, until it works: that server answers the probe and the
    /// calls in different eras, and the refusal is the call's answer.
    pub(in crate::proto::session) fn refused_as_modern_only(
        &self,
        rpc: &RpcError,
        now: Instant,
    ) -> bool {
        let Some(modern::ModernError::UnsupportedVersion { supported }) = modern::modern_error(rpc)
        else {
            return false;
        };
        modern::pick_version(&supported).is_some()
            && !self.may_fall_back_to(&supported)
            && self.may_switch_era()
            && !self.life.refused_again(now)
    }

    /// A recognised discovery: the session is the modern one.
    fn discovered(&mut self, result: Value, now: Instant) {
        let supported = modern::strings(result.get("supportedVersions"));
        if modern::pick_version(&supported).is_none() {
            // Not reached through `read_probe`, which reads such a list otherwise.
            let error = Error::new(
                ErrorKind::Protocol,
                "server/discover lists no modern revision this client speaks",
            );
            return self.init_failed(error, now);
        }
        let capabilities = result
            .get("capabilities")
            .cloned()
            .unwrap_or(Value::Object(Map::new()));
        // What `connect` returns: the discovery, in the shape of an `initialize` result.
        let server_info = result
            .get("_meta")
            .and_then(|m| m.get(modern::META_SERVER_INFO))
            .cloned()
            .unwrap_or_else(|| json!({"name": "", "version": ""}));
        let mut shaped = json!({
            "protocolVersion": ProtocolVersion::MODERN.as_str(),
            "capabilities": capabilities,
            "serverInfo": server_info,
        });
        if let Some(instructions) = result.get("instructions") {
            shaped["instructions"] = instructions.clone();
        }
        let session = Negotiated::modern(self.life.generation, capabilities, shaped);
        self.life.era = Some(Era::Modern);
        self.life.era_inferred = false;
        self.established(session, now);
    }
}

// The probes' record is kept with the phase's other records; only the probe's reading, here,
// changes it.
impl ProbeState {
    /// A probe was answered: counts an answer that was none (a transport failure, a 5xx), and
    /// returns the facts [`read_probe`] reads.
    fn answered(
        &mut self,
        answer: &ProbeAnswer,
        may_switch_era: bool,
        max_attempts: u32,
    ) -> ProbeFacts {
        if matches!(answer, ProbeAnswer::Transport)
            || matches!(answer, ProbeAnswer::Refused { status, .. } if *status >= 500)
        {
            self.unanswered += 1;
        }
        ProbeFacts {
            may_switch_era,
            after_modern_refusal: self.after_modern_refusal,
            unanswered: self.unanswered,
            max_attempts,
            version_retries: self.version_retries,
        }
    }

    /// What a verdict leaves for the next probe: a version refusal retried, or `initialize`
    /// tried because the probe met a server that answers but failed.
    fn read(&mut self, verdict: ProbeVerdict) {
        match verdict {
            ProbeVerdict::RetryVersion => self.version_retries += 1,
            ProbeVerdict::FallBack => self.fell_back = true,
            _ => {}
        }
    }

    /// The probe is sent (again).
    fn sent(&mut self) {
        self.waiting = false;
    }

    /// The probe waits out a backoff before it is sent again.
    fn wait(&mut self) {
        self.waiting = true;
        self.fell_back = false;
    }

    /// `initialize` was refused the way only a modern server refuses it.
    fn modern_refused(&mut self) {
        self.after_modern_refusal = true;
    }

    /// `initialize` got no answer: after a fall back from a probe that met a 5xx, the server
    /// is failing rather than legacy, and the probe is sent again while attempts remain.
    /// Returns the unanswered attempts so far when it is.
    fn initialize_unanswered(&mut self, max_attempts: u32) -> Option<u32> {
        if !self.fell_back {
            return None;
        }
        self.unanswered += 1;
        (self.unanswered < max_attempts).then_some(self.unanswered)
    }
}
