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
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DecodeError::Json(e) => write!(f, "invalid JSON: {e}"),
            DecodeError::Shape(s) => write!(f, "not a JSON-RPC message: {s}"),
            DecodeError::BatchNotAllowed => f.write_str("JSON-RPC batch not allowed"),
        }
    }
}

/// Decodes a body or SSE `data` payload: one message, or a batch when `allow_batch`.
///
/// Each element of a batch is decoded on its own; malformed elements are returned as errors
/// next to the good ones so one bad message does not hide the others.
pub(crate) fn decode(
    payload: &[u8],
    allow_batch: bool,
) -> Result<Vec<Result<Message, DecodeError>>, DecodeError> {
    let value: Value =
        serde_json::from_slice(payload).map_err(|e| DecodeError::Json(e.to_string()))?;
    match value {
        Value::Array(items) => {
            if !allow_batch {
                return Err(DecodeError::BatchNotAllowed);
            }
            if items.is_empty() {
                return Err(DecodeError::Shape("empty batch"));
            }
            Ok(items.into_iter().map(decode_value).collect())
        }
        other => Ok(vec![decode_value(other)]),
    }
}

/// Decodes one JSON value as a JSON-RPC message.
pub(crate) fn decode_value(value: Value) -> Result<Message, DecodeError> {
    let Value::Object(mut obj) = value else {
        return Err(DecodeError::Shape("not an object"));
    };
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(DecodeError::Shape("missing jsonrpc: \"2.0\""));
    }
    let method = match obj.remove("method") {
        Some(Value::String(m)) => Some(m),
        Some(_) => return Err(DecodeError::Shape("method is not a string")),
        None => None,
    };
    let id = obj.remove("id");
    if let Some(method) = method {
        let params = obj.remove("params");
        if params
            .as_ref()
            .is_some_and(|p| !p.is_object() && !p.is_array())
        {
            return Err(DecodeError::Shape("params is not structured"));
        }
        return match id {
            None => Ok(Message::Notification { method, params }),
            Some(id) => {
                let id = RequestId::from_json(&id).ok_or(DecodeError::Shape("bad request id"))?;
                Ok(Message::Request { id, method, params })
            }
        };
    }
    let id = match id {
        Some(Value::Null) | None => None,
        Some(v) => Some(RequestId::from_json(&v).ok_or(DecodeError::Shape("bad response id"))?),
    };
    if let Some(result) = obj.remove("result") {
        if obj.contains_key("error") {
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
    match obj.remove("error") {
        Some(Value::Object(err)) => Ok(Message::Response {
            id,
            result: Err(rpc_error(err)),
        }),
        _ => Err(DecodeError::Shape("neither method, result nor error")),
    }
}

fn rpc_error(mut err: Map<String, Value>) -> RpcError {
    // Lenient: a server that sends a malformed error object still gets its error reported.
    let code = err.get("code").and_then(Value::as_i64).unwrap_or(0);
    let mut message = match err.remove("message") {
        Some(Value::String(m)) => m,
        _ => String::new(),
    };
    truncate(&mut message, 1024);
    RpcError {
        code,
        message,
        data: err.remove("data"),
    }
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

/// Encodes a request.
pub(crate) fn encode_request(id: &RequestId, method: &str, params: Option<&Value>) -> Bytes {
    let mut obj = Map::new();
    obj.insert("jsonrpc".into(), "2.0".into());
    obj.insert("id".into(), id.to_json());
    obj.insert("method".into(), method.into());
    if let Some(p) = params {
        obj.insert("params".into(), p.clone());
    }
    to_bytes(obj)
}

/// Encodes a notification.
pub(crate) fn encode_notification(method: &str, params: Option<&Value>) -> Bytes {
    let mut obj = Map::new();
    obj.insert("jsonrpc".into(), "2.0".into());
    obj.insert("method".into(), method.into());
    if let Some(p) = params {
        obj.insert("params".into(), p.clone());
    }
    to_bytes(obj)
}

/// Encodes a response to a server request.
pub(crate) fn encode_response(id: &RequestId, result: &Result<Value, RpcError>) -> Bytes {
    let mut obj = Map::new();
    obj.insert("jsonrpc".into(), "2.0".into());
    obj.insert("id".into(), id.to_json());
    match result {
        Ok(v) => {
            obj.insert("result".into(), v.clone());
        }
        Err(e) => {
            let mut err = Map::new();
            err.insert("code".into(), e.code.into());
            err.insert("message".into(), e.message.clone().into());
            if let Some(d) = &e.data {
                err.insert("data".into(), d.clone());
            }
            obj.insert("error".into(), Value::Object(err));
        }
    }
    to_bytes(obj)
}

fn to_bytes(obj: Map<String, Value>) -> Bytes {
    // Serializing a `Value` cannot fail: all map keys are strings.
    Bytes::from(serde_json::to_vec(&Value::Object(obj)).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn one(payload: &str) -> Result<Message, DecodeError> {
        decode(payload.as_bytes(), false).map(|mut v| v.remove(0))?
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
        assert!(decode(deep.as_bytes(), true).is_err());
    }

    #[test]
    fn batches_only_when_allowed() {
        let batch = r#"[{"jsonrpc":"2.0","id":1,"result":1},{"bad":true}]"#;
        assert_eq!(
            decode(batch.as_bytes(), false),
            Err(DecodeError::BatchNotAllowed)
        );
        let msgs = decode(batch.as_bytes(), true).unwrap();
        assert_eq!(msgs.len(), 2);
        assert!(msgs[0].is_ok());
        assert!(msgs[1].is_err());
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
}
