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

/// A listener on a free port of 127.0.0.1 and its base URL.
pub(crate) async fn listener() -> (TcpListener, String) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://127.0.0.1:{}", listener.local_addr().unwrap().port());
    (listener, url)
}

/// A listener for the MCP server and its URL (the protected resource).
pub(crate) async fn mcp_listener() -> (TcpListener, String) {
    let (listener, base) = listener().await;
    (listener, format!("{base}/mcp"))
}

/// A server's task, stopped when this is dropped: a test's servers end with the test.
pub(crate) struct Served(tokio::task::JoinHandle<()>);

impl Drop for Served {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Serves `app` on `listener` until the returned guard is dropped.
pub(crate) fn serve(listener: TcpListener, app: Router) -> Served {
    Served(tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    }))
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
