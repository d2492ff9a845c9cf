//! MCP authorization for the client: [`OAuthProvider`], a [`TokenProvider`] that discovers
//! the server's authorization server, registers, runs the OAuth 2.1 flows and keeps the
//! tokens fresh. The checks it relies on are pure functions in [`crate::oauth`].
//!
//! The MCP server names the authorization server; what that lets it do is bounded: machine
//! credentials go only to their [`ClientCredentials::issuer`], a remote server cannot send
//! the client to loopback URLs, nothing goes over plain http off loopback (with the
//! provider's own HTTP client, or one of yours that follows no redirects: see
//! [`OAuthBuilder::http_client`]), every redirect
//! answer must arrive at its own authorization server's redirect URI (see
//! [`crate::oauth::UrlPolicy`] and the `dangerous_` switches of [`OAuthBuilder`]).
//!
//! The authorization extensions, each off by default: DPoP-bound tokens
//! ([`OAuthBuilder::dpop`] with a [`DpopKey`]), enterprise-managed authorization
//! ([`OAuthBuilder::identity_assertion`] with an [`IdentityAssertion`]) and workload identity
//! federation ([`OAuthBuilder::workload_identity`] with a [`WorkloadIdentity`]).
//!
//! ```no_run
//! use mcp_resume::client::oauth::{HeadlessAuthorizer, OAuth};
//! use mcp_resume::Client;
//!
//! # async fn run() -> Result<(), mcp_resume::Error> {
//! let oauth = OAuth::builder()
//!     .client_name("my agent")
//!     .redirect_uri("http://127.0.0.1:8976/callback")
//!     // A desktop agent opens a browser here and waits for the redirect.
//!     .authorizer(HeadlessAuthorizer::new())
//!     .build()?;
//! let client = Client::builder("https://mcp.example.com/mcp").auth(oauth).build()?;
//! client.connect().await?; // the 401 starts discovery, registration and authorization
//! # Ok(())
//! # }
//! ```
//!
//! [`TokenProvider`]: crate::TokenProvider

mod authorizer;
mod bounded;
mod dpop;
mod grant;
mod jwt;
mod provider;
mod step_up;
mod store;
mod wire;

pub use authorizer::{AuthorizationRequest, Authorizer, HeadlessAuthorizer};
pub use dpop::DpopKey;
pub use grant::{IdentityAssertion, WorkloadIdentity};
pub use provider::{ClientCredentials, OAuth, OAuthBuilder, OAuthProvider};
pub use store::{InMemoryTokenStore, TokenStore};
