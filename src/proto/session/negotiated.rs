//! What one established session negotiated: its id, version and headers, the server's
//! capabilities, and the resume-safety checks and key placement its extension calls for.
//! Built once per handshake, from an `initialize` result or a modern discovery, and read
//! by everything the session sends on it.

use std::time::Duration;

use serde_json::{Map, Value};

use super::headers::SessionHeaders;
use crate::ids::{CapabilityHash, SessionId};
use crate::proto::ext::{self, ResumeSafety};
use crate::proto::version::ProtocolVersion;
use crate::proto::ExtensionStatus;

/// A session that stayed up this long worked, whatever else happened on it.
pub(super) const STABLE_SESSION: Duration = Duration::from_secs(5);

/// The resume-safety checks in force on one exchange: those of the session it was sent on,
/// fixed at send time so a re-initialization in the meantime cannot switch them off.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Checks {
    /// Compare the capability hash of the answer's head.
    pub(super) hash: bool,
    /// Require contiguous sequenced ids on a resumed stream.
    pub(super) sequenced: bool,
    /// Read the extension's rejection marker on a 404 as the server's explicit rejection:
    /// the session negotiated the extension. Without it the marker proves nothing.
    pub(super) rejections: bool,
}

/// What one established session negotiated.
#[derive(Debug, Clone)]
pub(super) struct Negotiated {
    /// Which session this is (one per successful `initialize`).
    pub(super) generation: u64,
    pub(super) id: Option<SessionId>,
    pub(super) version: ProtocolVersion,
    /// The protocol headers of its requests (the id's marked sensitive: it is a bearer
    /// secret), from `id` and `version`.
    pub(super) headers: SessionHeaders,
    pub(super) server_capabilities: Value,
    pub(super) hash: Option<CapabilityHash>,
    /// The extension as advertised (with the parts that cannot run switched off).
    ext: Option<ResumeSafety>,
    /// The checks every exchange of this session runs.
    pub(super) checks: Checks,
    /// Where a keyed call carries its key, when the server deduplicates keyed calls.
    pub(super) keys: Option<KeyPlacement>,
    /// The `initialize` result (or, modern, the discovery reshaped like one), returned to
    /// `connect` calls.
    pub(super) result: Value,
}

/// Where an idempotency key travels for a server that deduplicates by it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum KeyPlacement {
    /// The resume-safety extension: `params._meta[<metaKey>]` and the `Idempotency-Key` header.
    Meta(String),
    /// The proposed standard (SEP-3182): `params.idempotencyKey`.
    Params,
}

impl Negotiated {
    /// A legacy session of `generation`: what `initialize` answered (`result`) under the
    /// session id and capability hash of its head, speaking `version`. `ext`: the extension
    /// as advertised, with the parts that cannot run switched off; `trusting`: a client that
    /// runs none of its checks.
    pub(super) fn legacy(
        generation: u64,
        id: Option<SessionId>,
        hash: Option<CapabilityHash>,
        version: ProtocolVersion,
        ext: Option<ResumeSafety>,
        trusting: bool,
        result: Value,
    ) -> Self {
        // A trusting client runs no check of the extension: it behaves like a stock one.
        let checks = match (&ext, trusting) {
            (Some(e), false) => Checks {
                hash: e.capability_hash,
                sequenced: e.sequenced_event_ids,
                rejections: true,
            },
            _ => Checks::default(),
        };
        Negotiated {
            generation,
            headers: SessionHeaders::new(id.as_ref(), version),
            id,
            version,
            server_capabilities: result
                .get("capabilities")
                .cloned()
                .unwrap_or(Value::Object(Map::new())),
            hash,
            keys: ext
                .as_ref()
                .and_then(|e| e.idempotency_meta_key.clone())
                .map(KeyPlacement::Meta),
            ext,
            checks,
            result,
        }
    }

    /// A modern session of `generation`: the server's `capabilities` as its discovery listed
    /// them, and `result`, the discovery in the shape of an `initialize` result.
    pub(super) fn modern(generation: u64, capabilities: Value, result: Value) -> Self {
        let ext = ResumeSafety::from_capabilities(&capabilities);
        let keys = match &ext {
            Some(e) => e.idempotency_meta_key.clone().map(KeyPlacement::Meta),
            None => None,
        }
        .or_else(|| ext::standard_idempotency(&capabilities).then_some(KeyPlacement::Params));
        Negotiated {
            generation,
            id: None,
            version: ProtocolVersion::MODERN,
            headers: SessionHeaders::new(None, ProtocolVersion::MODERN),
            server_capabilities: capabilities,
            hash: None,
            // The capability hash and sequenced ids have no job without resumption.
            checks: Checks::default(),
            ext,
            keys,
            result,
        }
    }

    /// The stand-in for a request sent before anything is known of the server (an
    /// `initialize`, or a modern probe), speaking `version`: no session, nothing to check.
    pub(super) fn unknown(version: ProtocolVersion) -> Negotiated {
        Negotiated {
            generation: 0,
            id: None,
            version,
            headers: SessionHeaders::new(None, version),
            server_capabilities: Value::Null,
            hash: None,
            ext: None,
            checks: Checks::default(),
            keys: None,
            result: Value::Null,
        }
    }

    /// Which checks of the extension are in force.
    pub(super) fn extension_status(&self) -> ExtensionStatus {
        match &self.ext {
            None => ExtensionStatus::default(),
            Some(ext) => ExtensionStatus {
                advertised: true,
                capability_hash: ext.capability_hash,
                sequenced_event_ids: ext.sequenced_event_ids,
                idempotency: self.keys.is_some(),
            },
        }
    }

    /// Whether `other` differs in what the application may depend on.
    pub(super) fn differs_from(&self, other: &Negotiated) -> bool {
        self.version != other.version
            || self.server_capabilities != other.server_capabilities
            || self.hash != other.hash
    }
}
