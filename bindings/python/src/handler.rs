//! Server-to-client requests answered by Python callbacks.
//!
//! The SDK takes its handlers when the client is built. The generic one
//! (`on_server_request`) is always registered as a forwarder to its slot, so Python code may
//! set or replace it at any time; an empty slot answers exactly as the SDK does without a
//! handler. A typed one (`on_sampling`, `on_elicitation`, `on_roots`) declares its capability
//! at `initialize`, so it is registered on the builder only when its slot holds a callback
//! by the time the client is built (see `client.rs`); the SDK then types the request, and
//! the answer the callback returns is typed here before the SDK sends it.

use std::sync::{Arc, Mutex, MutexGuard};

use mcp_resume::client::models::{
    CreateMessageRequest, CreateMessageResult, ElicitRequest, ElicitResult, Root,
};
use mcp_resume::{Error, RequestContext, RpcError, ServerRequest, TokenRequest};
use pyo3::exceptions::PyRuntimeError;
use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyCFunction, PyDict, PyModule, PyTuple};
use pyo3::PyTraverseError;
use serde_json::Value;
use tokio::sync::oneshot;

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
    /// Not a server request: the token provider, asked for each request's token.
    TokenProvider = 4,
    /// Not a server request: the OAuth authorization code grant's user step.
    Authorizer = 5,
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
            Kind::TokenProvider => "token_provider",
            Kind::Authorizer => "OAuth.authorization_code",
        }
    }
}

/// The Python callbacks of one client, and the event loop they run on.
#[derive(Default)]
pub struct Handlers {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    callbacks: [Option<Py<PyAny>>; 6],
    /// The event loop the client belongs to: the one of its first use, until that loop is
    /// closed. Callbacks run there, plain functions and coroutines alike.
    event_loop: Option<Py<PyAny>>,
}

/// A callback running on the client's loop (a `concurrent.futures.Future` of
/// `asyncio.run_coroutine_threadsafe`): its outcome arrives on `outcome`; dropped before
/// that (the server cancelled its request, or the call it belongs to ended), it cancels the
/// Python task.
struct Running {
    task: Option<Py<PyAny>>,
    outcome: oneshot::Receiver<PyResult<Py<PyAny>>>,
}

impl Running {
    async fn outcome(mut self) -> PyResult<Py<PyAny>> {
        let outcome = (&mut self.outcome).await;
        self.task = None; // finished: nothing to cancel
        outcome.unwrap_or_else(|_| {
            Err(PyRuntimeError::new_err(
                "the handler's task ended without an outcome",
            ))
        })
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let Some(task) = self.task.take() else {
            return;
        };
        // The GIL is taken on the blocking pool, never on a runtime worker. Outside a
        // runtime (it is shutting down, and the loop's task with it), or once the
        // interpreter is exiting, there is nothing to cancel from here: the reference is
        // just let go.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn_blocking(move || {
                crate::exit::attach(|py| {
                    let _ = task.bind(py).call_method0(pyo3::intern!(py, "cancel"));
                })
            });
        }
    }
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

    /// Binds the client to the running event loop on its first use; raises `RuntimeError`
    /// when it is used from another loop while its own is open (its handlers would run on
    /// a loop the caller does not drive). A closed loop gives way to the next one.
    pub fn bind_loop(&self, py: Python<'_>) -> PyResult<()> {
        let running = pyo3_async_runtimes::get_running_loop(py)?;
        let current = self.lock().event_loop.as_ref().map(|l| l.clone_ref(py));
        if let Some(current) = &current {
            let current = current.bind(py);
            if current.is(&running) {
                return Ok(());
            }
            if !is_closed(current) {
                return Err(PyRuntimeError::new_err(
                    "this mcp_resume client belongs to the event loop it was first used on,                      which is still open; use it from that loop, or make a client per loop",
                ));
            }
        }
        let previous = self.lock().event_loop.replace(running.unbind());
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

    /// The token provider: asked on the client's loop with a dict (`refresh`, `challenge`,
    /// `refused_token`, `url`), it returns the token (a `str`, directly or from an `async
    /// def`). An exception fails the request as never sent (the client retries it within its
    /// policy) and is logged.
    pub async fn token(self: Arc<Self>, request: TokenRequest) -> Result<String, Error> {
        let asked = self
            .call(
                Kind::TokenProvider,
                "token_provider".to_owned(),
                move |py| {
                    let dict = PyDict::new(py);
                    dict.set_item("refresh", request.is_refresh())?;
                    dict.set_item(
                        "challenge",
                        request
                            .challenge
                            .as_ref()
                            .map(|c| crate::errors::challenge_dict(py, c))
                            .transpose()?,
                    )?;
                    dict.set_item("refused_token", request.refused_token.as_deref())?;
                    dict.set_item("url", request.url.as_deref())?;
                    Ok(dict.into_any().unbind())
                },
                |answer| answer.extract::<String>(),
            )
            .await;
        asked.map_err(|e| Error::token_unavailable(std::io::Error::other(e.message)))
    }

    /// The authorization code grant's user step: the callable gets the authorization URL and
    /// returns the URL the authorization server redirected to.
    pub async fn authorize(
        self: Arc<Self>,
        request: mcp_resume::client::oauth::AuthorizationRequest,
    ) -> Result<url::Url, Error> {
        let asked = self
            .call(
                Kind::Authorizer,
                "authorize".to_owned(),
                move |py| {
                    Ok(pyo3::types::PyString::new(py, request.url.as_str())
                        .into_any()
                        .unbind())
                },
                |answer| answer.extract::<String>(),
            )
            .await
            .map_err(|e| Error::token_unavailable(std::io::Error::other(e.message)))?;
        url::Url::parse(&asked).map_err(Error::token_unavailable)
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
        let running = attached({
            let slots = self.clone();
            let method = method.clone();
            move |py| slots.start(py, kind, &method, arg)
        })
        .await?;
        let outcome = running.outcome().await;
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
    ) -> Result<Running, RpcError>
    where
        A: FnOnce(Python<'_>) -> PyResult<Py<PyAny>>,
    {
        let (callback, event_loop) = {
            let state = self.lock();
            (
                state.callbacks[kind as usize]
                    .as_ref()
                    .map(|c| c.clone_ref(py)),
                state.event_loop.as_ref().map(|l| l.clone_ref(py)),
            )
        };
        let Some(callback) = callback else {
            return Err(RpcError::new(
                RpcError::METHOD_NOT_FOUND,
                format!("method not found: {method}"),
            ));
        };
        let run = || -> PyResult<Running> {
            let Some(event_loop) = event_loop else {
                return Err(PyRuntimeError::new_err(
                    "a server request arrived before any event loop used this client",
                ));
            };
            let event_loop = event_loop.bind(py);
            if is_closed(event_loop) {
                return Err(PyRuntimeError::new_err(
                    "the client's event loop is closed, so its handler cannot run; use the \
                     client from a running loop",
                ));
            }
            let coroutine = invoke(py)?.call1((callback, arg(py)?))?;
            let task =
                asyncio(py)?.call_method1("run_coroutine_threadsafe", (coroutine, event_loop))?;
            let (tx, rx) = oneshot::channel();
            let tx = Mutex::new(Some(tx));
            let done =
                PyCFunction::new_closure(py, None, None, move |args: &Bound<'_, PyTuple>, _| {
                    let py = args.py();
                    let outcome = args.get_item(0).and_then(|task| {
                        task.call_method0(pyo3::intern!(py, "result"))
                            .map(Bound::unbind)
                    });
                    if let Some(tx) = lock_sender(&tx) {
                        let _ = tx.send(outcome);
                    }
                })?;
            task.call_method1(pyo3::intern!(py, "add_done_callback"), (done,))?;
            Ok(Running {
                task: Some(task.unbind()),
                outcome: rx,
            })
        };
        run().map_err(|e| failure(py, method, &e))
    }
}

/// Runs `f` attached to the interpreter on tokio's blocking pool; an internal error, with `f`
/// not run, once the interpreter is exiting (no handler can run then).
async fn attached<T, F>(f: F) -> Result<T, RpcError>
where
    F: for<'py> FnOnce(Python<'py>) -> Result<T, RpcError> + Send + 'static,
    T: Send + 'static,
{
    tokio::task::spawn_blocking(move || crate::exit::attach(f))
        .await
        .ok()
        .flatten()
        .unwrap_or_else(|| Err(RpcError::internal_error("internal error")))
}

/// `mcp_resume._handlers.invoke`: calls a handler on the loop, awaiting what it returns.
fn invoke(py: Python<'_>) -> PyResult<&Bound<'_, PyAny>> {
    static INVOKE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    INVOKE
        .get_or_try_init(py, || {
            Ok::<_, PyErr>(
                py.import("mcp_resume._handlers")?
                    .getattr("invoke")?
                    .unbind(),
            )
        })
        .map(|f| f.bind(py))
}

fn asyncio(py: Python<'_>) -> PyResult<&Bound<'_, PyModule>> {
    static ASYNCIO: PyOnceLock<Py<PyModule>> = PyOnceLock::new();
    ASYNCIO
        .get_or_try_init(py, || Ok::<_, PyErr>(py.import("asyncio")?.unbind()))
        .map(|m| m.bind(py))
}

fn is_closed(event_loop: &Bound<'_, PyAny>) -> bool {
    event_loop
        .call_method0("is_closed")
        .and_then(|c| c.is_truthy())
        .unwrap_or(true)
}

/// The sender, taken once (the done callback runs once, but its closure must be `Fn`).
fn lock_sender<T>(m: &Mutex<Option<T>>) -> Option<T> {
    m.lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .take()
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
