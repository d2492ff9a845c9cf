//! What each HTTP request of a call is (its ordinal, a resume or a re-send, and why), and
//! what the call's span learns from it.

use opentelemetry::KeyValue;
use serde::Deserialize;
use serde_json::Value;

use super::{Call, End};
use crate::client::telemetry::names;
use crate::proto::HttpRequest;

impl Call {
    /// The next HTTP request for this call: its ordinal, what it is and why it is made
    /// (`None` for the first).
    pub(super) fn advance(
        &mut self,
        resume: bool,
    ) -> Option<(i64, &'static str, Option<&'static str>)> {
        let resends = self.attempts;
        self.attempts += 1;
        let labels = (resends > 0).then(|| {
            let attempt = if resume {
                "resume"
            } else if self.polling {
                "task_poll"
            } else if self.round {
                "next_round"
            } else {
                "resend"
            };
            let reason = matches!(attempt, "resume" | "resend").then(|| {
                match (self.rejected, self.last_end) {
                    (true, _) => "resume_rejected",
                    (_, Some(End::NotSent)) => "not_sent",
                    (_, Some(End::Lost)) => "connection_lost",
                    (_, Some(End::Ended)) => "stream_ended",
                    (_, Some(End::TooLarge)) => "too_large",
                    (_, Some(End::Refused(404))) => "session_not_found",
                    (_, Some(End::Refused(_))) => "refused",
                    // An answer the session acts on by sending again (a key still in use).
                    (_, Some(End::Answered) | None) => "answered",
                }
            });
            (resends, attempt, reason)
        });
        self.rejected = false;
        self.round = false;
        if !resume {
            // A new request, not a continuation: a cut before it is not its to recover.
            self.cut_at = None;
        }
        labels
    }

    /// What the next HTTP request says on its span (its ordinal and why it is made) and on
    /// the call's (the JSON-RPC id, the session in force).
    pub(super) fn planned(
        &mut self,
        request: &HttpRequest,
        resume: bool,
        facts: Vec<KeyValue>,
        attributes: &mut Vec<KeyValue>,
    ) {
        if let Some((resends, attempt, reason)) = self.advance(resume) {
            attributes.push(KeyValue::new(names::HTTP_REQUEST_RESEND_COUNT, resends));
            attributes.push(KeyValue::new(names::RECOVERY_ATTEMPT, attempt));
            if let Some(reason) = reason {
                attributes.push(KeyValue::new(names::RECOVERY_REASON, reason));
            }
        }
        let mut facts = facts;
        let id = request
            .body
            .as_deref()
            .and_then(read_head)
            .and_then(|h| h.id);
        match id.as_ref().and_then(request_id) {
            Some(id) => facts.push(KeyValue::new(names::JSONRPC_REQUEST_ID, id)),
            // A resume carries no message: the request's id is still the POST's.
            None => facts.extend(
                self.trace
                    .facts
                    .iter()
                    .filter(|kv| kv.key.as_str() == names::JSONRPC_REQUEST_ID)
                    .cloned(),
            ),
        }
        self.trace.facts = facts;
    }
}

/// The members of an outgoing JSON-RPC message telemetry reads.
#[derive(Deserialize)]
pub(super) struct Head {
    #[serde(default)]
    pub(super) id: Option<Value>,
    #[serde(default)]
    pub(super) method: Option<String>,
}

pub(super) fn read_head(body: &[u8]) -> Option<Head> {
    serde_json::from_slice(body).ok()
}

/// `jsonrpc.request.id`: a number or a string as it is; null or anything else is none.
pub(super) fn request_id(id: &Value) -> Option<String> {
    match id {
        Value::Number(n) => Some(n.to_string()),
        Value::String(s) => Some(s.clone()),
        _ => None,
    }
}
