//! The Rust side of the binding's benchmark: the same calls the Python loop makes, from Rust,
//! on the binding's runtime, against the same server in the same process.

use std::sync::Arc;
use std::time::Instant;

use mcp_resume::{Client, ToolCall};
use pyo3::prelude::*;
use serde_json::json;

use crate::convert::Reply;

/// Connects a client like the benchmark's Python one (listen stream off), then makes `calls`
/// `echo` calls with `concurrency` in flight at a time; resolves to the seconds the calls
/// took.
#[pyfunction]
#[pyo3(name = "_bench_rust_calls")]
pub fn bench_rust_calls(
    py: Python<'_>,
    url: String,
    calls: usize,
    concurrency: usize,
) -> PyResult<Bound<'_, PyAny>> {
    crate::bridge::awaitable(py, async move {
        let run = async move {
            let client = Client::builder(url).open_listen_stream(false).build()?;
            client.connect().await?;
            let left = Arc::new(std::sync::atomic::AtomicUsize::new(calls));
            let started = Instant::now();
            let workers = (0..concurrency.max(1)).map(|_| {
                let client = client.clone();
                let left = left.clone();
                tokio::spawn(async move {
                    use std::sync::atomic::Ordering;
                    while left
                        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                        .is_ok()
                    {
                        let call = ToolCall::new("echo", json!({"text": "hi"}));
                        client.call_tool(call).await?;
                    }
                    Ok::<_, mcp_resume::Error>(())
                })
            });
            for worker in futures::future::join_all(workers).await {
                worker.expect("benchmark worker panicked")?;
            }
            let elapsed = started.elapsed().as_secs_f64();
            client.close().await?;
            Ok::<_, mcp_resume::Error>(serde_json::Value::from(elapsed))
        };
        Reply(run.await)
    })
}
