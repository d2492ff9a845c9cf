//! JSON-RPC 2.0 message encoding and decoding.
//!
//! Decoding never panics and never trusts shapes: anything that is not a well-formed
//! request, notification or response is reported as an error for the caller to log.

use bytes::Bytes;
use serde_json::{Map, Value};

use crate::error::RpcError;
use crate::ids::RequestId;

/// One decoded JSON-RPC message.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Message {
    /// A request from the server (it expects an answer).
    Request {
        id: RequestId,
        method: String,
        params: Option<Value>,
    },
    /// A notification from the server.
    Notification {
        method: String,
        params: Option<Value>,
    },
    /// A response to one of our requests. `id` is `None` for errors the server could not
    /// attribute (e.g. `"id": null` on a 400 body).
    Response {
        id: Option<RequestId>,
        result: Result<Value, RpcError>,
    },
}

/// Why a payload could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum DecodeError {
    /// Not JSON at all.
    Json(String),
    /// JSON, but not a JSON-RPC message.
    Shape(&'static str),
    /// A batch where the negotiated protocol version does not allow one.
    BatchNotAllowed,
    /// A batch of more than [`MAX_BATCH_LEN`] messages.
    BatchTooLong,
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DecodeError::Json(e) => write!(f, "invalid JSON: {e}"),
            DecodeError::Shape(s) => write!(f, "not a JSON-RPC message: {s}"),
            DecodeError::BatchNotAllowed => f.write_str("JSON-RPC batch not allowed"),
            DecodeError::BatchTooLong => {
                write!(f, "JSON-RPC batch of more than {MAX_BATCH_LEN} messages")
            }
        }
    }
}

/// A decoded payload: one message, or the elements of a batch (each decoded on its own).
#[derive(Debug)]
pub(crate) enum Decoded {
    One(Result<Message, DecodeError>),
    Batch(Vec<Result<Message, DecodeError>>),
}

impl IntoIterator for Decoded {
    type Item = Result<Message, DecodeError>;
    type IntoIter = DecodedIter;

    fn into_iter(self) -> DecodedIter {
        match self {
            Decoded::One(m) => DecodedIter::One(Some(m)),
            Decoded::Batch(v) => DecodedIter::Batch(v.into_iter()),
        }
    }
}

/// Iterates a [`Decoded`] without allocating for the single message, the common case.
pub(crate) enum DecodedIter {
    One(Option<Result<Message, DecodeError>>),
    Batch(std::vec::IntoIter<Result<Message, DecodeError>>),
}

impl Iterator for DecodedIter {
    type Item = Result<Message, DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        match self {
            DecodedIter::One(m) => m.take(),
            DecodedIter::Batch(v) => v.next(),
        }
    }
}

/// The longest string id a server's request may carry (the bound of session and event ids):
/// its answer echoes the id, and answers wait in a queue bounded by count, so an id of any
/// length would let a server make the client hold what it sends many times over.
const MAX_REQUEST_ID_LEN: usize = 1024;

/// The most messages a batch may carry; one of more is refused whole, as it is read. This
/// client sends no batch, so a server's holds only its own requests and notifications and
/// the answers to calls in flight: real ones carry a few. Ten thousand is far beyond them
/// and keeps a batch's decoded messages near a megabyte beyond its body, where a body of
/// zeros within the size bound made millions of them, gigabytes.
pub(crate) const MAX_BATCH_LEN: usize = 10_000;

/// Decodes a body or SSE `data` payload: one message, or a batch when `allow_batch`.
///
/// Each element of a batch is decoded on its own; malformed elements are returned as errors
/// next to the good ones so one bad message does not hide the others.
pub(crate) fn decode(payload: &[u8], allow_batch: bool) -> Result<Decoded, DecodeError> {
    // The common case, one object, is read straight into the members decoding looks at: no
    // map is built for the message itself and the members it does not name are skipped.
    // Whatever that reading refuses (a duplicate member, invalid JSON) is read again below,
    // as a `Value`, and decodes, or fails, as it would as a `Value` from the start. One
    // difference remains: a member not named is skipped however deep it nests, where a
    // `Value` stops at serde_json's 128 levels, so such a message decodes alone but not as a
    // batch's element. What is never read costs no more for being deep.
    if let Some(one) = decode_object(payload) {
        return Ok(Decoded::One(one));
    }
    if first_byte(payload) == Some(b'[') {
        return decode_batch(payload, allow_batch);
    }
    let value: Value = serde_json::from_slice(payload).map_err(json_error)?;
    Ok(Decoded::One(decode_value(value)))
}

/// The common case of [`decode`], one object, when the direct reading accepts it: what
/// `decode` would make of it. `None` for anything else (`decode` reads it then).
pub(crate) fn decode_object(payload: &[u8]) -> Option<Result<Message, DecodeError>> {
    if first_byte(payload) != Some(b'{') {
        return None;
    }
    serde_json::from_slice::<Envelope>(payload)
        .ok()
        .map(Envelope::decode)
}

fn first_byte(payload: &[u8]) -> Option<u8> {
    payload.iter().copied().find(|b| !b.is_ascii_whitespace())
}

fn json_error(e: serde_json::Error) -> DecodeError {
    DecodeError::Json(e.to_string())
}

/// A payload that is a JSON array: its elements read one at a time, so that an array refused
/// (where batches are not allowed, or past [`MAX_BATCH_LEN`]) is never held as a whole.
fn decode_batch(payload: &[u8], allow_batch: bool) -> Result<Decoded, DecodeError> {
    use serde::de::{DeserializeSeed as _, IgnoredAny};
    use serde::Deserialize as _;

    let mut reader = serde_json::Deserializer::from_slice(payload);
    if !allow_batch {
        // Skipped, not built: only whether it is JSON at all decides the error.
        IgnoredAny::deserialize(&mut reader)
            .and_then(|_| reader.end())
            .map_err(json_error)?;
        return Err(DecodeError::BatchNotAllowed);
    }
    let mut too_long = false;
    let read = BatchElements {
        too_long: &mut too_long,
    }
    .deserialize(&mut reader)
    .and_then(|items| reader.end().map(|()| items));
    match read {
        Err(_) if too_long => Err(DecodeError::BatchTooLong),
        Err(e) => Err(json_error(e)),
        Ok(items) if items.is_empty() => Err(DecodeError::Shape("empty batch")),
        Ok(items) => Ok(Decoded::Batch(items)),
    }
}

/// Reads a batch's elements, each decoded on its own as it is read, and stops at the one
/// past [`MAX_BATCH_LEN`], saying so in `too_long`.
struct BatchElements<'a> {
    too_long: &'a mut bool,
}

impl<'de> serde::de::DeserializeSeed<'de> for BatchElements<'_> {
    type Value = Vec<Result<Message, DecodeError>>;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> serde::de::Visitor<'de> for BatchElements<'_> {
    type Value = Vec<Result<Message, DecodeError>>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON-RPC batch")
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<Value>()? {
            if items.len() == MAX_BATCH_LEN {
                *self.too_long = true;
                return Err(serde::de::Error::custom("batch too long"));
            }
            items.push(decode_value(item));
        }
        Ok(items)
    }
}

/// Decodes one JSON value as a JSON-RPC message.
pub(crate) fn decode_value(value: Value) -> Result<Message, DecodeError> {
    let Value::Object(obj) = value else {
        return Err(DecodeError::Shape("not an object"));
    };
    Envelope::from_map(obj).decode()
}

/// The members of a message that decoding reads, each as sent: `Some(Value::Null)` for an
/// explicit `null`, `None` when absent (a response's `"result": null` is a result).
#[derive(serde::Deserialize)]
struct Envelope {
    #[serde(default, deserialize_with = "present")]
    jsonrpc: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    method: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    id: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    params: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    result: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    error: Option<Value>,
}

fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    serde::Deserialize::deserialize(d).map(Some)
}

impl Envelope {
    fn from_map(mut obj: Map<String, Value>) -> Self {
        Envelope {
            jsonrpc: obj.remove("jsonrpc"),
            method: obj.remove("method"),
            id: obj.remove("id"),
            params: obj.remove("params"),
            result: obj.remove("result"),
            error: obj.remove("error"),
        }
    }

    fn decode(self) -> Result<Message, DecodeError> {
        if self.jsonrpc.as_ref().and_then(Value::as_str) != Some("2.0") {
            return Err(DecodeError::Shape("missing jsonrpc: \"2.0\""));
        }
        let method = match self.method {
            Some(Value::String(m)) => Some(m),
            Some(_) => return Err(DecodeError::Shape("method is not a string")),
            None => None,
        };
        if let Some(method) = method {
            let params = self.params;
            if params
                .as_ref()
                .is_some_and(|p| !p.is_object() && !p.is_array())
            {
                return Err(DecodeError::Shape("params is not structured"));
            }
            return match self.id {
                None => Ok(Message::Notification { method, params }),
                Some(id) => {
                    let id =
                        RequestId::from_json(&id).ok_or(DecodeError::Shape("bad request id"))?;
                    if matches!(&id, RequestId::String(s) if s.len() > MAX_REQUEST_ID_LEN) {
                        return Err(DecodeError::Shape("request id too long"));
                    }
                    Ok(Message::Request { id, method, params })
                }
            };
        }
        let id = match self.id {
            Some(Value::Null) | None => None,
            Some(v) => Some(RequestId::from_json(&v).ok_or(DecodeError::Shape("bad response id"))?),
        };
        if let Some(result) = self.result {
            if self.error.is_some() {
                return Err(DecodeError::Shape("both result and error"));
            }
            if id.is_none() {
                return Err(DecodeError::Shape("result without id"));
            }
            return Ok(Message::Response {
                id,
                result: Ok(result),
            });
        }
        match self.error {
            Some(Value::Object(err)) => Ok(Message::Response {
                id,
                result: Err(rpc_error(err)),
            }),
            _ => Err(DecodeError::Shape("neither method, result nor error")),
        }
    }
}

fn rpc_error(mut err: Map<String, Value>) -> RpcError {
    // Lenient: a server that sends a malformed error object still gets its error reported.
    let code = err.get("code").and_then(Value::as_i64).unwrap_or(0);
    let mut message = match err.remove("message") {
        Some(Value::String(m)) => m,
        _ => String::new(),
    };
    cap_error_message(&mut message);
    RpcError {
        code,
        message,
        data: err.remove("data"),
    }
}

/// The most bytes kept of an error message a server sends.
pub(crate) const MAX_ERROR_MESSAGE: usize = 1024;

/// Cuts an error message a server sent to [`MAX_ERROR_MESSAGE`] bytes, wherever it came from
/// (a JSON-RPC error, a task's final status), so a hostile one stays small in logs and errors.
pub(crate) fn cap_error_message(message: &mut String) {
    truncate(message, MAX_ERROR_MESSAGE);
}

/// Truncates at a char boundary, so a hostile message stays small in logs and errors.
pub(crate) fn truncate(s: &mut String, max: usize) {
    if s.len() > max {
        let mut cut = max;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
    }
}

/// The wire shape of an outgoing message: serialized straight from borrowed parts, so the
/// params and results the caller holds are never copied to be sent.
#[derive(serde::Serialize)]
struct Outgoing<'a> {
    jsonrpc: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<WireId<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    method: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    params: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<WireError<'a>>,
}

struct WireId<'a>(&'a RequestId);

impl serde::Serialize for WireId<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            RequestId::Number(n) => s.serialize_i64(*n),
            RequestId::String(v) => s.serialize_str(v),
        }
    }
}

#[derive(serde::Serialize)]
struct WireError<'a> {
    code: i64,
    message: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    data: Option<&'a Value>,
}

const EMPTY: Outgoing<'static> = Outgoing {
    jsonrpc: "2.0",
    id: None,
    method: None,
    params: None,
    result: None,
    error: None,
};

/// Encodes a request.
pub(crate) fn encode_request(id: &RequestId, method: &str, params: Option<&Value>) -> Bytes {
    to_bytes(&Outgoing {
        id: Some(WireId(id)),
        method: Some(method),
        params,
        ..EMPTY
    })
}

/// Encodes a notification.
pub(crate) fn encode_notification(method: &str, params: Option<&Value>) -> Bytes {
    to_bytes(&Outgoing {
        method: Some(method),
        params,
        ..EMPTY
    })
}

/// Encodes a response to a server request.
pub(crate) fn encode_response(id: &RequestId, result: &Result<Value, RpcError>) -> Bytes {
    let (result, error) = match result {
        Ok(v) => (Some(v), None),
        Err(e) => (
            None,
            Some(WireError {
                code: e.code,
                message: &e.message,
                data: e.data.as_ref(),
            }),
        ),
    };
    to_bytes(&Outgoing {
        id: Some(WireId(id)),
        result,
        error,
        ..EMPTY
    })
}

fn to_bytes(message: &Outgoing<'_>) -> Bytes {
    // Serializing these shapes cannot fail: every map key is a string.
    Bytes::from(serde_json::to_vec(message).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The decoded messages as a list, for assertions.
    pub(super) fn decode_vec(
        payload: &[u8],
        allow_batch: bool,
    ) -> Result<Vec<Result<Message, DecodeError>>, DecodeError> {
        decode(payload, allow_batch).map(|d| d.into_iter().collect())
    }
    use serde_json::json;

    fn one(payload: &str) -> Result<Message, DecodeError> {
        decode_vec(payload.as_bytes(), false)?
            .into_iter()
            .next()
            .unwrap()
    }

    #[test]
    fn decodes_the_three_kinds() {
        assert_eq!(
            one(r#"{"jsonrpc":"2.0","id":7,"result":{"ok":true}}"#),
            Ok(Message::Response {
                id: Some(RequestId::Number(7)),
                result: Ok(json!({"ok": true}))
            })
        );
        assert_eq!(
            one(r#"{"jsonrpc":"2.0","id":"a","method":"ping"}"#),
            Ok(Message::Request {
                id: RequestId::String("a".into()),
                method: "ping".into(),
                params: None
            })
        );
        assert_eq!(
            one(r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"p":1}}"#),
            Ok(Message::Notification {
                method: "notifications/progress".into(),
                params: Some(json!({"p": 1}))
            })
        );
    }

    #[test]
    fn a_request_id_longer_than_the_bound_is_refused() {
        let request = |len: usize| {
            let id = "x".repeat(len);
            let text = format!(r#"{{"jsonrpc":"2.0","id":"{id}","method":"ping"}}"#);
            decode_value(serde_json::from_str(&text).unwrap())
        };
        assert!(matches!(
            request(MAX_REQUEST_ID_LEN),
            Ok(Message::Request { .. })
        ));
        assert_eq!(
            request(MAX_REQUEST_ID_LEN + 1),
            Err(DecodeError::Shape("request id too long"))
        );
    }

    #[test]
    fn decodes_errors_including_null_id() {
        let m = one(
            r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32001,"message":"Session not found"}}"#,
        )
        .unwrap();
        match m {
            Message::Response {
                id: None,
                result: Err(e),
            } => {
                assert_eq!(e.code, -32001);
                assert_eq!(e.message, "Session not found");
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn a_member_sent_twice_keeps_its_last_value() {
        let m = one(r#"{"jsonrpc":"2.0","id":1,"id":2,"result":{"a":1},"result":{"b":2}}"#);
        assert_eq!(
            m,
            Ok(Message::Response {
                id: Some(RequestId::Number(2)),
                result: Ok(json!({"b": 2})),
            })
        );
    }

    #[test]
    fn rejects_garbage_without_panicking() {
        for bad in [
            "",
            "nul",
            "[]",
            "42",
            r#"{"id":1,"result":1}"#,
            r#"{"jsonrpc":"2.0"}"#,
            r#"{"jsonrpc":"2.0","id":{},"result":1}"#,
            r#"{"jsonrpc":"2.0","id":1.5,"result":1}"#,
            r#"{"jsonrpc":"2.0","result":1}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":1,"error":{}}"#,
            r#"{"jsonrpc":"2.0","method":7}"#,
            r#"{"jsonrpc":"2.0","method":"x","params":3}"#,
        ] {
            assert!(one(bad).is_err(), "{bad:?} accepted");
        }
        let deep = "[".repeat(100_000);
        assert!(decode_vec(deep.as_bytes(), true).is_err());
    }

    #[test]
    fn batches_only_when_allowed() {
        let batch = r#"[{"jsonrpc":"2.0","id":1,"result":1},{"bad":true}]"#;
        assert_eq!(
            decode_vec(batch.as_bytes(), false),
            Err(DecodeError::BatchNotAllowed)
        );
        let msgs = decode_vec(batch.as_bytes(), true).unwrap();
        assert_eq!(msgs.len(), 2);
        assert!(msgs[0].is_ok());
        assert!(msgs[1].is_err());
    }

    #[test]
    fn a_deep_member_not_read_is_skipped_alone_but_not_in_a_batch() {
        let deep = format!("{}0{}", "[".repeat(200), "]".repeat(200));
        let message = format!(r#"{{"jsonrpc":"2.0","id":1,"result":{{}},"extra":{deep}}}"#);
        assert_eq!(
            one(&message),
            Ok(Message::Response {
                id: Some(RequestId::Number(1)),
                result: Ok(json!({})),
            })
        );
        // As a `Value`, as a batch's elements are read, it is past serde_json's depth limit.
        assert!(serde_json::from_str::<Value>(&message).is_err());
        assert!(matches!(
            decode_vec(format!("[{message}]").as_bytes(), true),
            Err(DecodeError::Json(_))
        ));
    }

    #[test]
    fn a_batch_longer_than_the_bound_is_refused_whole() {
        let batch = |len: usize| {
            let element = r#"{"jsonrpc":"2.0","method":"m"}"#;
            format!("[{}]", vec![element; len].join(","))
        };
        assert_eq!(
            decode_vec(batch(MAX_BATCH_LEN).as_bytes(), true).map(|v| v.len()),
            Ok(MAX_BATCH_LEN)
        );
        assert_eq!(
            decode_vec(batch(MAX_BATCH_LEN + 1).as_bytes(), true),
            Err(DecodeError::BatchTooLong)
        );
        // Where batches are not allowed, any array is refused as one, and garbage as garbage.
        assert_eq!(
            decode_vec(batch(MAX_BATCH_LEN + 1).as_bytes(), false),
            Err(DecodeError::BatchNotAllowed)
        );
        assert!(matches!(
            decode_vec(b"[1,", false),
            Err(DecodeError::Json(_))
        ));
        assert!(matches!(
            decode_vec(b"[1] x", true),
            Err(DecodeError::Json(_))
        ));
    }

    #[test]
    fn encoding_round_trips() {
        let id = RequestId::Number(3);
        let req = encode_request(&id, "tools/call", Some(&json!({"name": "echo"})));
        assert_eq!(
            serde_json::from_slice::<Value>(&req).unwrap(),
            json!({"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo"}})
        );
        let n = encode_notification("notifications/initialized", None);
        assert_eq!(
            serde_json::from_slice::<Value>(&n).unwrap(),
            json!({"jsonrpc":"2.0","method":"notifications/initialized"})
        );
        let r = encode_response(
            &RequestId::String("s".into()),
            &Err(RpcError {
                code: -1,
                message: "no".into(),
                data: None,
            }),
        );
        assert_eq!(
            serde_json::from_slice::<Value>(&r).unwrap(),
            json!({"jsonrpc":"2.0","id":"s","error":{"code":-1,"message":"no"}})
        );
    }

    /// Property tests of decoding: whatever a server sends, decoding returns
    /// a typed error or a message that keeps the decoder's promises, and never panics.
    mod props {
        use super::*;
        use proptest::prelude::*;

        /// Leaves that stress number handling: extremes, floats, values past `i64`.
        fn leaf() -> impl Strategy<Value = Value> {
            prop_oneof![
                Just(Value::Null),
                any::<bool>().prop_map(Value::from),
                any::<i64>().prop_map(Value::from),
                any::<u64>().prop_map(Value::from),
                any::<f64>().prop_map(Value::from),
                Just(json!(i64::MIN)),
                Just(json!(u64::MAX)),
                ".{0,12}".prop_map(Value::from),
            ]
        }

        /// Arbitrary JSON, nested a few levels deep.
        fn value() -> impl Strategy<Value = Value> {
            leaf().prop_recursive(4, 48, 6, |inner| {
                prop_oneof![
                    prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                    prop::collection::btree_map(".{0,6}", inner, 0..6)
                        .prop_map(|m| Value::Object(m.into_iter().collect())),
                ]
            })
        }

        /// Something shaped like a JSON-RPC message: each member absent, of the right type,
        /// or of a wrong one (wrong id types, a numeric method, scalar params, ...).
        fn message_like() -> impl Strategy<Value = Value> {
            let member = |right: BoxedStrategy<Value>| {
                prop_oneof![
                    2 => Just(None),
                    3 => right.prop_map(Some),
                    2 => value().prop_map(Some),
                ]
            };
            let id = prop_oneof![
                any::<i64>().prop_map(Value::from),
                ".{0,8}".prop_map(Value::from),
                Just(Value::Null),
            ]
            .boxed();
            let method = prop_oneof![Just(json!("ping")), ".{0,12}".prop_map(Value::from)].boxed();
            let params = prop_oneof![
                Just(json!({})),
                Just(json!([])),
                value().prop_map(|v| json!({ "v": v })),
            ]
            .boxed();
            let error = prop_oneof![
                (any::<i64>(), ".{0,20}").prop_map(|(c, m)| json!({"code": c, "message": m})),
                value().prop_map(|d| json!({"code": -1, "message": "x", "data": d})),
            ]
            .boxed();
            (
                member(Just(json!("2.0")).boxed()),
                member(id),
                member(method),
                member(params),
                member(value().boxed()),
                member(error),
            )
                .prop_map(|(jsonrpc, id, method, params, result, error)| {
                    let mut obj = Map::new();
                    for (k, v) in [
                        ("jsonrpc", jsonrpc),
                        ("id", id),
                        ("method", method),
                        ("params", params),
                        ("result", result),
                        ("error", error),
                    ] {
                        if let Some(v) = v {
                            obj.insert(k.into(), v);
                        }
                    }
                    Value::Object(obj)
                })
        }

        /// What every decoded message promises its consumer.
        fn check_well_formed(m: &Message) -> Result<(), TestCaseError> {
            match m {
                Message::Request { params, .. } | Message::Notification { params, .. } => {
                    prop_assert!(params
                        .as_ref()
                        .is_none_or(|p| p.is_object() || p.is_array()));
                }
                Message::Response { id, result } => match result {
                    Ok(_) => prop_assert!(id.is_some(), "a result without an id"),
                    Err(e) => prop_assert!(e.message.len() <= 1024, "error message not bounded"),
                },
            }
            Ok(())
        }

        /// serde_json (without `float_roundtrip`) may parse a printed float back one ulp off,
        /// so messages carrying floats are exempt from exact round-trip comparisons.
        fn has_float(m: &Message) -> bool {
            fn any_float(v: &Value) -> bool {
                match v {
                    Value::Number(n) => n.is_f64(),
                    Value::Array(a) => a.iter().any(any_float),
                    Value::Object(o) => o.values().any(any_float),
                    _ => false,
                }
            }
            let inner = match m {
                Message::Request { params, .. } | Message::Notification { params, .. } => {
                    params.as_ref()
                }
                Message::Response { result: Ok(v), .. } => Some(v),
                Message::Response { result: Err(e), .. } => e.data.as_ref(),
            };
            inner.is_some_and(any_float)
        }

        /// Encodes a decoded message again with our own encoders.
        fn encode(m: &Message) -> Option<Bytes> {
            Some(match m {
                Message::Request { id, method, params } => {
                    encode_request(id, method, params.as_ref())
                }
                Message::Notification { method, params } => {
                    encode_notification(method, params.as_ref())
                }
                Message::Response { id, result } => encode_response(id.as_ref()?, result),
            })
        }

        /// Checks a decode result: errors are typed, messages well formed and stable under
        /// encode-then-decode.
        fn check_decoded(
            decoded: Result<Vec<Result<Message, DecodeError>>, DecodeError>,
            allow_batch: bool,
        ) -> Result<(), TestCaseError> {
            let Ok(messages) = decoded else {
                return Ok(());
            };
            prop_assert!(!messages.is_empty());
            prop_assert!(allow_batch || messages.len() == 1);
            for m in messages.iter().flatten() {
                check_well_formed(m)?;
                if has_float(m) {
                    continue;
                }
                if let Some(bytes) = encode(m) {
                    let again = decode_vec(&bytes, false).map(|mut v| v.remove(0));
                    prop_assert_eq!(again, Ok(Ok(m.clone())));
                }
            }
            Ok(())
        }

        proptest! {
            #[test]
            fn arbitrary_bytes(bytes in prop::collection::vec(any::<u8>(), 0..256), batch: bool) {
                check_decoded(decode_vec(&bytes, batch), batch)?;
            }

            #[test]
            fn arbitrary_json(v in value(), batch: bool) {
                let bytes = serde_json::to_vec(&v).unwrap();
                check_decoded(decode_vec(&bytes, batch), batch)?;
            }

            #[test]
            fn message_shaped_json(v in message_like(), batch: bool) {
                let bytes = serde_json::to_vec(&v).unwrap();
                check_decoded(decode_vec(&bytes, batch), batch)?;
            }

            /// An object read straight into its members decodes as the same object read as
            /// a `Value` first (the way every payload was read before).
            #[test]
            fn direct_reading_agrees_with_the_value_reading(v in message_like(), pad in "[ \t\r\n]{0,2}") {
                let bytes = format!("{pad}{}{pad}", serde_json::to_string(&v).unwrap());
                let direct = match decode(bytes.as_bytes(), false) {
                    Ok(Decoded::One(one)) => one,
                    other => return Err(TestCaseError::fail(format!("{other:?}"))),
                };
                let as_value: Value = serde_json::from_str(&bytes).unwrap();
                prop_assert_eq!(direct, decode_value(as_value));
            }

            #[test]
            fn batches_of_message_shaped_json(
                items in prop::collection::vec(message_like(), 0..6),
                batch: bool,
            ) {
                let bytes = serde_json::to_vec(&Value::Array(items.clone())).unwrap();
                let decoded = decode_vec(&bytes, batch);
                if !batch {
                    prop_assert_eq!(decoded, Err(DecodeError::BatchNotAllowed));
                } else if items.is_empty() {
                    prop_assert_eq!(decoded, Err(DecodeError::Shape("empty batch")));
                } else {
                    // One element's verdict does not depend on its neighbours. (Compared with
                    // the elements as parsed back, not as generated: see `has_float`.)
                    let Ok(Value::Array(parsed)) = serde_json::from_slice::<Value>(&bytes) else {
                        return Err(TestCaseError::fail("a batch did not parse back"));
                    };
                    let each: Vec<_> = parsed.into_iter().map(decode_value).collect();
                    prop_assert_eq!(decoded.clone(), Ok(each));
                    check_decoded(decoded, batch)?;
                }
            }

            #[test]
            fn numbers_of_any_size_as_ids(
                number in "-?[0-9]{1,40}(\\.[0-9]{1,5})?([eE][+-]?[0-9]{1,4})?",
                response: bool,
            ) {
                let text = if response {
                    format!(r#"{{"jsonrpc":"2.0","id":{number},"result":{number}}}"#)
                } else {
                    format!(r#"{{"jsonrpc":"2.0","id":{number},"method":"m"}}"#)
                };
                let decoded = decode_vec(text.as_bytes(), false);
                check_decoded(decoded.clone(), false)?;
                // An id is accepted exactly when it is a JSON integer that fits `i64`.
                let fits = serde_json::from_str::<Value>(&number)
                    .ok()
                    .is_some_and(|v| v.as_i64().is_some());
                let accepted = matches!(decoded, Ok(ref v) if v[0].is_ok());
                prop_assert_eq!(accepted, fits);
            }

            #[test]
            fn deep_nesting(depth in 0usize..600, object: bool, at_params: bool) {
                let (open, close) = if object { (r#"{"a":"#, "}") } else { ("[", "]") };
                let nested = format!("{}0{}", open.repeat(depth), close.repeat(depth));
                let member = if at_params { "params" } else { "id" };
                let text = format!(r#"{{"jsonrpc":"2.0","method":"m","{member}":{nested}}}"#);
                let decoded = decode_vec(text.as_bytes(), false);
                check_decoded(decoded.clone(), false)?;
                if depth >= 128 {
                    // serde_json's recursion limit: a typed error, not a stack overflow.
                    prop_assert!(matches!(decoded, Err(DecodeError::Json(_))));
                }
            }

            #[test]
            fn what_we_encode_decodes_to_itself(
                number: i64,
                string in ".{0,16}",
                use_string: bool,
                method in ".{0,16}",
                params in prop::option::of(prop_oneof![
                    prop::collection::vec(any::<i64>(), 0..4).prop_map(|v| json!(v)),
                    (".{0,6}", any::<i64>()).prop_map(|(k, v)| json!({ k: v })),
                ]),
                code: i64,
                message in ".{0,40}",
                failed: bool,
            ) {
                let id = if use_string { RequestId::String(string) } else { RequestId::Number(number) };
                let request = Message::Request { id: id.clone(), method: method.clone(), params: params.clone() };
                let notification = Message::Notification { method, params: params.clone() };
                let result = if failed {
                    Err(RpcError { code, message, data: params })
                } else {
                    Ok(params.unwrap_or(Value::Null))
                };
                let response = Message::Response { id: Some(id), result };
                for m in [request, notification, response] {
                    let bytes = encode(&m).unwrap();
                    prop_assert_eq!(decode_vec(&bytes, false), Ok(vec![Ok(m)]));
                }
            }
        }
    }
}
