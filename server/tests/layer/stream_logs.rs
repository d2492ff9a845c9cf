//! What the guard keeps of a numbered stream once it ended: its log is kept for resumes long
//! after, so what a client writes in its requests must not set the log's size.

use std::convert::Infallible;
use std::future::Ready;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use mcp_resume_server::{MemoryStore, ResumeSafetyLayer};
use serde_json::json;
use tower_layer::Layer;
use tower_service::Service;

use crate::held::{held_since, reset_peak};

/// An inner server opening session `s1` on `initialize` (JSON) and answering anything else
/// with one SSE event.
#[derive(Clone)]
struct Answering;

impl<B> Service<Request<B>> for Answering {
    type Response = Response<Full<Bytes>>;
    type Error = Infallible;
    type Future = Ready<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let init = !req.headers().contains_key("mcp-session-id");
        let response = if init {
            let result = json!({"jsonrpc": "2.0", "id": 0,
                "result": {"protocolVersion": "2025-11-25", "capabilities": {}}});
            Response::builder()
                .header("content-type", "application/json")
                .header("mcp-session-id", "s1")
                .body(Full::new(Bytes::from(result.to_string())))
        } else {
            let event = "id: 1\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n";
            Response::builder()
                .header("content-type", "text/event-stream")
                .body(Full::new(Bytes::from_static(event.as_bytes())))
        };
        std::future::ready(Ok(response.unwrap()))
    }
}

fn post(session: bool, body: &serde_json::Value) -> Request<Full<Bytes>> {
    let mut req = Request::post("/mcp")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream");
    if session {
        req = req.header("mcp-session-id", "s1");
    }
    req.body(Full::new(Bytes::from(body.to_string()))).unwrap()
}

async fn exchange<S>(guarded: &mut S, req: Request<Full<Bytes>>) -> Bytes
where
    S: Service<
        Request<Full<Bytes>>,
        Response = Response<mcp_resume_server::GuardedBody<Full<Bytes>>>,
    >,
    S::Error: std::fmt::Debug,
{
    futures::future::poll_fn(|cx| guarded.poll_ready(cx))
        .await
        .unwrap();
    let response = guarded.call(req).await.unwrap();
    response.into_body().collect().await.unwrap().to_bytes()
}

/// Requests whose ids are 256 KiB strings, one alone and a batch of many: once their
/// streams ended the guard holds little of them (it kept every id in each stream's log, for
/// as long as the log was kept: 10,000 streams of up to 4 MiB).
#[tokio::test]
async fn a_streams_log_keeps_neither_huge_request_ids_nor_huge_batches() {
    let mut guarded = ResumeSafetyLayer::new(MemoryStore::default()).layer(Answering);
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}}});
    exchange(&mut guarded, post(false, &init)).await;
    let start = reset_peak();
    for n in 0..16 {
        let id = format!("{n}{}", "x".repeat(256 << 10));
        let ping = json!({"jsonrpc": "2.0", "id": id, "method": "ping"});
        exchange(&mut guarded, post(true, &ping)).await;
    }
    let batch = (0..20_000)
        .map(|n| json!({"jsonrpc": "2.0", "id": n, "method": "ping"}))
        .collect();
    exchange(&mut guarded, post(true, &serde_json::Value::Array(batch))).await;
    let held = held_since(start);
    assert!(held < 1 << 20, "held {} KiB", held >> 10);
}

/// Batch POSTs whose ids are each within any one bound (1,020 bytes, 64 or 1,000 of them):
/// what each stream's log keeps of them once it ended stays within its byte budget (it kept
/// every id: 1 MiB a log, 11 GB over the 10,000 logs a guard keeps).
#[tokio::test]
async fn a_streams_log_keeps_a_bounded_sum_of_request_ids() {
    let mut guarded = ResumeSafetyLayer::new(MemoryStore::default()).layer(Answering);
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}}});
    exchange(&mut guarded, post(false, &init)).await;
    let posts = 32;
    let mut bodies = (0..posts).map(|n| {
        let size = if n % 2 == 0 { 64 } else { 1_000 };
        let batch = (0..size)
            .map(|i| {
                let id = format!("{n}-{i}-{}", "x".repeat(1_020));
                json!({"jsonrpc": "2.0", "id": &id[..1_020], "method": "ping"})
            })
            .collect();
        post(true, &serde_json::Value::Array(batch))
    });
    // The first opens the ledger's map of streams, the same whatever it keeps.
    exchange(&mut guarded, bodies.next().unwrap()).await;
    let start = reset_peak();
    for req in bodies {
        exchange(&mut guarded, req).await;
    }
    let held = held_since(start);
    let per_log = held / (posts - 1);
    assert!(per_log < 8 << 10, "held {per_log} bytes a log");
}
