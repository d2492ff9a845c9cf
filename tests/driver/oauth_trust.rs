//! Where `OAuthProvider` draws its trust boundaries, graded on what the servers saw: machine
//! credentials reach only the authorization server they belong to; a server's `expires_in`
//! cannot overflow the client's clock; a remote server cannot point the client's requests at
//! this machine; no token goes to a plain-http endpoint; an honest authorization server's code
//! never reaches the one that forwarded the user to it (mix-up); a redirecting token endpoint
//! gets no second copy of a secret; credentials in the MCP URL stay out of errors and `Debug`.
//!
//! Servers are "good" and "evil" authorization servers, an MCP server and a sink that records
//! whatever reaches it, all on 127.0.0.1. A server meant to be remote listens on 127.0.0.1
//! too but is named `<name>.remote.test`, which the tests' HTTP clients resolve there: its
//! URLs are not loopback URLs. Being plain http, such an endpoint needs the provider's
//! `dangerous_allow_plain_http`, which is no part of what the tests check.

use crate::support;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Redirect, Response};
use axum::Json;
use mcp_resume::auth::AuthChallenge;
use mcp_resume::client::oauth::{
    AuthorizationRequest, ClientCredentials, HeadlessAuthorizer, InMemoryTokenStore, OAuth,
    OAuthProvider, TokenStore, WorkloadIdentity,
};
use mcp_resume::oauth::{OAuthError, RegisteredClient, TokenSet};
use mcp_resume::{Client, Era, Error, ErrorKind, ReconnectPolicy, TokenProvider, TokenRequest};
use serde_json::{json, Value};
use support::*;

/// One request as a site saw it.
#[derive(Clone, Debug)]
struct Hit {
    method: Method,
    path: String,
    query: HashMap<String, String>,
    headers: HeaderMap,
    body: String,
}

impl Hit {
    fn form(&self) -> HashMap<String, String> {
        url::form_urlencoded::parse(self.body.as_bytes())
            .into_owned()
            .collect()
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The request as the MCP test server's helpers read it.
    fn recorded(&self) -> Recorded {
        Recorded {
            method: self.method.clone(),
            headers: self.headers.clone(),
            body: serde_json::from_str(&self.body).ok(),
            at: std::time::Instant::now(),
        }
    }
}

/// An HTTP server on 127.0.0.1 that records every request, on any path, and answers with a
/// closure.
struct Site {
    url: String,
    port: u16,
    hits: Arc<Mutex<Vec<Hit>>>,
    _served: oauth::Served,
}

impl Site {
    /// A site at `http://127.0.0.1:<port>`, or at `http://<name>.remote.test:<port>` when
    /// `remote` names it.
    async fn start(
        remote: Option<&str>,
        respond: impl Fn(&Site, &Hit) -> Response + Send + Sync + 'static,
    ) -> Arc<Site> {
        let (listener, local) = oauth::listener().await;
        let port = listener.local_addr().unwrap().port();
        let url = match remote {
            Some(name) => format!("http://{name}.remote.test:{port}"),
            None => local,
        };
        let hits: Arc<Mutex<Vec<Hit>>> = Arc::default();
        // The closure needs the site (its URL) and the site owns the server: tied after.
        let slot: Arc<Mutex<Option<std::sync::Weak<Site>>>> = Arc::default();
        let (log, me) = (hits.clone(), slot.clone());
        let respond = Arc::new(respond);
        let app = axum::Router::new().fallback(
            move |method: Method, uri: Uri, headers: HeaderMap, body: String| {
                let (log, me, respond) = (log.clone(), me.clone(), respond.clone());
                async move {
                    let hit = Hit {
                        method,
                        path: uri.path().to_owned(),
                        query: uri
                            .query()
                            .map(|q| url::form_urlencoded::parse(q.as_bytes()).into_owned())
                            .into_iter()
                            .flatten()
                            .collect(),
                        headers,
                        body,
                    };
                    log.lock().unwrap().push(hit.clone());
                    let site = me.lock().unwrap().as_ref().and_then(|w| w.upgrade());
                    match site {
                        Some(site) => respond(&site, &hit),
                        None => StatusCode::SERVICE_UNAVAILABLE.into_response(),
                    }
                }
            },
        );
        let site = Arc::new(Site {
            url,
            port,
            hits,
            _served: oauth::serve(listener, app),
        });
        *slot.lock().unwrap() = Some(Arc::downgrade(&site));
        site
    }

    fn hits(&self) -> Vec<Hit> {
        self.hits.lock().unwrap().clone()
    }

    fn hits_at(&self, path: &str) -> Vec<Hit> {
        self.hits().into_iter().filter(|h| h.path == path).collect()
    }
}

/// A sink on 127.0.0.1: answers 200 `{}` to anything, and remembers it was reached.
async fn sink() -> Arc<Site> {
    Site::start(None, |_, _| Json(json!({})).into_response()).await
}

/// How an authorization server behaves.
#[derive(Clone, Default)]
struct AsOptions {
    /// Advertises RFC 9207 and puts `iss` in its redirects.
    iss: bool,
    /// Accepts a client ID metadata document URL as `client_id` (the document lists the
    /// redirect URI [`BASE_REDIRECT`] points at).
    cimd: bool,
    /// Its `/authorize` sends the user on to this authorization URL (with the client's
    /// `state` and PKCE challenge, a `client_id` and `redirect_uri` of the attacker's choice).
    forward_to: Option<String>,
    /// `expires_in` of its tokens. Default 3600.
    expires_in: Option<u64>,
    /// `token_endpoint_auth_methods_supported`. Default `["client_secret_basic", "none"]`.
    auth_methods: Option<Vec<&'static str>>,
    /// Its token endpoint answers 307 to here.
    token_redirect: Option<String>,
    /// Its endpoints (token, registration, authorization) are on this site instead.
    endpoints_at: Option<String>,
    /// Its `/authorize` sends the user to its own `/consent` page first, which approves.
    consent_page: bool,
}

/// The suite's client ID metadata document, which lists the redirect URI at `CALLBACK_PORT`.
const METADATA_DOCUMENT: &str = "https://agent.example/oauth/client.json";

/// The port of the application's loopback redirect listener. Nothing listens there: the
/// authorizers return the URL the answer would arrive at without requesting it.
const CALLBACK_PORT: u16 = 9;

fn base_redirect() -> String {
    format!("http://127.0.0.1:{CALLBACK_PORT}/callback")
}

/// What one authorization server issued and was asked.
#[derive(Default)]
struct AsLedger {
    serial: u32,
    /// Registered client → its redirect URIs.
    clients: HashMap<String, Vec<String>>,
    /// Authorization codes issued.
    codes: Vec<String>,
}

/// An authorization server named `name` (its tokens are `<name>-access-<n>`): metadata at
/// the RFC 8414 URL, dynamic registration at `/register`, `/authorize`, `/token`.
async fn authorization_server(name: &'static str, remote: bool, options: AsOptions) -> Arc<Site> {
    let ledger: Arc<Mutex<AsLedger>> = Arc::default();
    Site::start(remote.then_some(name), move |site, hit| {
        let issuer = &site.url;
        let endpoints = options.endpoints_at.as_deref().unwrap_or(issuer);
        let mut ledger = ledger.lock().unwrap();
        match (hit.method.as_str(), hit.path.as_str()) {
            ("GET", "/.well-known/oauth-authorization-server") => {
                let methods = options
                    .auth_methods
                    .clone()
                    .unwrap_or(vec!["client_secret_basic", "none"]);
                Json(json!({
                    "issuer": issuer,
                    "authorization_endpoint": format!("{endpoints}/authorize"),
                    "token_endpoint": format!("{endpoints}/token"),
                    "registration_endpoint": format!("{endpoints}/register"),
                    "response_types_supported": ["code"],
                    "grant_types_supported": ["authorization_code", "client_credentials",
                        "urn:ietf:params:oauth:grant-type:jwt-bearer"],
                    "code_challenge_methods_supported": ["S256"],
                    "token_endpoint_auth_methods_supported": methods,
                    "authorization_response_iss_parameter_supported": options.iss,
                    "client_id_metadata_document_supported": options.cimd,
                }))
                .into_response()
            }
            ("POST", "/register") => {
                let body: Value = serde_json::from_str(&hit.body).unwrap_or_default();
                ledger.serial += 1;
                let id = format!("{name}-client-{}", ledger.serial);
                let uris =
                    serde_json::from_value(body["redirect_uris"].clone()).unwrap_or_default();
                ledger.clients.insert(id.clone(), uris);
                (StatusCode::CREATED, Json(json!({"client_id": id}))).into_response()
            }
            ("GET", "/authorize") if options.consent_page => {
                let mut url = reqwest::Url::parse(&format!("{issuer}/consent")).unwrap();
                url.query_pairs_mut().extend_pairs(hit.query.iter());
                Redirect::to(url.as_str()).into_response()
            }
            ("GET", "/authorize" | "/consent") => {
                let q = &hit.query;
                if let Some(next) = &options.forward_to {
                    // The mix-up: the user is sent on to another authorization server with the
                    // client's state and challenge, as the client its document names, to the
                    // redirect URI that document lists.
                    let mut url = reqwest::Url::parse(next).unwrap();
                    url.query_pairs_mut()
                        .append_pair("response_type", "code")
                        .append_pair("client_id", METADATA_DOCUMENT)
                        .append_pair("redirect_uri", &base_redirect())
                        .append_pair("state", &q["state"])
                        .append_pair("code_challenge", &q["code_challenge"])
                        .append_pair("code_challenge_method", "S256");
                    return Redirect::to(url.as_str()).into_response();
                }
                // An honest server sends codes only to a redirect URI of the client's.
                let client = q.get("client_id").map(String::as_str).unwrap_or_default();
                let redirect = q.get("redirect_uri").cloned().unwrap_or_default();
                let allowed = if options.cimd && client == METADATA_DOCUMENT {
                    redirect == base_redirect()
                } else {
                    ledger
                        .clients
                        .get(client)
                        .is_some_and(|uris| uris.contains(&redirect))
                };
                if !allowed {
                    return (StatusCode::BAD_REQUEST, "unknown client or redirect URI")
                        .into_response();
                }
                ledger.serial += 1;
                let code = format!("{name}-code-{}", ledger.serial);
                ledger.codes.push(code.clone());
                let mut url = reqwest::Url::parse(&redirect).unwrap();
                url.query_pairs_mut()
                    .append_pair("code", &code)
                    .append_pair("state", &q["state"]);
                if options.iss {
                    url.query_pairs_mut().append_pair("iss", issuer);
                }
                Redirect::to(url.as_str()).into_response()
            }
            ("POST", "/token") => {
                if let Some(elsewhere) = &options.token_redirect {
                    return Redirect::temporary(elsewhere).into_response();
                }
                ledger.serial += 1;
                Json(json!({
                    "access_token": format!("{name}-access-{}", ledger.serial),
                    "token_type": "Bearer",
                    "expires_in": options.expires_in.unwrap_or(3600),
                }))
                .into_response()
            }
            _ => StatusCode::NOT_FOUND.into_response(),
        }
    })
    .await
}

/// An MCP server accepting tokens `<accepts>-access-*`, whose protected resource metadata
/// (at `/prm`, named in its 401 unless `hide_metadata_url`, and at the path's well-known
/// URL) names `authorization_servers`.
async fn mcp_server(
    remote: bool,
    accepts: &'static str,
    authorization_servers: Vec<String>,
    hide_metadata_url: bool,
) -> Arc<Site> {
    Site::start(remote.then_some("mcp"), move |site, hit| {
        let prm = || {
            Json(json!({
                "resource": format!("{}/mcp", site.url),
                "authorization_servers": authorization_servers,
            }))
            .into_response()
        };
        match hit.path.as_str() {
            "/prm" | "/.well-known/oauth-protected-resource/mcp" => prm(),
            "/mcp" => {
                let token = hit
                    .header("authorization")
                    .and_then(|a| a.strip_prefix("Bearer "));
                if token.is_some_and(|t| t.starts_with(&format!("{accepts}-access-"))) {
                    return default_reply(&hit.recorded());
                }
                let challenge = if hide_metadata_url {
                    r#"Bearer error="invalid_token""#.to_owned()
                } else {
                    format!(
                        r#"Bearer error="invalid_token", resource_metadata="{}/prm""#,
                        site.url
                    )
                };
                let mut response = status(401);
                response.headers_mut().insert(
                    "www-authenticate",
                    HeaderValue::from_str(&challenge).unwrap(),
                );
                response
            }
            _ => StatusCode::NOT_FOUND.into_response(),
        }
    })
    .await
}

/// An HTTP client that resolves the `*.remote.test` names of `sites` to 127.0.0.1 and
/// follows no redirect.
fn http_for(sites: &[&Site]) -> reqwest::Client {
    let mut builder = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(10));
    for site in sites {
        let host = reqwest::Url::parse(&site.url).unwrap();
        let host = host.host_str().unwrap().to_owned();
        if host.ends_with(".remote.test") {
            builder = builder.resolve(&host, SocketAddr::from(([127, 0, 0, 1], 0)));
        }
    }
    builder.build().unwrap()
}

fn client(url: &str, provider: &OAuthProvider, http: Option<reqwest::Client>) -> Client {
    let mut builder = Client::builder(url)
        .auth(provider.clone())
        .era(Era::Legacy)
        .open_listen_stream(false)
        .call_timeout(Duration::from_secs(10))
        .reconnect(
            ReconnectPolicy::default()
                .with_initial_delay(Duration::from_millis(5))
                .with_max_delay(Duration::from_millis(20))
                .with_max_attempts(2),
        );
    if let Some(http) = http {
        builder = builder.http_client(http);
    }
    builder.build().unwrap()
}

fn last_failure(provider: &OAuthProvider) -> OAuthError {
    provider.last_failure().expect("a recorded failure")
}

/// Machine credentials are bound to their authorization server: listed second, it is the
/// one used (before, the first listed was, and the client failed); the other listed server,
/// the MCP server's choice, never receives the secret or the workload's token, nor even a
/// metadata request. A server that lists only the other one gets nothing; credentials
/// without an issuer are refused at build time.
#[tokio::test]
async fn machine_credentials_reach_only_their_issuer() {
    let good = authorization_server("good", false, AsOptions::default()).await;
    let evil = authorization_server("evil", false, AsOptions::default()).await;
    let both = mcp_server(
        false,
        "good",
        vec![evil.url.clone(), good.url.clone()],
        false,
    )
    .await;
    let secret = || ClientCredentials::secret("machine-1", "s3cret").issuer(&good.url);
    let workload = || {
        OAuth::builder()
            .client_credentials(ClientCredentials::public("workload-1").issuer(&good.url))
            .workload_identity(WorkloadIdentity::token("workload-jwt"))
    };
    for builder in [OAuth::builder().client_credentials(secret()), workload()] {
        let provider = builder.build().unwrap();
        let client = client(&format!("{}/mcp", both.url), &provider, None);
        guarded(client.connect()).await.unwrap();
        guarded(client.close()).await.unwrap();
        assert_eq!(provider.issuer().await.as_deref(), Some(good.url.as_str()));
    }
    let grants: Vec<String> = good
        .hits_at("/token")
        .iter()
        .map(|h| h.form()["grant_type"].clone())
        .collect();
    assert_eq!(
        grants,
        [
            "client_credentials",
            "urn:ietf:params:oauth:grant-type:jwt-bearer"
        ]
    );
    assert!(evil.hits().is_empty(), "{:?}", evil.hits());

    // A server that names only another authorization server: nothing is sent there.
    let elsewhere = mcp_server(false, "good", vec![evil.url.clone()], false).await;
    let provider = OAuth::builder()
        .client_credentials(secret())
        .build()
        .unwrap();
    let client = client(&format!("{}/mcp", elsewhere.url), &provider, None);
    let err = guarded(client.connect()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unauthorized, "{err}");
    assert!(matches!(
        last_failure(&provider),
        OAuthError::UntrustedIssuer(_)
    ));
    assert!(evil.hits().is_empty(), "{:?}", evil.hits());

    // Without the issuer, the MCP server would decide who receives them.
    for credentials in [
        ClientCredentials::secret("machine-1", "s3cret"),
        ClientCredentials::public("workload-1"),
    ] {
        let err = OAuth::builder()
            .client_credentials(credentials)
            .build()
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidConfig);
        assert!(err.to_string().contains("issuer"), "{err}");
    }
}

/// `expires_in` is any u64 of seconds: the largest one neither panics nor stops the client;
/// the token is used, and not renewed on every request either.
#[tokio::test]
async fn the_largest_expires_in_is_capped_not_a_panic() {
    let good = authorization_server(
        "good",
        false,
        AsOptions {
            expires_in: Some(u64::MAX),
            ..AsOptions::default()
        },
    )
    .await;
    let mcp = mcp_server(false, "good", vec![good.url.clone()], false).await;
    let provider = OAuth::builder()
        .client_credentials(ClientCredentials::secret("machine-1", "s3cret").issuer(&good.url))
        .build()
        .unwrap();
    let client = client(&format!("{}/mcp", mcp.url), &provider, None);
    guarded(client.connect()).await.unwrap();
    guarded(client.list_tools()).await.unwrap();
    guarded(client.list_tools()).await.unwrap();
    guarded(client.close()).await.unwrap();
    assert_eq!(good.hits_at("/token").len(), 1, "one grant, kept");
    let presented = mcp
        .hits()
        .iter()
        .filter(|h| h.header("authorization") == Some("Bearer good-access-1"))
        .count();
    // initialize, initialized, two tools/list, DELETE.
    assert!(presented >= 4, "{:?}", mcp.hits());
}

/// A remote MCP server (or its authorization server) cannot send discovery to this
/// machine: not through the challenge's `resource_metadata`, not as an authorization server
/// in its metadata, not as an authorization server's endpoints. The sink on 127.0.0.1 is
/// never reached, whatever the spelling; with the explicit opt-in it is (so the sink is
/// reachable at all).
#[tokio::test]
async fn a_remote_server_cannot_point_discovery_at_this_machine() {
    let sink = sink().await;
    let local = |host: &str| format!("http://{host}:{}", sink.port);
    // An authorization server whose endpoints are the sink.
    let pointing = authorization_server(
        "as",
        true,
        AsOptions {
            endpoints_at: Some(local("127.0.0.1")),
            ..AsOptions::default()
        },
    )
    .await;
    let cases: Vec<(Vec<String>, Option<String>)> = vec![
        // The challenge's resource_metadata, in the spellings of this machine.
        (vec![], Some(format!("{}/prm", local("127.0.0.1")))),
        (vec![], Some(format!("{}/prm", local("localhost")))),
        (vec![], Some(format!("{}/prm", local("0.0.0.0")))),
        // The metadata's authorization server.
        (vec![local("127.0.0.1")], None),
        // The authorization server's endpoints.
        (vec![pointing.url.clone()], None),
    ];
    let user = || {
        OAuth::builder()
            .redirect_uri(base_redirect())
            .authorizer(HeadlessAuthorizer::new())
            .dangerous_allow_plain_http(true)
    };
    for (authorization_servers, metadata_url) in cases {
        let mcp = mcp_server(true, "as", authorization_servers.clone(), true).await;
        let server = format!("{}/mcp", mcp.url);
        let provider = user()
            .server_url(&server)
            .http_client(http_for(&[&mcp, &pointing]))
            .build()
            .unwrap();
        let refused = refusal(&server, metadata_url.as_deref());
        let err = guarded(provider.credential(refused)).await.unwrap_err();
        let case = format!("{authorization_servers:?} {metadata_url:?}");
        assert_eq!(err.kind(), ErrorKind::Unauthorized, "{case}: {err}");
        assert!(
            matches!(last_failure(&provider), OAuthError::LoopbackUrl(_)),
            "{case}: {:?}",
            provider.last_failure()
        );
        assert!(sink.hits().is_empty(), "{case}: {:?}", sink.hits());
    }

    // Opted in, the same challenge reaches the sink.
    let mcp = mcp_server(true, "as", vec![], true).await;
    let server = format!("{}/mcp", mcp.url);
    let provider = user()
        .server_url(&server)
        .http_client(http_for(&[&mcp]))
        .dangerous_allow_loopback(true)
        .build()
        .unwrap();
    let prm = format!("{}/prm", local("127.0.0.1"));
    let _ = guarded(provider.credential(refusal(&server, Some(&prm)))).await;
    assert_eq!(sink.hits_at("/prm").len(), 1);
}

/// The client's re-send after a 401 from `server`, naming `metadata_url` if any.
fn refusal(server: &str, metadata_url: Option<&str>) -> TokenRequest {
    let header = match metadata_url {
        Some(url) => format!(r#"Bearer error="invalid_token", resource_metadata="{url}""#),
        None => r#"Bearer error="invalid_token""#.to_owned(),
    };
    let mut request = TokenRequest::default();
    request.url = Some(server.to_owned());
    request.challenge = Some(AuthChallenge::parse(401, Some(&header)));
    request
}

/// The headless authorizer follows a remote authorization server's redirects only to https,
/// its own origin, or the redirect URI: one to a service on this machine is not followed;
/// one to the server's own consent page is.
#[tokio::test]
async fn the_headless_authorizer_follows_no_redirect_to_this_machine() {
    let sink = sink().await;
    let sink_url = format!("http://127.0.0.1:{}/admin/shutdown", sink.port);
    let good = authorization_server(
        "good",
        true,
        AsOptions {
            forward_to: Some(sink_url),
            ..AsOptions::default()
        },
    )
    .await;
    let mcp = mcp_server(true, "good", vec![good.url.clone()], false).await;
    let resolving = || {
        let mut builder = reqwest::Client::builder();
        for name in ["good.remote.test", "mcp.remote.test"] {
            builder = builder.resolve(name, SocketAddr::from(([127, 0, 0, 1], 0)));
        }
        builder
    };
    // A user's authorization, headless, against the remote `mcp` and `auth`.
    let headless = |mcp: &Site, auth: &Site| {
        let provider = OAuth::builder()
            .redirect_uri(base_redirect())
            .authorizer(HeadlessAuthorizer::with_http(resolving()).unwrap())
            .http_client(http_for(&[auth, mcp]))
            .dangerous_allow_plain_http(true)
            .build()
            .unwrap();
        let mcp_url = format!("{}/mcp", mcp.url);
        let client = client(&mcp_url, &provider, Some(http_for(&[mcp])));
        (provider, client)
    };
    let (provider, refused) = headless(&mcp, &good);
    guarded(refused.connect()).await.unwrap_err();
    assert_eq!(good.hits_at("/authorize").len(), 1, "{:?}", good.hits());
    assert!(sink.hits().is_empty(), "{:?}", sink.hits());
    assert!(matches!(last_failure(&provider), OAuthError::Authorizer(_)));

    // A remote authorization server's own pages (plain http here) are followed.
    let consenting = authorization_server(
        "good",
        true,
        AsOptions {
            consent_page: true,
            ..AsOptions::default()
        },
    )
    .await;
    let mcp = mcp_server(true, "good", vec![consenting.url.clone()], false).await;
    let (_, consented) = headless(&mcp, &consenting);
    guarded(consented.connect()).await.unwrap();
    assert_eq!(consenting.hits_at("/consent").len(), 1);
}

/// A registration kept from before (here one without a redirect URI of its own, as an earlier
/// version registered) is made again with this authorization server's own redirect URI: the
/// old one would share its redirect URI with every other server's.
#[tokio::test]
async fn a_registration_without_its_own_redirect_uri_is_made_again() {
    let good = authorization_server("good", false, AsOptions::default()).await;
    let mcp = mcp_server(false, "good", vec![good.url.clone()], false).await;
    let store = InMemoryTokenStore::new();
    let old = RegisteredClient::new(good.url.clone(), "good-client-from-before");
    guarded(store.save_client(old)).await.unwrap();
    let provider = OAuth::builder()
        .redirect_uri(base_redirect())
        .authorizer(HeadlessAuthorizer::new())
        .token_store(store.clone())
        .build()
        .unwrap();
    let client = client(&format!("{}/mcp", mcp.url), &provider, None);
    guarded(client.connect()).await.unwrap();
    let registered = guarded(store.load_client(&good.url))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(registered.client_id, "good-client-1");
    let redirect = registered.redirect_uri.unwrap();
    assert!(
        redirect.starts_with(&format!("{}/as-", base_redirect())),
        "{redirect}"
    );
    let authorize = good.hits_at("/authorize");
    assert_eq!(authorize[0].query["client_id"], "good-client-1");
    assert_eq!(authorize[0].query["redirect_uri"], redirect);
}

/// A plain-http MCP endpoint off loopback gets no OAuth: not the token kept for it, no
/// metadata request, and the refusal says why. Configured up front, it is refused at build
/// time.
#[tokio::test]
async fn no_oauth_over_a_plain_http_endpoint() {
    let good = authorization_server("good", true, AsOptions::default()).await;
    let mcp = mcp_server(true, "good", vec![good.url.clone()], true).await;
    let server = format!("{}/mcp", mcp.url);
    // A token kept from an earlier run: it would travel in cleartext.
    let store = InMemoryTokenStore::new();
    let kept = TokenSet::new("good-access-0", good.url.clone());
    guarded(store.save_tokens(&server, Some(kept)))
        .await
        .unwrap();
    let provider = OAuth::builder()
        .client_credentials(ClientCredentials::secret("m", "s3cret").issuer(&good.url))
        .http_client(http_for(&[&mcp, &good]))
        .token_store(store)
        .build()
        .unwrap();
    let client = client(&server, &provider, Some(http_for(&[&mcp])));
    let err = guarded(client.connect()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unauthorized, "{err}");
    assert!(matches!(
        last_failure(&provider),
        OAuthError::InsecureUrl(_)
    ));
    let hits = mcp.hits();
    assert!(hits.iter().all(|h| h.path == "/mcp"), "{hits:?}");
    assert!(hits.iter().all(|h| h.header("authorization").is_none()));
    assert!(good.hits().is_empty());

    let err = OAuth::builder()
        .server_url(&server)
        .client_credentials(ClientCredentials::secret("m", "s3cret").issuer(&good.url))
        .build()
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
}

/// The mix-up attack (RFC 9700 §4.4.2) on authorization servers without `iss`: the MCP
/// server names "evil", whose authorization endpoint sends the user on to "good" as this
/// client (a client ID metadata document makes its `client_id` the same everywhere). Good
/// answers at the redirect URI the document lists; the client, in the middle of evil's flow,
/// must not hand good's code to evil. It registers at evil with evil's own redirect URI
/// instead (no document without `iss`), and refuses an answer that arrived elsewhere:
/// whether the authorizer is headless or a browser that returns any URL its listener got.
#[tokio::test]
async fn a_mixed_up_code_never_reaches_the_server_that_forwarded_the_user() {
    let good = authorization_server(
        "good",
        false,
        AsOptions {
            cimd: true,
            ..AsOptions::default()
        },
    )
    .await;
    let evil = authorization_server(
        "evil",
        false,
        AsOptions {
            cimd: true,
            forward_to: Some(format!("{}/authorize", good.url)),
            ..AsOptions::default()
        },
    )
    .await;
    let mcp = mcp_server(false, "evil", vec![evil.url.clone()], false).await;
    let builder = || {
        OAuth::builder()
            .redirect_uri(base_redirect())
            .client_metadata_document(METADATA_DOCUMENT)
    };
    let browser = |request: AuthorizationRequest| async move { browse(request).await };
    let providers = [
        builder()
            .authorizer(HeadlessAuthorizer::new())
            .build()
            .unwrap(),
        builder().authorizer(browser).build().unwrap(),
    ];
    for provider in providers {
        let client = client(&format!("{}/mcp", mcp.url), &provider, None);
        guarded(client.connect()).await.unwrap_err();
        assert!(
            matches!(
                last_failure(&provider),
                OAuthError::Authorizer(_) | OAuthError::AuthorizationResponse(_)
            ),
            "{:?}",
            provider.last_failure()
        );
    }
    // Good issued codes to its registered redirect URI; none went to evil's token endpoint.
    assert_eq!(good.hits_at("/authorize").len(), 2, "{:?}", good.hits());
    assert!(
        evil.hits_at("/token").is_empty(),
        "{:?}",
        evil.hits_at("/token")
    );
    assert!(good.hits_at("/token").is_empty());
    // Evil was registered with a redirect URI of its own, not the document's.
    let registered = evil.hits_at("/register");
    assert!(!registered.is_empty());
    for registration in registered {
        let body: Value = serde_json::from_str(&registration.body).unwrap();
        let uri = body["redirect_uris"][0].as_str().unwrap();
        assert!(
            uri.starts_with(&format!("{}/as-", base_redirect())),
            "{uri}"
        );
    }
}

/// A browser: follows every redirect, and returns the first URL on the application's
/// loopback listener (any path), as a listener that accepts every path would.
async fn browse(request: AuthorizationRequest) -> Result<reqwest::Url, Error> {
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let mut url = request.url;
    for _ in 0..10 {
        if url.port() == Some(CALLBACK_PORT) {
            return Ok(url);
        }
        let response = http
            .get(url.clone())
            .send()
            .await
            .map_err(Error::token_unavailable)?;
        let location = response
            .headers()
            .get("location")
            .and_then(|v| v.to_str().ok())
            .ok_or_else(|| Error::token_unavailable(std::io::Error::other("no redirect")))?;
        url = url.join(location).unwrap();
    }
    Err(Error::token_unavailable(std::io::Error::other(
        "too many redirects",
    )))
}

/// An HTTP client of the application's that follows redirects: a token endpoint answering
/// 307 does not get the request body (here the client secret, `client_secret_post`) sent on
/// to where it points, and the redirected answer is refused.
#[tokio::test]
async fn a_redirecting_token_endpoint_gets_no_second_copy_of_the_secret() {
    let sink = sink().await;
    let good = authorization_server(
        "good",
        false,
        AsOptions {
            auth_methods: Some(vec!["client_secret_post"]),
            token_redirect: Some(format!("http://127.0.0.1:{}/token", sink.port)),
            ..AsOptions::default()
        },
    )
    .await;
    let mcp = mcp_server(false, "good", vec![good.url.clone()], false).await;
    let provider = OAuth::builder()
        .client_credentials(ClientCredentials::secret("machine-1", "s3cret").issuer(&good.url))
        // reqwest's default policy follows up to 10 redirects.
        .http_client(reqwest::Client::new())
        .build()
        .unwrap();
    let client = client(&format!("{}/mcp", mcp.url), &provider, None);
    guarded(client.connect()).await.unwrap_err();
    let sent = good.hits_at("/token");
    assert!(!sent.is_empty());
    assert_eq!(sent[0].form()["client_secret"], "s3cret");
    assert!(sink.hits().is_empty(), "{:?}", sink.hits());
}

/// A token store that remembers the keys it was asked about.
#[derive(Clone, Default)]
struct KeyedStore {
    keys: Arc<Mutex<Vec<String>>>,
    inner: InMemoryTokenStore,
}

impl TokenStore for KeyedStore {
    fn load_tokens(&self, server: &str) -> BoxFut<Result<Option<TokenSet>, Error>> {
        self.keys.lock().unwrap().push(server.to_owned());
        self.inner.load_tokens(server)
    }

    fn save_tokens(&self, server: &str, tokens: Option<TokenSet>) -> BoxFut<Result<(), Error>> {
        self.keys.lock().unwrap().push(server.to_owned());
        self.inner.save_tokens(server, tokens)
    }

    fn load_client(&self, issuer: &str) -> BoxFut<Result<Option<RegisteredClient>, Error>> {
        self.inner.load_client(issuer)
    }

    fn save_client(&self, client: RegisteredClient) -> BoxFut<Result<(), Error>> {
        self.inner.save_client(client)
    }
}

/// Credentials in the MCP URL (user info, a query parameter) do not reach the provider's
/// `Debug` or its errors; the password does not reach the key its tokens are stored under.
#[tokio::test]
async fn credentials_in_the_mcp_url_stay_out_of_errors_and_debug() {
    let server = "http://user:hunter2@127.0.0.1:1/mcp?api_key=k3y";
    let store = KeyedStore::default();
    let builder = OAuth::builder()
        .server_url(server)
        .token_store(store.clone())
        .client_credentials(ClientCredentials::secret("m", "s3cret").issuer("https://as.example"));
    let debug = format!("{builder:?} {:?}", Client::builder(server));
    let provider = builder.build().unwrap();
    let mut same = TokenRequest::default();
    same.url = Some(server.to_owned());
    // No token yet, and none asked for: the store was read, nothing sent.
    assert_eq!(guarded(provider.credential(same)).await.unwrap(), None);
    let keys = store.keys.lock().unwrap().clone();
    assert_eq!(keys, ["http://127.0.0.1:1/mcp?api_key=k3y"]);
    let mut elsewhere = TokenRequest::default();
    elsewhere.url = Some("http://other:pa55@127.0.0.1:2/mcp?api_key=0ther".into());
    let err = guarded(provider.credential(elsewhere)).await.unwrap_err();
    let shown = format!("{debug} {err} {provider:?}");
    for secret in ["hunter2", "k3y", "pa55", "0ther", "s3cret"] {
        assert!(!shown.contains(secret), "{secret} in {shown}");
    }
    assert!(err.to_string().contains("http://127.0.0.1:1/mcp"), "{err}");
}

/// Protected resource metadata that answers 503 for a moment is an error, not "no metadata
/// here": discovery does not take the 2025-03-26 path, conclude that the authorization
/// server changed and drop the tokens. Once the metadata is back, the kept token is used.
#[tokio::test]
async fn unavailable_resource_metadata_does_not_drop_the_tokens() {
    let good = authorization_server("good", false, AsOptions::default()).await;
    let down = Arc::new(AtomicBool::new(false));
    let (is_down, servers) = (down.clone(), vec![good.url.clone()]);
    let mcp = Site::start(None, move |site, hit| match hit.path.as_str() {
        "/.well-known/oauth-protected-resource/mcp" if is_down.load(Ordering::SeqCst) => {
            StatusCode::SERVICE_UNAVAILABLE.into_response()
        }
        "/.well-known/oauth-protected-resource/mcp" => Json(json!({
            "resource": format!("{}/mcp", site.url),
            "authorization_servers": servers,
        }))
        .into_response(),
        _ => StatusCode::NOT_FOUND.into_response(),
    })
    .await;
    let server = format!("{}/mcp", mcp.url);
    let store = InMemoryTokenStore::new();
    let provider = OAuth::builder()
        .redirect_uri(base_redirect())
        .authorizer(HeadlessAuthorizer::new())
        .token_store(store.clone())
        .build()
        .unwrap();
    let token = guarded(provider.credential(refusal(&server, None)))
        .await
        .unwrap()
        .unwrap();

    down.store(true, Ordering::SeqCst);
    let mut again = refusal(&server, None);
    again.refused_token = Some(token.clone());
    let err = guarded(provider.credential(again)).await.unwrap_err();
    assert!(
        matches!(last_failure(&provider), OAuthError::Http(_)),
        "{err}"
    );
    assert!(
        mcp.hits_at("/.well-known/oauth-authorization-server")
            .is_empty(),
        "no legacy discovery: {:?}",
        mcp.hits()
    );
    assert!(guarded(store.load_tokens(&server)).await.unwrap().is_some());

    down.store(false, Ordering::SeqCst);
    let mut ordinary = TokenRequest::default();
    ordinary.url = Some(server);
    assert_eq!(
        guarded(provider.credential(ordinary)).await.unwrap(),
        Some(token)
    );
}
