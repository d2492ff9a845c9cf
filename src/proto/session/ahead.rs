//! Bodies decoded ahead: a response body read by the caller before the session sees it, so
//! that whoever drives the session from behind a lock holds it only to apply what the body
//! says, never to parse it. Two inputs, each exactly what the session would have read from the
//! same bytes ([`Session::handle_data`] then [`Session::handle_end`]):
//!
//! - a whole JSON body and the one message it decodes to ([`Session::handle_json_body`]);
//! - the events an SSE body's chunks complete, each with its data decoded, read by an
//!   [`SseAhead`] configured like the session's own decoder ([`Session::handle_events`]),
//!   and, when an event grows past the bound, the same refusal ([`Session::handle_too_large`]).
//!
//! Only success bodies of those two types are read ahead; a refusal's body, or one of
//! another type, is handed over as it comes.

#[cfg(doc)]
use super::Session;
use crate::error::{Error, ErrorKind};
use crate::proto::classify::{content_type, ContentType};
use crate::proto::jsonrpc::{self, DecodeError, Message};
use crate::sse::{SseDecoder, SseError, SseEvent};

/// The format of a success body a driver may decode before handing it to the session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum BodyFormat {
    /// A JSON body: gather it whole, then [`DecodedJson::decode`] and
    /// [`Session::handle_json_body`].
    Json,
    /// An SSE body: feed its chunks to an [`SseAhead`] and hand each chunk's events to
    /// [`Session::handle_events`].
    Sse,
}

/// Which body of a response with `status` and `headers` a driver may decode ahead: only a
/// success (2xx) of JSON or SSE; every other body goes in as it comes, by
/// [`Session::handle_data`].
pub fn read_ahead(status: u16, headers: &http::HeaderMap) -> Option<BodyFormat> {
    if !(200..300).contains(&status) {
        return None;
    }
    match content_type(headers) {
        ContentType::Json => Some(BodyFormat::Json),
        ContentType::Sse => Some(BodyFormat::Sse),
        ContentType::Other => None,
    }
}

/// A whole JSON body's one message, decoded ahead.
#[derive(Debug)]
pub struct DecodedJson(pub(super) Result<Message, DecodeError>);

impl DecodedJson {
    /// What a whole JSON body decodes to, when it is one JSON object; `None` when the session
    /// is to read it itself (a batch, say: hand it over with [`Session::handle_data`]).
    pub fn decode(body: &[u8]) -> Option<DecodedJson> {
        jsonrpc::decode_object(body).map(DecodedJson)
    }
}

/// One SSE event read ahead by an [`SseAhead`], with what its `data` decodes to when it is one
/// JSON object.
#[derive(Debug)]
pub struct DecodedEvent {
    event: SseEvent,
    message: Option<Result<Message, DecodeError>>,
}

impl DecodedEvent {
    fn new(event: SseEvent) -> Self {
        DecodedEvent {
            message: jsonrpc::decode_object(event.data.as_bytes()),
            event,
        }
    }

    pub(super) fn split(self) -> (SseEvent, Option<Result<Message, DecodeError>>) {
        (self.event, self.message)
    }
}

/// Reads an SSE body ahead, chunk by chunk, as the session's own decoder for that exchange
/// would: the same bound on an event's size, the same events.
#[derive(Debug)]
pub struct SseAhead {
    decoder: SseDecoder,
}

impl SseAhead {
    /// A reader whose events may hold `max_event_size` bytes
    /// ([`SessionConfig::max_event_size`](crate::proto::SessionConfig)).
    pub fn new(max_event_size: usize) -> Self {
        SseAhead {
            decoder: SseDecoder::new(max_event_size),
        }
    }

    /// The events `chunk` completes, decoded, into `out`; an error once an event grows past
    /// the bound (the events completed before it are in `out`, and the body is to be
    /// abandoned).
    pub fn feed(&mut self, chunk: &[u8], out: &mut Vec<DecodedEvent>) -> Result<(), Error> {
        let mut events = Vec::new();
        let fed = self.decoder.feed(chunk, &mut events);
        out.extend(events.into_iter().map(DecodedEvent::new));
        fed.map_err(|SseError::TooLarge { max }| {
            Error::new(
                ErrorKind::TooLarge,
                format!("SSE event larger than {max} bytes"),
            )
        })
    }

    /// What the end of the body adds (a trailing `retry`), into `out`.
    pub fn finish(&mut self, out: &mut Vec<DecodedEvent>) {
        let mut events = Vec::new();
        self.decoder.finish(&mut events);
        out.extend(events.into_iter().map(DecodedEvent::new));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::classify::content_type as content_type_of;
    use crate::proto::config::{Era, SessionConfig};
    use crate::proto::Session;
    use crate::proto::{CallId, CallRequest, HttpId, Transmit};
    use http::{HeaderMap, HeaderValue};
    use serde_json::{json, Value};
    use std::time::{Duration, Instant};

    type Deliver = fn(&mut Session, HttpId, ContentType, &[u8], Instant);
    /// The content type and body answering a call, from the call's JSON-RPC id.
    type Answer = fn(&Value) -> (&'static str, Vec<u8>);

    /// Body bytes as they come, then the end.
    fn streamed(s: &mut Session, http: HttpId, _: ContentType, body: &[u8], now: Instant) {
        s.handle_data(http, body, now);
        s.handle_end(http, now);
    }

    /// The body decoded beforehand, as the client's exchanges hand it over: a JSON body
    /// whole, an SSE body in chunks of `AHEAD_CHUNK` bytes (so events span chunks).
    fn decoded_ahead(s: &mut Session, http: HttpId, kind: ContentType, body: &[u8], now: Instant) {
        const AHEAD_CHUNK: usize = 7;
        match kind {
            ContentType::Json => match DecodedJson::decode(body) {
                Some(decoded) => s.handle_json_body(http, body, decoded, now),
                None => streamed(s, http, kind, body, now),
            },
            ContentType::Sse => {
                let mut reader = SseAhead::new(4096);
                for chunk in body.chunks(AHEAD_CHUNK) {
                    let mut events = Vec::new();
                    let fed = reader.feed(chunk, &mut events);
                    s.handle_events(http, events, now);
                    if let Err(error) = fed {
                        return s.handle_too_large(http, error, now);
                    }
                }
                let mut tail = Vec::new();
                reader.finish(&mut tail);
                s.handle_events(http, tail, now);
                s.handle_end(http, now);
            }
            ContentType::Other => streamed(s, http, kind, body, now),
        }
    }

    fn head(content_type: &'static str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("content-type", HeaderValue::from_static(content_type));
        h.insert("mcp-session-id", HeaderValue::from_static("s-1"));
        h
    }

    /// A session through its handshake, then one call answered with `status` and what
    /// `answer` makes of the call's JSON-RPC id, delivered by `deliver`: everything the
    /// session did after the answer, as text.
    fn answer_call(deliver: Deliver, status: u16, answer: Answer) -> String {
        #[allow(clippy::disallowed_methods)] // the test's origin of time
        let t0 = Instant::now();
        let config = SessionConfig::default()
            .with_era(Era::Legacy)
            .with_open_listen_stream(false)
            .with_max_body_size(4096)
            .with_max_event_size(4096);
        let mut s = Session::new(config, t0);
        s.connect(t0);
        let mut log = String::new();
        for step in 0..40 {
            let now = t0 + Duration::from_millis(step);
            if step == 1 {
                s.submit(CallId::next(), CallRequest::new("tools/call", None), now);
            }
            while let Some(t) = s.poll_transmit() {
                let Transmit::Send(req) = t else {
                    log.push_str(&format!("{step}: {t:?}\n"));
                    continue;
                };
                let body: Value =
                    serde_json::from_slice(req.body.as_deref().unwrap_or(b"{}")).unwrap();
                let id = &body["id"];
                match body["method"].as_str() {
                    Some("initialize") => {
                        let init = json!({"jsonrpc": "2.0", "id": id, "result": {
                            "protocolVersion": "2025-06-18", "capabilities": {},
                            "serverInfo": {"name": "t", "version": "1"}}});
                        s.handle_head(req.id, 200, &head("application/json"), now);
                        let init = serde_json::to_vec(&init).unwrap();
                        streamed(&mut s, req.id, ContentType::Json, &init, now);
                    }
                    Some("tools/call") => {
                        let (content_type, body) = answer(id);
                        let head = head(content_type);
                        s.handle_head(req.id, status, &head, now);
                        deliver(&mut s, req.id, content_type_of(&head), &body, now);
                        log.push_str(&format!("{step}: answered\n"));
                    }
                    _ => {
                        if !log.is_empty() {
                            log.push_str(&format!("{step}: {:?} {}\n", req.method, body));
                        }
                        s.handle_head(req.id, 202, &HeaderMap::new(), now);
                        s.handle_end(req.id, now);
                    }
                }
            }
            while let Some(o) = s.poll_output() {
                if !log.is_empty() {
                    log.push_str(&format!("{step}: {o:?}\n"));
                }
            }
            if let Some(at) = s.poll_timeout().filter(|at| *at <= now) {
                s.handle_timeout(at);
            }
        }
        assert!(log.contains("answered"), "the call was never sent");
        numbered_calls(&log)
    }

    /// `log` with each call id numbered in order of first appearance: ids are unique in the
    /// process, so two runs name the same calls differently.
    fn numbered_calls(log: &str) -> String {
        let mut seen: Vec<&str> = Vec::new();
        let mut out = String::new();
        let mut rest = log;
        while let Some(at) = rest.find("CallId(") {
            let (before, from) = rest.split_at(at);
            let end = from.find(')').map_or(from.len(), |e| e + 1);
            let id = &from[..end];
            let n = seen.iter().position(|s| *s == id).unwrap_or_else(|| {
                seen.push(id);
                seen.len() - 1
            });
            out.push_str(before);
            out.push_str(&format!("CallId(#{n})"));
            rest = &from[end..];
        }
        out.push_str(rest);
        out
    }

    const JSON: &str = "application/json";
    const SSE: &str = "text/event-stream";

    fn json(v: Value) -> Vec<u8> {
        serde_json::to_vec(&v).unwrap()
    }

    fn sse(events: &[String]) -> Vec<u8> {
        events.concat().into_bytes()
    }

    fn data(id: &str, v: Value) -> String {
        format!("id: {id}\ndata: {v}\n\n")
    }

    #[test]
    fn a_body_decoded_ahead_is_read_as_the_same_body_streamed() {
        let answers: [(u16, Answer); 14] = [
            (200, |id| {
                (
                    JSON,
                    json(json!({"jsonrpc": "2.0", "id": id, "result": {"ok": 1}})),
                )
            }),
            (200, |id| {
                (
                    JSON,
                    json(
                        json!({"jsonrpc": "2.0", "id": id, "error": {"code": -1, "message": "no"}}),
                    ),
                )
            }),
            (200, |_| {
                (JSON, br#"{"jsonrpc":"2.0","id":999,"result":{}}"#.to_vec())
            }),
            (200, |_| {
                (
                    JSON,
                    br#"{"jsonrpc":"2.0","method":"notifications/message","params":{}}"#.to_vec(),
                )
            }),
            (404, |id| {
                (
                    JSON,
                    json(
                        json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32001, "message": "gone"}}),
                    ),
                )
            }),
            (200, |id| {
                (
                    JSON,
                    json(json!({"jsonrpc": "2.0", "id": id, "result": {"pad": "x".repeat(5000)}})),
                )
            }),
            (200, |id| {
                (
                    SSE,
                    sse(&[data(
                        "e1",
                        json!({"jsonrpc": "2.0", "id": id, "result": {"ok": 1}}),
                    )]),
                )
            }),
            (200, |id| {
                (
                    SSE,
                    sse(&[
                        "id: p\ndata:\n\n".into(),
                        data(
                            "e1",
                            json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": 1, "progress": 1}}),
                        ),
                        data("e2", json!({"jsonrpc": "2.0", "id": id, "result": {}})),
                    ]),
                )
            }),
            (200, |_| {
                (SSE, sse(&["id: p\ndata:\n\n".into(), "retry: 5\n".into()]))
            }),
            (200, |_| {
                (
                    SSE,
                    sse(&[
                        "id: p\ndata:\n\n".into(),
                        data("e1", json!({"jsonrpc": "2.0", "id": 999, "result": {}})),
                    ]),
                )
            }),
            (200, |id| {
                (
                    SSE,
                    format!(
                        "\u{feff}data: {}\r\n\r\n",
                        json!({"jsonrpc": "2.0", "id": id, "result": {}})
                    )
                    .into_bytes(),
                )
            }),
            (200, |_| {
                (
                    SSE,
                    sse(&["data: not json\n\n".into(), "data: [1]\n\n".into()]),
                )
            }),
            (200, |id| {
                (
                    SSE,
                    sse(&[data(
                        "e1",
                        json!({"jsonrpc": "2.0", "id": id, "result": {"pad": "x".repeat(5000)}}),
                    )]),
                )
            }),
            (200, |_| {
                (
                    SSE,
                    sse(&[
                        "id: p\ndata:\n\n".into(),
                        "data: {\"jsonrpc\": \"2.0\"".into(),
                    ]),
                )
            }),
        ];
        for (status, answer) in answers {
            let streamed = answer_call(streamed, status, answer);
            let ahead = answer_call(decoded_ahead, status, answer);
            assert_eq!(ahead, streamed);
        }
    }
}
