//! MCP authorization (OAuth 2.1), the parts that need no network: metadata documents and the
//! URLs they are fetched from, the checks a client makes on them, scope selection, the
//! authorization response's checks (state, RFC 9207 `iss`), and the choice of a registration
//! and a token endpoint authentication method; the claims of a DPoP proof.
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
    application_type, choose_registration, dynamic_registration_request,
    select_token_endpoint_auth, RegisteredClient, Registration, TokenEndpointAuth,
};
pub use response::{authorization_code, ExpectedResponse};
pub use scope::{
    covers, offline_access, scope_param, select_initial_scopes, union, OFFLINE_ACCESS,
};
pub use secret::Secret;
pub use tokens::TokenSet;
