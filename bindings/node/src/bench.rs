//! The Rust side of the binding's benchmark: the calls the JavaScript loop makes, made by the
//! Rust SDK on the addon's runtime, against the same server, in the same process.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use mcp_resume::{Client, ToolCall};
use napi::bindgen_prelude::PromiseRaw;
use napi::Env;
use serde_json::json;

use crate::errors::{promise, Failure};

/// Connects a client as the benchmark's JavaScript one (listen stream off), then makes
/// `calls` `echo` calls with `concurrency` in flight; resolves to the seconds they took.
pub(crate) fn rust_calls<'env>(
    env: &'env Env,
    url: String,
    calls: u32,
    concurrency: u32,
) -> napi::Result<PromiseRaw<'env, f64>> {
    promise(env, async move {
        let client = Client::builder(url).open_listen_stream(false).build()?;
        client.connect().await?;
        let left = Arc::new(AtomicUsize::new(calls as usize));
        let started = Instant::now();
        let workers: Vec<_> = (0..concurrency.max(1))
            .map(|_| {
                let client = client.clone();
                let left = left.clone();
                tokio::spawn(async move {
                    while left
                        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                        .is_ok()
                    {
                        client
                            .call_tool(ToolCall::new("echo", json!({"text": "hi"})))
                            .await?;
                    }
                    Ok::<_, mcp_resume::Error>(())
                })
            })
            .collect();
        for worker in workers {
            match worker.await {
                Ok(outcome) => outcome?,
                Err(_) => return Err(Failure::Invalid("a benchmark worker panicked".into())),
            }
        }
        let elapsed = started.elapsed().as_secs_f64();
        client.close().await?;
        Ok(elapsed)
    })
}
