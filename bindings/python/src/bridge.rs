//! Rust futures as asyncio awaitables.
//!
//! Each event loop gets a socket pair: the read end is registered with `loop.add_reader`, and
//! a finished future queues its outcome and writes one byte (only when none is pending). The
//! loop thread then converts and delivers every queued outcome itself. A completion thus
//! costs one wake-up of the loop thread and no GIL on any other thread; handing each outcome
//! to a thread that takes the GIL and then `call_soon_threadsafe`s it (what
//! `pyo3-async-runtimes` does) costs three or four thread switches per call, which dominated
//! the binding's cost per call.
//!
//! Loops without `add_reader` (the Windows proactor loop), and non-Unix builds, use
//! `pyo3-async-runtimes` instead.
//!
//! Cancelling the awaitable (the awaiting task was cancelled) drops the Rust future. A Rust
//! future that panics fails its awaitable with `RuntimeError` (never a hang), and a process
//! forked after the runtime started gets `RuntimeError` at once: the runtime's threads are
//! not copied by `fork`, so nothing would ever complete there.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use futures::FutureExt;
use pyo3::exceptions::{PyNotImplementedError, PyRuntimeError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyCFunction;
use tokio::sync::oneshot;

use crate::convert::IntoPython;

/// Converts a finished future's output, on the loop thread. One dropped unconverted (its
/// awaitable was cancelled as it finished, or its loop closed) is dropped inside the runtime:
/// the output may spawn store operations as it goes (a keyed call's outbound marks its call
/// lost), and outside the runtime, on the loop's thread, it could not.
struct Deliver(Option<Convert>);

type Convert = Box<dyn FnOnce(Python<'_>) -> PyResult<Py<PyAny>> + Send>;

impl Deliver {
    fn new(convert: impl FnOnce(Python<'_>) -> PyResult<Py<PyAny>> + Send + 'static) -> Self {
        Self(Some(Box::new(convert)))
    }

    #[cfg(unix)]
    fn convert(mut self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        match self.0.take() {
            Some(convert) => convert(py),
            None => Err(PyRuntimeError::new_err(
                "this outcome was already delivered",
            )),
        }
    }
}

impl Drop for Deliver {
    fn drop(&mut self) {
        if let Some(convert) = self.0.take() {
            let _entered = pyo3_async_runtimes::tokio::get_runtime().enter();
            drop(convert);
        }
    }
}

/// Spawns `fut` on the binding's runtime and returns an asyncio future of the running loop
/// that resolves with its output.
pub fn awaitable<'py, T, F>(py: Python<'py>, fut: F) -> PyResult<Bound<'py, PyAny>>
where
    T: IntoPython,
    F: Future<Output = T> + Send + 'static,
{
    same_process()?;
    let fut = Guarded::new(fut);
    let event_loop = pyo3_async_runtimes::get_running_loop(py)?;
    let Some(bridge) = LoopBridge::of(py, &event_loop)? else {
        let locals = pyo3_async_runtimes::TaskLocals::new(event_loop).copy_context(py)?;
        return pyo3_async_runtimes::tokio::future_into_py_with_locals(py, locals, async move {
            Ok(Converted(fut.await))
        });
    };
    let future = event_loop.call_method0(pyo3::intern!(py, "create_future"))?;
    let (cancel_tx, cancel_rx) = oneshot::channel();
    future.call_method1(
        pyo3::intern!(py, "add_done_callback"),
        (CancelOnDone {
            tx: Mutex::new(Some(cancel_tx)),
        },),
    )?;
    let target = future.clone().unbind();
    pyo3_async_runtimes::tokio::get_runtime().spawn(async move {
        let output = tokio::select! {
            output = fut => output,
            // Cancelled, or the future itself is gone: dropping `fut` cancels the call.
            _ = cancel_rx => return,
        };
        bridge.complete(target, Deliver::new(move |py| output.into_python(py)));
    });
    Ok(future)
}

/// An awaitable that resolves to `value` on the runtime at once: the bridge alone, for its
/// tests and for measuring what crossing into the runtime and back costs.
#[pyfunction]
#[pyo3(name = "_resolved")]
pub fn resolved(py: Python<'_>, value: Py<PyAny>) -> PyResult<Bound<'_, PyAny>> {
    awaitable(py, async move { Passed(value) })
}

struct Passed(Py<PyAny>);

impl IntoPython for Passed {
    fn into_python(self, _py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(self.0)
    }
}

/// The output of a fallback future, converted where `pyo3-async-runtimes` delivers it.
struct Converted<T>(T);

impl<'py, T: IntoPython> IntoPyObject<'py> for Converted<T> {
    type Target = PyAny;
    type Output = Bound<'py, PyAny>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> Result<Self::Output, Self::Error> {
        Ok(self.0.into_python(py)?.into_bound(py))
    }
}

/// Tells the runtime that the awaitable was cancelled.
#[pyclass(frozen)]
struct CancelOnDone {
    tx: Mutex<Option<oneshot::Sender<()>>>,
}

#[pymethods]
impl CancelOnDone {
    fn __call__(&self, future: &Bound<'_, PyAny>) -> PyResult<()> {
        let cancelled = future
            .call_method0(pyo3::intern!(future.py(), "cancelled"))?
            .is_truthy()?;
        let tx = lock(&self.tx).take();
        if let (true, Some(tx)) = (cancelled, tx) {
            let _ = tx.send(());
        }
        Ok(())
    }
}

/// The process whose runtime this is: set when the first awaitable starts the runtime.
static RUNTIME_PROCESS: OnceLock<u32> = OnceLock::new();

/// Fails in a process forked after the runtime started: its worker threads stayed in the
/// parent, so a future spawned here would never run.
fn same_process() -> PyResult<()> {
    let started_in = *RUNTIME_PROCESS.get_or_init(std::process::id);
    if started_in == std::process::id() {
        return Ok(());
    }
    Err(PyRuntimeError::new_err(format!(
        "mcp_resume cannot run in a process forked after it was first used (in process \
         {started_in}): the fork did not copy its runtime's threads. Use it only after \
         forking, or start workers with the 'spawn' method"
    )))
}

/// A future whose panic becomes the awaitable's `RuntimeError`.
struct Guarded<T>(Result<T, String>);

impl<T> Guarded<T> {
    fn new<F: Future<Output = T>>(fut: F) -> impl Future<Output = Guarded<T>> {
        AssertUnwindSafe(fut).catch_unwind().map(|outcome| {
            Guarded(outcome.map_err(|panic| {
                panic
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "no message".to_owned())
            }))
        })
    }
}

impl<T: IntoPython> IntoPython for Guarded<T> {
    fn into_python(self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        match self.0 {
            Ok(output) => output.into_python(py),
            Err(message) => Err(PyRuntimeError::new_err(format!(
                "the binding's runtime panicked while running this call ({message}); the \
                 call's outcome is unknown"
            ))),
        }
    }
}

/// A future that panics: for the test that every awaitable resolves.
#[pyfunction]
#[pyo3(name = "_panicking")]
pub fn panicking(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    awaitable(py, async move {
        if std::hint::black_box(true) {
            panic!("a test's deliberate panic");
        }
    })
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(unix)]
pub use unix::LoopBridge;

#[cfg(not(unix))]
pub struct LoopBridge;

#[cfg(not(unix))]
impl LoopBridge {
    fn of(_py: Python<'_>, _event_loop: &Bound<'_, PyAny>) -> PyResult<Option<Arc<Self>>> {
        Ok(None)
    }

    fn complete(&self, _future: Py<PyAny>, _deliver: Deliver) {}
}

#[cfg(unix)]
mod unix {
    use std::io::{ErrorKind, Read, Write};
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;

    use super::*;

    /// The bridges of the loops this process used, each with a weak reference to its loop.
    /// Entries of loops that are gone or closed are dropped (closing their sockets) when the
    /// next bridge is made.
    static BRIDGES: Mutex<Vec<Entry>> = Mutex::new(Vec::new());

    struct Entry {
        event_loop: Py<PyAny>,
        bridge: Option<Arc<LoopBridge>>,
    }

    pub struct LoopBridge {
        reader: UnixStream,
        writer: UnixStream,
        queue: Mutex<Vec<(Py<PyAny>, Deliver)>>,
        signalled: AtomicBool,
    }

    impl LoopBridge {
        /// This loop's bridge, made on first use; `None` when the loop cannot watch a file
        /// descriptor.
        pub(super) fn of(
            py: Python<'_>,
            event_loop: &Bound<'_, PyAny>,
        ) -> PyResult<Option<Arc<Self>>> {
            // Python code may run (and hand the GIL to another thread that wants this lock)
            // only while BRIDGES is not held: the entries are read from a copy.
            let known: Vec<(Py<PyAny>, Option<Arc<LoopBridge>>)> = lock(&BRIDGES)
                .iter()
                .map(|e| (e.event_loop.clone_ref(py), e.bridge.clone()))
                .collect();
            let mut stale = Vec::new();
            for (weak, bridge) in &known {
                let target = weak.bind(py).call0()?;
                if target.is(event_loop) {
                    return Ok(bridge.clone());
                }
                if target.is_none() || is_closed(&target) {
                    stale.push(weak.as_ptr());
                }
            }
            let bridge = Self::register(py, event_loop)?;
            let weak = weakref(py)?.call1((event_loop,))?.unbind();
            let removed: Vec<Entry> = {
                let mut entries = lock(&BRIDGES);
                let (gone, kept) = std::mem::take(&mut *entries)
                    .into_iter()
                    .partition(|e| stale.contains(&e.event_loop.as_ptr()));
                *entries = kept;
                entries.push(Entry {
                    event_loop: weak,
                    bridge: bridge.clone(),
                });
                gone
            };
            // Dropped outside the lock: a bridge's queued futures may run Python code as they
            // go. Dropping a bridge closes its sockets; its loop is closed or gone.
            drop(removed);
            Ok(bridge)
        }

        fn register(py: Python<'_>, event_loop: &Bound<'_, PyAny>) -> PyResult<Option<Arc<Self>>> {
            let (reader, writer) = UnixStream::pair()?;
            reader.set_nonblocking(true)?;
            writer.set_nonblocking(true)?;
            let bridge = Arc::new(LoopBridge {
                reader,
                writer,
                queue: Mutex::new(Vec::new()),
                signalled: AtomicBool::new(false),
            });
            let drain = {
                let bridge = bridge.clone();
                PyCFunction::new_closure(py, None, None, move |args, _kwargs| {
                    bridge.drain(args.py());
                })?
            };
            let fd = bridge.reader.as_raw_fd();
            match event_loop.call_method1("add_reader", (fd, drain)) {
                Ok(_) => Ok(Some(bridge)),
                Err(e) if e.is_instance_of::<PyNotImplementedError>(py) => Ok(None),
                Err(e) => Err(e),
            }
        }

        /// Queues an outcome and wakes the loop, unless a wake-up is already pending.
        pub(super) fn complete(&self, future: Py<PyAny>, deliver: Deliver) {
            lock(&self.queue).push((future, deliver));
            if !self.signalled.swap(true, Ordering::AcqRel) {
                // A full socket buffer means a wake-up is pending anyway.
                let _ = (&self.writer).write(&[1]);
            }
        }

        /// On the loop thread: delivers everything queued.
        fn drain(&self, py: Python<'_>) {
            // The wake-up bytes first, then the flag, then the queue: an outcome queued after
            // the flag is cleared writes a new byte; one queued before is taken below. (With
            // the flag cleared before the read, the read could swallow the byte of a producer
            // that set the flag again, stranding the next one.) A swap, not a store: its
            // acquire half keeps the take from moving before the clear.
            let mut buf = [0u8; 64];
            loop {
                match (&self.reader).read(&mut buf) {
                    Ok(n) if n == buf.len() => continue,
                    Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                    _ => break,
                }
            }
            self.signalled.swap(false, Ordering::AcqRel);
            let queued = std::mem::take(&mut *lock(&self.queue));
            for (future, deliver) in queued {
                let future = future.bind(py);
                if let Err(e) = settle(py, future, deliver) {
                    e.write_unraisable(py, Some(future));
                }
            }
        }
    }

    fn settle(py: Python<'_>, future: &Bound<'_, PyAny>, deliver: Deliver) -> PyResult<()> {
        if future
            .call_method0(pyo3::intern!(py, "cancelled"))?
            .is_truthy()?
        {
            // Its task is gone: `deliver` is dropped unconverted, inside the runtime.
            return Ok(());
        }
        match deliver.convert(py) {
            Ok(value) => future.call_method1(pyo3::intern!(py, "set_result"), (value,))?,
            Err(err) => future.call_method1(pyo3::intern!(py, "set_exception"), (err,))?,
        };
        Ok(())
    }

    fn is_closed(event_loop: &Bound<'_, PyAny>) -> bool {
        event_loop
            .call_method0("is_closed")
            .and_then(|c| c.is_truthy())
            .unwrap_or(true)
    }

    fn weakref(py: Python<'_>) -> PyResult<&Bound<'_, PyAny>> {
        static REF: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
        REF.get_or_try_init(py, || {
            Ok::<_, PyErr>(py.import("weakref")?.getattr("ref")?.unbind())
        })
        .map(|r| r.bind(py))
    }
}
