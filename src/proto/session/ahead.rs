//! Bodies decoded ahead: a response body that arrived whole with its head, parsed by the
//! caller before the session sees it, so that whoever drives the session from behind a lock
//! holds it only to apply what the body says. Each input here is exactly the body streamed
//! ([`Session::handle_data`] then [`Session::handle_end`]) without parsing it again, and falls
//! back to exactly that whenever the session would have read the body differently.

use std::time::Instant;

use tracing::debug;

use super::exchanges::Body;
use super::Session;
use crate::proto::classify::ContentType;
use crate::proto::jsonrpc::{self, DecodeError, Decoded, Message};
use crate::proto::HttpId;
use crate::sse::{SseDecoder, SseEvent};

/// A whole response body, decoded as the session would read it.
#[derive(Debug)]
pub(crate) enum DecodedBody {
    /// A JSON body holding one object, and what that object is.
    Json(Result<Message, DecodeError>),
    /// An SSE body.
    Sse(SseBody),
}

impl DecodedBody {
    /// Decodes `body`, a whole response body of `content_type`; `None` when there is
    /// nothing to do ahead (another type, a JSON body that is not one object the direct
    /// reading takes): the session reads it as it comes then.
    pub(crate) fn decode(content_type: ContentType, body: &[u8]) -> Option<DecodedBody> {
        match content_type {
            ContentType::Json => jsonrpc::decode_object(body).map(DecodedBody::Json),
            ContentType::Sse => SseBody::decode(body).map(DecodedBody::Sse),
            ContentType::Other => None,
        }
    }
}

/// One SSE event with what its `data` decodes to when it is one JSON object
/// ([`jsonrpc::decode_object`]); `None` when the session is to decode it itself.
#[derive(Debug)]
pub(crate) struct DecodedEvent {
    event: SseEvent,
    message: Option<Result<Message, DecodeError>>,
}

impl DecodedEvent {
    fn split(self) -> (SseEvent, Option<Result<Message, DecodeError>>) {
        (self.event, self.message)
    }
}

/// A whole SSE body, parsed as a fresh stream: the events its bytes complete, then what the
/// end of the stream adds (a trailing `retry`).
#[derive(Debug)]
pub(crate) struct SseBody {
    events: Vec<DecodedEvent>,
    tail: Vec<DecodedEvent>,
}

impl SseBody {
    /// Parses `body` as a whole stream and decodes each event's data. `None` if a stream
    /// could not be read this way (an event larger than `body` may hold cannot happen; the
    /// decoder's refusal is left to the session's own decoder).
    pub(crate) fn decode(body: &[u8]) -> Option<SseBody> {
        // The body bounds every event in it: the session's own bound is checked on arrival.
        let mut decoder = SseDecoder::new(usize::MAX);
        let mut events = Vec::new();
        decoder.feed(body, &mut events).ok()?;
        let mut tail = Vec::new();
        decoder.finish(&mut tail);
        let with_messages = |events: Vec<SseEvent>| -> Vec<DecodedEvent> {
            events
                .into_iter()
                .map(|event| DecodedEvent {
                    message: jsonrpc::decode_object(event.data.as_bytes()),
                    event,
                })
                .collect()
        };
        Some(SseBody {
            events: with_messages(events),
            tail: with_messages(tail),
        })
    }
}

impl Session {
    /// The whole body of a response, ended, and what [`DecodedBody::decode`] made of it:
    /// the same as [`Session::handle_data`] with `body` then [`Session::handle_end`], without
    /// reading it again. When the session would have read the body another way (it is not
    /// the exchange's body type, something of it was read already, it is over a size bound),
    /// it is exactly that.
    pub(crate) fn handle_decoded_body(
        &mut self,
        http: HttpId,
        body: &[u8],
        decoded: DecodedBody,
        now: Instant,
    ) {
        match decoded {
            DecodedBody::Json(message) => self.json_body(http, body, message, now),
            DecodedBody::Sse(events) => self.sse_body(http, body, events, now),
        }
    }

    /// A JSON body with nothing read yet and within the size bound: its one message.
    fn json_body(
        &mut self,
        http: HttpId,
        body: &[u8],
        message: Result<Message, DecodeError>,
        now: Instant,
    ) {
        let fits = body.len() <= self.config.max_body_size;
        let whole = self
            .exchanges
            .get_mut(http)
            .filter(|ex| fits && matches!(&ex.body, Body::Json(buf) if buf.is_empty()));
        let Some(ex) = whole else {
            return self.streamed(http, body, now);
        };
        ex.ended = true;
        self.on_decoded(http, Decoded::One(message), now);
        if let Some(ex) = self.remove_current(http) {
            self.json_ended(ex.kind, true, now);
        }
    }

    /// An SSE body with nothing read yet and within the event size bound (so the session's
    /// decoder would not have refused it): its events, then the end of the stream.
    fn sse_body(&mut self, http: HttpId, body: &[u8], decoded: SseBody, now: Instant) {
        let fits = body.len() <= self.config.max_event_size;
        let fresh = self
            .exchanges
            .get(http)
            .is_some_and(|ex| matches!(&ex.body, Body::Sse(decoder) if decoder.is_fresh()));
        if !(fits && fresh) {
            return self.streamed(http, body, now);
        }
        // As `handle_data`: the events the bytes complete, the exchange still open.
        self.on_events_with(
            http,
            decoded.events.into_iter().map(DecodedEvent::split),
            now,
        );
        // As `handle_end`.
        let Some(ex) = self.exchanges.get_mut(http) else {
            return;
        };
        ex.ended = true;
        self.on_events_with(http, decoded.tail.into_iter().map(DecodedEvent::split), now);
        if let Some(ex) = self.remove_current(http) {
            self.stream_ended(ex.kind, ex.progress, true, now);
        }
    }

    fn streamed(&mut self, http: HttpId, body: &[u8], now: Instant) {
        debug!(http = http.0, "a body decoded ahead is read as it came");
        self.handle_data(http, body, now);
        self.handle_end(http, now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::classify::content_type as content_type_of;
    use crate::proto::config::{Era, SessionConfig};
    use crate::proto::{CallRequest, Transmit};
    use http::{HeaderMap, HeaderValue};
    use serde_json::{json, Value};
    use std::time::Duration;

    type Deliver = fn(&mut Session, HttpId, ContentType, &[u8], Instant);
    /// The content type and body answering a call, from the call's JSON-RPC id.
    type Answer = fn(&Value) -> (&'static str, Vec<u8>);

    /// Body bytes as they come, then the end.
    fn streamed(s: &mut Session, http: HttpId, _: ContentType, body: &[u8], now: Instant) {
        s.handle_data(http, body, now);
        s.handle_end(http, now);
    }

    /// The whole body decoded beforehand, as the client's exchanges hand it over.
    fn decoded_ahead(s: &mut Session, http: HttpId, kind: ContentType, body: &[u8], now: Instant) {
        match DecodedBody::decode(kind, body) {
            Some(decoded) => s.handle_decoded_body(http, body, decoded, now),
            None => streamed(s, http, kind, body, now),
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
                s.submit(CallRequest::new("tools/call", None), now);
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
        log
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
