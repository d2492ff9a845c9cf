//! The assertion grants of a client without a user: workload identity federation (the
//! RFC 7523 jwt-bearer grant with a token the platform issued the workload) and
//! enterprise-managed authorization (an identity assertion authorization grant, ID-JAG,
//! obtained from the enterprise identity provider by RFC 8693 token exchange, then the
//! jwt-bearer grant with it).

use std::sync::Arc;

use crate::error::{Error, ErrorKind};
use crate::oauth::{OAuthError, Secret};

/// `grant_type` of the RFC 7523 JWT bearer grant.
pub(super) const JWT_BEARER: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";
/// `grant_type` of RFC 8693 token exchange.
pub(super) const TOKEN_EXCHANGE: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
/// The token type of an identity assertion authorization grant.
pub(super) const ID_JAG: &str = "urn:ietf:params:oauth:token-type:id-jag";
/// The token type of an OpenID Connect ID token.
pub(super) const ID_TOKEN: &str = "urn:ietf:params:oauth:token-type:id_token";

type Source = Arc<dyn Fn() -> Result<String, Error> + Send + Sync>;

/// A token the application supplies: the same one each time, or read anew for each grant
/// (a platform rotates a projected workload token, a user signs in again).
#[derive(Clone)]
enum TokenSource {
    Fixed(Secret),
    Read(Source),
}

impl TokenSource {
    fn get(&self) -> Result<Secret, OAuthError> {
        match self {
            TokenSource::Fixed(token) => Ok(token.clone()),
            TokenSource::Read(read) => read()
                .map(Secret::new)
                .map_err(|e| OAuthError::Config(format!("reading the assertion: {e}"))),
        }
    }
}

impl std::fmt::Debug for TokenSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TokenSource::Fixed(_) => f.write_str("Fixed(<redacted>)"),
            TokenSource::Read(_) => f.write_str("Read(..)"),
        }
    }
}

/// Workload identity federation: the workload's own identity token (a Kubernetes service
/// account token, a cloud instance identity JWT, a CI job token…), whose audience is the
/// authorization server, sent as the `assertion` of the RFC 7523 jwt-bearer grant. Set with
/// [`OAuthBuilder::workload_identity`](super::OAuthBuilder::workload_identity).
#[derive(Clone, Debug)]
pub struct WorkloadIdentity {
    token: TokenSource,
}

impl WorkloadIdentity {
    /// The same token for every grant.
    pub fn token(jwt: impl Into<Secret>) -> Self {
        WorkloadIdentity {
            token: TokenSource::Fixed(jwt.into()),
        }
    }

    /// A token `read` anew for each grant (e.g. from the file the platform rotates it in).
    /// `read` runs on the runtime, inside the token flow: it must not block (a small file read
    /// is fine; a network call is not), or it holds a worker thread, and on a current-thread
    /// runtime every timer, past any deadline.
    pub fn from_fn(read: impl Fn() -> Result<String, Error> + Send + Sync + 'static) -> Self {
        WorkloadIdentity {
            token: TokenSource::Read(Arc::new(read)),
        }
    }

    pub(super) fn assertion(&self) -> Result<Secret, OAuthError> {
        self.token.get()
    }
}

/// Enterprise-managed authorization: the user's ID token from the enterprise identity
/// provider (IdP) is exchanged there (RFC 8693, `requested_token_type` ID-JAG, `audience`
/// the authorization server's issuer, `resource` the MCP server) for an identity assertion
/// authorization grant, which the authorization server takes in the jwt-bearer grant. Set
/// with [`OAuthBuilder::identity_assertion`](super::OAuthBuilder::identity_assertion).
#[derive(Clone, Debug)]
pub struct IdentityAssertion {
    pub(super) token_endpoint: String,
    id_token: TokenSource,
    pub(super) client_id: Option<String>,
    pub(super) client_secret: Option<Secret>,
}

impl IdentityAssertion {
    /// The IdP's token endpoint (https, or loopback http) and the user's ID token from it.
    pub fn new(idp_token_endpoint: impl Into<String>, id_token: impl Into<Secret>) -> Self {
        IdentityAssertion {
            token_endpoint: idp_token_endpoint.into(),
            id_token: TokenSource::Fixed(id_token.into()),
            client_id: None,
            client_secret: None,
        }
    }

    /// Like [`IdentityAssertion::new`], with the ID token `read` anew for each exchange.
    /// `read` must not block, as [`WorkloadIdentity::from_fn`]'s.
    pub fn from_fn(
        idp_token_endpoint: impl Into<String>,
        read: impl Fn() -> Result<String, Error> + Send + Sync + 'static,
    ) -> Self {
        IdentityAssertion {
            id_token: TokenSource::Read(Arc::new(read)),
            ..Self::new(idp_token_endpoint, String::new())
        }
    }

    /// This client's `client_id` at the IdP. Default: none sent.
    pub fn client_id(mut self, client_id: impl Into<String>) -> Self {
        self.client_id = Some(client_id.into());
        self
    }

    /// This client's secret at the IdP, sent with HTTP Basic (with the
    /// [`client_id`](Self::client_id)). Default: none.
    pub fn client_secret(mut self, secret: impl Into<Secret>) -> Self {
        self.client_secret = Some(secret.into());
        self
    }

    pub(super) fn id_token(&self) -> Result<Secret, OAuthError> {
        self.id_token.get()
    }

    pub(super) fn check(&self) -> Result<(), Error> {
        let invalid = |m: String| Error::new(ErrorKind::InvalidConfig, m);
        let url = reqwest::Url::parse(&self.token_endpoint)
            .map_err(|e| invalid(format!("IdP token endpoint {}: {e}", self.token_endpoint)))?;
        if !crate::oauth::is_secure_url(&url) {
            return Err(invalid(format!(
                "IdP token endpoint {url} is neither https nor loopback"
            )));
        }
        if self.client_secret.is_some() && self.client_id.is_none() {
            return Err(invalid("an IdP client secret needs its client_id".into()));
        }
        Ok(())
    }
}

/// How a client without a user obtains its tokens.
#[derive(Clone, Debug, Default)]
pub(super) enum MachineGrant {
    #[default]
    ClientCredentials,
    Workload(WorkloadIdentity),
    Enterprise(IdentityAssertion),
}
