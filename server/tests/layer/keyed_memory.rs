//! What a keyed call whose client left holds while the guard reads its answer on: the inner
//! stream is drained (the answer must be stored), and what it carries before the answer is
//! not kept for a client that will never read it.

use std::convert::Infallible;
use std::future::Ready;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use http_body::Frame;
use http_body_util::{BodyExt, Full, StreamBody};
use mcp_resume_server::{MemoryStore, ResumeSafetyLayer};
use serde_json::json;
use tower_layer::Layer;
use tower_service::Service;

use crate::held::{peak_since, reset_peak};

/// Progress events of 4 KiB, this many, before a keyed call's answer.
const EVENTS: usize = 4_000;

type Chunks =
    futures::stream::Iter<Box<dyn Iterator<Item = Result<Frame<Bytes>, Infallible>> + Send>>;

/// An inner server answering every call with SSE: a stream of progress notifications (made
/// as they are read, one shared buffer: the inner server holds nothing), then the answer
/// (to id 1).
#[derive(Clone)]
struct Chatty;

impl<B> Service<Request<B>> for Chatty {
    type Response = Response<StreamBody<Chunks>>;
    type Error = Infallible;
    type Future = Ready<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Request<B>) -> Self::Future {
        let note = json!({"jsonrpc": "2.0", "method": "notifications/message",
            "params": {"level": "info", "data": "x".repeat(4096)}});
        let note = Bytes::from(format!("data: {note}\n\n"));
        let answer = json!({"jsonrpc": "2.0", "id": 1,
            "result": {"content": [{"type": "text", "text": "done"}]}});
        let answer = Bytes::from(format!("data: {answer}\n\n"));
        let frames: Box<dyn Iterator<Item = _> + Send> = Box::new(
            std::iter::repeat_n(note, EVENTS)
                .chain(std::iter::once(answer))
                .map(|bytes| Ok(Frame::data(bytes))),
        );
        let response = Response::builder()
            .header("content-type", "text/event-stream")
            .body(StreamBody::new(futures::stream::iter(frames)))
            .unwrap();
        std::future::ready(Ok(response))
    }
}

fn keyed(id: i64) -> Request<Full<Bytes>> {
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
        "name": "bump", "arguments": {},
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}});
    Request::post("/mcp")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("idempotency-key", "k-chatty")
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap()
}

/// The client takes the head and leaves; the guard drains the inner stream to store the
/// answer, holding no more than a few events of it at a time (it held all 16 MiB before).
#[tokio::test]
async fn a_keyed_call_whose_client_left_holds_little_while_it_is_drained() {
    let mut guarded = ResumeSafetyLayer::new(MemoryStore::default()).layer(Chatty);
    let start = reset_peak();
    futures::future::poll_fn(|cx| Service::<Request<Full<Bytes>>>::poll_ready(&mut guarded, cx))
        .await
        .unwrap();
    let response = guarded.call(keyed(1)).await.unwrap();
    drop(response);
    // The re-send gets the stored answer once the drain is over.
    let mut tries = 0;
    let answer = loop {
        tries += 1;
        assert!(tries < 100_000, "the answer was never stored");
        futures::future::poll_fn(|cx| {
            Service::<Request<Full<Bytes>>>::poll_ready(&mut guarded, cx)
        })
        .await
        .unwrap();
        let response = guarded.call(keyed(2)).await.unwrap();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        let text = String::from_utf8_lossy(&body).into_owned();
        if !text.contains("IDEMPOTENCY_KEY_IN_USE") {
            break text;
        }
        tokio::task::yield_now().await;
    };
    assert!(answer.contains("done"), "{answer}");
    let peak = peak_since(start);
    assert!(peak < 4 << 20, "held {} KiB at most", peak >> 10);
}
