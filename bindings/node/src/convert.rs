//! The SDK's values as the JSON JavaScript receives: session events, notifications, the
//! extension status. Results travel as the server's own JSON (the SDK keeps it as `raw`),
//! which is the shape the TypeScript SDK's types describe.

use mcp_resume::{
    Era, ExtensionStatus, ReinitReason, RejectReason, ServerNotification, SessionEvent,
};
use serde::Serialize;
use serde_json::{json, Value};

/// A model of the SDK's as its wire JSON (its unknown members included).
pub(crate) fn wire<T: Serialize>(value: &T) -> Value {
    // The models have string keys only, so serializing cannot fail.
    serde_json::to_value(value).unwrap_or_default()
}

/// `"auto"`, `"legacy"` or `"modern"`.
pub(crate) fn era_name(era: Era) -> &'static str {
    match era {
        Era::Legacy => "legacy",
        Era::Modern => "modern",
        _ => "auto",
    }
}

/// The checks in force (`Client.extensionStatus`, the `checks_degraded` event).
pub(crate) fn extension_status(status: ExtensionStatus) -> Value {
    json!({
        "advertised": status.advertised,
        "capabilityHash": status.capability_hash,
        "sequencedEventIds": status.sequenced_event_ids,
        "idempotency": status.idempotency,
    })
}

/// A notification: `method`, `params`, and `call` (the call it belongs to, if known).
pub(crate) fn notification(n: ServerNotification) -> Value {
    json!({
        "method": n.method,
        "params": n.params,
        "call": n.call.map(|c| c.get()),
    })
}

/// A session event: `type` (snake_case, as the SDK's names) and the members that apply.
pub(crate) fn event(event: SessionEvent) -> Value {
    match event {
        SessionEvent::Connected { protocol_version } => {
            json!({"type": "connected", "protocolVersion": protocol_version.as_str()})
        }
        SessionEvent::Listening => json!({"type": "listening"}),
        SessionEvent::Resumed { last_event_id } => {
            json!({"type": "resumed", "lastEventId": last_event_id.to_string()})
        }
        SessionEvent::ResumeRejected { reason } => json!({
            "type": "resume_rejected",
            "rejectReason": reason.as_ref().map(reject_reason),
        }),
        SessionEvent::Reinitialized {
            reason,
            capabilities_changed,
        } => {
            let (reason, rejected) = reinit_reason(&reason);
            json!({
                "type": "reinitialized",
                "reason": reason,
                "rejectReason": rejected,
                "capabilitiesChanged": capabilities_changed,
            })
        }
        SessionEvent::Redispatched {
            call,
            method,
            idempotency_key,
        } => json!({
            "type": "redispatched",
            "call": call.get(),
            "method": method,
            "idempotencyKey": idempotency_key.map(|k| k.as_str().to_owned()),
        }),
        SessionEvent::OutcomeUnknown { call, method } => {
            json!({"type": "outcome_unknown", "call": call.get(), "method": method})
        }
        SessionEvent::ContextMismatch { call } => {
            json!({"type": "context_mismatch", "call": call.get()})
        }
        SessionEvent::ChecksDegraded { status, reason } => json!({
            "type": "checks_degraded",
            "status": extension_status(status),
            "reason": reason,
        }),
        SessionEvent::EraDetected { era } => {
            json!({"type": "era_detected", "era": era_name(era)})
        }
        SessionEvent::TaskCreated { call, task_id } => {
            json!({"type": "task_created", "call": call.get(), "taskId": task_id})
        }
        SessionEvent::TaskFinished { call, task_id } => {
            json!({"type": "task_finished", "call": call.get(), "taskId": task_id})
        }
        SessionEvent::SessionLost => json!({"type": "session_lost"}),
        SessionEvent::Closed => json!({"type": "closed"}),
        other => json!({"type": "other", "detail": format!("{other:?}")}),
    }
}

fn reinit_reason(reason: &ReinitReason) -> (&'static str, Option<String>) {
    match reason {
        ReinitReason::SessionNotFound => ("session_not_found", None),
        ReinitReason::ResumeRejected(r) => ("resume_rejected", Some(reject_reason(r))),
        ReinitReason::UnverifiableCleanEnd => ("unverifiable_clean_end", None),
        ReinitReason::EventGap => ("event_gap", None),
        ReinitReason::OrphanedResponse => ("orphaned_response", None),
        ReinitReason::CapabilityMismatch => ("capability_mismatch", None),
        ReinitReason::VersionRefused => ("version_refused", None),
        _ => ("other", None),
    }
}

fn reject_reason(reason: &RejectReason) -> String {
    match reason {
        RejectReason::UnknownSession => "unknown_session".to_owned(),
        RejectReason::NotOwner => "not_owner".to_owned(),
        RejectReason::EventGap => "event_gap".to_owned(),
        RejectReason::OrphanedRequest => "orphaned_request".to_owned(),
        RejectReason::CapabilityMismatch => "capability_mismatch".to_owned(),
        RejectReason::Other(other) => other.clone(),
        other => format!("{other:?}"),
    }
}
