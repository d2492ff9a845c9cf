//! The tokio/reqwest driver and the public async API.
//!
//! [`Client`] is the handle the application calls; it sends commands to one driver task that
//! owns the sans-IO [`Session`](crate::proto::Session), performs its HTTP exchanges with
//! reqwest, keeps its timer, and hands results, [`SessionEvent`](crate::SessionEvent)s and
//! notifications back.
//!
//! How the driver behaves, in short:
//! - Every HTTP exchange runs in its own task and reports back over one bounded channel, so a
//!   slow stream never blocks another and memory stays bounded however fast a server sends.
//! - Only a failure to establish the connection is reported as "never sent"; anything later
//!   (a reset, a body that breaks) may have reached the server.
//! - One timer, armed for the session's next deadline. Exchanges the session sets no deadline
//!   for (notifications, answers to server requests, DELETE) are bounded by `call_timeout`.
//! - The application's headers (bearer token, custom headers) go on every request, resumes
//!   and DELETE included; the protocol's own headers cannot be overridden.
//! - Nothing from the network can make it panic; a panicking server-request handler is
//!   answered with a JSON-RPC internal error.

mod builder;
#[allow(clippy::module_inception)]
mod client;
mod driver;
mod era_cache;
mod events;
mod http;
mod results;
mod task_store;
mod tool_call;

pub use builder::{ClientBuilder, DEFAULT_CONNECT_TIMEOUT};
pub use client::Client;
pub use era_cache::EraCache;
pub use events::{EventStream, NotificationStream, ServerNotification, EVENT_BUFFER};
pub use results::{CallToolResult, Content, InitializeResult, Tool};
pub use task_store::{InMemoryTaskStore, StoredTask, TaskStore};
pub use tool_call::{IntoIdempotencyKey, ToolCall};
