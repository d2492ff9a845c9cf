//! The server half of the resume-safety extension: makes any MCP Streamable HTTP server
//! resume-safe without touching its code.
//!
//! A resumed SSE stream is only a resume if the instance serving it can prove the session's
//! context: replaying bytes from a shared log is not that (the incident this workspace
//! starts from). And a tool call with a side effect runs exactly once across re-sends only if
//! something deduplicates its idempotency key. [`ResumeSafetyLayer`] does both, in front of
//! the server you already have:
//!
//! - **advertises** the extension (`capabilities.experimental.resumeSafety` in `initialize`
//!   results, the idempotency part in 2026-07-28 `server/discover` results), naming only what
//!   it enforces;
//! - **capability hash**: `Mcp-Capability-Hash` on every response of a session, the digest
//!   of what its `initialize` negotiated, recorded with the instance that owns the session;
//! - **sequenced event ids**: SSE ids rewritten to `<stream>-<seq>` (the inner server's own ids
//!   kept to translate a `Last-Event-ID` back for its replay); an event whose `id:` is empty,
//!   with which the inner server resets its client's cursor (no resume point there), reaches
//!   the client with its `id:` empty and takes no number, the next event numbered one past
//!   the last, and a resume from before it is refused `event_gap` (nothing proves the inner
//!   server's replay would bring back an event it gave no id);
//! - **resume authorization**: a resume is forwarded only if the session has a record, this
//!   instance opened the stream (a session's POSTs may be served anywhere, its streams'
//!   continuations live where they were opened), it still knows every event after the
//!   cursor, no request on the stream was lost (a stream's log is kept for resumes long
//!   after the stream ended, 10,000 logs at most, so it keeps the ids of at most 64 requests
//!   and 4 KiB of id text in all, about 7 KiB: a POST whose requests pass either keeps them
//!   unread, and once its stream fails it cannot be resumed; of the inner server's own event
//!   ids it keeps the last 4,096 and at most 64 KiB, a resume from before them refused
//!   `event_gap`), and the context is the one the stream was opened under; then the inner
//!   server's replay is checked event by event before the
//!   client sees it (a replay longer than `max_body` is not held whole: its head goes, the
//!   rest is still checked as it passes, and a divergence then cuts the stream and breaks it
//!   for good). Otherwise: `404`,
//!   `Mcp-Resume-Rejected: <reason>`, a `SESSION_RESUME_REJECTED` error, the session
//!   forgotten (with `unknown_session` there is nothing to forget: later unkeyed requests
//!   under that id reach the inner server, and a keyed call of a session with no record is
//!   answered `404` by the guard when it enforces the capability hash);
//! - **idempotency, both eras**: a `tools/call` with a key (`params._meta`, the
//!   `Idempotency-Key` header, or `params.idempotencyKey`) is claimed atomically across
//!   instances; the same call again gets the stored answer re-addressed to its new JSON-RPC
//!   id (nothing runs), another call under the key an error, a call whose first run is still
//!   going `IDEMPOTENCY_KEY_IN_USE`, one whose instance died mid-run or whose run ended
//!   without an answer to store (a 5xx, a timeout layer's 408: any failure but a refusal that
//!   proves the call did not run, which frees the key) `IDEMPOTENCY_OUTCOME_UNKNOWN`, for as
//!   long as the store keeps
//!   the key (by default 24 h in a `MemoryStore`; `RedisOptions::lost_retention`, 7 days by
//!   default, on Redis). A keyed call's answer is read to its end and stored even when its
//!   client has gone, and kept as its text came, however deeply its result nests (it is
//!   read only as deep as its id, its answer member, the result's `_meta` and an error's
//!   code). A result that cannot carry the capability-hash mark, not an object or with a
//!   `_meta` that is neither an object nor `null`, is not stored: its key reads
//!   `IDEMPOTENCY_OUTCOME_UNKNOWN`. A 2026-07-28 request's refusal of the request as sent
//!   (`-32020` header mismatch, `-32022` unsupported protocol version) lets the key go even
//!   when it comes in a `200` answer: nothing is stored, and the call runs when sent again;
//!   an earlier revision's answer with those codes is the server's own error, stored as the
//!   call's answer. "The same call" is the same tool and arguments compared by value (key
//!   order and a number's spelling do not matter). Keys are one namespace per store, shared by
//!   every client, unless [`key_scope_header`](ResumeSafetyLayer::key_scope_header) names the
//!   header that identifies the authenticated client: then each client's keys are its own.
//!   A run's lease is renewed for as long as it runs, with no maximum: a tool that never
//!   answers holds its key `IDEMPOTENCY_KEY_IN_USE` until its instance stops, so a tool that
//!   can hang should carry its own timeout (a timeout layer's `408` marks the key lost).
//!
//! What it does not understand passes untouched; bodies over a bound are not read whole (one
//! that names a key in the header or in its first bytes is refused `413`, never run
//! unguarded), and a keyed call in a body it cannot read as JSON (a byte order mark, `NaN`,
//! UTF-16 or UTF-32, which lenient readers such as Python's take) is refused `400`
//! `IDEMPOTENCY_UNGUARDABLE`. A request body with a `Content-Encoding` other than `identity`
//! cannot be read at all: while keys are guarded, every such POST, keyed or not (it cannot be
//! told), is refused `415` `IDEMPOTENCY_UNGUARDABLE` with `Accept-Encoding: identity`, since a
//! decompressing layer inside the guard would run a keyed call on every re-send. A response
//! the inner server compressed (a `Content-Encoding` other than
//! `identity`) is not read either: its bytes pass as they are (with the capability hash in
//! its head): its events keep the inner server's own ids, which the guard does not resume
//! from, an `initialize` so answered is neither advertised nor recorded, and a keyed call so
//! answered has its key marked lost (`IDEMPOTENCY_OUTCOME_UNKNOWN`).
//! Compression, of requests and of responses, belongs in front of the guard (a compression
//! or decompression layer outside it, or a proxy), not in the server it wraps. A store
//! that cannot be reached, or does not answer within its deadline (a `RedisStore`'s
//! `RedisOptions::response_timeout`, 1 s by default, bounds each command; the guard bounds
//! every step of any store too, `store_timeout`, 5 s by default, on a timer thread of its
//! own, not the runtime's), makes keyed calls `503` (retryable), never run unguarded; a resume on an instance that must read its
//! session's record from the store is `503` too (it cannot be judged then), and everything
//! else passes. A claim whose answer was lost with the store (it went away mid-command) may
//! have landed: the refused call's key is let go once the store is back (tried again for a
//! minute, or a lease if longer, even when the client has left; at most 1,000 keys at once,
//! `guard::Retry::MOST_AT_ONCE`, so that a long outage costs bounded memory and store load),
//! so its re-send runs. A keyed call of a session whose record no instance and no store
//! holds (evicted, expired, begun before the guard was deployed, or held in a form the store
//! cannot read: another version's, damaged) is answered `404` as an
//! unknown session, so its client starts a new one: run, it would go without its context's
//! mark, and its stored answer could be served to another context.
//!
//! A session's record lives in the store for its retention (24 h by default:
//! `MemoryStore::with_limits`, `RedisOptions::retention`) after its last write or touch, and
//! a session in use keeps it: a request of the session on an instance whose last write or
//! touch of the record is half a retention old or more has the store touch it again, as does
//! an instance that reads the record from the store (how old it is there is not known). So a
//! session in use for days still gets its hash on every response and its resumes judged,
//! wherever its requests land. A full `MemoryStore` drops the record that expires first (the
//! one written or touched longest ago; a session in use is touched once per half retention,
//! so it can go before an idle one touched more recently); an unkeyed call still costs no
//! store round trip but once per half retention.
//!
//! # Quickstart
//!
//! An rmcp 3.11 server, resume-safe by one `.layer(...)`:
//!
//! ```no_run
//! use mcp_resume_server::{MemoryStore, ResumeSafetyLayer};
//! use rmcp::handler::server::router::tool::ToolRouter;
//! use rmcp::model::{ServerCapabilities, ServerConfig};
//! use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
//! use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
//! use rmcp::{tool, tool_handler, tool_router, ServerHandler};
//!
//! #[derive(Clone)]
//! struct Tools {
//!     tool_router: ToolRouter<Self>,
//! }
//!
//! #[tool_router]
//! impl Tools {
//!     #[tool(description = "Says hello")]
//!     fn hello(&self) -> String {
//!         "hello".into()
//!     }
//! }
//!
//! #[tool_handler(router = self.tool_router)]
//! impl ServerHandler for Tools {
//!     fn get_info(&self) -> ServerConfig {
//!         ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
//!     }
//! }
//!
//! # #[tokio::main]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let mcp: StreamableHttpService<Tools, LocalSessionManager> = StreamableHttpService::new(
//!     || Ok(Tools { tool_router: Tools::tool_router() }),
//!     Default::default(),
//!     StreamableHttpServerConfig::default(),
//! );
//! let app = axum::Router::new().nest_service(
//!     "/mcp",
//!     tower::ServiceBuilder::new()
//!         .layer(ResumeSafetyLayer::new(MemoryStore::default()))
//!         .service(mcp),
//! );
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! axum::serve(listener, app).await?;
//! # Ok(())
//! # }
//! ```
//!
//! For several replicas, share a [`RedisStore`] (`RedisStore::connect(url).await?`, or
//! [`RedisStore::connect_cluster`]) and give each replica its own
//! [`InstanceId`](ids::InstanceId) (the default is random per process, which is right).
//! Route legacy sessions by `Mcp-Session-Id` (the inner server keeps them in memory);
//! 2026-07-28 requests may go anywhere.
//!
//! The skin runs on tokio. Keyed calls need its timers (`enable_time`, which
//! `#[tokio::main]` and `Runtime::new` turn on): a call's lease is renewed, and a release
//! the store refused is tried again, on the runtime's clock. Unkeyed traffic needs none.
//!
//! # Layers of this crate
//!
//! - [`guard`]: every rule, sans-IO (no runtime, no clock reads): a skin feeds it what passes
//!   and runs the store operations it hands out.
//! - [`store`]: the one [`Store`] trait; [`MemoryStore`] (one process), [`RedisStore`]
//!   (Redis or Redis Cluster; feature `redis`, on by default).
//! - [`skin`]: what every skin does with the guard, in any framework or language: the
//!   settings ([`GuardBuilder`](skin::GuardBuilder)), the store steps, a response's rewriting
//!   pushed in as it comes. The tower layer, the Python binding's ASGI middleware and the Node
//!   binding's handler wrapper all drive the guard through it.
//! - [`ResumeSafetyLayer`]: the tower skin, for any `http` service.

mod error;
pub mod guard;
pub mod ids;
pub mod skin;
pub mod store;
mod tower;
pub mod wire;

pub use crate::error::{Error, ErrorKind};
pub use crate::store::{MemoryStore, Store};
#[cfg(feature = "redis")]
pub use crate::store::{RedisOptions, RedisStore};
pub use crate::tower::{
    BoxError, GuardedBody, GuardedRequestBody, ResponseFuture, ResumeSafety, ResumeSafetyLayer,
};
