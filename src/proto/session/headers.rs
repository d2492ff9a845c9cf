//! The protocol's request headers: their names and values, and the set each request of a
//! negotiated session carries, built once per session.

use http::header::{HeaderMap, HeaderName, HeaderValue, ACCEPT, CONTENT_TYPE};

use crate::ids::SessionId;
use crate::proto::version::ProtocolVersion;

/// `Mcp-Session-Id`.
pub(super) const MCP_SESSION_ID: HeaderName = HeaderName::from_static("mcp-session-id");
/// `MCP-Protocol-Version`.
pub(super) const MCP_PROTOCOL_VERSION: HeaderName = HeaderName::from_static("mcp-protocol-version");
/// `Last-Event-ID`.
pub(super) const LAST_EVENT_ID: HeaderName = HeaderName::from_static("last-event-id");
/// `Idempotency-Key`.
pub(super) const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");

const ACCEPT_ANY: HeaderValue = HeaderValue::from_static("application/json, text/event-stream");
const ACCEPT_SSE: HeaderValue = HeaderValue::from_static("text/event-stream");
const JSON: HeaderValue = HeaderValue::from_static("application/json");

/// The protocol headers of a session's requests (the driver adds the app's own). Those of a
/// POST, every call's, are built once when the session is negotiated and cloned per request,
/// which costs less than building them anew under the session's lock; those of a GET (a
/// resume, the standalone stream) are built when needed, so an idle session keeps one copy.
#[derive(Debug, Clone)]
pub(super) struct SessionHeaders {
    id: Option<HeaderValue>,
    version: ProtocolVersion,
    post: HeaderMap,
}

impl SessionHeaders {
    /// The headers of a session with id `id` (none: the server assigned none) and `version`.
    pub(super) fn new(id: Option<HeaderValue>, version: ProtocolVersion) -> Self {
        let mut headers = SessionHeaders {
            id,
            version,
            post: HeaderMap::new(),
        };
        headers.post = headers.build(true);
        headers
    }

    /// The session id's header value, if the server assigned one.
    pub(super) fn id(&self) -> Option<HeaderValue> {
        self.id.clone()
    }

    /// The headers of a POST.
    pub(super) fn post(&self) -> HeaderMap {
        self.post.clone()
    }

    /// The headers of a GET.
    pub(super) fn get(&self) -> HeaderMap {
        self.build(false)
    }

    fn build(&self, post: bool) -> HeaderMap {
        let mut headers = HeaderMap::with_capacity(4);
        if post {
            headers.insert(ACCEPT, ACCEPT_ANY);
            headers.insert(CONTENT_TYPE, JSON);
        } else {
            headers.insert(ACCEPT, ACCEPT_SSE);
        }
        if let Some(id) = &self.id {
            headers.insert(MCP_SESSION_ID, id.clone());
        }
        if self.version.has_version_header() {
            headers.insert(
                MCP_PROTOCOL_VERSION,
                HeaderValue::from_static(self.version.as_str()),
            );
        }
        headers
    }
}

/// A session id as a header value, marked sensitive: it is a bearer secret, and requests end
/// up in logs through the `Debug` of whatever holds them.
pub(super) fn session_id_header(id: &SessionId) -> Option<HeaderValue> {
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
