//! The resume-safety guard for Python servers: `mcp_resume.server.ResumeSafetyMiddleware`
//! drives `mcp_resume_server::skin` through these classes. It converts and forwards: every
//! rule, the store steps, a response's rewriting and when its head may go are the server
//! crate's.
//!
//! A step that leaves no store operation to run answers at once (a tuple, or a `RawStep`);
//! one that does runs them here first when they finish without waiting (the in-memory store
//! always does), and otherwise returns an awaitable resolved on the binding's runtime. The
//! event loop never waits on the store. A response's store operations run to their end even
//! when that awaitable is cancelled.

use std::future::Future;
use std::sync::{Mutex, MutexGuard};

use bytes::Bytes;
use futures::FutureExt;
use mcp_resume_server::guard::Body;
use mcp_resume_server::ids::InstanceId;
use mcp_resume_server::skin::{
    self, End, GuardBuilder, Inbound, Next, Outbound, SharedGuard, ToClient,
};
use mcp_resume_server::{store, Error, ErrorKind};
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};

use crate::bridge::awaitable;
use crate::convert::{seconds, size, IntoPython};
use crate::errors;

/// The guard of one process and its store; use `mcp_resume.server.ResumeSafetyMiddleware`.
#[pyclass(frozen, module = "mcp_resume._mcp_resume", name = "RawGuard")]
pub struct RawGuard {
    guard: SharedGuard,
}

#[pymethods]
impl RawGuard {
    /// Reads the options onto the server crate's `GuardBuilder` (every default is its own)
    /// and opens the store: `"memory"` (the default) or a `redis://` URL, connected here.
    #[new]
    #[pyo3(signature = (*, store=None, instance_id=None, max_body=None, lease=None,
        resume_checks=None, idempotency=None, retry_after=None, key_scope_header=None,
        seed=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        store: Option<String>,
        instance_id: Option<String>,
        max_body: Option<i64>,
        lease: Option<f64>,
        resume_checks: Option<bool>,
        idempotency: Option<bool>,
        retry_after: Option<f64>,
        key_scope_header: Option<String>,
        seed: Option<u64>,
    ) -> PyResult<Self> {
        let spec = store.unwrap_or_default();
        let runtime = pyo3_async_runtimes::tokio::get_runtime();
        let opened = py.detach(|| runtime.block_on(store::open(&spec)));
        let mut b = GuardBuilder::with_shared_store(opened.map_err(|e| to_py_err(py, &e))?);
        if let Some(id) = instance_id {
            let id = InstanceId::new(id).map_err(|e| errors::invalid_config(py, &e.to_string()))?;
            b = b.instance_id(id);
        }
        if let Some(n) = max_body {
            b = b.max_body(size(py, n, "max_body")?);
        }
        if let Some(s) = lease {
            b = b.lease(seconds(py, s, "lease")?);
        }
        if let Some(on) = resume_checks {
            b = b.resume_checks(on);
        }
        if let Some(on) = idempotency {
            b = b.idempotency(on);
        }
        if let Some(s) = retry_after {
            b = b.retry_after(seconds(py, s, "retry_after")?.as_secs());
        }
        if let Some(name) = key_scope_header {
            let name = http::HeaderName::try_from(name.as_str()).map_err(|_| {
                errors::invalid_config(py, "key_scope_header must be an HTTP header name")
            })?;
            b = b.key_scope_header(name);
        }
        if let Some(seed) = seed {
            b = b.seed(seed);
        }
        Ok(Self { guard: b.build() })
    }

    /// The instance name this guard writes as owner.
    #[getter]
    fn instance_id(&self) -> String {
        self.guard.config().instance().as_str().to_owned()
    }

    /// A request head arrived (`headers`: ASGI's `[(name, value)]` byte pairs): the first
    /// `RawStep`, or an awaitable of it when the store must be asked.
    fn begin(
        &self,
        py: Python<'_>,
        method: &str,
        headers: &Bound<'_, PyAny>,
    ) -> PyResult<Py<PyAny>> {
        let method = http::Method::from_bytes(method.as_bytes())
            .map_err(|_| pyo3::exceptions::PyValueError::new_err("not an HTTP method"))?;
        let headers = header_map(headers)?;
        let inbound = self.guard.begin(&method, &headers);
        next_step(py, inbound, headers)
    }
}

/// What the middleware does next with a request: `kind` is `"read_body"` (read up to `limit`
/// bytes, then `body`), `"pass"`, `"forward"` (`outbound`, `last_event_id`) or `"answer"`
/// (`answer`: status, headers, body).
#[pyclass(frozen, module = "mcp_resume._mcp_resume", name = "RawStep")]
pub struct RawStep {
    kind: &'static str,
    limit: usize,
    inbound: Mutex<Option<(Inbound, http::HeaderMap)>>,
    outbound: Mutex<Option<Py<RawOutbound>>>,
    last_event_id: Option<Vec<u8>>,
    answer: Mutex<Option<Py<PyAny>>>,
}

#[pymethods]
impl RawStep {
    /// `"read_body"`, `"pass"`, `"forward"` or `"answer"`.
    #[getter]
    fn kind(&self) -> &'static str {
        self.kind
    }

    /// The most body bytes to read (`"read_body"`).
    #[getter]
    fn limit(&self) -> usize {
        self.limit
    }

    /// The response's driver (`"forward"`), once.
    fn take_outbound(&self) -> Option<Py<RawOutbound>> {
        lock(&self.outbound).take()
    }

    /// The `Last-Event-ID` to forward instead of the client's (`"forward"` of a resume).
    #[getter]
    fn last_event_id<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyBytes>> {
        self.last_event_id.as_deref().map(|v| PyBytes::new(py, v))
    }

    /// `(status, headers, body)` to send (`"answer"`), once.
    fn take_answer(&self) -> Option<Py<PyAny>> {
        lock(&self.answer).take()
    }

    /// The body was read (`"read_body"`): its bytes (past `limit` when it is longer: what was
    /// read of it, looked through for a key), or `None` when nothing of it is given. The next
    /// `RawStep`, or an awaitable of it.
    fn body(&self, py: Python<'_>, data: Option<&[u8]>) -> PyResult<Py<PyAny>> {
        let Some((mut inbound, headers)) = lock(&self.inbound).take() else {
            return Err(PyRuntimeError::new_err(
                "this step's body was already given",
            ));
        };
        let body = match data {
            Some(bytes) if bytes.len() > self.limit => Body::TooLarge(bytes),
            Some(bytes) => Body::Complete(bytes),
            None => Body::TooLarge(&[]),
        };
        inbound.handle_body(body, &headers);
        next_step(py, inbound, headers)
    }
}

/// Runs the inbound's next store steps (here if they need no waiting) to its next step.
fn next_step(
    py: Python<'_>,
    mut inbound: Inbound,
    headers: http::HeaderMap,
) -> PyResult<Py<PyAny>> {
    let fut = async move {
        let next = inbound.next().await;
        StepOut {
            next,
            inbound,
            headers,
        }
    };
    now_or_awaitable(py, fut)
}

/// A finished `Inbound::next`, converted on the loop's thread.
struct StepOut {
    next: Next,
    inbound: Inbound,
    headers: http::HeaderMap,
}

impl IntoPython for StepOut {
    fn into_python(self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let mut step = RawStep {
            kind: "pass",
            limit: 0,
            inbound: Mutex::new(None),
            outbound: Mutex::new(None),
            last_event_id: None,
            answer: Mutex::new(None),
        };
        match self.next {
            Next::ReadBody { limit } => {
                step.kind = "read_body";
                step.limit = limit;
                step.inbound = Mutex::new(Some((self.inbound, self.headers)));
            }
            Next::Pass => {}
            Next::Forward(out) => {
                step.kind = "forward";
                step.last_event_id = out.last_event_id().map(|v| v.as_bytes().to_vec());
                let out = Py::new(
                    py,
                    RawOutbound {
                        inner: Mutex::new(Some(out)),
                    },
                )?;
                step.outbound = Mutex::new(Some(out));
            }
            Next::Answer(answer) => {
                step.kind = "answer";
                let sent = ToSend(skin::answer_to_client(answer)).into_python(py)?;
                step.answer = Mutex::new(Some(sent));
            }
        }
        Ok(Py::new(py, step)?.into_any())
    }
}

/// One response on its way out: push the inner app's head, body chunks and end; each
/// returns `(head, body, end)` to send (`head`: `None` or `(status, [(name, value)])`,
/// `end`: `None`, `"complete"` or `"abort"`), or an awaitable of it when the store must be
/// written first.
#[pyclass(frozen, module = "mcp_resume._mcp_resume", name = "RawOutbound")]
pub struct RawOutbound {
    inner: Mutex<Option<Outbound>>,
}

impl RawOutbound {
    fn with<R>(&self, f: impl FnOnce(&mut Outbound) -> R) -> PyResult<R> {
        match lock(&self.inner).as_mut() {
            Some(out) => Ok(f(out)),
            None => Err(PyRuntimeError::new_err("this response is finished")),
        }
    }

    /// `step`'s output, once its store operations ran.
    fn send(
        &self,
        py: Python<'_>,
        step: impl FnOnce(&mut Outbound) -> ToClient,
    ) -> PyResult<Py<PyAny>> {
        let (to_client, ops) = self.with(|out| {
            let to_client = step(out);
            (to_client, out.take_ops())
        })?;
        if ops.is_empty() {
            return ToSend(to_client).into_python(py);
        }
        now_or_spawned(py, async move {
            ops.run().await;
            ToSend(to_client)
        })
    }
}

#[pymethods]
impl RawOutbound {
    /// The inner app's `http.response.start`.
    fn head(&self, py: Python<'_>, status: u16, headers: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let status = http::StatusCode::from_u16(status)
            .map_err(|_| pyo3::exceptions::PyValueError::new_err("not an HTTP status"))?;
        let headers = header_map(headers)?;
        self.send(py, |out| out.handle_head(status, headers))
    }

    /// A chunk of the inner app's body.
    fn body(&self, py: Python<'_>, chunk: &[u8]) -> PyResult<Py<PyAny>> {
        self.send(py, |out| out.handle_body(chunk))
    }

    /// The inner app's body ended (`clean`: it ended its response; not: it failed).
    fn end(&self, py: Python<'_>, clean: bool) -> PyResult<Py<PyAny>> {
        self.send(py, |out| out.handle_end(clean))
    }

    /// Whether the inner app must run to its end even if the client has gone (a keyed call
    /// whose answer is not stored yet).
    #[getter]
    fn must_drain(&self) -> PyResult<bool> {
        self.with(|out| out.must_drain())
    }

    /// Whether the call is keyed: the client's leaving must not reach the inner app.
    #[getter]
    fn keyed(&self) -> PyResult<bool> {
        self.with(|out| out.is_keyed())
    }

    /// Whether body chunks now pass unchanged (send them without `body`).
    #[getter]
    fn untouched(&self) -> PyResult<bool> {
        self.with(|out| out.is_untouched())
    }

    /// Done with it: a keyed call that did not reach its end is recorded as such.
    fn close(&self) {
        let out = lock(&self.inner).take();
        drop_on_runtime(out);
    }
}

impl Drop for RawOutbound {
    fn drop(&mut self) {
        let out = lock(&self.inner).take();
        drop_on_runtime(out);
    }
}

/// Drops an outbound where its last store operations can be spawned.
fn drop_on_runtime(out: Option<Outbound>) {
    if let Some(out) = out {
        let _entered = pyo3_async_runtimes::tokio::get_runtime().enter();
        drop(out);
    }
}

/// What to send, as `(head, body, end)`.
struct ToSend(ToClient);

impl IntoPython for ToSend {
    fn into_python(self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let ToClient {
            head, body, end, ..
        } = self.0;
        let head = match head {
            Some((status, headers)) => {
                let pairs = headers
                    .iter()
                    .map(|(name, value)| {
                        PyTuple::new(
                            py,
                            [
                                PyBytes::new(py, name.as_str().as_bytes()),
                                PyBytes::new(py, value.as_bytes()),
                            ],
                        )
                    })
                    .collect::<PyResult<Vec<_>>>()?;
                (status.as_u16(), PyList::new(py, pairs)?)
                    .into_pyobject(py)?
                    .into_any()
                    .unbind()
            }
            None => py.None(),
        };
        let end = match end {
            None => py.None(),
            Some(End::Complete) => pyo3::intern!(py, "complete").clone().into_any().unbind(),
            Some(End::Abort) => pyo3::intern!(py, "abort").clone().into_any().unbind(),
        };
        let body = bytes_to_py(py, &body);
        Ok(PyTuple::new(py, [head, body, end])?.into_any().unbind())
    }
}

fn bytes_to_py(py: Python<'_>, body: &Bytes) -> Py<PyAny> {
    PyBytes::new(py, body).into_any().unbind()
}

/// Polls `fut` once here (inside the runtime, for stores that need it): its output at once
/// when it needs no waiting, else an awaitable that finishes it on the runtime.
fn now_or_awaitable<T, F>(py: Python<'_>, fut: F) -> PyResult<Py<PyAny>>
where
    T: IntoPython,
    F: Future<Output = T> + Send + 'static,
{
    let mut fut = Box::pin(fut);
    let ready = {
        let _entered = pyo3_async_runtimes::tokio::get_runtime().enter();
        fut.as_mut().now_or_never()
    };
    match ready {
        Some(out) => out.into_python(py),
        None => Ok(awaitable(py, fut)?.unbind()),
    }
}

/// As [`now_or_awaitable`], but what is left of `fut` runs on a task of its own, to its end
/// even when the awaitable is cancelled: a response's store operations must not stop halfway
/// because the request's task was (a server shutting down, or cancelling the app as its
/// client left), or a keyed call's answer that found its claim gone would never be stored
/// again, and a re-send would run the call again.
fn now_or_spawned<T, F>(py: Python<'_>, fut: F) -> PyResult<Py<PyAny>>
where
    T: IntoPython + Send + 'static,
    F: Future<Output = T> + Send + 'static,
{
    let mut fut = Box::pin(fut);
    let runtime = pyo3_async_runtimes::tokio::get_runtime();
    let ready = {
        let _entered = runtime.enter();
        fut.as_mut().now_or_never()
    };
    if let Some(out) = ready {
        return out.into_python(py);
    }
    // Dropping a join handle leaves its task running.
    let task = runtime.spawn(fut);
    let joined = awaitable(py, async move {
        match task.await {
            Ok(out) => out,
            // Carried over so that the awaitable fails as it does for a panic of its own.
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(_) => panic!("the runtime stopped before the store operations ran"),
        }
    })?;
    Ok(joined.unbind())
}

/// ASGI headers (an iterable of `(name, value)` byte pairs) as a header map.
fn header_map(headers: &Bound<'_, PyAny>) -> PyResult<http::HeaderMap> {
    let mut pairs: Vec<(Bound<'_, PyBytes>, Bound<'_, PyBytes>)> = Vec::new();
    for item in headers.try_iter()? {
        let item = item?;
        let name = item.get_item(0)?.cast_into::<PyBytes>()?;
        let value = item.get_item(1)?.cast_into::<PyBytes>()?;
        pairs.push((name, value));
    }
    Ok(skin::header_map(
        pairs.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())),
    ))
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The server crate's error as a Python exception: `InvalidConfigError` for a bad setting,
/// `ConnectionError` for a store that cannot be reached.
fn to_py_err(py: Python<'_>, err: &Error) -> PyErr {
    match err.kind() {
        ErrorKind::InvalidConfig => errors::invalid_config(py, &err.to_string()),
        _ => pyo3::exceptions::PyConnectionError::new_err(format!(
            "the resume-safety store cannot be reached: {err}"
        )),
    }
}
