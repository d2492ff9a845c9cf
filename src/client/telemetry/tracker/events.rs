//! The session's events, as span events on the requests they concern and as the recovery
//! counters; the session's own duration.

use std::time::Instant;

use opentelemetry::trace::TraceContextExt;
use opentelemetry::KeyValue;

use super::{Inner, Owner};
use crate::client::telemetry::names;
use crate::proto::{CallId, RejectReason, Session, SessionEvent};

impl Inner {
    pub(super) fn event(&mut self, event: &SessionEvent, session: &Session) {
        let server = self.inst.0.server.clone();
        let instruments = self.inst.instruments();
        match event {
            SessionEvent::Connected { protocol_version } => {
                self.session.started = session
                    .session_id()
                    .map(|_| (Instant::now(), Some(*protocol_version)));
            }
            SessionEvent::Resumed { last_event_id } => {
                let owner = self.current_owner();
                let stream = match owner {
                    Some(Owner::Call(_)) => "request",
                    _ => "listen",
                };
                let mut attributes = server;
                attributes.push(KeyValue::new(names::RECOVERY_STREAM, stream));
                instruments.resumes.add(1, &attributes);
                if let Some(Owner::Call(call)) = owner {
                    let mut event = vec![KeyValue::new(names::RECOVERY_STREAM, stream)];
                    // Some servers (the official Java SDK's) make every event id the session
                    // id: the id is exported only as the session id would be.
                    if let Some(id) = self.inst.session_attribute(last_event_id.as_str()) {
                        event.push(KeyValue::new(names::RECOVERY_LAST_EVENT_ID, id));
                    }
                    self.call_event(call, names::EVENT_RESUMED, event);
                }
            }
            SessionEvent::ResumeRejected { reason } => {
                let reason = reason.as_ref().map_or("not_found", reject_reason);
                let mut attributes = server;
                attributes.push(KeyValue::new(names::RECOVERY_REJECT_REASON, reason));
                instruments.resume_rejections.add(1, &attributes);
                if let Some(Owner::Call(call)) = self.current_owner() {
                    if let Some(record) = self.calls.get_mut(&call) {
                        record.rejected = true;
                    }
                    let kv = KeyValue::new(names::RECOVERY_REJECT_REASON, reason);
                    self.call_event(call, names::EVENT_RESUME_REJECTED, vec![kv]);
                }
            }
            SessionEvent::Reinitialized {
                reason,
                capabilities_changed,
            } => {
                let reason = reason.as_str();
                let mut attributes = server;
                attributes.push(KeyValue::new(names::RECOVERY_REINIT_REASON, reason));
                attributes.push(KeyValue::new(
                    names::RECOVERY_CAPABILITIES_CHANGED,
                    *capabilities_changed,
                ));
                instruments.reinitializations.add(1, &attributes);
                let event = [
                    KeyValue::new(names::RECOVERY_REINIT_REASON, reason),
                    KeyValue::new(names::RECOVERY_CAPABILITIES_CHANGED, *capabilities_changed),
                ];
                // Every request in flight waited on the new session.
                for record in self.calls.values() {
                    record
                        .trace
                        .cx
                        .span()
                        .add_event(names::EVENT_REINITIALIZED, event.to_vec());
                }
                self.end_session(Some(reason));
                self.session.started = session
                    .session_id()
                    .map(|_| (Instant::now(), session.protocol_version()));
            }
            SessionEvent::Redispatched {
                call,
                method,
                idempotency_key,
            } => {
                let keyed = idempotency_key.is_some();
                let mut attributes = server;
                attributes.push(KeyValue::new(names::MCP_METHOD_NAME, method.clone()));
                attributes.push(KeyValue::new(names::RECOVERY_KEYED, keyed));
                instruments.resends.add(1, &attributes);
                let kv = KeyValue::new(names::RECOVERY_KEYED, keyed);
                self.call_event(*call, names::EVENT_REDISPATCHED, vec![kv]);
            }
            SessionEvent::OutcomeUnknown { call, method } => {
                let mut attributes = server;
                attributes.push(KeyValue::new(names::MCP_METHOD_NAME, method.clone()));
                instruments.outcome_unknown.add(1, &attributes);
                self.call_event(*call, names::EVENT_OUTCOME_UNKNOWN, Vec::new());
            }
            SessionEvent::ContextMismatch { call } => {
                let method = self
                    .calls
                    .get(call)
                    .map_or_else(String::new, |record| record.trace.method.clone());
                let mut attributes = server;
                attributes.push(KeyValue::new(names::MCP_METHOD_NAME, method));
                instruments.context_mismatches.add(1, &attributes);
                self.call_event(*call, names::EVENT_CONTEXT_MISMATCH, Vec::new());
            }
            SessionEvent::TaskCreated { call, .. } => {
                if let Some(record) = self.calls.get_mut(call) {
                    record.polling = true;
                }
            }
            SessionEvent::SessionLost => {
                // No re-initialization under way any more: the next comes from a call.
                self.reinit_parent = None;
                self.end_session(Some("session_lost"));
            }
            SessionEvent::Closed => {
                self.reinit_parent = None;
                self.end_session(None);
            }
            _ => {}
        }
    }

    fn call_event(&self, call: CallId, name: &'static str, attributes: Vec<KeyValue>) {
        if let Some(record) = self.calls.get(&call) {
            record.trace.cx.span().add_event(name, attributes);
        }
    }

    /// The session in force ended (`error`: why, if it did not end by the application's
    /// choice).
    pub(super) fn end_session(&mut self, error: Option<&'static str>) {
        let Some((started, version)) = self.session.started.take() else {
            return;
        };
        let mut attributes: Vec<KeyValue> = self.inst.connection().collect();
        if let Some(version) = version {
            attributes.push(KeyValue::new(names::MCP_PROTOCOL_VERSION, version.as_str()));
        }
        if let Some(error) = error {
            attributes.push(KeyValue::new(names::ERROR_TYPE, error));
        }
        self.inst
            .instruments()
            .session_duration
            .record(started.elapsed().as_secs_f64(), &attributes);
    }
}

fn reject_reason(reason: &RejectReason) -> &'static str {
    match reason {
        RejectReason::UnknownSession => "unknown_session",
        RejectReason::NotOwner => "not_owner",
        RejectReason::EventGap => "event_gap",
        RejectReason::OrphanedRequest => "orphaned_request",
        RejectReason::CapabilityMismatch => "capability_mismatch",
        RejectReason::Other(_) => "other",
    }
}
