//! mcp-resume: a resume-aware Model Context Protocol client for the Streamable HTTP transport.
#![warn(missing_docs)]

pub mod client;
pub mod error;
pub mod ids;
pub mod policy;
pub mod proto;
pub mod sse;

pub use client::{
    CallToolResult, Client, ClientBuilder, Content, EventStream, InitializeResult,
    IntoIdempotencyKey, NotificationStream, ServerNotification, Tool, ToolCall,
};
pub use error::{Error, ErrorKind, Result, RpcError};
pub use ids::{CapabilityHash, EventId, IdempotencyKey, RequestId, SessionId};
pub use policy::ReconnectPolicy;
pub use proto::{
    CallId, Notification, ReinitReason, RejectReason, ResendPolicy, ServerRequest, SessionEvent,
};
