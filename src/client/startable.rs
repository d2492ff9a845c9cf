//! [`Startable`]: what [`Client::start`](super::Client::start) accepts.

use std::time::Duration;

use serde_json::Value;

use super::request::{Request, Submission};
use super::results::CallToolResult;
use super::tool_call::ToolCall;
use crate::error::Error;

/// A call [`Client::start`](super::Client::start) can run behind a
/// [`CallHandle`](super::CallHandle): a [`ToolCall`] or a [`Request`].
///
/// Sealed: the driver knows how to submit exactly these two.
pub trait Startable: sealed::Sealed {
    /// What awaiting the handle yields: a [`CallToolResult`] for a tool call, the raw
    /// JSON-RPC `result` for a request.
    type Output;
}

// Sealed: `Sealed` is public only so that `Startable` can name it; no one outside the crate
// can, so its crate-private `Submission` never leaks.
#[allow(private_interfaces)]
pub(super) mod sealed {
    use super::*;

    /// How a startable call becomes a submission and how its result is read.
    pub trait Sealed {
        fn into_submission(self, default_timeout: Duration) -> Result<Submission, Error>;

        fn convert(value: Value) -> Result<Self::Output, Error>
        where
            Self: super::Startable;
    }
}

impl Startable for ToolCall {
    type Output = CallToolResult;
}

#[allow(private_interfaces)]
impl sealed::Sealed for ToolCall {
    fn into_submission(self, default_timeout: Duration) -> Result<Submission, Error> {
        ToolCall::into_submission(self, default_timeout)
    }

    fn convert(value: Value) -> Result<CallToolResult, Error> {
        CallToolResult::from_value(value)
    }
}

impl Startable for Request {
    type Output = Value;
}

#[allow(private_interfaces)]
impl sealed::Sealed for Request {
    fn into_submission(self, default_timeout: Duration) -> Result<Submission, Error> {
        Request::into_submission(self, default_timeout)
    }

    fn convert(value: Value) -> Result<Value, Error> {
        Ok(value)
    }
}
