//! MCP authorization (OAuth 2.1), the parts that need no network: metadata documents and the
//! URLs they are fetched from, the checks a client makes on them (which URLs a server may
//! send the client to: [`UrlPolicy`]), scope selection, the authorization response's checks
//! (redirect URI, state, RFC 9207 `iss`), and the choice of a registration, a redirect URI
//! per authorization server and a token endpoint authentication method; the claims of a DPoP
//! proof.
//!
//! Everything here is a pure function of its inputs, so it is tested without a server; the
//! flows that fetch, register and exchange codes live in
//! [`client::oauth`](crate::client::oauth), which calls these.

mod dpop;
mod error;
mod metadata;
mod registration;
mod response;
mod scope;
mod secret;
mod tokens;
mod trust;

pub use dpop::{
    ath, htu, nonce_scope, DpopClaims, DPOP_HEADER, DPOP_NONCE_HEADER, DPOP_TOKEN_TYPE,
    USE_DPOP_NONCE,
};
pub use error::OAuthError;
pub use metadata::{
    authorization_server_metadata_urls, check_resource, is_secure_url, legacy_authorization_base,
    legacy_endpoints, protected_resource_metadata_urls, AuthorizationServerMetadata,
    LegacyEndpoints, ProtectedResourceMetadata,
};
pub use registration::{
    application_type, check_client_metadata_document, check_redirect_uri, choose_registration,
    dynamic_registration_request, redirect_uri_for, select_token_endpoint_auth, RegisteredClient,
    Registration, TokenEndpointAuth,
};
pub(crate) use response::same_endpoint;
pub use response::{authorization_code, ExpectedResponse};
pub use scope::{
    bounded, covers, offline_access, scope_param, select_initial_scopes, union, MAX_SCOPES,
    MAX_SCOPE_ITEMS, OFFLINE_ACCESS,
};
pub use secret::Secret;
pub use tokens::{token_expiry, TokenSet, MAX_TOKEN_LIFETIME};
pub use trust::{is_loopback_host, UrlPolicy};
pub(crate) use trust::{shown, shown_url};
