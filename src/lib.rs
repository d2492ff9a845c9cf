//! A resume-aware [Model Context Protocol] client for the Streamable HTTP transport, that
//! never mistakes a replayed stream for a resumed session.
//!
//! Behind a load balancer without session affinity, a reconnect with `Last-Event-ID` can land
//! on an instance that replays the stream's bytes without owning the session: the client
//! believes it resumed, and a dependent call later runs under the wrong context, with no error
//! anywhere. This client treats a resume as valid only when the server can prove it, and
//! otherwise re-initializes and re-sends only the calls that are safe to repeat.
//!
//! # Quickstart
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use futures::StreamExt;
//! use mcp_resume::{Client, ErrorKind, SessionEvent, ToolCall};
//! use serde_json::json;
//! use uuid::Uuid;
//!
//! # async fn run() -> Result<(), mcp_resume::Error> {
//! let client = Client::builder("http://127.0.0.1:8080/mcp")
//!     .bearer_token("my-token") // sent on every request, resumes and DELETE included
//!     .call_timeout(Duration::from_secs(30))
//!     .build()?; // configuration errors surface here, as ErrorKind::InvalidConfig
//!
//! let server = client.connect().await?; // initialize + initialized (+ the GET stream)
//! println!("connected to {} {}", server.server_name, server.server_version);
//!
//! // Lifecycle news: resumes, rejections, re-initializations, re-sends.
//! let mut events = client.events();
//! tokio::spawn(async move {
//!     while let Some(event) = events.next().await {
//!         if let SessionEvent::Reinitialized { reason, capabilities_changed, .. } = event {
//!             eprintln!("re-initialized ({reason:?}), capabilities changed: {capabilities_changed}");
//!         }
//!     }
//! });
//!
//! for tool in client.list_tools().await? {
//!     println!("{}: {}", tool.name, tool.description.unwrap_or_default());
//! }
//!
//! let reply = client.call_tool(ToolCall::new("echo", json!({"text": "hi"}))).await?;
//! println!("{}", reply.text());
//!
//! // A call with a side effect: the idempotency key lets the client re-send it safely
//! // after an interruption, if the server deduplicates by key.
//! let call = ToolCall::new("counter_increment", json!({})).idempotency_key(Uuid::new_v4());
//! match client.call_tool(call).await {
//!     Ok(result) => println!("{:?}", result.structured_content),
//!     Err(e) if e.kind() == ErrorKind::OutcomeUnknown => {
//!         eprintln!("interrupted: it may or may not have run; check before retrying")
//!     }
//!     Err(e) => return Err(e),
//! }
//!
//! client.close().await?; // DELETE the session
//! # Ok(())
//! # }
//! ```
//!
//! Every async method must run inside a tokio runtime; [`ClientBuilder::build`] does not need
//! one. [`Client`] is cheap to clone; dropping a call's future cancels the call
//! (`notifications/cancelled`); dropping the last clone closes the session. Events and
//! notifications name calls by [`ToolCall::id`], known before the call is made.
//!
//! # The rest of the client surface
//!
//! - Typed methods for resources, prompts, completion and logging, each list whole or by page
//!   ([`Client::list_resources`], [`Client::list_prompts_page`], …), with the models in
//!   [`client::models`] (unknown members kept, JSON Schemas verbatim).
//! - [`ServerNotification::typed`]: progress, log messages, resource updates, list changes,
//!   cancellations.
//! - Typed handlers for server requests ([`ClientBuilder::on_sampling`],
//!   [`ClientBuilder::on_elicitation`], [`ClientBuilder::on_roots`]) that declare their
//!   capability at `initialize` and see the server's cancellation ([`RequestContext`]);
//!   [`ClientBuilder::on_server_request`] for anything else.
//! - Three ways to make a call: [`Client::call_tool`] (a [`ToolCall`], the only kind that can
//!   carry an idempotency key), [`Client::request`] (a [`Request`] of any method, its result
//!   read as a type of yours or as JSON), and [`Client::start`] (either of them behind a
//!   [`CallHandle`]: an id, the call's own progress, `cancel(reason)`, a timeout that
//!   restarts on progress). [`Client::notify`] sends a notification.
//! - [`ClientBuilder::auth`]: a [`TokenProvider`] asked for every request's token, and once more
//!   after a 401; a refused fresh token is [`ErrorKind::Unauthorized`] with the server's
//!   [`AuthChallenge`]. [`client::oauth::OAuthProvider`] (the `oauth` feature, on by default)
//!   is the provider that runs MCP authorization: discovery, registration, the authorization
//!   code grant with PKCE or client credentials, refresh and step-up.
//!
//! # Recovery rules, in brief
//!
//! The full table is [`guide::recovery`]; [`proto::decide`] implements it as
//! one pure function.
//!
//! - **Session gone** (404 to a request carrying the session id, or an explicit rejection of a
//!   resume): re-initialize without the old id and report [`SessionEvent::Reinitialized`]
//!   with `capabilities_changed`.
//! - **Never sent** (connection refused): re-send after backoff, whatever the call.
//! - **Stream cut after an event id**: resume with `Last-Event-ID` after the server's `retry`
//!   or the backoff delay ([`ReconnectPolicy`]), never earlier.
//! - **Outcome unknown** (connection lost after sending, a stream that ends without its
//!   response and cannot be resumed, an unverifiable clean end): a call carrying an
//!   idempotency key is re-sent (new JSON-RPC id, same key) only when the server advertised
//!   idempotency support or the application opted in with
//!   [`ResendPolicy::AssumeServerDeduplicates`]; every other call fails with
//!   [`ErrorKind::OutcomeUnknown`]. Never a silent re-send, never a hang.
//! - **Another context**: a response produced under a capability hash other than the
//!   session's fails with [`ErrorKind::ContextMismatch`] (it already ran, so it is never
//!   re-sent) and the session is re-initialized.
//! - **Deadlines**: one per call, spanning every resume and re-send; on expiry the server is
//!   sent `notifications/cancelled` and the call fails with [`ErrorKind::Timeout`].
//!
//! Servers can opt into stronger checks (capability hash, sequenced event ids, explicit
//! resume rejection, idempotency keys) by advertising the resume-safety extension
//! (`capabilities.experimental.resumeSafety`); without it the client relies on the
//! specification's signals only.
//!
//! # Two eras
//!
//! The same client speaks the legacy era (2025-03-26 to 2025-11-25: sessions, `initialize`,
//! resumable streams) and the modern one (2026-07-28: no session, per-request metadata,
//! multi round-trip requests, tasks). [`Era::Auto`], the default, probes with
//! `server/discover` and falls back to `initialize`, remembering each origin's era in an
//! [`EraCache`]. In the modern era a broken stream cannot be resumed: the same rule applies,
//! re-sending only the keyed calls a server deduplicates and failing the others with
//! [`ErrorKind::OutcomeUnknown`].
//!
//! # The guide
//!
//! [`guide`] has a chapter each for calls, recovery, restarts (the ledger of calls in flight
//! and [`Client::recover`]: the one way a fleet restarts), eras, authorization,
//! configuration, the bridge, the bindings and the compatibility promise.
//!
//! # Layers
//!
//! - [`Client`] / [`ClientBuilder`]: the async API (tokio + reqwest), in [`client`] (the
//!   `client` feature, on by default; without it only the sans-IO core is built).
//! - [`bridge::Bridge`]: keep another SDK's client (rmcp, Python `mcp`, the TypeScript SDK)
//!   and get these rules: a JSON-RPC message adapter over [`Client`], with era translation
//!   (a legacy-only host reaches a 2026-07-28 server).
//! - [`proto::Session`]: the sans-IO state machine the driver pumps; a language binding or a
//!   simulator can drive it directly with virtual time.
//! - [`sse`]: a bounded, spec-exact `text/event-stream` decoder.
//! - `client::telemetry` (the `otel` feature): OpenTelemetry spans and metrics on the
//!   semantic conventions for MCP, with the recovery attributes they lack.
//!
//! [Model Context Protocol]: https://modelcontextprotocol.io/specification/2025-11-25/basic/transports
#![deny(missing_docs)]
// The crate docs introduce the client API and its OAuth provider; built without them, those
// links have no target.
#![cfg_attr(
    not(all(feature = "client", feature = "oauth")),
    allow(rustdoc::broken_intra_doc_links)
)]

pub mod auth;
#[cfg(feature = "client")]
pub mod bridge;
#[cfg(feature = "client")]
pub mod client;
pub mod error;
pub mod guide;
pub mod ids;
#[cfg(feature = "oauth")]
pub mod oauth;
pub mod policy;
pub mod proto;
mod setters;
pub mod sse;

pub use auth::AuthChallenge;
#[cfg(feature = "client")]
pub use client::{
    CallHandle, CallToolResult, Client, ClientBuilder, Content, EraCache, EventStream,
    InitializeResult, Ledger, LedgerEntry, MemoryLedger, NotificationStream, Presentation,
    ProgressStream, RecoveredCall, Request, RequestContext, ServerNotification, Startable,
    TokenProvider, TokenRequest, Tool, ToolCall,
};
#[cfg(feature = "client")]
#[allow(deprecated)]
pub use client::{InMemoryTaskStore, StoredTask, TaskStore};
pub use error::{Error, ErrorKind, Result, RpcError};
pub use ids::{CapabilityHash, EventId, IdempotencyKey, RequestId, SessionId};
pub use policy::ReconnectPolicy;
pub use proto::{
    CallId, Era, ExtensionStatus, ListenStopReason, ProtocolVersion, ReinitReason, RejectReason,
    ResendPolicy, ServerRequest, SessionEvent,
};

// The README's quickstart is compiled too, so it cannot drift from the API.
#[cfg(all(doctest, feature = "client", feature = "oauth"))]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
