//! The SDK's values as the JSON JavaScript receives: session events, notifications, the
//! extension status. Results travel as the server's own JSON (the SDK keeps it as `raw`),
//! which is the shape the TypeScript SDK's types describe.

use std::time::UNIX_EPOCH;

use mcp_resume::proto::CallStage;
use mcp_resume::{ExtensionStatus, LedgerEntry, RejectReason, ServerNotification, SessionEvent};
use serde::Serialize;
use serde_json::{json, Value};

/// A model of the SDK's as its wire JSON (its unknown members included).
pub(crate) fn wire<T: Serialize>(value: &T) -> Value {
    // The models have string keys only, so serializing cannot fail.
    serde_json::to_value(value).unwrap_or_default()
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

/// What a recovered call's ledger entry says: `entryId`, `method`, `params`, `toolName`,
/// `arguments`, `idempotencyKey`, `stage`, `taskId` and `deadline` (ms since the epoch).
pub(crate) fn ledger_entry(entry: &LedgerEntry) -> Value {
    let task_id = match entry.stage() {
        CallStage::Task { task_id } => Some(task_id.clone()),
        _ => None,
    };
    let deadline = entry
        .deadline()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    json!({
        "entryId": entry.id().as_str(),
        "method": entry.method(),
        "params": entry.params(),
        "toolName": entry.tool_name(),
        "arguments": entry.arguments(),
        "idempotencyKey": entry.idempotency_key().map(|k| k.as_str()),
        "stage": entry.stage().as_str(),
        "taskId": task_id,
        "deadline": deadline,
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

/// A session event: `type` (its stable kind name) and the members that apply.
pub(crate) fn event(event: SessionEvent) -> Value {
    let kind = event.kind();
    let mut value = match event {
        SessionEvent::Connected { protocol_version } => {
            json!({"protocolVersion": protocol_version.as_str()})
        }
        SessionEvent::Resumed { last_event_id } => {
            json!({"lastEventId": last_event_id.to_string()})
        }
        SessionEvent::ResumeRejected { reason } => json!({
            "rejectReason": reason.as_ref().map(RejectReason::as_str),
        }),
        SessionEvent::Reinitialized {
            reason,
            capabilities_changed,
        } => json!({
            "reason": reason.as_str(),
            "rejectReason": reason.rejection().map(RejectReason::as_str),
            "capabilitiesChanged": capabilities_changed,
        }),
        SessionEvent::Redispatched {
            call,
            method,
            idempotency_key,
        } => json!({
            "call": call.get(),
            "method": method,
            "idempotencyKey": idempotency_key.map(|k| k.as_str().to_owned()),
        }),
        SessionEvent::OutcomeUnknown { call, method } => {
            json!({"call": call.get(), "method": method})
        }
        SessionEvent::ContextMismatch { call } => json!({"call": call.get()}),
        SessionEvent::ChecksDegraded { status, reason } => json!({
            "status": extension_status(status),
            "reason": reason,
        }),
        SessionEvent::EraDetected { era } => json!({"era": era.as_str()}),
        SessionEvent::TaskCreated { call, task_id }
        | SessionEvent::TaskFinished { call, task_id } => {
            json!({"call": call.get(), "taskId": task_id})
        }
        _ => json!({}),
    };
    value["type"] = json!(kind);
    value
}
