//! Initialization and re-initialization: the `initialize` exchange, the
//! `notifications/initialized` that follows, and comparing the new context with the old one.

use std::time::{Duration, Instant};

use http::HeaderMap;
use serde_json::{json, Map, Value};
use tracing::{debug, info, warn};

use super::calls::CallState;
use super::exchange::{ContentType, ExKind};
use super::listen::{Listen, ListenState};
use super::recovery::Retry;
use super::{checks, Ctx, Phase, Session, BATCH_VERSION};
use crate::error::{Error, ErrorKind, RpcError};
use crate::ids::{CapabilityHash, RequestId, SessionId};
use crate::proto::config::SUPPORTED_PROTOCOL_VERSIONS;
use crate::proto::decide::{decide, Decision, Failure, State};
use crate::proto::ext::ResumeSafety;
use crate::proto::jsonrpc;
use crate::proto::{CallId, HttpId, HttpMethod, HttpPurpose, Output, ReinitReason, SessionEvent};

#[derive(Debug)]
pub(super) enum InitStep {
    Backoff { until: Instant },
    Initialize { http: HttpId, rpc: RequestId },
    Initialized { http: HttpId },
}

#[derive(Debug)]
pub(super) struct Init {
    pub(super) step: InitStep,
    /// `None` for the first connect.
    pub(super) reason: Option<ReinitReason>,
    pub(super) deadline: Instant,
    pub(super) head_session_id: Option<SessionId>,
    pub(super) head_hash: Option<CapabilityHash>,
    pub(super) pending: Option<Ctx>,
    pub(super) result: Option<Value>,
    /// Why advertised extension checks cannot be used on the session being set up.
    pub(super) degraded: Option<String>,
}

/// A session that stayed up this long worked, whatever else happened on it.
pub(super) const STABLE_SESSION: Duration = Duration::from_secs(5);

impl Session {
    /// Starts (re-)initializing: at once, or after `delay` (a re-initialization backing off).
    pub(super) fn start_init(
        &mut self,
        reason: Option<ReinitReason>,
        delay: Option<Duration>,
        now: Instant,
    ) {
        self.phase = Phase::Initializing;
        self.generation += 1;
        self.confirmed = false;
        self.init = Some(Init {
            step: InitStep::Backoff {
                until: now.checked_add(delay.unwrap_or_default()).unwrap_or(now),
            },
            reason,
            deadline: now,
            head_session_id: None,
            head_hash: None,
            pending: None,
            result: None,
            degraded: None,
        });
        if delay.is_none() {
            self.send_initialize(now);
        }
    }

    /// Replaces the established session with a fresh one.
    ///
    /// A session that never worked (no call answered, no message on its stream, and younger
    /// than [`STABLE_SESSION`]) makes this re-initialization count as a failed one: it backs
    /// off, and after `max_reinit_failures` the session is lost. That is what ends the loop
    /// against a server that accepts `initialize` and refuses everything after it.
    pub(super) fn start_reinit(&mut self, reason: ReinitReason, now: Instant) {
        if self.phase != Phase::Ready {
            return;
        }
        if self
            .established_at
            .is_some_and(|t| now.saturating_duration_since(t) >= STABLE_SESSION)
        {
            self.confirm();
        }
        let delay = if self.confirmed {
            None
        } else {
            self.reinit_failures += 1;
            let state = State {
                reinit_failures: self.reinit_failures,
                ..self.base_state(false)
            };
            match decide(&Failure::ReinitFailed, &state) {
                Decision::RetryReinitialize => Some(self.reinit_delay()),
                _ => return self.session_lost(),
            }
        };
        info!(?reason, ?delay, "re-initializing the session");
        self.previous = self.ctx.take();
        // The listen stream belongs to the old session; it is reopened afterwards.
        if let ListenState::Open(http) = self.listen.state {
            self.finish_exchange(http);
        }
        self.listen = Listen::new();
        // Answers queued for the old session's requests have nobody to reach.
        self.answers.queue.clear();
        self.start_init(Some(reason), delay, now);
        // Calls waiting for a retry on the old session: a resend waits for the new one; a
        // resume cannot happen any more (its cursor belongs to the old session).
        let ids: Vec<CallId> = self.calls.keys().copied().collect();
        for id in ids {
            let Some(call) = self.calls.get_mut(&id) else {
                continue;
            };
            match call.state {
                CallState::Backoff {
                    then: Retry::Resend,
                    ..
                } => call.state = CallState::Waiting,
                CallState::Backoff {
                    then: Retry::Resume,
                    ..
                } => self.apply(id, Failure::SessionReplaced, now),
                _ => {}
            }
        }
    }

    /// The current session works: re-initializations start counting afresh.
    pub(super) fn confirm(&mut self) {
        self.confirmed = true;
        self.reinit_failures = 0;
    }

    /// Backoff before the next re-initialization attempt.
    fn reinit_delay(&mut self) -> Duration {
        self.config.reconnect.delay(
            self.reinit_failures.saturating_sub(1),
            self.rng.next(),
            None,
        )
    }

    pub(super) fn send_initialize(&mut self, now: Instant) {
        let Some(init) = &mut self.init else {
            return;
        };
        self.next_rpc += 1;
        let rpc = RequestId::Number(self.next_rpc);
        let params = json!({
            "protocolVersion": self.config.protocol_version,
            "capabilities": self.config.client_capabilities,
            "clientInfo": {"name": self.config.client_name, "version": self.config.client_version},
        });
        let body = jsonrpc::encode_request(&rpc, "initialize", Some(&params));
        init.deadline = now.checked_add(self.config.call_timeout).unwrap_or(now);
        init.head_session_id = None;
        init.head_hash = None;
        init.pending = None;
        init.result = None;
        debug!(generation = self.generation, "sending initialize");
        let headers = vec![
            ("accept", "application/json, text/event-stream".to_owned()),
            ("content-type", "application/json".to_owned()),
        ];
        let http = self.transmit(
            ExKind::Initialize,
            HttpMethod::Post,
            HttpPurpose::Request,
            headers,
            Some(body),
            false,
            self.config.protocol_version == BATCH_VERSION,
        );
        if let Some(init) = &mut self.init {
            init.step = InitStep::Initialize { http, rpc };
        }
    }

    pub(super) fn on_initialize_head(
        &mut self,
        http: HttpId,
        headers: &HeaderMap,
        ct: ContentType,
        now: Instant,
    ) {
        let session_id = match headers.get(SessionId::HEADER) {
            None => None,
            Some(v) => match SessionId::parse(v.as_bytes()) {
                Ok(id) => Some(id),
                Err(e) => {
                    self.finish_exchange(http);
                    self.init_failed(
                        Error::with_source(ErrorKind::Protocol, "invalid Mcp-Session-Id", e),
                        now,
                    );
                    return;
                }
            },
        };
        let hash = checks::head_hash(headers);
        if let Some(init) = &mut self.init {
            init.head_session_id = session_id;
            init.head_hash = hash;
        }
        match self.success_body(ct) {
            Some(body) => self.set_body(http, body),
            None => {
                self.finish_exchange(http);
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

    pub(super) fn on_initialize_response(
        &mut self,
        http: HttpId,
        result: Result<Value, RpcError>,
        now: Instant,
    ) {
        self.finish_exchange(http);
        let result = match result {
            Ok(r) => r,
            Err(e) => return self.init_failed(Error::rpc(e), now),
        };
        let version = result.get("protocolVersion").and_then(Value::as_str);
        let Some(version) = version.filter(|v| SUPPORTED_PROTOCOL_VERSIONS.contains(v)) else {
            let mut shown = version.unwrap_or("<none>").to_owned();
            jsonrpc::truncate(&mut shown, 64);
            return self.init_failed(
                Error::new(
                    ErrorKind::Protocol,
                    format!("server answered unsupported protocol version {shown:?}"),
                ),
                now,
            );
        };
        let Some(init) = &mut self.init else {
            return;
        };
        let mut ext = ResumeSafety::from_initialize_result(&result);
        if let Some(e) = &mut ext {
            if e.capability_hash && init.head_hash.is_none() {
                // Nothing to compare against: the checks cannot run. The app is told (an
                // event, and the queryable extension status), not just the log.
                warn!("server advertised capability hashes but sent no valid one at initialize; hash checks off");
                e.capability_hash = false;
                init.degraded = Some(
                    "the server advertised capability hashes but its initialize response \
                     carried no valid Mcp-Capability-Hash: hash checks are off for this session"
                        .to_owned(),
                );
            }
        }
        let ctx = Ctx {
            generation: self.generation,
            id: init.head_session_id.clone(),
            protocol_version: version.to_owned(),
            server_capabilities: result
                .get("capabilities")
                .cloned()
                .unwrap_or(Value::Object(Map::new())),
            hash: init.head_hash.clone(),
            ext,
        };
        init.pending = Some(ctx.clone());
        init.result = Some(result);
        let headers = Self::session_headers(&ctx, true);
        let body = jsonrpc::encode_notification("notifications/initialized", None);
        let http = self.transmit(
            ExKind::Initialized,
            HttpMethod::Post,
            HttpPurpose::Notify,
            headers,
            Some(body),
            ctx.id.is_some(),
            false,
        );
        if let Some(init) = &mut self.init {
            init.step = InitStep::Initialized { http };
        }
    }

    pub(super) fn init_succeeded(&mut self, now: Instant) {
        let Some(init) = self.init.take() else {
            return;
        };
        let (Some(ctx), Some(result)) = (init.pending, init.result) else {
            return;
        };
        match &ctx.id {
            Some(id) => info!(session = %id, version = %ctx.protocol_version, "session ready"),
            None => info!(version = %ctx.protocol_version, "session ready (no session id)"),
        }
        self.phase = Phase::Ready;
        self.established_at = Some(now);
        // A fresh session has its own event ids.
        self.delivered.clear();
        self.init_result = Some(result.clone());
        match init.reason {
            None => {
                self.ever_connected = true;
                self.outputs
                    .push_back(Output::Event(SessionEvent::Connected {
                        protocol_version: ctx.protocol_version.clone(),
                    }));
            }
            Some(reason) => {
                let changed = self.previous.as_ref().map_or(true, |p| {
                    p.protocol_version != ctx.protocol_version
                        || p.server_capabilities != ctx.server_capabilities
                        || p.hash != ctx.hash
                });
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
        self.ctx = Some(ctx);
        if let Some(reason) = init.degraded {
            let status = self.extension_status().unwrap_or_default();
            self.outputs
                .push_back(Output::Event(SessionEvent::ChecksDegraded {
                    status,
                    reason,
                }));
        }
        for waiter in std::mem::take(&mut self.connect_waiters) {
            self.outputs.push_back(Output::Completed {
                call: waiter,
                result: Ok(result.clone()),
            });
        }
        let waiting: Vec<CallId> = self
            .calls
            .iter()
            .filter(|(_, c)| c.state == CallState::Waiting)
            .map(|(id, _)| *id)
            .collect();
        for id in waiting {
            self.send_call(id);
        }
        self.open_listen();
    }

    pub(super) fn init_failed(&mut self, error: Error, now: Instant) {
        let Some(init) = &self.init else {
            return;
        };
        match init.step {
            InitStep::Initialize { http, .. } | InitStep::Initialized { http } => {
                self.finish_exchange(http)
            }
            InitStep::Backoff { .. } => {}
        }
        warn!(error = %error, "initialization failed");
        if !self.ever_connected {
            // First connect: report to the app rather than retrying behind its back.
            self.init = None;
            self.phase = Phase::Idle;
            for waiter in std::mem::take(&mut self.connect_waiters) {
                self.outputs.push_back(Output::Completed {
                    call: waiter,
                    result: Err(error.clone()),
                });
            }
            let ids: Vec<CallId> = self.calls.keys().copied().collect();
            for id in ids {
                self.complete(id, Err(error.clone()));
            }
            return;
        }
        self.reinit_failures += 1;
        let state = State {
            reinit_failures: self.reinit_failures,
            ..self.base_state(false)
        };
        match decide(&Failure::ReinitFailed, &state) {
            Decision::RetryReinitialize => {
                let delay = self.reinit_delay();
                if let Some(init) = &mut self.init {
                    init.step = InitStep::Backoff {
                        until: now.checked_add(delay).unwrap_or(now),
                    };
                }
            }
            _ => self.session_lost(),
        }
    }

    pub(super) fn session_lost(&mut self) {
        warn!(
            failures = self.reinit_failures,
            "session lost: re-initialization kept failing"
        );
        self.init = None;
        self.phase = Phase::Terminated;
        self.lost = true;
        self.abort_all_exchanges();
        self.listen.state = ListenState::Off;
        self.fail_everything(
            ErrorKind::SessionLost,
            "session lost: re-initialization kept failing",
            true,
        );
        self.outputs
            .push_back(Output::Event(SessionEvent::SessionLost));
    }
}
