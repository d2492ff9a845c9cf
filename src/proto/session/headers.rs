//! The protocol's request headers: their names and values, and the set each request of a
//! negotiated session carries, built once per session.

use http::header::{HeaderMap, HeaderName, HeaderValue, ACCEPT, CONTENT_TYPE};

use crate::ids::{EventId, IdempotencyKey, SessionId};
use crate::proto::version::ProtocolVersion;

/// `Mcp-Session-Id`.
const MCP_SESSION_ID: HeaderName = HeaderName::from_static("mcp-session-id");
/// `MCP-Protocol-Version`.
const MCP_PROTOCOL_VERSION: HeaderName = HeaderName::from_static("mcp-protocol-version");
/// `Last-Event-ID`.
const LAST_EVENT_ID: HeaderName = HeaderName::from_static("last-event-id");
/// `Idempotency-Key`.
const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");

const ACCEPT_ANY: HeaderValue = HeaderValue::from_static("application/json, text/event-stream");
const ACCEPT_SSE: HeaderValue = HeaderValue::from_static("text/event-stream");
const JSON: HeaderValue = HeaderValue::from_static("application/json");

/// The protocol headers of a session's requests (the driver adds the app's own). Those of a
/// POST, every call's, are built once when the session is negotiated and cloned per request,
/// which costs less than building them anew under the session's lock; a GET's (a resume, the
/// standalone stream) are derived from them when needed, so an idle session keeps one copy.
#[derive(Debug, Clone)]
pub(super) struct SessionHeaders {
    post: HeaderMap,
}

impl SessionHeaders {
    /// The headers of a session with id `id` (none: the server assigned none) and `version`.
    pub(super) fn new(id: Option<&SessionId>, version: ProtocolVersion) -> Self {
        let mut post = HeaderMap::with_capacity(4);
        post.insert(ACCEPT, ACCEPT_ANY);
        post.insert(CONTENT_TYPE, JSON);
        if let Some(id) = id.and_then(session_id_header) {
            post.insert(MCP_SESSION_ID, id);
        }
        if version.has_version_header() {
            post.insert(
                MCP_PROTOCOL_VERSION,
                HeaderValue::from_static(version.as_str()),
            );
        }
        SessionHeaders { post }
    }

    /// The headers of the DELETE that ends the session: its id and version, and nothing
    /// about a body (it has none); `None` when the server assigned no id (nothing to delete).
    pub(super) fn delete(&self) -> Option<HeaderMap> {
        let id = self.post.get(MCP_SESSION_ID)?;
        let mut headers = HeaderMap::with_capacity(2);
        headers.insert(MCP_SESSION_ID, id.clone());
        if let Some(version) = self.post.get(MCP_PROTOCOL_VERSION) {
            headers.insert(MCP_PROTOCOL_VERSION, version.clone());
        }
        Some(headers)
    }

    /// The headers of a POST; a keyed call's carry its idempotency `key` too, for the
    /// servers that read it there.
    pub(super) fn post(&self, key: Option<&IdempotencyKey>) -> HeaderMap {
        let mut headers = self.post.clone();
        if let Some(Ok(v)) = key.map(|k| HeaderValue::from_str(k.as_str())) {
            headers.insert(IDEMPOTENCY_KEY, v);
        }
        headers
    }

    /// The headers of a GET: a POST's, accepting only an event stream and sending no body;
    /// resuming `after` an event id, when there is one, with `Last-Event-ID`.
    pub(super) fn get(&self, after: Option<&EventId>) -> HeaderMap {
        let mut headers = self.post.clone();
        headers.insert(ACCEPT, ACCEPT_SSE);
        headers.remove(CONTENT_TYPE);
        if let Some(Ok(v)) = after.map(|id| HeaderValue::from_str(id.as_str())) {
            headers.insert(LAST_EVENT_ID, v);
        }
        headers
    }
}

/// A session id as a header value, marked sensitive: it is a bearer secret, and requests end
/// up in logs through the `Debug` of whatever holds them.
fn session_id_header(id: &SessionId) -> Option<HeaderValue> {
    let mut v = HeaderValue::from_str(id.expose()).ok()?;
    v.set_sensitive(true);
    Some(v)
}

/// The headers of an `initialize` POST (no session yet).
pub(super) fn initialize_headers() -> HeaderMap {
    let mut headers = HeaderMap::with_capacity(2);
    headers.insert(ACCEPT, ACCEPT_ANY);
    headers.insert(CONTENT_TYPE, JSON);
    headers
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(headers: &HeaderMap) -> Vec<(String, String)> {
        let mut all: Vec<_> = headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_str().unwrap().to_owned()))
            .collect();
        all.sort();
        all
    }

    #[test]
    fn a_get_carries_the_posts_headers_but_accepts_only_a_stream_and_sends_no_body() {
        let id = SessionId::parse(b"s-1").unwrap();
        let headers = SessionHeaders::new(Some(&id), ProtocolVersion::V2025_06_18);
        let pair = |k: &str, v: &str| (k.to_owned(), v.to_owned());
        assert_eq!(
            names(&headers.post(None)),
            vec![
                pair("accept", "application/json, text/event-stream"),
                pair("content-type", "application/json"),
                pair("mcp-protocol-version", "2025-06-18"),
                pair("mcp-session-id", "s-1"),
            ]
        );
        assert_eq!(
            names(&headers.get(None)),
            vec![
                pair("accept", "text/event-stream"),
                pair("mcp-protocol-version", "2025-06-18"),
                pair("mcp-session-id", "s-1"),
            ]
        );
        let after = EventId::parse("s1-3").unwrap();
        assert_eq!(
            names(&headers.get(Some(&after))),
            vec![
                pair("accept", "text/event-stream"),
                pair("last-event-id", "s1-3"),
                pair("mcp-protocol-version", "2025-06-18"),
                pair("mcp-session-id", "s-1"),
            ]
        );
        assert_eq!(
            names(&headers.delete().unwrap()),
            vec![
                pair("mcp-protocol-version", "2025-06-18"),
                pair("mcp-session-id", "s-1"),
            ]
        );
        assert_eq!(
            SessionHeaders::new(Some(&id), ProtocolVersion::V2025_03_26)
                .delete()
                .map(|h| names(&h)),
            Some(vec![pair("mcp-session-id", "s-1")])
        );
        assert!(SessionHeaders::new(None, ProtocolVersion::V2025_06_18)
            .delete()
            .is_none());
    }
}
