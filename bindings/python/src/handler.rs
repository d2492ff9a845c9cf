//! Server-to-client requests answered by a Python callback.
//!
//! The SDK takes its handler when the client is built, while Python code registers one with a
//! decorator after constructing the client; so the client is always built with a forwarder to
//! this slot. An empty slot answers exactly as the SDK does without a handler.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};

use mcp_resume::{RpcError, ServerRequest};
use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyModule};
use pyo3::PyTraverseError;
use pyo3_async_runtimes::TaskLocals;
use serde_json::Value;

use crate::convert::{from_py, opt_from_py};
use crate::types::PyServerRequest;

const INTERNAL_ERROR: i64 = -32603;

#[derive(Default)]
pub struct HandlerSlot {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    callback: Option<Py<PyAny>>,
    /// The event loop (and context) of the latest call into the client: coroutines the
    /// callback returns run there.
    locals: Option<TaskLocals>,
}

type Pending = Pin<Box<dyn Future<Output = PyResult<Py<PyAny>>> + Send>>;

enum Started {
    Ready(Py<PyAny>),
    Pending(Pending),
}

impl HandlerSlot {
    // The lock is only ever taken while attached to the interpreter and never held across an
    // attach, so it cannot deadlock against the GIL.
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn set(&self, callback: Option<Py<PyAny>>) {
        let previous = std::mem::replace(&mut self.lock().callback, callback);
        // Released after the lock: dropping it may run Python code (its finalizers).
        drop(previous);
    }

    /// Reports the callback to the garbage collector: a handler that refers to its own
    /// client (a decorated closure) makes a cycle through this slot.
    pub fn traverse(&self, visit: &PyVisit<'_>) -> Result<(), PyTraverseError> {
        // Never blocks: the lock is only held briefly by a thread attached to the
        // interpreter, which the collector's thread is.
        if let Ok(state) = self.state.try_lock() {
            if let Some(callback) = &state.callback {
                visit.call(callback)?;
            }
        }
        Ok(())
    }

    pub fn callback(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.lock().callback.as_ref().map(|c| c.clone_ref(py))
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

    /// Calls the Python callback and converts its answer (or exception) for the SDK.
    pub async fn answer(self: Arc<Self>, request: ServerRequest) -> Result<Value, RpcError> {
        let method = request.method.clone();
        // The GIL is taken on the blocking pool, never on a runtime worker, so Python code
        // holding it cannot stall the client's driver.
        let started = attached({
            let slot = self.clone();
            move |py| slot.start(py, &request)
        })
        .await?;
        let outcome = match started {
            Started::Ready(value) => Ok(value),
            Started::Pending(future) => future.await,
        };
        attached(move |py| match outcome {
            Ok(value) => from_py(value.bind(py)).map_err(|e| failure(py, &method, &e)),
            Err(e) => Err(failure(py, &method, &e)),
        })
        .await
    }

    fn start(&self, py: Python<'_>, request: &ServerRequest) -> Result<Started, RpcError> {
        let (callback, locals) = {
            let state = self.lock();
            (
                state.callback.as_ref().map(|c| c.clone_ref(py)),
                state.locals.clone(),
            )
        };
        let Some(callback) = callback else {
            return Err(RpcError {
                code: -32601,
                message: format!("method not found: {}", request.method),
                data: None,
            });
        };
        let run = || -> PyResult<Started> {
            let arg = Py::new(py, PyServerRequest::new(py, request)?)?;
            let returned = callback.bind(py).call1((arg,))?;
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
        run().map_err(|e| failure(py, &request.method, &e))
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
        .unwrap_or_else(|_| {
            Err(RpcError {
                code: INTERNAL_ERROR,
                message: "internal error".to_owned(),
                data: None,
            })
        })
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
            RpcError {
                code: INTERNAL_ERROR,
                message: "internal error".to_owned(),
                data: None,
            }
        }
    }
}

fn requested_error(py: Python<'_>, err: &PyErr) -> PyResult<Option<RpcError>> {
    let class = py.import("mcp_resume._errors")?.getattr("RpcError")?;
    let value = err.value(py);
    if !value.is_instance(&class)? {
        return Ok(None);
    }
    Ok(Some(RpcError {
        code: value.getattr("code")?.extract()?,
        message: value.getattr("message")?.extract()?,
        data: opt_from_py(Some(&value.getattr("data")?))?,
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
