//! Protocol revisions this client speaks, as a type: comparisons by feature, never by string.

use std::fmt;

/// A revision of the Model Context Protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum ProtocolVersion {
    /// `2025-03-26`: the first Streamable HTTP revision (JSON-RPC batches allowed).
    V2025_03_26,
    /// `2025-06-18`: adds the `MCP-Protocol-Version` header, drops batches.
    V2025_06_18,
    /// `2025-11-25`: priming events, `retry`, servers may close a stream at any time.
    V2025_11_25,
    /// `2026-07-28`: the modern era: no session, no `initialize`, per-request `_meta`.
    V2026_07_28,
}

impl ProtocolVersion {
    /// The newest legacy revision: the one offered at `initialize` by default.
    pub const LATEST: ProtocolVersion = ProtocolVersion::V2025_11_25;

    /// The modern revision this client speaks.
    pub const MODERN: ProtocolVersion = ProtocolVersion::V2026_07_28;

    /// Every revision this client speaks, newest first.
    pub const SUPPORTED: &'static [ProtocolVersion] = &[
        ProtocolVersion::V2026_07_28,
        ProtocolVersion::V2025_11_25,
        ProtocolVersion::V2025_06_18,
        ProtocolVersion::V2025_03_26,
    ];

    /// The revision named `s` (e.g. `"2025-06-18"`), if this client speaks it.
    pub fn parse(s: &str) -> Option<Self> {
        Self::SUPPORTED.iter().copied().find(|v| v.as_str() == s)
    }

    /// The name on the wire.
    pub const fn as_str(self) -> &'static str {
        match self {
            ProtocolVersion::V2025_03_26 => "2025-03-26",
            ProtocolVersion::V2025_06_18 => "2025-06-18",
            ProtocolVersion::V2025_11_25 => "2025-11-25",
            ProtocolVersion::V2026_07_28 => "2026-07-28",
        }
    }

    /// Whether this revision is of the modern era (no session, no `initialize`).
    pub const fn is_modern(self) -> bool {
        matches!(self, ProtocolVersion::V2026_07_28)
    }

    /// Whether requests carry the `MCP-Protocol-Version` header.
    pub const fn has_version_header(self) -> bool {
        !matches!(self, ProtocolVersion::V2025_03_26)
    }

    /// Whether a body may be a JSON-RPC batch.
    pub const fn allows_batch(self) -> bool {
        matches!(self, ProtocolVersion::V2025_03_26)
    }
}

impl std::str::FromStr for ProtocolVersion {
    type Err = crate::Error;

    /// The revision named `s`; an [`ErrorKind::InvalidConfig`](crate::ErrorKind) error
    /// naming the revisions this client speaks otherwise.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ProtocolVersion::parse(s).ok_or_else(|| {
            let supported: Vec<&str> = ProtocolVersion::SUPPORTED
                .iter()
                .map(|v| v.as_str())
                .collect();
            crate::Error::new(
                crate::ErrorKind::InvalidConfig,
                format!(
                    "unsupported protocol version `{s}` (supported: {})",
                    supported.join(", ")
                ),
            )
        })
    }
}

impl fmt::Display for ProtocolVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_features() {
        for v in ProtocolVersion::SUPPORTED {
            assert_eq!(ProtocolVersion::parse(v.as_str()), Some(*v));
        }
        assert_eq!(ProtocolVersion::parse("2024-11-05"), None);
        assert_eq!(ProtocolVersion::parse("2025-11-25 "), None);
        assert!(ProtocolVersion::V2025_03_26.allows_batch());
        assert!(!ProtocolVersion::V2025_03_26.has_version_header());
        assert!(ProtocolVersion::V2025_06_18.has_version_header());
        assert!(!ProtocolVersion::V2025_11_25.allows_batch());
        assert!(!ProtocolVersion::LATEST.is_modern());
        assert!(ProtocolVersion::MODERN.is_modern());
        assert!(ProtocolVersion::MODERN.has_version_header());
        assert_eq!(
            "2025-06-18".parse::<ProtocolVersion>().ok(),
            Some(ProtocolVersion::V2025_06_18)
        );
        let err = "1999-01-01".parse::<ProtocolVersion>().unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::InvalidConfig);
    }
}
