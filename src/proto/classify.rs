//! Reading what the network said: the one place that interprets response heads (content
//! type, capability hash, session id, `Retry-After`, rejection) and refused answers (status
//! and bounded body), shared by every kind of exchange.
//!
//! The session maps what is read here to a recovery [`Failure`](super::decide::Failure) per
//! exchange kind; keeping the reading in one place is what stops "the session is gone" from
//! meaning one thing on a call and another on the standalone stream or a DELETE.

use std::time::Duration;

use http::HeaderMap;
use serde_json::Value;

use super::ext;
use super::jsonrpc::{self, Message};
use super::RejectReason;
use crate::auth::AuthChallenge;
use crate::error::{Error, ErrorKind, RpcError};
use crate::ids::{CapabilityHash, SessionId};

/// Error bodies are read only to classify them; reading stops here.
pub(crate) const MAX_ERROR_BODY: usize = 64 * 1024;
/// A `Retry-After` above this is clamped (a hostile value must not park a request forever).
pub(crate) const MAX_RETRY_AFTER: Duration = Duration::from_secs(3600);

/// The body kind a success head announces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ContentType {
    Json,
    Sse,
    Other,
}

/// Reads `Content-Type` (its essence, case-insensitively), without allocating.
pub(crate) fn content_type(headers: &HeaderMap) -> ContentType {
    let Some(v) = headers.get(http::header::CONTENT_TYPE) else {
        return ContentType::Other;
    };
    let essence = v.as_bytes().split(|b| *b == b';').next().unwrap_or(b"");
    let essence = essence.trim_ascii();
    if essence.eq_ignore_ascii_case(b"application/json") {
        ContentType::Json
    } else if essence.eq_ignore_ascii_case(b"text/event-stream") {
        ContentType::Sse
    } else {
        ContentType::Other
    }
}

/// The capability hash a head names, if a valid one.
pub(crate) fn head_hash(headers: &HeaderMap) -> Option<CapabilityHash> {
    headers
        .get(ext::CAPABILITY_HASH_HEADER)
        .and_then(|v| CapabilityHash::parse(v.as_bytes()).ok())
}

/// Whether a head's capability hash is `expected`, when the exchange checks hashes. A head
/// without a valid hash from a server that advertised them counts as a mismatch.
pub(crate) fn hash_matches(
    checked: bool,
    headers: &HeaderMap,
    expected: Option<&CapabilityHash>,
) -> bool {
    !checked || head_hash(headers).as_ref() == expected
}

/// The session id an `initialize` head assigns: `Ok(None)` without one, an error for a
/// value that is not a valid id.
pub(crate) fn session_id(headers: &HeaderMap) -> Result<Option<SessionId>, Error> {
    match headers.get(SessionId::HEADER) {
        None => Ok(None),
        Some(v) => SessionId::parse(v.as_bytes())
            .map(Some)
            .map_err(|e| Error::with_source(ErrorKind::Protocol, "invalid Mcp-Session-Id", e)),
    }
}

/// What a refusal says about the request and its session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refused {
    /// The session is gone: 404 to a request that carried the session id, or a 400 in one of
    /// the shapes stock servers give an unknown session ([`SESSION_GONE_400`]).
    SessionGone,
    /// The resume-safety extension's explicit rejection (header or body).
    Rejected(RejectReason),
    /// 405: the endpoint does not offer this method (no GET stream, no DELETE, no resume).
    NotAllowed,
    /// The status proves the request was not processed; come back after `retry_after` if set.
    NotProcessed {
        /// `Retry-After` (delta-seconds), when the server named a time to come back.
        retry_after: Option<Duration>,
    },
    /// The request reached the server and may have been processed.
    MayHaveRun,
}

/// A classified refusal: what it means, and the error that describes it to the application.
#[derive(Debug, Clone)]
pub(crate) struct Refusal {
    /// What it means.
    pub(crate) class: Refused,
    /// The server's JSON-RPC error when the body was one, else a `Protocol` error naming the
    /// status; carries `Retry-After` when given.
    pub(crate) error: Error,
}

/// Facts read off a refused exchange's head, kept until its body is read.
#[derive(Debug, Clone, Default)]
pub(crate) struct HeadFacts {
    /// `Mcp-Resume-Rejected`, when present (it counts only under [`Context::extension`]).
    pub(crate) rejected: Option<RejectReason>,
    /// `Retry-After`, in delta-seconds (an HTTP date is ignored: the core has no wall clock).
    pub(crate) retry_after: Option<Duration>,
    /// The server refused the request's credentials: a 401, or a 403 asking for more scope.
    pub(crate) auth: Option<AuthChallenge>,
}

impl HeadFacts {
    /// Reads the facts of a refused head.
    pub(crate) fn read(status: u16, headers: &HeaderMap) -> Self {
        let rejected = headers
            .get(ext::REJECTED_HEADER)
            .map(|v| ext::reject_reason(&String::from_utf8_lossy(v.as_bytes())));
        let retry_after = headers
            .get(http::header::RETRY_AFTER)
            .and_then(|v| delay_seconds(v.as_bytes()));
        HeadFacts {
            rejected,
            retry_after,
            auth: AuthChallenge::from_response(status, headers),
        }
    }
}

/// A `Retry-After` in delta-seconds (RFC 9110: ASCII digits alone, optional whitespace
/// around), clamped to [`MAX_RETRY_AFTER`]; `None` for anything else. Only digits count: a
/// 503 with a time to come back proves its request was not processed, so a value `u64`'s
/// parser would also take (`+5`) must not make an unkeyed call that may have run go again.
fn delay_seconds(value: &[u8]) -> Option<Duration> {
    let digits = value.trim_ascii();
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let seconds = digits.iter().fold(0u64, |acc, digit| {
        acc.saturating_mul(10)
            .saturating_add(u64::from(digit - b'0'))
    });
    Some(Duration::from_secs(seconds).min(MAX_RETRY_AFTER))
}

/// What a refusal is read against: how its request was sent, and the application's rules.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Context {
    /// The request carried `Mcp-Session-Id` (a 404 means "session gone" only then).
    pub(crate) carried_session_id: bool,
    /// The request's session negotiated the resume-safety extension: only then does its
    /// rejection marker (header or body) mean anything.
    pub(crate) extension: bool,
    /// A 503 with `Retry-After` proves the request was not processed
    /// (`SessionConfig::unavailable_not_processed`).
    pub(crate) unavailable_not_processed: bool,
}

/// Classifies a refused exchange (any non-2xx status) from its status, head facts and the
/// first [`MAX_ERROR_BODY`] bytes of its body, in its [`Context`].
///
/// The extension's rejection marker is honoured only where the extension defines it: a 404
/// from a session that negotiated the extension. Anywhere else (a 500 carrying it, a server
/// that never advertised the extension) it proves nothing, and the status decides.
pub(crate) fn refusal(status: u16, head: &HeadFacts, body: &[u8], context: Context) -> Refusal {
    let rpc = rpc_error(body);
    let rejected = if context.extension && status == 404 {
        head.rejected
            .clone()
            .or_else(|| ext::rejection_from_body(body))
    } else {
        None
    };
    let retry_after = head
        .retry_after
        .filter(|_| status != 503 || context.unavailable_not_processed);
    let class = if let Some(reason) = rejected {
        Refused::Rejected(reason)
    } else if context.carried_session_id
        && (status == 404 || (status == 400 && says_session_gone(body, rpc.as_ref())))
    {
        Refused::SessionGone
    } else if status == 405 {
        Refused::NotAllowed
    } else if proves_not_processed(status, retry_after.is_some()) {
        Refused::NotProcessed { retry_after }
    } else {
        Refused::MayHaveRun
    };
    let mut error = match rpc {
        Some(rpc) => Error::rpc(rpc),
        None => Error::new(ErrorKind::Protocol, format!("answered HTTP {status}")),
    };
    if let Some(after) = head.retry_after {
        error = error.with_retry_after(after);
    }
    if let Some(challenge) = &head.auth {
        // The refusal of this request's own credentials: its error says so, and a call that
        // ends because of it (reported, or interrupted with an unknown outcome) carries it.
        error = Error::unauthorized(challenge.clone(), error);
    }
    Refusal { class, error }
}

/// Statuses after which the server has not acted on the request: the client's request was
/// refused before any processing (most 4xx), the resource is elsewhere (a redirect this
/// client does not follow), or the server asked to come back later (429, or 503 with
/// `Retry-After`). A 303 is absent on purpose: it answers a POST that was processed; so is
/// 408, which the HTTP standard reserves for a request not received in time but timeout
/// layers (tower-http's `TimeoutLayer`, others) answer once the handler has started.
fn proves_not_processed(status: u16, retry_after: bool) -> bool {
    matches!(
        status,
        301 | 302
            | 307
            | 308
            | 400
            | 401
            | 403
            | 404
            | 405
            | 406
            | 411
            | 413
            | 414
            | 415
            | 417
            | 421
            | 429
            | 431
    ) || (status == 503 && retry_after)
}

/// What stock servers answer with 400 to a request whose session they do not know, body for
/// body: a JSON-RPC error `(Some(code), message)` or a plain-text body `(None, text)`.
///
/// - The TypeScript SDK's stateful examples (which most TypeScript servers copy), 1.x:
///   -32000 "Bad Request: No valid session ID provided" on POST (one example drops
///   " provided"), plain "Invalid or missing session ID" on GET and DELETE.
/// - The TypeScript SDK's transport: -32000 "Bad Request: Server not initialized", a session
///   id reaching a transport that never saw `initialize` (a restarted single-session server).
/// - The Python SDK's session manager before 2.0: plain "Bad Request: No valid session ID
///   provided".
///
/// Only these: any other 400 is the request's own fault ("invalid params: session_name
/// required" is not a lost session), and "header required" / "missing session ID" say the
/// id never arrived (a proxy stripped it), which a new session would not cure.
const SESSION_GONE_400: &[(Option<i64>, &str)] = &[
    (Some(-32000), "Bad Request: No valid session ID provided"),
    (Some(-32000), "Bad Request: No valid session ID"),
    (Some(-32000), "Bad Request: Server not initialized"),
    (None, "Bad Request: No valid session ID provided"),
    (None, "Invalid or missing session ID"),
];

/// Whether a 400's body is one of the [`SESSION_GONE_400`] shapes.
fn says_session_gone(body: &[u8], rpc: Option<&RpcError>) -> bool {
    match rpc {
        Some(e) => SESSION_GONE_400
            .iter()
            .any(|(code, message)| *code == Some(e.code) && e.message == *message),
        None => std::str::from_utf8(body).is_ok_and(|text| {
            SESSION_GONE_400
                .iter()
                .any(|(code, message)| code.is_none() && text.trim() == *message)
        }),
    }
}

/// The JSON-RPC error object of a body, when it is one.
fn rpc_error(body: &[u8]) -> Option<RpcError> {
    let v: Value = serde_json::from_slice(body).ok()?;
    match jsonrpc::decode_value(v).ok()? {
        Message::Response { result: Err(e), .. } => Some(e),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NO_SESSION: &[u8] = br#"{"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":"Bad Request: No valid session ID provided"}}"#;
    const REJECTED: &[u8] = br#"{"jsonrpc":"2.0","id":null,"error":{"code":-32001,"message":"rejected","data":{"code":"SESSION_RESUME_REJECTED","reason":"not_owner"}}}"#;

    const EXTENSION: Context = Context {
        carried_session_id: true,
        extension: true,
        unavailable_not_processed: true,
    };

    fn carried(carried_session_id: bool) -> Context {
        Context {
            carried_session_id,
            ..EXTENSION
        }
    }

    fn class(status: u16, body: &[u8], carried_id: bool) -> Refused {
        refusal(status, &HeadFacts::default(), body, carried(carried_id)).class
    }

    #[test]
    fn session_gone_needs_the_session_id() {
        assert_eq!(class(404, b"", true), Refused::SessionGone);
        assert_eq!(class(400, NO_SESSION, true), Refused::SessionGone);
        assert_eq!(
            class(404, b"", false),
            Refused::NotProcessed { retry_after: None }
        );
        assert_eq!(
            class(400, NO_SESSION, false),
            Refused::NotProcessed { retry_after: None }
        );
        assert_eq!(
            class(400, b"bad params", true),
            Refused::NotProcessed { retry_after: None }
        );
    }

    #[test]
    fn session_gone_400_only_in_the_shapes_stock_servers_send() {
        let gone: [&[u8]; 5] = [
            NO_SESSION,
            br#"{"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":"Bad Request: No valid session ID"}}"#,
            br#"{"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":"Bad Request: Server not initialized"}}"#,
            b"Bad Request: No valid session ID provided",
            b"Invalid or missing session ID\n",
        ];
        for body in gone {
            let shown = String::from_utf8_lossy(body);
            assert_eq!(class(400, body, true), Refused::SessionGone, "{shown}");
        }
        let not_gone: [&[u8]; 7] = [
            br#"{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"invalid params: session_name is required"}}"#,
            br#"{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Bad Request: No valid session ID provided"}}"#,
            br#"{"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":"Bad Request: Mcp-Session-Id header is required"}}"#,
            b"Bad Request: Missing session ID",
            b"Bad Request: Session ID is required",
            b"your session token expired",
            b"Bad Request: No valid session ID provided, and more",
        ];
        for body in not_gone {
            let shown = String::from_utf8_lossy(body);
            assert_eq!(
                class(400, body, true),
                Refused::NotProcessed { retry_after: None },
                "{shown}"
            );
        }
    }

    #[test]
    fn rejection_by_body_or_header() {
        assert_eq!(
            class(404, REJECTED, true),
            Refused::Rejected(RejectReason::NotOwner)
        );
        let mut headers = HeaderMap::new();
        headers.insert(ext::REJECTED_HEADER, "event_gap".parse().unwrap());
        let head = HeadFacts::read(404, &headers);
        assert_eq!(
            refusal(404, &head, b"", EXTENSION).class,
            Refused::Rejected(RejectReason::EventGap)
        );
    }

    #[test]
    fn a_rejection_counts_only_on_a_404_of_a_session_with_the_extension() {
        let mut headers = HeaderMap::new();
        headers.insert(ext::REJECTED_HEADER, "not_owner".parse().unwrap());
        let without = Context {
            extension: false,
            ..EXTENSION
        };
        for status in [500, 503, 409, 400] {
            let head = HeadFacts::read(status, &headers);
            let by_header = refusal(status, &head, b"", EXTENSION).class;
            let by_body = refusal(status, &HeadFacts::default(), REJECTED, EXTENSION).class;
            assert!(!matches!(by_header, Refused::Rejected(_)), "{status}");
            assert!(!matches!(by_body, Refused::Rejected(_)), "{status}");
        }
        assert_eq!(
            refusal(500, &HeadFacts::read(500, &headers), b"", EXTENSION).class,
            Refused::MayHaveRun
        );
        // From a server that never advertised the extension, a 404 is what it is.
        let head = HeadFacts::read(404, &headers);
        assert_eq!(
            refusal(404, &head, REJECTED, without).class,
            Refused::SessionGone
        );
    }

    #[test]
    fn a_503_with_retry_after_proves_nothing_when_the_application_says_so() {
        let mut headers = HeaderMap::new();
        headers.insert(http::header::RETRY_AFTER, "1".parse().unwrap());
        let head = HeadFacts::read(503, &headers);
        let off = Context {
            unavailable_not_processed: false,
            ..EXTENSION
        };
        assert_eq!(refusal(503, &head, b"", off).class, Refused::MayHaveRun);
        // 429 names the client's own rate: still not processed.
        let head = HeadFacts::read(429, &headers);
        assert_eq!(
            refusal(429, &head, b"", off).class,
            Refused::NotProcessed {
                retry_after: Some(Duration::from_secs(1))
            }
        );
    }

    #[test]
    fn every_www_authenticate_field_is_read() {
        // One challenge per field: the Bearer one (with the metadata URL) is the second.
        let mut headers = HeaderMap::new();
        headers.append(
            http::header::WWW_AUTHENTICATE,
            r#"Basic realm="legacy""#.parse().unwrap(),
        );
        headers.append(
            http::header::WWW_AUTHENTICATE,
            r#"Bearer resource_metadata="https://rs.example/prm""#
                .parse()
                .unwrap(),
        );
        let challenge = AuthChallenge::from_response(401, &headers).unwrap();
        assert_eq!(challenge.scheme.as_deref(), Some("Bearer"));
        assert_eq!(
            challenge.resource_metadata.as_deref(),
            Some("https://rs.example/prm")
        );
        // A 403 whose scope challenge is in a later field is about credentials too.
        let mut headers = HeaderMap::new();
        headers.append(http::header::WWW_AUTHENTICATE, "Basic".parse().unwrap());
        headers.append(
            http::header::WWW_AUTHENTICATE,
            r#"Bearer error="insufficient_scope", scope="b""#.parse().unwrap(),
        );
        assert_eq!(
            AuthChallenge::from_response(403, &headers).and_then(|c| c.scope),
            Some("b".to_owned())
        );
        assert!(AuthChallenge::from_response(500, &headers).is_none());
    }

    #[test]
    fn a_refusal_of_the_credentials_is_unauthorized_with_its_challenge() {
        let mut headers = HeaderMap::new();
        headers.insert(
            http::header::WWW_AUTHENTICATE,
            r#"Bearer error="invalid_token""#.parse().unwrap(),
        );
        let r = refusal(401, &HeadFacts::read(401, &headers), b"", EXTENSION);
        assert_eq!(r.error.kind(), ErrorKind::Unauthorized);
        assert_eq!(
            r.error.auth_challenge().and_then(|c| c.error.as_deref()),
            Some("invalid_token")
        );
        // A plain 403 is an ordinary refusal; one asking for more scope is about credentials.
        let plain = refusal(
            403,
            &HeadFacts::read(403, &HeaderMap::new()),
            b"",
            EXTENSION,
        );
        assert_eq!(plain.error.kind(), ErrorKind::Protocol);
        headers.insert(
            http::header::WWW_AUTHENTICATE,
            r#"Bearer error="insufficient_scope", scope="a""#.parse().unwrap(),
        );
        let scope = refusal(403, &HeadFacts::read(403, &headers), b"", EXTENSION);
        assert_eq!(scope.error.kind(), ErrorKind::Unauthorized);
    }

    #[test]
    fn may_have_run_unless_proved_otherwise() {
        for status in [500, 501, 502, 503, 504, 303, 408, 409, 422, 418] {
            assert_eq!(class(status, b"", true), Refused::MayHaveRun, "{status}");
        }
        for status in [401, 403, 406, 413, 415, 429, 307] {
            assert_eq!(
                class(status, b"", true),
                Refused::NotProcessed { retry_after: None },
                "{status}"
            );
        }
        assert_eq!(class(405, b"", true), Refused::NotAllowed);
    }

    #[test]
    fn retry_after_is_read_clamped_and_carried() {
        let mut headers = HeaderMap::new();
        headers.insert(http::header::RETRY_AFTER, "2".parse().unwrap());
        let head = HeadFacts::read(503, &headers);
        let r = refusal(503, &head, b"", EXTENSION);
        assert_eq!(
            r.class,
            Refused::NotProcessed {
                retry_after: Some(Duration::from_secs(2))
            }
        );
        assert_eq!(r.error.retry_after(), Some(Duration::from_secs(2)));
        headers.insert(http::header::RETRY_AFTER, "99999999".parse().unwrap());
        assert_eq!(
            HeadFacts::read(503, &headers).retry_after,
            Some(MAX_RETRY_AFTER)
        );
        for odd in ["-1", "soon", "Wed, 21 Oct 2015 07:28:00 GMT", ""] {
            headers.insert(http::header::RETRY_AFTER, odd.parse().unwrap());
            assert_eq!(HeadFacts::read(503, &headers).retry_after, None, "{odd}");
        }
    }

    #[test]
    fn a_retry_after_that_is_not_delay_seconds_proves_nothing() {
        // RFC 9110 delay-seconds are ASCII digits alone: a sign or anything else makes the
        // header unreadable, and a 503 without a readable one may have run.
        for odd in ["+5", "+0", "5s", "5 5", "0x10"] {
            let mut headers = HeaderMap::new();
            headers.insert(http::header::RETRY_AFTER, odd.parse().unwrap());
            let head = HeadFacts::read(503, &headers);
            assert_eq!(head.retry_after, None, "{odd}");
            assert_eq!(
                refusal(503, &head, b"", EXTENSION).class,
                Refused::MayHaveRun,
                "{odd}"
            );
        }
        // Digits alone, however many, are a time to come back: one past what `u64` holds is
        // clamped like any other too long a wait.
        let mut headers = HeaderMap::new();
        headers.insert(
            http::header::RETRY_AFTER,
            "99999999999999999999999".parse().unwrap(),
        );
        assert_eq!(
            HeadFacts::read(503, &headers).retry_after,
            Some(MAX_RETRY_AFTER)
        );
    }

    #[test]
    fn the_error_is_the_servers_when_it_sent_one() {
        let r = refusal(400, &HeadFacts::default(), NO_SESSION, carried(false));
        assert_eq!(r.error.kind(), ErrorKind::Rpc);
        assert_eq!(r.error.rpc_error().map(|e| e.code), Some(-32000));
        let r = refusal(500, &HeadFacts::default(), b"<html>oops", EXTENSION);
        assert_eq!(r.error.kind(), ErrorKind::Protocol);
        assert!(r.error.to_string().contains("500"), "{}", r.error);
    }
}
