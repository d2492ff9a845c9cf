//! The last client handle dropped: what the server was promised still reaches it.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, Method, StatusCode};
use axum::response::Response;
use futures::StreamExt;
use mcp_resume::{Client, ToolCall};
use serde_json::{json, Value};
use support::*;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// The server's record of one cancellation it read whole: `true` once it answered it, `false`
/// if the connection went away while the server still held the answer.
type Outcomes = watch::Sender<Vec<bool>>;

/// Records a cancellation as cut unless it was answered by the time it is dropped.
struct Handling {
    outcomes: Arc<Outcomes>,
    answered: bool,
}

impl Drop for Handling {
    fn drop(&mut self) {
        let answered = self.answered;
        self.outcomes.send_modify(|o| o.push(answered));
    }
}

fn response(status: u16, body: Option<Value>) -> Response {
    let mut response = match body {
        Some(body) => Response::builder()
            .header("content-type", "application/json")
            .body(Body::from(body.to_string()))
            .unwrap(),
        None => Response::new(Body::empty()),
    };
    *response.status_mut() = StatusCode::from_u16(status).unwrap();
    response
}

/// What the test server saw.
struct Seen {
    /// `tools/call` POSTs received.
    calls: watch::Receiver<usize>,
    /// Each `notifications/cancelled` read whole, answered or cut.
    cancellations: watch::Receiver<Vec<bool>>,
}

/// A server that never answers `tools/call` and answers DELETE at once, but holds the answer
/// to a `notifications/cancelled` (its body read) until it has answered the DELETE, and then
/// `delay` more.
async fn server(delay: Duration) -> (String, Seen) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!(
        "http://127.0.0.1:{}/mcp",
        listener.local_addr().unwrap().port()
    );
    let (deleted_tx, deleted) = watch::channel(false);
    let (calls_tx, calls) = watch::channel(0usize);
    let (outcomes, cancellations) = watch::channel(Vec::new());
    let shared = (
        Arc::new(deleted_tx),
        deleted,
        Arc::new(calls_tx),
        Arc::new(outcomes),
    );
    let app = axum::Router::new().route(
        "/mcp",
        axum::routing::any(move |method: Method, body: Bytes| {
            let (deleted_tx, mut deleted, calls_tx, outcomes) = shared.clone();
            async move {
                match method {
                    Method::GET => return response(405, None),
                    Method::DELETE => {
                        deleted_tx.send_replace(true);
                        return response(200, None);
                    }
                    _ => {}
                }
                let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                let id = body.get("id").cloned().unwrap_or(Value::Null);
                match body.get("method").and_then(Value::as_str) {
                    Some("initialize") => {
                        let result =
                            json!({"jsonrpc": "2.0", "id": id, "result": initialize_result()});
                        let mut r = response(200, Some(result));
                        r.headers_mut()
                            .insert("mcp-session-id", HeaderValue::from_static(SESSION_ID));
                        r
                    }
                    Some("tools/call") => {
                        calls_tx.send_modify(|n| *n += 1);
                        std::future::pending().await
                    }
                    Some("notifications/cancelled") => {
                        let mut handling = Handling {
                            outcomes,
                            answered: false,
                        };
                        let _ = deleted.wait_for(|d| *d).await;
                        tokio::time::sleep(delay).await;
                        handling.answered = true;
                        response(202, None)
                    }
                    _ => response(202, None),
                }
            }
        }),
    );
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (
        url,
        Seen {
            calls,
            cancellations,
        },
    )
}

/// A call's future dropped, then the last client handle: the driver closes the session and
/// does not stop before the cancellation it already sent is answered, however slowly (within
/// its own bound, the call timeout), even though the DELETE was answered at once.
#[tokio::test]
async fn the_last_drop_lets_a_cancellation_in_flight_finish() {
    let (url, mut seen) = server(Duration::from_millis(200)).await;
    let client = Client::builder(&url)
        .call_timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    guarded(client.connect()).await.unwrap();
    let call = client.call_tool(ToolCall::new("slow", json!({})));
    tokio::select! {
        _ = call => panic!("the server never answers the call"),
        seen = seen.calls.wait_for(|n| *n == 1) => { seen.unwrap(); }
    }
    let mut events = client.events();
    drop(client);
    // The driver stops: the event stream ends.
    while guarded(events.next()).await.is_some() {}
    // However the server's handling of the cancellation ended.
    let outcomes = guarded(seen.cancellations.wait_for(|o| !o.is_empty()))
        .await
        .unwrap()
        .clone();
    assert_eq!(outcomes, [true], "the cancellation was cut off (false)");
}
