//! The resume-safety extension checks: capability hash on heads and on replayed results,
//! contiguous event ids on resumed streams and idempotency refusals (rejections are read
//! with every other refusal, in `classify`).

use http::HeaderMap;
use serde_json::Value;

use super::calls::Call;
use super::Session;
use crate::error::RpcError;
use crate::ids::{CapabilityHash, EventId};
use crate::proto::decide::Failure;
use crate::proto::ext::{self, ResumeSafety};
use crate::proto::{CallId, HttpId};

impl Session {
    pub(super) fn checks(&self) -> Option<&ResumeSafety> {
        if self.config.dangerous_trust_replay {
            return None;
        }
        self.ctx.as_ref().and_then(|c| c.ext.as_ref())
    }

    /// Whether a response head's capability hash matches `expected` (when the exchange's
    /// session advertised hashes).
    pub(super) fn hash_matches(
        &self,
        http: HttpId,
        headers: &HeaderMap,
        expected: Option<&CapabilityHash>,
    ) -> bool {
        let checked = self
            .exchanges
            .get(&http)
            .and_then(|e| e.checks.as_ref())
            .is_some_and(|e| e.capability_hash);
        if !checked {
            return true;
        }
        head_hash(headers).as_ref() == expected
    }

    /// Whether a head's capability hash is the one of the session the call was sent on.
    pub(super) fn call_hash_matches(&self, id: CallId, http: HttpId, headers: &HeaderMap) -> bool {
        let expected = self.calls.get(&id).and_then(|c| c.hash.as_ref());
        self.hash_matches(http, headers, expected)
    }

    /// Whether a successful result carries no capability hash other than the one of the
    /// session `call` was sent on (a replayed answer may name the context it ran under).
    pub(super) fn result_hash_matches(&self, call: &Call, value: &Value) -> bool {
        let Some(expected) = &call.hash else {
            return true;
        };
        if self.config.dangerous_trust_replay || call.method != "tools/call" {
            return true;
        }
        ext::result_capability_hash(value)
            .map_or(true, |got| got.eq_ignore_ascii_case(expected.as_str()))
    }

    /// The recovery failure an error answer stands for, when it is an idempotency refusal of
    /// a keyed call by a server that deduplicates keys (anything else is the app's answer).
    pub(super) fn key_refusal(&self, call: &Call, error: &RpcError) -> Option<Failure> {
        if self.config.dangerous_trust_replay || call.key.is_none() || !call.server_dedups {
            return None;
        }
        Some(match ext::key_refusal(error.data.as_ref())? {
            ext::KeyRefusal::InUse => Failure::KeyInUse,
            ext::KeyRefusal::OutcomeUnknown => Failure::KeyOutcomeLost,
        })
    }
}

/// The capability hash a response head names, if a valid one.
pub(super) fn head_hash(headers: &HeaderMap) -> Option<CapabilityHash> {
    headers
        .get(ext::CAPABILITY_HASH_HEADER)
        .and_then(|v| CapabilityHash::parse(v.as_bytes()).ok())
}

/// The sequenced id that must follow `id` on a resumed stream, if `id` is sequenced.
pub(super) fn next_in_sequence(id: &EventId) -> Option<(String, u64)> {
    id.sequenced()
        .map(|(s, n)| (s.to_owned(), n.saturating_add(1)))
}

/// Whether `id` is the one `expected` (nothing expected yet: anything goes).
pub(super) fn continues_sequence(expected: &Option<(String, u64)>, id: &EventId) -> bool {
    match (expected, id.sequenced()) {
        (None, _) => true,
        (Some((s, n)), Some((gs, gn))) => s == gs && *n == gn,
        (Some(_), None) => false,
    }
}
