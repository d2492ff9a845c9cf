//! The authorization extensions of `OAuthProvider`, graded on what the servers saw: DPoP
//! (RFC 9449) proofs on the token request and on every MCP request, nonces taken up with
//! exactly one retry, DPoP-bound tokens never sent as `Bearer`; workload identity federation
//! and enterprise-managed authorization (the jwt-bearer grant, after a token exchange at the
//! IdP for the latter).

use crate::support;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Form, Query, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::Json;
use base64::Engine as _;
use jsonwebtoken::jwk::ThumbprintHash;
use jsonwebtoken::{DecodingKey, Validation};
use mcp_resume::client::oauth::{
    ClientCredentials, DpopKey, HeadlessAuthorizer, IdentityAssertion, OAuth, OAuthProvider,
    WorkloadIdentity,
};
use mcp_resume::{
    AuthChallenge, Client, Era, ErrorKind, ReconnectPolicy, TokenProvider, TokenRequest, ToolCall,
};
use serde_json::{json, Value};
use support::*;
use tokio::net::TcpListener;

/// How the authorization server behaves.
#[derive(Clone, Copy, Default)]
struct AsConfig {
    /// Advertises `dpop_signing_alg_values_supported: [ES256]` and binds tokens to proofs.
    dpop: bool,
    /// Refuses a token request whose proof lacks its nonce (`use_dpop_nonce`).
    nonce: bool,
    /// Refuses every jwt-bearer grant (`invalid_grant`).
    refuse_jwt_bearer: bool,
    /// Answers the first jwt-bearer grant as a firewall in front of the server would: a 403
    /// HTML page, no OAuth error.
    block_first_jwt_bearer: bool,
}

/// One token (or token exchange) request as the authorization server saw it.
#[derive(Clone, Debug)]
struct TokenCall {
    path: String,
    form: HashMap<String, String>,
    headers: HeaderMap,
}

#[derive(Default)]
struct Ledger {
    calls: Vec<TokenCall>,
    serial: u32,
}

type Shared = Arc<Mutex<Ledger>>;

const AS_NONCE: &str = "as-nonce-1";
const ID_JAG: &str = "urn:ietf:params:oauth:token-type:id-jag";
const JWT_BEARER: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";

struct AuthServer {
    url: String,
    ledger: Shared,
    _served: oauth::Served,
}

impl AuthServer {
    /// An authorization server (and enterprise IdP, at `/idp/token`) for the MCP endpoint
    /// `resource`.
    async fn start(resource: String, config: AsConfig) -> AuthServer {
        let (listener, url) = oauth::listener().await;
        let ledger: Shared = Arc::default();
        let issuer = url.clone();
        let mut metadata = json!({
            "issuer": issuer,
            "authorization_endpoint": format!("{issuer}/authorize"),
            "token_endpoint": format!("{issuer}/token"),
            "registration_endpoint": format!("{issuer}/register"),
            "response_types_supported": ["code"],
            "grant_types_supported": ["authorization_code", JWT_BEARER],
            "code_challenge_methods_supported": ["S256"],
            "token_endpoint_auth_methods_supported": ["none", "client_secret_basic"],
            "authorization_response_iss_parameter_supported": true,
        });
        if config.dpop {
            metadata["dpop_signing_alg_values_supported"] = json!(["ES256"]);
        }
        let app = oauth::discovery(&resource, &issuer, metadata)
            .route("/authorize", get(authorize))
            .route("/token", post(token))
            .route("/idp/token", post(idp_token))
            .with_state((ledger.clone(), issuer, config));
        let _served = oauth::serve(listener, app);
        AuthServer {
            url,
            ledger,
            _served,
        }
    }

    fn calls(&self, path: &str) -> Vec<TokenCall> {
        let ledger = self.ledger.lock().unwrap();
        ledger
            .calls
            .iter()
            .filter(|c| c.path == path)
            .cloned()
            .collect()
    }
}

type AsState = State<(Shared, String, AsConfig)>;

async fn authorize(
    State((_, issuer, _)): AsState,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let mut redirect = reqwest::Url::parse(&query["redirect_uri"]).unwrap();
    redirect
        .query_pairs_mut()
        .append_pair("code", "code-1")
        .append_pair("state", &query["state"])
        .append_pair("iss", &issuer);
    Redirect::to(redirect.as_str()).into_response()
}

async fn token(
    State((ledger, _, config)): AsState,
    headers: HeaderMap,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    let mut ledger = ledger.lock().unwrap();
    ledger.calls.push(TokenCall {
        path: "/token".into(),
        form,
        headers: headers.clone(),
    });
    let proof = headers.get("dpop").and_then(|v| v.to_str().ok());
    if config.nonce {
        let nonce = proof.map(|p| verify_proof(p).1["nonce"].clone());
        if nonce != Some(json!(AS_NONCE)) {
            let mut response = (
                StatusCode::BAD_REQUEST,
                Json(json!({"error": "use_dpop_nonce"})),
            )
                .into_response();
            response
                .headers_mut()
                .insert("dpop-nonce", HeaderValue::from_static(AS_NONCE));
            return response;
        }
    }
    let jwt_bearer = ledger.calls.last().unwrap().form.get("grant_type");
    if config.refuse_jwt_bearer && jwt_bearer.map(String::as_str) == Some(JWT_BEARER) {
        return (
            StatusCode::BAD_REQUEST,
            Json(json!({"error": "invalid_grant"})),
        )
            .into_response();
    }
    let jwt_bearers = ledger
        .calls
        .iter()
        .filter(|c| c.form.get("grant_type").map(String::as_str) == Some(JWT_BEARER))
        .count();
    if config.block_first_jwt_bearer && jwt_bearers == 1 {
        return blocked();
    }
    ledger.serial += 1;
    let token_type = if config.dpop && proof.is_some() {
        "DPoP"
    } else {
        "Bearer"
    };
    Json(json!({
        "access_token": format!("access-{}", ledger.serial),
        "token_type": token_type,
        "expires_in": 3600,
    }))
    .into_response()
}

/// What a firewall or CDN in front of a server answers: no OAuth error, nothing refused.
fn blocked() -> Response {
    (
        StatusCode::FORBIDDEN,
        [(axum::http::header::CONTENT_TYPE, "text/html")],
        "<h1>blocked</h1>",
    )
        .into_response()
}

/// The enterprise IdP's token exchange: an ID-JAG for a recognised ID token.
async fn idp_token(
    State((ledger, _, _)): AsState,
    headers: HeaderMap,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    let mut ledger = ledger.lock().unwrap();
    ledger.calls.push(TokenCall {
        path: "/idp/token".into(),
        form: form.clone(),
        headers,
    });
    if form.get("subject_token").map(String::as_str) != Some("user-id-token") {
        return (
            StatusCode::BAD_REQUEST,
            Json(json!({"error": "invalid_grant"})),
        )
            .into_response();
    }
    Json(json!({
        "access_token": "id-jag-1",
        "issued_token_type": ID_JAG,
        "token_type": "N_A",
    }))
    .into_response()
}

/// Verifies a DPoP proof with the key in its own header: its header and claims, and the
/// RFC 7638 thumbprint of that key.
fn verify_proof(proof: &str) -> (jsonwebtoken::Header, Value, String) {
    let header = jsonwebtoken::decode_header(proof).expect("a JWT");
    assert_eq!(header.typ.as_deref(), Some("dpop+jwt"));
    let jwk = header.jwk.clone().expect("the public key in the header");
    let public = serde_json::to_value(&jwk).unwrap();
    assert!(public.get("d").is_none(), "no private key in the proof");
    let key = DecodingKey::from_jwk(&jwk).unwrap();
    let mut validation = Validation::new(header.alg);
    validation.required_spec_claims = HashSet::new();
    validation.validate_exp = false;
    validation.validate_aud = false;
    let claims = jsonwebtoken::decode::<Value>(proof, &key, &validation)
        .expect("the proof verifies with its own key")
        .claims;
    (header, claims, jwk.thumbprint(ThumbprintHash::SHA256))
}

fn sha256_b64url(token: &str) -> String {
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, token.as_bytes());
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(digest.as_ref())
}

fn unauthorized(as_url: &str, scheme: &str) -> Response {
    oauth::refusal(as_url, scheme)
}

/// A 401 asking for a proof with `nonce`.
fn nonce_refusal(as_url: &str, nonce: &str) -> Response {
    let mut response = oauth::refusal(as_url, r#"DPoP error="use_dpop_nonce","#);
    response
        .headers_mut()
        .insert("dpop-nonce", HeaderValue::from_str(nonce).unwrap());
    response
}

async fn servers(config: AsConfig) -> (TcpListener, String, Arc<AuthServer>) {
    let (listener, url) = oauth::mcp_listener().await;
    let auth = Arc::new(AuthServer::start(url.clone(), config).await);
    (listener, url, auth)
}

fn code_flow(key: &DpopKey) -> OAuthProvider {
    OAuth::builder()
        .redirect_uri("http://127.0.0.1:9/callback")
        .authorizer(HeadlessAuthorizer::new())
        .dpop(key.clone())
        .build()
        .unwrap()
}

fn client(url: &str, provider: &OAuthProvider) -> Client {
    Client::builder(url)
        .auth(provider.clone())
        .era(Era::Legacy)
        .call_timeout(Duration::from_secs(10))
        .reconnect(
            ReconnectPolicy::default()
                .with_initial_delay(Duration::from_millis(5))
                .with_max_delay(Duration::from_millis(50))
                .with_max_attempts(2),
        )
        .build()
        .unwrap()
}

/// Whether `req` presents an access token the authorization server issued, with the DPoP
/// scheme.
fn dpop_token(req: &Recorded) -> Option<&str> {
    req.header("authorization")?.strip_prefix("DPoP ")
}

/// Every request presenting the token says `DPoP` (never `Bearer`) and carries a proof of
/// its own, for its method and URL, hashing the token, made with the key the token was
/// bound to at the token endpoint: `jti` never repeats.
#[tokio::test]
async fn every_request_carries_a_fresh_proof_of_the_bound_key() {
    let (listener, url, auth) = servers(AsConfig {
        dpop: true,
        ..AsConfig::default()
    })
    .await;
    let as_url = auth.url.clone();
    let server = TestServer::start_on(listener, move |req| match dpop_token(req) {
        Some(token) if token.starts_with("access-") => default_reply(req),
        _ => unauthorized(&as_url, "DPoP"),
    });
    let key = DpopKey::generate().unwrap();
    let provider = code_flow(&key);
    let client = client(&url, &provider);
    guarded(client.connect()).await.unwrap();
    guarded(client.list_tools()).await.unwrap();
    guarded(client.call_tool(ToolCall::new("echo", json!({}))))
        .await
        .unwrap();
    guarded(client.close()).await.unwrap();

    // The token request: a proof for POST to the token endpoint, without `ath`.
    let token_calls = auth.calls("/token");
    assert_eq!(token_calls.len(), 1);
    let proof = token_calls[0].headers["dpop"].to_str().unwrap();
    let (_, claims, bound_to) = verify_proof(proof);
    assert_eq!(claims["htm"], "POST");
    assert_eq!(claims["htu"], format!("{}/token", auth.url));
    assert!(claims.get("ath").is_none());
    assert_eq!(bound_to, key.thumbprint());

    let requests = server.requests();
    let presented: Vec<&Recorded> = requests
        .iter()
        .filter(|r| r.header("authorization").is_some())
        .collect();
    assert!(
        presented.iter().any(|r| r.method == Method::DELETE),
        "{:?}",
        server.labels()
    );
    assert!(presented.len() >= 4, "{:?}", server.labels());
    let mut jtis = HashSet::new();
    for req in &presented {
        let token = dpop_token(req).unwrap_or_else(|| panic!("{} not DPoP", req.label()));
        let proof = req.header("dpop").expect("a proof beside the token");
        let (_, claims, thumbprint) = verify_proof(proof);
        assert_eq!(claims["htm"], req.method.as_str());
        assert_eq!(claims["htu"], url);
        assert_eq!(claims["ath"], sha256_b64url(token));
        assert!(claims["iat"].is_u64());
        assert!(claims.get("nonce").is_none());
        assert_eq!(
            thumbprint,
            key.thumbprint(),
            "the key the token is bound to"
        );
        assert!(
            jtis.insert(claims["jti"].as_str().unwrap().to_owned()),
            "a proof was reused"
        );
    }
}

/// The requests the session makes on its own get their own proofs too: the GET that resumes
/// a cut stream (same `Last-Event-ID`), the re-initialization after the session is gone,
/// and the call re-sent on the new session.
#[tokio::test]
async fn resumes_reinitializations_and_resent_calls_carry_their_own_proofs() {
    let (listener, url, auth) = servers(AsConfig {
        dpop: true,
        ..AsConfig::default()
    })
    .await;
    let as_url = auth.url.clone();
    let sessions = Arc::new(Mutex::new(0u32));
    let slow_id = Arc::new(Mutex::new(Value::Null));
    let server = TestServer::start_on(listener, move |req| {
        if dpop_token(req).is_none() {
            return unauthorized(&as_url, "DPoP");
        }
        let session = req.header("mcp-session-id").map(str::to_owned);
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
        if req.is_rpc("tools/call") && req.params()["name"] == "slow" {
            // The stream is cut after its priming event.
            *slow_id.lock().unwrap() = req.rpc_id();
            return sse_text("id: ev-1\ndata: \n\n");
        }
        if req.method == Method::GET && req.header("last-event-id") == Some("ev-1") {
            let id = slow_id.lock().unwrap().clone();
            let result = json!({"jsonrpc": "2.0", "id": id,
                "result": {"content": [{"type": "text", "text": "resumed"}]}});
            return sse_text(sse_event(Some("ev-2"), &result));
        }
        if req.is_rpc("tools/call") && session.as_deref() == Some("session-1") {
            return status(404);
        }
        default_reply(req)
    });
    let key = DpopKey::generate().unwrap();
    let provider = code_flow(&key);
    let client = Client::builder(&url)
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
        .unwrap();
    guarded(client.connect()).await.unwrap();
    let reply = guarded(client.call_tool(ToolCall::new("slow", json!({}))))
        .await
        .unwrap();
    assert_eq!(reply.text(), "resumed");
    let reply = guarded(client.call_tool(ToolCall::new("echo", json!({"text": "again"}))))
        .await
        .unwrap();
    assert_eq!(reply.text(), "again");

    let requests = server.requests();
    let labels = server.labels();
    let resume = requests
        .iter()
        .find(|r| r.method == Method::GET && r.header("last-event-id").is_some())
        .unwrap_or_else(|| panic!("no resume: {labels:?}"));
    let reinit = requests
        .iter()
        .filter(|r| r.is_rpc("initialize") && dpop_token(r).is_some())
        .nth(1)
        .unwrap_or_else(|| panic!("no re-initialization: {labels:?}"));
    let resent = requests
        .iter()
        .rfind(|r| r.is_rpc("tools/call"))
        .filter(|r| r.header("mcp-session-id") == Some("session-2"))
        .unwrap_or_else(|| panic!("the call was not re-sent on the new session: {labels:?}"));
    let mut jtis = HashSet::new();
    for (req, method) in [(resume, "GET"), (reinit, "POST"), (resent, "POST")] {
        let (_, claims, thumbprint) = verify_proof(req.header("dpop").unwrap());
        assert_eq!(claims["htm"], method, "{}", req.label());
        assert_eq!(claims["ath"], sha256_b64url(dpop_token(req).unwrap()));
        assert_eq!(thumbprint, key.thumbprint());
        assert!(
            jtis.insert(claims["jti"].clone()),
            "{} reused a proof",
            req.label()
        );
    }
    // The refused call on the gone session and its re-send are two requests, two proofs.
    let calls: Vec<Value> = requests
        .iter()
        .filter(|r| r.is_rpc("tools/call") && r.params()["name"] == "echo")
        .map(|r| verify_proof(r.header("dpop").unwrap()).1["jti"].clone())
        .collect();
    assert_eq!(calls.len(), 2, "{labels:?}");
    assert_ne!(calls[0], calls[1]);
}

/// The authorization server and the MCP server each want their nonce: each refusal is
/// answered by exactly one retry carrying it, later requests carry it from the start, and
/// the token is not re-obtained for a nonce.
#[tokio::test]
async fn nonces_are_taken_up_with_one_retry() {
    let (listener, url, auth) = servers(AsConfig {
        dpop: true,
        nonce: true,
        ..AsConfig::default()
    })
    .await;
    let as_url = auth.url.clone();
    let server = TestServer::start_on(listener, move |req| {
        if dpop_token(req).is_none() {
            return unauthorized(&as_url, "DPoP");
        }
        let (_, claims, _) = verify_proof(req.header("dpop").unwrap());
        if claims["nonce"] != "rs-nonce-1" {
            return nonce_refusal(&as_url, "rs-nonce-1");
        }
        default_reply(req)
    });
    let key = DpopKey::generate().unwrap();
    let provider = code_flow(&key);
    let client = client(&url, &provider);
    guarded(client.connect()).await.unwrap();
    guarded(client.call_tool(ToolCall::new("echo", json!({}))))
        .await
        .unwrap();
    guarded(client.close()).await.unwrap();

    let token_calls = auth.calls("/token");
    let nonces: Vec<Value> = token_calls
        .iter()
        .map(|c| verify_proof(c.headers["dpop"].to_str().unwrap()).1["nonce"].clone())
        .collect();
    assert_eq!(nonces, [Value::Null, json!(AS_NONCE)]);

    let requests = server.requests();
    let nonces: Vec<Value> = requests
        .iter()
        .filter(|r| r.header("dpop").is_some())
        .map(|r| verify_proof(r.header("dpop").unwrap()).1["nonce"].clone())
        .collect();
    assert_eq!(
        nonces[0],
        Value::Null,
        "the server's nonce was not known yet"
    );
    assert!(
        nonces[1..].iter().all(|n| n == "rs-nonce-1"),
        "{nonces:?}: one refusal, then every proof carries the nonce"
    );
    let initializes: Vec<&Recorded> = requests.iter().filter(|r| r.is_rpc("initialize")).collect();
    // Without credentials (401), with the token but no nonce (401 use_dpop_nonce), with it.
    assert_eq!(initializes.len(), 3, "{:?}", server.labels());
}

/// A server that wants yet another nonce after the retry is not asked a third time, and no
/// new authorization is made for it: the call fails as unauthorized, the session stays.
#[tokio::test]
async fn a_nonce_is_retried_exactly_once() {
    let (listener, url, auth) = servers(AsConfig {
        dpop: true,
        ..AsConfig::default()
    })
    .await;
    let as_url = auth.url.clone();
    let serial = Arc::new(Mutex::new(0u32));
    let server = TestServer::start_on(listener, move |req| {
        if dpop_token(req).is_none() {
            return unauthorized(&as_url, "DPoP");
        }
        if !req.is_rpc("tools/call") {
            return default_reply(req);
        }
        // A fresh nonce on every refusal: no proof ever carries the current one.
        let mut serial = serial.lock().unwrap();
        *serial += 1;
        nonce_refusal(&as_url, &format!("rotating-{serial}"))
    });
    let key = DpopKey::generate().unwrap();
    let provider = code_flow(&key);
    let client = client(&url, &provider);
    guarded(client.connect()).await.unwrap();
    let err = guarded(client.call_tool(ToolCall::new("echo", json!({}))))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unauthorized, "{err}");

    let requests = server.requests();
    let attempts: Vec<Value> = requests
        .iter()
        .filter(|r| r.is_rpc("tools/call"))
        .map(|r| verify_proof(r.header("dpop").unwrap()).1["nonce"].clone())
        .collect();
    assert_eq!(
        attempts,
        [Value::Null, json!("rotating-1")],
        "{:?}",
        server.labels()
    );
    assert_eq!(auth.calls("/token").len(), 1, "no new authorization");
}

/// Requests that went out with the old nonce and are refused together are each sent again
/// once: the first refusal seen stores the new nonce, and the others still need their retry.
#[test]
fn each_request_refused_for_the_new_nonce_is_retried() {
    let key = DpopKey::generate().unwrap();
    let provider = code_flow(&key);
    let url = reqwest::Url::parse("https://mcp.example.com/mcp").unwrap();
    let refusal = nonce_refusal("https://as.example.com", "rs-nonce-2");
    let challenge = AuthChallenge::from_response(401, refusal.headers()).unwrap();
    for request in ["first", "second"] {
        assert!(
            provider.observe(&url, 401, refusal.headers(), Some(&challenge)),
            "the {request} refused request is sent again"
        );
    }
    // A response naming no nonce asks for no retry.
    let plain = oauth::refusal("https://as.example.com", r#"DPoP error="use_dpop_nonce","#);
    assert!(!provider.observe(&url, 401, plain.headers(), Some(&challenge)));
}

/// A DPoP provider at an authorization server that does not issue DPoP-bound tokens sends
/// no proof and presents its token as `Bearer`.
#[tokio::test]
async fn without_dpop_at_the_authorization_server_tokens_stay_bearer() {
    let (listener, url, auth) = servers(AsConfig::default()).await;
    let as_url = auth.url.clone();
    let server = TestServer::start_on(listener, move |req| match req.header("authorization") {
        Some(value) if value.starts_with("Bearer access-") => default_reply(req),
        _ => unauthorized(&as_url, "Bearer"),
    });
    let provider = code_flow(&DpopKey::generate().unwrap());
    let client = client(&url, &provider);
    guarded(client.connect()).await.unwrap();
    guarded(client.close()).await.unwrap();

    assert!(auth.calls("/token")[0].headers.get("dpop").is_none());
    for req in server.requests() {
        assert!(req.header("dpop").is_none(), "{}", req.label());
    }
}

/// A DPoP-bound token replaced while a request may still be on its way with it (a refusal
/// made the provider authorize again, or `sign_out` forgot it) is presented as `DPoP` with a
/// proof, like the token that replaced it: never downgraded to `Bearer`.
#[tokio::test]
async fn a_replaced_dpop_token_is_never_presented_as_bearer() {
    let (listener, url, auth) = servers(AsConfig {
        dpop: true,
        ..AsConfig::default()
    })
    .await;
    let as_url = auth.url.clone();
    let _server = TestServer::start_on(listener, move |req| match dpop_token(req) {
        Some(token) if token.starts_with("access-") => default_reply(req),
        _ => unauthorized(&as_url, "DPoP"),
    });
    let provider = code_flow(&DpopKey::generate().unwrap());
    let client = client(&url, &provider);
    guarded(client.connect()).await.unwrap();
    let mut ask = TokenRequest::default();
    ask.url = Some(url.clone());
    let first = guarded(provider.credential(ask.clone()))
        .await
        .unwrap()
        .unwrap();
    // The server refuses it: the provider authorizes again, for another bound token.
    let mut refused = ask;
    let challenge = format!(
        r#"DPoP error="invalid_token", resource_metadata="{}/prm""#,
        auth.url
    );
    refused.challenge = Some(AuthChallenge::parse(401, Some(&challenge)));
    refused.refused_token = Some(first.clone());
    let second = guarded(provider.credential(refused)).await.unwrap();
    assert_ne!(Some(&first), second.as_ref());
    let mcp = reqwest::Url::parse(&url).unwrap();
    let dpop = |token: &str| {
        provider
            .present(token, &Method::POST, &mcp)
            .unwrap()
            .is_dpop()
    };
    assert!(dpop(&first), "the replaced token");
    guarded(provider.sign_out()).await.unwrap();
    assert!(
        dpop(&first) && dpop(second.as_deref().unwrap()),
        "after sign_out"
    );
    // A token this provider never handed out is not presented as Bearer either.
    assert!(dpop("access-unknown"));
    assert_eq!(auth.calls("/token").len(), 2);
}

fn bearer_server(listener: TcpListener, auth: &AuthServer) -> TestServer {
    let as_url = auth.url.clone();
    TestServer::start_on(listener, move |req| match req.header("authorization") {
        Some(value) if value.starts_with("Bearer access-") => default_reply(req),
        _ => unauthorized(&as_url, "Bearer"),
    })
}

/// Workload identity federation: one jwt-bearer grant carrying the workload's token, as a
/// public client; the MCP server gets the token it granted.
#[tokio::test]
async fn workload_identity_is_the_jwt_bearer_grant() {
    let (listener, url, auth) = servers(AsConfig::default()).await;
    let server = bearer_server(listener, &auth);
    let provider = OAuth::builder()
        .client_credentials(ClientCredentials::public("workload-1").issuer(&auth.url))
        .workload_identity(WorkloadIdentity::from_fn(|| Ok("workload-jwt".to_owned())))
        .build()
        .unwrap();
    let client = client(&url, &provider);
    guarded(client.connect()).await.unwrap();
    guarded(client.close()).await.unwrap();

    let calls = auth.calls("/token");
    assert_eq!(calls.len(), 1);
    let form = &calls[0].form;
    assert_eq!(form["grant_type"], JWT_BEARER);
    assert_eq!(form["assertion"], "workload-jwt");
    assert_eq!(form["client_id"], "workload-1");
    assert_eq!(form["resource"], url);
    assert!(calls[0].headers.get("authorization").is_none());
    assert!(server
        .requests()
        .iter()
        .any(|r| r.header("authorization") == Some("Bearer access-1")));
}

/// A refused workload assertion is not presented again, however often the client retries
/// the request, and no other grant is tried.
#[tokio::test]
async fn a_refused_workload_assertion_is_not_retried() {
    let (listener, url, auth) = servers(AsConfig {
        refuse_jwt_bearer: true,
        ..AsConfig::default()
    })
    .await;
    let _server = bearer_server(listener, &auth);
    let provider = OAuth::builder()
        .client_credentials(ClientCredentials::public("workload-1").issuer(&auth.url))
        .workload_identity(WorkloadIdentity::token("workload-jwt"))
        .build()
        .unwrap();
    let client = client(&url, &provider);
    guarded(client.connect()).await.unwrap_err();
    guarded(client.connect()).await.unwrap_err();

    let grants: Vec<String> = auth
        .calls("/token")
        .iter()
        .map(|c| c.form["grant_type"].clone())
        .collect();
    assert_eq!(grants, [JWT_BEARER]);
    assert!(provider.last_failure().is_some());
}

/// A workload assertion whose grant met a firewall's 403 page, not an OAuth error, was not
/// refused: the next connection presents it again and succeeds.
#[tokio::test]
async fn a_workload_assertion_blocked_without_an_oauth_error_is_tried_again() {
    let (listener, url, auth) = servers(AsConfig {
        block_first_jwt_bearer: true,
        ..AsConfig::default()
    })
    .await;
    let _server = bearer_server(listener, &auth);
    let provider = OAuth::builder()
        .client_credentials(ClientCredentials::public("workload-1").issuer(&auth.url))
        .workload_identity(WorkloadIdentity::token("workload-jwt"))
        .build()
        .unwrap();
    let client = client(&url, &provider);
    guarded(client.connect()).await.unwrap_err();
    assert!(matches!(
        provider.last_failure(),
        Some(mcp_resume::oauth::OAuthError::Http(_))
    ));
    guarded(client.connect()).await.unwrap();

    let grants: Vec<String> = auth
        .calls("/token")
        .iter()
        .map(|c| c.form["grant_type"].clone())
        .collect();
    assert_eq!(grants, [JWT_BEARER, JWT_BEARER]);
}

/// Enterprise-managed authorization: the ID token is exchanged at the IdP for an ID-JAG
/// for this authorization server and MCP server, which the client (authenticated with HTTP
/// Basic) presents in the jwt-bearer grant.
#[tokio::test]
async fn enterprise_authorization_exchanges_then_presents_the_grant() {
    let (listener, url, auth) = servers(AsConfig::default()).await;
    let server = bearer_server(listener, &auth);
    let idp = IdentityAssertion::new(format!("{}/idp/token", auth.url), "user-id-token")
        .client_id("idp-client");
    let provider = OAuth::builder()
        .client_credentials(ClientCredentials::secret("mcp-client", "s3cret").issuer(&auth.url))
        .identity_assertion(idp)
        .build()
        .unwrap();
    let client = client(&url, &provider);
    guarded(client.connect()).await.unwrap();
    guarded(client.close()).await.unwrap();

    let exchange = auth.calls("/idp/token");
    assert_eq!(exchange.len(), 1);
    let form = &exchange[0].form;
    assert_eq!(
        form["grant_type"],
        "urn:ietf:params:oauth:grant-type:token-exchange"
    );
    assert_eq!(form["requested_token_type"], ID_JAG);
    assert_eq!(form["subject_token"], "user-id-token");
    assert_eq!(
        form["subject_token_type"],
        "urn:ietf:params:oauth:token-type:id_token"
    );
    assert_eq!(form["audience"], auth.url);
    assert_eq!(form["resource"], url);
    assert_eq!(form["client_id"], "idp-client");

    let grant = auth.calls("/token");
    assert_eq!(grant.len(), 1);
    assert_eq!(grant[0].form["grant_type"], JWT_BEARER);
    assert_eq!(grant[0].form["assertion"], "id-jag-1");
    let basic = base64::engine::general_purpose::STANDARD.encode("mcp-client:s3cret");
    assert_eq!(
        grant[0].headers["authorization"].to_str().unwrap(),
        format!("Basic {basic}")
    );
    assert!(server
        .requests()
        .iter()
        .any(|r| r.header("authorization") == Some("Bearer access-1")));
}

/// An enterprise ID token is not exchanged again once refused, whether the IdP refused it
/// or the authorization server refused the grant the IdP issued for it.
#[tokio::test]
async fn a_refused_enterprise_id_token_is_not_exchanged_again() {
    for (id_token, refuse_jwt_bearer, grants) in [
        // The IdP does not know this ID token: the authorization server is never asked.
        ("stale-id-token", false, 0),
        // The IdP issues a grant, the authorization server refuses it.
        ("user-id-token", true, 1),
    ] {
        let (listener, url, auth) = servers(AsConfig {
            refuse_jwt_bearer,
            ..AsConfig::default()
        })
        .await;
        let _server = bearer_server(listener, &auth);
        let provider = OAuth::builder()
            .client_credentials(ClientCredentials::secret("mcp-client", "s3cret").issuer(&auth.url))
            .identity_assertion(IdentityAssertion::new(
                format!("{}/idp/token", auth.url),
                id_token,
            ))
            .build()
            .unwrap();
        let client = client(&url, &provider);
        guarded(client.connect()).await.unwrap_err();
        guarded(client.connect()).await.unwrap_err();
        assert_eq!(auth.calls("/idp/token").len(), 1, "{id_token}");
        assert_eq!(auth.calls("/token").len(), grants, "{id_token}");
        assert!(provider.last_failure().is_some());
    }
}

/// The assertion grants need the client's identity at the authorization server.
#[test]
fn assertion_grants_need_client_credentials() {
    let err = OAuth::builder()
        .workload_identity(WorkloadIdentity::token("jwt"))
        .build()
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidConfig);
    let err = OAuth::builder()
        .client_credentials(ClientCredentials::public("c").issuer("https://as.example"))
        .identity_assertion(IdentityAssertion::new("http://idp.example/token", "t"))
        .build()
        .unwrap_err();
    assert_eq!(
        err.kind(),
        ErrorKind::InvalidConfig,
        "plain http off loopback"
    );
}

/// The application's own key: a PKCS#8 PEM, whose proofs verify with the public key they
/// carry and whose thumbprint is that key's; keys that cannot make DPoP proofs are refused.
#[test]
fn an_application_key_signs_the_proofs() {
    use aws_lc_rs::signature::{EcdsaKeyPair, ECDSA_P256_SHA256_FIXED_SIGNING};
    let pair = EcdsaKeyPair::generate(&ECDSA_P256_SHA256_FIXED_SIGNING).unwrap();
    let der = pair.to_pkcs8v1().unwrap();
    let body = base64::engine::general_purpose::STANDARD.encode(der.as_ref());
    let pem = format!("-----BEGIN PRIVATE KEY-----\n{body}\n-----END PRIVATE KEY-----\n");
    let key = DpopKey::from_pem(&pem, "ES256").unwrap();
    assert_eq!(key.algorithm(), "ES256");
    let url = reqwest::Url::parse("https://mcp.example/mcp?x=1#f").unwrap();
    let first = key.proof("GET", &url, Some("tok")).unwrap();
    let second = key.proof("GET", &url, Some("tok")).unwrap();
    let (header, claims, thumbprint) = verify_proof(&first);
    assert_eq!(header.alg, jsonwebtoken::Algorithm::ES256);
    assert_eq!(thumbprint, key.thumbprint());
    assert_eq!(claims["htu"], "https://mcp.example/mcp");
    assert_eq!(claims["ath"], sha256_b64url("tok"));
    assert_ne!(claims["jti"], verify_proof(&second).1["jti"]);

    for (pem, algorithm) in [
        (pem.as_str(), "HS256"),
        (pem.as_str(), "EdDSA"),
        ("junk", "ES256"),
    ] {
        let err = DpopKey::from_pem(pem, algorithm).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{algorithm}");
    }
}
