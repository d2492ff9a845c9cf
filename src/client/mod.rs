//! The tokio/reqwest driver and the public async API.
//!
//! [`Client`] is the handle the application calls. The sans-IO
//! [`Session`](crate::proto::Session) sits behind one lock shared by the client, its call
//! handles and the driver's two tasks; results, [`SessionEvent`](crate::SessionEvent)s and
//! notifications come back through it.
//!
//! How the driver behaves, in short:
//! - A call whose POST the session sends at once performs that POST in the caller's own task
//!   and reports it to the session as it goes: an ordinary call never waits on another task.
//!   Every other exchange (handshake, resumes, re-sends, the standalone stream,
//!   notifications) is a future the driver's exchange runner polls beside the others (no
//!   task per request), so a slow stream never blocks another. Exchanges decode what they
//!   read before they report it, and report a bounded part of a body at a time, under the
//!   lock: memory stays bounded however fast a server sends, and the lock covers the
//!   session's bookkeeping only.
//! - Every call ends by its deadline (plus, for a call awaited off the driver's runtime, a
//!   2 s grace), whatever the server's streams, the runtime it is awaited on, or application
//!   code does: the driver's timer task runs no handler, token provider or task store (it
//!   logs with `tracing`, some of it under the session's lock, so a subscriber must not
//!   block; with telemetry it ends the spans of the calls it ends, so a span processor must
//!   not block either), and a call awaited anywhere else keeps a guard of its own. A driver
//!   whose runtime shuts down (even before it ever ran) stops the client: calls fail with
//!   `Closed` at once.
//! - Only a failure to establish the connection is reported as "never sent"; anything later
//!   (a reset, a body that breaks) may have reached the server.
//! - One timer, armed for the session's next deadline. Exchanges the session sets no deadline
//!   for (notifications, answers to server requests, DELETE) are bounded by `call_timeout`.
//! - The application's headers (bearer token, custom headers) go on every request, resumes
//!   and DELETE included; the protocol's own headers cannot be overridden. A token provider
//!   is asked for each request's token, and once more when the server refuses it.
//! - Server requests are answered by the typed handlers through one dispatch function, each
//!   in a task of its own on the driver's runtime; a server's cancellation drops the handler
//!   and sends no answer. At most 32 of a legacy server's own requests run at once, more
//!   being refused (-32603). The inputs of the app's own 2026-07-28 calls (an MRTR round's,
//!   a task's) are not counted: a refusal would end the call they serve; they are bounded
//!   by it instead, at most 16 at once for each call, and end with it.
//! - A call that resets its timeout on progress has an idle timer here; the session keeps
//!   its total deadline.
//! - Nothing from the network can make it panic. Application code (a handler, a token
//!   provider, a task store) never runs under the session's lock; a panic there fails the
//!   request it served (a handler's is answered with a JSON-RPC internal error), never the
//!   client.

mod auth;
mod body;
mod builder;
#[allow(clippy::module_inception)]
mod client;
mod driver;
mod era_cache;
mod events;
mod handle;
pub(crate) mod handlers;
mod http;
pub mod ledger;
mod methods;
pub mod models;
#[cfg(feature = "oauth")]
pub mod oauth;
mod recover;
mod request;
mod results;
mod startable;
mod task_store;
#[cfg(feature = "otel")]
pub mod telemetry;
mod tool_call;

pub use auth::{Presentation, TokenProvider, TokenRequest};
pub use builder::{ClientBuilder, DEFAULT_CONNECT_TIMEOUT};
pub use client::Client;
pub use era_cache::EraCache;
pub use events::{EventStream, NotificationStream, ServerNotification, EVENT_BUFFER};
pub use handle::{CallHandle, ProgressStream};
pub use handlers::RequestContext;
pub use ledger::{Ledger, LedgerEntry, MemoryLedger};
pub use methods::MAX_LIST_PAGES;
pub use models::Content;
pub use recover::RecoveredCall;
pub use request::Request;
pub use results::{CallToolResult, InitializeResult, Tool, MAX_CONTENT_ITEMS};
pub use startable::Startable;
#[allow(deprecated)]
pub use task_store::{InMemoryTaskStore, StoredTask, TaskStore};
#[cfg(feature = "otel")]
pub use telemetry::{SessionIdExport, Telemetry};
pub use tool_call::ToolCall;
