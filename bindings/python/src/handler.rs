//! Server-to-client requests answered by Python callbacks.
//!
//! The SDK takes its handlers when the client is built. The generic one
//! (`on_server_request`) is always registered as a forwarder to its slot, so Python code may
//! set or replace it at any time; an empty slot answers exactly as the SDK does without a
//! handler. A typed one (`on_sampling`, `on_elicitation`, `on_roots`) declares its capability
//! at `initialize`, so it is registered on the builder only when its slot holds a callback
//! by the time the client is built (see `client.rs`); the SDK then types the request, and
//! the answer the callback returns is typed here before the SDK sends it.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};

use mcp_resume::client::models::{
    CreateMessageRequest, CreateMessageResult, ElicitRequest, ElicitResult, Root,
};
use mcp_resume::{RequestContext, RpcError, ServerRequest};
use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyModule};
use pyo3::PyTraverseError;
use pyo3_async_runtimes::TaskLocals;
use serde_json::Value;

use crate::convert::{from_py, opt_from_py};
use crate::requests::{
    elicit_answer, roots_answer, sampling_answer, PyCreateMessageRequest, PyElicitRequest,
    PyListRootsRequest,
};
use crate::types::PyServerRequest;

/// Which callback: the generic one, or a typed one of the SDK's builder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    ServerRequest = 0,
    Sampling = 1,
    Elicitation = 2,
    Roots = 3,
}

impl Kind {
    /// The typed kinds, each declaring a client capability when registered.
    pub const TYPED: [Kind; 3] = [Kind::Sampling, Kind::Elicitation, Kind::Roots];

    /// The name of its registration (keyword argument and decorator).
    pub fn registration(self) -> &'static str {
        match self {
            Kind::ServerRequest => "on_server_request",
            Kind::Sampling => "on_sampling",
            Kind::Elicitation => "on_elicitation",
            Kind::Roots => "on_roots",
        }
    }
}

/// The Python callbacks of one client, and the event loop their coroutines run on.
#[derive(Default)]
pub struct Handlers {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    callbacks: [Option<Py<PyAny>>; 4],
    /// The event loop (and context) of the latest call into the client: coroutines the
    /// callbacks return run there.
    locals: Option<TaskLocals>,
}

type Pending = Pin<Box<dyn Future<Output = PyResult<Py<PyAny>>> + Send>>;

enum Started {
    Ready(Py<PyAny>),
    Pending(Pending),
}

impl Handlers {
    // The lock is only ever taken while attached to the interpreter and never held across an
    // attach, so it cannot deadlock against the GIL.
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Puts `callback` in `kind`'s slot and returns the previous one, which the caller drops
    /// once it holds no lock (dropping it may run Python code: its finalizers).
    #[must_use]
    pub fn replace(&self, kind: Kind, callback: Option<Py<PyAny>>) -> Option<Py<PyAny>> {
        std::mem::replace(&mut self.lock().callbacks[kind as usize], callback)
    }

    /// Empties every slot.
    pub fn clear(&self) {
        let previous = std::mem::take(&mut self.lock().callbacks);
        drop(previous);
    }

    /// Whether `kind`'s slot holds a callback.
    pub fn is_set(&self, kind: Kind) -> bool {
        self.lock().callbacks[kind as usize].is_some()
    }

    /// Reports the callbacks to the garbage collector: a handler that refers to its own
    /// client (a decorated closure) makes a cycle through this slot.
    pub fn traverse(&self, visit: &PyVisit<'_>) -> Result<(), PyTraverseError> {
        // Never blocks: the lock is only held briefly by a thread attached to the
        // interpreter, which the collector's thread is.
        if let Ok(state) = self.state.try_lock() {
            for callback in state.callbacks.iter().flatten() {
                visit.call(callback)?;
            }
        }
        Ok(())
    }

    pub fn callback(&self, py: Python<'_>, kind: Kind) -> Option<Py<PyAny>> {
        self.lock().callbacks[kind as usize]
            .as_ref()
            .map(|c| c.clone_ref(py))
    }

    /// Records the loop `awaitable` belongs to (the loop of the latest call).
    pub fn remember_loop(&self, py: Python<'_>, awaitable: &Bound<'_, PyAny>) -> PyResult<()> {
        let event_loop = awaitable.call_method0(pyo3::intern!(py, "get_loop"))?;
        let previous = {
            let mut state = self.lock();
            let known = state
                .locals
                .as_ref()
                .is_some_and(|l| l.event_loop(py).is(&event_loop));
            if known {
                return Ok(());
            }
            state.locals.replace(TaskLocals::new(event_loop))
        };
        drop(previous);
        Ok(())
    }

    /// The generic handler: a `ServerRequest` in, the JSON result out.
    pub async fn server_request(
        self: Arc<Self>,
        request: ServerRequest,
    ) -> Result<Value, RpcError> {
        let method = request.method.clone();
        self.call(
            Kind::ServerRequest,
            method,
            move |py| Ok(Py::new(py, PyServerRequest::new(py, &request)?)?.into_any()),
            from_py,
        )
        .await
    }

    /// `sampling/createMessage`, typed by the SDK.
    pub async fn sampling(
        self: Arc<Self>,
        request: CreateMessageRequest,
        ctx: RequestContext,
    ) -> Result<CreateMessageResult, RpcError> {
        let method = ctx.method().to_owned();
        self.call(
            Kind::Sampling,
            method,
            move |py| Ok(Py::new(py, PyCreateMessageRequest::new(py, request, &ctx)?)?.into_any()),
            sampling_answer,
        )
        .await
    }

    /// `elicitation/create`, typed by the SDK.
    pub async fn elicitation(
        self: Arc<Self>,
        request: ElicitRequest,
        ctx: RequestContext,
    ) -> Result<ElicitResult, RpcError> {
        let method = ctx.method().to_owned();
        self.call(
            Kind::Elicitation,
            method,
            move |py| Ok(Py::new(py, PyElicitRequest::new(py, request, &ctx)?)?.into_any()),
            elicit_answer,
        )
        .await
    }

    /// `roots/list`: the SDK wraps the roots in its answer.
    pub async fn roots(self: Arc<Self>, ctx: RequestContext) -> Result<Vec<Root>, RpcError> {
        let method = ctx.method().to_owned();
        self.call(
            Kind::Roots,
            method,
            move |py| Ok(Py::new(py, PyListRootsRequest::new(py, &ctx)?)?.into_any()),
            roots_answer,
        )
        .await
    }

    /// Calls `kind`'s callback with the argument `arg` builds, and converts its answer (or
    /// exception) with `convert`.
    async fn call<T, A, C>(
        self: Arc<Self>,
        kind: Kind,
        method: String,
        arg: A,
        convert: C,
    ) -> Result<T, RpcError>
    where
        T: Send + 'static,
        A: FnOnce(Python<'_>) -> PyResult<Py<PyAny>> + Send + 'static,
        C: FnOnce(&Bound<'_, PyAny>) -> PyResult<T> + Send + 'static,
    {
        // The GIL is taken on the blocking pool, never on a runtime worker, so Python code
        // holding it cannot stall the client's driver.
        let started = attached({
            let slots = self.clone();
            let method = method.clone();
            move |py| slots.start(py, kind, &method, arg)
        })
        .await?;
        let outcome = match started {
            Started::Ready(value) => Ok(value),
            Started::Pending(future) => future.await,
        };
        attached(move |py| match outcome {
            Ok(value) => convert(value.bind(py)).map_err(|e| failure(py, &method, &e)),
            Err(e) => Err(failure(py, &method, &e)),
        })
        .await
    }

    fn start<A>(
        &self,
        py: Python<'_>,
        kind: Kind,
        method: &str,
        arg: A,
    ) -> Result<Started, RpcError>
    where
        A: FnOnce(Python<'_>) -> PyResult<Py<PyAny>>,
    {
        let (callback, locals) = {
            let state = self.lock();
            (
                state.callbacks[kind as usize]
                    .as_ref()
                    .map(|c| c.clone_ref(py)),
                state.locals.clone(),
            )
        };
        let Some(callback) = callback else {
            return Err(RpcError::new(
                RpcError::METHOD_NOT_FOUND,
                format!("method not found: {method}"),
            ));
        };
        let run = || -> PyResult<Started> {
            let returned = callback.bind(py).call1((arg(py)?,))?;
            if !is_awaitable(py, &returned)? {
                return Ok(Started::Ready(returned.unbind()));
            }
            let Some(locals) = locals else {
                return Err(pyo3::exceptions::PyRuntimeError::new_err(
                    "the handler returned an awaitable, but no event loop has used this \
                     client yet",
                ));
            };
            let future = pyo3_async_runtimes::into_future_with_locals(&locals, returned)?;
            Ok(Started::Pending(Box::pin(future)))
        };
        run().map_err(|e| failure(py, method, &e))
    }
}

/// Runs `f` attached to the interpreter on tokio's blocking pool.
async fn attached<T, F>(f: F) -> Result<T, RpcError>
where
    F: for<'py> FnOnce(Python<'py>) -> Result<T, RpcError> + Send + 'static,
    T: Send + 'static,
{
    tokio::task::spawn_blocking(move || Python::attach(f))
        .await
        .unwrap_or_else(|_| Err(RpcError::internal_error("internal error")))
}

fn is_awaitable(py: Python<'_>, value: &Bound<'_, PyAny>) -> PyResult<bool> {
    static INSPECT: PyOnceLock<Py<PyModule>> = PyOnceLock::new();
    let inspect = INSPECT.get_or_try_init(py, || Ok::<_, PyErr>(py.import("inspect")?.unbind()))?;
    inspect
        .bind(py)
        .call_method1("isawaitable", (value,))?
        .extract()
}

/// The JSON-RPC error for a callback that raised: an `mcp_resume.RpcError` is the answer it
/// asked for; anything else is logged and answered as an internal error, without its text
/// (which may hold what the server should not see).
fn failure(py: Python<'_>, method: &str, err: &PyErr) -> RpcError {
    match requested_error(py, err) {
        Ok(Some(rpc)) => rpc,
        Ok(None) | Err(_) => {
            log(py, method, err);
            RpcError::internal_error("internal error")
        }
    }
}

fn requested_error(py: Python<'_>, err: &PyErr) -> PyResult<Option<RpcError>> {
    let class = py.import("mcp_resume._errors")?.getattr("RpcError")?;
    let value = err.value(py);
    if !value.is_instance(&class)? {
        return Ok(None);
    }
    let code: i64 = value.getattr("code")?.extract()?;
    let message: String = value.getattr("message")?.extract()?;
    let error = RpcError::new(code, message);
    Ok(Some(match opt_from_py(Some(&value.getattr("data")?))? {
        Some(data) => error.with_data(data),
        None => error,
    }))
}

fn log(py: Python<'_>, method: &str, err: &PyErr) {
    let logged = (|| -> PyResult<()> {
        let logger = py
            .import("logging")?
            .call_method1("getLogger", ("mcp_resume",))?;
        let kwargs = PyDict::new(py);
        kwargs.set_item("exc_info", err.value(py))?;
        logger.call_method(
            "error",
            ("server request handler for %s failed", method),
            Some(&kwargs),
        )?;
        Ok(())
    })();
    if logged.is_err() {
        err.clone_ref(py).print(py);
    }
}
