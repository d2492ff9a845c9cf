//! The ledger of calls in flight for Python: the stores a client is given (`ledger=`: a
//! `MemoryLedger`, `"memory"`, `"none"`, or a Redis URL with `ledger_identity=`) read onto the
//! builder, and the calls `Client.recover()` picks up.

use std::sync::{Arc, Mutex};
use std::time::UNIX_EPOCH;

use mcp_resume::proto::CallStage;
use mcp_resume::{ClientBuilder, LedgerEntry, MemoryLedger, RecoveredCall};
use pyo3::exceptions::{PyRuntimeError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyList, PyString};
use serde_json::Value;

use crate::convert::{opt_to_py, IntoPython, Reply};
use crate::errors;

/// A ledger in memory, shared by the clients given it: a client that replaces another in
/// this process picks up its calls with ``recover()``. It does not survive the process (a
/// Redis ledger does).
#[pyclass(frozen, module = "mcp_resume", name = "MemoryLedger")]
pub struct PyMemoryLedger {
    inner: Arc<MemoryLedger>,
}

#[pymethods]
impl PyMemoryLedger {
    #[new]
    fn new() -> Self {
        PyMemoryLedger {
            inner: Arc::new(MemoryLedger::new()),
        }
    }

    /// The number of entries held (calls in flight, and expired ones until the next read).
    fn __len__(&self) -> usize {
        self.inner.len()
    }

    fn __repr__(&self) -> String {
        format!("MemoryLedger(entries={})", self.inner.len())
    }
}

/// Reads `ledger=`, `ledger_identity=` and `record_session_ids=` onto `builder`.
pub fn configure(
    py: Python<'_>,
    mut builder: ClientBuilder,
    ledger: Option<&Bound<'_, PyAny>>,
    identity: Option<String>,
    record_session_ids: Option<bool>,
) -> PyResult<ClientBuilder> {
    if let Some(record) = record_session_ids {
        builder = builder.record_session_ids(record);
    }
    let ledger = ledger.filter(|l| !l.is_none());
    let Some(ledger) = ledger else {
        return match identity {
            Some(_) => Err(errors::invalid_config(
                py,
                "ledger_identity names a Redis ledger: give its URL as ledger=",
            )),
            None => Ok(builder),
        };
    };
    if let Ok(shared) = ledger.cast::<PyMemoryLedger>() {
        if identity.is_some() {
            return Err(errors::invalid_config(
                py,
                "ledger_identity names a Redis ledger, not a MemoryLedger",
            ));
        }
        return Ok(builder.ledger(shared.get().inner.clone()));
    }
    let Ok(name) = ledger.cast::<PyString>() else {
        return Err(PyTypeError::new_err(
            "ledger must be a MemoryLedger, \"memory\", \"none\" or a redis:// URL",
        ));
    };
    let name = name.to_str()?;
    builder
        .ledger_named(name, identity.as_deref())
        .map_err(|e| errors::to_py_err(py, &e))
}

/// A call ``Client.recover()`` picked up: what its ledger entry says, and (awaited) its
/// outcome. A ``tools/call`` resolves to a ``CallToolResult``, any other method to its raw
/// result; an unkeyed call that may have run raises ``OutcomeUnknownError`` at once, never
/// re-sent. One dropped before its outcome was awaited comes back from the next
/// ``recover()``.
#[pyclass(frozen, module = "mcp_resume", name = "RecoveredCall")]
pub struct PyRecoveredCall {
    entry: LedgerEntry,
    /// Until its outcome is awaited.
    call: Mutex<Option<RecoveredCall>>,
    unclaimed: Unclaimed,
}

impl PyRecoveredCall {
    fn new(call: RecoveredCall, unclaimed: Unclaimed) -> Self {
        PyRecoveredCall {
            entry: call.entry().clone(),
            call: Mutex::new(Some(call)),
            unclaimed,
        }
    }
}

/// Put back rather than cancelled: Python gives no sign of whether the application ever
/// received this object (a task cancelled as `recover()`'s list arrives drops the list
/// unseen), and a dropped handle would abandon the call (a keyed re-send cancelled, an
/// unkeyed call never reported). A call whose outcome was awaited is the awaiter's to
/// cancel.
impl Drop for PyRecoveredCall {
    fn drop(&mut self) {
        if let Some(call) = lock(&self.call).take() {
            lock(&self.unclaimed).push(call);
        }
    }
}

/// Calls picked up for Python that no `recover()` has handed over yet, kept by the client.
pub type Unclaimed = Arc<Mutex<Vec<RecoveredCall>>>;

/// What one `recover()` hands to Python. The calls Python never receives (its task was
/// cancelled after the SDK had picked them up, or the recovery failed) go back to the
/// client's [`Unclaimed`] for the next `recover()`: dropped, they would be abandoned (a keyed
/// call's re-send cancelled, an unkeyed one never reported). Once converted, each
/// `RecoveredCall` object does the same for its own call.
pub struct Recovered {
    calls: Vec<RecoveredCall>,
    unclaimed: Unclaimed,
}

impl Recovered {
    /// Starts with the calls an earlier `recover()` could not hand over.
    pub fn taking_back(unclaimed: Unclaimed) -> Self {
        let calls = std::mem::take(&mut *lock(&unclaimed));
        Recovered { calls, unclaimed }
    }

    /// Adds the calls the SDK picked up now.
    pub fn extend(&mut self, calls: Vec<RecoveredCall>) {
        self.calls.extend(calls);
    }
}

impl Drop for Recovered {
    fn drop(&mut self) {
        if !self.calls.is_empty() {
            lock(&self.unclaimed).append(&mut self.calls);
        }
    }
}

impl IntoPython for Recovered {
    fn into_python(mut self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        // Each call guarded by its own object before any can fail: whatever is not handed
        // over goes back by that object's drop.
        let calls: Vec<PyRecoveredCall> = std::mem::take(&mut self.calls)
            .into_iter()
            .map(|call| PyRecoveredCall::new(call, self.unclaimed.clone()))
            .collect();
        let list = PyList::empty(py);
        for call in calls {
            list.append(Py::new(py, call)?)?;
        }
        Ok(list.into_any().unbind())
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A recovered call's result: typed for a tool call.
enum Outcome {
    Tool(mcp_resume::CallToolResult),
    Raw(Value),
}

impl IntoPython for Outcome {
    fn into_python(self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        match self {
            Outcome::Tool(result) => result.into_python(py),
            Outcome::Raw(value) => value.into_python(py),
        }
    }
}

#[pymethods]
impl PyRecoveredCall {
    /// The ledger entry's id.
    #[getter]
    fn entry_id(&self) -> &str {
        self.entry.id().as_str()
    }

    /// The JSON-RPC method.
    #[getter]
    fn method(&self) -> &str {
        self.entry.method()
    }

    /// The params of its request (a dict), as recorded.
    #[getter]
    fn params(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        opt_to_py(py, self.entry.params())
    }

    /// For a ``tools/call``, the tool's name.
    #[getter]
    fn tool_name(&self) -> Option<&str> {
        self.entry.tool_name()
    }

    /// For a ``tools/call``, the tool's arguments.
    #[getter]
    fn arguments(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        opt_to_py(py, self.entry.arguments())
    }

    /// The call's own idempotency key, if it had one.
    #[getter]
    fn idempotency_key(&self) -> Option<&str> {
        self.entry.idempotency_key().map(|k| k.as_str())
    }

    /// Where it stood: ``"sent"``, ``"awaiting_input"`` or ``"task"``.
    #[getter]
    fn stage(&self) -> &'static str {
        self.entry.stage().as_str()
    }

    /// The task it became, for stage ``"task"``.
    #[getter]
    fn task_id(&self) -> Option<&str> {
        match self.entry.stage() {
            CallStage::Task { task_id } => Some(task_id),
            _ => None,
        }
    }

    /// The call's deadline, in seconds since the Unix epoch.
    #[getter]
    fn deadline(&self) -> f64 {
        self.entry
            .deadline()
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64())
    }

    fn __await__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let call = lock(&self.call).take();
        let Some(call) = call else {
            return Err(PyRuntimeError::new_err(
                "a recovered call's outcome is awaited once",
            ));
        };
        let (_, handle) = call.into_parts();
        let tool = self.entry.method() == "tools/call";
        let awaitable = crate::bridge::awaitable(py, async move {
            Reply(handle.await.and_then(|value| {
                if tool {
                    mcp_resume::CallToolResult::from_value(value).map(Outcome::Tool)
                } else {
                    Ok(Outcome::Raw(value))
                }
            }))
        })?;
        awaitable.call_method0(pyo3::intern!(py, "__await__"))
    }

    fn __repr__(&self) -> String {
        format!(
            "RecoveredCall(method={:?}, tool_name={:?}, stage={:?}, keyed={})",
            self.entry.method(),
            self.entry.tool_name(),
            self.entry.stage().as_str(),
            self.entry.idempotency_key().is_some()
        )
    }
}

pub fn register(m: &Bound<'_, pyo3::types::PyModule>) -> PyResult<()> {
    m.add_class::<PyMemoryLedger>()?;
    m.add_class::<PyRecoveredCall>()?;
    Ok(())
}
