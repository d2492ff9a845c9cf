//! What the tests' own authorization servers share: the MCP endpoint's listener, discovery
//! (protected resource metadata, authorization server metadata, registration), and the
//! MCP server's refusal that points at it.

use axum::http::{HeaderValue, StatusCode};
use axum::response::Response;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};
use tokio::net::TcpListener;

use super::status;

/// A listener for the MCP server and its URL (the protected resource).
pub(crate) async fn mcp_listener() -> (TcpListener, String) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!(
        "http://127.0.0.1:{}/mcp",
        listener.local_addr().unwrap().port()
    );
    (listener, url)
}

/// Discovery for `resource` at the authorization server `issuer`: `/prm`, the metadata
/// (`metadata`, served as it is) and dynamic registration answering `client-1`.
pub(crate) fn discovery<S>(resource: &str, issuer: &str, metadata: Value) -> Router<S>
where
    S: Clone + Send + Sync + 'static,
{
    let prm = json!({"resource": resource, "authorization_servers": [issuer]});
    Router::new()
        .route("/prm", get(move || async move { Json(prm) }))
        .route(
            "/.well-known/oauth-authorization-server",
            get(move || async move { Json(metadata) }),
        )
        .route(
            "/register",
            post(|| async { (StatusCode::CREATED, Json(json!({"client_id": "client-1"}))) }),
        )
}

/// The MCP server's 401: `WWW-Authenticate: <challenge> resource_metadata=".../prm"` (the
/// challenge is a scheme and its parameters, e.g. `Bearer error="invalid_token",`).
pub(crate) fn refusal(as_url: &str, challenge: &str) -> Response {
    let mut response = status(401);
    let value = format!(r#"{challenge} resource_metadata="{as_url}/prm""#);
    response
        .headers_mut()
        .insert("www-authenticate", HeaderValue::from_str(&value).unwrap());
    response
}
