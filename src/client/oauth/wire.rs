//! The provider's HTTP: metadata documents, dynamic registration, and the token endpoint
//! through the `oauth2` crate, all over one reqwest client. The provider's own follows no
//! redirect; with an application's that does, no request body (codes, refresh tokens,
//! secrets, assertions) is ever sent again to where a 307 or 308 points, and any redirected
//! answer is refused.

use std::future::Future;
use std::time::{Duration, SystemTime};

use futures::StreamExt;
use oauth2::basic::{BasicClient, BasicTokenType};
use oauth2::{
    AuthType, AuthUrl, AuthorizationCode, ClientId, ClientSecret, CsrfToken, PkceCodeChallenge,
    RedirectUrl, RefreshToken, RequestTokenError, Scope, TokenResponse, TokenUrl,
};
use reqwest::Url;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::oauth::{
    authorization_code, bounded, dynamic_registration_request, scope_param, shown, shown_url,
    token_expiry, ExpectedResponse, OAuthError, RegisteredClient, Secret, TokenEndpointAuth,
    TokenSet, DPOP_TOKEN_TYPE, USE_DPOP_NONCE,
};

use super::authorizer::{AuthorizationRequest, Authorizer};
use super::dpop::DpopKey;
use super::grant::{IdentityAssertion, ID_JAG, ID_TOKEN, JWT_BEARER, TOKEN_EXCHANGE};
use super::jwt::ClientAssertion;

/// Metadata documents and token responses are small; anything larger is refused unread.
const MAX_DOCUMENT: usize = 1 << 20;

/// The HTTP client OAuth requests go through, and how long each exchange with it (the
/// request sent, the answer read) may take. An application's client may have no timeout:
/// a server that never answers would otherwise hold the provider's state for ever, every
/// later request waiting behind it and `sign_out` never returning.
#[derive(Clone)]
pub(super) struct HttpClient {
    pub(super) client: reqwest::Client,
    pub(super) limit: Duration,
}

impl HttpClient {
    /// `exchange` within the limit, else `silent`'s failure, told what happened: like an
    /// unreachable server's, it says nothing of what was presented. Outside a tokio runtime
    /// (where a flow runs inline) there is no timer to bound it with: it runs unbounded.
    async fn within<T, E>(
        &self,
        exchange: impl Future<Output = Result<T, E>>,
        silent: impl FnOnce(String) -> E,
    ) -> Result<T, E> {
        if tokio::runtime::Handle::try_current().is_err() {
            return exchange.await;
        }
        match tokio::time::timeout(self.limit, exchange).await {
            Ok(answer) => answer,
            Err(_) => Err(silent(format!("no answer within {:?}", self.limit))),
        }
    }
}

/// GETs a JSON document. `Ok(None)` when the server answers anything but 2xx (it is not
/// there) or a body that is not the document; `Err` when the server cannot be reached or
/// gives no answer for now ([`unavailable`]), or none within the client's limit.
pub(super) async fn fetch_document<T: DeserializeOwned>(
    http: &HttpClient,
    url: &Url,
) -> Result<Option<T>, OAuthError> {
    let shown = shown_url(url);
    http.within(get_document(&http.client, url), |silence| {
        OAuthError::Http(format!("GET {shown}: {silence}"))
    })
    .await
}

async fn get_document<T: DeserializeOwned>(
    http: &reqwest::Client,
    url: &Url,
) -> Result<Option<T>, OAuthError> {
    let shown = shown_url(url);
    let response = http
        .get(url.clone())
        .header(reqwest::header::ACCEPT, "application/json")
        .send()
        .await
        .map_err(|e| OAuthError::Http(format!("GET {shown}: {}", e.without_url())))?;
    let status = response.status();
    if unavailable(status) {
        // Not "no metadata": read so, a protected resource's would send discovery down the
        // 2025-03-26 path, to another issuer, and the tokens of the real one would be dropped.
        return Err(OAuthError::Http(format!("GET {shown}: {status}")));
    }
    if !status.is_success() {
        tracing::debug!(url = %shown, %status, "no metadata here");
        return Ok(None);
    }
    if redirected(&response, url) {
        // Served from wherever the redirect pointed, not from the URL that was checked.
        tracing::debug!(url = %shown, "the metadata request was redirected: not used");
        return Ok(None);
    }
    let body = read_limited(response).await?;
    match serde_json::from_slice(&body) {
        Ok(document) => Ok(Some(document)),
        Err(err) => {
            tracing::debug!(url = %shown, %err, "not a metadata document");
            Ok(None)
        }
    }
}

/// Whether `status` says the server gives no answer for now (a 5xx, 429 or 408) rather than
/// one about the request: trying again later may well succeed.
fn unavailable(status: reqwest::StatusCode) -> bool {
    status.is_server_error()
        || status == reqwest::StatusCode::TOO_MANY_REQUESTS
        || status == reqwest::StatusCode::REQUEST_TIMEOUT
}

/// Whether the HTTP client followed a redirect to get `response` (an application's client
/// may): its answer is not the requested URL's.
fn redirected(response: &reqwest::Response, requested: &Url) -> bool {
    response.url() != requested
}

/// A request body the HTTP client cannot replay: a client that follows redirects then stops
/// at a 307 or 308 instead of sending the body (a code, a refresh token, a secret) on to
/// wherever it points. Its length is known, so it is still sent with `Content-Length`.
fn unreplayable(body: String) -> reqwest::Body {
    reqwest::Body::wrap(body)
}

async fn read_limited(response: reqwest::Response) -> Result<Vec<u8>, OAuthError> {
    let mut body = Vec::new();
    let mut stream = response.bytes_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| OAuthError::Http(e.without_url().to_string()))?;
        if body.len() + chunk.len() > MAX_DOCUMENT {
            return Err(OAuthError::Http("response larger than 1 MiB".into()));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// Dynamic client registration (RFC 7591) at `endpoint`, for `issuer`.
pub(super) async fn register(
    http: &HttpClient,
    endpoint: &str,
    issuer: &str,
    client_name: &str,
    redirect_uris: &[String],
    scope: Option<&str>,
) -> Result<RegisteredClient, OAuthError> {
    let target = shown(endpoint);
    let registration = register_at(
        &http.client,
        endpoint,
        issuer,
        client_name,
        redirect_uris,
        scope,
    );
    http.within(registration, |silence| {
        OAuthError::Http(format!("registration at {target}: {silence}"))
    })
    .await
}

async fn register_at(
    http: &reqwest::Client,
    endpoint: &str,
    issuer: &str,
    client_name: &str,
    redirect_uris: &[String],
    scope: Option<&str>,
) -> Result<RegisteredClient, OAuthError> {
    let body = dynamic_registration_request(client_name, redirect_uris, scope);
    let url = Url::parse(endpoint)
        .map_err(|e| OAuthError::Registration(format!("{}: {e}", shown(endpoint))))?;
    let endpoint = shown_url(&url);
    let response = http
        .post(url.clone())
        .header(reqwest::header::ACCEPT, "application/json")
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(unreplayable(body.to_string()))
        .send()
        .await
        .map_err(|e| OAuthError::Registration(format!("{endpoint}: {}", e.without_url())))?;
    if redirected(&response, &url) {
        return Err(OAuthError::Registration(format!(
            "{endpoint} redirected the registration elsewhere"
        )));
    }
    let status = response.status();
    let answer = read_limited(response).await?;
    let answer: Value = serde_json::from_slice(&answer).unwrap_or(Value::Null);
    if !status.is_success() {
        let error = answer["error"].as_str().unwrap_or("no error code");
        let description = answer["error_description"].as_str().unwrap_or_default();
        return Err(OAuthError::Registration(format!(
            "{endpoint} refused the registration ({status}): {error} {description}"
        )));
    }
    let client_id = answer["client_id"]
        .as_str()
        .filter(|id| !id.is_empty())
        .ok_or_else(|| OAuthError::Registration(format!("{endpoint} answered no client_id")))?;
    let mut client = RegisteredClient::new(issuer, client_id);
    if let Some(secret) = answer["client_secret"].as_str() {
        client = client.secret(secret);
    }
    if let Some(method) = answer["token_endpoint_auth_method"].as_str() {
        client = client.auth_method(method);
    }
    Ok(client)
}

/// How the client authenticates at the token endpoint, with what it needs.
pub(super) enum ClientAuth<'a> {
    Public,
    SecretBasic(&'a Secret),
    SecretPost(&'a Secret),
    Jwt(&'a ClientAssertion),
}

impl ClientAuth<'_> {
    pub(super) fn method(&self) -> TokenEndpointAuth {
        match self {
            ClientAuth::Public => TokenEndpointAuth::None,
            ClientAuth::SecretBasic(_) => TokenEndpointAuth::ClientSecretBasic,
            ClientAuth::SecretPost(_) => TokenEndpointAuth::ClientSecretPost,
            ClientAuth::Jwt(_) => TokenEndpointAuth::PrivateKeyJwt,
        }
    }
}

/// The token endpoint and what every request to it carries.
pub(super) struct TokenEndpoint<'a> {
    pub(super) http: &'a HttpClient,
    pub(super) url: &'a str,
    pub(super) issuer: &'a str,
    pub(super) client_id: &'a str,
    pub(super) auth: ClientAuth<'a>,
    pub(super) resource: Option<&'a str>,
    /// Signs a proof for every request here, when the tokens are to be DPoP-bound.
    pub(super) dpop: Option<&'a DpopKey>,
}

/// The authorization code flow's front half: where to send the user, and what to check
/// the answer against.
pub(super) struct CodeFlow<'a> {
    pub(super) authorization_endpoint: &'a str,
    pub(super) redirect_uri: &'a str,
    pub(super) iss_parameter_supported: bool,
    pub(super) scopes: &'a [String],
}

type Oauth2Error = RequestTokenError<HttpFailure, oauth2::basic::BasicErrorResponse>;

impl TokenEndpoint<'_> {
    fn client(
        &self,
    ) -> Result<
        oauth2::basic::BasicClient<
            oauth2::EndpointNotSet,
            oauth2::EndpointNotSet,
            oauth2::EndpointNotSet,
            oauth2::EndpointNotSet,
            oauth2::EndpointSet,
        >,
        OAuthError,
    > {
        let token_url = TokenUrl::new(self.url.to_owned())
            .map_err(|e| OAuthError::Discovery(format!("token endpoint {}: {e}", self.url)))?;
        let client =
            BasicClient::new(ClientId::new(self.client_id.to_owned())).set_token_uri(token_url);
        Ok(match &self.auth {
            ClientAuth::Public | ClientAuth::Jwt(_) => client.set_auth_type(AuthType::RequestBody),
            ClientAuth::SecretBasic(secret) => client
                .set_client_secret(ClientSecret::new(secret.expose().to_owned()))
                .set_auth_type(AuthType::BasicAuth),
            ClientAuth::SecretPost(secret) => client
                .set_client_secret(ClientSecret::new(secret.expose().to_owned()))
                .set_auth_type(AuthType::RequestBody),
        })
    }

    fn extra(&self) -> Result<Vec<(String, String)>, OAuthError> {
        let mut extra = Vec::new();
        if let Some(resource) = self.resource {
            extra.push(("resource".to_owned(), resource.to_owned()));
        }
        if let ClientAuth::Jwt(assertion) = &self.auth {
            extra.push((
                "client_assertion_type".to_owned(),
                "urn:ietf:params:oauth:client-assertion-type:jwt-bearer".to_owned(),
            ));
            extra.push((
                "client_assertion".to_owned(),
                assertion.sign(self.client_id, self.issuer)?,
            ));
        }
        Ok(extra)
    }

    /// The authorization code grant: sends the user through `authorizer`, checks the answer
    /// (RFC 9207 `iss`, `state`), then exchanges the code with its PKCE verifier.
    pub(super) async fn authorization_code(
        &self,
        flow: CodeFlow<'_>,
        authorizer: &dyn Authorizer,
    ) -> Result<TokenSet, OAuthError> {
        let auth_url = AuthUrl::new(flow.authorization_endpoint.to_owned()).map_err(|e| {
            OAuthError::Discovery(format!(
                "authorization endpoint {}: {e}",
                flow.authorization_endpoint
            ))
        })?;
        let redirect = RedirectUrl::new(flow.redirect_uri.to_owned())
            .map_err(|e| OAuthError::Config(format!("redirect URI: {e}")))?;
        let client = self
            .client()?
            .set_auth_uri(auth_url)
            .set_redirect_uri(redirect);
        let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
        let mut request = client
            .authorize_url(CsrfToken::new_random)
            .set_pkce_challenge(challenge)
            .add_scopes(flow.scopes.iter().cloned().map(Scope::new));
        if let Some(resource) = self.resource {
            request = request.add_extra_param("resource", resource);
        }
        let (url, state) = request.url();
        let redirect_back = authorizer
            .authorize(AuthorizationRequest {
                url,
                redirect_uri: flow.redirect_uri.to_owned(),
            })
            .await
            .map_err(|e| OAuthError::Authorizer(e.to_string()))?;
        // Checked against the redirect URI this flow named: an answer another authorization
        // server sent to its own is not this flow's (mix-up).
        let expected =
            ExpectedResponse::new(state.secret(), self.issuer, flow.iss_parameter_supported)
                .redirect_uri(flow.redirect_uri);
        let code = authorization_code(&redirect_back, &expected)?;
        let mut exchange = client
            .exchange_code(AuthorizationCode::new(code))
            .set_pkce_verifier(verifier);
        for (name, value) in self.extra()? {
            exchange = exchange.add_extra_param(name, value);
        }
        let (http, dpop) = (self.http.clone(), self.dpop.cloned());
        let send = move |request| send(http.clone(), dpop.clone(), request);
        let response = exchange.request_async(&send).await;
        self.tokens(response, flow.scopes)
    }

    /// The refresh token grant; a response without a refresh token keeps the old one.
    pub(super) async fn refresh(&self, tokens: &TokenSet) -> Result<TokenSet, OAuthError> {
        let refresh = tokens
            .refresh_token
            .as_ref()
            .ok_or_else(|| OAuthError::TokenEndpoint {
                error: "no refresh token".into(),
                description: None,
            })?;
        let client = self.client()?;
        let refresh_token = RefreshToken::new(refresh.expose().to_owned());
        let mut request = client.exchange_refresh_token(&refresh_token);
        for (name, value) in self.extra()? {
            request = request.add_extra_param(name, value);
        }
        let (http, dpop) = (self.http.clone(), self.dpop.cloned());
        let send = move |request| send(http.clone(), dpop.clone(), request);
        let response = request.request_async(&send).await;
        let mut fresh = self.tokens(response, &tokens.scopes)?;
        if fresh.refresh_token.is_none() {
            fresh.refresh_token = tokens.refresh_token.clone();
        }
        Ok(fresh)
    }

    /// The client credentials grant.
    pub(super) async fn client_credentials(
        &self,
        scopes: &[String],
    ) -> Result<TokenSet, OAuthError> {
        let client = self.client()?;
        let mut request = client
            .exchange_client_credentials()
            .add_scopes(scopes.iter().cloned().map(Scope::new));
        for (name, value) in self.extra()? {
            request = request.add_extra_param(name, value);
        }
        let (http, dpop) = (self.http.clone(), self.dpop.cloned());
        let send = move |request| send(http.clone(), dpop.clone(), request);
        let response = request.request_async(&send).await;
        self.tokens(response, scopes)
    }

    /// The RFC 7523 jwt-bearer grant with `assertion` (a workload's token, or an identity
    /// assertion authorization grant), authenticated as the client is here.
    pub(super) async fn jwt_bearer(
        &self,
        assertion: &Secret,
        scopes: &[String],
    ) -> Result<TokenSet, OAuthError> {
        let mut form = vec![
            pair("grant_type", JWT_BEARER),
            pair("assertion", assertion.expose()),
        ];
        form.extend(scope_param(scopes).map(|scope| pair("scope", &scope)));
        let basic = match &self.auth {
            ClientAuth::SecretBasic(secret) => Some(basic_auth(self.client_id, secret)),
            ClientAuth::SecretPost(secret) => {
                form.push(pair("client_id", self.client_id));
                form.push(pair("client_secret", secret.expose()));
                None
            }
            ClientAuth::Public | ClientAuth::Jwt(_) => {
                form.push(pair("client_id", self.client_id));
                None
            }
        };
        form.extend(self.extra()?);
        let request = form_request(self.url, &form, basic)?;
        let response = send(self.http.clone(), self.dpop.cloned(), request)
            .await
            .map_err(|e| OAuthError::Http(e.0))?;
        self.tokens(token_response(&response), scopes)
    }

    fn tokens(
        &self,
        response: Result<oauth2::basic::BasicTokenResponse, Oauth2Error>,
        requested: &[String],
    ) -> Result<TokenSet, OAuthError> {
        let response = response.map_err(token_error)?;
        // RFC 9449 §5: the token type says how the token is presented, whatever was asked.
        let dpop_bound = match response.token_type() {
            BasicTokenType::Bearer => false,
            BasicTokenType::Extension(t) if t.eq_ignore_ascii_case(DPOP_TOKEN_TYPE) => {
                if self.dpop.is_none() {
                    return Err(OAuthError::Dpop(
                        "a DPoP-bound token, but no proof was sent for it".into(),
                    ));
                }
                true
            }
            other => {
                return Err(OAuthError::TokenEndpoint {
                    error: format!("unsupported token type {:?}", other.as_ref()),
                    description: None,
                })
            }
        };
        let access_token = response.access_token().secret();
        if !presentable(access_token) {
            // Kept, it would fail every request until it expired, each as a connection that
            // could not be made: refused here, it is the token endpoint's failure.
            return Err(OAuthError::TokenEndpoint {
                error: "an access token that cannot be sent in an Authorization header".into(),
                description: None,
            });
        }
        let mut tokens = TokenSet::new(access_token.as_str(), self.issuer);
        tokens.dpop_bound = dpop_bound;
        tokens.refresh_token = response
            .refresh_token()
            .map(|r| Secret::new(r.secret().as_str()));
        // Any u64 of seconds is a valid `expires_in`: capped, never added unchecked.
        tokens.expires_at = response
            .expires_in()
            .and_then(|d: Duration| token_expiry(SystemTime::now(), d));
        tokens.scopes = match response.scopes() {
            Some(scopes) => {
                let scopes: Vec<String> = scopes.iter().map(|s| s.to_string()).collect();
                bounded(&scopes)
            }
            None => requested.to_vec(),
        };
        tokens.resource = self.resource.map(str::to_owned);
        Ok(tokens)
    }
}

/// Whether `token` can follow `Bearer ` or `DPoP ` in a header: not empty, and printable
/// ASCII without spaces (RFC 6750 §2.1 and RFC 9449 §7.1 allow less still).
pub(super) fn presentable(token: &str) -> bool {
    !token.is_empty() && token.bytes().all(|b| b.is_ascii_graphic())
}

fn pair(name: &str, value: &str) -> (String, String) {
    (name.to_owned(), value.to_owned())
}

/// An `application/x-www-form-urlencoded` POST of `form` to `url`, with HTTP Basic
/// credentials when given.
fn form_request(
    url: &str,
    form: &[(String, String)],
    basic: Option<String>,
) -> Result<oauth2::HttpRequest, OAuthError> {
    let body = url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(form)
        .finish();
    let mut request = http::Request::builder()
        .method(http::Method::POST)
        .uri(url)
        .header(
            reqwest::header::CONTENT_TYPE,
            "application/x-www-form-urlencoded",
        )
        .header(reqwest::header::ACCEPT, "application/json");
    if let Some(basic) = basic {
        request = request.header(reqwest::header::AUTHORIZATION, basic);
    }
    request
        .body(body.into_bytes())
        .map_err(|e| OAuthError::Discovery(format!("token endpoint {}: {e}", shown(url))))
}

/// `Basic` credentials as RFC 6749 §2.3.1 has them: id and secret form-encoded first.
fn basic_auth(client_id: &str, secret: &Secret) -> String {
    use base64::Engine as _;
    let encode = |s: &str| url::form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
    let pair = format!("{}:{}", encode(client_id), encode(secret.expose()));
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(pair)
    )
}

/// A token endpoint's answer read as the `oauth2` crate's flows read it.
fn token_response(
    response: &oauth2::HttpResponse,
) -> Result<oauth2::basic::BasicTokenResponse, Oauth2Error> {
    if response.status().is_success() {
        serde_json::from_slice(response.body())
            .map_err(|e| RequestTokenError::Other(format!("unreadable response: {e}")))
    } else {
        match serde_json::from_slice(response.body()) {
            Ok(error) => Err(RequestTokenError::ServerResponse(error)),
            Err(_) => Err(RequestTokenError::Other(format!(
                "HTTP {} without an OAuth error",
                response.status()
            ))),
        }
    }
}

/// Enterprise-managed authorization's first step: the user's ID token (`subject`) exchanged
/// at the IdP (RFC 8693) for an identity assertion authorization grant for `audience` (the
/// authorization server's issuer) and `resource` (the MCP server).
pub(super) async fn identity_assertion_grant(
    http: &HttpClient,
    idp: &IdentityAssertion,
    subject: &Secret,
    audience: &str,
    resource: Option<&str>,
    scopes: &[String],
) -> Result<Secret, OAuthError> {
    let mut form = vec![
        pair("grant_type", TOKEN_EXCHANGE),
        pair("requested_token_type", ID_JAG),
        pair("audience", audience),
        pair("subject_token", subject.expose()),
        pair("subject_token_type", ID_TOKEN),
    ];
    form.extend(resource.map(|resource| pair("resource", resource)));
    form.extend(scope_param(scopes).map(|scope| pair("scope", &scope)));
    let basic = match (&idp.client_id, &idp.client_secret) {
        (Some(id), Some(secret)) => Some(basic_auth(id, secret)),
        (Some(id), None) => {
            form.push(pair("client_id", id));
            None
        }
        (None, _) => None,
    };
    let request = form_request(&idp.token_endpoint, &form, basic)?;
    let response = send(http.clone(), None, request)
        .await
        .map_err(|e| OAuthError::Http(e.0))?;
    let answer: Value = serde_json::from_slice(response.body()).unwrap_or(Value::Null);
    let status = response.status();
    let error = answer["error"].as_str();
    if !status.is_success() || !answer.is_object() {
        // Only an OAuth error refuses the ID token; any other answer (a firewall's page)
        // fails as the network does, and the same ID token may be presented again.
        let Some(error) = error.filter(|_| !status.is_success()) else {
            return Err(OAuthError::Http(format!(
                "the identity provider answered {status} with neither a grant nor an OAuth error"
            )));
        };
        let description = answer["error_description"].as_str().unwrap_or_default();
        return Err(OAuthError::IdentityProvider(format!(
            "token exchange refused ({status}): {error} {description}"
        )));
    }
    if answer["issued_token_type"].as_str() != Some(ID_JAG) {
        return Err(OAuthError::IdentityProvider(format!(
            "the token exchange issued {} instead of an identity assertion grant",
            answer["issued_token_type"]
        )));
    }
    answer["access_token"]
        .as_str()
        .filter(|t| !t.is_empty())
        .map(Secret::new)
        .ok_or_else(|| OAuthError::IdentityProvider("the token exchange issued no token".into()))
}

/// Only an OAuth error refuses what was presented. An answer that is none (a firewall's or
/// CDN's HTML page, another JSON, an empty body, a 200 that is not JSON) says nothing of the
/// grant: it fails as the network does, and the provider keeps its tokens and assertions.
fn token_error(err: Oauth2Error) -> OAuthError {
    match err {
        RequestTokenError::ServerResponse(response) => OAuthError::TokenEndpoint {
            error: response.error().as_ref().to_owned(),
            description: response.error_description().cloned(),
        },
        RequestTokenError::Request(failure) => OAuthError::Http(failure.0),
        RequestTokenError::Parse(err, _) => OAuthError::Http(format!(
            "the token endpoint's answer is neither tokens nor an OAuth error: {err}"
        )),
        RequestTokenError::Other(message) => OAuthError::Http(format!(
            "the token endpoint's answer is neither tokens nor an OAuth error: {message}"
        )),
    }
}

/// A failure to reach the token endpoint (the message carries no URL: no credentials).
#[derive(Debug)]
pub(super) struct HttpFailure(String);

impl std::fmt::Display for HttpFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for HttpFailure {}

/// A token request, sent with our reqwest client; with `dpop`, each attempt carries a fresh
/// proof, and a refusal for want of the server's nonce (`use_dpop_nonce`) is sent again
/// once with it (RFC 9449 §8). An answer that is no answer ([`unavailable`]), or none
/// within the client's limit (the nonce's retry included), is a failure, like an
/// unreachable server.
async fn send(
    http: HttpClient,
    dpop: Option<DpopKey>,
    request: oauth2::HttpRequest,
) -> Result<oauth2::HttpResponse, HttpFailure> {
    let target = shown(&request.uri().to_string());
    let exchange = exchange(http.client.clone(), dpop, request);
    http.within(exchange, |silence| {
        HttpFailure(format!("{target}: {silence}"))
    })
    .await
}

async fn exchange(
    http: reqwest::Client,
    dpop: Option<DpopKey>,
    request: oauth2::HttpRequest,
) -> Result<oauth2::HttpResponse, HttpFailure> {
    let (parts, body) = request.into_parts();
    let url = Url::parse(&parts.uri.to_string()).map_err(|e| HttpFailure(e.to_string()))?;
    let mut nonce_retried = false;
    loop {
        let mut headers = parts.headers.clone();
        if let Some(key) = &dpop {
            let proof = key
                .proof(parts.method.as_str(), &url, None)
                .map_err(|e| HttpFailure(e.to_string()))?;
            let proof = reqwest::header::HeaderValue::try_from(proof)
                .map_err(|e| HttpFailure(format!("DPoP proof: {e}")))?;
            headers.insert("dpop", proof);
        }
        // Form-encoded or JSON: text. Anything else is not a request this provider makes.
        let text = String::from_utf8(body.clone())
            .map_err(|_| HttpFailure("a token request body that is not text".into()))?;
        let response = http
            .request(parts.method.clone(), url.clone())
            .headers(headers)
            .body(unreplayable(text))
            .send()
            .await
            .map_err(|e| HttpFailure(e.without_url().to_string()))?;
        if redirected(&response, &url) {
            return Err(HttpFailure(format!(
                "{} redirected the token request elsewhere",
                shown_url(&url)
            )));
        }
        let status = response.status();
        let headers = response.headers().clone();
        let body = read_limited(response)
            .await
            .map_err(|e| HttpFailure(e.to_string()))?;
        if let Some(key) = &dpop {
            let named = key.observe_nonce(&url, &headers);
            if named && !nonce_retried && status == 400 && error_code(&body) == Some(USE_DPOP_NONCE)
            {
                nonce_retried = true;
                tracing::debug!("the authorization server wants a DPoP nonce: sending again");
                continue;
            }
        }
        if unavailable(status) {
            // No answer about the grant: a failure to reach the endpoint, not a refusal of
            // what was presented, which the provider then keeps.
            return Err(HttpFailure(format!(
                "{} answered {status}",
                shown_url(&url)
            )));
        }
        let mut out = oauth2::HttpResponse::new(body);
        *out.status_mut() = status;
        *out.headers_mut() = headers;
        return Ok(out);
    }
}

/// The OAuth `error` of an error response body.
fn error_code(body: &[u8]) -> Option<&str> {
    #[derive(serde::Deserialize)]
    struct ErrorBody<'a> {
        #[serde(borrow)]
        error: Option<&'a str>,
    }
    serde_json::from_slice::<ErrorBody<'_>>(body).ok()?.error
}
