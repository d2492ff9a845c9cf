//! `mcp_resume._mcp_resume`: the extension module behind the `mcp_resume` Python package.
//!
//! It converts and forwards: every protocol rule (recovery, re-sends, deadlines, validation)
//! is the Rust SDK's, and every rule of the server guard (`mcp_resume.server`) is
//! `mcp-resume-server`'s. The module owns a multi-threaded tokio runtime; awaitables resolve on
//! it without holding the GIL, and dropping one (a cancelled asyncio task) drops the SDK's
//! future, which cancels the call on the server.

#[cfg(feature = "bench")]
mod bench;
mod bridge;
mod client;
mod convert;
mod errors;
mod exit;
mod handler;
mod ledger;
mod message_bridge;
mod models;
mod oauth;
mod requests;
mod server;
mod streams;
mod telemetry;
mod types;

use pyo3::prelude::*;

#[pymodule]
fn _mcp_resume(m: &Bound<'_, PyModule>) -> PyResult<()> {
    // One worker by default: the Python side is one thread per event loop, and one worker
    // keeps a call's tasks (the caller's future, the driver, the HTTP exchange) on one thread
    // instead of bouncing them between two.
    let workers = std::env::var("MCP_RESUME_WORKER_THREADS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|&n| n > 0)
        .unwrap_or(1);
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    runtime
        .enable_all()
        .thread_name("mcp-resume")
        .worker_threads(workers);
    pyo3_async_runtimes::tokio::init(runtime);

    // Before finalization begins, no runtime thread may be left attached or about to attach.
    exit::register(m)?;
    m.add_class::<client::RawClient>()?;
    m.add_class::<message_bridge::RawBridge>()?;
    m.add_class::<oauth::PyOAuth>()?;
    m.add_class::<server::RawGuard>()?;
    m.add_class::<server::RawStep>()?;
    m.add_class::<server::RawOutbound>()?;
    m.add_class::<streams::EventStream>()?;
    m.add_class::<streams::NotificationStream>()?;
    types::register(m)?;
    models::register(m)?;
    requests::register(m)?;
    ledger::register(m)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    #[cfg(feature = "bench")]
    m.add_function(wrap_pyfunction!(bench::bench_rust_calls, m)?)?;
    m.add_function(wrap_pyfunction!(bridge::resolved, m)?)?;
    m.add_function(wrap_pyfunction!(bridge::panicking, m)?)?;
    Ok(())
}
