//! Advertising the extension in the results that pass: `initialize` (legacy era, under
//! `capabilities.experimental.resumeSafety`) and `server/discover` (2026-07-28, under
//! `capabilities.extensions`), naming only the parts this deployment enforces.

use serde_json::{json, Map, Value};

use crate::wire::{EXTENSION_ID, IDEMPOTENCY_META_KEY};

/// The parts of the extension a guard enforces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parts {
    /// Capability hashes on every response of a session, and resume authorization.
    pub capability_hash: bool,
    /// Event ids rewritten to `<stream>-<seq>`.
    pub sequenced_event_ids: bool,
    /// Keyed calls claimed and deduplicated.
    pub idempotency: bool,
}

impl Parts {
    /// The advertisement object; `None` when nothing is enforced.
    pub fn advertisement(self) -> Option<Value> {
        if !(self.capability_hash || self.sequenced_event_ids || self.idempotency) {
            return None;
        }
        let mut adv = json!({"version": 1});
        if self.sequenced_event_ids {
            adv["sequencedEventIds"] = Value::Bool(true);
        }
        if self.capability_hash {
            adv["capabilityHash"] = Value::Bool(true);
        }
        if self.idempotency {
            adv["idempotency"] =
                json!({"metaKey": IDEMPOTENCY_META_KEY, "header": "Idempotency-Key"});
        }
        Some(adv)
    }
}

/// Puts `parts`' advertisement in an `initialize` result's capabilities (replacing any the
/// inner server gave: only the guard knows what it enforces). `false` when the result has no
/// capabilities object to put it in (it is left as it is).
pub(crate) fn advertise_initialize(result: &mut Value, parts: Parts) -> bool {
    let Some(caps) = result
        .get_mut("capabilities")
        .and_then(Value::as_object_mut)
    else {
        return false;
    };
    let experimental = caps
        .entry("experimental")
        .or_insert_with(|| Value::Object(Map::new()));
    let Some(experimental) = experimental.as_object_mut() else {
        return false;
    };
    match parts.advertisement() {
        Some(adv) => experimental.insert("resumeSafety".into(), adv),
        None => experimental.remove("resumeSafety"),
    };
    true
}

/// Puts the idempotency part in a `server/discover` result's `capabilities.extensions`: the
/// capability hash and sequenced ids have no job without sessions and resumption.
pub(crate) fn advertise_discover(result: &mut Value, parts: Parts) -> bool {
    let Some(caps) = result
        .get_mut("capabilities")
        .and_then(Value::as_object_mut)
    else {
        return false;
    };
    let extensions = caps
        .entry("extensions")
        .or_insert_with(|| Value::Object(Map::new()));
    let Some(extensions) = extensions.as_object_mut() else {
        return false;
    };
    let only_keys = Parts {
        capability_hash: false,
        sequenced_event_ids: false,
        ..parts
    };
    match only_keys.advertisement().filter(|_| parts.idempotency) {
        Some(adv) => extensions.insert(EXTENSION_ID.into(), adv),
        None => extensions.remove(EXTENSION_ID),
    };
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: Parts = Parts {
        capability_hash: true,
        sequenced_event_ids: true,
        idempotency: true,
    };

    /// The README's wire contract, literally.
    #[test]
    fn the_full_advertisement_is_the_extensions() {
        assert_eq!(
            ALL.advertisement(),
            Some(
                json!({"version": 1, "sequencedEventIds": true, "capabilityHash": true,
                "idempotency": {"metaKey": "io.github.mcp-resume/idempotency-key",
                    "header": "Idempotency-Key"}})
            )
        );
    }

    #[test]
    fn only_enforced_parts_are_named() {
        let keys_only = Parts {
            capability_hash: false,
            sequenced_event_ids: false,
            idempotency: true,
        };
        let adv = keys_only.advertisement().unwrap();
        assert!(adv.get("capabilityHash").is_none() && adv.get("sequencedEventIds").is_none());
        assert_eq!(adv["idempotency"]["metaKey"], IDEMPOTENCY_META_KEY);
        let none = Parts {
            idempotency: false,
            ..keys_only
        };
        assert_eq!(none.advertisement(), None);
    }

    #[test]
    fn initialize_results_gain_the_advertisement_and_others_are_left_alone() {
        let mut r = json!({"protocolVersion": "2025-11-25", "capabilities": {"tools": {}}});
        assert!(advertise_initialize(&mut r, ALL));
        assert_eq!(
            r["capabilities"]["experimental"]["resumeSafety"]["version"],
            1
        );
        assert_eq!(r["capabilities"]["tools"], json!({}));
        let mut odd = json!({"capabilities": {"experimental": 3}});
        assert!(!advertise_initialize(&mut odd, ALL));
        assert_eq!(odd, json!({"capabilities": {"experimental": 3}}));
        let mut none = json!({"protocolVersion": "x"});
        assert!(!advertise_initialize(&mut none, ALL));
    }

    #[test]
    fn discover_results_gain_idempotency_only() {
        let mut r = json!({"capabilities": {"extensions": {"other": {}}}});
        assert!(advertise_discover(&mut r, ALL));
        let adv = &r["capabilities"]["extensions"][EXTENSION_ID];
        assert_eq!(
            adv,
            &mock_server::context::modern_resume_safety_capability()
        );
        assert!(r["capabilities"]["extensions"]["other"].is_object());
    }
}
