//! [`OAuthProvider`]: a [`TokenProvider`] that obtains its tokens by MCP authorization.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use futures::future::BoxFuture;
use http::{HeaderMap, Method};
use reqwest::Url;
use tokio::sync::{watch, OwnedMutexGuard};

use crate::auth::AuthChallenge;
use crate::client::auth::{Presentation, TokenProvider, TokenRequest};
use crate::error::{Error, ErrorKind};
use crate::oauth::{
    authorization_server_metadata_urls, check_client_metadata_document, check_redirect_uri,
    check_resource, choose_registration, covers, legacy_authorization_base, legacy_endpoints,
    offline_access, protected_resource_metadata_urls, redirect_uri_for, scope_param,
    select_initial_scopes, select_token_endpoint_auth, shown, shown_url, union,
    AuthorizationServerMetadata, OAuthError, ProtectedResourceMetadata, RegisteredClient,
    Registration, Secret, TokenEndpointAuth, TokenSet, UrlPolicy, USE_DPOP_NONCE,
};

use super::authorizer::Authorizer;
use super::bounded::{BoundedAuthorizer, BoundedStore, OwnedAuthorizer};
use super::dpop::DpopKey;
use super::grant::{IdentityAssertion, MachineGrant, WorkloadIdentity};
use super::jwt::ClientAssertion;
use super::step_up::StepUps;
use super::store::{InMemoryTokenStore, TokenStore};
use super::wire::{self, ClientAuth, CodeFlow, HttpClient, TokenEndpoint};

/// Entry point: `OAuth::builder()`.
#[derive(Debug)]
pub struct OAuth;

impl OAuth {
    /// A provider configuration with the defaults (authorization code grant, in-memory
    /// store, refresh tokens asked for where offered).
    pub fn builder() -> OAuthBuilder {
        OAuthBuilder::default()
    }
}

/// The client credentials of a machine-to-machine client (no user): an id with a secret,
/// with a private key for `private_key_jwt`, or alone for a public client. They
/// authenticate the client credentials grant, or the jwt-bearer grant of
/// [`OAuthBuilder::workload_identity`] and [`OAuthBuilder::identity_assertion`].
///
/// **They are bound to an issuer**: [`ClientCredentials::issuer`] names the authorization
/// server they belong to, and [`OAuthBuilder::build`] refuses them without one. The MCP
/// server's protected resource metadata says which authorization server to ask; without the
/// binding, an MCP server that names one of its own (`https://evil.example`) receives the
/// client secret in the Basic header, the workload's identity token (replayable at the real
/// authorization server for its lifetime), or the identity assertion grant.
/// [`ClientCredentials::dangerous_trust_discovered_issuer`] is the explicit opt-out.
#[derive(Clone, Debug)]
pub struct ClientCredentials {
    client_id: String,
    auth: MachineAuth,
    issuer: Option<String>,
    trust_discovered_issuer: bool,
}

#[derive(Clone, Debug)]
enum MachineAuth {
    None,
    Secret(Secret),
    Jwt(ClientAssertion),
}

impl ClientCredentials {
    /// A public client: `client_id` alone, no client authentication (`none`). For grants
    /// whose assertion identifies the client, as in workload identity federation.
    pub fn public(client_id: impl Into<String>) -> Self {
        ClientCredentials {
            client_id: client_id.into(),
            auth: MachineAuth::None,
            issuer: None,
            trust_discovered_issuer: false,
        }
    }

    /// `client_id` and `client_secret`, sent as the authorization server prefers
    /// (`client_secret_basic`, else `client_secret_post`).
    pub fn secret(client_id: impl Into<String>, client_secret: impl Into<Secret>) -> Self {
        ClientCredentials {
            client_id: client_id.into(),
            auth: MachineAuth::Secret(client_secret.into()),
            issuer: None,
            trust_discovered_issuer: false,
        }
    }

    /// `client_id` authenticated by a JWT signed with `private_key_pem` (PKCS#8 PEM; PKCS#1
    /// for RSA) using `algorithm` (`ES256`, `RS256`, `PS256`, `EdDSA`, …): `private_key_jwt`.
    /// Fails with [`ErrorKind::InvalidConfig`] when the key does not parse or fit.
    pub fn private_key_jwt(
        client_id: impl Into<String>,
        private_key_pem: &str,
        algorithm: &str,
    ) -> Result<Self, Error> {
        let assertion = ClientAssertion::from_pem(private_key_pem, algorithm, None)
            .map_err(|e| Error::with_source(ErrorKind::InvalidConfig, e.to_string(), e))?;
        Ok(ClientCredentials {
            client_id: client_id.into(),
            auth: MachineAuth::Jwt(assertion),
            issuer: None,
            trust_discovered_issuer: false,
        })
    }

    /// Binds the credentials to the authorization server `issuer` (its issuer identifier,
    /// compared exactly): they are never presented to another one. When the protected
    /// resource metadata lists several authorization servers, this one is used; when it does
    /// not list it, authorization fails ([`OAuthError::UntrustedIssuer`]) before anything is
    /// sent. Required, unless [`ClientCredentials::dangerous_trust_discovered_issuer`].
    pub fn issuer(mut self, issuer: impl Into<String>) -> Self {
        self.issuer = Some(issuer.into());
        self
    }

    /// Presents the credentials to whichever authorization server the MCP server names, with
    /// no [`ClientCredentials::issuer`]: whoever runs the MCP server (or can change its
    /// protected resource metadata) receives the client secret, the workload token or the
    /// identity assertion grant. Only for an MCP server trusted as much as the authorization
    /// server itself, or for test suites that name the authorization server only through
    /// discovery.
    pub fn dangerous_trust_discovered_issuer(mut self) -> Self {
        self.trust_discovered_issuer = true;
        self
    }
}

/// Configures an [`OAuthProvider`]; see [`OAuth::builder`].
pub struct OAuthBuilder {
    server: Option<String>,
    client_name: String,
    redirect_uri: String,
    metadata_document: Option<String>,
    pre_registered: Vec<RegisteredClient>,
    machine: Option<ClientCredentials>,
    authorizer: Option<Arc<dyn Authorizer>>,
    authorization_timeout: Duration,
    store: Arc<dyn TokenStore>,
    store_timeout: Duration,
    http: Option<reqwest::Client>,
    http_timeout: Duration,
    scopes: Option<Vec<String>>,
    offline_access: bool,
    refresh_margin: Duration,
    max_step_ups: u32,
    dpop: Option<DpopKey>,
    grant: MachineGrant,
    allow_loopback: bool,
    allow_plain_http: bool,
}

impl Default for OAuthBuilder {
    fn default() -> Self {
        OAuthBuilder {
            server: None,
            client_name: "mcp-resume".to_owned(),
            redirect_uri: "http://127.0.0.1:8976/callback".to_owned(),
            metadata_document: None,
            pre_registered: Vec::new(),
            machine: None,
            authorizer: None,
            authorization_timeout: Duration::from_secs(600),
            store: Arc::new(InMemoryTokenStore::new()),
            store_timeout: Duration::from_secs(30),
            http: None,
            http_timeout: Duration::from_secs(30),
            scopes: None,
            offline_access: true,
            refresh_margin: Duration::from_secs(60),
            max_step_ups: 2,
            dpop: None,
            grant: MachineGrant::ClientCredentials,
            allow_loopback: false,
            allow_plain_http: false,
        }
    }
}

impl std::fmt::Debug for OAuthBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OAuthBuilder")
            // Its user info or query may carry credentials.
            .field("server", &self.server.as_deref().map(shown))
            .field("client_name", &self.client_name)
            .field("redirect_uri", &self.redirect_uri)
            .field("metadata_document", &self.metadata_document)
            .field("pre_registered", &self.pre_registered)
            .field("client_credentials", &self.machine)
            .field("dpop", &self.dpop)
            .field("grant", &self.grant)
            .field("dangerous_allow_loopback", &self.allow_loopback)
            .field("dangerous_allow_plain_http", &self.allow_plain_http)
            .finish_non_exhaustive()
    }
}

impl OAuthBuilder {
    /// The MCP endpoint the tokens are for. Default: the URL of the first request the
    /// provider is asked about; a provider bound to one endpoint refuses to hand its token
    /// for another.
    pub fn server_url(mut self, url: impl Into<String>) -> Self {
        self.server = Some(url.into());
        self
    }

    /// `client_name` for dynamic registration. Default `mcp-resume`.
    pub fn client_name(mut self, name: impl Into<String>) -> Self {
        self.client_name = name.into();
        self
    }

    /// The redirect URI the authorization server sends the user agent back to: `https`, a
    /// loopback `http` URI or an app's private-use scheme, without fragment. With dynamic
    /// registration each authorization server gets its own, this one with a segment naming
    /// the server appended to its path (`…/callback/as-1f0c9a4e2b7d5c38`, a digest of the
    /// server's issuer), so that an answer meant for
    /// one is never taken for another's (mix-up attacks, RFC 9700 §4.4.2): the [`Authorizer`]
    /// must receive every path under it, and gets the one to expect in
    /// [`AuthorizationRequest::redirect_uri`](super::AuthorizationRequest::redirect_uri).
    /// Pre-registered clients use theirs ([`RegisteredClient::redirect_uri`]) or this one;
    /// a client ID metadata document, this one. Default `http://127.0.0.1:8976/callback`.
    pub fn redirect_uri(mut self, uri: impl Into<String>) -> Self {
        self.redirect_uri = uri.into();
        self
    }

    /// The hook that shows the authorization page and returns the redirect (required for the
    /// authorization code grant).
    pub fn authorizer(mut self, authorizer: impl Authorizer) -> Self {
        self.authorizer = Some(Arc::new(authorizer));
        self
    }

    /// How long the [`Authorizer`] (the user) has to return the redirect. Past it the
    /// authorization fails ([`OAuthError::Authorizer`], in
    /// [`OAuthProvider::last_failure`]) and the provider is free again: the next request
    /// that needs a token starts a new one. Until then requests wait behind it (each to its
    /// own deadline), as do [`OAuthProvider::sign_out`] and the other accessors. It fails
    /// sooner when every client that wanted it is dropped (see [`OAuthProvider`]). Default
    /// 10 minutes.
    pub fn authorization_timeout(mut self, limit: Duration) -> Self {
        self.authorization_timeout = limit;
        self
    }

    /// The URL of this client's client ID metadata document, used as its `client_id` by
    /// authorization servers that support them (`client_id_metadata_document_supported`) and
    /// promise `iss` in their responses (RFC 9207): the `client_id` and redirect URI are then
    /// the same at every authorization server, and `iss` is what tells their answers apart.
    /// Elsewhere the client registers dynamically. The application hosts the document
    /// (https, with a path, no fragment, user info or dot segments; its `client_id` equal to
    /// the URL, and the redirect URI listed).
    pub fn client_metadata_document(mut self, url: impl Into<String>) -> Self {
        self.metadata_document = Some(url.into());
        self
    }

    /// Credentials registered beforehand with the authorization server `client.issuer`;
    /// preferred over any other registration at that server, never used at another.
    pub fn pre_registered(mut self, client: RegisteredClient) -> Self {
        self.pre_registered.push(client);
        self
    }

    /// Machine to machine: the client credentials grant with these credentials instead of
    /// the authorization code grant (no user, no authorizer).
    pub fn client_credentials(mut self, credentials: ClientCredentials) -> Self {
        self.machine = Some(credentials);
        self
    }

    /// Workload identity federation: the RFC 7523 jwt-bearer grant with the workload's
    /// token as the assertion, instead of the client credentials grant. The client is the
    /// one of [`OAuthBuilder::client_credentials`] (required; [`ClientCredentials::public`]
    /// when the assertion alone identifies it). A refused grant is not retried with another
    /// grant type, and an assertion the token endpoint refused is not presented again (a
    /// rotated one is).
    pub fn workload_identity(mut self, workload: WorkloadIdentity) -> Self {
        self.grant = MachineGrant::Workload(workload);
        self
    }

    /// Enterprise-managed authorization: the user's ID token is exchanged at the enterprise
    /// identity provider for an identity assertion authorization grant (ID-JAG) for the
    /// discovered authorization server and the MCP server, then presented in the
    /// jwt-bearer grant, authenticated as the client of
    /// [`OAuthBuilder::client_credentials`] (required). No authorization page, no
    /// registration. An ID token the IdP refused, or whose grant the token endpoint refused,
    /// is not exchanged again (a new one is).
    pub fn identity_assertion(mut self, assertion: IdentityAssertion) -> Self {
        self.grant = MachineGrant::Enterprise(assertion);
        self
    }

    /// Where tokens and registrations are kept. Default: an [`InMemoryTokenStore`].
    pub fn token_store(mut self, store: impl TokenStore) -> Self {
        self.store = Arc::new(store);
        self
    }

    /// How long each [`TokenStore`] operation may take. Past it the operation fails
    /// ([`ErrorKind::Timeout`], naming the store) as if the store had refused it: tokens
    /// just obtained stay in use in memory, and the provider is free for the next request.
    /// Default 30 s.
    pub fn store_timeout(mut self, limit: Duration) -> Self {
        self.store_timeout = limit;
        self
    }

    /// The HTTP client for metadata, registration and token requests. Default: a client of
    /// its own that follows no redirect. Whatever the client, each of these exchanges is
    /// bounded by [`OAuthBuilder::http_timeout`], yours having a timeout or not.
    ///
    /// Build yours with `redirect(reqwest::redirect::Policy::none())`. The URL checks (no
    /// loopback, no plain http, see [`OAuthBuilder::dangerous_allow_loopback`]) are made on
    /// the URL the provider asks for; a client that follows redirects has already sent the
    /// request where a redirect points (a GET, or a POST turned into a GET by a 302 or 303)
    /// by the time the provider sees the answer, which it then refuses. A token request is
    /// never sent again to where a 307 or 308 points (its body cannot be replayed).
    pub fn http_client(mut self, http: reqwest::Client) -> Self {
        self.http = Some(http);
        self
    }

    /// How long each metadata, registration or token exchange (the request sent and its
    /// answer read, a DPoP nonce's retry included) may take, whatever the HTTP client. Past
    /// it the request fails ([`OAuthError::Http`], in [`OAuthProvider::last_failure`]) as
    /// when the server cannot be reached: the tokens are kept, and the provider is free for
    /// the next request. Default 30 s.
    pub fn http_timeout(mut self, limit: Duration) -> Self {
        self.http_timeout = limit;
        self
    }

    /// Scopes to ask for on the first authorization, replacing the specification's
    /// selection (challenge, then `scopes_supported`, else none).
    pub fn scopes<I, S>(mut self, scopes: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.scopes = Some(scopes.into_iter().map(Into::into).collect());
        self
    }

    /// Whether to ask for a refresh token with `offline_access` when the authorization server
    /// lists it in `scopes_supported` (never when it does not). Default `true`.
    pub fn offline_access(mut self, wanted: bool) -> Self {
        self.offline_access = wanted;
        self
    }

    /// How long before its expiry a token is renewed (refreshed, or granted anew to a
    /// machine client). Default 60 s.
    ///
    /// The margin is capped at half the token's lifetime: the time from when the provider
    /// got it (from the token endpoint, or from the store) to its expiry. A token granted for
    /// an hour is renewed 60 s before it expires; one granted for 30 s (no longer than the
    /// margin, so otherwise due from the moment it arrives) is used for 15 s, instead of
    /// costing a grant and a round trip on every request. A token without an expiry is
    /// renewed only once the server refuses it.
    pub fn refresh_margin(mut self, margin: Duration) -> Self {
        self.refresh_margin = margin;
        self
    }

    /// How many step-up authorizations (after a 403 `insufficient_scope`) are made for one
    /// set of scopes before the provider gives up on it. Default 2.
    pub fn max_step_ups(mut self, n: u32) -> Self {
        self.max_step_ups = n;
        self
    }

    /// DPoP (RFC 9449) with `key`: with an authorization server that lists the key's
    /// algorithm in `dpop_signing_alg_values_supported`, every token request carries a proof,
    /// and the DPoP-bound tokens it grants are presented as `Authorization: DPoP` with a
    /// fresh proof on every MCP request (resumes and re-sent requests included). A server's
    /// nonce (`DPoP-Nonce`, `use_dpop_nonce`) is taken up with one retry. With other
    /// authorization servers the tokens stay `Bearer`. Default: off. [`DpopKey::generate`]
    /// makes a key for the life of the process.
    pub fn dpop(mut self, key: DpopKey) -> Self {
        self.dpop = Some(key);
        self
    }

    /// Lets a remote MCP server or its authorization server send the client to loopback
    /// URLs (`localhost`, `127.0.0.1`, `::1`): metadata, registration, token requests and the
    /// authorization page. Without it, only an MCP endpoint that is itself on a loopback host
    /// may use them; otherwise any remote server could make the client send requests to
    /// services on the user's machine (SSRF). Default `false`.
    pub fn dangerous_allow_loopback(mut self, allow: bool) -> Self {
        self.allow_loopback = allow;
        self
    }

    /// Allows OAuth over plain `http` off loopback: the MCP endpoint's tokens and every OAuth
    /// request (metadata, registration, codes, secrets) cross the network in cleartext,
    /// readable and replaceable on the way. Without it, the provider sends no token to a plain
    /// `http` MCP endpoint that is not on a loopback host (its 401 fails with
    /// [`OAuthError::InsecureUrl`]), and requests no OAuth URL over plain `http` off loopback.
    /// Default `false`.
    pub fn dangerous_allow_plain_http(mut self, allow: bool) -> Self {
        self.allow_plain_http = allow;
        self
    }

    /// The provider. [`ErrorKind::InvalidConfig`] for a bad server URL (or a plain `http` one
    /// off loopback, without [`OAuthBuilder::dangerous_allow_plain_http`]), redirect URI or
    /// client metadata document URL; machine credentials without their
    /// [`ClientCredentials::issuer`]; or an authorization code configuration without an
    /// authorizer.
    pub fn build(self) -> Result<OAuthProvider, Error> {
        let invalid = |m: String| Error::new(ErrorKind::InvalidConfig, m);
        let config = |e: OAuthError| Error::with_source(ErrorKind::InvalidConfig, e.to_string(), e);
        let server = self
            .server
            .as_deref()
            .map(|s| Url::parse(s).map_err(|e| invalid(format!("server URL {}: {e}", shown(s)))))
            .transpose()?;
        if let Some(server) = &server {
            let mut policy = UrlPolicy::for_server(server);
            if self.allow_plain_http {
                policy = policy.dangerous_allow_plain_http();
            }
            policy.check_server().map_err(config)?;
        }
        check_redirect_uri(&self.redirect_uri).map_err(config)?;
        if let Some(document) = &self.metadata_document {
            check_client_metadata_document(document).map_err(config)?;
        }
        for client in &self.pre_registered {
            if let Some(uri) = &client.redirect_uri {
                check_redirect_uri(uri).map_err(config)?;
            }
        }
        if let Some(machine) = &self.machine {
            match &machine.issuer {
                Some(issuer) => {
                    Url::parse(issuer)
                        .map_err(|e| invalid(format!("client credentials issuer {issuer}: {e}")))?;
                }
                None if machine.trust_discovered_issuer => {
                    tracing::warn!(
                        "client credentials without an issuer: they go to whichever authorization server the MCP server names"
                    );
                }
                None => {
                    return Err(invalid(
                        "client credentials need the issuer of the authorization server they belong to (ClientCredentials::issuer): without it the MCP server decides who receives them (ClientCredentials::dangerous_trust_discovered_issuer opts out)"
                            .into(),
                    ))
                }
            }
        }
        if self.machine.is_none() && !matches!(self.grant, MachineGrant::ClientCredentials) {
            return Err(invalid(
                "workload identity and identity assertion grants need the client's credentials (OAuthBuilder::client_credentials)"
                    .into(),
            ));
        }
        if let MachineGrant::Enterprise(assertion) = &self.grant {
            assertion.check()?;
        }
        if self.machine.is_none() && self.authorizer.is_none() {
            return Err(invalid(
                "the authorization code grant needs an authorizer (OAuthBuilder::authorizer)"
                    .into(),
            ));
        }
        let client = match self.http {
            Some(http) => http,
            // Its exchanges are bounded by `http_timeout`, as an application's client's are.
            None => reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .connect_timeout(Duration::from_secs(10))
                .build()
                .map_err(|e| Error::with_source(ErrorKind::InvalidConfig, "HTTP client", e))?,
        };
        let http = HttpClient {
            client,
            limit: self.http_timeout,
        };
        Ok(OAuthProvider {
            handle: 0,
            inner: Arc::new(Inner {
                config: Config {
                    client_name: self.client_name,
                    redirect_uri: self.redirect_uri,
                    metadata_document: self.metadata_document,
                    pre_registered: self.pre_registered,
                    machine: self.machine,
                    authorizer: self.authorizer.map(|inner| {
                        Arc::new(BoundedAuthorizer {
                            inner,
                            limit: self.authorization_timeout,
                        }) as Arc<dyn Authorizer>
                    }),
                    scopes: self.scopes,
                    offline_access: self.offline_access,
                    refresh_margin: self.refresh_margin,
                    max_step_ups: self.max_step_ups,
                    dpop: self.dpop,
                    grant: self.grant,
                    allow_loopback: self.allow_loopback,
                    allow_plain_http: self.allow_plain_http,
                },
                http,
                store: Arc::new(BoundedStore {
                    inner: self.store,
                    limit: self.store_timeout,
                }),
                state: Arc::new(tokio::sync::Mutex::new(State {
                    server,
                    ..State::default()
                })),
                last_failure: Mutex::new(None),
                bindings: Mutex::new(Bindings::default()),
                reauthorizations: AtomicU64::new(0),
                handles: AtomicU64::new(1),
                owners: Mutex::new(Owners::default()),
            }),
        })
    }
}

/// A [`TokenProvider`] that authorizes with OAuth 2.1 as the MCP specification describes;
/// give it to [`ClientBuilder::auth`](crate::ClientBuilder::auth).
///
/// An ordinary request is sent with the current token, refreshed first when it expires
/// within the refresh margin (at most half its lifetime: [`OAuthBuilder::refresh_margin`]),
/// or without credentials when there is none yet. The server's 401 then starts the flow:
/// protected resource metadata (from the challenge's
/// `resource_metadata`, else the well-known URIs), its `resource` checked against the
/// server's URL, the authorization server's metadata (RFC 8414 or OpenID Connect, `issuer`
/// checked), a registration (pre-registered, client ID metadata document, or dynamic), the
/// authorization code grant with PKCE `S256`, `state`, `resource` and RFC 9207 `iss` checks
/// (or the client credentials grant), and the request is sent again with the new token.
/// A later 401 refreshes the token, or authorizes again; a 403 `insufficient_scope`
/// authorizes again for the union of the scopes asked before and the challenge's, a bounded
/// number of times. The protected resource metadata is read again on each refusal, so an
/// authorization server that changed is noticed: tokens and registrations of the previous
/// one are never presented to it.
///
/// Cheap to clone; clones share tokens and state. Concurrent refusals run one flow: the
/// others wait and get its token, or its failure (an authorization the user declined, a
/// refresh the token endpoint gave no answer to).
///
/// An authorization lives as long as a client that wants it: once every clone of the
/// provider whose requests started or waited on it is closed or dropped (with the client it
/// was given to, [`ClientBuilder::auth`](crate::ClientBuilder::auth); see
/// [`TokenProvider::close`]), the [`Authorizer`]'s future is
/// dropped and the authorization fails, freeing the provider, instead of running to
/// [`OAuthBuilder::authorization_timeout`] for nobody. A request that ends (its deadline, a
/// dropped future) does not end it: its client may ask again, and another may wait on it.
/// A token exchange already under way is finished, so that tokens the authorization server
/// issued reach the store.
pub struct OAuthProvider {
    inner: Arc<Inner>,
    /// Which clone this is: the authorizations its requests wanted end with it.
    handle: u64,
}

impl Clone for OAuthProvider {
    fn clone(&self) -> Self {
        OAuthProvider {
            inner: self.inner.clone(),
            handle: self.inner.handles.fetch_add(1, Ordering::Relaxed),
        }
    }
}

impl Drop for OAuthProvider {
    fn drop(&mut self) {
        self.inner.release(self.handle);
    }
}

impl std::fmt::Debug for OAuthProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OAuthProvider").finish_non_exhaustive()
    }
}

impl OAuthProvider {
    /// Why the last authorization attempt failed, if it did.
    pub fn last_failure(&self) -> Option<OAuthError> {
        self.inner
            .last_failure
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The scopes granted to the current token, if there is one.
    pub async fn granted_scopes(&self) -> Option<Vec<String>> {
        let state = self.inner.state.lock().await;
        state.tokens.as_ref().map(|t| t.scopes.clone())
    }

    /// The issuer of the authorization server in use, once discovered.
    pub async fn issuer(&self) -> Option<String> {
        let state = self.inner.state.lock().await;
        state.discovery.as_ref().map(|d| d.issuer.clone())
    }

    /// Forgets the current tokens (in the store too): the next request goes without
    /// credentials and the server's 401 starts a new authorization.
    pub async fn sign_out(&self) -> Result<(), Error> {
        let mut state = self.inner.state.lock().await;
        state.tokens = None;
        if let Some(server) = state.server.clone() {
            self.inner
                .store
                .save_tokens(&store_key(&server), None)
                .await?;
        }
        Ok(())
    }
}

impl TokenProvider for OAuthProvider {
    /// The token of the next request; without one yet, discovery runs up front (the
    /// well-known URIs) and the provider authorizes before answering.
    fn token(&self, request: TokenRequest) -> BoxFuture<'static, Result<String, Error>> {
        let flow = detached(self.inner.clone(), self.handle, request, true);
        Box::pin(async move {
            match flow.await? {
                Some(token) => Ok(token),
                None => Err(Error::new(ErrorKind::Unauthorized, "no token")),
            }
        })
    }

    fn credential(
        &self,
        request: TokenRequest,
    ) -> BoxFuture<'static, Result<Option<String>, Error>> {
        detached(self.inner.clone(), self.handle, request, false)
    }

    /// A DPoP-bound token with the `DPoP` scheme and a proof made for this request; a
    /// `Bearer` token as `Bearer`. A token whose binding is no longer known (replaced by a
    /// refresh or `sign_out` while its request was on the way) is presented as `DPoP` when
    /// the provider has a key: a bound token is never downgraded to `Bearer`.
    fn present(&self, token: &str, method: &Method, url: &Url) -> Result<Presentation, Error> {
        let known = self
            .inner
            .bindings
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .bound(token);
        let bound = known.unwrap_or(self.inner.config.dpop.is_some());
        match (&self.inner.config.dpop, bound) {
            (Some(key), true) => {
                let proof = key.proof(method.as_str(), url, Some(token))?;
                Presentation::dpop(token, &proof)
            }
            // A bound token from the store, and no key: never downgraded to Bearer.
            (None, true) => Err(Error::new(
                ErrorKind::InvalidConfig,
                "a DPoP-bound token, and no DPoP key to prove it with (OAuthBuilder::dpop)",
            )),
            (_, false) => Presentation::bearer(token),
        }
    }

    /// Keeps the MCP server's DPoP nonce; a refusal for want of it is sent again once.
    fn observe(
        &self,
        url: &Url,
        _status: u16,
        headers: &HeaderMap,
        challenge: Option<&AuthChallenge>,
    ) -> bool {
        let Some(key) = &self.inner.config.dpop else {
            return false;
        };
        let named = key.observe_nonce(url, headers);
        named && challenge.is_some_and(|c| c.error.as_deref() == Some(USE_DPOP_NONCE))
    }

    /// Ends the authorization this client's requests started or waited on, unless another
    /// client of the provider still wants it (as when the client is dropped).
    fn close(&self) {
        self.inner.release(self.handle);
    }

    /// A clone: each client its own part in the authorizations it wants.
    fn for_client(&self) -> Option<Arc<dyn TokenProvider>> {
        Some(Arc::new(self.clone()))
    }
}

/// Runs [`Inner::credential`] in a task of its own (on the current tokio runtime; inline
/// without one) once the provider's state is this request's, so that the request can be
/// dropped (its deadline, an app's `timeout`) without cutting the flow half way: an
/// authorization server that redeemed the refresh token has issued its successor, which must
/// reach the provider and its store, or the next refresh presents a spent token
/// (`invalid_grant`, and with reuse detection the whole grant revoked) and the user is asked
/// to authorize again. A step-up the user is completing is kept the same way. A request
/// dropped while it waits for the state (behind an authorization the user has not finished)
/// leaves nothing behind. A panic in the flow (an app's authorizer or store) reaches the
/// awaiting request as before, where the driver turns it into that request's failure.
///
/// The reauthorizations ended are counted when the request is made, not once it has the
/// state: a failed one that ends while the request waits answers it too. So is the
/// request's clone of the provider (`handle`) among those the running flow serves: the flow
/// it waits behind is its client's as much as the one that started it.
fn detached(
    inner: Arc<Inner>,
    handle: u64,
    request: TokenRequest,
    up_front: bool,
) -> BoxFuture<'static, Result<Option<String>, Error>> {
    let waited = inner.reauthorizations.load(Ordering::SeqCst);
    let waiting = Waiting::new(inner.clone(), handle);
    Box::pin(async move {
        let mut state = inner.state.clone().lock_owned().await;
        let (flow, ended) = inner.start(handle);
        drop(waiting);
        state.ended = Some(ended);
        // Made here, not in the flow: a flow whose task never ran is over all the same.
        let running = Running(inner.clone(), flow);
        let run = async move {
            let _running = running;
            inner.credential(state, request, up_front, waited).await
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return run.await;
        };
        let flow = runtime.spawn(run);
        match flow.await {
            Ok(outcome) => outcome,
            Err(ended) if ended.is_panic() => std::panic::resume_unwind(ended.into_panic()),
            Err(_) => Err(Error::new(
                ErrorKind::Closed,
                "the runtime shut down during authorization",
            )),
        }
    })
}

struct Config {
    client_name: String,
    redirect_uri: String,
    metadata_document: Option<String>,
    pre_registered: Vec<RegisteredClient>,
    machine: Option<ClientCredentials>,
    authorizer: Option<Arc<dyn Authorizer>>,
    scopes: Option<Vec<String>>,
    offline_access: bool,
    refresh_margin: Duration,
    max_step_ups: u32,
    dpop: Option<DpopKey>,
    /// The grant of a client with [`Config::machine`] credentials.
    grant: MachineGrant,
    allow_loopback: bool,
    allow_plain_http: bool,
}

struct Inner {
    config: Config,
    http: HttpClient,
    store: Arc<dyn TokenStore>,
    /// Shared with the flow a request starts ([`detached`]), which holds it to its end.
    state: Arc<tokio::sync::Mutex<State>>,
    last_failure: Mutex<Option<OAuthError>>,
    /// Whether the recent access tokens are DPoP-bound: read for every request, where the
    /// state's async lock is not taken.
    bindings: Mutex<Bindings>,
    /// How many flows started by a refused token (a refresh, a new or step-up authorization),
    /// or by an expired one whose renewal got no answer, have ended: read before a request
    /// waits for the state (which the flow holds), increased under it when one ends.
    reauthorizations: AtomicU64,
    /// The next clone's [`OAuthProvider::handle`].
    handles: AtomicU64,
    /// Which clones the flow holding the state serves.
    owners: Mutex<Owners>,
}

/// The clones of the provider (each the one a client was given) with requests waiting for
/// the state, and those the flow holding it serves: the flow's authorization is waited for
/// while one of them lives.
#[derive(Default)]
struct Owners {
    /// Requests waiting for the state, per clone.
    waiting: HashMap<u64, usize>,
    flows: u64,
    running: Option<Flow>,
}

struct Flow {
    id: u64,
    owners: HashSet<u64>,
    ended: watch::Sender<bool>,
}

impl Inner {
    fn owners(&self) -> std::sync::MutexGuard<'_, Owners> {
        self.owners.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The state is `handle`'s request's: a flow starts, serving it and every clone with a
    /// request waiting behind it. The receiver turns `true` once they have all ended.
    fn start(&self, handle: u64) -> (u64, watch::Receiver<bool>) {
        let mut owners = self.owners();
        owners.flows += 1;
        let id = owners.flows;
        let mut served: HashSet<u64> = owners.waiting.keys().copied().collect();
        served.insert(handle);
        let (ended, receiver) = watch::channel(false);
        owners.running = Some(Flow {
            id,
            owners: served,
            ended,
        });
        (id, receiver)
    }

    /// `handle` is dropped: the flow running ends its authorization if it served no other.
    fn release(&self, handle: u64) {
        let mut owners = self.owners();
        owners.waiting.remove(&handle);
        if let Some(flow) = owners.running.as_mut() {
            if flow.owners.remove(&handle) && flow.owners.is_empty() {
                tracing::debug!(
                    "every client that wanted this authorization has ended: it is abandoned"
                );
                flow.ended.send_replace(true);
            }
        }
    }
}

/// A request of the clone `handle` waiting for the state; it joins the flow holding it.
struct Waiting(Arc<Inner>, u64);

impl Waiting {
    fn new(inner: Arc<Inner>, handle: u64) -> Self {
        {
            let mut owners = inner.owners();
            *owners.waiting.entry(handle).or_default() += 1;
            if let Some(flow) = owners.running.as_mut() {
                flow.owners.insert(handle);
                // A flow whose clients all ended, not yet at (or past) its authorizer, is
                // wanted again: left ended, it would fail this live client's request with
                // the others' abandonment.
                flow.ended
                    .send_if_modified(|ended| std::mem::replace(ended, false));
            }
        }
        Waiting(inner, handle)
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        let mut owners = self.0.owners();
        if let Some(count) = owners.waiting.get_mut(&self.1) {
            *count -= 1;
            if *count == 0 {
                owners.waiting.remove(&self.1);
            }
        }
    }
}

/// The flow `.1` holds the state until this is dropped (its end, or its task's).
struct Running(Arc<Inner>, u64);

impl Drop for Running {
    fn drop(&mut self) {
        let mut owners = self.0.owners();
        if owners.running.as_ref().is_some_and(|f| f.id == self.1) {
            owners.running = None;
        }
    }
}

/// The last few access tokens the provider handed out and whether each is DPoP-bound. More
/// than the current one: a request may still be on its way with the token a refresh just
/// replaced, and must present it the way it was granted.
#[derive(Default)]
struct Bindings {
    recent: std::collections::VecDeque<(Secret, bool)>,
}

impl Bindings {
    /// How many tokens are remembered: a token older than this many grants has no request
    /// on the way any more.
    const KEPT: usize = 8;

    fn note(&mut self, tokens: &TokenSet) {
        if self.bound(tokens.access_token.expose()).is_some() {
            return;
        }
        if self.recent.len() == Self::KEPT {
            self.recent.pop_back();
        }
        self.recent
            .push_front((tokens.access_token.clone(), tokens.dpop_bound));
    }

    /// Whether `token` is DPoP-bound; `None` when it is not one of the recent tokens.
    fn bound(&self, token: &str) -> Option<bool> {
        self.recent
            .iter()
            .find(|(t, _)| t.expose() == token)
            .map(|&(_, bound)| bound)
    }
}

/// The key a server's tokens are stored under: its URL without user info or fragment, so
/// that a password in the URL never reaches a persistent store.
fn store_key(server: &Url) -> String {
    let mut key = server.clone();
    // Fails only for URLs that cannot have user info, which then have none.
    let _ = key.set_username("");
    let _ = key.set_password(None);
    key.set_fragment(None);
    key.into()
}

#[derive(Default)]
struct State {
    /// The MCP endpoint this provider's tokens are for.
    server: Option<Url>,
    loaded: bool,
    discovery: Option<Discovery>,
    tokens: Option<TokenSet>,
    /// When the provider got [`State::tokens`] (from the token endpoint or the store): the
    /// lifetime they are known to have runs from here to their expiry, and caps the margin
    /// they are renewed ahead of it ([`renewal_due`]). Unknown, it is taken as now.
    received: Option<SystemTime>,
    /// The scopes of the last authorization.
    requested: Vec<String>,
    /// Step-up authorizations made per requested scope set.
    step_ups: StepUps,
    /// When renewing ahead of expiry last failed: not tried again on every request.
    renew_failed: Option<std::time::Instant>,
    /// A workload assertion the token endpoint refused, or an enterprise ID token refused by
    /// the IdP or whose grant the token endpoint refused, with the answer: the same token is
    /// not presented again (a retry cannot succeed, and servers count it against us).
    refused_assertion: Option<(Secret, OAuthError)>,
    /// How the last flow started by a refused token failed (the user declined, the token
    /// endpoint gave no answer), or the renewal of an expired one got no answer, with its
    /// number in [`Inner::reauthorizations`]; `None` once one succeeds. The requests refused
    /// (or whose token expired) while it ran take its failure instead of asking the user, or
    /// the token endpoint, again each.
    failed_reauthorization: Option<(u64, OAuthError)>,
    /// Turns `true` when every client the flow holding the state serves has ended.
    ended: Option<watch::Receiver<bool>>,
}

impl State {
    /// Fails with the answer `token` got, if it was refused before: it is not presented again.
    fn not_refused(&self, token: &Secret) -> Result<(), OAuthError> {
        match &self.refused_assertion {
            Some((refused, err)) if refused == token => Err(err.clone()),
            _ => Ok(()),
        }
    }

    /// Remembers `token` when `granted` is a refusal of it (not a failure to get an answer).
    fn remember_refusal<T>(
        &mut self,
        token: Secret,
        granted: Result<T, OAuthError>,
    ) -> Result<T, OAuthError> {
        if let Err(err @ (OAuthError::TokenEndpoint { .. } | OAuthError::IdentityProvider(_))) =
            &granted
        {
            self.refused_assertion = Some((token, err.clone()));
        }
        granted
    }
}

/// Whether a failed renewal left the tokens' worth unknown: no answer came (the network, a
/// 5xx or 429 from the token endpoint or a metadata URL), the answer was no OAuth error (a
/// firewall's HTML page), or the store failed. Only an answer
/// refusing them (an OAuth error of the token endpoint, another authorization server) has
/// them dropped; a passing outage must not cost the user an interactive authorization.
fn unanswered(failure: &OAuthError) -> bool {
    matches!(failure, OAuthError::Http(_) | OAuthError::Store(_))
}

/// How long after a failed renewal ahead of expiry the provider keeps the current token
/// without trying again.
const RENEW_BACKOFF: Duration = Duration::from_secs(10);

/// Whether `tokens`, which the provider got at `received`, are to be renewed at `now`: once
/// they expire within `margin`, capped at half the lifetime they had when received. Uncapped,
/// a token granted for no longer than the margin would be due from the moment it arrived,
/// and every request would renew it. A token without an expiry is never due; one received
/// already expired is due at once.
fn renewal_due(tokens: &TokenSet, received: SystemTime, now: SystemTime, margin: Duration) -> bool {
    let lifetime = tokens
        .expires_at
        .and_then(|at| at.duration_since(received).ok())
        .unwrap_or_default();
    tokens.expires_within(now, margin.min(lifetime / 2))
}

/// What discovery settled: the authorization server and how to reach it.
#[derive(Clone, Debug)]
struct Discovery {
    resource_metadata: Option<ProtectedResourceMetadata>,
    issuer: String,
    metadata: Option<AuthorizationServerMetadata>,
    authorization_endpoint: Option<String>,
    token_endpoint: String,
    registration_endpoint: Option<String>,
}

impl Discovery {
    fn resource(&self) -> Option<&str> {
        self.resource_metadata.as_ref().map(|m| m.resource.as_str())
    }

    fn scopes_supported(&self) -> Option<&[String]> {
        self.metadata.as_ref()?.scopes_supported.as_deref()
    }
}

impl Inner {
    async fn credential(
        &self,
        mut state: OwnedMutexGuard<State>,
        request: TokenRequest,
        up_front: bool,
        waited: u64,
    ) -> Result<Option<String>, Error> {
        let server = self.bind(&mut state, request.url.as_deref())?;
        if !state.loaded {
            // Marked loaded only once the store answered: a failed load is the next request's
            // to try again, not an empty store whose tokens a new authorization overwrites.
            state.tokens = self.store.load_tokens(&store_key(&server)).await?;
            // The store keeps no time of issue: the lifetime known is what is left of it, and
            // a token loaded near its expiry is renewed no earlier than one granted for as long.
            state.received = Some(SystemTime::now());
            state.loaded = true;
            if self.config.dpop.is_none() && state.tokens.as_ref().is_some_and(|t| t.dpop_bound) {
                // Useless without the key it is bound to: authorize anew.
                state.tokens = None;
            }
            if let Some(tokens) = state.tokens.as_mut() {
                if !wire::presentable(tokens.access_token.expose()) {
                    // Kept before such tokens were refused: renewed before any request fails
                    // for it.
                    tokens.expires_at = Some(SystemTime::UNIX_EPOCH);
                }
            }
            self.note_binding(state.tokens.as_ref());
            if let Some(tokens) = &state.tokens {
                state.requested = tokens.scopes.clone();
            }
        }
        let outcome = match (self.policy(&server).check_server(), &request.challenge) {
            (Err(insecure), None) if !up_front => {
                // No token crosses the network in cleartext: the request goes without one,
                // and if the server wants one its refusal fails with this reason.
                tracing::debug!(%insecure, "no credentials for this endpoint");
                Ok(None)
            }
            (Err(insecure), _) => Err(insecure),
            (Ok(()), None) => self.ordinary(&mut state, &server, up_front, waited).await,
            (Ok(()), Some(challenge)) => self
                .refused(
                    &mut state,
                    &server,
                    challenge,
                    request.refused_token.as_deref(),
                    waited,
                )
                .await
                .map(Some),
        };
        match outcome {
            Ok(token) => Ok(token),
            Err(failure) => {
                tracing::warn!(%failure, "authorization failed");
                *self.last_failure.lock().unwrap_or_else(|p| p.into_inner()) =
                    Some(failure.clone());
                let kind = match failure {
                    OAuthError::Http(_) | OAuthError::Store(_) => ErrorKind::Transport,
                    OAuthError::Config(_) => ErrorKind::InvalidConfig,
                    _ => ErrorKind::Unauthorized,
                };
                Err(Error::with_source(kind, failure.to_string(), failure))
            }
        }
    }

    /// Which URLs this endpoint's OAuth traffic may go to.
    fn policy(&self, server: &Url) -> UrlPolicy {
        let mut policy = UrlPolicy::for_server(server);
        if self.config.allow_loopback {
            policy = policy.dangerous_allow_loopback();
        }
        if self.config.allow_plain_http {
            policy = policy.dangerous_allow_plain_http();
        }
        policy
    }

    /// The endpoint the tokens are for; the first one asked about when none was configured.
    /// Messages show the URLs without user info or query: they may carry credentials.
    fn bind(&self, state: &mut State, url: Option<&str>) -> Result<Url, Error> {
        let asked = url
            .map(|u| {
                Url::parse(u)
                    .map_err(|e| Error::new(ErrorKind::InvalidConfig, format!("{}: {e}", shown(u))))
            })
            .transpose()?;
        match (&state.server, asked) {
            (Some(bound), Some(asked)) if *bound != asked => Err(Error::new(
                ErrorKind::InvalidConfig,
                format!(
                    "this OAuth provider holds tokens for {}, not for {}",
                    shown_url(bound),
                    shown_url(&asked)
                ),
            )),
            (Some(bound), _) => Ok(bound.clone()),
            (None, Some(asked)) => {
                state.server = Some(asked.clone());
                Ok(asked)
            }
            (None, None) => Err(Error::new(
                ErrorKind::InvalidConfig,
                "the OAuth provider does not know its server yet (OAuthBuilder::server_url)",
            )),
        }
    }

    /// An ordinary request: the current token, renewed first when it is about to expire.
    /// `waited` is how many reauthorizations had ended when the request was made.
    async fn ordinary(
        &self,
        state: &mut State,
        server: &Url,
        up_front: bool,
        waited: u64,
    ) -> Result<Option<String>, OAuthError> {
        let now = SystemTime::now();
        if let Some(tokens) = &state.tokens {
            let backing_off = state
                .renew_failed
                .is_some_and(|at| at.elapsed() < RENEW_BACKOFF);
            let received = state.received.unwrap_or(now);
            if !renewal_due(tokens, received, now, self.config.refresh_margin)
                || (backing_off && !tokens.expires_within(now, Duration::ZERO))
            {
                return Ok(Some(tokens.access_token.expose().to_owned()));
            }
            if let Some((ended, failure)) = &state.failed_reauthorization {
                // The token expired, and its renewal got no answer while this request
                // waited: the token endpoint is not asked again once per waiting request.
                let expired = tokens.expires_within(now, Duration::ZERO);
                if expired && *ended > waited && unanswered(failure) {
                    return Err(failure.clone());
                }
            }
            let failure = match self.renew(state, server).await {
                Ok(token) => {
                    state.renew_failed = None;
                    state.failed_reauthorization = None;
                    return Ok(Some(token));
                }
                Err(err) => {
                    tracing::debug!(%err, "could not renew the token before its expiry");
                    state.renew_failed = Some(std::time::Instant::now());
                    err
                }
            };
            if let Some(tokens) = &state.tokens {
                if !tokens.expires_within(now, Duration::ZERO) {
                    return Ok(Some(tokens.access_token.expose().to_owned()));
                }
            }
            if unanswered(&failure) {
                // The refresh token may be good: the next request tries it again, rather
                // than the user being sent to authorize anew.
                let ended = self.reauthorizations.fetch_add(1, Ordering::SeqCst) + 1;
                state.failed_reauthorization = Some((ended, failure.clone()));
                return Err(failure);
            }
            self.forget(state, server).await?;
        }
        if up_front {
            let discovery = self.discover(state, server, None).await?;
            let scopes = self.initial_scopes(&discovery, None);
            return self.authorize(state, server, scopes).await.map(Some);
        }
        // No token: the server's refusal says where to get one.
        Ok(None)
    }

    /// The server refused `refused` (or a request without credentials). `waited` is how many
    /// reauthorizations had ended when the request was made.
    async fn refused(
        &self,
        state: &mut State,
        server: &Url,
        challenge: &AuthChallenge,
        refused: Option<&str>,
        waited: u64,
    ) -> Result<String, OAuthError> {
        if challenge.error.as_deref() == Some(USE_DPOP_NONCE) {
            // The token is good; the proof's nonce was not, after the one retry with the
            // server's nonce: a new token would meet the same refusal.
            return Err(OAuthError::Dpop(
                "the server refused the proof's nonce again".into(),
            ));
        }
        let insufficient =
            challenge.status == 403 || challenge.error.as_deref() == Some("insufficient_scope");
        if let Some(current) = &state.tokens {
            // Another request already renewed it while this one was refused.
            let renewed = refused != Some(current.access_token.expose());
            if renewed && (!insufficient || covers(&current.scopes, challenge.scope.as_deref())) {
                return Ok(current.access_token.expose().to_owned());
            }
        }
        if let Some((ended, failure)) = &state.failed_reauthorization {
            // Refused while that flow ran: the user just declined, the token endpoint gave no
            // answer (or the flow failed otherwise), and is not asked again once per request
            // that was waiting. A request made after it starts a flow of its own.
            if *ended > waited {
                return Err(failure.clone());
            }
        }
        let outcome = self
            .reauthorize(state, server, challenge, insufficient)
            .await;
        let ended = self.reauthorizations.fetch_add(1, Ordering::SeqCst) + 1;
        state.failed_reauthorization = outcome.as_ref().err().map(|e| (ended, e.clone()));
        outcome
    }

    /// A fresh token after the server refused the current one (or none): a refresh, else a
    /// new authorization; a step-up for `insufficient` scope.
    async fn reauthorize(
        &self,
        state: &mut State,
        server: &Url,
        challenge: &AuthChallenge,
        insufficient: bool,
    ) -> Result<String, OAuthError> {
        let discovery = self.discover(state, server, Some(challenge)).await?;
        if insufficient {
            let scopes = union(&state.requested, challenge.scope.as_deref());
            let key = scope_param(&scopes).unwrap_or_default();
            if !state.step_ups.admit(&key, self.config.max_step_ups) {
                return Err(OAuthError::StepUpLimit(key));
            }
            tracing::debug!(scope = %key, "step-up authorization");
            return self.authorize(state, server, scopes).await;
        }
        if state
            .tokens
            .as_ref()
            .is_some_and(|t| t.refresh_token.is_some())
        {
            match self.renew(state, server).await {
                Ok(token) => return Ok(token),
                // Kept for the next request to try again, as before its expiry.
                Err(err) if unanswered(&err) => return Err(err),
                Err(err) => tracing::debug!(%err, "refresh failed: authorizing again"),
            }
        }
        self.forget(state, server).await?;
        let scopes = if state.requested.is_empty() {
            self.initial_scopes(&discovery, challenge.scope.as_deref())
        } else {
            union(&state.requested, challenge.scope.as_deref())
        };
        self.authorize(state, server, scopes).await
    }

    fn initial_scopes(&self, discovery: &Discovery, challenge_scope: Option<&str>) -> Vec<String> {
        let scopes = match &self.config.scopes {
            Some(scopes) => scopes.clone(),
            None => select_initial_scopes(
                challenge_scope,
                discovery
                    .resource_metadata
                    .as_ref()
                    .and_then(|m| m.scopes_supported.as_deref()),
            ),
        };
        // A refresh token matters to a user's session; a machine asks for a new token anyway.
        let wanted = self.config.offline_access && self.config.machine.is_none();
        offline_access(scopes, wanted, discovery.scopes_supported())
    }

    async fn forget(&self, state: &mut State, server: &Url) -> Result<(), OAuthError> {
        if state.tokens.take().is_some() {
            self.store
                .save_tokens(&store_key(server), None)
                .await
                .map_err(|e| OAuthError::Store(e.to_string()))?;
        }
        Ok(())
    }

    async fn keep(
        &self,
        state: &mut State,
        server: &Url,
        tokens: TokenSet,
    ) -> Result<String, OAuthError> {
        let token = tokens.access_token.expose().to_owned();
        self.note_binding(Some(&tokens));
        state.tokens = Some(tokens.clone());
        state.received = Some(SystemTime::now());
        self.store
            .save_tokens(&store_key(server), Some(tokens))
            .await
            .map_err(|e| OAuthError::Store(e.to_string()))?;
        Ok(token)
    }

    /// Remembers whether the current token is DPoP-bound, for [`TokenProvider::present`].
    fn note_binding(&self, tokens: Option<&TokenSet>) {
        if let Some(tokens) = tokens {
            let mut bindings = self.bindings.lock().unwrap_or_else(|p| p.into_inner());
            bindings.note(tokens);
        }
    }

    /// The DPoP key to prove token requests with at this authorization server: the
    /// configured one, when the server accepts its algorithm.
    fn dpop_for(&self, discovery: &Discovery) -> Option<&DpopKey> {
        let key = self.config.dpop.as_ref()?;
        let metadata = discovery.metadata.as_ref()?;
        metadata.supports_dpop(&key.algorithm()).then_some(key)
    }

    /// A fresh token without the user: the refresh token grant, or for a machine client a
    /// new client credentials grant. Never across authorization servers.
    async fn renew(&self, state: &mut State, server: &Url) -> Result<String, OAuthError> {
        let Some(tokens) = state.tokens.clone() else {
            return Err(OAuthError::Discovery("no token to renew".into()));
        };
        if self.config.machine.is_none() && tokens.refresh_token.is_none() {
            return Err(OAuthError::TokenEndpoint {
                error: "no refresh token".into(),
                description: None,
            });
        }
        let discovery = match &state.discovery {
            Some(d) => d.clone(),
            None => self.discover(state, server, None).await?,
        };
        if discovery.issuer != tokens.issuer {
            return Err(OAuthError::Discovery(
                "the tokens are from another authorization server".into(),
            ));
        }
        if self.config.machine.is_some() {
            let scopes = state.requested.clone();
            return self.authorize(state, server, scopes).await;
        }
        let client = self.client_for(&discovery, &state.requested).await?;
        let endpoint = self.token_endpoint(&discovery, &client)?;
        let fresh = endpoint.refresh(&tokens).await?;
        tracing::debug!("token refreshed");
        self.keep(state, server, fresh).await
    }

    /// A new grant for `scopes`: the authorization code flow, or client credentials.
    async fn authorize(
        &self,
        state: &mut State,
        server: &Url,
        scopes: Vec<String>,
    ) -> Result<String, OAuthError> {
        let discovery = state
            .discovery
            .clone()
            .ok_or_else(|| OAuthError::Discovery("no authorization server".into()))?;
        let tokens = match &self.config.machine {
            Some(machine) => {
                let client = RegisteredClient::new(&discovery.issuer, &machine.client_id);
                let endpoint = self.machine_endpoint(&discovery, machine, &client)?;
                match &self.config.grant {
                    MachineGrant::ClientCredentials => endpoint.client_credentials(&scopes).await?,
                    MachineGrant::Workload(workload) => {
                        let assertion = workload.assertion()?;
                        state.not_refused(&assertion)?;
                        let granted = endpoint.jwt_bearer(&assertion, &scopes).await;
                        state.remember_refusal(assertion, granted)?
                    }
                    MachineGrant::Enterprise(idp) => {
                        // A refusal, by the IdP or of the grant it issued, is the ID token's.
                        let id_token = idp.id_token()?;
                        state.not_refused(&id_token)?;
                        let granted = async {
                            let grant = wire::identity_assertion_grant(
                                &self.http,
                                idp,
                                &id_token,
                                &discovery.issuer,
                                discovery.resource(),
                                &scopes,
                            )
                            .await?;
                            tracing::debug!("identity assertion grant obtained from the IdP");
                            endpoint.jwt_bearer(&grant, &scopes).await
                        }
                        .await;
                        state.remember_refusal(id_token, granted)?
                    }
                }
            }
            None => {
                let authorizer = self
                    .config
                    .authorizer
                    .clone()
                    .ok_or_else(|| OAuthError::Config("no authorizer".into()))?;
                let authorizer = OwnedAuthorizer {
                    inner: authorizer,
                    ended: state
                        .ended
                        .clone()
                        .unwrap_or_else(|| watch::channel(false).1),
                };
                if let Some(metadata) = &discovery.metadata {
                    if !metadata.supports_pkce_s256() {
                        return Err(OAuthError::PkceUnsupported);
                    }
                }
                let authorization_endpoint = discovery
                    .authorization_endpoint
                    .as_deref()
                    .ok_or_else(|| OAuthError::Discovery("no authorization endpoint".into()))?;
                let client = self.client_for(&discovery, &scopes).await?;
                let endpoint = self.token_endpoint(&discovery, &client)?;
                let iss_parameter_supported = discovery
                    .metadata
                    .as_ref()
                    .is_some_and(AuthorizationServerMetadata::iss_parameter_supported);
                let flow = CodeFlow {
                    authorization_endpoint,
                    redirect_uri: client
                        .redirect_uri
                        .as_deref()
                        .unwrap_or(&self.config.redirect_uri),
                    iss_parameter_supported,
                    scopes: &scopes,
                };
                endpoint.authorization_code(flow, &authorizer).await?
            }
        };
        state.requested = scopes;
        self.keep(state, server, tokens).await
    }

    fn token_endpoint<'a>(
        &'a self,
        discovery: &'a Discovery,
        client: &'a RegisteredClient,
    ) -> Result<TokenEndpoint<'a>, OAuthError> {
        let supported = discovery
            .metadata
            .as_ref()
            .and_then(|m| m.token_endpoint_auth_methods_supported.as_deref());
        let method = select_token_endpoint_auth(
            client.token_endpoint_auth_method.as_deref(),
            client.client_secret.is_some(),
            supported,
        );
        let auth = match (method, &client.client_secret) {
            (TokenEndpointAuth::ClientSecretBasic, Some(secret)) => ClientAuth::SecretBasic(secret),
            (TokenEndpointAuth::ClientSecretPost, Some(secret)) => ClientAuth::SecretPost(secret),
            _ => ClientAuth::Public,
        };
        Ok(TokenEndpoint {
            http: &self.http,
            url: &discovery.token_endpoint,
            issuer: &discovery.issuer,
            client_id: &client.client_id,
            auth,
            resource: discovery.resource(),
            dpop: self.dpop_for(discovery),
        })
    }

    fn machine_endpoint<'a>(
        &'a self,
        discovery: &'a Discovery,
        machine: &'a ClientCredentials,
        client: &'a RegisteredClient,
    ) -> Result<TokenEndpoint<'a>, OAuthError> {
        let auth = match &machine.auth {
            MachineAuth::None => ClientAuth::Public,
            MachineAuth::Jwt(assertion) => ClientAuth::Jwt(assertion),
            MachineAuth::Secret(secret) => {
                let supported = discovery
                    .metadata
                    .as_ref()
                    .and_then(|m| m.token_endpoint_auth_methods_supported.as_deref());
                match select_token_endpoint_auth(None, true, supported) {
                    TokenEndpointAuth::ClientSecretPost => ClientAuth::SecretPost(secret),
                    _ => ClientAuth::SecretBasic(secret),
                }
            }
        };
        tracing::debug!(method = auth.method().as_str(), grant = ?self.config.grant, "grant without a user");
        Ok(TokenEndpoint {
            http: &self.http,
            url: &discovery.token_endpoint,
            issuer: &discovery.issuer,
            client_id: &client.client_id,
            auth,
            resource: discovery.resource(),
            dpop: self.dpop_for(discovery),
        })
    }

    /// This client's identity at the discovered authorization server, registering when
    /// needed, in the specification's order of preference.
    async fn client_for(
        &self,
        discovery: &Discovery,
        scopes: &[String],
    ) -> Result<RegisteredClient, OAuthError> {
        let issuer = &discovery.issuer;
        if let Some(client) = self
            .config
            .pre_registered
            .iter()
            .find(|c| &c.issuer == issuer)
        {
            return Ok(client.clone());
        }
        if !self.config.pre_registered.is_empty() {
            tracing::warn!(%issuer, "pre-registered credentials are for another authorization server: not using them here");
        }
        let stored = self
            .store
            .load_client(issuer)
            .await
            .map_err(|e| OAuthError::Store(e.to_string()))?;
        // A client ID metadata document makes the `client_id` and the redirect URI the same at
        // every authorization server: only `iss` then tells their answers apart (RFC 9700
        // §4.4.2), so the document is used only where `iss` is promised.
        let metadata_documents = discovery.metadata.as_ref().is_some_and(|m| {
            m.supports_client_id_metadata_documents() && m.iss_parameter_supported()
        });
        let choice = choose_registration(
            false,
            self.config.metadata_document.is_some(),
            metadata_documents,
            discovery.registration_endpoint.as_deref(),
        );
        // Registered before with another redirect URI than this server's own (an earlier
        // version's shared one, or another configured base): registered anew where possible.
        let redirect_uri = redirect_uri_for(&self.config.redirect_uri, issuer);
        let stored = match (&choice, stored) {
            (Registration::Dynamic(_), Some(c))
                if c.redirect_uri.as_deref() != Some(redirect_uri.as_str()) =>
            {
                None
            }
            (_, stored) => stored,
        };
        match (choice, stored) {
            (Registration::ClientIdMetadataDocument, _) => {
                let url = self.config.metadata_document.clone().unwrap_or_default();
                Ok(RegisteredClient::new(issuer, url).auth_method("none"))
            }
            (_, Some(stored)) => Ok(stored),
            (Registration::Dynamic(endpoint), None) => {
                // Registered with a redirect URI of its own at each authorization server.
                let client = wire::register(
                    &self.http,
                    &endpoint,
                    issuer,
                    &self.config.client_name,
                    std::slice::from_ref(&redirect_uri),
                    scope_param(scopes).as_deref(),
                )
                .await?
                .redirect_uri(redirect_uri);
                tracing::debug!(%issuer, "registered dynamically");
                self.store
                    .save_client(client.clone())
                    .await
                    .map_err(|e| OAuthError::Store(e.to_string()))?;
                Ok(client)
            }
            _ => Err(OAuthError::Registration(format!(
                "{issuer} supports neither client ID metadata documents nor dynamic registration, and no credentials are configured for it"
            ))),
        }
    }

    /// Protected resource metadata, then the authorization server's; remembered in `state`.
    /// When the authorization server differs from the one in use, the tokens of the old one
    /// are dropped.
    async fn discover(
        &self,
        state: &mut State,
        server: &Url,
        challenge: Option<&AuthChallenge>,
    ) -> Result<Discovery, OAuthError> {
        let discovery = self.find(server, challenge).await?;
        if let Some(machine) = &self.config.machine {
            if machine
                .issuer
                .as_ref()
                .is_some_and(|i| *i != discovery.issuer)
            {
                return Err(OAuthError::UntrustedIssuer(format!(
                    "they are for another authorization server than {}",
                    discovery.issuer
                )));
            }
        }
        let previous = state.discovery.as_ref().map(|d| d.issuer.clone());
        let stale = state
            .tokens
            .as_ref()
            .is_some_and(|t| t.issuer != discovery.issuer);
        if previous.as_ref().is_some_and(|p| *p != discovery.issuer) || stale {
            tracing::info!(issuer = %discovery.issuer, "the authorization server changed: authorizing anew");
            self.forget(state, server).await?;
            state.requested.clear();
            state.step_ups.clear();
        }
        state.discovery = Some(discovery.clone());
        Ok(discovery)
    }

    async fn find(
        &self,
        server: &Url,
        challenge: Option<&AuthChallenge>,
    ) -> Result<Discovery, OAuthError> {
        let policy = self.policy(server);
        let resource_metadata = self.resource_metadata(server, challenge, &policy).await?;
        let Some(prm) = resource_metadata else {
            return self.legacy(server, &policy).await;
        };
        check_resource(&prm.resource, server)?;
        // The authorization server the client's credentials belong to, when the server lists
        // it among others; else the first listed.
        let bound = self.config.machine.as_ref().and_then(|m| m.issuer.as_ref());
        let issuer = prm
            .authorization_servers
            .iter()
            .find(|i| bound == Some(*i))
            .or_else(|| {
                prm.authorization_servers
                    .iter()
                    .find(|i| self.config.pre_registered.iter().any(|c| &c.issuer == *i))
            })
            .or_else(|| prm.authorization_servers.first())
            .cloned()
            .ok_or_else(|| {
                OAuthError::Discovery(
                    "the protected resource metadata names no authorization server".into(),
                )
            })?;
        if bound.is_some_and(|b| *b != issuer) {
            // Not even its metadata is fetched: the server is not one the client trusts.
            return Err(OAuthError::UntrustedIssuer(format!(
                "the protected resource metadata lists {}, not the credentials' issuer",
                prm.authorization_servers.join(", ")
            )));
        }
        let metadata = self
            .authorization_server(&issuer, false, &policy)
            .await?
            .ok_or_else(|| {
                OAuthError::Discovery(format!("no authorization server metadata for {issuer}"))
            })?;
        let token_endpoint = metadata
            .token_endpoint
            .clone()
            .ok_or_else(|| OAuthError::Discovery(format!("{issuer} names no token endpoint")))?;
        Ok(Discovery {
            resource_metadata: Some(prm),
            issuer,
            authorization_endpoint: metadata.authorization_endpoint.clone(),
            registration_endpoint: metadata.registration_endpoint.clone(),
            token_endpoint,
            metadata: Some(metadata),
        })
    }

    /// A server of the 2025-03-26 revision: no protected resource metadata; authorization
    /// server metadata under its origin, or failing that the default endpoints there.
    async fn legacy(&self, server: &Url, policy: &UrlPolicy) -> Result<Discovery, OAuthError> {
        let base = legacy_authorization_base(server);
        if let Some(metadata) = self.authorization_server(&base, true, policy).await? {
            let token_endpoint = metadata
                .token_endpoint
                .clone()
                .ok_or_else(|| OAuthError::Discovery(format!("{base} names no token endpoint")))?;
            return Ok(Discovery {
                resource_metadata: None,
                issuer: metadata.issuer.clone(),
                authorization_endpoint: metadata.authorization_endpoint.clone(),
                registration_endpoint: metadata.registration_endpoint.clone(),
                token_endpoint,
                metadata: Some(metadata),
            });
        }
        tracing::debug!(%base, "no metadata at all: the 2025-03-26 default endpoints");
        let defaults = legacy_endpoints(server);
        Ok(Discovery {
            resource_metadata: None,
            issuer: base,
            metadata: None,
            authorization_endpoint: Some(defaults.authorization_endpoint),
            token_endpoint: defaults.token_endpoint,
            registration_endpoint: Some(defaults.registration_endpoint),
        })
    }

    async fn resource_metadata(
        &self,
        server: &Url,
        challenge: Option<&AuthChallenge>,
        policy: &UrlPolicy,
    ) -> Result<Option<ProtectedResourceMetadata>, OAuthError> {
        if let Some(url) = challenge.and_then(|c| c.resource_metadata.as_deref()) {
            let url = policy.check(url)?;
            return match wire::fetch_document(&self.http, &url).await? {
                Some(document) => Ok(Some(document)),
                None => Err(OAuthError::Discovery(format!(
                    "no protected resource metadata at {}",
                    shown_url(&url)
                ))),
            };
        }
        for url in protected_resource_metadata_urls(server) {
            // The server's own origin, which passed the policy already; checked all the same.
            policy.check_url(&url)?;
            if let Some(document) = wire::fetch_document(&self.http, &url).await? {
                return Ok(Some(document));
            }
        }
        Ok(None)
    }

    /// The first metadata document of `issuer` whose `issuer` is `issuer` (a document naming
    /// another issuer is not used); `legacy` for a 2025-03-26 server's derived base URL.
    async fn authorization_server(
        &self,
        issuer: &str,
        legacy: bool,
        policy: &UrlPolicy,
    ) -> Result<Option<AuthorizationServerMetadata>, OAuthError> {
        let mut refused = None;
        for url in authorization_server_metadata_urls(issuer, policy)? {
            let Some(document) =
                wire::fetch_document::<AuthorizationServerMetadata>(&self.http, &url).await?
            else {
                continue;
            };
            let checked = if legacy {
                document.validate_legacy(issuer, policy)
            } else {
                document.validate(issuer, policy)
            };
            match checked {
                Ok(()) => return Ok(Some(document)),
                Err(err) => {
                    tracing::warn!(url = %shown_url(&url), %err, "authorization server metadata not used");
                    refused = Some(err);
                }
            }
        }
        match refused {
            Some(err) => Err(err),
            None => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn provider() -> OAuthProvider {
        OAuth::builder()
            .client_name("owners-test")
            .redirect_uri("http://127.0.0.1:9/callback")
            .authorizer(super::super::HeadlessAuthorizer::new())
            .build()
            .unwrap()
    }

    #[test]
    fn a_flow_ends_once_the_last_client_that_wanted_it_is_gone() {
        let provider = provider();
        let (a, b) = (provider.clone(), provider.clone());
        let waiting_b = Waiting::new(provider.inner.clone(), b.handle);
        let (_, ended) = provider.inner.start(a.handle);
        drop(waiting_b);
        drop(a);
        assert!(!*ended.borrow(), "b joined the flow: it still wants it");
        drop(b);
        assert!(*ended.borrow());
    }

    #[test]
    fn a_token_is_renewed_by_the_margin_at_most_half_its_lifetime_early() {
        let margin = Duration::from_secs(60);
        let received = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let at = |secs| received + Duration::from_secs(secs);
        let granted = |lifetime| {
            let mut tokens = TokenSet::new("a", "https://as.example");
            tokens.expires_at = Some(at(lifetime));
            tokens
        };
        let due = |tokens: &TokenSet, now| renewal_due(tokens, received, now, margin);
        // An hour: the whole margin.
        let hour = granted(3600);
        assert!(!due(&hour, at(3539)));
        assert!(due(&hour, at(3540)));
        // No longer than the margin: half its lifetime.
        for lifetime in [30, 60] {
            let short = granted(lifetime);
            assert!(!due(&short, received), "{lifetime} s, as it arrives");
            assert!(!due(&short, at(lifetime / 2 - 1)), "{lifetime} s");
            assert!(due(&short, at(lifetime / 2)), "{lifetime} s");
        }
        // Between the two: the margin while it is under half the lifetime.
        assert!(!due(&granted(150), at(89)));
        assert!(due(&granted(150), at(90)));
        // Received expired: due at once.
        assert!(due(&granted(0), received));
        let mut expired = granted(0);
        expired.expires_at = Some(SystemTime::UNIX_EPOCH);
        assert!(due(&expired, received));
        // No expiry: never due, whatever the margin.
        let forever = TokenSet::new("a", "https://as.example");
        assert!(!renewal_due(
            &forever,
            received,
            at(u32::MAX.into()),
            Duration::MAX
        ));
        // A margin past what the clock can represent is capped all the same.
        assert!(!renewal_due(&hour, received, at(1799), Duration::MAX));
        assert!(renewal_due(&hour, received, at(1800), Duration::MAX));
    }

    #[test]
    fn a_client_joining_an_ended_flow_wants_it_again() {
        let provider = provider();
        let (a, b) = (provider.clone(), provider.clone());
        let (_, ended) = provider.inner.start(a.handle);
        drop(a);
        assert!(*ended.borrow());
        let _waiting = Waiting::new(provider.inner.clone(), b.handle);
        assert!(
            !*ended.borrow(),
            "b's request joined it before its authorizer gave up"
        );
    }
}
