//! Identifier newtypes: the session's state is never a bag of strings.

use std::fmt;

/// Error returned when a value received from the network is not a valid identifier.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidId(pub(crate) &'static str);

/// The `Mcp-Session-Id` a server assigned at `initialize`.
///
/// Only visible ASCII (0x21–0x7E) is accepted, so the value is always safe to put back in a
/// header. It is a bearer secret: `Debug` and `Display` show only a short prefix.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct SessionId(String);

impl SessionId {
    /// Maximum accepted length; a longer header is treated as hostile.
    pub const MAX_LEN: usize = 1024;
    /// The header that carries it, lowercase as the core writes header names.
    pub const HEADER: &'static str = "mcp-session-id";

    /// Validates a session id received from a server.
    pub fn parse(value: &[u8]) -> Result<Self, InvalidId> {
        if value.is_empty() {
            return Err(InvalidId("empty session id"));
        }
        if value.len() > Self::MAX_LEN {
            return Err(InvalidId("session id longer than 1024 bytes"));
        }
        if !value.iter().all(|b| (0x21..=0x7e).contains(b)) {
            return Err(InvalidId("session id has bytes outside visible ASCII"));
        }
        // Checked above: every byte is ASCII.
        Ok(SessionId(String::from_utf8_lossy(value).into_owned()))
    }

    /// The full value, for the `Mcp-Session-Id` header. Never log this.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SessionId({self})")
    }
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let prefix: String = self.0.chars().take(4).collect();
        write!(f, "{prefix}…")
    }
}

/// An SSE event id: the per-stream cursor sent back as `Last-Event-ID`.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct EventId(String);

impl EventId {
    /// Maximum accepted length of an event id.
    pub const MAX_LEN: usize = 1024;

    /// Validates an event id from an SSE `id:` field. It must fit in a header.
    pub fn parse(value: &str) -> Result<Self, InvalidId> {
        if value.len() > Self::MAX_LEN {
            return Err(InvalidId("event id longer than 1024 bytes"));
        }
        if !value
            .bytes()
            .all(|b| (0x20..=0x7e).contains(&b) || b == b'\t')
        {
            return Err(InvalidId("event id is not a valid header value"));
        }
        Ok(EventId(value.to_owned()))
    }

    /// The id as sent in `Last-Event-ID`.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Splits a sequenced id `<stream>-<seq>` (resume-safety extension) into its parts.
    pub fn sequenced(&self) -> Option<(&str, u64)> {
        let (stream, seq) = self.0.rsplit_once('-')?;
        if stream.is_empty() || seq.is_empty() || !seq.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        Some((stream, seq.parse().ok()?))
    }
}

/// A position in a sequenced stream of the resume-safety extension: ids are `<stream>-<seq>`,
/// `seq` growing by exactly one per event that carries an id.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct SequencedEventId {
    stream: String,
    seq: u64,
}

impl SequencedEventId {
    /// The position `id` names, when it is sequenced.
    pub fn of(id: &EventId) -> Option<Self> {
        id.sequenced().map(|(stream, seq)| SequencedEventId {
            stream: stream.to_owned(),
            seq,
        })
    }

    /// The position right after this one.
    pub fn next(&self) -> Self {
        SequencedEventId {
            stream: self.stream.clone(),
            seq: self.seq.saturating_add(1),
        }
    }

    /// Whether `id` is exactly this position.
    pub fn is(&self, id: &EventId) -> bool {
        id.sequenced()
            .is_some_and(|(stream, seq)| stream == self.stream && seq == self.seq)
    }
}

impl fmt::Display for EventId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A JSON-RPC request id as it appears on the wire (we only ever send numbers; servers may
/// send strings in their own requests).
#[derive(Clone, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub enum RequestId {
    /// A numeric id.
    Number(i64),
    /// A string id.
    String(String),
}

impl RequestId {
    /// Reads an id from a JSON-RPC message's `id` member.
    pub fn from_json(value: &serde_json::Value) -> Option<Self> {
        match value {
            serde_json::Value::Number(n) => n.as_i64().map(RequestId::Number),
            serde_json::Value::String(s) => Some(RequestId::String(s.clone())),
            _ => None,
        }
    }

    /// The id as a JSON value.
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            RequestId::Number(n) => serde_json::Value::from(*n),
            RequestId::String(s) => serde_json::Value::from(s.as_str()),
        }
    }
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RequestId::Number(n) => write!(f, "{n}"),
            RequestId::String(s) => write!(f, "{s:?}"),
        }
    }
}

/// The idempotency key of a tool call: stays the same across re-sends, while the JSON-RPC id
/// changes. A call's key may not end in `.round` and digits: a 2026-07-28 multi-round call
/// keys its later rounds so (the client refuses such a key with
/// [`ErrorKind::InvalidConfig`](crate::ErrorKind::InvalidConfig)).
///
/// A key is 1 to 256 bytes of printable ASCII (0x20–0x7E) that neither begins nor ends with
/// a space: a header value that arrives as it was sent. HTTP strips a header value's edge
/// whitespace, so such a key would reach the server as one key in its `Idempotency-Key`
/// header and another in the body, and be refused whenever it is sent.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    /// Validates a key against the rule above.
    pub fn new(key: impl Into<String>) -> Result<Self, InvalidId> {
        let key = key.into();
        if key.is_empty() || key.len() > 256 {
            return Err(InvalidId("idempotency key must be 1 to 256 bytes"));
        }
        // Before the byte check, so that a tab at an edge is refused for what it is.
        let edge = |b: Option<&u8>| matches!(b, Some(b' ' | b'\t'));
        if edge(key.as_bytes().first()) || edge(key.as_bytes().last()) {
            return Err(InvalidId(
                "idempotency key must not begin or end with a space or tab",
            ));
        }
        if !key.bytes().all(|b| (0x20..=0x7e).contains(&b)) {
            return Err(InvalidId("idempotency key must be printable ASCII"));
        }
        Ok(IdempotencyKey(key))
    }

    /// A key as a release before the edge rule wrote it to a ledger: [`IdempotencyKey::new`]
    /// without refusing a space at an edge. Those releases took such a key, and the call
    /// under it may have run: refused, its entry would be a call no recovery reports. For
    /// reading what an earlier release wrote only, never for a key to send under.
    pub(crate) fn from_earlier_release(key: impl Into<String>) -> Result<Self, InvalidId> {
        let key = key.into();
        if !key.starts_with(' ') && !key.ends_with(' ') {
            return IdempotencyKey::new(key);
        }
        if key.len() > 256 {
            return Err(InvalidId("idempotency key must be 1 to 256 bytes"));
        }
        if !key.bytes().all(|b| (0x20..=0x7e).contains(&b)) {
            return Err(InvalidId("idempotency key must be printable ASCII"));
        }
        Ok(IdempotencyKey(key))
    }

    /// A fresh random (UUID v4) key.
    pub fn random() -> Self {
        IdempotencyKey(uuid::Uuid::new_v4().to_string())
    }

    /// The key's text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<uuid::Uuid> for IdempotencyKey {
    fn from(u: uuid::Uuid) -> Self {
        IdempotencyKey(u.to_string())
    }
}

impl TryFrom<&str> for IdempotencyKey {
    type Error = InvalidId;

    fn try_from(key: &str) -> Result<Self, InvalidId> {
        IdempotencyKey::new(key)
    }
}

impl TryFrom<String> for IdempotencyKey {
    type Error = InvalidId;

    fn try_from(key: String) -> Result<Self, InvalidId> {
        IdempotencyKey::new(key)
    }
}

impl TryFrom<&String> for IdempotencyKey {
    type Error = InvalidId;

    fn try_from(key: &String) -> Result<Self, InvalidId> {
        IdempotencyKey::new(key.as_str())
    }
}

// Lets infallible conversions (a key, a UUID) stand wherever a fallible one is accepted.
impl From<std::convert::Infallible> for InvalidId {
    fn from(never: std::convert::Infallible) -> Self {
        match never {}
    }
}

impl fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The `Mcp-Capability-Hash` value (`sha256:<hex>`) a server reports for the negotiated
/// context. Compared, never computed, by the client.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct CapabilityHash(String);

impl CapabilityHash {
    /// Validates a header value of the form `<algorithm>:<hex>`.
    pub fn parse(value: &[u8]) -> Result<Self, InvalidId> {
        let s = std::str::from_utf8(value).map_err(|_| InvalidId("capability hash not UTF-8"))?;
        let (alg, hex) = s
            .split_once(':')
            .ok_or(InvalidId("capability hash lacks '<alg>:'"))?;
        let ok = !alg.is_empty()
            && alg.bytes().all(|b| b.is_ascii_alphanumeric())
            && !hex.is_empty()
            && hex.len() <= 256
            && hex.bytes().all(|b| b.is_ascii_hexdigit());
        if !ok {
            return Err(InvalidId("capability hash is not '<alg>:<hex>'"));
        }
        Ok(CapabilityHash(s.to_ascii_lowercase()))
    }

    /// The header value.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for CapabilityHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_id_rejects_invisible_bytes() {
        assert!(SessionId::parse(b"abc def").is_err());
        assert!(SessionId::parse(b"abc\x7f").is_err());
        assert!(SessionId::parse(b"").is_err());
        assert!(SessionId::parse(&[b'a'; 1025]).is_err());
        assert_eq!(SessionId::parse(b"a-b_c~1").unwrap().expose(), "a-b_c~1");
    }

    #[test]
    fn idempotency_keys_have_no_edge_whitespace() {
        // HTTP strips a header value's edge whitespace: such a key would reach a server as
        // one key in its header and another in `_meta`.
        for edged in ["k ", " k", "\tk", "k\t", " ", "order-1 "] {
            let err = IdempotencyKey::new(edged).unwrap_err();
            assert!(err.to_string().contains("begin or end"), "{edged:?}: {err}");
        }
        assert_eq!(IdempotencyKey::new("a b").unwrap().as_str(), "a b");
        assert!(IdempotencyKey::new("a\tb").is_err());
        assert!(IdempotencyKey::new("k").is_ok());
    }

    #[test]
    fn session_id_display_hides_the_secret() {
        let id = SessionId::parse(b"0123456789abcdef").unwrap();
        assert_eq!(format!("{id}"), "0123…");
        assert!(!format!("{id:?}").contains("456789"));
    }

    #[test]
    fn sequenced_event_ids() {
        let id = EventId::parse("s-a1-42").unwrap();
        assert_eq!(id.sequenced(), Some(("s-a1", 42)));
        assert_eq!(EventId::parse("42").unwrap().sequenced(), None);
        assert_eq!(EventId::parse("s-").unwrap().sequenced(), None);
        assert_eq!(EventId::parse("s-4x").unwrap().sequenced(), None);
        assert!(EventId::parse("a\nb").is_err());
    }

    #[test]
    fn capability_hash_shape() {
        assert!(CapabilityHash::parse(b"sha256:00ff").is_ok());
        assert!(CapabilityHash::parse(b"sha256:zz").is_err());
        assert!(CapabilityHash::parse(b"00ff").is_err());
    }
}
