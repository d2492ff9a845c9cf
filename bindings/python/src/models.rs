//! The results of the typed methods (resources, prompts, completion, pages of lists) and the
//! arguments they take (completion references, logging levels).
//!
//! Every attribute is read from the SDK's typed value; `to_dict()` is that value's JSON, which
//! keeps every member the server sent (the SDK's models keep the members they do not model).

use mcp_resume::client::models::{
    Annotations, Completion, CompletionReference, GetPromptResult, LoggingLevel, Page, Prompt,
    PromptArgument, PromptMessage, ReadResourceResult, Resource, ResourceContents,
    ResourceTemplate, Role,
};
use pyo3::exceptions::PyTypeError;
use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyMapping, PyModule, PyType};
use pyo3::PyTraverseError;
use serde_json::Value;

use crate::convert::{json, opt_to_py, to_py, IntoPython};
use crate::types::PyContent;

/// `"user"` or `"assistant"` (or a newer role's own name).
pub fn role_name(role: &Role) -> String {
    match serde_json::to_value(role) {
        Ok(Value::String(name)) => name,
        _ => format!("{role:?}").to_lowercase(),
    }
}

fn annotations(py: Python<'_>, annotations: Option<&Annotations>) -> PyResult<Py<PyAny>> {
    match annotations {
        Some(a) => Ok(to_py(py, &json(a)?)?.unbind()),
        None => Ok(py.None()),
    }
}

fn list<T>(
    py: Python<'_>,
    items: impl IntoIterator<Item = T>,
    make: impl Fn(Python<'_>, T) -> PyResult<Py<PyAny>>,
) -> PyResult<Py<PyList>> {
    let items = items
        .into_iter()
        .map(|item| make(py, item))
        .collect::<PyResult<Vec<_>>>()?;
    Ok(PyList::new(py, items)?.unbind())
}

/// `to_dict()` and `__traverse__` of a result class, from its `raw` JSON and its Python
/// fields.
macro_rules! result_methods {
    // A class that pickles: rebuilt by `_unpickle` from the JSON the server sent.
    (pickled $class:ident, $fields:tt, |$this:ident, $py:ident| $repr:expr) => {
        result_methods!(@impl $class, $fields, |$this, $py| $repr, {
            fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
                let name = slf.get_type().name()?;
                crate::types::reduce(slf.py(), name.to_str()?, &slf.get().raw)
            }
        });
    };
    ($class:ident, $fields:tt, |$this:ident, $py:ident| $repr:expr) => {
        result_methods!(@impl $class, $fields, |$this, $py| $repr, {});
    };
    (@impl $class:ident, [$($field:ident),*], |$this:ident, $py:ident| $repr:expr, {$($extra:tt)*}) => {
        #[pymethods]
        impl $class {
            $($extra)*

            /// Equal when the objects the server sent are equal.
            fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
                other.cast::<Self>().is_ok_and(|o| o.get().raw == self.raw)
            }

            fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
                $(visit.call(&self.$field)?;)*
                let _ = visit;
                Ok(())
            }

            /// The object, as the server sent it (a fresh copy).
            fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
                to_py(py, &self.raw)
            }

            fn __repr__(&self, $py: Python<'_>) -> String {
                let $this = self;
                $repr
            }
        }
    };
}

/// A resource the server offers (`resources/list`).
#[pyclass(frozen, weakref, module = "mcp_resume", name = "Resource")]
pub struct PyResource {
    /// Its URI, for `read_resource`.
    #[pyo3(get)]
    uri: String,
    /// Its name.
    #[pyo3(get)]
    name: String,
    /// Human-readable title, if any.
    #[pyo3(get)]
    title: Option<String>,
    /// Description, if any.
    #[pyo3(get)]
    description: Option<String>,
    /// MIME type, if known.
    #[pyo3(get)]
    mime_type: Option<String>,
    /// Size in bytes, if known.
    #[pyo3(get)]
    size: Option<u64>,
    /// Usage hints (`audience`, `priority`, `lastModified`), as sent.
    #[pyo3(get)]
    annotations: Py<PyAny>,
    /// `_meta`, if any.
    #[pyo3(get)]
    meta: Py<PyAny>,
    raw: Value,
}

result_methods!(pickled PyResource, [annotations, meta], |r, _py| format!(
    "Resource(uri={:?}, name={:?})",
    r.uri, r.name
));

impl IntoPython for Resource {
    fn into_python(self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let value = PyResource {
            raw: json(&self)?,
            annotations: annotations(py, self.annotations.as_ref())?,
            meta: opt_to_py(py, self.meta.as_ref())?,
            uri: self.uri,
            name: self.name,
            title: self.title,
            description: self.description,
            mime_type: self.mime_type,
            size: self.size,
        };
        Ok(Py::new(py, value)?.into_any())
    }
}

/// A family of resources named by an RFC 6570 URI template (`resources/templates/list`).
#[pyclass(frozen, weakref, module = "mcp_resume", name = "ResourceTemplate")]
pub struct PyResourceTemplate {
    /// The URI template, as sent (never expanded).
    #[pyo3(get)]
    uri_template: String,
    /// Its name.
    #[pyo3(get)]
    name: String,
    /// Human-readable title, if any.
    #[pyo3(get)]
    title: Option<String>,
    /// Description, if any.
    #[pyo3(get)]
    description: Option<String>,
    /// MIME type of the resources it names, when they share one.
    #[pyo3(get)]
    mime_type: Option<String>,
    /// Usage hints, as sent.
    #[pyo3(get)]
    annotations: Py<PyAny>,
    /// `_meta`, if any.
    #[pyo3(get)]
    meta: Py<PyAny>,
    raw: Value,
}

result_methods!(pickled PyResourceTemplate, [annotations, meta], |t, _py| format!(
    "ResourceTemplate(uri_template={:?}, name={:?})",
    t.uri_template, t.name
));

impl IntoPython for ResourceTemplate {
    fn into_python(self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let value = PyResourceTemplate {
            raw: json(&self)?,
            annotations: annotations(py, self.annotations.as_ref())?,
            meta: opt_to_py(py, self.meta.as_ref())?,
            uri_template: self.uri_template,
            name: self.name,
            title: self.title,
            description: self.description,
            mime_type: self.mime_type,
        };
        Ok(Py::new(py, value)?.into_any())
    }
}

/// The contents of a resource, or of one of its parts: text or base64 `blob`.
#[pyclass(frozen, weakref, module = "mcp_resume", name = "ResourceContents")]
pub struct PyResourceContents {
    /// The URI these contents are of.
    #[pyo3(get)]
    uri: String,
    /// MIME type, if known.
    #[pyo3(get)]
    mime_type: Option<String>,
    /// The text, for a text resource.
    #[pyo3(get)]
    text: Option<String>,
    /// Base64-encoded bytes, for a binary resource.
    #[pyo3(get)]
    blob: Option<String>,
    /// `_meta`, if any.
    #[pyo3(get)]
    meta: Py<PyAny>,
    raw: Value,
}

result_methods!(PyResourceContents, [meta], |c, _py| format!(
    "ResourceContents(uri={:?})",
    c.uri
));

impl PyResourceContents {
    fn object(py: Python<'_>, contents: ResourceContents) -> PyResult<Py<PyAny>> {
        let value = PyResourceContents {
            raw: json(&contents)?,
            meta: opt_to_py(py, contents.meta.as_ref())?,
            uri: contents.uri,
            mime_type: contents.mime_type,
            text: contents.text,
            blob: contents.blob,
        };
        Ok(Py::new(py, value)?.into_any())
    }
}

/// The result of `resources/read`.
#[pyclass(frozen, weakref, module = "mcp_resume", name = "ReadResourceResult")]
pub struct PyReadResourceResult {
    /// The contents (one resource may have several parts).
    #[pyo3(get)]
    contents: Py<PyList>,
    /// The text parts joined by newlines.
    #[pyo3(get)]
    text: String,
    /// The result's `_meta`, if any.
    #[pyo3(get)]
    meta: Py<PyAny>,
    raw: Value,
}

result_methods!(pickled PyReadResourceResult, [contents, meta], |r, py| format!(
    "ReadResourceResult(contents={})",
    r.contents.bind(py).len()
));

impl IntoPython for ReadResourceResult {
    fn into_python(self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let value = PyReadResourceResult {
            raw: json(&self)?,
            text: self.text(),
            meta: opt_to_py(py, self.meta.as_ref())?,
            contents: list(py, self.contents, PyResourceContents::object)?,
        };
        Ok(Py::new(py, value)?.into_any())
    }
}

/// A prompt template the server offers (`prompts/list`).
#[pyclass(frozen, weakref, module = "mcp_resume", name = "Prompt")]
pub struct PyPrompt {
    /// Name to get it by.
    #[pyo3(get)]
    name: String,
    /// Human-readable title, if any.
    #[pyo3(get)]
    title: Option<String>,
    /// Description, if any.
    #[pyo3(get)]
    description: Option<String>,
    /// The arguments it takes.
    #[pyo3(get)]
    arguments: Py<PyList>,
    /// `_meta`, if any.
    #[pyo3(get)]
    meta: Py<PyAny>,
    raw: Value,
}

result_methods!(pickled PyPrompt, [arguments, meta], |p, _py| format!(
    "Prompt(name={:?})",
    p.name
));

impl IntoPython for Prompt {
    fn into_python(self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let value = PyPrompt {
            raw: json(&self)?,
            meta: opt_to_py(py, self.meta.as_ref())?,
            arguments: list(py, self.arguments, PyPromptArgument::object)?,
            name: self.name,
            title: self.title,
            description: self.description,
        };
        Ok(Py::new(py, value)?.into_any())
    }
}

/// One argument of a prompt.
#[pyclass(frozen, weakref, module = "mcp_resume", name = "PromptArgument")]
pub struct PyPromptArgument {
    /// Its name.
    #[pyo3(get)]
    name: String,
    /// Human-readable title, if any.
    #[pyo3(get)]
    title: Option<String>,
    /// Description, if any.
    #[pyo3(get)]
    description: Option<String>,
    /// Whether it must be given (`None` when the server did not say).
    #[pyo3(get)]
    required: Option<bool>,
    raw: Value,
}

result_methods!(PyPromptArgument, [], |a, _py| format!(
    "PromptArgument(name={:?})",
    a.name
));

impl PyPromptArgument {
    fn object(py: Python<'_>, argument: PromptArgument) -> PyResult<Py<PyAny>> {
        let value = PyPromptArgument {
            raw: json(&argument)?,
            name: argument.name,
            title: argument.title,
            description: argument.description,
            required: argument.required,
        };
        Ok(Py::new(py, value)?.into_any())
    }
}

/// The result of `prompts/get`: the rendered prompt.
#[pyclass(frozen, weakref, module = "mcp_resume", name = "GetPromptResult")]
pub struct PyGetPromptResult {
    /// Description of the rendered prompt, if any.
    #[pyo3(get)]
    description: Option<String>,
    /// The messages.
    #[pyo3(get)]
    messages: Py<PyList>,
    /// The result's `_meta`, if any.
    #[pyo3(get)]
    meta: Py<PyAny>,
    raw: Value,
}

result_methods!(pickled PyGetPromptResult, [messages, meta], |r, py| format!(
    "GetPromptResult(messages={})",
    r.messages.bind(py).len()
));

impl IntoPython for GetPromptResult {
    fn into_python(self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let value = PyGetPromptResult {
            raw: json(&self)?,
            meta: opt_to_py(py, self.meta.as_ref())?,
            messages: list(py, self.messages, PyPromptMessage::object)?,
            description: self.description,
        };
        Ok(Py::new(py, value)?.into_any())
    }
}

/// One message of a rendered prompt.
#[pyclass(frozen, weakref, module = "mcp_resume", name = "PromptMessage")]
pub struct PyPromptMessage {
    /// `"user"` or `"assistant"`.
    #[pyo3(get)]
    role: String,
    /// What is said.
    #[pyo3(get)]
    content: Py<PyContent>,
    raw: Value,
}

result_methods!(PyPromptMessage, [content], |m, _py| format!(
    "PromptMessage(role={:?})",
    m.role
));

impl PyPromptMessage {
    fn object(py: Python<'_>, message: PromptMessage) -> PyResult<Py<PyAny>> {
        let value = PyPromptMessage {
            raw: json(&message)?,
            role: role_name(&message.role),
            content: Py::new(py, PyContent::new(&message.content))?,
        };
        Ok(Py::new(py, value)?.into_any())
    }
}

/// Suggested values for the argument being completed (`completion/complete`).
#[pyclass(frozen, weakref, module = "mcp_resume", name = "Completion")]
pub struct PyCompletion {
    /// The suggestions (at most 100).
    #[pyo3(get)]
    values: Vec<String>,
    /// How many suggestions exist in all, if known.
    #[pyo3(get)]
    total: Option<u64>,
    /// Whether there are more than these, if the server said.
    #[pyo3(get)]
    has_more: Option<bool>,
    raw: Value,
}

result_methods!(pickled PyCompletion, [], |c, _py| format!(
    "Completion(values={:?})",
    c.values
));

impl IntoPython for Completion {
    fn into_python(self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let value = PyCompletion {
            raw: json(&self)?,
            values: self.values,
            total: self.total,
            has_more: self.has_more,
        };
        Ok(Py::new(py, value)?.into_any())
    }
}

/// One page of a `*/list` result (`list_tools_page` and its siblings).
#[pyclass(frozen, weakref, module = "mcp_resume", name = "Page")]
pub struct PyPage {
    /// The items of this page (`Tool`, `Resource`, `ResourceTemplate` or `Prompt`).
    #[pyo3(get)]
    items: Py<PyList>,
    /// The cursor of the next page; `None` on the last page.
    #[pyo3(get)]
    next_cursor: Option<String>,
    raw: Value,
}

#[pymethods]
impl PyPage {
    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.items)
    }

    /// The whole `result` member, as sent (a fresh copy).
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_py(py, &self.raw)
    }

    /// `Page[Resource]` in annotations.
    #[classmethod]
    fn __class_getitem__(cls: &Bound<'_, PyType>, item: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let py = cls.py();
        let alias = py.import("types")?.getattr("GenericAlias")?;
        Ok(alias.call1((cls, item))?.unbind())
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        format!(
            "Page(items={}, next_cursor={:?})",
            self.items.bind(py).len(),
            self.next_cursor
        )
    }
}

impl<T: IntoPython> IntoPython for Page<T> {
    fn into_python(self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let value = PyPage {
            items: list(py, self.items, |py, item| item.into_python(py))?,
            next_cursor: self.next_cursor,
            raw: self.raw,
        };
        Ok(Py::new(py, value)?.into_any())
    }
}

/// What `complete` completes: a prompt's argument.
#[pyclass(frozen, eq, module = "mcp_resume", name = "PromptReference")]
#[derive(PartialEq)]
pub struct PyPromptReference {
    /// The prompt's name.
    #[pyo3(get)]
    name: String,
}

#[pymethods]
impl PyPromptReference {
    /// The prompt named `name`.
    #[new]
    fn new(name: String) -> Self {
        PyPromptReference { name }
    }

    /// `{"type": "ref/prompt", "name": ...}`.
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_py(
            py,
            &serde_json::json!({"type": "ref/prompt", "name": self.name}),
        )
    }

    fn __repr__(&self) -> String {
        format!("PromptReference({:?})", self.name)
    }
}

/// What `complete` completes: a variable of a resource template.
#[pyclass(frozen, eq, module = "mcp_resume", name = "ResourceTemplateReference")]
#[derive(PartialEq)]
pub struct PyResourceTemplateReference {
    /// The URI template.
    #[pyo3(get)]
    uri: String,
}

#[pymethods]
impl PyResourceTemplateReference {
    /// The resource template whose URI template is `uri`.
    #[new]
    fn new(uri: String) -> Self {
        PyResourceTemplateReference { uri }
    }

    /// `{"type": "ref/resource", "uri": ...}`.
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_py(
            py,
            &serde_json::json!({"type": "ref/resource", "uri": self.uri}),
        )
    }

    fn __repr__(&self) -> String {
        format!("ResourceTemplateReference({:?})", self.uri)
    }
}

/// A `PromptReference`, a `ResourceTemplateReference`, or their dict
/// (`{"type": "ref/prompt", "name": ...}`, `{"type": "ref/resource", "uri": ...}`).
pub fn reference_from_py(reference: &Bound<'_, PyAny>) -> PyResult<CompletionReference> {
    if let Ok(r) = reference.cast::<PyPromptReference>() {
        return Ok(CompletionReference::prompt(r.get().name.clone()));
    }
    if let Ok(r) = reference.cast::<PyResourceTemplateReference>() {
        return Ok(CompletionReference::resource(r.get().uri.clone()));
    }
    let wrong = || {
        PyTypeError::new_err(
            "ref must be a PromptReference, a ResourceTemplateReference, or a dict \
             {\"type\": \"ref/prompt\", \"name\": ...} / {\"type\": \"ref/resource\", \"uri\": ...}",
        )
    };
    let mapping = reference.cast::<PyMapping>().map_err(|_| wrong())?;
    let member = |key: &str| -> PyResult<Option<String>> {
        match mapping.get_item(key) {
            Ok(value) => value.extract().map(Some).map_err(|_| wrong()),
            Err(_) => Ok(None),
        }
    };
    match (member("type")?.as_deref(), member("name")?, member("uri")?) {
        (Some("ref/prompt"), Some(name), _) => Ok(CompletionReference::prompt(name)),
        (Some("ref/resource"), _, Some(uri)) => Ok(CompletionReference::resource(uri)),
        _ => Err(wrong()),
    }
}

/// A logging level by name (a `LoggingLevel` member is a `str`).
pub fn logging_level(py: Python<'_>, name: &str) -> PyResult<LoggingLevel> {
    Ok(match name {
        "debug" => LoggingLevel::Debug,
        "info" => LoggingLevel::Info,
        "notice" => LoggingLevel::Notice,
        "warning" => LoggingLevel::Warning,
        "error" => LoggingLevel::Error,
        "critical" => LoggingLevel::Critical,
        "alert" => LoggingLevel::Alert,
        "emergency" => LoggingLevel::Emergency,
        other => {
            return Err(crate::errors::invalid_config(
                py,
                &format!(
                    "unknown logging level `{other}` (expected debug, info, notice, warning, \
                     error, critical, alert or emergency)"
                ),
            ))
        }
    })
}

/// Adds the classes of this file to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyResource>()?;
    m.add_class::<PyResourceTemplate>()?;
    m.add_class::<PyResourceContents>()?;
    m.add_class::<PyReadResourceResult>()?;
    m.add_class::<PyPrompt>()?;
    m.add_class::<PyPromptArgument>()?;
    m.add_class::<PyGetPromptResult>()?;
    m.add_class::<PyPromptMessage>()?;
    m.add_class::<PyCompletion>()?;
    m.add_class::<PyPage>()?;
    m.add_class::<PyPromptReference>()?;
    m.add_class::<PyResourceTemplateReference>()?;
    Ok(())
}

/// Rebuilds a pickled model of `class` from its JSON; `None` for a class not modelled here.
pub fn unpickle(py: Python<'_>, class: &str, raw: Value) -> Option<PyResult<Py<PyAny>>> {
    fn read<T: serde::de::DeserializeOwned + IntoPython>(
        py: Python<'_>,
        raw: Value,
    ) -> PyResult<Py<PyAny>> {
        serde_json::from_value::<T>(raw)
            .map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))?
            .into_python(py)
    }
    Some(match class {
        "Resource" => read::<Resource>(py, raw),
        "ResourceTemplate" => read::<ResourceTemplate>(py, raw),
        "ReadResourceResult" => read::<ReadResourceResult>(py, raw),
        "Prompt" => read::<Prompt>(py, raw),
        "GetPromptResult" => read::<GetPromptResult>(py, raw),
        "Completion" => read::<Completion>(py, raw),
        _ => return None,
    })
}
