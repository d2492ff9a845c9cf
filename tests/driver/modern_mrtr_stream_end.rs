//! An MRTR call's earlier round does not end the call: found by the demo's modern rows (the
//! unkeyed `confirm` call against the mock cluster in `ClusterEra::Modern`), where such a call
//! sometimes ended `OutcomeUnknown` although its last round ran and was answered.
//!
//! The `input_required` result arrives on an SSE stream; the app's handler answers and the
//! next round is POSTed at once; the first round's stream may end only after that. Its end
//! must not be taken for the end of the call's current exchange (an unkeyed call would fail
//! `OutcomeUnknown` while its next round is still in flight, a keyed one would be re-sent).
//!
//! Here the first round's stream ends only once the second round has reached the server, and
//! the second round is never answered: the client waits for it until the call's deadline
//! (`Timeout`).

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::response::Response;
use futures::StreamExt;
use mcp_resume::{Client, EraCache, ErrorKind, ToolCall};
use serde_json::{json, Value};
use support::*;
use tokio::sync::Notify;

const MODERN: &str = "2026-07-28";

/// The `input_required` result, then the end of the stream once `end` is notified.
fn input_required_then_end(req: &Recorded, end: Arc<Notify>) -> Response {
    let result = json!({"jsonrpc": "2.0", "id": req.rpc_id(), "result": {
        "resultType": "input_required",
        "inputRequests": {"ok": {"method": "elicitation/create",
            "params": {"message": "proceed?", "requestedSchema": {"type": "object"}}}},
        "requestState": "s-1"}});
    let first: Result<Bytes, std::io::Error> = Ok(Bytes::from(format!("data: {result}\n\n")));
    let ending = futures::stream::once(async move {
        end.notified().await;
    })
    .filter_map(|()| async { None::<Result<Bytes, std::io::Error>> });
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from_stream(
            futures::stream::once(async move { first }).chain(ending),
        ))
        .unwrap()
}

#[tokio::test]
async fn an_earlier_rounds_stream_ending_does_not_end_the_call() {
    let end = Arc::new(Notify::new());
    let server_end = end.clone();
    let server = TestServer::start(move |req: &Recorded| {
        let method = req.rpc_method().unwrap_or_default().to_owned();
        let params: Value = req.params();
        match method.as_str() {
            "server/discover" => json_result(
                req,
                json!({"resultType": "complete", "supportedVersions": [MODERN],
                       "capabilities": {"tools": {}}}),
            ),
            "tools/call" if params.get("inputResponses").is_none() => {
                input_required_then_end(req, server_end.clone())
            }
            "tools/call" => {
                // The second round reached the server: now the first round's stream ends.
                server_end.notify_one();
                hang()
            }
            _ => status(404),
        }
    })
    .await;
    let client = Client::builder(&server.url)
        .era_cache(EraCache::new())
        .open_listen_stream(false)
        .on_server_request(|_| async { Ok(json!({"action": "accept", "content": {}})) })
        .build()
        .unwrap();
    let call = ToolCall::new("confirm", json!({})).timeout(Duration::from_millis(500));
    let err = guarded(client.call_tool(call)).await.unwrap_err();
    assert_eq!(
        err.kind(),
        ErrorKind::Timeout,
        "the second round was still in flight: {err}"
    );
}
