//! The modern handshake and era detection: `server/discover`, what its answer says about the
//! server's era, and falling back to (or forward from) `initialize`.
//!
//! A modern session is stateless on the server: "established" means only that the client
//! knows the server speaks 2026-07-28 and what it offers.

use std::time::Instant;

use serde_json::{json, Map, Value};
use tracing::{debug, info};

use super::Step;
use crate::error::{Error, ErrorKind, RpcError};
use crate::proto::classify::Refusal;
use crate::proto::modern;
use crate::proto::probe::{read_probe, ProbeAnswer, ProbeFacts, ProbeVerdict};
use crate::proto::session::exchanges::{ExKind, Sent};
use crate::proto::session::negotiated::Negotiated;
use crate::proto::session::timers::Timer;
use crate::proto::session::Session;
use crate::proto::version::ProtocolVersion;
use crate::proto::{jsonrpc, Era, HttpId, HttpMethod, HttpPurpose};

/// `server/discover`.
const DISCOVER: &str = "server/discover";

impl Session {
    /// Which era the next handshake speaks first: the configured one, else what this origin
    /// was found (or last known) to speak, else a modern probe.
    pub(super) fn handshake_era(&self) -> Era {
        match self.config.era {
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

    /// Sends `server/discover` for the handshake in progress.
    pub(super) fn send_discover(&mut self, now: Instant) {
        if self.life.handshake().is_none() {
            return;
        }
        let rpc = self.calls.new_rpc();
        let mut params = None;
        modern::add_request_meta(&mut params, ProtocolVersion::MODERN, &self.client_meta);
        let body = jsonrpc::encode_request(&rpc, DISCOVER, params.as_ref());
        let probe = Negotiated::probe();
        let mut headers = probe.headers.post();
        if let Ok(v) = http::HeaderValue::from_str(DISCOVER) {
            headers.insert(modern::MCP_METHOD, v);
        }
        debug!(generation = self.life.generation, "sending server/discover");
        let http = self.exchanges.open(
            ExKind::Discover,
            HttpMethod::Post,
            HttpPurpose::Request,
            headers,
            Some(body),
            Sent::on(&probe),
        );
        // A probe sent again after no answer stays within the first one's deadline.
        if !self.timers.is_armed(Timer::InitDeadline) {
            self.timers.set(
                Timer::InitDeadline,
                now.checked_add(self.config.call_timeout).unwrap_or(now),
            );
        }
        if let Some(h) = self.life.handshake_mut() {
            h.step = Step::Discover { http, rpc };
            h.probe.sent();
        }
    }

    /// The answer to `server/discover` (a result or a JSON-RPC error in a 2xx body).
    pub(in crate::proto::session) fn on_discover_response(
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
    pub(super) fn on_discover_refused(&mut self, status: u16, refusal: Refusal, now: Instant) {
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
                self.send_initialize(now);
            }
            ProbeVerdict::FallBack => {
                info!(%cause, "server/discover failed on a server that answers; initializing");
                self.timers.cancel(Timer::InitDeadline);
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

    /// Whether a server listing `supported` (and no modern revision of ours) can still be
    /// spoken to: it lists a legacy revision we speak, and the era is not forced.
    pub(in crate::proto::session) fn may_fall_back_to(&self, supported: &[String]) -> bool {
        self.may_switch_era()
            && supported
                .iter()
                .filter_map(|s| ProtocolVersion::parse(s))
                .any(|v| !v.is_modern())
    }

    /// The name of the handshake request in flight (or waited for), for the errors that
    /// end it.
    pub(in crate::proto::session) fn handshake_request(&self) -> &'static str {
        match self.life.handshake() {
            Some(h) if matches!(h.step, Step::Discover { .. }) || h.probe.waiting => DISCOVER,
            _ => crate::proto::methods::INITIALIZE,
        }
    }

    /// A legacy handshake was refused in a way only a modern server refuses: probe forward.
    /// Returns whether it did.
    pub(super) fn initialize_refused_as_modern(&mut self, refusal: &Refusal, now: Instant) -> bool {
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
        self.established(session, now);
    }
}

/// What the `server/discover` probes of one handshake met so far.
#[derive(Debug, Default)]
pub(super) struct ProbeState {
    /// Probes that got no answer (transport failure, 5xx).
    unanswered: u32,
    /// Version refusals retried.
    version_retries: u32,
    /// `initialize` was refused the way only a modern server refuses it.
    after_modern_refusal: bool,
    /// `initialize` is being tried because the probe met a 5xx: if it gets no answer either,
    /// the probe is sent again instead of the handshake failing.
    fell_back: bool,
    /// The probe's backoff is running (a deadline then names `server/discover`).
    waiting: bool,
}

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
