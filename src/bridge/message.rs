//! JSON-RPC messages at the bridge's boundary: reading what the host sends, writing what it
//! receives.

use serde_json::{json, Value};

use super::codes::error_object;
use crate::error::{Error, ErrorKind, RpcError};

/// A message from the host, classified. A request's `id` is the host's, or what the bridge
/// made of it once taken (its place among the requests the host's cancel reaches).
#[derive(Debug)]
pub(crate) enum HostMessage<Id = Value> {
    /// A request: it gets exactly one answer under `id`, unless the host cancels it.
    Request {
        id: Id,
        method: String,
        params: Option<Value>,
    },
    /// A notification.
    Notification {
        method: String,
        params: Option<Value>,
    },
    /// The host's answer to a server request the bridge forwarded.
    Response {
        id: Value,
        result: Result<Value, RpcError>,
    },
}

impl<Id> HostMessage<Id> {
    /// The same message, a request's id made into `f`'s.
    pub(crate) fn with_request_id<T>(self, f: impl FnOnce(Id) -> T) -> HostMessage<T> {
        match self {
            HostMessage::Request { id, method, params } => HostMessage::Request {
                id: f(id),
                method,
                params,
            },
            HostMessage::Notification { method, params } => {
                HostMessage::Notification { method, params }
            }
            HostMessage::Response { id, result } => HostMessage::Response { id, result },
        }
    }
}

impl HostMessage {
    /// Classifies one JSON-RPC message; anything else is an [`ErrorKind::Protocol`] error.
    pub(crate) fn parse(message: Value) -> Result<Self, Error> {
        let Value::Object(mut object) = message else {
            return Err(invalid("a JSON-RPC message must be an object"));
        };
        let id = object.remove("id");
        let params = object.remove("params");
        if let Some(method) = object.remove("method") {
            let Value::String(method) = method else {
                return Err(invalid("`method` must be a string"));
            };
            return Ok(match id {
                Some(id @ (Value::Number(_) | Value::String(_))) => {
                    HostMessage::Request { id, method, params }
                }
                None => HostMessage::Notification { method, params },
                Some(_) => return Err(invalid("a request id must be a number or a string")),
            });
        }
        let id = id.ok_or_else(|| invalid("a message without `method` must have an `id`"))?;
        let result = match (object.remove("result"), object.remove("error")) {
            (Some(result), None) => Ok(result),
            (None, Some(error)) => Err(rpc_error(error)),
            _ => {
                return Err(invalid(
                    "a response has exactly one of `result` and `error`",
                ))
            }
        };
        Ok(HostMessage::Response { id, result })
    }
}

/// The host's error object, read leniently: a host that sends a malformed one still answers.
fn rpc_error(error: Value) -> RpcError {
    RpcError {
        code: error.get("code").and_then(Value::as_i64).unwrap_or(-32603),
        message: error
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        data: error.get("data").cloned(),
    }
}

fn invalid(message: &str) -> Error {
    Error::new(
        ErrorKind::Protocol,
        format!("not a JSON-RPC message: {message}"),
    )
}

/// `{"jsonrpc":"2.0","id":…,"result":…}` or the error form.
pub(crate) fn response(id: Value, result: Result<Value, RpcError>) -> Value {
    match result {
        Ok(result) => json!({ "jsonrpc": "2.0", "id": id, "result": result }),
        Err(error) => json!({ "jsonrpc": "2.0", "id": id, "error": error_object(&error) }),
    }
}

/// A request or notification (`id: None`) towards the host.
pub(crate) fn request(id: Option<Value>, method: &str, params: Option<Value>) -> Value {
    let mut message = json!({ "jsonrpc": "2.0", "method": method });
    if let Some(id) = id {
        message["id"] = id;
    }
    if let Some(params) = params {
        message["params"] = params;
    }
    message
}

/// A map key for a host's request id: `1` and `"1"` are different ids.
pub(crate) fn id_key(id: &Value) -> String {
    id.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_classified() {
        let m = HostMessage::parse(json!({"jsonrpc": "2.0", "id": 1, "method": "ping"})).unwrap();
        assert!(matches!(m, HostMessage::Request { method, .. } if method == "ping"));
        let m = HostMessage::parse(json!({"jsonrpc": "2.0", "method": "n"})).unwrap();
        assert!(matches!(m, HostMessage::Notification { .. }));
        let m = HostMessage::parse(json!({"jsonrpc": "2.0", "id": 3, "error": {"code": 1}}));
        assert!(matches!(m, Ok(HostMessage::Response { result: Err(e), .. }) if e.code == 1));
        for bad in [
            json!([1]),
            json!({"method": 3}),
            json!({"id": {}, "method": "m"}),
            json!({"result": 1}),
            json!({"id": 1}),
        ] {
            assert_eq!(
                HostMessage::parse(bad).unwrap_err().kind(),
                ErrorKind::Protocol
            );
        }
        assert_ne!(id_key(&json!(1)), id_key(&json!("1")));
    }
}
