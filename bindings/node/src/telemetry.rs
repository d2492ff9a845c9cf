//! OpenTelemetry for Node.js: the client's spans and metrics, exported over OTLP/HTTP from
//! Rust, each call a child of the span active in JavaScript when it is made.
//!
//! Why OTLP from Rust, and not spans made through `@opentelemetry/api`: the client creates
//! and ends its spans in its driver, on the addon's tokio threads, which cannot call into
//! JavaScript synchronously (only queue a call for the event loop), while the ids a request's
//! `traceparent` names must exist before the request leaves. What a Node user expects is
//! kept: the spans go to the collector the application's own SDK exports to, in the same
//! trace, under the span active when the call was made (`lib/telemetry.js` reads it through
//! `@opentelemetry/api`, when it is installed). The exporters are the SDK's
//! `mcp_resume::client::telemetry::Otlp`.

use std::future::Future;
use std::sync::Arc;

use mcp_resume::client::telemetry::{remote_parent, Otlp};
use napi::bindgen_prelude::FunctionRef;
use napi::Env;
use opentelemetry::trace::FutureExt as _;
use opentelemetry::Context;

/// Exports what `otlp` holds, off the runtime's workers (the export blocks).
pub(crate) async fn flush(otlp: Arc<Otlp>) {
    let _ = tokio::task::spawn_blocking(move || otlp.flush()).await;
}

/// `() => traceparent | undefined`: the span active in JavaScript (`lib/telemetry.js`).
pub(crate) type CallerContext = FunctionRef<(), Option<String>>;

/// The span active in JavaScript now, as the remote parent of the call about to be made
/// (called on the JavaScript thread, as the call is made).
pub(crate) fn caller_context(env: &Env, read: Option<&CallerContext>) -> Option<Context> {
    let traceparent = read?.borrow_back(env).ok()?.call(()).ok()??;
    remote_parent(&traceparent, None)
}

/// `fut`, run under `parent` when there is one (its span's parent is then `parent`).
pub(crate) async fn under<F: Future>(parent: Option<Context>, fut: F) -> F::Output {
    match parent {
        Some(parent) => fut.with_context(parent).await,
        None => fut.await,
    }
}
