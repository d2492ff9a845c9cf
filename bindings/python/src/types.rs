//! The SDK's results, events and settings as Python classes.
//!
//! Every attribute is read from the SDK's own typed value (nothing is parsed again here); JSON
//! members become native dicts and lists once, when the object is built. `to_dict()` returns
//! a fresh copy of the server's JSON each time, so callers may mutate it freely.

use mcp_resume::{Content, Era, ListenStopReason, SessionEvent};
use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyList, PyModule};
use pyo3::PyTraverseError;
use serde_json::Value;

use crate::convert::{opt_to_py, to_py, IntoPython};

static ENUMS: PyOnceLock<Py<PyModule>> = PyOnceLock::new();

/// A member of one of the str enums of `mcp_resume/_enums.py`.
fn enum_member<'py>(py: Python<'py>, class: &str, value: &str) -> PyResult<Bound<'py, PyAny>> {
    let module = ENUMS
        .get_or_try_init(py, || {
            Ok::<_, PyErr>(py.import("mcp_resume._enums")?.unbind())
        })?
        .bind(py);
    module.getattr(class)?.call1((value,))
}

pub fn era_to_py(py: Python<'_>, era: Era) -> PyResult<Py<PyAny>> {
    Ok(enum_member(py, "Era", era.as_str())?.unbind())
}

/// A name of the core's (`Era`, `ResendPolicy`, `ProtocolVersion`: an `Era` member, which is
/// a `str`, too), read with the core's own `FromStr`.
pub fn parse_name<T>(py: Python<'_>, name: &str) -> PyResult<T>
where
    T: std::str::FromStr<Err = mcp_resume::Error>,
{
    name.parse::<T>()
        .map_err(|e| crate::errors::to_py_err(py, &e))
}

/// The server's answer to `initialize` (in the modern era: its discovery, shaped alike).
#[pyclass(frozen, weakref, module = "mcp_resume", name = "InitializeResult")]
pub struct PyInitializeResult {
    /// The protocol version the server chose.
    #[pyo3(get)]
    protocol_version: String,
    /// The server's capabilities, as sent.
    #[pyo3(get)]
    capabilities: Py<PyAny>,
    /// `serverInfo.name`.
    #[pyo3(get)]
    server_name: String,
    /// `serverInfo.version`.
    #[pyo3(get)]
    server_version: String,
    /// Usage instructions for the model, if any.
    #[pyo3(get)]
    instructions: Option<String>,
    raw: Value,
}

#[pymethods]
impl PyInitializeResult {
    // The JSON attributes are mutable dicts and lists: a caller can make a cycle through them.
    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.capabilities)?;
        Ok(())
    }

    /// The whole `result` member, as sent.
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_py(py, &self.raw)
    }

    fn __repr__(&self) -> String {
        format!(
            "InitializeResult(protocol_version={:?}, server_name={:?}, server_version={:?})",
            self.protocol_version, self.server_name, self.server_version
        )
    }
}

impl IntoPython for mcp_resume::InitializeResult {
    fn into_python(self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let value = PyInitializeResult {
            capabilities: to_py(py, &self.capabilities)?.unbind(),
            protocol_version: self.protocol_version,
            server_name: self.server_name,
            server_version: self.server_version,
            instructions: self.instructions,
            raw: self.raw,
        };
        Ok(Py::new(py, value)?.into_any())
    }
}

/// A tool the server offers.
#[pyclass(frozen, weakref, module = "mcp_resume", name = "Tool")]
pub struct PyTool {
    /// Name to call it by.
    #[pyo3(get)]
    name: String,
    /// Human-readable title, if any.
    #[pyo3(get)]
    title: Option<String>,
    /// Description, if any.
    #[pyo3(get)]
    description: Option<String>,
    /// JSON Schema of the arguments.
    #[pyo3(get)]
    input_schema: Py<PyAny>,
    /// JSON Schema of `structuredContent`, if declared.
    #[pyo3(get)]
    output_schema: Py<PyAny>,
    /// Behaviour hints, as sent.
    #[pyo3(get)]
    annotations: Py<PyAny>,
    /// The `idempotentHint` annotation (`False` when absent).
    #[pyo3(get)]
    is_idempotent_hint: bool,
    /// The `readOnlyHint` annotation (`False` when absent).
    #[pyo3(get)]
    is_read_only_hint: bool,
    raw: Value,
}

#[pymethods]
impl PyTool {
    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.input_schema)?;
        visit.call(&self.output_schema)?;
        visit.call(&self.annotations)?;
        Ok(())
    }

    /// The whole tool object, as sent.
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_py(py, &self.raw)
    }

    /// The tool's `_meta`, if any.
    #[getter]
    fn meta(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        opt_to_py(py, self.raw.get("_meta"))
    }

    /// The tool's `icons` (a list of `{"src", "mimeType", "sizes", "theme"}`), if any.
    #[getter]
    fn icons(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        opt_to_py(py, self.raw.get("icons"))
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other.cast::<Self>().is_ok_and(|o| o.get().raw == self.raw)
    }

    fn __reduce__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        reduce(py, "Tool", &self.raw)
    }

    fn __repr__(&self) -> String {
        format!("Tool(name={:?})", self.name)
    }
}

impl IntoPython for mcp_resume::Tool {
    fn into_python(self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let value = PyTool {
            is_idempotent_hint: self.is_idempotent_hint(),
            is_read_only_hint: self.is_read_only_hint(),
            input_schema: to_py(py, &self.input_schema)?.unbind(),
            output_schema: opt_to_py(py, self.output_schema.as_ref())?,
            annotations: opt_to_py(py, self.annotations.as_ref())?,
            name: self.name,
            title: self.title,
            description: self.description,
            raw: self.raw,
        };
        Ok(Py::new(py, value)?.into_any())
    }
}

/// One item of a tool result's `content`.
#[pyclass(frozen, weakref, module = "mcp_resume", name = "Content")]
pub struct PyContent {
    /// `"text"`, `"image"`, `"audio"`, `"resource_link"`, `"resource"`, or the item's own
    /// `type`.
    #[pyo3(get, name = "type")]
    kind: String,
    /// The text of a text item, or of an embedded text resource.
    #[pyo3(get)]
    text: Option<String>,
    /// Base64 data of an image or audio item, or of an embedded binary resource (`blob`).
    #[pyo3(get)]
    data: Option<String>,
    /// MIME type of an image, audio or resource item.
    #[pyo3(get)]
    mime_type: Option<String>,
    /// URI of a `resource_link` or `resource` item.
    #[pyo3(get)]
    uri: Option<String>,
    raw: Value,
}

#[pymethods]
impl PyContent {
    /// The item, as sent.
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_py(py, &self.raw)
    }

    /// The item's `annotations` (`audience`, `priority`, `lastModified`), if any.
    #[getter]
    fn annotations(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        opt_to_py(py, self.raw.get("annotations"))
    }

    /// The item's `_meta`, if any.
    #[getter]
    fn meta(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        opt_to_py(py, self.raw.get("_meta"))
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other.cast::<Self>().is_ok_and(|o| o.get().raw == self.raw)
    }

    fn __reduce__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        reduce(py, "Content", &self.raw)
    }

    fn __repr__(&self) -> String {
        match &self.text {
            Some(text) => format!("Content(type={:?}, text={:?})", self.kind, text),
            None => format!("Content(type={:?})", self.kind),
        }
    }
}

impl PyContent {
    pub fn new(content: &Content) -> Self {
        let mut item = PyContent {
            kind: content.kind().unwrap_or_default().to_owned(),
            text: None,
            data: None,
            mime_type: None,
            uri: None,
            raw: content.to_value(),
        };
        match content {
            Content::Text(c) => item.text = Some(c.text.clone()),
            Content::Image(c) => {
                item.data = Some(c.data.clone());
                item.mime_type = Some(c.mime_type.clone());
            }
            Content::Audio(c) => {
                item.data = Some(c.data.clone());
                item.mime_type = Some(c.mime_type.clone());
            }
            Content::ResourceLink(c) => {
                item.uri = Some(c.uri.clone());
                item.mime_type = c.mime_type.clone();
            }
            Content::Resource(c) => {
                item.uri = Some(c.resource.uri.clone());
                item.text = c.resource.text.clone();
                item.data = c.resource.blob.clone();
                item.mime_type = c.resource.mime_type.clone();
            }
            _ => {}
        }
        item
    }
}

/// The result of `tools/call`. A tool that failed says so in-band (`is_error`); a call that
/// failed raises instead.
#[pyclass(frozen, weakref, module = "mcp_resume", name = "CallToolResult")]
pub struct PyCallToolResult {
    /// Unstructured result items.
    #[pyo3(get)]
    content: Py<PyList>,
    /// `structuredContent`, if any.
    #[pyo3(get)]
    structured_content: Py<PyAny>,
    /// Whether the tool reported an error (`isError`).
    #[pyo3(get)]
    is_error: bool,
    /// The result's `_meta`, if any.
    #[pyo3(get)]
    meta: Py<PyAny>,
    /// The text items joined by newlines.
    #[pyo3(get)]
    text: String,
    raw: Value,
}

#[pymethods]
impl PyCallToolResult {
    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.content)?;
        visit.call(&self.structured_content)?;
        visit.call(&self.meta)?;
        Ok(())
    }

    /// The whole `result` member, as sent.
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_py(py, &self.raw)
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other.cast::<Self>().is_ok_and(|o| o.get().raw == self.raw)
    }

    fn __reduce__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        reduce(py, "CallToolResult", &self.raw)
    }

    fn __repr__(&self) -> String {
        format!(
            "CallToolResult(is_error={}, text={:?})",
            if self.is_error { "True" } else { "False" },
            self.text
        )
    }
}

impl IntoPython for mcp_resume::CallToolResult {
    fn into_python(self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let items = self
            .content
            .iter()
            .map(|content| Py::new(py, PyContent::new(content)))
            .collect::<PyResult<Vec<_>>>()?;
        let value = PyCallToolResult {
            text: self.text(),
            content: PyList::new(py, items)?.unbind(),
            structured_content: opt_to_py(py, self.structured_content.as_ref())?,
            is_error: self.is_error,
            meta: opt_to_py(py, self.meta.as_ref())?,
            raw: self.raw,
        };
        Ok(Py::new(py, value)?.into_any())
    }
}

/// A notification from the server (progress, log message, list change, …).
#[pyclass(frozen, weakref, module = "mcp_resume", name = "ServerNotification")]
pub struct PyServerNotification {
    /// The id of the call whose stream carried it (e.g. progress), when known.
    #[pyo3(get)]
    call: Option<u64>,
    /// The method, e.g. `"notifications/progress"`.
    #[pyo3(get)]
    method: String,
    /// The params, as sent.
    #[pyo3(get)]
    params: Py<PyAny>,
    /// `params.progressToken` of a progress notification.
    #[pyo3(get)]
    progress_token: Py<PyAny>,
}

#[pymethods]
impl PyServerNotification {
    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.params)?;
        visit.call(&self.progress_token)?;
        Ok(())
    }

    /// `{"call": ..., "method": ..., "params": ...}`.
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let dict = PyDict::new(py);
        dict.set_item("call", self.call)?;
        dict.set_item("method", &self.method)?;
        dict.set_item("params", copy(py, &self.params)?)?;
        Ok(dict)
    }

    fn __repr__(&self) -> String {
        format!(
            "ServerNotification(method={:?}, call={})",
            self.method,
            self.call.map_or("None".to_owned(), |c| c.to_string())
        )
    }
}

/// A deep copy, so `to_dict()` never hands out the object behind an attribute.
pub fn copy<'py>(py: Python<'py>, value: &Py<PyAny>) -> PyResult<Bound<'py, PyAny>> {
    py.import("copy")?
        .call_method1("deepcopy", (value.bind(py),))
}

impl IntoPython for mcp_resume::ServerNotification {
    fn into_python(self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let value = PyServerNotification {
            progress_token: opt_to_py(py, self.progress_token())?,
            call: self.call.map(|c| c.get()),
            params: opt_to_py(py, self.params.as_ref())?,
            method: self.method,
        };
        Ok(Py::new(py, value)?.into_any())
    }
}

/// A request from the server the application answers (sampling, elicitation, roots, and in
/// the modern era the input requests of a call).
#[pyclass(frozen, weakref, module = "mcp_resume", name = "ServerRequest")]
pub struct PyServerRequest {
    /// The server's request id (`int` or `str`); opaque.
    #[pyo3(get)]
    id: Py<PyAny>,
    /// The method, e.g. `"sampling/createMessage"`.
    #[pyo3(get)]
    method: String,
    /// The params, as sent.
    #[pyo3(get)]
    params: Py<PyAny>,
}

#[pymethods]
impl PyServerRequest {
    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.id)?;
        visit.call(&self.params)?;
        Ok(())
    }

    /// `{"id": ..., "method": ..., "params": ...}`.
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let dict = PyDict::new(py);
        dict.set_item("id", self.id.bind(py))?;
        dict.set_item("method", &self.method)?;
        dict.set_item("params", copy(py, &self.params)?)?;
        Ok(dict)
    }

    fn __repr__(&self) -> String {
        format!("ServerRequest(method={:?})", self.method)
    }
}

impl PyServerRequest {
    pub fn new(py: Python<'_>, request: &mcp_resume::ServerRequest) -> PyResult<Self> {
        Ok(PyServerRequest {
            id: to_py(py, &request.id.to_json())?.unbind(),
            method: request.method.clone(),
            params: opt_to_py(py, request.params.as_ref())?,
        })
    }
}

/// Which resume-safety checks the server advertised and which are in force.
#[pyclass(frozen, eq, module = "mcp_resume", name = "ExtensionStatus")]
#[derive(PartialEq)]
pub struct PyExtensionStatus {
    /// The server advertised the resume-safety extension.
    #[pyo3(get)]
    advertised: bool,
    /// Capability hashes are compared on every response.
    #[pyo3(get)]
    capability_hash: bool,
    /// Event ids on resumed streams are checked for gaps.
    #[pyo3(get)]
    sequenced_event_ids: bool,
    /// The server deduplicates keyed tool calls.
    #[pyo3(get)]
    idempotency: bool,
}

#[pymethods]
impl PyExtensionStatus {
    /// The four flags as a dict.
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let dict = PyDict::new(py);
        dict.set_item("advertised", self.advertised)?;
        dict.set_item("capability_hash", self.capability_hash)?;
        dict.set_item("sequenced_event_ids", self.sequenced_event_ids)?;
        dict.set_item("idempotency", self.idempotency)?;
        Ok(dict)
    }

    fn __repr__(&self) -> String {
        let b = |v: bool| if v { "True" } else { "False" };
        format!(
            "ExtensionStatus(advertised={}, capability_hash={}, sequenced_event_ids={}, \
             idempotency={})",
            b(self.advertised),
            b(self.capability_hash),
            b(self.sequenced_event_ids),
            b(self.idempotency)
        )
    }
}

impl From<mcp_resume::ExtensionStatus> for PyExtensionStatus {
    fn from(status: mcp_resume::ExtensionStatus) -> Self {
        PyExtensionStatus {
            advertised: status.advertised,
            capability_hash: status.capability_hash,
            sequenced_event_ids: status.sequenced_event_ids,
            idempotency: status.idempotency,
        }
    }
}

/// Lifecycle news of the session: resumes, rejections, re-initializations, re-sends,
/// unknown outcomes. `type` says which; the attributes that do not apply are `None`.
#[pyclass(frozen, weakref, module = "mcp_resume", name = "SessionEvent")]
#[derive(Default)]
pub struct PySessionEvent {
    /// `"connected"`, `"listening"`, `"listen_stopped"`, `"resumed"`, `"resume_rejected"`,
    /// `"reinitialized"`, `"redispatched"`,
    /// `"outcome_unknown"`, `"context_mismatch"`, `"checks_degraded"`, `"era_detected"`,
    /// `"task_created"`, `"task_finished"`, `"session_lost"`, `"closed"`, or `"other"` for an
    /// event this binding predates.
    #[pyo3(get, name = "type")]
    kind: &'static str,
    /// The call concerned (`redispatched`, `outcome_unknown`, `context_mismatch`, tasks).
    #[pyo3(get)]
    call: Option<u64>,
    /// The call's method (`redispatched`, `outcome_unknown`).
    #[pyo3(get)]
    method: Option<String>,
    /// The idempotency key a call was re-sent with (`redispatched`).
    #[pyo3(get)]
    idempotency_key: Option<String>,
    /// The negotiated protocol version (`connected`).
    #[pyo3(get)]
    protocol_version: Option<String>,
    /// The cursor presented (`resumed`).
    #[pyo3(get)]
    last_event_id: Option<String>,
    /// Why the session was re-initialized (`reinitialized`), what is missing
    /// (`checks_degraded`), or why the client stopped opening the stream of server messages
    /// (`listen_stopped`: `"gave_up"`, `"refused"` or `"unauthorized"`).
    #[pyo3(get)]
    reason: Option<String>,
    /// Consecutive failed attempts (`listen_stopped` with `reason` `"gave_up"`).
    #[pyo3(get)]
    attempts: Option<u32>,
    /// The server's reason for rejecting a resume (`resume_rejected`, and `reinitialized`
    /// after one), when it gave one.
    #[pyo3(get)]
    reject_reason: Option<String>,
    /// Whether version, server capabilities or capability hash changed (`reinitialized`).
    #[pyo3(get)]
    capabilities_changed: Option<bool>,
    /// The checks in force now (`checks_degraded`).
    #[pyo3(get)]
    status: Option<Py<PyExtensionStatus>>,
    /// The era found (`era_detected`): an `Era`.
    #[pyo3(get)]
    era: Option<Py<PyAny>>,
    /// The server's task id (`task_created`, `task_finished`).
    #[pyo3(get)]
    task_id: Option<String>,
    /// The event as the SDK prints it (`other` only).
    #[pyo3(get)]
    detail: Option<String>,
}

#[pymethods]
impl PySessionEvent {
    /// `type` and the attributes that apply.
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let dict = PyDict::new(py);
        dict.set_item("type", self.kind)?;
        macro_rules! put {
            ($($field:ident),*) => {$(
                if let Some(v) = &self.$field {
                    dict.set_item(stringify!($field), v)?;
                }
            )*};
        }
        put!(
            call,
            method,
            idempotency_key,
            protocol_version,
            last_event_id,
            reason
        );
        put!(reject_reason, capabilities_changed, task_id, detail, attempts);
        if let Some(status) = &self.status {
            dict.set_item("status", status.get().to_dict(py)?)?;
        }
        if let Some(era) = &self.era {
            dict.set_item("era", era.bind(py).str()?)?;
        }
        Ok(dict)
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let fields = self.to_dict(py)?;
        Ok(format!("SessionEvent({})", fields.repr()?))
    }
}

impl IntoPython for SessionEvent {
    fn into_python(self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let mut e = PySessionEvent {
            kind: self.kind(),
            ..Default::default()
        };
        match self {
            SessionEvent::Connected { protocol_version } => {
                e.protocol_version = Some(protocol_version.as_str().to_owned());
            }
            SessionEvent::Resumed { last_event_id } => {
                e.last_event_id = Some(last_event_id.to_string());
            }
            SessionEvent::ResumeRejected { reason } => {
                e.reject_reason = reason.as_ref().map(|r| r.as_str().to_owned());
            }
            SessionEvent::Reinitialized {
                reason,
                capabilities_changed,
            } => {
                e.reason = Some(reason.as_str().to_owned());
                e.reject_reason = reason.rejection().map(|r| r.as_str().to_owned());
                e.capabilities_changed = Some(capabilities_changed);
            }
            SessionEvent::Redispatched {
                call,
                method,
                idempotency_key,
            } => {
                e.call = Some(call.get());
                e.method = Some(method);
                e.idempotency_key = idempotency_key.map(|k| k.as_str().to_owned());
            }
            SessionEvent::OutcomeUnknown { call, method } => {
                e.call = Some(call.get());
                e.method = Some(method);
            }
            SessionEvent::ContextMismatch { call } => e.call = Some(call.get()),
            SessionEvent::ChecksDegraded { status, reason } => {
                e.status = Some(Py::new(py, PyExtensionStatus::from(status))?);
                e.reason = Some(reason);
            }
            SessionEvent::EraDetected { era } => e.era = Some(era_to_py(py, era)?),
            SessionEvent::ListenStopped { reason } => {
                e.reason = Some(reason.as_str().to_owned());
                if let ListenStopReason::GaveUp { attempts } = reason {
                    e.attempts = Some(attempts);
                }
            }
            SessionEvent::TaskCreated { call, task_id }
            | SessionEvent::TaskFinished { call, task_id } => {
                e.call = Some(call.get());
                e.task_id = Some(task_id);
            }
            _ => {}
        }
        Ok(Py::new(py, e)?.into_any())
    }
}

/// Reconnect delays and caps. Every argument defaults to the SDK's default; the policy is
/// checked when it is made (`InvalidConfigError`).
#[pyclass(frozen, module = "mcp_resume", name = "ReconnectPolicy")]
#[derive(Clone)]
pub struct PyReconnectPolicy {
    pub inner: mcp_resume::ReconnectPolicy,
}

#[pymethods]
impl PyReconnectPolicy {
    #[new]
    #[pyo3(signature = (*, initial_delay=None, multiplier=None, max_delay=None, jitter=None,
        max_attempts=None, max_resumes_without_progress=None, max_reinit_failures=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        initial_delay: Option<f64>,
        multiplier: Option<f64>,
        max_delay: Option<f64>,
        jitter: Option<f64>,
        max_attempts: Option<u32>,
        max_resumes_without_progress: Option<u32>,
        max_reinit_failures: Option<u32>,
    ) -> PyResult<Self> {
        let mut inner = mcp_resume::ReconnectPolicy::default();
        if let Some(v) = initial_delay {
            inner.initial_delay = crate::convert::seconds(py, v, "initial_delay")?;
        }
        if let Some(v) = multiplier {
            inner.multiplier = v;
        }
        if let Some(v) = max_delay {
            inner.max_delay = crate::convert::seconds(py, v, "max_delay")?;
        }
        if let Some(v) = jitter {
            inner.jitter = v;
        }
        if let Some(v) = max_attempts {
            inner.max_attempts = v;
        }
        if let Some(v) = max_resumes_without_progress {
            inner.max_resumes_without_progress = v;
        }
        if let Some(v) = max_reinit_failures {
            inner.max_reinit_failures = v;
        }
        inner
            .validate()
            .map_err(|e| crate::errors::to_py_err(py, &e))?;
        Ok(PyReconnectPolicy { inner })
    }

    /// First delay in seconds when the server named none (its `retry` takes this place).
    #[getter]
    fn initial_delay(&self) -> f64 {
        self.inner.initial_delay.as_secs_f64()
    }

    /// Growth factor per attempt.
    #[getter]
    fn multiplier(&self) -> f64 {
        self.inner.multiplier
    }

    /// Largest delay in seconds before jitter.
    #[getter]
    fn max_delay(&self) -> f64 {
        self.inner.max_delay.as_secs_f64()
    }

    /// Jitter added on top, as a fraction of the delay.
    #[getter]
    fn jitter(&self) -> f64 {
        self.inner.jitter
    }

    /// Attempts to reach the server for one call or stream before it fails.
    #[getter]
    fn max_attempts(&self) -> u32 {
        self.inner.max_attempts
    }

    /// Resumes of one stream that deliver nothing new before it counts as an unverifiable
    /// clean end.
    #[getter]
    fn max_resumes_without_progress(&self) -> u32 {
        self.inner.max_resumes_without_progress
    }

    /// Consecutive failed re-initializations after which, with no call waiting, the client
    /// stops trying (the next call reconnects); waiting calls end at their own deadlines.
    #[getter]
    fn max_reinit_failures(&self) -> u32 {
        self.inner.max_reinit_failures
    }

    fn __repr__(&self) -> String {
        let p = &self.inner;
        format!(
            "ReconnectPolicy(initial_delay={}, multiplier={}, max_delay={}, jitter={}, \
             max_attempts={}, max_resumes_without_progress={}, max_reinit_failures={})",
            p.initial_delay.as_secs_f64(),
            p.multiplier,
            p.max_delay.as_secs_f64(),
            p.jitter,
            p.max_attempts,
            p.max_resumes_without_progress,
            p.max_reinit_failures
        )
    }
}

/// Which era each origin was found to speak, shared by the clients given the same cache.
#[pyclass(frozen, module = "mcp_resume", name = "EraCache")]
#[derive(Clone)]
pub struct PyEraCache {
    pub inner: mcp_resume::EraCache,
}

#[pymethods]
impl PyEraCache {
    /// An empty cache of its own.
    #[new]
    fn new() -> Self {
        PyEraCache {
            inner: mcp_resume::EraCache::new(),
        }
    }

    /// The process-wide cache every client uses unless given another.
    #[staticmethod]
    fn global_cache() -> Self {
        PyEraCache {
            inner: mcp_resume::EraCache::global(),
        }
    }

    /// The era `url`'s origin was found to speak, if known.
    fn get(&self, py: Python<'_>, url: &str) -> PyResult<Option<Py<PyAny>>> {
        self.inner
            .get(url)
            .map(|era| era_to_py(py, era))
            .transpose()
    }

    /// Records that `url`'s origin speaks `era` (restoring a persisted answer).
    fn remember(&self, py: Python<'_>, url: &str, era: &str) -> PyResult<()> {
        self.inner.remember(url, parse_name(py, era)?);
        Ok(())
    }

    /// Forgets every origin.
    fn clear(&self) {
        self.inner.clear();
    }

    fn __repr__(&self) -> String {
        format!("{:?}", self.inner)
    }
}

/// Adds the classes of this file to the module.
/// `__reduce__` of a result class: rebuilt by [`unpickle`] from what was sent, so a pickled
/// value reads the same as the original (the SDK's own reader runs again).
pub fn reduce<'py>(py: Python<'py>, class: &str, raw: &Value) -> PyResult<Bound<'py, PyAny>> {
    let module = py.import("mcp_resume._mcp_resume")?;
    (module.getattr("_unpickle")?, (class, to_py(py, raw)?))
        .into_pyobject(py)
        .map(Bound::into_any)
}

/// Rebuilds a pickled result value of `class` from its JSON.
#[pyfunction]
#[pyo3(name = "_unpickle")]
pub fn unpickle(py: Python<'_>, class: &str, raw: Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
    let raw = crate::convert::from_py(&raw)?;
    let sdk = |e: mcp_resume::Error| crate::errors::to_py_err(py, &e);
    match class {
        "Tool" => mcp_resume::Tool::from_value(raw)
            .map_err(sdk)?
            .into_python(py),
        "CallToolResult" => mcp_resume::CallToolResult::from_value(raw)
            .map_err(sdk)?
            .into_python(py),
        "Content" => Ok(Py::new(py, PyContent::new(&Content::from_value(raw)))?.into_any()),
        other => crate::models::unpickle(py, other, raw).unwrap_or_else(|| {
            Err(pyo3::exceptions::PyValueError::new_err(format!(
                "no result class {other:?} to unpickle"
            )))
        }),
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(unpickle, m)?)?;
    m.add_class::<PyInitializeResult>()?;
    m.add_class::<PyTool>()?;
    m.add_class::<PyContent>()?;
    m.add_class::<PyCallToolResult>()?;
    m.add_class::<PyServerNotification>()?;
    m.add_class::<PyServerRequest>()?;
    m.add_class::<PyExtensionStatus>()?;
    m.add_class::<PySessionEvent>()?;
    m.add_class::<PyReconnectPolicy>()?;
    m.add_class::<PyEraCache>()?;
    Ok(())
}
