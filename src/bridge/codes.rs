//! How an [`Error`] reaches the host: as a JSON-RPC error object with a documented code and
//! `data.kind` set to the [`ErrorKind`]'s name.

use serde_json::{json, Map, Value};

use crate::error::{Error, ErrorKind, RpcError};

/// [`ErrorKind::Closed`]: the bridge or its session was closed. The code the TypeScript and
/// Python SDKs call "connection closed".
pub const CLOSED: i64 = -32000;
/// [`ErrorKind::Timeout`]: the call's deadline passed. The code the TypeScript SDK calls
/// "request timeout".
pub const TIMEOUT: i64 = -32001;
/// [`ErrorKind::OutcomeUnknown`]: the call was interrupted and may or may not have run.
pub const OUTCOME_UNKNOWN: i64 = -32050;
/// [`ErrorKind::ContextMismatch`]: the answer came under another negotiated context.
pub const CONTEXT_MISMATCH: i64 = -32051;
/// [`ErrorKind::SessionLost`]: the session could not be re-established.
pub const SESSION_LOST: i64 = -32052;
/// [`ErrorKind::Transport`]: the network failed beyond the recovery limits.
pub const TRANSPORT: i64 = -32053;
/// [`ErrorKind::Protocol`]: the server broke the protocol.
pub const PROTOCOL: i64 = -32054;
/// [`ErrorKind::TooLarge`]: the server sent more than the configured maximum.
pub const TOO_LARGE: i64 = -32055;
/// [`ErrorKind::Unauthorized`]: the server refused the credentials.
pub const UNAUTHORIZED: i64 = -32056;
/// [`ErrorKind::InvalidConfig`]: the bridge's configuration, or a host request's
/// idempotency key, is invalid.
pub const INVALID_CONFIG: i64 = -32057;
/// [`ErrorKind::Ledger`]: the ledger of calls in flight could not be read or written.
pub const LEDGER: i64 = -32058;
/// JSON-RPC "invalid request": a request before `initialize`.
pub const INVALID_REQUEST: i64 = -32600;
/// JSON-RPC "method not found": the answer to a host's `server/discover`.
pub const METHOD_NOT_FOUND: i64 = -32601;

/// The JSON-RPC error the host receives for `error`.
///
/// A server's own JSON-RPC error ([`ErrorKind::Rpc`]) reaches the host unchanged, but for
/// `"mayHaveRun": true` added to its data when it did not answer the call itself (a task
/// call's poll refused: the task may run on; data that is not an object then goes under
/// `data.data`). A modern
/// server's `MissingRequiredClientCapability` keeps its code and data, with `kind` added
/// when the data is an object, and `"mayHaveRun": true` as for a server's own error when an
/// earlier send may have run the call. Every other kind gets its own code, the error's message, and
/// `data: {"kind": <name>}`, and `"mayHaveRun": true` for a call that may have run
/// ([`Error::may_have_run`], whose docs list every case: always `outcome_unknown` and
/// `context_mismatch`; a timed-out, lost or closed call that had been sent; a result that
/// cannot be read), and `"inputRefused": true` for a call that stopped because the host could
/// not provide an input the server asked for ([`Error::input_refused`]: not one to send
/// again). A host must never retry those blindly: their message
/// says only what happened; the network's words that caused it go to `data.cause`, because
/// frameworks pick what to retry by reading messages (Mastra re-runs a tool call whose error
/// says "connection closed").
pub(crate) fn to_rpc(error: &Error) -> RpcError {
    let code = match error.kind() {
        ErrorKind::Rpc => {
            if let Some(rpc) = error.rpc_error() {
                let mut rpc = rpc.clone();
                if error.may_have_run() {
                    // Not the call's own answer (a task's poll refused, say): the host must
                    // hear that the call may have run, beside the server's data.
                    rpc.data = Some(match rpc.data.take() {
                        Some(Value::Object(mut data)) => {
                            data.insert("mayHaveRun".to_owned(), Value::Bool(true));
                            Value::Object(data)
                        }
                        None => json!({ "mayHaveRun": true }),
                        // Data that cannot take a member goes under `data`: the mark must
                        // reach the host whatever the server wrote.
                        Some(other) => json!({ "mayHaveRun": true, "data": other }),
                    });
                }
                return rpc;
            }
            PROTOCOL
        }
        ErrorKind::MissingCapability => {
            if let Some(rpc) = error.rpc_error() {
                let mut rpc = rpc.clone();
                // An earlier send may have run the call (a re-send was refused so): the host
                // hears it beside the server's data, as for a server's own error.
                let ran = error.may_have_run();
                match &mut rpc.data {
                    Some(Value::Object(data)) => {
                        data.entry("kind").or_insert_with(|| kind_value(error));
                        if ran {
                            data.insert("mayHaveRun".to_owned(), Value::Bool(true));
                        }
                    }
                    None => {
                        let mut data = json!({ "kind": error.kind().as_str() });
                        if ran {
                            data["mayHaveRun"] = Value::Bool(true);
                        }
                        rpc.data = Some(data);
                    }
                    // The server's data is kept as it is, under `data` when the mark must
                    // go beside it.
                    Some(_) if ran => {
                        let other = rpc.data.take();
                        rpc.data = Some(json!({ "mayHaveRun": true, "data": other }));
                    }
                    Some(_) => {}
                }
                return rpc;
            }
            PROTOCOL
        }
        ErrorKind::Closed => CLOSED,
        ErrorKind::Timeout => TIMEOUT,
        ErrorKind::OutcomeUnknown => OUTCOME_UNKNOWN,
        ErrorKind::ContextMismatch => CONTEXT_MISMATCH,
        ErrorKind::SessionLost => SESSION_LOST,
        ErrorKind::Transport => TRANSPORT,
        ErrorKind::Protocol => PROTOCOL,
        ErrorKind::TooLarge => TOO_LARGE,
        ErrorKind::Unauthorized => UNAUTHORIZED,
        ErrorKind::InvalidConfig => INVALID_CONFIG,
        ErrorKind::Ledger => LEDGER,
    };
    let mut data = Map::new();
    data.insert("kind".to_owned(), kind_value(error));
    if let Some(after) = error.retry_after() {
        data.insert("retryAfterMs".to_owned(), json!(after.as_millis() as u64));
    }
    if error.may_have_run() {
        data.insert("mayHaveRun".to_owned(), Value::Bool(true));
    }
    if error.input_refused() {
        // Told apart from an interruption: sent again, it would ask the host the same thing.
        data.insert("inputRefused".to_owned(), Value::Bool(true));
    }
    let message = match split_cause(error).filter(|_| error.may_have_run()) {
        Some((own, cause)) => {
            data.insert("cause".to_owned(), Value::String(cause.to_owned()));
            format!("{}: {own}", error.kind())
        }
        None => error.to_string(),
    };
    RpcError {
        code,
        message,
        data: Some(Value::Object(data)),
    }
}

/// An error's own message and its cause's, when it was built with a cause
/// (`Error::caused_by` appends the cause's message to its own).
fn split_cause(error: &Error) -> Option<(&str, &str)> {
    let cause = std::error::Error::source(error)?.downcast_ref::<Error>()?;
    let own = error
        .message()
        .strip_suffix(cause.message())?
        .strip_suffix(": ")?;
    Some((own, cause.message()))
}

fn kind_value(error: &Error) -> Value {
    Value::String(error.kind().as_str().to_owned())
}

/// A JSON-RPC error object as JSON.
pub(crate) fn error_object(error: &RpcError) -> Value {
    let mut object = json!({ "code": error.code, "message": error.message });
    if let Some(data) = &error.data {
        object["data"] = data.clone();
    }
    object
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_a_code_and_its_name() {
        let kinds = [
            (ErrorKind::Closed, CLOSED),
            (ErrorKind::Timeout, TIMEOUT),
            (ErrorKind::OutcomeUnknown, OUTCOME_UNKNOWN),
            (ErrorKind::ContextMismatch, CONTEXT_MISMATCH),
            (ErrorKind::SessionLost, SESSION_LOST),
            (ErrorKind::Transport, TRANSPORT),
            (ErrorKind::Protocol, PROTOCOL),
            (ErrorKind::TooLarge, TOO_LARGE),
            (ErrorKind::Unauthorized, UNAUTHORIZED),
            (ErrorKind::InvalidConfig, INVALID_CONFIG),
            (ErrorKind::Ledger, LEDGER),
        ];
        for (kind, code) in kinds {
            let error = Error::new(kind, "m");
            let rpc = to_rpc(&error);
            assert_eq!(rpc.code, code, "{kind}");
            let data = match error.may_have_run() {
                true => json!({"kind": kind.as_str(), "mayHaveRun": true}),
                false => json!({"kind": kind.as_str()}),
            };
            assert_eq!(rpc.data, Some(data));
        }
        let server = RpcError {
            code: -32602,
            message: "bad".into(),
            data: Some(json!([1])),
        };
        assert_eq!(to_rpc(&Error::rpc(server.clone())), server);
        // A server's error that does not answer the call itself (a task's poll refused).
        let poll = RpcError {
            data: Some(json!({"detail": "unknown task"})),
            ..server.clone()
        };
        let rpc = to_rpc(&Error::rpc(poll.clone()).with_may_have_run());
        assert_eq!(rpc.code, -32602);
        assert_eq!(
            rpc.data,
            Some(json!({"detail": "unknown task", "mayHaveRun": true}))
        );
        let bare = RpcError {
            data: None,
            ..poll.clone()
        };
        let rpc = to_rpc(&Error::rpc(bare).with_may_have_run());
        assert_eq!(rpc.data, Some(json!({"mayHaveRun": true})));
        // A modern server's missing-capability refusal of a re-send whose first send may
        // have run: the mark goes beside its data, whatever shape the data has.
        for (data, marked) in [
            (
                Some(json!({"requiredCapabilities": {}})),
                json!({"requiredCapabilities": {}, "kind": "missing_capability", "mayHaveRun": true}),
            ),
            (
                None,
                json!({"kind": "missing_capability", "mayHaveRun": true}),
            ),
            (Some(json!([1])), json!({"mayHaveRun": true, "data": [1]})),
        ] {
            let refusal = RpcError {
                code: -32021,
                message: "needs sampling".into(),
                data,
            };
            let rpc = to_rpc(&Error::missing_capability(refusal).with_may_have_run());
            assert_eq!((rpc.code, rpc.data), (-32021, Some(marked)));
        }
        let listed = RpcError {
            data: Some(json!([1])),
            ..poll
        };
        let rpc = to_rpc(&Error::rpc(listed).with_may_have_run());
        assert_eq!(rpc.data, Some(json!({"mayHaveRun": true, "data": [1]})));
    }

    #[test]
    fn a_call_that_may_have_run_keeps_the_network_words_out_of_its_message() {
        let network = || {
            Error::new(
                ErrorKind::Transport,
                "error sending request: connection closed before message completed",
            )
        };
        for (kind, own) in [
            (
                ErrorKind::OutcomeUnknown,
                "tools/call was interrupted; it may or may not have run",
            ),
            (
                ErrorKind::ContextMismatch,
                "tools/call was answered under another negotiated context",
            ),
        ] {
            let rpc = to_rpc(&Error::caused_by(kind, own, network()));
            assert_eq!(rpc.message, format!("{kind}: {own}"));
            assert_eq!(
                rpc.data,
                Some(json!({
                    "kind": kind.as_str(),
                    "mayHaveRun": true,
                    "cause": "error sending request: connection closed before message completed",
                }))
            );
        }
        // A sent call whose deadline passed while it was being resumed.
        let sent = Error::caused_by(ErrorKind::Timeout, "tools/call timed out", network())
            .with_may_have_run();
        let rpc = to_rpc(&sent);
        assert_eq!(rpc.code, TIMEOUT);
        assert_eq!(rpc.message, "timeout: tools/call timed out");
        assert_eq!(rpc.data.as_ref().unwrap()["mayHaveRun"], true);
        // Other kinds say their cause as before: a call that was never sent may be retried.
        let unsent = Error::caused_by(ErrorKind::Transport, "tools/call", network());
        assert!(to_rpc(&unsent).message.contains("connection closed"));
    }
}
