//! The typed server-to-client requests (what `on_sampling`, `on_elicitation` and `on_roots`
//! callbacks receive) and their answers (what they may return).
//!
//! The SDK types each request before the callback is called; the answer a callback returns
//! (one of the classes here, or the answer's JSON as a dict) becomes the SDK's typed answer
//! here, and the SDK writes it.

use mcp_resume::client::models::{
    CreateMessageRequest, CreateMessageResult, ElicitAction, ElicitRequest, ElicitResult,
    OneOrMany, Root, SamplingMessage,
};
use mcp_resume::{Content, RequestContext};
use pyo3::exceptions::PyTypeError;
use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyMapping, PyString};
use pyo3::PyTraverseError;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::convert::{from_py, json, opt_from_py, opt_to_py, to_py};
use crate::models::role_name;
use crate::types::PyContent;

/// The server's `sampling/createMessage` request: it asks the client's model for a message.
#[pyclass(frozen, weakref, module = "mcp_resume", name = "CreateMessageRequest")]
pub struct PyCreateMessageRequest {
    /// The server's request id (`int` or `str`).
    #[pyo3(get)]
    request_id: Py<PyAny>,
    /// The conversation so far.
    #[pyo3(get)]
    messages: Py<PyList>,
    /// The most tokens to generate.
    #[pyo3(get)]
    max_tokens: u64,
    /// The system prompt the server asks for, if any.
    #[pyo3(get)]
    system_prompt: Option<String>,
    /// Which MCP context to include (`none`, `thisServer`, `allServers`), if given.
    #[pyo3(get)]
    include_context: Option<String>,
    /// The sampling temperature, if given.
    #[pyo3(get)]
    temperature: Option<f64>,
    /// Stop sequences, if given.
    #[pyo3(get)]
    stop_sequences: Option<Vec<String>>,
    /// The server's model preferences, as sent.
    #[pyo3(get)]
    model_preferences: Py<PyAny>,
    /// Provider-specific metadata, as sent.
    #[pyo3(get)]
    metadata: Py<PyAny>,
    /// Tools the model may use, as sent.
    #[pyo3(get)]
    tools: Py<PyAny>,
    /// How the model may use them, as sent.
    #[pyo3(get)]
    tool_choice: Py<PyAny>,
    /// The params' `_meta`, if any.
    #[pyo3(get)]
    meta: Py<PyAny>,
    raw: Value,
}

#[pymethods]
impl PyCreateMessageRequest {
    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.request_id)?;
        visit.call(&self.messages)?;
        visit.call(&self.model_preferences)?;
        visit.call(&self.metadata)?;
        visit.call(&self.tools)?;
        visit.call(&self.tool_choice)?;
        visit.call(&self.meta)?;
        Ok(())
    }

    /// The request's params.
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_py(py, &self.raw)
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        format!(
            "CreateMessageRequest(messages={}, max_tokens={})",
            self.messages.bind(py).len(),
            self.max_tokens
        )
    }
}

impl PyCreateMessageRequest {
    pub fn new(
        py: Python<'_>,
        request: CreateMessageRequest,
        ctx: &RequestContext,
    ) -> PyResult<Self> {
        let messages = request
            .messages
            .iter()
            .map(|m| Py::new(py, PySamplingMessage::new(py, m)?))
            .collect::<PyResult<Vec<_>>>()?;
        Ok(PyCreateMessageRequest {
            request_id: to_py(py, &ctx.request_id().to_json())?.unbind(),
            messages: PyList::new(py, messages)?.unbind(),
            max_tokens: request.max_tokens,
            model_preferences: opt_to_py(py, request.model_preferences.as_ref())?,
            metadata: opt_to_py(py, request.metadata.as_ref())?,
            tools: match &request.tools {
                Some(tools) => to_py(py, &Value::Array(tools.clone()))?.unbind(),
                None => py.None(),
            },
            tool_choice: opt_to_py(py, request.tool_choice.as_ref())?,
            meta: opt_to_py(py, request.meta.as_ref())?,
            raw: json(&request)?,
            system_prompt: request.system_prompt,
            include_context: request.include_context,
            temperature: request.temperature,
            stop_sequences: request.stop_sequences,
        })
    }
}

/// One message of a sampling conversation.
#[pyclass(frozen, weakref, module = "mcp_resume", name = "SamplingMessage")]
pub struct PySamplingMessage {
    /// `"user"` or `"assistant"`.
    #[pyo3(get)]
    role: String,
    /// Its content items (one or several; `tool_use` and `tool_result` items keep their own
    /// `type`).
    #[pyo3(get)]
    content: Py<PyList>,
    /// The text items joined by newlines.
    #[pyo3(get)]
    text: String,
    raw: Value,
}

#[pymethods]
impl PySamplingMessage {
    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.content)
    }

    /// The message, as sent.
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_py(py, &self.raw)
    }

    fn __repr__(&self) -> String {
        format!(
            "SamplingMessage(role={:?}, text={:?})",
            self.role, self.text
        )
    }
}

impl PySamplingMessage {
    fn new(py: Python<'_>, message: &SamplingMessage) -> PyResult<Self> {
        let items = message
            .content
            .iter()
            .map(|c| Py::new(py, PyContent::new(c)))
            .collect::<PyResult<Vec<_>>>()?;
        Ok(PySamplingMessage {
            role: role_name(&message.role),
            content: PyList::new(py, items)?.unbind(),
            text: message.text(),
            raw: json(message)?,
        })
    }
}

/// The server's `elicitation/create` request: it asks the user for information, with a form
/// (`requested_schema`) or by sending them to a URL (`url` mode).
#[pyclass(frozen, weakref, module = "mcp_resume", name = "ElicitRequest")]
pub struct PyElicitRequest {
    /// The server's request id (`int` or `str`).
    #[pyo3(get)]
    request_id: Py<PyAny>,
    /// What to tell the user.
    #[pyo3(get)]
    message: String,
    /// `"form"` or `"url"`; `None` (older servers) means a form.
    #[pyo3(get)]
    mode: Option<String>,
    /// The form's JSON Schema, as sent.
    #[pyo3(get)]
    requested_schema: Py<PyAny>,
    /// The URL to send the user to (`url` mode).
    #[pyo3(get)]
    url: Option<String>,
    /// The elicitation's id (`url` mode).
    #[pyo3(get)]
    elicitation_id: Option<String>,
    /// Whether the server asks the user to visit a URL rather than fill in a form.
    #[pyo3(get)]
    is_url_mode: bool,
    /// The params' `_meta`, if any.
    #[pyo3(get)]
    meta: Py<PyAny>,
    raw: Value,
}

#[pymethods]
impl PyElicitRequest {
    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.request_id)?;
        visit.call(&self.requested_schema)?;
        visit.call(&self.meta)?;
        Ok(())
    }

    /// The request's params.
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_py(py, &self.raw)
    }

    fn __repr__(&self) -> String {
        format!("ElicitRequest(message={:?})", self.message)
    }
}

impl PyElicitRequest {
    pub fn new(py: Python<'_>, request: ElicitRequest, ctx: &RequestContext) -> PyResult<Self> {
        Ok(PyElicitRequest {
            request_id: to_py(py, &ctx.request_id().to_json())?.unbind(),
            is_url_mode: request.is_url_mode(),
            requested_schema: opt_to_py(py, request.requested_schema.as_ref())?,
            meta: opt_to_py(py, request.meta.as_ref())?,
            raw: json(&request)?,
            message: request.message,
            mode: request.mode,
            url: request.url,
            elicitation_id: request.elicitation_id,
        })
    }
}

/// The server's `roots/list` request: it asks which roots the client exposes.
#[pyclass(frozen, weakref, module = "mcp_resume", name = "ListRootsRequest")]
pub struct PyListRootsRequest {
    /// The server's request id (`int` or `str`).
    #[pyo3(get)]
    request_id: Py<PyAny>,
    /// The params' `_meta`, if any.
    #[pyo3(get)]
    meta: Py<PyAny>,
    raw: Value,
}

#[pymethods]
impl PyListRootsRequest {
    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.request_id)?;
        visit.call(&self.meta)?;
        Ok(())
    }

    /// The request's params (`{}`, or its `_meta`).
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_py(py, &self.raw)
    }

    fn __repr__(&self) -> String {
        "ListRootsRequest()".to_owned()
    }
}

impl PyListRootsRequest {
    pub fn new(py: Python<'_>, ctx: &RequestContext) -> PyResult<Self> {
        let mut params = Map::new();
        if let Some(meta) = ctx.meta() {
            params.insert("_meta".to_owned(), meta.clone());
        }
        Ok(PyListRootsRequest {
            request_id: to_py(py, &ctx.request_id().to_json())?.unbind(),
            meta: opt_to_py(py, ctx.meta())?,
            raw: Value::Object(params),
        })
    }
}

/// The client's answer to `sampling/createMessage`: an assistant message from `model`.
#[pyclass(frozen, module = "mcp_resume", name = "CreateMessageResult")]
pub struct PyCreateMessageResult {
    inner: CreateMessageResult,
}

#[pymethods]
impl PyCreateMessageResult {
    /// `content` is text, one content item (a dict such as `{"type": "image", ...}`), or a
    /// list of items; `stop_reason` is e.g. `"endTurn"`; `meta` becomes `_meta`.
    #[new]
    #[pyo3(signature = (model, content, *, stop_reason=None, meta=None))]
    fn new(
        model: String,
        content: &Bound<'_, PyAny>,
        stop_reason: Option<String>,
        meta: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let mut inner = if let Ok(text) = content.cast::<PyString>() {
            CreateMessageResult::new(model, text.to_str()?)
        } else if content.cast::<PyList>().is_ok() || content.cast::<pyo3::types::PyTuple>().is_ok()
        {
            let items: Vec<Content> = typed(from_py(content)?, "content items")?;
            let mut result = CreateMessageResult::new(model, "");
            result.content = OneOrMany::Many(items);
            result
        } else {
            let item: Content = typed(from_py(content)?, "a content item")?;
            CreateMessageResult::new(model, item)
        };
        if let Some(reason) = stop_reason {
            inner = inner.stop_reason(reason);
        }
        inner.meta = opt_from_py(meta)?;
        Ok(PyCreateMessageResult { inner })
    }

    /// The model that generated the message.
    #[getter]
    fn model(&self) -> &str {
        &self.inner.model
    }

    /// Why generation stopped, if given.
    #[getter]
    fn stop_reason(&self) -> Option<&str> {
        self.inner.stop_reason.as_deref()
    }

    /// The answer's JSON, as it will be sent.
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_py(py, &json(&self.inner)?)
    }

    fn __repr__(&self) -> String {
        format!("CreateMessageResult(model={:?})", self.inner.model)
    }
}

/// The client's answer to `elicitation/create`: `ElicitResult.accept(content)`,
/// `ElicitResult.decline()` or `ElicitResult.cancel()`.
#[pyclass(frozen, module = "mcp_resume", name = "ElicitResult")]
pub struct PyElicitResult {
    inner: ElicitResult,
}

#[pymethods]
impl PyElicitResult {
    /// The user submitted `content` (the form's values, a dict; `None` for a URL).
    #[staticmethod]
    #[pyo3(signature = (content=None))]
    fn accept(content: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        let content = match opt_from_py(content)? {
            None => Value::Null,
            Some(Value::Object(map)) => Value::Object(map),
            Some(_) => return Err(PyTypeError::new_err("content must be a dict")),
        };
        Ok(PyElicitResult {
            inner: ElicitResult::accept(content),
        })
    }

    /// The user refused.
    #[staticmethod]
    fn decline() -> Self {
        PyElicitResult {
            inner: ElicitResult::decline(),
        }
    }

    /// The user dismissed the request.
    #[staticmethod]
    fn cancel() -> Self {
        PyElicitResult {
            inner: ElicitResult::cancel(),
        }
    }

    /// `"accept"`, `"decline"` or `"cancel"`.
    #[getter]
    fn action(&self) -> &'static str {
        match self.inner.action {
            ElicitAction::Accept => "accept",
            ElicitAction::Decline => "decline",
            ElicitAction::Cancel => "cancel",
        }
    }

    /// The submitted values, for an accepted form.
    #[getter]
    fn content<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        self.inner
            .content
            .as_ref()
            .map(|c| to_py(py, &Value::Object(c.clone())))
            .transpose()
    }

    /// The answer's JSON, as it will be sent.
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_py(py, &json(&self.inner)?)
    }

    fn __repr__(&self) -> String {
        format!("ElicitResult(action={:?})", self.action())
    }
}

/// A root the client exposes to the server: a directory or file it may work in.
#[pyclass(frozen, module = "mcp_resume", name = "Root")]
pub struct PyRoot {
    inner: Root,
}

#[pymethods]
impl PyRoot {
    /// A root at `uri` (a `file://` URI), with an optional human-readable `name`.
    #[new]
    #[pyo3(signature = (uri, name=None))]
    fn new(uri: String, name: Option<String>) -> Self {
        let root = Root::new(uri);
        PyRoot {
            inner: match name {
                Some(name) => root.name(name),
                None => root,
            },
        }
    }

    /// Its URI.
    #[getter]
    fn uri(&self) -> &str {
        &self.inner.uri
    }

    /// Its name, if any.
    #[getter]
    fn name(&self) -> Option<&str> {
        self.inner.name.as_deref()
    }

    /// The root's JSON, as it will be sent.
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_py(py, &json(&self.inner)?)
    }

    fn __repr__(&self) -> String {
        match &self.inner.name {
            Some(name) => format!("Root(uri={:?}, name={:?})", self.inner.uri, name),
            None => format!("Root(uri={:?})", self.inner.uri),
        }
    }
}

fn typed<T: DeserializeOwned>(value: Value, what: &str) -> PyResult<T> {
    serde_json::from_value(value).map_err(|e| PyTypeError::new_err(format!("not {what}: {e}")))
}

/// A sampling callback's answer: a `CreateMessageResult`, or its JSON.
pub fn sampling_answer(answer: &Bound<'_, PyAny>) -> PyResult<CreateMessageResult> {
    if let Ok(result) = answer.cast::<PyCreateMessageResult>() {
        return Ok(result.get().inner.clone());
    }
    typed(
        from_py(answer)?,
        "a CreateMessageResult (or its JSON: role, content, model)",
    )
}

/// An elicitation callback's answer: an `ElicitResult`, or its JSON.
pub fn elicit_answer(answer: &Bound<'_, PyAny>) -> PyResult<ElicitResult> {
    if let Ok(result) = answer.cast::<PyElicitResult>() {
        return Ok(result.get().inner.clone());
    }
    typed(
        from_py(answer)?,
        "an ElicitResult (or its JSON: action, content)",
    )
}

/// A roots callback's answer: an iterable of `Root`s, URIs, or root dicts.
pub fn roots_answer(answer: &Bound<'_, PyAny>) -> PyResult<Vec<Root>> {
    if answer.cast::<PyMapping>().is_ok() || answer.cast::<PyString>().is_ok() {
        return Err(PyTypeError::new_err(
            "a roots handler returns a list of Root, URI strings or root dicts",
        ));
    }
    answer
        .try_iter()?
        .map(|item| {
            let item = item?;
            if let Ok(root) = item.cast::<PyRoot>() {
                Ok(root.get().inner.clone())
            } else if let Ok(uri) = item.cast::<PyString>() {
                Ok(Root::new(uri.to_str()?))
            } else {
                typed(from_py(&item)?, "a root (uri, name)")
            }
        })
        .collect()
}

/// Adds the classes of this file to the module.
pub fn register(m: &Bound<'_, pyo3::types::PyModule>) -> PyResult<()> {
    m.add_class::<PyCreateMessageRequest>()?;
    m.add_class::<PySamplingMessage>()?;
    m.add_class::<PyElicitRequest>()?;
    m.add_class::<PyListRootsRequest>()?;
    m.add_class::<PyCreateMessageResult>()?;
    m.add_class::<PyElicitResult>()?;
    m.add_class::<PyRoot>()?;
    Ok(())
}
