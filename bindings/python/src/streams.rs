//! `client.events()` and `client.notifications()` as async iterators.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use pyo3::exceptions::PyStopAsyncIteration;
use pyo3::prelude::*;

use crate::convert::IntoPython;

/// The next item of a stream; the end of the stream stops the `async for`.
struct Next<T>(Option<T>);

impl<T: IntoPython> IntoPython for Next<T> {
    fn into_python(self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        match self.0 {
            Some(item) => item.into_python(py),
            None => Err(PyStopAsyncIteration::new_err(())),
        }
    }
}

macro_rules! stream_class {
    ($name:ident, $py_name:literal, $inner:ty, $doc:literal) => {
        #[doc = $doc]
        #[pyclass(frozen, module = "mcp_resume", name = $py_name)]
        pub struct $name {
            inner: Arc<tokio::sync::Mutex<$inner>>,
            // Read without the stream's lock, which an `__anext__` waiting for the next item
            // holds.
            missed: Arc<AtomicU64>,
        }

        impl $name {
            pub fn new(stream: $inner) -> Self {
                $name {
                    inner: Arc::new(tokio::sync::Mutex::new(stream)),
                    missed: Arc::new(AtomicU64::new(0)),
                }
            }
        }

        #[pymethods]
        impl $name {
            fn __aiter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
                slf
            }

            fn __anext__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
                let inner = self.inner.clone();
                let missed = self.missed.clone();
                crate::bridge::awaitable(py, async move {
                    let mut stream = inner.lock().await;
                    let item = stream.recv().await;
                    missed.store(stream.missed(), Ordering::Relaxed);
                    Next(item)
                })
            }

            /// Items this subscriber lost because it fell more than 256 behind.
            #[getter]
            fn missed(&self) -> u64 {
                self.missed.load(Ordering::Relaxed)
            }
        }
    };
}

stream_class!(
    EventStream,
    "EventStream",
    mcp_resume::EventStream,
    "Session events, from `Client.events()`: `async for event in client.events()`."
);
stream_class!(
    NotificationStream,
    "NotificationStream",
    mcp_resume::NotificationStream,
    "Server notifications, from `Client.notifications()`."
);
