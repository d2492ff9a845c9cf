//! The N-API addon behind the `mcp-resume` npm package.
//!
//! It converts and forwards: every protocol rule (recovery, re-sends, deadlines, validation)
//! is the Rust SDK's, and every rule of the server guard (`ResumeSafety`, `lib/server.js`)
//! is `mcp-resume-server`'s. The JavaScript side (`lib/*.js`) wraps these classes into the public
//! API: the `Client`, the TypeScript SDK `Transport` (`ResumeTransport`), `AbortSignal`
//! plumbing and async iterators. Promises resolve on a tokio runtime the addon owns; a
//! cancelled call (its `CancelToken`) drops the SDK's future, which cancels it on the server
//! and stops every resume and re-send of it.
//!
//! No panic crosses into JavaScript: synchronous exports catch unwinding, and a future that
//! panics rejects its promise.

#![deny(missing_docs)]

#[cfg(feature = "bench")]
mod bench;
mod bridge;
mod cancel;
mod client;
mod convert;
mod errors;
mod handlers;
mod options;
mod server;
mod streams;
mod telemetry;

use napi::bindgen_prelude::{Function, Unknown};
use napi_derive::napi;
use serde_json::Value;

/// One worker by default: JavaScript is one thread, and one worker keeps a call's tasks (the
/// caller's future, the driver, the HTTP exchange) on one thread instead of bouncing them
/// between two. `MCP_RESUME_WORKER_THREADS` sets another count.
#[napi_derive::module_init]
fn init() {
    let workers = std::env::var("MCP_RESUME_WORKER_THREADS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|&n| n > 0)
        .unwrap_or(1);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("mcp-resume")
        .worker_threads(workers)
        .build();
    // Without a runtime of its own the addon falls back to napi's default one.
    if let Ok(runtime) = runtime {
        napi::bindgen_prelude::create_custom_tokio_runtime(runtime);
    }
}

/// The version of the Rust crate this addon was built from.
#[napi(catch_unwind)]
pub fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

/// Registers the function that makes the typed errors: it takes `{kind, message, …}` as
/// JSON text and returns the instance (done once by `lib/native.js`).
#[napi(catch_unwind)]
pub fn set_error_factory(factory: Function<String, Unknown<'static>>) -> napi::Result<()> {
    errors::register_factory(factory)
}

/// The bridge's constants: the `_meta` member that makes a `tools/call` keyed, and the
/// JSON-RPC error code of each failure JSON-RPC cannot name (`data.kind` names it too).
#[napi(ts_return_type = "any", catch_unwind)]
pub fn bridge_constants() -> Value {
    bridge::constants()
}

/// Benchmark only (the `bench` feature): `calls` `echo` calls made by the Rust SDK, with
/// `concurrency` in flight; resolves to the seconds they took.
#[cfg(feature = "bench")]
#[napi(catch_unwind)]
pub fn bench_rust_calls<'env>(
    env: &'env napi::Env,
    url: String,
    calls: u32,
    concurrency: u32,
) -> napi::Result<napi::bindgen_prelude::PromiseRaw<'env, f64>> {
    bench::rust_calls(env, url, calls, concurrency)
}
