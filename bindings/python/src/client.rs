//! The SDK's `Client` for Python: construction from keyword arguments, and every network
//! method as an asyncio awaitable driven by the binding's tokio runtime.
//!
//! `mcp_resume.Client` (Python) wraps this class so that its methods are true coroutine
//! functions: an awaitable made here belongs to the event loop running when the method is
//! called, which `asyncio.run(client.connect())` would not have yet.

use std::future::Future;
use std::sync::Arc;

use mcp_resume::{Client, Error, ToolCall};
use pyo3::exceptions::PyTypeError;
use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyMapping, PyModule, PyString};
use pyo3::PyTraverseError;

use crate::convert::{from_py, opt_from_py, seconds, size, IntoPython, Reply};
use crate::errors;
use crate::handler::HandlerSlot;
use crate::streams::{EventStream, NotificationStream};
use crate::types::{
    era_from_str, era_to_py, resend_policy_from_str, PyEraCache, PyExtensionStatus,
    PyReconnectPolicy,
};

/// The low-level client; use `mcp_resume.Client`.
#[pyclass(frozen, module = "mcp_resume._mcp_resume", name = "RawClient")]
pub struct RawClient {
    client: Client,
    handler: Arc<HandlerSlot>,
    url: String,
}

#[pymethods]
impl RawClient {
    #[new]
    #[pyo3(signature = (url, *, capabilities=None, client_info=None, protocol_version=None,
        era=None, era_cache=None, bearer_token=None, headers=None, call_timeout=None,
        connect_timeout=None, reconnect=None, resend_policy=None, max_event_size=None,
        max_body_size=None, open_listen_stream=None, jitter_seed=None, on_server_request=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        url: String,
        capabilities: Option<Bound<'_, PyAny>>,
        client_info: Option<(String, String)>,
        protocol_version: Option<String>,
        era: Option<String>,
        era_cache: Option<PyRef<'_, PyEraCache>>,
        bearer_token: Option<String>,
        headers: Option<Bound<'_, PyAny>>,
        call_timeout: Option<f64>,
        connect_timeout: Option<f64>,
        reconnect: Option<PyRef<'_, PyReconnectPolicy>>,
        resend_policy: Option<String>,
        max_event_size: Option<i64>,
        max_body_size: Option<i64>,
        open_listen_stream: Option<bool>,
        jitter_seed: Option<u64>,
        on_server_request: Option<Py<PyAny>>,
    ) -> PyResult<Self> {
        let handler = Arc::new(HandlerSlot::default());
        if let Some(callback) = on_server_request {
            handler.set(Some(callable(py, callback)?));
        }
        let mut b = Client::builder(url.clone());
        if let Some(caps) = opt_from_py(capabilities.as_ref())? {
            b = b.client_capabilities(caps);
        }
        if let Some((name, version)) = client_info {
            b = b.client_info(name, version);
        }
        if let Some(version) = protocol_version {
            b = b.protocol_version(version);
        }
        if let Some(era) = era {
            b = b.era(era_from_str(py, &era)?);
        }
        if let Some(cache) = era_cache {
            b = b.era_cache(cache.inner.clone());
        }
        if let Some(token) = bearer_token {
            b = b.bearer_token(token);
        }
        if let Some(headers) = headers {
            for (name, value) in header_pairs(&headers)? {
                b = b.header(name, value);
            }
        }
        if let Some(t) = call_timeout {
            b = b.call_timeout(seconds(py, t, "call_timeout")?);
        }
        if let Some(t) = connect_timeout {
            b = b.connect_timeout(seconds(py, t, "connect_timeout")?);
        }
        if let Some(policy) = reconnect {
            b = b.reconnect(policy.inner.clone());
        }
        if let Some(policy) = resend_policy {
            b = b.resend_policy(resend_policy_from_str(py, &policy)?);
        }
        if let Some(n) = max_event_size {
            b = b.max_event_size(size(py, n, "max_event_size")?);
        }
        if let Some(n) = max_body_size {
            b = b.max_body_size(size(py, n, "max_body_size")?);
        }
        if let Some(open) = open_listen_stream {
            b = b.open_listen_stream(open);
        }
        if let Some(seed) = jitter_seed {
            b = b.jitter_seed(seed);
        }
        let forward = handler.clone();
        b = b.on_server_request(move |request| forward.clone().answer(request));
        let client = b.build().map_err(|e| errors::to_py_err(py, &e))?;
        Ok(RawClient {
            client,
            handler,
            url,
        })
    }

    fn connect<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let client = self.client.clone();
        self.run(py, async move { client.connect().await })
    }

    fn list_tools<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let client = self.client.clone();
        self.run(py, async move { client.list_tools().await })
    }

    #[pyo3(signature = (name, arguments=None, *, idempotency_key=None, timeout=None,
        progress=None, meta=None))]
    #[allow(clippy::too_many_arguments)]
    fn call_tool<'py>(
        &self,
        py: Python<'py>,
        name: String,
        arguments: Option<Bound<'py, PyAny>>,
        idempotency_key: Option<Bound<'py, PyAny>>,
        timeout: Option<f64>,
        progress: Option<Bound<'py, PyAny>>,
        meta: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let arguments = opt_from_py(arguments.as_ref())?.unwrap_or_default();
        let mut call = ToolCall::new(name, arguments);
        if let Some(key) = idempotency_key {
            call = call.idempotency_key(key_string(py, &key)?);
        }
        if let Some(t) = timeout {
            call = call.timeout(seconds(py, t, "timeout")?);
        }
        if let Some(meta) = meta {
            let meta = meta.cast::<PyMapping>().map_err(|_| {
                PyTypeError::new_err("meta must be a mapping of str to JSON values")
            })?;
            for item in meta.items()?.iter() {
                let (key, value): (String, Bound<'py, PyAny>) = item.extract()?;
                call = call.meta(key, from_py(&value)?);
            }
        }
        if let Some(token) = opt_from_py(progress.as_ref())? {
            call = call.progress_token(token);
        }
        let client = self.client.clone();
        self.run(py, async move { client.call_tool(call).await })
    }

    #[pyo3(signature = (method, params=None))]
    fn request<'py>(
        &self,
        py: Python<'py>,
        method: String,
        params: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let params = opt_from_py(params.as_ref())?;
        let client = self.client.clone();
        self.run(py, async move { client.request(&method, params).await })
    }

    #[pyo3(signature = (method, params=None))]
    fn notify<'py>(
        &self,
        py: Python<'py>,
        method: String,
        params: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let params = opt_from_py(params.as_ref())?;
        let client = self.client.clone();
        self.run(py, async move { client.notify(&method, params).await })
    }

    fn ping<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let client = self.client.clone();
        self.run(py, async move { client.ping().await })
    }

    fn resume_task<'py>(&self, py: Python<'py>, task_id: String) -> PyResult<Bound<'py, PyAny>> {
        let client = self.client.clone();
        self.run(py, async move { client.resume_task(&task_id).await })
    }

    fn close<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let client = self.client.clone();
        self.run(py, async move { client.close().await })
    }

    #[getter]
    fn era(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        self.client.era().map(|era| era_to_py(py, era)).transpose()
    }

    #[getter]
    fn extension_status(&self) -> Option<PyExtensionStatus> {
        self.client.extension_status().map(PyExtensionStatus::from)
    }

    #[getter]
    fn url(&self) -> &str {
        &self.url
    }

    fn events(&self) -> EventStream {
        EventStream::new(self.client.events())
    }

    fn notifications(&self) -> NotificationStream {
        NotificationStream::new(self.client.notifications())
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        self.handler.traverse(&visit)
    }

    fn __clear__(&self) {
        self.handler.set(None);
    }

    #[getter]
    fn server_request_handler(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.handler.callback(py)
    }

    #[setter]
    fn set_server_request_handler(
        &self,
        py: Python<'_>,
        callback: Option<Py<PyAny>>,
    ) -> PyResult<()> {
        let callback = match callback {
            Some(c) if !c.is_none(py) => Some(callable(py, c)?),
            _ => None,
        };
        self.handler.set(callback);
        Ok(())
    }
}

impl RawClient {
    /// `fut` as an awaitable of the running event loop; dropping it (the task was cancelled)
    /// drops the SDK's future, which cancels the call.
    fn run<'py, T: IntoPython>(
        &self,
        py: Python<'py>,
        fut: impl Future<Output = Result<T, Error>> + Send + 'static,
    ) -> PyResult<Bound<'py, PyAny>> {
        let awaitable = crate::bridge::awaitable(py, async move { Reply(fut.await) })?;
        self.handler.remember_loop(py, &awaitable)?;
        Ok(awaitable)
    }
}

fn callable(py: Python<'_>, callback: Py<PyAny>) -> PyResult<Py<PyAny>> {
    if callback.bind(py).is_callable() {
        Ok(callback)
    } else {
        Err(PyTypeError::new_err(
            "on_server_request must be a callable (an async def taking a ServerRequest)",
        ))
    }
}

/// A mapping of names to values, or an iterable of `(name, value)` pairs (to repeat a name).
fn header_pairs(headers: &Bound<'_, PyAny>) -> PyResult<Vec<(String, String)>> {
    let pairs = match headers.cast::<PyMapping>() {
        Ok(mapping) => mapping.items()?.into_any(),
        Err(_) => headers.clone(),
    };
    pairs
        .try_iter()?
        .map(|pair| pair?.extract::<(String, String)>())
        .collect::<PyResult<Vec<_>>>()
        .map_err(|_| {
            PyTypeError::new_err(
                "headers must be a mapping of str to str or an iterable of (str, str) pairs",
            )
        })
}

/// A `str` or a `uuid.UUID` (its canonical text, as the SDK formats its own UUID keys).
fn key_string(py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<String> {
    if let Ok(s) = key.cast::<PyString>() {
        return Ok(s.to_str()?.to_owned());
    }
    static UUID: PyOnceLock<Py<PyModule>> = PyOnceLock::new();
    let uuid = UUID.get_or_try_init(py, || Ok::<_, PyErr>(py.import("uuid")?.unbind()))?;
    if key.is_instance(&uuid.bind(py).getattr("UUID")?)? {
        return Ok(key.str()?.to_str()?.to_owned());
    }
    Err(PyTypeError::new_err(
        "idempotency_key must be a str or a uuid.UUID",
    ))
}
