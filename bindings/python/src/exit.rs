//! The interpreter's exit, as the runtime's threads see it.
//!
//! The runtime's threads outlive `asyncio.run`: one may be starting a handler, converting its
//! answer or cancelling its task when the program's main thread returns. A thread that asks
//! for the GIL once `Py_FinalizeEx` has begun is ended where it stands (CPython's
//! `PyThread_exit_thread`), unwinding through Rust frames that then release a thread state or
//! drop objects of an interpreter being torn down: an abort (`PyGILState_Release`) or a
//! segfault after the program's last line. The stable ABI this module targets has no
//! `Py_IsFinalizing` to check beforehand, and a check would race the main thread anyway.
//!
//! So every attach from a runtime thread goes through [`attach`], and an `atexit` hook (they
//! run on the main thread, before finalization begins) closes the gate: from then on such a
//! thread does without Python (what it would have done is not done, and the Python objects it
//! held are let go unreleased), and the hook waits, with the GIL released so that they can
//! finish, for the threads attached or waiting to attach when it closed.

use std::sync::{Condvar, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use pyo3::prelude::*;

/// How long the exit waits for the threads still attached. They only convert values and
/// schedule or cancel tasks (a handler itself runs on its loop), so this is met at once unless
/// one is stuck; past it the exit goes on rather than hang.
const DRAIN: Duration = Duration::from_secs(2);

struct Gate {
    closed: bool,
    /// Runtime threads attached, or waiting for the GIL to attach.
    inside: usize,
}

static GATE: Mutex<Gate> = Mutex::new(Gate {
    closed: false,
    inside: 0,
});
static LEFT: Condvar = Condvar::new();

fn gate() -> MutexGuard<'static, Gate> {
    GATE.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Runs `f` attached to the interpreter, from a thread Python did not start; `None`, without
/// attaching, once the interpreter is exiting. Never call it from a thread attached already
/// (the exit would wait for it while it waits for the exit).
pub fn attach<R>(f: impl for<'py> FnOnce(Python<'py>) -> R) -> Option<R> {
    {
        let mut gate = gate();
        if gate.closed {
            return None;
        }
        gate.inside += 1;
    }
    // Counted out even if `f` panics.
    struct Leave;
    impl Drop for Leave {
        fn drop(&mut self) {
            let mut gate = gate();
            gate.inside -= 1;
            if gate.inside == 0 {
                LEFT.notify_all();
            }
        }
    }
    let _leave = Leave;
    Some(Python::attach(f))
}

/// The process the hook was registered in. A child forked from it inherits the hook and the
/// gate as they stood, threads counted inside that do not exist in it, maybe the gate's lock
/// held by one of them: its exit has no runtime thread to wait for, and must not take the lock.
static REGISTERED_IN: OnceLock<u32> = OnceLock::new();

/// The `atexit` hook: closes the gate and waits for the threads inside.
#[pyfunction]
fn close_gate(py: Python<'_>) {
    if REGISTERED_IN.get() != Some(&std::process::id()) {
        return;
    }
    gate().closed = true;
    let stuck = py.detach(|| {
        let gate = gate();
        match LEFT.wait_timeout_while(gate, DRAIN, |gate| gate.inside > 0) {
            Ok((gate, _)) => gate.inside,
            Err(poisoned) => poisoned.into_inner().0.inside,
        }
    });
    if stuck > 0 {
        // Not hidden: one still attached may crash the interpreter as it finalizes.
        let message = format!(
            "{stuck} of the extension's threads still used the interpreter {DRAIN:?} into its exit \
             (an answer's conversion running the application's code?); the exit goes on"
        );
        let _ = py
            .import("logging")
            .and_then(|logging| logging.call_method1("getLogger", ("mcp_resume",)))
            .and_then(|logger| logger.call_method1("warning", (message,)));
    }
}

/// Registers the hook with `atexit` (not as a member of the module: it is no API).
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let _ = REGISTERED_IN.set(std::process::id());
    let hook = wrap_pyfunction!(close_gate, m)?;
    m.py().import("atexit")?.call_method1("register", (hook,))?;
    Ok(())
}
