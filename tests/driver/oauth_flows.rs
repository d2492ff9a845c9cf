//! `OAuthProvider` against a small authorization server of our own (axum, 127.0.0.1) and the
//! scriptable MCP server of the driver tests: a token refreshed in the middle of a resumed
//! stream, a re-initialization with a refreshed token, refresh before expiry (no earlier than
//! half a token's life, not on every request), one refresh for concurrent refusals, a request
//! dropped during its refresh, a provider that refuses to hand its token to another server.

use crate::support;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Form, Query, State};
use axum::http::{HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::Json;
use mcp_resume::client::oauth::{
    Authorizer, HeadlessAuthorizer, InMemoryTokenStore, OAuth, OAuthProvider, TokenStore,
};
use mcp_resume::oauth::OAuthError;
use mcp_resume::{Client, Era, ErrorKind, ReconnectPolicy, TokenProvider, TokenRequest, ToolCall};
use oauth2::{PkceCodeChallenge, PkceCodeVerifier};
use serde_json::{json, Value};
use support::*;
use tokio::net::TcpListener;
use tokio::sync::Notify;

/// What the authorization server issued and what it was asked.
#[derive(Default)]
struct Ledger {
    /// Access tokens the MCP server accepts.
    valid: HashSet<String>,
    /// Refresh tokens still redeemable.
    refresh: HashSet<String>,
    /// PKCE challenge per authorization code.
    codes: HashMap<String, String>,
    /// `grant_type` of every token request, in order.
    grants: Vec<String>,
    /// `expires_in` of the access tokens it issues.
    expires_in: u64,
    serial: u32,
    /// Holds the next refresh's answer (after redeeming its token, when it is redeemed).
    hold_refresh: Option<Hold>,
    /// How many refreshes to come are answered 503 (the refresh token not redeemed).
    unavailable: u32,
    /// Issues access tokens that end in a line break.
    malformed_access: bool,
    /// How many refreshes to come meet a firewall's 403 HTML page (no OAuth error).
    blocked: u32,
}

type Shared = Arc<Mutex<Ledger>>;

/// An answer held: told when it is ready, sent when released.
type Hold = (Arc<Notify>, Arc<Notify>);

struct AuthServer {
    url: String,
    ledger: Shared,
    _served: oauth::Served,
}

impl AuthServer {
    /// An authorization server for the MCP endpoint `resource`, issuing access tokens valid
    /// `expires_in` seconds with refresh tokens.
    async fn start(resource: String, expires_in: u64) -> AuthServer {
        let (listener, url) = oauth::listener().await;
        let ledger: Shared = Arc::new(Mutex::new(Ledger {
            expires_in,
            ..Ledger::default()
        }));
        let issuer = url.clone();
        let metadata = json!({
            "issuer": issuer,
            "authorization_endpoint": format!("{issuer}/authorize"),
            "token_endpoint": format!("{issuer}/token"),
            "registration_endpoint": format!("{issuer}/register"),
            "response_types_supported": ["code"],
            "grant_types_supported": ["authorization_code", "refresh_token"],
            "code_challenge_methods_supported": ["S256"],
            "token_endpoint_auth_methods_supported": ["none"],
            "authorization_response_iss_parameter_supported": true,
            "scopes_supported": ["mcp", "offline_access"],
        });
        let app = oauth::discovery(&resource, &issuer, metadata)
            .route("/authorize", get(authorize))
            .route("/token", post(token))
            .with_state((ledger.clone(), issuer));
        let _served = oauth::serve(listener, app);
        AuthServer {
            url,
            ledger,
            _served,
        }
    }

    fn grants(&self) -> Vec<String> {
        self.ledger.lock().unwrap().grants.clone()
    }

    fn is_valid(&self, token: &str) -> bool {
        self.ledger.lock().unwrap().valid.contains(token)
    }

    /// The MCP server stops accepting every token issued so far.
    fn revoke_access_tokens(&self) {
        self.ledger.lock().unwrap().valid.clear();
    }
}

async fn authorize(
    State((ledger, issuer)): State<(Shared, String)>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let mut ledger = ledger.lock().unwrap();
    ledger.serial += 1;
    let code = format!("code-{}", ledger.serial);
    let challenge = query.get("code_challenge").cloned().unwrap_or_default();
    ledger.codes.insert(code.clone(), challenge);
    let mut redirect = reqwest::Url::parse(&query["redirect_uri"]).unwrap();
    redirect
        .query_pairs_mut()
        .append_pair("code", &code)
        .append_pair("state", &query["state"])
        .append_pair("iss", &issuer);
    Redirect::to(redirect.as_str()).into_response()
}

async fn token(
    State((ledger, _)): State<(Shared, String)>,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    let (answer, held) = issue(&mut ledger.lock().unwrap(), &form);
    if let Some((arrived, released)) = held {
        arrived.notify_one();
        released.notified().await;
    }
    answer
}

/// The token endpoint's answer, and the hold it is to wait for first.
fn issue(ledger: &mut Ledger, form: &HashMap<String, String>) -> (Response, Option<Hold>) {
    let grant = form.get("grant_type").cloned().unwrap_or_default();
    ledger.grants.push(grant.clone());
    let refused = || {
        (
            StatusCode::BAD_REQUEST,
            Json(json!({"error": "invalid_grant"})),
        )
            .into_response()
    };
    match grant.as_str() {
        "authorization_code" => {
            let Some(challenge) = ledger.codes.remove(&form["code"]) else {
                return (refused(), None);
            };
            let verifier = PkceCodeVerifier::new(form["code_verifier"].clone());
            if PkceCodeChallenge::from_code_verifier_sha256(&verifier).as_str() != challenge {
                return (refused(), None);
            }
        }
        "refresh_token" => {
            if ledger.unavailable > 0 {
                ledger.unavailable -= 1;
                let held = ledger.hold_refresh.take();
                return (StatusCode::SERVICE_UNAVAILABLE.into_response(), held);
            }
            if ledger.blocked > 0 {
                ledger.blocked -= 1;
                let page = (
                    StatusCode::FORBIDDEN,
                    [(axum::http::header::CONTENT_TYPE, "text/html")],
                    "<h1>blocked</h1>",
                );
                return (page.into_response(), None);
            }
            if !ledger.refresh.remove(&form["refresh_token"]) {
                return (refused(), None);
            }
        }
        _ => return (refused(), None),
    }
    ledger.serial += 1;
    let mut access = format!("access-{}", ledger.serial);
    if ledger.malformed_access {
        access.push('\n');
    }
    let refresh = format!("refresh-{}", ledger.serial);
    ledger.valid.insert(access.clone());
    ledger.refresh.insert(refresh.clone());
    let answer = Json(json!({
        "access_token": access,
        "token_type": "Bearer",
        "expires_in": ledger.expires_in,
        "refresh_token": refresh,
        "scope": "mcp offline_access",
    }))
    .into_response();
    let held = (grant == "refresh_token")
        .then(|| ledger.hold_refresh.take())
        .flatten();
    (answer, held)
}

/// A 401 naming the authorization server's protected resource metadata.
fn unauthorized(as_url: &str) -> Response {
    oauth::refusal(as_url, r#"Bearer error="invalid_token","#)
}

fn bearer(req: &Recorded) -> Option<String> {
    req.header("authorization")?
        .strip_prefix("Bearer ")
        .map(str::to_owned)
}

/// The MCP server's listener (its URL is the protected resource) and an authorization server
/// for it.
async fn servers(expires_in: u64) -> (TcpListener, String, Arc<AuthServer>) {
    let (listener, url) = oauth::mcp_listener().await;
    let auth = Arc::new(AuthServer::start(url.clone(), expires_in).await);
    (listener, url, auth)
}

/// An MCP server that answers only the tokens `auth` issued (valid an hour), and `auth`.
async fn protected() -> (TestServer, String, Arc<AuthServer>) {
    protected_for(3600).await
}

/// [`protected`], with tokens valid `expires_in` seconds.
async fn protected_for(expires_in: u64) -> (TestServer, String, Arc<AuthServer>) {
    let (listener, url, auth) = servers(expires_in).await;
    let as_ = auth.clone();
    let server = TestServer::start_on(listener, move |req| match bearer(req) {
        Some(token) if as_.is_valid(&token) => default_reply(req),
        _ => unauthorized(&as_.url),
    });
    (server, url, auth)
}

fn provider() -> OAuthProvider {
    provider_with(InMemoryTokenStore::new())
}

/// [`provider`] keeping its tokens in `store`, for the test to read.
fn provider_with(store: InMemoryTokenStore) -> OAuthProvider {
    OAuth::builder()
        .client_name("oauth-flows-test")
        .redirect_uri("http://127.0.0.1:9/callback")
        .authorizer(HeadlessAuthorizer::new())
        .token_store(store)
        .build()
        .unwrap()
}

fn client(url: &str, provider: &OAuthProvider) -> Client {
    Client::builder(url)
        .auth(provider.clone())
        .era(Era::Legacy)
        .open_listen_stream(false)
        .call_timeout(Duration::from_secs(10))
        .reconnect(
            ReconnectPolicy::default()
                .with_initial_delay(Duration::from_millis(5))
                .with_max_delay(Duration::from_millis(50)),
        )
        .build()
        .unwrap()
}

/// Every token the MCP server saw is one the authorization server issued.
fn assert_only_issued_tokens(requests: &[Recorded]) {
    for r in requests {
        if let Some(token) = bearer(r) {
            assert!(
                token.starts_with("access-"),
                "{} carried a token the server never issued",
                r.label()
            );
        }
    }
}

/// The access token expires while a call's stream is cut: the resume GET is refused, the
/// provider refreshes, and the same GET (same session, same `Last-Event-ID`) goes again with
/// the new token. Nothing re-initializes, the call is not re-sent, and the DELETE that
/// closes the session carries the refreshed token.
#[tokio::test]
async fn a_token_refreshed_in_the_middle_of_a_resumed_stream() {
    let (listener, url, auth) = servers(3600).await;
    let as_ = auth.clone();
    let call_id = Arc::new(Mutex::new(Value::Null));
    let seen = call_id.clone();
    let server = TestServer::start_on(listener, move |req| {
        match bearer(req) {
            Some(token) if as_.is_valid(&token) => {}
            _ => return unauthorized(&as_.url),
        }
        if req.is_rpc("tools/call") {
            *seen.lock().unwrap() = req.rpc_id();
            // The token expires now, and the stream is cut after its priming event.
            as_.revoke_access_tokens();
            return sse_text("id: ev-1\ndata: \n\n");
        }
        if req.method == Method::GET && req.header("last-event-id") == Some("ev-1") {
            let id = seen.lock().unwrap().clone();
            let result = json!({"jsonrpc": "2.0", "id": id,
                "result": {"content": [{"type": "text", "text": "resumed"}]}});
            return sse_text(sse_event(Some("ev-2"), &result));
        }
        default_reply(req)
    });
    let provider = provider();
    let client = client(&url, &provider);
    guarded(client.connect()).await.unwrap();
    let reply = guarded(client.call_tool(ToolCall::new("slow", json!({}))))
        .await
        .unwrap();
    assert_eq!(reply.text(), "resumed");
    guarded(client.close()).await.unwrap();

    assert_eq!(auth.grants(), ["authorization_code", "refresh_token"]);
    let requests = server.requests();
    let labels = server.labels();
    assert_eq!(
        requests.iter().filter(|r| r.is_rpc("initialize")).count(),
        // The first initialize went without credentials (401), then with the first token.
        2,
        "{labels:?}"
    );
    assert_eq!(
        requests.iter().filter(|r| r.is_rpc("tools/call")).count(),
        1,
        "not re-sent"
    );
    let resumes: Vec<&Recorded> = requests
        .iter()
        .filter(|r| r.method == Method::GET && r.header("last-event-id").is_some())
        .collect();
    assert_eq!(resumes.len(), 2, "refused once, then resumed: {labels:?}");
    for resume in &resumes {
        assert_eq!(resume.header("last-event-id"), Some("ev-1"));
        assert_eq!(resume.header("mcp-session-id"), Some(SESSION_ID));
    }
    let (first, second) = (bearer(resumes[0]).unwrap(), bearer(resumes[1]).unwrap());
    assert_ne!(
        first, second,
        "the refused resume is re-sent with the refreshed token"
    );
    let delete = requests
        .iter()
        .find(|r| r.method == Method::DELETE)
        .unwrap();
    assert_eq!(bearer(delete), Some(second.clone()));
    assert_eq!(delete.header("mcp-session-id"), Some(SESSION_ID));
    assert_only_issued_tokens(&requests);
}

/// The session is gone (404) and the token expired with it: the re-initialization is refused
/// once, the provider refreshes, and the new session is initialized and used with the
/// refreshed token; the call that met the 404 is re-sent on it.
#[tokio::test]
async fn a_reinitialization_with_a_refreshed_token() {
    let (listener, url, auth) = servers(3600).await;
    let as_ = auth.clone();
    let initialized = Arc::new(Mutex::new(0u32));
    let sessions = initialized.clone();
    let server = TestServer::start_on(listener, move |req| {
        match bearer(req) {
            Some(token) if as_.is_valid(&token) => {}
            _ => return unauthorized(&as_.url),
        }
        if req.is_rpc("initialize") {
            let mut n = sessions.lock().unwrap();
            *n += 1;
            let mut response = json_result(req, initialize_result());
            let id = format!("session-{n}");
            response
                .headers_mut()
                .insert("mcp-session-id", HeaderValue::from_str(&id).unwrap());
            return response;
        }
        if req.is_rpc("tools/call") && req.header("mcp-session-id") == Some("session-1") {
            // The first session is gone, and the token with it.
            as_.revoke_access_tokens();
            return status(404);
        }
        default_reply(req)
    });
    let provider = provider();
    let client = client(&url, &provider);
    let mut events = client.events();
    guarded(client.connect()).await.unwrap();
    let reply = guarded(client.call_tool(ToolCall::new("echo", json!({"text": "again"}))))
        .await
        .unwrap();
    assert_eq!(reply.text(), "again");

    assert_eq!(auth.grants(), ["authorization_code", "refresh_token"]);
    assert_eq!(*initialized.lock().unwrap(), 2, "{:?}", server.labels());
    let requests = server.requests();
    let inits: Vec<&Recorded> = requests
        .iter()
        .filter(|r| r.is_rpc("initialize") && bearer(r).is_some())
        .collect();
    // First session's initialize, the refused re-initialization, the accepted one.
    assert_eq!(inits.len(), 3, "{:?}", server.labels());
    assert_eq!(
        inits[1].header("mcp-session-id"),
        None,
        "a fresh initialize"
    );
    assert_eq!(bearer(inits[0]), bearer(inits[1]));
    assert_ne!(
        bearer(inits[1]),
        bearer(inits[2]),
        "re-sent with the refreshed token"
    );
    let call = requests.iter().rfind(|r| r.is_rpc("tools/call")).unwrap();
    assert_eq!(call.header("mcp-session-id"), Some("session-2"));
    assert_eq!(bearer(call), bearer(inits[2]));
    let reinitialized = guarded(async {
        while let Some(event) = futures::StreamExt::next(&mut events).await {
            if matches!(event, mcp_resume::SessionEvent::Reinitialized { .. }) {
                return true;
            }
        }
        false
    })
    .await;
    assert!(reinitialized);
}

/// A token about to expire is refreshed before a request goes out: the server never sees it
/// refused.
#[tokio::test]
async fn a_token_is_refreshed_before_it_expires() {
    // Tokens live 1 s: the margin (60 s) is capped at half of that, which the test waits out.
    let (listener, url, auth) = servers(1).await;
    let as_ = auth.clone();
    let refusals = Arc::new(Mutex::new(0u32));
    let counted = refusals.clone();
    let server = TestServer::start_on(listener, move |req| match bearer(req) {
        Some(token) if as_.is_valid(&token) => default_reply(req),
        Some(_) => {
            *counted.lock().unwrap() += 1;
            unauthorized(&as_.url)
        }
        None => unauthorized(&as_.url),
    });
    let provider = provider();
    let client = client(&url, &provider);
    guarded(client.connect()).await.unwrap();
    let granted = auth.grants().len();
    tokio::time::sleep(Duration::from_millis(600)).await;
    guarded(client.list_tools()).await.unwrap();
    let grants = auth.grants();
    assert_eq!(grants[0], "authorization_code");
    assert!(
        grants[1..].iter().all(|g| g == "refresh_token") && grants.len() > granted,
        "the request past the token's half-life refreshed it first: {grants:?}"
    );
    let requests = server.requests();
    let first = requests.iter().find_map(bearer);
    let listed = requests
        .iter()
        .rev()
        .find(|r| r.is_rpc("tools/list"))
        .and_then(bearer);
    assert!(listed.is_some(), "tools/list carried a token");
    assert_ne!(listed, first, "tools/list carried the refreshed token");
    assert_eq!(*refusals.lock().unwrap(), 0, "no token was refused");
}

/// A token the authorization server grants for no longer than the refresh margin (60 s) is
/// not renewed by every request, as if always about to expire: renewal waits for half its
/// lifetime, so a run of calls within it costs the token endpoint no grant after the first.
#[tokio::test]
async fn a_token_shorter_than_the_refresh_margin_is_not_renewed_by_every_request() {
    for expires_in in [30, 60] {
        let (_server, url, auth) = protected_for(expires_in).await;
        let provider = provider();
        let client = client(&url, &provider);
        guarded(client.connect()).await.unwrap();
        for _ in 0..10 {
            guarded(client.list_tools()).await.unwrap();
        }
        assert_eq!(
            auth.grants(),
            ["authorization_code"],
            "a token granted for {expires_in} s was renewed within its first half"
        );
    }
}

/// Several requests refused at once share one refresh: the first refreshes, the others see
/// a token newer than the one refused and take it.
#[tokio::test]
async fn concurrent_refusals_refresh_once() {
    let (_server, url, auth) = protected().await;
    let provider = provider();
    let client = client(&url, &provider);
    guarded(client.connect()).await.unwrap();
    auth.revoke_access_tokens();
    let calls = (0..6).map(|_| client.list_tools());
    for result in guarded(futures::future::join_all(calls)).await {
        result.unwrap();
    }
    assert_eq!(auth.grants(), ["authorization_code", "refresh_token"]);
}

/// Hands every request to an [`OAuthProvider`], telling `all_in` once `expected` refused
/// requests have asked it for a fresh token: each has then begun to wait for the provider
/// (which notes the flows already ended when asked, before it waits), so a flow released by
/// `all_in` ends after all of them began waiting, without sleeping on it.
struct CountingRefusals {
    inner: OAuthProvider,
    refused: Arc<std::sync::atomic::AtomicU32>,
    expected: u32,
    all_in: Arc<Notify>,
    /// Counts the ordinary requests instead (no challenge).
    ordinary: bool,
}

impl TokenProvider for CountingRefusals {
    fn token(
        &self,
        request: TokenRequest,
    ) -> futures::future::BoxFuture<'static, Result<String, mcp_resume::Error>> {
        self.inner.token(request)
    }

    fn credential(
        &self,
        request: TokenRequest,
    ) -> futures::future::BoxFuture<'static, Result<Option<String>, mcp_resume::Error>> {
        let counted = request.challenge.is_some() != self.ordinary;
        let flow = self.inner.credential(request);
        if counted
            && self
                .refused
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst)
                + 1
                == self.expected
        {
            self.all_in.notify_one();
        }
        flow
    }

    fn present(
        &self,
        token: &str,
        method: &reqwest::Method,
        url: &reqwest::Url,
    ) -> Result<mcp_resume::Presentation, mcp_resume::Error> {
        self.inner.present(token, method, url)
    }
}

/// A legacy client of `url` whose requests go through `counting`, with no standalone stream
/// (its requests would be counted too) and a call timeout the tests never reach.
fn counted_client(url: &str, counting: CountingRefusals) -> mcp_resume::ClientBuilder {
    Client::builder(url)
        .auth(counting)
        .era(Era::Legacy)
        .open_listen_stream(false)
        .call_timeout(Duration::from_secs(10))
}

/// Several requests refused at once, with no refresh token to renew by, share one
/// authorization, and when the user declines it they share its failure: the page opens once,
/// not once per request. A request made after the failure authorizes again.
#[tokio::test]
async fn concurrent_refusals_share_a_failed_authorization() {
    let (_server, url, auth) = protected().await;
    let asked = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let all_in = Arc::new(Notify::new());
    let (count, gate) = (asked.clone(), all_in.clone());
    let headless = Arc::new(HeadlessAuthorizer::new());
    let provider = OAuth::builder()
        .client_name("oauth-flows-test")
        .redirect_uri("http://127.0.0.1:9/callback")
        .authorizer(move |request| {
            let (headless, gate) = (headless.clone(), gate.clone());
            let nth = count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            async move {
                // The first is the connection's; the second, the refusals', is declined.
                if nth != 1 {
                    return headless.authorize(request).await;
                }
                // Declined only once every refused request waits behind this flow.
                gate.notified().await;
                Err(mcp_resume::Error::token_unavailable(std::io::Error::other(
                    "the user closed the page",
                )))
            }
        })
        .build()
        .unwrap();
    let client = counted_client(
        &url,
        CountingRefusals {
            inner: provider.clone(),
            refused: Arc::default(),
            expected: 6,
            all_in,
            ordinary: false,
        },
    )
    .build()
    .unwrap();
    guarded(client.connect()).await.unwrap();
    {
        let mut ledger = auth.ledger.lock().unwrap();
        ledger.valid.clear();
        ledger.refresh.clear();
    }
    let calls = (0..6).map(|_| client.list_tools());
    for result in guarded(futures::future::join_all(calls)).await {
        let err = result.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unauthorized, "{err}");
    }
    assert!(
        matches!(provider.last_failure(), Some(OAuthError::Authorizer(_))),
        "{:?}",
        provider.last_failure()
    );
    assert_eq!(
        asked.load(std::sync::atomic::Ordering::SeqCst),
        2,
        "one authorization for six refusals"
    );
    guarded(client.list_tools()).await.unwrap();
    assert_eq!(asked.load(std::sync::atomic::Ordering::SeqCst), 3);
}

/// Several requests refused at once whose refresh gets no answer (the token endpoint is
/// down) share that one refresh's failure, as they would share its token: the token endpoint
/// is asked once, not once per refused request. A request made after the failure refreshes
/// again, with the refresh token that was kept.
#[tokio::test]
async fn concurrent_refusals_share_a_refresh_that_got_no_answer() {
    let (_server, url, auth) = protected().await;
    let provider = provider();
    let all_in = Arc::new(Notify::new());
    let client = counted_client(
        &url,
        CountingRefusals {
            inner: provider.clone(),
            refused: Arc::default(),
            expected: 6,
            all_in: all_in.clone(),
            ordinary: false,
        },
    )
    .build()
    .unwrap();
    guarded(client.connect()).await.unwrap();
    {
        let mut ledger = auth.ledger.lock().unwrap();
        ledger.valid.clear();
        ledger.unavailable = 100;
        // The 503 is held until every refused request waits behind its refresh.
        ledger.hold_refresh = Some((Arc::new(Notify::new()), all_in));
    }
    let calls = (0..6).map(|_| client.list_tools());
    for result in guarded(futures::future::join_all(calls)).await {
        let err = result.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unauthorized, "{err}");
    }
    assert!(
        matches!(provider.last_failure(), Some(OAuthError::Http(_))),
        "{:?}",
        provider.last_failure()
    );
    assert_eq!(
        auth.grants(),
        ["authorization_code", "refresh_token"],
        "one refresh for six refusals"
    );
    auth.ledger.lock().unwrap().unavailable = 0;
    guarded(client.list_tools()).await.unwrap();
    assert_eq!(
        auth.grants(),
        ["authorization_code", "refresh_token", "refresh_token"]
    );
}

/// The same for requests whose token expired as they waited for its renewal: when the
/// token endpoint gives no answer, they take that renewal's failure instead of each asking
/// again.
#[tokio::test]
async fn concurrent_renewals_of_an_expired_token_share_one_that_got_no_answer() {
    // Tokens expire as they are issued: every request renews first.
    let (listener, url, auth) = servers(0).await;
    let as_ = auth.clone();
    let _server = TestServer::start_on(listener, move |req| match bearer(req) {
        Some(token) if as_.is_valid(&token) => default_reply(req),
        _ => unauthorized(&as_.url),
    });
    let provider = provider();
    let all_in = Arc::new(Notify::new());
    let asked = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let client = counted_client(
        &url,
        CountingRefusals {
            inner: provider.clone(),
            refused: asked.clone(),
            expected: 6,
            all_in: all_in.clone(),
            ordinary: true,
        },
    )
    .reconnect(ReconnectPolicy::default().with_max_attempts(1))
    .build()
    .unwrap();
    guarded(client.connect()).await.unwrap();
    let before = auth.grants().len();
    asked.store(0, std::sync::atomic::Ordering::SeqCst);
    {
        let mut ledger = auth.ledger.lock().unwrap();
        ledger.unavailable = 100;
        // The 503 is held until every request waits behind the renewal.
        ledger.hold_refresh = Some((Arc::new(Notify::new()), all_in));
    }
    let calls = (0..6).map(|_| client.list_tools());
    for result in guarded(futures::future::join_all(calls)).await {
        result.unwrap_err();
    }
    assert_eq!(
        auth.grants()[before..],
        ["refresh_token"],
        "one renewal for six requests"
    );
}

/// A request dropped while its refresh is on the way (an app's `timeout`, a deadline) does
/// not lose what the authorization server issued: the refresh token it redeemed has a
/// successor, and the next request refreshes with that one instead of presenting the spent
/// token and being sent to authorize anew.
#[tokio::test]
async fn a_request_dropped_during_its_refresh_keeps_the_new_tokens() {
    let (_server, url, auth) = protected().await;
    let provider = provider();
    let client = client(&url, &provider);
    guarded(client.connect()).await.unwrap();
    guarded(client.list_tools()).await.unwrap();
    let (arrived, released) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    {
        let mut ledger = auth.ledger.lock().unwrap();
        ledger.hold_refresh = Some((arrived.clone(), released.clone()));
        ledger.valid.clear();
    }
    // The refused request's refresh reaches the authorization server, which redeems the
    // refresh token; the request is dropped before the answer comes.
    tokio::select! {
        result = client.list_tools() => panic!("answered before its refresh: {result:?}"),
        () = guarded(arrived.notified()) => {}
    }
    released.notify_one();
    guarded(client.list_tools()).await.unwrap();
    assert_eq!(
        auth.grants(),
        ["authorization_code", "refresh_token"],
        "the next request uses the refreshed token"
    );
}

/// Requests waiting behind an authorization that does not finish (a user who closed the
/// page) leave nothing behind when they give up: each ends by its deadline, and no task
/// stays parked for it.
#[tokio::test]
async fn requests_waiting_behind_an_unfinished_authorization_leave_nothing_behind() {
    let (_server, url, _auth) = protected().await;
    let provider = OAuth::builder()
        .client_name("oauth-flows-test")
        .redirect_uri("http://127.0.0.1:9/callback")
        .authorizer(|_| futures::future::pending())
        .build()
        .unwrap();
    let client = Client::builder(&url)
        .auth(provider)
        .era(Era::Legacy)
        .open_listen_stream(false)
        .call_timeout(Duration::from_millis(50))
        .build()
        .unwrap();
    let err = guarded(client.ping()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    let metrics = tokio::runtime::Handle::current().metrics();
    let before = metrics.num_alive_tasks();
    for _ in 0..30 {
        let err = guarded(client.ping()).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    }
    let grown = metrics.num_alive_tasks().saturating_sub(before);
    assert!(grown < 10, "{grown} tasks left behind by 30 requests");
}

/// An authorizer that never answers (the user closed the page, a redirect listener that
/// never hears back) holds the provider only until `authorization_timeout`: then the
/// failure is recorded, `sign_out` gets the provider's state, and the next request starts a
/// new authorization instead of waiting behind the first for ever.
#[tokio::test]
async fn an_authorizer_that_never_answers_gives_the_provider_back_at_its_timeout() {
    let (_server, url, _auth) = protected().await;
    let asked = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let asked_again = Arc::new(Notify::new());
    let (count, again) = (asked.clone(), asked_again.clone());
    let provider = OAuth::builder()
        .client_name("oauth-flows-test")
        .redirect_uri("http://127.0.0.1:9/callback")
        .authorizer(move |_| {
            if count.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 1 {
                again.notify_one();
            }
            futures::future::pending()
        })
        .authorization_timeout(Duration::from_millis(200))
        .build()
        .unwrap();
    let client = Client::builder(&url)
        .auth(provider.clone())
        .era(Era::Legacy)
        .open_listen_stream(false)
        .call_timeout(Duration::from_millis(50))
        .build()
        .unwrap();
    let err = guarded(client.ping()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    // Behind the unfinished authorization until its timeout, then through.
    guarded(provider.sign_out()).await.unwrap();
    assert!(
        matches!(provider.last_failure(), Some(OAuthError::Authorizer(ref m)) if m.contains("did not answer")),
        "{:?}",
        provider.last_failure()
    );
    let _ = guarded(client.ping()).await;
    guarded(asked_again.notified()).await;
    assert_eq!(asked.load(std::sync::atomic::Ordering::SeqCst), 2);
}

/// Sets its flag and wakes the test when the authorizer's future is dropped.
struct DropGuard(Arc<std::sync::atomic::AtomicBool>, Arc<Notify>);

impl Drop for DropGuard {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::SeqCst);
        self.1.notify_one();
    }
}

/// A provider whose authorizer never answers: `entered` is notified when it is asked,
/// `dropped` (and its flag) when its future is dropped.
fn unanswered_authorization() -> (
    OAuthProvider,
    Arc<Notify>,
    Arc<std::sync::atomic::AtomicBool>,
    Arc<Notify>,
) {
    let entered = Arc::new(Notify::new());
    let dropped = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let dropped_note = Arc::new(Notify::new());
    let (enter, flag, note) = (entered.clone(), dropped.clone(), dropped_note.clone());
    let provider = OAuth::builder()
        .client_name("oauth-flows-test")
        .redirect_uri("http://127.0.0.1:9/callback")
        .authorizer(move |_| {
            let guard = DropGuard(flag.clone(), note.clone());
            enter.notify_one();
            async move {
                let _guard = guard;
                futures::future::pending::<Result<reqwest::Url, mcp_resume::Error>>().await
            }
        })
        .build()
        .unwrap();
    (provider, entered, dropped, dropped_note)
}

fn waiting_client(url: &str, provider: OAuthProvider) -> Client {
    Client::builder(url)
        .auth(provider)
        .era(Era::Legacy)
        .open_listen_stream(false)
        .call_timeout(Duration::from_secs(2))
        .build()
        .unwrap()
}

/// Closing the client ends the authorization its calls started: the authorizer's future is
/// dropped, though the application still holds the client (and its own clone of the
/// provider).
#[tokio::test]
async fn closing_the_client_cancels_its_pending_authorization() {
    let (_server, url, _auth) = protected().await;
    let (provider, entered, dropped, dropped_note) = unanswered_authorization();
    let client = waiting_client(&url, provider.clone());
    let call = tokio::spawn({
        let client = client.clone();
        async move { client.ping().await }
    });
    guarded(entered.notified()).await;
    let _ = client.close().await;
    tokio::time::timeout(Duration::from_secs(5), dropped_note.notified())
        .await
        .expect("the authorizer still runs after the client was closed");
    assert!(dropped.load(std::sync::atomic::Ordering::SeqCst));
    let ended = guarded(call).await.unwrap();
    assert_eq!(ended.unwrap_err().kind(), mcp_resume::ErrorKind::Closed);
    drop((client, provider));
}

/// Dropping the last clone of the client ends the authorization its calls started, the same.
#[tokio::test]
async fn dropping_the_client_cancels_its_pending_authorization() {
    let (_server, url, _auth) = protected().await;
    let (provider, entered, dropped, dropped_note) = unanswered_authorization();
    let client = waiting_client(&url, provider.clone());
    let call = tokio::spawn({
        let client = client.clone();
        async move { client.ping().await }
    });
    guarded(entered.notified()).await;
    call.abort();
    let _ = call.await;
    drop(client);
    tokio::time::timeout(Duration::from_secs(5), dropped_note.notified())
        .await
        .expect("the authorizer still runs after the client was dropped");
    assert!(dropped.load(std::sync::atomic::Ordering::SeqCst));
    drop(provider);
}

/// A clone of the provider that says when a request asked it (the clone has then joined
/// the flow holding the provider), and when it is gone (dropped with its client).
struct Watched {
    provider: OAuthProvider,
    asked: Arc<Notify>,
    _gone: Gone,
}

struct Gone(Arc<Notify>);

impl Drop for Gone {
    fn drop(&mut self) {
        self.0.notify_one();
    }
}

impl TokenProvider for Watched {
    fn token(
        &self,
        request: TokenRequest,
    ) -> futures::future::BoxFuture<'static, Result<String, mcp_resume::Error>> {
        let token = self.provider.token(request);
        self.asked.notify_one();
        token
    }

    fn credential(
        &self,
        request: TokenRequest,
    ) -> futures::future::BoxFuture<'static, Result<Option<String>, mcp_resume::Error>> {
        let credential = self.provider.credential(request);
        self.asked.notify_one();
        credential
    }
}

/// A provider whose authorizer counts its asks (`asked`), says when it is asked (`entered`),
/// and authorizes once `answer` is notified.
fn answered_when_told() -> (
    OAuthProvider,
    Arc<Notify>,
    Arc<Notify>,
    Arc<std::sync::atomic::AtomicU32>,
) {
    let entered = Arc::new(Notify::new());
    let answer = Arc::new(Notify::new());
    let asked = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let (enter, go, count) = (entered.clone(), answer.clone(), asked.clone());
    let provider = OAuth::builder()
        .client_name("oauth-flows-test")
        .redirect_uri("http://127.0.0.1:9/callback")
        .authorizer(move |request| {
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            enter.notify_one();
            let go = go.clone();
            async move {
                go.notified().await;
                HeadlessAuthorizer::new().authorize(request).await
            }
        })
        .build()
        .unwrap();
    (provider, entered, answer, asked)
}

/// Two clients share a provider: the first's request starts the authorization, the
/// second's waits on it. Dropping the first client does not end it (the second still
/// wants it): once the user answers, the second's call goes through with that
/// authorization, the user asked once.
#[tokio::test]
async fn an_authorization_another_client_waits_on_outlives_the_first_client() {
    let (_server, url, _auth) = protected().await;
    let (provider, entered, answer, asked) = answered_when_told();
    let first_gone = Arc::new(Notify::new());
    let first = Client::builder(&url)
        .auth(Watched {
            provider: provider.clone(),
            asked: Arc::new(Notify::new()),
            _gone: Gone(first_gone.clone()),
        })
        .era(Era::Legacy)
        .open_listen_stream(false)
        .call_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let second_asked = Arc::new(Notify::new());
    let second = Client::builder(&url)
        .auth(Watched {
            provider: provider.clone(),
            asked: second_asked.clone(),
            _gone: Gone(Arc::new(Notify::new())),
        })
        .era(Era::Legacy)
        .open_listen_stream(false)
        .call_timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let started = tokio::spawn({
        let first = first.clone();
        async move { first.ping().await }
    });
    guarded(entered.notified()).await;
    let waiting = tokio::spawn({
        let second = second.clone();
        async move { second.ping().await }
    });
    guarded(second_asked.notified()).await;
    started.abort();
    let _ = started.await;
    drop(first);
    guarded(first_gone.notified()).await;
    answer.notify_one();
    guarded(waiting).await.unwrap().unwrap();
    assert_eq!(asked.load(std::sync::atomic::Ordering::SeqCst), 1);
}

/// Two clients built from one builder (a template) share its provider: closing the one
/// that asked for nothing leaves the other's authorization running, and once the user
/// answers, its call goes through, the user asked once.
#[tokio::test]
async fn closing_a_sibling_client_of_one_builder_leaves_the_others_authorization() {
    let (_server, url, _auth) = protected().await;
    let (provider, entered, answer, asked) = answered_when_told();
    let template = Client::builder(&url)
        .auth(provider)
        .era(Era::Legacy)
        .open_listen_stream(false)
        .call_timeout(Duration::from_secs(30));
    let idle = template.clone().build().unwrap();
    let busy = template.build().unwrap();
    let waiting = tokio::spawn({
        let busy = busy.clone();
        async move { busy.ping().await }
    });
    guarded(entered.notified()).await;
    guarded(idle.close()).await.unwrap();
    answer.notify_one();
    guarded(waiting).await.unwrap().unwrap();
    assert_eq!(asked.load(std::sync::atomic::Ordering::SeqCst), 1);
}

/// A token store that never answers fails the request that needed it (and `sign_out`) at
/// `store_timeout`, instead of holding the provider's state for ever.
#[tokio::test]
async fn a_token_store_that_never_answers_fails_at_its_timeout() {
    struct Stuck;
    impl TokenStore for Stuck {
        fn load_tokens(
            &self,
            _: &str,
        ) -> futures::future::BoxFuture<
            'static,
            Result<Option<mcp_resume::oauth::TokenSet>, mcp_resume::Error>,
        > {
            Box::pin(futures::future::pending())
        }
        fn save_tokens(
            &self,
            _: &str,
            _: Option<mcp_resume::oauth::TokenSet>,
        ) -> futures::future::BoxFuture<'static, Result<(), mcp_resume::Error>> {
            Box::pin(futures::future::pending())
        }
        fn load_client(
            &self,
            _: &str,
        ) -> futures::future::BoxFuture<
            'static,
            Result<Option<mcp_resume::oauth::RegisteredClient>, mcp_resume::Error>,
        > {
            Box::pin(futures::future::pending())
        }
        fn save_client(
            &self,
            _: mcp_resume::oauth::RegisteredClient,
        ) -> futures::future::BoxFuture<'static, Result<(), mcp_resume::Error>> {
            Box::pin(futures::future::pending())
        }
    }
    let (_server, url, _auth) = protected().await;
    let provider = OAuth::builder()
        .client_name("oauth-flows-test")
        .redirect_uri("http://127.0.0.1:9/callback")
        .authorizer(HeadlessAuthorizer::new())
        .token_store(Stuck)
        .store_timeout(Duration::from_millis(100))
        .build()
        .unwrap();
    let client = Client::builder(&url)
        .auth(provider.clone())
        .era(Era::Legacy)
        .open_listen_stream(false)
        .call_timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    // Well before the call's own deadline: the store's timeout is the failure.
    let err = guarded(client.ping()).await.unwrap_err();
    assert!(err.to_string().contains("token store"), "{err}");
    let err = guarded(provider.sign_out()).await.unwrap_err();
    assert!(err.to_string().contains("token store"), "{err}");
}

/// A token store whose first load never answers: the request that needed it fails at
/// `store_timeout`, and the next one loads again and uses the tokens kept there, instead
/// of taking the store for empty and sending the user to authorize anew.
#[tokio::test]
async fn a_failed_token_load_is_tried_again_by_the_next_request() {
    struct FirstLoadStuck {
        inner: InMemoryTokenStore,
        loads: std::sync::atomic::AtomicU32,
    }
    impl TokenStore for FirstLoadStuck {
        fn load_tokens(
            &self,
            server: &str,
        ) -> futures::future::BoxFuture<
            'static,
            Result<Option<mcp_resume::oauth::TokenSet>, mcp_resume::Error>,
        > {
            if self.loads.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
                return Box::pin(futures::future::pending());
            }
            self.inner.load_tokens(server)
        }
        fn save_tokens(
            &self,
            server: &str,
            tokens: Option<mcp_resume::oauth::TokenSet>,
        ) -> futures::future::BoxFuture<'static, Result<(), mcp_resume::Error>> {
            self.inner.save_tokens(server, tokens)
        }
        fn load_client(
            &self,
            issuer: &str,
        ) -> futures::future::BoxFuture<
            'static,
            Result<Option<mcp_resume::oauth::RegisteredClient>, mcp_resume::Error>,
        > {
            self.inner.load_client(issuer)
        }
        fn save_client(
            &self,
            client: mcp_resume::oauth::RegisteredClient,
        ) -> futures::future::BoxFuture<'static, Result<(), mcp_resume::Error>> {
            self.inner.save_client(client)
        }
    }
    let (_server, url, auth) = protected().await;
    let kept = InMemoryTokenStore::new();
    // An earlier run authorized and kept its tokens.
    guarded(client(&url, &provider_with(kept.clone())).connect())
        .await
        .unwrap();
    let provider = OAuth::builder()
        .client_name("oauth-flows-test")
        .redirect_uri("http://127.0.0.1:9/callback")
        .authorizer(HeadlessAuthorizer::new())
        .token_store(FirstLoadStuck {
            inner: kept.clone(),
            loads: Default::default(),
        })
        .store_timeout(Duration::from_millis(100))
        .build()
        .unwrap();
    let client = client(&url, &provider);
    let err = guarded(client.connect()).await.unwrap_err();
    assert!(err.to_string().contains("token store"), "{err}");
    guarded(client.connect()).await.unwrap();
    assert_eq!(auth.grants(), ["authorization_code"]);
}

/// An application's HTTP client, without a timeout of its own, meets a metadata URL that
/// accepts the connection and never answers: the request fails at the provider's HTTP
/// timeout, not at its own deadline, and the provider is free again (`sign_out` returns).
#[tokio::test]
async fn an_oauth_request_that_never_gets_an_answer_fails_at_the_http_timeout() {
    let (silent, silent_url) = oauth::listener().await;
    // Ends with the test's runtime.
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((connection, _)) = silent.accept().await {
            held.push(connection);
        }
    });
    let (listener, url) = oauth::mcp_listener().await;
    let _server = TestServer::start_on(listener, move |_| unauthorized(&silent_url));
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let provider = OAuth::builder()
        .client_name("oauth-flows-test")
        .redirect_uri("http://127.0.0.1:9/callback")
        .authorizer(HeadlessAuthorizer::new())
        .http_client(http)
        .http_timeout(Duration::from_millis(200))
        .build()
        .unwrap();
    let client = client(&url, &provider);
    let started = tokio::time::Instant::now();
    guarded(client.connect()).await.unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "failed at the call's deadline, not the HTTP timeout: {:?}",
        started.elapsed()
    );
    assert!(
        matches!(provider.last_failure(), Some(OAuthError::Http(_))),
        "{:?}",
        provider.last_failure()
    );
    guarded(provider.sign_out()).await.unwrap();
}

/// A provider holds tokens for one MCP endpoint: asked for another, it refuses rather than
/// send its token there.
#[tokio::test]
async fn a_token_is_never_handed_to_another_server() {
    let (_server, url, auth) = protected().await;
    let provider = provider();
    let client = client(&url, &provider);
    guarded(client.connect()).await.unwrap();

    let mut elsewhere = TokenRequest::default();
    elsewhere.url = Some("http://127.0.0.1:1/mcp".into());
    let err = guarded(provider.credential(elsewhere)).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
    let mut same = TokenRequest::default();
    same.url = Some(url.clone());
    let token = guarded(provider.credential(same)).await.unwrap();
    assert!(token.is_some_and(|t| auth.is_valid(&t)));
    // Nothing the provider or its store prints shows a token.
    let store = InMemoryTokenStore::new();
    assert!(!format!("{provider:?} {store:?}").contains("access-"));
}

/// Without a refresh token the provider cannot renew silently: a refused token starts a new
/// authorization (the same registration is reused).
#[tokio::test]
async fn the_authorization_server_is_asked_again_when_refresh_fails() {
    let (_server, url, auth) = protected().await;
    let provider = provider();
    let client = client(&url, &provider);
    guarded(client.connect()).await.unwrap();
    {
        let mut ledger = auth.ledger.lock().unwrap();
        ledger.valid.clear();
        ledger.refresh.clear();
    }
    guarded(client.list_tools()).await.unwrap();
    assert_eq!(
        auth.grants(),
        ["authorization_code", "refresh_token", "authorization_code"]
    );
}

/// A refused token's refresh meets a token endpoint that is unavailable (503), or a
/// firewall's 403 HTML page that is no OAuth error: the call fails, but the refresh token is
/// kept, in memory and in the store, since nothing said it is no good. The next call
/// refreshes with it: the user is not sent to authorize again.
#[tokio::test]
async fn a_refresh_that_gets_no_oauth_answer_does_not_cost_the_refresh_token() {
    for (fault, what) in [((1, 0), "the 503"), ((0, 1), "the 403 page")] {
        let (_server, url, auth) = protected().await;
        let store = InMemoryTokenStore::new();
        let provider = provider_with(store.clone());
        let client = client(&url, &provider);
        guarded(client.connect()).await.unwrap();
        {
            let mut ledger = auth.ledger.lock().unwrap();
            ledger.valid.clear();
            (ledger.unavailable, ledger.blocked) = fault;
        }
        guarded(client.list_tools()).await.unwrap_err();
        let kept = guarded(store.load_tokens(&url)).await.unwrap();
        assert!(
            kept.is_some_and(|t| t.refresh_token.is_some()),
            "the stored refresh token survives {what}"
        );
        assert!(
            matches!(provider.last_failure(), Some(OAuthError::Http(_))),
            "{what}"
        );
        guarded(client.list_tools()).await.unwrap();
        assert_eq!(
            auth.grants(),
            ["authorization_code", "refresh_token", "refresh_token"],
            "{what}"
        );
    }
}

/// The same for a token that expired: its renewal meets a 503, and the refresh token is not
/// dropped for it; the user authorizes once, whatever the calls' fate meanwhile.
#[tokio::test]
async fn an_expired_token_meeting_an_unavailable_token_endpoint_is_renewed_later() {
    // Tokens expire as they are issued: every request renews first.
    let (listener, url, auth) = servers(0).await;
    let as_ = auth.clone();
    let _server = TestServer::start_on(listener, move |req| match bearer(req) {
        Some(token) if as_.is_valid(&token) => default_reply(req),
        _ => unauthorized(&as_.url),
    });
    let provider = provider();
    let client = client(&url, &provider);
    guarded(client.connect()).await.unwrap();
    auth.ledger.lock().unwrap().unavailable = 1;
    let _ = guarded(client.list_tools()).await;
    guarded(client.list_tools()).await.unwrap();
    let grants = auth.grants();
    assert_eq!(
        grants.iter().filter(|g| *g == "authorization_code").count(),
        1,
        "{grants:?}"
    );
}

/// An access token that cannot be sent in a header (here one ending in a line break) is
/// refused when the token endpoint issues it, as the token endpoint's failure: kept, it
/// would fail every request until it expired.
#[tokio::test]
async fn an_access_token_that_cannot_be_sent_is_refused_when_issued() {
    let (_server, url, auth) = protected().await;
    auth.ledger.lock().unwrap().malformed_access = true;
    let store = InMemoryTokenStore::new();
    let provider = provider_with(store.clone());
    let client = client(&url, &provider);
    let err = guarded(client.connect()).await.unwrap_err();
    let failure = provider.last_failure();
    assert!(
        matches!(failure, Some(OAuthError::TokenEndpoint { .. })),
        "{err}: {failure:?}"
    );
    assert_eq!(guarded(store.load_tokens(&url)).await.unwrap(), None);
}

/// An MCP server naming a new authorization server on every refusal (each with metadata of
/// its own, each registering the client with a 64 KiB `client_id`) does not grow the default
/// token store without end: it keeps a bounded number of registrations, the oldest dropped.
#[tokio::test]
async fn registrations_at_ever_new_authorization_servers_are_bounded() {
    let (listener, url) = oauth::mcp_listener().await;
    let (as_listener, as_url) = oauth::listener().await;
    let issued = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let (resource, base) = (url.clone(), as_url.clone());
    let prm = get(move || {
        let n = issued.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let issuer = format!("{base}/as-{n}");
        async move { Json(json!({"resource": resource, "authorization_servers": [issuer]})) }
    });
    let base = as_url.clone();
    let metadata = get(
        move |axum::extract::Path(tenant): axum::extract::Path<String>| {
            let issuer = format!("{base}/{tenant}");
            async move {
                Json(json!({
                    "issuer": issuer,
                    "authorization_endpoint": format!("{issuer}/authorize"),
                    "token_endpoint": format!("{issuer}/token"),
                    "registration_endpoint": format!("{issuer}/register"),
                    "code_challenge_methods_supported": ["S256"],
                }))
            }
        },
    );
    let register = post(|| async {
        let client_id = "c".repeat(64 << 10);
        (StatusCode::CREATED, Json(json!({"client_id": client_id})))
    });
    let app = axum::Router::new()
        .route("/prm", prm)
        .route("/.well-known/oauth-authorization-server/{tenant}", metadata)
        .route("/{tenant}/register", register);
    let _served = oauth::serve(as_listener, app);
    let refusing = as_url.clone();
    let _server = TestServer::start_on(listener, move |_| unauthorized(&refusing));
    let store = InMemoryTokenStore::new();
    let provider = OAuth::builder()
        .client_name("oauth-flows-test")
        .redirect_uri("http://127.0.0.1:9/callback")
        .authorizer(|_| async {
            Err(mcp_resume::Error::token_unavailable(std::io::Error::other(
                "the user closed the page",
            )))
        })
        .token_store(store.clone())
        .build()
        .unwrap();
    let client = client(&url, &provider);
    for _ in 0..80 {
        let err = guarded(client.ping()).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unauthorized, "{err}");
    }
    assert!(
        matches!(provider.last_failure(), Some(OAuthError::Authorizer(_))),
        "{:?}",
        provider.last_failure()
    );
    let shown = format!("{store:?}");
    let kept: usize = shown
        .split("registrations: ")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{shown}"));
    assert!(kept <= 32, "{kept} registrations kept: {shown}");
}

/// Configurations that cannot work fail at build time, not at the first 401.
#[test]
fn bad_configurations_are_refused_up_front() {
    use mcp_resume::client::oauth::ClientCredentials;
    let no_authorizer = OAuth::builder().build().unwrap_err();
    assert_eq!(no_authorizer.kind(), ErrorKind::InvalidConfig);
    let bad_redirect = OAuth::builder()
        .authorizer(HeadlessAuthorizer::new())
        .redirect_uri("not a url")
        .build()
        .unwrap_err();
    assert_eq!(bad_redirect.kind(), ErrorKind::InvalidConfig);
    // Redirect URIs a code must not travel to: plain http off loopback, schemes a browser
    // runs or reads locally.
    for redirect in [
        "http://agent.example/callback",
        "javascript:alert(1)",
        "file:///tmp/callback",
    ] {
        let err = OAuth::builder()
            .authorizer(HeadlessAuthorizer::new())
            .redirect_uri(redirect)
            .build()
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{redirect}");
    }
    // A client ID metadata document URL is https, with a path, nothing to normalize away.
    for document in [
        "http://agent.example/client.json",
        "https://agent.example",
        "https://agent.example/a/../client.json",
        "https://agent.example/client.json#x",
    ] {
        let err = OAuth::builder()
            .authorizer(HeadlessAuthorizer::new())
            .client_metadata_document(document)
            .build()
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{document}");
    }
    for (pem, algorithm) in [
        ("garbage", "ES256"),
        ("garbage", "HS256"),
        ("garbage", "nope"),
    ] {
        let err = ClientCredentials::private_key_jwt("id", pem, algorithm).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{algorithm}");
    }
    // A machine client needs no authorizer.
    let machine = OAuth::builder()
        .client_credentials(ClientCredentials::secret("id", "secret").issuer("https://as.example"))
        .build();
    assert!(machine.is_ok());
}
