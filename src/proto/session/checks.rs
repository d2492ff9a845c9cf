//! The resume-safety extension checks (DESIGN.md §5): capability hash on heads.

use http::HeaderMap;

use super::Session;
use crate::ids::CapabilityHash;
use crate::proto::ext::{self, ResumeSafety};
use crate::proto::HttpId;

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
        let got = headers
            .get(ext::CAPABILITY_HASH_HEADER)
            .and_then(|v| CapabilityHash::parse(v.as_bytes()).ok());
        got.as_ref() == expected
    }
}
