//! An inner server's SSE event with an empty `id:` (it resets the client's cursor: no resume
//! point there), through the layer: what the client reads, and what a resume does.

use std::convert::Infallible;
use std::future::Ready;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use mcp_resume_server::{MemoryStore, ResumeSafetyLayer};
use serde_json::json;
use tower_layer::Layer;
use tower_service::Service;

const NOTE: &str = r#"{"jsonrpc":"2.0","method":"notifications/message","params":{}}"#;
const ANSWER: &str = r#"{"jsonrpc":"2.0","id":1,"result":{}}"#;

/// An inner server opening session `s1` on `initialize` (JSON), answering a POST with the
/// events `0`, one with an empty id, then `1` (the answer), and a GET with the event `2`;
/// it keeps the `Last-Event-ID` of every GET it sees.
#[derive(Clone, Default)]
struct Resetting {
    resumed_from: Arc<Mutex<Vec<String>>>,
}

impl<B> Service<Request<B>> for Resetting {
    type Response = Response<Full<Bytes>>;
    type Error = Infallible;
    type Future = Ready<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let sse = |body: String| {
            Response::builder()
                .header("content-type", "text/event-stream")
                .body(Full::new(Bytes::from(body)))
        };
        let response = if !req.headers().contains_key("mcp-session-id") {
            let result = json!({"jsonrpc": "2.0", "id": 0,
                "result": {"protocolVersion": "2025-11-25", "capabilities": {}}});
            Response::builder()
                .header("content-type", "application/json")
                .header("mcp-session-id", "s1")
                .body(Full::new(Bytes::from(result.to_string())))
        } else if req.method() == Method::GET {
            let last = req.headers().get("last-event-id");
            let last = last.map(|v| v.to_str().unwrap().to_owned());
            self.resumed_from
                .lock()
                .unwrap()
                .push(last.unwrap_or_default());
            sse(format!("id: 2\ndata: {NOTE}\n\n"))
        } else {
            sse(format!(
                "id: 0\ndata: \n\nid:\ndata: {NOTE}\n\nid: 1\ndata: {ANSWER}\n\n"
            ))
        };
        std::future::ready(Ok(response.unwrap()))
    }
}

fn request(
    method: Method,
    body: Option<serde_json::Value>,
    last: Option<&str>,
) -> Request<Full<Bytes>> {
    let mut req = Request::builder()
        .method(method)
        .uri("/mcp")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream");
    if body.as_ref().is_none_or(|b| b["method"] != "initialize") {
        req = req.header("mcp-session-id", "s1");
    }
    if let Some(last) = last {
        req = req.header("last-event-id", last);
    }
    let body = body.map_or_else(Bytes::new, |b| Bytes::from(b.to_string()));
    req.body(Full::new(body)).unwrap()
}

async fn exchange<S>(guarded: &mut S, req: Request<Full<Bytes>>) -> (StatusCode, String)
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
    let status = response.status();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8(body.to_vec()).unwrap())
}

/// The client reads the reset as the inner server wrote it, and the events around it
/// numbered `<stream>-1`, `<stream>-2`; a resume from `<stream>-2` reaches the inner server
/// with its own `1` (never an empty `Last-Event-ID`), its event numbered `<stream>-3`; a
/// resume from `<stream>-1`, before the reset, is refused `event_gap` and never reaches it.
#[tokio::test]
async fn an_empty_inner_id_passes_empty_and_a_resume_never_forwards_one() {
    let inner = Resetting::default();
    let mut guarded = ResumeSafetyLayer::new(MemoryStore::default()).layer(inner.clone());
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}}});
    exchange(&mut guarded, request(Method::POST, Some(init), None)).await;
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "echo", "arguments": {}}});
    let (_, body) = exchange(&mut guarded, request(Method::POST, Some(call), None)).await;
    let stream = body
        .strip_prefix("id: ")
        .and_then(|rest| rest.split_once("-1\n"))
        .map(|(stream, _)| stream.to_owned())
        .unwrap_or_else(|| panic!("{body:?}"));
    assert_eq!(
        body,
        format!(
            "id: {stream}-1\ndata: \n\nid:\ndata: {NOTE}\n\nid: {stream}-2\ndata: {ANSWER}\n\n"
        )
    );
    let after = format!("{stream}-2");
    let (status, body) = exchange(&mut guarded, request(Method::GET, None, Some(&after))).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, format!("id: {stream}-3\ndata: {NOTE}\n\n"));
    let before = format!("{stream}-1");
    let (status, body) = exchange(&mut guarded, request(Method::GET, None, Some(&before))).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(body.contains("event_gap"), "{body}");
    assert_eq!(*inner.resumed_from.lock().unwrap(), ["1"]);
}
