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

// The pure rules the flows in `client::oauth` apply; kept inside the crate (their tests live
// beside them), so that what users are promised is the types below.
pub(crate) use dpop::{nonce_scope, DPOP_NONCE_HEADER, USE_DPOP_NONCE};
pub use dpop::{DpopClaims, DPOP_TOKEN_TYPE};
pub use error::OAuthError;
pub(crate) use metadata::{
    authorization_server_metadata_urls, check_resource, is_secure_url, legacy_authorization_base,
    legacy_endpoints, protected_resource_metadata_urls,
};
pub use metadata::{AuthorizationServerMetadata, LegacyEndpoints, ProtectedResourceMetadata};
pub(crate) use registration::{
    check_client_metadata_document, check_redirect_uri, choose_registration,
    dynamic_registration_request, redirect_uri_for, select_token_endpoint_auth,
};
pub use registration::{RegisteredClient, Registration, TokenEndpointAuth};
pub use response::ExpectedResponse;
pub(crate) use response::{authorization_code, same_endpoint};
pub(crate) use scope::{
    bounded, covers, offline_access, scope_param, select_initial_scopes, union,
};
pub use secret::Secret;
pub(crate) use tokens::token_expiry;
pub use tokens::{TokenSet, MAX_TOKEN_LIFETIME};
pub use trust::UrlPolicy;
pub(crate) use trust::{is_loopback_host, shown, shown_url};
