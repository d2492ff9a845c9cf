//! The tokio/reqwest driver and the public async API.
//!
//! [`Client`] is the handle the application calls; it sends commands to one driver task that
//! owns the sans-IO [`Session`](crate::proto::Session), performs its HTTP exchanges with
//! reqwest, keeps its timer, and hands results, [`SessionEvent`](crate::SessionEvent)s and
//! notifications back.

mod builder;
#[allow(clippy::module_inception)]
mod client;
mod driver;
mod events;
mod http;
mod results;
mod tool_call;

pub use builder::{ClientBuilder, DEFAULT_CONNECT_TIMEOUT};
pub use client::Client;
pub use events::{EventStream, NotificationStream, ServerNotification, EVENT_BUFFER};
pub use results::{CallToolResult, Content, InitializeResult, Tool};
pub use tool_call::{IntoIdempotencyKey, ToolCall};
