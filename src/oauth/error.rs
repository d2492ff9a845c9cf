//! [`OAuthError`]: why an authorization attempt stopped.

/// Why an authorization attempt stopped. Carried as the source of the [`crate::Error`] a
/// token provider returns, and kept by the provider for the application
/// ([`OAuthProvider::last_failure`](crate::client::oauth::OAuthProvider::last_failure)).
/// Messages never contain a credential.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OAuthError {
    /// No protected resource metadata and no authorization server metadata could be found.
    #[error("discovery failed: {0}")]
    Discovery(String),
    /// The protected resource metadata names another resource than the MCP server: its
    /// authorization servers are not trusted for this server.
    #[error("the protected resource metadata is for {resource}, not for {server}")]
    ResourceMismatch {
        /// The `resource` of the metadata.
        resource: String,
        /// The MCP server's URL.
        server: String,
    },
    /// Authorization server metadata whose `issuer` is not the issuer its well-known URL was
    /// built from; it is not used.
    #[error("the authorization server metadata names issuer {found}, expected {expected}")]
    IssuerMismatch {
        /// The issuer the well-known URL was built from.
        expected: String,
        /// The metadata's `issuer`.
        found: String,
    },
    /// The authorization server does not advertise PKCE with `S256`.
    #[error(
        "the authorization server does not advertise PKCE S256 (code_challenge_methods_supported)"
    )]
    PkceUnsupported,
    /// An OAuth URL (or the MCP endpoint) that is neither `https` nor a loopback `http` URL,
    /// where plain `http` was not allowed ([`UrlPolicy`](super::UrlPolicy)).
    #[error("refusing an OAuth URL that is neither https nor loopback: {0}")]
    InsecureUrl(String),
    /// A loopback URL named for a remote MCP endpoint: requesting it would let the server
    /// reach services on this machine ([`UrlPolicy`](super::UrlPolicy)).
    #[error("refusing a loopback URL named for a remote MCP endpoint: {0}")]
    LoopbackUrl(String),
    /// Machine credentials configured without the issuer they belong to, or for another
    /// authorization server than the one the MCP server names.
    #[error("the client's credentials are not for this authorization server: {0}")]
    UntrustedIssuer(String),
    /// No way to identify the client to this authorization server: no pre-registered
    /// credentials for it, no client ID metadata document support, no registration endpoint.
    #[error("no client registration possible: {0}")]
    Registration(String),
    /// The authorization response failed a check (state, `iss`), or carried an error.
    #[error("authorization response rejected: {0}")]
    AuthorizationResponse(String),
    /// The token endpoint refused the request.
    #[error("token endpoint: {error}{}", description.as_deref().map(|d| format!(" ({d})")).unwrap_or_default())]
    TokenEndpoint {
        /// The OAuth `error` code, or a description of an answer that cannot be used.
        error: String,
        /// `error_description`, when the server sent one.
        description: Option<String>,
    },
    /// The server keeps asking for scopes that re-authorization already requested.
    #[error("step-up authorization for scope \"{0}\" was already tried; not trying again")]
    StepUpLimit(String),
    /// The application's authorizer (the hook that shows the authorization page) failed or
    /// the user declined.
    #[error("authorizer: {0}")]
    Authorizer(String),
    /// A metadata, registration or token request failed on the network, got no answer
    /// within `OAuthBuilder::http_timeout` or none for now (a 5xx, 429 or 408), got one too
    /// large to read, or got one that is no OAuth answer (a firewall's HTML page, a body that
    /// is not JSON). Trying again later may succeed: the provider keeps its tokens.
    #[error("http: {0}")]
    Http(String),
    /// The provider's configuration cannot work (e.g. a private key that does not parse).
    #[error("configuration: {0}")]
    Config(String),
    /// A DPoP proof could not be made (the key does not sign), or a server's DPoP answer
    /// cannot be used (a bound token without a key to prove it with).
    #[error("DPoP: {0}")]
    Dpop(String),
    /// The identity provider refused the token exchange of enterprise-managed authorization,
    /// or answered something other than an identity assertion grant.
    #[error("identity provider: {0}")]
    IdentityProvider(String),
    /// The token store failed.
    #[error("token store: {0}")]
    Store(String),
}
