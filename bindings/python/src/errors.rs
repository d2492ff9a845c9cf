//! `mcp_resume::Error` as Python exceptions.
//!
//! The exception classes are defined in Python (`mcp_resume/_errors.py`): `McpTimeoutError`
//! derives from both `McpResumeError` and the builtin `TimeoutError`, which a class created
//! from Rust with one base cannot do.

use mcp_resume::{Error, ErrorKind};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyModule};

use crate::convert;

static ERRORS: PyOnceLock<Py<PyModule>> = PyOnceLock::new();

fn module(py: Python<'_>) -> PyResult<&Bound<'_, PyModule>> {
    ERRORS
        .get_or_try_init(py, || Ok(py.import("mcp_resume._errors")?.unbind()))
        .map(|m| m.bind(py))
}

/// The Python class of each kind; `None` for a kind this binding predates, raised as the
/// base class with its `kind` string.
fn class_name(kind: ErrorKind) -> Option<&'static str> {
    Some(match kind {
        ErrorKind::Transport => "TransportError",
        ErrorKind::Timeout => "McpTimeoutError",
        ErrorKind::SessionLost => "SessionLostError",
        ErrorKind::OutcomeUnknown => "OutcomeUnknownError",
        ErrorKind::ContextMismatch => "ContextMismatchError",
        ErrorKind::Rpc => "RpcError",
        ErrorKind::Protocol => "ProtocolError",
        ErrorKind::TooLarge => "TooLargeError",
        ErrorKind::Closed => "ClosedError",
        ErrorKind::Unauthorized => "UnauthorizedError",
        ErrorKind::InvalidConfig => "InvalidConfigError",
        ErrorKind::MissingCapability => "MissingCapabilityError",
        ErrorKind::Ledger => "LedgerError",
        _ => return None,
    })
}

/// The exception for `err`: its class, message, `retry_after`, `may_have_run`,
/// `input_refused` and, for JSON-RPC errors, `code`, `message` and `data`.
pub fn to_py_err(py: Python<'_>, err: &Error) -> PyErr {
    build(py, err).unwrap_or_else(|e| e)
}

fn build(py: Python<'_>, err: &Error) -> PyResult<PyErr> {
    let module = module(py)?;
    let kwargs = PyDict::new(py);
    kwargs.set_item("retry_after", err.retry_after().map(|d| d.as_secs_f64()))?;
    let instance = match (err.kind(), err.rpc_error()) {
        (ErrorKind::Rpc, Some(rpc)) => {
            let data = convert::opt_to_py(py, rpc.data.as_ref())?;
            module
                .getattr("RpcError")?
                .call((rpc.code, rpc.message.as_str(), data), Some(&kwargs))?
        }
        (kind, rpc) => {
            if let (ErrorKind::MissingCapability, Some(rpc)) = (kind, rpc) {
                kwargs.set_item("code", rpc.code)?;
                kwargs.set_item("data", convert::opt_to_py(py, rpc.data.as_ref())?)?;
            }
            if let (ErrorKind::Unauthorized, Some(challenge)) = (kind, err.auth_challenge()) {
                kwargs.set_item("auth_challenge", challenge_dict(py, challenge)?)?;
            }
            let class = match class_name(kind) {
                // RpcError's constructor needs the server's error object.
                Some(name) if kind != ErrorKind::Rpc => module.getattr(name)?,
                _ => {
                    kwargs.set_item("kind", kind.as_str())?;
                    module.getattr("McpResumeError")?
                }
            };
            class.call((err.message(),), Some(&kwargs))?
        }
    };
    instance.setattr("may_have_run", err.may_have_run())?;
    instance.setattr("input_refused", err.input_refused())?;
    Ok(PyErr::from_value(instance))
}

/// The server's `WWW-Authenticate` challenge as a dict of its parts.
pub fn challenge_dict<'py>(
    py: Python<'py>,
    challenge: &mcp_resume::AuthChallenge,
) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    dict.set_item("status", challenge.status)?;
    dict.set_item("scheme", &challenge.scheme)?;
    dict.set_item("error", &challenge.error)?;
    dict.set_item("error_description", &challenge.error_description)?;
    dict.set_item("scope", &challenge.scope)?;
    dict.set_item("resource_metadata", &challenge.resource_metadata)?;
    dict.set_item("realm", &challenge.realm)?;
    Ok(dict)
}

/// An `InvalidConfigError` for a value the binding cannot even hand to the SDK (a negative
/// duration, an unknown era name).
pub fn invalid_config(py: Python<'_>, message: &str) -> PyErr {
    let built = module(py).and_then(|m| m.getattr("InvalidConfigError")?.call1((message,)));
    match built {
        Ok(instance) => PyErr::from_value(instance),
        Err(e) => e,
    }
}
