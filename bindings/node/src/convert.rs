//! The SDK's values as the JSON JavaScript receives: session events, notifications, the
//! extension status. Results travel as the server's own JSON (the SDK keeps it as `raw`),
//! which is the shape the TypeScript SDK's types describe.
//!
//! JSON crosses the boundary as text: JavaScript's `JSON.stringify` makes what the addon
//! reads with [`parse`], and `JSON.parse` reads what [`text`] makes. So numbers are what
//! JavaScript's JSON makes of them both ways (a whole number is sent as an integer however
//! large; a server's integer beyond 2^53 arrives as the nearest number, not a `BigInt`),
//! and a message of any number of values crosses, as over the TypeScript SDK's transport.

use std::time::UNIX_EPOCH;

use mcp_resume::proto::CallStage;
use mcp_resume::{
    ExtensionStatus, LedgerEntry, ListenStopReason, RejectReason, ServerNotification, SessionEvent,
};
use serde::Serialize;
use serde_json::{json, Value};

use crate::errors::{invalid, Failure};

/// The longest string JavaScript holds (V8's `String::kMaxLength`), in UTF-16 code units.
#[cfg(target_pointer_width = "64")]
const MAX_JS_STRING: usize = (1 << 29) - 24;
#[cfg(not(target_pointer_width = "64"))]
const MAX_JS_STRING: usize = (1 << 28) - 16;

/// The JSON text JavaScript made of `what` (`JSON.stringify`'s), as a value.
pub(crate) fn parse(text: &str, what: &str) -> Result<Value, Failure> {
    serde_json::from_str(text).map_err(|e| invalid(format!("{what} is not JSON: {e}")))
}

/// [`parse`] of JSON text that may be absent: absent, or `null`, is `None`.
pub(crate) fn parse_optional(text: Option<&str>, what: &str) -> Result<Option<Value>, Failure> {
    match text {
        Some(text) => Ok(Some(parse(text, what)?).filter(|value| !value.is_null())),
        None => Ok(None),
    }
}

/// `value` as JSON text for JavaScript's `JSON.parse`; `too_large` when it is longer than a
/// JavaScript string can be.
pub(crate) fn text<T: Serialize + ?Sized>(value: &T) -> Result<String, Failure> {
    let text = serde_json::to_string(value).map_err(|e| invalid(format!("not JSON: {e}")))?;
    if fits(&text) {
        Ok(text)
    } else {
        Err(Failure::TooLarge(too_long(&text)))
    }
}

/// Whether `text` fits in a JavaScript string.
pub(crate) fn fits(text: &str) -> bool {
    // A UTF-16 code unit takes at least one byte of UTF-8.
    text.len() <= MAX_JS_STRING || text.encode_utf16().count() <= MAX_JS_STRING
}

/// Why JSON text too long for a JavaScript string is not delivered.
pub(crate) fn too_long(text: &str) -> String {
    format!(
        "too large: {} bytes of JSON, more than a JavaScript string holds",
        text.len()
    )
}

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
        SessionEvent::ListenStopped { reason } => json!({
            "reason": reason.as_str(),
            "attempts": match reason {
                ListenStopReason::GaveUp { attempts } => Some(attempts),
                _ => None,
            },
        }),
        SessionEvent::TaskCreated { call, task_id }
        | SessionEvent::TaskFinished { call, task_id } => {
            json!({"call": call.get(), "taskId": task_id})
        }
        _ => json!({}),
    };
    value["type"] = json!(kind);
    value
}
