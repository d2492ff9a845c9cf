//! Identifier newtypes: what the guard keeps is never a bag of strings.

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Longest `Mcp-Session-Id` the guard looks at; a longer one passes untouched.
const MAX_SESSION_ID: usize = 1024;
/// Longest idempotency key accepted (the client SDK's bound).
const MAX_KEY: usize = 256;

/// The instance (process, replica) a guard runs in: the owner named in the session records
/// and claims it writes.
///
/// A restarted process must not take a new name that equals its old one: what the old process
/// held (streams, their event maps, running calls) died with it, and a resume that reaches the
/// new one must be refused as `not_owner`, not replayed. The default
/// ([`InstanceId::random`]) is fresh per process.
#[derive(Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct InstanceId(String);

impl InstanceId {
    /// A name of your choosing (1 to 128 visible ASCII bytes), e.g. `replica-2-<boot id>`.
    pub fn new(name: impl Into<String>) -> Result<Self, InvalidId> {
        let name = name.into();
        if name.is_empty() || name.len() > 128 || !visible_ascii(name.as_bytes()) {
            return Err(InvalidId(
                "instance id must be 1 to 128 visible ASCII bytes",
            ));
        }
        Ok(InstanceId(name))
    }

    /// A fresh random name (UUID v4).
    pub fn random() -> Self {
        InstanceId(uuid::Uuid::new_v4().simple().to_string())
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for InstanceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "InstanceId({})", self.0)
    }
}

impl fmt::Display for InstanceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// An `Mcp-Session-Id` the inner server assigned. A bearer secret: `Debug` and `Display` show
/// a short prefix only.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct SessionId(Arc<str>);

impl SessionId {
    /// Validates a header value: 1 to 1024 bytes of visible ASCII.
    pub fn parse(value: &[u8]) -> Result<Self, InvalidId> {
        Self::check(value).map(Self::from_checked)
    }

    /// A session id from text [`SessionId::check`] passed.
    pub(crate) fn from_checked(text: &str) -> Self {
        SessionId(Arc::from(text))
    }

    /// [`SessionId::parse`] without making one: the value as text when it is valid (to look
    /// up a session already known, allocating nothing).
    pub(crate) fn check(value: &[u8]) -> Result<&str, InvalidId> {
        const INVALID: InvalidId = InvalidId("session id must be 1 to 1024 visible ASCII bytes");
        if value.is_empty() || value.len() > MAX_SESSION_ID || !visible_ascii(value) {
            return Err(INVALID);
        }
        std::str::from_utf8(value).map_err(|_| INVALID)
    }

    /// The full value. Never log it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

// Hashed and compared as its text, so a map keyed by it is searched with a `&str`.
impl std::borrow::Borrow<str> for SessionId {
    fn borrow(&self) -> &str {
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

/// The id of an SSE stream as the guard numbers it: the `<stream>` of `<stream>-<seq>`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct StreamId(u64);

impl StreamId {
    /// Wraps a number (the guard draws them from its seeded generator).
    pub fn from_u64(n: u64) -> Self {
        StreamId(n)
    }

    /// The mark of the instance that numbered the stream (the high 32 bits).
    pub fn instance_tag(self) -> u32 {
        // The shift leaves 32 bits.
        (self.0 >> 32) as u32
    }

    /// The event id of position `seq` on this stream.
    pub fn event_id(self, seq: u64) -> String {
        self.event_id_text(seq).as_str().to_owned()
    }

    /// The event id of position `seq`, without an allocation (one is written per event).
    pub(crate) fn event_id_text(self, seq: u64) -> EventIdText {
        let mut text = EventIdText {
            buf: [0; EVENT_ID_MAX],
            len: 17,
        };
        text.buf[..16].copy_from_slice(&hex(self.0));
        text.buf[16] = b'-';
        // The digits written where they go, the last first.
        let mut digits = 1;
        while digits < 20 && seq >= 10u64.pow(digits as u32) {
            digits += 1;
        }
        text.len += digits;
        let mut n = seq;
        for at in (17..text.len).rev() {
            text.buf[at] = b'0' + (n % 10) as u8;
            n /= 10;
        }
        text
    }
}

/// The longest event id: 16 hex digits, `-`, 20 decimal digits.
const EVENT_ID_MAX: usize = 16 + 1 + 20;

/// An event id written on the stack ([`StreamId::event_id_text`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct EventIdText {
    buf: [u8; EVENT_ID_MAX],
    len: usize,
}

impl EventIdText {
    pub(crate) fn as_str(&self) -> &str {
        // Hex digits, `-` and decimal digits only: ASCII.
        std::str::from_utf8(self.as_bytes()).unwrap_or("")
    }

    /// The id's bytes (ASCII), as written into a stream: no UTF-8 check per event.
    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl fmt::Display for StreamId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

/// `n` in 16 lower-case hex digits, all at once: each nibble spread to a byte of its own,
/// then each byte made a digit (`0`-`9`, or `a`-`f` for those that reach 16 once 6 is added;
/// no byte carries into the next).
fn hex(n: u64) -> [u8; 16] {
    const BYTES: u128 = 0x0101_0101_0101_0101_0101_0101_0101_0101;
    let mut x = u128::from(n);
    x = (x | (x << 32)) & 0x0000_0000_ffff_ffff_0000_0000_ffff_ffff;
    x = (x | (x << 16)) & 0x0000_ffff_0000_ffff_0000_ffff_0000_ffff;
    x = (x | (x << 8)) & 0x00ff_00ff_00ff_00ff_00ff_00ff_00ff_00ff;
    x = (x | (x << 4)) & 0x0f0f_0f0f_0f0f_0f0f_0f0f_0f0f_0f0f_0f0f;
    let letters = ((x + 6 * BYTES) >> 4) & BYTES;
    // Byte `k` holds nibble `k` (the lowest first): big-endian, the highest comes first.
    (x + u128::from(b'0') * BYTES + letters * u128::from(b'a' - b'0' - 10)).to_be_bytes()
}

/// A `Last-Event-ID` the guard issued: a stream and a position on it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Cursor {
    /// The stream.
    pub stream: StreamId,
    /// The last position the client has seen (from 1).
    pub seq: u64,
}

impl Cursor {
    /// Reads `<16 hex>-<decimal>`; `None` for anything else (not an id this guard issued).
    pub fn parse(value: &[u8]) -> Option<Self> {
        let s = std::str::from_utf8(value).ok()?;
        let (stream, seq) = s.split_once('-')?;
        if stream.len() != 16 || !stream.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        if seq.is_empty() || seq.len() > 20 || !seq.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        Some(Cursor {
            stream: StreamId(u64::from_str_radix(stream, 16).ok()?),
            seq: seq.parse().ok()?,
        })
    }
}

/// The idempotency key of a tool call: the same across re-sends while the JSON-RPC id changes.
///
/// A key is 1 to 256 bytes of printable ASCII (0x20–0x7E) that neither begins nor ends with
/// a space: a header value that arrives as it was sent. HTTP strips a header value's edge
/// whitespace, so such a key would reach the server as one key in its `Idempotency-Key`
/// header and another in the body, and be refused whenever it is sent.
#[derive(Clone, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    /// Validates a key against the rule above.
    pub fn new(key: impl Into<String>) -> Result<Self, InvalidId> {
        let key = key.into();
        // Before the byte check, so that a tab at an edge is refused for what it is.
        let edge = |b: Option<&u8>| matches!(b, Some(b' ' | b'\t'));
        if edge(key.as_bytes().first()) || edge(key.as_bytes().last()) {
            return Err(InvalidId(
                "idempotency key must not begin or end with a space or tab",
            ));
        }
        if key.is_empty() || key.len() > MAX_KEY || !key.bytes().all(|b| (0x20..=0x7e).contains(&b))
        {
            return Err(InvalidId(
                "idempotency key must be 1 to 256 bytes of printable ASCII",
            ));
        }
        Ok(IdempotencyKey(key))
    }

    /// The key's text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The key as stored within `scope`: a digest of the scope before the key's text, so
    /// that one text under two scopes is two keys, and the scope itself is not stored.
    pub(crate) fn within(&self, scope: &[u8]) -> IdempotencyKey {
        use sha2::{Digest, Sha256};
        let digest = Sha256::digest(scope);
        IdempotencyKey(format!("{}/{}", crate::wire::hex(&digest[..16]), self.0))
    }
}

impl fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// `sha256:<hex>` of a negotiated context (protocol version, client and server capabilities):
/// the `Mcp-Capability-Hash` header's value.
#[derive(Clone)]
pub struct CapabilityHash(Arc<HashText>);

/// A hash's text, and the header value it makes, built once: every response of its session
/// carries it (a clone of it is a reference count, not a copy and a check of its bytes).
struct HashText {
    text: Box<str>,
    /// `None` for a text that is no header value (a record read back from a store could hold
    /// one): no header is sent then.
    header: Option<http::HeaderValue>,
}

impl CapabilityHash {
    fn new(text: String) -> Self {
        let header = http::HeaderValue::from_str(&text).ok();
        CapabilityHash(Arc::new(HashText {
            text: text.into_boxed_str(),
            header,
        }))
    }

    pub(crate) fn from_digest(hex: String) -> Self {
        Self::new(format!("sha256:{hex}"))
    }

    /// Wraps a stored value (records read back from a store).
    pub fn from_stored(value: impl Into<String>) -> Self {
        Self::new(value.into())
    }

    /// The header value.
    pub fn as_str(&self) -> &str {
        &self.0.text
    }

    /// The hash as a header value; `None` when its text cannot be one.
    pub(crate) fn header_value(&self) -> Option<&http::HeaderValue> {
        self.0.header.as_ref()
    }
}

impl PartialEq for CapabilityHash {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for CapabilityHash {}

impl std::hash::Hash for CapabilityHash {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl fmt::Debug for CapabilityHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("CapabilityHash")
            .field(&self.as_str())
            .finish()
    }
}

impl fmt::Display for CapabilityHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for CapabilityHash {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for CapabilityHash {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(Self::new(String::deserialize(d)?))
    }
}

impl Serialize for SessionId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for SessionId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        SessionId::parse(text.as_bytes()).map_err(serde::de::Error::custom)
    }
}

/// Digest of a tool name and its arguments: what tells "the same call again" from "another
/// call under the same key".
#[derive(Clone, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
pub struct ArgumentsDigest(String);

impl ArgumentsDigest {
    pub(crate) fn from_hex(hex: String) -> Self {
        ArgumentsDigest(hex)
    }

    /// Wraps a stored value.
    pub fn from_stored(value: impl Into<String>) -> Self {
        ArgumentsDigest(value.into())
    }

    /// The hex digest.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Names one claim of an idempotency key: only its holder may renew, finish or release it.
#[derive(Clone, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
pub struct ClaimToken(String);

impl ClaimToken {
    /// A token from the guard's generator: the instance and a number unique in it.
    pub(crate) fn new(instance: &InstanceId, n: u64) -> Self {
        ClaimToken(format!("{instance}/{n:016x}"))
    }

    /// Wraps a stored value.
    pub fn from_stored(value: impl Into<String>) -> Self {
        ClaimToken(value.into())
    }

    /// The token's text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A value from the network or the application that is not a valid identifier.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidId(&'static str);

impl InvalidId {
    /// Why the value is not valid, fit to answer a request with.
    pub fn reason(&self) -> &'static str {
        self.0
    }
}

fn visible_ascii(bytes: &[u8]) -> bool {
    // A word at a time: no byte under 0x21 (its subtraction borrows into the high bit of a
    // byte whose high bit was clear), none over 0x7e (adding 1 reaches the high bit, or it
    // was set). A flag set falsely needs a true one below it, so the words' verdict is exact.
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    let mut words = bytes.chunks_exact(8);
    for word in &mut words {
        let mut w = [0; 8];
        w.copy_from_slice(word);
        let w = u64::from_le_bytes(w);
        let under = w.wrapping_sub(0x21 * LO) & !w;
        let over = w.wrapping_add(LO) | w;
        if (under | over) & HI != 0 {
            return false;
        }
    }
    words.remainder().iter().all(|b| (0x21..=0x7e).contains(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_are_only_the_ids_the_guard_issues() {
        let c = Cursor::parse(b"00000000000000ff-42").unwrap();
        assert_eq!(c.stream, StreamId::from_u64(255));
        assert_eq!(c.seq, 42);
        assert_eq!(c.stream.event_id(43), "00000000000000ff-43");
        assert_eq!(
            StreamId::from_u64(u64::MAX).event_id(0),
            "ffffffffffffffff-0"
        );
        assert_eq!(
            StreamId::from_u64(0x0123_4567_89ab_cdef).event_id(u64::MAX),
            "0123456789abcdef-18446744073709551615"
        );
        // Every byte value in every place of a word, and lengths past a word.
        let plain = |b: &[u8]| b.iter().all(|b| (0x21..=0x7e).contains(b));
        for len in [1, 7, 8, 9, 16, 36] {
            for at in 0..len {
                for byte in 0..=255u8 {
                    let mut v = vec![b'a'; len];
                    v[at] = byte;
                    assert_eq!(visible_ascii(&v), plain(&v), "{v:?}");
                }
            }
        }
        let edges = [0, 0x20, 0x21, 0x22, 0x7d, 0x7e, 0x7f, 0x80, 0xff];
        for (i, j) in (0..8).flat_map(|i| (0..8).map(move |j| (i, j))) {
            for (&x, &y) in edges.iter().flat_map(|x| edges.iter().map(move |y| (x, y))) {
                let mut v = vec![b'a'; 8];
                v[i] = x;
                v[j] = y;
                assert_eq!(visible_ascii(&v), plain(&v), "{v:?}");
            }
        }
        // Every nibble value in every place, as `format!` writes them.
        let mut n = 0x0123_4567_89ab_cdef_u64;
        for _ in 0..64 {
            let id = StreamId::from_u64(n).event_id(7);
            assert_eq!(id, format!("{n:016x}-7"));
            assert_eq!(Cursor::parse(id.as_bytes()).map(|c| c.stream.0), Some(n));
            n = n.rotate_left(1) ^ 0x9e37_79b9_7f4a_7c15;
        }
        for bad in [
            &b"ff-42"[..],
            b"00000000000000ff-",
            b"00000000000000ff-4x",
            b"00000000000000fg-1",
            b"0/1",
            b"00000000000000ff-999999999999999999999",
            b"",
        ] {
            assert_eq!(
                Cursor::parse(bad),
                None,
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn keys_have_no_edge_whitespace() {
        // HTTP strips a header value's edge whitespace: such a key would be one key in a
        // request's header and another in its body.
        for edged in ["k ", " k", "\tk", "k\t", " ", "order-1 "] {
            let err = IdempotencyKey::new(edged).unwrap_err();
            assert!(err.to_string().contains("begin or end"), "{edged:?}: {err}");
        }
        assert_eq!(IdempotencyKey::new("a b").unwrap().as_str(), "a b");
        assert!(IdempotencyKey::new("a\tb").is_err());
    }

    #[test]
    fn keys_and_session_ids_are_bounded() {
        assert!(IdempotencyKey::new("k-1").is_ok());
        assert!(IdempotencyKey::new("").is_err());
        assert!(IdempotencyKey::new("a\nb").is_err());
        assert!(IdempotencyKey::new("x".repeat(257)).is_err());
        assert!(SessionId::parse(b"abc def").is_err());
        assert!(SessionId::parse(&[b'a'; 1025]).is_err());
        let id = SessionId::parse(b"0123456789abcdef").unwrap();
        assert!(!format!("{id:?}").contains("456789"));
    }
}
