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

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use opentelemetry::Context;

    use super::*;
    use crate::client::telemetry::CallTrace;

    fn call() -> Call {
        Call::new(CallTrace {
            cx: Context::new(),
            method: "tools/call".to_owned(),
            target: None,
            started: Instant::now(),
            recording: false,
            facts: Vec::new(),
        })
    }

    /// What each HTTP request after a call's first is labelled, from how the one before it
    /// ended, row by row.
    #[test]
    fn each_attempt_says_what_it_is_and_why() {
        /// How the previous request ended, whether this one resumes, and the labels.
        type Row = (fn(&mut Call), bool, &'static str, Option<&'static str>);
        let cases: [Row; 10] = [
            (
                |c| c.last_end = Some(End::Lost),
                true,
                "resume",
                Some("connection_lost"),
            ),
            (
                |c| c.last_end = Some(End::Ended),
                true,
                "resume",
                Some("stream_ended"),
            ),
            (
                |c| c.last_end = Some(End::NotSent),
                false,
                "resend",
                Some("not_sent"),
            ),
            (
                |c| c.last_end = Some(End::TooLarge),
                false,
                "resend",
                Some("too_large"),
            ),
            (
                |c| c.last_end = Some(End::Refused(404)),
                false,
                "resend",
                Some("session_not_found"),
            ),
            (
                |c| c.last_end = Some(End::Refused(503)),
                false,
                "resend",
                Some("refused"),
            ),
            (
                |c| c.last_end = Some(End::Answered),
                false,
                "resend",
                Some("answered"),
            ),
            (
                |c| {
                    c.last_end = Some(End::Refused(404));
                    c.rejected = true;
                },
                false,
                "resend",
                Some("resume_rejected"),
            ),
            (|c| c.round = true, false, "next_round", None),
            (|c| c.polling = true, false, "task_poll", None),
        ];
        for (before, resume, attempt, reason) in cases {
            let mut c = call();
            assert_eq!(c.advance(false), None, "the first request is no re-send");
            before(&mut c);
            let labels = c.advance(resume);
            assert_eq!(labels, Some((1, attempt, reason)), "{attempt} {reason:?}");
            // What made this one is spent: the next one is judged on its own.
            assert!(!c.rejected && !c.round);
        }
    }

    #[test]
    fn a_new_request_forgets_the_cut_a_resume_would_have_measured() {
        let mut c = call();
        c.advance(false);
        c.cut_at = Some(Instant::now());
        c.advance(true);
        assert!(
            c.cut_at.is_some(),
            "a resume keeps it: its first byte ends the recovery"
        );
        c.advance(false);
        assert!(c.cut_at.is_none());
    }
}
