//! The SDK's message bridge (`mcp_resume::bridge::Bridge`) for Python: JSON-RPC messages in
//! and out as dicts, in between an mcp-resume session with every recovery rule. The `mcp`
//! package's `ClientSession` runs on it through `mcp_resume.bridge.streamablehttp_client`.

use mcp_resume::bridge::Bridge;
use pyo3::prelude::*;
use serde_json::Value;

use crate::client::RawClient;
use crate::convert::{from_py, IntoPython, Reply};
use crate::errors;

/// The low-level bridge; use `mcp_resume.bridge.streamablehttp_client`.
#[pyclass(frozen, module = "mcp_resume._mcp_resume", name = "RawBridge")]
pub struct RawBridge {
    bridge: Bridge,
}

#[pymethods]
impl RawBridge {
    /// A bridge whose session is configured like `client` (its URL and options; its
    /// handlers are not used: server requests go to the host).
    #[new]
    #[pyo3(signature = (client, *, trust_tool_annotations=false, capacity=None))]
    fn new(
        py: Python<'_>,
        client: PyRef<'_, RawClient>,
        trust_tool_annotations: bool,
        capacity: Option<usize>,
    ) -> PyResult<Self> {
        let mut builder = Bridge::builder(client.url())
            .configure(|_| client.template())
            .trust_tool_annotations(trust_tool_annotations);
        if let Some(capacity) = capacity {
            builder = builder.capacity(capacity);
        }
        let bridge = builder.build().map_err(|e| errors::to_py_err(py, &e))?;
        Ok(RawBridge { bridge })
    }

    /// Host → server: one JSON-RPC message (a dict); resolves once the bridge took it.
    fn send<'py>(
        &self,
        py: Python<'py>,
        message: Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        // Handed to the bridge now, in the order of the calls: a request's cancel sent right
        // after it reaches it, whichever of the two is awaited first.
        let sending = self.bridge.send(from_py(&message)?);
        crate::bridge::awaitable(py, async move { Reply(sending.await) })
    }

    /// Server → host: the next JSON-RPC message (a dict), or `None` once the bridge is
    /// closed.
    fn recv<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let bridge = self.bridge.clone();
        crate::bridge::awaitable(py, async move { Received(bridge.recv().await) })
    }

    /// Closes the session (DELETE, best effort); later sends fail, `recv` returns `None`.
    fn close<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let bridge = self.bridge.clone();
        crate::bridge::awaitable(py, async move { Reply(bridge.close().await) })
    }

    /// The real session's `Mcp-Session-Id` (legacy era), `None` before `initialize` and in
    /// the 2026-07-28 era.
    fn session_id(&self) -> Option<String> {
        self.bridge.session_id().map(|id| id.expose().to_owned())
    }
}

/// What `recv` resolves to.
struct Received(Option<Value>);

impl IntoPython for Received {
    fn into_python(self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        match self.0 {
            Some(message) => message.into_python(py),
            None => Ok(py.None()),
        }
    }
}
