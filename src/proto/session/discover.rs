//! The modern handshake and era detection: `server/discover`, what its answer says about the
//! server's era, and falling back to (or forward from) `initialize`.
//!
//! A modern session is stateless on the server: "established" means only that the client
//! knows the server speaks 2026-07-28 and what it offers.

use std::time::Instant;

use serde_json::{json, Map, Value};
use tracing::{debug, info};

use super::exchanges::{request_headers, Checks, ExKind, Sent};
use super::lifecycle::{KeyPlacement, Negotiated, Step};
use super::timers::Timer;
use super::Session;
use crate::error::{Error, ErrorKind, RpcError};
use crate::proto::classify::{Refusal, Refused};
use crate::proto::ext::{self, ResumeSafety};
use crate::proto::modern::{self, ModernError};
use crate::proto::version::ProtocolVersion;
use crate::proto::{jsonrpc, Era, HttpId, HttpMethod, HttpPurpose};

/// `server/discover`.
pub(super) const DISCOVER: &str = "server/discover";
/// Times a handshake retries a revision the server refused while listing it as supported.
const MAX_VERSION_RETRIES: u32 = 2;

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
        let mut headers = request_headers(&probe, true);
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
        self.timers.set(
            Timer::InitDeadline,
            now.checked_add(self.config.call_timeout).unwrap_or(now),
        );
        if let Some(h) = self.life.handshake_mut() {
            h.step = Step::Discover { http, rpc };
        }
    }

    /// The answer to `server/discover` (a result or a JSON-RPC error in a 2xx body).
    pub(super) fn on_discover_response(
        &mut self,
        http: HttpId,
        result: Result<Value, RpcError>,
        now: Instant,
    ) {
        self.exchanges.finish(http);
        match result {
            Ok(result) if modern::is_discover_result(&result) => {
                self.discovered(result, now);
            }
            Ok(_) => self.not_modern("server/discover answered with something else", now),
            Err(error) => self.discover_error(error, now),
        }
    }

    /// `server/discover` was refused (non-2xx).
    pub(super) fn on_discover_refused(&mut self, status: u16, refusal: Refusal, now: Instant) {
        match refusal.error.rpc_error() {
            Some(rpc) if modern::modern_error(rpc).is_some() => {
                let rpc = rpc.clone();
                self.discover_error(rpc, now)
            }
            // A modern server without the method: modern all the same (the specification
            // tells this 404 apart from a legacy one by its JSON-RPC body).
            Some(rpc) if status == 404 && rpc.code == modern::METHOD_NOT_FOUND => self.discovered(
                json!({"supportedVersions": [ProtocolVersion::MODERN.as_str()]}),
                now,
            ),
            _ if matches!(
                refusal.class,
                Refused::NotProcessed { .. } | Refused::NotAllowed | Refused::SessionGone
            ) =>
            {
                self.not_modern(&format!("server/discover answered HTTP {status}"), now)
            }
            _ => {
                let error =
                    Error::caused_by(refusal.error.kind(), "server/discover", refusal.error);
                self.init_failed(error, now)
            }
        }
    }

    fn discover_error(&mut self, error: RpcError, now: Instant) {
        match modern::modern_error(&error) {
            Some(ModernError::UnsupportedVersion { supported })
                if modern::pick_version(&supported).is_some() =>
            {
                // It refused a revision it lists as supported (a server may refuse a first
                // request this way): retry with the one it names, a bounded number of times.
                let retries = self.life.handshake_mut().map(|h| {
                    h.version_retries += 1;
                    h.version_retries
                });
                if retries.is_some_and(|r| r <= MAX_VERSION_RETRIES) {
                    self.timers.cancel(Timer::InitDeadline);
                    self.send_discover(now)
                } else {
                    self.init_failed(Error::rpc(error), now)
                }
            }
            Some(ModernError::UnsupportedVersion { supported }) => {
                // A modern server that does not speak our modern revision. If it speaks a
                // legacy one we do, that is the way in.
                if self.may_fall_back_to(&supported) {
                    self.not_modern("the server speaks no modern revision of ours", now)
                } else {
                    self.init_failed(Error::rpc(error), now)
                }
            }
            Some(_) => self.init_failed(Error::rpc(error), now),
            None => self.not_modern(&format!("server/discover answered {error}"), now),
        }
    }

    /// Whether a server listing `supported` (and no modern revision of ours) can still be
    /// spoken to: it lists a legacy revision we speak, and the era is not forced.
    pub(super) fn may_fall_back_to(&self, supported: &[String]) -> bool {
        self.may_switch_era()
            && supported
                .iter()
                .filter_map(|s| ProtocolVersion::parse(s))
                .any(|v| !v.is_modern())
    }

    /// The server is not (or no longer) modern: fall back to `initialize`, or fail when the
    /// era is forced.
    fn not_modern(&mut self, why: &str, now: Instant) {
        if !self.may_switch_era() {
            return self.init_failed(
                Error::new(
                    ErrorKind::Protocol,
                    format!("not a 2026-07-28 server: {why}"),
                ),
                now,
            );
        }
        info!(why, "the server speaks the legacy era; initializing");
        self.timers.cancel(Timer::InitDeadline);
        self.life.era = Some(Era::Legacy);
        self.send_initialize(now);
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
        self.send_discover(now);
        true
    }

    /// A recognised discovery: the session is the modern one.
    fn discovered(&mut self, result: Value, now: Instant) {
        let supported = modern::strings(result.get("supportedVersions"));
        if modern::pick_version(&supported).is_none() {
            return self.discover_error(
                RpcError {
                    code: modern::UNSUPPORTED_PROTOCOL_VERSION,
                    message: "server/discover lists no modern revision this client speaks"
                        .to_owned(),
                    data: Some(json!({"supported": supported})),
                },
                now,
            );
        }
        let capabilities = result
            .get("capabilities")
            .cloned()
            .unwrap_or(Value::Object(Map::new()));
        let ext = ResumeSafety::from_capabilities(&capabilities);
        let keys = match &ext {
            Some(e) => e.idempotency_meta_key.clone().map(KeyPlacement::Meta),
            None => None,
        }
        .or_else(|| ext::standard_idempotency(&capabilities).then_some(KeyPlacement::Params));
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
        let session = Negotiated {
            generation: self.life.generation,
            id: None,
            id_header: None,
            version: ProtocolVersion::MODERN,
            server_capabilities: capabilities,
            hash: None,
            // The capability hash and sequenced ids have no job without resumption.
            checks: Checks::default(),
            ext,
            keys,
            result: shaped,
        };
        self.life.era = Some(Era::Modern);
        self.established(session, now);
    }
}

impl Negotiated {
    /// The stand-in for a modern request sent before anything is known of the server.
    pub(super) fn probe() -> Negotiated {
        Negotiated {
            generation: 0,
            id: None,
            id_header: None,
            version: ProtocolVersion::MODERN,
            server_capabilities: Value::Null,
            hash: None,
            ext: None,
            checks: Checks::default(),
            keys: None,
            result: Value::Null,
        }
    }
}
